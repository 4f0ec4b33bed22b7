//! The minimal-surface area problem of MINPACK-2, written once with the
//! array API and solved by Newton-CG on array Hessian-vector products.
//!
//! The problem (B. M. Averick, R. G. Carter, J. J. Moré and G.-L. Xue,
//! "The MINPACK-2 test problem collection", Argonne MCS-P153-0692, 1992,
//! §"Minimal surface area"; also in CUTEst): find the surface `z = v(x, y)`
//! of least area over the unit square `D` with given values on its
//! boundary, that is minimise `∫_D (1 + ‖∇v‖²)^{1/2}`. MINPACK-2
//! discretises it with piecewise-linear finite elements: an `N × N` grid of
//! interior unknowns `v_{i,j}` at `(i h, j h)`, `1 ≤ i, j ≤ N`,
//! `h = 1/(N + 1)`, the boundary values `v_{i,j}` with `i` or `j` in
//! `{0, N + 1}` fixed, and each grid cell split into two triangles along
//! its anti-diagonal. The area is
//!
//! ```text
//! f(v) = (h²/2) Σ_{i=0..N} Σ_{j=0..N}       √(1 + ((v_{i+1,j} − v_{i,j})/h)² + ((v_{i,j+1} − v_{i,j})/h)²)
//!      + (h²/2) Σ_{i=1..N+1} Σ_{j=1..N+1}   √(1 + ((v_{i,j} − v_{i−1,j})/h)² + ((v_{i,j} − v_{i,j−1})/h)²)
//! ```
//!
//! the first sum over the lower-left triangles `(i, j), (i+1, j), (i, j+1)`
//! and the second over the upper-right ones `(i, j), (i−1, j), (i, j−1)`,
//! exactly the ranges of MINPACK-2's `dmsafg`: `2 (N + 1)²` triangles of
//! area `h²/2` that tile the square, each contributing the area of the
//! linear interpolant over it.
//!
//! # Boundary values: Scherk's surface
//!
//! MINPACK-2 takes its boundary values from Enneper's surface, which is
//! given parametrically: each boundary value needs a Newton solve, and so
//! would each interior value of the exact solution. Here the boundary
//! values come from Scherk's first surface, a graph in closed form,
//!
//! ```text
//! z(x, y) = (1/a) ln( cos(a (y − ½)) / cos(a (x − ½)) ),   a = 2,
//! ```
//!
//! so that the continuous minimiser is known at every grid point and the
//! discrete solution can be checked against it. (The area integrand
//! `√(1 + ‖p‖²)` is strictly convex in `p = ∇v`, so a smooth solution of
//! the minimal-surface equation is the one minimiser with its boundary
//! values.) `z = ln(cos y / cos x)` (H. F. Scherk, J. reine angew. Math.
//! 13 (1835) 185–208) solves the minimal-surface equation
//! `(1 + z_y²) z_xx − 2 z_x z_y z_xy + (1 + z_x²) z_yy = 0` (here
//! `z_xy = 0` and `(1 + tan² y) sec² x = (1 + tan² x) sec² y`); a homothety
//! maps minimal surfaces to minimal surfaces, which gives the factor
//! `1/a` in front (without it, `a ≠ 1` is not minimal). With `a = 2`,
//! `|a (x − ½)| ≤ 1 < π/2`, so the cosines stay above `cos 1 ≈ 0.54` and
//! the slopes `|z_x| = |tan(a (x − ½))|` below `tan 1 ≈ 1.56`: a surface
//! with real curvature, smooth up to the boundary, on which the discrete
//! solution converges at second order in `h`.
//!
//! # The code
//!
//! [`area`] is written once, generic over [`Array`]: the unknowns are
//! scattered into the padded grid of all values (precomputed [`Indices`])
//! and added to the constant boundary values; slices of the flattened grid
//! give the edge differences in `x` and `y`, and two `map3`s over slices of
//! those (one per kind of triangle, with a 0/1 mask for the slice entries
//! that wrap around a row) and two sums give `f`. On a traced array that is
//! 21 instructions whatever `N`, and its Hessian-vector program 81.
//! [`solve`] builds an [`optic_ad::Hvp::array`] once and runs a truncated Newton-CG
//! method (J. Nocedal and S. J. Wright, "Numerical Optimization", 2nd ed.,
//! §7.1, Algorithm 7.1) with Armijo backtracking. [`run`] solves by nested
//! iteration: grids of sizes `N`, `N/2`, `N/4`, … coarsest first, each
//! starting from the previous solution interpolated (W. L. Briggs,
//! V. E. Henson and S. F. McCormick, "A Multigrid Tutorial", 2nd ed., ch. 3,
//! "nested iteration"); `--single` solves the `N × N` grid alone from
//! MINPACK-2's starting point.
//!
//! Run: `cargo run --release --example minimal_surface [-- N [--single]]`
//! (default `N = 100`).

