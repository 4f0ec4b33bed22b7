//! Special functions: error functions and the gamma family.
//!
//! Pullbacks, for `y = f(x)` and cotangent `ȳ` (NIST DLMF 7.10.1, 5.15.1):
//!
//! * `erf x`: `ȳ (2/√π) e^{−x²}`; `erfc x`: `−ȳ (2/√π) e^{−x²}`
//! * `ln Γ(x)`: `ȳ ψ(x)`; `ψ(x)`: `ȳ ψ⁽¹⁾(x)`; `ψ⁽ⁿ⁾(x)`: `ȳ ψ⁽ⁿ⁺¹⁾(x)`
//!
//! Each pullback uses only primitives with rules (`exp`, `polygamma`), so
//! these nest to any order. num-dual has none of these functions: on its
//! number types the derivative parts come from these rules.

use std::f64::consts::FRAC_2_SQRT_PI;

use super::jet::{self, Scratch};
use super::{special_values as sv, Contribs, Primitive};
use crate::program::{Builder, Var};

/// This family's primitives (error and gamma-family functions), in the order of the
/// table: the list the primitive table in `rules/mod.rs` is stamped from.
/// Adding a primitive of this family adds its name here.
macro_rules! special_list {
    ([$($acc:tt)*] $next:ident $($rest:ident)*) => {
        $next! { [$($acc)* special {
            /// `erf x`.
            Erf,
            /// `erfc x = 1 − erf x`, accurate for large `x`.
            Erfc,
            /// `ln |Γ(x)|`.
            LnGamma,
            /// The digamma function `ψ(x) = Γ′(x)/Γ(x)`.
            Digamma,
            /// The polygamma function `ψ⁽ⁿ⁾(x)`, `n` the parameter.
            Polygamma,
        }] $($rest)* }
    };
}

/// `(2/√π) e^{−x²}`.
fn gauss(b: &mut Builder, x: Var) -> Var {
    let x2 = b.mul(x, x);
    let m = b.neg(x2);
    let e = b.exp(m);
    b.scale(FRAC_2_SQRT_PI, e)
}

/// `erf x`.
pub struct Erf;
impl Primitive for Erf {
    const NAME: &'static str = "erf";
    const ARITY: usize = 1;
    fn value(x: &[f64], _: i32) -> f64 {
        sv::erf(x[0])
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], sc: &mut Scratch) {
        erf_jet(x[0], y, sc);
        y[0] = Self::value(&[x[0][0]], 0);
    }
    fn pullback(b: &mut Builder, x: &[Var], _: i32, _: Var, ct: Var) -> Contribs {
        let g = gauss(b, x[0]);
        [Some(b.mul(ct, g)), None, None]
    }
}

/// `erfc x`.
pub struct Erfc;
impl Primitive for Erfc {
    const NAME: &'static str = "erfc";
    const ARITY: usize = 1;
    fn value(x: &[f64], _: i32) -> f64 {
        sv::erfc(x[0])
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], sc: &mut Scratch) {
        erf_jet(x[0], y, sc);
        y[1..].iter_mut().for_each(|v| *v = -*v);
        y[0] = Self::value(&[x[0][0]], 0);
    }
    fn pullback(b: &mut Builder, x: &[Var], _: i32, _: Var, ct: Var) -> Contribs {
        let g = gauss(b, x[0]);
        let p = b.mul(ct, g);
        [Some(b.neg(p)), None, None]
    }
}

/// The jet of `erf x` (`y₀` not written): `y′ = g x′` with
/// `g = (2/√π) e^{−x²}`, itself the jet of `exp` of `−x²`.
fn erf_jet(x: &[f64], y: &mut [f64], sc: &mut Scratch) {
    let len = y.len();
    let [q, g] = sc.take(len);
    let x0 = x[0];
    jet::square_plus(x, -1.0, -(x0 * x0), q);
    g[0] = (-(x0 * x0)).exp();
    jet::exp(q, g);
    g.iter_mut().for_each(|v| *v *= FRAC_2_SQRT_PI);
    jet::integrate(x, g, y);
}

