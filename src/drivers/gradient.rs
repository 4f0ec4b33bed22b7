//! The compiled gradient [`Gradient`]: traced once, evaluated at many
//! points.

use super::{
    check_nonempty, gradient_program, in_shape, is_f64, primals, run_or_retrace, scalar,
    trace_builder_at, trace_or_host, Code, IntoTraced, LeafFunction, OnArray, OnPoint,
};

use crate::array::{trace_scalar, ArrayProgram, GradientCore, TArray, TScalar};
use crate::backend::{Executable, Registers};
use crate::differentiable::{Differentiable, Point, Tangent};
use crate::error::{check_len, Result};
use crate::program::trace::Tracer;
use crate::real::Real;

/// A compiled gradient: traced once, evaluated at many points with no
/// allocation, re-traced only where a recorded comparison (guard) fails.
/// One type for both traces: [`Gradient::new`] takes a function of scalar
/// tracers (generic over [`Real`]), [`Gradient::structured`] one of a
/// structured point, and [`Gradient::array`] one written against the
/// array trace ([`crate::array::Array`]).
///
/// A function with loops ([`crate::fold`], [`crate::while_loop`]) is
/// traced on the array trace, where each loop is one instruction carrying
/// its body and its gradient a reverse loop over the stored (or
/// checkpointed) carries: building costs the same for ten steps as for a
/// million, and memory grows with the carries, not with the body
/// (see the book's chapter "Loops"). The function is then called two or
/// three times while tracing: once on the scalar trace, which stops at the
/// first loop (by unwinding, which the driver catches: nothing is printed
/// and the function sees no error; in a build with `panic = "abort"`,
/// `fold` returns [`Error::Unsupported`](crate::Error::Unsupported) there instead, which the function
/// must pass on with `?`), then on the array trace, with the point's values
/// (comparisons and value reads outside the loops see them); and, where
/// that cannot hold the loop (a comparison or a value read inside its
/// body), once more on the scalar trace with the loop unrolled.
///
/// So the function must be safe to stop at a loop and run again: the
/// unwinding drops what it holds, as a panic would, so a `Mutex` guard held
/// across the loop call is poisoned, and state moved out before the loop
/// and put back after it stays moved out for the next call. Keep such
/// state outside the traced function (or take it after the loop).
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{Gradient, Real};
///
/// fn f<T: Real>(x: &[T]) -> T {
///     (x[0] * x[1]).sin()
/// }
/// let mut g = Gradient::new(f, &[1.0, 1.0]).unwrap();
/// let mut grad = [0.0; 2];
/// for k in 0..5 {
///     let x = [0.1 * k as f64, 2.0];
///     let y = g.eval(&x, &mut grad).unwrap();
///     assert_relative_eq!(y, (x[0] * x[1]).sin());
///     assert_relative_eq!(grad[0], x[1] * (x[0] * x[1]).cos());
/// }
/// ```
#[derive(Clone)]
pub struct Gradient<F> {
    f: F,
    n: usize,
    code: GradientCode,
    regs: Registers,
    out: Vec<f64>,
    /// For a function with loops, its gradient program on the scalar trace
    /// with the loops unrolled, built on the first [`Gradient::eval_at`]
    /// at points other than `f64`.
    unrolled: Option<Executable>,
}

/// A compiled gradient's program: `x ↦ (f(x), ∇f(x))` from the scalar
/// trace, or from the array trace for a function with loops.
type GradientCode = Code<Executable, Box<GradientCore>>;

impl<F> std::fmt::Debug for Gradient<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Gradient");
        d.field("n", &self.n);
        match &self.code {
            Code::Scalar(p) => d.field("program_len", &p.len()),
            Code::Hosted(c) => d.field("array_program_len", &c.program().len()),
        };
        d.finish()
    }
}

impl<F, R> Gradient<F>
where
    F: Fn(&[Tracer]) -> R,
    R: IntoTraced<Tracer>,
{
    /// Traces `f` at `x0` and builds its gradient program.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyInput`](crate::Error::EmptyInput) for an empty `x0`; as [`gradient`](fn@crate::gradient) otherwise.
    pub fn new(f: F, x0: &[f64]) -> Result<Self> {
        check_nonempty("Gradient", x0.len())?;
        let code = build(&f, x0)?;
        Ok(Gradient::with_code(f, x0.len(), code))
    }
}

