//! Selection and the non-smooth functions.
//!
//! At a kink these follow JAX's conventions (`jax._src.lax.lax`):
//!
//! * `select(c, a, b)` (`a` where `c > 0`, else `b`): the cotangent goes to
//!   the chosen branch, none to the condition (a branch, Fischer §VI)
//! * `abs`: derivative 1 at 0 (JAX: `select(x ≥ 0, ȳ, −ȳ)`)
//! * `max`, `min`: at a tie each argument gets half the cotangent (JAX's
//!   balanced `max`/`min` JVP)
//! * `clamp(x, lo, hi)`: as `lax.clamp`: `x` gets the cotangent strictly
//!   inside `(lo, hi)`, `lo` where `x < lo`, `hi` where `x > hi`, and no
//!   argument at a bound
//! * `signum`, `floor`, `ceil`: derivative 0 everywhere (structural zeros)
//! * `x % y`: `(ȳ, −q ȳ)` with `q` the integer quotient (derivative 1 in
//!   `x` and `−q` in `y` between the jumps)
//!
//! Each derivative is written with `select` on the operands, so derived
//! programs are right on both sides of a kink without re-tracing.
//!
//! NaN: `max` and `min` follow std and ignore a NaN argument; their
//! derivative at a NaN argument is then half the cotangent each.
//! `clamp` returns NaN (std panics) when `lo > hi` or a bound is NaN, and
//! its first derivatives there are NaN too (not zero, which would read as
//! flat), as are all of its Taylor coefficients.

use super::jet::Scratch;
use super::{Contribs, DualF64, Primitive};
use crate::program::{Builder, Var};

/// This family's primitives (selection and the non-smooth functions), in the order of the
/// table: the list the primitive table in `rules/mod.rs` is stamped from.
/// Adding a primitive of this family adds its name here.
macro_rules! nonsmooth_list {
    ([$($acc:tt)*] $next:ident $($rest:ident)*) => {
        $next! { [$($acc)* nonsmooth {
            /// `select(c, a, b)`: `a` where `c > 0`, else `b`.
            Select,
            /// `|x|`.
            Abs,
            /// `signum x` (std: 1 for `+0`, −1 for `−0`, NaN for NaN).
            Signum,
            /// `max(a, b)` (std: a NaN argument is ignored).
            Max,
            /// `min(a, b)` (std: a NaN argument is ignored).
            Min,
            /// `clamp(x, lo, hi)`.
            Clamp,
            /// `⌊x⌋`.
            Floor,
            /// `⌈x⌉`.
            Ceil,
            /// `x % y` (std's remainder: `fmod`, exact, with the sign of `x`).
            Rem,
        }] $($rest)* }
    };
}

/// `a` where `c > 0`, else `b`.
pub struct Select;
impl Primitive for Select {
    const NAME: &'static str = "select";
    const ARITY: usize = 3;
    const BRANCHES: bool = true;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        if x[0] > 0.0 {
            x[1]
        } else {
            x[2]
        }
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], _: &mut Scratch) {
        // The branch is chosen by the condition's value; its jet passes
        // through whole (the condition's own jet has no effect).
        let pick = if x[0][0] > 0.0 { x[1] } else { x[2] };
        y.copy_from_slice(&pick[..y.len()]);
    }
    fn pullback(b: &mut Builder, x: &[Var], _: i32, _: Var, ct: Var) -> Contribs {
        let zero = b.zero();
        let ga = b.select(x[0], ct, zero);
        let gb = b.select(x[0], zero, ct);
        [None, Some(ga), Some(gb)]
    }
    fn pushforward(b: &mut Builder, x: &[Var], _: i32, _: Var, t: &[Option<Var>]) -> Option<Var> {
        if t[1].is_none() && t[2].is_none() {
            return None;
        }
        let p = t[1].unwrap_or_else(|| b.zero());
        let q = t[2].unwrap_or_else(|| b.zero());
        Some(b.select(x[0], p, q))
    }
    fn dual<D: DualF64>(x: &[D], _: i32) -> Option<D> {
        Some(if x[0].re() > 0.0 { x[1] } else { x[2] })
    }
    fn simplify(_: &mut Builder, x: &[Var], _: i32) -> Option<Var> {
        (x[1] == x[2]).then_some(x[1])
    }
    fn display(x: &[String], _: i32) -> String {
        format!("select({} > 0, {}, {})", x[0], x[1], x[2])
    }
}

