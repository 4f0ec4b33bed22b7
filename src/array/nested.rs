//! The typed nested-closure bundle on array programs: [`Nested`] and
//! [`Level`], the array counterparts of [`crate::Nested`] and
//! [`crate::functor::Level`].

use std::marker::PhantomData;
use std::ops::{Add, Range, Shl, Sub};

use typenum::{Add1, IsLess, IsLessOrEqual, Shleft, True, Unsigned, B1, U0, U1};

use super::exec::ArrayWorkspace;
use super::ir::{ArrayOp, ArrayProgram};
use super::transform::nest;
use crate::error::Result;
use crate::functor::{Closures, MaxOrder};

/// ∂⃖ᴺ of an array program as `2ᴺ − 1` nested closures, typed by the
/// order `N` (a typenum unsigned): the primal at `x` returns `y` and the
/// first [`Level`]; [`Level::call`] feeds closure `k` its input `d_k` and
/// returns `r_k` and the next level, and exists only while closures
/// remain. The encoding is Fischer's (K. Fischer, "∂P.jl terminology and
/// notation guide", §VII.B; the book's chapter "Higher order and the
/// nested-closure encoding"), built by [`nest`].
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
/// `b` (the shapes of its outputs), as [`nest`] documents.
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
/// use typenum::U2;
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
/// use typenum::U1;
///
/// let p = array::trace(|x: &[_]| Ok(x[0].sum()), &[&[1.0]]).unwrap();
/// let mut bundle = Nested::<U1>::new(&p).unwrap();
/// let (_, l0) = bundle.primal(&[&[1.0]]).unwrap();
/// let (_, l1) = l0.call(&[&[1.0]]).unwrap();
/// let _ = l1.call(&[&[1.0]]); // order 1 has one closure
/// ```
#[derive(Clone, Debug)]
pub struct Nested<N> {
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
    _order: PhantomData<N>,
}

impl<N: Unsigned + IsLessOrEqual<MaxOrder, Output = True>> Nested<N> {
    /// Builds ∂⃖ᴺ of `p` ([`nest`]) and plans its stages.
    ///
    /// # Errors
    ///
    /// Those of [`nest`].
    pub fn new(p: &ArrayProgram) -> Result<Self> {
        let order = N::to_usize();
        let program = nest(p, order)?;
        let k = (1usize << order) - 1;
        let (a, b) = (p.input_shapes.len(), p.outputs.len());
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
        let n = program.ops.len();
        let mut block_of_input = vec![0usize; program.input_shapes.len()];
        for (blk, r) in in_blocks.iter().enumerate() {
            for i in r.clone() {
                block_of_input[i] = blk;
            }
        }
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
        Ok(Nested {
            program,
            ws,
            masks,
            in_blocks,
            out_blocks,
            inputs: Vec::new(),
            _order: PhantomData,
        })
    }

    /// The number of nested closures, `2ᴺ − 1`.
    pub fn closures() -> usize {
        (1usize << N::to_usize()) - 1
    }

    /// The bundle program ([`nest`] of the program), inputs
    /// `[x, d₁ … d_K]` and outputs `[y, r₁ … r_K]` as blocks of arrays.
    pub fn program(&self) -> &ArrayProgram {
        &self.program
    }

    /// Runs the primal stage at `x` (one slice per input of the program),
    /// returning `y` (one vector per output) and the first level.
    ///
    /// # Errors
    ///
    /// [`crate::Error::LengthMismatch`] for a wrong number of arrays or a wrong
    /// length; [`crate::Error::GuardFailed`] where a traced comparison no longer
    /// holds.
    #[allow(clippy::type_complexity)]
    pub fn primal(&mut self, x: &[&[f64]]) -> Result<(Vec<Vec<f64>>, Level<'_, N, U0>)> {
        if self.inputs.is_empty() {
            self.inputs = self
                .program
                .input_shapes
                .iter()
                .map(|s| vec![0.0; s.len()])
                .collect();
        }
        let y = self.run_stage(0, x)?;
        Ok((
            y,
            Level {
                nested: self,
                _level: PhantomData,
            },
        ))
    }

    /// The whole bundle in one call: the primal at `x`, then closures
    /// `1 … 2ᴺ − 1` in order, closure `k` fed `d[k − 1]`. Returns `y` and
    /// `[r₁, …, r_K]`, the numbers of [`Nested::primal`] followed by each
    /// [`Level::call`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::LengthMismatch`] for a wrong number of closure inputs,
    /// arrays or elements; the errors of [`Nested::primal`].
    #[allow(clippy::type_complexity)]
    pub fn call_all(
        &mut self,
        x: &[&[f64]],
        d: &[&[&[f64]]],
    ) -> Result<(Vec<Vec<f64>>, Vec<Vec<Vec<f64>>>)> {
        crate::error::check_len("closure inputs of the bundle", Self::closures(), d.len())?;
        let (y, _) = self.primal(x)?;
        let mut outs = Vec::with_capacity(d.len());
        for (k, dk) in d.iter().enumerate() {
            outs.push(self.run_stage(k + 1, dk)?);
        }
        Ok((y, outs))
    }
}

impl<N> Nested<N> {
    /// Copies block `stage`'s inputs in, runs the stage and returns its
    /// output block.
    fn run_stage(&mut self, stage: usize, given: &[&[f64]]) -> Result<Vec<Vec<f64>>> {
        let block = self.in_blocks[stage].clone();
        crate::error::check_len(
            "arrays in the closure's input block",
            block.len(),
            given.len(),
        )?;
        for (j, g) in block.clone().zip(given) {
            crate::error::check_len(
                "closure input length",
                self.program.input_shapes[j].len(),
                g.len(),
            )?;
        }
        for (j, g) in block.zip(given) {
            self.inputs[j].copy_from_slice(g);
        }
        let ins: Vec<&[f64]> = self.inputs.iter().map(Vec::as_slice).collect();
        self.ws
            .run_masked(&self.program, &ins, Some(&self.masks[stage]))?;
        Ok(self.out_blocks[stage]
            .clone()
            .map(|k| self.ws.output(&self.program, k).to_vec())
            .collect())
    }
}

/// The state of an order-`N` array bundle after `L` of its closures have
/// been called; the residual lives in the bundle's workspace.
/// [`Level::call`] exists only while `L < 2ᴺ − 1`.
#[derive(Debug)]
pub struct Level<'a, N, L> {
    nested: &'a mut Nested<N>,
    _level: PhantomData<L>,
}

impl<'a, N, L> Level<'a, N, L>
where
    N: Unsigned,
    U1: Shl<N>,
    Shleft<U1, N>: Sub<B1>,
    Closures<N>: Unsigned,
    L: Unsigned + IsLess<Closures<N>, Output = True> + Add<B1>,
    Add1<L>: Unsigned,
{
    /// Calls closure `L + 1` with its input block `d` (one slice per
    /// array), returning its output block `r` and the next level.
    ///
    /// # Errors
    ///
    /// [`crate::Error::LengthMismatch`] for a wrong number of arrays or a wrong
    /// length.
    #[allow(clippy::type_complexity)]
    pub fn call(self, d: &[&[f64]]) -> Result<(Vec<Vec<f64>>, Level<'a, N, Add1<L>>)> {
        let r = self.nested.run_stage(L::to_usize() + 1, d)?;
        Ok((
            r,
            Level {
                nested: self.nested,
                _level: PhantomData,
            },
        ))
    }
}