impl<F: Fn(&TArray) -> Result<TScalar>> Gradient<OnArray<F>> {
    /// Traces `f`, written against [`Array`](crate::array::Array) and
    /// called here on the array trace, at `x0` and builds its gradient
    /// program: one instruction per array operation, whatever `n` (the
    /// book's chapter "Arrays"). The same type as [`Gradient::new`]'s,
    /// with the same [`Gradient::eval`] and the same re-tracing where a
    /// guard fails.
    ///
    /// A comparison inside a map body is another matter: the body is
    /// traced once, at an arbitrary point (0.5), and its guards must hold
    /// in every element; re-tracing cannot change that, and
    /// [`Error::GuardFailed`](crate::Error::GuardFailed) is returned (write such branches with
    /// `select`). The programs run at `f64` points only:
    /// [`Gradient::eval_at`] at other scalars returns
    /// [`Error::Unsupported`](crate::Error::Unsupported).
    ///
    /// Shapes: `x0` and every later point have `n ≥ 1` entries.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyInput`](crate::Error::EmptyInput) for an empty `x0`; an error `f` returns while
    /// tracing.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::array::Array;
    /// use optic_ad::Gradient;
    ///
    /// let mut g = Gradient::array(|x| Ok(x.map(|t| t * t).sum()), &[0.0; 3]).unwrap();
    /// let mut out = [0.0; 3];
    /// let y = g.eval(&[1.0, 2.0, 3.0], &mut out).unwrap();
    /// assert_eq!((y, out), (14.0, [2.0, 4.0, 6.0]));
    /// ```
    pub fn array(f: F, x0: &[f64]) -> Result<Self> {
        let n = x0.len();
        check_nonempty("Gradient", n)?;
        let f = OnArray(f);
        let code = build(&f, x0)?;
        Ok(Gradient::with_code(f, n, code))
    }
}

