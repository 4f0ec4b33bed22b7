//! The first 30 Taylor coefficients of functions with known series,
//! computed in Taylor mode and printed beside the series.
//!
//! * `atan x = x − x³/3 + x⁵/5 − …`: `c_k = (−1)^{(k−1)/2} / k` for odd `k`,
//!   0 for even `k` (Abramowitz & Stegun 4.4.42);
//! * `1/√(1 − 4x) = Σ C(2k, k) xᵏ`, the central binomial coefficients (the
//!   binomial series, A&S 3.6.9), integers that pass 2⁵³ at `k = 28`;
//! * `eˣ sin x = Σ Im((1 + i)ᵏ) xᵏ / k!` (the imaginary part of
//!   `e^{(1+i)x}`; `(1 + i)ᵏ` is computed exactly in Gaussian integers).
//!   Its jet is the convolution of those of `eˣ` and `sin x`, whose terms
//!   cancel: their absolute values sum to `2ᵏ/k!` against a result of at
//!   most `2^{k/2}/k!`, so the relative error grows like `ε 2^{k/2}`,
//!   about 1e-12 at `k = 30` (and the zero coefficients, `k ≡ 0 mod 4`,
//!   come out as about `ε 2ᵏ/k!`).
//!
//! Each function is traced once; its Taylor program propagates a jet of
//! degree 30 along `x(t) = t` in one pass (`O(30²)` operations per
//! primitive), where the nested ∂⃖ construction would need 2³⁰ − 1
//! closures.
//!
//! Run: `cargo run --release --example taylor_series`.

use optic_ad::functor::TaylorProgram;
use optic_ad::{trace, Real, Result};

/// The degree of the printed series.
pub const DEGREE: usize = 30;

/// One coefficient: Taylor mode beside the known series.
pub struct Row {
    /// The function.
    pub function: &'static str,
    /// The power of `x`.
    pub k: usize,
    /// The coefficient from Taylor mode.
    pub got: f64,
    /// The coefficient from the known series.
    pub want: f64,
}

/// `C(2k, k)` in f64, by the product `Π (k + j)/j`.
fn central_binomial(k: usize) -> f64 {
    (1..=k).fold(1.0, |c, j| c * (k + j) as f64 / j as f64)
}

/// The jet of degree [`DEGREE`] of `f` at 0 along `x(t) = t`.
fn coefficients(f: impl Fn(optic_ad::Tracer) -> optic_ad::Tracer) -> Result<Vec<f64>> {
    let p = trace(|x| vec![f(x[0])], &[0.0])?;
    let mut t = TaylorProgram::new(&p, DEGREE)?;
    let mut input = vec![0.0; DEGREE + 1];
    input[1] = 1.0;
    let mut out = vec![0.0; DEGREE + 1];
    t.eval(&input, &mut out)?;
    Ok(out)
}

/// All rows of the three series.
///
/// # Errors
///
/// Errors of tracing or evaluation (none for these functions).
pub fn run() -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let atan = coefficients(|x| x.atan())?;
    for (k, &got) in atan.iter().enumerate() {
        let want = if k % 2 == 1 {
            let sign = if (k / 2) % 2 == 0 { 1.0 } else { -1.0 };
            sign / k as f64
        } else {
            0.0
        };
        rows.push(Row {
            function: "atan x",
            k,
            got,
            want,
        });
    }
    let binomial = coefficients(|x| (1.0 - x * 4.0).sqrt().recip())?;
    for (k, &got) in binomial.iter().enumerate() {
        rows.push(Row {
            function: "1/√(1 − 4x)",
            k,
            got,
            want: central_binomial(k),
        });
    }
    let exp_sin = coefficients(|x| x.exp() * x.sin())?;
    let mut fact = 1.0;
    // (1 + i)ᵏ = re + i·im, exact in f64 for k ≤ 30 (|re|, |im| ≤ 2¹⁵).
    let (mut re, mut im) = (1.0_f64, 0.0_f64);
    for (k, &got) in exp_sin.iter().enumerate() {
        if k > 0 {
            fact *= k as f64;
            (re, im) = (re - im, re + im);
        }
        rows.push(Row {
            function: "eˣ sin x",
            k,
            got,
            want: im / fact,
        });
    }
    Ok(rows)
}

fn main() -> Result<()> {
    let rows = run()?;
    let mut current = "";
    for r in &rows {
        if r.function != current {
            current = r.function;
            println!("\n{current}: Taylor coefficients at 0, degree {DEGREE}");
            println!(
                "{:>3}  {:>24}  {:>24}  {:>9}",
                "k", "Taylor mode", "known series", "rel. err"
            );
        }
        let err = if r.want == 0.0 {
            r.got.abs()
        } else {
            ((r.got - r.want) / r.want).abs()
        };
        println!(
            "{:>3}  {:>24.17e}  {:>24.17e}  {:>9.1e}",
            r.k, r.got, r.want, err
        );
    }
    Ok(())
}
