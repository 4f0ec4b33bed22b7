//! The main job's model, L2-regularised logistic regression on the
//! Wisconsin Diagnostic Breast Cancer data, fitted by full Newton steps on
//! the dense Hessian: each iterate's Hessian is a `faer::Mat` of 31 × 31
//! from 31 Hessian-vector products of one compiled [`Hvp`]
//! ([`faer_interop::hessian_at`]), the Newton system `H p = −∇L` is solved
//! by faer's Cholesky factorisation `H = L Lᵀ`, and a backtracking line
//! search on `L` is the safeguard far from the optimum (Nocedal & Wright,
//! "Numerical Optimization", 2nd ed., §3.1 and §3.3).
//!
//! The optimum is then checked against the Newton-CG fit of the main job
//! (`examples/newton_cg`, which never forms the Hessian). For any point
//! `θ`, `∇L(θ) = H̄ (θ − θ*)` with `H̄` the Hessian averaged over the
//! segment from `θ*` to `θ`; if every Hessian on that segment has
//! eigenvalues at least `μ > 0`, so has `H̄`, and
//! `‖θ − θ*‖₂ ≤ ‖∇L(θ)‖₂ / μ` (Boyd & Vandenberghe, "Convex
//! Optimization", §9.1.2, give the same with `2/μ`). We compute `λ_min`,
//! the smallest eigenvalue of the Hessian at the dense optimum, with faer,
//! and take `μ = λ_min / 2`: along a unit direction the Hessian changes at
//! a rate of at most `0.1 Σᵢ ‖x̃ᵢ‖³` (`|σ″| < 0.1`; `x̃ᵢ` is row `i` with
//! a 1 appended), 1.4·10⁴ on these data, so by at most 10⁻⁴ over the
//! 10⁻⁸ that Newton-CG's tolerance allows between the points, far less
//! than `λ_min / 2 ≈ 0.5`. Applied to both points this gives
//!
//! ```text
//! ‖θ_dense − θ_CG‖₂ ≤ 2 (‖∇L(θ_dense)‖₂ + ‖∇L(θ_CG)‖₂) / λ_min.
//! ```
//!
//! The objectives differ from `L*` by at most `‖∇L(θ)‖₂² / (2μ)` each
//! (Boyd & Vandenberghe, eq. 9.9), and each evaluation of `L`, a sum of
//! `N + d` positive terms of a few ulps each, by at most `(N + d + 4) ε L`
//! (N. J. Higham, "Accuracy and Stability of Numerical Algorithms", 2nd
//! ed., §4.2), so
//!
//! ```text
//! |L(θ_dense) − L(θ_CG)| ≤ (‖∇L(θ_dense)‖₂² + ‖∇L(θ_CG)‖₂²) / λ_min + 2 (N + d + 4) ε L.
//! ```
//!
//! ```text
//! cargo run --release --features faer --example dense_newton [-- path/to/wdbc.csv]
//! ```

#[allow(dead_code)]
#[path = "newton_cg/model.rs"]
mod model;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use faer::linalg::solvers::Solve;
use faer::{Col, Side};
use model::{load_wdbc, newton_cg, objective, sci, Dataset, NewtonOptions};
use optic_ad::{faer_interop, Hvp, Tracer};

/// One iterate of the dense Newton method.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// Iteration number `k` (0 is `θ = 0`).
    pub k: usize,
    /// `L(θ_k)`.
    pub objective: f64,
    /// `‖∇L(θ_k)‖∞`.
    pub grad_inf: f64,
    /// Half the squared Newton decrement, `½ ∇Lᵀ H⁻¹ ∇L`: the decrease of
    /// the quadratic model by the full step (0 at the last iterate).
    pub predicted_decrease: f64,
    /// The accepted step length (0 at the last iterate, where no step is
    /// taken).
    pub step: f64,
}

/// The result of [`dense_newton`].
#[derive(Debug, Clone)]
pub struct DenseFit {
    /// The minimiser `θ = (w₁ … w_d, b)`.
    pub theta: Col<f64>,
    /// `L(θ)`.
    pub objective: f64,
    /// `∇L(θ)`.
    pub gradient: Col<f64>,
    /// The eigenvalues of `∇²L(θ)`, in increasing order.
    pub eigenvalues: Vec<f64>,
    /// One entry per iterate, the last one being `θ`.
    pub history: Vec<Step>,
}

