//! Tracing array code: [`TArray`] and [`TScalar`] record one instruction
//! per array operation into the active array trace.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use super::api::{Array, Indices};
use super::exec::ArrayWorkspace;
use super::ir::{AVar, ArrayBuilder, ArrayProgram, Matrix, Shape};
use super::kernels::{axis_len, matrix_len, MatMulDims};
use crate::error::{check_len, Error, Result};
use crate::program::{Builder, Program, Tracer, Var};
use crate::real::Real;
use crate::rules::private;
use crate::rules::{CustomRule, Prim};

struct Frame {
    id: u64,
    builder: ArrayBuilder,
    /// The trace point, when a first pass found that the code compares
    /// scalars (see [`trace`]).
    point: Option<Vec<Vec<f64>>>,
    /// Set when a comparison needed values and there was no point.
    needs_point: bool,
    /// For a loop body's frame: the values of the enclosing frame it
    /// reads, each with the body input that stands for it, in order.
    /// `None` for a trace's own frame (which captures nothing).
    captures: Option<Vec<(AVar, AVar)>>,
}

thread_local! {
    static STACK: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
    static PRIM_BODIES: RefCell<HashMap<(Prim, i32), Arc<Program>>> = RefCell::new(HashMap::new());
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The trace id of a handle made with no array trace active.
const ORPHAN: u64 = 0;

/// A traced vector: a handle to a value of the active array trace. Every
/// operation on it records one instruction, whatever its length.
#[derive(Clone, Copy)]
pub struct TArray {
    trace: u64,
    var: AVar,
    len: usize,
}

/// A traced scalar of an array trace (a sum, a dot product, an element):
/// a [`Real`], so ordinary scalar code runs on it. Comparisons evaluate
/// the trace so far at the trace point and record a guard.
#[derive(Clone, Copy)]
pub struct TScalar {
    trace: u64,
    var: AVar,
}

impl TArray {
    fn h(&self) -> (u64, AVar) {
        (self.trace, self.var)
    }
}

impl TScalar {
    fn h(&self) -> (u64, AVar) {
        (self.trace, self.var)
    }
}

impl std::fmt::Debug for TArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TArray(v{} @ trace {}, len {})",
            self.var.0, self.trace, self.len
        )
    }
}

impl std::fmt::Debug for TScalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TScalar(v{} @ trace {})", self.var.0, self.trace)
    }
}

/// Runs `build` on the top frame's builder with the operands' values in
/// that builder, or poisons the frame if an operand belongs to another
/// trace. A value of an enclosing trace seen inside a loop body's trace
/// (a closure's capture) becomes an input of the body, once, through every
/// body between them. `None` if no array trace is active.
fn with_top<R>(
    handles: &[(u64, AVar)],
    build: impl FnOnce(&mut ArrayBuilder, &[AVar]) -> R,
) -> Option<(u64, R)> {
    STACK.with(|s| {
        let mut stack = s.borrow_mut();
        let top_id = stack.last()?.id;
        let mut vars = [AVar(0); 4];
        let mut spill = Vec::new();
        for (k, &(trace, var)) in handles.iter().enumerate() {
            let v = if trace == top_id {
                var
            } else {
                match lift(&mut stack, trace, var) {
                    Ok(v) => v,
                    Err(e) => {
                        if let Some(top) = stack.last_mut() {
                            top.builder.poison(e);
                        }
                        var
                    }
                }
            };
            if k < vars.len() {
                vars[k] = v;
            } else {
                spill.push(v);
            }
        }
        let top = stack.last_mut()?;
        let r = if handles.len() <= vars.len() {
            build(&mut top.builder, &vars[..handles.len()])
        } else {
            let mut all = vars.to_vec();
            all.extend(spill);
            build(&mut top.builder, &all)
        };
        Some((top_id, r))
    })
}

/// Value `var` of trace `trace` as a value of the top frame: through the
/// captures of each loop body's frame above its own. An error unless
/// `trace` is on the stack with only body frames above it, and the value
/// is a scalar.
fn lift(stack: &mut [Frame], trace: u64, var: AVar) -> Result<AVar> {
    let foreign = || crate::error::foreign_tracer(trace);
    let owner = stack
        .iter()
        .rposition(|f| f.id == trace)
        .ok_or_else(foreign)?;
    if stack[owner + 1..].iter().any(|f| f.captures.is_none()) {
        return Err(foreign());
    }
    if stack[owner].builder.shape(var) != Shape::Scalar {
        return Err(Error::Unsupported(
            "a loop body that reads an array of the enclosing trace (pass it in the carry)",
        ));
    }
    // The value at the trace point, for the frames that have one (a
    // `while_loop`'s, which evaluates its condition while tracing).
    let mut value = None;
    let mut v = var;
    for i in owner + 1..stack.len() {
        let caps = stack[i].captures.get_or_insert_with(Vec::new);
        v = match caps.iter().find(|(outer, _)| *outer == v) {
            Some(&(_, inner)) => inner,
            None => {
                if stack[i].point.is_some() && value.is_none() {
                    let snap = snapshot(&stack[owner], var);
                    if snap.is_none() {
                        stack[owner].needs_point = true;
                    }
                    value = Some(snap.map_or(f64::NAN, |(p, point)| run_snapshot(&p, &point)));
                }
                let frame = &mut stack[i];
                let inner = frame.builder.input(Shape::Scalar);
                if let Some(caps) = frame.captures.as_mut() {
                    caps.push((v, inner));
                }
                if let Some(point) = frame.point.as_mut() {
                    point.push(vec![value.unwrap_or(f64::NAN)]);
                }
                inner
            }
        };
    }
    Ok(v)
}