use std::fmt;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use optic_ad::array::{self, Array, Indices};
use optic_ad::{Error, Real};

/// The scale `a` of Scherk's surface `z = (1/a) ln(cos(a (y − ½)) / cos(a (x − ½)))`.
pub const SCHERK_A: f64 = 2.0;

/// The grid size the example solves without an argument.
pub const DEFAULT_N: usize = 100;

/// The largest grid size [`MinimalSurface::new`] accepts: gather indices
/// are 32-bit, and the padded grid has `(N + 2)²` points.
pub const MAX_N: usize = 65_000;

/// Scherk's first surface, scaled by `1/a` and centred on the unit square:
/// `z(x, y) = (1/a) ln(cos(a (y − ½)) / cos(a (x − ½)))` with
/// `a = `[`SCHERK_A`]. It solves the minimal-surface equation, so on the
/// square it is the surface of least area with its own boundary values.
///
/// It is 0 at the centre, rises towards `x = 0` and `x = 1`
/// (`scherk(0, ½) = ln(1/cos 1)/2 ≈ 0.308`) and falls towards `y = 0` and
/// `y = 1`: a saddle.
pub fn scherk(x: f64, y: f64) -> f64 {
    let a = SCHERK_A;
    ((a * (y - 0.5)).cos() / (a * (x - 0.5)).cos()).ln() / a
}

/// The discretised problem on an `N × N` grid of interior unknowns: the
/// boundary values (from [`scherk`]) on the padded grid and the indices
/// that place the unknowns in it.
///
/// Unknown `v_{i,j}` (`1 ≤ i, j ≤ N`, `i` along `x`) is entry
/// `(j − 1) N + (i − 1)` of the vector of unknowns, as in MINPACK-2. The
/// padded `(N + 2) × (N + 2)` grid of all values is stored by rows of
/// constant `j`: point `(i, j)` is entry `j (N + 2) + i`.
#[derive(Clone, Debug)]
pub struct MinimalSurface {
    n: usize,
    h: f64,
    /// The boundary values on the padded grid, 0 at the interior points.
    boundary: Arc<[f64]>,
    /// Where each unknown sits in the padded grid.
    interior: Indices,
    /// 1 where a triangle of the padded-grid slices is a triangle of the
    /// mesh, 0 where it would wrap around from the end of a row.
    mask: Arc<[f64]>,
}

impl MinimalSurface {
    /// The problem with `n × n` interior unknowns.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyInput`] for `n = 0` (no unknowns);
    /// [`Error::IndexOutOfRange`] for `n > `[`MAX_N`].
    pub fn new(n: usize) -> Result<Self, Error> {
        if n == 0 {
            return Err(Error::EmptyInput("the minimal-surface problem"));
        }
        if n > MAX_N {
            return Err(Error::IndexOutOfRange {
                what: "the minimal-surface grid size",
                index: n,
                len: MAX_N + 1,
            });
        }
        let h = 1.0 / (n + 1) as f64;
        let m = n + 2;
        let mut boundary = vec![0.0; m * m];
        for j in 0..m {
            for i in 0..m {
                if !is_interior(n, i, j) {
                    boundary[j * m + i] = scherk(i as f64 * h, j as f64 * h);
                }
            }
        }
        let mut interior = Vec::with_capacity(n * n);
        for j in 1..=n {
            for i in 1..=n {
                interior.push(j * m + i);
            }
        }
        // The triangles start at padded-grid entries k = j (N+2) + i for
        // 0 ≤ k < (N + 1)(N + 2) − 1; those with i = N + 1 are not triangles.
        let mask: Vec<f64> = (0..(n + 1) * m - 1)
            .map(|k| if k % m == n + 1 { 0.0 } else { 1.0 })
            .collect();
        Ok(MinimalSurface {
            n,
            h,
            boundary: boundary.into(),
            interior: Indices::new(&interior),
            mask: mask.into(),
        })
    }

    /// `N`, the interior grid points per direction.
    pub fn n(&self) -> usize {
        self.n
    }

    /// The mesh width `h = 1/(N + 1)`.
    pub fn h(&self) -> f64 {
        self.h
    }