/// A member of the gamma family, for its Taylor rule.
#[derive(Clone, Copy)]
enum Member {
    /// `ln |Γ|`.
    LnGamma,
    /// `ψ⁽ⁿ⁾` (`ψ` for `n = 0`).
    Polygamma(u32),
}

impl Member {
    /// The `m`-th derivative at `x`: `ψ⁽ᵐ⁻¹⁾` for `ln Γ` (`m ≥ 1`),
    /// `ψ⁽ⁿ⁺ᵐ⁾` for `ψ⁽ⁿ⁾`.
    fn derivative(self, m: usize, x: f64) -> f64 {
        let order = |k: usize| u32::try_from(k).ok();
        match self {
            Member::LnGamma if m == 0 => sv::ln_gamma(x),
            Member::LnGamma => order(m - 1).map_or(f64::NAN, |k| sv::polygamma(k, x)),
            Member::Polygamma(n) => order(m)
                .and_then(|m| m.checked_add(n))
                .map_or(f64::NAN, |k| sv::polygamma(k, x)),
        }
    }
}

/// Where the gamma family's series is composed with the argument's jet:
/// at `x₀ + N ≥ 20`, after the shift below.
const SHIFT_TO: f64 = 20.0;

/// The most shift terms (the argument is moved by at most this much).
const MAX_SHIFT: usize = 256;

/// The jet of a member of the gamma family (`y₀` is written by the
/// caller).
///
/// ψ satisfies no algebraic differential equation, so the rule composes
/// the member's Taylor series, from the values of its derivatives, with
/// the argument's jet ([`jet::from_derivatives`], `O(K³)`). Composed at
/// `x₀` itself that sum cancels badly: its terms grow with the nearest
/// pole at 0, −1, … while the argument's jet may be large; the closed-form
/// tests saw errors of 1e-4 relative at order 30. So the argument is first
/// shifted to `x₀ + N ≥ 20`, where the derivatives decay, by the recurrences
/// (NIST DLMF 5.5.1, 5.15.5)
///
/// ```text
/// ln |Γ(x)| = ln |Γ(x + N)| − Σ_{k<N} ln |x + k|
/// ψ⁽ⁿ⁾(x)  = ψ⁽ⁿ⁾(x + N) − Σ_{k<N} (−1)ⁿ n! (x + k)^{−(n+1)}
/// ```
///
/// whose terms are jets of `ln` and of powers of a reciprocal, by the
/// `O(K²)` recurrences, with only the true poles as singularities.
fn gamma_family_jet(x: &[f64], y: &mut [f64], sc: &mut Scratch, f: Member) {
    let x0 = x[0];
    let len = y.len();
    let shift = if x0.is_finite() && x0 < SHIFT_TO {
        ((SHIFT_TO - x0).ceil() as usize).min(MAX_SHIFT)
    } else {
        0
    };
    let xs = x0 + shift as f64;
    // The tail F(x + N): the argument's jet with x₀ + N as its constant
    // term (`from_derivatives` reads only the coefficients above it).
    jet::from_derivatives(x, y, sc, |m| f.derivative(m, xs));
    let [r, p] = sc.take(len);
    for k in 0..shift {
        let a0 = x0 + k as f64;
        match f {
            Member::LnGamma => {
                // ln |x + k|, with (x + k) r′ = x′.
                r[0] = a0.abs().ln();
                jet::integrate_over(x, x, a0, r);
                for (yj, rj) in y.iter_mut().zip(r.iter()) {
                    *yj -= *rj;
                }
            }
            Member::Polygamma(n) => {
                // r = 1/(x + k): r₀ = 1/a₀, rⱼ = −r₀ Σ_{i=1..j} xᵢ r_{j−i}.
                r[0] = 1.0 / a0;
                for j in 1..len {
                    let mut s = 0.0;
                    for i in 1..=j {
                        s += x[i] * r[j - i];
                    }
                    r[j] = -r[0] * s;
                }
                // p = r^{n+1} (r has no zeros: the recurrence is stable).
                let e = f64::from(n) + 1.0;
                p[0] = r[0].powf(e);
                jet::pow_real(r, e, p);
                let c = signed_factorial(n);
                for (yj, pj) in y.iter_mut().zip(p.iter()) {
                    *yj -= c * *pj;
                }
            }
        }
    }
}

