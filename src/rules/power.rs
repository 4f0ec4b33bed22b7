//! Powers and roots: `powi`, `powf`, `sqrt`, `cbrt`, `hypot`.
//!
//! Pullbacks, for `y = f(x)` and cotangent `ȳ` (Abramowitz & Stegun 3.3,
//! 4.2; NIST DLMF 4.8):
//!
//! * `xⁿ` (integer `n`): `ȳ n xⁿ⁻¹`, or `ȳ n y / x` where `n − 1`
//!   overflows
//! * `xʸ` (both differentiable): `(ȳ y xʸ⁻¹, ȳ xʸ ln x)`; at `x = 0` the
//!   second is 0, since `0ʸ = 0` for every `y > 0`
//! * `√x = y`: `ȳ / (2y)`, which is `+∞` at 0
//! * `∛x = y`: `ȳ / (3y²)`, `+∞` at 0 (not `y / 3x`, which is 0/0 there)
//! * `hypot(x, y) = h`: `(ȳ x / h, ȳ y / h)`; the ratios are at most 1, so
//!   nothing overflows where `h` does not; NaN at `(0, 0)`, where no
//!   gradient exists

use super::jet::{self, Scratch};
use super::{Contribs, DualF64, Primitive};
use crate::program::{Builder, Var};

/// This family's primitives (powers and roots), in the order of the
/// table: the list the primitive table in `rules/mod.rs` is stamped from.
/// Adding a primitive of this family adds its name here.
macro_rules! power_list {
    ([$($acc:tt)*] $next:ident $($rest:ident)*) => {
        $next! { [$($acc)* power {
            /// `xⁿ` for a fixed integer `n` (the primitive's parameter).
            Powi,
            /// `xʸ`, both arguments differentiable (std's `powf`).
            Powf,
            /// `√x` (NaN for `x < 0`).
            Sqrt,
            /// `∛x` (defined for negative `x`).
            Cbrt,
            /// `√(x² + y²)` without overflow or underflow (std's `hypot`).
            Hypot,
        }] $($rest)* }
    };
}

/// `xⁿ`, `n = param`.
pub struct Powi;
impl Primitive for Powi {
    const NAME: &'static str = "powi";
    const ARITY: usize = 1;
    #[inline(always)]
    fn value(x: &[f64], n: i32) -> f64 {
        x[0].powi(n)
    }
    fn taylor(x: &[&[f64]], n: i32, y: &mut [f64], sc: &mut Scratch) {
        let x = x[0];
        if n >= 0 {
            // Repeated squaring: x y′ = n y x′ would divide by x₀, and its
            // rounding errors grow with the nearest zero of x(t), where xⁿ
            // is perfectly regular (found by the closed-form tests).
            jet::pow_uint(x, u64::from(n.unsigned_abs()), y, sc);
        } else {
            // x⁻ᵐ has a true pole where x(t) vanishes: the recurrence's
            // growth is the function's own.
            y[0] = Self::value(&[x[0]], n);
            jet::pow_real(x, f64::from(n), y);
        }
        y[0] = Self::value(&[x[0]], n);
    }
    fn pullback(b: &mut Builder, x: &[Var], n: i32, y: Var, ct: Var) -> Contribs {
        // n xⁿ⁻¹, or n xⁿ / x where n − 1 would overflow (n = i32::MIN).
        let p = match n.checked_sub(1) {
            Some(m) => b.powi(x[0], m),
            None => b.div(y, x[0]),
        };
        let d = b.scale(f64::from(n), p);
        [Some(b.mul(ct, d)), None, None]
    }
    fn dual<D: DualF64>(x: &[D], n: i32) -> Option<D> {
        // num-dual forms n(n−1)(n−2) in i32, which overflows for
        // |n| ≥ 1291, and gives NaN for a negative power at 0; there the
        // coefficients come from this rule, in f64.
        let ok = n.unsigned_abs() <= 1000 && !(n < 0 && x[0].re() == 0.0);
        ok.then(|| x[0].powi(n))
    }
    fn simplify(b: &mut Builder, x: &[Var], n: i32) -> Option<Var> {
        match n {
            0 => Some(b.constant(1.0)),
            1 => Some(x[0]),
            _ => None,
        }
    }
    fn display(x: &[String], n: i32) -> String {
        format!("{} ^ {n}", x[0])
    }
}

