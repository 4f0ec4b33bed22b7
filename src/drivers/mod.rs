//! Drivers: gradient, vjp, hvp, hessian and n-th derivatives, read off the
//! optics that ∂⃖ᴺ builds (the book's chapter "Drivers").
//!
//! Every driver traces the user's function once at the given point,
//! builds the derived program by repeating ∂⃖ ([`crate::nest`]), fixes the
//! seeds with [`Program::specialize`], and evaluates; the n-th-derivative
//! drivers ([`derivative`], [`Derivatives`], [`taylor()`], [`d3`]) run the
//! traced program in Taylor mode instead ([`crate::functor::TaylorProgram`]). The compiled drivers
//! [`Gradient`] and [`Hvp`] keep their programs and re-evaluate them at new
//! points without re-recording, re-tracing only where a guard fails.
//!
//! # NaN and ∞
//!
//! Values follow IEEE 754: a NaN in the input gives NaN in every result
//! that depends on it; no driver rejects non-finite input. Derived programs
//! use structural zeros (see [`crate::Builder`]): a cotangent that is known
//! to be zero stays exactly zero even where a primal value is infinite.
//! Inside programs a structural zero is the constant `−0.0`; a derivative
//! that is structurally zero is returned by every driver as `+0.0`.

mod directional;

pub use directional::Directional;

use std::borrow::Cow;
use std::ops::Add;

use generic_array::{ArrayLength, GenericArray};
use typenum::{Add1, IsLessOrEqual, True, Unsigned, B1};

use crate::array::{
    trace_hosted, trace_scalar, ArrayProgram, GradientCore, HvpCore, PullbackCore, TArray, TScalar,
};
use crate::backend::{Executable, Registers, LANES};
use crate::differentiable::{Differentiable, Point, Tangent};
use crate::error::{check_len, Error, Result};
use crate::functor::forward::{pushforward_in_place, pushforward_into};
use crate::functor::nested::nest;
use crate::functor::reverse::pullback_in_place;
use crate::functor::taylor::scale_by_factorials;
use crate::functor::{forward, MaxTaylorOrder, TaylorProgram};
use crate::program::trace::{
    trace_builder, trace_builder_hosting, LoopOnHost, Traced, TracedBuilder, Tracer, LOOP_ON_HOST,
};
use crate::program::{Builder, Program, Var, Workspace};
use crate::program::{Stage, Staged, StagedWorkspace};
use crate::real::Real;

fn check_nonempty(what: &'static str, n: usize) -> Result<()> {
    if n == 0 {
        Err(Error::EmptyInput(what))
    } else {
        Ok(())
    }
}

/// `f` on structured points as a closure of the flat leaves: the tracers
/// are put back into the point's shape (for a flat point, the slice
/// itself) before `f` sees them.
fn on_leaves<'a, P, O, R>(
    point: &'a P,
    f: impl FnOnce(&P::Arg<Tracer>) -> R + 'a,
) -> impl FnOnce(&[Tracer]) -> Result<O> + 'a
where
    P: Point + ?Sized,
    R: IntoTraced<O>,
{
    move |t| {
        point
            .with_arg(t, f)
            .ok_or(Error::StructureMismatch { what: "point" })?
            .into_traced()
    }
}

/// [`on_leaves`] for a function the driver may call more than once (to
/// trace code with loops again on the array trace: [`trace_or_host`]).
fn on_leaves_mut<'a, P, O, R>(
    point: &'a P,
    mut f: impl FnMut(&P::Arg<Tracer>) -> R + 'a,
) -> impl FnMut(&[Tracer]) -> Result<O> + 'a
where
    P: Point + ?Sized,
    R: IntoTraced<O>,
{
    move |t| {
        point
            .with_arg(t, &mut f)
            .ok_or(Error::StructureMismatch { what: "point" })?
            .into_traced()
    }
}

/// A value of the point's shape from its leaves (a gradient, a
/// Hessian-vector product).
fn in_shape<P: Point + ?Sized, T: Real>(point: &P, leaves: Vec<T>) -> Result<P::Owned<T>> {
    point
        .rebuild(leaves)
        .ok_or(Error::StructureMismatch { what: "point" })
}

/// The leaves of a direction (or any second point) after checking that it
/// has the point's structure: its number of leaves (a flat point's length,
/// [`Error::LengthMismatch`]) and, for structured points, its leaves'
/// names ([`Error::StructureMismatch`]).
fn direction_leaves<'a, P, Q>(
    what: &'static str,
    point: &P,
    shape: &mut PointShape,
    d: &'a Q,
) -> Result<Cow<'a, [P::Scalar]>>
where
    P: Point + ?Sized,
    Q: Point<Scalar = P::Scalar> + ?Sized,
{
    let leaves = d.leaves();
    check_len(what, shape.len, leaves.len())?;
    if !(P::FLAT && Q::FLAT)
        && *shape.names.get_or_insert_with(|| point.leaf_names()) != d.leaf_names()
    {
        return Err(Error::StructureMismatch { what });
    }
    Ok(leaves)
}

/// What [`direction_leaves`] compares directions with: the point's number
/// of leaves, and its leaf names once one direction needed them (computed
/// once per call of a driver, however many directions it takes).
struct PointShape {
    len: usize,
    names: Option<Vec<String>>,
}

impl PointShape {
    fn new(len: usize) -> Self {
        PointShape { len, names: None }
    }
}

/// What a differentiated closure may return: its traced value(s) `O`, or
/// `Result<O>`, so that an error inside it (typically from a driver called
/// inside it, on tracers) ends the outer driver with that error instead of
/// an `unwrap`.
///
/// Implemented for [`Tracer`] and `Result<Tracer>` (scalar functions),
/// and for `Vec<Tracer>` and `Result<Vec<Tracer>>` (vector functions).
/// Type inference picks the `Result` form from a `?` or an `Ok(…)` in the
/// closure; no annotation is needed.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{gradient, Error, Real, Tracer};
///
/// // g(x) = ∂/∂y (x y²) at y = x, i.e. 2x², by a gradient inside a gradient.
/// let g = gradient(
///     |x| {
///         let inner = gradient(|y| x[0] * y[0] * y[0], &[x[0]])?;
///         Ok(inner[0])
///     },
///     &[3.0],
/// )
/// .unwrap();
/// assert_relative_eq!(g[0], 12.0); // d/dx 2x² = 4x
///
/// // An inner error (here: a point of the wrong length) comes out as the
/// // outer driver's `Err`.
/// let r = gradient(
///     |x| Ok(optic_ad::hvp(|y| y[0] * y[1], &[x[0], x[0]], &[x[0]])?[0]),
///     &[3.0],
/// );
/// assert!(matches!(r, Err(Error::LengthMismatch { .. })));
/// ```
pub trait IntoTraced<O>: private::Sealed {
    /// The traced value(s), or the closure's error.
    ///
    /// # Errors
    ///
    /// The error the closure returned.
    fn into_traced(self) -> Result<O>;
}

mod private {
    pub trait Sealed {}
    impl Sealed for super::Tracer {}
    impl Sealed for crate::Result<super::Tracer> {}
    impl Sealed for Vec<super::Tracer> {}
    impl Sealed for crate::Result<Vec<super::Tracer>> {}
}

impl IntoTraced<Tracer> for Tracer {
    fn into_traced(self) -> Result<Tracer> {
        Ok(self)
    }
}

impl IntoTraced<Tracer> for Result<Tracer> {
    fn into_traced(self) -> Result<Tracer> {
        self
    }
}

impl IntoTraced<Vec<Tracer>> for Vec<Tracer> {
    fn into_traced(self) -> Result<Vec<Tracer>> {
        Ok(self)
    }
}

impl IntoTraced<Vec<Tracer>> for Result<Vec<Tracer>> {
    fn into_traced(self) -> Result<Vec<Tracer>> {
        self
    }
}

/// A scalar function of a point's leaves, as the compiled drivers
/// [`Gradient`] and [`Hvp`] hold it: a closure of `&[Tracer]` (the flat
/// forms, [`Gradient::new`]), or a function of a structured point with the
/// point's shape kept beside it ([`OnPoint`], [`Gradient::structured`]).
/// Sealed.
pub trait LeafFunction: leaf_private::Sealed {
    /// `f` at these leaves, traced.
    ///
    /// # Errors
    ///
    /// The function's own error; [`Error::StructureMismatch`] if the
    /// leaves do not fit the point.
    fn call_leaves(&self, leaves: &[Tracer]) -> Result<Tracer>;
}

mod leaf_private {
    use crate::array::{TArray, TScalar};
    use crate::error::Result;

    /// A function written against the array trace.
    pub type ArrayFn<'a> = dyn Fn(&TArray) -> Result<TScalar> + 'a;

    pub trait Sealed {
        /// The function, where it is written against the array trace
        /// ([`super::OnArray`]): traced there directly, never on scalar
        /// tracers.
        fn array_function(&self) -> Option<&ArrayFn<'_>> {
            None
        }
    }
}

/// Where a function written against the array trace is asked for at
/// points other than `f64`.
const ARRAY_FUNCTION_ON_TRACERS: Error = Error::Unsupported(
    "a function of the array trace (`Gradient::array`, `Hvp::array`) is evaluated at `f64` \
     points only; write it against `Array` and trace it on `Dense<Tracer>` for other scalars",
);

/// A function written against the array trace, `Fn(&TArray) ->
/// Result<TScalar>`: the `F` of a [`Gradient`] or [`Hvp`] made by
/// [`Gradient::array`] or [`Hvp::array`]. Its programs are array programs
/// (one instruction per array operation), evaluated at `f64` points.
#[derive(Clone)]
pub struct OnArray<F>(F);

impl<F> std::fmt::Debug for OnArray<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnArray")
    }
}

impl<F: Fn(&TArray) -> Result<TScalar>> leaf_private::Sealed for OnArray<F> {
    fn array_function(&self) -> Option<&leaf_private::ArrayFn<'_>> {
        Some(&self.0)
    }
}

