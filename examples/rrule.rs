//! A user-defined primitive given by its value and its pullback (the seed's
//! `rrule`, seed 000 Snippets 18–20), differentiated to second and third
//! order.
//!
//! The primitive is the numerically stable softplus
//! `softplus(x) = log(1 + eˣ) = max(x, 0) + log1p(e^{−|x|})`, whose value
//! must not be traced naively (`ln(1 + exp(x))` overflows for x ≳ 710).
//! Its pullback is `x̄ = σ(x) ȳ` with the logistic written as
//! `σ(x) = exp(−softplus(−x))`: the pullback calls the rule itself, and it
//! is written against the program builder, so ∂⃖ differentiates it again
//! and one rule serves every order. The obvious `σ(x) = ½(1 + tanh(x/2))`
//! cancels to exactly 0 for x ≲ −37, and every derivative of order ≥ 1
//! then loses all relative accuracy in the left tail; this form keeps
//! `σ′ = σ(x)σ(−x)` free of cancellation on both sides.
//!
//! Independent check: the closed forms `softplus′ = σ(x)`,
//! `softplus″ = σ(x)σ(−x)`, `softplus‴ = σ(x)σ(−x)(σ(−x) − σ(x))`, with σ
//! evaluated directly in f64.
//!
//! Run with `cargo run --example rrule`.

use std::sync::OnceLock;

use optic_ad::{derivative, gradient, trace, Builder, CustomRule, Real, ScalarRule, Var};
use typenum::U3;

/// The one shared handle to the rule, so that its pullback can call it.
pub fn softplus_rule() -> &'static CustomRule {
    static RULE: OnceLock<CustomRule> = OnceLock::new();
    RULE.get_or_init(|| CustomRule::new(Softplus))
}

/// softplus as a primitive: value plus pullback.
pub struct Softplus;

impl ScalarRule for Softplus {
    fn name(&self) -> &str {
        "softplus"
    }

    fn value(&self, x: f64) -> f64 {
        x.max(0.0) + (-x.abs()).exp().ln_1p()
    }

    fn pullback(&self, b: &mut Builder, x: Var, _y: Var, ct: Var) -> Var {
        // σ(x) = exp(−softplus(−x)), then x̄ = σ(x) ȳ.
        let minus_x = b.neg(x);
        let sp = b.custom(softplus_rule(), &[minus_x]);
        let minus_sp = b.neg(sp);
        let sigma = b.exp(minus_sp);
        b.mul(ct, sigma)
    }
}

/// The logistic function in plain f64, stable on both sides.
pub fn logistic(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// One row of the comparison: the point, the library's derivatives up to
/// order 3, and the closed forms.
pub struct Row {
    /// The point.
    pub x: f64,
    /// `[f, f′, f″, f‴]` from `derivative::<U3>`.
    pub got: [f64; 4],
    /// `[f, f′, f″, f‴]` from the closed forms.
    pub want: [f64; 4],
}

/// Differentiates softplus to third order at each point.
///
/// # Errors
///
/// Any library error (none are expected).
pub fn run(points: &[f64]) -> optic_ad::Result<Vec<Row>> {
    let softplus = softplus_rule();
    let mut rows = Vec::new();
    for &x in points {
        let d = derivative::<U3, _>(|t| t.apply_rule(softplus), x)?;
        let (s, sm) = (logistic(x), logistic(-x));
        rows.push(Row {
            x,
            got: [d[0], d[1], d[2], d[3]],
            want: [Softplus.value(x), s, s * sm, s * sm * (sm - s)],
        });
    }
    Ok(rows)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let softplus = softplus_rule();
    // The rule inside a traced program: one instruction, printed by name.
    let p = trace(|x| vec![x[0].apply_rule(softplus) * x[1]], &[0.5, 2.0])?;
    println!("traced program:\n{p}\n");
    let g = gradient(|x| x[0].apply_rule(softplus) * x[1], &[0.5, 2.0])?;
    println!("∇[softplus(x₀)·x₁] at (0.5, 2) = {g:?}  (closed form [2σ(0.5), softplus(0.5)] = [{}, {}])\n", 2.0 * logistic(0.5), Softplus.value(0.5));

    let points = [-40.0, -3.0, -0.5, 0.0, 0.5, 3.0, 40.0, 800.0];
    let rows = run(&points)?;
    println!(
        "{:>7} {:>5} {:>24} {:>24} {:>9}",
        "x", "order", "optic", "closed form", "rel diff"
    );
    let mut worst = 0.0_f64;
    for r in &rows {
        for k in 0..4 {
            let scale = r.want[k].abs().max(f64::MIN_POSITIVE);
            let rel = (r.got[k] - r.want[k]).abs() / scale;
            worst = worst.max(rel);
            println!(
                "{:>7} {:>5} {:>24.16e} {:>24.16e} {:>9.1e}",
                r.x, k, r.got[k], r.want[k], rel
            );
        }
    }
    println!("largest relative difference: {worst:.1e}");
    Ok(())
}
