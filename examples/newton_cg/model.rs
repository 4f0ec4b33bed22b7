//! L2-regularised logistic regression on the Wisconsin Diagnostic Breast
//! Cancer data, fitted by an inexact Newton-CG method whose inner solve
//! uses only Hessian-vector products from [`optic_ad::Hvp`].
//!
//! The objective is written once, generic over [`Real`] ([`objective`]); it
//! is traced once and its compiled Hessian-vector program is evaluated at
//! every iterate.

use std::fmt;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use optic_ad::array::{Array, Matrix};
use optic_ad::{Differentiable, Hvp, Point, Real, Tracer};

/// Names of the 30 WDBC features, in file order: fields 0–9 are the means,
/// 10–19 the standard errors and 20–29 the "worst" values.
pub const FEATURE_NAMES: [&str; 30] = [
    "mean radius",
    "mean texture",
    "mean perimeter",
    "mean area",
    "mean smoothness",
    "mean compactness",
    "mean concavity",
    "mean concave points",
    "mean symmetry",
    "mean fractal dimension",
    "radius SE",
    "texture SE",
    "perimeter SE",
    "area SE",
    "smoothness SE",
    "compactness SE",
    "concavity SE",
    "concave points SE",
    "symmetry SE",
    "fractal dimension SE",
    "worst radius",
    "worst texture",
    "worst perimeter",
    "worst area",
    "worst smoothness",
    "worst compactness",
    "worst concavity",
    "worst concave points",
    "worst symmetry",
    "worst fractal dimension",
];

/// Number of features of a WDBC row.
pub const N_FEATURES: usize = FEATURE_NAMES.len();

/// A standardised, labelled data set.
///
/// Each feature column has been shifted by its mean and divided by its
/// population standard deviation (so it has mean 0 and variance 1).
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// Number of samples `n`.
    pub n_samples: usize,
    /// Number of features `d` (30 for WDBC).
    pub n_features: usize,
    /// Standardised features, row-major, `n × d`.
    pub x: Vec<f64>,
    /// Labels as signs: `+1` for class 1 (benign), `−1` for class 0
    /// (malignant).
    pub s: Vec<f64>,
    /// Column means of the raw features (`d` entries).
    pub mean: Vec<f64>,
    /// Column population standard deviations of the raw features.
    pub std: Vec<f64>,
    /// Names of class 0 and class 1 from the header.
    pub class_names: [String; 2],
}

impl Dataset {
    /// The standardised feature rows, each of `n_features` entries.
    pub fn rows(&self) -> std::slice::ChunksExact<'_, f64> {
        self.x.chunks_exact(self.n_features)
    }

    /// Number of parameters `θ = (w₁ … w_d, b)`: `d + 1`.
    pub fn n_params(&self) -> usize {
        self.n_features + 1
    }

    /// The data of [`objective_array`]: the design matrix `X̃ = [X 𝟙]`
    /// (`n × (d + 1)`, the ones column multiplying the intercept) and the
    /// negated signs `−s`, held by reference count so that traced
    /// programs share them instead of copying them.
    pub fn design(&self) -> ArrayData {
        let d = self.n_features;
        let mut x = Vec::with_capacity(self.n_samples * (d + 1));
        for row in self.rows() {
            x.extend_from_slice(row);
            x.push(1.0);
        }
        ArrayData {
            x: Arc::new(Matrix::new(self.n_samples, d + 1, x).expect("n × (d + 1) entries")),
            neg_s: self.s.iter().map(|s| -s).collect(),
            n_features: d,
        }
    }

    /// The margins `mᵢ = xᵢ·w + b` at `theta` (plain `f64`).
    pub fn margins(&self, theta: &[f64]) -> Vec<f64> {
        let (w, b) = theta.split_at(self.n_features);
        self.rows()
            .map(|row| b[0] + row.iter().zip(w).map(|(x, w)| x * w).sum::<f64>())
            .collect()
    }
}

