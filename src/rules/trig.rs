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

use super::jet::{self, Scratch};
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

/// The jet of `asin x` into `y` (`y₀` given): `√((1 − x)(1 + x)) y′ = x′`,
/// with that root's jet in `u`.
fn one_minus_sq_sqrt_jet(x: &[f64], u: &mut [f64], y: &mut [f64]) {
    // u² = (1 − x)(1 + x): its jet, then the root's, in place (the root's
    // coefficient k reads the square's only at k).
    jet::square_plus(x, -1.0, (1.0 - x[0]) * (1.0 + x[0]), u);
    let v0 = u[0];
    u[0] = v0.sqrt();
    for k in 1..u.len() {
        let mut s = u[k];
        for j in 1..k {
            s -= u[j] * u[k - j];
        }
        u[k] = s / (2.0 * u[0]);
    }
    jet::integrate_over(x, u, u[0], y)
}

unary!(
    Sin,
    "sin",
    |x| x.sin(),
    |b, x, _y, ct| {
        let c = b.cos(x);
        b.mul(ct, c)
    },
    |d| Some(d.sin()),
    |x, y, sc| {
        let [c] = sc.take(y.len());
        c[0] = x[0].cos();
        jet::sin_cos(x, y, c)
    }
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
    |d| Some(d.cos()),
    |x, y, sc| {
        let [s] = sc.take(y.len());
        s[0] = x[0].sin();
        jet::sin_cos(x, s, y)
    }
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
    |d| Some(d.tan()),
    |x, y, sc| {
        // y′ = (1 + y²) x′, with w = 1 + y² grown alongside.
        let [w] = sc.take(y.len());
        w[0] = 1.0 + y[0] * y[0];
        for k in 1..y.len() {
            y[k] = jet::chain(x, w, k);
            w[k] = jet::conv(y, y, k);
        }
    }
);
unary!(
    Asin,
    "asin",
    |x| x.asin(),
    |b, x, _y, ct| {
        let s = one_minus_sq_sqrt(b, x);
        b.div(ct, s)
    },
    |d| (d.re().abs() < 1.0).then(|| d.asin()),
    |x, y, sc| {
        let [u] = sc.take(y.len());
        one_minus_sq_sqrt_jet(x, u, y)
    }
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
    |d| (d.re().abs() < 1.0).then(|| d.acos()),
    |x, y, sc| {
        let [u] = sc.take(y.len());
        one_minus_sq_sqrt_jet(x, u, y);
        y[1..].iter_mut().for_each(|v| *v = -*v)
    }
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
    |d| Some(d.atan()),
    |x, y, sc| {
        // (1 + x²) y′ = x′.
        let [u] = sc.take(y.len());
        jet::square_plus(x, 1.0, x[0].mul_add(x[0], 1.0), u);
        jet::integrate_over(x, u, u[0], y)
    }
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
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], sc: &mut Scratch) {
        // θ = atan2(a, b) has θ′ = (b a′ − a b′) / (a² + b²). Both
        // arguments are first scaled by h = hypot(a₀, b₀) (θ does not
        // change), so a² + b² starts at 1 and neither overflows.
        let (a0, b0) = (x[0][0], x[1][0]);
        let len = y.len();
        let h = a0.hypot(b0);
        let h = if h > 0.0 && h.is_finite() { h } else { 1.0 };
        let [a, b, u, q] = sc.take(len);
        for k in 0..len {
            a[k] = x[0][k] / h;
            b[k] = x[1][k] / h;
        }
        // u = a² + b²; q = (b a′ − a b′) (coefficients of tᵐ, m < K).
        for (m, um) in u.iter_mut().enumerate() {
            *um = jet::conv(a, a, m) + jet::conv(b, b, m);
        }
        for m in 0..len - 1 {
            let mut n = 0.0;
            for i in 0..=m {
                let d = (m - i + 1) as f64;
                n += d * (b[i] * a[m - i + 1] - a[i] * b[m - i + 1]);
            }
            q[m] = n;
        }
        // θ′ = q / u, solved in place in q, then integrated.
        for m in 0..len - 1 {
            let mut n = q[m];
            for j in 1..=m {
                n -= u[j] * q[m - j];
            }
            q[m] = n / u[0];
        }
        for k in 1..len {
            y[k] = q[k - 1] / k as f64;
        }
        y[0] = a0.atan2(b0);
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
