//! ∂⃖² sin and ∂⃖³ sin, closure by closure, next to the closed forms of
//! K. Fischer, "∂P.jl terminology and notation guide" (Snippet 15, Figs. 5–6;
//! see also the book's chapter "Higher order and the nested-closure
//! encoding").
//!
//! Run with `cargo run --example sin_higher_order [x]`.

use optic_ad::typenum::{U2, U3};
use optic_ad::{trace, Nested, Real};

/// One printed row: closure name, value from the library, closed form.
pub struct Row {
    /// Which closure, with its closed form in words.
    pub label: String,
    /// The value the nested optic returned.
    pub got: f64,
    /// The closed form's value.
    pub want: f64,
}

/// Evaluates the order-2 closures at seeds (Δ, Δ′, Δ″) and the order-3
/// closures at seeds d₁ … d₇, returning every row.
///
/// # Errors
///
/// Any library error (none are expected for finite `x`).
pub fn run(x: f64) -> optic_ad::Result<Vec<Row>> {
    let (s, c) = x.sin_cos();
    let p = trace(|x| vec![x[0].sin()], &[x])?;
    let mut rows = Vec::new();
    let mut row = |label: &str, got: f64, want: f64| {
        rows.push(Row {
            label: label.to_string(),
            got,
            want,
        })
    };

    // Order 2 (Snippet 15) with Δ = 1.5, Δ′ = 0.5, Δ″ = 2.
    let (d, dp, ddp) = (1.5, 0.5, 2.0);
    let mut n2 = Nested::<U2>::new(&p)?;
    let (y, l0) = n2.primal(&[x])?;
    row("order 2  y        = sin x", y[0], s);
    let (r1, l1) = l0.call(&[d])?;
    row("order 2  c1(Δ)    = Δ cos x", r1[0], d * c);
    let (r2, l2) = l1.call(&[dp])?;
    row("order 2  c2(Δ′)   = Δ′ cos x", r2[0], dp * c);
    let (r3, _) = l2.call(&[ddp])?;
    row(
        "order 2  c3(Δ″)   = Δ″ cos x + Δ′Δ(−sin x)",
        r3[0],
        ddp * c - dp * d * s,
    );

    // f″ from order 2: Δ = Δ′ = 1, Δ″ = 0.
    let (_, l0) = n2.primal(&[x])?;
    let (_, l1) = l0.call(&[1.0])?;
    let (_, l2) = l1.call(&[1.0])?;
    let (f2, _) = l2.call(&[0.0])?;
    row("f″ = −sin x        (Δ = Δ′ = 1, Δ″ = 0)", f2[0], -s);

    // Order 3 (Fig. 6) with seeds d₁ … d₇.
    let e = [1.0, -0.5, 0.25, 2.0, 0.3, -1.2, 0.8];
    let want = [
        e[0] * c,
        e[1] * c,
        e[2] * c - e[1] * e[0] * s,
        e[3] * c,
        e[4] * c - e[3] * e[0] * s,
        e[5] * c - e[3] * e[1] * s,
        e[6] * c - e[5] * e[0] * s - e[4] * e[1] * s - e[3] * (e[2] * s + e[1] * e[0] * c),
    ];
    let labels = [
        "order 3  c1 = d1 cos x",
        "order 3  c2 = d2 cos x",
        "order 3  c3 = d3 cos x − d2 d1 sin x",
        "order 3  c4 = d4 cos x",
        "order 3  c5 = d5 cos x − d4 d1 sin x",
        "order 3  c6 = d6 cos x − d4 d2 sin x",
        "order 3  c7 = d7 cos x − (d6 d1 + d5 d2 + d4 d3) sin x − d4 d2 d1 cos x",
    ];
    let mut n3 = Nested::<U3>::new(&p)?;
    let (_, l) = n3.primal(&[x])?;
    let (r1, l) = l.call(&[e[0]])?;
    let (r2, l) = l.call(&[e[1]])?;
    let (r3, l) = l.call(&[e[2]])?;
    let (r4, l) = l.call(&[e[3]])?;
    let (r5, l) = l.call(&[e[4]])?;
    let (r6, l) = l.call(&[e[5]])?;
    let (r7, _) = l.call(&[e[6]])?;
    for ((r, w), lab) in [r1, r2, r3, r4, r5, r6, r7].iter().zip(want).zip(labels) {
        row(lab, r[0], w);
    }

    // f‴ from order 3: e₁ = e₂ = e₄ = 1, every other eᵢ = 0.
    let (_, l) = n3.primal(&[x])?;
    let (_, l) = l.call(&[1.0])?;
    let (_, l) = l.call(&[1.0])?;
    let (_, l) = l.call(&[0.0])?;
    let (_, l) = l.call(&[1.0])?;
    let (_, l) = l.call(&[0.0])?;
    let (_, l) = l.call(&[0.0])?;
    let (f3, _) = l.call(&[0.0])?;
    row("f‴ = −cos x        (e1 = e2 = e4 = 1)", f3[0], -c);
    Ok(rows)
}

fn main() {
    let x: f64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0.7);
    println!("∂⃖² sin and ∂⃖³ sin at x = {x}");
    println!(
        "order 2 has {} closures, order 3 has {}",
        Nested::<U2>::closures(),
        Nested::<U3>::closures()
    );
    match run(x) {
        Ok(rows) => {
            let mut worst = 0.0_f64;
            println!(
                "{:<74} {:>22} {:>22} {:>9}",
                "closure", "optic", "closed form", "|diff|"
            );
            for r in &rows {
                let diff = (r.got - r.want).abs();
                worst = worst.max(diff);
                println!(
                    "{:<74} {:>22.16e} {:>22.16e} {:>9.1e}",
                    r.label, r.got, r.want, diff
                );
            }
            println!("largest difference: {worst:.1e}");
            if worst > 1e-13 {
                eprintln!("mismatch above 1e-13");
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
