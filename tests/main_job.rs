//! The main job, checked independently: the Newton-CG fit of
//! `examples/newton_cg` (AD Hessian-vector products) against a dense Newton
//! method on hand-written derivatives in plain `f64`.
//!
//! # The independent computation
//!
//! With standardised rows `xᵢ`, signs `sᵢ = ±1`, `θ = (w, b)`, margins
//! `mᵢ = xᵢ·w + b` and `σ(t) = 1/(1 + e⁻ᵗ)`:
//!
//! ```text
//! L(θ) = Σᵢ log(1 + exp(−sᵢ mᵢ)) + ½‖w‖²
//! ∇L   = Σᵢ −sᵢ σ(−sᵢ mᵢ) x̃ᵢ + (w, 0)                 with x̃ᵢ = (xᵢ, 1)
//! ∇²L  = Σᵢ σ(mᵢ) σ(−mᵢ) x̃ᵢ x̃ᵢᵀ + diag(1, …, 1, 0)
//! ```
//!
//! (`d/dm log(1 + e^{−sm}) = −s σ(−sm)`, and `d/dm [−s σ(−sm)] =
//! s² σ(−sm)σ(sm) = σ(m)σ(−m)` because `s² = 1`.) These are coded below by
//! hand, with no AD at all; they are themselves checked by central finite
//! differences (objective → gradient, gradient → Hessian). A dense Newton
//! method with a Cholesky solve written here then minimises `L`, and its
//! optimum is compared with the Newton-CG one. The only code shared with
//! the example is the data loader (`load_wdbc`), whose output is checked
//! separately (row counts, class counts, standardisation).

use crate::model;

use std::path::PathBuf;
use std::sync::OnceLock;

use model::{
    load_wdbc, newton_cg, newton_cg_scalar, objective, objective_array, DataError, Dataset, Fit,
    NewtonOptions,
};
use optic_ad::array::Dense;
use optic_ad::Hvp;

fn data_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/data/wdbc.csv")
}

/// The data set and the Newton-CG fit, computed once for all tests.
fn fitted() -> &'static (Dataset, Fit) {
    static FIT: OnceLock<(Dataset, Fit)> = OnceLock::new();
    FIT.get_or_init(|| {
        let data = load_wdbc(&data_path()).expect("load wdbc.csv");
        let fit = newton_cg(&data, &NewtonOptions::default(), |_| {}).expect("Newton-CG");
        (data, fit)
    })
}

// ---------------------------------------------------------------------------
// Hand-written objective, gradient and Hessian (plain f64, no AD).

/// `σ(t)`, evaluated without overflow for either sign of `t`.
fn sigmoid(t: f64) -> f64 {
    if t >= 0.0 {
        1.0 / (1.0 + (-t).exp())
    } else {
        let e = t.exp();
        e / (1.0 + e)
    }
}

/// `log(1 + eᶻ)` = `max(z, 0) + log1p(e^{−|z|})`.
fn softplus(z: f64) -> f64 {
    z.max(0.0) + (-z.abs()).exp().ln_1p()
}

fn margin(row: &[f64], theta: &[f64]) -> f64 {
    let d = row.len();
    theta[d] + row.iter().zip(&theta[..d]).map(|(x, w)| x * w).sum::<f64>()
}

fn hand_objective(theta: &[f64], data: &Dataset) -> f64 {
    let d = data.n_features;
    let loss: f64 = data
        .rows()
        .zip(&data.s)
        .map(|(row, &s)| softplus(-s * margin(row, theta)))
        .sum();
    loss + 0.5 * theta[..d].iter().map(|w| w * w).sum::<f64>()
}

fn hand_gradient(theta: &[f64], data: &Dataset) -> Vec<f64> {
    let d = data.n_features;
    let mut g = vec![0.0; d + 1];
    for (row, &s) in data.rows().zip(&data.s) {
        let c = -s * sigmoid(-s * margin(row, theta));
        for (gj, x) in g.iter_mut().zip(row) {
            *gj += c * x;
        }
        g[d] += c;
    }
    for j in 0..d {
        g[j] += theta[j];
    }
    g
}