fn poison(e: Error) {
    STACK.with(|s| {
        if let Some(top) = s.borrow_mut().last_mut() {
            top.builder.poison(e);
        }
    });
}

fn scalar_of(r: Option<(u64, AVar)>) -> TScalar {
    match r {
        Some((trace, var)) => TScalar { trace, var },
        None => TScalar {
            trace: ORPHAN,
            var: AVar(0),
        },
    }
}

fn array_of(r: Option<(u64, AVar)>, len: usize) -> TArray {
    match r {
        Some((trace, var)) => TArray { trace, var, len },
        None => TArray {
            trace: ORPHAN,
            var: AVar(0),
            len,
        },
    }
}

/// The one-primitive body `prim(x₀, …)`, shared per primitive.
fn prim_body(prim: Prim, param: i32) -> Arc<Program> {
    PRIM_BODIES.with(|c| {
        c.borrow_mut()
            .entry((prim, param))
            .or_insert_with(|| {
                let mut b = Builder::new();
                let x: Vec<Var> = (0..prim.arity()).map(|_| b.input()).collect();
                let y = b.apply(prim, param, &x);
                Arc::new(b.finish_unchecked(&[y]))
            })
            .clone()
    })
}

/// Traces a scalar body of `n` inputs; `None` (and the frame poisoned) if
/// tracing fails.
fn trace_body(n: usize, f: impl FnOnce(&[Tracer]) -> Tracer) -> Option<Arc<Program>> {
    // The point is arbitrary (bodies are traced once for all elements);
    // 0.5 is inside the domain of every primitive.
    match crate::program::trace(|x| vec![f(x)], &vec![0.5; n]) {
        Ok(p) => Some(Arc::new(p)),
        Err(e) => {
            poison(e);
            None
        }
    }
}

fn map_traced(
    args: &[TArray],
    scalars: &[TScalar],
    body: Option<Arc<Program>>,
    len: usize,
) -> TArray {
    let Some(body) = body else {
        return array_of(None, len);
    };
    let handles: Vec<(u64, AVar)> = args
        .iter()
        .map(TArray::h)
        .chain(scalars.iter().map(TScalar::h))
        .collect();
    let r = with_top(&handles, |b, v| b.map(body, v)[0]);
    array_of(r, len)
}

impl Array for TArray {
    type Scalar = TScalar;
    type Elem = Tracer;

    fn scan_dyn(
        &self,
        init: &[TScalar],
        snapshots: Option<usize>,
        body: &dyn Fn(&[TScalar]) -> Vec<TScalar>,
    ) -> Result<(Vec<TScalar>, Self)> {
        let (carry, ys) = trace_loop(self.len, init, Some(self), snapshots, body)?;
        Ok((carry, ys.unwrap_or(*self)))
    }

    fn len(&self) -> usize {
        self.len
    }

    fn map(&self, f: impl Fn(Tracer) -> Tracer) -> Self {
        let body = trace_body(1, |x| f(x[0]));
        map_traced(&[*self], &[], body, self.len)
    }

    fn map2(&self, b: &Self, f: impl Fn(Tracer, Tracer) -> Tracer) -> Result<Self> {
        check_len("map2: second array", self.len, b.len)?;
        let body = trace_body(2, |x| f(x[0], x[1]));
        Ok(map_traced(&[*self, *b], &[], body, self.len))
    }

    fn map3(
        &self,
        b: &Self,
        c: &Self,
        f: impl Fn(Tracer, Tracer, Tracer) -> Tracer,
    ) -> Result<Self> {
        check_len("map3: second array", self.len, b.len)?;
        check_len("map3: third array", self.len, c.len)?;
        let body = trace_body(3, |x| f(x[0], x[1], x[2]));
        Ok(map_traced(&[*self, *b, *c], &[], body, self.len))
    }

    fn map_n(&self, others: &[&Self], f: impl Fn(&[Tracer]) -> Tracer) -> Result<Self> {
        for o in others {
            check_len("map_n: another array", self.len, o.len)?;
        }
        let arrays: Vec<TArray> = std::iter::once(*self)
            .chain(others.iter().map(|o| **o))
            .collect();
        let body = trace_body(arrays.len(), f);
        Ok(map_traced(&arrays, &[], body, self.len))
    }

    fn map_with(&self, s: TScalar, f: impl Fn(Tracer, Tracer) -> Tracer) -> Self {
        let body = trace_body(2, |x| f(x[0], x[1]));
        map_traced(&[*self], &[s], body, self.len)
    }

    fn sum(&self) -> TScalar {
        scalar_of(with_top(&[self.h()], |b, v| b.sum(v[0])))
    }

    fn cumsum(&self) -> Self {
        array_of(
            with_top(&[self.h()], |b, v| b.cumsum(v[0], false)),
            self.len,
        )
    }

    fn max(&self) -> Result<TScalar> {
        crate::error::check_len("max: operand (at least)", 1, self.len.min(1))?;
        Ok(scalar_of(with_top(&[self.h()], |b, v| b.max(v[0]))))
    }

    fn slice(&self, start: usize, len: usize) -> Result<Self> {
        match start.checked_add(len) {
            Some(e) if e <= self.len => {}
            _ => {
                return Err(Error::IndexOutOfRange {
                    what: "slice: end",
                    index: start.saturating_add(len),
                    len: self.len,
                })
            }
        }
        Ok(array_of(
            with_top(&[self.h()], |b, v| b.slice(v[0], start, len)),
            len,
        ))
    }

