//! Directional derivatives at one point in Taylor mode: [`taylor()`] (all
//! orders to `N` along one direction) and [`d3`] (the third derivative
//! along three, by polarisation).

use super::{
    cast_array, check_nonempty, direction_leaves, is_f64, on_leaves_mut, primals, scalar,
    taylor_or_host, to_array, trace_at, univariate_program, Code, IntoTraced, PointShape,
};
use std::ops::Add;

use generic_array::{ArrayLength, GenericArray};
use typenum::{Add1, IsLessOrEqual, True, Unsigned, B1};

use crate::differentiable::Point;
use crate::error::{check_len, Result};
use crate::functor::taylor::scale_by_factorials;
use crate::functor::{MaxTaylorOrder, TaylorProgram};
use crate::program::ir::STRUCTURAL_ZERO;
use crate::program::trace::Tracer;
use crate::program::Program;
use crate::real::Real;

/// The directional derivatives `dᵏ/dtᵏ f(x + t v)` at `t = 0`, for
/// `k = 0 … N`, of a scalar function of several variables, in Taylor mode:
/// one jet of degree `N` through the traced program, `O(N²)` operations
/// per primitive. Entry `k` is `Dᵏf(x)[v, …, v]`: entry 1 is `∇f · v`,
/// entry 2 is `vᵀ H v`.
///
/// Shapes: `x` is any [`Point`] with `n ≥ 1` leaves (a slice, or a struct
/// deriving [`Differentiable`](trait@crate::Differentiable), as for [`gradient`](fn@crate::gradient)) and `v` a direction
/// with the same leaves; the result has `N + 1` entries.
///
/// # Errors
///
/// [`Error::EmptyInput`](crate::Error::EmptyInput) for a point without leaves;
/// [`Error::LengthMismatch`](crate::Error::LengthMismatch) unless `v` has as many leaves as `x`;
/// [`Error::StructureMismatch`](crate::Error::StructureMismatch) if a structured `v` has other fields than
/// `x`; [`Error::ForeignTracer`](crate::Error::ForeignTracer) if `f` used a
/// tracer from a finished trace; [`Error::CapturedOutsideTrace`](crate::Error::CapturedOutsideTrace) if it
/// closes over tracers. High orders lose digits as [`derivative`](fn@crate::derivative) says;
/// [`TaylorProgram::eval_with_error`] gives the entries with estimates of
/// their rounding errors.
///
/// Loops: at `f64` points, a function with [`crate::fold`] or
/// [`crate::while_loop`] is traced on the array trace (each loop one
/// instruction that carries the jets), as [`gradient`](fn@crate::gradient) says; `f` is then
/// called two or three times.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{taylor, Real};
/// use optic_ad::typenum::U4;
///
/// // f(x, y) = eˣ sin y along (1, 2): f(x + t, y + 2t) = eˣ⁺ᵗ sin(y + 2t).
/// let d = taylor::<U4, _, _>(|x| x[0].exp() * x[1].sin(), &[0.0, 0.0], &[1.0, 2.0]).unwrap();
/// // dᵏ/dtᵏ eᵗ sin 2t at 0 = Im (1 + 2i)ᵏ: 0, 2, 4, −2, −24.
/// assert_relative_eq!(d[1], 2.0, max_relative = 1e-14);
/// assert_relative_eq!(d[2], 4.0, max_relative = 1e-14);
/// assert_relative_eq!(d[3], -2.0, max_relative = 1e-14);
/// assert_relative_eq!(d[4], -24.0, max_relative = 1e-14);
/// ```
pub fn taylor<N, P, R>(
    f: impl FnMut(&P::Arg<Tracer>) -> R,
    x: &P,
    v: &(impl Point<Scalar = P::Scalar> + ?Sized),
) -> Result<GenericArray<P::Scalar, Add1<N>>>
where
    N: Unsigned + Add<B1> + IsLessOrEqual<MaxTaylorOrder, Output = True>,
    Add1<N>: ArrayLength,
    P: Point + ?Sized,
    R: IntoTraced<Tracer>,
{
    let leaves = x.leaves();
    check_nonempty("taylor", leaves.len())?;
    let v = direction_leaves("direction v", x, &mut PointShape::new(leaves.len()), v)?;
    taylor_flat::<N, _>(&mut on_leaves_mut(x, f), &leaves, &v)
}