    /// The number of unknowns, `N²`.
    pub fn unknowns(&self) -> usize {
        self.n * self.n
    }

    /// The number of triangles, `2 (N + 1)²`.
    pub fn triangles(&self) -> usize {
        2 * (self.n + 1) * (self.n + 1)
    }

    /// The value at grid point `(i, j)`, `0 ≤ i, j ≤ N + 1`: an unknown of
    /// `v` inside, the fixed boundary value on the boundary.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if `v` does not have `N²` entries;
    /// [`Error::IndexOutOfRange`] if `i` or `j` is above `N + 1`.
    pub fn value(&self, v: &[f64], i: usize, j: usize) -> Result<f64, Error> {
        self.check(v.len())?;
        let n = self.n;
        if i > n + 1 || j > n + 1 {
            return Err(Error::IndexOutOfRange {
                what: "minimal surface: grid point",
                index: i.max(j),
                len: n + 2,
            });
        }
        Ok(if is_interior(n, i, j) {
            v[(j - 1) * n + (i - 1)]
        } else {
            self.boundary[j * (n + 2) + i]
        })
    }

    /// Scherk's surface sampled at the unknowns: the continuous solution on
    /// the grid (`N²` entries, in the order of the unknowns).
    pub fn exact(&self) -> Vec<f64> {
        let h = self.h;
        let mut v = Vec::with_capacity(self.unknowns());
        for j in 1..=self.n {
            for i in 1..=self.n {
                v.push(scherk(i as f64 * h, j as f64 * h));
            }
        }
        v
    }

    /// MINPACK-2's standard starting point: at `(i h, j h)`, the mean of
    /// the linear interpolants of the boundary values between bottom and
    /// top and between left and right,
    /// `½ [(1 − jh) v_{i,0} + jh v_{i,N+1} + (1 − ih) v_{0,j} + ih v_{N+1,j}]`.
    pub fn start(&self) -> Vec<f64> {
        let (n, h) = (self.n, self.h);
        let b = |i: usize, j: usize| self.boundary[j * (n + 2) + i];
        let mut v = Vec::with_capacity(self.unknowns());
        for j in 1..=n {
            let alpha = j as f64 * h;
            for i in 1..=n {
                let beta = i as f64 * h;
                let vertical = alpha * b(i, n + 1) + (1.0 - alpha) * b(i, 0);
                let horizontal = beta * b(n + 1, j) + (1.0 - beta) * b(0, j);
                v.push(0.5 * (vertical + horizontal));
            }
        }
        v
    }

    /// `max |v − z|` over the unknowns, `z` Scherk's surface on the grid.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if `v` does not have `N²` entries.
    pub fn max_error(&self, v: &[f64]) -> Result<f64, Error> {
        self.check(v.len())?;
        Ok(v.iter()
            .zip(self.exact())
            .fold(0.0, |m, (a, b)| m.max((a - b).abs())))
    }

    fn check(&self, len: usize) -> Result<(), Error> {
        if len == self.unknowns() {
            Ok(())
        } else {
            Err(Error::LengthMismatch {
                what: "minimal surface: unknowns (N²)",
                expected: self.unknowns(),
                got: len,
            })
        }
    }
}

fn is_interior(n: usize, i: usize, j: usize) -> bool {
    (1..=n).contains(&i) && (1..=n).contains(&j)
}