/// `max |vᵢ|`.
fn inf_norm(v: &Col<f64>) -> f64 {
    v.iter().fold(0.0, |m, x| m.max(x.abs()))
}

/// `‖v‖₂`.
fn norm2(v: &Col<f64>) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// Minimises the main job's objective by full Newton steps from `θ = 0`,
/// stopping at the main job's criterion `‖∇L‖∞ < grad_tol`.
///
/// Each iteration forms the dense Hessian at `θ_k`
/// ([`faer_interop::hessian_at`]), solves `H p = −∇L` by Cholesky, and
/// takes the longest step `α ∈ {1, ½, ¼, …}` that satisfies the Armijo
/// condition `L(θ + αp) ≤ L(θ) + 10⁻⁴ α ∇Lᵀp`; near the optimum, where that
/// decrease falls below the rounding of `L`, a step that keeps `L` within
/// 64 ε |L| and reduces `‖∇L‖₂` is accepted too (the main job's rule).
///
/// # Errors
///
/// Errors of the AD library; a Hessian that Cholesky finds not positive
/// definite; a line search or an iteration count that runs out.
pub fn dense_newton(
    data: &Dataset,
    grad_tol: f64,
    max_iter: usize,
    mut progress: impl FnMut(&Step),
) -> Result<DenseFit, Box<dyn std::error::Error>> {
    let n = data.n_params();
    let mut theta = Col::<f64>::zeros(n);
    let mut h = Hvp::new(|t: &[Tracer]| objective(t, data), &vec![0.0; n])?;
    let mut history = Vec::new();
    for k in 0..=max_iter {
        let (f, g, hess) = faer_interop::hessian_at(&mut h, &theta)?;
        let grad_inf = inf_norm(&g);
        if !f.is_finite() || !grad_inf.is_finite() {
            return Err(format!("objective or gradient not finite at iteration {k}").into());
        }
        if grad_inf < grad_tol {
            let last = Step {
                k,
                objective: f,
                grad_inf,
                predicted_decrease: 0.0,
                step: 0.0,
            };
            progress(&last);
            history.push(last);
            let eigenvalues = hess
                .self_adjoint_eigenvalues(Side::Lower)
                .map_err(|e| format!("eigenvalues of the final Hessian: {e:?}"))?;
            return Ok(DenseFit {
                theta,
                objective: f,
                gradient: g,
                eigenvalues,
                history,
            });
        }
        if k == max_iter {
            break;
        }
        let llt = hess
            .llt(Side::Lower)
            .map_err(|e| format!("Hessian not positive definite at iteration {k}: {e}"))?;
        let step = llt.solve(&g);
        let p = Col::<f64>::from_fn(n, |i| -step[i]);
        let slope: f64 = g.iter().zip(p.iter()).map(|(a, b)| a * b).sum();
        let noise = 64.0 * f64::EPSILON * f.abs();
        let gg = norm2(&g);
        let mut alpha = 1.0;
        let mut accepted = false;
        for _ in 0..60 {
            let trial = Col::<f64>::from_fn(n, |i| theta[i] + alpha * p[i]);
            let (f_trial, g_trial) = faer_interop::linearize(&mut h, &trial)?;
            if f_trial.is_finite()
                && (f_trial <= f + 1e-4 * alpha * slope
                    || (f_trial <= f + noise && norm2(&g_trial) < gg))
            {
                theta = trial;
                accepted = true;
                break;
            }
            alpha *= 0.5;
        }
        if !accepted {
            return Err(format!("line search failed at iteration {k}").into());
        }
        let it = Step {
            k,
            objective: f,
            grad_inf,
            predicted_decrease: -0.5 * slope,
            step: alpha,
        };
        progress(&it);
        history.push(it);
    }
    Err(format!("no convergence in {max_iter} Newton iterations").into())
}

/// The dense Newton fit beside the Newton-CG fit, and the bounds they must
/// meet.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// The dense Newton fit.
    pub dense: DenseFit,
    /// The Newton-CG coefficients (the main job).
    pub cg_theta: Vec<f64>,
    /// `L` at the Newton-CG optimum.
    pub cg_objective: f64,
    /// `‖∇L‖₂` at the Newton-CG optimum.
    pub cg_grad_norm: f64,
    /// Newton-CG iterations.
    pub cg_iterations: usize,
    /// `‖θ_dense − θ_CG‖₂`.
    pub coef_distance: f64,
    /// Its bound, `2 (‖∇L(θ_dense)‖₂ + ‖∇L(θ_CG)‖₂) / λ_min`.
    pub coef_bound: f64,
    /// `|L(θ_dense) − L(θ_CG)|`.
    pub objective_difference: f64,
    /// Its bound, `(‖∇L(θ_dense)‖₂² + ‖∇L(θ_CG)‖₂²) / λ_min + 2 (N + d + 4) ε L`.
    pub objective_bound: f64,
}

