//! Hyperbolic functions and their inverses.
//!
//! Pullbacks, for `y = f(x)` and cotangent `ȳ` (Abramowitz & Stegun
//! 4.5.17–19, 4.6.38–40):
//!
//! * `sinh x`: `ȳ cosh x`; `cosh x`: `ȳ sinh x`; `tanh x`: `ȳ sech² x`
//!   (not `ȳ (1 − tanh² x)`, which cancels where `|tanh x| → 1`)
//! * `sech² x = s`: `−2 ȳ s tanh x`, so every derivative of `tanh` is a
//!   polynomial in `tanh x` and `sech² x`
//! * `asinh x`: `ȳ / hypot(x, 1)` (no overflow of `x² + 1`)
//! * `acosh x`: `ȳ / √((x − 1)(x + 1))`, `+∞` at 1
//! * `atanh x`: `ȳ / ((1 − x)(1 + x))`
//!
//! The f64 values of `acosh` and `atanh` are libm's: std's lose accuracy
//! near 1 (`acosh`) and for negative arguments (`atanh`, which rounds
//! `1 − x`), by up to 1e-10 relative.

use super::jet::{self, Scratch};
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
            /// `sech² x = 1 / cosh² x`, the derivative of `tanh`.
            Sech2,
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
    |d| Some(d.sinh()),
    |x, y, sc| {
        let [c] = sc.take(y.len());
        c[0] = x[0].cosh();
        jet::sinh_cosh(x, y, c)
    }
);
unary!(
    Cosh,
    "cosh",
    |x| x.cosh(),
    |b, x, _y, ct| {
        let s = b.sinh(x);
        b.mul(ct, s)
    },
    |d| Some(d.cosh()),
    |x, y, sc| {
        let [s] = sc.take(y.len());
        s[0] = x[0].sinh();
        jet::sinh_cosh(x, s, y)
    }
);
unary!(
    Tanh,
    "tanh",
    |x| x.tanh(),
    |b, x, _y, ct| {
        // sech² x as a primitive of its own: no cancellation where
        // |tanh x| → 1 (the form 1 − y² loses all accuracy there: tanh′(20)
        // would be 0, not 1.7e-17), and every higher derivative is a
        // polynomial in tanh x and sech² x, so no order adds a call.
        let s = b.apply(super::Prim::Sech2, 0, &[x]);
        b.mul(ct, s)
    },
    |d| Some(d.tanh()),
    |x, y, sc| {
        // y′ = sech²x · x′ with w = sech² x = 1 − y², whose constant term
        // is the accurate value of sech² rather than 1 − y₀².
        let [w] = sc.take(y.len());
        w[0] = Sech2::value(&[x[0]], 0);
        for k in 1..y.len() {
            y[k] = jet::chain(x, w, k);
            w[k] = -jet::conv(y, y, k);
        }
    }
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
    |d| Some(d.asinh()),
    |x, y, sc| {
        // √(1 + x²) y′ = x′.
        let [v, u] = sc.take(y.len());
        jet::square_plus(x, 1.0, x[0].mul_add(x[0], 1.0), v);
        u[0] = x[0].hypot(1.0);
        jet::sqrt(v, u);
        jet::integrate_over(x, u, u[0], y)
    }
);
unary!(
    Acosh,
    "acosh",
    |x| libm::acosh(x),
    |b, x, _y, ct| {
        let one = b.constant(1.0);
        let l = b.sub(x, one);
        let r = b.add(x, one);
        let p = b.mul(l, r);
        let s = b.sqrt(p);
        b.div(ct, s)
    },
    |d| (d.re() > 1.0).then(|| d.acosh()),
    |x, y, sc| {
        // √((x − 1)(x + 1)) y′ = x′.
        let [v, u] = sc.take(y.len());
        jet::square_plus(x, 1.0, (x[0] - 1.0) * (x[0] + 1.0), v);
        u[0] = v[0].sqrt();
        jet::sqrt(v, u);
        jet::integrate_over(x, u, u[0], y)
    }
);
unary!(
    Atanh,
    "atanh",
    |x| libm::atanh(x),
    |b, x, _y, ct| {
        let one = b.constant(1.0);
        let l = b.sub(one, x);
        let r = b.add(one, x);
        let p = b.mul(l, r);
        b.div(ct, p)
    },
    |d| (d.re().abs() < 1.0).then(|| d.atanh()),
    |x, y, sc| {
        // (1 − x)(1 + x) y′ = x′.
        let [u] = sc.take(y.len());
        jet::square_plus(x, -1.0, (1.0 - x[0]) * (1.0 + x[0]), u);
        jet::integrate_over(x, u, u[0], y)
    }
);

/// `sech² x = 1 / cosh² x`.
pub struct Sech2;
impl Primitive for Sech2 {
    const NAME: &'static str = "sech2";
    const ARITY: usize = 1;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        // cosh overflows to ∞ past |x| ≈ 710, where sech² x is below the
        // smallest subnormal anyway: 1/∞ = 0 is the right answer.
        let c = x[0].cosh();
        1.0 / (c * c)
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], sc: &mut Scratch) {
        // With t = tanh x: t′ = y x′ and y′ = −2 t y x′; p = t·y grows
        // alongside.
        let [t, p] = sc.take(y.len());
        y[0] = Self::value(&[x[0][0]], 0);
        t[0] = x[0][0].tanh();
        p[0] = t[0] * y[0];
        for k in 1..y.len() {
            t[k] = jet::chain(x[0], y, k);
            y[k] = -2.0 * jet::chain(x[0], p, k);
            p[k] = jet::conv(t, y, k);
        }
    }
    fn pullback(b: &mut Builder, x: &[Var], _: i32, y: Var, ct: Var) -> Contribs {
        // (sech² x)′ = −2 sech² x tanh x.
        let t = b.tanh(x[0]);
        let st = b.mul(y, t);
        let d = b.scale(-2.0, st);
        [Some(b.mul(ct, d)), None, None]
    }
}
