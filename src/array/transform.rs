//! ∂⃖ and ∂⃗ on array programs: one rule per array primitive, written
//! against the [`ArrayBuilder`]; a map's rules are maps of its body's
//! scalar pullback and pushforward.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::ir::{AVar, ArrayBuilder, ArrayOp, ArrayProgram, Operands, Shape};
use crate::error::Result;
use crate::functor::forward::forward_program as scalar_forward;
use crate::functor::reverse::reverse_joint_program as scalar_reverse_joint;
use crate::program::{Program, Seed};

/// Derived bodies, one per (body, which cotangents or tangents are
/// present), so that a body used by many maps is differentiated once and
/// the derived maps share it (and CSE can merge them).
#[derive(Default)]
struct BodyCache {
    vjp: FxHashMap<(usize, Vec<bool>), Arc<Program>>,
    jvp: FxHashMap<(usize, Vec<bool>), Arc<Program>>,
}

impl BodyCache {
    /// The pullback body of `body` for the outputs with `present[k]`:
    /// inputs `(x₀ … x_{n−1}, ȳ_k for each present k)`, outputs
    /// `(x̄₀ … x̄_{n−1})`. Absent cotangents are structural zeros.
    fn vjp(&mut self, body: &Arc<Program>, present: &[bool]) -> Arc<Program> {
        let key = (Arc::as_ptr(body) as usize, present.to_vec());
        if let Some(p) = self.vjp.get(&key) {
            return p.clone();
        }
        let n = body.n_inputs();
        let m = body.n_outputs();
        let joint = scalar_reverse_joint(body);
        let mut seeds = vec![Seed::Free; n];
        seeds.extend(
            present
                .iter()
                .map(|&p| if p { Seed::Free } else { Seed::Zero }),
        );
        let keep: Vec<usize> = (m..m + n).collect();
        let p = Arc::new(
            joint
                .specialize_seeds(&seeds, &keep)
                .unwrap_or_else(|_| joint.clone()),
        );
        self.vjp.insert(key, p.clone());
        p
    }

    /// The pushforward body of `body` for the inputs with `present[j]`:
    /// inputs `(x₀ … x_{n−1}, ẋ_j for each present j)`, outputs
    /// `(ẏ₀ … ẏ_{m−1})`.
    fn jvp(&mut self, body: &Arc<Program>, present: &[bool]) -> Arc<Program> {
        let key = (Arc::as_ptr(body) as usize, present.to_vec());
        if let Some(p) = self.jvp.get(&key) {
            return p.clone();
        }
        let n = body.n_inputs();
        let m = body.n_outputs();
        let f = scalar_forward(body);
        let mut seeds = vec![Seed::Free; n];
        seeds.extend(
            present
                .iter()
                .map(|&p| if p { Seed::Free } else { Seed::Zero }),
        );
        let keep: Vec<usize> = (m..2 * m).collect();
        let p = Arc::new(
            f.specialize_seeds(&seeds, &keep)
                .unwrap_or_else(|_| f.clone()),
        );
        self.jvp.insert(key, p.clone());
        p
    }
}

