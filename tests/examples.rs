//! Runs the examples' checks as tests: each example keeps its computation in
//! a `run` function, included here.

#[path = "../examples/sin_higher_order.rs"]
#[allow(dead_code)]
mod sin_higher_order;

#[path = "../examples/taylor_series.rs"]
#[allow(dead_code)]
mod taylor_series;

use crate::rrule;

use approx::assert_relative_eq;

#[test]
fn sin_higher_order_rows_match_closed_forms_to_1e_13() {
    for &x in &[-2.5, 0.0, 0.7, 3.0] {
        let rows = sin_higher_order::run(x).unwrap();
        assert_eq!(rows.len(), 1 + 3 + 1 + 7 + 1);
        for r in rows {
            assert!(
                (r.got - r.want).abs() <= 1e-13,
                "{} at x = {x}: {} vs {}",
                r.label,
                r.got,
                r.want
            );
        }
    }
}

/// softplus and its first three derivatives against the closed forms
/// σ(x), σ(x)σ(−x), σ(x)σ(−x)(σ(−x) − σ(x)) over the whole range, tails
/// included. Each value is a handful of correctly rounded operations, so
/// 1e-14 relative (about 50 ulp) is a strict bound.
#[test]
fn rrule_softplus_matches_closed_forms_to_third_order() {
    let pts: Vec<f64> = (-60..=60)
        .map(|i| f64::from(i) * 0.75)
        .chain([700.0, 800.0, -700.0])
        .collect();
    for r in rrule::run(&pts).unwrap() {
        for k in 0..4 {
            assert_relative_eq!(r.got[k], r.want[k], epsilon = 1e-300, max_relative = 1e-14);
        }
    }
}

#[test]
fn rrule_two_argument_logsumexp_matches_closed_forms_to_third_order() {
    let mut pts = Vec::new();
    for i in -8..=8 {
        for j in -8..=8 {
            pts.push((f64::from(i) * 0.9, f64::from(j) * 1.3));
        }
    }
    pts.extend([(1000.0, 999.0), (-800.0, -790.0), (700.0, -700.0)]);
    for dir in [(1.0, -0.5), (0.3, 2.0), (1.0, 1.0)] {
        for r in rrule::run_lse(&pts, dir).unwrap() {
            for k in 0..4 {
                assert_relative_eq!(r.got[k], r.want[k], epsilon = 1e-13, max_relative = 1e-12);
            }
            assert_eq!(r.dir, dir);
        }
    }
}

/// The stable form matters: a rule that writes σ = ½(1 + tanh(x/2)) would
/// return 0 for softplus′(−40) ≈ 4.2e-18.
#[test]
fn rrule_left_tail_keeps_relative_accuracy() {
    let r = &rrule::run(&[-40.0]).unwrap()[0];
    assert!(r.got[1] > 0.0);
    assert_relative_eq!(
        r.got[1],
        (-40.0_f64).exp() / (1.0 + (-40.0_f64).exp()),
        max_relative = 1e-14
    );
}

/// The example's three series to degree 30 against the known series. The
/// bounds follow the error model in the example's docs: `atan` and the
/// central binomial coefficients come from short recurrences (a few ulps;
/// 1e-14 relative), `eˣ sin x` from a convolution whose terms cancel by up
/// to `2^{k/2}`, so its error is bounded by `16 ε 2ᵏ/k!` absolute.
#[test]
fn taylor_series_matches_known_series_to_degree_30() {
    let rows = taylor_series::run().unwrap();
    assert_eq!(rows.len(), 3 * (taylor_series::DEGREE + 1));
    let mut fact = 1.0;
    for r in rows {
        if r.function == "eˣ sin x" {
            if r.k > 0 {
                fact *= r.k as f64;
            }
            let bound = 16.0 * f64::EPSILON * 2f64.powi(r.k as i32) / fact;
            assert!(
                (r.got - r.want).abs() <= bound,
                "{} k = {}: {} vs {}",
                r.function,
                r.k,
                r.got,
                r.want
            );
        } else {
            assert!(
                (r.got - r.want).abs() <= 1e-14 * r.want.abs(),
                "{} k = {}: {} vs {}",
                r.function,
                r.k,
                r.got,
                r.want
            );
        }
    }
}
