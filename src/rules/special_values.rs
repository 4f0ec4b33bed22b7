//! f64 values of the special functions.
//!
//! `erf`, `erfc` and `ln Γ` come from `libm` (a port of musl's, the same
//! code std's own math falls back to). No well-kept crate provides the
//! polygamma functions of every order on the whole real line, so `ψ⁽ⁿ⁾` is
//! computed here from three classical identities (NIST DLMF §5.15):
//!
//! * the series `ψ⁽ⁿ⁾(x) = (−1)ⁿ⁺¹ n! Σₖ (x + k)⁻⁽ⁿ⁺¹⁾` (5.15.1), summed
//!   directly until `x + k` is large, then
//! * the asymptotic expansion (5.15.8, and 5.11.2 for `ψ`) for the tail,
//!   with Bernoulli numbers `B₂ₖ`, and
//! * the reflection formula `ψ⁽ⁿ⁾(x) = (−1)ⁿ ψ⁽ⁿ⁾(1 − x) − πⁿ⁺¹ Pₙ(cot πx)`
//!   for `x < 0`, from differentiating `ψ(1 − x) − ψ(x) = π cot πx`
//!   (5.5.4) `n` times, where `P₀(c) = c` and
//!   `Pₖ₊₁(c) = −(1 + c²) Pₖ′(c)`, so that `dⁿ/dyⁿ cot y = Pₙ(cot y)`.
//!
//! Poles (`x = 0, −1, −2, …`): `ψ⁽ⁿ⁾` is `+∞` for odd `n` (it tends to `+∞`
//! from both sides) and NaN for even `n` (the sides disagree).

/// The error function.
pub(crate) fn erf(x: f64) -> f64 {
    libm::erf(x)
}

/// The complementary error function.
pub(crate) fn erfc(x: f64) -> f64 {
    libm::erfc(x)
}

/// `ln |Γ(x)|`.
pub(crate) fn ln_gamma(x: f64) -> f64 {
    libm::lgamma(x)
}

/// `B₂ₖ / (2k)!`, k = 1, 2, …
const BERNOULLI_OVER_FACTORIAL: [f64; 11] = [
    0.08333333333333333,
    -0.001388888888888889,
    3.306878306878307e-05,
    -8.267195767195768e-07,
    2.08767569878681e-08,
    -5.284190138687493e-10,
    1.3382536530684679e-11,
    -3.3896802963225827e-13,
    8.586062056277845e-15,
    -2.174868698558062e-16,
    5.5090028283602295e-18,
];

/// `B₂ₖ / (2k)`, k = 1, 2, …: the coefficients of ψ's expansion.
const BERNOULLI_OVER_2K: [f64; 7] = [
    0.08333333333333333,
    -0.008333333333333333,
    0.003968253968253968,
    -0.004166666666666667,
    0.007575757575757576,
    -0.021092796092796094,
    0.08333333333333333,
];

/// The digamma function `ψ(x) = Γ′(x)/Γ(x)`.
pub(crate) fn digamma(x: f64) -> f64 {
    polygamma(0, x)
}

/// The polygamma function `ψ⁽ⁿ⁾(x)`.
///
/// Accurate to a few ulps away from the zeros of `ψ⁽ⁿ⁾` for `x > 0` and
/// `n ≤ 100`; above, the terms are formed through `ln Γ(n + 1)`, which costs
/// about `n ε` relative. For `x < 0` the reflection adds the rounding of
/// `cot πx`, so the error grows near the poles, and for `n > 120` its
/// polynomial overflows and the result is NaN. The cost is bounded for
/// every `n` and `x`.
pub(crate) fn polygamma(n: u32, x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x == f64::INFINITY {
        return match n {
            0 => f64::INFINITY,
            // (−1)ⁿ⁺¹ · 0
            _ if n % 2 == 1 => 0.0,
            _ => -0.0,
        };
    }
    if x == f64::NEG_INFINITY {
        return f64::NAN;
    }
    if x <= 0.0 && x == x.round() {
        return if n % 2 == 1 { f64::INFINITY } else { f64::NAN };
    }
    if x < 0.0 {
        return reflect(n, x);
    }
    positive(n, x)
}

