//! Circular functions and their inverses (radians).
//!
//! Pullbacks, for `y = f(x)` and cotangent `ȳ` (Abramowitz & Stegun
//! 4.3.105–116, 4.4.52–54):
//!
//! * `sin x`: `ȳ cos x`; `cos x`: `−ȳ sin x`; `tan x = y`: `ȳ (1 + y²)`
//! * `asin x`: `ȳ / √((1 − x)(1 + x))`, `+∞` at `|x| = 1`
//! * `acos x`: `−ȳ / √((1 − x)(1 + x))`, `−∞` at `|x| = 1`
//! * `atan x`: `ȳ / (1 + x²)`
//! * `atan2(y, x)` with `h = hypot(x, y)`: `(ȳ (x/h)/h, −ȳ (y/h)/h)`,
//!   which neither overflows nor underflows early; NaN at the origin
//!
//! `(1 − x)(1 + x)` is used rather than `1 − x²`: it has no cancellation
//! near `|x| = 1`.

use super::{Contribs, DualF64, Primitive};
use crate::program::{Builder, Var};

/// This family's primitives (circular functions and their inverses), in the order of the
/// table: the list the primitive table in `rules/mod.rs` is stamped from.
/// Adding a primitive of this family adds its name here.
macro_rules! trig_list {
    ([$($acc:tt)*] $next:ident $($rest:ident)*) => {
        $next! { [$($acc)* trig {
            /// `sin x`.
            Sin,
            /// `cos x`.
            Cos,
            /// `tan x`.
            Tan,
            /// `asin x` (NaN outside `[−1, 1]`).
            Asin,
            /// `acos x` (NaN outside `[−1, 1]`).
            Acos,
            /// `atan x`.
            Atan,
            /// `atan2(y, x)`: the angle of `(x, y)`, in all four quadrants, with
            /// std's signed zeros.
            Atan2,
        }] $($rest)* }
    };
}

/// `√((1 − x)(1 + x))`.
fn one_minus_sq_sqrt(b: &mut Builder, x: Var) -> Var {
    let one = b.constant(1.0);
    let l = b.sub(one, x);
    let r = b.add(one, x);
    let p = b.mul(l, r);
    b.sqrt(p)
}

unary!(
    Sin,
    "sin",
    |x| x.sin(),
    |b, x, _y, ct| {
        let c = b.cos(x);
        b.mul(ct, c)
    },
    |d| Some(d.sin())
);
unary!(
    Cos,
    "cos",
    |x| x.cos(),
    |b, x, _y, ct| {
        let s = b.sin(x);
        let t = b.mul(ct, s);
        b.neg(t)
    },
    |d| Some(d.cos())
);
unary!(
    Tan,
    "tan",
    |x| x.tan(),
    |b, _x, y, ct| {
        let one = b.constant(1.0);
        let y2 = b.mul(y, y);
        let d = b.add(one, y2);
        b.mul(ct, d)
    },
    |d| Some(d.tan())
);
unary!(
    Asin,
    "asin",
    |x| x.asin(),
    |b, x, _y, ct| {
        let s = one_minus_sq_sqrt(b, x);
        b.div(ct, s)
    },
    |d| (d.re().abs() < 1.0).then(|| d.asin())
);
unary!(
    Acos,
    "acos",
    |x| x.acos(),
    |b, x, _y, ct| {
        let s = one_minus_sq_sqrt(b, x);
        let q = b.div(ct, s);
        b.neg(q)
    },
    |d| (d.re().abs() < 1.0).then(|| d.acos())
);
unary!(
    Atan,
    "atan",
    |x| x.atan(),
    |b, x, _y, ct| {
        let one = b.constant(1.0);
        let x2 = b.mul(x, x);
        let d = b.add(one, x2);
        b.div(ct, d)
    },
    |d| Some(d.atan())
);

/// `atan2(y, x)`.
pub struct Atan2;
impl Primitive for Atan2 {
    const NAME: &'static str = "atan2";
    const ARITY: usize = 2;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        x[0].atan2(x[1])
    }
    fn pullback(b: &mut Builder, x: &[Var], _: i32, _: Var, ct: Var) -> Contribs {
        let (yy, xx) = (x[0], x[1]);
        let h = b.hypot(xx, yy);
        let cx = b.div(xx, h);
        let dy = b.div(cx, h);
        let cy = b.div(yy, h);
        let dx = b.div(cy, h);
        let gy = b.mul(ct, dy);
        let gx = b.mul(ct, dx);
        [Some(gy), Some(b.neg(gx)), None]
    }
    // num-dual's atan2 differentiates atan(y/x), which breaks down at
    // x = 0: the derivative parts come from this rule instead.
}