#[allow(clippy::needless_range_loop)] // index form mirrors the formula
fn hand_hessian(theta: &[f64], data: &Dataset) -> Vec<Vec<f64>> {
    let d = data.n_features;
    let mut h = vec![vec![0.0; d + 1]; d + 1];
    let mut xt = vec![1.0; d + 1];
    for row in data.rows() {
        let m = margin(row, theta);
        let c = sigmoid(m) * sigmoid(-m);
        xt[..d].copy_from_slice(row);
        for j in 0..=d {
            let cj = c * xt[j];
            for k in 0..=j {
                h[j][k] += cj * xt[k];
            }
        }
    }
    // Mirror the lower triangle, so H is exactly symmetric.
    for j in 0..=d {
        for k in 0..j {
            h[k][j] = h[j][k];
        }
    }
    for (j, hj) in h.iter_mut().enumerate().take(d) {
        hj[j] += 1.0;
    }
    h
}

/// Solves `A x = b` for symmetric positive definite `A` by Cholesky
/// (`A = L Lᵀ`, then forward and back substitution).
fn cholesky_solve(a: &[Vec<f64>], b: &[f64]) -> Vec<f64> {
    let n = b.len();
    let mut l = vec![vec![0.0; n]; n];
    for i in 0..n {
        for j in 0..=i {
            let s: f64 = a[i][j] - (0..j).map(|k| l[i][k] * l[j][k]).sum::<f64>();
            if i == j {
                assert!(s > 0.0, "matrix not positive definite at pivot {i}");
                l[i][i] = s.sqrt();
            } else {
                l[i][j] = s / l[j][j];
            }
        }
    }
    let mut y = vec![0.0; n];
    for i in 0..n {
        y[i] = (b[i] - (0..i).map(|k| l[i][k] * y[k]).sum::<f64>()) / l[i][i];
    }
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        x[i] = (y[i] - (i + 1..n).map(|k| l[k][i] * x[k]).sum::<f64>()) / l[i][i];
    }
    x
}

fn inf_norm(v: &[f64]) -> f64 {
    v.iter().fold(0.0, |m, x| m.max(x.abs()))
}

/// Dense damped Newton on the hand-written derivatives, from `θ = 0`.
/// Runs until the full Newton step no longer reduces `‖∇L‖∞` (the gradient
/// has reached its rounding floor), with a halving line search on `L` for
/// the early, far-from-optimal iterates.
fn dense_newton(data: &Dataset) -> (Vec<f64>, usize) {
    let n = data.n_params();
    let mut theta = vec![0.0; n];
    let mut g = hand_gradient(&theta, data);
    for it in 0..100 {
        let h = hand_hessian(&theta, data);
        let neg_g: Vec<f64> = g.iter().map(|v| -v).collect();
        let p = cholesky_solve(&h, &neg_g);
        let f = hand_objective(&theta, data);
        let mut alpha = 1.0;
        let trial = loop {
            let t: Vec<f64> = theta.iter().zip(&p).map(|(x, p)| x + alpha * p).collect();
            let ft = hand_objective(&t, data);
            // Plain decrease, or (near the optimum, where L is flat to
            // rounding) a step that leaves L at rounding level.
            if ft <= f + 1e-13 * f.abs() || alpha < 1e-10 {
                break t;
            }
            alpha *= 0.5;
        };
        let gt = hand_gradient(&trial, data);
        if inf_norm(&g) < 1e-10 && inf_norm(&gt) >= inf_norm(&g) {
            return (theta, it);
        }
        theta = trial;
        g = gt;
    }
    panic!("dense Newton did not settle in 100 iterations");
}

// ---------------------------------------------------------------------------
// Finite-difference checks of the hand-written derivatives.