/// The discrete area `f(v)` of the module docs, written once for any
/// [`Array`]: `v` holds the `N²` unknowns.
///
/// With `m = N + 2` and the padded grid `P` stored by rows (`P[j m + i] =
/// v_{i,j}`):
///
/// 1. `P` is the unknowns scattered to their places plus the constant
///    boundary values (one `scatter_add`, one `map2`);
/// 2. the edge differences `Dx[k] = P[k + 1] − P[k]` and
///    `Dy[k] = P[k + m] − P[k]` are `map2`s of two slices of `P`;
/// 3. the lower-left triangle at `k = j m + i` has the edges `Dx[k]`,
///    `Dy[k]`, and the upper-right triangle at `k + m + 1` has
///    `Dx[k + m]`, `Dy[k + 1]`: two `map3`s of slices of `Dx` and `Dy`
///    (and the 0/1 mask that drops the `k` with `i = N + 1`, where the
///    slices wrap from one row to the next) compute
///    `√(1 + (dx/h)² + (dy/h)²)`, as MINPACK-2 writes it;
/// 4. their sums times `h²/2` are `f`.
///
/// On a traced array ([`array::TArray`]) this is the same 21 instructions
/// for every `N`.
///
/// # Errors
///
/// [`Error::LengthMismatch`] if `v` does not have `N²` entries.
pub fn area<A: Array>(v: &A, p: &MinimalSurface) -> optic_ad::Result<A::Scalar> {
    p.check(v.len())?;
    let m = p.n + 2;
    let grid = v
        .scatter_add(&p.interior, m * m)?
        .map2(&A::constant(&p.boundary), |u, b| u + b)?;
    let dx = grid
        .slice(1, m * m - 1)?
        .map2(&grid.slice(0, m * m - 1)?, |r, l| r - l)?;
    let dy = grid
        .slice(m, m * m - m)?
        .map2(&grid.slice(0, m * m - m)?, |t, b| t - b)?;
    let len = p.mask.len();
    let mask = A::constant(&p.mask);
    let inv_h = 1.0 / p.h;
    let triangle = |dx: A::Elem, dy: A::Elem, keep: A::Elem| {
        let sx = dx * inv_h;
        let sy = dy * inv_h;
        (sx * sx + 1.0 + sy * sy).sqrt() * keep
    };
    let lower = dx
        .slice(0, len)?
        .map3(&dy.slice(0, len)?, &mask, triangle)?;
    let upper = dx
        .slice(m, len)?
        .map3(&dy.slice(1, len)?, &mask, triangle)?;
    Ok((lower.sum() + upper.sum()) * (0.5 * p.h * p.h))
}

/// Settings of [`solve`].
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Stop when `‖∇f‖∞ ≤ grad_tol · h²`. A component of `∇f` is `h²`
    /// times the residual of the minimal-surface equation at that node
    /// (the hat function of a node has integral `h²`), so this bounds that
    /// residual, independently of `N`.
    pub grad_tol: f64,
    /// Maximum number of Newton iterations.
    pub max_iter: usize,
    /// Maximum number of CG iterations per Newton step.
    pub max_cg: usize,
    /// Armijo sufficient-decrease constant `c₁`.
    pub armijo_c1: f64,
    /// Step-length reduction factor of the backtracking search.
    pub backtrack: f64,
    /// Maximum number of step reductions per line search.
    pub max_backtracks: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            grad_tol: 1e-10,
            max_iter: 50,
            max_cg: 20_000,
            armijo_c1: 1e-4,
            backtrack: 0.5,
            max_backtracks: 40,
        }
    }
}

/// One Newton iterate and the step taken from it (none from the last one:
/// then `converged` is set and `cg_iters` and `step` are 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Iteration {
    /// The grid size `N` of the problem being solved.
    pub n: usize,
    /// Iteration number `k` (0 is the starting point).
    pub k: usize,
    /// `f(v_k)`.
    pub area: f64,
    /// `‖∇f(v_k)‖∞`.
    pub grad_inf: f64,
    /// CG iterations for the step (one Hessian-vector product each).
    pub cg_iters: usize,
    /// Whether CG stopped on a direction of non-positive curvature.
    pub negative_curvature: bool,
    /// The accepted step length.
    pub step: f64,
    /// Whether `v_k` met the tolerance.
    pub converged: bool,
}

/// The result of [`solve`].
#[derive(Debug, Clone, PartialEq)]
pub struct Solution {
    /// The minimiser `v*` (`N²` unknowns).
    pub v: Vec<f64>,
    /// `f(v*)`, the discrete area.
    pub area: f64,
    /// `∇f(v*)`.
    pub gradient: Vec<f64>,
    /// `‖∇f(v*)‖∞`.
    pub grad_inf: f64,
    /// One entry per iterate; the last is `v*`.
    pub history: Vec<Iteration>,
    /// Newton steps taken.
    pub newton_iterations: usize,
    /// CG iterations in all, that is Hessian-vector products.
    pub cg_iterations: usize,
    /// Time to trace `f` and build its Hessian-vector program
    /// ([`optic_ad::Hvp::array`]).
    pub build_time: Duration,
    /// Time of the Newton-CG iteration after the build.
    pub solve_time: Duration,
    /// Instructions of the Hessian-vector program.
    pub program_len: usize,
}