/// Why a data file could not be loaded.
#[derive(Debug)]
pub enum DataError {
    /// The file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line is malformed (1-based line number).
    Parse {
        /// 1-based line number in the file.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The number of data rows differs from the header's count.
    RowCount {
        /// Rows announced by the header.
        expected: usize,
        /// Rows found.
        got: usize,
    },
    /// A feature column is constant, so it cannot be standardised.
    ZeroVariance {
        /// 0-based column index.
        column: usize,
    },
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataError::Io { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            DataError::Parse { line, message } => write!(f, "line {line}: {message}"),
            DataError::RowCount { expected, got } => {
                write!(f, "header announces {expected} rows, file has {got}")
            }
            DataError::ZeroVariance { column } => write!(
                f,
                "feature column {column} ({}) has zero variance and cannot be standardised",
                FEATURE_NAMES.get(*column).unwrap_or(&"?")
            ),
        }
    }
}

impl std::error::Error for DataError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DataError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Reads and standardises a WDBC file (format: see `examples/data/README.md`).
///
/// # Errors
///
/// [`DataError`] if the file cannot be read, a line is malformed (wrong
/// number of fields, a value that is not a finite number, a label other
/// than 0 or 1, a header other than `rows,30,name0,name1`), the row count
/// differs from the header's, or a feature column has zero variance.
pub fn load_wdbc(path: &Path) -> Result<Dataset, DataError> {
    let text = std::fs::read_to_string(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_wdbc(&text)
}

/// Parses and standardises the text of a WDBC file; see [`load_wdbc`].
///
/// Blank lines are ignored; fields may be surrounded by spaces; both LF and
/// CRLF line ends are accepted.
///
/// # Errors
///
/// As [`load_wdbc`], except for I/O.
pub fn parse_wdbc(text: &str) -> Result<Dataset, DataError> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty());
    let parse_err = |line: usize, message: String| DataError::Parse { line, message };

    let (hline, header) = lines
        .next()
        .ok_or_else(|| parse_err(1, "empty file: missing header".into()))?;
    let h: Vec<&str> = header.split(',').map(str::trim).collect();
    if h.len() != 4 {
        return Err(parse_err(
            hline,
            format!(
                "header must have 4 fields (rows,features,class0,class1), found {}",
                h.len()
            ),
        ));
    }
    let n_rows: usize = h[0].parse().map_err(|_| {
        parse_err(
            hline,
            format!("header row count {:?} is not an integer", h[0]),
        )
    })?;
    let d: usize = h[1].parse().map_err(|_| {
        parse_err(
            hline,
            format!("header feature count {:?} is not an integer", h[1]),
        )
    })?;
    if d != N_FEATURES {
        return Err(parse_err(
            hline,
            format!("header announces {d} features; WDBC has {N_FEATURES}"),
        ));
    }
    if n_rows < 2 {
        return Err(parse_err(
            hline,
            format!("header announces {n_rows} rows; need at least 2"),
        ));
    }
    let class_names = [h[2].to_string(), h[3].to_string()];

    let mut raw = Vec::with_capacity(n_rows * d);
    let mut s = Vec::with_capacity(n_rows);
    let mut got = 0usize;
    for (lineno, line) in lines {
        got += 1;
        if got > n_rows {
            continue; // counted, reported as RowCount below
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != d + 1 {
            return Err(parse_err(
                lineno,
                format!(
                    "expected {} fields ({d} features and a label), found {}",
                    d + 1,
                    fields.len()
                ),
            ));
        }
        for (j, f) in fields[..d].iter().enumerate() {
            let v: f64 = f
                .parse()
                .map_err(|_| parse_err(lineno, format!("feature {j}: {f:?} is not a number")))?;
            if !v.is_finite() {
                return Err(parse_err(
                    lineno,
                    format!("feature {j}: {f:?} is not finite"),
                ));
            }
            raw.push(v);
        }
        s.push(match fields[d] {
            "0" => -1.0,
            "1" => 1.0,
            other => {
                return Err(parse_err(
                    lineno,
                    format!("label {other:?} is neither 0 nor 1"),
                ))
            }
        });
    }
    if got != n_rows {
        return Err(DataError::RowCount {
            expected: n_rows,
            got,
        });
    }

    // Standardise with the population standard deviation (divide by n).
    let n = n_rows as f64;
    let mut mean = vec![0.0; d];
    let mut std = vec![0.0; d];
    for row in raw.chunks_exact(d) {
        for (m, v) in mean.iter_mut().zip(row) {
            *m += v;
        }
    }
    mean.iter_mut().for_each(|m| *m /= n);
    for row in raw.chunks_exact(d) {
        for ((sd, v), m) in std.iter_mut().zip(row).zip(&mean) {
            *sd += (v - m) * (v - m);
        }
    }
    for (j, sd) in std.iter_mut().enumerate() {
        *sd = (*sd / n).sqrt();
        // A column whose spread is at rounding level of its mean is constant.
        if sd.is_nan() || *sd <= 1e-12 * mean[j].abs().max(f64::MIN_POSITIVE) {
            return Err(DataError::ZeroVariance { column: j });
        }
    }
    let x = raw
        .chunks_exact(d)
        .flat_map(|row| {
            row.iter()
                .zip(mean.iter().zip(&std))
                .map(|(v, (m, sd))| (v - m) / sd)
        })
        .collect();
    Ok(Dataset {
        n_samples: n_rows,
        n_features: d,
        x,
        s,
        mean,
        std,
        class_names,
    })
}

