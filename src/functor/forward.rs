//! ∂⃗, the forward-mode functor: pushforward of tangents (K. Fischer,
//! "∂P.jl terminology and notation guide", §IV: `f₊`; the Futhark notes on
//! forward and reverse mode AD on tangent insertion).

use super::kind::ProgramKind;
use crate::program::{Builder, Instr, OptVar, Program, Var, MAX_ARITY};
use crate::rules;
use crate::rules::CustomRule;

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
///
/// # Array programs
///
/// On an [`ArrayProgram`](crate::array::ArrayProgram) (the same function,
/// also named `array::forward`) each array operation's tangent is its
/// pushforward rule; a map's tangent is a map of the body's scalar
/// pushforward (this functor on the body). Inputs `[x…, ẋ…]`, outputs
/// `[y…, ẏ…]`. It returns a `Result` there ([`ProgramKind::Derived`]): an
/// error would mean a shape rule that refuses, a bug in a rule for
/// programs this crate built.
///
/// ```
/// use optic_ad::array::{forward, trace, Array};
///
/// // f(x) = Σ xᵢ³: ẏ = Σ 3xᵢ² ẋᵢ.
/// let p = trace(|x: &[_]| Ok(x[0].map(|t| t * t * t).sum()), &[&[1.0, 2.0]]).unwrap();
/// let f = forward(&p).unwrap();
/// let out = f.eval(&[&[1.0, 2.0], &[1.0, 1.0]]).unwrap();
/// assert_eq!(out[1], vec![15.0]);
/// ```
pub fn forward<P: ProgramKind>(p: &P) -> P::Derived {
    p.forward_kind()
}

/// [`forward`] on a scalar program.
pub(crate) fn forward_program(p: &Program) -> Program {
    let mut b = Builder::with_capacity(3 * p.code.len());
    let xs: Vec<Var> = (0..p.n_inputs).map(|_| b.input()).collect();
    let xdots: Vec<Option<Var>> = (0..p.n_inputs).map(|_| Some(b.input())).collect();
    let (map, tangent) = pushforward_into(&mut b, p, &xs, &xdots);
    let mut outs: Vec<Var> = p.outputs.iter().map(|o| map[o.index()]).collect();
    for o in &p.outputs {
        let t = tangent[o.index()];
        outs.push(t.unwrap_or_else(|| b.constant(0.0)));
    }
    let mut in_blocks = p.input_blocks.clone();
    in_blocks.extend_from_slice(&p.input_blocks);
    let mut out_blocks = p.output_blocks.clone();
    out_blocks.extend_from_slice(&p.output_blocks);
    b.finish_blocks(&outs, in_blocks, out_blocks).into_dce()
}

/// Emits ∂⃗ of `p` into `b`: the primal instructions of `p` on the values
/// `xs` (one per input), then, in program order, the pushforward of each
/// one's tangent from the tangents `xdots` of the inputs (`None`: a
/// structural zero, the input is held fixed). Returns the value and the
/// tangent (`None`: structurally zero) of each instruction of `p`. Seeds
/// are folded into the tangents as they are emitted, so a driver derives
/// in one builder pass.
pub(crate) fn pushforward_into(
    b: &mut Builder,
    p: &Program,
    xs: &[Var],
    xdots: &[Option<Var>],
) -> (Vec<Var>, Vec<Option<Var>>) {
    let map = if xs.iter().all(|&x| b.constant_of(x).is_none()) {
        p.copy_into(b, xs)
    } else {
        p.inline_into(b, xs)
    };
    let mut tangent = vec![OptVar::NONE; p.code.len()];
    let len = p.code.len();
    sweep(
        b,
        len,
        |_, i| p.code[i],
        &p.rules,
        &mut tangent,
        |_| true,
        xdots,
        |o| map[o.index()],
    );
    (map, tangent.into_iter().map(OptVar::get).collect())
}

/// The pushforward of what `b` holds below `end`, emitted into `b` itself:
/// the tangent of each of those values (`None`: structurally zero), from
/// the tangents `xdots` of its inputs (by input number), computed only for
/// the values `live` marks (`end` of them). A driver that built a gradient in
/// `b` goes on this way without copying it.
pub(crate) fn pushforward_in_place(
    b: &mut Builder,
    end: usize,
    xdots: &[Option<Var>],
    live: &[bool],
) -> Vec<OptVar> {
    let mut tangent = vec![OptVar::NONE; end];
    let rules = b.rules().to_vec();
    let at = |b: &Builder, i: usize| b.code()[i];
    sweep(b, end, at, &rules, &mut tangent, |i| live[i], xdots, |o| o);
    tangent
}

/// The forward sweep of ∂⃗ over `len` instructions, instruction `i` read by
/// `at` (values numbered as there, found in `b` through `value`; user
/// rules in `rules`), for
/// the instructions `wanted` names: input `k` takes the tangent
/// `xdots[k]`, every other instruction the pushforward of its operands'
/// tangents (nothing where they are all structural zeros).
#[allow(clippy::too_many_arguments)]
fn sweep(
    b: &mut Builder,
    len: usize,
    at: impl Fn(&Builder, usize) -> Instr,
    rules: &[CustomRule],
    tangent: &mut [OptVar],
    wanted: impl Fn(usize) -> bool,
    xdots: &[Option<Var>],
    value: impl Fn(Var) -> Var,
) {
    for i in 0..len {
        let ins = at(b, i);
        let t = if let Some(k) = ins.as_input() {
            xdots.get(k as usize).copied().flatten()
        } else if !wanted(i) {
            None
        } else {
            let ops = ins.operands();
            let mut t = [None; MAX_ARITY];
            for (slot, o) in t.iter_mut().zip(ops) {
                *slot = tangent[o.index()].get();
            }
            let t = &t[..ops.len()];
            if t.iter().all(Option::is_none) {
                None
            } else {
                let mapped = ins.map_operands(&value);
                rules::pushforward(b, &mapped, value(Var(i as u32)), t, rules)
            }
        };
        tangent[i] = t.into();
    }
}