/// `ψ⁽ⁿ⁾(x)` for `x > 0`: the series summed until `x + k` is past the
/// threshold, then the asymptotic expansion.
fn positive(n: u32, x: f64) -> f64 {
    if n == 0 {
        let mut acc = 0.0;
        let mut z = x;
        while z < 10.0 {
            acc -= 1.0 / z;
            z += 1.0;
        }
        let r = 1.0 / (z * z);
        let mut s = 0.0;
        for c in BERNOULLI_OVER_2K.iter().rev() {
            s = (s + c) * r;
        }
        return acc + z.ln() - 0.5 / z - s;
    }
    let nf = f64::from(n);
    if n > 100 {
        return large_order(n, x);
    }
    let threshold = 20.0 + nf;
    // Σ n! (x + k)⁻⁽ⁿ⁺¹⁾ over the shifted terms, then (n−1)! z⁻ⁿ S(z).
    let ln_fact_n1 = libm::lgamma(nf); // ln (n−1)!
    let term = |z: f64, power: f64, ln_coef: f64| -> f64 {
        if n <= 20 {
            ln_coef.exp() * z.powf(-power)
        } else {
            (ln_coef - power * z.ln()).exp()
        }
    };
    let ln_fact_n = ln_fact_n1 + nf.ln();
    let mut sum = 0.0;
    let mut z = x;
    while z < threshold {
        sum += term(z, nf + 1.0, ln_fact_n);
        z += 1.0;
    }
    // S(z) = 1 + n/(2z) + Σₖ B₂ₖ/(2k)! · n(n+1)…(n+2k−1) / z²ᵏ
    let r = 1.0 / (z * z);
    let mut s = 1.0 + nf / (2.0 * z);
    let mut rising = 1.0;
    let mut zk = 1.0;
    for (k, c) in BERNOULLI_OVER_FACTORIAL.iter().enumerate() {
        let k = k as f64;
        rising *= (nf + 2.0 * k) * (nf + 2.0 * k + 1.0);
        zk *= r;
        s += c * rising * zk;
    }
    let tail = term(z, nf, ln_fact_n1) * s;
    let v = sum + tail;
    if n % 2 == 1 {
        v
    } else {
        -v
    }
}

/// `ψ⁽ⁿ⁾(x)` for `x > 0` and `n > 100`: the series summed directly. Its
/// terms `(x + k)⁻⁽ⁿ⁺¹⁾` fall by at least `(x/(x + 1))ⁿ⁺¹` each, so a few
/// terms reach full precision (shifting to the asymptotic range would take
/// about `n` steps).
fn large_order(n: u32, x: f64) -> f64 {
    let nf = f64::from(n);
    let ln_fact = libm::lgamma(nf + 1.0);
    let mut sum = 0.0;
    let mut k = 0.0;
    loop {
        let term = (ln_fact - (nf + 1.0) * (x + k).ln()).exp();
        sum += term;
        if term <= 1e-17 * sum || !sum.is_finite() || k > 1e4 {
            break;
        }
        k += 1.0;
    }
    if n % 2 == 1 {
        sum
    } else {
        -sum
    }
}