/// Fits the data at `path` both ways, with the main job's tolerance, and
/// compares the optima.
///
/// # Errors
///
/// As [`dense_newton`] and the main job's `newton_cg`; a data file that
/// cannot be loaded.
pub fn run(
    path: &Path,
    progress: impl FnMut(&Step),
) -> Result<Comparison, Box<dyn std::error::Error>> {
    let data = load_wdbc(path)?;
    let opts = NewtonOptions::default();
    let dense = dense_newton(&data, opts.grad_tol, opts.max_iter, progress)?;
    let cg = newton_cg(&data, &opts, |_| {})?;
    let cg_grad_norm = cg.gradient.iter().map(|x| x * x).sum::<f64>().sqrt();
    let coef_distance = dense
        .theta
        .iter()
        .zip(&cg.theta)
        .map(|(a, b)| (a - b) * (a - b))
        .sum::<f64>()
        .sqrt();
    let lambda_min = dense.eigenvalues[0];
    let g_dense = norm2(&dense.gradient);
    let coef_bound = 2.0 * (g_dense + cg_grad_norm) / lambda_min;
    let terms = (data.n_samples + data.n_params() + 4) as f64;
    let objective_bound = (g_dense * g_dense + cg_grad_norm * cg_grad_norm) / lambda_min
        + 2.0 * terms * f64::EPSILON * dense.objective;
    Ok(Comparison {
        objective_difference: (dense.objective - cg.objective).abs(),
        cg_theta: cg.theta,
        cg_objective: cg.objective,
        cg_grad_norm,
        cg_iterations: cg.history.len() - 1,
        coef_distance,
        coef_bound,
        objective_bound,
        dense,
    })
}

/// The data file of the main job.
pub fn default_data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/data/wdbc.csv")
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let path = args.next().map_or_else(default_data, PathBuf::from);
    if args.next().is_some() {
        eprintln!("usage: dense_newton [path/to/wdbc.csv]");
        return ExitCode::FAILURE;
    }
    println!(
        "dense Newton with a Cholesky solve, from θ = 0, on {}",
        path.display()
    );
    println!(
        "{:>4}  {:>22}  {:>10}  {:>12}  {:>8}",
        "iter", "objective", "‖∇L‖∞", "½ gᵀH⁻¹g", "step"
    );
    let res = run(&path, |s| {
        let tail = if s.step == 0.0 {
            format!("{:>22}", "converged")
        } else {
            format!(
                "{:>12}  {:>8}",
                sci(s.predicted_decrease, 3),
                sci(s.step, 1)
            )
        };
        println!(
            "{:>4}  {:>22}  {:>10}  {tail}",
            s.k,
            sci(s.objective, 15),
            sci(s.grad_inf, 3)
        );
    });
    let c = match res {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let eig = &c.dense.eigenvalues;
    println!();
    println!(
        "Hessian at the optimum: eigenvalues from {:.4} to {:.4}",
        eig[0],
        eig[eig.len() - 1]
    );
    println!(
        "dense Newton: L = {}, ‖∇L‖₂ = {}, {} iterations",
        sci(c.dense.objective, 15),
        sci(norm2(&c.dense.gradient), 3),
        c.dense.history.len() - 1
    );
    println!(
        "Newton-CG:    L = {}, ‖∇L‖₂ = {}, {} iterations",
        sci(c.cg_objective, 15),
        sci(c.cg_grad_norm, 3),
        c.cg_iterations
    );
    println!(
        "‖θ_dense − θ_CG‖₂ = {} (bound {}); |ΔL| = {} (bound {})",
        sci(c.coef_distance, 3),
        sci(c.coef_bound, 3),
        sci(c.objective_difference, 3),
        sci(c.objective_bound, 3)
    );
    if c.coef_distance <= c.coef_bound && c.objective_difference <= c.objective_bound {
        println!("the two optima agree within the bounds");
        ExitCode::SUCCESS
    } else {
        eprintln!("error: the optima differ by more than the bounds");
        ExitCode::FAILURE
    }
}