/// `xʸ`.
pub struct Powf;
impl Primitive for Powf {
    const NAME: &'static str = "powf";
    const ARITY: usize = 2;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        x[0].powf(x[1])
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], sc: &mut Scratch) {
        let (a, e) = (x[0], x[1]);
        let y0 = Self::value(&[a[0], e[0]], 0);
        let constant_exponent = e[1..].iter().all(|&v| v == 0.0);
        if a[0] == 0.0 && a[1..].iter().all(|&v| v == 0.0) {
            // 0ᵉ: constant in e (the pullback's convention at a = 0).
            y.fill(0.0);
        } else if constant_exponent {
            // a^r for a fixed r: a y′ = r y a′, or at a = 0 repeated
            // squaring for a whole r ≥ 0 (else yₖ = 0 below r and no
            // finite coefficient above it).
            let r = e[0];
            if r >= 0.0 && r.fract() == 0.0 && r <= f64::from(u32::MAX) {
                // A whole exponent: repeated squaring, as for powi.
                jet::pow_uint(a, r as u64, y, sc);
            } else if a[0] != 0.0 {
                y[0] = y0;
                jet::pow_real(a, r, y);
            } else {
                for (k, v) in y.iter_mut().enumerate() {
                    *v = if (k as f64) < r { 0.0 } else { f64::NAN };
                }
            }
        } else if a[0] > 0.0 {
            // aᵉ = exp(e ln a).
            let len = y.len();
            let [l, p] = sc.take(len);
            l[0] = a[0].ln();
            jet::integrate_over(a, a, a[0], l);
            jet::mul(e, l, p);
            y[0] = y0;
            jet::exp(p, y);
        } else if a[0] == 0.0 {
            // At a = 0 the exponent's part vanishes (the pullback's
            // convention): the base's part of a fixed exponent e₀.
            let r = e[0];
            if r >= 0.0 && r.fract() == 0.0 && r <= f64::from(u32::MAX) {
                jet::pow_uint(a, r as u64, y, sc);
            } else {
                for (k, v) in y.iter_mut().enumerate() {
                    *v = if (k as f64) < r { 0.0 } else { f64::NAN };
                }
            }
        } else {
            // a < 0: not differentiable in the exponent.
            y.fill(f64::NAN);
        }
        y[0] = y0;
    }
    fn pullback(b: &mut Builder, x: &[Var], _: i32, y: Var, ct: Var) -> Contribs {
        let (base, e) = (x[0], x[1]);
        // ∂/∂x = y xʸ⁻¹.
        let one = b.constant(1.0);
        let e1 = b.sub(e, one);
        let p = b.powf(base, e1);
        let dx = b.mul(e, p);
        let gx = b.mul(ct, dx);
        // ∂/∂y = xʸ ln x where x ≠ 0 (NaN for x < 0, where xʸ is not
        // differentiable in y), and 0 at x = 0.
        // The logarithm is of x with 0 replaced by 1, so that the branch not
        // taken at x = 0 stays finite: ln 0 = −∞ would meet a zero
        // cotangent at the next order as 0 · (−∞) = NaN. (Negative x keeps
        // its NaN.)
        let nb = b.neg(base);
        let nonzero = b.select(nb, base, one);
        let safe = b.select(base, base, nonzero);
        let l = b.ln(safe);
        let dy = b.mul(y, l);
        let zero = b.zero();
        let dy0 = b.select(nb, dy, zero);
        let dy = b.select(base, dy, dy0);
        let gy = b.mul(ct, dy);
        [Some(gx), Some(gy), None]
    }
    fn display(x: &[String], _: i32) -> String {
        format!("{} ^ {}", x[0], x[1])
    }
}

/// `√x`.
pub struct Sqrt;
impl Primitive for Sqrt {
    const NAME: &'static str = "sqrt";
    const ARITY: usize = 1;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        x[0].sqrt()
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], _: &mut Scratch) {
        y[0] = Self::value(&[x[0][0]], 0);
        jet::sqrt(x[0], y);
    }
    fn pullback(b: &mut Builder, _: &[Var], _: i32, y: Var, ct: Var) -> Contribs {
        let two_y = b.scale(2.0, y);
        [Some(b.div(ct, two_y)), None, None]
    }
    fn dual<D: DualF64>(x: &[D], _: i32) -> Option<D> {
        // num-dual gives NaN derivatives at 0, where they are +∞.
        (x[0].re() > 0.0).then(|| x[0].sqrt())
    }
}

/// `∛x`.
pub struct Cbrt;
impl Primitive for Cbrt {
    const NAME: &'static str = "cbrt";
    const ARITY: usize = 1;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        x[0].cbrt()
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], sc: &mut Scratch) {
        // 3y² y′ = x′ (as the pullback: +∞ at 0, not 0/0), with u = 3y²
        // grown alongside.
        let [u] = sc.take(y.len());
        y[0] = Self::value(&[x[0][0]], 0);
        u[0] = 3.0 * y[0] * y[0];
        for k in 1..y.len() {
            let mut s = 0.0;
            for j in 1..k {
                s += j as f64 * y[j] * u[k - j];
            }
            y[k] = (x[0][k] - s / k as f64) / u[0];
            u[k] = 3.0 * jet::conv(y, y, k);
        }
    }
    fn pullback(b: &mut Builder, _: &[Var], _: i32, y: Var, ct: Var) -> Contribs {
        let y2 = b.mul(y, y);
        let d = b.scale(3.0, y2);
        [Some(b.div(ct, d)), None, None]
    }
    fn dual<D: DualF64>(x: &[D], _: i32) -> Option<D> {
        // num-dual's own, except at 0, where its parts are NaN and this
        // rule's are +∞.
        (x[0].re() != 0.0).then(|| x[0].cbrt())
    }
}

/// `√(x² + y²)`.
pub struct Hypot;
impl Primitive for Hypot {
    const NAME: &'static str = "hypot";
    const ARITY: usize = 2;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        x[0].hypot(x[1])
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], sc: &mut Scratch) {
        // h = √(a² + b²) with both scaled by h₀ = hypot(a₀, b₀), so the
        // square starts at 1 and neither overflows.
        let len = y.len();
        let y0 = Self::value(&[x[0][0], x[1][0]], 0);
        let h = if y0 > 0.0 && y0.is_finite() { y0 } else { 1.0 };
        let [a, b, u, r] = sc.take(len);
        for k in 0..len {
            a[k] = x[0][k] / h;
            b[k] = x[1][k] / h;
        }
        for (k, uk) in u.iter_mut().enumerate() {
            *uk = jet::conv(a, a, k) + jet::conv(b, b, k);
        }
        r[0] = u[0].sqrt();
        jet::sqrt(u, r);
        for k in 1..len {
            y[k] = h * r[k];
        }
        y[0] = y0;
    }
    fn pullback(b: &mut Builder, x: &[Var], _: i32, h: Var, ct: Var) -> Contribs {
        let cx = b.div(x[0], h);
        let cy = b.div(x[1], h);
        [Some(b.mul(ct, cx)), Some(b.mul(ct, cy)), None]
    }
}