/// Central differences with step `h = 1e-5 ≈ ε^{1/3}` (ε = 2.2e-16, the
/// step that balances the two error terms for |f| and |f'''| of order 1;
/// our |θ| are O(1)). The error of `(f(θ+h e_j) − f(θ−h e_j)) / 2h` is at
/// most
///
///   `h²/6 · max|∂³f/∂θ_j³|  +  δf / h`,
///
/// where `δf` bounds the rounding error of one evaluation of `f`. We bound
/// both terms from the data at the point:
///
/// * for `f = L`: `∂³L/∂θ_j³ = Σᵢ −s·σ''(−s mᵢ)·(−s)²… x̃ᵢⱼ³`, and
///   `|σ''| ≤ 1/(6√3) < 0.1`, so `M₃ ≤ 0.1 Σᵢ |x̃ᵢⱼ|³`;
/// * for `f = ∂L/∂θ_k`: `∂³/∂θ_j³ = Σᵢ c'''(mᵢ) x̃ᵢⱼ³ x̃ᵢₖ` with
///   `c(m) = −s σ(−sm)`, `|c'''| = |σ'''| ≤ 1/8`, so
///   `M₃ ≤ 0.125 Σᵢ |x̃ᵢⱼ|³ |x̃ᵢₖ|`;
/// * `δf ≤ (n + d + 4) ε Σ|terms|` — the worst-case bound for summing
///   `n + d` terms that each carry a few ulps of error.
///
/// Any real mistake (a sign, a missing factor, a wrong index) produces an
/// error of the size of the entries themselves, orders of magnitude above
/// these bounds.
const FD_STEP: f64 = 1e-5;

fn fd_points(data: &Dataset) -> Vec<Vec<f64>> {
    let n = data.n_params();
    vec![
        vec![0.0; n],
        (0..n).map(|j| 0.3 * ((j + 1) as f64).sin()).collect(),
        (0..n)
            .map(|j| 0.5 * ((2 * j + 1) as f64).cos() - 0.1)
            .collect(),
    ]
}

/// `Σᵢ |x̃ᵢⱼ|^p |x̃ᵢₖ|^q` (column `d` of `x̃` is the constant 1).
fn col_moment(data: &Dataset, j: usize, p: i32, k: usize, q: i32) -> f64 {
    let d = data.n_features;
    data.rows()
        .map(|row| {
            let xj = if j == d { 1.0 } else { row[j].abs() };
            let xk = if k == d { 1.0 } else { row[k].abs() };
            xj.powi(p) * xk.powi(q)
        })
        .sum()
}

/// `Σ|terms|` of the objective at `theta` (for its rounding bound).
fn objective_abs_terms(theta: &[f64], data: &Dataset) -> f64 {
    let d = data.n_features;
    data.rows()
        .zip(&data.s)
        .map(|(row, &s)| softplus(-s * margin(row, theta)).abs())
        .sum::<f64>()
        + 0.5 * theta[..d].iter().map(|w| w * w).sum::<f64>()
}

#[test]
fn hand_gradient_matches_finite_differences_of_hand_objective() {
    let data = load_wdbc(&data_path()).unwrap();
    let n = data.n_params();
    let terms = (data.n_samples + n + 4) as f64;
    let h = FD_STEP;
    let mut worst_ratio: f64 = 0.0;
    let mut worst_err: f64 = 0.0;
    for theta in fd_points(&data) {
        let g = hand_gradient(&theta, &data);
        let rounding = terms * f64::EPSILON * objective_abs_terms(&theta, &data);
        for j in 0..n {
            let (mut tp, mut tm) = (theta.clone(), theta.clone());
            tp[j] += h;
            tm[j] -= h;
            let fd = (hand_objective(&tp, &data) - hand_objective(&tm, &data)) / (2.0 * h);
            let m3 = 0.1 * col_moment(&data, j, 3, j, 0);
            let tol = h * h / 6.0 * m3 + rounding / h;
            let err = (fd - g[j]).abs();
            assert!(
                err <= tol,
                "∂L/∂θ_{j}: hand {} vs FD {fd}, error {err:.3e} > bound {tol:.3e}",
                g[j]
            );
            worst_ratio = worst_ratio.max(err / tol);
            worst_err = worst_err.max(err);
        }
    }
    println!("gradient vs FD: max error {worst_err:.3e}, max error/bound {worst_ratio:.3e}");
}