    fn gather(&self, idx: &Indices) -> Result<Self> {
        if let Some(bad) = idx.first_outside(self.len) {
            return Err(Error::IndexOutOfRange {
                what: "gather: index",
                index: bad,
                len: self.len,
            });
        }
        Ok(array_of(
            with_top(&[self.h()], |b, v| {
                b.gather_bounded(v[0], idx.idx.clone(), idx.bound)
            }),
            idx.len(),
        ))
    }

    fn scatter_add(&self, idx: &Indices, len: usize) -> Result<Self> {
        check_len("scatter_add: indices vs values", self.len, idx.len())?;
        if let Some(bad) = idx.first_outside(len) {
            return Err(Error::IndexOutOfRange {
                what: "scatter_add: index",
                index: bad,
                len,
            });
        }
        Ok(array_of(
            with_top(&[self.h()], |b, v| {
                b.scatter_add_bounded(v[0], idx.idx.clone(), len, idx.bound)
            }),
            len,
        ))
    }

    fn matvec(m: &Arc<Matrix>, v: &Self) -> Result<Self> {
        check_len("matvec: vector vs matrix columns", m.cols(), v.len)?;
        Ok(array_of(
            with_top(&[v.h()], |b, v| b.matvec(m.clone(), v[0])),
            m.rows(),
        ))
    }

    fn vecmat(m: &Arc<Matrix>, v: &Self) -> Result<Self> {
        check_len("vecmat: vector vs matrix rows", m.rows(), v.len)?;
        Ok(array_of(
            with_top(&[v.h()], |b, v| b.vecmat(m.clone(), v[0])),
            m.cols(),
        ))
    }

    fn fill(s: TScalar, len: usize) -> Result<Self> {
        Ok(array_of(
            with_top(&[s.h()], |b, v| b.broadcast(v[0], Shape::Vector(len))),
            len,
        ))
    }

    fn constant(data: &Arc<[f64]>) -> Self {
        array_of(with_top(&[], |b, _| b.constant(data.clone())), data.len())
    }

    fn concat(&self, other: &Self) -> Self {
        let n = self.len + other.len;
        array_of(with_top(&[self.h(), other.h()], |b, v| b.concat(v)), n)
    }

    // The rank-2 operations record their matrices as matrices (values of
    // shape `rows × cols`) between reshapes of the flat handles; the
    // builder cancels a reshape of a reshape, so a chain of matrix
    // operations holds its values as matrices.

    fn matmul_flat(&self, b: &Self, d: MatMulDims) -> Result<Self> {
        let (m, _, n) = d.check(self.len, b.len)?;
        Ok(array_of(
            with_top(&[self.h(), b.h()], |bl, v| {
                let x = bl.reshape(v[0], Shape::Matrix(d.a_rows, d.a_cols));
                let y = bl.reshape(v[1], Shape::Matrix(d.b_rows, d.b_cols));
                let c = bl.matmul(x, y, d.transpose_a, d.transpose_b);
                bl.reshape(c, Shape::Vector(m * n))
            }),
            m * n,
        ))
    }

    fn transpose_flat(&self, rows: usize, cols: usize) -> Result<Self> {
        check_len("transpose: rows × cols", matrix_len(rows, cols)?, self.len)?;
        Ok(array_of(
            with_top(&[self.h()], |b, v| {
                let x = b.reshape(v[0], Shape::Matrix(rows, cols));
                let t = b.transpose(x);
                b.reshape(t, Shape::Vector(self.len))
            }),
            self.len,
        ))
    }

    fn sum_axis_flat(&self, rows: usize, cols: usize, axis: usize) -> Result<Self> {
        check_len("sum_axis: rows × cols", matrix_len(rows, cols)?, self.len)?;
        let n = axis_len(axis, rows, cols, "sum_axis: axis")?;
        Ok(array_of(
            with_top(&[self.h()], |b, v| {
                let x = b.reshape(v[0], Shape::Matrix(rows, cols));
                b.sum_axis(x, axis)
            }),
            n,
        ))
    }

    fn broadcast_axis_flat(&self, axis: usize, rows: usize, cols: usize) -> Result<Self> {
        let n = axis_len(axis, rows, cols, "broadcast_axis: axis")?;
        check_len("broadcast_axis: vector vs matrix", n, self.len)?;
        let len = matrix_len(rows, cols)?;
        Ok(array_of(
            with_top(&[self.h()], |b, v| {
                let x = b.broadcast_axis(v[0], axis, rows, cols);
                b.reshape(x, Shape::Vector(len))
            }),
            len,
        ))
    }
}

/// The value of a scalar at the trace point: the trace so far, evaluated.
/// A value read by the user's code (`Real::primal`, a tracer's `value`,
/// a conversion to `f64`, `{:?}`): refused inside a loop body, which is
/// traced once for every step, so that a value read there would be the
/// first step's at every step (the frame is poisoned with
/// [`Error::Unsupported`]; the scalar drivers then unroll the loop).
fn user_primal(t: TScalar) -> f64 {
    STACK.with(|s| {
        let mut stack = s.borrow_mut();
        let in_body = stack
            .iter()
            .rfind(|f| f.id == t.trace)
            .is_some_and(|f| f.captures.is_some());
        if in_body {
            if let Some(top) = stack.last_mut() {
                top.builder.poison(Error::Unsupported(
                    "a value read inside a loop body on the array trace (the body is traced \
                     once for every step): compare tracers instead, or let the scalar trace \
                     unroll the loop",
                ));
            }
        }
    });
    primal_of(t)
}