impl<F: Fn(&TArray) -> Result<TScalar>> LeafFunction for OnArray<F> {
    /// Refused: the function takes array tracers only.
    fn call_leaves(&self, _: &[Tracer]) -> Result<Tracer> {
        Err(ARRAY_FUNCTION_ON_TRACERS)
    }
}

impl<F, R> leaf_private::Sealed for F
where
    F: Fn(&[Tracer]) -> R,
    R: IntoTraced<Tracer>,
{
}

impl<F, R> LeafFunction for F
where
    F: Fn(&[Tracer]) -> R,
    R: IntoTraced<Tracer>,
{
    fn call_leaves(&self, leaves: &[Tracer]) -> Result<Tracer> {
        self(leaves).into_traced()
    }
}

/// A function of a structured point, with the point whose shape (`Vec`
/// lengths, data fields) its traced programs were built for: the `F` of a
/// [`Gradient`] or [`Hvp`] made by `structured`.
#[derive(Clone)]
pub struct OnPoint<P, F> {
    point: P,
    f: F,
    /// The leaves of the latest point, kept to be reused.
    leaves: Vec<f64>,
}

impl<P, F> std::fmt::Debug for OnPoint<P, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnPoint")
            .field("leaves", &self.leaves.len())
            .finish()
    }
}

impl<P, F> leaf_private::Sealed for OnPoint<P, F> {}

impl<P, F, R> LeafFunction for OnPoint<P, F>
where
    P: Point<Scalar = f64>,
    F: Fn(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Tracer>,
{
    fn call_leaves(&self, leaves: &[Tracer]) -> Result<Tracer> {
        on_leaves(&self.point, &self.f)(leaves)
    }
}

impl<P, F, R> OnPoint<P, F>
where
    P: Differentiable<Scalar = f64> + Point<Scalar = f64> + Clone,
    F: Fn(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Tracer>,
{
    fn new(f: F, point: &P) -> Self {
        OnPoint {
            point: point.clone(),
            f,
            leaves: Vec::new(),
        }
    }

    /// The leaves of `p`, in the kept buffer (which the caller gives back
    /// with [`OnPoint::restore`]), after checking that `p` has the shape
    /// the programs were built for; and, where `p`'s data fields differ
    /// from those they were traced with, the point they were traced at:
    /// `p` is then kept as the new point, and the caller traces again
    /// (and gives the old point back with [`OnPoint::restore`] if that
    /// fails, so that the programs and the point stay a pair).
    fn take_leaves(&mut self, what: &'static str, p: &P) -> Result<(Vec<f64>, Option<P>)> {
        if !self.point.same_shape(p) {
            return Err(Error::StructureMismatch { what });
        }
        let old = (!self.point.same_data(p)).then(|| std::mem::replace(&mut self.point, p.clone()));
        let mut x = std::mem::take(&mut self.leaves);
        x.clear();
        p.flatten_into(&mut x);
        Ok((x, old))
    }

    /// Gives back the leaf buffer, and the point the programs were traced
    /// at where tracing at a new point failed.
    fn restore(&mut self, leaves: Vec<f64>, old: Option<P>) {
        self.leaves = leaves;
        if let Some(old) = old {
            self.point = old;
        }
    }
}

/// Traces a fallible closure: the closure's error, if it returns one,
/// ends the trace and is returned.
fn trace_fallible<F>(f: F, x: &[f64]) -> Result<Traced>
where
    F: FnOnce(&[Tracer]) -> Result<Vec<Tracer>>,
{
    Ok(trace_fallible_builder(f, x)?.finish())
}

/// [`trace_fallible`], handing back the builder the trace was recorded in.
fn trace_fallible_builder<F>(f: F, x: &[f64]) -> Result<TracedBuilder>
where
    F: FnOnce(&[Tracer]) -> Result<Vec<Tracer>>,
{
    let mut err = None;
    let traced = trace_builder(
        |t| {
            f(t).unwrap_or_else(|e| {
                err = Some(e);
                Vec::new()
            })
        },
        x,
    );
    match err {
        Some(e) => Err(e),
        None => traced,
    }
}

/// Traces at the primal values of `x`; returns the program with all inputs
/// (point, then captures) as one block, and the evaluation inputs.
fn trace_at<T: Real, F>(f: F, x: &[T]) -> Result<(Program, Vec<T>)>
where
    F: FnOnce(&[Tracer]) -> Result<Vec<Tracer>>,
{
    let (t, inputs) = trace_builder_at(f, x)?;
    Ok((traced_program(t), inputs))
}

/// [`trace_at`], handing back the builder the trace was recorded in, so
/// that the derivative is built on in it without copying the primal.
fn trace_builder_at<T: Real, F>(f: F, x: &[T]) -> Result<(TracedBuilder, Vec<T>)>
where
    F: FnOnce(&[Tracer]) -> Result<Vec<Tracer>>,
{
    let traced = trace_fallible_builder(f, &primals(x))?;
    let mut inputs = x.to_vec();
    // A captured tracer of an enclosing trace becomes an input where the
    // point is itself a tracer (a driver called inside a trace); anywhere
    // else the closure captured a tracer it cannot be given.
    for c in &traced.captures {
        let c: &dyn std::any::Any = c;
        let c = c.downcast_ref::<T>().copied();
        inputs.push(c.ok_or(Error::CapturedOutsideTrace(traced.captures.len()))?);
    }
    Ok((traced, inputs))
}

/// The scalar program of a finished trace, its input and output one block
/// each ([`trace_at`]).
fn traced_program(t: TracedBuilder) -> Program {
    let Traced { mut program, .. } = t.finish();
    program.input_blocks = vec![program.n_inputs()];
    program.output_blocks = vec![program.n_outputs()];
    program
}

/// The trace of a function of several results at `x` for the one-shot
/// drivers: at an `f64` point, code with loops goes to the array trace,
/// where `host` builds the driver's programs ([`trace_or_host_many`]);
/// anywhere else (at other scalars, and where the array trace declines)
/// the scalar program and its evaluation inputs ([`trace_at`]), loops
/// unrolled.
fn trace_or_host_at<T: Real, H>(
    f: &mut dyn FnMut(&[Tracer]) -> Result<Vec<Tracer>>,
    x: &[T],
    host: impl FnOnce(&ArrayProgram) -> Result<H>,
) -> Result<Code<(Program, Vec<T>), H>> {
    if is_f64::<T>() {
        return Ok(match trace_or_host_many(f, &primals(x), host)? {
            Code::Scalar(t) => Code::Scalar((traced_program(t), x.to_vec())),
            Code::Hosted(h) => Code::Hosted(h),
        });
    }
    trace_at(f, x).map(Code::Scalar)
}

/// A scalar closure as a fallible vector closure, for [`trace_at`].
fn scalar<R: IntoTraced<Tracer>>(
    f: impl FnOnce(&[Tracer]) -> R,
) -> impl FnOnce(&[Tracer]) -> Result<Vec<Tracer>> {
    move |t| Ok(vec![f(t).into_traced()?])
}

/// Whether `T` is `f64`, whose points take the compiled f64 paths
/// (Taylor mode, the staged Hessian-vector product) instead of evaluating
/// derived programs generically.
fn is_f64<T: Real>() -> bool {
    std::any::TypeId::of::<T>() == std::any::TypeId::of::<f64>()
}

/// Re-tracing where a guard fails, written once for every compiled driver.
///
/// `run` evaluates what was built from the user's function at the current
/// point. Where a recorded comparison no longer holds
/// ([`Error::GuardFailed`]), `rebuild` traces the function again at this
/// point, the result replaces `built`, and `run` is tried once more; any
/// other outcome is returned as it is.
fn run_or_retrace<S, R>(
    built: &mut S,
    rebuild: impl FnOnce() -> Result<S>,
    mut run: impl FnMut(&mut S) -> Result<R>,
) -> Result<R> {
    match run(built) {
        Err(Error::GuardFailed { .. }) => {
            *built = rebuild()?;
            run(built)
        }
        other => other,
    }
}

/// What a driver built from the user's function at an `f64` point: from
/// the scalar trace (`S`), or, where the function has a loop, from the
/// array trace (`H`), on which the loop is one instruction that carries
/// its body (the scalar IR has no value to hold a loop's stored carries,
/// so there the loop would be unrolled, one copy of its body per step).
#[derive(Clone)]
enum Code<S, H> {
    Scalar(S),
    Hosted(H),
}

/// The first trace of a driver at the `f64` point `x`. A loop met on the
/// scalar trace stops it (by unwinding, caught here); the function is
/// then traced on the array trace and `host` builds the driver's programs
/// from that; where that fails (a comparison or a value read inside the
/// loop body, a driver nested in the function that reads its tracers),
/// the function is traced again on the scalar trace with its loops
/// unrolled, as it always could be. So `f` is called once for code without
/// loops and two or three times for code with them.
fn trace_or_host<H>(
    f: &mut dyn FnMut(&[Tracer]) -> Result<Tracer>,
    x: &[f64],
    host: impl FnOnce(&ArrayProgram) -> Result<H>,
) -> Result<Code<TracedBuilder, H>> {
    trace_or_host_with(&mut |t| Ok(vec![f(t)?]), x, false, host)
}

/// [`trace_or_host`] for a function with several results: on the array
/// trace its program's one output is the vector of them
/// ([`crate::array::trace_hosted`]).
fn trace_or_host_many<H>(
    f: &mut dyn FnMut(&[Tracer]) -> Result<Vec<Tracer>>,
    x: &[f64],
    host: impl FnOnce(&ArrayProgram) -> Result<H>,
) -> Result<Code<TracedBuilder, H>> {
    trace_or_host_with(f, x, true, host)
}

/// [`trace_or_host`] and [`trace_or_host_many`]: the array trace's
/// program has a vector output where `vector` is true, else a scalar one.
fn trace_or_host_with<H>(
    f: &mut dyn FnMut(&[Tracer]) -> Result<Vec<Tracer>>,
    x: &[f64],
    vector: bool,
    host: impl FnOnce(&ArrayProgram) -> Result<H>,
) -> Result<Code<TracedBuilder, H>> {
    let mut err = None;
    let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        trace_builder_hosting(
            |t| match f(t) {
                Ok(y) => y,
                Err(e) => {
                    err = Some(e);
                    Vec::new()
                }
            },
            x,
        )
    }));
    let (traced, saw_loop) = match first {
        Ok(r) => r,
        // Unwound at a loop (the frame is gone with the unwinding).
        Err(payload) if payload.is::<LoopOnHost>() => (Err(LOOP_ON_HOST), true),
        Err(payload) => std::panic::resume_unwind(payload),
    };
    if saw_loop {
        if let Ok(h) = trace_hosted(f, x, vector).and_then(|p| host(&p)) {
            return Ok(Code::Hosted(h));
        }
        let (t, _) = trace_builder_at(|t: &[Tracer]| f(t), x)?;
        return Ok(Code::Scalar(t));
    }
    if let Some(e) = err {
        return Err(e);
    }
    let t = traced?;
    if !t.captures.is_empty() {
        // As `trace_builder_at` at an `f64` point: a captured tracer
        // cannot be given there.
        return Err(Error::CapturedOutsideTrace(t.captures.len()));
    }
    Ok(Code::Scalar(t))
}