/// `ψ⁽ⁿ⁾(x)` for `x < 0` (not a pole), by reflection.
fn reflect(n: u32, x: f64) -> f64 {
    if n > 120 {
        return f64::NAN;
    }
    // cot πx = cot πt with t = x − round(x) ∈ [−½, ½], reduced exactly.
    let t = x - x.round();
    let (s, c) = (std::f64::consts::PI * t).sin_cos();
    let cot = c / s;
    // Pₙ by the recurrence, coefficients in increasing powers of c.
    let mut p: Vec<f64> = vec![0.0, 1.0];
    for _ in 0..n {
        // P′, then −(1 + c²) P′.
        let d: Vec<f64> = p
            .iter()
            .enumerate()
            .skip(1)
            .map(|(i, a)| a * i as f64)
            .collect();
        let mut q = vec![0.0; d.len() + 2];
        for (i, a) in d.iter().enumerate() {
            q[i] -= a;
            q[i + 2] -= a;
        }
        p = q;
    }
    let pn = p.iter().rev().fold(0.0, |acc, a| acc * cot + a);
    let pi_pow = std::f64::consts::PI.powi(n as i32 + 1);
    let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
    sign * positive(n, 1.0 - x) - pi_pow * pn
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(a: f64, b: f64) -> f64 {
        (a - b).abs() / b.abs().max(1e-300)
    }

    /// Closed forms (NIST DLMF 5.4.12–16, 5.15.2–3; ζ values from DLMF
    /// 25.6.1–2 and 25.6.3).
    #[test]
    fn closed_forms() {
        let euler = 0.577_215_664_901_532_9_f64;
        let pi = std::f64::consts::PI;
        let zeta3 = 1.202_056_903_159_594_3_f64;
        let cases: [(u32, f64, f64); 10] = [
            (0, 1.0, -euler),
            (0, 0.5, -euler - 2.0 * 2f64.ln()),
            (0, 2.0, 1.0 - euler),
            (0, 100.0, 4.600_161_852_738_087),
            (1, 1.0, pi * pi / 6.0),
            (1, 0.5, pi * pi / 2.0),
            (2, 1.0, -2.0 * zeta3),
            (3, 1.0, pi.powi(4) / 15.0),
            (1, -0.5, pi * pi / 2.0 + 4.0),
            (0, -0.5, -euler - 2.0 * 2f64.ln() + 2.0),
        ];
        for (n, x, want) in cases {
            let got = polygamma(n, x);
            // Relative where the value is away from 0; absolute near a
            // zero of ψ (ψ(1.5) ≈ 0.036 is a sum of terms of size ~2).
            let err = (got - want).abs() / want.abs().max(1.0);
            assert!(err < 4e-15, "ψ^({n})({x}) = {got}, want {want}");
        }
    }

    /// The recurrence ψ⁽ⁿ⁾(x + 1) = ψ⁽ⁿ⁾(x) + (−1)ⁿ n! / xⁿ⁺¹ (DLMF 5.15.5)
    /// across the threshold and for negative x, at orders 0–8.
    #[test]
    fn recurrence() {
        for n in 0..=8u32 {
            let fact: f64 = (1..=n).map(f64::from).product();
            for &x in &[0.3, 1.7, 4.2, 9.5, 27.9, 60.0, -0.3, -2.6, -7.45] {
                let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
                let lhs = polygamma(n, x + 1.0);
                let rhs = polygamma(n, x) + sign * fact / x.powi(n as i32 + 1);
                let scale = polygamma(n, x).abs().max(lhs.abs()).max(1.0);
                assert!(
                    (lhs - rhs).abs() / scale < 1e-13,
                    "n={n} x={x}: {lhs} vs {rhs}"
                );
            }
        }
    }

    #[test]
    fn edges() {
        assert!(polygamma(0, 0.0).is_nan());
        assert_eq!(polygamma(1, -3.0), f64::INFINITY);
        assert!(polygamma(2, -3.0).is_nan());
        assert_eq!(polygamma(0, f64::INFINITY), f64::INFINITY);
        assert_eq!(polygamma(1, f64::INFINITY), 0.0);
        assert!(polygamma(0, f64::NEG_INFINITY).is_nan());
        assert!(polygamma(3, f64::NAN).is_nan());
        // Large order: ψ⁽³⁰⁾(2) = −30! (ζ(31) − 1) ≈ −30! · 2⁻³¹.
        let fact30: f64 = (1..=30).map(f64::from).product();
        let zeta31_m1: f64 = (2..200).map(|k| f64::from(k).powi(-31)).sum();
        let (got, want) = (polygamma(30, 2.0), -fact30 * zeta31_m1);
        assert!(rel(got, want) < 1e-13, "{got} vs {want}");
        // Huge orders finish (the shift to the asymptotic range would take
        // about n steps): ψ⁽ⁿ⁾(2) for odd n ≥ n! 2⁻⁽ⁿ⁺¹⁾ overflows.
        assert_eq!(polygamma(2_000_000_001, 2.0), f64::INFINITY);
        assert_eq!(polygamma(2_000_000_000, 2.0), f64::NEG_INFINITY);
        // The direct sum used above order 100 agrees with the shifted
        // asymptotic expansion where both apply.
        for n in [30u32, 61, 100] {
            for x in [0.5, 2.0, 7.25] {
                let (a, b) = (large_order(n, x), positive(n, x));
                assert!(rel(a, b) < 1e-12, "n={n} x={x}: {a:e} vs {b:e}");
            }
        }
    }
}