/// Why [`solve`] failed.
#[derive(Debug)]
pub enum SolveError {
    /// An error from optic-ad (a wrong length among them).
    Ad(Error),
    /// The area or its gradient is not finite at an iterate.
    NonFinite {
        /// Iteration number.
        k: usize,
    },
    /// No step length gave sufficient decrease.
    LineSearch {
        /// Iteration number.
        k: usize,
        /// `‖∇f‖∞` there.
        grad_inf: f64,
    },
    /// The iteration cap was reached.
    MaxIterations {
        /// `‖∇f‖∞` at the last iterate.
        grad_inf: f64,
    },
}

impl From<Error> for SolveError {
    fn from(e: Error) -> Self {
        SolveError::Ad(e)
    }
}

impl fmt::Display for SolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SolveError::Ad(e) => write!(f, "{e}"),
            SolveError::NonFinite { k } => {
                write!(f, "area or gradient not finite at iteration {k}")
            }
            SolveError::LineSearch { k, grad_inf } => write!(
                f,
                "line search failed at iteration {k} (‖∇f‖∞ = {grad_inf:.3e})"
            ),
            SolveError::MaxIterations { grad_inf } => {
                write!(f, "no convergence (‖∇f‖∞ = {grad_inf:.3e})")
            }
        }
    }
}

impl std::error::Error for SolveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SolveError::Ad(e) => Some(e),
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

/// Work vectors of the CG solve.
struct Cg {
    p: Vec<f64>,
    r: Vec<f64>,
    d: Vec<f64>,
    hd: Vec<f64>,
}

impl Cg {
    fn new(n: usize) -> Self {
        Cg {
            p: vec![0.0; n],
            r: vec![0.0; n],
            d: vec![0.0; n],
            hd: vec![0.0; n],
        }
    }

    /// Solves `H p = −g` approximately by conjugate gradients from `p = 0`
    /// (Nocedal & Wright, Algorithm 7.1), `H` the Hessian at the point `h`
    /// was last linearised at: until `‖H p + g‖₂ ≤ tol`, for at most
    /// `max_iter` iterations, or up to a direction `d` with `dᵀ H d ≤ 0`
    /// (then `p` so far, or `−g` if that is the first direction). Returns
    /// the iterations and whether curvature stopped it; `p` is a descent
    /// direction.
    fn solve<F: Fn(&array::TArray) -> optic_ad::Result<array::TScalar>>(
        &mut self,
        h: &mut optic_ad::Hvp<optic_ad::OnArray<F>>,
        g: &[f64],
        tol: f64,
        max_iter: usize,
    ) -> Result<(usize, bool), Error> {
        let Cg { p, r, d, hd } = self;
        p.fill(0.0);
        r.copy_from_slice(g);
        for (d, g) in d.iter_mut().zip(g) {
            *d = -g;
        }
        let mut rr = dot(r, r);
        for it in 1..=max_iter {
            h.apply(d, hd)?;
            let curvature = dot(d, hd);
            if curvature <= 0.0 {
                if it == 1 {
                    p.copy_from_slice(d);
                }
                return Ok((it, true));
            }
            let alpha = rr / curvature;
            for ((p, r), (d, hd)) in p.iter_mut().zip(r.iter_mut()).zip(d.iter().zip(hd.iter())) {
                *p += alpha * d;
                *r += alpha * hd;
            }
            let rr_next = dot(r, r);
            if rr_next.sqrt() <= tol {
                return Ok((it, false));
            }
            let beta = rr_next / rr;
            rr = rr_next;
            for (d, r) in d.iter_mut().zip(r.iter()) {
                *d = beta * *d - r;
            }
        }
        Ok((max_iter, false))
    }
}

