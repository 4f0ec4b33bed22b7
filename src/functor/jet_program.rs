//! The Taylor coefficients of a scalar program as an ordinary program, so
//! that the backends (register code, native code) run them: ∂⃗ applied
//! `K` times along the curve that the input jets describe.
//!
//! For a curve `x(t) = Σⱼ cⱼ tʲ`, the `j`-th derivative at `t = 0` is
//! `x⁽ʲ⁾ = j! cⱼ` and the derivative of `x⁽ʲ⁾` is `x⁽ʲ⁺¹⁾`. So ∂⃗ of the
//! program of `y⁽ᵏ⁻¹⁾`, with the tangent of each input `x⁽ʲ⁾` set to the
//! input `x⁽ʲ⁺¹⁾`, is the program of `y⁽ᵏ⁾` (the chain rule applied `k`
//! times: Faà di Bruno's formula, in the form nested forward mode computes
//! it; A. Griewank and A. Walther, "Evaluating Derivatives", 2nd ed.,
//! §13.1), and `yₖ = y⁽ᵏ⁾ / k!`. The builder shares the terms that the
//! repeated differentiation produces more than once and drops the
//! structurally zero ones (an input coefficient above its jet's degree is
//! a structural zero), which keeps the program polynomial in `K` for the
//! low degrees it is used at.
//!
//! The interpreted Taylor program ([`super::TaylorProgram`]) computes the
//! same coefficients by the recurrences of Griewank and Walther §13.2; the
//! two differ in rounding at finite points. Where an intermediate value is
//! infinite they can differ in kind: `e^{−x²}` at `x = ∞` has the
//! coefficients `0, 0, 0, …` by the recurrences, which leave out a term
//! with an exact zero factor, and NaN from the program, whose products
//! meet `0 · ∞`. So where the program's values are not finite its callers
//! take the recurrences' values instead (array Taylor mode element by
//! element, a loop step by step). Where no Taylor expansion exists (`√x`
//! at `x = 0` along `t²`, whose value is `|t|`) neither gives finite
//! coefficients past the first.

use crate::functor::forward::pushforward_in_place;
use crate::program::ir::Instr;
use crate::program::{live_from, Builder, Program, Var};
use crate::rules::Prim;

/// The highest degree the programs are built for. The number of terms
/// grows faster than the recurrences' `O(K²)`: on a body of 8 smooth
/// operations with every input a full jet, 222 instructions at `K = 4`,
/// 1144 at 8, 3346 at 12 and 7404 at 16; and the sums of Faà di Bruno's
/// formula grow with `k!` before the division by it.
pub(crate) const MAX_JET_PROGRAM_DEGREE: usize = 8;

/// Whether an instruction may be part of a program whose coefficients
/// come from [`jet_program`]: an input, a constant or a smooth primitive
/// (the non-smooth ones' Taylor rules decide on whole jets, which a
/// derivative at the constant term does not); not a user rule.
fn is_smooth(ins: &Instr) -> bool {
    if ins.is_input() || ins.is_const() {
        return true;
    }
    ins.prim().is_some_and(is_smooth_prim)
}

/// Every primitive of the table, smooth or not: no wildcard, so that a new
/// primitive is placed here when it is added.
fn is_smooth_prim(p: Prim) -> bool {
    match p {
        Prim::Add
        | Prim::Sub
        | Prim::Mul
        | Prim::Div
        | Prim::Neg
        | Prim::MulAdd
        | Prim::Powi
        | Prim::Powf
        | Prim::Sqrt
        | Prim::Cbrt
        | Prim::Hypot
        | Prim::Exp
        | Prim::Exp2
        | Prim::ExpM1
        | Prim::Ln
        | Prim::Log2
        | Prim::Log10
        | Prim::Ln1p
        | Prim::Sin
        | Prim::Cos
        | Prim::Tan
        | Prim::Asin
        | Prim::Acos
        | Prim::Atan
        | Prim::Atan2
        | Prim::Sinh
        | Prim::Cosh
        | Prim::Tanh
        | Prim::Asinh
        | Prim::Acosh
        | Prim::Atanh
        | Prim::Sech2
        | Prim::Erf
        | Prim::Erfc
        | Prim::LnGamma
        | Prim::Digamma
        | Prim::Polygamma => true,
        Prim::Select
        | Prim::Abs
        | Prim::Signum
        | Prim::Max
        | Prim::Min
        | Prim::Clamp
        | Prim::Floor
        | Prim::Ceil
        | Prim::Rem => false,
    }
}

