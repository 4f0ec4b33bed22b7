//! Evaluation of array programs: native loops over contiguous `f64`
//! buffers, map bodies run block-wise.

use super::ir::{AVar, ArrayOp, ArrayPrim, ArrayProgram, Shape, MAX_ARRAY_ARITY};
use super::kernels::{SEGMENT, SUM_START};
use super::prims::Sum;
use crate::error::{Error, Result};
use std::sync::Arc;

use crate::backend::{Executable, Registers, BLOCK};

/// How a map reads a vector argument without a copy: element `i` is
/// `root[i + shift]` for `lo <= i < hi`, and zero elsewhere (a slice, a
/// pad, or a chain of them).
#[derive(Clone, Copy, Debug, PartialEq)]
struct View {
    root: usize,
    shift: isize,
    lo: usize,
    hi: usize,
}

/// Where each value lives: buffers are assigned from liveness, so that a
/// buffer is reused once its value is dead and the working set stays small.
/// Slices and pads read only by maps are views, never copied; a map output
/// read only by a `sum` is summed inside the map's loop, never stored.
#[derive(Clone, Debug)]
struct Plan {
    /// Buffer of each value (`usize::MAX` for a view or a fused output).
    slot: Vec<usize>,
    /// Length of each buffer.
    lens: Vec<usize>,
    /// The view of each slice or pad read only by maps.
    view: Vec<Option<View>>,
    /// For a map output read only by a `sum`: that sum's value.
    sum_into: Vec<Option<usize>>,
    /// Sums computed inside their map's loop (nothing to run).
    fused_sum: Vec<bool>,
    /// For a map output read only (directly or through views) by a sum of
    /// two vectors: where its map adds it, never storing it.
    acc_into: Vec<Option<Acc>>,
    /// For such a sum of two: which of its arguments arrived that way.
    acc_args: Vec<[bool; 2]>,
    /// For each map: the sums of two it is the first to add into, whose
    /// buffers it fills with `−0.0` first.
    acc_init: Vec<Vec<usize>>,
    /// Inputs read only by maps (directly or through views): read where
    /// the caller keeps them, never copied (`Some(k)`: input `k`).
    external: Vec<Option<u32>>,
}

/// An output of a run written to the caller's slice instead of a buffer:
/// (its value, the slice).
type Ext<'a> = Option<(usize, &'a mut [f64])>;

/// Where a map output is added: element `j` goes to element `j − shift`
/// of value `target`, for `lo ≤ j − shift < hi` (the view the sum read it
/// through).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Acc {
    target: usize,
    shift: isize,
    lo: usize,
    hi: usize,
}

/// Whether `body` is `x0 + x1` and nothing else: the sum of two
/// cotangent contributions the reverse transform emits.
fn is_add_of_two(body: &crate::program::Program) -> bool {
    use crate::program::Op;
    body.n_inputs() == 2
        && body.n_outputs() == 1
        && body.guards().is_empty()
        && body.len() == 3
        && matches!(
            body.op(body.outputs()[0].index()),
            Some(Op::Apply { prim: crate::Prim::Add, args, .. })
                if matches!(args.as_slice(), [a, b] if a.index() + b.index() == 1)
        )
}

/// Instruction `i` as a view of its one operand, for an operation of the
/// table that reads it in place ([`super::ArrayPrimitive::view`]):
/// `(operand, shift, lo, hi)`.
fn view_of(p: &ArrayProgram, i: usize) -> Option<(usize, isize, usize, usize)> {
    let ArrayOp::Prim { prim, args } = &p.ops[i] else {
        return None;
    };
    let &[a] = args.as_slice() else {
        return None;
    };
    let (shift, lo, hi) = prim.view(p.shapes[a.index()], p.shapes[i])?;
    // Positions no buffer reaches (a program read from a file may say
    // anything) are not read as views: the operation then runs, and its
    // buffer's allocation fails as an error.
    let limit = 1usize << 40;
    (lo <= limit && hi <= limit && shift.unsigned_abs() <= limit).then_some(())?;
    Some((a.index(), shift, lo, hi))
}

