//! Derivatives of a function of one variable: [`derivative`],
//! [`derivative_with_error`] and the compiled [`Derivatives`], in Taylor
//! mode.

use super::{
    is_f64, run_or_retrace, scalar, taylor_or_host, trace_at, trace_fallible, Code, IntoTraced,
};
use std::ops::Add;

use generic_array::{ArrayLength, GenericArray};
use typenum::{Add1, IsLessOrEqual, True, Unsigned, B1};

use crate::array::ArrayProgram;
use crate::backend::{Executable, Registers};
use crate::error::{Error, Result};
use crate::functor::forward::pushforward_into;
use crate::functor::taylor::scale_by_factorials;
use crate::functor::{MaxTaylorOrder, TaylorProgram};
use crate::program::trace::Tracer;
use crate::program::{Builder, Program, Var};
use crate::real::Real;

/// All derivatives `[f(x), f′(x), …, f⁽ᴺ⁾(x)]` of a scalar function of one
/// variable, in Taylor mode: the jet of `f` along `x + t` to degree `N`,
/// whose coefficient `k` times `k!` is `f⁽ᵏ⁾(x)` (the book's chapter
/// "Taylor mode"). The cost grows like `N²`, so high orders are cheap:
/// order 50 costs a few thousand operations per primitive.
///
/// The nested ∂⃖ᴺ construction of the same numbers stays available as
/// [`crate::functor::nested_derivatives`], the independent check.
///
/// Shapes: the result has `N + 1` entries. `N` is at most
/// [`crate::functor::MAX_TAYLOR_ORDER`] (170) at compile time.
///
/// The point may be any [`Real`] (so the call nests, as [`gradient`](fn@crate::gradient)
/// does): at `f64` points the jet runs in Taylor mode; at tracer points
/// inside another trace, or num-dual points, the derivatives come from ∂⃗
/// applied `N` times to the traced program and evaluated on `T` (the
/// Taylor program runs on `f64` jets only), whose size grows faster with
/// `N`: fine for the low orders nesting asks for.
///
/// Accuracy: high orders of products lose digits to cancellation in the
/// jet's sums (`eˣ sin x` about `k/2` bits at order `k`, none left near
/// order 110), while a single elementary function stays right to about
/// `10⁻¹³` at order 170. [`derivative_with_error`] returns each derivative
/// with an estimate of its rounding error: use it wherever high orders
/// matter (the book's "Taylor mode", "Accuracy at high orders", says why
/// this function does not refuse on its own). Infinite or NaN derivatives
/// (IEEE limits at singular points) are returned as they are.
///
/// Loops: at `f64` points, a function with [`crate::fold`] or
/// [`crate::while_loop`] is traced on the array trace, each loop one
/// instruction that carries the jets, as [`gradient`](fn@crate::gradient) says; `f` is then
/// called two or three times.
///
/// # Errors
///
/// [`Error::ForeignTracer`] if `f` used a tracer from a finished trace;
/// [`Error::CapturedOutsideTrace`] if it closes over tracers while `x` is
/// not a tracer; the error `f` returns, if it returns a `Result`.
///
/// ```compile_fail,E0271
/// use optic_ad::{derivative, Real};
/// use optic_ad::typenum::U171;
///
/// let _ = derivative::<U171, _, _>(|x| x.sin(), 0.3);
/// ```
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{derivative, Real};
/// use optic_ad::typenum::{U3, U40};
///
/// let x = 0.4_f64;
/// let d = derivative::<U3, _, _>(|x| x.sin(), x).unwrap();
/// assert_relative_eq!(d[0], x.sin());
/// assert_relative_eq!(d[1], x.cos());
/// assert_relative_eq!(d[2], -x.sin());
/// assert_relative_eq!(d[3], -x.cos());
/// // Order 40: the 40th derivative of sin is sin.
/// let d = derivative::<U40, _, _>(|x| x.sin(), x).unwrap();
/// assert_relative_eq!(d[40], x.sin(), max_relative = 1e-12);
/// ```
pub fn derivative<N, T, R>(mut f: impl FnMut(Tracer) -> R, x: T) -> Result<GenericArray<T, Add1<N>>>
where
    N: Unsigned + Add<B1> + IsLessOrEqual<MaxTaylorOrder, Output = True>,
    Add1<N>: ArrayLength,
    T: Real,
    R: IntoTraced<Tracer>,
{
    derivative_of::<N, T>(&mut |t| f(t).into_traced(), x)
}