/// [`taylor`] on the flat leaves of the point and the direction (`f`
/// behind a reference, so that this body is compiled once per order and
/// scalar type, not once per closure).
fn taylor_flat<N, T>(
    f: &mut dyn FnMut(&[Tracer]) -> Result<Tracer>,
    x: &[T],
    v: &[T],
) -> Result<GenericArray<T, Add1<N>>>
where
    N: Unsigned + Add<B1> + IsLessOrEqual<MaxTaylorOrder, Output = True>,
    Add1<N>: ArrayLength,
    T: Real,
{
    if is_f64::<T>() {
        let (x, v) = (primals(x), primals(v));
        let mut t = match taylor_or_host(f, &x, N::to_usize())? {
            Code::Scalar(t) => t,
            Code::Hosted(mut d) => {
                // Code with loops: the jets carried through the loops.
                let mut out = GenericArray::<f64, Add1<N>>::default();
                d.eval(&x, &v, &mut out)?;
                return Ok(cast_array(&out));
            }
        };
        let mut out = GenericArray::<f64, Add1<N>>::default();
        directional_jet(&mut t, &x, &v, &mut Vec::new(), &mut out)?;
        scale_by_factorials(&mut out);
        return Ok(cast_array(&out));
    }
    let (q, inputs) = directional_program(f, x, v, N::to_usize())?;
    to_array(q.eval(&inputs)?)
}

/// For the non-`f64` paths of [`taylor()`], [`d3`] and
/// [`Directional::eval_at`](super::Directional::eval_at): traces
/// `(t, x, v) ↦ f(x + t v)` and returns [`univariate_program`] of it
/// (outputs `dᵏ/dtᵏ f(x + t v)`, `k = 0 … K`) with the evaluation inputs
/// `[t, x, v, captures]`, `t = −0.0` (`v` may be replaced, at positions
/// `1 + n … 1 + 2n`).
pub(super) fn directional_program<T: Real, R: IntoTraced<Tracer>>(
    f: impl FnOnce(&[Tracer]) -> R,
    x: &[T],
    v: &[T],
    order: usize,
) -> Result<(Program, Vec<T>)> {
    let n = x.len();
    let mut point = Vec::with_capacity(1 + 2 * n);
    // t = −0.0, the structural zero: on tracers `t v` folds away and
    // `x + t v` is `x` exactly, sign of zero included.
    point.push(T::cst(STRUCTURAL_ZERO));
    point.extend_from_slice(x);
    point.extend_from_slice(v);
    let line = |z: &[Tracer]| {
        let (t, xv) = (z[0], &z[1..]);
        let y: Vec<Tracer> = (0..n).map(|i| xv[i] + t * xv[n + i]).collect();
        f(&y)
    };
    let (p, inputs) = trace_at(scalar(line), &point)?;
    Ok((univariate_program(&p, order)?, inputs))
}

/// The jet of `f(x + t v)` (normalised coefficients) into `out`, with
/// `inputs` as the buffer of input jets.
pub(super) fn directional_jet(
    t: &mut TaylorProgram,
    x: &[f64],
    v: &[f64],
    inputs: &mut Vec<f64>,
    out: &mut [f64],
) -> Result<()> {
    check_len("direction v", x.len(), v.len())?;
    check_len("point x", t.program().n_inputs(), x.len())?;
    let w = t.degree() + 1;
    inputs.clear();
    inputs.resize(x.len() * w, 0.0);
    for (i, (&xi, &vi)) in x.iter().zip(v).enumerate() {
        inputs[i * w] = xi;
        if w > 1 {
            inputs[i * w + 1] = vi;
        }
    }
    t.eval(inputs, out)
}

