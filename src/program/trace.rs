//! Tracing: run generic user code on [`Tracer`]s and record one instruction
//! per primitive.
//!
//! Traces nest. Each active trace is a frame on a thread-local stack; a tracer
//! names its trace. When code inside an inner trace uses a tracer of an
//! enclosing trace (a closure capture, as in K. Fischer, "∂P.jl terminology and
//! notation guide", Snippets 21–23), the inner trace records it as an extra
//! input, a *capture*, and the derived inner program is later evaluated on the
//! outer tracers, which records it into the outer trace. Perturbations of
//! different levels therefore never mix. A tracer whose trace is no longer
//! active is detected and reported as [`Error::ForeignTracer`].

use std::cell::{Cell, RefCell};
use std::cmp::Ordering;
use std::collections::HashMap;
use std::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use super::ir::{Builder, Program, Var, MAX_ARITY};
use crate::error::{Error, Result};
use crate::real::Real;
use crate::rules::private;
use crate::rules::{CustomRule, Prim};

/// A traced scalar: a handle to a value in an active trace.
///
/// It is `Copy` and small; arithmetic on it records instructions into the
/// trace it belongs to. Create tracers only through [`trace`] or a driver.
/// Using a tracer after its trace has finished is an error
/// ([`Error::ForeignTracer`]) reported by the trace it is used in.
#[derive(Clone, Copy)]
pub struct Tracer {
    trace: u64,
    var: u32,
}

impl Tracer {
    /// The primal value this tracer stands for at the point being traced,
    /// or `None` once its trace has finished.
    ///
    /// Reading it records nothing: a branch on this value is baked into
    /// the program and is not re-checked where the program is evaluated
    /// again. Branch with comparisons on the tracer itself (`t > 0.0`),
    /// which record guards, or with [`crate::Real::select`].
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::{gradient, Real};
    ///
    /// let mut seen = Vec::new();
    /// let g = gradient(
    ///     |x| {
    ///         seen.push(x[0].value());
    ///         x[0] * x[0]
    ///     },
    ///     &[3.0],
    /// )
    /// .unwrap();
    /// assert_eq!(g, vec![6.0]);
    /// assert_eq!(seen, vec![Some(3.0)]);
    /// ```
    pub fn value(&self) -> Option<f64> {
        if self.host_handle().is_some() {
            return any_host().map(|host| host.primal(*self));
        }
        STACK.with(|s| {
            let stack = s.try_borrow().ok()?;
            stack
                .iter()
                .find(|f| f.id == self.trace)
                .and_then(|f| f.vals.get(self.var as usize).copied())
        })
    }
}

/// Shows the primal value (when the trace is live) beside the trace and
/// the instruction: `Tracer(0.3 @ trace 3, v17)`.
impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.value() {
            Some(v) => write!(f, "Tracer({v:?} @ trace {}, v{})", self.trace, self.var),
            None => write!(f, "Tracer(finished trace {}, v{})", self.trace, self.var),
        }
    }
}

struct Frame {
    id: u64,
    builder: Builder,
    input_vals: Vec<f64>,
    vals: Vec<f64>,
    captures: Vec<Tracer>,
    /// The input each capture became, in the order of `captures`.
    capture_vars: Vec<Var>,
    capture_map: HashMap<(u64, u32), Var>,
    error: Option<Error>,
    /// Whether a loop met in this frame is left to a [`Host`]: the frame
    /// is a driver's first trace, which is traced again on the host when
    /// the code has a loop, instead of unrolling it.
    host_loops: bool,
    /// Whether a loop was met in a frame with `host_loops`.
    saw_loop: bool,
}