#[test]
fn hand_hessian_matches_finite_differences_of_hand_gradient() {
    let data = load_wdbc(&data_path()).unwrap();
    let n = data.n_params();
    let d = data.n_features;
    let terms = (data.n_samples + 4) as f64;
    let h = FD_STEP;
    let mut worst_ratio: f64 = 0.0;
    let mut worst_err: f64 = 0.0;
    for theta in fd_points(&data) {
        let hess = hand_hessian(&theta, &data);
        for j in 0..n {
            let (mut tp, mut tm) = (theta.clone(), theta.clone());
            tp[j] += h;
            tm[j] -= h;
            let (gp, gm) = (hand_gradient(&tp, &data), hand_gradient(&tm, &data));
            for k in 0..n {
                let fd = (gp[k] - gm[k]) / (2.0 * h);
                let m3 = 0.125 * col_moment(&data, j, 3, k, 1);
                // Σ|terms| of g_k: |c| ≤ 1 times |x̃ᵢₖ|, plus |θ_k|.
                let abs_terms =
                    col_moment(&data, k, 1, k, 0) + if k < d { tp[k].abs() } else { 0.0 };
                let tol = h * h / 6.0 * m3 + terms * f64::EPSILON * abs_terms / h;
                let err = (fd - hess[j][k]).abs();
                assert!(
                    err <= tol,
                    "H[{j}][{k}]: hand {} vs FD {fd}, error {err:.3e} > bound {tol:.3e}",
                    hess[j][k]
                );
                worst_ratio = worst_ratio.max(err / tol);
                worst_err = worst_err.max(err);
            }
        }
    }
    println!("Hessian vs FD: max error {worst_err:.3e}, max error/bound {worst_ratio:.3e}");
}

// ---------------------------------------------------------------------------
// The library's objective and derivatives against the hand-written ones.

#[test]
fn generic_objective_and_ad_derivatives_match_hand_written_ones() {
    let data = load_wdbc(&data_path()).unwrap();
    let n = data.n_params();
    let mut h = Hvp::new(|t: &[_]| objective(t, &data), &vec![0.0; n]).unwrap();
    // The objective is branch-free (softplus via `select`): no guards, so
    // the compiled program is valid everywhere and is never re-traced.
    let (left, right) = h.programs().unwrap();
    assert!(left.guards().is_empty() && right.guards().is_empty());
    let mut grad = vec![0.0; n];
    let mut col = vec![0.0; n];
    let mut e = vec![0.0; n];
    for theta in fd_points(&data) {
        let f_hand = hand_objective(&theta, &data);
        let f_plain = objective(&theta, &data);
        let f_ad = h.linearize_with_gradient(&theta, &mut grad).unwrap();
        assert!((f_plain - f_hand).abs() <= 1e-12 * f_hand.abs());
        assert!((f_ad - f_hand).abs() <= 1e-12 * f_hand.abs());
        let g_hand = hand_gradient(&theta, &data);
        let gscale = inf_norm(&g_hand).max(1.0);
        for (a, b) in grad.iter().zip(&g_hand) {
            assert!((a - b).abs() <= 1e-12 * gscale, "gradient {a} vs {b}");
        }
        let hess = hand_hessian(&theta, &data);
        let hscale = hess.iter().map(|r| inf_norm(r)).fold(0.0, f64::max);
        for j in 0..n {
            e[j] = 1.0;
            h.apply(&e, &mut col).unwrap();
            e[j] = 0.0;
            for k in 0..n {
                assert!(
                    (col[k] - hess[k][j]).abs() <= 1e-12 * hscale,
                    "H[{k}][{j}]: AD {} vs hand {}",
                    col[k],
                    hess[k][j]
                );
            }
        }
    }
}

