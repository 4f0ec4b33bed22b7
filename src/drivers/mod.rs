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
mod eager;
mod function;
mod gradient;
mod hvp;
mod pullback;
mod taylor;
mod univariate;

pub use directional::Directional;
pub use eager::{gradient, hessian, hvp, jacobian, jvp, value_and_gradient, vjp};
pub use function::{IntoTraced, LeafFunction, OnArray, OnPoint};
pub use gradient::Gradient;
pub use hvp::Hvp;
pub use pullback::{pullback, Pullback};
pub use taylor::{d3, taylor};
pub use univariate::{derivative, derivative_with_error, Derivatives};

use crate::array::{trace_hosted, ArrayProgram};
use crate::error::{Error, Result};
use crate::functor::forward::pushforward_in_place;
use crate::functor::reverse::pullback_in_place;
use crate::functor::TaylorProgram;
use crate::program::trace::{
    trace_builder, trace_builder_hosting, LoopOnHost, Traced, TracedBuilder, Tracer, LOOP_ON_HOST,
};
use crate::program::{Builder, Program, Var};
use crate::real::Real;

use function::{check_nonempty, direction_leaves, in_shape, on_leaves_mut, PointShape};
use hvp::{hvp_staged, HvpSplit};
use taylor::directional_jet;
use univariate::{cast_array, pushforward_program, to_array, univariate_program};

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

/// The primal values of `x`.
fn primals<T: Real>(x: &[T]) -> Vec<f64> {
    x.iter().map(|v| v.primal()).collect()
}
