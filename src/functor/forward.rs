//! ∂⃗, the forward-mode functor: pushforward of tangents (K. Fischer,
//! "∂P.jl terminology and notation guide", §IV: `f₊`; the Futhark notes on
//! forward and reverse mode AD on tangent insertion).

use crate::program::{Builder, Op, Program, Var, MAX_ARITY};
use crate::rules;

/// The pushforward program ∂⃗f: from `P(x) → y` build
/// `F(x, ẋ) → (y, ẏ)` with `ẏ = J_f(x) ẋ`.
///
/// The primal instructions are copied, then one pushforward per instruction
/// is emitted in program order, each written against the [`Builder`] (the
/// unary ones reuse the pullback rule, which for a scalar function is the
/// same product with `f′(x)`). Tangents that are known to be zero are
/// structural (`None`) and emit nothing. Guards are kept.
///
/// Because the result is a program again, ∂⃗ and ∂⃖ apply to it in any
/// combination: `forward(&forward(&p))` gives second-order tangents, and
/// `forward` of a gradient program gives Hessian-vector products
/// (forward-over-reverse).
///
/// Blocks: inputs `[P's input blocks…, P's input blocks…]` (the second group
/// holds tangents), outputs `[P's output blocks…, P's output blocks…]`, so
/// `forward(f).then(&forward(g)) = forward(f.then(g))` as programs (the
/// functor law, `tests/functor_laws.rs`).
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::functor::forward;
/// use optic_ad::{trace, Real};
///
/// let p = trace(|x| vec![x[0].sin() * x[1]], &[1.0, 2.0]).unwrap();
/// let f = forward(&p); // (x₀, x₁, ẋ₀, ẋ₁) ↦ (y, ẏ)
/// let out = f.eval(&[0.5, 3.0, 1.0, 0.0]).unwrap();
/// assert_relative_eq!(out[1], 3.0 * 0.5_f64.cos()); // ∂y/∂x₀
/// // Second order: tangent of the tangent.
/// let ff = forward(&f);
/// let seeds = [0.5, 3.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]; // x, ẋ, x′, ẋ′
/// let out = ff.eval(&seeds).unwrap();
/// assert_relative_eq!(out[3], -3.0 * 0.5_f64.sin()); // ∂²y/∂x₀²
/// ```
pub fn forward(p: &Program) -> Program {
    let mut b = Builder::with_capacity(3 * p.ops.len());
    let xs: Vec<Var> = (0..p.n_inputs).map(|_| b.input()).collect();
    let xdots: Vec<Var> = (0..p.n_inputs).map(|_| b.input()).collect();
    let map = p.inline_into(&mut b, &xs);
    // The rule table of `b` starts as a copy of `p`'s, in order.
    let rules_tbl = b.rules().to_vec();
    let mut tangent: Vec<Option<Var>> = vec![None; p.ops.len()];
    for (i, op) in p.ops.iter().enumerate() {
        tangent[i] = match *op {
            Op::Input(k) => Some(xdots[k as usize]),
            Op::Const(_) => None,
            _ => {
                let mut t = [None; MAX_ARITY];
                for (slot, o) in t.iter_mut().zip(op.operands()) {
                    *slot = tangent[o.index()];
                }
                let t = &t[..op.operands().len()];
                if t.iter().all(Option::is_none) {
                    None
                } else {
                    let mapped = op.map_operands(|o| map[o.index()]);
                    rules::pushforward(&mut b, &mapped, map[i], t, &rules_tbl)
                }
            }
        };
    }
    let mut outs: Vec<Var> = p.outputs.iter().map(|o| map[o.index()]).collect();
    for o in &p.outputs {
        let t = tangent[o.index()];
        outs.push(t.unwrap_or_else(|| b.constant(0.0)));
    }
    let mut in_blocks = p.input_blocks.clone();
    in_blocks.extend_from_slice(&p.input_blocks);
    let mut out_blocks = p.output_blocks.clone();
    out_blocks.extend_from_slice(&p.output_blocks);
    b.finish_blocks(&outs, in_blocks, out_blocks).dce()
}