/// `log(1 + eᶻ)`, branch-free and overflow-free:
/// `max(z, 0) + log(1 + e^{−|z|})`, with `max` and `|·|` written as
/// [`Real::select`] so that no guard is recorded when tracing.
pub fn softplus<T: Real>(z: T) -> T {
    let abs = T::select(z, z, -z);
    let pos = T::select(z, z, T::cst(0.0));
    pos + (T::cst(1.0) + (-abs).exp()).ln()
}

/// The model's parameters: a structured point of the AD drivers, whose
/// gradient is again a `Logistic` (read as `g.w`, `g.b`). Its leaves, in
/// order, are `θ = (w₁ … w_d, b)`, the flat form the solvers iterate on.
#[derive(Debug, Clone, PartialEq, Differentiable)]
pub struct Logistic<T> {
    /// Feature weights `w`, one per feature.
    pub w: Vec<T>,
    /// Intercept `b`.
    pub b: T,
}

impl Logistic<f64> {
    /// `w = 0`, `b = 0` for `d` features.
    pub fn zeros(d: usize) -> Self {
        Logistic {
            w: vec![0.0; d],
            b: 0.0,
        }
    }

    /// The parameters whose leaves are `theta = (w₁ … w_d, b)`; `None`
    /// unless `theta` has `d + 1` entries.
    pub fn from_leaves(d: usize, theta: &[f64]) -> Option<Self> {
        Self::zeros(d).rebuild(theta.to_vec())
    }
}

/// The objective `L(w, b) = Σᵢ log(1 + exp(−sᵢ(xᵢ·w + b))) + ½‖w‖²`
/// (the intercept `b` is not penalised), at `p`.
///
/// Written once for every [`Real`]: plain `f64`, num-dual numbers, and the
/// [`Tracer`] the AD drivers record with.
///
/// # Panics
///
/// If `p.w.len() != data.n_features`.
#[allow(dead_code)] // used by the tests
pub fn loss<T: Real>(p: &Logistic<T>, data: &Dataset) -> T {
    logistic_loss(&p.w, p.b, data)
}