/// The array model (what the main job runs) against the hand-written
/// derivatives and against the scalar-loop model on the same points.
#[test]
fn array_objective_and_derivatives_match_hand_written_and_scalar_ones() {
    let data = load_wdbc(&data_path()).unwrap();
    let design = data.design();
    let n = data.n_params();
    let mut h = optic_ad::Hvp::array(|t| objective_array(t, &design), &vec![0.0; n]).unwrap();
    assert!(h.array_program().unwrap().guards().is_empty());
    // A handful of instructions, not one per multiply-add.
    assert!(
        h.array_program().unwrap().len() < 40,
        "{} instructions",
        h.array_program().unwrap().len()
    );
    let mut hs = Hvp::new(|t: &[_]| objective(t, &data), &vec![0.0; n]).unwrap();
    let mut g_scalar = vec![0.0; n];
    let (mut col, mut col_scalar) = (vec![0.0; n], vec![0.0; n]);
    let mut e = vec![0.0; n];
    for theta in fd_points(&data) {
        let f_hand = hand_objective(&theta, &data);
        let f_native = objective_array(&Dense::new(theta.clone()), &design).unwrap();
        assert!((f_native - f_hand).abs() <= 1e-12 * f_hand.abs());
        h.linearize(&theta).unwrap();
        assert!((h.value() - f_hand).abs() <= 1e-12 * f_hand.abs());
        let f_scalar = hs.linearize_with_gradient(&theta, &mut g_scalar).unwrap();
        assert!((h.value() - f_scalar).abs() <= 1e-12 * f_scalar.abs());
        let g_hand = hand_gradient(&theta, &data);
        let gscale = inf_norm(&g_hand).max(1.0);
        for ((a, b), c) in h.gradient().iter().zip(&g_hand).zip(&g_scalar) {
            assert!((a - b).abs() <= 1e-12 * gscale, "gradient {a} vs hand {b}");
            assert!(
                (a - c).abs() <= 1e-12 * gscale,
                "gradient {a} vs scalar {c}"
            );
        }
        let hess = hand_hessian(&theta, &data);
        let hscale = hess.iter().map(|r| inf_norm(r)).fold(0.0, f64::max);
        for j in 0..n {
            e[j] = 1.0;
            h.apply(&e, &mut col).unwrap();
            hs.apply(&e, &mut col_scalar).unwrap();
            e[j] = 0.0;
            for k in 0..n {
                assert!(
                    (col[k] - hess[k][j]).abs() <= 1e-12 * hscale,
                    "H[{k}][{j}] vs hand"
                );
                assert!(
                    (col[k] - col_scalar[k]).abs() <= 1e-12 * hscale,
                    "H[{k}][{j}] vs scalar"
                );
            }
        }
    }
}

/// The main job's fit (array model) and the same Newton-CG on the
/// scalar-loop model reach the same optimum.
#[test]
fn array_and_scalar_models_reach_the_same_optimum() {
    let (data, fit) = fitted();
    let scalar = newton_cg_scalar(data, &NewtonOptions::default(), |_| {}).unwrap();
    let rel = (fit.objective - scalar.objective).abs() / scalar.objective.abs();
    assert!(rel <= 1e-13, "objectives differ by {rel:e}");
    let diff = fit
        .theta
        .iter()
        .zip(&scalar.theta)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    // Both stop at ‖∇L‖∞ < 1e-9 with the Hessian's smallest eigenvalue
    // about 1 (the ½‖w‖² term), so the iterates agree to about 1e-8.
    assert!(diff <= 1e-8, "max |Δθ| = {diff:e}");
    assert_eq!(fit.history.len(), scalar.history.len());
}

// ---------------------------------------------------------------------------
// The optimum.

#[test]
fn newton_cg_optimum_matches_dense_newton_on_hand_derivatives() {
    let (data, fit) = fitted();
    let (theta_ref, iters_ref) = dense_newton(data);

    let f_ref = hand_objective(&theta_ref, data);
    let f_cg_hand = hand_objective(&fit.theta, data);
    let rel_obj = (fit.objective - f_ref).abs() / f_ref.abs();
    let rel_obj_hand = (f_cg_hand - f_ref).abs() / f_ref.abs();
    let coef_diff = fit
        .theta
        .iter()
        .zip(&theta_ref)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    let g_cg = inf_norm(&hand_gradient(&fit.theta, data));
    let g_ref = inf_norm(&hand_gradient(&theta_ref, data));
    println!(
        "Newton-CG: L = {:.16e} ({} iterations, {} Hvp), ‖∇L‖∞ by AD {:.3e}, by hand {g_cg:.3e}",
        fit.objective,
        fit.history.len() - 1,
        fit.hvp_count,
        fit.grad_inf
    );
    println!("dense Newton: L = {f_ref:.16e} ({iters_ref} iterations), ‖∇L‖∞ by hand {g_ref:.3e}");
    println!(
        "relative objective difference {rel_obj:.3e} (hand objective at the CG point: {rel_obj_hand:.3e}), max |Δθ| {coef_diff:.3e}"
    );

    assert!(rel_obj <= 1e-9, "objectives differ: {rel_obj:.3e}");
    assert!(
        rel_obj_hand <= 1e-9,
        "objectives differ: {rel_obj_hand:.3e}"
    );
    // Strong convexity bounds the coefficient error by the gradient:
    // ‖Δθ‖₂ ≤ ‖∇L(θ)‖₂ / λ_min(H). The smallest eigenvalue of the Hessian at
    // the optimum is 0.9966 (numpy `eigvalsh` of the hand-written Hessian,
    // XᵀWX + diag(1, …, 1, 0)), and Newton-CG stops at ‖∇L‖∞ < 1e-9, so
    // ‖Δθ‖ ≤ √31 · 1e-9 / 0.9966 ≈ 5.6e-9; 1e-8 allows for the reference's
    // own (much smaller) error.
    assert!(coef_diff <= 1e-8, "coefficients differ: {coef_diff:.3e}");
    assert!(
        g_cg < 1e-9,
        "hand gradient at the Newton-CG point: {g_cg:.3e}"
    );
    assert!(fit.grad_inf < 1e-9);
}