impl Plan {
    /// `persist[v]`: value `v` must survive the whole run (outputs, guard
    /// operands, and values read by a later stage).
    fn new(p: &ArrayProgram, persist: &[bool], fuse: bool) -> Plan {
        let n = p.ops.len();
        let keep = |v: usize| persist.get(v).copied().unwrap_or(true);
        let mut uses: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, op) in p.ops.iter().enumerate() {
            op.for_each_operand(|o| uses[o.index()].push(i));
        }
        let is_map = |i: usize| matches!(p.ops[i], ArrayOp::Map { .. });
        // Slices and pads whose every reader is a map or another view.
        let mut as_view = vec![false; n];
        for i in (0..n).rev() {
            if fuse && view_of(p, i).is_some() && !keep(i) && p.shapes[i] != Shape::Scalar {
                as_view[i] = uses[i].iter().all(|&c| is_map(c) || as_view[c]);
            }
        }
        // Inputs read only by maps and views: read in place.
        let mut read_out = vec![false; n];
        for o in &p.outputs {
            read_out[o.index()] = true;
        }
        for g in &p.guards {
            read_out[g.a.index()] = true;
            read_out[g.b.index()] = true;
        }
        let external: Vec<Option<u32>> = (0..n)
            .map(|i| match p.ops[i] {
                ArrayOp::Input(k)
                    if fuse
                        && !read_out[i]
                        && !uses[i].is_empty()
                        && uses[i].iter().all(|&c| is_map(c) || as_view[c]) =>
                {
                    Some(k)
                }
                _ => None,
            })
            .collect();
        let mut view: Vec<Option<View>> = vec![None; n];
        for i in 0..n {
            if !as_view[i] {
                continue;
            }
            let Some((a, shift, lo, hi)) = view_of(p, i) else {
                continue;
            };
            view[i] = Some(match view[a] {
                // A view of a view: compose the shifts, intersect the ranges.
                Some(w) => {
                    let lo2 = (w.lo as isize).saturating_sub(shift).max(0) as usize;
                    let hi2 = (w.hi as isize).saturating_sub(shift).max(0) as usize;
                    View {
                        root: w.root,
                        shift: shift.saturating_add(w.shift),
                        lo: lo.max(lo2),
                        hi: hi.min(hi2).max(lo.max(lo2)),
                    }
                }
                None => View {
                    root: a,
                    shift,
                    lo,
                    hi,
                },
            });
        }
        // Map outputs read only by one sum.
        let mut sum_into = vec![None; n];
        let mut fused_sum = vec![false; n];
        for i in 0..n {
            let map_at = match p.ops[i] {
                ArrayOp::Map { .. } => Some(i),
                ArrayOp::MapOut(k) => Some(i - k as usize),
                _ => None,
            };
            if !fuse || map_at.is_none() || keep(i) || p.shapes[i] == Shape::Scalar {
                continue;
            }
            if let [c] = uses[i][..] {
                if p.ops[c].prim::<Sum>().is_some() {
                    sum_into[i] = Some(c);
                    fused_sum[c] = true;
                }
            }
        }
        // Map outputs read only by a sum of two vectors, directly or through
        // views each read once: their map adds them into the sum's buffer.
        // Exact: the sum starts from −0.0, the identity of IEEE addition,
        // and two terms added in either order give the same bits (where a
        // view reads zeros, `+0.0` is added at the end, as the sum would).
        let mut acc_into: Vec<Option<Acc>> = vec![None; n];
        let mut acc_args = vec![[false; 2]; n];
        let mut acc_init: Vec<Vec<usize>> = vec![Vec::new(); n];
        let map_of = |v: usize| match p.ops[v] {
            ArrayOp::Map { .. } => Some(v),
            ArrayOp::MapOut(k) => Some(v - k as usize),
            _ => None,
        };
        for a in 0..n {
            let ArrayOp::Map { body, args } = &p.ops[a] else {
                continue;
            };
            let len = p.shapes[a].len();
            if !fuse
                || args.len() != 2
                || args[0] == args[1]
                || !is_add_of_two(body)
                || p.shapes[a] == Shape::Scalar
                || sum_into[a].is_some()
                || args.iter().any(|&x| p.shapes[x.index()] != p.shapes[a])
            {
                continue;
            }
            let mut first_map = usize::MAX;
            for (j, &x) in args.iter().enumerate() {
                let x = x.index();
                // The value read, through a chain of views each read once.
                let (r, w) = match view[x] {
                    Some(w) => (w.root, w),
                    None => (
                        x,
                        View {
                            root: x,
                            shift: 0,
                            lo: 0,
                            hi: len,
                        },
                    ),
                };
                let mut chain_ok = uses[x].len() == 1;
                let mut c = x;
                while chain_ok && c != r {
                    let Some((inner, ..)) = view_of(p, c) else {
                        break;
                    };
                    chain_ok = uses[inner].len() == 1;
                    c = inner;
                }
                let Some(m) = map_of(r) else { continue };
                if !chain_ok
                    || c != r
                    || m == a
                    || keep(r)
                    || uses[r].len() != 1
                    || p.shapes[r] == Shape::Scalar
                    || sum_into[r].is_some()
                    || acc_into[r].is_some()
                    // A sum of two that maps add into keeps its buffer.
                    || acc_args[r] != [false; 2]
                {
                    continue;
                }
                acc_into[r] = Some(Acc {
                    target: a,
                    shift: w.shift,
                    lo: w.lo,
                    hi: w.hi,
                });
                acc_args[a][j] = true;
                first_map = first_map.min(m);
            }
            if first_map != usize::MAX {
                acc_init[first_map].push(a);
            }
        }
        // Liveness, with a view's uses counted as uses of its root.
        let root = |v: usize| view[v].map_or(v, |w| w.root);
        let mut last_use = vec![0usize; n];
        for (i, op) in p.ops.iter().enumerate() {
            // A map's arguments live until its last output has its buffer,
            // so that no output shares a buffer with an argument.
            let end = match op {
                ArrayOp::Map { body, .. } => i + body.n_outputs().max(1) - 1,
                _ => i,
            };
            if view[i].is_some() {
                continue;
            }
            op.for_each_operand(|o| {
                let r = root(o.index());
                last_use[r] = last_use[r].max(end);
            });
        }
        // A view's root lives as long as the view's readers.
        for i in 0..n {
            if let Some(w) = view[i] {
                for &c in &uses[i] {
                    let end = match &p.ops[c] {
                        ArrayOp::Map { body, .. } => c + body.n_outputs().max(1) - 1,
                        _ => c,
                    };
                    last_use[w.root] = last_use[w.root].max(end);
                }
            }
        }
        // Views of views: their readers were counted above through the
        // outer view; the inner view's own readers are views, which have no
        // buffer to keep.
        let mut slot = vec![usize::MAX; n];
        let mut lens: Vec<usize> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        let mut dying: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (v, &lu) in last_use.iter().enumerate() {
            if !keep(v) && lu > v {
                dying[lu].push(v);
            }
        }
        let take = |len: usize, lens: &mut Vec<usize>, free: &mut Vec<usize>| {
            if let Some(pos) = free.iter().position(|&s| lens[s] == len) {
                free.swap_remove(pos)
            } else {
                lens.push(len);
                lens.len() - 1
            }
        };
        for i in 0..n {
            let mut assign = |v: usize, lens: &mut Vec<usize>, free: &mut Vec<usize>| {
                let len = p.shapes[v].len();
                // A value that must survive has a buffer of its own: another
                // stage may run instructions whose buffers it would share.
                slot[v] = if keep(v) {
                    lens.push(len);
                    lens.len() - 1
                } else {
                    take(len, lens, free)
                };
            };
            let acc_target = acc_args[i] != [false; 2];
            if view[i].is_none()
                && sum_into[i].is_none()
                && !fused_sum[i]
                && acc_into[i].is_none()
                && !acc_target
                && external[i].is_none()
            {
                assign(i, &mut lens, &mut free);
            }
            // A sum computed in a map's loop is written when the map runs:
            // its buffer is taken then.
            if let Some(c) = sum_into[i] {
                assign(c, &mut lens, &mut free);
            }
            // So is a sum of two that a map adds into, at its first map.
            for &t in &acc_init[i] {
                assign(t, &mut lens, &mut free);
            }
            for &v in &dying[i] {
                if slot[v] != usize::MAX {
                    free.push(slot[v]);
                }
            }
        }
        Plan {
            slot,
            lens,
            view,
            sum_into,
            fused_sum,
            acc_into,
            acc_args,
            acc_init,
            external,
        }
    }
}

/// Reusable buffers for running one [`ArrayProgram`] many times: after
/// the first run, [`ArrayWorkspace::run`] allocates nothing.
///
/// # Example
///
/// ```
/// use optic_ad::array::{trace, Array, ArrayWorkspace};
///
/// // f(x) = Σ xᵢ².
/// let p = trace(|x: &[_]| Ok(x[0].map(|t| t * t).sum()), &[&[1.0, 2.0, 3.0]]).unwrap();
/// let mut ws = ArrayWorkspace::new(&p);
/// ws.run(&p, &[&[1.0, 2.0, 3.0]]).unwrap();
/// assert_eq!(ws.output(&p, 0), &[14.0]);
/// ```
#[derive(Clone, Debug)]
pub struct ArrayWorkspace {
    plan: Plan,
    bufs: Vec<Vec<f64>>,
    /// What each thread works in while it runs a map (one per thread of
    /// the largest run so far).
    lanes: Vec<Lanes>,
    scalar_regs: Registers,
    scalar_ins: Vec<f64>,
    scalar_outs: Vec<f64>,
    srcs: Vec<Src>,
    targets: Vec<Vec<f64>>,
    /// Partial sums of a map's outputs that only a sum reads: four
    /// accumulators and the last `len mod 4` elements, per segment and
    /// output.
    accs: Vec<([f64; 4], [f64; 3])>,
    /// Buffers of the sums of two that the running map adds into.
    acc_bufs: Vec<(usize, Vec<f64>)>,
    /// Transposed factors of matrix products.
    matmul_scratch: Vec<f64>,
    /// The program this workspace is planned for.
    program: u64,
    /// Each map's body with its compiled forms (`None` for other
    /// instructions): the backend's state lives here, not in the IR.
    bodies: Vec<Option<Arc<Executable>>>,
}