/// Minimises [`area`] from `start` by a truncated Newton-CG method on
/// Hessian-vector products of the array program.
///
/// `f` is traced once ([`optic_ad::Hvp::array`]); each trial point is one
/// [`optic_ad::Hvp::linearize`] (area and gradient), each CG iteration one
/// [`optic_ad::Hvp::apply`]. The Newton system `H p = −g_k` is solved to the
/// relative residual `η_k = min(½, √(‖g_k‖₂ / ‖g_0‖₂))` (the forcing
/// sequence of Nocedal & Wright, §7.1, made independent of the scale of
/// `f`, whose gradient shrinks like `h²`), and the step length comes from
/// Armijo backtracking from 1. Close to the optimum the predicted decrease
/// `c₁ α gᵀp` falls below the rounding error of `f` (a sum of `2 (N + 1)²`
/// terms), where Armijo cannot judge a step; there a step is also accepted
/// when `f` rises by no more than that rounding level and `‖∇f‖₂`
/// decreases. `progress` sees each iterate as soon as its step is known.
///
/// # Errors
///
/// [`SolveError::Ad`] with [`Error::LengthMismatch`] if `start` does not
/// have `N²` entries; [`SolveError::MaxIterations`],
/// [`SolveError::LineSearch`] and [`SolveError::NonFinite`] when the
/// iteration fails.
pub fn solve(
    p: &MinimalSurface,
    start: &[f64],
    opts: &Options,
    mut progress: impl FnMut(&Iteration),
) -> Result<Solution, SolveError> {
    p.check(start.len())?;
    let t_build = Instant::now();
    let mut h = optic_ad::Hvp::array(|v| area(v, p), start)?;
    let build_time = t_build.elapsed();
    let t_solve = Instant::now();

    let n = start.len();
    let tol = opts.grad_tol * p.h * p.h;
    let mut v = start.to_vec();
    h.linearize(&v)?;
    let mut f = h.value();
    let mut g = h.gradient().to_vec();
    let g0 = dot(&g, &g).sqrt();
    let mut cg = Cg::new(n);
    let mut trial = vec![0.0; n];
    let mut history = Vec::new();
    let mut cg_total = 0;

    for k in 0.. {
        let grad_inf = inf_norm(&g);
        if !f.is_finite() || !grad_inf.is_finite() {
            return Err(SolveError::NonFinite { k });
        }
        if grad_inf <= tol {
            let it = Iteration {
                n: p.n,
                k,
                area: f,
                grad_inf,
                cg_iters: 0,
                negative_curvature: false,
                step: 0.0,
                converged: true,
            };
            progress(&it);
            history.push(it);
            return Ok(Solution {
                v,
                area: f,
                gradient: g,
                grad_inf,
                history,
                newton_iterations: k,
                cg_iterations: cg_total,
                build_time,
                solve_time: t_solve.elapsed(),
                program_len: h.array_program().map_or(0, |p| p.len()),
            });
        }
        if k >= opts.max_iter {
            return Err(SolveError::MaxIterations { grad_inf });
        }

        // The Newton direction, to the forcing tolerance (h is linearised at v).
        let gg = dot(&g, &g);
        let gnorm = gg.sqrt();
        let eta = (gnorm / g0).sqrt().min(0.5);
        let (cg_iters, negative_curvature) = cg.solve(&mut h, &g, eta * gnorm, opts.max_cg)?;
        cg_total += cg_iters;

        // Armijo backtracking; the last trial point linearises h.
        let slope = dot(&g, &cg.p);
        let noise = 16.0 * f64::EPSILON * f.abs() * (p.triangles() as f64).sqrt();
        let mut alpha = 1.0;
        let mut accepted = false;
        for _ in 0..=opts.max_backtracks {
            for ((t, v), d) in trial.iter_mut().zip(&v).zip(&cg.p) {
                *t = v + alpha * d;
            }
            h.linearize(&trial)?;
            let f_trial = h.value();
            let sufficient = f_trial <= f + opts.armijo_c1 * alpha * slope;
            let within_noise = f_trial <= f + noise && {
                let gt = h.gradient();
                dot(gt, gt) < gg
            };
            if f_trial.is_finite() && (sufficient || within_noise) {
                accepted = true;
                break;
            }
            alpha *= opts.backtrack;
        }
        if !accepted {
            return Err(SolveError::LineSearch { k, grad_inf });
        }
        let it = Iteration {
            n: p.n,
            k,
            area: f,
            grad_inf,
            cg_iters,
            negative_curvature,
            step: alpha,
            converged: false,
        };
        progress(&it);
        history.push(it);
        std::mem::swap(&mut v, &mut trial);
        f = h.value();
        g.copy_from_slice(h.gradient());
    }
    unreachable!("the loop returns")
}

/// The piecewise-linear surface of a solution `v` of `coarse` (linear on
/// each triangle of its mesh, as in the discretisation) at `(x, y)` in the
/// unit square.
///
/// # Errors
///
/// [`Error::LengthMismatch`] if `v` does not have `N²` entries of the
/// coarse grid.
pub fn interpolate(coarse: &MinimalSurface, v: &[f64], x: f64, y: f64) -> Result<f64, Error> {
    let (n, h) = (coarse.n, coarse.h);
    let (fx, fy) = (x / h, y / h);
    // The cell (i, j) holding the point, clamped onto the grid.
    let i = (fx.max(0.0).floor() as usize).min(n);
    let j = (fy.max(0.0).floor() as usize).min(n);
    let (s, t) = (fx - i as f64, fy - j as f64);
    let at = |a: usize, b: usize| coarse.value(v, a, b);
    Ok(if s + t <= 1.0 {
        // Lower-left triangle (i, j), (i+1, j), (i, j+1).
        let c = at(i, j)?;
        c + s * (at(i + 1, j)? - c) + t * (at(i, j + 1)? - c)
    } else {
        // Upper-right triangle (i+1, j+1), (i, j+1), (i+1, j).
        let c = at(i + 1, j + 1)?;
        c + (1.0 - s) * (at(i, j + 1)? - c) + (1.0 - t) * (at(i + 1, j)? - c)
    })
}

