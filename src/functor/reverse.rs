//! ∂⃖, the reverse-mode AD optic functor (seed 000, §VI).

use crate::error::{Error, Result};
use crate::optic::Optic;
use crate::program::{Builder, Op, Program, Var};
use crate::rules;

/// The *joint* program of ∂⃖f: from `P(x) → y` build `J(x, ȳ) → (y, x̄)`
/// with `x̄ = J_f(x)ᵀ ȳ`.
///
/// The primal instructions are copied first; then the pullback is emitted
/// in reverse instruction order, one rule per instruction. Fan-out sums
/// cotangents (copy lifts to `+`, seed 000 eq. 26); an input nothing
/// depends on gets a zero cotangent (delete lifts to 0, eq. 27); guards are
/// kept (a branch is a guard, §VI).
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
        for (o, c) in op.operands().zip(contribs) {
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

/// One stage of a staged program: a program whose inputs are
/// `[residual in…, this stage's own inputs…]` and whose outputs are
/// `[this stage's own outputs…, residual out…]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    /// The stage's program.
    pub program: Program,
    /// Number of residual values it receives from the stages before it.
    pub residual_in: usize,
    /// Number of its own inputs.
    pub own_inputs: usize,
    /// Number of its own outputs.
    pub own_outputs: usize,
    /// Number of residual values it hands to the stages after it.
    pub residual_out: usize,
}

