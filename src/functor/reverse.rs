//! ∂⃖, the reverse-mode AD optic functor (K. Fischer, "∂P.jl terminology and
//! notation guide", §VI).

use crate::error::{Error, Result};
use crate::optic::Optic;
use crate::program::{block_starts, Builder, Instr, OptVar, Program, Staged, Var};
use crate::rules;
use crate::rules::CustomRule;

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
///
/// # Array programs
///
/// On an [`ArrayProgram`](crate::array::ArrayProgram) (the same function,
/// also named `array::reverse_joint`) each array operation's cotangent is
/// its pullback rule (the table is in the book's chapter "Arrays"); a
/// map's pullback is a map of the body's scalar joint program (this
/// functor on the body). Inputs `[x…, ȳ…]` (ȳ of each output's shape),
/// outputs `[y…, x̄…]`. It returns a `Result` there
/// ([`ProgramKind::Derived`](super::kind::ProgramKind::Derived)).
///
/// ```
/// use optic_ad::array::{reverse_joint, trace, Array};
/// use optic_ad::Real;
///
/// // f(x) = Σ sin(xᵢ): J(x, ȳ) = (f, ȳ cos(x)).
/// let x = [0.1, 0.2];
/// let p = trace(|x: &[_]| Ok(x[0].map(|t| t.sin()).sum()), &[&x]).unwrap();
/// let j = reverse_joint(&p).unwrap();
/// let out = j.eval(&[&x, &[2.0]]).unwrap();
/// assert_eq!(out[1], vec![2.0 * 0.1_f64.cos(), 2.0 * 0.2_f64.cos()]);
/// ```
pub fn reverse_joint<P: super::kind::ProgramKind>(p: &P) -> P::Derived {
    p.reverse_joint_kind()
}

/// [`reverse_joint`] on a scalar program.
pub(crate) fn reverse_joint_program(p: &Program) -> Program {
    let in_order: Vec<usize> = (0..p.input_blocks.len() + p.output_blocks.len()).collect();
    let out_order: Vec<usize> = (0..p.output_blocks.len() + p.input_blocks.len()).collect();
    reverse_joint_ordered(p, &p.input_blocks, &p.output_blocks, &in_order, &out_order)
}

/// [`reverse_joint`] of `p` seen with input blocks `in_w` and output blocks
/// `out_w` (widths summing to its input and output counts), with the
/// joint's blocks put in another order as it is built: new input block `j`
/// is the joint's block `in_order[j]`, and likewise for outputs. A caller
/// that wants the blocks regrouped ([`reverse`]) or reordered
/// ([`super::nest`]) then needs no second copy. Both orders must be
/// permutations of the joint's blocks.
pub(crate) fn reverse_joint_ordered(
    p: &Program,
    in_w: &[usize],
    out_w: &[usize],
    in_order: &[usize],
    out_order: &[usize],
) -> Program {
    let mut b = Builder::with_capacity(4 * p.code.len());
    // The joint's input blocks: p's inputs, then the cotangents of p's
    // outputs. Declared in the requested order.
    let joint_in: Vec<usize> = in_w.iter().chain(out_w).copied().collect();
    let in_starts = block_starts(&joint_in);
    let mut joint_vars = vec![Var(0); p.n_inputs + p.outputs.len()];
    for &blk in in_order {
        for i in 0..joint_in[blk] {
            joint_vars[in_starts[blk] + i] = b.input();
        }
    }
    let (xs, ybar) = joint_vars.split_at(p.n_inputs);
    let ybar: Vec<Option<Var>> = ybar.iter().map(|&v| Some(v)).collect();
    let (map, xbar) = pullback_into(&mut b, p, xs, &ybar);
    // The joint's outputs: y, then x̄ (an input nothing depends on has
    // cotangent 0).
    let mut joint_outs: Vec<Var> = p.outputs.iter().map(|o| map[o.index()]).collect();
    for g in xbar {
        let g = g.unwrap_or_else(|| b.constant(0.0));
        joint_outs.push(g);
    }
    let joint_out_w: Vec<usize> = out_w.iter().chain(in_w).copied().collect();
    let out_starts = block_starts(&joint_out_w);
    let mut outs = Vec::with_capacity(joint_outs.len());
    for &blk in out_order {
        outs.extend_from_slice(&joint_outs[out_starts[blk]..out_starts[blk] + joint_out_w[blk]]);
    }
    let in_blocks = in_order.iter().map(|&j| joint_in[j]).collect();
    let out_blocks = out_order.iter().map(|&j| joint_out_w[j]).collect();
    b.finish_blocks(&outs, in_blocks, out_blocks).into_dce()
}

