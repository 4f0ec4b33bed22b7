//! The nested-closure bundle on array programs: [`crate::Nested`] and
//! [`crate::functor::Level`] for [`ArrayProgram`]s, whose stages run in
//! one [`ArrayWorkspace`].

use std::ops::Range;

use super::exec::ArrayWorkspace;
use super::fuse::fuse_chains;
use super::ir::{ArrayOp, ArrayProgram};
use super::transform::permute_blocks;
use crate::error::Result;
use crate::functor::{ProgramKind, ProgramKindSealed};

/// ∂⃖ᴺ of an array program as `2ᴺ − 1` nested closures: the one
/// [`crate::Nested`] type, for array programs. Typed by the
/// order `N` (a typenum unsigned): the primal at `x` returns `y` and the
/// first [`Level`]; [`crate::functor::Level::call`] feeds closure `k` its input `d_k` and
/// returns `r_k` and the next level, and exists only while closures
/// remain. The encoding is Fischer's (K. Fischer, "∂P.jl terminology and
/// notation guide", §VII.B; the book's chapter "Higher order and the
/// nested-closure encoding"), built by [`crate::nest`].
///
/// The bundle program runs in stages in one [`ArrayWorkspace`]: stage `k`
/// runs the instructions whose latest input block is `d_k` (stage 0 those
/// of `x` alone). What a later closure reads from an earlier stage (the
/// residual) stays in the workspace, in buffers of its own; nothing is
/// recomputed, and after the first primal, calls allocate only the
/// vectors they return.
///
/// Shapes: for an array program with `a` inputs and `b` outputs, `x`, the
/// even `d_k` and the odd `r_k` are blocks of `a` arrays (the shapes of
/// the program's inputs), `y`, the odd `d_k` and the even `r_k` blocks of
/// `b` (the shapes of its outputs), as [`crate::nest`] documents.
///
/// # Example
///
/// ∂⃖² of `f(x) = Σ sin xᵢ` on a vector: the third closure returns
/// `Δ″ cos x + Δ′ Δ (−sin x)` elementwise, with `Δ` and `Δ″` scalars
/// and `Δ′` a vector (the blocks alternate between the shapes of `y` and
/// `x`).
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::array::{self, Array, Nested};
/// use optic_ad::Real;
/// use optic_ad::typenum::U2;
///
/// let x = [0.7, -0.2];
/// let p = array::trace(|x: &[_]| Ok(x[0].map(|t| t.sin()).sum()), &[&x]).unwrap();
/// let mut bundle = Nested::<U2>::new(&p).unwrap();
/// let (y, l0) = bundle.primal(&[&x]).unwrap();
/// assert_relative_eq!(y[0][0], x[0].sin() + x[1].sin());
/// let (d, dp, ddp) = (1.5, [0.5, 1.0], 2.0);
/// let (r1, l1) = l0.call(&[&[d]]).unwrap(); // Δ cos x
/// assert_relative_eq!(r1[0][1], d * x[1].cos());
/// let (r2, l2) = l1.call(&[&dp]).unwrap(); // Δ′ · cos x
/// assert_relative_eq!(r2[0][0], dp[0] * x[0].cos() + dp[1] * x[1].cos());
/// let (r3, _) = l2.call(&[&[ddp]]).unwrap();
/// for i in 0..2 {
///     assert_relative_eq!(r3[0][i], ddp * x[i].cos() - dp[i] * d * x[i].sin());
/// }
/// ```
///
/// A call past the last closure does not compile:
///
/// ```compile_fail,E0599
/// use optic_ad::array::{self, Array, Nested};
/// use optic_ad::typenum::U1;
///
/// let p = array::trace(|x: &[_]| Ok(x[0].sum()), &[&[1.0]]).unwrap();
/// let mut bundle = Nested::<U1>::new(&p).unwrap();
/// let (_, l0) = bundle.primal(&[&[1.0]]).unwrap();
/// let (_, l1) = l0.call(&[&[1.0]]).unwrap();
/// let _ = l1.call(&[&[1.0]]); // order 1 has one closure
/// ```
pub type Nested<N> = crate::functor::Nested<N, ArrayProgram>;

