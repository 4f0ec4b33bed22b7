//! Code written against num-traits' `Float` differentiates unchanged: the
//! test functions of `argmin_testfunctions` (generic over `Float +
//! FromPrimitive`), traced as they are, against the hand-written
//! derivative and Hessian functions of the same crate; a `Float` function
//! to third order against num-dual on the same formula written with
//! num-dual's own trait; and the methods that are compositions (`trunc`,
//! `round`, `%`, the predicates, conversions out of the trace) against std.
//!
//! Tolerance: 1e-12 in the mixed measure of `common::max_err` (the
//! hand-written formulas round differently).

use crate::common;

use argmin_testfunctions as tf;
use common::max_err;
use num_dual::{Dual3_64, DualNum};

use num_traits::{Float, FloatConst, FromPrimitive, NumCast, ToPrimitive};
use optic_ad::array::{Array, TArray, TScalar};
use optic_ad::typenum::U3;
use optic_ad::{Error, Tracer};

fn hv_of(h: &[Vec<f64>], v: &[f64]) -> Vec<f64> {
    h.iter()
        .map(|row| row.iter().zip(v).map(|(a, b)| a * b).sum())
        .collect()
}

/// A function of `n` values given as a function of a slice, on both
/// traces: the gradient and `H v` on the scalar trace, the gradient on
/// the array trace, against the hand-written ones.
fn check(
    name: &str,
    x: &[f64],
    v: &[f64],
    f_tracer: impl Fn(&[Tracer]) -> Tracer + Copy,
    f_array: impl Fn(&[TScalar]) -> TScalar + Copy,
    grad: Vec<f64>,
    hess: Vec<Vec<f64>>,
) {
    let g = optic_ad::gradient(f_tracer, x).unwrap();
    assert!(max_err(&g, &grad) < 1e-12, "{name}: {g:?} vs {grad:?}");
    let hv = optic_ad::hvp(f_tracer, x, v).unwrap();
    let want = hv_of(&hess, v);
    assert!(max_err(&hv, &want) < 1e-12, "{name}: Hv {hv:?} vs {want:?}");
    let ga = crate::common::array_gradient(
        |t: &TArray| {
            let s: Vec<TScalar> = (0..t.len()).map(|i| t.get(i)).collect::<Result<_, _>>()?;
            Ok(f_array(&s))
        },
        x,
    )
    .unwrap();
    assert!(max_err(&ga, &grad) < 1e-12, "{name} (array trace): {ga:?}");
}

macro_rules! two {
    ($f:path) => {
        |x: &[_]| $f(&[x[0], x[1]])
    };
}

#[test]
fn argmin_test_functions_differentiate_unchanged() {
    let x5 = [0.3, -0.7, 1.1, 0.45, -1.3];
    let v5 = [1.0, -0.5, 0.25, 2.0, 0.75];
    check(
        "rosenbrock",
        &x5,
        &v5,
        tf::rosenbrock,
        tf::rosenbrock,
        tf::rosenbrock_derivative(&x5),
        tf::rosenbrock_hessian(&x5),
    );
    check(
        "ackley",
        &x5,
        &v5,
        tf::ackley,
        tf::ackley,
        tf::ackley_derivative(&x5),
        tf::ackley_hessian(&x5),
    );
    check(
        "rastrigin",
        &x5,
        &v5,
        tf::rastrigin,
        tf::rastrigin,
        tf::rastrigin_derivative(&x5),
        tf::rastrigin_hessian(&x5),
    );
    check(
        "levy",
        &x5,
        &v5,
        tf::levy,
        tf::levy,
        tf::levy_derivative(&x5),
        tf::levy_hessian(&x5),
    );
    let x2 = [0.6, -1.2];
    let v2 = [0.8, 1.5];
    let h2 = |h: [[f64; 2]; 2]| h.iter().map(|r| r.to_vec()).collect::<Vec<_>>();
    check(
        "beale",
        &x2,
        &v2,
        two!(tf::beale),
        two!(tf::beale),
        tf::beale_derivative(&x2).to_vec(),
        h2(tf::beale_hessian(&x2)),
    );
    check(
        "himmelblau",
        &x2,
        &v2,
        two!(tf::himmelblau),
        two!(tf::himmelblau),
        tf::himmelblau_derivative(&x2).to_vec(),
        h2(tf::himmelblau_hessian(&x2)),
    );
    check(
        "goldsteinprice",
        &x2,
        &v2,
        two!(tf::goldsteinprice),
        two!(tf::goldsteinprice),
        tf::goldsteinprice_derivative(&x2).to_vec(),
        h2(tf::goldsteinprice_hessian(&x2)),
    );
    let xe = [120.0, -310.0]; // away from the kinks of |·|
    check(
        "eggholder",
        &xe,
        &v2,
        two!(tf::eggholder),
        two!(tf::eggholder),
        tf::eggholder_derivative(&xe).to_vec(),
        h2(tf::eggholder_hessian(&xe)),
    );
}

/// A function written against num-traits only, and the same formula on
/// num-dual's `Dual3_64` (its own methods): the reference.
fn smooth<T: Float + FloatConst + FromPrimitive>(x: T) -> T {
    let c = T::from_f64(0.3).unwrap();
    let y = (x * c).sin().powf(T::from(2).unwrap()) + x.hypot(T::one()).ln_1p();
    y * T::PI().recip() + (x.atan2(T::from_f64(2.0).unwrap()) * x).exp_m1() - x.cbrt()
}