/// Lanes per run of a map body's register code: its registers (one row
/// of this many lanes per value) stay in the first-level cache, where rows
/// of a 128-element block would not.
const REG_LANES: usize = 32;
const _: () = assert!(BLOCK % REG_LANES == 0);

/// What a map body's register code works in, reused from block to block:
/// a block of each input, and rows of [`REG_LANES`] lanes.
#[derive(Clone, Debug, Default)]
struct RegisterBlocks {
    regs: Vec<[f64; REG_LANES]>,
    #[cfg(feature = "jit")]
    ins: Vec<[f64; BLOCK]>,
    #[cfg(feature = "jit")]
    outs: Vec<[f64; REG_LANES]>,
}

impl RegisterBlocks {
    /// The body's register code over the first `cnt` lanes of a block (in
    /// runs of [`REG_LANES`]), input `k` given by `input(k)`, output `k`
    /// written to `outs[k]` (lanes past the last run are left as they
    /// were).
    fn run(
        &mut self,
        body: &Executable,
        input: impl Fn(u32) -> [f64; BLOCK],
        outs: &mut [[f64; BLOCK]],
        cnt: usize,
    ) -> Result<()> {
        #[cfg(not(feature = "jit"))]
        {
            // One run: a block is REG_LANES long.
            let _ = cnt;
            body.eval_f64_block(&mut self.regs, input, outs)
        }
        #[cfg(feature = "jit")]
        {
            self.ins.clear();
            self.ins.extend((0..body.n_inputs() as u32).map(&input));
            self.outs.resize(outs.len(), [0.0; REG_LANES]);
            let ins = &self.ins;
            for at in (0..cnt).step_by(REG_LANES) {
                let lanes = |k: u32| -> [f64; REG_LANES] {
                    match ins.get(k as usize) {
                        Some(row) => std::array::from_fn(|l| row[at + l]),
                        None => [f64::NAN; REG_LANES],
                    }
                };
                body.eval_f64_block(&mut self.regs, lanes, &mut self.outs)?;
                for (o, r) in outs.iter_mut().zip(&self.outs) {
                    o[at..at + REG_LANES].copy_from_slice(r);
                }
            }
            Ok(())
        }
    }
}

/// What the native map kernels (feature `jit`) work in, reused from block
/// to block.
#[cfg(feature = "jit")]
#[derive(Clone, Debug, Default)]
struct KernelMemory {
    /// A block of each argument that is not read in place.
    gathered: Vec<[f64; BLOCK]>,
    /// A kernel's scratch area.
    scratch: Vec<f64>,
    /// The addresses of the blocks a kernel reads and of the rows it
    /// writes.
    at_inputs: Vec<usize>,
    at_rows: Vec<usize>,
}

/// Where a map reads one argument from.
#[derive(Clone, Copy, Debug)]
enum Src {
    /// A scalar, broadcast.
    Scalar(f64),
    /// A vector, through a view of a buffer.
    View(View),
}

impl ArrayWorkspace {
    /// Buffers for `p`, with outputs and guard operands kept.
    pub fn new(p: &ArrayProgram) -> ArrayWorkspace {
        let mut persist = vec![false; p.ops.len()];
        for o in &p.outputs {
            persist[o.index()] = true;
        }
        for g in &p.guards {
            persist[g.a.index()] = true;
            persist[g.b.index()] = true;
        }
        Self::with_persist(p, persist)
    }

    /// Buffers for `p` that store every value: no views, no sums fused
    /// into maps (the reference the fused plan is tested against).
    #[doc(hidden)]
    pub fn unfused(p: &ArrayProgram) -> ArrayWorkspace {
        let mut ws = Self::new(p);
        let persist: Vec<bool> = (0..p.ops.len())
            .map(|i| p.outputs.iter().any(|o| o.index() == i))
            .collect();
        ws.plan = Plan::new(p, &persist, false);
        ws.bufs = ws.plan.lens.iter().map(|_| Vec::new()).collect();
        ws
    }

    pub(crate) fn with_persist(p: &ArrayProgram, persist: Vec<bool>) -> ArrayWorkspace {
        let plan = Plan::new(p, &persist, true);
        // Buffers are allocated by the first run, so that building costs
        // nothing that grows with the data.
        let bufs = plan.lens.iter().map(|_| Vec::new()).collect();
        ArrayWorkspace {
            plan,
            bufs,
            lanes: vec![Lanes::default()],
            scalar_regs: Registers::new(),
            scalar_ins: Vec::new(),
            scalar_outs: Vec::new(),
            srcs: Vec::new(),
            targets: Vec::new(),
            accs: Vec::new(),
            acc_bufs: Vec::new(),
            matmul_scratch: Vec::new(),
            program: p.id,
            bodies: p
                .ops
                .iter()
                .map(|op| match op {
                    ArrayOp::Map { body, .. } => Some(Arc::new(Executable::new((**body).clone()))),
                    _ => None,
                })
                .collect(),
        }
    }

    /// Test hook of the native backend (feature `jit`): how many maps have
    /// a compiled block kernel so far (none without the feature), and how
    /// many maps there are.
    #[doc(hidden)]
    pub fn native_kernels(&self) -> (usize, usize) {
        let maps = self.bodies.iter().flatten();
        maps.fold((0, 0), |(k, m), b| {
            (k + usize::from(b.has_native_block()), m + 1)
        })
    }

    /// Test hook: the most threads a map of this workspace has run on so
    /// far.
    #[doc(hidden)]
    pub fn threads_used(&self) -> usize {
        self.lanes.len()
    }

    /// Test hook: the elements from which a map runs on several threads
    /// (2¹⁶, or 2¹⁸ with the feature `jit`).
    #[doc(hidden)]
    pub const PARALLEL_MIN: usize = PARALLEL_MIN;

    /// The value of `v` after a run (empty for a value that was not kept).
    pub fn value(&self, v: AVar) -> &[f64] {
        self.plan
            .slot
            .get(v.index())
            .and_then(|&s| self.bufs.get(s))
            .map_or(&[], |b| b.as_slice())
    }

    /// Output `k` of `p` after a run (empty if there is none).
    pub fn output(&self, p: &ArrayProgram, k: usize) -> &[f64] {
        p.outputs.get(k).map_or(&[], |&v| self.value(v))
    }

