//! Arithmetic: `+ − × ÷`, negation and fused multiply-add.
//!
//! Pullbacks, for `y = f(a, b)` and cotangent `ȳ`:
//!
//! * `a + b`: `(ȳ, ȳ)`; `a − b`: `(ȳ, −ȳ)`; `−a`: `−ȳ`
//! * `a · b`: `(ȳ b, ȳ a)`
//! * `a / b = y`: `(ȳ / b, −ȳ y / b)`
//! * `mul_add(a, b, c) = a·b + c`: `(ȳ b, ȳ a, ȳ)`
//!
//! The simplifications are exact in IEEE 754 (`a + (−0) = a`,
//! `a − (+0) = a`, `a + (−b) = a − b`, `(−a)(−b) = ab`, …) or produce
//! structural zeros (`x · 0`, `0 / x`, `x − x`), see [`Builder`].

use super::jet::{self, Scratch};
use super::{Contribs, DualF64, Primitive};
use crate::program::{Builder, Var};

/// This family's primitives (arithmetic primitives), in the order of the
/// table: the list the primitive table in `rules/mod.rs` is stamped from.
/// Adding a primitive of this family adds its name here.
macro_rules! arith_list {
    ([$($acc:tt)*] $next:ident $($rest:ident)*) => {
        $next! { [$($acc)* arith {
            /// `a + b`.
            Add,
            /// `a − b`.
            Sub,
            /// `a · b`.
            Mul,
            /// `a / b`.
            Div,
            /// `−a`.
            Neg,
            /// `a · b + c` with one rounding (std's `mul_add`).
            MulAdd,
        }] $($rest)* }
    };
}

/// `a + b`.
pub struct Add;
impl Primitive for Add {
    const NAME: &'static str = "add";
    const ARITY: usize = 2;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        x[0] + x[1]
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], _: &mut Scratch) {
        for (k, v) in y.iter_mut().enumerate() {
            *v = x[0][k] + x[1][k];
        }
    }
    fn pullback(_: &mut Builder, _: &[Var], _: i32, _: Var, ct: Var) -> Contribs {
        [Some(ct), Some(ct), None]
    }
    fn pushforward(b: &mut Builder, _: &[Var], _: i32, _: Var, t: &[Option<Var>]) -> Option<Var> {
        match (t[0], t[1]) {
            (Some(p), Some(q)) => Some(b.add(p, q)),
            (p, q) => p.or(q),
        }
    }
    fn simplify(b: &mut Builder, x: &[Var], _: i32) -> Option<Var> {
        let (l, r) = (x[0], x[1]);
        // a + (−0) = a for every a (a + (+0) is not: −0 + 0 = +0).
        if b.is_neg_zero(l) {
            return Some(r);
        }
        if b.is_neg_zero(r) {
            return Some(l);
        }
        // a + (−b) = a − b, exactly in IEEE 754.
        if let Some(nr) = b.negated(r) {
            return Some(b.sub(l, nr));
        }
        if let Some(nl) = b.negated(l) {
            return Some(b.sub(r, nl));
        }
        // Commutative: one canonical operand order for CSE.
        if l > r {
            return Some(b.add(r, l));
        }
        None
    }
    fn display(x: &[String], _: i32) -> String {
        format!("{} + {}", x[0], x[1])
    }
}

/// `a − b`.
pub struct Sub;
impl Primitive for Sub {
    const NAME: &'static str = "sub";
    const ARITY: usize = 2;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        x[0] - x[1]
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], _: &mut Scratch) {
        for (k, v) in y.iter_mut().enumerate() {
            *v = x[0][k] - x[1][k];
        }
    }
    fn pullback(b: &mut Builder, _: &[Var], _: i32, _: Var, ct: Var) -> Contribs {
        [Some(ct), Some(b.neg(ct)), None]
    }
    fn pushforward(b: &mut Builder, _: &[Var], _: i32, _: Var, t: &[Option<Var>]) -> Option<Var> {
        match (t[0], t[1]) {
            (Some(p), Some(q)) => Some(b.sub(p, q)),
            (p, None) => p,
            (None, Some(q)) => Some(b.neg(q)),
        }
    }
    fn simplify(b: &mut Builder, x: &[Var], _: i32) -> Option<Var> {
        let (l, r) = (x[0], x[1]);
        // a − (+0) = a and (−0) − b = −b, exactly.
        if b.is_pos_zero(r) {
            return Some(l);
        }
        if b.is_neg_zero(l) {
            return Some(b.neg(r));
        }
        if l == r {
            // x − x is +0 for every finite x (IEEE 754, round to nearest);
            // for a NaN or ∞ x it stays +0, not NaN (see `Builder`).
            return Some(b.constant(0.0));
        }
        // a − (−b) = a + b, exactly.
        if let Some(nr) = b.negated(r) {
            return Some(b.add(l, nr));
        }
        None
    }
    fn display(x: &[String], _: i32) -> String {
        format!("{} - {}", x[0], x[1])
    }
}

