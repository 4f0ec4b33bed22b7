//! Hyperbolic functions and their inverses.
//!
//! Pullbacks, for `y = f(x)` and cotangent `ȳ` (Abramowitz & Stegun
//! 4.5.17–19, 4.6.38–40):
//!
//! * `sinh x`: `ȳ cosh x`; `cosh x`: `ȳ sinh x`; `tanh x = y`: `ȳ (1 − y²)`
//! * `asinh x`: `ȳ / hypot(x, 1)` (no overflow of `x² + 1`)
//! * `acosh x`: `ȳ / √((x − 1)(x + 1))`, `+∞` at 1
//! * `atanh x`: `ȳ / ((1 − x)(1 + x))`

use super::{Contribs, DualF64, Primitive};
use crate::program::{Builder, Var};

/// This family's primitives (hyperbolic functions and their inverses), in the order of the
/// table: the list the primitive table in `rules/mod.rs` is stamped from.
/// Adding a primitive of this family adds its name here.
macro_rules! hyperbolic_list {
    ([$($acc:tt)*] $next:ident $($rest:ident)*) => {
        $next! { [$($acc)* hyperbolic {
            /// `sinh x`.
            Sinh,
            /// `cosh x`.
            Cosh,
            /// `tanh x`.
            Tanh,
            /// `asinh x`.
            Asinh,
            /// `acosh x` (NaN below 1).
            Acosh,
            /// `atanh x` (NaN outside `[−1, 1]`).
            Atanh,
        }] $($rest)* }
    };
}

unary!(
    Sinh,
    "sinh",
    |x| x.sinh(),
    |b, x, _y, ct| {
        let c = b.cosh(x);
        b.mul(ct, c)
    },
    |d| Some(d.sinh())
);
unary!(
    Cosh,
    "cosh",
    |x| x.cosh(),
    |b, x, _y, ct| {
        let s = b.sinh(x);
        b.mul(ct, s)
    },
    |d| Some(d.cosh())
);
unary!(
    Tanh,
    "tanh",
    |x| x.tanh(),
    |b, _x, y, ct| {
        let one = b.constant(1.0);
        let y2 = b.mul(y, y);
        let d = b.sub(one, y2);
        b.mul(ct, d)
    },
    |d| Some(d.tanh())
);
unary!(
    Asinh,
    "asinh",
    |x| x.asinh(),
    |b, x, _y, ct| {
        let one = b.constant(1.0);
        let h = b.hypot(x, one);
        b.div(ct, h)
    },
    |d| Some(d.asinh())
);
unary!(
    Acosh,
    "acosh",
    |x| x.acosh(),
    |b, x, _y, ct| {
        let one = b.constant(1.0);
        let l = b.sub(x, one);
        let r = b.add(x, one);
        let p = b.mul(l, r);
        let s = b.sqrt(p);
        b.div(ct, s)
    },
    |d| (d.re() > 1.0).then(|| d.acosh())
);
unary!(
    Atanh,
    "atanh",
    |x| x.atanh(),
    |b, x, _y, ct| {
        let one = b.constant(1.0);
        let l = b.sub(one, x);
        let r = b.add(one, x);
        let p = b.mul(l, r);
        b.div(ct, p)
    },
    |d| (d.re().abs() < 1.0).then(|| d.atanh())
);
