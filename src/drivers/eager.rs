//! The one-call drivers at one point: [`gradient`], [`value_and_gradient`],
//! [`vjp`], [`jvp`], [`jacobian`], [`hvp`] and [`hessian`]. Each traces `f`,
//! builds its derived program and evaluates it once.

use super::{
    check_nonempty, direction_leaves, gradient_program, hvp_program, hvp_staged, in_shape, is_f64,
    on_leaves_mut, primals, pushforward_program, scalar, trace_builder_at, trace_or_host,
    trace_or_host_at, Code, HvpSplit, IntoTraced, PointShape,
};

use crate::array::{GradientCore, HvpCore, PullbackCore};
use crate::backend::LANES;
use crate::differentiable::{Point, Tangent};
use crate::error::{check_len, Result};
use crate::functor::forward;
use crate::functor::nested::nest;
use crate::program::ir::STRUCTURAL_ZERO;
use crate::program::trace::Tracer;
use crate::program::StagedWorkspace;
use crate::program::Workspace;
use crate::real::Real;

/// Gradient `∇f(x)` of a scalar function.
///
/// Shapes: `x` has `n ≥ 1` entries; the result has `n`. `T` is `f64`, or a
/// [`Tracer`] when differentiating inside traced code (nested AD: values of
/// the enclosing trace that `f` closes over are captured, never confused
/// with `x`'s perturbation).
///
/// Loops: at `f64` points, a function with [`crate::fold`] or
/// [`crate::while_loop`] is traced on the array trace, each loop one
/// instruction, as [`Gradient`](crate::Gradient) does; `f` is then called two or three
/// times (once for code without loops). At tracer points loops unroll.
///
/// # Errors
///
/// [`Error::EmptyInput`](crate::Error::EmptyInput) for an empty `x`; [`Error::ForeignTracer`](crate::Error::ForeignTracer) if `f`
/// used a tracer from a finished trace; [`Error::CapturedOutsideTrace`](crate::Error::CapturedOutsideTrace) if
/// `f` closes over tracers but `T` is not [`Tracer`].
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{gradient, Real};
///
/// fn f<T: Real>(x: &[T]) -> T {
///     x[0] * x[1] + x[1].exp()
/// }
/// let g = gradient(f, &[2.0, 0.5]).unwrap();
/// assert_relative_eq!(g[0], 0.5);
/// assert_relative_eq!(g[1], 2.0 + 0.5_f64.exp());
/// ```
pub fn gradient<P, F, R>(f: F, x: &P) -> Result<Tangent<P>>
where
    P: Point + ?Sized,
    F: FnMut(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Tracer>,
{
    let g = value_and_gradient_of("gradient", &mut on_leaves_mut(x, f), &x.leaves())?.1;
    in_shape(x, g)
}

/// The value and the gradient, `(f(x), ∇f(x))`, from one trace and one
/// evaluation of the gradient program (the value is its first output, so
/// it costs nothing extra).
///
/// Shapes, types and nesting as [`gradient`]: `x` has `n ≥ 1` entries; the
/// gradient has `n`. `f` is called once; for code with loops at `f64`
/// points two or three times (see [`gradient`]).
///
/// # Errors
///
/// As [`gradient`].
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{value_and_gradient, Real};
///
/// let mut calls = 0;
/// let (y, g) = value_and_gradient(
///     |x| {
///         calls += 1; // an `FnMut` closure is fine
///         x[0] * x[1] + x[1].exp()
///     },
///     &[2.0, 0.5],
/// )
/// .unwrap();
/// assert_eq!(calls, 1);
/// assert_relative_eq!(y, 1.0 + 0.5_f64.exp());
/// assert_relative_eq!(g[1], 2.0 + 0.5_f64.exp());
/// ```
pub fn value_and_gradient<P, F, R>(f: F, x: &P) -> Result<(P::Scalar, Tangent<P>)>
where
    P: Point + ?Sized,
    F: FnMut(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Tracer>,
{
    let (y, g) =
        value_and_gradient_of("value_and_gradient", &mut on_leaves_mut(x, f), &x.leaves())?;
    Ok((y, in_shape(x, g)?))
}

/// [`value_and_gradient`], with the driver's name for its errors.
fn value_and_gradient_of<T: Real>(
    what: &'static str,
    f: &mut dyn FnMut(&[Tracer]) -> Result<Tracer>,
    x: &[T],
) -> Result<(T, Vec<T>)> {
    check_nonempty(what, x.len())?;
    let n = x.len();
    if is_f64::<T>() {
        let xf = primals(x);
        let t = match trace_or_host(f, &xf, |p| GradientCore::new(p, n))? {
            Code::Scalar(t) => t,
            Code::Hosted(mut core) => {
                let mut grad = vec![0.0; n];
                let y = core.run(&xf, &mut grad)?;
                return Ok((T::cst(y), grad.into_iter().map(T::cst).collect()));
            }
        };
        let mut out = gradient_program(t, n)?.eval(x)?;
        let grad = out.split_off(1);
        return Ok((out[0], grad));
    }
    let (t, inputs) = trace_builder_at(scalar(f), x)?;
    let g = gradient_program(t, n)?;
    let mut out = g.eval(&inputs)?;
    let grad = out.split_off(1);
    Ok((out[0], grad))
}

/// Vector-Jacobian product: `(f(x), J_f(x)ᵀ ȳ)` for `f : ℝⁿ → ℝᵐ`: the
/// right of ∂⃖f applied to `ȳ` (K. Fischer, "∂P.jl terminology and notation
/// guide", §VI, eq. 25). For several `ȳ` at one point, [`pullback`](fn@crate::pullback)
/// traces once and returns the pullback to apply to each.
///
/// Shapes: `x` has `n ≥ 1` entries, `ybar` has `m` (the number of values
/// `f` returns); the result is `(y, x̄)` with `m` and `n` entries.
///
/// Loops: at `f64` points, a function with [`crate::fold`] or
/// [`crate::while_loop`] is traced on the array trace, each loop one
/// instruction, as [`gradient`] does (its results become one vector
/// there); `f` is then called two or three times (once for code without
/// loops). At other scalars loops unroll.
///
/// # Errors
///
/// [`Error::EmptyInput`](crate::Error::EmptyInput) for an empty `x`; [`Error::LengthMismatch`](crate::Error::LengthMismatch) if
/// `ybar` does not have one entry per output of `f`; as [`gradient`]
/// otherwise.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{vjp, Real};
///
/// fn f<T: Real>(x: &[T]) -> Vec<T> {
///     vec![x[0] * x[1], x[0].sin()]
/// }
/// let (y, xbar) = vjp(f, &[2.0, 3.0], &[1.0, 10.0]).unwrap();
/// assert_relative_eq!(y[0], 6.0);
/// assert_relative_eq!(xbar[0], 3.0 + 10.0 * 2.0_f64.cos());
/// assert_relative_eq!(xbar[1], 2.0);
/// ```
pub fn vjp<P, F, R>(f: F, point: &P, ybar: &[P::Scalar]) -> Result<(Vec<P::Scalar>, Tangent<P>)>
where
    P: Point + ?Sized,
    F: FnMut(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Vec<Tracer>>,
{
    let (y, xbar) = vjp_flat(&mut on_leaves_mut(point, f), &point.leaves(), ybar)?;
    Ok((y, in_shape(point, xbar)?))
}

fn vjp_flat<T: Real>(
    f: &mut dyn FnMut(&[Tracer]) -> Result<Vec<Tracer>>,
    x: &[T],
    ybar: &[T],
) -> Result<(Vec<T>, Vec<T>)> {
    check_nonempty("vjp", x.len())?;
    let (p, mut inputs) = match trace_or_host_at(f, x, |p| PullbackCore::new(p, &primals(x)))? {
        Code::Scalar(traced) => traced,
        Code::Hosted(mut core) => {
            // The pullback's one application.
            check_len("vjp: output cotangent", core.value().len(), ybar.len())?;
            let mut xbar = vec![0.0; x.len()];
            core.apply(&primals(ybar), &mut xbar)?;
            let cast = |v: &[f64]| v.iter().map(|&c| T::cst(c)).collect();
            return Ok((cast(core.value()), cast(&xbar)));
        }
    };
    let m = p.n_outputs();
    check_len("vjp: output cotangent", m, ybar.len())?;
    let total = p.n_inputs();
    let joint = nest(&p, 1)?.positive_zero_outputs(); // [x, ȳ] -> [y, x̄]
    inputs.extend_from_slice(ybar);
    let mut out = joint.eval(&inputs)?;
    let mut xbar = out.split_off(m);
    xbar.truncate(x.len());
    debug_assert_eq!(out.len() + total - x.len() + xbar.len(), m + total);
    Ok((out, xbar))
}

/// Jacobian-vector product: `(f(x), J_f(x) v)` for `f : ℝⁿ → ℝᵐ`, the
/// pushforward ∂⃗f with tangent `ẋ = v` ([`crate::functor::forward`]).
///
/// The same product is also the second closure of the order-2 bundle
/// (see the book's chapter "Higher order and the nested-closure encoding")
/// with `d₁ = 0`, `d₂ = v`: `r₁ = J_fᵀ d₁` is linear in `d₁`, so its
/// pullback with respect to `d₁` is `J_f` (transposition of a linear map:
/// T. Ellis, S. Peyton Jones and A. Fitzgibbon, "Working notes on automatic
/// differentiation"). `tests/drivers.rs` checks that the two agree.
///
/// Shapes: `x` and `v` have `n ≥ 1` entries; the result is `(y, J v)` with
/// `m` entries each.
///
/// Loops: at `f64` points, a function with [`crate::fold`] or
/// [`crate::while_loop`] is traced on the array trace, each loop one
/// instruction, as [`gradient`] does (its results become one vector
/// there); `f` is then called two or three times (once for code without
/// loops). At other scalars loops unroll.
///
/// # Errors
///
/// [`Error::EmptyInput`](crate::Error::EmptyInput) for an empty `x`; [`Error::LengthMismatch`](crate::Error::LengthMismatch) if
/// `v.len() != x.len()`; as [`gradient`] otherwise.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{jvp, Real};
///
/// fn f<T: Real>(x: &[T]) -> Vec<T> {
///     vec![x[0] * x[1], x[0].sin()]
/// }
/// // J = [[x₁, x₀], [cos x₀, 0]].
/// let (y, jv) = jvp(f, &[2.0, 3.0], &[1.0, 10.0]).unwrap();
/// assert_relative_eq!(y[1], 2.0_f64.sin());
/// assert_relative_eq!(jv[0], 3.0 + 20.0);
/// assert_relative_eq!(jv[1], 2.0_f64.cos());
/// ```
#[allow(clippy::type_complexity)] // a pair of vectors of the point's scalar
pub fn jvp<P, Q, F, R>(f: F, point: &P, v: &Q) -> Result<(Vec<P::Scalar>, Vec<P::Scalar>)>
where
    P: Point + ?Sized,
    Q: Point<Scalar = P::Scalar> + ?Sized,
    F: FnMut(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Vec<Tracer>>,
{
    let x = point.leaves();
    check_nonempty("jvp", x.len())?;
    let v = direction_leaves("jvp: direction", point, &mut PointShape::new(x.len()), v)?;
    jvp_flat(&mut on_leaves_mut(point, f), &x, &v)
}

/// [`jvp`] on the flat leaves of the point and the direction (`f` behind
/// a reference, so that this body is compiled once per scalar type, not
/// once per closure).
fn jvp_flat<T: Real>(
    f: &mut dyn FnMut(&[Tracer]) -> Result<Vec<Tracer>>,
    x: &[T],
    v: &[T],
) -> Result<(Vec<T>, Vec<T>)> {
    let (p, mut inputs) = match trace_or_host_at(f, x, forward)? {
        Code::Scalar(traced) => traced,
        Code::Hosted(fwd) => {
            // [x, ẋ] ↦ [y, ẏ], each one vector.
            let out = fwd.eval(&[&primals(x), &primals(v)])?;
            // A structural zero (−0.0 in programs) of ẏ is returned as +0.0.
            let cast = |v: &[f64], z: f64| v.iter().map(|&c| T::cst(c + z)).collect();
            return Ok((cast(&out[0], -0.0), cast(&out[1], 0.0)));
        }
    };
    let m = p.n_outputs();
    // ∂⃗p: inputs [x, caps, ẋ], outputs [y, ẏ]; captured values are held
    // fixed.
    let prog = pushforward_program(&p, x.len(), None);
    inputs.extend_from_slice(v);
    let mut out = prog.eval(&inputs)?;
    let jv = out.split_off(m);
    Ok((out, jv))
}

/// Dense Jacobian `J_f(x)` of `f : ℝⁿ → ℝᵐ`, row by row: `m`
/// vector-Jacobian products `e_iᵀ J` with one traced joint program
/// (`(x, ȳ) ↦ (y, Jᵀȳ)`, ∂⃖f) evaluated `m` times.
///
/// Shapes: `x` has `n ≥ 1` entries; the result is `m` rows of `n`. `T`
/// and nesting as [`gradient`].
///
/// Loops: at `f64` points, a function with [`crate::fold`] or
/// [`crate::while_loop`] is traced on the array trace, each loop one
/// instruction, as [`gradient`] does (its results become one vector
/// there); `f` is then called two or three times (once for code without
/// loops). At other scalars loops unroll.
///
/// # Errors
///
/// [`Error::EmptyInput`](crate::Error::EmptyInput) for an empty `x`; as [`gradient`] otherwise.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{jacobian, Real};
///
/// let j = jacobian(|x| vec![x[0] * x[1], x[0].exp()], &[2.0, 3.0]).unwrap();
/// assert_relative_eq!(j[0][0], 3.0);
/// assert_relative_eq!(j[0][1], 2.0);
/// assert_relative_eq!(j[1][0], 2.0_f64.exp());
/// assert_relative_eq!(j[1][1], 0.0);
/// ```
pub fn jacobian<P, F, R>(f: F, point: &P) -> Result<Vec<Vec<P::Scalar>>>
where
    P: Point + ?Sized,
    F: FnMut(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Vec<Tracer>>,
{
    jacobian_flat(&mut on_leaves_mut(point, f), &point.leaves())
}

fn jacobian_flat<T: Real>(
    f: &mut dyn FnMut(&[Tracer]) -> Result<Vec<Tracer>>,
    x: &[T],
) -> Result<Vec<Vec<T>>> {
    check_nonempty("jacobian", x.len())?;
    let (p, mut inputs) = match trace_or_host_at(f, x, |p| PullbackCore::new(p, &primals(x)))? {
        Code::Scalar(traced) => traced,
        Code::Hosted(mut core) => {
            // One pullback at x, applied to each eᵢ.
            let m = core.value().len();
            let mut e = vec![0.0; m];
            let mut row = vec![0.0; x.len()];
            let mut rows = Vec::with_capacity(m);
            for i in 0..m {
                e[i] = 1.0;
                core.apply(&e, &mut row)?;
                e[i] = 0.0;
                rows.push(row.iter().map(|&c| T::cst(c)).collect());
            }
            return Ok(rows);
        }
    };
    let (n, total, m) = (x.len(), p.n_inputs(), p.n_outputs());
    let joint = nest(&p, 1)?.positive_zero_outputs(); // [x, ȳ] -> [y, x̄]

    // The seeds' zeros are structural (−0.0): on tracers a product with
    // one folds away, and meets no infinite partial.
    inputs.extend(std::iter::repeat_n(T::cst(STRUCTURAL_ZERO), m));
    let mut ws = Workspace::new();
    let mut out = vec![T::cst(0.0); m + total];
    let mut rows = Vec::with_capacity(m);
    for i in 0..m {
        inputs[total + i] = T::cst(1.0);
        joint.eval_with(&mut ws, &inputs, &mut out)?;
        inputs[total + i] = T::cst(STRUCTURAL_ZERO);
        rows.push(out[m..m + n].to_vec());
    }
    Ok(rows)
}

/// Hessian-vector product `H_f(x) v` of a scalar function: forward over
/// reverse, ∂⃗ of the gradient program ∂⃖f. It equals the last closure of
/// the order-2 bundle with `Δ = 1`, `Δ′ = v`, `Δ″ = 0` (see the book's
/// chapter "Higher order and the nested-closure encoding"), which the tests
/// check.
///
/// Shapes: `x` and `v` have `n ≥ 1` entries; so does the result.
///
/// # Errors
///
/// [`Error::EmptyInput`](crate::Error::EmptyInput) for an empty `x`; [`Error::LengthMismatch`](crate::Error::LengthMismatch) if
/// `v.len() != x.len()`; as [`gradient`] otherwise.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{hvp, Real};
///
/// fn f<T: Real>(x: &[T]) -> T {
///     x[0] * x[0] * x[1]
/// }
/// // H = [[2x₁, 2x₀], [2x₀, 0]].
/// let hv = hvp(f, &[1.0, 2.0], &[1.0, -1.0]).unwrap();
/// assert_relative_eq!(hv[0], 4.0 - 2.0);
/// assert_relative_eq!(hv[1], 2.0);
/// ```
pub fn hvp<P, Q, F, R>(f: F, x: &P, v: &Q) -> Result<Tangent<P>>
where
    P: Point + ?Sized,
    Q: Point<Scalar = P::Scalar> + ?Sized,
    F: FnMut(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Tracer>,
{
    let leaves = x.leaves();
    check_nonempty("hvp", leaves.len())?;
    let v = direction_leaves("hvp: direction", x, &mut PointShape::new(leaves.len()), v)?;
    let hv = hvp_flat(&mut on_leaves_mut(x, f), &leaves, &v)?;
    in_shape(x, hv)
}

fn hvp_flat<T: Real>(
    f: &mut dyn FnMut(&[Tracer]) -> Result<Tracer>,
    x: &[T],
    v: &[T],
) -> Result<Vec<T>> {
    check_nonempty("hvp", x.len())?;
    check_len("hvp: direction", x.len(), v.len())?;
    let n = x.len();
    let (t, mut inputs) = if is_f64::<T>() {
        let xf = primals(x);
        match trace_or_host(f, &xf, |p| HvpCore::new(p, n))? {
            Code::Scalar(t) => (t, x.to_vec()),
            Code::Hosted(mut core) => {
                let mut hv = vec![0.0; n];
                core.linearize(&xf)?;
                core.apply(&primals(v), &mut hv)?;
                return Ok(hv.into_iter().map(T::cst).collect());
            }
        }
    } else {
        trace_builder_at(scalar(f), x)?
    };
    let h = hvp_program(t, n)?;
    inputs.extend_from_slice(v);
    let out = h.eval(&inputs)?;
    Ok(out[1 + n..].to_vec())
}

/// Dense Hessian `H_f(x)` of a scalar function, row by row, from `n`
/// Hessian-vector products with the unit vectors: one traced program,
/// split as [`Hvp`](crate::Hvp) is, its left run once and its right `n` times.
///
/// Shapes: `x` has `n ≥ 1` entries; the result is `n` rows of `n`. `T`
/// and nesting as [`gradient`]: at tracer points inside another trace the
/// Hessian is recorded there (its gradient is a third derivative).
///
/// Threads: at `f64` points with more than four variables, the columns
/// are computed four at a time, the groups spread over rayon's global
/// thread pool (one thread per core by default). To limit it, set the
/// environment variable `RAYON_NUM_THREADS` (1 for none), or call
/// `hessian` inside `rayon::ThreadPool::install` of a pool of your own.
/// Other points, and functions with loops (traced on the array trace, as
/// [`gradient`] says, their columns one product at a time), run on the
/// calling thread.
///
/// # Errors
///
/// As [`hvp`].
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{hessian, Real};
///
/// let h = hessian(|x| x[0].sin() * x[1], &[0.5, 2.0]).unwrap();
/// assert_relative_eq!(h[0][0], -0.5_f64.sin() * 2.0);
/// assert_relative_eq!(h[0][1], 0.5_f64.cos());
/// assert_relative_eq!(h[1][0], 0.5_f64.cos());
/// assert_relative_eq!(h[1][1], 0.0);
/// ```
pub fn hessian<P, F, R>(f: F, x: &P) -> Result<Vec<Vec<P::Scalar>>>
where
    P: Point + ?Sized,
    F: FnMut(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Tracer>,
{
    hessian_flat(&mut on_leaves_mut(x, f), &x.leaves())
}

fn hessian_flat<T: Real>(
    f: &mut dyn FnMut(&[Tracer]) -> Result<Tracer>,
    x: &[T],
) -> Result<Vec<Vec<T>>> {
    check_nonempty("hessian", x.len())?;
    let n = x.len();
    let (t, inputs) = if is_f64::<T>() {
        let xf = primals(x);
        match trace_or_host(f, &xf, |p| HvpCore::new(p, n))? {
            Code::Scalar(t) => (t, x.to_vec()),
            Code::Hosted(mut core) => {
                // Code with loops: the columns one by one through the loops.
                core.linearize(&xf)?;
                let mut e = vec![0.0; n];
                let mut rows = Vec::with_capacity(n);
                for i in 0..n {
                    e[i] = 1.0;
                    let mut row = vec![0.0; n];
                    core.apply(&e, &mut row)?;
                    rows.push(row.into_iter().map(T::cst).collect());
                    e[i] = 0.0;
                }
                return Ok(rows);
            }
        }
    } else {
        trace_builder_at(scalar(f), x)?
    };
    // The split of `Hvp`: the left, which depends on x alone, runs once;
    // the right runs per column.
    let staged = hvp_staged(t, n, false)?;
    if is_f64::<T>() {
        // The lowered evaluator, four columns per pass of the right stage,
        // the passes spread over all cores (each worker with its own copy
        // of the buffers, which hold the left's residual).
        use rayon::prelude::*;
        let staged = staged.schedule();
        let mut ws = staged.workspace();
        staged.run_with(HvpSplit::LEFT, &mut ws, &primals(&inputs))?;
        let firsts: Vec<usize> = (0..n).step_by(LANES).collect();
        let columns = |ws: &mut StagedWorkspace, first: usize| -> Result<Vec<Vec<f64>>> {
            let lanes_in: Vec<[f64; LANES]> = (0..n)
                .map(|i| std::array::from_fn(|l| if first + l == i { 1.0 } else { 0.0 }))
                .collect();
            let mut lanes_out = Vec::new();
            staged.run_lanes(HvpSplit::RIGHT, ws, &lanes_in, &mut lanes_out)?;
            Ok((0..LANES.min(n - first))
                .map(|l| lanes_out[..n].iter().map(|v| v[l]).collect())
                .collect())
        };
        let blocks: Vec<Result<Vec<Vec<f64>>>> = if firsts.len() > 1 {
            firsts
                .par_iter()
                .map_init(|| ws.clone(), |ws, &first| columns(ws, first))
                .collect()
        } else {
            firsts
                .iter()
                .map(|&first| columns(&mut ws, first))
                .collect()
        };
        let mut rows = Vec::with_capacity(n);
        for block in blocks {
            rows.extend(
                block?
                    .into_iter()
                    .map(|row| row.into_iter().map(T::cst).collect()),
            );
        }
        return Ok(rows);
    }
    let (_, m) = staged.run(HvpSplit::LEFT, &[], &inputs)?;
    // Structural zeros (−0.0) beside the 1, as in `jacobian_flat`.
    let mut e = vec![T::cst(STRUCTURAL_ZERO); n];
    let mut rows = Vec::with_capacity(n);
    for i in 0..n {
        e[i] = T::cst(1.0);
        rows.push(staged.run(HvpSplit::RIGHT, &m, &e)?.0);
        e[i] = T::cst(STRUCTURAL_ZERO);
    }
    Ok(rows)
}