    /// Runs `p` on `inputs` (one slice per input, of its shape's length).
    ///
    /// Maps of at least 2¹⁶ elements (2¹⁸ with the feature `jit`, whose
    /// kernels do less work per element) run on all threads of rayon's current
    /// pool (the global pool outside `ThreadPool::install`; set
    /// `RAYON_NUM_THREADS=1` or install a pool of one thread to keep them on
    /// the calling thread). The results have the same bits on any number of
    /// threads. Called from outside the pool, each such map hands its work
    /// to the pool through rayon's queue, which allocates a block every 63
    /// hand-offs; called inside `install`, a run allocates nothing after the
    /// first.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] for a wrong number of inputs or an input
    /// of the wrong length; [`Error::GuardFailed`] where a guard no longer
    /// holds (also a comparison inside a map body, in any element);
    /// the program's defect if it has one; [`Error::AllocationFailed`]
    /// where the first run cannot allocate the buffers (one per live
    /// value, of its length).
    pub fn run(&mut self, p: &ArrayProgram, inputs: &[&[f64]]) -> Result<()> {
        self.run_masked(p, inputs, None)
    }

    /// Runs only the instructions with `mask[i]` (all if `None`); the
    /// others keep the values of an earlier run.
    pub(crate) fn run_masked(
        &mut self,
        p: &ArrayProgram,
        inputs: &[&[f64]],
        mask: Option<&[bool]>,
    ) -> Result<()> {
        self.run_masked_ext(p, inputs, mask, &mut None)
    }

    /// [`ArrayWorkspace::run_masked`], with output `k` written to `out`
    /// (of its length) instead of read back from the workspace: where it
    /// is a sum of two that maps add into, they add straight into `out`;
    /// otherwise it is copied there. The workspace's own copy of output `k`
    /// is then not updated.
    ///
    /// # Errors
    ///
    /// As [`ArrayWorkspace::run`]; [`Error::LengthMismatch`] if `out` does
    /// not have output `k`'s length.
    pub(crate) fn run_masked_into(
        &mut self,
        p: &ArrayProgram,
        inputs: &[&[f64]],
        mask: Option<&[bool]>,
        k: usize,
        out: &mut [f64],
    ) -> Result<()> {
        let Some(&v) = p.outputs.get(k) else {
            return Err(Error::IndexOutOfRange {
                what: "array program output",
                index: k,
                len: p.outputs.len(),
            });
        };
        let v = v.index();
        crate::error::check_len("array program output", p.shapes[v].len(), out.len())?;
        if self.plan.acc_args.get(v).is_some_and(|a| *a != [false; 2]) {
            return self.run_masked_ext(p, inputs, mask, &mut Some((v, out)));
        }
        self.run_masked_ext(p, inputs, mask, &mut None)?;
        out.copy_from_slice(self.value(AVar(v as u32)));
        Ok(())
    }

    fn run_masked_ext(
        &mut self,
        p: &ArrayProgram,
        inputs: &[&[f64]],
        mask: Option<&[bool]>,
        ext: &mut Ext<'_>,
    ) -> Result<()> {
        if let Some(e) = &p.defect {
            return Err(e.clone());
        }
        if self.program != p.id {
            return Err(Error::WorkspaceMismatch);
        }
        check_inputs(p, inputs)?;
        for (b, &len) in self.bufs.iter_mut().zip(&self.plan.lens) {
            if b.len() != len {
                crate::error::grow_to("array workspace buffer", b, len, 0.0)?;
            }
        }
        for i in 0..p.ops.len() {
            if mask.is_some_and(|m| !m.get(i).copied().unwrap_or(true)) {
                continue;
            }
            self.exec(p, i, inputs, ext)?;
        }
        check_guards(p, |v| self.value(v))
    }

    fn exec(
        &mut self,
        p: &ArrayProgram,
        i: usize,
        inputs: &[&[f64]],
        ext: &mut Ext<'_>,
    ) -> Result<()> {
        if self.plan.view[i].is_some() || self.plan.fused_sum[i] || self.plan.external[i].is_some()
        {
            return Ok(());
        }
        if self.plan.acc_args[i] != [false; 2] {
            self.finish_acc(p, i, inputs, ext);
            return Ok(());
        }
        if let ArrayOp::Map { args, .. } = &p.ops[i] {
            // Taken out while the map runs (the map borrows the workspace)
            // and put back: no reference count is touched per run.
            let Some(body) = self.bodies.get_mut(i).and_then(Option::take) else {
                return Err(Error::WorkspaceMismatch);
            };
            let result = self.exec_map(p, i, &body, args, inputs, ext);
            self.bodies[i] = Some(body);
            return result;
        }
        let slot = self.plan.slot[i];
        if slot == usize::MAX {
            // A map output summed in its map's loop.
            return Ok(());
        }
        let mut out = std::mem::take(&mut self.bufs[slot]);
        let r = self.exec_into(p, i, inputs, &mut out);
        self.bufs[slot] = out;
        r
    }

    /// Finishes sum of two `i`, into which maps added what they could:
    /// adds its other argument, then `+0.0` where an argument's view reads
    /// zeros (as `x0 + x1` would have).
    fn finish_acc(&mut self, p: &ArrayProgram, i: usize, inputs: &[&[f64]], ext: &mut Ext<'_>) {
        let ArrayOp::Map { args, .. } = &p.ops[i] else {
            return;
        };
        let len = p.shapes[i].len();
        let mut own = Vec::new();
        let out: &mut [f64] = match ext {
            Some((v, out)) if *v == i => out,
            _ => {
                own = std::mem::take(&mut self.bufs[self.plan.slot[i]]);
                &mut own
            }
        };
        let view = |v: usize| {
            self.plan.view[v].unwrap_or(View {
                root: v,
                shift: 0,
                lo: 0,
                hi: len,
            })
        };
        for (j, &a) in args.iter().enumerate() {
            if !self.plan.acc_args[i][j] {
                let w = view(a.index());
                let src = root_of(&self.bufs, &self.plan, inputs, w.root);
                for t in w.lo..w.hi {
                    out[t] += src[(t as isize + w.shift) as usize];
                }
            }
        }
        for &a in args.iter() {
            let w = view(a.index());
            for t in (0..w.lo).chain(w.hi..len) {
                out[t] += 0.0;
            }
        }
        if !matches!(ext, Some((v, _)) if *v == i) {
            self.bufs[self.plan.slot[i]] = own;
        }
    }

    fn buf(&self, v: AVar) -> &[f64] {
        &self.bufs[self.plan.slot[v.index()]]
    }

    fn exec_into(
        &mut self,
        p: &ArrayProgram,
        i: usize,
        inputs: &[&[f64]],
        out: &mut [f64],
    ) -> Result<()> {
        match &p.ops[i] {
            ArrayOp::Input(k) => {
                out.copy_from_slice(inputs[*k as usize]);
            }
            ArrayOp::Fill(c) => out.fill(*c),
            ArrayOp::Const(d) => out.copy_from_slice(d),
            // Run by exec_map.
            ArrayOp::MapOut(_) | ArrayOp::Map { .. } => {}
            ArrayOp::Prim { prim, args } => {
                let mut scratch = std::mem::take(&mut self.matmul_scratch);
                prim_value(
                    p,
                    prim,
                    args,
                    |_, v| self.buf(v),
                    p.shapes[i],
                    &mut scratch,
                    out,
                );
                self.matmul_scratch = scratch;
            }
        }
        Ok(())
    }