/// The joint program of ∂⃖ on an array program: from `P(x) → y` build
/// `J(x, ȳ) → (y, x̄)` with `x̄ = J_P(x)ᵀ ȳ`, the pullback emitted in
/// reverse instruction order, one rule per instruction:
///
/// | instruction | cotangent contribution |
/// |---|---|
/// | `y = map(body, a…)` | `ā… = map(body*, a…, ȳ…)`, summed over a broadcast scalar `a` |
/// | `s = sum(a)` | `ā = broadcast(s̄)` |
/// | `v = broadcast(s)` | `s̄ = sum(v̄)` |
/// | `v = slice(a, k)` | `ā = pad(v̄, k)` |
/// | `v = pad(a, k)` | `ā = slice(v̄, k)` |
/// | `v = gather(a, idx)` | `ā = scatter_add(v̄, idx)` |
/// | `v = scatter_add(a, idx)` | `ā = gather(v̄, idx)` |
/// | `v = M a` | `ā = Mᵀ v̄` |
/// | `v = Mᵀ a` | `ā = M v̄` |
/// | `v = reshape(a)` | `ā = reshape(v̄)` to `a`'s shape |
/// | `C = aᵀ` | `ā = C̄ᵀ` |
/// | `C = A B` | `Ā = C̄ Bᵀ`, `B̄ = Aᵀ C̄` (with transposed factors, the transposes of these) |
/// | `v = sum_axis(A, k)` | `Ā = broadcast_axis(v̄, k)` |
/// | `C = broadcast_axis(v, k)` | `v̄ = sum_axis(C̄, k)` |
///
/// where `body*` is the scalar pullback of the body (the scalar ∂⃖,
/// [`crate::functor::reverse_joint`]). Fan-out adds cotangents; an input
/// nothing depends on gets zeros. Because the result is an array program
/// again, ∂⃖ and ∂⃗ apply to it as often as the order requires.
///
/// Inputs `[x…, ȳ…]` (ȳ of each output's shape), outputs `[y…, x̄…]`.
///
/// # Errors
///
/// None for programs built by this crate (the builder checks shapes; an
/// error here would mean a bug in a rule).
pub(crate) fn reverse_joint_array(p: &ArrayProgram) -> Result<ArrayProgram> {
    let mut cache = BodyCache::default();
    let mut b = ArrayBuilder::new();
    let xs: Vec<AVar> = p.input_shapes.iter().map(|&s| b.input(s)).collect();
    // The primal, each operation that keeps a residual for its pullback
    // through its `left`.
    let n = p.ops.len();
    let mut residual: Vec<Option<AVar>> = vec![None; n];
    let map = p.inline_with_prims(
        &mut b,
        &xs,
        |b, _, body, args| b.map(body.clone(), args),
        |b, i, prim, args, map| {
            let args: Operands = args.iter().map(|a| map[a.index()]).collect();
            let (v, r) = prim.left(b, &args)?;
            residual[i] = Some(r);
            Some(v)
        },
    );
    let ybar: Vec<AVar> = p.output_shapes().into_iter().map(|s| b.input(s)).collect();
    let mut adj: Vec<Option<AVar>> = vec![None; n];
    fn acc(b: &mut ArrayBuilder, slot: &mut Option<AVar>, c: AVar) {
        *slot = Some(match *slot {
            Some(prev) => b.add(prev, c),
            None => c,
        });
    }
    for (j, o) in p.outputs.iter().enumerate() {
        acc(&mut b, &mut adj[o.index()], ybar[j]);
    }
    let mut input_of = vec![None; p.input_shapes.len()];
    for i in (0..n).rev() {
        let m = |v: AVar| map[v.index()];
        match &p.ops[i] {
            ArrayOp::Input(k) => input_of[*k as usize] = Some(i),
            ArrayOp::Fill(_) | ArrayOp::Const(_) | ArrayOp::MapOut(_) => {}
            ArrayOp::Map { body, args } => {
                let n_out = body.n_outputs();
                let cts: Vec<Option<AVar>> = (0..n_out).map(|k| adj[i + k]).collect();
                if cts.iter().all(Option::is_none) {
                    continue;
                }
                let present: Vec<bool> = cts.iter().map(Option::is_some).collect();
                let vjp = cache.vjp(body, &present);
                let mut vargs: Vec<AVar> = args.iter().map(|&a| m(a)).collect();
                vargs.extend(cts.iter().flatten().copied());
                let contribs = b.map(vjp, &vargs);
                let map_shape = p.shapes[i];
                for (&a, c) in args.iter().zip(contribs) {
                    if matches!(p.ops[a.index()], ArrayOp::Fill(_) | ArrayOp::Const(_)) {
                        continue;
                    }
                    let c = if p.shapes[a.index()] == Shape::Scalar && map_shape != Shape::Scalar {
                        b.sum(c)
                    } else {
                        c
                    };
                    if b.is_zero(c) {
                        continue;
                    }
                    acc(&mut b, &mut adj[a.index()], c);
                }
            }
            ArrayOp::Prim { prim, args } => {
                let Some(ct) = adj[i] else { continue };
                let margs: Operands = args.iter().map(|&a| m(a)).collect();
                let contribs = match residual[i] {
                    Some(r) => prim.right(&mut b, &margs, r, ct),
                    None => prim.pullback(&mut b, &margs, ct),
                };
                for (&a, c) in args.iter().zip(contribs) {
                    if let Some(c) = c.filter(|&c| !b.is_zero(c)) {
                        acc(&mut b, &mut adj[a.index()], c);
                    }
                }
            }
        }
    }
    let mut outs: Vec<AVar> = p.outputs.iter().map(|o| map[o.index()]).collect();
    for (k, slot) in input_of.into_iter().enumerate() {
        let g = slot.and_then(|i| adj[i]);
        outs.push(g.unwrap_or_else(|| b.fill(0.0, p.input_shapes[k])));
    }
    b.finish(&outs)
}