/// [`derivative`] with `f` behind a reference, so that this body is
/// compiled once per order and scalar type, not once per function.
fn derivative_of<N, T>(
    f: &mut dyn FnMut(Tracer) -> Result<Tracer>,
    x: T,
) -> Result<GenericArray<T, Add1<N>>>
where
    N: Unsigned + Add<B1> + IsLessOrEqual<MaxTaylorOrder, Output = True>,
    Add1<N>: ArrayLength,
    T: Real,
{
    if is_f64::<T>() {
        let x = x.primal();
        let order = N::to_usize();
        let mut g = |t: &[Tracer]| f(t[0]);
        let mut t = match taylor_or_host(&mut g, &[x], order)? {
            Code::Scalar(t) => t,
            Code::Hosted(mut d) => {
                // Code with loops: the jets carried through the loops.
                let mut out = GenericArray::<f64, Add1<N>>::default();
                d.eval(&[x], &[1.0], &mut out)?;
                return Ok(cast_array(&out));
            }
        };
        let mut d = GenericArray::<f64, Add1<N>>::default();
        univariate(&mut t, x, &mut d, None)?;
        return Ok(cast_array(&d));
    }
    let (p, inputs) = trace_at(scalar(|t: &[Tracer]| f(t[0])), &[x])?;
    let q = univariate_program(&p, N::to_usize())?;
    to_array(q.eval(&inputs)?)
}

/// [`derivative`] at an `f64` point, with an estimate of each
/// derivative's rounding error beside it: `(d, err)` with
/// `|d[k] − f⁽ᵏ⁾(x)| ≲ err[k]` (absolute, in the units of `f⁽ᵏ⁾`), by
/// [`TaylorProgram::eval_with_error`], which says how the estimate is made
/// and how it is checked. Nothing is refused: read `err` to see which
/// orders are worth having. A non-finite derivative has the estimate `+∞`.
///
/// Shapes: both arrays have `N + 1` entries, `N ≤ 170`.
///
/// # Errors
///
/// [`Error::ForeignTracer`] if `f` used a tracer from a finished trace;
/// [`Error::CapturedOutsideTrace`] if it closes over tracers; the error
/// `f` returns, if it returns a `Result`.
///
/// # Example
///
/// ```
/// use optic_ad::{derivative_with_error, Real};
/// use optic_ad::typenum::U170;
///
/// // dᵏ/dxᵏ eˣ sin x = 2^{k/2} eˣ sin(x + kπ/4).
/// let f = |k: i32, x: f64| 2f64.powf(f64::from(k) / 2.0) * x.exp() * (x + f64::from(k) * std::f64::consts::FRAC_PI_4).sin();
/// let (d, err) = derivative_with_error::<U170, _>(|x| x.exp() * x.sin(), 0.3).unwrap();
/// // Order 20 is right and says so; order 150 is not, and says so too.
/// assert!((d[20] - f(20, 0.3)).abs() <= err[20] && err[20] < 1e-10 * d[20].abs());
/// assert!(err[150] > d[150].abs());
/// ```
#[allow(clippy::type_complexity)]
pub fn derivative_with_error<N, R>(
    f: impl FnOnce(Tracer) -> R,
    x: f64,
) -> Result<(GenericArray<f64, Add1<N>>, GenericArray<f64, Add1<N>>)>
where
    N: Unsigned + Add<B1> + IsLessOrEqual<MaxTaylorOrder, Output = True>,
    Add1<N>: ArrayLength,
    R: IntoTraced<Tracer>,
{
    let mut t = traced_univariate(f, x, N::to_usize())?;
    let mut d = GenericArray::<f64, Add1<N>>::default();
    let mut err = GenericArray::<f64, Add1<N>>::default();
    univariate(&mut t, x, &mut d, Some(&mut err))?;
    Ok((d, err))
}

