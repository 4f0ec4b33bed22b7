//! Fits the Lotka–Volterra predator–prey model to the Hudson's Bay Company
//! lynx and snowshoe hare pelt counts of 1900–1920 (21 years; D. A.
//! MacLulich 1937, E. P. Odum, *Fundamentals of Ecology*, 1953; the data
//! of B. Carpenter's Stan case study "Predator-Prey Population Dynamics",
//! 2018), with derivatives through loops.
//!
//! Hare `u` is the prey, lynx `v` the predator:
//!
//! ```text
//! du/dt = α u − β u v,    dv/dt = −γ v + δ u v,
//! ```
//!
//! integrated from `(u₀, v₀)` in 1900 by the classical fourth-order
//! Runge–Kutta method, [`STEPS`] steps per year, each year one [`fold`] of
//! the step. The objective is least squares on the log counts (42
//! residuals), the six parameters `(α, β, γ, δ, u₀, v₀)` its unknowns.
//! Newton's method with the dense 6 × 6 Hessian (six Hessian-vector
//! products through the loops, [`optic_ad::Hvp::array`]), solved by faer's Cholesky
//! factorisation, damped (`H + μI`, Levenberg's rule) where the Hessian
//! is not positive definite, with a backtracking line search (Nocedal &
//! Wright, "Numerical Optimization", 2nd ed., §3.1 and §10.3).
//!
//! The optimum is checked against `examples/data/lynx_hare_fit.txt`,
//! written by the kept script `examples/data/lynx_hare_fit.py`: scipy's
//! `least_squares` (Levenberg–Marquardt, exact Jacobian by the complex
//! step) on the same discretisation. Agreement to 1e-8 relative is
//! required.
//!
//! ```text
//! cargo run --release --features faer --example ode_fit
//! ```

use faer::linalg::solvers::Solve;
use faer::{Col, Mat, Side};
use optic_ad::array::{Array, TArray, TScalar};
use optic_ad::{fold, Real, Result};

/// Runge–Kutta steps per year (`h = 1/50` year).
const STEPS: usize = 50;

/// The pelt counts, in thousands: columns `year,lynx,hare`.
const DATA: &str = include_str!("data/hudson_bay_lynx_hare.csv");

/// scipy's optimum on the same discretisation.
const REFERENCE: &str = include_str!("data/lynx_hare_fit.txt");

/// The start: the ballpark of the Stan case study's posterior means.
const START: [f64; 6] = [0.55, 0.028, 0.84, 0.026, 33.0, 6.0];

const NAMES: [&str; 6] = ["α", "β", "γ", "δ", "u₀", "v₀"];

pub struct Pelts {
    year: Vec<f64>,
    lynx: Vec<f64>,
    hare: Vec<f64>,
}

/// The embedded pelt counts.
pub fn pelts() -> std::result::Result<Pelts, String> {
    let mut d = Pelts {
        year: Vec::new(),
        lynx: Vec::new(),
        hare: Vec::new(),
    };
    for (i, line) in DATA.lines().enumerate().skip(1) {
        let f: Vec<f64> = line
            .split(',')
            .map(|s| s.trim().parse::<f64>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| format!("line {}: {e}", i + 1))?;
        let [year, lynx, hare] = f[..] else {
            return Err(format!("line {}: expected year,lynx,hare", i + 1));
        };
        d.year.push(year);
        d.lynx.push(lynx);
        d.hare.push(hare);
    }
    Ok(d)
}

/// The states `(u, v)` at the start of each of `years` years.
fn states<T: Real>(p: &[T], years: usize) -> Result<Vec<[T; 2]>> {
    let h = 1.0 / STEPS as f64;
    let rhs = |u: T, v: T| (p[0] * u - p[1] * u * v, p[3] * u * v - p[2] * v);
    let mut s = [p[4], p[5]];
    let mut out = vec![s];
    for _ in 1..years {
        s = fold(STEPS, s, |[u, v]: [T; 2]| {
            let (k1u, k1v) = rhs(u, v);
            let (k2u, k2v) = rhs(u + k1u * (h / 2.0), v + k1v * (h / 2.0));
            let (k3u, k3v) = rhs(u + k2u * (h / 2.0), v + k2v * (h / 2.0));
            let (k4u, k4v) = rhs(u + k3u * h, v + k3v * h);
            [
                u + (k1u + k2u * 2.0 + k3u * 2.0 + k4u) * (h / 6.0),
                v + (k1v + k2v * 2.0 + k3v * 2.0 + k4v) * (h / 6.0),
            ]
        })?;
        out.push(s);
    }
    Ok(out)
}

/// The sum of squared residuals of the log counts.
fn loss<T: Real>(p: &[T], d: &Pelts) -> Result<T> {
    let mut l = T::cst(0.0);
    for (k, [u, v]) in states(p, d.year.len())?.into_iter().enumerate() {
        let a = u.ln() - d.hare[k].ln();
        let b = v.ln() - d.lynx[k].ln();
        l = l + a * a + b * b;
    }
    Ok(l)
}

fn traced_loss(p: &TArray, d: &Pelts) -> Result<TScalar> {
    let p: Vec<TScalar> = (0..p.len()).map(|i| p.get(i)).collect::<Result<_>>()?;
    loss(&p, d)
}

