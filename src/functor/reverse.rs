//! ∂⃖, the reverse-mode AD optic functor (K. Fischer, "∂P.jl terminology and
//! notation guide", §VI).

use crate::error::{Error, Result};
use crate::optic::Optic;
use crate::program::{Builder, Op, Program, Staged, Var};
use crate::rules;

/// The *joint* program of ∂⃖f: from `P(x) → y` build `J(x, ȳ) → (y, x̄)`
/// with `x̄ = J_f(x)ᵀ ȳ`.
///
/// The primal instructions are copied first; then the pullback is emitted in
/// reverse instruction order, one rule per instruction. Fan-out sums cotangents
/// (copy lifts to `+`, Fischer, ∂P.jl notes, eq. 26); an input nothing depends
/// on gets a zero cotangent (delete lifts to 0, eq. 27); guards are kept (a
/// branch is a guard, §VI).
///
/// Blocks: inputs `[P's input blocks…, P's output blocks…]` (the second
/// group holds cotangents), outputs `[P's output blocks…, P's input
/// blocks…]`.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::functor::reverse_joint;
/// use optic_ad::{trace, Real};
///
/// // f(x₀, x₁) = x₀ x₁ (n = 2, m = 1): J(x, ȳ) = (y, ȳ x₁, ȳ x₀).
/// let p = trace(|x| vec![x[0] * x[1]], &[1.0, 1.0]).unwrap();
/// let j = reverse_joint(&p);
/// assert_eq!((j.n_inputs(), j.n_outputs()), (3, 3));
/// assert_eq!(j.input_blocks(), &[2, 1]);
/// let out = j.eval(&[2.0, 5.0, 10.0]).unwrap();
/// assert_relative_eq!(out[0], 10.0);
/// assert_relative_eq!(out[1], 50.0);
/// assert_relative_eq!(out[2], 20.0);
/// ```
pub fn reverse_joint(p: &Program) -> Program {
    let mut b = Builder::with_capacity(4 * p.ops.len());
    let xs: Vec<Var> = (0..p.n_inputs).map(|_| b.input()).collect();
    let map = p.inline_into(&mut b, &xs);
    let ybar: Vec<Var> = (0..p.outputs.len()).map(|_| b.input()).collect();
    // The rule table of `b` starts as a copy of `p`'s, in order, so rule
    // indices in `p`'s ops are valid in `b`.
    let rules_tbl = b.rules().to_vec();
    let mut adj: Vec<Option<Var>> = vec![None; p.ops.len()];
    let acc = |b: &mut Builder, slot: &mut Option<Var>, c: Var| {
        *slot = Some(match *slot {
            Some(prev) => b.add(prev, c),
            None => c,
        });
    };
    for (j, o) in p.outputs.iter().enumerate() {
        acc(&mut b, &mut adj[o.index()], ybar[j]);
    }
    let mut input_of = vec![None; p.n_inputs];
    for i in (0..p.ops.len()).rev() {
        let op = p.ops[i];
        if let Op::Input(k) = op {
            input_of[k as usize] = Some(i);
            continue;
        }
        let Some(ct) = adj[i] else { continue };
        let mapped = op.map_operands(|o| map[o.index()]);
        let contribs = rules::pullback(&mut b, &mapped, map[i], ct, &rules_tbl);
        for (&o, c) in op.operands().iter().zip(contribs) {
            if let Some(c) = c {
                acc(&mut b, &mut adj[o.index()], c);
            }
        }
    }
    let mut outs: Vec<Var> = p.outputs.iter().map(|o| map[o.index()]).collect();
    for slot in input_of {
        let g = slot.and_then(|i| adj[i]);
        outs.push(g.unwrap_or_else(|| b.constant(0.0)));
    }
    let mut in_blocks = p.input_blocks.clone();
    in_blocks.extend_from_slice(&p.output_blocks);
    let mut out_blocks = p.output_blocks.clone();
    out_blocks.extend_from_slice(&p.input_blocks);
    b.finish_blocks(&outs, in_blocks, out_blocks).dce()
}