fn primal_of(t: TScalar) -> f64 {
    let snapshot = STACK.with(|s| {
        let mut stack = s.borrow_mut();
        let frame = stack.iter_mut().find(|f| f.id == t.trace)?;
        let snap = snapshot(frame, t.var);
        if snap.is_none() {
            frame.needs_point = true;
        }
        snap
    });
    snapshot.map_or(f64::NAN, |(p, point)| run_snapshot(&p, &point))
}

/// The program computing `var` from the frame's inputs, and the frame's
/// point, or `None` if the frame has no point.
fn snapshot(frame: &Frame, var: AVar) -> Option<(ArrayProgram, Vec<Vec<f64>>)> {
    let point = frame.point.clone()?;
    let b = &frame.builder;
    let p = ArrayProgram {
        input_shapes: b.input_shapes().to_vec(),
        ops: b.ops().to_vec(),
        shapes: (0..b.len()).map(|i| b.shape(AVar(i as u32))).collect(),
        outputs: vec![var],
        guards: Vec::new(),
        defect: None,
        id: super::ir::fresh_id(),
    }
    .dce();
    Some((p, point))
}

/// The first element of the output of a [`snapshot`], NaN where it fails.
fn run_snapshot(p: &ArrayProgram, point: &[Vec<f64>]) -> f64 {
    let inputs: Vec<&[f64]> = point.iter().map(Vec::as_slice).collect();
    let mut ws = ArrayWorkspace::new(p);
    match ws.run(p, &inputs) {
        Ok(()) => ws.output(p, 0).first().copied().unwrap_or(f64::NAN),
        Err(_) => f64::NAN,
    }
}

fn constant(c: f64) -> TScalar {
    scalar_of(with_top(&[], |b, _| b.fill(c, Shape::Scalar)))
}

fn apply_scalar(x: &[TScalar], body: Arc<Program>) -> TScalar {
    let handles: Vec<(u64, AVar)> = x.iter().map(TScalar::h).collect();
    scalar_of(with_top(&handles, |b, v| b.map(body, v)[0]))
}

fn compare(a: TScalar, b: TScalar) -> Option<Ordering> {
    let ord = primal_of(a).partial_cmp(&primal_of(b));
    with_top(&[a.h(), b.h()], |bl, v| bl.guard(v[0], v[1], ord));
    ord
}

impl private::Internal for TScalar {
    fn primal(&self) -> f64 {
        user_primal(*self)
    }
    fn apply_prim(prim: Prim, param: i32, x: &[Self]) -> Self {
        apply_scalar(x, prim_body(prim, param))
    }
    fn traces_loops() -> bool {
        true
    }
    fn fold_traced(
        steps: usize,
        init: &[Self],
        snapshots: Option<usize>,
        body: &dyn Fn(&[Self]) -> Vec<Self>,
    ) -> Option<Result<Vec<Self>>> {
        if init.is_empty() {
            return Some(Ok(Vec::new()));
        }
        Some(trace_loop(steps, init, None, snapshots, body).map(|(c, _)| c))
    }
    fn while_traced(
        max_steps: usize,
        init: &[Self],
        snapshots: &dyn Fn(usize) -> Option<usize>,
        cond: &dyn Fn(&[Self]) -> bool,
        body: &dyn Fn(&[Self]) -> Vec<Self>,
    ) -> Option<Result<Vec<Self>>> {
        Some(trace_while(max_steps, init, snapshots, cond, body))
    }
    fn apply_custom(rule: &CustomRule, x: &[Self]) -> Self {
        let mut b = Builder::new();
        let v: Vec<Var> = x.iter().map(|_| b.input()).collect();
        let y = b.custom(rule, &v);
        match b.finish(&[y]) {
            Ok(p) => apply_scalar(x, Arc::new(p)),
            Err(e) => {
                poison(e);
                constant(f64::NAN)
            }
        }
    }
}

/// A loop on the array trace ([`crate::fold`], [`crate::scan`]): the body
/// traced once, on fresh scalars of a frame of its own (what it reads of
/// the enclosing trace becomes its constants), unrolled to a scalar
/// program and recorded as one [`Scan`](super::prims::Scan) instruction.
/// The body gets the carry, then (with `xs`) the step's element, and
/// returns the new carry, then (with `xs`) the step's output; the result
/// is the final carry and (with `xs`) the outputs.
fn trace_loop(
    steps: usize,
    init: &[TScalar],
    xs: Option<&TArray>,
    snapshots: Option<usize>,
    body: &dyn Fn(&[TScalar]) -> Vec<TScalar>,
) -> Result<(Vec<TScalar>, Option<TArray>)> {
    let k = init.len();
    let x = usize::from(xs.is_some());
    if k == 0 {
        return Err(Error::EmptyInput("loop carry"));
    }
    if STACK.with(|s| s.borrow().is_empty()) {
        return Err(Error::TracerWithoutTrace);
    }
    let frame = BodyFrame::push(k + x, None);
    let out = body(&frame.inputs);
    let (frame, outs) = frame.finish(&out)?;
    crate::error::check_len("loop: body outputs (carry, step output)", k + x, outs.len())?;
    if frame.needs_point || !frame.builder.guards_empty() {
        return Err(Error::Unsupported(
            "a comparison inside a loop body on the array trace (compute the branch \
             without comparing, or use the scalar trace, which unrolls the loop)",
        ));
    }
    let captures = frame.captures.unwrap_or_default();
    let scalar_body = frame.builder.finish(&outs)?.unroll()?;
    let scan = super::prims::Scan::new(scalar_body, steps, k, x, captures.len(), false)?
        .with_snapshots(snapshots);
    let (trace, vars, ys) = record_scan(scan, init, &captures, xs, |b, r| {
        if x > 0 {
            vec![b.slice(r, k, steps)]
        } else {
            Vec::new()
        }
    })?;
    let ys = ys.first().map(|&y| array_of(Some((trace, y)), steps));
    Ok((
        vars.into_iter().map(|var| TScalar { trace, var }).collect(),
        ys,
    ))
}