    /// Runs map `i`: its body over blocks of [`BLOCK`] elements, reading
    /// arguments through their views and summing outputs that only a sum
    /// reads.
    fn exec_map(
        &mut self,
        p: &ArrayProgram,
        i: usize,
        body: &Executable,
        args: &[AVar],
        inputs: &[&[f64]],
        ext: &mut Ext<'_>,
    ) -> Result<()> {
        let n_out = body.n_outputs();
        let shape = p.shapes[i];
        let n = shape.len();
        // Where each argument comes from.
        self.srcs.clear();
        for &a in args {
            let v = a.index();
            let src = match self.plan.view[v] {
                Some(w) => Src::View(w),
                None if p.shapes[v] == Shape::Scalar => {
                    Src::Scalar(root_of(&self.bufs, &self.plan, inputs, v)[0])
                }
                None => Src::View(View {
                    root: v,
                    shift: 0,
                    lo: 0,
                    hi: n,
                }),
            };
            self.srcs.push(src);
        }
        // The output buffers, taken out while the body runs.
        let mut targets = std::mem::take(&mut self.targets);
        targets.clear();
        for k in 0..n_out {
            let s = self.plan.slot[i + k];
            targets.push(if s == usize::MAX {
                Vec::new()
            } else {
                std::mem::take(&mut self.bufs[s])
            });
        }
        // The buffers of the sums of two this map adds into; those it is
        // the first to add into start from −0.0.
        let mut acc_bufs = std::mem::take(&mut self.acc_bufs);
        acc_bufs.clear();
        let is_ext = |t: usize, ext: &Ext<'_>| matches!(ext, Some((v, _)) if *v == t);
        for k in 0..n_out {
            if let Some(acc) = self.plan.acc_into[i + k] {
                if acc_bufs.iter().all(|(t, _)| *t != acc.target) {
                    // The caller's slice stands in for an output written
                    // there (its entry keeps an empty buffer).
                    let b = if is_ext(acc.target, ext) {
                        Vec::new()
                    } else {
                        std::mem::take(&mut self.bufs[self.plan.slot[acc.target]])
                    };
                    acc_bufs.push((acc.target, b));
                }
            }
        }
        for &t in &self.plan.acc_init[i] {
            match ext {
                Some((v, out)) if *v == t => out.fill(-0.0),
                _ => {
                    if let Some((_, b)) = acc_bufs.iter_mut().find(|(u, _)| *u == t) {
                        b.fill(-0.0);
                    }
                }
            }
        }
        let result = if shape == Shape::Scalar {
            self.scalar_map(body, &mut targets, inputs)
        } else {
            self.block_map(i, body, n, &mut targets, &mut acc_bufs, inputs, ext)
        };
        for (k, b) in targets.drain(..).enumerate() {
            let s = self.plan.slot[i + k];
            if s != usize::MAX {
                self.bufs[s] = b;
            }
        }
        for (t, b) in acc_bufs.drain(..) {
            if !is_ext(t, ext) {
                self.bufs[self.plan.slot[t]] = b;
            }
        }
        self.targets = targets;
        self.acc_bufs = acc_bufs;
        result
    }

