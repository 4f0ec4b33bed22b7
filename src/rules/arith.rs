//! Arithmetic: `+ − × ÷`, negation and `select`.

use crate::program::ir::STRUCTURAL_ZERO;
use crate::program::{Builder, Op, Var};

/// Pullbacks of the arithmetic primitives.
///
/// * `a + b`: `(ā, b̄) = (ȳ, ȳ)`
/// * `a − b`: `(ȳ, −ȳ)`
/// * `a · b`: `(ȳ b, ȳ a)`
/// * `a / b = y`: `(ȳ / b, −ȳ y / b)`
/// * `−a`: `−ȳ`
/// * `select(c, a, b)`: `(0, select(c, ȳ, 0), select(c, 0, ȳ))`; the
///   condition gets no cotangent (a branch, seed 000 §VI).
pub(super) fn pullback(b: &mut Builder, op: &Op, y: Var, ct: Var) -> [Option<Var>; 3] {
    match *op {
        Op::Add(..) => [Some(ct), Some(ct), None],
        Op::Sub(..) => [Some(ct), Some(b.neg(ct)), None],
        Op::Mul(x, z) => [Some(b.mul(ct, z)), Some(b.mul(ct, x)), None],
        Op::Div(_, z) => {
            let ga = b.div(ct, z);
            let t = b.mul(ga, y);
            [Some(ga), Some(b.neg(t)), None]
        }
        Op::Neg(_) => [Some(b.neg(ct)), None, None],
        Op::Select(c, _, _) => {
            let zero = b.constant(STRUCTURAL_ZERO);
            let ga = b.select(c, ct, zero);
            let gb = b.select(c, zero, ct);
            [None, Some(ga), Some(gb)]
        }
        _ => [None; 3],
    }
}

/// Pushforwards of the arithmetic primitives, for tangents `ȧ`, `ḃ`
/// (`None`: a structural zero) and result `y`:
///
/// * `a + b`: `ȧ + ḃ`; `a − b`: `ȧ − ḃ`; `−a`: `−ȧ`
/// * `a · b`: `ȧ b + a ḃ`
/// * `a / b = y`: `(ȧ − y ḃ) / b`
/// * `select(c, a, b)`: `select(c, ȧ, ḃ)`
pub(super) fn pushforward(b: &mut Builder, op: &Op, y: Var, t: [Option<Var>; 3]) -> Option<Var> {
    let zero = |b: &mut Builder, v: Option<Var>| v.unwrap_or_else(|| b.constant(STRUCTURAL_ZERO));
    match *op {
        Op::Add(..) => match (t[0], t[1]) {
            (Some(p), Some(q)) => Some(b.add(p, q)),
            (p, q) => p.or(q),
        },
        Op::Sub(..) => match (t[0], t[1]) {
            (Some(p), Some(q)) => Some(b.sub(p, q)),
            (p, None) => p,
            (None, Some(q)) => Some(b.neg(q)),
        },
        Op::Neg(_) => t[0].map(|p| b.neg(p)),
        Op::Mul(x, z) => {
            let l = t[0].map(|p| b.mul(p, z));
            let r = t[1].map(|q| b.mul(x, q));
            match (l, r) {
                (Some(l), Some(r)) => Some(b.add(l, r)),
                (l, r) => l.or(r),
            }
        }
        Op::Div(_, z) => {
            let num = match (t[0], t[1]) {
                (Some(p), Some(q)) => {
                    let yq = b.mul(y, q);
                    Some(b.sub(p, yq))
                }
                (Some(p), None) => Some(p),
                (None, Some(q)) => {
                    let yq = b.mul(y, q);
                    Some(b.neg(yq))
                }
                (None, None) => None,
            };
            num.map(|n| b.div(n, z))
        }
        Op::Select(c, _, _) => {
            if t[1].is_none() && t[2].is_none() {
                return None;
            }
            let (p, q) = (zero(b, t[1]), zero(b, t[2]));
            Some(b.select(c, p, q))
        }
        _ => None,
    }
}
