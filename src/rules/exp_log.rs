//! Exponentials and logarithms.
//!
//! Pullbacks, for `y = f(x)` and cotangent `ȳ` (Abramowitz & Stegun 4.1,
//! 4.2):
//!
//! * `eˣ`: `ȳ y`; `2ˣ`: `ȳ y ln 2`; `eˣ − 1`: `ȳ eˣ` (not `ȳ (y + 1)`, which
//!   cancels for `x < 0`)
//! * `ln x`: `ȳ / x`; `log₂ x`: `ȳ / (x ln 2)`; `log₁₀ x`: `ȳ / (x ln 10)`
//! * `ln(1 + x)`: `ȳ / (1 + x)`
//!
//! `exp_m1` and `ln_1p` keep their accuracy near 0 at every order: their
//! derivatives, `eˣ` and `(1 + x)⁻ᵏ`, have no cancellation there.

use std::f64::consts::{LN_10, LN_2};

use super::jet::{self, Scratch};
use super::{Contribs, DualF64, Primitive};
use crate::program::{Builder, Var};

/// This family's primitives (exponentials and logarithms), in the order of the
/// table: the list the primitive table in `rules/mod.rs` is stamped from.
/// Adding a primitive of this family adds its name here.
macro_rules! exp_log_list {
    ([$($acc:tt)*] $next:ident $($rest:ident)*) => {
        $next! { [$($acc)* exp_log {
            /// `eˣ`.
            Exp,
            /// `2ˣ`.
            Exp2,
            /// `eˣ − 1`, accurate near 0.
            ExpM1,
            /// `ln x` (NaN for `x < 0`, `−∞` at 0).
            Ln,
            /// `log₂ x`.
            Log2,
            /// `log₁₀ x`.
            Log10,
            /// `ln(1 + x)`, accurate near 0.
            Ln1p,
        }] $($rest)* }
    };
}

macro_rules! unary {
    ($P:ident, $name:literal, |$x:ident| $v:expr, |$b:ident, $xv:ident, $y:ident, $ct:ident| $pb:expr, |$d:ident| $dual:expr, |$tx:ident, $ty:ident, $ts:ident| $tay:expr) => {
        #[doc = concat!("`", $name, "`.")]
        pub struct $P;
        impl Primitive for $P {
            const NAME: &'static str = $name;
            const ARITY: usize = 1;
            #[inline(always)]
            fn value(x: &[f64], _: i32) -> f64 {
                let $x = x[0];
                $v
            }
            fn pullback($b: &mut Builder, x: &[Var], _: i32, $y: Var, $ct: Var) -> Contribs {
                let $xv = x[0];
                [Some($pb), None, None]
            }
            fn dual<D: DualF64>(x: &[D], _: i32) -> Option<D> {
                let $d = x[0];
                $dual
            }
            fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], s: &mut Scratch) {
                // y₀ is the value, before the rule (which may read it)
                // and after (which may use the slot for a companion).
                let y0 = Self::value(&[x[0][0]], 0);
                y[0] = y0;
                {
                    let ($tx, $ty, $ts) = (x[0], &mut *y, s);
                    $tay;
                }
                y[0] = y0;
            }
        }
    };
}

unary!(
    Exp,
    "exp",
    |x| x.exp(),
    |b, _x, y, ct| b.mul(ct, y),
    |d| Some(d.exp()),
    |x, y, _sc| jet::exp(x, y)
);
unary!(
    Exp2,
    "exp2",
    |x| x.exp2(),
    |b, _x, y, ct| {
        let d = b.scale(LN_2, y);
        b.mul(ct, d)
    },
    |d| Some(d.exp2()),
    |x, y, _sc| {
        // y′ = (ln 2) y x′.
        for k in 1..y.len() {
            y[k] = LN_2 * jet::chain(x, y, k);
        }
    }
);
unary!(
    ExpM1,
    "exp_m1",
    |x| x.exp_m1(),
    |b, x, _y, ct| {
        // eˣ, not y + 1, which cancels for x < 0 (exp_m1′(−40) would be 0,
        // not 4.2e-18).
        let e = b.exp(x);
        b.mul(ct, e)
    },
    |d| Some(d.exp_m1()),
    |x, y, _sc| {
        // The jet of eˣ; its constant term is then the value eˣ − 1.
        y[0] = x[0].exp();
        jet::exp(x, y)
    }
);
unary!(
    Ln,
    "ln",
    |x| x.ln(),
    |b, x, _y, ct| b.div(ct, x),
    |d| Some(d.ln()),
    |x, y, _sc| jet::integrate_over(x, x, x[0], y)
);
unary!(
    Log2,
    "log2",
    |x| x.log2(),
    |b, x, _y, ct| {
        let d = b.scale(LN_2, x);
        b.div(ct, d)
    },
    |d| Some(d.log2()),
    |x, y, _sc| {
        jet::integrate_over(x, x, x[0], y);
        y[1..].iter_mut().for_each(|v| *v /= LN_2)
    }
);
unary!(
    Log10,
    "log10",
    |x| x.log10(),
    |b, x, _y, ct| {
        let d = b.scale(LN_10, x);
        b.div(ct, d)
    },
    |d| Some(d.log10()),
    |x, y, _sc| {
        jet::integrate_over(x, x, x[0], y);
        y[1..].iter_mut().for_each(|v| *v /= LN_10)
    }
);
unary!(
    Ln1p,
    "ln_1p",
    |x| x.ln_1p(),
    |b, x, _y, ct| {
        let one = b.constant(1.0);
        let d = b.add(x, one);
        b.div(ct, d)
    },
    |d| Some(d.ln_1p()),
    |x, y, _sc| jet::integrate_over(x, x, 1.0 + x[0], y)
);