/// The third-derivative tensor contracted with three directions,
/// `D³f(x)[u, v, w] = Σᵢⱼₖ ∂³f/∂xᵢ∂xⱼ∂xₖ uᵢ vⱼ wₖ`, from four univariate
/// jets of degree 3 by interpolation (Griewank, Utke & Walther,
/// "Evaluating higher derivative tensors by forward propagation of
/// univariate Taylor series", Math. Comp. 69 (2000), §3): with
/// `g(d) = D³f(x)[d, d, d]`, the polarisation identity of a symmetric
/// trilinear form gives
///
/// ```text
/// 24 D³f[u, v, w] = g(u + v + w) − g(u + v − w) − g(u − v + w) + g(u − v − w).
/// ```
///
/// Cost: one trace and four degree-3 jets, each about ten times the
/// operations of `f` for products, so about 40 evaluations of `f` whatever
/// `n` is; the full tensor would need `n(n + 1)(n + 2)/6` jets. The
/// differences cancel where the directions differ greatly in size: scale
/// them to comparable norms for full accuracy.
///
/// Shapes: `x`, `u`, `v` and `w` have the same length `n ≥ 1`.
///
/// Loops: at `f64` points, a function with [`crate::fold`] or
/// [`crate::while_loop`] is traced on the array trace, each loop one
/// instruction that carries the jets, as [`gradient`](fn@crate::gradient) says; `f` is then
/// called two or three times.
///
/// # Errors
///
/// As [`taylor()`]: [`Error::EmptyInput`](crate::Error::EmptyInput), [`Error::LengthMismatch`](crate::Error::LengthMismatch),
/// [`Error::ForeignTracer`](crate::Error::ForeignTracer), [`Error::CapturedOutsideTrace`](crate::Error::CapturedOutsideTrace).
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{d3, Real};
///
/// // f = x y z: D³f[u, v, w] sums uᵢvⱼwₖ over the permutations of (x, y, z).
/// let f = |x: &[optic_ad::Tracer]| x[0] * x[1] * x[2];
/// let (u, v, w) = ([1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]);
/// assert_relative_eq!(d3(f, &[0.3, 0.4, 0.5], &u, &v, &w).unwrap(), 1.0, max_relative = 1e-14);
/// ```
pub fn d3<P, Qu, Qv, Qw, F, R>(f: F, x: &P, u: &Qu, v: &Qv, w: &Qw) -> Result<P::Scalar>
where
    P: Point + ?Sized,
    Qu: Point<Scalar = P::Scalar> + ?Sized,
    Qv: Point<Scalar = P::Scalar> + ?Sized,
    Qw: Point<Scalar = P::Scalar> + ?Sized,
    F: FnMut(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Tracer>,
{
    let leaves = x.leaves();
    check_nonempty("d3", leaves.len())?;
    let mut shape = PointShape::new(leaves.len());
    let (u, v, w) = (
        direction_leaves("direction u", x, &mut shape, u)?,
        direction_leaves("direction v", x, &mut shape, v)?,
        direction_leaves("direction w", x, &mut shape, w)?,
    );
    d3_flat(&mut on_leaves_mut(x, f), &leaves, &u, &v, &w)
}

fn d3_flat<T: Real>(
    f: &mut dyn FnMut(&[Tracer]) -> Result<Tracer>,
    x: &[T],
    u: &[T],
    v: &[T],
    w: &[T],
) -> Result<T> {
    check_nonempty("d3", x.len())?;
    if !is_f64::<T>() {
        let n = x.len();
        let (q, mut inputs) = directional_program(f, x, u, 3)?;
        let mut total = T::cst(0.0);
        for (sv, sw, sign) in POLARISATION {
            for i in 0..n {
                inputs[1 + n + i] = u[i] + v[i] * sv + w[i] * sw;
            }
            // g(d) = D³f[d, d, d], the last output.
            total += q.eval(&inputs)?[3] * sign;
        }
        return Ok(total / 24.0 + 0.0);
    }
    let (x, u, v, w) = (primals(x), primals(u), primals(v), primals(w));
    let n = x.len();
    let mut t = match taylor_or_host(f, &x, 3)? {
        Code::Scalar(t) => t,
        Code::Hosted(mut d) => {
            // Code with loops: the jets carried through the loops.
            let (mut dir, mut out, mut total) = (vec![0.0; n], [0.0; 4], 0.0);
            for (sv, sw, sign) in POLARISATION {
                for (i, d) in dir.iter_mut().enumerate() {
                    *d = u[i] + sv * v[i] + sw * w[i];
                }
                // g(d) = D³f[d, d, d], the third derivative.
                d.eval(&x, &dir, &mut out)?;
                total += sign * out[3];
            }
            return Ok(T::cst(total / 24.0 + 0.0));
        }
    };
    let (mut inputs, mut dir) = (Vec::new(), vec![0.0; x.len()]);
    let mut total = 0.0;
    for (sv, sw, sign) in POLARISATION {
        for (i, d) in dir.iter_mut().enumerate() {
            *d = u[i] + sv * v[i] + sw * w[i];
        }
        let mut out = [0.0; 4];
        directional_jet(&mut t, &x, &dir, &mut inputs, &mut out)?;
        // g(d) = 3! · coefficient 3.
        total += sign * 6.0 * out[3];
    }
    Ok(T::cst(total / 24.0 + 0.0))
}

/// The terms `(±1, ±1, sign)` of the polarisation identity in [`d3`]:
/// `g(u + s_v v + s_w w)` enters with `sign`.
const POLARISATION: [(f64, f64, f64); 4] = [
    (1.0, 1.0, 1.0),
    (1.0, -1.0, -1.0),
    (-1.0, 1.0, -1.0),
    (-1.0, -1.0, 1.0),
];