/// The optic ∂⃖f = ⟨a ↦ (a, f(a)) | (a, z) ↦ f*|ₐ(z)⟩ of a program f
/// (Fischer, ∂P.jl notes, §VI, eq. 25), with `left` and `right` themselves
/// [`Program`]s, so ∂⃖ applies to them again.
///
/// * [`ReverseOptic::left_program`]: `x ↦ (y, m)`: the primal program, which also
///   outputs the residual `m`: the primal values the pullback needs.
/// * [`ReverseOptic::right_program`]: `(m, ȳ) ↦ x̄ = J(x)ᵀ ȳ`: the pullback
///   program.
///
/// Shapes: `x` has `n = f.n_inputs()` entries, `y` and `ȳ` have
/// `m = f.n_outputs()`, `x̄` has `n`; the residual length is
/// [`ReverseOptic::residual_len`].
///
/// As an [`Optic`], `A = Vec<f64>` (x), `B = Vec<f64>` (y),
/// `BPrime = Vec<f64>` (ȳ), `APrime = Vec<f64>` (x̄),
/// `Residual = Vec<f64>`.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::optic::Optic;
/// use optic_ad::{reverse, trace, Real};
///
/// let f = trace(|x| vec![x[0].sin() * x[1]], &[1.0, 2.0]).unwrap();
/// let df = reverse(&f).unwrap();
/// let (m, y) = df.left(vec![0.5, 3.0]).unwrap();
/// assert_relative_eq!(y[0], 0.5_f64.sin() * 3.0);
/// let xbar = df.right(m, vec![1.0]).unwrap();
/// assert_relative_eq!(xbar[0], 0.5_f64.cos() * 3.0);
/// assert_relative_eq!(xbar[1], 0.5_f64.sin());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ReverseOptic {
    /// Stage 0 is the left, stage 1 the right.
    staged: Staged,
    joint: Program,
}

/// Applies ∂⃖ to a program. See [`ReverseOptic`].
///
/// # Errors
///
/// None for programs built by this crate; [`Error::NotCausal`] would mean a
/// bug in the transform.
///
/// # Example
///
/// ∂⃖ applies again to the programs it returns (Fischer, ∂P.jl notes, §VII.A):
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::optic::Optic;
/// use optic_ad::{reverse, trace, Real};
///
/// let f = trace(|x| vec![x[0].exp()], &[0.0]).unwrap();
/// let df = reverse(&f).unwrap();
/// let ddf = reverse(df.left_program()).unwrap(); // ∂⃖ of the left x ↦ (eˣ, eˣ)
/// let xbar = ddf.modify(vec![1.0], |_| vec![1.0, 0.0]).unwrap();
/// assert_relative_eq!(xbar[0], 1.0_f64.exp());
/// ```
pub fn reverse(p: &Program) -> Result<ReverseOptic> {
    let flat = p.flatten_blocks();
    // Inputs [x] [ȳ], outputs [y] [x̄]: x and y belong to the left, ȳ and x̄
    // to the right.
    let joint = reverse_joint(&flat);
    let staged = Staged::split(&joint, &[LEFT, RIGHT], &[LEFT, RIGHT], 2)?;
    Ok(ReverseOptic { staged, joint })
}

/// The stages of a [`ReverseOptic`].
const LEFT: usize = 0;
const RIGHT: usize = 1;

impl ReverseOptic {
    /// The primal program `x ↦ (y, m)`: the `left` of the optic, as a
    /// program (the [`Optic::left`] method runs it).
    pub fn left_program(&self) -> &Program {
        &self.staged.stages()[LEFT].program
    }

    /// The pullback program `(m, ȳ) ↦ x̄`: the `right` of the optic, as a
    /// program (the [`Optic::right`] method runs it).
    pub fn right_program(&self) -> &Program {
        &self.staged.stages()[RIGHT].program
    }

    /// Left and right as one [`Staged`] program (stage 0 and stage 1), to
    /// run in a reusable [`crate::StagedWorkspace`].
    pub fn staged(&self) -> &Staged {
        &self.staged
    }

    /// The joint program `(x, ȳ) ↦ (y, x̄)`, left and right in one.
    pub fn joint(&self) -> &Program {
        &self.joint
    }

    /// Length of the residual `m`.
    pub fn residual_len(&self) -> usize {
        self.staged.stages()[LEFT].residual_out
    }
}

impl Optic for ReverseOptic {
    type A = Vec<f64>;
    type B = Vec<f64>;
    type BPrime = Vec<f64>;
    type APrime = Vec<f64>;
    type Residual = Vec<f64>;
    type Error = Error;

    /// Runs the primal program; returns `(m, y)`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] unless `a.len() == n`;
    /// [`Error::GuardFailed`] if a traced branch no longer holds at `a`.
    fn left(&self, a: Vec<f64>) -> Result<(Vec<f64>, Vec<f64>)> {
        let (y, m) = self.staged.run(LEFT, &[], &a)?;
        Ok((m, y))
    }

    /// Runs the pullback program on the residual and `ȳ`; returns `x̄`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] unless `m` is a residual of this optic and
    /// `b.len() == m`-outputs.
    fn right(&self, m: Vec<f64>, b: Vec<f64>) -> Result<Vec<f64>> {
        let (xbar, _) = self.staged.run(RIGHT, &m, &b)?;
        Ok(xbar)
    }
}