/// [`loss`] at the flat leaves `theta = (w₁ … w_d, b)`.
///
/// Written once for every [`Real`]: plain `f64`, num-dual numbers, and the
/// [`Tracer`] the AD drivers record with.
///
/// # Panics
///
/// If `theta.len() != data.n_params()`.
#[allow(dead_code)] // used by the tests and benchmarks
pub fn objective<T: Real>(theta: &[T], data: &Dataset) -> T {
    assert_eq!(
        theta.len(),
        data.n_params(),
        "objective: wrong parameter count"
    );
    let (w, b) = theta.split_at(data.n_features);
    logistic_loss(w, b[0], data)
}

fn logistic_loss<T: Real>(w: &[T], b: T, data: &Dataset) -> T {
    assert_eq!(w.len(), data.n_features, "loss: wrong number of weights");
    let mut loss = T::cst(0.0);
    for (row, &s) in data.rows().zip(&data.s) {
        let mut m = b;
        for (&wj, &xij) in w.iter().zip(row) {
            m += wj * xij;
        }
        loss += softplus(m * (-s));
    }
    let mut reg = T::cst(0.0);
    for &wj in w {
        reg += wj * wj;
    }
    loss + reg * 0.5
}

/// The data of [`objective_array`], from [`Dataset::design`].
#[derive(Debug, Clone)]
pub struct ArrayData {
    /// `X̃ = [X 𝟙]`, `n × (d + 1)`.
    pub x: Arc<Matrix>,
    /// `−sᵢ` for each sample.
    pub neg_s: Arc<[f64]>,
    /// `d`.
    pub n_features: usize,
}

/// [`objective`] written with the array API: margins `m = X̃ θ` (one
/// matrix–vector product), `Σ softplus(−s ⊙ m)` (one map and a sum) and
/// `½ ‖w‖²`. On a traced array this is a handful of instructions whatever
/// the number of samples; on [`array::Dense`] it runs natively.
///
/// # Errors
///
/// [`optic_ad::Error::LengthMismatch`] if `theta` does not have `d + 1`
/// entries.
pub fn objective_array<A: Array>(theta: &A, data: &ArrayData) -> optic_ad::Result<A::Scalar> {
    let m = A::matvec(&data.x, theta)?;
    let neg_s = A::constant(&data.neg_s);
    let loss = m.map2(&neg_s, |m, ns| softplus(m * ns))?.sum();
    let w = theta.slice(0, data.n_features)?;
    Ok(loss + w.dot(&w)? * 0.5)
}

/// Settings of [`newton_cg`].
#[derive(Debug, Clone, PartialEq)]
pub struct NewtonOptions {
    /// Stop when `‖∇L‖∞` is below this.
    pub grad_tol: f64,
    /// Maximum number of Newton iterations (steps taken).
    pub max_iter: usize,
    /// Maximum number of CG iterations per Newton step.
    pub max_cg: usize,
    /// Armijo sufficient-decrease constant `c₁`.
    pub armijo_c1: f64,
    /// Backtracking factor for the step length.
    pub backtrack: f64,
    /// Maximum number of step-length reductions per line search.
    pub max_backtracks: usize,
}

impl Default for NewtonOptions {
    fn default() -> Self {
        NewtonOptions {
            grad_tol: 1e-9,
            max_iter: 100,
            max_cg: 500,
            armijo_c1: 1e-4,
            backtrack: 0.5,
            max_backtracks: 60,
        }
    }
}

/// One Newton iteration: the state at the iterate `θ_k`, and the step taken
/// from it (none from the final, converged iterate: `converged` is set, CG
/// iterations and step are 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Iteration {
    /// Iteration number `k` (0 is the starting point).
    pub k: usize,
    /// `L(θ_k)`.
    pub objective: f64,
    /// `‖∇L(θ_k)‖∞`.
    pub grad_inf: f64,
    /// CG iterations (each one Hessian-vector product) for the step.
    pub cg_iters: usize,
    /// Whether CG stopped on non-positive curvature.
    pub negative_curvature: bool,
    /// Accepted step length `α`.
    pub step: f64,
    /// Whether `θ_k` met the gradient tolerance (the last iterate; no step
    /// is taken from it).
    pub converged: bool,
}