/// The state of an order-`N` array bundle after `L` of its closures have
/// been called: [`crate::functor::Level`] for array programs. The residual
/// lives in the bundle's workspace. [`Level::call`](crate::functor::Level::call)
/// exists only while `L < 2ᴺ − 1`.
pub type Level<'a, N, L> = crate::functor::Level<'a, N, L, ArrayProgram>;

/// The stages of an array bundle: which instructions each stage runs, in
/// one workspace that keeps the residuals.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct ArrayStages {
    program: ArrayProgram,
    ws: ArrayWorkspace,
    /// `masks[k]`: the instructions stage `k` runs.
    masks: Vec<Vec<bool>>,
    /// The program inputs of each block (0 = `x`, `k` = `d_k`).
    in_blocks: Vec<Range<usize>>,
    /// The program outputs of each block (0 = `y`, `k` = `r_k`).
    out_blocks: Vec<Range<usize>>,
    /// The inputs given so far (zeros for blocks not given yet).
    inputs: Vec<Vec<f64>>,
}

impl ProgramKindSealed for ArrayProgram {}

impl ProgramKind for ArrayProgram {
    type Block<'a> = &'a [&'a [f64]];
    type Values = Vec<Vec<f64>>;
    type Stages = ArrayStages;
    type Derived = Result<ArrayProgram>;
    type Jets = super::taylor::ArrayJets;

    fn forward_kind(&self) -> Result<ArrayProgram> {
        super::transform::forward_array(self)
    }

    fn reverse_joint_kind(&self) -> Result<ArrayProgram> {
        super::transform::reverse_joint_array(self)
    }

    fn taylor_jets(&self, degree: usize) -> Result<super::taylor::ArrayJets> {
        super::taylor::ArrayJets::new(self, degree)
    }

    fn jets_degree(jets: &super::taylor::ArrayJets) -> usize {
        jets.degree()
    }

    fn jets_program(jets: &super::taylor::ArrayJets) -> &ArrayProgram {
        jets.program()
    }

    fn io(&self) -> (usize, usize) {
        (self.input_shapes.len(), self.outputs.len())
    }

    fn nested_len(&self) -> usize {
        self.len() + self.body_len()
    }

    fn joint_ordered(&self, in_w: &[usize], out_w: &[usize], perm: &[usize]) -> Result<Self> {
        let joint = super::transform::reverse_joint_array(self)?;
        let joint_in: Vec<usize> = in_w.iter().chain(out_w).copied().collect();
        let joint_out: Vec<usize> = out_w.iter().chain(in_w).copied().collect();
        permute_blocks(&joint, &joint_in, &joint_out, perm)
    }

    fn order_zero(&self) -> Self {
        self.clone()
    }

    fn plan(program: Self, (a, b): (usize, usize), order: usize) -> Result<ArrayStages> {
        if let Some(e) = &program.defect {
            return Err(e.clone());
        }
        let k = (1usize << order) - 1;
        // Block widths: x and the even d_k have a arrays, the odd d_k b;
        // y and the even r_k have b, the odd r_k a.
        let ranges = |first: usize, other: usize| -> Vec<Range<usize>> {
            let mut at = 0;
            (0..=k)
                .map(|j| {
                    let w = if j % 2 == 0 { first } else { other };
                    at += w;
                    at - w..at
                })
                .collect()
        };
        let in_blocks = ranges(a, b);
        let out_blocks = ranges(b, a);
        // The stage of each instruction: its latest input block.
        let mut block_of_input = vec![0usize; program.input_shapes.len()];
        for (blk, r) in in_blocks.iter().enumerate() {
            for i in r.clone() {
                if let Some(slot) = block_of_input.get_mut(i) {
                    *slot = blk;
                }
            }
        }
        // Maps fuse within a stage, never across.
        let stage: Vec<u32> = levels(&program, &block_of_input)
            .into_iter()
            .map(|l| u32::try_from(l).unwrap_or(u32::MAX))
            .collect();
        let program = fuse_chains(&program, Some(&stage))?;
        let n = program.ops.len();
        let level = levels(&program, &block_of_input);
        // Kept in buffers of their own: outputs, guard operands, values a
        // later stage reads, and maps that read an earlier stage (so that
        // a sum that maps of two stages add into is not reused between
        // them).
        let mut persist = vec![false; n];
        for o in &program.outputs {
            persist[o.index()] = true;
        }
        for g in &program.guards {
            persist[g.a.index()] = true;
            persist[g.b.index()] = true;
        }
        for i in 0..n {
            let li = level[i];
            program.ops[i].for_each_operand(|o| {
                if level[o.index()] < li {
                    persist[o.index()] = true;
                    if matches!(program.ops[i], ArrayOp::Map { .. }) {
                        persist[i] = true;
                    }
                }
            });
        }
        let masks = (0..=k)
            .map(|s| level.iter().map(|&l| l == s).collect())
            .collect();
        let ws = ArrayWorkspace::with_persist(&program, persist);
        Ok(ArrayStages {
            program,
            ws,
            masks,
            in_blocks,
            out_blocks,
            inputs: Vec::new(),
        })
    }

    /// Copies block `stage`'s inputs in, runs the stage and returns its
    /// output block.
    fn run_stage(s: &mut ArrayStages, stage: usize, given: &[&[f64]]) -> Result<Vec<Vec<f64>>> {
        if s.inputs.is_empty() {
            s.inputs = s
                .program
                .input_shapes
                .iter()
                .map(|sh| vec![0.0; sh.len()])
                .collect();
        }
        let Some(block) = s.in_blocks.get(stage).cloned() else {
            return Err(crate::Error::IndexOutOfRange {
                what: "stage of the bundle",
                index: stage,
                len: s.in_blocks.len(),
            });
        };
        crate::error::check_len(
            "arrays in the closure's input block",
            block.len(),
            given.len(),
        )?;
        for (j, g) in block.clone().zip(given) {
            crate::error::check_len(
                "closure input length",
                s.program.input_shapes[j].len(),
                g.len(),
            )?;
        }
        for (j, g) in block.zip(given) {
            s.inputs[j].copy_from_slice(g);
        }
        let ins: Vec<&[f64]> = s.inputs.iter().map(Vec::as_slice).collect();
        s.ws.run_masked(&s.program, &ins, Some(&s.masks[stage]))?;
        Ok(s.out_blocks[stage]
            .clone()
            .map(|k| s.ws.output(&s.program, k).to_vec())
            .collect())
    }
}

impl<N> crate::functor::Nested<N, ArrayProgram> {
    /// The bundle program ([`crate::nest`] of the program), inputs
    /// `[x, d₁ … d_K]` and outputs `[y, r₁ … r_K]` as blocks of arrays.
    pub fn program(&self) -> &ArrayProgram {
        &self.planned().program
    }
}

/// The stage of each instruction of `program`: the latest input block it
/// depends on (`block_of_input[k]`: the block of input `k`).
fn levels(program: &ArrayProgram, block_of_input: &[usize]) -> Vec<usize> {
    let n = program.ops.len();
    let mut level = vec![0usize; n];
    for i in 0..n {
        level[i] = match &program.ops[i] {
            ArrayOp::Input(j) => block_of_input[*j as usize],
            ArrayOp::MapOut(j) => level[i - *j as usize],
            op => {
                let mut l = 0;
                op.for_each_operand(|o| l = l.max(level[o.index()]));
                l
            }
        };
    }
    level
}