    fn scalar_map(
        &mut self,
        body: &Executable,
        targets: &mut [Vec<f64>],
        inputs: &[&[f64]],
    ) -> Result<()> {
        self.scalar_ins.clear();
        for src in &self.srcs {
            let x = match *src {
                Src::Scalar(c) => c,
                Src::View(w) => root_of(&self.bufs, &self.plan, inputs, w.root)
                    .get((w.lo as isize + w.shift) as usize)
                    .copied()
                    .unwrap_or(0.0),
            };
            self.scalar_ins.push(x);
        }
        self.scalar_outs.resize(targets.len(), 0.0);
        body.eval_f64(
            &mut self.scalar_regs,
            &self.scalar_ins,
            &mut self.scalar_outs,
        )?;
        for (t, &y) in targets.iter_mut().zip(&self.scalar_outs) {
            if let Some(slot) = t.first_mut() {
                *slot = y;
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn block_map(
        &mut self,
        i: usize,
        body: &Executable,
        n: usize,
        targets: &mut [Vec<f64>],
        acc_bufs: &mut [(usize, Vec<f64>)],
        inputs: &[&[f64]],
        ext: &mut Ext<'_>,
    ) -> Result<()> {
        let n_out = targets.len();
        // The body's native kernel (feature `jit`): its outputs follow its
        // guard operands in a lane's rows.
        #[cfg(feature = "jit")]
        let native = body.native_block_when_hot(n);
        #[cfg(feature = "jit")]
        let first = native.map_or(0, |nc| nc.out_base);
        #[cfg(not(feature = "jit"))]
        let first = 0;
        let segments = n.div_ceil(SEGMENT).max(1);
        // Partial sums of the outputs that only a sum reads, per segment.
        let mut partial = std::mem::take(&mut self.accs);
        partial.clear();
        partial.resize(segments * n_out, ([SUM_START; 4], [0.0; 3]));
        let threads = self.threads_for(i, n, n_out, acc_bufs.len());
        if self.lanes.len() < threads {
            self.lanes.resize_with(threads, Lanes::default);
        }
        let mut lanes = std::mem::take(&mut self.lanes);
        let run = MapRun {
            i,
            body,
            n,
            n_out,
            first,
            #[cfg(feature = "jit")]
            native,
            plan: &self.plan,
            bufs: &self.bufs,
            inputs,
            srcs: &self.srcs,
        };
        let result = if threads > 1 {
            // Each output's buffer, and each sum of two's, from element 0.
            let mut stores: [&mut [f64]; MAX_SPLIT] = Default::default();
            for (s, t) in stores.iter_mut().zip(targets.iter_mut()) {
                *s = t.as_mut_slice();
            }
            let mut adds = SplitAdds::default();
            let mut ext_out = ext.as_mut().map(|(v, out)| (*v, &mut **out));
            for (t, b) in acc_bufs.iter_mut() {
                let buf: &mut [f64] = match ext_out.take_if(|(v, _)| *v == *t) {
                    Some((_, out)) => out,
                    None => b,
                };
                adds.dests[adds.len] = (*t, 0, buf);
                adds.len += 1;
            }
            run.split(
                &mut lanes[..threads],
                (0, segments),
                stores,
                adds,
                &mut partial,
            )
        } else {
            let mut adds = OneThreadAdds { acc_bufs, ext };
            run.range(&mut lanes[0], (0, n), targets, &mut adds, &mut partial)
        };
        for k in 0..n_out {
            if let Some(c) = self.plan.sum_into[i + k] {
                let mut s = 0.0;
                for seg in 0..segments {
                    let (acc, tail) = partial[seg * n_out + k];
                    let len = SEGMENT.min(n - seg * SEGMENT);
                    let mut t = (acc[0] + acc[1]) + (acc[2] + acc[3]);
                    // The last len mod 4 elements, one at a time, as `sum`
                    // adds them.
                    for &x in &tail[..len % 4] {
                        t += x;
                    }
                    s = if seg == 0 { t } else { s + t };
                }
                // (An empty sum is +0, as `sum4` gives.)
                self.bufs[self.plan.slot[c]][0] = if n == 0 { 0.0 } else { s };
            }
        }
        self.lanes = lanes;
        self.accs = partial;
        result
    }

    /// How many threads run map `i` over `n` elements: one below
    /// [`PARALLEL_MIN`] elements, for a map with more than [`MAX_SPLIT`]
    /// outputs or sums of two to add into, or one that adds into a sum of
    /// two through a view shifted by more than [`MAX_SEAM`] elements;
    /// otherwise rayon's (the current pool's) thread count, at most one per
    /// segment.
    fn threads_for(&self, i: usize, n: usize, n_out: usize, n_adds: usize) -> usize {
        if n < PARALLEL_MIN || n_out > MAX_SPLIT || n_adds > MAX_SPLIT {
            return 1;
        }
        let accs = &self.plan.acc_into[i..i + n_out];
        if accs
            .iter()
            .flatten()
            .any(|a| a.shift.unsigned_abs() > MAX_SEAM)
        {
            return 1;
        }
        rayon::current_num_threads().clamp(1, n.div_ceil(SEGMENT))
    }
}

/// Elements from which a map runs on all of rayon's threads. Measured on
/// 2 cores (array Rosenbrock's gradient and HVP): handing half of a map of
/// 10⁵ elements to a second thread made it 0.84–0.95× as long on the
/// register code but 1.1–1.4× as long with the native kernels (three times
/// less work per element); at 10⁶ both gained.
#[cfg(not(feature = "jit"))]
const PARALLEL_MIN: usize = 1 << 16;
#[cfg(feature = "jit")]
const PARALLEL_MIN: usize = 1 << 18;

/// The most outputs, and sums of two to add into, of a map split across
/// threads (maps with more run on one).
const MAX_SPLIT: usize = 16;

/// The largest shift of a view through which a map split across threads
/// adds into a sum of two. Each thread owns the elements of the sums of two
/// at the indices of its own elements, and computes the blocks beside its
/// range that add into them (at most this many elements, rounded up to
/// whole blocks, so that every block is the one a single thread computes).
const MAX_SEAM: usize = 4 * BLOCK;

/// What one thread works in while it runs blocks of a map, reused from
/// run to run.
#[derive(Clone, Debug, Default)]
struct Lanes {
    regs: RegisterBlocks,
    /// A block of each guard operand and output.
    outs: Vec<[f64; BLOCK]>,
    /// The memory of the native kernels (feature `jit`).
    #[cfg(feature = "jit")]
    kernel: KernelMemory,
}

/// What every thread of one map run reads.
struct MapRun<'a> {
    /// The map's instruction.
    i: usize,
    body: &'a Executable,
    /// Its length.
    n: usize,
    n_out: usize,
    /// The row of its first output among a lane's rows.
    first: usize,
    #[cfg(feature = "jit")]
    native: Option<&'a crate::backend::native::NativeCode>,
    plan: &'a Plan,
    bufs: &'a [Vec<f64>],
    inputs: &'a [&'a [f64]],
    srcs: &'a [Src],
}

/// The sums of two a part of a map adds into: element `j` of output `k`
/// goes to element `j − shift` of its target (see [`Acc`]).
trait AddInto {
    /// Target `t`'s elements held here (those this thread owns), and the
    /// index of the first.
    fn dest(&mut self, t: usize) -> Option<(usize, &mut [f64])>;
}

/// On one thread: the whole buffers, or the caller's slice for the output
/// written there.
struct OneThreadAdds<'a, 'b> {
    acc_bufs: &'a mut [(usize, Vec<f64>)],
    ext: &'a mut Ext<'b>,
}

impl AddInto for OneThreadAdds<'_, '_> {
    fn dest(&mut self, t: usize) -> Option<(usize, &mut [f64])> {
        match self.ext {
            Some((v, out)) if *v == t => Some((0, out)),
            _ => self
                .acc_bufs
                .iter_mut()
                .find(|(u, _)| *u == t)
                .map(|(_, b)| (0, b.as_mut_slice())),
        }
    }
}

/// Split across threads: (target, index of the first element held, the
/// elements) for each sum of two; a thread holds the elements at the
/// indices of its own range of the map's elements (the last thread to the
/// target's end).
#[derive(Default)]
struct SplitAdds<'s> {
    dests: [(usize, usize, &'s mut [f64]); MAX_SPLIT],
    len: usize,
}

impl AddInto for SplitAdds<'_> {
    fn dest(&mut self, t: usize) -> Option<(usize, &mut [f64])> {
        self.dests[..self.len]
            .iter_mut()
            .find(|(u, _, _)| *u == t)
            .map(|(_, base, b)| (*base, &mut **b))
    }
}

impl MapRun<'_> {
    /// Runs segments `s0 .. s1` on `lanes.len()` threads: the segments
    /// are halved (in proportion to the threads) and the halves joined,
    /// each with its part of every buffer.
    fn split(
        &self,
        lanes: &mut [Lanes],
        (s0, s1): (usize, usize),
        mut stores: [&mut [f64]; MAX_SPLIT],
        mut adds: SplitAdds<'_>,
        partial: &mut [([f64; 4], [f64; 3])],
    ) -> Result<()> {
        let (a, b) = (s0 * SEGMENT, (s1 * SEGMENT).min(self.n));
        if lanes.len() == 1 || s1 - s0 == 1 {
            return self.range(
                &mut lanes[0],
                (a, b),
                &mut stores[..self.n_out],
                &mut adds,
                partial,
            );
        }
        let left_threads = lanes.len() / 2;
        let sm = s0 + ((s1 - s0) * left_threads / lanes.len()).max(1);
        let e = sm * SEGMENT;
        let mut right_stores: [&mut [f64]; MAX_SPLIT] = Default::default();
        for (s, r) in stores.iter_mut().zip(right_stores.iter_mut()) {
            if !s.is_empty() {
                let (x, y) = std::mem::take(s).split_at_mut(e - a);
                (*s, *r) = (x, y);
            }
        }
        let mut right_adds = SplitAdds {
            len: adds.len,
            ..SplitAdds::default()
        };
        for (d, r) in adds.dests[..adds.len]
            .iter_mut()
            .zip(right_adds.dests.iter_mut())
        {
            let at = e.clamp(d.1, d.1 + d.2.len());
            let (x, y) = std::mem::take(&mut d.2).split_at_mut(at - d.1);
            d.2 = x;
            *r = (d.0, at, y);
        }
        let (pl, pr) = partial.split_at_mut((sm - s0) * self.n_out);
        let (ll, lr) = lanes.split_at_mut(left_threads);
        let (x, y) = rayon::join(
            || self.split(ll, (s0, sm), stores, adds, pl),
            || self.split(lr, (sm, s1), right_stores, right_adds, pr),
        );
        x.and(y)
    }