fn smooth_dual(x: Dual3_64) -> Dual3_64 {
    let y = (x * 0.3).sin().powf(2.0) + (x * x + 1.0).sqrt().ln_1p();
    y * std::f64::consts::FRAC_1_PI + ((x / 2.0).atan() * x).exp_m1() - x.cbrt()
}

#[test]
fn a_float_function_to_third_order_against_num_dual() {
    for x in [0.4, 1.7, 3.2] {
        let d = optic_ad::derivative::<U3, _, _>(smooth, x).unwrap();
        let r = smooth_dual(Dual3_64::new(x, 1.0, 0.0, 0.0));
        let want = [r.re, r.v1, r.v2, r.v3];
        assert!(max_err(&d, &want) < 1e-12, "x = {x}: {d:?} vs {want:?}");
        // And on the array trace, Taylor mode.
        let t = crate::common::array_taylor::<U3>(|p: &TArray| Ok(smooth(p.get(0)?)), &[x], &[1.0])
            .unwrap();
        assert!(max_err(&t, &want) < 1e-12, "x = {x}: {t:?} vs {want:?}");
    }
}

#[test]
fn compositions_agree_with_std_and_have_their_derivatives() {
    let xs = [
        -2.5,
        -1.5,
        -0.7,
        -0.5,
        -0.0,
        0.0,
        0.3,
        0.5,
        0.49999999999999994,
        1.5,
        2.5,
        7.25,
        1e17,
    ];
    for &x in &xs {
        let (v, g) = optic_ad::value_and_gradient(|t| Float::trunc(t[0]), &[x]).unwrap();
        assert_eq!(v.to_bits(), x.trunc().to_bits(), "trunc {x}");
        assert_eq!(g, vec![0.0]);
        let (v, g) = optic_ad::value_and_gradient(|t| Float::round(t[0]), &[x]).unwrap();
        assert_eq!(v.to_bits(), x.round().to_bits(), "round {x}");
        assert_eq!(g, vec![0.0]);
        let (v, g) = optic_ad::value_and_gradient(|t| Float::fract(t[0]), &[x]).unwrap();
        assert_eq!(v.to_bits(), x.fract().to_bits(), "fract {x}");
        assert_eq!(g, vec![1.0]);
        for y in [0.75, -2.0, 3.0] {
            let (v, g) = optic_ad::value_and_gradient(|t| t[0] % t[1], &[x, y]).unwrap();
            assert_eq!(v.to_bits(), (x % y).to_bits(), "{x} % {y}: {v}");
            assert_eq!(g, vec![1.0, -(x / y).trunc()], "{x} % {y}");
        }
        // The predicates compare, so they are recorded as guards.
        let c = |t: Tracer| {
            (
                Float::classify(t),
                Float::is_sign_negative(t),
                Float::is_finite(t),
            )
        };
        let mut seen = None;
        let _ = optic_ad::gradient(
            |t| {
                seen = Some(c(t[0]));
                t[0]
            },
            &[x],
        )
        .unwrap();
        assert_eq!(
            seen,
            Some((x.classify(), x.is_sign_negative(), x.is_finite()))
        );
    }
    for x in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e-310] {
        let mut seen = None;
        let _ = optic_ad::gradient(
            |t: &[Tracer]| {
                let a = t[0];
                seen = Some((Float::classify(a), Float::is_nan(a), Float::is_infinite(a)));
                a
            },
            &[x],
        );
        assert_eq!(
            seen,
            Some((x.classify(), x.is_nan(), x.is_infinite())),
            "{x}"
        );
    }
}

/// A function that leaves the trace: `k = ⌊x⌋` as an integer, read with
/// `to_i64`, then used as a number.
fn stairs<T: Float>(x: T) -> T {
    let k = x.to_i64().unwrap_or(0);
    x * <T as NumCast>::from(k).unwrap_or_else(T::zero)
}

#[test]
fn a_conversion_out_of_the_trace_is_guarded() {
    // The gradient at 1.5 is k = 1; built there and evaluated at 2.5, the
    // guard on the converted value fails and the gradient re-traces.
    let mut g = optic_ad::Gradient::new(|t: &[Tracer]| stairs(t[0]), &[1.5]).unwrap();
    let mut grad = [0.0];
    assert_eq!(g.eval(&[1.5], &mut grad).unwrap(), 1.5);
    assert_eq!(grad, [1.0]);
    assert_eq!(g.eval(&[2.5], &mut grad).unwrap(), 5.0);
    assert_eq!(grad, [2.0]);
    // A raw program reports it.
    let p = optic_ad::trace(|t: &[Tracer]| vec![stairs(t[0])], &[1.5]).unwrap();
    assert!(matches!(p.eval(&[2.5]), Err(Error::GuardFailed { .. })));
    assert_eq!(p.eval(&[1.5]).unwrap(), vec![1.5]);
    // to_f64 of a number is the number.
    assert_eq!(ToPrimitive::to_f64(&2.5f64), Some(2.5));
}