/// The result of [`newton_cg`].
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    /// The minimiser `θ = (w₁ … w_d, b)`.
    pub theta: Vec<f64>,
    /// `L(θ)`.
    pub objective: f64,
    /// `∇L(θ)`.
    pub gradient: Vec<f64>,
    /// `‖∇L(θ)‖∞`.
    pub grad_inf: f64,
    /// One entry per iterate, the last one being `θ`.
    pub history: Vec<Iteration>,
    /// Number of Hessian-vector products ([`Hvp::apply`] calls).
    pub hvp_count: usize,
    /// Number of objective-and-gradient evaluations ([`Hvp::linearize`]).
    pub linearize_count: usize,
    /// Time spent tracing the objective and building the Hessian-vector
    /// program ([`Hvp::new`]).
    pub setup_time: std::time::Duration,
}

/// Why [`newton_cg`] failed.
#[derive(Debug)]
pub enum FitError {
    /// An error from the AD library.
    Ad(optic_ad::Error),
    /// The objective or gradient is not finite at an iterate.
    NonFinite {
        /// Iteration number.
        k: usize,
    },
    /// The line search found no step with sufficient decrease.
    LineSearch {
        /// Iteration number.
        k: usize,
        /// `‖∇L‖∞` there.
        grad_inf: f64,
    },
    /// The iteration cap was reached before convergence.
    MaxIterations {
        /// Iterations taken.
        iterations: usize,
        /// `‖∇L‖∞` at the last iterate.
        grad_inf: f64,
    },
}

impl From<optic_ad::Error> for FitError {
    fn from(e: optic_ad::Error) -> Self {
        FitError::Ad(e)
    }
}

impl fmt::Display for FitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FitError::Ad(e) => write!(f, "automatic differentiation failed: {e}"),
            FitError::NonFinite { k } => {
                write!(f, "objective or gradient not finite at iteration {k}")
            }
            FitError::LineSearch { k, grad_inf } => write!(
                f,
                "line search failed at iteration {k} (‖∇L‖∞ = {grad_inf:.3e})"
            ),
            FitError::MaxIterations {
                iterations,
                grad_inf,
            } => write!(
                f,
                "no convergence after {iterations} Newton iterations (‖∇L‖∞ = {grad_inf:.3e})"
            ),
        }
    }
}

impl std::error::Error for FitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FitError::Ad(e) => Some(e),
            _ => None,
        }
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn inf_norm(a: &[f64]) -> f64 {
    a.iter().fold(0.0, |m, x| m.max(x.abs()))
}

/// Result of the inner CG solve.
struct CgStep {
    iters: usize,
    negative_curvature: bool,
}

/// Approximately solves `H p = −g` by conjugate gradients (Nocedal & Wright,
/// Algorithm 7.1), at the point of the last `linearize` of `h`, writing `p`.
///
/// Stops when `‖r‖₂ ≤ tol`, after `max_iter` iterations, or on direction
/// `d` with `dᵀHd ≤ 0`: then `p` is the current iterate, or `−g` if that
/// happens at the first iteration. `p` is always a descent direction.
#[allow(clippy::too_many_arguments)]
fn cg_solve(
    h: &mut Hvp<impl optic_ad::LeafFunction>,
    g: &[f64],
    tol: f64,
    max_iter: usize,
    p: &mut [f64],
    r: &mut [f64],
    d: &mut [f64],
    hd: &mut [f64],
    hvp_count: &mut usize,
) -> Result<CgStep, optic_ad::Error> {
    p.iter_mut().for_each(|v| *v = 0.0);
    r.copy_from_slice(g);
    for (di, gi) in d.iter_mut().zip(g) {
        *di = -gi;
    }
    let mut rr = dot(r, r);
    for j in 0..max_iter {
        h.apply(d, hd)?;
        *hvp_count += 1;
        let dhd = dot(d, hd);
        if dhd <= 0.0 {
            if j == 0 {
                for (pi, gi) in p.iter_mut().zip(g) {
                    *pi = -gi;
                }
            }
            return Ok(CgStep {
                iters: j + 1,
                negative_curvature: true,
            });
        }
        let alpha = rr / dhd;
        for i in 0..p.len() {
            p[i] += alpha * d[i];
            r[i] += alpha * hd[i];
        }
        let rr_new = dot(r, r);
        if rr_new.sqrt() <= tol {
            return Ok(CgStep {
                iters: j + 1,
                negative_curvature: false,
            });
        }
        let beta = rr_new / rr;
        rr = rr_new;
        for (di, ri) in d.iter_mut().zip(r.iter()) {
            *di = -ri + beta * *di;
        }
    }
    Ok(CgStep {
        iters: max_iter,
        negative_curvature: false,
    })
}