/// A loop body's frame on the stack: `inputs` fresh scalars of it, and,
/// for a `while_loop`'s, a point; removed from the stack when finished or
/// dropped (a panic in user code leaves the stack clean).
struct BodyFrame {
    id: u64,
    inputs: Vec<TScalar>,
    _guard: FrameGuard,
}

impl BodyFrame {
    fn push(n: usize, point: Option<Vec<Vec<f64>>>) -> BodyFrame {
        let id = NEXT_ID.fetch_add(1, AtomicOrdering::Relaxed);
        let mut builder = ArrayBuilder::new();
        let inputs: Vec<TScalar> = (0..n)
            .map(|_| TScalar {
                trace: id,
                var: builder.input(Shape::Scalar),
            })
            .collect();
        STACK.with(|s| {
            s.borrow_mut().push(Frame {
                id,
                builder,
                point,
                needs_point: false,
                captures: Some(Vec::new()),
            })
        });
        BodyFrame {
            id,
            inputs,
            _guard: FrameGuard(id),
        }
    }

    /// The guards recorded in the frame so far, taken out of it.
    fn take_guards(&self) -> Vec<super::ir::ArrayGuard> {
        STACK.with(|s| {
            let mut stack = s.borrow_mut();
            let frame = stack.iter_mut().rfind(|f| f.id == self.id);
            frame.map(|f| f.builder.take_guards()).unwrap_or_default()
        })
    }

    /// The frame, removed from the stack, and `out` as its values (a
    /// value of an enclosing trace becomes a capture first).
    fn finish(self, out: &[TScalar]) -> Result<(Frame, Vec<AVar>)> {
        let handles: Vec<(u64, AVar)> = out.iter().map(TScalar::h).collect();
        let outs = with_top(&handles, |_, v| v.to_vec()).map(|(_, v)| v);
        let frame = STACK.with(|s| {
            let mut stack = s.borrow_mut();
            let pos = stack.iter().rposition(|fr| fr.id == self.id)?;
            Some(stack.remove(pos))
        });
        match (frame, outs) {
            (Some(frame), Some(outs)) => Ok((frame, outs)),
            _ => Err(Error::ForeignTracer { trace: self.id }),
        }
    }
}

/// Records `scan` in the top frame on the initial carry `init`, the
/// `captures`' outer values (its constants) and the per-step data `xs`:
/// the trace, the final carry's values, and what `after` adds from the
/// scan's value.
fn record_scan(
    scan: super::prims::Scan,
    init: &[TScalar],
    captures: &[(AVar, AVar)],
    xs: Option<&TArray>,
    after: impl FnOnce(&mut ArrayBuilder, AVar) -> Vec<AVar>,
) -> Result<(u64, Vec<AVar>, Vec<AVar>)> {
    let k = init.len();
    let top = STACK.with(|s| s.borrow().last().map(|f| f.id));
    let top = top.ok_or(Error::TracerWithoutTrace)?;
    let mut handles: Vec<(u64, AVar)> = init.iter().map(TScalar::h).collect();
    handles.extend(captures.iter().map(|&(outer, _)| (top, outer)));
    if let Some(xs) = xs {
        handles.push(xs.h());
    }
    let n_consts = captures.len();
    let r = with_top(&handles, |b, v| {
        let mut args = vec![b.concat(&v[..k])];
        if n_consts > 0 {
            args.push(b.concat(&v[k..k + n_consts]));
        }
        if xs.is_some() {
            args.push(v[k + n_consts]);
        }
        let r = b.scan(scan, &args);
        let carry: Vec<AVar> = (0..k)
            .map(|j| {
                let e = b.slice(r, j, 1);
                b.sum(e)
            })
            .collect();
        (carry, after(b, r))
    });
    let (trace, (carry, extra)) = r.ok_or(Error::TracerWithoutTrace)?;
    Ok((trace, carry, extra))
}