/// A solution `v` of `coarse` interpolated ([`interpolate`]) at the
/// unknowns of `fine`: the starting point of nested iteration.
///
/// # Errors
///
/// [`Error::LengthMismatch`] if `v` does not have the coarse grid's `N²`
/// entries.
pub fn prolong(
    coarse: &MinimalSurface,
    v: &[f64],
    fine: &MinimalSurface,
) -> Result<Vec<f64>, Error> {
    coarse.check(v.len())?;
    let h = fine.h;
    let mut out = Vec::with_capacity(fine.unknowns());
    for j in 1..=fine.n {
        for i in 1..=fine.n {
            out.push(interpolate(coarse, v, i as f64 * h, j as f64 * h)?);
        }
    }
    Ok(out)
}

/// Grids with fewer unknowns per direction than this are solved from
/// MINPACK-2's starting point; larger ones start from the solution on a
/// grid of half the size ([`run`]).
pub const COARSEST_N: usize = 16;

/// The grid sizes nested iteration solves for `n`: `n`, `⌊n/2⌋`, … down
/// to the first below `2 · `[`COARSEST_N`], coarsest first.
pub fn levels(n: usize) -> Vec<usize> {
    let mut levels = vec![n];
    let mut m = n;
    while m >= 2 * COARSEST_N {
        m /= 2;
        levels.push(m);
    }
    levels.reverse();
    levels
}

/// One grid of a [`run`]: its size and cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Level {
    /// `N` of the grid.
    pub n: usize,
    /// Newton iterations on it.
    pub newton_iterations: usize,
    /// CG iterations (Hessian-vector products) on it.
    pub cg_iterations: usize,
    /// Time of its Hvp build and Newton-CG iteration.
    pub time: Duration,
}

/// What the example prints after the iteration.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// `N`.
    pub n: usize,
    /// The Newton-CG solution on the `N × N` grid.
    pub solution: Solution,
    /// The grids solved, coarsest first, the last being `N × N`.
    pub levels: Vec<Level>,
    /// The area of Scherk's surface sampled on the grid, `f(z)`.
    pub exact_area: f64,
    /// `max |v* − z|` over the unknowns.
    pub max_error: f64,
    /// Total time, problem set-up and coarse grids included.
    pub wall_time: Duration,
}

/// Solves the problem with `n × n` unknowns with [`Options::default`].
///
/// With `nested`, by nested iteration (mesh sequencing): the grids of
/// [`levels`] are solved coarsest first, the coarsest from MINPACK-2's
/// starting point and each finer one from the previous solution,
/// interpolated ([`prolong`]). Its error is that of the coarse
/// discretisation, so Newton starts close to the solution and spends no
/// iterations on the globalisation that a far start needs. Without
/// `nested`, the `n × n` grid alone is solved from MINPACK-2's starting
/// point. Both converge to the same discrete minimiser (`f` is strictly
/// convex). `progress` sees every iterate of every grid.
///
/// # Errors
///
/// As [`MinimalSurface::new`] and [`solve`].
pub fn run(
    n: usize,
    nested: bool,
    mut progress: impl FnMut(&Iteration),
) -> Result<Report, SolveError> {
    let t0 = Instant::now();
    let sizes = if nested { levels(n) } else { vec![n] };
    let mut levels = Vec::with_capacity(sizes.len());
    let mut last: Option<(MinimalSurface, Solution)> = None;
    for m in sizes {
        let t = Instant::now();
        let p = MinimalSurface::new(m)?;
        let start = match &last {
            None => p.start(),
            Some((coarse, s)) => prolong(coarse, &s.v, &p)?,
        };
        let s = solve(&p, &start, &Options::default(), &mut progress)?;
        levels.push(Level {
            n: m,
            newton_iterations: s.newton_iterations,
            cg_iterations: s.cg_iterations,
            time: t.elapsed(),
        });
        last = Some((p, s));
    }
    let (p, solution) = last.ok_or(Error::EmptyInput("the minimal-surface problem"))?;
    let exact_area = area(&array::Dense::new(p.exact()), &p)?;
    let max_error = p.max_error(&solution.v)?;
    Ok(Report {
        n,
        solution,
        levels,
        exact_area,
        max_error,
        wall_time: t0.elapsed(),
    })
}