#[test]
fn newton_cg_history_is_consistent() {
    let (_, fit) = fitted();
    let h = &fit.history;
    assert!(h.len() >= 2 && h.len() <= 30, "{} iterates", h.len());
    for (k, it) in h.iter().enumerate() {
        assert_eq!(it.k, k);
    }
    // Monotone up to the rounding level of L accepted by the line search.
    for w in h.windows(2) {
        assert!(w[1].objective <= w[0].objective + 64.0 * f64::EPSILON * w[0].objective.abs());
    }
    let last = h.last().unwrap();
    assert_eq!(last.objective, fit.objective);
    assert_eq!(last.grad_inf, fit.grad_inf);
    assert_eq!(fit.hvp_count, h.iter().map(|it| it.cg_iters).sum::<usize>());
}

#[test]
fn newton_cg_reports_iteration_cap() {
    let (data, _) = fitted();
    let opts = NewtonOptions {
        max_iter: 2,
        ..NewtonOptions::default()
    };
    match newton_cg(data, &opts, |_| {}) {
        Err(model::FitError::MaxIterations { iterations: 2, .. }) => {}
        other => panic!("expected MaxIterations, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// The loader.

#[test]
fn loads_wdbc_standardised() {
    let (data, _) = fitted();
    assert_eq!(data.n_samples, 569);
    assert_eq!(data.n_features, 30);
    assert_eq!(data.s.iter().filter(|&&s| s == 1.0).count(), 357);
    assert_eq!(data.s.iter().filter(|&&s| s == -1.0).count(), 212);
    assert_eq!(data.class_names, ["malignant".to_string(), "benign".into()]);
    let n = data.n_samples as f64;
    for j in 0..data.n_features {
        let col: Vec<f64> = data.rows().map(|r| r[j]).collect();
        let mean = col.iter().sum::<f64>() / n;
        let var = col.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        assert!(mean.abs() < 1e-12, "column {j} mean {mean}");
        assert!((var - 1.0).abs() < 1e-12, "column {j} variance {var}");
    }
    // First row, first feature: mean radius 17.99.
    let x00 = 17.99;
    assert!((data.x[0] - (x00 - data.mean[0]) / data.std[0]).abs() < 1e-15);
}

/// A scratch file in the system temp dir, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, contents: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("optic_ad_main_job_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir(dir); // only succeeds once empty
        }
    }
}

/// A row of 30 features `base + 0.1 j` and the label.
fn row(base: f64, label: &str) -> String {
    let mut fields: Vec<String> = (0..30)
        .map(|j| format!("{}", base + 0.1 * j as f64))
        .collect();
    fields.push(label.to_string());
    fields.join(",")
}

fn load_text(name: &str, text: &str) -> Result<Dataset, DataError> {
    let f = TempFile::new(name, text);
    load_wdbc(&f.0)
}

#[test]
fn loads_small_valid_file() {
    let text = format!(
        "3,30,malignant,benign\r\n{}\r\n{}\r\n\r\n{}\r\n",
        row(1.0, "0"),
        row(2.0, "1"),
        row(6.0, "1")
    );
    let data = load_text("valid.csv", &text).unwrap();
    assert_eq!(data.n_samples, 3);
    assert_eq!(data.s, vec![-1.0, 1.0, 1.0]);
    // Column 0 is (1, 2, 6): mean 3, population variance (4 + 1 + 9)/3.
    assert!((data.mean[0] - 3.0).abs() < 1e-15);
    assert!((data.std[0] - (14.0_f64 / 3.0).sqrt()).abs() < 1e-15);
}