/// A loop whose trip count depends on the data ([`crate::while_loop`]) on
/// the array trace: the trip count `n` at the trace point, read there, and
/// a [`Scan`](super::prims::Scan) of `n` steps of the body, traced once in
/// a frame of its own whose point is the first carry (so that the
/// condition's comparisons have values). Each comparison the condition
/// and the body make becomes a pair of per-step outputs of the loop, and a
/// [`Mismatches`](super::prims::Mismatches) count of the steps where one
/// comes out otherwise than at the trace point is guarded to be 0; the
/// condition at the final carry (it stops the loop) and at the first
/// (it starts it) is traced where the loop is, with guards of the
/// enclosing trace. At another point where the trip count differs, a
/// guard fails.
fn trace_while(
    max_steps: usize,
    init: &[TScalar],
    snapshots: &dyn Fn(usize) -> Option<usize>,
    cond: &dyn Fn(&[TScalar]) -> bool,
    body: &dyn Fn(&[TScalar]) -> Vec<TScalar>,
) -> Result<Vec<TScalar>> {
    const PATH_CHANGES: &str = "a while_loop whose condition or body compares values that come \
         out differently at different steps of the loop (a different branch taken); write the \
         comparison so that the same branch is taken at every step, or loop on plain numbers";
    let k = init.len();
    if k == 0 {
        return Err(Error::EmptyInput("while_loop: carry"));
    }
    // The trip count is read at the trace point: without one (a first pass
    // of `trace`, run again with the point; or a fold's body, which then
    // refuses the comparison), the loop is not traced.
    let has_point = STACK
        .with(|s| {
            let mut stack = s.borrow_mut();
            let top = stack.last_mut()?;
            if top.point.is_none() {
                top.needs_point = true;
            }
            Some(top.point.is_some())
        })
        .ok_or(Error::TracerWithoutTrace)?;
    if !has_point || max_steps == 0 || !cond(init) {
        return Ok(init.to_vec());
    }
    let c0: Vec<f64> = init.iter().map(|&t| primal_of(t)).collect();
    let frame = BodyFrame::push(k, Some(c0.iter().map(|&c| vec![c]).collect()));
    let still = cond(&frame.inputs);
    let mut guards = frame.take_guards();
    let n_cond = guards.len();
    let out = body(&frame.inputs);
    guards.extend(frame.take_guards());
    let (frame, mut outs) = frame.finish(&out)?;
    check_len("while_loop: body outputs (carry)", k, outs.len())?;
    if !still || frame.needs_point {
        return Err(Error::Unsupported(PATH_CHANGES));
    }
    let m = guards.len();
    let mut orderings = Vec::with_capacity(m);
    for g in &guards {
        orderings.push(g.ordering.ok_or(Error::Unsupported(
            "a while_loop whose condition or body compares a NaN at a step it continues from",
        ))?);
    }
    let captures = frame.captures.unwrap_or_default();
    let consts: Vec<f64> = frame
        .point
        .unwrap_or_default()
        .iter()
        .skip(k)
        .map(|v| v.first().copied().unwrap_or(f64::NAN))
        .collect();
    outs.extend(guards.iter().map(|g| g.a));
    outs.extend(guards.iter().map(|g| g.b));
    let program = frame.builder.finish(&outs)?.unroll()?;
    // The trip count at the trace point: the steps while the condition's
    // comparisons come out as at the first carry.
    let exe = crate::backend::Executable::new(program.clone());
    let mut regs = crate::backend::Registers::new();
    let mut input: Vec<f64> = c0.iter().chain(&consts).copied().collect();
    let mut output = vec![0.0; k + 2 * m];
    let mut n = 0;
    while n < max_steps {
        exe.eval_f64(&mut regs, &input, &mut output)?;
        let holds = |j: usize| {
            super::prims::Mismatches::holds(output[k + j], output[k + m + j], orderings[j])
        };
        if !(0..n_cond).all(holds) {
            break;
        }
        if !(n_cond..m).all(holds) {
            return Err(Error::Unsupported(PATH_CHANGES));
        }
        input[..k].copy_from_slice(&output[..k]);
        n += 1;
    }
    let snapshots = snapshots(n);
    let scan =
        super::prims::Scan::new(program, n, k, 0, captures.len(), false)?.with_snapshots(snapshots);
    let check = super::prims::Mismatches::new(orderings);
    let (trace, vars, _) = record_scan(scan, init, &captures, None, |b, r| {
        if m > 0 {
            let a = b.slice(r, k, m * n);
            let c = b.slice(r, k + m * n, m * n);
            let count = b.apply(check, &[a, c]);
            let zero = b.fill(0.0, Shape::Scalar);
            b.guard(count, zero, Some(Ordering::Equal));
        }
        Vec::new()
    })?;
    let last: Vec<TScalar> = vars.into_iter().map(|var| TScalar { trace, var }).collect();
    // Where the loop stopped before its bound, the condition must fail at
    // the last carry; otherwise a different path through it changed.
    if n < max_steps && cond(&last) {
        return Err(Error::Unsupported(PATH_CHANGES));
    }
    Ok(last)
}

crate::real::traced_conversions!(TScalar);

impl Real for TScalar {
    fn cst(c: f64) -> Self {
        constant(c)
    }
}

macro_rules! binop {
    ($tr:ident, $m:ident, $tra:ident, $ma:ident, $p:ident) => {
        impl $tr for TScalar {
            type Output = TScalar;
            fn $m(self, rhs: TScalar) -> TScalar {
                apply_scalar(&[self, rhs], prim_body(Prim::$p, 0))
            }
        }
        impl $tr<f64> for TScalar {
            type Output = TScalar;
            fn $m(self, rhs: f64) -> TScalar {
                apply_scalar(&[self, constant(rhs)], prim_body(Prim::$p, 0))
            }
        }
        impl $tr<TScalar> for f64 {
            type Output = TScalar;
            fn $m(self, rhs: TScalar) -> TScalar {
                apply_scalar(&[constant(self), rhs], prim_body(Prim::$p, 0))
            }
        }
        impl $tra for TScalar {
            fn $ma(&mut self, rhs: TScalar) {
                *self = $tr::$m(*self, rhs);
            }
        }
    };
}

binop!(Add, add, AddAssign, add_assign, Add);
binop!(Sub, sub, SubAssign, sub_assign, Sub);
binop!(Mul, mul, MulAssign, mul_assign, Mul);
binop!(Div, div, DivAssign, div_assign, Div);

impl Neg for TScalar {
    type Output = TScalar;
    fn neg(self) -> TScalar {
        apply_scalar(&[self], prim_body(Prim::Neg, 0))
    }
}