/// `[f, f′, …]` into `out` (one more than the degree), and with `err`
/// their error estimates ([`TaylorProgram::eval_with_error`]): the jet
/// along `x + t`, its coefficient `k` scaled by `k!`. Zeros come out as
/// `+0.0`.
fn univariate(
    t: &mut TaylorProgram,
    x: f64,
    out: &mut [f64],
    err: Option<&mut [f64]>,
) -> Result<()> {
    let mut input = vec![0.0; out.len()];
    along_x_plus_t(&mut input, x);
    match err {
        Some(err) => {
            t.eval_with_error(&input, out, err)?;
            scale_by_factorials(err);
        }
        None => t.eval(&input, out)?,
    }
    scale_by_factorials(out);
    Ok(())
}

/// The input jet of the curve `x + t` (coefficients past the first two
/// left as they are, zero).
fn along_x_plus_t(input: &mut [f64], x: f64) {
    input[0] = x;
    if let Some(slope) = input.get_mut(1) {
        *slope = 1.0;
    }
}

/// `v` as an array of its length `M`.
pub(super) fn to_array<T, M: ArrayLength>(v: Vec<T>) -> Result<GenericArray<T, M>> {
    let len = v.len();
    GenericArray::try_from_iter(v).map_err(|_| Error::MissingBlock {
        block: 0,
        width: len,
    })
}

/// An `f64` array as an array of `T` constants (`T` is `f64` where this is
/// called).
pub(super) fn cast_array<T: Real, M: ArrayLength>(a: &GenericArray<f64, M>) -> GenericArray<T, M> {
    a.iter().map(|&v| T::cst(v)).collect()
}

/// The program `(t, z…) ↦ [g, ∂g/∂t, …, ∂ᵏg/∂tᵏ]` for a program `g` of one
/// output whose first input is `t`, with the other inputs `z` held fixed:
/// ∂⃗ applied `order` times, each time with tangent `ṫ = 1` and structural
/// zeros for `ż`, keeping the values so far and the tangent of the highest
/// derivative. It serves the Taylor-mode drivers where the point is not
/// `f64` (tracers inside another trace, or num-dual numbers): the Taylor
/// program runs on `f64` jets only, while this program evaluates on any
/// [`Real`]. Its size grows with the order like nested forward mode does,
/// which is fine for the low orders nesting asks for.
pub(super) fn univariate_program(p: &Program, order: usize) -> Result<Program> {
    let mut q = p.clone();
    for _ in 0..order {
        q = pushforward_program(&q, 1, Some(1.0));
    }
    Ok(q.positive_zero_outputs())
}

/// ∂⃗ of `p` with the tangents of its first `n` inputs free (`seed: None`:
/// `n` inputs after `p`'s own) or all fixed to the constant `seed`, and
/// those of the rest (captured values) structural zeros. Outputs: `p`'s
/// outputs, then the tangent of each (`seed: None`) or of the last
/// (`seed: Some(_)`), as one block. One builder pass.
pub(super) fn pushforward_program(p: &Program, n: usize, seed: Option<f64>) -> Program {
    let total = p.n_inputs();
    let mut b = Builder::with_capacity(3 * p.len());
    let xs: Vec<Var> = (0..total).map(|_| b.input()).collect();
    let mut xdots: Vec<Option<Var>> = match seed {
        None => (0..n).map(|_| Some(b.input())).collect(),
        Some(c) => {
            let c = b.constant(c);
            vec![Some(c); n]
        }
    };
    xdots.resize(total, None);
    let (map, tangent) = pushforward_into(&mut b, p, &xs, &xdots);
    let mut outs: Vec<Var> = p.outputs().iter().map(|o| map[o.index()]).collect();
    let tangents_of = match seed {
        None => p.outputs(),
        Some(_) => &p.outputs()[p.n_outputs().saturating_sub(1)..],
    };
    for o in tangents_of {
        let t = tangent[o.index()].unwrap_or_else(|| b.constant(0.0));
        outs.push(t);
    }
    b.finish_unchecked(&outs).positive_zero_outputs().into_dce()
}

