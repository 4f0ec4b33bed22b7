//! Arithmetic: `+ − × ÷`, negation and `select`.

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
            let zero = b.constant(0.0);
            let ga = b.select(c, ct, zero);
            let gb = b.select(c, zero, ct);
            [None, Some(ga), Some(gb)]
        }
        _ => [None; 3],
    }
}
