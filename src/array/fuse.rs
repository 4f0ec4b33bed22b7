//! Vertical fusion of maps: a map that reads the outputs of an earlier map
//! of its shape runs inside that map's loop, so the values passed between
//! them are never stored (the map–map rule of Futhark's fusion: T.
//! Henriksen and C. E. Oancea, "A T2 graph-reduction approach to
//! fusion", FHPC 2013). Maps over the same arguments are merged when a
//! program is built ([`ArrayProgram`]'s horizontal fusion); slices and
//! pads read by maps, and map outputs read by a sum, are fused by the
//! executor's plan.
//!
//! Each element of the fused map runs the instructions it ran before, in
//! the same order of dependence, so the fused program computes the same
//! bits.

use std::sync::Arc;

use super::ir::{AVar, ArrayBuilder, ArrayOp, ArrayProgram, Shape};
use crate::error::Result;
use crate::program::{Builder, Var};

/// The longest fused body, in scalar instructions (well within the 4096
/// register instructions the native backend compiles as one block
/// kernel, also after the builder merges it with maps over the same
/// arguments).
const MAX_FUSED_BODY: usize = 1024;

/// The map whose value or output `v` is, if any.
fn map_of(p: &ArrayProgram, v: usize) -> Option<usize> {
    match p.ops[v] {
        ArrayOp::Map { .. } => Some(v),
        ArrayOp::MapOut(k) => Some(v - k as usize),
        _ => None,
    }
}

/// Programs longer than this are left unfused: each fusion checks the
/// whole program for cycles, so fusing costs `O(maps × instructions)` when
/// the drivers build (about 30 ms at 2 700 instructions in a debug-info
/// release build), never when they run.
const MAX_FUSED_PROGRAM: usize = 1 << 12;

/// `p` with each map that reads outputs of an earlier map of its shape
/// fused into that map's group, where both are in the same stage
/// (`stage[i]`, the stage instruction `i` runs in; `None`: one stage) and
/// the fusion makes no cycle (no instruction outside the group both reads
/// an output of the group and is read by it). Each group becomes one map,
/// placed where its arguments are defined and before its first reader
/// outside; it keeps as outputs only the values read outside the group
/// (or by the program's outputs and guards).
///
/// # Errors
///
/// Those of [`ArrayBuilder::finish`] (none for a well-formed program).
pub(crate) fn fuse_chains(p: &ArrayProgram, stage: Option<&[u32]>) -> Result<ArrayProgram> {
    let n = p.ops.len();
    if n > MAX_FUSED_PROGRAM || p.defect.is_some() {
        return Ok(p.clone());
    }
    // A body with user rules (or a defect) has no native kernel; fused
    // with others it would take theirs away.
    let plain =
        |body: &crate::program::Program| body.custom_rules().is_empty() && body.defect.is_none();
    let label = |i: usize| stage.and_then(|s| s.get(i).copied()).unwrap_or(0);
    // `head[m]`: the first map of map `m`'s group; `members[h]`: the maps
    // of the group that `h` heads, in order.
    let mut head: Vec<usize> = (0..n).collect();
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut size: Vec<usize> = vec![0; n];
    let mut graph = Graph::default();
    let mut fused_any = false;
    for i in 0..n {
        let ArrayOp::Map { body, args } = &p.ops[i] else {
            continue;
        };
        members[i].push(i);
        size[i] = body.len();
        let shape = p.shapes[i];
        if shape == Shape::Scalar || !plain(body) {
            continue;
        }
        // The groups of the maps of this shape and stage whose outputs it
        // reads, latest first.
        let mut heads: Vec<usize> = args
            .iter()
            .filter_map(|a| map_of(p, a.index()))
            .filter(|&m| p.shapes[m] == shape && label(m) == label(i))
            .filter(|&m| matches!(&p.ops[m], ArrayOp::Map { body, .. } if plain(body)))
            .map(|m| head[m])
            .collect();
        heads.sort_unstable_by(|a, b| b.cmp(a));
        heads.dedup();
        for h in heads {
            if size[h] + body.len() > MAX_FUSED_BODY {
                continue;
            }
            head[i] = h;
            if graph.acyclic(p, &head) {
                members[i].clear();
                members[h].push(i);
                size[h] += body.len();
                fused_any = true;
                break;
            }
            head[i] = i;
        }
    }
    if !fused_any {
        return Ok(p.clone());
    }
    let node = |i: usize| map_of(p, i).map_or(i, |m| head[m]);
    // Values read outside their group (or by an output or a guard).
    let mut read_outside = vec![false; n];
    for (i, op) in p.ops.iter().enumerate() {
        op.for_each_operand(|a| read_outside[a.index()] |= node(a.index()) != node(i));
    }
    for o in &p.outputs {
        read_outside[o.index()] = true;
    }
    for g in &p.guards {
        read_outside[g.a.index()] = true;
        read_outside[g.b.index()] = true;
    }

    let mut b = ArrayBuilder::new();
    let mut map: Vec<AVar> = vec![AVar(0); n];
    let xs: Vec<AVar> = p.input_shapes.iter().map(|&s| b.input(s)).collect();
    for u in graph.order(p, &head) {
        match &p.ops[u] {
            ArrayOp::Input(k) => map[u] = xs[*k as usize],
            ArrayOp::Map { .. } if members[u].len() > 1 => {
                fuse_group(p, &members[u], &read_outside, &mut b, &mut map);
            }
            ArrayOp::Map { body, args } => {
                let args: Vec<AVar> = args.iter().map(|a| map[a.index()]).collect();
                for (k, v) in b.map(body.clone(), &args).into_iter().enumerate() {
                    map[u + k] = v;
                }
            }
            ArrayOp::MapOut(_) => {}
            op => map[u] = b.copy_op(op, p.shapes[u], &p.shapes, &map),
        }
    }
    for g in &p.guards {
        b.guard(map[g.a.index()], map[g.b.index()], g.ordering);
    }
    let outs: Vec<AVar> = p.outputs.iter().map(|o| map[o.index()]).collect();
    b.finish(&outs)
}

