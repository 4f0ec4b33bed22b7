//! Rules: for each primitive, its value (in [`crate::Real`]) and its
//! pullback, written once against the [`Builder`] (DESIGN.md §2, layer 4).
//!
//! Because a pullback is emitted as ordinary instructions, the pullback of a
//! rule is itself a program that ∂⃖ can differentiate again: rules nest to
//! any order. User-defined primitives ([`CustomRule`]) go through the same
//! path. Cotangent contributions are `Option<Var>`, with `None` a
//! structural zero (seed 002's `Zero`).

mod arith;
mod custom;
mod elementary;

pub use custom::{CustomRule, ScalarRule};

use crate::program::{Builder, Op, Var};

/// The pullback of one instruction: given its (already rebuilt) operands,
/// its result `y` and the cotangent `ct` of `y`, emit and return the
/// cotangent contribution for each operand, in operand order.
pub(crate) fn pullback(
    b: &mut Builder,
    op: &Op,
    y: Var,
    ct: Var,
    rules: &[CustomRule],
) -> [Option<Var>; 3] {
    match *op {
        Op::Input(_) | Op::Const(_) => [None; 3],
        Op::Add(..) | Op::Sub(..) | Op::Mul(..) | Op::Div(..) | Op::Neg(_) | Op::Select(..) => {
            arith::pullback(b, op, y, ct)
        }
        Op::Custom(r, x) => {
            let g = rules.get(r as usize).map(|rule| rule.pullback(b, x, y, ct));
            [g, None, None]
        }
        _ => [elementary::pullback(b, op, y, ct), None, None],
    }
}

/// The pushforward of one instruction: given its (already rebuilt)
/// operands, its result `y` and the tangents of its operands (`None`: a
/// structural zero), emit and return the tangent of `y`.
///
/// Unary primitives (elementary and user-defined) reuse their pullback,
/// which for a scalar function is the same multiplication by `f′(x)`.
pub(crate) fn pushforward(
    b: &mut Builder,
    op: &Op,
    y: Var,
    tangents: [Option<Var>; 3],
    rules: &[CustomRule],
) -> Option<Var> {
    match *op {
        Op::Input(_) | Op::Const(_) => None,
        Op::Add(..) | Op::Sub(..) | Op::Mul(..) | Op::Div(..) | Op::Neg(_) | Op::Select(..) => {
            arith::pushforward(b, op, y, tangents)
        }
        Op::Custom(r, x) => {
            let t = tangents[0]?;
            rules.get(r as usize).map(|rule| rule.pullback(b, x, y, t))
        }
        _ => elementary::pushforward(b, op, y, tangents[0]?),
    }
}