/// Traces a scalar function of one variable at `x` and builds its Taylor
/// program of degree `order`.
fn traced_univariate<R: IntoTraced<Tracer>>(
    f: impl FnOnce(Tracer) -> R,
    x: f64,
    order: usize,
) -> Result<TaylorProgram> {
    let traced = trace_fallible(scalar(|t: &[Tracer]| f(t[0])), &[x])?;
    if !traced.captures.is_empty() {
        return Err(Error::CapturedOutsideTrace(traced.captures.len()));
    }
    TaylorProgram::new(&traced.program.positive_zero_outputs(), order)
}

/// The Taylor program of degree `order` of `f` at `x` for [`Derivatives`]:
/// from the scalar trace, or, for code with loops, the array trace's
/// directional one (the jets carried through the loops;
/// [`taylor_or_host`]).
fn univariate_code<R: IntoTraced<Tracer>>(
    f: &impl Fn(Tracer) -> R,
    x: f64,
    order: usize,
) -> Result<Code<TaylorProgram, Box<crate::array::LineJets>>> {
    let mut g = |t: &[Tracer]| f(t[0]).into_traced();
    Ok(match taylor_or_host(&mut g, &[x], order)? {
        Code::Scalar(t) => Code::Scalar(t),
        Code::Hosted(d) => Code::Hosted(Box::new(d)),
    })
}

/// Compiled `[f, f′, …, f⁽ᴺ⁾]` of a scalar function of one variable, in
/// Taylor mode: traced once, evaluated at many points without allocation
/// (the result is a stack array), re-traced only where a guard fails.
///
/// Computed as [`derivative`] describes. With the feature `jit`, orders
/// `N ≤ 3` are computed instead by ∂⃗ᴺ of the traced program (nested
/// forward mode) through [`Executable::eval_f64`](crate::Executable::eval_f64), which runs it as machine
/// code once it is hot, wherever that program can be compiled (no user
/// rules, at most 2¹⁵ instructions); the results then differ from Taylor
/// mode's in rounding only (derivatives of order ≥ 1 that are zero are
/// `+0.0` on both paths).
///
/// Loops: a function with [`crate::fold`] or [`crate::while_loop`] is
/// traced on the array trace, as [`Gradient`](crate::Gradient) says (each loop one
/// instruction that carries the jets, [`Derivatives::array_program`];
/// the native ∂⃗ᴺ path above is for code without loops);
/// [`Derivatives::eval_with_error`] is not available for it, and
/// [`Derivatives::eval_at`] at other scalars traces it again unrolled.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{Derivatives, Real};
/// use optic_ad::typenum::U3;
///
/// let mut d = Derivatives::<U3, _>::new(|t| t.exp() * t.sin(), 0.0).unwrap();
/// for &x in &[0.1, 0.2, 0.3] {
///     let v = d.eval(x).unwrap();
///     assert_relative_eq!(v[3], 2.0 * x.exp() * (x.cos() - x.sin()), max_relative = 1e-13);
/// }
/// ```
pub struct Derivatives<N, F>
where
    N: Unsigned + Add<B1>,
    Add1<N>: ArrayLength,
{
    f: F,
    /// The Taylor program: the scalar trace's, or for code with loops the
    /// array trace's.
    taylor: Code<TaylorProgram, Box<crate::array::LineJets>>,
    input: GenericArray<f64, Add1<N>>,
    out: GenericArray<f64, Add1<N>>,
    /// The program of [`Derivatives::eval_at`] at non-`f64` points, built
    /// on first use.
    generic: Option<Program>,
    /// With the native backend (feature `jit`), for orders up to
    /// [`NATIVE_ORDER`]: ∂⃗ᴺ of the traced program, which
    /// [`Derivatives::eval`] runs instead of the Taylor jets (the program
    /// is compiled to machine code once it is hot).
    native: Option<(Executable, Registers)>,
}

