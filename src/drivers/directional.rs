//! The compiled directional derivatives of `f : ℝⁿ → ℝ` in Taylor mode:
//! [`Directional`], one type for functions of scalar tracers and of the
//! array trace, as [`Gradient`](super::Gradient) and [`Hvp`](super::Hvp).

use super::taylor::directional_program;
use super::{
    check_nonempty, directional_jet, is_f64, primals, run_or_retrace, taylor_or_host, Code,
    IntoTraced, LeafFunction, OnArray, OnPoint,
};
use crate::array::{trace_scalar, ArrayProgram, LineJets, TArray, TScalar};
use crate::differentiable::{Differentiable, Point};
use crate::error::{check_len, Error, Result};
use crate::functor::taylor::check_taylor_order;
use crate::functor::taylor::scale_by_factorials;
use crate::functor::TaylorProgram;
use crate::program::ir::STRUCTURAL_ZERO;
use crate::program::trace::Tracer;
use crate::program::Program;
use crate::real::Real;

/// Compiled directional derivatives `dᵏ/dtᵏ f(x + t v)` at `t = 0`,
/// `k = 0 … K`, of `f : ℝⁿ → ℝ` in Taylor mode (Griewank & Walther,
/// *Evaluating Derivatives*, 2nd ed., §13.2): `f` is traced once, its
/// [`TaylorProgram`] of degree `K` built once, and each
/// [`Directional::eval`] pushes one jet along the line at any point and
/// direction, `O(K²)` work per primitive, with no allocation. Entry 1 is
/// `∇f · v`, entry 2 `vᵀ H v`, entry `k` `Dᵏf(x)[v, …, v]`; the one-shot
/// form is [`crate::taylor()`].
///
/// One type for both traces, as [`Gradient`](super::Gradient):
/// [`Directional::new`] for a function of scalar tracers (code with
/// [`crate::fold`] or [`crate::while_loop`] is traced on the array trace,
/// each loop one instruction whose jets run through its body),
/// [`Directional::structured`] for a function of a struct of yours, and
/// [`Directional::array`] for a function written against
/// [`Array`](crate::array::Array) (one instruction per array operation,
/// whatever `n`). Where a guard recorded at the trace point no longer
/// holds, `f` is traced again at the new point.
///
/// Shapes: `x` and `v` have the `n` entries of the point traced at; the
/// result has `K + 1`. `K` is at most
/// [`MAX_TAYLOR_ORDER`](crate::functor::MAX_TAYLOR_ORDER).
///
/// NaN and ∞ follow IEEE 754 as in the evaluation of a
/// [`TaylorProgram`]. [`Directional::eval`] takes `f64` points; inside
/// another trace (tracer or num-dual points, so that the derivatives can
/// be differentiated again) [`Directional::eval_at`] evaluates the same
/// derivatives by nested forward mode.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{Directional, Real};
///
/// // f(x) = x₀ x₁ + sin x₁ along v: f‴ = −v₁³ cos x₁.
/// let mut d = Directional::new(|x| x[0] * x[1] + x[1].sin(), &[0.0, 0.0], 3).unwrap();
/// let mut out = [0.0; 4];
/// d.eval(&[1.0, 0.5], &[2.0, 1.0], &mut out).unwrap();
/// assert_relative_eq!(out[1], 1.0 + 2.0 * 0.5 + 0.5_f64.cos(), max_relative = 1e-14);
/// assert_relative_eq!(out[2], 2.0 * 2.0 - 0.5_f64.sin(), max_relative = 1e-14);
/// assert_relative_eq!(out[3], -0.5_f64.cos(), max_relative = 1e-14);
/// ```
#[derive(Clone)]
pub struct Directional<F> {
    f: F,
    n: usize,
    order: usize,
    code: DirectionalCode,
    /// The input jets of a scalar Taylor program.
    jet: Vec<f64>,
    /// The leaves of a structured direction ([`Directional::eval_point`]).
    direction: Vec<f64>,
    /// The program of [`Directional::eval_at`] at points other than
    /// `f64` (that of [`crate::taylor()`] there: ∂⃗ᴷ along the line),
    /// built on first use.
    generic: Option<Program>,
}

/// A compiled directional derivative's program: the Taylor program of the
/// scalar trace, or of the array trace (functions of the array trace and
/// scalar code with loops).
type DirectionalCode = Code<TaylorProgram, Box<LineJets>>;

impl<F> std::fmt::Debug for Directional<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Directional");
        d.field("n", &self.n).field("order", &self.order);
        match &self.code {
            Code::Scalar(t) => d.field("program_len", &t.program().len()),
            Code::Hosted(t) => d.field("array_program_len", &t.program().program().len()),
        };
        d.finish()
    }
}