/// `n!` as an `f64` (exact for `n ≤ 22`).
pub(crate) fn factorial(n: usize) -> f64 {
    (2..=n).fold(1.0, |f, k| f * k as f64)
}

/// The program of the Taylor coefficients of degree `degree` of `p`:
/// input `i` of `p` becomes the inputs `c₀ … c_{tops[i]}` of its jet (its
/// coefficients above `tops[i]` are zero by structure), input after input;
/// output `k` of `p` becomes the outputs `y₀ … y_degree`, output after
/// output (a structurally zero coefficient is `+0.0`). `None` where `p`
/// holds a non-smooth primitive, a user rule or a guard, `degree` is above
/// [`MAX_JET_PROGRAM_DEGREE`], `tops` does not have one entry per input, or
/// the program would exceed `max_len` instructions.
pub(crate) fn jet_program(
    p: &Program,
    degree: usize,
    tops: &[usize],
    max_len: usize,
) -> Option<Program> {
    let q = derivatives(p, degree, tops, max_len)?;
    let tops: Vec<usize> = tops.iter().map(|&t| t.min(degree)).collect();
    // The coefficients: inputs cⱼ with x⁽ʲ⁾ = j! cⱼ, outputs y⁽ᵏ⁾ / k!.
    let mut b = Builder::with_capacity(q.len() + q.n_inputs() + q.n_outputs());
    let mut xs = Vec::with_capacity(q.n_inputs());
    for &t in &tops {
        for j in 0..=t {
            let c = b.input();
            xs.push(if j < 2 { c } else { b.scale(factorial(j), c) });
        }
    }
    let map = q.copy_into(&mut b, &xs);
    let outs: Vec<Var> = q
        .outputs()
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let (k, y) = (i % (degree + 1), map[o.index()]);
            if k < 2 {
                y
            } else {
                b.scale(1.0 / factorial(k), y)
            }
        })
        .collect();
    let r = b.finish_unchecked(&outs).positive_zero_outputs().into_dce();
    (r.len() <= max_len).then_some(r)
}

/// [`jet_program`] in derivatives rather than coefficients: input `i` of
/// `p` becomes the inputs `x⁽⁰⁾ … x⁽ᵗᵒᵖˢ⁽ⁱ⁾⁾` of its jet and output `k` the
/// outputs `y⁽⁰⁾ … y⁽ᵈᵉᵍʳᵉᵉ⁾`, `x⁽ʲ⁾ = j! cⱼ` (a structurally zero output
/// is `+0.0`). A loop carries its jet in this form, so that no step
/// rounds the carried values through `j!` and `1/j!`. `None` as for
/// [`jet_program`].
pub(crate) fn derivative_program(
    p: &Program,
    degree: usize,
    tops: &[usize],
    max_len: usize,
) -> Option<Program> {
    let q = derivatives(p, degree, tops, max_len)?;
    Some(q.positive_zero_outputs().into_dce())
}

