//! `Real` on num-dual's number types at the edges where num-dual's own
//! arithmetic goes wrong (issue 6, defect 4).

use num_dual::{Dual3_64, Dual64};
use optic_ad::Real;

/// num-dual forms n(n−1)(n−2) in i32: for n = 2000 on `Dual3_64` its third
/// part came out as −4.43e9. The true value is
/// n(n−1)(n−2)·1.001ⁿ⁻³ = 2000·1999·1998·1.001¹⁹⁹⁷ ≈ 5.88e10.
#[test]
fn issue_6_powi_large_exponent_dual3() {
    let y = Real::powi(Dual3_64::new(1.001, 1.0, 0.0, 0.0), 2000);
    let want = 2000.0 * 1999.0 * 1998.0 * 1.001f64.powi(1997);
    assert!((y.v3 - want).abs() <= 1e-12 * want, "{} vs {want}", y.v3);
    assert!(y.v3 > 5.8e10 && y.v3 < 5.9e10);
    let want2 = 2000.0 * 1999.0 * 1.001f64.powi(1998);
    assert!((y.v2 - want2).abs() <= 1e-12 * want2);
}

/// A negative power at 0 is ∞ (as for f64 and the tracer), not NaN.
#[test]
fn issue_6_powi_negative_at_zero_dual64() {
    let y = Real::powi(Dual64::new(0.0, 1.0), -1);
    assert_eq!(y.re, f64::INFINITY);
    assert_eq!(0.0f64.powi(-1), f64::INFINITY);
}
