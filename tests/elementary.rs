//! Every elementary [`Real`] method at derivative orders 1–4.
//!
//! `derivative::<N>` is Taylor mode (each primitive's jet recurrence); the
//! nested ∂⃖ᵏ construction from the primitives' pullbacks is checked
//! against it per primitive to order 8 in `tests/primitive_table.rs`, so
//! the properties below hold for both.
//!
//! Each method is described once, as a function `g(t)` of one variable (a
//! [`Line`]): the method itself for functions of one argument, and for the
//! functions of several arguments (`atan2`, `powf`, `hypot`, `max`, `min`,
//! `clamp`, `mul_add`, `log`) its restriction to a random line,
//! `g(t) = f(x₀ + t·u, y₀ + t·v, …)` at `t₀ = 0`, so that `g⁽ᵏ⁾(0)` is the
//! k-th directional derivative. Each line also knows its *radius* `ρ(t₀)`:
//! the distance from `t₀` to the nearest kink, pole, branch point or domain
//! edge (in the complex plane for the analytic ones, e.g. `√(1 + x²)` for
//! `atan`, whose poles are at `±i`), or ∞.
//!
//! 1. **Finite differences** ([`fd`]): order k of `derivative::<U4>` against
//!    the central difference of order k − 1 from `derivative::<U3>`, for
//!    k = 1 … 4, at random points, a quarter of them drawn close to an edge.
//! 2. **num-dual** ([`vs_num_dual`]): orders 0–3 of `derivative::<U3>`
//!    against num-dual's *own* function on `Dual3_64` (called as
//!    `num_dual::DualNum::…`, never through `Real`), where num-dual has it;
//!    and ([`bridge`]) every method through `Real` on `Dual64`, `Dual2_64`,
//!    `Dual3_64` and `HyperDual64` against `derivative::<U3>`, which checks
//!    the num-dual bridge (num-dual's function where it has one, our rule
//!    through ∂⃗ where it has none).
//! 3. **Closed forms** at hand-picked points, mostly edges.
//! 4. **Regressions** for num-dual's `powi` (issue 6).
//!
//! Every property runs [`CASES`] cases with the fixed seed of
//! `common::check`, counts the cases it actually checked and asserts that
//! at least 15/16 of them were; it prints that count and its worst errors
//! (run with `--nocapture`). The finite differences skip only points within
//! [`R_MIN`] of an edge, the num-dual comparisons points within
//! [`EDGE_NUM_DUAL`] (see there); the strategies rarely draw either.
//!
//! This battery found five defects, now fixed and checked here without
//! exclusions: the `exp_m1` and `tanh` pullbacks cancelled away from 0
//! (now `ȳ eˣ` and `ȳ / cosh² x`), std's `atanh` and `acosh` values lost
//! accuracy near −1 and 1 (now libm's), and `d²/dy² 0ʸ` was NaN.
//!
//! # Step and tolerance of the finite differences
//!
//! With `G = f⁽ᵏ⁻¹⁾` from `derivative::<U3>` and
//! `D(h) = (G(t₀ + h) − G(t₀ − h)) / 2h`, the error of `D(h)` as an
//! estimate of `f⁽ᵏ⁾(t₀)` is
//!
//! * truncation: `D(h) − f⁽ᵏ⁾ = h² f⁽ᵏ⁺²⁾/6 + O(h⁴)`;
//! * rounding: `≤ δₖ · S / h`, where `δₖ` is the accuracy of `G` relative to
//!   the size `S` of the terms it is computed from.
//!
//! **Step.** With radius `r = min(1, ρ)`, Cauchy's estimates give
//! `|f⁽ᵐ⁾| ≲ m! M / rᵐ`, so relative to `|f⁽ᵏ⁾|` the truncation is about
//! `(k+1)(k+2)/6 · (h/r)²` and the rounding about `δₖ r / (k h)`: both are
//! scale-free in `h/r`, and they balance near `h/r ≈ δₖ^(1/3)`. So
//! `hₖ = ηₖ · 2^⌊log₂ r⌋` with [`ETA`] `= 2⁻¹⁷, 2⁻¹⁶, 2⁻¹⁵, 2⁻¹⁴`
//! (7.6e-6, 1.5e-5, 3.1e-5, 6.1e-5) for k = 1 … 4: at k = 1, `G = f` is
//! std's or libm's value (`δ₁ ≈ 1e-16`, `δ₁^(1/3) ≈ 5e-6`); each further
//! order is a longer derived program and loses a few more bits, so the step
//! doubles with the order. `t₀` is snapped to a multiple of `4h₄`, and the
//! steps are powers of two, so `t₀ ± h`, `t₀ ± 2h` are exact and the
//! stencil is exactly symmetric (otherwise an asymmetry of one ulp would
//! add `ulp·f⁽ᵏ⁺¹⁾/2`, which near an edge exceeds the truncation).
//!
//! **Tolerance.** `4·|D(h) − D(2h)|/3 + RHOₖ · S / hₖ`, where
//!
//! * `D(h) − D(2h) = −h² f⁽ᵏ⁺²⁾/2 + O(h⁴)`, so `|D(h) − D(2h)|/3` *is* the
//!   truncation term `h² |f⁽ᵏ⁺²⁾|/6`, measured from the data (Richardson,
//!   as in tests/drivers.rs); it is allowed four times over because it is
//!   itself only first-order accurate and carries rounding. With `h ≪ r` it
//!   is ≲ 1e-7 relative, so it cannot hide a wrong rule, whose error is of
//!   the order of `f⁽ᵏ⁾` itself. Where truncation dominates, the printed
//!   `worst error/tolerance` is close to 1/4;
//! * `S = max(|G| on the stencil, maxⱼ₌₁…₄ |f⁽ʲ⁾(t₀)| rʲ⁻⁽ᵏ⁻¹⁾)`: the size of
//!   `G`, or of the terms it is a sum of where it is small because they
//!   cancel (by the Cauchy estimates the terms of `f⁽ᵐ⁾` are of size
//!   `|f⁽ʲ⁾| rʲ⁻ᵐ`; `j ≥ 1`, since an additive constant never enters a
//!   derivative);
//! * [`RHO`] `= 1.6e-14, 1.6e-13, 2.4e-13, 1e-12` bounds `δₖ`: about four
//!   times the largest `error·h/S` observed over 4096 cases per property
//!   (`PROPTEST_CASES=4096`; at k = 3, 4 that figure includes truncation,
//!   so it overstates `δ`). For one argument the largest are 6.6e-16 at
//!   k = 1 (std/libm values; `lgamma` and our `ψ`) and 1.4e-15 at k = 2;
//!   along lines the terms of a directional derivative can cancel far
//!   below the derivatives themselves (`log(base)` and `atan2` along
//!   nearly degenerate directions), up to 3.9e-15 at k = 1, 4.1e-14 at
//!   k = 2 and 5.7e-14 at k = 3. The allowed relative error is then ~2e-9
//!   (k = 1) to ~3e-8 (k = 4) of the terms, far below the order-1 error of
//!   a wrong rule.
//!
//! # Tolerance against num-dual and of the bridge
//!
//! Errors are `|a − b| / Sₖ` with `Sₖ = max(|bₖ|, maxⱼ₌₁…₃ |bⱼ| rʲ⁻ᵏ)`,
//! the size of the terms of `bₖ` as above, so that a derivative that is
//! small by cancellation is compared at the scale of its terms. Against
//! num-dual both sides compute the same quantity by different formulas,
//! and num-dual's are not always the accurate ones (`tanh = sinh/cosh`
//! loses ~`cosh²x` ulps, `asin` uses `1 − x²`, `atan2` is `atan(y/x)`,
//! `powd` is `exp(y ln x)`). The bridge compares the same rules (or
//! num-dual's own functions) in forward instead of nested reverse order.
//! The largest errors over 4096 cases per property are 4.7e-13 against
//! num-dual (`atan2`) and 7.7e-13 for the bridge (`mul_add` along a
//! direction where its terms cancel), most are below 1e-14:
//! [`TOL_NUM_DUAL`] = [`TOL_BRIDGE`] = 1e-11 leaves a margin of 10 over
//! that; a wrong derivative part is off by order 1.