impl Frame {
    /// Computes primal values for instructions pushed since the last sync.
    ///
    /// Stops at a user-defined rule and returns it with its argument: its
    /// value is computed by the caller with the trace stack released, since
    /// a rule's value may itself use the drivers (and so trace).
    fn sync(&mut self) -> Option<(CustomRule, Vec<f64>)> {
        let Frame {
            builder,
            input_vals,
            vals,
            ..
        } = self;
        let code = builder.code();
        while let Some(ins) = code.get(vals.len()) {
            // An operand that is no value (the placeholder of a rule applied
            // to more than `MAX_ARITY` arguments, which `finish` reports as
            // malformed) reads as NaN.
            let value_of = |a: &Var| vals.get(a.index()).copied().unwrap_or(f64::NAN);
            let v = if let Some(k) = ins.as_input() {
                input_vals[k as usize]
            } else if let Some(c) = ins.as_const() {
                c
            } else if let Some(prim) = ins.prim() {
                let args = ins.operands();
                let mut x = [0.0; MAX_ARITY];
                for (slot, a) in x.iter_mut().zip(args) {
                    *slot = value_of(a);
                }
                if args.len() == prim.arity() {
                    prim.value(&x[..args.len()], ins.param())
                } else {
                    // Malformed: reported when the trace finishes.
                    f64::NAN
                }
            } else {
                let rule = builder.rules().get(ins.rule as usize).cloned();
                let x = ins.operands().iter().map(value_of).collect();
                return rule.map(|rule| (rule, x));
            };
            vals.push(v);
        }
        None
    }
}

/// Brings the values of frame `id` up to date, computing user rules'
/// values with the stack released.
fn settle(id: u64) {
    loop {
        let pending = STACK.with(|s| {
            let mut stack = s.borrow_mut();
            stack.iter_mut().rfind(|f| f.id == id).and_then(Frame::sync)
        });
        let Some((rule, x)) = pending else { return };
        let v = rule.value(&x);
        STACK.with(|s| {
            if let Some(f) = s.borrow_mut().iter_mut().rfind(|f| f.id == id) {
                f.vals.push(v);
            }
        });
    }
}

thread_local! {
    static STACK: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

/// Trace identifiers are unique across threads, so a tracer sent to another
/// thread is never taken for one of that thread's values. They are 64-bit:
/// at one trace a nanosecond they would wrap after 584 years, so a tracer
/// that escaped its trace can never alias a live one. 0 is never used.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The tracer returned when no trace is active: it belongs to no trace, so
/// any trace it reaches reports [`Error::ForeignTracer`].
const ORPHAN: Tracer = Tracer { trace: 0, var: 0 };

/// The bit of a tracer's trace identifier that marks a *hosted* tracer: a
/// scalar of a [`Host`]'s trace (the array trace), whose identifiers are
/// the rest of the bits. Scalar traces never count this far.
const HOSTED: u64 = 1 << 63;

/// A trace of another kind that records what tracers do, in place of a
/// scalar frame: the array trace, on which the compiled drivers trace
/// code with loops, so that a loop is one instruction carrying its body
/// instead of one copy of the body per step (the scalar IR has no value
/// that could hold a loop's stored carries). A hosted tracer's handle is
/// the host's own, `(trace, var)`, with the [`HOSTED`] bit set.
///
/// The program layer declares it and the array layer implements it, so
/// that neither names the other's tracer.
pub(crate) trait Host: Sync {
    /// `prim(x)` on the host's innermost trace.
    fn apply_prim(&self, prim: Prim, param: i32, x: &[Tracer]) -> Tracer;
    /// A user rule applied to `x`.
    fn apply_custom(&self, rule: &CustomRule, x: &[Tracer]) -> Tracer;
    /// A constant.
    fn constant(&self, c: f64) -> Tracer;
    /// Compares primal values, recording a guard.
    fn compare(&self, a: Tracer, b: Tracer) -> Option<Ordering>;
    /// The primal value at the trace point (NaN if unknown).
    fn primal(&self, t: Tracer) -> f64;
    /// [`crate::fold`] as one loop instruction.
    fn fold(
        &self,
        steps: usize,
        init: &[Tracer],
        snapshots: Option<usize>,
        body: &dyn Fn(&[Tracer]) -> Vec<Tracer>,
    ) -> Result<Vec<Tracer>>;
    /// [`crate::while_loop`] as one loop instruction.
    fn while_loop(
        &self,
        max_steps: usize,
        init: &[Tracer],
        snapshots: &dyn Fn(usize) -> Option<usize>,
        cond: &dyn Fn(&[Tracer]) -> bool,
        body: &dyn Fn(&[Tracer]) -> Vec<Tracer>,
    ) -> Result<Vec<Tracer>>;
}

thread_local! {
    /// Active hosts, innermost last, each with the number of scalar frames
    /// that were on the stack when it began: a scalar frame pushed later
    /// (a map body, a driver called inside the hosted code) is inner to it.
    static HOSTS: RefCell<Vec<(usize, &'static dyn Host)>> = const { RefCell::new(Vec::new()) };
    /// The length of `HOSTS`, read first by every tracer operation: a
    /// `Cell` read, where the common case (no host) would otherwise borrow
    /// the `RefCell` on each operation.
    static N_HOSTS: Cell<usize> = const { Cell::new(0) };
}

/// Ends a hosting on drop (also when the hosted code panics).
pub(crate) struct Hosting(());

impl Drop for Hosting {
    fn drop(&mut self) {
        HOSTS.with(|h| {
            if let Ok(mut h) = h.try_borrow_mut() {
                h.pop();
                N_HOSTS.with(|n| n.set(h.len()));
            }
        });
    }
}

/// From now until the returned guard drops, tracers record on `host`
/// wherever no scalar frame is inner to it.
pub(crate) fn begin_hosting(host: &'static dyn Host) -> Hosting {
    let depth = STACK.with(|s| s.borrow().len());
    HOSTS.with(|h| {
        let mut h = h.borrow_mut();
        h.push((depth, host));
        N_HOSTS.with(|n| n.set(h.len()));
    });
    Hosting(())
}

/// The host that records new values, if the innermost trace is hosted.
#[inline]
fn active_host() -> Option<&'static dyn Host> {
    if N_HOSTS.with(Cell::get) == 0 {
        return None;
    }
    let (depth, host) = HOSTS.with(|h| h.borrow().last().copied())?;
    let scalar_frames = STACK.with(|s| s.borrow().len());
    (scalar_frames <= depth).then_some(host)
}

/// The host of the innermost hosting, for reading a hosted tracer.
fn any_host() -> Option<&'static dyn Host> {
    HOSTS.with(|h| h.borrow().last().map(|&(_, host)| host))
}

