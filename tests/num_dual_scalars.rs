//! `Real` on num-dual's number types at the edges where num-dual's own
//! arithmetic goes wrong (issue 6, defect 4): its `powi` forms the
//! coefficients `n(n−1)(n−2)` in i32.

use num_dual::{Dual3_64, Dual64};
use optic_ad::{derivative, Real, Tracer};
use typenum::{U1, U3};

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(f64::MIN_POSITIVE)
}

fn d3(f: impl Fn(Tracer) -> Tracer, x: f64) -> [f64; 4] {
    let d = derivative::<U3, _, _>(f, x).expect("derivative::<U3>");
    [d[0], d[1], d[2], d[3]]
}

/// num-dual forms `n(n−1)(n−2)` in i32, which overflows for `n = 2000`
/// (its own `powi` gives v3 ≈ −4.43e9); through `Real` the coefficients
/// are formed in f64: `v3 = 2000·1999·1998·1.001¹⁹⁹⁷ ≈ 5.88e10`.
#[test]
fn issue_6_powi_large_exponent_dual3() {
    let x = 1.001f64;
    let d = <Dual3_64 as Real>::powi(Dual3_64::new(x, 1.0, 0.0, 0.0), 2000);
    let want = [
        x.powi(2000),
        2000.0 * x.powi(1999),
        2000.0 * 1999.0 * x.powi(1998),
        2000.0 * 1999.0 * 1998.0 * x.powi(1997),
    ];
    let got = [d.re, d.v1, d.v2, d.v3];
    for k in 0..4 {
        assert!(
            rel(got[k], want[k]) <= 1e-12,
            "part {k}: {got:?} vs {want:?}"
        );
    }
    assert!((5.87e10..5.89e10).contains(&d.v3), "v3 = {}", d.v3);
    // The same through the tracer.
    let t = d3(|t| t.powi(2000), x);
    for k in 0..4 {
        assert!(
            rel(t[k], want[k]) <= 1e-12,
            "derivative::<U3>: {t:?} vs {want:?}"
        );
    }
}

/// num-dual's `powi` gives NaN for a negative power at 0; through `Real`,
/// `0⁻¹ = +∞` as for f64 and the tracer, and the derivative `−0⁻² = −∞`.
#[test]
fn issue_6_powi_negative_at_zero_dual64() {
    let d = <Dual64 as Real>::powi(Dual64::new(0.0, 1.0), -1);
    assert_eq!(d.re, f64::INFINITY, "{d:?}");
    assert_eq!(<f64 as Real>::powi(0.0, -1), f64::INFINITY);
    let t = derivative::<U1, _, _>(|t| t.powi(-1), 0.0).unwrap();
    assert_eq!(t[0], f64::INFINITY);
    assert_eq!(d.eps, t[1], "{d:?} vs derivative::<U1> {t:?}");
    assert_eq!(d.eps, f64::NEG_INFINITY);
}