/// The derivatives of [`derivative_program`], structural zeros as the
/// builder's `−0.0`.
fn derivatives(p: &Program, degree: usize, tops: &[usize], max_len: usize) -> Option<Program> {
    if degree > MAX_JET_PROGRAM_DEGREE
        || tops.len() != p.n_inputs()
        || !p.guards().is_empty()
        || !p.custom_rules().is_empty()
        || !p.code.iter().all(is_smooth)
    {
        return None;
    }
    let tops: Vec<usize> = tops.iter().map(|&t| t.min(degree)).collect();
    // The derivatives: inputs x⁽ʲ⁾ of each input of `p`, j ≤ its top.
    let mut b = Builder::with_capacity(4 * p.len());
    let d: Vec<Vec<Var>> = tops
        .iter()
        .map(|&t| (0..=t).map(|_| b.input()).collect())
        .collect();
    // The tangent of input x⁽ʲ⁾ is x⁽ʲ⁺¹⁾ (a structural zero above the top).
    let xdots: Vec<Option<Var>> = d
        .iter()
        .flat_map(|x| (0..x.len()).map(move |j| x.get(j + 1).copied()))
        .collect();
    let first: Vec<Var> = d.iter().map(|x| x[0]).collect();
    let map = p.copy_into(&mut b, &first);
    let mut ys: Vec<Vec<Var>> = p.outputs().iter().map(|o| vec![map[o.index()]]).collect();
    for _ in 0..degree {
        let end = b.len();
        let last: Vec<Var> = ys.iter().filter_map(|y| y.last().copied()).collect();
        let live = live_from(&b.code()[..end], &last);
        let tangent = pushforward_in_place(&mut b, end, &xdots, &live);
        for y in &mut ys {
            let Some(&prev) = y.last() else { continue };
            let next = match tangent.get(prev.index()).and_then(|t| t.get()) {
                Some(t) => t,
                None => b.zero(),
            };
            y.push(next);
        }
        if b.len() > max_len {
            return None;
        }
    }
    let outs: Vec<Var> = ys.concat();
    let q = b.finish_unchecked(&outs).into_dce();
    (q.len() <= max_len).then_some(q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::functor::TaylorProgram;

    /// `tanh(√(sin x · eᶻ)) / x` and Rosenbrock's term: the program's
    /// coefficients against the recurrences' (the interpreted Taylor
    /// program), for full and linear input jets, at every degree built.
    #[test]
    fn jet_programs_agree_with_the_recurrences() {
        let mut b = Builder::new();
        let (a, c) = (b.input(), b.input());
        let aa = b.mul(a, a);
        let t = b.sub(c, aa);
        let one = b.constant(1.0);
        let u = b.sub(one, a);
        let tt = b.mul(t, t);
        let t100 = b.scale(100.0, tt);
        let uu = b.mul(u, u);
        let y = b.add(t100, uu);
        let rosenbrock = b.finish(&[y]).unwrap();
        let mut b = Builder::new();
        let (x, z) = (b.input(), b.input());
        let s = b.apply(Prim::Sin, 0, &[x]);
        let e = b.apply(Prim::Exp, 0, &[z]);
        let m = b.mul(s, e);
        let q = b.apply(Prim::Sqrt, 0, &[m]);
        let l = b.apply(Prim::Tanh, 0, &[q]);
        let y = b.div(l, x);
        let mixed = b.finish(&[y, m]).unwrap();
        let jet = [0.7, -0.4, 0.3, 0.25, -0.2, 0.15, 0.1, -0.05, 0.02];
        let jet2 = [0.2, 0.5, -0.1, 0.3, 0.05, -0.25, 0.2, 0.1, -0.1];
        for p in [&rosenbrock, &mixed] {
            for k in 1..=MAX_JET_PROGRAM_DEGREE {
                for top in [1, k] {
                    let w = k + 1;
                    let r = jet_program(p, k, &[top, top], usize::MAX).unwrap();
                    let mut input = Vec::new();
                    for j in [&jet, &jet2] {
                        input.extend_from_slice(&j[..=top]);
                    }
                    let got = r.eval(&input).unwrap();
                    let mut t = TaylorProgram::new(p, k).unwrap();
                    let mut full = vec![0.0; 2 * w];
                    for (i, j) in [&jet, &jet2].iter().enumerate() {
                        full[i * w..i * w + top + 1].copy_from_slice(&j[..=top]);
                    }
                    let mut want = vec![0.0; p.n_outputs() * w];
                    t.eval(&full, &mut want).unwrap();
                    assert_eq!(got.len(), want.len());
                    for (i, (g, h)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (g - h).abs() <= 1e-12 * h.abs().max(1.0),
                            "K = {k}, top {top}, coefficient {i}: {g} vs {h}"
                        );
                    }
                    assert_eq!(
                        got[0].to_bits(),
                        want[0].to_bits(),
                        "the value, bit for bit"
                    );
                }
            }
        }
    }

    #[test]
    fn non_smooth_bodies_and_high_degrees_are_left_to_the_recurrences() {
        let mut b = Builder::new();
        let x = b.input();
        let a = b.apply(Prim::Abs, 0, &[x]);
        let p = b.finish(&[a]).unwrap();
        assert!(jet_program(&p, 2, &[2], usize::MAX).is_none());
        let mut b = Builder::new();
        let x = b.input();
        let s = b.apply(Prim::Sin, 0, &[x]);
        let p = b.finish(&[s]).unwrap();
        assert!(jet_program(&p, 2, &[2], usize::MAX).is_some());
        assert!(jet_program(&p, MAX_JET_PROGRAM_DEGREE + 1, &[1], usize::MAX).is_none());
        assert!(jet_program(&p, 2, &[2], 3).is_none(), "past the size bound");
        assert!(
            jet_program(&p, 2, &[2, 2], usize::MAX).is_none(),
            "one top per input"
        );
    }
}