/// The highest order [`Derivatives`] runs as a native ∂⃗ᴺ program
/// (feature `jit`). Nested forward mode doubles the tangent parts at each
/// order while Taylor mode grows like N², so beyond this order the Taylor
/// jets stay.
const NATIVE_ORDER: usize = 3;

/// ∂⃗ᴺ of a Taylor program's trace, for [`Derivatives`] with the native
/// backend (`None` above [`NATIVE_ORDER`]). Also `None` where the program
/// could not run natively (user rules, or longer than the backend
/// compiles): there the Taylor jets are faster.
fn native_derivatives(
    t: &Code<TaylorProgram, Box<crate::array::LineJets>>,
    order: usize,
) -> Result<Option<(Executable, Registers)>> {
    let Code::Scalar(t) = t else {
        return Ok(None);
    };
    if !crate::backend::NATIVE || order > NATIVE_ORDER || !t.program().rules.is_empty() {
        return Ok(None);
    }
    let p = Executable::new(univariate_program(t.program(), order)?);
    if !p.compiles_natively() {
        return Ok(None);
    }
    Ok(Some((p, Registers::new())))
}

/// `[f, f′, …]` with `−0.0` derivatives as `+0.0` (the value left bit for
/// bit), as the Taylor path gives them ([`scale_by_factorials`](crate::functor::taylor::scale_by_factorials)).
fn positive_zero_derivatives<N: ArrayLength>(d: &GenericArray<f64, N>) -> GenericArray<f64, N> {
    let mut d = d.clone();
    for v in d.iter_mut().skip(1) {
        *v += 0.0;
    }
    d
}

impl<N, F> std::fmt::Debug for Derivatives<N, F>
where
    N: Unsigned + Add<B1>,
    Add1<N>: ArrayLength,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Derivatives")
            .field("order", &N::to_usize())
            .field(
                "program_len",
                &match &self.taylor {
                    Code::Scalar(t) => t.program().len(),
                    Code::Hosted(d) => d.program().program().len(),
                },
            )
            .finish()
    }
}

