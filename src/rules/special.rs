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
    fn pullback(b: &mut Builder, x: &[Var], _: i32, _: Var, ct: Var) -> Contribs {
        let g = gauss(b, x[0]);
        let p = b.mul(ct, g);
        [Some(b.neg(p)), None, None]
    }
}

/// `ln |Γ(x)|`.
pub struct LnGamma;
impl Primitive for LnGamma {
    const NAME: &'static str = "ln_gamma";
    const ARITY: usize = 1;
    fn value(x: &[f64], _: i32) -> f64 {
        sv::ln_gamma(x[0])
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