#[test]
fn load_errors() {
    // Missing file.
    let missing = std::env::temp_dir().join("optic_ad_main_job_does_not_exist.csv");
    assert!(matches!(load_wdbc(&missing), Err(DataError::Io { .. })));

    let good = |b: f64, l: &str| row(b, l);
    let cases: Vec<(&str, String)> = vec![
        ("empty", String::new()),
        (
            "short header",
            format!("2,30,malignant\n{}\n{}\n", good(1.0, "0"), good(2.0, "1")),
        ),
        (
            "bad count",
            format!("two,30,m,b\n{}\n{}\n", good(1.0, "0"), good(2.0, "1")),
        ),
        (
            "29 features",
            format!("2,29,m,b\n{}\n{}\n", good(1.0, "0"), good(2.0, "1")),
        ),
        (
            "short row",
            format!("2,30,m,b\n{}\n{}\n", good(1.0, "0"), "1.0,2.0,0"),
        ),
        (
            "long row",
            format!("2,30,m,b\n{}\n{},0\n", good(1.0, "0"), good(2.0, "1")),
        ),
        (
            "not a number",
            format!(
                "2,30,m,b\n{}\n{}\n",
                good(1.0, "0"),
                good(2.0, "1").replacen("2", "x", 1)
            ),
        ),
        (
            "NaN feature",
            format!(
                "2,30,m,b\n{}\nNaN,{}\n",
                good(1.0, "0"),
                good(2.0, "1").split_once(',').unwrap().1
            ),
        ),
        (
            "bad label",
            format!("2,30,m,b\n{}\n{}\n", good(1.0, "0"), good(2.0, "2")),
        ),
        (
            "too few rows",
            format!("3,30,m,b\n{}\n{}\n", good(1.0, "0"), good(2.0, "1")),
        ),
        (
            "too many rows",
            format!(
                "2,30,m,b\n{}\n{}\n{}\n",
                good(1.0, "0"),
                good(2.0, "1"),
                good(3.0, "1")
            ),
        ),
        (
            "zero variance",
            // All rows equal: every column is constant.
            format!("2,30,m,b\n{}\n{}\n", good(1.0, "0"), good(1.0, "1")),
        ),
    ];
    for (i, (what, text)) in cases.iter().enumerate() {
        match load_text(&format!("bad{i}.csv"), text) {
            Err(e) => {
                let msg = e.to_string();
                assert!(!msg.is_empty());
                println!("{what}: {msg}");
                match *what {
                    "too few rows" | "too many rows" => {
                        assert!(matches!(e, DataError::RowCount { .. }), "{what}: {e:?}")
                    }
                    "zero variance" => assert!(
                        matches!(e, DataError::ZeroVariance { column: 0 }),
                        "{what}: {e:?}"
                    ),
                    _ => assert!(matches!(e, DataError::Parse { .. }), "{what}: {e:?}"),
                }
            }
            Ok(_) => panic!("{what}: loaded a malformed file"),
        }
    }

    // One constant column among varying ones.
    let mut r0: Vec<String> = row(1.0, "0").split(',').map(String::from).collect();
    let mut r1: Vec<String> = row(2.0, "1").split(',').map(String::from).collect();
    r0[7] = "5.5".into();
    r1[7] = "5.5".into();
    let text = format!("2,30,m,b\n{}\n{}\n", r0.join(","), r1.join(","));
    assert!(matches!(
        load_text("const_col.csv", &text),
        Err(DataError::ZeroVariance { column: 7 })
    ));
}

/// Only the last iterate is marked converged (the progress line prints
/// "converged" there, not "CG 0, step 0"); it met the gradient tolerance,
/// and every earlier one took a step.
#[test]
fn only_the_last_iterate_is_converged() {
    let (_, fit) = fitted();
    let (last, earlier) = fit.history.split_last().expect("a history");
    assert!(last.converged);
    assert!(last.grad_inf < NewtonOptions::default().grad_tol);
    assert_eq!((last.cg_iters, last.step), (0, 0.0));
    for it in earlier {
        assert!(!it.converged, "iterate {} marked converged", it.k);
        assert!(
            it.cg_iters > 0 && it.step > 0.0,
            "iterate {} took no step",
            it.k
        );
    }
}