/// `|x|`.
pub struct Abs;
impl Primitive for Abs {
    const NAME: &'static str = "abs";
    const ARITY: usize = 1;
    const BRANCHES: bool = true;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        x[0].abs()
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], _: &mut Scratch) {
        // ±x by the sign of x₀ (the pullback's: derivative 1 at ±0).
        let sign = if -x[0][0] > 0.0 { -1.0 } else { 1.0 };
        for (k, v) in y.iter_mut().enumerate() {
            *v = sign * x[0][k];
        }
        y[0] = x[0][0].abs();
    }
    fn pullback(b: &mut Builder, x: &[Var], _: i32, _: Var, ct: Var) -> Contribs {
        // −ȳ where −x > 0, else ȳ: derivative 1 at ±0.
        let nx = b.neg(x[0]);
        let nct = b.neg(ct);
        [Some(b.select(nx, nct, ct)), None, None]
    }
    fn dual<D: DualF64>(x: &[D], _: i32) -> Option<D> {
        Some(if x[0].re() < 0.0 { -x[0] } else { x[0] })
    }
}

/// A function with derivative 0 everywhere.
macro_rules! flat {
    ($P:ident, $name:literal, $f:ident) => {
        #[doc = concat!("`", $name, "`: derivative 0.")]
        pub struct $P;
        impl Primitive for $P {
            const NAME: &'static str = $name;
            const ARITY: usize = 1;
            const BRANCHES: bool = true;
            #[inline(always)]
            fn value(x: &[f64], _: i32) -> f64 {
                x[0].$f()
            }
            fn pullback(_: &mut Builder, _: &[Var], _: i32, _: Var, _: Var) -> Contribs {
                [None; 3]
            }
            fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], _: &mut Scratch) {
                y.fill(0.0);
                y[0] = x[0][0].$f();
            }
            fn dual<D: DualF64>(x: &[D], _: i32) -> Option<D> {
                Some(D::from(x[0].re().$f()))
            }
        }
    };
}
flat!(Signum, "signum", signum);
flat!(Floor, "floor", floor);
flat!(Ceil, "ceil", ceil);

/// `x % y`, std's remainder `r = x − q y` with `q` the quotient rounded
/// toward zero (computed exactly, as C's `fmod`). Piecewise linear: where
/// `q` does not jump, `∂r/∂x = 1` and `∂r/∂y = −q`, and every higher
/// derivative is 0.
pub struct Rem;
impl Primitive for Rem {
    const NAME: &'static str = "rem";
    const ARITY: usize = 2;
    const BRANCHES: bool = true;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        x[0] % x[1]
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], _: &mut Scratch) {
        let (a, c) = (x[0], x[1]);
        let r = a[0] % c[0];
        let q = quotient(a[0], c[0], r);
        y[0] = r;
        for k in 1..y.len() {
            y[k] = a[k] - q * c[k];
        }
    }
    fn pullback(b: &mut Builder, x: &[Var], _: i32, r: Var, ct: Var) -> Contribs {
        // q = ⌊(x − r)/y + ½⌋: (x − r)/y is the integer q up to rounding.
        let d = b.sub(x[0], r);
        let q = b.div(d, x[1]);
        let half = b.constant(0.5);
        let q = b.add(q, half);
        let q = b.apply(super::Prim::Floor, 0, &[q]);
        let g = b.mul(ct, q);
        [Some(ct), Some(b.neg(g)), None]
    }
}