impl<F, R> Directional<F>
where
    F: Fn(&[Tracer]) -> R,
    R: IntoTraced<Tracer>,
{
    /// Traces `f` at `x0` and builds its Taylor program of degree `order`.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyInput`](crate::Error::EmptyInput) for an empty `x0`;
    /// an error `f` returns while tracing;
    /// [`Error::CapturedOutsideTrace`](crate::Error::CapturedOutsideTrace)
    /// if `f` closes over tracers of another trace;
    /// [`Error::OrderTooHigh`](crate::Error::OrderTooHigh) above
    /// [`MAX_TAYLOR_ORDER`](crate::functor::MAX_TAYLOR_ORDER);
    /// [`Error::AllocationFailed`](crate::Error::AllocationFailed) where
    /// the jets cannot be allocated.
    pub fn new(f: F, x0: &[f64], order: usize) -> Result<Self> {
        // Refused before anything is traced (a function with a long loop
        // would otherwise be traced unrolled first).
        check_taylor_order(order)?;
        check_nonempty("Directional", x0.len())?;
        let code = build(&f, x0, order)?;
        Ok(Directional::with_code(f, x0.len(), order, code))
    }
}

impl<F: Fn(&TArray) -> Result<TScalar>> Directional<OnArray<F>> {
    /// Traces `f`, written against [`Array`](crate::array::Array) and
    /// called here on the array trace, at `x0` and builds the Taylor
    /// program of degree `order` of its array program: one instruction
    /// per array operation, each map running the jets of its body element
    /// by element. The same type as [`Directional::new`]'s, with the same
    /// [`Directional::eval`] and re-tracing where a guard fails (a
    /// comparison inside a map body must hold in every element, as for
    /// [`Gradient::array`](super::Gradient::array)).
    ///
    /// # Errors
    ///
    /// As [`Directional::new`].
    ///
    /// # Example
    ///
    /// ```
    /// use approx::assert_relative_eq;
    /// use optic_ad::array::Array;
    /// use optic_ad::{Directional, Real};
    ///
    /// // f(x) = Σ sin xᵢ along v: dᵏ/dtᵏ = Σ vᵢᵏ sin⁽ᵏ⁾(xᵢ).
    /// let (x, v) = ([0.3, -0.2], [1.0, 2.0]);
    /// let mut d = Directional::array(|x| Ok(x.map(|t| t.sin()).sum()), &x, 4).unwrap();
    /// let mut out = [0.0; 5];
    /// d.eval(&x, &v, &mut out).unwrap();
    /// let want = 0.3_f64.sin() + 16.0 * (-0.2_f64).sin();
    /// assert_relative_eq!(out[4], want, max_relative = 1e-14);
    /// ```
    pub fn array(f: F, x0: &[f64], order: usize) -> Result<Self> {
        // Refused before anything is traced (a function with a long loop
        // would otherwise be traced unrolled first).
        check_taylor_order(order)?;
        check_nonempty("Directional", x0.len())?;
        let f = OnArray(f);
        let code = build(&f, x0, order)?;
        Ok(Directional::with_code(f, x0.len(), order, code))
    }
}