impl<N, F, R> Derivatives<N, F>
where
    N: Unsigned + Add<B1> + IsLessOrEqual<MaxTaylorOrder, Output = True>,
    Add1<N>: ArrayLength,
    F: Fn(Tracer) -> R,
    R: IntoTraced<Tracer>,
{
    /// Traces `f` at `x0` and builds its Taylor program.
    ///
    /// # Errors
    ///
    /// [`Error::ForeignTracer`] if `f` used a tracer from a finished trace;
    /// [`Error::CapturedOutsideTrace`] if it closes over tracers. `N` is
    /// at most [`crate::functor::MAX_TAYLOR_ORDER`] at compile time:
    ///
    /// ```compile_fail,E0271
    /// use optic_ad::{Derivatives, Real};
    /// use optic_ad::typenum::U171;
    ///
    /// let _ = Derivatives::<U171, _>::new(|x| x.sin(), 0.3);
    /// ```
    pub fn new(f: F, x0: f64) -> Result<Self> {
        let taylor = univariate_code(&f, x0, N::to_usize())?;
        Ok(Derivatives {
            f,
            native: native_derivatives(&taylor, N::to_usize())?,
            taylor,
            input: GenericArray::default(),
            out: GenericArray::default(),
            generic: None,
        })
    }

    /// The traced program of `f`, whose jets are propagated; `None` for
    /// code with loops, traced on the array trace
    /// ([`Derivatives::array_program`]).
    pub fn program(&self) -> Option<&Program> {
        match &self.taylor {
            Code::Scalar(t) => Some(t.program()),
            Code::Hosted(_) => None,
        }
    }

    /// For code with loops: the array program whose jets are propagated
    /// (each loop one instruction); `None` for the scalar trace's.
    pub fn array_program(&self) -> Option<&ArrayProgram> {
        match &self.taylor {
            Code::Scalar(_) => None,
            Code::Hosted(d) => Some(d.program().program()),
        }
    }

    /// `[f(x), f′(x), …, f⁽ᴺ⁾(x)]`.
    ///
    /// # Errors
    ///
    /// Errors of re-tracing where a guard fails.
    // Never inlined: in the caller's loop it measured slower (f‴ of
    // sin(x)·eˣ, scratch timing: 19.0 against 17.0 ns).
    #[inline(never)]
    pub fn eval(&mut self, x: f64) -> Result<GenericArray<f64, Add1<N>>> {
        // Once compiled, straight from the native code's registers; all
        // else (compiling, guards that fail, Taylor jets) out of line, so
        // that this path stays a small function.
        if let Some((p, regs)) = &mut self.native {
            if let Some(Ok(d)) = p.eval_f64_compiled(regs, &[x]) {
                if d.len() == self.out.len() {
                    return Ok(positive_zero_derivatives(GenericArray::from_slice(d)));
                }
            }
        }
        self.eval_general(x)
    }

    /// [`Derivatives::eval`] off its fast path.
    #[inline(never)]
    fn eval_general(&mut self, x: f64) -> Result<GenericArray<f64, Add1<N>>> {
        if let Some((p, regs)) = &mut self.native {
            return match p.eval_f64(regs, &[x], &mut self.out) {
                Ok(()) => Ok(positive_zero_derivatives(&self.out)),
                Err(Error::GuardFailed { .. }) => self.retrace_native(x),
                Err(e) => Err(e),
            };
        }
        self.eval_taylor(x)
    }

    /// [`Derivatives::eval`] by Taylor jets. Kept out of line (as is the
    /// re-tracing below), so that the hot path of `eval` is a small
    /// function with a small stack frame.
    #[inline(never)]
    fn eval_taylor(&mut self, x: f64) -> Result<GenericArray<f64, Add1<N>>> {
        let (f, input, out) = (&self.f, &mut self.input, &mut self.out);
        along_x_plus_t(input, x);
        let mut retraced = false;
        let scaled = run_or_retrace(
            &mut self.taylor,
            || {
                retraced = true;
                univariate_code(f, x, N::to_usize())
            },
            |t| match t {
                Code::Scalar(t) => t.eval(input, out).map(|()| false),
                // Derivatives already, not Taylor coefficients.
                Code::Hosted(d) => d.eval(&[x], &[1.0], out).map(|()| true),
            },
        )?;
        if !scaled {
            scale_by_factorials(out);
        }
        let d = self.out.clone();
        if retraced {
            // The new trace may have left or reached code with loops:
            // the native ∂⃗ᴺ program follows it.
            self.native = native_derivatives(&self.taylor, N::to_usize())?;
        }
        Ok(d)
    }

    /// A guard of the native ∂⃗ᴺ program failed at `x`: re-trace there,
    /// rebuild both programs and evaluate again.
    #[cold]
    #[inline(never)]
    fn retrace_native(&mut self, x: f64) -> Result<GenericArray<f64, Add1<N>>> {
        self.taylor = univariate_code(&self.f, x, N::to_usize())?;
        self.native = native_derivatives(&self.taylor, N::to_usize())?;
        match &mut self.native {
            Some((p, regs)) => p.eval_f64(regs, &[x], &mut self.out)?,
            None => return self.eval_taylor(x),
        }
        Ok(positive_zero_derivatives(&self.out))
    }

    /// `[f(x), f′(x), …, f⁽ᴺ⁾(x)]` by Taylor jets, with an estimate of each
    /// entry's rounding error beside it (absolute, in the units of
    /// `f⁽ᵏ⁾`), as [`derivative_with_error`] gives them. [`Derivatives::eval`]
    /// does not estimate (it would cost twice [`ERROR_SAMPLES`](crate::functor::ERROR_SAMPLES) more
    /// evaluations): call this once at representative points to learn
    /// which orders are worth having there, or wherever a result must be
    /// checked. High orders of products lose about half a bit per order
    /// (the book's "Taylor mode", "Accuracy at high orders").
    ///
    /// # Errors
    ///
    /// Errors of re-tracing where a guard fails; [`Error::Unsupported`]
    /// for code with loops, traced on the array trace (whose Taylor mode
    /// does not estimate errors: [`derivative_with_error`] traces the loops
    /// unrolled).
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::{Derivatives, Real};
    /// use optic_ad::typenum::U120;
    ///
    /// let mut d = Derivatives::<U120, _>::new(|x| x.exp() * x.sin(), 0.0).unwrap();
    /// let (v, err) = d.eval_with_error(0.3).unwrap();
    /// assert!(err[10] < 1e-13 * v[10].abs());
    /// assert!(err[120] > v[120].abs()); // nothing is left at order 120
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn eval_with_error(
        &mut self,
        x: f64,
    ) -> Result<(GenericArray<f64, Add1<N>>, GenericArray<f64, Add1<N>>)> {
        let (f, input) = (&self.f, &mut self.input);
        let mut out = GenericArray::<f64, Add1<N>>::default();
        let mut err = GenericArray::<f64, Add1<N>>::default();
        along_x_plus_t(input, x);
        run_or_retrace(
            &mut self.taylor,
            || univariate_code(f, x, N::to_usize()),
            |t| match t {
                Code::Scalar(t) => t.eval_with_error(input, &mut out, &mut err),
                Code::Hosted(d) => {
                    // Its guards first: where one fails, the code is traced
                    // again at x, which may have no loop there.
                    d.eval(&[x], &[1.0], &mut out)?;
                    Err(Error::Unsupported(
                        "error estimates of derivatives through loops",
                    ))
                }
            },
        )?;
        scale_by_factorials(&mut out);
        scale_by_factorials(&mut err);
        Ok((out, err))
    }

    /// `[f(x), f′(x), …, f⁽ᴺ⁾(x)]` at a point of any [`Real`] scalar:
    /// tracers, to use the compiled derivatives inside another trace, or
    /// num-dual numbers. At `f64` points this is [`Derivatives::eval`];
    /// otherwise it evaluates ∂⃗ᴺ of the traced program (nested forward
    /// mode, built on first use), because the Taylor program runs on `f64`
    /// jets only.
    ///
    /// As for [`Gradient::eval_at`](crate::Gradient::eval_at), `f` must not close over tracers of an
    /// enclosing trace; call [`derivative`] inside the trace for such
    /// closures.
    ///
    /// # Errors
    ///
    /// Errors of re-tracing where a guard fails.
    ///
    /// # Example
    ///
    /// ```
    /// use approx::assert_relative_eq;
    /// use optic_ad::{gradient, Derivatives, Real};
    /// use optic_ad::typenum::U2;
    ///
    /// // d/dx of f″(x) = d/dx (−sin x) = f‴(x) = −cos x.
    /// let mut d = Derivatives::<U2, _>::new(|t| t.sin(), 0.0).unwrap();
    /// let g = gradient(|x| Ok(d.eval_at(x[0])?[2]), &[0.7]).unwrap();
    /// assert_relative_eq!(g[0], -0.7_f64.cos(), max_relative = 1e-14);
    /// ```
    pub fn eval_at<T: Real>(&mut self, x: T) -> Result<GenericArray<T, Add1<N>>> {
        if is_f64::<T>() {
            return Ok(cast_array(&self.eval(x.primal())?));
        }
        let order = N::to_usize();
        if self.generic.is_none() {
            self.generic = Some(match &self.taylor {
                Code::Scalar(t) => univariate_program(t.program(), order)?,
                // Array programs evaluate on `f64`: the function traced
                // again on the scalar trace, its loops unrolled.
                Code::Hosted(_) => univariate_program(
                    traced_univariate(&self.f, x.primal(), order)?.program(),
                    order,
                )?,
            });
        }
        let f = &self.f;
        let out = run_or_retrace(
            &mut self.generic,
            || {
                // A guard failed: re-trace at this point, as every compiled
                // driver does. The `f64` programs re-trace themselves where
                // their own guards fail, on the array trace for code with
                // loops, so they are left as they are.
                let t = traced_univariate(f, x.primal(), order)?;
                Ok(Some(univariate_program(t.program(), order)?))
            },
            |g| match g {
                Some(g) => g.eval(&[x]),
                None => Err(Error::MissingBlock {
                    block: 0,
                    width: order + 1,
                }),
            },
        )?;
        to_array(out)
    }
}