/// The graph of a program whose maps are grouped (one node per group, one
/// per other instruction), with buffers reused between checks.
#[derive(Default)]
struct Graph {
    succ: Vec<Vec<usize>>,
    indeg: Vec<usize>,
}

impl Graph {
    fn build(&mut self, p: &ArrayProgram, head: &[usize]) {
        let n = p.ops.len();
        self.succ.resize_with(n, Vec::new);
        self.succ.iter_mut().for_each(Vec::clear);
        self.indeg.clear();
        self.indeg.resize(n, 0);
        let node = |i: usize| map_of(p, i).map_or(i, |m| head[m]);
        for (i, op) in p.ops.iter().enumerate() {
            let v = node(i);
            op.for_each_operand(|a| {
                let u = node(a.index());
                if u != v {
                    self.succ[u].push(v);
                    self.indeg[v] += 1;
                }
            });
        }
    }

    /// The nodes in an order where each comes after those it reads,
    /// earliest first among those ready; shorter than the nodes if there
    /// is a cycle.
    fn order(&mut self, p: &ArrayProgram, head: &[usize]) -> Vec<usize> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        self.build(p, head);
        let is_node = |i: usize| map_of(p, i).is_none_or(|m| head[m] == i);
        let mut ready: BinaryHeap<Reverse<usize>> = (0..p.ops.len())
            .filter(|&i| is_node(i) && self.indeg[i] == 0)
            .map(Reverse)
            .collect();
        let mut out = Vec::new();
        while let Some(Reverse(u)) = ready.pop() {
            out.push(u);
            for k in 0..self.succ[u].len() {
                let v = self.succ[u][k];
                self.indeg[v] -= 1;
                if self.indeg[v] == 0 {
                    ready.push(Reverse(v));
                }
            }
        }
        out
    }

    fn acyclic(&mut self, p: &ArrayProgram, head: &[usize]) -> bool {
        let nodes = (0..p.ops.len())
            .filter(|&i| map_of(p, i).is_none_or(|m| head[m] == i))
            .count();
        self.order(p, head).len() == nodes
    }
}