/// ∂⃗ on an array program: from `P(x) → y` build `F(x, ẋ) → (y, ẏ)` with
/// `ẏ = J_P(x) ẋ`. Linear instructions (sum, broadcast, slice, pad,
/// gather, scatter-add, matvec, reshape, transpose, the sums and
/// broadcasts along an axis) apply to tangents unchanged; a matrix product
/// `C = A B` has `Ċ = Ȧ B + A Ḃ`; a map's
/// tangent is a map of the body's scalar pushforward
/// ([`crate::functor::forward`]). Tangents known to be zero are structural
/// and emit nothing.
///
/// Inputs `[x…, ẋ…]`, outputs `[y…, ẏ…]`.
///
/// # Errors
///
/// As [`reverse_joint_array`].
pub(crate) fn forward_array(p: &ArrayProgram) -> Result<ArrayProgram> {
    forward_with(p, true)
}

/// [`forward`]; with `joint`, an operation that computes its value and
/// its tangent together ([`ArrayPrimitive::jvp`](super::ArrayPrimitive::jvp), a loop) does so wherever it
/// has a tangent, so the value is not computed twice. Without, every
/// value is computed as in `p`, apart from the tangents, which is what a
/// staged program needs (its values must not depend on the direction).
pub(crate) fn forward_with(p: &ArrayProgram, joint: bool) -> Result<ArrayProgram> {
    let mut cache = BodyCache::default();
    let mut b = ArrayBuilder::new();
    let xs: Vec<AVar> = p.input_shapes.iter().map(|&s| b.input(s)).collect();
    let xdots: Vec<AVar> = p.input_shapes.iter().map(|&s| b.input(s)).collect();
    if let Some(e) = &p.defect {
        b.poison(e.clone());
    }
    let n = p.ops.len();
    // Values and tangents in one sweep, in program order.
    let mut map: Vec<AVar> = Vec::with_capacity(n);
    let mut tangent: Vec<Option<AVar>> = vec![None; n];
    let mut i = 0;
    while i < n {
        let shape = p.shapes[i];
        let new = match &p.ops[i] {
            ArrayOp::Input(k) => {
                map.push(xs[*k as usize]);
                Some(xdots[*k as usize])
            }
            ArrayOp::Map { body, args } => {
                let n_out = body.n_outputs().max(1);
                let margs: Vec<AVar> = args.iter().map(|a| map[a.index()]).collect();
                let outs = b.map(body.clone(), &margs);
                for k in 0..n_out {
                    map.push(outs.get(k).copied().unwrap_or(AVar(0)));
                }
                let ts: Vec<Option<AVar>> = args.iter().map(|a| tangent[a.index()]).collect();
                if ts.iter().any(Option::is_some) {
                    let present: Vec<bool> = ts.iter().map(Option::is_some).collect();
                    let jvp = cache.jvp(body, &present);
                    let mut fargs = margs;
                    fargs.extend(ts.iter().flatten().copied());
                    let outs = b.map(jvp, &fargs);
                    for (k, o) in outs.into_iter().enumerate() {
                        tangent[i + k] = (!b.is_zero(o)).then_some(o);
                    }
                }
                i += n_out;
                continue;
            }
            ArrayOp::Prim { prim, args } => {
                let ts: Vec<Option<AVar>> = args.iter().map(|a| tangent[a.index()]).collect();
                if ts.iter().all(Option::is_none) {
                    map.push(b.copy_op(&p.ops[i], shape, &p.shapes, &map));
                    tangent[i] = None;
                    i += 1;
                    continue;
                }
                let margs: Operands = args.iter().map(|a| map[a.index()]).collect();
                if let Some((v, t)) = joint
                    .then(|| prim.jvp(&mut b, &margs, &ts, shape))
                    .flatten()
                {
                    map.push(v);
                    Some(t)
                } else {
                    map.push(b.copy_op(&p.ops[i], shape, &p.shapes, &map));
                    prim.pushforward(&mut b, &margs, &ts, shape)
                }
            }
            op => {
                map.push(b.copy_op(op, shape, &p.shapes, &map));
                None
            }
        };
        tangent[i] = new.filter(|&v| !b.is_zero(v));
        i += 1;
    }
    for g in &p.guards {
        b.guard(map[g.a.index()], map[g.b.index()], g.ordering);
    }
    let mut outs: Vec<AVar> = p.outputs.iter().map(|o| map[o.index()]).collect();
    for o in &p.outputs {
        let tv = tangent[o.index()];
        outs.push(tv.unwrap_or_else(|| b.fill(0.0, p.shapes[o.index()])));
    }
    b.finish(&outs)
}

