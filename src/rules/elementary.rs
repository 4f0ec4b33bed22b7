//! Elementary functions: sin, cos, exp, ln, sqrt, tanh, powi.

use crate::program::{Builder, Op, Var};

/// Pullbacks of the elementary primitives, for `y = f(x)` and cotangent
/// `ȳ` (closed forms, e.g. Abramowitz & Stegun 4.3.105–106, 4.2.1, 4.1.1,
/// 4.5.19):
///
/// * `sin x`: `x̄ = ȳ cos x`
/// * `cos x`: `x̄ = −ȳ sin x`
/// * `exp x`: `x̄ = ȳ y`
/// * `ln x`: `x̄ = ȳ / x`
/// * `√x`: `x̄ = ȳ / (2y)`
/// * `tanh x`: `x̄ = ȳ (1 − y²)`
/// * `xⁿ`: `x̄ = ȳ n xⁿ⁻¹`
pub(super) fn pullback(b: &mut Builder, op: &Op, y: Var, ct: Var) -> Option<Var> {
    Some(match *op {
        Op::Sin(x) => {
            let c = b.cos(x);
            b.mul(ct, c)
        }
        Op::Cos(x) => {
            let s = b.sin(x);
            let t = b.mul(ct, s);
            b.neg(t)
        }
        Op::Exp(_) => b.mul(ct, y),
        Op::Ln(x) => b.div(ct, x),
        Op::Sqrt(_) => {
            let two_y = b.scale(2.0, y);
            b.div(ct, two_y)
        }
        Op::Tanh(_) => {
            let one = b.constant(1.0);
            let y2 = b.mul(y, y);
            let d = b.sub(one, y2);
            b.mul(ct, d)
        }
        Op::Powi(x, n) => {
            // n xⁿ⁻¹, or n xⁿ / x where n − 1 would overflow (n = i32::MIN).
            let p = match n.checked_sub(1) {
                Some(m) => b.powi(x, m),
                None => b.div(y, x),
            };
            let d = b.scale(f64::from(n), p);
            b.mul(ct, d)
        }
        _ => return None,
    })
}

/// Pushforward of an elementary primitive `y = f(x)` with tangent `ẋ`:
/// `ẏ = f′(x) ẋ`. For a function of one variable the pushforward and the
/// pullback are both multiplication by `f′(x)`, so the pullback rule above
/// is reused with `ȳ := ẋ`: the derivative of each primitive is written
/// once.
pub(super) fn pushforward(b: &mut Builder, op: &Op, y: Var, tangent: Var) -> Option<Var> {
    pullback(b, op, y, tangent)
}