/// Emits ∂⃖ of `p` into `b`: the primal instructions of `p` on the values
/// `xs` (one per input of `p`), then its pullback from the cotangents
/// `ybar` of its outputs (`None`: a structural zero, nothing flows from
/// there). Returns the value of each instruction of `p` in `b`, and the
/// cotangent of each input of `p` (`None`: no dependence).
///
/// Seeds that are constants (`ȳ = 1` for a gradient) are folded into the
/// pullback as it is emitted, so a driver derives in one builder pass.
pub(crate) fn pullback_into(
    b: &mut Builder,
    p: &Program,
    xs: &[Var],
    ybar: &[Option<Var>],
) -> (Vec<Var>, Vec<Option<Var>>) {
    let map = if xs.iter().all(|&x| b.constant_of(x).is_none()) {
        p.copy_into(b, xs)
    } else {
        p.inline_into(b, xs)
    };
    let mut adj = vec![OptVar::NONE; p.code.len()];
    for (o, c) in p.outputs.iter().zip(ybar) {
        if let Some(c) = *c {
            accumulate(b, &mut adj[o.index()], c);
        }
    }
    sweep(
        b,
        p.code.len(),
        |_, i| p.code[i],
        &p.rules,
        &mut adj,
        |o| map[o.index()],
    );
    let mut xbar = vec![None; p.n_inputs];
    for (i, ins) in p.code.iter().enumerate() {
        if let Some(k) = ins.as_input() {
            xbar[k as usize] = adj[i].get();
        }
    }
    (map, xbar)
}

/// The pullback of what `b` holds: the cotangents `seeds` (value,
/// cotangent) of some of its values, pulled back through its instructions
/// in reverse order, emitted into `b` itself. Returns the cotangent of
/// every value below the first instruction emitted (`None`: no
/// dependence). A driver that traced a function into `b` goes on this way
/// without copying the primal.
pub(crate) fn pullback_in_place(b: &mut Builder, seeds: &[(Var, Var)]) -> Vec<OptVar> {
    let end = b.len();
    let mut adj = vec![OptVar::NONE; end];
    for &(v, c) in seeds {
        accumulate(b, &mut adj[v.index()], c);
    }
    let rules = b.rules().to_vec();
    sweep(b, end, |b, i| b.code()[i], &rules, &mut adj, |o| o);
    adj
}

/// Adds the cotangent contribution `c` to `slot` (copy lifts to `+`,
/// Fischer, ∂P.jl notes, eq. 26).
fn accumulate(b: &mut Builder, slot: &mut OptVar, c: Var) {
    *slot = OptVar::some(match slot.get() {
        Some(prev) => b.add(prev, c),
        None => c,
    });
}

/// The reverse sweep of ∂⃖ over `len` instructions, instruction `i` read by
/// `at` (values numbered as there, found in `b` through `value`; user
/// rules in `rules`):
/// from the cotangents already in `adj`, one rule per instruction in
/// reverse order. An instruction whose result nothing depends on gets no
/// cotangent and emits nothing (delete lifts to 0, eq. 27); constants get
/// none either (nothing reads it). Guards need nothing: they are kept with
/// the instructions (a branch is a guard, §VI).
fn sweep(
    b: &mut Builder,
    len: usize,
    at: impl Fn(&Builder, usize) -> Instr,
    rules: &[CustomRule],
    adj: &mut [OptVar],
    value: impl Fn(Var) -> Var,
) {
    for i in (0..len).rev() {
        let ins = at(b, i);
        if ins.is_input() {
            continue;
        }
        let Some(ct) = adj[i].get() else { continue };
        let mapped = ins.map_operands(&value);
        let contribs = rules::pullback(b, &mapped, value(Var(i as u32)), ct, rules);
        for (&o, c) in ins.operands().iter().zip(contribs) {
            if let Some(c) = c {
                if !at(b, o.index()).is_const() {
                    accumulate(b, &mut adj[o.index()], c);
                }
            }
        }
    }
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
    // Inputs [x] [ȳ], outputs [y] [x̄] (each flattened to one block): x and
    // y belong to the left, ȳ and x̄ to the right.
    let (n, m) = (p.n_inputs(), p.n_outputs());
    let joint = reverse_joint_ordered(p, &[n], &[m], &[0, 1], &[0, 1]);
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