/// Splits a program into causal stages.
///
/// Input block `i` becomes available at stage `input_stage[i]`; output block
/// `j` must be ready by stage `output_stage[j]`. Each instruction runs in the
/// first stage where all its operands are available. The values a stage
/// passes on are exactly those later stages use: they are the residuals of
/// the optic (seed 000, §I). Constants are re-created where they are used,
/// never passed on.
///
/// # Errors
///
/// [`Error::Layout`] if the stage lists do not match the blocks;
/// [`Error::NotCausal`] if an output depends on an input of a later stage.
///
/// # Example
///
/// Splitting the joint program of ∂⃖ sin into left and right: the residual
/// is `cos x`, computed on the left (seed 000, Snippet 15's capture).
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::functor::{reverse_joint, split_stages};
/// use optic_ad::{trace, Error, Real};
///
/// let p = trace(|x| vec![x[0].sin()], &[0.3]).unwrap();
/// let j = reverse_joint(&p); // [x, ȳ] -> [y, x̄]
/// let st = split_stages(&j, &[0, 1], &[0, 1], 2).unwrap();
/// assert_eq!(st[0].residual_out, 1);
/// let left = st[0].program.eval(&[0.3]).unwrap(); // [y, cos x]
/// assert_relative_eq!(left[1], 0.3_f64.cos());
/// let right = st[1].program.eval(&[left[1], 2.0]).unwrap(); // [x̄]
/// assert_relative_eq!(right[0], 2.0 * 0.3_f64.cos());
/// // x̄ cannot be ready before ȳ arrives.
/// assert!(matches!(split_stages(&j, &[0, 1], &[0, 0], 2), Err(Error::NotCausal { .. })));
/// ```
pub fn split_stages(
    p: &Program,
    input_stage: &[usize],
    output_stage: &[usize],
    n_stages: usize,
) -> Result<Vec<Stage>> {
    if input_stage.len() != p.input_blocks.len() || output_stage.len() != p.output_blocks.len() {
        return Err(Error::Layout(format!(
            "split_stages: {} input and {} output stages for {} and {} blocks",
            input_stage.len(),
            output_stage.len(),
            p.input_blocks.len(),
            p.output_blocks.len()
        )));
    }
    if input_stage
        .iter()
        .chain(output_stage)
        .any(|&s| s >= n_stages)
    {
        return Err(Error::Layout("split_stages: stage out of range".into()));
    }
    let scalar_stage = |blocks: &[usize], stages: &[usize]| -> (Vec<usize>, Vec<usize>) {
        let mut s = Vec::new();
        let mut blk = Vec::new();
        for (i, (&w, &st)) in blocks.iter().zip(stages).enumerate() {
            s.extend(std::iter::repeat_n(st, w));
            blk.extend(std::iter::repeat_n(i, w));
        }
        (s, blk)
    };
    let (in_stage, in_block) = scalar_stage(&p.input_blocks, input_stage);
    let (out_stage, out_block) = scalar_stage(&p.output_blocks, output_stage);
    let n = p.ops.len();
    let is_const = |i: usize| matches!(p.ops[i], Op::Const(_));
    // Stage of each value, and for diagnostics the latest input block it
    // depends on.
    let mut stage = vec![0usize; n];
    let mut src_block: Vec<Option<usize>> = vec![None; n];
    for (i, op) in p.ops.iter().enumerate() {
        match *op {
            Op::Input(k) => {
                stage[i] = in_stage[k as usize];
                src_block[i] = Some(in_block[k as usize]);
            }
            Op::Const(_) => {}
            _ => {
                for o in op.operands() {
                    if stage[o.index()] >= stage[i] {
                        stage[i] = stage[o.index()];
                        src_block[i] = src_block[o.index()].or(src_block[i]);
                    }
                }
            }
        }
    }
    // Guards run in the stage of their later operand.
    let guard_stage: Vec<usize> = p
        .guards
        .iter()
        .map(|g| stage[g.a.index()].max(stage[g.b.index()]))
        .collect();
    // Latest stage that uses each value.
    let mut last_use = stage.clone();
    for (i, op) in p.ops.iter().enumerate() {
        for o in op.operands() {
            last_use[o.index()] = last_use[o.index()].max(stage[i]);
        }
    }
    for (g, &s) in p.guards.iter().zip(&guard_stage) {
        last_use[g.a.index()] = last_use[g.a.index()].max(s);
        last_use[g.b.index()] = last_use[g.b.index()].max(s);
    }
    for (j, o) in p.outputs.iter().enumerate() {
        if stage[o.index()] > out_stage[j] {
            return Err(Error::NotCausal {
                output: out_block[j],
                input: src_block[o.index()].unwrap_or(0),
            });
        }
        last_use[o.index()] = last_use[o.index()].max(out_stage[j]);
    }
    // Values crossing the boundary after stage s.
    let crossing = |s: usize| -> Vec<usize> {
        (0..n)
            .filter(|&i| !is_const(i) && stage[i] <= s && last_use[i] > s)
            .collect()
    };
    let mut stages = Vec::with_capacity(n_stages);
    let mut carried: Vec<usize> = Vec::new();
    let mut per_stage = vec![0usize; n_stages];
    for &st in &stage {
        per_stage[st] += 1;
    }
    for (s, &stage_len) in per_stage.iter().enumerate() {
        let mut b = Builder::with_capacity(stage_len + carried.len());
        let mut local: Vec<Option<Var>> = vec![None; n];
        for &i in &carried {
            local[i] = Some(b.input());
        }
        let mut own_inputs = 0;
        for (i, op) in p.ops.iter().enumerate() {
            if let Op::Input(k) = *op {
                if in_stage[k as usize] == s {
                    own_inputs += 1;
                    let _ = i;
                }
            }
        }
        // Own inputs in the order of the program's inputs.
        let mut own: Vec<(u32, usize)> = p
            .ops
            .iter()
            .enumerate()
            .filter_map(|(i, op)| match *op {
                Op::Input(k) if in_stage[k as usize] == s => Some((k, i)),
                _ => None,
            })
            .collect();
        own.sort_unstable();
        for &(_, i) in &own {
            local[i] = Some(b.input());
        }
        let rule_ids: Vec<u32> = p.rules.iter().map(|r| b.register_rule(r)).collect();
        for (i, op) in p.ops.iter().enumerate() {
            if stage[i] != s || matches!(op, Op::Input(_)) {
                continue;
            }
            let v = match *op {
                Op::Const(c) => b.constant(c),
                Op::Custom(r, a) => {
                    let a = local_of(&mut b, p, &mut local, a);
                    b.push(Op::Custom(rule_ids[r as usize], a))
                }
                ref other => {
                    let mut get = |o: Var| local_of(&mut b, p, &mut local, o);
                    let mapped = other.map_operands(&mut get);
                    b.push(mapped)
                }
            };
            local[i] = Some(v);
        }
        for (g, &gs) in p.guards.iter().zip(&guard_stage) {
            if gs == s {
                let a = local_of(&mut b, p, &mut local, g.a);
                let c = local_of(&mut b, p, &mut local, g.b);
                b.guard(a, c, g.ordering);
            }
        }
        let mut outs: Vec<Var> = Vec::new();
        for (j, o) in p.outputs.iter().enumerate() {
            if out_stage[j] == s {
                outs.push(local_of(&mut b, p, &mut local, *o));
            }
        }
        let own_outputs = outs.len();
        let next = if s + 1 < n_stages {
            crossing(s)
        } else {
            Vec::new()
        };
        for &i in &next {
            outs.push(local_of(&mut b, p, &mut local, Var(i as u32)));
        }
        let residual_in = carried.len();
        let residual_out = next.len();
        let program = b
            .finish_blocks(
                &outs,
                vec![residual_in, own_inputs],
                vec![own_outputs, residual_out],
            )
            .dce();
        stages.push(Stage {
            program,
            residual_in,
            own_inputs,
            own_outputs,
            residual_out,
        });
        carried = next;
    }
    Ok(stages)
}