/// `a · b`.
pub struct Mul;
impl Primitive for Mul {
    const NAME: &'static str = "mul";
    const ARITY: usize = 2;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        x[0] * x[1]
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], _: &mut Scratch) {
        jet::mul(x[0], x[1], y);
    }
    fn pullback(b: &mut Builder, x: &[Var], _: i32, _: Var, ct: Var) -> Contribs {
        [Some(b.mul(ct, x[1])), Some(b.mul(ct, x[0])), None]
    }
    fn pushforward(b: &mut Builder, x: &[Var], _: i32, _: Var, t: &[Option<Var>]) -> Option<Var> {
        let l = t[0].map(|p| b.mul(p, x[1]));
        let r = t[1].map(|q| b.mul(x[0], q));
        match (l, r) {
            (Some(l), Some(r)) => Some(b.add(l, r)),
            (l, r) => l.or(r),
        }
    }
    fn simplify(b: &mut Builder, x: &[Var], _: i32) -> Option<Var> {
        let (l, r) = (x[0], x[1]);
        for (p, q) in [(l, r), (r, l)] {
            // Only the structural zero (−0.0) folds a product: the sign of
            // x · (+0), and NaN at x = ±∞, depend on x.
            if b.is_structural_zero(p) {
                return Some(b.zero());
            }
            match b.constant_of(p) {
                Some(1.0) => return Some(q),
                Some(-1.0) => return Some(b.neg(q)),
                _ => {}
            }
        }
        // (−a)(−b) = ab and (−a)·k = a·(−k), exactly.
        match (b.negated(l), b.negated(r)) {
            (Some(nl), Some(nr)) => return Some(b.mul(nl, nr)),
            (Some(nl), None) => {
                if let Some(k) = b.constant_of(r) {
                    let nk = b.constant(-k);
                    return Some(b.mul(nl, nk));
                }
            }
            (None, Some(nr)) => {
                if let Some(k) = b.constant_of(l) {
                    let nk = b.constant(-k);
                    return Some(b.mul(nr, nk));
                }
            }
            (None, None) => {}
        }
        if l > r {
            return Some(b.mul(r, l));
        }
        None
    }
    fn display(x: &[String], _: i32) -> String {
        format!("{} * {}", x[0], x[1])
    }
}

/// `a / b`.
pub struct Div;
impl Primitive for Div {
    const NAME: &'static str = "div";
    const ARITY: usize = 2;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        x[0] / x[1]
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], _: &mut Scratch) {
        y[0] = x[0][0] / x[1][0];
        jet::div(x[0], x[1], y);
    }
    fn pullback(b: &mut Builder, x: &[Var], _: i32, y: Var, ct: Var) -> Contribs {
        let ga = b.div(ct, x[1]);
        let t = b.mul(ga, y);
        [Some(ga), Some(b.neg(t)), None]
    }
    fn pushforward(b: &mut Builder, x: &[Var], _: i32, y: Var, t: &[Option<Var>]) -> Option<Var> {
        // (ȧ − y ḃ) / b
        let num = match (t[0], t[1]) {
            (Some(p), Some(q)) => {
                let yq = b.mul(y, q);
                Some(b.sub(p, yq))
            }
            (Some(p), None) => Some(p),
            (None, Some(q)) => {
                let yq = b.mul(y, q);
                Some(b.neg(yq))
            }
            (None, None) => None,
        };
        num.map(|n| b.div(n, x[1]))
    }
    fn simplify(b: &mut Builder, x: &[Var], _: i32) -> Option<Var> {
        let (l, r) = (x[0], x[1]);
        if b.is_structural_zero(l) {
            return Some(b.zero());
        }
        match b.constant_of(r) {
            Some(1.0) => return Some(l),
            Some(-1.0) => return Some(b.neg(l)),
            _ => {}
        }
        // (−a)/(−b) = a/b, exactly.
        if let (Some(nl), Some(nr)) = (b.negated(l), b.negated(r)) {
            return Some(b.div(nl, nr));
        }
        None
    }
    fn display(x: &[String], _: i32) -> String {
        format!("{} / {}", x[0], x[1])
    }
}

/// `−a`.
pub struct Neg;
impl Primitive for Neg {
    const NAME: &'static str = "neg";
    const ARITY: usize = 1;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        -x[0]
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], _: &mut Scratch) {
        for (k, v) in y.iter_mut().enumerate() {
            *v = -x[0][k];
        }
    }
    fn pullback(b: &mut Builder, _: &[Var], _: i32, _: Var, ct: Var) -> Contribs {
        [Some(b.neg(ct)), None, None]
    }
    fn simplify(b: &mut Builder, x: &[Var], _: i32) -> Option<Var> {
        b.negated(x[0])
    }
    fn display(x: &[String], _: i32) -> String {
        format!("-{}", x[0])
    }
}

/// `a · b + c`, rounded once.
pub struct MulAdd;
impl Primitive for MulAdd {
    const NAME: &'static str = "mul_add";
    const ARITY: usize = 3;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        x[0].mul_add(x[1], x[2])
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], _: &mut Scratch) {
        for k in 1..y.len() {
            y[k] = jet::conv(x[0], x[1], k) + x[2][k];
        }
        y[0] = x[0][0].mul_add(x[1][0], x[2][0]);
    }
    fn pullback(b: &mut Builder, x: &[Var], _: i32, _: Var, ct: Var) -> Contribs {
        [Some(b.mul(ct, x[1])), Some(b.mul(ct, x[0])), Some(ct)]
    }
    fn dual<D: DualF64>(x: &[D], _: i32) -> Option<D> {
        // num-dual's mul_add is a·b + c; its real part is then rounded
        // twice, so the real part is set from std's fused value.
        let mut y = x[0] * x[1] + x[2];
        let re = x[0].re().mul_add(x[1].re(), x[2].re());
        y = y - D::from(y.re()) + D::from(re);
        Some(y)
    }
    fn simplify(b: &mut Builder, x: &[Var], _: i32) -> Option<Var> {
        // With a structural zero or a unit factor the fused form is no
        // longer needed: a·1 + c = a + c exactly.
        for (p, q) in [(x[0], x[1]), (x[1], x[0])] {
            if b.constant_of(p) == Some(1.0) {
                return Some(b.add(q, x[2]));
            }
            if b.is_structural_zero(p) {
                return Some(x[2]);
            }
        }
        None
    }
    fn display(x: &[String], _: i32) -> String {
        format!("mul_add({}, {}, {})", x[0], x[1], x[2])
    }
}