/// The Taylor program of degree `order` of `f` traced at the `f64` point
/// `x`: from the scalar trace, or, for a function with loops, the array
/// trace's directional Taylor program, whose loops carry the jets
/// ([`trace_or_host`]).
fn taylor_or_host(
    f: &mut dyn FnMut(&[Tracer]) -> Result<Tracer>,
    x: &[f64],
    order: usize,
) -> Result<Code<TaylorProgram, crate::array::LineJets>> {
    let n = x.len();
    Ok(
        match trace_or_host(f, x, |p| crate::array::LineJets::from_program(p, n, order))? {
            // A structurally zero output (the constant −0.0) as +0.0, as
            // the other drivers return it.
            Code::Scalar(t) => Code::Scalar(TaylorProgram::new(
                &t.finish().program.positive_zero_outputs(),
                order,
            )?),
            Code::Hosted(d) => Code::Hosted(d),
        },
    )
}

/// The output blocks of [`gradient_program`]: `f(x)` (block 0, one
/// value), then `∇f`.
mod gradient_blocks {
    /// `∇f`, with respect to the point.
    pub const GRADIENT: usize = 1;
}

/// The gradient program `x ↦ (f(x), ∇f(x))` of a traced scalar function:
/// ∂⃖f with seed `ȳ = 1`, keeping the gradient with respect to the first
/// `n` inputs. Its input block is all the inputs (point, then captures),
/// its output blocks are [`gradient_blocks`]. The pullback is emitted into
/// the builder the trace was recorded in, the seed folded in as it goes:
/// one builder pass, and the primal is not copied.
fn gradient_program(t: TracedBuilder, n: usize) -> Result<Program> {
    let (b, y, grads) = gradient_in(t, n)?;
    let mut outs = vec![y];
    outs.extend(grads);
    let total = b.n_inputs();
    Ok(b.finish_blocks(&outs, vec![total], vec![1, n])
        .positive_zero_outputs())
}

/// ∂⃖ of the traced scalar function in its own builder, with `ȳ = 1`: the
/// builder, the function's value, and its gradient with respect to the
/// first `n` inputs (structural zeros where it does not depend on one).
fn gradient_in(t: TracedBuilder, n: usize) -> Result<(Builder, Var, Vec<Var>)> {
    let TracedBuilder {
        builder: mut b,
        outputs,
        inputs,
        ..
    } = t;
    let (&[y], Some(xs)) = (outputs.as_slice(), inputs.get(..n)) else {
        return Err(Error::MissingBlock {
            block: gradient_blocks::GRADIENT,
            width: n,
        });
    };
    let one = b.constant(1.0);
    let adj = pullback_in_place(&mut b, &[(y, one)]);
    let grads = xs
        .iter()
        .map(|x| adj[x.index()].get().unwrap_or_else(|| b.zero()))
        .collect();
    Ok((b, y, grads))
}

/// The Hessian-vector product program `(x, v) ↦ (f, ∇f, H v)` of a traced
/// scalar function, forward over reverse: ∂⃗ applied to the gradient
/// `x ↦ (f, ∇f)` (which is ∂⃖f with `ȳ = 1`), with tangent `ẋ = v`; the
/// tangent of `∇f` is `H v`. Tangents of captured inputs are structural
/// zeros. Inputs `[x, caps, v]` (`v` has `n` entries) and outputs
/// `[f, ∇f, H v]` (`1 + 2n`), each as one block.
///
/// The same product is the last closure of the order-2 bundle with
/// `d₁ = 1`, `d₂ = v`, `d₃ = 0` (the book's higher-order chapter, reverse
/// over reverse); `tests/drivers.rs` checks that the two agree. Forward
/// over reverse gives the smaller program. Everything is emitted into the
/// builder the trace was recorded in: the pullback, then the pushforward
/// of the gradient's instructions (only those the gradient needs), each
/// with its seeds folded in as it is emitted, so nothing is copied.
fn hvp_program(t: TracedBuilder, n: usize) -> Result<Program> {
    let total = t.inputs.len();
    let inputs = t.inputs.clone();
    let (mut b, y, grads) = gradient_in(t, n)?;
    let end = b.len();
    let live = crate::program::live_from(&b.code()[..end], &grads);
    // ẋ = v; the captured values are held fixed.
    let mut xdots: Vec<Option<Var>> = vec![None; total];
    for &x in &inputs[..n] {
        if let Some(k) = b.code()[x.index()].as_input() {
            xdots[k as usize] = Some(b.input());
        }
    }
    let tangent = pushforward_in_place(&mut b, end, &xdots, &live);
    let mut outs = vec![y];
    outs.extend_from_slice(&grads);
    for g in &grads {
        let t = tangent[g.index()].get().unwrap_or_else(|| b.zero());
        outs.push(t);
    }
    Ok(b.finish_unchecked(&outs).positive_zero_outputs())
}

/// Gradient `∇f(x)` of a scalar function.
///
/// Shapes: `x` has `n ≥ 1` entries; the result has `n`. `T` is `f64`, or a
/// [`Tracer`] when differentiating inside traced code (nested AD: values of
/// the enclosing trace that `f` closes over are captured, never confused
/// with `x`'s perturbation).
///
/// Loops: at `f64` points, a function with [`crate::fold`] or
/// [`crate::while_loop`] is traced on the array trace, each loop one
/// instruction, as [`Gradient`] does; `f` is then called two or three
/// times (once for code without loops). At tracer points loops unroll.
///
/// # Errors
///
/// [`Error::EmptyInput`] for an empty `x`; [`Error::ForeignTracer`] if `f`
/// used a tracer from a finished trace; [`Error::CapturedOutsideTrace`] if
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
    let g = value_and_gradient_of("gradient", on_leaves_mut(x, f), &x.leaves())?.1;
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
    let (y, g) = value_and_gradient_of("value_and_gradient", on_leaves_mut(x, f), &x.leaves())?;
    Ok((y, in_shape(x, g)?))
}