impl Tracer {
    /// The tracer standing for value `var` of the host's trace `trace`.
    pub(crate) fn hosted(trace: u64, var: u32) -> Tracer {
        Tracer {
            trace: trace | HOSTED,
            var,
        }
    }

    /// The host's handle `(trace, var)` of a hosted tracer; `None` for a
    /// tracer of a scalar trace.
    pub(crate) fn host_handle(self) -> Option<(u64, u32)> {
        (self.trace & HOSTED != 0).then_some((self.trace & !HOSTED, self.var))
    }
}

/// The payload with which a driver's first trace is unwound at a loop
/// ([`trace_builder_hosting`]): the driver catches it and traces the
/// function again on its host. `resume_unwind` does not call the panic
/// hook, so nothing is printed, and the function sees no error it could
/// mishandle (an `unwrap` of `fold`'s result). Under `panic = "abort"`
/// the loop returns [`LOOP_ON_HOST`] instead.
pub(crate) struct LoopOnHost;

/// Where a loop met on tracers goes: `Some` with the loop's carry where it
/// is recorded on a host; where the innermost scalar frame leaves loops to
/// its driver's host, the frame is marked and the trace unwound with
/// [`LoopOnHost`] (or, where panics abort, `Some` of an error); `None`
/// where the loop is unrolled.
fn hosted_loop(
    on_host: impl FnOnce(&'static dyn Host) -> Result<Vec<Tracer>>,
) -> Option<Result<Vec<Tracer>>> {
    if let Some(host) = active_host() {
        return Some(on_host(host));
    }
    // While the thread unwinds already (a loop in a `Drop` of the traced
    // code), a second unwinding would abort the process: the loop is
    // unrolled there instead.
    let panicking = std::thread::panicking();
    STACK.with(|s| {
        let mut stack = s.borrow_mut();
        let top = stack.last_mut()?;
        top.saw_loop |= top.host_loops;
        (top.host_loops && !panicking).then_some(())
    })?;
    if cfg!(panic = "unwind") {
        std::panic::resume_unwind(Box::new(LoopOnHost));
    }
    Some(Err(LOOP_ON_HOST))
}

/// Resolves `t` to a value of the top frame, capturing it if it belongs to
/// an enclosing trace.
fn resolve(stack: &mut [Frame], t: Tracer) -> Var {
    let depth = stack.len();
    let (outer, top) = stack.split_at_mut(depth - 1);
    let top = &mut top[0];
    if t.trace == top.id {
        return Var(t.var);
    }
    if let Some(frame) = outer.iter().find(|f| f.id == t.trace) {
        if let Some(&v) = top.capture_map.get(&(t.trace, t.var)) {
            return v;
        }
        let value = frame.vals.get(t.var as usize).copied().unwrap_or(f64::NAN);
        top.input_vals.push(value);
        let v = top.builder.input();
        let _ = top.sync(); // an input: no rule to defer
        top.captures.push(t);
        top.capture_vars.push(v);
        top.capture_map.insert((t.trace, t.var), v);
        return v;
    }
    if top.error.is_none() {
        top.error = Some(crate::error::foreign_tracer(t.trace));
    }
    let v = top.builder.constant(f64::NAN);
    let _ = top.sync(); // a constant: no rule to defer
    v
}

/// Records an operation on the top frame.
fn record<const N: usize>(
    operands: [Tracer; N],
    build: impl FnOnce(&mut Builder, [Var; N]) -> Var,
) -> Tracer {
    let t = STACK.with(|s| {
        let mut stack = s.borrow_mut();
        if stack.is_empty() {
            return ORPHAN;
        }
        let vars = operands.map(|t| resolve(&mut stack, t));
        let top = stack.last_mut().expect("non-empty stack");
        let v = build(&mut top.builder, vars);
        Tracer {
            trace: top.id,
            var: v.0,
        }
    });
    if t.trace != ORPHAN.trace {
        settle(t.trace);
    }
    t
}

/// Records an operation with any number of operands (at most
/// [`MAX_ARITY`]; more are recorded as a malformed instruction, which the
/// trace reports).
fn record_slice(operands: &[Tracer], build: impl FnOnce(&mut Builder, &[Var]) -> Var) -> Tracer {
    let mut t = [ORPHAN; MAX_ARITY];
    let n = operands.len().min(MAX_ARITY);
    t[..n].copy_from_slice(&operands[..n]);
    if operands.len() > MAX_ARITY {
        return record([], |b, []| build(b, &[Var(u32::MAX); MAX_ARITY + 1]));
    }
    match n {
        0 => record([], |b, []| build(b, &[])),
        1 => record([t[0]], |b, v| build(b, &v)),
        2 => record([t[0], t[1]], |b, v| build(b, &v)),
        _ => record(t, |b, v| build(b, &v)),
    }
}

fn constant(c: f64) -> Tracer {
    match active_host() {
        Some(host) => host.constant(c),
        None => record([], |b, []| b.constant(c)),
    }
}

fn compare(a: Tracer, b: Tracer) -> Option<Ordering> {
    if let Some(host) = active_host() {
        return host.compare(a, b);
    }
    STACK.with(|s| {
        let mut stack = s.borrow_mut();
        if stack.is_empty() {
            return None;
        }
        let va = resolve(&mut stack, a);
        let vb = resolve(&mut stack, b);
        let top = stack.last_mut().expect("non-empty stack");
        let ord = top.vals[va.index()].partial_cmp(&top.vals[vb.index()]);
        top.builder.guard(va, vb, ord);
        ord
    })
}

fn primal_of(t: Tracer) -> f64 {
    if t.host_handle().is_some() {
        return any_host().map_or(f64::NAN, |host| host.primal(t));
    }
    STACK.with(|s| {
        let stack = s.borrow();
        stack
            .iter()
            .find(|f| f.id == t.trace)
            .and_then(|f| f.vals.get(t.var as usize).copied())
            .unwrap_or(f64::NAN)
    })
}

/// Pops the frame it pushed, even if the traced code panics.
struct FrameGuard {
    id: u64,
}

impl Drop for FrameGuard {
    fn drop(&mut self) {
        STACK.with(|s| {
            let mut stack = s.borrow_mut();
            if let Some(pos) = stack.iter().rposition(|f| f.id == self.id) {
                stack.truncate(pos);
            }
        });
    }
}

/// A traced program together with the enclosing-trace values it captured.
pub(crate) struct Traced {
    pub program: Program,
    /// Tracers of enclosing traces, in the order of the program's inputs
    /// after the first `n` (the traced point).
    pub captures: Vec<Tracer>,
}

/// A finished trace that is still a [`Builder`]: the drivers go on
/// building derivative instructions in it, with the primal's instructions
/// and sharing tables already there, so the primal is never copied.
pub(crate) struct TracedBuilder {
    pub builder: Builder,
    /// The values returned by the traced code.
    pub outputs: Vec<Var>,
    /// The value of each input: the point's `n`, then the captures.
    pub inputs: Vec<Var>,
    /// Length of the point.
    pub n: usize,
    /// Tracers of enclosing traces, in the order of the inputs after the
    /// point.
    pub captures: Vec<Tracer>,
}

impl TracedBuilder {
    /// The input blocks of the traced program: the point, then the
    /// captures if there are any.
    pub fn input_blocks(&self) -> Vec<usize> {
        let mut blocks = vec![self.n];
        if !self.captures.is_empty() {
            blocks.push(self.captures.len());
        }
        blocks
    }

    /// The traced program, dead instructions dropped.
    pub fn finish(self) -> Traced {
        let blocks = self.input_blocks();
        let n_out = self.outputs.len();
        let program = self
            .builder
            .finish_blocks(&self.outputs, blocks, vec![n_out])
            .into_dce();
        Traced {
            program,
            captures: self.captures,
        }
    }
}

/// Traces `f` at `x`; inputs of the program are `x` followed by captures.
pub(crate) fn trace_captured<F>(f: F, x: &[f64]) -> Result<Traced>
where
    F: FnOnce(&[Tracer]) -> Vec<Tracer>,
{
    Ok(trace_builder(f, x)?.finish())
}

/// [`trace_captured`], handing back the builder the trace was recorded in.
pub(crate) fn trace_builder<F>(f: F, x: &[f64]) -> Result<TracedBuilder>
where
    F: FnOnce(&[Tracer]) -> Vec<Tracer>,
{
    trace_builder_in(f, x, false).0
}

/// [`trace_builder`] for a driver that traces code with loops on a
/// [`Host`] instead: a loop ([`crate::fold`], [`crate::while_loop`]) met
/// in this frame is not unrolled; the trace unwinds with [`LoopOnHost`],
/// which the caller catches (or, where panics abort, the loop returns
/// [`LOOP_ON_HOST`] and the second result says that one was met, also
/// where the code swallowed that error), and the driver traces again on
/// its host.
pub(crate) fn trace_builder_hosting<F>(f: F, x: &[f64]) -> (Result<TracedBuilder>, bool)
where
    F: FnOnce(&[Tracer]) -> Vec<Tracer>,
{
    trace_builder_in(f, x, true)
}

/// The error a loop returns in the first trace of a driver that traces
/// code with loops on a [`Host`], in builds where panics abort (elsewhere
/// the trace unwinds with [`LoopOnHost`]); the driver then traces again
/// there.
pub(crate) const LOOP_ON_HOST: Error = Error::Unsupported(
    "a loop in a scalar trace that is traced again on the array trace \
     (return this error from the traced function, with `?`)",
);

fn trace_builder_in<F>(f: F, x: &[f64], host_loops: bool) -> (Result<TracedBuilder>, bool)
where
    F: FnOnce(&[Tracer]) -> Vec<Tracer>,
{
    let id = loop {
        let id = NEXT_ID.fetch_add(1, AtomicOrdering::Relaxed);
        if id != 0 {
            break id;
        }
    };
    let inputs: Vec<Tracer> = STACK.with(|s| {
        let mut stack = s.borrow_mut();
        let mut builder = Builder::new();
        let vars: Vec<Var> = x.iter().map(|_| builder.input()).collect();
        let mut frame = Frame {
            id,
            builder,
            input_vals: x.to_vec(),
            vals: Vec::new(),
            captures: Vec::new(),
            capture_vars: Vec::new(),
            capture_map: HashMap::new(),
            error: None,
            host_loops,
            saw_loop: false,
        };
        let _ = frame.sync(); // inputs only
        stack.push(frame);
        vars.iter()
            .map(|v| Tracer {
                trace: id,
                var: v.0,
            })
            .collect()
    });
    let guard = FrameGuard { id };
    let outs = f(&inputs);
    let out_vars: Vec<Var> = STACK.with(|s| {
        let mut stack = s.borrow_mut();
        outs.iter().map(|&t| resolve(&mut stack, t)).collect()
    });
    let frame = STACK.with(|s| {
        let mut stack = s.borrow_mut();
        let pos = stack.iter().rposition(|f| f.id == id);
        match pos {
            Some(p) if p + 1 == stack.len() => stack.pop(),
            _ => None,
        }
    });
    drop(guard);
    let Some(frame) = frame else {
        return (Err(Error::ForeignTracer { trace: id }), false);
    };
    let saw_loop = frame.saw_loop;
    if let Some(e) = frame.error {
        return (Err(e), saw_loop);
    }
    // A user rule called with the wrong number of arguments is the one
    // malformed instruction tracing can record.
    if let Some(e) = frame.builder.custom_arity_error() {
        return (Err(e), saw_loop);
    }
    let mut input_vars: Vec<Var> = (0..x.len() as u32).map(Var).collect();
    input_vars.extend_from_slice(&frame.capture_vars);
    let traced = TracedBuilder {
        builder: frame.builder,
        outputs: out_vars,
        inputs: input_vars,
        n: x.len(),
        captures: frame.captures,
    };
    (Ok(traced), saw_loop)
}

/// Traces generic user code at the point `x` into a [`Program`] with
/// `x.len()` inputs and one output per returned value.
///
/// Trace once, evaluate many: the program re-runs at any point with
/// [`Program::eval`]. Comparisons made by `f` are recorded as guards; at a
/// point where one no longer holds, evaluation returns
/// [`Error::GuardFailed`] and you re-trace there.
///
/// # Errors
///
/// [`Error::ForeignTracer`] if `f` used a tracer from a finished trace;
/// [`Error::CapturedOutsideTrace`] if `f` closed over tracers of an
/// enclosing trace (use a driver, which handles captures, instead).
///
/// # Example
///
/// ```
/// use optic_ad::{trace, Real};
///
/// fn f<T: Real>(x: &[T]) -> T {
///     x[0].sin() * x[1]
/// }
/// let p = trace(|x| vec![f(x)], &[1.0, 2.0]).unwrap();
/// assert_eq!(p.n_inputs(), 2);
/// println!("{p}");
/// ```
pub fn trace<F>(f: F, x: &[f64]) -> Result<Program>
where
    F: FnOnce(&[Tracer]) -> Vec<Tracer>,
{
    let t = trace_captured(f, x)?;
    if !t.captures.is_empty() {
        return Err(Error::CapturedOutsideTrace(t.captures.len()));
    }
    Ok(t.program)
}

impl private::Internal for Tracer {
    fn primal(&self) -> f64 {
        primal_of(*self)
    }
    fn apply_prim(prim: Prim, param: i32, x: &[Self]) -> Self {
        apply(prim, param, x)
    }
    fn apply_custom(rule: &CustomRule, x: &[Self]) -> Self {
        match active_host() {
            Some(host) => host.apply_custom(rule, x),
            None => record_slice(x, |b, v| b.custom(rule, v)),
        }
    }
    fn traces_loops() -> bool {
        active_host().is_some()
    }
    fn fold_traced(
        steps: usize,
        init: &[Self],
        snapshots: Option<usize>,
        body: &dyn Fn(&[Self]) -> Vec<Self>,
    ) -> Option<Result<Vec<Self>>> {
        hosted_loop(|host| host.fold(steps, init, snapshots, body))
    }
    fn while_traced(
        max_steps: usize,
        init: &[Self],
        snapshots: &dyn Fn(usize) -> Option<usize>,
        cond: &dyn Fn(&[Self]) -> bool,
        body: &dyn Fn(&[Self]) -> Vec<Self>,
    ) -> Option<Result<Vec<Self>>> {
        hosted_loop(|host| host.while_loop(max_steps, init, snapshots, cond, body))
    }
}

/// `prim(x)` on the innermost trace: a hosted one, or the top scalar frame.
fn apply(prim: Prim, param: i32, x: &[Tracer]) -> Tracer {
    match active_host() {
        Some(host) => host.apply_prim(prim, param, x),
        None => record_slice(x, |b, v| b.apply(prim, param, v)),
    }
}

crate::real::traced_conversions!(Tracer);

impl Real for Tracer {
    fn cst(c: f64) -> Self {
        constant(c)
    }
}

macro_rules! tracer_binop {
    ($tr:ident, $m:ident, $tra:ident, $ma:ident, $p:ident) => {
        impl $tr for Tracer {
            type Output = Tracer;
            fn $m(self, rhs: Tracer) -> Tracer {
                match active_host() {
                    Some(host) => host.apply_prim(Prim::$p, 0, &[self, rhs]),
                    None => record([self, rhs], |b, [x, y]| b.apply(Prim::$p, 0, &[x, y])),
                }
            }
        }
        impl $tr<f64> for Tracer {
            type Output = Tracer;
            fn $m(self, rhs: f64) -> Tracer {
                if let Some(host) = active_host() {
                    return host.apply_prim(Prim::$p, 0, &[self, host.constant(rhs)]);
                }
                record([self], |b, [x]| {
                    let k = b.constant(rhs);
                    b.apply(Prim::$p, 0, &[x, k])
                })
            }
        }
        impl $tr<Tracer> for f64 {
            type Output = Tracer;
            fn $m(self, rhs: Tracer) -> Tracer {
                if let Some(host) = active_host() {
                    return host.apply_prim(Prim::$p, 0, &[host.constant(self), rhs]);
                }
                record([rhs], |b, [y]| {
                    let k = b.constant(self);
                    b.apply(Prim::$p, 0, &[k, y])
                })
            }
        }
        impl $tra for Tracer {
            fn $ma(&mut self, rhs: Tracer) {
                *self = $tr::$m(*self, rhs);
            }
        }
    };
}

tracer_binop!(Add, add, AddAssign, add_assign, Add);
tracer_binop!(Sub, sub, SubAssign, sub_assign, Sub);
tracer_binop!(Mul, mul, MulAssign, mul_assign, Mul);
tracer_binop!(Div, div, DivAssign, div_assign, Div);

impl Neg for Tracer {
    type Output = Tracer;
    fn neg(self) -> Tracer {
        match active_host() {
            Some(host) => host.apply_prim(Prim::Neg, 0, &[self]),
            None => record([self], |b, [a]| b.neg(a)),
        }
    }
}

impl PartialEq for Tracer {
    /// Compares primal values and records the outcome as a guard.
    fn eq(&self, other: &Tracer) -> bool {
        compare(*self, *other) == Some(Ordering::Equal)
    }
}

impl PartialOrd for Tracer {
    /// Compares primal values and records the outcome as a guard.
    fn partial_cmp(&self, other: &Tracer) -> Option<Ordering> {
        compare(*self, *other)
    }
}

impl PartialEq<f64> for Tracer {
    fn eq(&self, other: &f64) -> bool {
        compare(*self, constant(*other)) == Some(Ordering::Equal)
    }
}

impl PartialOrd<f64> for Tracer {
    fn partial_cmp(&self, other: &f64) -> Option<Ordering> {
        compare(*self, constant(*other))
    }
}