use crate::common;

use std::cell::Cell;
use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI, FRAC_PI_2, LN_2, PI};
use std::fmt::Debug;

use common::check;
use num_dual::{Dual2_64, Dual3_64, Dual64, DualNum as Nd, HyperDual64};
use optic_ad::{derivative, gradient, vjp, Error, Real, Tracer};
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;
use proptest::test_runner::TestCaseError;
use typenum::{U1, U3, U4};

/// Cases per property.
const CASES: u32 = 512;

/// Points closer than this to an edge are skipped (and counted).
const R_MIN: f64 = 1e-7;

/// `ηₖ`, the step of order k relative to the radius (see the module docs).
const ETA: [f64; 4] = [
    1.0 / (1u64 << 17) as f64,
    1.0 / (1u64 << 16) as f64,
    1.0 / (1u64 << 15) as f64,
    1.0 / (1u64 << 14) as f64,
];

/// `RHOₖ`, the relative accuracy allowed to order k − 1 (module docs).
const RHO: [f64; 4] = [1.6e-14, 1.6e-13, 2.4e-13, 1e-12];

/// Smallest radius at which num-dual is compared: its own `asin`, `acos`,
/// `atanh` and `acosh` form `1 − x²` (or `x² − 1`), which loses
/// `ε/(1 − |x|)` relative near the edge, and `Real` on num-dual types
/// calls them. (Our rules at the edges are checked by the finite
/// differences, which approach them to 1e-6, and the closed forms.)
const EDGE_NUM_DUAL: f64 = 1e-3;

/// Scaled error allowed against num-dual's own functions (module docs).
const TOL_NUM_DUAL: f64 = 1e-11;

/// Scaled error allowed between `Real` on num-dual types and
/// `derivative::<U3>` (module docs).
const TOL_BRIDGE: f64 = 1e-11;

fn fail(e: Error) -> TestCaseError {
    TestCaseError::fail(format!("library error: {e}"))
}

// ---------------------------------------------------------------------------
// Lines
// ---------------------------------------------------------------------------

/// One method as a function of one variable, with where to evaluate it.
trait Line {
    /// The parameters of the line (the point, and the direction for
    /// several arguments).
    type P: Clone + Debug + 'static;
    /// The name printed in reports.
    const NAME: &'static str;
    /// Whether [`Line::num_dual`] is num-dual's own function.
    const HAS_NUM_DUAL: bool = false;
    /// Points spread over the domain.
    fn points() -> BoxedStrategy<Self::P>;
    /// Points for the finite differences: [`Line::points`], and a quarter
    /// approaching an edge where the function has one (or in the tails).
    fn fd_points() -> BoxedStrategy<Self::P> {
        Self::points()
    }
    /// `t₀`.
    fn at(p: &Self::P) -> f64;
    /// The radius `ρ(t₀)` (module docs); ∞ if there is no singularity.
    fn dist(p: &Self::P) -> f64;
    /// `g(t)`, through `Real`.
    fn eval<T: Real>(p: &Self::P, t: T) -> T;
    /// `g(t)` through num-dual's own functions and arithmetic only; `None`
    /// where num-dual's formula does not apply.
    fn num_dual(_p: &Self::P, _t: Dual3_64) -> Option<Dual3_64> {
        None
    }
}