/// The local value of `v` in the stage being built: carried, computed in
/// this stage, or a constant re-created here.
fn local_of(b: &mut Builder, p: &Program, local: &mut [Option<Var>], v: Var) -> Var {
    if let Some(l) = local[v.index()] {
        return l;
    }
    let c = match p.ops[v.index()] {
        Op::Const(c) => c,
        // Unreachable by construction (every non-constant value used here
        // was carried or computed); a NaN makes any slip visible.
        _ => f64::NAN,
    };
    let l = b.constant(c);
    local[v.index()] = Some(l);
    l
}

/// The optic ∂⃖f = ⟨a ↦ (a, f(a)) | (a, z) ↦ f*|ₐ(z)⟩ of a program f (seed
/// 000, §VI, eq. 25), with `left` and `right` themselves [`Program`]s, so
/// ∂⃖ applies to them again.
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
    left: Program,
    right: Program,
    joint: Program,
    n_x: usize,
    n_y: usize,
    residual: usize,
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
/// ∂⃖ applies again to the programs it returns (seed 000 §VII.A):
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
    let joint = reverse_joint(&flat);
    let stages = split_stages(&joint, &[0, 1], &[0, 1], 2)?;
    let mut it = stages.into_iter();
    let (Some(l), Some(r)) = (it.next(), it.next()) else {
        return Err(Error::Layout("reverse: expected two stages".into()));
    };
    Ok(ReverseOptic {
        residual: l.residual_out,
        left: l.program,
        right: r.program,
        joint,
        n_x: p.n_inputs,
        n_y: p.outputs.len(),
    })
}

impl ReverseOptic {
    /// The primal program `x ↦ (y, m)`: the `left` of the optic, as a
    /// program (the [`Optic::left`] method runs it).
    pub fn left_program(&self) -> &Program {
        &self.left
    }

    /// The pullback program `(m, ȳ) ↦ x̄`: the `right` of the optic, as a
    /// program (the [`Optic::right`] method runs it).
    pub fn right_program(&self) -> &Program {
        &self.right
    }

    /// The joint program `(x, ȳ) ↦ (y, x̄)`, left and right in one.
    pub fn joint(&self) -> &Program {
        &self.joint
    }

    /// Length of the residual `m`.
    pub fn residual_len(&self) -> usize {
        self.residual
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
        let mut out = self.left.eval(&a)?;
        let m = out.split_off(self.n_y);
        Ok((m, out))
    }

    /// Runs the pullback program on the residual and `ȳ`; returns `x̄`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] unless `m` is a residual of this optic and
    /// `b.len() == m`-outputs.
    fn right(&self, m: Vec<f64>, b: Vec<f64>) -> Result<Vec<f64>> {
        if m.len() != self.residual {
            return Err(Error::LengthMismatch {
                what: "residual",
                expected: self.residual,
                got: m.len(),
            });
        }
        if b.len() != self.n_y {
            return Err(Error::LengthMismatch {
                what: "output cotangent",
                expected: self.n_y,
                got: b.len(),
            });
        }
        let mut inp = m;
        inp.extend_from_slice(&b);
        let out = self.right.eval(&inp)?;
        debug_assert_eq!(out.len(), self.n_x);
        Ok(out)
    }
}
