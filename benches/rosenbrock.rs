//! Rosenbrock's function written with the array API, shared by the
//! benchmarks (`ad.rs`) and the peak-memory example (`build_rss.rs`).

use optic_ad::array::Array;

/// `Σᵢ 100 (xᵢ₊₁ − xᵢ²)² + (1 − xᵢ)²` over `i < n − 1` (J. Nocedal and
/// S. J. Wright, "Numerical Optimization", 2nd ed., eq. 2.22, chained):
/// one map over two slices and a sum.
pub fn rosenbrock_array<A: Array>(x: &A) -> optic_ad::Result<A::Scalar> {
    let n = x.len();
    let (a, b) = (x.slice(0, n - 1)?, x.slice(1, n - 1)?);
    Ok(a.map2(&b, |a, b| {
        let t = b - a * a;
        let u = -a + 1.0;
        t * t * 100.0 + u * u
    })?
    .sum())
}