/// Declares a [`Line`] and its test: finite differences, num-dual's own
/// function (if given) and the bridge.
macro_rules! line {
    (
        $(#[$m:meta])*
        $test:ident, $S:ident, $name:literal, $P:ty,
        points: $points:expr,
        $(near: $near:expr,)?
        at: |$pa:pat_param| $at:expr,
        dist: |$pd:pat_param| $dist:expr,
        f: |$pf:pat_param, $t:ident| $f:expr
        $(, nd: |$pn:pat_param, $d:ident| $nd:expr)?
        $(,)?
    ) => {
        struct $S;
        impl Line for $S {
            type P = $P;
            const NAME: &'static str = $name;
            fn points() -> BoxedStrategy<$P> {
                ($points).boxed()
            }
            $(
                fn fd_points() -> BoxedStrategy<$P> {
                    prop_oneof![3 => $points, 1 => $near].boxed()
                }
            )?
            fn at($pa: &$P) -> f64 {
                $at
            }
            fn dist($pd: &$P) -> f64 {
                $dist
            }
            fn eval<T: Real>($pf: &$P, $t: T) -> T {
                $f
            }
            $(
                const HAS_NUM_DUAL: bool = true;
                fn num_dual($pn: &$P, $d: Dual3_64) -> Option<Dual3_64> {
                    $nd
                }
            )?
        }

        $(#[$m])*
        #[test]
        fn $test() {
            fd::<$S>();
            if <$S as Line>::HAS_NUM_DUAL {
                vs_num_dual::<$S>();
            }
            bridge::<$S>();
        }
    };
}

/// A [`Line`] for a method of one argument: `g(t) = f(t)` at `t₀ = x`.
macro_rules! unary {
    (
        $(#[$m:meta])*
        $test:ident, $S:ident, $name:literal,
        points: $points:expr,
        $(near: $near:expr,)?
        dist: |$x:ident| $dist:expr,
        f: |$t:ident| $f:expr
        $(, nd: |$d:ident| $nd:expr)?
        $(,)?
    ) => {
        line! {
            $(#[$m])*
            $test, $S, $name, f64,
            points: $points,
            $(near: $near,)?
            at: |&x| x,
            dist: |&$x| $dist,
            f: |_, $t| $f
            $(, nd: |_, $d| $nd)?
        }
    };
}

/// `x₀ + side · 10⁻ˢ`, `s` uniform in [1, 6]: points approaching the edge
/// `x₀` from one side.
fn approach(x0: f64, side: f64) -> impl Strategy<Value = f64> + Clone {
    (1.0f64..6.0).prop_map(move |s| x0 + side * 10f64.powf(-s))
}

/// Points approaching `x₀` from below and `−x₀` from above (both sides of
/// 0 for `x₀ = 0`).
fn approach_both(x0: f64) -> impl Strategy<Value = f64> + Clone {
    prop_oneof![approach(x0, -1.0), approach(-x0, 1.0)]
}

/// Points approaching one of `c + kπ`, `k ∈ ks`, from either side.
fn approach_periodic(c: f64, ks: std::ops::RangeInclusive<i32>) -> impl Strategy<Value = f64> {
    (ks, 1.0f64..6.0, any::<bool>()).prop_map(move |(k, s, right)| {
        let e = 10f64.powf(-s);
        c + f64::from(k) * PI + if right { e } else { -e }
    })
}

/// Points approaching one of the poles `0, −1, …, −n` of the gamma family,
/// from either side (0 from the right only).
fn approach_poles(n: i32) -> impl Strategy<Value = f64> {
    (0..=n, 1.0f64..6.0, any::<bool>()).prop_map(|(k, s, right)| {
        let e = 10f64.powf(-s);
        if k == 0 || right {
            -f64::from(k) + e
        } else {
            -f64::from(k) - e
        }
    })
}

/// Distance to the nearest pole `0, −1, −2, …` of the gamma family.
fn pole_dist(x: f64) -> f64 {
    if x > 0.0 {
        x
    } else {
        (x - x.round()).abs()
    }
}

/// Distance to the nearest pole `π/2 + kπ` of `tan`.
fn tan_dist(x: f64) -> f64 {
    let r = (x - FRAC_PI_2).rem_euclid(PI);
    r.min(PI - r)
}

/// Distance to the nearest integer (the jumps of `floor` and `ceil`).
fn int_dist(x: f64) -> f64 {
    (x - x.round()).abs()
}

/// `|t|` where `a + t·b = 0`, or ∞.
fn zero_at(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        f64::INFINITY
    } else {
        (a / b).abs()
    }
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

/// `[f, f′, …]` of `M` at `x` from `derivative::<U3>`.
fn taylor3<M: Line>(p: &M::P, x: f64) -> Result<[f64; 4], TestCaseError> {
    let d = derivative::<U3, _, _>(|t| M::eval(p, t), x).map_err(fail)?;
    Ok([d[0], d[1], d[2], d[3]])
}

/// Largest power of two not above `r` (`r` in (0, 1]).
fn pow2_floor(r: f64) -> f64 {
    2f64.powi(r.log2().floor() as i32)
}

/// Per-order worst values, for the report.
#[derive(Default)]
struct PerOrder([Cell<f64>; 5]);

impl PerOrder {
    fn note(&self, k: usize, e: f64) {
        if e > self.0[k].get() || e.is_nan() {
            self.0[k].set(e);
        }
    }
    fn show(&self, orders: std::ops::RangeInclusive<usize>) -> String {
        orders
            .map(|k| format!("{k}: {:.1e}", self.0[k].get()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Asserts that the property checked enough of its cases and reports.
fn report(name: &str, runs: u32, checked: u32, what: &str) {
    eprintln!("[{name}] {checked} of {runs} cases checked; {what}");
    let min = runs - runs / 16;
    assert!(
        checked >= min && checked > 0,
        "[{name}] only {checked} of {runs} cases checked (minimum {min})"
    );
}

/// Property 1: order k of `derivative::<U4>` against the central difference
/// of order k − 1 from `derivative::<U3>`, k = 1 … 4 (module docs).
fn fd<M: Line>() {
    let name = format!("{}: FD", M::NAME);
    let (runs, checked) = (Cell::new(0u32), Cell::new(0u32));
    let (ratio, rel) = (PerOrder::default(), PerOrder::default());
    let implied = PerOrder::default();
    check(&name, CASES, M::fd_points(), |p, worst| {
        runs.set(runs.get() + 1);
        let d = M::dist(&p);
        if d.is_nan() || d < R_MIN {
            return Ok(());
        }
        let unit = pow2_floor(d.min(1.0));
        let h = ETA.map(|e| e * unit);
        let grid = 4.0 * h[3];
        let x = (M::at(&p) / grid).round() * grid;
        let top = derivative::<U4, _, _>(|t| M::eval(&p, t), x).map_err(fail)?;
        // max over j ≥ 1 of |f⁽ʲ⁾(t₀)| rʲ⁻ᵐ: the size of the terms of f⁽ᵐ⁾.
        let terms = |m: usize| -> f64 {
            (1..=4).fold(0.0, |a: f64, j| {
                a.max(top[j].abs() * unit.powi(j as i32 - m as i32))
            })
        };
        for k in 1..=4 {
            let hk = h[k - 1];
            let g = |s: f64| Ok::<f64, TestCaseError>(taylor3::<M>(&p, s)?[k - 1]);
            let (p1, m1) = (g(x + hk)?, g(x - hk)?);
            let (p2, m2) = (g(x + 2.0 * hk)?, g(x - 2.0 * hk)?);
            let d_h = (p1 - m1) / (2.0 * hk);
            let d_2h = (p2 - m2) / (4.0 * hk);
            // S: the size of G on the stencil and of the terms it is made of.
            let lower = [p1, m1, p2, m2]
                .iter()
                .fold(terms(k - 1), |a, v| a.max(v.abs()));
            let tol = 4.0 * (d_h - d_2h).abs() / 3.0 + RHO[k - 1] * lower / hk;
            let e = (top[k] - d_h).abs();
            let r = if e == 0.0 { 0.0 } else { e / tol };
            ratio.note(k, r);
            worst.note(r);
            if e != 0.0 {
                rel.note(k, e / terms(k));
                implied.note(k, e * hk / lower);
            }
            prop_assert!(
                e <= tol,
                "order {}: derivative::<U4> gives {} at t = {:e}, central difference {} \
                 (error {:e}, tolerance {:e}, h = {:e})",
                k,
                top[k],
                x,
                d_h,
                e,
                tol,
                hk
            );
        }
        checked.set(checked.get() + 1);
        Ok(())
    });
    report(
        &name,
        runs.get(),
        checked.get(),
        &format!(
            "worst error/tolerance by order {{{}}}, worst error relative to the terms {{{}}}, \
             worst error·h/S {{{}}}",
            ratio.show(1..=4),
            rel.show(1..=4),
            implied.show(1..=4)
        ),
    );
}

/// `|got − want| / Sₖ` (module docs); 0 where equal.
fn scaled_err(got: &[f64], want: &[f64], k: usize, r: f64) -> f64 {
    if got[k] == want[k] {
        return 0.0;
    }
    let s = (1..want.len()).fold(want[k].abs(), |a: f64, j| {
        a.max(want[j].abs() * r.powi(j as i32 - k as i32))
    });
    let e = (got[k] - want[k]).abs() / s;
    if e.is_nan() {
        f64::INFINITY
    } else {
        e
    }
}

/// Property 2: orders 0–3 of `derivative::<U3>` against num-dual's own
/// function on `Dual3_64`.
fn vs_num_dual<M: Line>() {
    let name = format!("{}: vs num-dual's own Dual3_64", M::NAME);
    let (runs, checked) = (Cell::new(0u32), Cell::new(0u32));
    let per = PerOrder::default();
    check(&name, CASES, M::points(), |p, worst| {
        runs.set(runs.get() + 1);
        let d = M::dist(&p);
        let x = M::at(&p);
        if d.is_nan() || d < EDGE_NUM_DUAL {
            return Ok(());
        }
        let Some(w) = M::num_dual(&p, Dual3_64::new(x, 1.0, 0.0, 0.0)) else {
            return Ok(());
        };
        let want = [w.re, w.v1, w.v2, w.v3];
        let got = taylor3::<M>(&p, x)?;
        for k in 0..4 {
            let e = scaled_err(&got, &want, k, d.min(1.0));
            per.note(k, e);
            worst.note(e);
            prop_assert!(
                e <= TOL_NUM_DUAL,
                "order {}: {:?} (derivative::<U3>) vs {:?} (num-dual) at t = {}: error {:e}",
                k,
                got,
                want,
                x,
                e
            );
        }
        checked.set(checked.get() + 1);
        Ok(())
    });
    report(
        &name,
        runs.get(),
        checked.get(),
        &format!("worst scaled error by order {{{}}}", per.show(0..=3)),
    );
}

/// Property 2, bridge: `Real` on `Dual64`, `Dual2_64`, `Dual3_64` and
/// `HyperDual64` against `derivative::<U3>`; `Real` on `f64` gives the
/// traced value bit for bit.
fn bridge<M: Line>() {
    let name = format!("{}: Real on num-dual types vs derivative::<U3>", M::NAME);
    let (runs, checked) = (Cell::new(0u32), Cell::new(0u32));
    let per = PerOrder::default();
    check(&name, CASES, M::points(), |p, worst| {
        runs.set(runs.get() + 1);
        let d = M::dist(&p);
        if d.is_nan() || d < EDGE_NUM_DUAL {
            return Ok(());
        }
        let r = d.min(1.0);
        let x = M::at(&p);
        let got = taylor3::<M>(&p, x)?;
        let v = M::eval(&p, x);
        prop_assert!(
            v.to_bits() == got[0].to_bits(),
            "f64 value {v:e} vs traced {:e}",
            got[0]
        );
        let d1 = M::eval(&p, Dual64::new(x, 1.0));
        let d2 = M::eval(&p, Dual2_64::new(x, 1.0, 0.0));
        let d3 = M::eval(&p, Dual3_64::new(x, 1.0, 0.0, 0.0));
        let hd = M::eval(&p, HyperDual64::new(x, 1.0, 1.0, 0.0));
        let sides: [(&str, Vec<f64>, Vec<f64>); 4] = [
            ("Dual64", vec![d1.re, d1.eps], got[..2].to_vec()),
            ("Dual2_64", vec![d2.re, d2.v1, d2.v2], got[..3].to_vec()),
            ("Dual3_64", vec![d3.re, d3.v1, d3.v2, d3.v3], got.to_vec()),
            (
                "HyperDual64",
                vec![hd.re, hd.eps1, hd.eps2, hd.eps1eps2],
                vec![got[0], got[1], got[1], got[2]],
            ),
        ];
        for (ty, dual, want) in &sides {
            for k in 0..dual.len() {
                // HyperDual's ε₂ part is order 1 again.
                let order = if *ty == "HyperDual64" {
                    [0, 1, 1, 2][k]
                } else {
                    k
                };
                let e = scaled_err(dual, want, k, r);
                per.note(order, e);
                worst.note(e);
                prop_assert!(
                    e <= TOL_BRIDGE,
                    "{} part {}: {:?} vs derivative::<U3> {:?} at t = {}: error {:e}",
                    ty,
                    k,
                    dual,
                    want,
                    x,
                    e
                );
            }
        }
        checked.set(checked.get() + 1);
        Ok(())
    });
    report(
        &name,
        runs.get(),
        checked.get(),
        &format!("worst scaled error by order {{{}}}", per.show(0..=3)),
    );
}

// ---------------------------------------------------------------------------
// The methods
// ---------------------------------------------------------------------------

unary!(atan, Atan, "atan", points: -8.0..8.0f64,
    dist: |x| x.hypot(1.0), f: |t| t.atan(), nd: |d| Some(Nd::atan(&d)));
unary!(asin, Asin, "asin", points: -1.0..1.0f64, near: approach_both(1.0),
    dist: |x| 1.0 - x.abs(), f: |t| t.asin(),
    nd: |d| Some(Nd::asin(&d)));
unary!(acos, Acos, "acos", points: -1.0..1.0f64, near: approach_both(1.0),
    dist: |x| 1.0 - x.abs(), f: |t| t.acos(),
    nd: |d| Some(Nd::acos(&d)));
unary!(sinh, Sinh, "sinh", points: -6.0..6.0f64,
    dist: |_x| f64::INFINITY, f: |t| t.sinh(), nd: |d| Some(Nd::sinh(&d)));
unary!(cosh, Cosh, "cosh", points: -6.0..6.0f64,
    dist: |_x| f64::INFINITY, f: |t| t.cosh(), nd: |d| Some(Nd::cosh(&d)));
// num-dual's tanh is sinh/cosh, whose derivative parts lose ~cosh²x ulps,
// so the points for it (and the bridge) stay within ±3; the finite
// differences also see the tails out to ±8, where our pullback
// ȳ / cosh² x keeps its relative accuracy.
unary!(tanh, Tanh, "tanh", points: -3.0..3.0f64,
    near: prop_oneof![-8.0..-3.0f64, 3.0..8.0f64],
    dist: |x| x.hypot(FRAC_PI_2),
    f: |t| t.tanh(), nd: |d| Some(Nd::tanh(&d)));
unary!(asinh, Asinh, "asinh", points: -10.0..10.0f64,
    dist: |x| x.hypot(1.0), f: |t| t.asinh(), nd: |d| Some(Nd::asinh(&d)));
unary!(acosh, Acosh, "acosh", points: 1.0..10.0f64, near: approach(1.0, 1.0),
    dist: |x| x - 1.0,
    f: |t| t.acosh(),
    nd: |d| Some(Nd::acosh(&d)));
unary!(atanh, Atanh, "atanh", points: -1.0..1.0f64, near: approach_both(1.0),
    dist: |x| 1.0 - x.abs(),
    f: |t| t.atanh(),
    nd: |d| Some(Nd::atanh(&d)));
unary!(exp, Exp, "exp", points: -6.0..6.0f64,
    dist: |_x| f64::INFINITY, f: |t| t.exp(), nd: |d| Some(Nd::exp(&d)));
unary!(exp2, Exp2, "exp2", points: -8.0..8.0f64,
    dist: |_x| f64::INFINITY, f: |t| t.exp2(), nd: |d| Some(Nd::exp2(&d)));
unary!(exp_m1, ExpM1, "exp_m1", points: -6.0..6.0f64, near: approach_both(0.0),
    dist: |_x| f64::INFINITY,
    f: |t| t.exp_m1(), nd: |d| Some(Nd::exp_m1(&d)));
unary!(ln, Ln, "ln", points: 0.0..10.0f64, near: approach(0.0, 1.0),
    dist: |x| x, f: |t| t.ln(), nd: |d| Some(Nd::ln(&d)));
unary!(log2, Log2, "log2", points: 0.0..10.0f64, near: approach(0.0, 1.0),
    dist: |x| x, f: |t| t.log2(), nd: |d| Some(Nd::log2(&d)));
unary!(log10, Log10, "log10", points: 0.0..10.0f64, near: approach(0.0, 1.0),
    dist: |x| x, f: |t| t.log10(), nd: |d| Some(Nd::log10(&d)));
unary!(ln_1p, Ln1p, "ln_1p", points: -1.0..10.0f64, near: approach(-1.0, 1.0),
    dist: |x| 1.0 + x, f: |t| t.ln_1p(), nd: |d| Some(Nd::ln_1p(&d)));
unary!(sqrt, Sqrt, "sqrt", points: 0.0..10.0f64, near: approach(0.0, 1.0),
    dist: |x| x, f: |t| t.sqrt(), nd: |d| Some(Nd::sqrt(&d)));
unary!(cbrt, Cbrt, "cbrt", points: -10.0..10.0f64, near: approach_both(0.0),
    dist: |x| x.abs(), f: |t| t.cbrt(), nd: |d| Some(Nd::cbrt(&d)));
unary!(sin, Sin, "sin", points: -10.0..10.0f64,
    dist: |_x| f64::INFINITY, f: |t| t.sin(), nd: |d| Some(Nd::sin(&d)));
unary!(cos, Cos, "cos", points: -10.0..10.0f64,
    dist: |_x| f64::INFINITY, f: |t| t.cos(), nd: |d| Some(Nd::cos(&d)));
unary!(tan, Tan, "tan", points: -5.0..5.0f64, near: approach_periodic(FRAC_PI_2, -2..=1),
    dist: |x| tan_dist(x), f: |t| t.tan(), nd: |d| Some(Nd::tan(&d)));
unary!(recip, Recip, "recip", points: -5.0..5.0f64, near: approach_both(0.0),
    dist: |x| x.abs(), f: |t| t.recip(), nd: |d| Some(Nd::recip(&d)));
unary!(sin_cos_sin, SinCos0, "sin_cos().0", points: -10.0..10.0f64,
    dist: |_x| f64::INFINITY, f: |t| t.sin_cos().0, nd: |d| Some(Nd::sin_cos(&d).0));
unary!(sin_cos_cos, SinCos1, "sin_cos().1", points: -10.0..10.0f64,
    dist: |_x| f64::INFINITY, f: |t| t.sin_cos().1, nd: |d| Some(Nd::sin_cos(&d).1));
unary!(abs, Abs, "abs", points: -5.0..5.0f64, near: approach_both(0.0),
    dist: |x| x.abs(), f: |t| t.abs());
unary!(signum, Signum, "signum", points: -5.0..5.0f64,
    dist: |x| x.abs(), f: |t| t.signum());
unary!(floor, Floor, "floor", points: -5.0..5.0f64,
    dist: |x| int_dist(x), f: |t| t.floor());
unary!(ceil, Ceil, "ceil", points: -5.0..5.0f64,
    dist: |x| int_dist(x), f: |t| t.ceil());
unary!(erf, Erf, "erf", points: -4.0..4.0f64,
    dist: |_x| f64::INFINITY, f: |t| t.erf());
unary!(erfc, Erfc, "erfc", points: -4.0..6.0f64,
    dist: |_x| f64::INFINITY, f: |t| t.erfc());
unary!(ln_gamma, LnGamma, "ln_gamma", points: -6.0..12.0f64, near: approach_poles(5),
    dist: |x| pole_dist(x), f: |t| t.ln_gamma());
unary!(digamma, Digamma, "digamma", points: -6.0..12.0f64, near: approach_poles(5),
    dist: |x| pole_dist(x), f: |t| t.digamma());
unary!(polygamma_0, Polygamma0, "polygamma(0)", points: -6.0..12.0f64, near: approach_poles(5),
    dist: |x| pole_dist(x), f: |t| t.polygamma(0));
unary!(polygamma_1, Polygamma1, "polygamma(1)", points: -6.0..12.0f64, near: approach_poles(5),
    dist: |x| pole_dist(x), f: |t| t.polygamma(1));
unary!(polygamma_2, Polygamma2, "polygamma(2)", points: -6.0..12.0f64, near: approach_poles(5),
    dist: |x| pole_dist(x), f: |t| t.polygamma(2));
unary!(polygamma_3, Polygamma3, "polygamma(3)", points: -6.0..12.0f64, near: approach_poles(5),
    dist: |x| pole_dist(x), f: |t| t.polygamma(3));

line! {
    /// `xⁿ` for a fixed integer `n`.
    powi, Powi, "powi", (f64, i32),
    points: (-2.0..2.0f64, -12..=12i32),
    near: (approach_both(0.0), -12..=-1i32),
    at: |&(x, _)| x,
    dist: |&(x, n)| if n < 0 { x.abs() } else { f64::INFINITY },
    f: |&(_, n), t| t.powi(n),
    nd: |&(_, n), d| Some(Nd::powi(&d, n)),
}

line! {
    /// `xʸ` with a constant exponent (num-dual's `powf`).
    powf_const_exponent, PowfConst, "powf(x, const)", (f64, f64),
    points: (0.0..5.0f64, -4.0..4.0f64),
    near: (approach(0.0, 1.0), -4.0..4.0f64),
    at: |&(x, _)| x,
    dist: |&(x, _)| x,
    f: |&(_, y), t| t.powf(T::cst(y)),
    nd: |&(_, y), d| Some(Nd::powf(&d, y)),
}

line! {
    /// `xʸ` along `(x₀ + t·u, y₀ + t·v)` (num-dual: `exp(y ln x)`).
    powf, Powf, "powf", [f64; 4],
    points: [0.05..5.0f64, -3.0..3.0, -1.0..1.0, -1.0..1.0],
    at: |_| 0.0,
    dist: |&[x0, _, u, _]| zero_at(x0, u),
    f: |&[x0, y0, u, v], t| (t * u + x0).powf(t * v + y0),
    nd: |&[x0, y0, u, v], t| Some(Nd::powd(&(t * u + x0), t * v + y0)),
}

line! {
    /// `atan2(y, x)` along `(y₀ + t·v, x₀ + t·u)`. The radius is the
    /// distance to the origin, where `x² + y² = 0` for complex `t`, and to
    /// the cut on the negative x axis, where the value jumps by 2π.
    /// num-dual's own `atan2` is `atan(y/x)` and only applies away from
    /// `x = 0`.
    atan2, Atan2, "atan2", [f64; 4],
    points: [-3.0..3.0f64, -3.0..3.0, -1.0..1.0, -1.0..1.0],
    at: |_| 0.0,
    dist: |&[y0, x0, v, u]| {
        let origin = x0.hypot(y0) / u.hypot(v);
        let tc = -y0 / v;
        let cut = if x0 + tc * u < 0.0 { tc.abs() } else { f64::INFINITY };
        origin.min(cut)
    },
    f: |&[y0, x0, v, u], t| (t * v + y0).atan2(t * u + x0),
    nd: |&[y0, x0, v, u], t| {
        (x0.abs() >= 0.05 * x0.hypot(y0)).then(|| Nd::atan2(&(t * v + y0), t * u + x0))
    },
}

line! {
    /// `hypot(x, y)` along `(x₀ + t·u, y₀ + t·v)`; num-dual has no `hypot`,
    /// so its reference is its own `sqrt(x² + y²)`.
    hypot, Hypot, "hypot", [f64; 4],
    points: [-3.0..3.0f64, -3.0..3.0, -1.0..1.0, -1.0..1.0],
    at: |_| 0.0,
    dist: |&[x0, y0, u, v]| x0.hypot(y0) / u.hypot(v),
    f: |&[x0, y0, u, v], t| (t * u + x0).hypot(t * v + y0),
    nd: |&[x0, y0, u, v], t| {
        let (x, y) = (t * u + x0, t * v + y0);
        Some(Nd::sqrt(&(x * x + y * y)))
    },
}

line! {
    /// `max(a, b)` along `(a₀ + t·u, b₀ + t·v)`.
    max, Max, "max", [f64; 4],
    points: [-3.0..3.0f64, -3.0..3.0, -1.0..1.0, -1.0..1.0],
    at: |_| 0.0,
    dist: |&[a0, b0, u, v]| zero_at(a0 - b0, u - v),
    f: |&[a0, b0, u, v], t| (t * u + a0).max(t * v + b0),
}

line! {
    /// `min(a, b)` along `(a₀ + t·u, b₀ + t·v)`.
    min, Min, "min", [f64; 4],
    points: [-3.0..3.0f64, -3.0..3.0, -1.0..1.0, -1.0..1.0],
    at: |_| 0.0,
    dist: |&[a0, b0, u, v]| zero_at(a0 - b0, u - v),
    f: |&[a0, b0, u, v], t| (t * u + a0).min(t * v + b0),
}

line! {
    /// `clamp(x, lo, hi)` along `(x₀ + t·u, lo₀ + t·v, hi₀ + t·w)` with
    /// `lo₀ < hi₀`; the kinks are where `x` meets a bound, and where the
    /// bounds cross the result is NaN.
    clamp, Clamp, "clamp", [f64; 6],
    points: [-3.0..3.0f64, -2.0..0.0, 0.1..3.0, -1.0..1.0, -1.0..1.0, -1.0..1.0]
        .prop_map(|[x, lo, gap, u, v, w]| [x, lo, lo + gap, u, v, w]),
    at: |_| 0.0,
    dist: |&[x0, l0, h0, u, v, w]| {
        zero_at(x0 - l0, u - v).min(zero_at(x0 - h0, u - w)).min(zero_at(h0 - l0, w - v))
    },
    f: |&[x0, l0, h0, u, v, w], t| (t * u + x0).clamp(t * v + l0, t * w + h0),
}

line! {
    /// `a·b + c` along `(a₀ + t·u, b₀ + t·v, c₀ + t·w)`.
    mul_add, MulAdd, "mul_add", [f64; 6],
    points: [-3.0..3.0f64, -3.0..3.0, -3.0..3.0, -1.0..1.0, -1.0..1.0, -1.0..1.0],
    at: |_| 0.0,
    dist: |_| f64::INFINITY,
    f: |&[a0, b0, c0, u, v, w], t| (t * u + a0).mul_add(t * v + b0, t * w + c0),
    nd: |&[a0, b0, c0, u, v, w], t| Some(Nd::mul_add(&(t * u + a0), t * v + b0, t * w + c0)),
}

line! {
    /// `log_b x` along `(x₀ + t·u, b₀ + t·v)`: singular where `x = 0`,
    /// `b = 0` or `b = 1`. num-dual's own `log` takes a constant base, so
    /// its reference is its own `ln x / ln b`.
    log, Log, "log(base)", [f64; 4],
    points: (0.05..8.0f64, prop_oneof![0.05..0.8f64, 1.25..8.0], -1.0..1.0f64, -1.0..1.0f64)
        .prop_map(|(x, b, u, v)| [x, b, u, v]),
    at: |_| 0.0,
    dist: |&[x0, b0, u, v]| zero_at(x0, u).min(zero_at(b0, v)).min(zero_at(b0 - 1.0, v)),
    f: |&[x0, b0, u, v], t| (t * u + x0).log(t * v + b0),
    nd: |&[x0, b0, u, v], t| Some(Nd::ln(&(t * u + x0)) / Nd::ln(&(t * v + b0))),
}

// ---------------------------------------------------------------------------
// Closed forms
// ---------------------------------------------------------------------------

/// `[f, f′, …, f⁽⁴⁾]` from `derivative::<U4>`.
fn d4(f: impl Fn(Tracer) -> Tracer, x: f64) -> [f64; 5] {
    let d = derivative::<U4, _, _>(f, x).expect("derivative::<U4>");
    [d[0], d[1], d[2], d[3], d[4]]
}

/// `[f, f′, f″, f‴]` from `derivative::<U3>`.
fn d3(f: impl Fn(Tracer) -> Tracer, x: f64) -> [f64; 4] {
    let d = derivative::<U3, _, _>(f, x).expect("derivative::<U3>");
    [d[0], d[1], d[2], d[3]]
}

/// Relative error; exact equality (including of zeros and infinities) is 0.
fn rel(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        (a - b).abs() / b.abs()
    }
}

/// `ln(1 + x)` and `eˣ − 1` at and near 0, orders 0–4:
/// `dᵏ/dxᵏ ln(1 + x) = (−1)ᵏ⁻¹ (k − 1)! / (1 + x)ᵏ` and `dᵏ/dxᵏ (eˣ − 1) = eˣ`
/// (differentiating A&S 4.1.24 and 4.2.1 termwise). The values are
/// checked against the series `x − x²/2 + x³/3` and `x + x²/2 + x³/6`
/// (A&S 4.1.24, 4.2.1; the next terms are below 1e-40 here), and
/// `(1 + x)⁻ᵏ` is computed as `exp(−k ln_1p x)`, without rounding `1 + x`.
#[test]
fn ln_1p_and_exp_m1_near_zero() {
    let mut worst = 0.0f64;
    for x in [1e-10, -1e-12, 0.0, -0.0, 3e-300] {
        let l = d4(|t| t.ln_1p(), x);
        let e = d4(|t| t.exp_m1(), x);
        let l0 = x - x * x / 2.0 + x * x * x / 3.0;
        let e0 = x + x * x / 2.0 + x * x * x / 6.0;
        assert!(rel(l[0], l0) <= 1e-15, "ln_1p({x}) = {} vs {l0}", l[0]);
        assert!(rel(e[0], e0) <= 1e-15, "exp_m1({x}) = {} vs {e0}", e[0]);
        worst = worst.max(rel(l[0], l0)).max(rel(e[0], e0));
        let mut fact = 1.0; // (k − 1)!
        for k in 1..=4 {
            let sign = if k % 2 == 1 { 1.0 } else { -1.0 };
            let lk = sign * fact * (-(k as f64) * x.ln_1p()).exp();
            let ek = x.exp();
            assert!(
                rel(l[k], lk) <= 1e-15,
                "ln_1p^({k})({x}) = {} vs {lk}",
                l[k]
            );
            assert!(
                rel(e[k], ek) <= 1e-15,
                "exp_m1^({k})({x}) = {} vs {ek}",
                e[k]
            );
            worst = worst.max(rel(l[k], lk)).max(rel(e[k], ek));
            fact *= k as f64;
        }
    }
    eprintln!("[ln_1p, exp_m1 near 0] worst relative error {worst:.1e}");
}

/// `hypot` at `(1e300, 1e300)` and `(1e-300, 1e-300)`, where `x² + y²`
/// overflows or underflows: the value is std's, the gradient
/// `(x/h, y/h) = (1/√2, 1/√2)` (and `(0.6, 0.8)` at 3:4) without overflow or
/// underflow; through `Real` on `Dual64` too.
#[test]
fn hypot_at_extreme_scales() {
    let f = |a: &[Tracer]| a[0].hypot(a[1]);
    for (x, y, gx, gy) in [
        (1e300, 1e300, FRAC_1_SQRT_2, FRAC_1_SQRT_2),
        (1e-300, 1e-300, FRAC_1_SQRT_2, FRAC_1_SQRT_2),
        (3e300, 4e300, 0.6, 0.8),
        (3e-300, 4e-300, 0.6, 0.8),
    ] {
        let (v, _) = vjp(|a| vec![f(a)], &[x, y], &[1.0]).unwrap();
        assert_eq!(v[0].to_bits(), x.hypot(y).to_bits(), "hypot({x}, {y})");
        assert!(v[0].is_finite() && v[0] > 0.0);
        let g = gradient(f, &[x, y]).unwrap();
        assert!(
            rel(g[0], gx) <= 2e-16 && rel(g[1], gy) <= 2e-16,
            "∇hypot({x}, {y}) = {g:?}"
        );
        let d = Real::hypot(Dual64::new(x, 1.0), Dual64::new(y, 0.0));
        assert_eq!(d.re.to_bits(), v[0].to_bits());
        assert!(rel(d.eps, gx) <= 2e-16, "Dual64: {d:?}");
    }
}

/// `atan2(y, x)` in the four quadrants, on the axes and at signed zeros:
/// the value is std's bit for bit (IEEE 754-2008 §9.2.1; C99 F.9.1.4), the
/// gradient wrt `(y, x)` is `(x/(x² + y²), −y/(x² + y²))` (A&S 4.4.52 and the
/// chain rule), also at scales where `x² + y²` over- or underflows, and NaN
/// at the origin (as documented in src/rules/trig.rs).
#[test]
fn atan2_quadrants_axes_and_signed_zeros() {
    let f = |a: &[Tracer]| a[0].atan2(a[1]);
    let points = [
        (1.0, 2.0),
        (1.0, -2.0),
        (-1.0, -2.0),
        (-1.0, 2.0),
        (0.0, 1.0),
        (-0.0, 1.0),
        (0.0, -1.0),
        (-0.0, -1.0),
        (1.0, 0.0),
        (1.0, -0.0),
        (-1.0, 0.0),
        (-1.0, -0.0),
        (1e300, -1e300),
        (-1e-300, 1e-300),
        (0.0, 0.0),
        (-0.0, 0.0),
        (0.0, -0.0),
        (-0.0, -0.0),
    ];
    for (y, x) in points {
        let (v, g) = vjp(|a| vec![f(a)], &[y, x], &[1.0]).unwrap();
        assert_eq!(
            v[0].to_bits(),
            y.atan2(x).to_bits(),
            "atan2({y:?}, {x:?}) = {:?}, std {:?}",
            v[0],
            y.atan2(x)
        );
        let grad = gradient(f, &[y, x]).unwrap();
        assert_eq!(grad[0].to_bits(), g[0].to_bits());
        assert_eq!(grad[1].to_bits(), g[1].to_bits());
        if x == 0.0 && y == 0.0 {
            assert!(
                g[0].is_nan() && g[1].is_nan(),
                "∇atan2 at the origin: {g:?}"
            );
            continue;
        }
        // (x/(x² + y²), −y/(x² + y²)) with the scale taken out exactly.
        let s = x.abs().max(y.abs());
        let (xs, ys) = (x / s, y / s);
        let r2 = xs * xs + ys * ys;
        let want = [xs / r2 / s, -ys / r2 / s];
        for i in 0..2 {
            assert!(
                rel(g[i], want[i]) <= 4e-16,
                "∂atan2({y:?}, {x:?}) = {g:?}, want {want:?}"
            );
        }
    }
}

/// `powf` at `x = 0`: `0ʸ = 0` for `y > 0`, `∂/∂y = 0` there at every
/// order, `∂/∂x = y·0ʸ⁻¹` (0 for `y > 1`, 1 for `y = 1`, `+∞` for
/// `y < 1`); and for `x < 0` with integer `y`, std's value
/// (C99 F.9.4.4), the derivatives `y(y−1)…(y−k+1) xʸ⁻ᵏ` in `x`, and NaN in `y`
/// (documented in src/rules/power.rs: `xʸ` is not differentiable in `y`
/// there).
#[test]
fn powf_at_zero_and_negative_bases() {
    let f = |a: &[Tracer]| a[0].powf(a[1]);
    for (y, dx) in [(2.5, 0.0), (1.0, 1.0), (0.5, f64::INFINITY), (3.0, 0.0)] {
        let (v, g) = vjp(|a| vec![f(a)], &[0.0, y], &[1.0]).unwrap();
        assert_eq!(v[0].to_bits(), 0.0f64.powf(y).to_bits());
        assert_eq!(g, vec![dx, 0.0], "∇(x^y) at (0, {y})");
        assert_eq!(gradient(f, &[0.0, y]).unwrap(), g);
        let dy = d4(|t| Tracer::cst(0.0).powf(t), y);
        // Issue 5 review: orders ≥ 2 were NaN (0 · ln 0 on the branch not
        // taken); every order is 0.
        assert_eq!(dy[..], [0.0; 5], "d^k/dy^k 0^y at y = {y}");
    }
    for (x, y) in [
        (-2.0, 3.0),
        (-2.0, 2.0),
        (-1.5, -3.0),
        (-0.5, 4.0),
        (-3.0, 1.0),
    ] {
        let (v, g) = vjp(|a| vec![f(a)], &[x, y], &[1.0]).unwrap();
        assert_eq!(v[0].to_bits(), x.powf(y).to_bits(), "{x}^{y}");
        assert!(g[1].is_nan(), "∂/∂y {x}^{y} = {}", g[1]);
        let d = d4(|t| t.powf(Tracer::cst(y)), x);
        let mut falling = 1.0;
        for (k, dk) in d.iter().enumerate() {
            let want = falling * x.powi(y as i32 - k as i32);
            assert!(
                rel(*dk, want) <= 1e-15,
                "d^{k}/dx^{k} x^{y} at {x}: {dk} vs {want}"
            );
            falling *= y - k as f64;
        }
    }
}

/// Derivatives at the edges where they are infinite (documented in
/// src/rules/trig.rs, power.rs and hyperbolic.rs): `asin′(±1) = +∞`,
/// `acos′(±1) = −∞`, `√′(0) = ∛′(0) = acosh′(1) = +∞`; never a silent 0 or
/// NaN, and the same through `Real` on `Dual64`.
#[test]
fn infinite_derivatives_at_edges() {
    type Case = (
        &'static str,
        fn(Tracer) -> Tracer,
        fn(Dual64) -> Dual64,
        f64,
        f64,
    );
    let cases: [Case; 8] = [
        ("asin", |t| t.asin(), |d| Real::asin(d), 1.0, f64::INFINITY),
        ("asin", |t| t.asin(), |d| Real::asin(d), -1.0, f64::INFINITY),
        (
            "acos",
            |t| t.acos(),
            |d| Real::acos(d),
            1.0,
            f64::NEG_INFINITY,
        ),
        (
            "acos",
            |t| t.acos(),
            |d| Real::acos(d),
            -1.0,
            f64::NEG_INFINITY,
        ),
        ("sqrt", |t| t.sqrt(), |d| Real::sqrt(d), 0.0, f64::INFINITY),
        ("cbrt", |t| t.cbrt(), |d| Real::cbrt(d), 0.0, f64::INFINITY),
        ("cbrt", |t| t.cbrt(), |d| Real::cbrt(d), -0.0, f64::INFINITY),
        (
            "acosh",
            |t| t.acosh(),
            |d| Real::acosh(d),
            1.0,
            f64::INFINITY,
        ),
    ];
    for (name, f, fd, x, want) in cases {
        let d = derivative::<U1, _, _>(f, x).unwrap();
        assert_eq!(d[1], want, "{name}′({x:?}) = {}", d[1]);
        let dual = fd(Dual64::new(x, 1.0));
        assert_eq!(dual.re.to_bits(), d[0].to_bits(), "{name}({x:?}) on Dual64");
        assert_eq!(dual.eps, want, "{name}′({x:?}) on Dual64 = {}", dual.eps);
    }
}

/// JAX's conventions at the kinks (src/rules/nonsmooth.rs): `abs′(±0) = 1`;
/// `max`/`min` at a tie give half to each argument; `clamp` passes the
/// derivative to `x` strictly inside, to `lo` below, to `hi` above, and to
/// no argument at a bound; `signum`, `floor`, `ceil` have derivative 0
/// everywhere. Through the tracer and through `Real` on `Dual64`.
#[test]
fn nonsmooth_conventions() {
    for x in [0.0, -0.0] {
        assert_eq!(
            d4(|t| t.abs(), x),
            [0.0, 1.0, 0.0, 0.0, 0.0],
            "abs at {x:?}"
        );
        assert_eq!(Real::abs(Dual64::new(x, 1.0)).eps, 1.0);
    }
    // Ties.
    for (a, b) in [(1.5, 1.5), (-2.0, -2.0), (0.0, -0.0)] {
        let gmax = gradient(|v| v[0].max(v[1]), &[a, b]).unwrap();
        let gmin = gradient(|v| v[0].min(v[1]), &[a, b]).unwrap();
        assert_eq!(gmax, vec![0.5, 0.5], "∇max at ({a}, {b})");
        assert_eq!(gmin, vec![0.5, 0.5], "∇min at ({a}, {b})");
        for i in 0..2 {
            let seed = |j: usize| if i == j { 1.0 } else { 0.0 };
            let (da, db) = (Dual64::new(a, seed(0)), Dual64::new(b, seed(1)));
            assert_eq!(Real::max(da, db).eps, 0.5);
            assert_eq!(Real::min(da, db).eps, 0.5);
        }
    }
    // Along a line through a tie: slopes 1 and 3 average to 2.
    let d = derivative::<U1, _, _>(|t| (t + 1.0).max(t * 3.0 + 1.0), 0.0).unwrap();
    assert_eq!(d[1], 2.0);
    // clamp(x, lo, hi) and its gradient wrt (x, lo, hi).
    for (x, want) in [
        (0.5, [1.0, 0.0, 0.0]),
        (-1.0, [0.0, 1.0, 0.0]),
        (2.0, [0.0, 0.0, 1.0]),
        (0.0, [0.0, 0.0, 0.0]),
        (1.0, [0.0, 0.0, 0.0]),
    ] {
        let p = [x, 0.0, 1.0];
        let g = gradient(|v| v[0].clamp(v[1], v[2]), &p).unwrap();
        assert_eq!(g, want.to_vec(), "∇clamp({x}, 0, 1)");
        for (i, &gi) in want.iter().enumerate() {
            let arg = |j: usize| Dual64::new(p[j], if i == j { 1.0 } else { 0.0 });
            let d = Real::clamp(arg(0), arg(1), arg(2));
            assert_eq!(d.re, x.clamp(0.0, 1.0));
            assert_eq!(d.eps, gi, "clamp({x}, 0, 1) on Dual64, argument {i}");
        }
    }
    // Flat functions: value as std, derivatives 0 at every order.
    type Flat = (
        &'static str,
        fn(Tracer) -> Tracer,
        fn(f64) -> f64,
        fn(Dual64) -> Dual64,
    );
    let flat: [Flat; 3] = [
        ("signum", |t| t.signum(), f64::signum, |d| Real::signum(d)),
        ("floor", |t| t.floor(), f64::floor, |d| Real::floor(d)),
        ("ceil", |t| t.ceil(), f64::ceil, |d| Real::ceil(d)),
    ];
    for (name, f, std_f, dual_f) in flat {
        for x in [-1.5, -1.0, -0.0, 0.0, 0.3, 2.0, 2.7] {
            let d = d4(f, x);
            assert_eq!(d[0].to_bits(), std_f(x).to_bits(), "{name}({x:?})");
            assert_eq!(&d[1..], &[0.0; 4], "{name} derivatives at {x:?}");
            let d = dual_f(Dual64::new(x, 1.0));
            assert_eq!(
                (d.re.to_bits(), d.eps),
                (std_f(x).to_bits(), 0.0),
                "{name} on Dual64"
            );
        }
    }
}

/// `ψ⁽ⁿ⁾(1) = (−1)ⁿ⁺¹ n! ζ(n + 1)` and
/// `ψ⁽ⁿ⁾(½) = (−1)ⁿ⁺¹ n! (2ⁿ⁺¹ − 1) ζ(n + 1)` for `n ≥ 1` (NIST DLMF 5.15.2,
/// 5.15.3), `ψ(1) = −γ`, `ψ(½) = −γ − 2 ln 2` (DLMF 5.4.12, 5.4.13).
fn psi(n: usize, x: f64) -> f64 {
    const EULER: f64 = 0.577_215_664_901_532_9;
    // ζ(2) … ζ(8): DLMF 25.6.1 for the even ones; ζ(3), ζ(5), ζ(7)
    // (1.2020569031595942854, 1.0369277551433699263, 1.0083492773819228268)
    // rounded to f64.
    let zeta = [
        PI * PI / 6.0,
        1.202_056_903_159_594_2,
        PI.powi(4) / 90.0,
        1.036_927_755_143_37,
        PI.powi(6) / 945.0,
        1.008_349_277_381_923,
        PI.powi(8) / 9450.0,
    ];
    if n == 0 {
        return if x == 1.0 {
            -EULER
        } else {
            -EULER - 2.0 * LN_2
        };
    }
    let fact: f64 = (1..=n).map(|i| i as f64).product();
    let sign = if n % 2 == 1 { 1.0 } else { -1.0 };
    let half = if x == 1.0 {
        1.0
    } else {
        2f64.powi(n as i32 + 1) - 1.0
    };
    sign * fact * half * zeta[n - 1]
}

/// `ln Γ`, `ψ` and `ψ⁽ⁿ⁾` (n = 0 … 3) at 1 and ½ through `derivative::<U3>`:
/// `ln Γ(1) = 0`, `ln Γ(½) = ln √π` (DLMF 5.4.6), `(ln Γ)′ = ψ` (DLMF
/// 5.2.2), `ψ⁽ⁿ⁾′ = ψ⁽ⁿ⁺¹⁾`, values from [`psi`].
#[test]
fn gamma_family_closed_forms() {
    let mut worst = 0.0f64;
    let mut check_one = |what: String, got: [f64; 4], want: [f64; 4]| {
        for k in 0..4 {
            let e = if want[k] == 0.0 {
                got[k].abs()
            } else {
                rel(got[k], want[k])
            };
            worst = worst.max(e);
            assert!(e <= 1e-14, "{what}, order {k}: {} vs {}", got[k], want[k]);
        }
    };
    for x in [1.0, 0.5] {
        let ln_gamma_x = if x == 1.0 { 0.0 } else { PI.sqrt().ln() };
        check_one(
            format!("ln_gamma({x})"),
            d3(|t| t.ln_gamma(), x),
            [ln_gamma_x, psi(0, x), psi(1, x), psi(2, x)],
        );
        check_one(
            format!("digamma({x})"),
            d3(|t| t.digamma(), x),
            [psi(0, x), psi(1, x), psi(2, x), psi(3, x)],
        );
        for n in 0..=3u32 {
            let m = n as usize;
            check_one(
                format!("polygamma({n}, {x})"),
                d3(|t| t.polygamma(n), x),
                [psi(m, x), psi(m + 1, x), psi(m + 2, x), psi(m + 3, x)],
            );
        }
    }
    eprintln!("[gamma family at 1 and 1/2] worst relative error {worst:.1e}");
}

/// `erf` and `erfc` at 0: the Maclaurin series `erf x = (2/√π)(x − x³/3 + …)`
/// (DLMF 7.6.1) gives `[0, 2/√π, 0, −4/√π, 0]`, and `erfc = 1 − erf`.
#[test]
fn erf_and_erfc_at_zero() {
    let c = FRAC_2_SQRT_PI;
    let e = d4(|t| t.erf(), 0.0);
    let ec = d4(|t| t.erfc(), 0.0);
    let want = [0.0, c, 0.0, -2.0 * c, 0.0];
    for k in 0..5 {
        assert!(rel(e[k], want[k]) <= 1e-15, "erf^({k})(0) = {}", e[k]);
        let wc = if k == 0 { 1.0 } else { -want[k] };
        assert!(rel(ec[k], wc) <= 1e-15, "erfc^({k})(0) = {}", ec[k]);
    }
}