fn inf_norm(v: &[f64]) -> f64 {
    v.iter().fold(0.0, |m, x| m.max(x.abs()))
}

/// Newton's result.
pub struct Fit {
    /// `(α, β, γ, δ, u₀, v₀)`.
    pub p: Vec<f64>,
    /// `L` there.
    pub loss: f64,
    /// `‖∇L‖∞` there.
    pub grad_inf: f64,
    /// Newton iterations taken.
    pub iterations: usize,
}

/// Damped Newton on the dense Hessian, from [`START`], until
/// `‖∇L‖∞ < 1e-10`; `progress(k, L, ‖∇L‖∞)` at each iterate.
pub fn newton(
    d: &Pelts,
    mut progress: impl FnMut(usize, f64, f64),
) -> std::result::Result<Fit, Box<dyn std::error::Error>> {
    let n = START.len();
    let mut p = START.to_vec();
    let mut h = optic_ad::Hvp::array(|x: &TArray| traced_loss(x, d), &p)?;
    let mut col = vec![0.0; n];
    let mut e = vec![0.0; n];
    for k in 0..100 {
        h.linearize(&p)?;
        let (f, g) = (h.value(), h.gradient().to_vec());
        let grad_inf = inf_norm(&g);
        progress(k, f, grad_inf);
        if !f.is_finite() || !grad_inf.is_finite() {
            return Err(format!("objective or gradient not finite at iteration {k}").into());
        }
        if grad_inf < 1e-10 {
            return Ok(Fit {
                p,
                loss: f,
                grad_inf,
                iterations: k,
            });
        }
        let mut hess = Mat::<f64>::zeros(n, n);
        for j in 0..n {
            e.fill(0.0);
            e[j] = 1.0;
            h.apply(&e, &mut col)?;
            for i in 0..n {
                hess[(i, j)] = col[i];
            }
        }
        let g = Col::<f64>::from_fn(n, |i| -g[i]);
        // Levenberg's damping where Cholesky fails: H + μI, μ growing.
        let scale = (0..n).fold(0.0f64, |m, i| m.max(hess[(i, i)].abs()));
        let mut mu = 0.0;
        let step = loop {
            let damped =
                Mat::<f64>::from_fn(n, n, |i, j| hess[(i, j)] + if i == j { mu } else { 0.0 });
            match damped.llt(Side::Lower) {
                Ok(llt) => break llt.solve(&g),
                Err(_) if mu < 1e6 * scale => mu = if mu == 0.0 { 1e-8 * scale } else { 10.0 * mu },
                Err(_) => return Err("no positive definite damping of the Hessian".into()),
            }
        };
        // Armijo backtracking on L.
        let slope: f64 = (0..n).map(|i| -g[i] * step[i]).sum();
        let mut t = 1.0;
        loop {
            let trial: Vec<f64> = (0..n).map(|i| p[i] + t * step[i]).collect();
            let ft = loss(&trial, d)?;
            if ft.is_finite() && ft <= f + 1e-4 * t * slope {
                p = trial;
                break;
            }
            t *= 0.5;
            if t < 1e-12 {
                return Err(format!("line search failed at iteration {k}").into());
            }
        }
    }
    Err("no convergence in 100 iterations".into())
}

/// The reference optimum: `name value` lines after `#` comments.
pub fn reference() -> std::result::Result<Vec<f64>, String> {
    REFERENCE
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("loss"))
        .map(|l| {
            l.split_whitespace()
                .nth(1)
                .ok_or_else(|| format!("bad reference line {l:?}"))?
                .parse::<f64>()
                .map_err(|e| format!("{l:?}: {e}"))
        })
        .collect()
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let d = pelts()?;
    println!(
        "Lotka–Volterra fit to {} years of lynx–hare pelts (RK4, {STEPS} steps per year), damped Newton:",
        d.year.len()
    );
    let fit = newton(&d, |k, f, g| {
        println!("  iteration {k:2}: L = {f:.15}, ‖∇L‖∞ = {g:.3e}")
    })?;
    println!(
        "converged in {} iterations: L = {:.12}, ‖∇L‖∞ = {:.2e}",
        fit.iterations, fit.loss, fit.grad_inf
    );
    let want = reference()?;
    let mut worst: f64 = 0.0;
    println!("\nparameter      optic-ad              scipy least_squares   rel. difference");
    for i in 0..6 {
        let rel = (fit.p[i] - want[i]).abs() / want[i].abs();
        worst = worst.max(rel);
        println!(
            "  {:<4} {:>22.15} {:>22.15} {:>12.2e}",
            NAMES[i], fit.p[i], want[i], rel
        );
    }
    if worst > 1e-8 {
        return Err(format!("optimum differs from scipy's by {worst:.2e} (relative)").into());
    }
    println!("agrees with scipy's optimum to {worst:.1e} (required: 1e-8)");
    println!(
        "\nyear   hare observed  hare fitted   lynx observed  lynx fitted   (thousands of pelts)"
    );
    for (k, [u, v]) in states(&fit.p, d.year.len())?.into_iter().enumerate() {
        println!(
            "{:.0} {:>12.1} {:>13.1} {:>14.1} {:>12.1}",
            d.year[k], d.hare[k], u, d.lynx[k], v
        );
    }
    Ok(())
}