impl<P, F, R> Gradient<OnPoint<P, F>>
where
    P: Differentiable<Scalar = f64> + Point<Scalar = f64> + Clone,
    F: Fn(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Tracer>,
{
    /// Traces `f`, a function of a structured point (a struct deriving
    /// [`Differentiable`]), at `p0` and builds its gradient program: the
    /// compiled form of [`gradient`](fn@crate::gradient) on such points. Later points must
    /// have `p0`'s structure (its `Vec` lengths); where their data fields
    /// (`#[differentiable(skip)]`) differ from those of the point last
    /// traced at, `f` is traced again (as where a guard fails).
    ///
    /// # Errors
    ///
    /// [`Error::EmptyInput`](crate::Error::EmptyInput) if `p0` has no leaves; as [`gradient`](fn@crate::gradient)
    /// otherwise.
    ///
    /// # Example
    ///
    /// ```
    /// use approx::assert_relative_eq;
    /// use optic_ad::{Differentiable, Gradient, Real};
    ///
    /// #[derive(Clone, Differentiable)]
    /// struct Line<T> {
    ///     slope: T,
    ///     intercept: T,
    /// }
    /// fn loss<T: Real>(l: &Line<T>) -> T {
    ///     let r = l.slope * 2.0 + l.intercept - 1.0;
    ///     r * r
    /// }
    /// let mut g = Gradient::structured(loss, &Line { slope: 0.0, intercept: 0.0 }).unwrap();
    /// let (y, grad) = g.eval_point(&Line { slope: 1.0, intercept: 0.5 }).unwrap();
    /// assert_relative_eq!(y, 2.25);
    /// assert_relative_eq!(grad.slope, 2.0 * 1.5 * 2.0);
    /// assert_relative_eq!(grad.intercept, 2.0 * 1.5);
    /// ```
    pub fn structured(f: F, p0: &P) -> Result<Self> {
        let n = p0.leaf_count();
        check_nonempty("Gradient", n)?;
        let f = OnPoint::new(f, p0);
        let code = build(&f, &p0.leaves())?;
        Ok(Gradient::with_code(f, n, code))
    }

    /// `(f(p), ∇f(p))`, the gradient in `p`'s type (its data fields
    /// copied from `p`, the data `f` was evaluated with: a point with other
    /// data is traced again). Allocates the gradient; [`Gradient::eval`]
    /// on the flat leaves is the allocation-free path (at the data last
    /// traced with).
    ///
    /// # Errors
    ///
    /// [`Error::StructureMismatch`](crate::Error::StructureMismatch) unless `p` has the structure of the
    /// point the gradient was built at; errors of re-tracing.
    pub fn eval_point(&mut self, p: &P) -> Result<(f64, Tangent<P>)> {
        let (x, old) = self.f.take_leaves("Gradient: point", p)?;
        if old.is_some() {
            match build(&self.f, &x) {
                Ok(code) => {
                    self.code = code;
                    self.unrolled = None;
                }
                Err(e) => {
                    self.f.restore(x, old);
                    return Err(e);
                }
            }
        }
        let mut grad = vec![0.0; self.n];
        let y = self.eval(&x, &mut grad);
        self.f.restore(x, None);
        Ok((y?, in_shape(p, grad)?))
    }
}

impl<F: LeafFunction> Gradient<F> {
    /// The driver of `f` on `n` leaves, from its first programs.
    fn with_code(f: F, n: usize, code: GradientCode) -> Self {
        Gradient {
            f,
            n,
            out: vec![0.0; n + 1],
            code,
            regs: Registers::new(),
            unrolled: None,
        }
    }

    /// `(f(x), ∇f(x))` at a point of any [`Real`] scalar: tracers, to use
    /// the compiled gradient inside another trace (the enclosing trace
    /// records the gradient program's instructions, so it can be
    /// differentiated again), or num-dual numbers. Allocates its result;
    /// [`Gradient::eval`] is the allocation-free `f64` path.
    ///
    /// `f` itself must not close over tracers of an enclosing trace (that
    /// is refused by [`Gradient::new`]): a compiled driver keeps its
    /// program across traces. For a closure that captures them, call
    /// [`gradient`](fn@crate::gradient) inside the trace.
    ///
    /// Where `f` has loops (its program is on the array trace), a point
    /// other than `f64` is served by `f` traced again on the scalar
    /// trace with its loops unrolled, once (the program is kept for later
    /// calls). A function of the array trace ([`Gradient::array`]) cannot
    /// run on scalar tracers: only `f64` points are served there.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) unless `x` has `n` entries; errors of
    /// re-tracing where a guard fails; [`Error::Unsupported`](crate::Error::Unsupported) for a
    /// function of the array trace at scalars other than `f64`.
    ///
    /// # Example
    ///
    /// ```
    /// use approx::assert_relative_eq;
    /// use optic_ad::{hessian, Gradient, Real};
    ///
    /// let mut g = Gradient::new(|x| x[0].powi(3) * x[1], &[1.0, 1.0]).unwrap();
    /// // The Hessian as the Jacobian of the compiled gradient.
    /// let h = optic_ad::jacobian(|x| Ok(g.eval_at(x)?.1), &[2.0, 5.0]).unwrap();
    /// assert_relative_eq!(h[0][0], 6.0 * 2.0 * 5.0);
    /// assert_relative_eq!(h[0][1], 3.0 * 4.0);
    /// assert_relative_eq!(h[1][0], 3.0 * 4.0);
    /// assert_relative_eq!(h[1][1], 0.0);
    /// ```
    pub fn eval_at<T: Real>(&mut self, x: &[T]) -> Result<(T, Vec<T>)> {
        check_len("Gradient: x", self.n, x.len())?;
        if let Code::Hosted(_) = self.code {
            if is_f64::<T>() {
                let mut grad = vec![0.0; self.n];
                let y = self.eval(&primals(x), &mut grad)?;
                return Ok((T::cst(y), grad.into_iter().map(T::cst).collect()));
            }
            let f = &self.f;
            let xs = primals(x);
            let p = match &mut self.unrolled {
                Some(p) => p,
                None => self.unrolled.insert(build_unrolled(f, &xs)?),
            };
            let mut out = run_or_retrace(p, || build_unrolled(f, &xs), |p| p.eval(x))?;
            let grad = out.split_off(1);
            return Ok((out[0], grad));
        }
        let f = &self.f;
        let mut out = run_or_retrace(
            &mut self.code,
            || build(f, &primals(x)),
            |c| match c {
                Code::Scalar(p) => p.eval(x),
                // A re-trace that meets a loop: the `f64` path above on
                // the next call; this one is served unrolled.
                Code::Hosted(_) => build_unrolled(f, &primals(x))?.eval(x),
            },
        )?;
        let grad = out.split_off(1);
        Ok((out[0], grad))
    }

    /// The gradient program `x ↦ (f(x), ∇f(x))`; `None` where `f` was
    /// traced on the array trace (code with loops that it holds, and every
    /// [`Gradient::array`]), whose program [`Gradient::array_program`]
    /// gives.
    pub fn program(&self) -> Option<&Executable> {
        match &self.code {
            Code::Scalar(p) => Some(p),
            Code::Hosted(_) => None,
        }
    }

    /// The gradient program on the array trace: for a function of the
    /// array trace ([`Gradient::array`]), and where `f` has loops
    /// ([`crate::fold`], [`crate::while_loop`]) that it holds, each loop
    /// one instruction that carries its body; `None` for other functions
    /// (and for loops traced unrolled).
    pub fn array_program(&self) -> Option<&ArrayProgram> {
        match &self.code {
            Code::Scalar(_) => None,
            Code::Hosted(c) => Some(c.program()),
        }
    }

    /// Test hook of the native backend (feature `jit`): how many array map
    /// bodies run as compiled block kernels so far, and how many maps
    /// there are (zeros for a program on the scalar trace).
    #[doc(hidden)]
    pub fn native_kernels(&self) -> (usize, usize) {
        match &self.code {
            Code::Scalar(_) => (0, 0),
            Code::Hosted(c) => c.native_kernels(),
        }
    }

    /// Evaluates `f(x)` and writes `∇f(x)` into `grad`.
    ///
    /// Shapes: `x` and `grad` have `n` entries (the length of `x0`).
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) for wrong lengths; errors of re-tracing.
    pub fn eval(&mut self, x: &[f64], grad: &mut [f64]) -> Result<f64> {
        check_len("Gradient: x", self.n, x.len())?;
        check_len("Gradient: grad", self.n, grad.len())?;
        let (f, regs, out) = (&self.f, &mut self.regs, &mut self.out);
        run_or_retrace(
            &mut self.code,
            || build(f, x),
            |c| match c {
                Code::Scalar(p) => {
                    p.eval_f64(regs, x, out)?;
                    grad.copy_from_slice(&out[1..]);
                    Ok(out[0])
                }
                Code::Hosted(core) => core.run(x, grad),
            },
        )
    }
}