/// [`value_and_gradient`], with the driver's name for its errors.
fn value_and_gradient_of<T: Real>(
    what: &'static str,
    mut f: impl FnMut(&[Tracer]) -> Result<Tracer>,
    x: &[T],
) -> Result<(T, Vec<T>)> {
    check_nonempty(what, x.len())?;
    let n = x.len();
    if is_f64::<T>() {
        let xf = primals(x);
        let t = match trace_or_host(&mut f, &xf, |p| GradientCore::new(p, n))? {
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
/// guide", §VI, eq. 25). For several `ȳ` at one point, [`pullback`]
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
/// [`Error::EmptyInput`] for an empty `x`; [`Error::LengthMismatch`] if
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
    let (y, xbar) = vjp_flat(on_leaves_mut(point, f), &point.leaves(), ybar)?;
    Ok((y, in_shape(point, xbar)?))
}

fn vjp_flat<T: Real>(
    mut f: impl FnMut(&[Tracer]) -> Result<Vec<Tracer>>,
    x: &[T],
    ybar: &[T],
) -> Result<(Vec<T>, Vec<T>)> {
    check_nonempty("vjp", x.len())?;
    let (p, mut inputs) = match trace_or_host_at(&mut f, x, |p| PullbackCore::new(p, &primals(x)))?
    {
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

/// The value `f(x)` and the pullback of `f` at `x`, to apply to as many
/// output cotangents `ȳ` as needed: JAX's `vjp`, which returns its
/// pullback. The [`Pullback`] is the right of the optic ∂⃖f (K. Fischer,
/// "∂P.jl terminology and notation guide", §VI, eq. 25) with the residual
/// its left computed at `x` kept: `f` is traced and its primal run once,
/// and each application runs the pullback program only. [`vjp`] is the
/// one-shot form.
///
/// Shapes: `x` is any [`Point`] with `n ≥ 1` leaves (a slice, or a struct
/// deriving [`Differentiable`], as for [`gradient`]); the value has `m`
/// entries (the number of values `f` returns); the pullback maps `m`
/// cotangents to the `n` leaves' ([`Pullback::apply`]), or to a value of
/// the point's shape ([`Pullback::call_point`]).
///
/// Loops: a function with [`crate::fold`] or [`crate::while_loop`] is
/// traced on the array trace, as [`gradient`] does; the pullback keeps the
/// loops' carries (their residual, or checkpoints) and each application
/// runs the reversed loops only ([`Pullback::array_program`]).
///
/// # Errors
///
/// [`Error::EmptyInput`] for an empty `x`; as [`gradient`] otherwise.
///
/// # Example
///
/// The rows of the Jacobian of `f(x) = (x₀x₁, sin x₀)`, one pullback each:
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{pullback, Real};
///
/// fn f<T: Real>(x: &[T]) -> Vec<T> {
///     vec![x[0] * x[1], x[0].sin()]
/// }
/// let (y, mut back) = pullback(f, &[2.0, 3.0]).unwrap();
/// assert_relative_eq!(y[0], 6.0);
/// assert_eq!(back.call(&[1.0, 0.0]).unwrap(), vec![3.0, 2.0]);
/// let row = back.call(&[0.0, 1.0]).unwrap();
/// assert_relative_eq!(row[0], 2.0_f64.cos());
/// assert_eq!(row[1], 0.0);
/// ```
pub fn pullback<P, F, R>(f: F, point: &P) -> Result<(Vec<f64>, Pullback)>
where
    P: Point<Scalar = f64> + ?Sized,
    F: FnMut(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Vec<Tracer>>,
{
    let leaves = point.leaves();
    let x = &leaves[..];
    check_nonempty("pullback", x.len())?;
    let mut f = on_leaves_mut(point, f);
    let (p, inputs) = match trace_or_host_at(&mut f, x, |p| PullbackCore::new(p, x))? {
        Code::Scalar(traced) => traced,
        Code::Hosted(core) => {
            let y = core.value().to_vec();
            let back = Pullback {
                n: x.len(),
                m: y.len(),
                code: PullbackCode::Hosted(Box::new(core)),
            };
            return Ok((y, back));
        }
    };
    let optic = crate::functor::reverse(&p)?;
    let staged = optic.staged().clone();
    let mut ws = staged.workspace();
    staged.run_with(0, &mut ws, &inputs)?;
    let y = staged.own_outputs(&ws, 0).to_vec();
    Ok((
        y,
        Pullback {
            n: x.len(),
            m: p.n_outputs(),
            code: PullbackCode::Scalar { staged, ws },
        },
    ))
}

/// The pullback `ȳ ↦ J_f(x)ᵀ ȳ` of a function at a point, from
/// [`pullback`]: the right of the optic ∂⃖f on the residual its left kept.
/// Applying it runs the pullback program only, with no allocation
/// ([`Pullback::apply`]).
#[derive(Clone, Debug)]
pub struct Pullback {
    n: usize,
    m: usize,
    code: PullbackCode,
}

/// The programs behind a [`Pullback`]: the staged optic of the scalar
/// trace, or, for code with loops, the array trace's joint program in two
/// stages (the loops' carries its residual).
#[derive(Clone, Debug)]
enum PullbackCode {
    Scalar { staged: Staged, ws: StagedWorkspace },
    Hosted(Box<PullbackCore>),
}

impl Pullback {
    /// The number of output cotangents it takes, `m`.
    pub fn n_outputs(&self) -> usize {
        self.m
    }

    /// The number of input cotangents it returns, `n`.
    pub fn n_inputs(&self) -> usize {
        self.n
    }

    /// Writes `x̄ = J_f(x)ᵀ ȳ` into `xbar`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] unless `ybar` has `m` entries and `xbar`
    /// `n`.
    pub fn apply(&mut self, ybar: &[f64], xbar: &mut [f64]) -> Result<()> {
        check_len("pullback: output cotangent", self.m, ybar.len())?;
        check_len("pullback: input cotangent", self.n, xbar.len())?;
        match &mut self.code {
            PullbackCode::Scalar { staged, ws } => {
                staged.run_with(1, ws, ybar)?;
                let out = staged.own_outputs(ws, 1);
                xbar.copy_from_slice(&out[..self.n]);
                Ok(())
            }
            PullbackCode::Hosted(core) => core.apply(ybar, xbar),
        }
    }

    /// For a function with loops, traced on the array trace: the joint
    /// program `(x, ȳ) ↦ (y, x̄)` (its loops one instruction each) whose
    /// `ȳ`-free part ran at the point; `None` for the scalar trace's.
    pub fn array_program(&self) -> Option<&ArrayProgram> {
        match &self.code {
            PullbackCode::Scalar { .. } => None,
            PullbackCode::Hosted(core) => Some(core.program()),
        }
    }

    /// `J_f(x)ᵀ ȳ` as a new vector.
    ///
    /// # Errors
    ///
    /// As [`Pullback::apply`].
    pub fn call(&mut self, ybar: &[f64]) -> Result<Vec<f64>> {
        let mut xbar = vec![0.0; self.n];
        self.apply(ybar, &mut xbar)?;
        Ok(xbar)
    }

    /// `J_f(x)ᵀ ȳ` in the shape of the point `like` (the point the
    /// pullback was built at, or another of its structure): a structured
    /// point's cotangent reads as its fields, its data fields copied from
    /// `like`.
    ///
    /// # Errors
    ///
    /// As [`Pullback::apply`]; [`Error::StructureMismatch`] if `like` does
    /// not have `n` leaves.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::{pullback, Differentiable, Real};
    ///
    /// #[derive(Clone, Debug, PartialEq, Differentiable)]
    /// struct Line<T> {
    ///     slope: T,
    ///     offset: T,
    /// }
    /// // The line at t = 1 and t = 2: J = [[1, 1], [2, 1]].
    /// let at = Line { slope: 0.5, offset: 1.0 };
    /// let (y, mut back) =
    ///     pullback(|l: &Line<_>| vec![l.slope + l.offset, l.slope * 2.0 + l.offset], &at)
    ///         .unwrap();
    /// assert_eq!(y, vec![1.5, 2.0]);
    /// let g = back.call_point(&[1.0, 1.0], &at).unwrap();
    /// assert_eq!(g, Line { slope: 3.0, offset: 2.0 });
    /// ```
    pub fn call_point<P: Point<Scalar = f64> + ?Sized>(
        &mut self,
        ybar: &[f64],
        like: &P,
    ) -> Result<Tangent<P>> {
        let xbar = self.call(ybar)?;
        in_shape(like, xbar)
    }
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
/// [`Error::EmptyInput`] for an empty `x`; [`Error::LengthMismatch`] if
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
    let mut f = on_leaves_mut(point, f);
    let (p, mut inputs) = match trace_or_host_at(&mut f, &x, forward)? {
        Code::Scalar(traced) => traced,
        Code::Hosted(fwd) => {
            // [x, ẋ] ↦ [y, ẏ], each one vector.
            let out = fwd.eval(&[&primals(&x), &primals(&v)])?;
            // A structural zero (−0.0 in programs) of ẏ is returned as +0.0.
            let cast = |v: &[f64], z: f64| v.iter().map(|&c| P::Scalar::cst(c + z)).collect();
            return Ok((cast(&out[0], -0.0), cast(&out[1], 0.0)));
        }
    };
    let m = p.n_outputs();
    // ∂⃗p: inputs [x, caps, ẋ], outputs [y, ẏ]; captured values are held
    // fixed.
    let prog = pushforward_program(&p, x.len(), None);
    inputs.extend_from_slice(&v);
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
/// [`Error::EmptyInput`] for an empty `x`; as [`gradient`] otherwise.
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
    jacobian_flat(on_leaves_mut(point, f), &point.leaves())
}

fn jacobian_flat<T: Real>(
    mut f: impl FnMut(&[Tracer]) -> Result<Vec<Tracer>>,
    x: &[T],
) -> Result<Vec<Vec<T>>> {
    check_nonempty("jacobian", x.len())?;
    let (p, mut inputs) = match trace_or_host_at(&mut f, x, |p| PullbackCore::new(p, &primals(x)))?
    {
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
    inputs.extend(std::iter::repeat_n(T::cst(0.0), m));
    let mut ws = Workspace::new();
    let mut out = vec![T::cst(0.0); m + total];
    let mut rows = Vec::with_capacity(m);
    for i in 0..m {
        inputs[total + i] = T::cst(1.0);
        joint.eval_with(&mut ws, &inputs, &mut out)?;
        inputs[total + i] = T::cst(0.0);
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
/// [`Error::EmptyInput`] for an empty `x`; [`Error::LengthMismatch`] if
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
    let hv = hvp_flat(on_leaves_mut(x, f), &leaves, &v)?;
    in_shape(x, hv)
}

fn hvp_flat<T: Real>(
    mut f: impl FnMut(&[Tracer]) -> Result<Tracer>,
    x: &[T],
    v: &[T],
) -> Result<Vec<T>> {
    check_nonempty("hvp", x.len())?;
    check_len("hvp: direction", x.len(), v.len())?;
    let n = x.len();
    let (t, mut inputs) = if is_f64::<T>() {
        let xf = primals(x);
        match trace_or_host(&mut f, &xf, |p| HvpCore::new(p, n))? {
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
/// split as [`Hvp`] is, its left run once and its right `n` times.
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
    hessian_flat(on_leaves_mut(x, f), &x.leaves())
}

fn hessian_flat<T: Real>(
    mut f: impl FnMut(&[Tracer]) -> Result<Tracer>,
    x: &[T],
) -> Result<Vec<Vec<T>>> {
    check_nonempty("hessian", x.len())?;
    let n = x.len();
    let (t, inputs) = if is_f64::<T>() {
        let xf = primals(x);
        match trace_or_host(&mut f, &xf, |p| HvpCore::new(p, n))? {
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
    let mut e = vec![T::cst(0.0); n];
    let mut rows = Vec::with_capacity(n);
    for i in 0..n {
        e[i] = T::cst(1.0);
        rows.push(staged.run(HvpSplit::RIGHT, &m, &e)?.0);
        e[i] = T::cst(0.0);
    }
    Ok(rows)
}

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
/// The point may be any [`Real`] (so the call nests, as [`gradient`]
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
/// instruction that carries the jets, as [`gradient`] says; `f` is then
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
    if is_f64::<T>() {
        let x = x.primal();
        let order = N::to_usize();
        let mut g = |t: &[Tracer]| f(t[0]).into_traced();
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
fn to_array<T, M: ArrayLength>(v: Vec<T>) -> Result<GenericArray<T, M>> {
    let len = v.len();
    GenericArray::try_from_iter(v).map_err(|_| Error::MissingBlock {
        block: 0,
        width: len,
    })
}

/// An `f64` array as an array of `T` constants (`T` is `f64` where this is
/// called).
fn cast_array<T: Real, M: ArrayLength>(a: &GenericArray<f64, M>) -> GenericArray<T, M> {
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
fn univariate_program(p: &Program, order: usize) -> Result<Program> {
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
fn pushforward_program(p: &Program, n: usize, seed: Option<f64>) -> Program {
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
/// traced on the array trace, as [`Gradient`] says (each loop one
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
    /// As for [`Gradient::eval_at`], `f` must not close over tracers of an
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

/// The directional derivatives `dᵏ/dtᵏ f(x + t v)` at `t = 0`, for
/// `k = 0 … N`, of a scalar function of several variables, in Taylor mode:
/// one jet of degree `N` through the traced program, `O(N²)` operations
/// per primitive. Entry `k` is `Dᵏf(x)[v, …, v]`: entry 1 is `∇f · v`,
/// entry 2 is `vᵀ H v`.
///
/// Shapes: `x` is any [`Point`] with `n ≥ 1` leaves (a slice, or a struct
/// deriving [`Differentiable`], as for [`gradient`]) and `v` a direction
/// with the same leaves; the result has `N + 1` entries.
///
/// # Errors
///
/// [`Error::EmptyInput`] for a point without leaves;
/// [`Error::LengthMismatch`] unless `v` has as many leaves as `x`;
/// [`Error::StructureMismatch`] if a structured `v` has other fields than
/// `x`; [`Error::ForeignTracer`] if `f` used a
/// tracer from a finished trace; [`Error::CapturedOutsideTrace`] if it
/// closes over tracers. High orders lose digits as [`derivative`] says;
/// [`TaylorProgram::eval_with_error`] gives the entries with estimates of
/// their rounding errors.
///
/// Loops: at `f64` points, a function with [`crate::fold`] or
/// [`crate::while_loop`] is traced on the array trace (each loop one
/// instruction that carries the jets), as [`gradient`] says; `f` is then
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
    taylor_flat::<N, _, _>(on_leaves_mut(x, f), &leaves, &v)
}

/// [`taylor`] on the flat leaves of the point and the direction.
fn taylor_flat<N, T, R>(
    mut f: impl FnMut(&[Tracer]) -> R,
    x: &[T],
    v: &[T],
) -> Result<GenericArray<T, Add1<N>>>
where
    N: Unsigned + Add<B1> + IsLessOrEqual<MaxTaylorOrder, Output = True>,
    Add1<N>: ArrayLength,
    T: Real,
    R: IntoTraced<Tracer>,
{
    if is_f64::<T>() {
        let (x, v) = (primals(x), primals(v));
        let mut g = |t: &[Tracer]| f(t).into_traced();
        let mut t = match taylor_or_host(&mut g, &x, N::to_usize())? {
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
    let (q, mut inputs) = directional_program(f, x, v, N::to_usize())?;
    inputs[0] = T::cst(0.0);
    to_array(q.eval(&inputs)?)
}

/// The primal values of `x`.
fn primals<T: Real>(x: &[T]) -> Vec<f64> {
    x.iter().map(|v| v.primal()).collect()
}

/// For the non-`f64` paths of [`taylor()`] and [`d3`]: traces
/// `(t, x, v) ↦ f(x + t v)` and returns [`univariate_program`] of it with
/// the evaluation inputs `[t, x, v, captures]` (`t` to be set by the
/// caller; `v` may be replaced, at positions `1 + n … 1 + 2n`).
fn directional_program<T: Real, R: IntoTraced<Tracer>>(
    f: impl FnOnce(&[Tracer]) -> R,
    x: &[T],
    v: &[T],
    order: usize,
) -> Result<(Program, Vec<T>)> {
    let n = x.len();
    let mut point = Vec::with_capacity(1 + 2 * n);
    point.push(T::cst(0.0));
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
fn directional_jet(
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
/// instruction that carries the jets, as [`gradient`] says; `f` is then
/// called two or three times.
///
/// # Errors
///
/// As [`taylor()`]: [`Error::EmptyInput`], [`Error::LengthMismatch`],
/// [`Error::ForeignTracer`], [`Error::CapturedOutsideTrace`].
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
    d3_flat(on_leaves_mut(x, f), &leaves, &u, &v, &w)
}

fn d3_flat<T: Real>(
    mut f: impl FnMut(&[Tracer]) -> Result<Tracer>,
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
    let mut t = match taylor_or_host(&mut f, &x, 3)? {
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
/// `fold` returns [`Error::Unsupported`] there instead, which the function
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
    /// [`Error::EmptyInput`] for an empty `x0`; as [`gradient`] otherwise.
    pub fn new(f: F, x0: &[f64]) -> Result<Self> {
        check_nonempty("Gradient", x0.len())?;
        let code = Self::build(&f, x0)?;
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
    /// [`Error::GuardFailed`] is returned (write such branches with
    /// `select`). The programs run at `f64` points only:
    /// [`Gradient::eval_at`] at other scalars returns
    /// [`Error::Unsupported`].
    ///
    /// Shapes: `x0` and every later point have `n ≥ 1` entries.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyInput`] for an empty `x0`; an error `f` returns while
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
        let code = Self::build(&f, x0)?;
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
    /// compiled form of [`gradient`] on such points. Later points must
    /// have `p0`'s structure (its `Vec` lengths); where their data fields
    /// (`#[differentiable(skip)]`) differ from those of the point last
    /// traced at, `f` is traced again (as where a guard fails).
    ///
    /// # Errors
    ///
    /// [`Error::EmptyInput`] if `p0` has no leaves; as [`gradient`]
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
        let code = Self::build(&f, &p0.leaves())?;
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
    /// [`Error::StructureMismatch`] unless `p` has the structure of the
    /// point the gradient was built at; errors of re-tracing.
    pub fn eval_point(&mut self, p: &P) -> Result<(f64, Tangent<P>)> {
        let (x, old) = self.f.take_leaves("Gradient: point", p)?;
        if old.is_some() {
            match Self::build(&self.f, &x) {
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

    /// The gradient program of `f` traced at `x`: from the scalar trace,
    /// or, for a function with loops, from the array trace
    /// ([`trace_or_host`]).
    fn build(f: &F, x: &[f64]) -> Result<GradientCode> {
        let n = x.len();
        if let Some(af) = f.array_function() {
            let core = GradientCore::new(&trace_scalar(af, x)?, n)?;
            return Ok(Code::Hosted(Box::new(core)));
        }
        let code = trace_or_host(&mut |t| f.call_leaves(t), x, |p| {
            GradientCore::new(p, n).map(Box::new)
        })?;
        Ok(match code {
            Code::Scalar(t) => {
                Code::Scalar(Executable::new(gradient_program(t, n)?.into_schedule()))
            }
            Code::Hosted(c) => Code::Hosted(c),
        })
    }

    /// The gradient program of `f` on the scalar trace, loops unrolled:
    /// for points other than `f64`, which the array trace's programs do
    /// not take.
    fn build_unrolled(f: &F, x: &[f64]) -> Result<Executable> {
        let (t, _) = trace_builder_at(scalar(|t| f.call_leaves(t)), x)?;
        Ok(Executable::new(
            gradient_program(t, x.len())?.into_schedule(),
        ))
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
    /// [`gradient`] inside the trace.
    ///
    /// Where `f` has loops (its program is on the array trace), a point
    /// other than `f64` is served by `f` traced again on the scalar
    /// trace with its loops unrolled, once (the program is kept for later
    /// calls). A function of the array trace ([`Gradient::array`]) cannot
    /// run on scalar tracers: only `f64` points are served there.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] unless `x` has `n` entries; errors of
    /// re-tracing where a guard fails; [`Error::Unsupported`] for a
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
                None => self.unrolled.insert(Self::build_unrolled(f, &xs)?),
            };
            let mut out = run_or_retrace(p, || Self::build_unrolled(f, &xs), |p| p.eval(x))?;
            let grad = out.split_off(1);
            return Ok((out[0], grad));
        }
        let f = &self.f;
        let mut out = run_or_retrace(
            &mut self.code,
            || Self::build(f, &primals(x)),
            |c| match c {
                Code::Scalar(p) => p.eval(x),
                // A re-trace that meets a loop: the `f64` path above on
                // the next call; this one is served unrolled.
                Code::Hosted(_) => Self::build_unrolled(f, &primals(x))?.eval(x),
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
    /// [`Error::LengthMismatch`] for wrong lengths; errors of re-tracing.
    pub fn eval(&mut self, x: &[f64], grad: &mut [f64]) -> Result<f64> {
        check_len("Gradient: x", self.n, x.len())?;
        check_len("Gradient: grad", self.n, grad.len())?;
        let (f, regs, out) = (&self.f, &mut self.regs, &mut self.out);
        run_or_retrace(
            &mut self.code,
            || Self::build(f, x),
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

/// A compiled Hessian-vector product, split as an optic: [`Hvp::linearize`]
/// runs the left (the primal, the gradient, and the residual the products
/// need) once at `x`; [`Hvp::apply`] runs the right for each direction `v`.
///
/// Built as ∂⃗ of the gradient program ∂⃖f (forward over reverse; the same
/// product as ∂⃖²f with `d₁ = 1`, `d₃ = 0`: see the book's chapter "Higher
/// order and the nested-closure encoding"), split by
/// [`crate::functor::split_stages`] into the stage that depends on `x` only
/// and the stage that depends on `v`.
/// Steady-state calls do not allocate. A function with loops is traced on
/// the array trace, as [`Gradient`] says; its products are ∂⃗ of the
/// reverse loop, loops again. One type for both traces, as [`Gradient`]:
/// [`Hvp::new`], [`Hvp::structured`] and [`Hvp::array`].
///
/// # Example with a loop
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{fold, Hvp, Real, Result};
///
/// // c ← c·a, 1000 times: f(a) = a¹⁰⁰⁰ c₀, f″ = 1000·999·a⁹⁹⁸ c₀.
/// fn f<T: Real>(a: &[T]) -> Result<T> {
///     let [c] = fold(1000, [T::cst(2.0)], |[c]: [T; 1]| [c * a[0]])?;
///     Ok(c)
/// }
/// let mut h = Hvp::new(f, &[1.0005]).unwrap();
/// assert!(h.array_program().is_some()); // one loop instruction
/// h.linearize(&[1.0005]).unwrap();
/// let mut hv = [0.0];
/// h.apply(&[1.0], &mut hv).unwrap();
/// let want = 2.0 * 1000.0 * 999.0 * 1.0005_f64.powi(998);
/// assert_relative_eq!(hv[0], want, max_relative = 1e-12);
/// ```
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{Hvp, Real};
///
/// fn f<T: Real>(x: &[T]) -> T {
///     x[0].powi(3) + x[0] * x[1]
/// }
/// let mut h = Hvp::new(f, &[1.0, 1.0]).unwrap();
/// let mut grad = [0.0; 2];
/// let y = h.linearize_with_gradient(&[2.0, 3.0], &mut grad).unwrap();
/// assert_relative_eq!(y, 14.0);
/// assert_relative_eq!(grad[0], 15.0);
/// let mut hv = [0.0; 2];
/// h.apply(&[1.0, 0.0], &mut hv).unwrap(); // first Hessian column
/// assert_relative_eq!(hv[0], 12.0);
/// assert_relative_eq!(hv[1], 1.0);
/// ```
#[derive(Clone)]
pub struct Hvp<F> {
    f: F,
    n: usize,
    code: HvpCode,
    /// For a function with loops, its split on the scalar trace with the
    /// loops unrolled, built on the first [`Hvp::hvp_at`] at points other
    /// than `f64`.
    unrolled: Option<HvpSplit>,
    linearized: bool,
    /// Lane buffers of [`Hvp::apply_many`]: directions in, products out.
    lane_in: Vec<[f64; LANES]>,
    lane_out: Vec<[f64; LANES]>,
}

/// The Hessian-vector program of a trace of `n` variables, split in two
/// stages, for [`Hvp`] and [`hessian`]: inputs `[x, captures] [v]`,
/// outputs `[f, ∇f] [H v]`; stage [`HvpSplit::LEFT`] knows `x` (and the
/// captures), stage [`HvpSplit::RIGHT`] `v` and the left's residual.
/// `scheduled`: each stage ordered for the interpreter.
fn hvp_staged(t: TracedBuilder, n: usize, scheduled: bool) -> Result<Staged> {
    let total = t.inputs.len();
    let mut h = hvp_program(t, n)?;
    h.input_blocks = vec![total, n];
    h.output_blocks = vec![1 + n, n];
    let stages = [HvpSplit::LEFT, HvpSplit::RIGHT];
    if scheduled {
        Staged::split_scheduled(&h, &stages, &stages, 2)
    } else {
        Staged::split(&h, &stages, &stages, 2)
    }
}

/// The two stages of a Hessian-vector program and their buffers, rebuilt
/// together where a guard fails.
#[derive(Clone)]
struct HvpSplit {
    /// Stage [`HvpSplit::LEFT`]: `x ↦ ([f, ∇f], m)`; stage
    /// [`HvpSplit::RIGHT`]: `(m, v) ↦ H v`.
    staged: Staged,
    ws: StagedWorkspace,
    /// The buffers of [`Hvp::eval`], which leaves `ws` (the linearized
    /// point) alone; made on its first call.
    spare: Option<StagedWorkspace>,
}

/// A compiled Hessian-vector product's programs: the split scalar
/// program, or the array programs for a function with loops.
type HvpCode = Code<HvpSplit, Box<HvpCore>>;

impl HvpSplit {
    const LEFT: usize = 0;
    const RIGHT: usize = 1;

    /// The split of `f` traced at `x`: from the scalar trace, or, for a
    /// function with loops, the array programs ([`trace_or_host`]).
    fn build<F: LeafFunction>(f: &F, x: &[f64]) -> Result<HvpCode> {
        let n = x.len();
        if let Some(af) = f.array_function() {
            let core = HvpCore::new(&trace_scalar(af, x)?, n)?;
            return Ok(Code::Hosted(Box::new(core)));
        }
        let code = trace_or_host(&mut |t| f.call_leaves(t), x, |p| {
            HvpCore::new(p, n).map(Box::new)
        })?;
        Ok(match code {
            Code::Scalar(t) => Code::Scalar(Self::from_trace(t, n)?),
            Code::Hosted(c) => Code::Hosted(c),
        })
    }

    /// The split of `f` on the scalar trace, loops unrolled: for points
    /// other than `f64`.
    fn build_unrolled<F: LeafFunction>(f: &F, x: &[f64]) -> Result<Self> {
        let (t, _) = trace_builder_at(scalar(|t| f.call_leaves(t)), x)?;
        Self::from_trace(t, x.len())
    }

    fn from_trace(t: TracedBuilder, n: usize) -> Result<Self> {
        let staged = hvp_staged(t, n, true)?;
        let ws = staged.workspace();
        Ok(HvpSplit {
            staged,
            ws,
            spare: None,
        })
    }

    fn left(&self) -> &Stage {
        &self.staged.stages()[Self::LEFT]
    }

    /// `f(x)` after the left has run.
    fn value(&self) -> f64 {
        self.staged.own_outputs(&self.ws, Self::LEFT)[0]
    }

    /// `∇f(x)` after the left has run.
    fn gradient(&self) -> &[f64] {
        &self.staged.own_outputs(&self.ws, Self::LEFT)[1..]
    }
}

impl<F> std::fmt::Debug for Hvp<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Hvp");
        d.field("n", &self.n);
        match &self.code {
            Code::Scalar(split) => {
                let st = split.staged.stages();
                d.field("left_len", &st[HvpSplit::LEFT].program.len())
                    .field("right_len", &st[HvpSplit::RIGHT].program.len())
                    .field("residual", &st[HvpSplit::LEFT].residual_out)
            }
            Code::Hosted(c) => d.field("array_program_len", &c.program().len()),
        };
        d.finish()
    }
}

impl<F, R> Hvp<F>
where
    F: Fn(&[Tracer]) -> R,
    R: IntoTraced<Tracer>,
{
    /// Traces `f` at `x0` and builds the split Hessian-vector program.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyInput`] for an empty `x0`; as [`gradient`] otherwise.
    pub fn new(f: F, x0: &[f64]) -> Result<Self> {
        check_nonempty("Hvp", x0.len())?;
        let code = HvpSplit::build(&f, x0)?;
        Ok(Hvp::with_code(f, x0.len(), code))
    }
}

impl<F: Fn(&TArray) -> Result<TScalar>> Hvp<OnArray<F>> {
    /// Traces `f`, written against [`Array`](crate::array::Array) and
    /// called here on the array trace, at `x0` and builds its
    /// Hessian-vector programs on the array trace: `(x, v) ↦ (f, ∇f, H v)`
    /// as ∂⃗ of the gradient program, split in two by the instructions
    /// that depend on the direction ([`Hvp::linearize`] runs the others,
    /// once per point; [`Hvp::apply`] the rest, once per direction), and,
    /// on the first [`Hvp::eval`], a one-pass program. The same type as
    /// [`Hvp::new`]'s, re-tracing where a guard fails as it does (see
    /// [`Gradient::array`] for comparisons inside map bodies).
    ///
    /// Shapes: `x0`, every later point and direction have `n ≥ 1` entries.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyInput`] for an empty `x0`; an error `f` returns while
    /// tracing.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::array::Array;
    /// use optic_ad::Hvp;
    ///
    /// // f(x) = Σ xᵢ³: H = diag(6x).
    /// let mut h = Hvp::array(|x| Ok(x.map(|t| t * t * t).sum()), &[1.0, 2.0]).unwrap();
    /// h.linearize(&[1.0, 2.0]).unwrap();
    /// let mut hv = [0.0; 2];
    /// h.apply(&[1.0, 1.0], &mut hv).unwrap();
    /// assert_eq!(hv, [6.0, 12.0]);
    /// assert_eq!(h.gradient(), &[3.0, 12.0]);
    /// ```
    pub fn array(f: F, x0: &[f64]) -> Result<Self> {
        let n = x0.len();
        check_nonempty("Hvp", n)?;
        let f = OnArray(f);
        let code = HvpSplit::build(&f, x0)?;
        Ok(Hvp::with_code(f, n, code))
    }
}

impl<P, F, R> Hvp<OnPoint<P, F>>
where
    P: Differentiable<Scalar = f64> + Point<Scalar = f64> + Clone,
    F: Fn(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Tracer>,
{
    /// Traces `f`, a function of a structured point (a struct deriving
    /// [`Differentiable`]), at `p0` and builds the split Hessian-vector
    /// program: the compiled form of [`hvp`] on such points. Later points
    /// and directions must have `p0`'s structure; a point whose data
    /// fields differ from those last traced with is traced again.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyInput`] if `p0` has no leaves; as [`gradient`]
    /// otherwise.
    ///
    /// # Example
    ///
    /// ```
    /// use approx::assert_relative_eq;
    /// use optic_ad::{Differentiable, Hvp, Real};
    ///
    /// #[derive(Clone, Differentiable)]
    /// struct Point2<T> {
    ///     x: T,
    ///     y: T,
    /// }
    /// fn f<T: Real>(p: &Point2<T>) -> T {
    ///     p.x.powi(3) + p.x * p.y
    /// }
    /// let mut h = Hvp::structured(f, &Point2 { x: 1.0, y: 1.0 }).unwrap();
    /// let (y, grad) = h.linearize_point(&Point2 { x: 2.0, y: 3.0 }).unwrap();
    /// assert_relative_eq!(y, 14.0);
    /// assert_relative_eq!(grad.x, 15.0);
    /// let hv = h.apply_point(&Point2 { x: 1.0, y: 0.0 }).unwrap();
    /// assert_relative_eq!(hv.x, 12.0); // ∂²f/∂x² = 6x
    /// assert_relative_eq!(hv.y, 1.0);
    /// ```
    pub fn structured(f: F, p0: &P) -> Result<Self> {
        let n = p0.leaf_count();
        check_nonempty("Hvp", n)?;
        let f = OnPoint::new(f, p0);
        let code = HvpSplit::build(&f, &p0.leaves())?;
        Ok(Hvp::with_code(f, n, code))
    }

    /// Runs the left at `p`: `(f(p), ∇f(p))`, the gradient in `p`'s type
    /// (traced again first where `p`'s data fields differ from those last
    /// traced with). Allocates the gradient; [`Hvp::linearize`] on the
    /// flat leaves is the allocation-free path.
    ///
    /// # Errors
    ///
    /// [`Error::StructureMismatch`] unless `p` has the structure of the
    /// point the `Hvp` was built at; errors of re-tracing.
    pub fn linearize_point(&mut self, p: &P) -> Result<(f64, Tangent<P>)> {
        let (x, old) = self.f.take_leaves("Hvp: point", p)?;
        if old.is_some() {
            self.linearized = false;
            self.unrolled = None;
            match HvpSplit::build(&self.f, &x) {
                Ok(code) => self.code = code,
                Err(e) => {
                    self.f.restore(x, old);
                    return Err(e);
                }
            }
        }
        let mut grad = vec![0.0; self.n];
        let y = self.linearize_with_gradient(&x, &mut grad);
        self.f.restore(x, None);
        Ok((y?, in_shape(p, grad)?))
    }

    /// `H_f(p) v` in `v`'s type, at the point of the last linearization
    /// (a direction's data fields are not read).
    ///
    /// # Errors
    ///
    /// [`Error::StructureMismatch`] unless `v` has the point's structure;
    /// [`Error::NotLinearized`] as [`Hvp::apply`].
    pub fn apply_point(&mut self, v: &P) -> Result<Tangent<P>> {
        if !self.f.point.same_shape(v) {
            return Err(Error::StructureMismatch {
                what: "Hvp: direction",
            });
        }
        let mut x = std::mem::take(&mut self.f.leaves);
        x.clear();
        v.flatten_into(&mut x);
        let mut hv = vec![0.0; self.n];
        let r = self.apply(&x, &mut hv);
        self.f.restore(x, None);
        r?;
        in_shape(v, hv)
    }
}

impl<F: LeafFunction> Hvp<F> {
    /// The driver of `f` on `n` leaves, from its first programs; nothing
    /// linearized.
    fn with_code(f: F, n: usize, code: HvpCode) -> Self {
        Hvp {
            f,
            n,
            code,
            linearized: false,
            lane_in: Vec::new(),
            lane_out: Vec::new(),
            unrolled: None,
        }
    }

    /// Length of the residual kept between [`Hvp::linearize`] and
    /// [`Hvp::apply`] by the optic view ([`crate::optic::Optic`]): the
    /// left stage's residual; on the array trace (code with loops, and
    /// [`Hvp::array`]), the point itself (`n`), from which the right runs
    /// the left again.
    pub fn residual_len(&self) -> usize {
        match &self.code {
            Code::Scalar(split) => split.left().residual_out,
            Code::Hosted(_) => self.n,
        }
    }

    /// The left program `x ↦ (f, ∇f, m)` and right program `(m, v) ↦ Hv`;
    /// `None` where `f` was traced on the array trace (code with loops,
    /// and every [`Hvp::array`]), whose program [`Hvp::array_program`]
    /// gives.
    pub fn programs(&self) -> Option<(&Executable, &Executable)> {
        let st = self.staged()?.stages();
        Some((&st[HvpSplit::LEFT].program, &st[HvpSplit::RIGHT].program))
    }

    /// Both stages as one [`Staged`] program; `None` where `f` was traced
    /// on the array trace.
    pub fn staged(&self) -> Option<&Staged> {
        match &self.code {
            Code::Scalar(split) => Some(&split.staged),
            Code::Hosted(_) => None,
        }
    }

    /// The program `(x, v) ↦ (f, ∇f, H v)` on the array trace: for a
    /// function of the array trace ([`Hvp::array`]), and where `f` has
    /// loops ([`crate::fold`], [`crate::while_loop`]), each loop one
    /// instruction that carries its body. `None` for other functions.
    pub fn array_program(&self) -> Option<&ArrayProgram> {
        match &self.code {
            Code::Scalar(_) => None,
            Code::Hosted(c) => Some(c.program()),
        }
    }

    /// Moves the linearisation point to `x`; returns `f(x)`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] unless `x` has `n` entries; errors of
    /// re-tracing where a guard fails.
    pub fn linearize(&mut self, x: &[f64]) -> Result<f64> {
        check_len("Hvp: x", self.n, x.len())?;
        // Until this succeeds there is no valid point: `apply` refuses.
        self.linearized = false;
        let f = &self.f;
        let y = run_or_retrace(
            &mut self.code,
            || HvpSplit::build(f, x),
            |c| match c {
                Code::Scalar(s) => {
                    s.staged.run_with(HvpSplit::LEFT, &mut s.ws, x)?;
                    Ok(s.value())
                }
                Code::Hosted(h) => {
                    h.linearize(x)?;
                    Ok(h.value())
                }
            },
        )?;
        self.linearized = true;
        Ok(y)
    }

    /// As [`Hvp::linearize`], also writing `∇f(x)` into `grad`.
    ///
    /// # Errors
    ///
    /// As [`Hvp::linearize`]; [`Error::LengthMismatch`] for `grad`.
    pub fn linearize_with_gradient(&mut self, x: &[f64], grad: &mut [f64]) -> Result<f64> {
        check_len("Hvp: grad", self.n, grad.len())?;
        let y = self.linearize(x)?;
        grad.copy_from_slice(match &self.code {
            Code::Scalar(s) => s.gradient(),
            Code::Hosted(h) => h.gradient(),
        });
        Ok(y)
    }

    /// Writes `H_f(x) v` into `out`, at the point of the last
    /// [`Hvp::linearize`].
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] unless `v` and `out` have `n` entries;
    /// [`Error::NotLinearized`] if no `linearize` has succeeded since the `Hvp` was
    /// built or since the last one failed.
    pub fn apply(&mut self, v: &[f64], out: &mut [f64]) -> Result<()> {
        check_len("Hvp: v", self.n, v.len())?;
        check_len("Hvp: out", self.n, out.len())?;
        if !self.linearized {
            return Err(Error::NotLinearized);
        }
        match &mut self.code {
            Code::Scalar(s) => {
                s.staged.run_with(HvpSplit::RIGHT, &mut s.ws, v)?;
                out.copy_from_slice(s.staged.own_outputs(&s.ws, HvpSplit::RIGHT));
                Ok(())
            }
            Code::Hosted(h) => h.apply(v, out),
        }
    }

    /// `H_f(x) v` at a new point in one call, written to `out`; it does not
    /// move the point of [`Hvp::linearize`]. For one direction per point
    /// this is the call to make: on the array trace (code with loops, and
    /// [`Hvp::array`]) it runs a one-pass program `(x, v) ↦ H(x) v` that
    /// computes the primal and the tangent together, storing no
    /// coefficients (built on the first call, about as long as building
    /// the `Hvp`); on the scalar trace it runs both stages in buffers of
    /// its own (made on the first call). Later calls allocate nothing.
    /// Results equal `linearize` + `apply`'s to rounding. For several
    /// directions at one point, linearize once and apply.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] unless `x`, `v` and `out` have `n`
    /// entries (`out` untouched); errors of re-tracing where a guard no
    /// longer holds (the programs and the linearized point are then kept).
    /// Where a guard fails and the re-trace succeeds, the new programs
    /// have no linearized point: [`Hvp::linearize`] again before
    /// [`Hvp::apply`] (which otherwise returns [`Error::NotLinearized`]).
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::{Hvp, Real};
    ///
    /// // f(x) = Σ xᵢ³: H = diag(6x).
    /// let mut h = Hvp::new(|x| x[0].powi(3) + x[1].powi(3), &[1.0, 2.0]).unwrap();
    /// let mut hv = [0.0; 2];
    /// h.eval(&[1.0, 3.0], &[1.0, 1.0], &mut hv).unwrap();
    /// assert_eq!(hv, [6.0, 18.0]);
    /// ```
    pub fn eval(&mut self, x: &[f64], v: &[f64], out: &mut [f64]) -> Result<()> {
        check_len("Hvp: x", self.n, x.len())?;
        check_len("Hvp: v", self.n, v.len())?;
        check_len("Hvp: out", self.n, out.len())?;
        let f = &self.f;
        let mut rebuilt = false;
        let r = run_or_retrace(
            &mut self.code,
            || {
                // Only a successful re-trace replaces the programs (and
                // drops the linearized point with their buffers).
                let built = HvpSplit::build(f, x)?;
                rebuilt = true;
                Ok(built)
            },
            |c| match c {
                Code::Scalar(s) => {
                    let ws = s.spare.get_or_insert_with(|| s.staged.workspace());
                    s.staged.run_with(HvpSplit::LEFT, ws, x)?;
                    s.staged.run_with(HvpSplit::RIGHT, ws, v)?;
                    out.copy_from_slice(s.staged.own_outputs(ws, HvpSplit::RIGHT));
                    Ok(())
                }
                Code::Hosted(h) => h.eval(x, v, out),
            },
        );
        if rebuilt {
            self.linearized = false;
        }
        r
    }

    /// `f` at the point of the last successful [`Hvp::linearize`]; NaN
    /// where there is none: before the first, after one that failed, and
    /// after a re-trace (by [`Hvp::eval`] or [`Hvp::hvp_at`]) that built
    /// new programs.
    pub fn value(&self) -> f64 {
        if !self.linearized {
            return f64::NAN;
        }
        match &self.code {
            Code::Scalar(s) => s.value(),
            Code::Hosted(h) => h.value(),
        }
    }

    /// `∇f` at the point of the last successful [`Hvp::linearize`] (`n`
    /// entries); empty where there is none (as [`Hvp::value`] says).
    pub fn gradient(&self) -> &[f64] {
        if !self.linearized {
            return &[];
        }
        match &self.code {
            Code::Scalar(s) => s.gradient(),
            Code::Hosted(h) => h.gradient(),
        }
    }

    /// Test hook of the native backend (feature `jit`): how many array map
    /// bodies run as compiled block kernels so far, and how many maps
    /// there are (zeros for a program on the scalar trace).
    #[doc(hidden)]
    pub fn native_kernels(&self) -> (usize, usize) {
        match &self.code {
            Code::Scalar(_) => (0, 0),
            Code::Hosted(h) => h.native_kernels(),
        }
    }

    /// `H_f(x) v` for several directions at once, at the point of the last
    /// [`Hvp::linearize`]: `vs` holds `k` directions of `n` entries one
    /// after the other, and product `j` is written to
    /// `out[j n .. (j + 1) n]`. The right stage runs on four directions
    /// at a time (lanes of the lowered evaluator), so decoding its
    /// instructions is paid once per four products. Each product equals
    /// [`Hvp::apply`]'s for that direction, bit for bit. Steady-state calls
    /// do not allocate.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] unless `vs.len()` is a multiple of `n`
    /// and `out.len() == vs.len()`; [`Error::NotLinearized`] as for
    /// [`Hvp::apply`].
    ///
    /// # Example
    ///
    /// ```
    /// use approx::assert_relative_eq;
    /// use optic_ad::{Hvp, Real};
    ///
    /// // H = [[6x₀, 1], [1, 0]]: all its columns in one call.
    /// let mut h = Hvp::new(|x| x[0].powi(3) + x[0] * x[1], &[1.0, 1.0]).unwrap();
    /// h.linearize(&[2.0, 3.0]).unwrap();
    /// let mut cols = [0.0; 4];
    /// h.apply_many(&[1.0, 0.0, 0.0, 1.0], &mut cols).unwrap();
    /// assert_eq!(cols, [12.0, 1.0, 1.0, 0.0]);
    /// ```
    pub fn apply_many(&mut self, vs: &[f64], out: &mut [f64]) -> Result<()> {
        let n = self.n;
        check_len("Hvp: out", vs.len(), out.len())?;
        if vs.len() % n != 0 {
            return Err(Error::LengthMismatch {
                what: "Hvp: directions (a multiple of n)",
                expected: vs.len().div_ceil(n) * n,
                got: vs.len(),
            });
        }
        if !self.linearized {
            return Err(Error::NotLinearized);
        }
        let s = match &mut self.code {
            Code::Scalar(s) => s,
            Code::Hosted(h) => {
                for (v, product) in vs.chunks(n).zip(out.chunks_mut(n)) {
                    h.apply(v, product)?;
                }
                return Ok(());
            }
        };
        for (dirs, products) in vs.chunks(LANES * n).zip(out.chunks_mut(LANES * n)) {
            self.lane_in.clear();
            self.lane_in.extend((0..n).map(|i| {
                // Lane `l` holds direction `l`; missing lanes are zeros.
                std::array::from_fn(|l| dirs.get(l * n + i).copied().unwrap_or(0.0))
            }));
            s.staged.run_lanes(
                HvpSplit::RIGHT,
                &mut s.ws,
                &self.lane_in,
                &mut self.lane_out,
            )?;
            for (l, product) in products.chunks_mut(n).enumerate() {
                for (o, v) in product.iter_mut().zip(&self.lane_out) {
                    *o = v[l];
                }
            }
        }
        Ok(())
    }

    /// `H_f(x) v` at a point and direction of any [`Real`] scalar: tracers,
    /// to use the compiled product inside another trace (so that it can be
    /// differentiated again: a third derivative), or num-dual numbers.
    /// Runs both stages; it does not move the point of
    /// [`Hvp::linearize`]. Allocates its result; [`Hvp::apply`] is the
    /// allocation-free `f64` path.
    ///
    /// As for [`Gradient::eval_at`], `f` must not close over tracers of an
    /// enclosing trace; call [`hvp`] inside the trace for such closures;
    /// and where `f` has loops, a point other than `f64` is served by `f`
    /// traced again on the scalar trace with its loops unrolled, once (the
    /// programs are kept for later calls). A function of the array trace
    /// ([`Hvp::array`]) is served at `f64` points only.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] unless `x` and `v` have `n` entries;
    /// errors of re-tracing where a guard fails; [`Error::Unsupported`]
    /// for a function of the array trace at scalars other than `f64`.
    ///
    /// # Example
    ///
    /// ```
    /// use approx::assert_relative_eq;
    /// use optic_ad::{gradient, Hvp, Real, Tracer};
    ///
    /// // f = x⁴: ∇ₓ (H(x) v) = 24 x v.
    /// let mut h = Hvp::new(|x| x[0].powi(4), &[1.0]).unwrap();
    /// let g = gradient(|x| Ok(h.hvp_at(x, &[Tracer::cst(2.0)])?[0]), &[0.5]).unwrap();
    /// assert_relative_eq!(g[0], 24.0 * 0.5 * 2.0);
    /// ```
    pub fn hvp_at<T: Real>(&mut self, x: &[T], v: &[T]) -> Result<Vec<T>> {
        check_len("Hvp: x", self.n, x.len())?;
        check_len("Hvp: v", self.n, v.len())?;
        let f = &self.f;
        let n = self.n;
        if let (Code::Hosted(_), false) = (&self.code, is_f64::<T>()) {
            let xs = primals(x);
            let s = match &mut self.unrolled {
                Some(s) => s,
                None => self.unrolled.insert(HvpSplit::build_unrolled(f, &xs)?),
            };
            return run_or_retrace(
                s,
                || HvpSplit::build_unrolled(f, &xs),
                |s| {
                    let (_, m) = s.staged.run(HvpSplit::LEFT, &[], x)?;
                    Ok(s.staged.run(HvpSplit::RIGHT, &m, v)?.0)
                },
            );
        }
        let mut rebuilt = false;
        let hv = run_or_retrace(
            &mut self.code,
            || {
                let built = HvpSplit::build(f, &primals(x))?;
                rebuilt = true;
                Ok(built)
            },
            |c| match c {
                Code::Scalar(s) => {
                    let (_, m) = s.staged.run(HvpSplit::LEFT, &[], x)?;
                    Ok(s.staged.run(HvpSplit::RIGHT, &m, v)?.0)
                }
                // At `f64` points: one pass, the linearized point unmoved.
                Code::Hosted(h) if is_f64::<T>() => {
                    let mut hv = vec![0.0; n];
                    h.eval(&primals(x), &primals(v), &mut hv)?;
                    Ok(hv.into_iter().map(T::cst).collect())
                }
                Code::Hosted(_) => {
                    let s = HvpSplit::build_unrolled(f, &primals(x))?;
                    let (_, m) = s.staged.run(HvpSplit::LEFT, &[], x)?;
                    Ok(s.staged.run(HvpSplit::RIGHT, &m, v)?.0)
                }
            },
        );
        if rebuilt {
            // The rebuilt programs have fresh buffers: no linearisation.
            self.linearized = false;
        }
        hv
    }
}

/// The Hessian-vector product as an optic (Fischer, ∂P.jl notes, §I): `left`
/// runs the primal stage, `x ↦ (m, (f(x), ∇f(x)))`, and `right` runs the
/// product stage, `(m, v) ↦ H_f(x) v`; the residual `m` is what the products
/// need from `x`.
///
/// Types: `A = Vec<f64>` (`x`, `n` entries), `B = (f64, Vec<f64>)`,
/// `BPrime = Vec<f64>` (`v`), `APrime = Vec<f64>` (`H v`),
/// `Residual = Vec<f64>` ([`Hvp::residual_len`] entries). Through this
/// interface the programs are evaluated with fresh buffers, and a failed
/// guard is returned rather than re-traced (the optic cannot change
/// itself); use [`Hvp::linearize`] and [`Hvp::apply`] in loops.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::optic::Optic;
/// use optic_ad::{Hvp, Real};
///
/// let h = Hvp::new(|x| x[0] * x[0] * x[1], &[1.0, 1.0]).unwrap();
/// let (m, (y, g)) = h.left(vec![2.0, 3.0]).unwrap();
/// assert_relative_eq!(y, 12.0);
/// assert_relative_eq!(g[0], 12.0);
/// let hv = h.right(m, vec![0.0, 1.0]).unwrap(); // second column: (2x₀, 0)
/// assert_relative_eq!(hv[0], 4.0);
/// assert_relative_eq!(hv[1], 0.0);
/// ```
impl<F> crate::optic::Optic for Hvp<F> {
    type A = Vec<f64>;
    type B = (f64, Vec<f64>);
    type BPrime = Vec<f64>;
    type APrime = Vec<f64>;
    type Residual = Vec<f64>;
    type Error = Error;

    fn left(&self, a: Vec<f64>) -> Result<(Vec<f64>, (f64, Vec<f64>))> {
        check_len("Hvp: x", self.n, a.len())?;
        match &self.code {
            Code::Scalar(s) => {
                let (mut y_grad, m) = s.staged.run(HvpSplit::LEFT, &[], &a)?;
                let g = y_grad.split_off(1);
                Ok((m, (y_grad[0], g)))
            }
            Code::Hosted(h) => {
                // The residual is the point: the right runs the left again.
                let mut h = h.clone();
                h.linearize(&a)?;
                let b = (h.value(), h.gradient().to_vec());
                Ok((a, b))
            }
        }
    }

    fn right(&self, m: Vec<f64>, v: Vec<f64>) -> Result<Vec<f64>> {
        check_len("Hvp: v", self.n, v.len())?;
        match &self.code {
            Code::Scalar(s) => {
                check_len("Hvp: residual", s.left().residual_out, m.len())?;
                let (hv, _) = s.staged.run(HvpSplit::RIGHT, &m, &v)?;
                Ok(hv)
            }
            Code::Hosted(h) => {
                check_len("Hvp: residual", self.n, m.len())?;
                let mut h = h.clone();
                let mut hv = vec![0.0; self.n];
                h.linearize(&m)?;
                h.apply(&v, &mut hv)?;
                Ok(hv)
            }
        }
    }
}