/// The integer quotient of `x % y = r`, as [`Rem`]'s pullback computes it.
fn quotient(x: f64, y: f64, r: f64) -> f64 {
    ((x - r) / y + 0.5).floor()
}

/// The cotangent of `a` in `max(a, b)`: `ȳ` where `a > b`, 0 where
/// `b > a`, `ȳ/2` at a tie.
fn max_share(b: &mut Builder, a: Var, c: Var, ct: Var) -> Var {
    let zero = b.zero();
    let half = b.scale(0.5, ct);
    let d_ab = b.sub(a, c);
    let d_ba = b.sub(c, a);
    let tie = b.select(d_ba, zero, half);
    b.select(d_ab, ct, tie)
}

/// The value of `max`/`min` on num-dual numbers, `greater` choosing `max`.
fn dual_pick<D: DualF64>(a: D, c: D, greater: bool) -> D {
    match pick(a.re(), c.re(), greater) {
        Pick::First => a,
        Pick::Second => c,
        Pick::Mean => a * 0.5 + c * 0.5,
    }
}

/// Which argument `max` (`greater`) or `min` passes its derivatives on
/// from, by the arguments' values: the one that is the value, the other
/// where one is NaN (std's semantics), the mean of both at a tie (the
/// pullback's shares). One decision for num-dual values and jets.
enum Pick {
    First,
    Second,
    Mean,
}

fn pick(ar: f64, cr: f64, greater: bool) -> Pick {
    if ar.is_nan() {
        Pick::Second
    } else if cr.is_nan() || (ar != cr && (ar > cr) == greater) {
        Pick::First
    } else if ar != cr {
        Pick::Second
    } else {
        Pick::Mean
    }
}

/// The jet of `max`/`min`: that of the argument [`pick`] chooses.
fn pick_jet(x: &[&[f64]], y: &mut [f64], greater: bool) {
    let (a, c) = (x[0], x[1]);
    match pick(a[0], c[0], greater) {
        Pick::First => y.copy_from_slice(&a[..y.len()]),
        Pick::Second => y.copy_from_slice(&c[..y.len()]),
        Pick::Mean => {
            for (k, v) in y.iter_mut().enumerate() {
                *v = 0.5 * a[k] + 0.5 * c[k];
            }
        }
    }
}

/// `max(a, b)`.
pub struct Max;
impl Primitive for Max {
    const NAME: &'static str = "max";
    const ARITY: usize = 2;
    const BRANCHES: bool = true;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        x[0].max(x[1])
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], _: &mut Scratch) {
        pick_jet(x, y, true);
        y[0] = Self::value(&[x[0][0], x[1][0]], 0);
    }
    fn pullback(b: &mut Builder, x: &[Var], _: i32, _: Var, ct: Var) -> Contribs {
        let ga = max_share(b, x[0], x[1], ct);
        let gb = max_share(b, x[1], x[0], ct);
        [Some(ga), Some(gb), None]
    }
    fn dual<D: DualF64>(x: &[D], _: i32) -> Option<D> {
        Some(dual_pick(x[0], x[1], true))
    }
    fn simplify(_: &mut Builder, x: &[Var], _: i32) -> Option<Var> {
        (x[0] == x[1]).then_some(x[0])
    }
}

/// `min(a, b)`.
pub struct Min;
impl Primitive for Min {
    const NAME: &'static str = "min";
    const ARITY: usize = 2;
    const BRANCHES: bool = true;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        x[0].min(x[1])
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], _: &mut Scratch) {
        pick_jet(x, y, false);
        y[0] = Self::value(&[x[0][0], x[1][0]], 0);
    }
    fn pullback(b: &mut Builder, x: &[Var], _: i32, _: Var, ct: Var) -> Contribs {
        // min(a, b) = −max(−a, −b): a gets ȳ where b > a.
        let ga = max_share(b, x[1], x[0], ct);
        let gb = max_share(b, x[0], x[1], ct);
        // max_share(c, a) gives ȳ where c > a; swap to "a < b".
        [Some(ga), Some(gb), None]
    }
    fn dual<D: DualF64>(x: &[D], _: i32) -> Option<D> {
        Some(dual_pick(x[0], x[1], false))
    }
    fn simplify(_: &mut Builder, x: &[Var], _: i32) -> Option<Var> {
        (x[0] == x[1]).then_some(x[0])
    }
}