impl PartialEq for TScalar {
    /// Compares values at the trace point and records a guard.
    fn eq(&self, other: &TScalar) -> bool {
        compare(*self, *other) == Some(Ordering::Equal)
    }
}

impl PartialOrd for TScalar {
    /// Compares values at the trace point and records a guard.
    fn partial_cmp(&self, other: &TScalar) -> Option<Ordering> {
        compare(*self, *other)
    }
}

impl PartialEq<f64> for TScalar {
    fn eq(&self, other: &f64) -> bool {
        compare(*self, constant(*other)) == Some(Ordering::Equal)
    }
}

impl PartialOrd<f64> for TScalar {
    fn partial_cmp(&self, other: &f64) -> Option<Ordering> {
        compare(*self, constant(*other))
    }
}

/// What a traced array function returns: a scalar, a vector, or several.
pub trait ArrayOutput {
    /// The values, in order.
    #[doc(hidden)]
    fn vars(&self) -> Vec<(u64, AVar)>;
}

impl ArrayOutput for TScalar {
    fn vars(&self) -> Vec<(u64, AVar)> {
        vec![(self.trace, self.var)]
    }
}

impl ArrayOutput for TArray {
    fn vars(&self) -> Vec<(u64, AVar)> {
        vec![(self.trace, self.var)]
    }
}

impl<O: ArrayOutput> ArrayOutput for Vec<O> {
    fn vars(&self) -> Vec<(u64, AVar)> {
        self.iter().flat_map(ArrayOutput::vars).collect()
    }
}

/// Removes the frame on drop, so that a panic in user code leaves the
/// stack clean.
struct FrameGuard(u64);

impl Drop for FrameGuard {
    fn drop(&mut self) {
        STACK.with(|s| {
            if let Ok(mut stack) = s.try_borrow_mut() {
                if let Some(pos) = stack.iter().rposition(|f| f.id == self.0) {
                    stack.remove(pos);
                }
            }
        });
    }
}

/// Traces array code into an [`ArrayProgram`]: `f` gets one [`TArray`] per
/// input (of the lengths of `x`) and returns its outputs (a [`TScalar`], a
/// [`TArray`], or a `Vec` of either). The program has one instruction per
/// array operation, whatever the lengths: tracing costs no more for a
/// million elements than for ten. The values of `x` are read only where
/// the code compares scalars (`if loss > 0.0`): then `f` runs a second
/// time with the point kept, and each comparison evaluates the trace so
/// far there and records a guard.
///
/// # Errors
///
/// An error `f` returns (shape errors of the array operations);
/// [`Error::ForeignTracer`] for a value of another trace;
/// [`Error::CapturedOutsideTrace`] if a map body captures a scalar tracer.
///
/// # Example
///
/// ```
/// use optic_ad::array::{trace, Array};
/// use optic_ad::Real;
///
/// let p = trace(|x: &[_]| Ok(x[0].map(|t| t.exp()).sum()), &[&[0.0; 1000]]).unwrap();
/// assert!(p.len() <= 3); // input, map, sum
/// assert_eq!(p.eval(&[&[0.0; 1000]]).unwrap()[0], vec![1000.0]);
/// ```
pub fn trace<O: ArrayOutput>(
    f: impl Fn(&[TArray]) -> Result<O>,
    x: &[&[f64]],
) -> Result<ArrayProgram> {
    // A first pass without the point: most code never compares scalars,
    // and then tracing reads no data at all.
    match trace_pass(&f, x, false)? {
        Some(p) => Ok(p),
        None => trace_pass(&f, x, true)?.ok_or(Error::ForeignTracer { trace: ORPHAN }),
    }
}

/// [`trace`] in one pass with the point kept, so that every comparison and
/// value read has its value from the start.
fn trace_with_point<O: ArrayOutput>(
    f: impl Fn(&[TArray]) -> Result<O>,
    x: &[&[f64]],
) -> Result<ArrayProgram> {
    trace_pass(&f, x, true)?.ok_or(Error::ForeignTracer { trace: ORPHAN })
}

/// One run of `f` on fresh tracers; `None` if it compared scalars and the
/// point was not kept (then run again with `keep_point`).
fn trace_pass<O: ArrayOutput>(
    f: &dyn Fn(&[TArray]) -> Result<O>,
    x: &[&[f64]],
    keep_point: bool,
) -> Result<Option<ArrayProgram>> {
    let id = NEXT_ID.fetch_add(1, AtomicOrdering::Relaxed);
    let mut builder = ArrayBuilder::new();
    let inputs: Vec<TArray> = x
        .iter()
        .map(|xi| TArray {
            trace: id,
            var: builder.input(Shape::Vector(xi.len())),
            len: xi.len(),
        })
        .collect();
    STACK.with(|s| {
        s.borrow_mut().push(Frame {
            id,
            builder,
            point: keep_point.then(|| x.iter().map(|v| v.to_vec()).collect()),
            needs_point: false,
            captures: None,
        })
    });
    let guard = FrameGuard(id);
    let out = f(&inputs);
    let frame = STACK.with(|s| {
        let mut stack = s.borrow_mut();
        let pos = stack.iter().rposition(|fr| fr.id == id)?;
        Some(stack.remove(pos))
    });
    drop(guard);
    let Some(frame) = frame else {
        return Err(Error::ForeignTracer { trace: id });
    };
    if frame.needs_point {
        return Ok(None);
    }
    let out = out?;
    let vars = out.vars();
    if let Some(&(bad, _)) = vars.iter().find(|(t, _)| *t != id) {
        return Err(crate::error::foreign_tracer(bad));
    }
    let outs: Vec<AVar> = vars.into_iter().map(|(_, v)| v).collect();
    frame.builder.finish(&outs).map(Some)
}