/// The gradient program of `f` traced at `x`: from the scalar trace, or,
/// for a function with loops, from the array trace ([`trace_or_host`]).
/// (`f` behind `dyn`, so that this is compiled once, not once per
/// function.)
fn build(f: &dyn LeafFunction, x: &[f64]) -> Result<GradientCode> {
    let n = x.len();
    if let Some(af) = f.array_function() {
        let core = GradientCore::new(&trace_scalar(af, x)?, n)?;
        return Ok(Code::Hosted(Box::new(core)));
    }
    let code = trace_or_host(&mut |t| f.call_leaves(t), x, |p| {
        GradientCore::new(p, n).map(Box::new)
    })?;
    Ok(match code {
        Code::Scalar(t) => Code::Scalar(Executable::new(gradient_program(t, n)?.into_schedule())),
        Code::Hosted(c) => Code::Hosted(c),
    })
}

/// The gradient program of `f` on the scalar trace, loops unrolled: for
/// points other than `f64`, which the array trace's programs do not take.
fn build_unrolled(f: &dyn LeafFunction, x: &[f64]) -> Result<Executable> {
    let (t, _) = trace_builder_at(scalar(|t| f.call_leaves(t)), x)?;
    Ok(Executable::new(
        gradient_program(t, x.len())?.into_schedule(),
    ))
}