impl<P, F, R> Directional<OnPoint<P, F>>
where
    P: Differentiable<Scalar = f64> + Point<Scalar = f64> + Clone,
    F: Fn(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Tracer>,
{
    /// Traces `f`, a function of a structured point (a struct deriving
    /// [`Differentiable`]), at `p0` and builds its Taylor program of
    /// degree `order`: the compiled form of [`crate::taylor()`] on such
    /// points. Later points and directions must have `p0`'s structure (its
    /// `Vec` lengths); where a point's data fields
    /// (`#[differentiable(skip)]`) differ from those of the point last
    /// traced at, `f` is traced again (as where a guard fails).
    ///
    /// # Errors
    ///
    /// [`Error::EmptyInput`](crate::Error::EmptyInput) if `p0` has no
    /// leaves; as [`Directional::new`] otherwise.
    ///
    /// # Example
    ///
    /// ```
    /// use approx::assert_relative_eq;
    /// use optic_ad::{Differentiable, Directional, Real};
    ///
    /// #[derive(Clone, Differentiable)]
    /// struct Wave<T> {
    ///     amplitude: T,
    ///     phase: T,
    ///     #[differentiable(skip)]
    ///     harmonic: usize,
    /// }
    /// fn f<T: Real>(w: &Wave<T>) -> T {
    ///     w.amplitude * (w.phase * w.harmonic as f64).sin()
    /// }
    /// let w = Wave { amplitude: 2.0, phase: 0.3, harmonic: 3 };
    /// let mut d = Directional::structured(f, &w, 2).unwrap();
    /// // Along the phase only: d²/dt² = −9 a sin(3 φ).
    /// let v = Wave { amplitude: 0.0, phase: 1.0, harmonic: 3 };
    /// let mut out = [0.0; 3];
    /// d.eval_point(&w, &v, &mut out).unwrap();
    /// assert_relative_eq!(out[2], -9.0 * 2.0 * 0.9_f64.sin(), max_relative = 1e-14);
    /// ```
    pub fn structured(f: F, p0: &P, order: usize) -> Result<Self> {
        // Refused before anything is traced (a function with a long loop
        // would otherwise be traced unrolled first).
        check_taylor_order(order)?;
        let n = p0.leaf_count();
        check_nonempty("Directional", n)?;
        let f = OnPoint::new(f, p0);
        let code = build(&f, &p0.leaves(), order)?;
        Ok(Directional::with_code(f, n, order, code))
    }

    /// `out[k] = dᵏ/dtᵏ f(p + t v)` at `t = 0`, `k = 0 … K`, at a point
    /// and a direction of the structure `f` was built at (`v`'s data
    /// fields are not read). A point with other data fields than the
    /// point last traced at is traced again. No allocation in steady
    /// state.
    ///
    /// # Errors
    ///
    /// [`Error::StructureMismatch`](crate::Error::StructureMismatch)
    /// unless `p` and `v` have the structure of the point the driver was
    /// built at; as [`Directional::eval`] otherwise.
    pub fn eval_point(&mut self, p: &P, v: &P, out: &mut [f64]) -> Result<()> {
        if !self.f.point.same_shape(v) {
            return Err(Error::StructureMismatch {
                what: "Directional: direction",
            });
        }
        let (x, old) = self.f.take_leaves("Directional: point", p)?;
        if old.is_some() {
            match build(&self.f, &x, self.order) {
                Ok(code) => {
                    self.code = code;
                    // The program of `eval_at` was traced with the old
                    // data fields: built again on its next call.
                    self.generic = None;
                }
                Err(e) => {
                    self.f.restore(x, old);
                    return Err(e);
                }
            }
        }
        let mut dir = std::mem::take(&mut self.direction);
        dir.clear();
        v.flatten_into(&mut dir);
        let r = self.eval(&x, &dir, out);
        self.f.restore(x, None);
        self.direction = dir;
        r
    }
}

impl<F: LeafFunction> Directional<F> {
    /// The driver of `f` on `n` leaves, from its first program.
    fn with_code(f: F, n: usize, order: usize, code: DirectionalCode) -> Self {
        Directional {
            f,
            n,
            order,
            code,
            jet: Vec::new(),
            direction: Vec::new(),
            generic: None,
        }
    }

    /// The order `K`: [`Directional::eval`] returns `K + 1` derivatives.
    pub fn order(&self) -> usize {
        self.order
    }

    /// `out[k] = dᵏ/dtᵏ f(x + t v)` at `t = 0`, `k = 0 … K`. No allocation
    /// in steady state (the first call at a scalar program allocates its
    /// jets; on the array trace, maps of at least 2¹⁶ elements, 2¹⁸ with
    /// the feature `jit`, whose jets are compiled run on rayon's pool, and
    /// called from outside it rayon's queue allocates a block every 63
    /// hand-offs, as [`ArrayWorkspace::run`](crate::array::ArrayWorkspace::run) says).
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) unless `x`
    /// and `v` have `n` entries and `out` has `K + 1`; errors of
    /// re-tracing where a guard fails;
    /// [`Error::GuardFailed`](crate::Error::GuardFailed) where a
    /// comparison inside an array map body fails for some element. After
    /// an error `out` holds no result.
    pub fn eval(&mut self, x: &[f64], v: &[f64], out: &mut [f64]) -> Result<()> {
        check_len("Directional: x", self.n, x.len())?;
        check_len("Directional: v", self.n, v.len())?;
        check_len("Directional: out, K + 1", self.order + 1, out.len())?;
        let (f, order, jet) = (&self.f, self.order, &mut self.jet);
        run_or_retrace(
            &mut self.code,
            || build(f, x, order),
            |c| match c {
                Code::Scalar(t) => {
                    directional_jet(t, x, v, jet, out)?;
                    scale_by_factorials(out);
                    Ok(())
                }
                Code::Hosted(d) => d.eval(x, v, out),
            },
        )
    }

    /// `dᵏ/dtᵏ f(x + t v)` at `t = 0`, `k = 0 … K`, at a point and a
    /// direction of any [`Real`] scalar: tracers, to use the compiled
    /// derivatives inside another trace (so that they can be
    /// differentiated again, in `x` or in `v`), or num-dual numbers. At
    /// `f64` points this is [`Directional::eval`]; otherwise it evaluates
    /// the program [`crate::taylor()`] builds at such points, `f` traced
    /// along the line `x + t v` and ∂⃗ applied `K` times in `t` (nested
    /// forward mode), built on first use and kept, because the Taylor
    /// program runs on `f64` jets only. Nested forward mode doubles
    /// its terms with each order where Taylor mode grows as `K²`: meant for
    /// low orders. Allocates its result.
    ///
    /// As for [`Gradient::eval_at`](crate::Gradient::eval_at), `f` must not
    /// close over tracers of an enclosing trace (call [`crate::taylor()`]
    /// inside the trace for such closures), and where `f` has loops, points
    /// other than `f64` are served by `f` traced again on the scalar trace
    /// with its loops unrolled, once. A function of the array trace
    /// ([`Directional::array`]) is served at `f64` points only.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) unless `x`
    /// and `v` have `n` entries; errors of re-tracing where a guard fails;
    /// [`Error::CapturedOutsideTrace`](crate::Error::CapturedOutsideTrace)
    /// if `f` closes over tracers;
    /// [`Error::Unsupported`](crate::Error::Unsupported) for a function of
    /// the array trace at scalars other than `f64`.
    ///
    /// # Example
    ///
    /// ```
    /// use approx::assert_relative_eq;
    /// use optic_ad::{gradient, Directional, Real};
    ///
    /// // f(x) = x₀² x₁ along v: d³/dt³ = 6 v₀² v₁, whose gradient in v is
    /// // (12 v₀ v₁, 6 v₀²).
    /// let mut d = Directional::new(|x| x[0] * x[0] * x[1], &[1.0, 2.0], 3).unwrap();
    /// let x = [1.0, 2.0];
    /// let g = gradient(|v| {
    ///     let x = [x[0].into(), x[1].into()];
    ///     Ok(d.eval_at(&x, v)?[3])
    /// }, &[0.5, 3.0]).unwrap();
    /// assert_relative_eq!(g[0], 12.0 * 0.5 * 3.0);
    /// assert_relative_eq!(g[1], 6.0 * 0.25);
    /// ```
    pub fn eval_at<T: Real>(&mut self, x: &[T], v: &[T]) -> Result<Vec<T>> {
        check_len("Directional: x", self.n, x.len())?;
        check_len("Directional: v", self.n, v.len())?;
        if is_f64::<T>() {
            let mut out = vec![0.0; self.order + 1];
            self.eval(&primals(x), &primals(v), &mut out)?;
            return Ok(out.into_iter().map(T::cst).collect());
        }
        let (f, n, order) = (&self.f, self.n, self.order);
        let (xs, vs) = (primals(x), primals(v));
        // `f` traced on the scalar trace along the line (loops unrolled);
        // a tracer it captures is refused there.
        let built = || -> Result<Option<Program>> {
            let line = |t: &[Tracer]| f.call_leaves(t);
            Ok(Some(directional_program(line, &xs, &vs, order)?.0))
        };
        if self.generic.is_none() {
            self.generic = built()?;
        }
        let mut input = Vec::with_capacity(1 + 2 * n);
        input.push(T::cst(STRUCTURAL_ZERO));
        input.extend_from_slice(x);
        input.extend_from_slice(v);
        run_or_retrace(&mut self.generic, built, |g| match g {
            Some(g) => g.eval(&input),
            None => Err(Error::MissingBlock {
                block: 0,
                width: 1 + 2 * n,
            }),
        })
    }

    /// The Taylor program of the scalar trace; `None` where `f` was traced
    /// on the array trace ([`Directional::array_program`]).
    pub fn program(&self) -> Option<&TaylorProgram> {
        match &self.code {
            Code::Scalar(t) => Some(t),
            Code::Hosted(_) => None,
        }
    }

    /// The Taylor program of the array trace: for a function of the array
    /// trace ([`Directional::array`]) and for code with loops that it
    /// holds; `None` otherwise.
    pub fn array_program(&self) -> Option<&TaylorProgram<ArrayProgram>> {
        match &self.code {
            Code::Scalar(_) => None,
            Code::Hosted(d) => Some(d.program()),
        }
    }
}

/// The Taylor program of `f` traced at `x`: on the scalar trace, or on the
/// array trace for a function of it and for code with loops. (`f` behind
/// `dyn`, so that this is compiled once, not once per function.)
fn build(f: &dyn LeafFunction, x: &[f64], order: usize) -> Result<DirectionalCode> {
    if let Some(af) = f.array_function() {
        let p = trace_scalar(af, x)?;
        return Ok(Code::Hosted(Box::new(LineJets::from_program(
            &p,
            x.len(),
            order,
        )?)));
    }
    Ok(match taylor_or_host(&mut |t| f.call_leaves(t), x, order)? {
        Code::Scalar(t) => Code::Scalar(t),
        Code::Hosted(d) => Code::Hosted(Box::new(d)),
    })
}