/// `v` in scientific notation with `digits` after the point and a signed
/// two-digit exponent, so that columns line up.
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

const USAGE: &str = "usage: minimal_surface [N] [--single]";

/// `N` (default [`DEFAULT_N`]) and whether to solve by nested iteration
/// (the default) or on the `N × N` grid alone (`--single`).
fn parse_args() -> Result<(usize, bool), String> {
    let mut n = None;
    let mut nested = true;
    for a in std::env::args().skip(1) {
        if a == "--single" {
            nested = false;
        } else if n.is_none() {
            n =
                Some(a.parse::<usize>().map_err(|e| {
                    format!("N must be a positive integer, got {a:?} ({e}); {USAGE}")
                })?);
        } else {
            return Err(USAGE.into());
        }
    }
    let n = n.unwrap_or(DEFAULT_N);
    if n == 0 || n > MAX_N {
        return Err(format!("N must be in 1 ..= {MAX_N}, got {n}; {USAGE}"));
    }
    Ok((n, nested))
}

fn main() -> ExitCode {
    let (n, nested) = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "minimal surface (MINPACK-2) with {n} × {n} unknowns; boundary values of Scherk's surface"
    );
    println!("z = ln(cos 2(y − ½) / cos 2(x − ½)) / 2; Newton-CG on array Hessian-vector products");
    if nested {
        let sizes: Vec<String> = levels(n).iter().map(|m| m.to_string()).collect();
        println!(
            "nested iteration over N = {} (coarser grids: one line each)",
            sizes.join(", ")
        );
    } else {
        println!("single grid, from MINPACK-2's starting point");
    }
    println!();
    println!(
        "{:>5}  {:>4}  {:>22}  {:>10}  {:>6}  {:>9}",
        "N", "iter", "area", "‖∇f‖∞", "CG", "step"
    );
    let mut coarse_cg = 0;
    let report = run(n, nested, |it| {
        if it.n != n {
            // A coarse grid: one summary line when it converges.
            coarse_cg += it.cg_iters;
            if it.converged {
                println!(
                    "{:>5}  {:>4}  {:>22}  {:>10}  {:>6}  {:>9}",
                    it.n,
                    it.k,
                    sci(it.area, 15),
                    sci(it.grad_inf, 3),
                    coarse_cg,
                    "converged"
                );
                coarse_cg = 0;
            }
            return;
        }
        let tail = if it.converged {
            format!("{:>17}", "converged")
        } else {
            let note = if it.negative_curvature {
                "  (negative curvature)"
            } else {
                ""
            };
            format!("{:>6}  {:>9}{note}", it.cg_iters, sci(it.step, 2))
        };
        println!(
            "{:>5}  {:>4}  {:>22}  {:>10}  {tail}",
            it.n,
            it.k,
            sci(it.area, 15),
            sci(it.grad_inf, 3)
        );
    });
    let r = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let s = &r.solution;
    let coarse: usize = r.levels[..r.levels.len() - 1]
        .iter()
        .map(|l| l.cg_iterations)
        .sum();
    println!();
    println!("N                            {}", r.n);
    println!("unknowns                     {}", r.n * r.n);
    println!("area f(v*)                   {:.15}", s.area);
    println!("area f(z) of Scherk's z      {:.15}", r.exact_area);
    println!("max |v* − z|                 {}", sci(r.max_error, 3));
    println!("‖∇f(v*)‖∞                    {}", sci(s.grad_inf, 3));
    println!("Newton iterations            {}", s.newton_iterations);
    println!("CG iterations (HVPs)         {}", s.cg_iterations);
    println!("  on the coarser grids       {coarse}");
    println!("Hvp program instructions     {}", s.program_len);
    println!(
        "Hvp build time               {:.3} ms",
        s.build_time.as_secs_f64() * 1e3
    );
    println!(
        "Newton-CG time (N × N grid)  {:.3} s",
        s.solve_time.as_secs_f64()
    );
    println!(
        "wall time                    {:.3} s",
        r.wall_time.as_secs_f64()
    );
    ExitCode::SUCCESS
}