/// `clamp(x, lo, hi)`.
pub struct Clamp;
impl Primitive for Clamp {
    const NAME: &'static str = "clamp";
    const ARITY: usize = 3;
    const BRANCHES: bool = true;
    #[inline(always)]
    fn value(x: &[f64], _: i32) -> f64 {
        let (v, lo, hi) = (x[0], x[1], x[2]);
        if lo > hi || lo.is_nan() || hi.is_nan() {
            f64::NAN
        } else {
            v.clamp(lo, hi)
        }
    }
    fn taylor(x: &[&[f64]], _: i32, y: &mut [f64], _: &mut Scratch) {
        // The jet of the argument that is the value: x strictly inside,
        // a bound strictly outside; at a bound (or with a NaN) no argument
        // moves it (the pullback's convention).
        let (v, lo, hi) = (x[0][0], x[1][0], x[2][0]);
        let from = if v - lo > 0.0 && hi - v > 0.0 {
            Some(x[0])
        } else if lo - v > 0.0 {
            Some(x[1])
        } else if v - hi > 0.0 {
            Some(x[2])
        } else {
            None
        };
        match from {
            // Crossed or NaN bounds: NaN throughout.
            _ if lo.partial_cmp(&hi).is_none_or(|o| o.is_gt()) => y.fill(f64::NAN),
            Some(j) => y.copy_from_slice(&j[..y.len()]),
            None => y.fill(0.0),
        }
        y[0] = Self::value(&[v, lo, hi], 0);
    }
    fn pullback(b: &mut Builder, x: &[Var], _: i32, _: Var, ct: Var) -> Contribs {
        let (v, lo, hi) = (x[0], x[1], x[2]);
        let zero = b.zero();
        let above_lo = b.sub(v, lo);
        let below_hi = b.sub(hi, v);
        let inner = b.select(below_hi, ct, zero);
        let gv = b.select(above_lo, inner, zero);
        let below_lo = b.sub(lo, v);
        let glo = b.select(below_lo, ct, zero);
        let above_hi = b.sub(v, hi);
        let ghi = b.select(above_hi, ct, zero);
        // Crossed or NaN bounds: NaN contributions (the value is NaN).
        // signum(hi − lo) is 1 exactly where lo ≤ hi (hi − lo = +0 at a
        // tie), −1 or NaN otherwise. The NaN is a constant: made to depend
        // on the operands, its own derivative (NaN) would reach the
        // Hessian through `select`'s zero cotangent as 0 · NaN on ordered
        // bounds too. So second derivatives by nested reverse mode are 0
        // on crossed bounds, where Taylor mode gives NaN.
        let width = b.sub(hi, lo);
        let ordered = b.apply(super::Prim::Signum, 0, &[width]);
        let nan = b.constant(f64::NAN);
        let [gv, glo, ghi] = [gv, glo, ghi].map(|g| b.select(ordered, g, nan));
        [Some(gv), Some(glo), Some(ghi)]
    }
    fn dual<D: DualF64>(x: &[D], _: i32) -> Option<D> {
        let (v, lo, hi) = (x[0].re(), x[1].re(), x[2].re());
        Some(if lo > hi || lo.is_nan() || hi.is_nan() {
            // NaN in every part, derivatives included.
            x[0] * D::from(f64::NAN)
        } else if v < lo {
            x[1]
        } else if v > hi {
            x[2]
        } else if v == lo || v == hi {
            // At a bound no argument gets a derivative (lax.clamp).
            D::from(v)
        } else {
            x[0]
        })
    }
}
