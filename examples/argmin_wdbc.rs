//! The main job's model (L2-regularised logistic regression on the WDBC
//! data) fitted by argmin's trust-region method with the Steihaug
//! subproblem, its cost, gradient and Hessian-vector products from one
//! generic function on the array trace through
//! `optic_ad::argmin_interop` (as the main job's own solver uses); and the
//! same fit
//! by the main job's own Newton-CG, for the optimum and the time of each.
//!
//! ```text
//! cargo run --release --features argmin --example argmin_wdbc
//! ```

#[allow(dead_code)]
#[path = "newton_cg/model.rs"]
mod model;

use std::process::ExitCode;
use std::time::Instant;

use argmin::core::{Executor, State};
use argmin::solver::trustregion::{Steihaug, TrustRegion};
use optic_ad::argmin_interop::ArgminProblem;

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/wdbc.csv");
    let data = model::load_wdbc(&path)?;
    println!(
        "{}: {} samples, {} parameters",
        path.display(),
        data.n_samples,
        data.n_params()
    );

    let t0 = Instant::now();
    let theta0 = vec![0.0; data.n_params()];
    let design = data.design();
    let problem = ArgminProblem::new_array(|t| model::objective_array(t, &design), &theta0)?;
    let built = t0.elapsed();
    let res = Executor::new(problem, TrustRegion::new(Steihaug::new()))
        .configure(|s| s.param(theta0.clone()).max_iters(30))
        .run()?;
    let argmin_time = t0.elapsed();
    let state = res.state();
    let theta = state
        .get_best_param()
        .ok_or("argmin returned no parameter")?;

    let t1 = Instant::now();
    let fit = model::newton_cg(&data, &model::NewtonOptions::default(), |_| {})?;
    let own_time = t1.elapsed();

    let diff = theta
        .iter()
        .zip(&fit.theta)
        .fold(0.0_f64, |m, (a, b)| m.max((a - b).abs()));
    println!(
        "argmin trust region (Steihaug): L = {}, {} iterations ({:?}), {:.1} ms (of which tracing and building: {:.1} ms)",
        model::sci(state.get_best_cost(), 15),
        state.get_iter(),
        state.get_termination_status(),
        argmin_time.as_secs_f64() * 1e3,
        built.as_secs_f64() * 1e3
    );
    println!(
        "the example's Newton-CG:        L = {}, {} iterations, {:.1} ms",
        model::sci(fit.objective, 15),
        fit.history.len() - 1,
        own_time.as_secs_f64() * 1e3
    );
    println!(
        "largest difference of the two optima: {}",
        model::sci(diff, 3)
    );
    if diff > 1e-10 {
        return Err("the two optima differ by more than 1e-10".into());
    }
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