/// Minimises [`objective`] by a line-search Newton-CG method, starting at
/// `θ = 0`.
///
/// The objective is traced once ([`Hvp::new`]); each iterate is evaluated
/// with [`Hvp::linearize_with_gradient`] (objective and gradient), and the
/// Newton system `H p = −g` is solved approximately by CG using only
/// [`Hvp::apply`], to the relative tolerance
/// `η_k = min(0.5, √‖g‖₂)` (Nocedal & Wright, Algorithm 7.1), stopping on
/// non-positive curvature. The step length comes from a backtracking
/// Armijo search on `L`, whose trial points are evaluated by the same
/// compiled program (so the accepted point is already linearised). Where the
/// predicted decrease is below the rounding error of `L`, a step is also
/// accepted if `L` stays within that rounding level and `‖∇L‖₂` decreases.
///
/// `progress` is called once per iterate, as soon as its step is known.
///
/// # Errors
///
/// [`FitError::MaxIterations`] if `‖∇L‖∞ ≥ grad_tol` after `max_iter`
/// steps; [`FitError::LineSearch`] if no step length gives sufficient
/// decrease; [`FitError::NonFinite`] for a non-finite objective or gradient
/// at an iterate; [`FitError::Ad`] for errors of the AD library.
pub fn newton_cg(
    data: &Dataset,
    opts: &NewtonOptions,
    progress: impl FnMut(&Iteration),
) -> Result<Fit, FitError> {
    let t0 = std::time::Instant::now();
    let design = data.design();
    let theta = vec![0.0; data.n_params()];
    let mut h = optic_ad::Hvp::array(|t| objective_array(t, &design), &theta)?;
    newton_cg_with(&mut h, t0.elapsed(), data.n_params(), opts, progress)
}

/// [`newton_cg`] on the scalar-loop model ([`loss`] of the structured
/// point [`Logistic`], traced by [`Hvp::structured`], one instruction per
/// multiply-add): the cross-check of the array model, and the cost of
/// tracing it, in the tests.
///
/// # Errors
///
/// As [`newton_cg`].
#[allow(dead_code)] // used by the tests
pub fn newton_cg_scalar(
    data: &Dataset,
    opts: &NewtonOptions,
    progress: impl FnMut(&Iteration),
) -> Result<Fit, FitError> {
    let t0 = std::time::Instant::now();
    let p0 = Logistic::zeros(data.n_features);
    let mut h = Hvp::structured(|p: &Logistic<Tracer>| loss(p, data), &p0)?;
    newton_cg_with(&mut h, t0.elapsed(), data.n_params(), opts, progress)
}