    /// Runs elements `a .. b` (`a` the start of a segment) block by block
    /// on one thread: `stores[k]` holds output `k`'s buffer from element
    /// `a` (empty for an output without one), `adds` the sums of two, and
    /// `partial` the partial sums of the segments from `a`'s. Blocks
    /// beside the range whose elements add into the sums of two held here
    /// run too, adding only there.
    fn range<S: AsMut<[f64]>>(
        &self,
        lanes: &mut Lanes,
        (a, b): (usize, usize),
        stores: &mut [S],
        adds: &mut impl AddInto,
        partial: &mut [([f64; 4], [f64; 3])],
    ) -> Result<()> {
        let Lanes {
            regs,
            outs,
            #[cfg(feature = "jit")]
            kernel,
        } = lanes;
        let (i, n, first) = (self.i, self.n, self.first);
        let (plan, bufs, inputs, srcs) = (self.plan, self.bufs, self.inputs, self.srcs);
        outs.resize(self.n_out + first, [0.0; BLOCK]);
        // Outputs a native kernel writes straight into their buffers, in
        // whole blocks: those that neither a sum nor a sum of two takes
        // (and that have a buffer).
        #[cfg(feature = "jit")]
        let plain = |k: usize| plan.acc_into[i + k].is_none() && plan.sum_into[i + k].is_none();
        // The blocks to run: the range, widened by the views' shifts (the
        // elements that add into the sums of two held here), on the grid of
        // blocks from element 0.
        let (mut s_lo, mut s_hi) = (0isize, 0isize);
        for acc in plan.acc_into[i..i + self.n_out].iter().flatten() {
            (s_lo, s_hi) = (s_lo.min(acc.shift), s_hi.max(acc.shift));
        }
        let start = (a as isize + s_lo).max(0) as usize / BLOCK * BLOCK;
        let end = ((b as isize + s_hi).max(0) as usize)
            .next_multiple_of(BLOCK)
            .min(n);
        let mut i0 = start;
        while i0 < end {
            let cnt = BLOCK.min(n - i0);
            // Blocks of the range store their outputs and add into sums;
            // the others only add into the sums of two held here.
            let own = i0 >= a && i0 < b;
            let local = i0.wrapping_sub(a);
            #[cfg(feature = "jit")]
            let held = own.then_some(local);
            let input = |k: u32| -> [f64; BLOCK] {
                match srcs.get(k as usize) {
                    Some(Src::Scalar(c)) => [*c; BLOCK],
                    Some(Src::View(w)) => {
                        read_block(root_of(bufs, plan, inputs, w.root), *w, i0, cnt)
                    }
                    None => [f64::NAN; BLOCK],
                }
            };
            // Whether the outputs marked `in_place` were written in place.
            #[cfg(feature = "jit")]
            let placed = match self.native {
                Some(nc) => native_block(
                    self.body,
                    nc,
                    srcs,
                    |w| root_of(bufs, plan, inputs, w.root),
                    (i0, cnt, held),
                    kernel,
                    outs,
                    &mut *stores,
                    plain,
                )
                .and_then(|ran| match ran {
                    true => Ok(cnt == BLOCK),
                    // Not reached: the kernel was compiled for this body.
                    false => regs
                        .run(self.body, input, &mut outs[first..], cnt)
                        .map(|()| false),
                }),
                None => regs.run(self.body, input, outs, cnt).map(|()| false),
            }?;
            #[cfg(not(feature = "jit"))]
            regs.run(self.body, input, outs, cnt)?;
            for (k, t) in stores.iter_mut().enumerate() {
                let t = t.as_mut();
                #[cfg(feature = "jit")]
                if placed && own && plain(k) && t.len() >= local + BLOCK {
                    continue;
                }
                if let Some(acc) = plan.acc_into[i + k] {
                    let Some((base, buf)) = adds.dest(acc.target) else {
                        continue;
                    };
                    // Element j of this output goes to j − shift, inside
                    // the view's range and the elements held here.
                    let (lo, hi) = (acc.lo.max(base), acc.hi.min(base + buf.len()));
                    let from = (lo as isize + acc.shift).max(i0 as isize) as usize;
                    let to = ((hi as isize + acc.shift).max(0) as usize).min(i0 + cnt);
                    if from < to {
                        let at = (from as isize - acc.shift) as usize - base;
                        let dst = &mut buf[at..at + (to - from)];
                        let src = &outs[first + k][from - i0..to - i0];
                        for (d, &y) in dst.iter_mut().zip(src) {
                            *d += y;
                        }
                    }
                } else if !own {
                } else if plan.sum_into[i + k].is_some() {
                    // Element g of its segment goes to partial sum g mod 4
                    // (i0 is a multiple of 4), and the segment's last
                    // len mod 4 elements to its tail.
                    let seg = i0 / SEGMENT;
                    let (s_lo, s_hi) = (seg * SEGMENT, ((seg + 1) * SEGMENT).min(n));
                    let head = s_hi - (s_hi - s_lo) % 4;
                    let (acc, tail) = &mut partial[(seg - a / SEGMENT) * self.n_out + k];
                    let y = &outs[first + k][..cnt];
                    let full = head.saturating_sub(i0).min(cnt);
                    for c in y[..full].chunks_exact(4) {
                        for l in 0..4 {
                            acc[l] += c[l];
                        }
                    }
                    for (l, &v) in y[full..].iter().enumerate() {
                        tail[i0 + full + l - head] = v;
                    }
                } else {
                    t[local..local + cnt].copy_from_slice(&outs[first + k][..cnt]);
                }
            }
            i0 += BLOCK;
        }
        Ok(())
    }
}