/// `(−1)ⁿ n!` in f64, in at most 171 multiplications: from `n = 171` on,
/// `n!` is past `f64::MAX`, so the result is `±∞` without computing it.
fn signed_factorial(n: u32) -> f64 {
    let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
    if n > 170 {
        return sign * f64::INFINITY;
    }
    (1..=n).fold(sign, |c, i| c * f64::from(i))
}

/// `ln |Γ(x)|`.
pub struct LnGamma;
impl Primitive for LnGamma {
    const NAME: &'static str = "ln_gamma";
    const ARITY: usize = 1;
    fn value(x: &[f64], _: i32) -> f64 {
        sv::ln_gamma(x[0])
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], sc: &mut Scratch) {
        gamma_family_jet(x[0], y, sc, Member::LnGamma);
        y[0] = Self::value(&[x[0][0]], 0);
    }
    fn pullback(b: &mut Builder, x: &[Var], _: i32, _: Var, ct: Var) -> Contribs {
        let d = b.polygamma(x[0], 0);
        [Some(b.mul(ct, d)), None, None]
    }
}

/// `ψ(x)`.
pub struct Digamma;
impl Primitive for Digamma {
    const NAME: &'static str = "digamma";
    const ARITY: usize = 1;
    fn value(x: &[f64], _: i32) -> f64 {
        sv::digamma(x[0])
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], sc: &mut Scratch) {
        gamma_family_jet(x[0], y, sc, Member::Polygamma(0));
        y[0] = Self::value(&[x[0][0]], 0);
    }
    fn pullback(b: &mut Builder, x: &[Var], _: i32, _: Var, ct: Var) -> Contribs {
        let d = b.polygamma(x[0], 1);
        [Some(b.mul(ct, d)), None, None]
    }
}

/// `ψ⁽ⁿ⁾(x)`; a negative `n` gives NaN.
pub struct Polygamma;
impl Primitive for Polygamma {
    const NAME: &'static str = "polygamma";
    const ARITY: usize = 1;
    fn value(x: &[f64], n: i32) -> f64 {
        match u32::try_from(n) {
            Ok(n) => sv::polygamma(n, x[0]),
            Err(_) => f64::NAN,
        }
    }
    fn taylor(x: &[&[f64]], n: i32, y: &mut [f64], sc: &mut Scratch) {
        match u32::try_from(n) {
            Ok(n) => gamma_family_jet(x[0], y, sc, Member::Polygamma(n)),
            Err(_) => y.fill(f64::NAN),
        }
        y[0] = Self::value(&[x[0][0]], n);
    }
    fn pullback(b: &mut Builder, x: &[Var], n: i32, _: Var, ct: Var) -> Contribs {
        let d = match n.checked_add(1) {
            Some(m) if n >= 0 => b.polygamma(x[0], m),
            _ => b.constant(f64::NAN),
        };
        [Some(b.mul(ct, d)), None, None]
    }
    fn simplify(b: &mut Builder, x: &[Var], n: i32) -> Option<Var> {
        // ψ⁽⁰⁾ is ψ: one name for one value, so CSE shares them.
        (n == 0).then(|| b.apply(super::Prim::Digamma, 0, &[x[0]]))
    }
    fn display(x: &[String], n: i32) -> String {
        format!("polygamma({n}, {})", x[0])
    }
}