/// The Newton-CG iteration of [`newton_cg`] on any compiled [`Hvp`] over `n`
/// parameters, from `θ = 0`; `setup_time` is reported in the [`Fit`].
///
/// # Errors
///
/// As [`newton_cg`].
pub fn newton_cg_with(
    h: &mut Hvp<impl optic_ad::LeafFunction>,
    setup_time: std::time::Duration,
    n: usize,
    opts: &NewtonOptions,
    mut progress: impl FnMut(&Iteration),
) -> Result<Fit, FitError> {
    let mut theta = vec![0.0; n];

    let mut g = vec![0.0; n];
    let mut f = h.linearize_with_gradient(&theta, &mut g)?;
    let mut linearize_count = 1;
    let mut hvp_count = 0;

    let (mut p, mut r, mut d, mut hd) = (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    let (mut trial, mut g_trial) = (vec![0.0; n], vec![0.0; n]);
    let mut history = Vec::new();

    let mut k = 0;
    loop {
        let grad_inf = inf_norm(&g);
        if !f.is_finite() || !grad_inf.is_finite() {
            return Err(FitError::NonFinite { k });
        }
        if grad_inf < opts.grad_tol {
            let it = Iteration {
                k,
                objective: f,
                grad_inf,
                cg_iters: 0,
                negative_curvature: false,
                step: 0.0,
                converged: true,
            };
            progress(&it);
            history.push(it);
            return Ok(Fit {
                theta,
                objective: f,
                gradient: g,
                grad_inf,
                history,
                hvp_count,
                linearize_count,
                setup_time,
            });
        }
        if k >= opts.max_iter {
            return Err(FitError::MaxIterations {
                iterations: k,
                grad_inf,
            });
        }

        // Inexact Newton direction (h is linearised at theta).
        let gnorm = dot(&g, &g).sqrt();
        let tol = gnorm.sqrt().min(0.5) * gnorm;
        let cg = cg_solve(
            h,
            &g,
            tol,
            opts.max_cg,
            &mut p,
            &mut r,
            &mut d,
            &mut hd,
            &mut hvp_count,
        )?;

        // Backtracking Armijo line search; p is a descent direction.
        let slope = dot(&g, &p);
        // Near the optimum the predicted decrease `c₁ α gᵀp` falls below the
        // rounding error of evaluating L, and Armijo cannot tell a good step
        // from a bad one. There, a step is also accepted if L does not rise
        // by more than that rounding level and ‖∇L‖₂ decreases (cf. the
        // approximate Wolfe conditions of Hager & Zhang, 2005).
        let noise = 64.0 * f64::EPSILON * f.abs();
        let gg = dot(&g, &g);
        let mut alpha = 1.0;
        let mut accepted = None;
        for _ in 0..=opts.max_backtracks {
            for i in 0..n {
                trial[i] = theta[i] + alpha * p[i];
            }
            let f_trial = h.linearize_with_gradient(&trial, &mut g_trial)?;
            linearize_count += 1;
            if f_trial.is_finite()
                && (f_trial <= f + opts.armijo_c1 * alpha * slope
                    || (f_trial <= f + noise && dot(&g_trial, &g_trial) < gg))
            {
                accepted = Some(f_trial);
                break;
            }
            alpha *= opts.backtrack;
        }
        let Some(f_new) = accepted else {
            return Err(FitError::LineSearch { k, grad_inf });
        };

        let it = Iteration {
            k,
            objective: f,
            grad_inf,
            cg_iters: cg.iters,
            negative_curvature: cg.negative_curvature,
            step: alpha,
            converged: false,
        };
        progress(&it);
        history.push(it);

        // The last trial point is the accepted one, and h is linearised there.
        std::mem::swap(&mut theta, &mut trial);
        std::mem::swap(&mut g, &mut g_trial);
        f = f_new;
        k += 1;
    }
}

/// `v` in scientific notation with `digits` after the point and a signed
/// two-digit exponent (`-3.63e-01`, `2.15e+00`), so that a column of them
/// lines up: the number format of the main job and of `dense_newton`.
pub fn sci(v: f64, digits: usize) -> String {
    let s = format!("{v:.digits$e}");
    match s.split_once('e') {
        Some((m, e)) => {
            let (sign, d) = e.strip_prefix('-').map_or(("+", e), |d| ("-", d));
            format!("{m}e{sign}{d:0>2}")
        }
        None => s,
    }
}
