//! A user-defined primitive given by its value and its pullback (an `rrule`:
//! K. Fischer, "∂P.jl terminology and notation guide", Snippets 18–20),
//! differentiated to second and third order.
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
//! The second rule takes two arguments: `lse(a, b) = ln(eᵃ + eᵇ)`, written
//! stably as `max(a, b) + ln_1p(e^{−|a−b|})`, with the pullback
//! `(ā, b̄) = (ȳ p, ȳ q)` with the softmax weights `p = e^{a−y}` and
//! `q = e^{b−y} = 1 − p`. They are computed as `p = e^{−lse(0, b−a)}` (the
//! pullback calls the rule itself), from the difference of the arguments:
//! computed from `y` instead, they inherit `y`'s absolute rounding, which
//! the second derivative amplifies to about 1e-10 relative at
//! `(−800, −790)`.
//! Along a direction `(u, v)`, with `w = u − v`, the closed forms are
//! `d/dt = p u + q v`, `d²/dt² = p q w²`, `d³/dt³ = p q (q − p) w³`.
//!
//! Run with `cargo run --example rrule`.

use std::sync::OnceLock;

use optic_ad::typenum::U3;
use optic_ad::{derivative, gradient, trace, Builder, CustomRule, Real, ScalarRule, Var};

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

/// `ln(eᵃ + eᵇ)` in f64, without overflow.
pub fn lse(a: f64, b: f64) -> f64 {
    a.max(b) + (-(a - b).abs()).exp().ln_1p()
}

/// The one shared handle to the two-argument rule, so that its pullback
/// can call it.
pub fn lse_rule() -> &'static CustomRule {
    static RULE: OnceLock<CustomRule> = OnceLock::new();
    RULE.get_or_init(|| CustomRule::new(LogSumExp))
}

/// `lse(a, b) = ln(eᵃ + eᵇ)` as a two-argument primitive.
pub struct LogSumExp;

impl optic_ad::Rule for LogSumExp {
    fn name(&self) -> &str {
        "logsumexp"
    }

    fn arity(&self) -> usize {
        2
    }

    fn value(&self, x: &[f64]) -> f64 {
        lse(x[0], x[1])
    }

    fn pullback(&self, b: &mut Builder, x: &[Var], _y: Var, ct: Var) -> Vec<Var> {
        // The softmax weights e^{a−y} = e^{−lse(0, b−a)} and
        // e^{b−y} = e^{−lse(0, a−b)}: from the difference of the arguments,
        // not from y, whose absolute rounding (ulp(y)) would otherwise be
        // amplified where a weight is close to 1.
        let zero = b.constant(0.0);
        let (xa, xb) = (x[0], x[1]);
        [(xa, xb), (xb, xa)]
            .into_iter()
            .map(|(own, other)| {
                let d = b.sub(other, own);
                let s = b.custom(lse_rule(), &[zero, d]);
                let m = b.neg(s);
                let w = b.exp(m);
                b.mul(ct, w)
            })
            .collect()
    }
}

/// One row of the two-argument check: the point `(a, b)`, the direction
/// `(u, v)`, and `[f, f′, f″, f‴]` of `t ↦ lse(a + t u, b + t v)` at 0 from
/// the library and from the closed forms.
pub struct LseRow {
    /// The point.
    pub at: (f64, f64),
    /// The direction.
    pub dir: (f64, f64),
    /// From `derivative::<U3>` of the restriction to the line.
    pub got: [f64; 4],
    /// From the closed forms.
    pub want: [f64; 4],
}

/// Differentiates `lse` to third order along `dir` at each point.
///
/// # Errors
///
/// Any library error (none are expected).
pub fn run_lse(points: &[(f64, f64)], dir: (f64, f64)) -> optic_ad::Result<Vec<LseRow>> {
    let rule = lse_rule();
    let (u, v) = dir;
    let mut rows = Vec::new();
    for &(a, b) in points {
        let d = derivative::<U3, _, _>(|t| Real::apply_rule_n(rule, &[t * u + a, t * v + b]), 0.0)?;
        let y = lse(a, b);
        // p = σ(a − b), q = σ(b − a), with σ evaluated directly in f64.
        let (p, q) = (logistic(a - b), logistic(b - a));
        let w = u - v;
        rows.push(LseRow {
            at: (a, b),
            dir,
            got: [d[0], d[1], d[2], d[3]],
            want: [y, p * u + q * v, p * q * w * w, p * q * (q - p) * w * w * w],
        });
    }
    Ok(rows)
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
        let d = derivative::<U3, _, _>(|t| t.apply_rule(softplus), x)?;
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
    println!("largest relative difference: {worst:.1e}\n");

    // A rule of two arguments, where ln(eᵃ + eᵇ) would overflow.
    let lse = CustomRule::new(LogSumExp);
    let g = gradient(
        |x| Real::apply_rule_n(&lse, &[x[0], x[1]]),
        &[1000.0, 999.0],
    )?;
    println!(
        "∇lse at (1000, 999) = {g:?}  (closed form [σ(1), σ(−1)] = [{}, {}])",
        logistic(1.0),
        logistic(-1.0)
    );
    let points = [
        (0.0, 0.0),
        (1.0, -2.0),
        (-3.0, 0.5),
        (1000.0, 999.0),
        (-800.0, -790.0),
    ];
    println!(
        "{:>16} {:>5} {:>24} {:>24} {:>9}",
        "(a, b)", "order", "optic", "closed form", "rel diff"
    );
    let mut worst = 0.0_f64;
    for r in run_lse(&points, (1.0, -0.5))? {
        for k in 0..4 {
            let scale = r.want[k].abs().max(f64::MIN_POSITIVE);
            let rel = (r.got[k] - r.want[k]).abs() / scale;
            worst = worst.max(rel);
            println!(
                "{:>16} {:>5} {:>24.16e} {:>24.16e} {:>9.1e}",
                format!("({}, {})", r.at.0, r.at.1),
                k,
                r.got[k],
                r.want[k],
                rel
            );
        }
    }
    println!("largest relative difference (lse along (1, −0.5)): {worst:.1e}");
    Ok(())
}