/// One block of a map by its native kernel (feature `jit`): elements
/// `i0 .. i0 + cnt`, at `held` in `targets` (`None`: a block beside this
/// thread's range, whose outputs are not stored). An argument whose view
/// covers the whole block is read where it lies; the others (scalars, blocks that reach past a view's
/// range, the last short block) are gathered into `kernel.gathered`. An
/// output `k` with `write_in_place(k)` is written straight into its buffer
/// when the block is whole and the buffer holds it; the other outputs and
/// the guard operands go to the rows of `outs` (outputs from
/// `nc.out_base`). `Ok(false)` if the kernel did not run (then nothing was
/// written).
#[cfg(feature = "jit")]
#[allow(clippy::too_many_arguments)]
fn native_block<'b, S: AsMut<[f64]>>(
    body: &Executable,
    nc: &crate::backend::native::NativeCode,
    srcs: &[Src],
    root: impl Fn(&View) -> &'b [f64],
    (i0, cnt, held): (usize, usize, Option<usize>),
    kernel: &mut KernelMemory,
    outs: &mut Vec<[f64; BLOCK]>,
    targets: &mut [S],
    write_in_place: impl Fn(usize) -> bool,
) -> Result<bool> {
    use crate::backend::native::BlockArgs;
    // The block of a view, where the view has it whole.
    let in_place = |w: &View| -> Option<&'b [f64]> {
        if cnt < BLOCK || i0 < w.lo || i0 + BLOCK > w.hi {
            return None;
        }
        let s = usize::try_from(i0 as isize + w.shift).ok()?;
        root(w).get(s..s + BLOCK)
    };
    let KernelMemory {
        gathered,
        scratch,
        at_inputs,
        at_rows,
    } = kernel;
    gathered.resize(srcs.len(), [0.0; BLOCK]);
    for (row, src) in gathered.iter_mut().zip(srcs) {
        match src {
            Src::Scalar(c) => *row = [*c; BLOCK],
            Src::View(w) if in_place(w).is_none() => *row = read_block(root(w), *w, i0, cnt),
            Src::View(_) => {}
        }
    }
    let first = nc.out_base;
    outs.resize(first + targets.len(), [0.0; BLOCK]);
    let mut args = BlockArgs::new(at_inputs, at_rows);
    for (src, row) in srcs.iter().zip(gathered.iter()) {
        args.input(match src {
            Src::View(w) => in_place(w).unwrap_or(row),
            Src::Scalar(_) => row,
        });
    }
    let (guards, staged) = outs.split_at_mut(first);
    for row in guards.iter_mut() {
        args.row(row);
    }
    for (k, (row, t)) in staged.iter_mut().zip(targets.iter_mut()).enumerate() {
        match held.and_then(|l| t.as_mut().get_mut(l..l + BLOCK)) {
            Some(d) if cnt == BLOCK && write_in_place(k) => args.row(d),
            _ => args.row(row),
        }
    }
    if !body.run_block_kernel(nc, args, scratch)? {
        return Ok(false);
    }
    body.check_block_guards(nc, outs)?;
    Ok(true)
}

/// The elements of value `v`: its buffer, or the caller's slice for an
/// input read in place.
#[inline]
fn root_of<'a>(bufs: &'a [Vec<f64>], plan: &Plan, inputs: &[&'a [f64]], v: usize) -> &'a [f64] {
    match plan.external[v] {
        Some(k) => inputs.get(k as usize).copied().unwrap_or(&[]),
        None => &bufs[plan.slot[v]],
    }
}

/// Elements `i0 .. i0 + cnt` of a view (zeros outside its range); the
/// unused lanes of a short block repeat element `i0`, so that they keep
/// every guard it keeps.
#[inline]
fn read_block(root: &[f64], w: View, i0: usize, cnt: usize) -> [f64; BLOCK] {
    let at = |i: usize| -> f64 {
        if i >= w.lo && i < w.hi {
            root[(i as isize + w.shift) as usize]
        } else {
            0.0
        }
    };
    if cnt == BLOCK && i0 >= w.lo && i0 + BLOCK <= w.hi {
        let s = (i0 as isize + w.shift) as usize;
        let mut x = [0.0; BLOCK];
        x.copy_from_slice(&root[s..s + BLOCK]);
        x
    } else {
        let mut x = [at(i0); BLOCK];
        for (l, xl) in x.iter_mut().enumerate().take(cnt) {
            *xl = at(i0 + l);
        }
        x
    }
}

/// Checks the number and lengths of a program's inputs.
pub(crate) fn check_inputs(p: &ArrayProgram, inputs: &[&[f64]]) -> Result<()> {
    if inputs.len() != p.input_shapes.len() {
        return Err(Error::LengthMismatch {
            what: "array program inputs",
            expected: p.input_shapes.len(),
            got: inputs.len(),
        });
    }
    for (x, s) in inputs.iter().zip(&p.input_shapes) {
        if x.len() != s.len() {
            return Err(Error::LengthMismatch {
                what: "array program input length",
                expected: s.len(),
                got: x.len(),
            });
        }
    }
    Ok(())
}

/// Checks the guards of `p` on the first element of each operand's value
/// as `value` gives it (the value itself, or its constant Taylor term).
///
/// # Errors
///
/// [`Error::GuardFailed`] for the first guard that no longer holds.
pub(super) fn check_guards<'a>(p: &ArrayProgram, value: impl Fn(AVar) -> &'a [f64]) -> Result<()> {
    for (gi, g) in p.guards.iter().enumerate() {
        let at = |v: AVar| value(v).first().copied().unwrap_or(f64::NAN);
        let now = at(g.a).partial_cmp(&at(g.b));
        if now != g.ordering {
            return Err(Error::GuardFailed {
                index: gi,
                traced: g.ordering,
                now,
            });
        }
    }
    Ok(())
}

/// The value of operation `prim` of the table on operands `args` of `p`
/// written to `out`, reading operand `k` (the value `a`) as `buf(k, a)`: the operands and
/// their shapes are passed from the stack. Shared by the executor and by
/// Taylor mode ([`super::taylor`]), which runs it once per Taylor
/// coefficient (or pair of coefficients, for a bilinear operation).
pub(super) fn prim_value<'a>(
    p: &ArrayProgram,
    prim: &ArrayPrim,
    args: &[AVar],
    buf: impl Fn(usize, AVar) -> &'a [f64],
    out_shape: Shape,
    scratch: &mut Vec<f64>,
    out: &mut [f64],
) {
    let mut vals: [&[f64]; MAX_ARRAY_ARITY] = [&[]; MAX_ARRAY_ARITY];
    let mut shapes = [Shape::Scalar; MAX_ARRAY_ARITY];
    let n = args.len().min(MAX_ARRAY_ARITY);
    for (k, &a) in args[..n].iter().enumerate() {
        vals[k] = buf(k, a);
        shapes[k] = p.shape(a);
    }
    prim.eval(&vals[..n], &shapes[..n], out, out_shape, scratch);
}

impl ArrayProgram {
    /// Runs the program once on `inputs` (one slice per input) and returns
    /// its outputs. For repeated runs, keep an [`ArrayWorkspace`].
    ///
    /// # Errors
    ///
    /// As [`ArrayWorkspace::run`].
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::array::{trace, Array};
    ///
    /// let p = trace(|x: &[_]| Ok(x[0].dot(&x[1])?), &[&[1.0, 2.0], &[3.0, 4.0]]).unwrap();
    /// assert_eq!(p.eval(&[&[1.0, 2.0], &[3.0, 4.0]]).unwrap(), vec![vec![11.0]]);
    /// ```
    pub fn eval(&self, inputs: &[&[f64]]) -> Result<Vec<Vec<f64>>> {
        let mut ws = ArrayWorkspace::new(self);
        ws.run(self, inputs)?;
        Ok((0..self.outputs.len())
            .map(|k| ws.output(self, k).to_vec())
            .collect())
    }
}