/// Splits a map body that is linear in its late inputs (those without
/// `early[k]`) for staging: `yⱼ = Σₗ Cⱼₗ(early) · lateₗ`. Returns the body
/// that computes the coefficients `Cⱼₗ` from the early inputs (outputs in
/// the order `(j, l)`, `j` major) and the body that combines them with the
/// late inputs (inputs: the late inputs, then the coefficients). `None` if
/// this would not make the late body shorter, or the body has guards or
/// user rules.
///
/// Each coefficient is the body with late input `l` set to 1 and the other
/// late inputs to structural zeros; that is exact for a body linear in the
/// late inputs, which every direction-dependent map of a pushforward is
/// (each pushforward rule is linear in the tangents). [`crate::Hvp::array`]
/// uses it so that `linearize` computes the coefficients once and `apply`
/// runs a few multiply-adds per element.
pub(crate) fn linear_split(body: &Program, early: &[bool]) -> Option<(Program, Program)> {
    use crate::program::{Builder, Var};
    if !body.guards().is_empty() || !body.custom_rules().is_empty() {
        return None;
    }
    let n_late = early.iter().filter(|&&e| !e).count();
    let n_early = early.len() - n_late;
    let m = body.n_outputs();
    if n_late == 0 || n_early == 0 || 2 * m * n_late >= body.len() {
        return None;
    }
    // Coefficients: early inputs → C (m × n_late).
    let mut cb = Builder::with_capacity(n_late * body.len());
    let early_in: Vec<Var> = (0..n_early).map(|_| cb.input()).collect();
    let mut coefs = vec![Var(0); m * n_late];
    for l in 0..n_late {
        let mut ei = early_in.iter();
        let mut li = 0;
        let inputs: Vec<Var> = early
            .iter()
            .map(|&e| {
                if e {
                    *ei.next().unwrap_or(&Var(0))
                } else {
                    li += 1;
                    if li - 1 == l {
                        cb.constant(1.0)
                    } else {
                        cb.zero()
                    }
                }
            })
            .collect();
        let map = body.inline_into(&mut cb, &inputs);
        for (j, o) in body.outputs().iter().enumerate() {
            coefs[j * n_late + l] = map[o.index()];
        }
    }
    let coef = cb.finish_unchecked(&coefs).dce();
    // Late: (late inputs, C) → y = C · late.
    let mut lb = Builder::new();
    let late_in: Vec<Var> = (0..n_late).map(|_| lb.input()).collect();
    let c_in: Vec<Var> = (0..m * n_late).map(|_| lb.input()).collect();
    let outs: Vec<Var> = (0..m)
        .map(|j| {
            let mut acc: Option<Var> = None;
            for (l, &x) in late_in.iter().enumerate() {
                let t = lb.mul(c_in[j * n_late + l], x);
                acc = Some(match acc {
                    Some(a) => lb.add(a, t),
                    None => t,
                });
            }
            acc.unwrap_or_else(|| lb.zero())
        })
        .collect();
    let late = lb.finish_unchecked(&outs).dce();
    Some((coef, late))
}

/// `p` with its input blocks (of `in_w` arrays each) and output blocks
/// (of `out_w`) taken in the order `perm`.
pub(crate) fn permute_blocks(
    p: &ArrayProgram,
    in_w: &[usize],
    out_w: &[usize],
    perm: &[usize],
) -> Result<ArrayProgram> {
    let starts = |w: &[usize]| -> Vec<usize> {
        w.iter()
            .scan(0, |s, &x| {
                let at = *s;
                *s += x;
                Some(at)
            })
            .collect()
    };
    let (in_at, out_at) = (starts(in_w), starts(out_w));
    let order = |at: &[usize], w: &[usize]| -> Vec<usize> {
        perm.iter().flat_map(|&j| at[j]..at[j] + w[j]).collect()
    };
    let (ins, outs) = (order(&in_at, in_w), order(&out_at, out_w));
    let mut b = ArrayBuilder::new();
    // New input i is old input ins[i].
    let mut old = vec![AVar(0); p.input_shapes.len()];
    for &o in &ins {
        old[o] = b.input(p.input_shapes[o]);
    }
    let map = p.inline_into(&mut b, &old);
    let outputs: Vec<AVar> = outs.iter().map(|&o| map[p.outputs[o].index()]).collect();
    b.finish(&outputs)
}
