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

/// The jet of a member `F` of the gamma family, whose derivatives are
/// other members: `d(m)` is `F⁽ᵐ⁾(x₀)`, for `m = 0..=K`. ψ satisfies no
/// algebraic differential equation, so the values are the only way in and
/// this rule costs `O(K³)` rather than `O(K²)` ([`jet::from_derivatives`]).
fn gamma_family_jet(x: &[f64], y: &mut [f64], sc: &mut Scratch, d: impl Fn(usize) -> f64) {
    jet::from_derivatives(x, y, sc, d);
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
        // (ln Γ)⁽ᵐ⁾ = ψ⁽ᵐ⁻¹⁾ for m ≥ 1.
        let x0 = x[0][0];
        gamma_family_jet(x[0], y, sc, |m| {
            if m == 0 {
                sv::ln_gamma(x0)
            } else {
                sv::polygamma(m as u32 - 1, x0)
            }
        });
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
        let x0 = x[0][0];
        gamma_family_jet(x[0], y, sc, |m| {
            if m == 0 {
                sv::digamma(x0)
            } else {
                sv::polygamma(m as u32, x0)
            }
        });
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
        let x0 = x[0][0];
        match u32::try_from(n) {
            Ok(n) => gamma_family_jet(x[0], y, sc, |m| {
                u32::try_from(m)
                    .ok()
                    .and_then(|m| m.checked_add(n))
                    .map_or(f64::NAN, |k| sv::polygamma(k, x0))
            }),
            Err(_) => y.fill(f64::NAN),
        }
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