/// Emits the maps `group` (a head and the maps fused into it) as one map
/// and records the values of their outputs read outside the group.
fn fuse_group(
    p: &ArrayProgram,
    group: &[usize],
    read_outside: &[bool],
    b: &mut ArrayBuilder,
    map: &mut [AVar],
) {
    let in_group = |v: usize| map_of(p, v).is_some_and(|m| group.contains(&m));
    // Arguments from outside the group, each one input of the fused body.
    let mut outer: Vec<usize> = Vec::new();
    for &m in group {
        if let ArrayOp::Map { args, .. } = &p.ops[m] {
            for a in args {
                if !in_group(a.index()) && !outer.contains(&a.index()) {
                    outer.push(a.index());
                }
            }
        }
    }
    let mut sb = Builder::new();
    let outer_ins: Vec<Var> = outer.iter().map(|_| sb.input()).collect();
    // The body value of each output of a member, and those kept.
    let mut inner: Vec<(usize, Var)> = Vec::new();
    let mut kept: Vec<(usize, Var)> = Vec::new();
    for &m in group {
        let ArrayOp::Map { body, args } = &p.ops[m] else {
            continue;
        };
        let ins: Vec<Var> = args
            .iter()
            .map(|a| {
                let v = a.index();
                match inner.iter().find(|(u, _)| *u == v) {
                    Some(&(_, x)) => x,
                    None => outer_ins[outer.iter().position(|&u| u == v).unwrap_or(0)],
                }
            })
            .collect();
        let vals = body.copy_into(&mut sb, &ins);
        for (k, o) in body.outputs().iter().enumerate() {
            let y = vals[o.index()];
            inner.push((m + k, y));
            if read_outside[m + k] {
                kept.push((m + k, y));
            }
        }
    }
    if kept.is_empty() {
        return;
    }
    let outs: Vec<Var> = kept.iter().map(|&(_, y)| y).collect();
    let body = Arc::new(sb.finish_unchecked(&outs).dce());
    let args: Vec<AVar> = outer.iter().map(|&v| map[v]).collect();
    let vals = b.map(body, &args);
    for (&(v, _), y) in kept.iter().zip(vals) {
        map[v] = y;
    }
}

impl ArrayProgram {
    /// The program with chains of maps fused (vertical fusion): a map that
    /// reads outputs of an earlier map of its shape runs inside that map's
    /// loop, so the values between them are never stored; the result
    /// keeps only the outputs read elsewhere. Same bits: each element runs
    /// the instructions it ran before. The drivers ([`crate::Gradient`],
    /// [`crate::Hvp`], [`crate::array::Nested`] and the pullbacks of the
    /// array trace; not Taylor mode) fuse their programs this way, each
    /// stage on its own (values of one stage are never recomputed in
    /// another).
    ///
    /// A group's fused body has at most 1024 scalar instructions; maps
    /// whose bodies hold user rules ([`crate::CustomRule`]) are not fused
    /// (they have no native kernel, and would take it from the others);
    /// programs of more than 4096 instructions are returned as they are.
    /// A guard that fails in a fused body is reported with its index in
    /// that body.
    ///
    /// # Errors
    ///
    /// Those of [`ArrayBuilder::finish`] (none for a well-formed program).
    ///
    /// # Example
    ///
    /// `Σ exp(sin xᵢ)`: two maps and a sum, fused into one map whose loop
    /// also sums.
    ///
    /// ```
    /// use optic_ad::array::{self, Array, ArrayOp, TArray};
    /// use optic_ad::Real;
    ///
    /// let x = [0.1, 0.2, 0.3];
    /// let p = array::trace(
    ///     |t: &[TArray]| Ok(t[0].map(|u| u.sin()).map(|u| u.exp()).sum()),
    ///     &[&x],
    /// )
    /// .unwrap();
    /// let maps = |p: &array::ArrayProgram| {
    ///     p.ops().iter().filter(|o| matches!(o, ArrayOp::Map { .. })).count()
    /// };
    /// let q = p.fuse_chains().unwrap();
    /// assert_eq!((maps(&p), maps(&q)), (2, 1));
    /// let (a, b) = (p.eval(&[&x]).unwrap(), q.eval(&[&x]).unwrap());
    /// assert_eq!(a[0][0].to_bits(), b[0][0].to_bits());
    /// ```
    pub fn fuse_chains(&self) -> Result<ArrayProgram> {
        fuse_chains(self, None)
    }

    /// Test hook: [`ArrayProgram::fuse_chains`] where instruction `i` runs
    /// in stage `stage[i]` and maps fuse only within a stage.
    #[doc(hidden)]
    pub fn fuse_chains_in_stages(&self, stage: &[u32]) -> Result<ArrayProgram> {
        fuse_chains(self, Some(stage))
    }
}
