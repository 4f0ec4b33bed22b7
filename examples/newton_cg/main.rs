//! The main job: L2-regularised logistic regression on the Wisconsin
//! Diagnostic Breast Cancer data, fitted by Newton-CG with Hessian-vector
//! products from `optic_ad::Hvp`.
//!
//! ```text
//! cargo run --release --example newton_cg [-- path/to/wdbc.csv]
//! ```
//!
//! Without an argument it reads `examples/data/wdbc.csv` of this crate.
//! The model and solver are in `model.rs`.

mod model;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use model::{load_wdbc, newton_cg, sci, Logistic, NewtonOptions, FEATURE_NAMES};

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let mut args = std::env::args_os().skip(1);
    let path = match args.next() {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/data/wdbc.csv"),
    };
    if args.next().is_some() {
        return Err("usage: newton_cg [path/to/wdbc.csv]".into());
    }

    let data = load_wdbc(&path)?;
    let benign = data.s.iter().filter(|&&s| s > 0.0).count();
    println!(
        "{}: {} samples ({} {}, {} {}), {} features, {} parameters",
        path.display(),
        data.n_samples,
        data.n_samples - benign,
        data.class_names[0],
        benign,
        data.class_names[1],
        data.n_features,
        data.n_params()
    );
    println!("L(w, b) = Σ log(1 + exp(−s(x·w + b))) + ½‖w‖²; Newton-CG from θ = 0");
    println!();
    println!(
        "{:>4}  {:>22}  {:>10}  {:>4}  {:>8}",
        "iter", "objective", "‖∇L‖∞", "CG", "step"
    );

    let fit = newton_cg(&data, &NewtonOptions::default(), |it| {
        let note = if it.negative_curvature {
            "  (negative curvature)"
        } else {
            ""
        };
        // The last iterate takes no step: say why instead of "CG 0, step 0".
        let step = if it.converged {
            format!("{:>14}", "converged")
        } else {
            format!("{:>4}  {:>8}", it.cg_iters, sci(it.step, 3))
        };
        println!(
            "{:>4}  {:>22}  {:>10}  {step}{note}",
            it.k,
            sci(it.objective, 15),
            sci(it.grad_inf, 3)
        );
    })?;
    let elapsed = start.elapsed();

    let margins = data.margins(&fit.theta);
    let max_margin = margins.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
    let correct = margins
        .iter()
        .zip(&data.s)
        .filter(|(m, s)| **m * **s > 0.0)
        .count();

    println!();
    println!("converged in {} Newton iterations", fit.history.len() - 1);
    println!("final objective  L = {}", sci(fit.objective, 15));
    println!("final ‖∇L‖∞        = {}", sci(fit.grad_inf, 3));
    println!(
        "max |margin| {:.3}, training accuracy {}/{}",
        max_margin, correct, data.n_samples
    );
    // The independent check: the gradient of L written out by hand in
    // plain f64 (no AD, no code shared with the solver but the data):
    // ∇L = Σᵢ −sᵢ σ(−sᵢ mᵢ) (xᵢ, 1) + (w, 0). At the optimum it must vanish
    // to the solver's tolerance.
    let d = data.n_features;
    let mut hand = vec![0.0; d + 1];
    for ((row, &s), &m) in data.rows().zip(&data.s).zip(&margins) {
        let c = -s / (1.0 + (s * m).exp()); // −s σ(−s m)
        for (h, x) in hand.iter_mut().zip(row.iter().chain([&1.0])) {
            *h += c * x;
        }
    }
    // The fit as the model's parameters (a structured point of optic-ad).
    let params = Logistic::from_leaves(d, &fit.theta).ok_or("fit: wrong parameter count")?;
    for (h, w) in hand.iter_mut().zip(&params.w) {
        *h += w;
    }
    let hand_inf = hand.iter().fold(0.0_f64, |a, g| a.max(g.abs()));
    let tol = NewtonOptions::default().grad_tol;
    println!(
        "independent check: the hand-written gradient (no AD) at the fit has ‖∇L‖∞ = {} {} the tolerance {}",
        sci(hand_inf, 3),
        if hand_inf <= tol { "≤" } else { ">" },
        sci(tol, 0)
    );
    if hand_inf > tol {
        return Err("the hand-written gradient does not vanish at the fit".into());
    }
    println!("  (tests/main_job.rs also checks the fit against a dense Newton method on hand-written derivatives)");
    println!();
    println!("coefficients (standardised features):");
    println!("  {:<26} {:>23}", "intercept", sci(params.b, 15));
    for (name, w) in FEATURE_NAMES.iter().zip(&params.w) {
        println!("  {:<26} {:>23}", name, sci(*w, 15));
    }
    println!();
    println!(
        "Hessian-vector products: {}, objective/gradient evaluations: {}",
        fit.hvp_count, fit.linearize_count
    );
    println!(
        "wall time: {:.1} ms (of which tracing and building the Hvp program: {:.1} ms)",
        elapsed.as_secs_f64() * 1e3,
        fit.setup_time.as_secs_f64() * 1e3
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