/// The array trace as the host of scalar tracers
/// ([`crate::program::trace::Host`]): a hosted tracer is a [`TScalar`]
/// under another name, so scalar code with loops, traced by the scalar
/// drivers, records each loop as one instruction carrying its body.
struct ArrayHost;

/// The array trace's scalar a tracer stands for; a tracer of a scalar
/// trace is foreign here (reported by the trace it reaches).
fn to_scalar(t: Tracer) -> TScalar {
    match t.host_handle() {
        Some((trace, var)) => TScalar {
            trace,
            var: AVar(var),
        },
        None => TScalar {
            trace: ORPHAN,
            var: AVar(0),
        },
    }
}

fn to_tracer(s: TScalar) -> Tracer {
    Tracer::hosted(s.trace, s.var.0)
}

fn to_scalars(t: &[Tracer]) -> Vec<TScalar> {
    t.iter().map(|&t| to_scalar(t)).collect()
}

fn to_tracers(s: &[TScalar]) -> Vec<Tracer> {
    s.iter().map(|&s| to_tracer(s)).collect()
}

impl crate::program::trace::Host for ArrayHost {
    fn apply_prim(&self, prim: Prim, param: i32, x: &[Tracer]) -> Tracer {
        to_tracer(apply_scalar(&to_scalars(x), prim_body(prim, param)))
    }
    fn apply_custom(&self, rule: &CustomRule, x: &[Tracer]) -> Tracer {
        to_tracer(<TScalar as private::Internal>::apply_custom(
            rule,
            &to_scalars(x),
        ))
    }
    fn constant(&self, c: f64) -> Tracer {
        to_tracer(constant(c))
    }
    fn compare(&self, a: Tracer, b: Tracer) -> Option<Ordering> {
        compare(to_scalar(a), to_scalar(b))
    }
    fn primal(&self, t: Tracer) -> f64 {
        user_primal(to_scalar(t))
    }
    fn fold(
        &self,
        steps: usize,
        init: &[Tracer],
        snapshots: Option<usize>,
        body: &dyn Fn(&[Tracer]) -> Vec<Tracer>,
    ) -> Result<Vec<Tracer>> {
        if init.is_empty() {
            return Ok(Vec::new());
        }
        let body = |c: &[TScalar]| to_scalars(&body(&to_tracers(c)));
        let (carry, _) = trace_loop(steps, &to_scalars(init), None, snapshots, &body)?;
        Ok(to_tracers(&carry))
    }
    fn while_loop(
        &self,
        max_steps: usize,
        init: &[Tracer],
        snapshots: &dyn Fn(usize) -> Option<usize>,
        cond: &dyn Fn(&[Tracer]) -> bool,
        body: &dyn Fn(&[Tracer]) -> Vec<Tracer>,
    ) -> Result<Vec<Tracer>> {
        let cond = |c: &[TScalar]| cond(&to_tracers(c));
        let body = |c: &[TScalar]| to_scalars(&body(&to_tracers(c)));
        Ok(to_tracers(&trace_while(
            max_steps,
            &to_scalars(init),
            snapshots,
            &cond,
            &body,
        )?))
    }
}

/// A traced value of either kind, as an output.
struct Handle((u64, AVar));

impl ArrayOutput for Handle {
    fn vars(&self) -> Vec<(u64, AVar)> {
        vec![self.0]
    }
}

/// Traces scalar code `f` of the point `x` on the array trace (its leaves
/// the elements of one vector input, its tracers hosted scalars): the
/// program of a function with loops, for the scalar drivers. Its output is
/// `f`'s one result as a scalar where `vector` is false (gradients, HVPs,
/// Taylor mode), and otherwise the vector of its `m ≥ 1` results, so that
/// its ∂⃗ reads one tangent vector and its ∂⃖ one cotangent vector.
///
/// # Errors
///
/// As [`trace`]; an error `f` returns; [`Error::Unsupported`] for code
/// with no results, or with several where `vector` is false.
pub(crate) fn trace_hosted(
    f: &mut dyn FnMut(&[Tracer]) -> Result<Vec<Tracer>>,
    x: &[f64],
    vector: bool,
) -> Result<ArrayProgram> {
    // Traced with the point from the start: the scalar drivers' users'
    // code compares and reads values (a Rust loop on `x < 1.0`, an
    // `unwrap` of `partial_cmp`), which a first pass without values would
    // answer with NaN.
    let f = RefCell::new(f);
    trace_with_point(
        |xs: &[TArray]| {
            let _hosting = crate::program::trace::begin_hosting(&ArrayHost);
            let leaves = (0..x.len())
                .map(|i| xs[0].get(i).map(to_tracer))
                .collect::<Result<Vec<Tracer>>>()?;
            let ys = (f.borrow_mut())(&leaves)?;
            match (ys.as_slice(), vector) {
                ([y], false) => Ok(Handle(to_scalar(*y).h())),
                ([], _) => Err(Error::Unsupported("a function with no results")),
                (_, false) => Err(Error::Unsupported("several results where one is taken")),
                (_, true) => {
                    let handles: Vec<(u64, AVar)> = ys.iter().map(|&y| to_scalar(y).h()).collect();
                    let v = array_of(with_top(&handles, |b, v| b.concat(v)), ys.len());
                    Ok(Handle(v.h()))
                }
            }
        },
        &[x],
    )
}
