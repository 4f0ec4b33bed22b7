//! The minimal-surface example's checks, each against an independent
//! computation:
//!
//! * the area `f` written with the array API against a hand-written loop
//!   over MINPACK-2's triangles (below, no shared code), and its native
//!   `Dense<f64>` run against its traced array program;
//! * the array gradient against MINPACK-2's hand-derived gradient (coded
//!   below), the scalar trace of the same function (`Dense<Tracer>`) and
//!   num-dual `Dual64`; the array Hessian-vector product against the scalar
//!   trace and num-dual `HyperDual64`;
//! * the Newton-CG solutions at N = 7, 15, 31 (h = 1/8, 1/16, 1/32) against
//!   the closed-form Scherk surface, and their areas against the area of
//!   that surface computed by Gauss–Legendre quadrature: both errors fall
//!   by 4 when h halves;
//! * bad input returns `Err`.
//!
//! Tolerance of the derivative comparisons: 1e-12 relative to the largest
//! entry of the compared vector. The paths evaluate the same arithmetic in
//! different association (sums of up to 2 (N + 1)² = 128 triangle terms),
//! which moves results by a few ulps of the sum of magnitudes; a wrong term
//! is of the order of the entries.

#[path = "../examples/minimal_surface.rs"]
#[allow(dead_code)]
mod minimal_surface;

use approx::assert_relative_eq;
use minimal_surface::{
    area, interpolate, levels, prolong, run, scherk, solve, MinimalSurface, Options, SolveError,
    COARSEST_N, MAX_N, SCHERK_A,
};
use num_dual::{Dual64, HyperDual64};
use optic_ad::array::{self, Dense};
use optic_ad::Error;

const TOL: f64 = 1e-12;

/// Uniform numbers in [−1, 1) from a 64-bit linear congruential generator
/// (Knuth's MMIX constants), so the "random" points are reproducible.
fn uniform(seed: u64, len: usize) -> Vec<f64> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}

/// A point near (not at) the solution: MINPACK-2's start plus a
/// perturbation of size 0.1, so that the slopes of the triangles vary.
fn point(p: &MinimalSurface, seed: u64) -> Vec<f64> {
    p.start()
        .iter()
        .zip(uniform(seed, p.unknowns()))
        .map(|(v, r)| v + 0.1 * r)
        .collect()
}

/// The padded (N + 2) × (N + 2) grid of values, written independently of
/// the example: `g[i][j]` at `(i h, j h)`, Scherk's surface on the
/// boundary, unknown `(j − 1) N + (i − 1)` inside.
fn padded(n: usize, v: &[f64]) -> Vec<Vec<f64>> {
    let h = 1.0 / (n + 1) as f64;
    let a = SCHERK_A;
    let z = |x: f64, y: f64| ((a * (y - 0.5)).cos() / (a * (x - 0.5)).cos()).ln() / a;
    (0..n + 2)
        .map(|i| {
            (0..n + 2)
                .map(|j| {
                    if (1..=n).contains(&i) && (1..=n).contains(&j) {
                        v[(j - 1) * n + (i - 1)]
                    } else {
                        z(i as f64 * h, j as f64 * h)
                    }
                })
                .collect()
        })
        .collect()
}

/// MINPACK-2's area as a plain loop over the triangles: lower-left
/// `(i, j), (i+1, j), (i, j+1)` for `0 ≤ i, j ≤ N`, upper-right
/// `(i, j), (i−1, j), (i, j−1)` for `1 ≤ i, j ≤ N + 1`.
fn area_loop(n: usize, v: &[f64]) -> f64 {
    let h = 1.0 / (n + 1) as f64;
    let g = padded(n, v);
    let term = |c: f64, x: f64, y: f64| {
        let (dx, dy) = ((x - c) / h, (y - c) / h);
        (1.0 + dx * dx + dy * dy).sqrt()
    };
    let mut s = 0.0;
    for i in 0..=n {
        for j in 0..=n {
            s += term(g[i][j], g[i + 1][j], g[i][j + 1]);
        }
    }
    for i in 1..=n + 1 {
        for j in 1..=n + 1 {
            s += term(g[i][j], g[i - 1][j], g[i][j - 1]);
        }
    }
    s * h * h / 2.0
}

/// MINPACK-2's gradient, derived by hand: a triangle term
/// `(h²/2) √(1 + a² + b²)` with `a = (x − c)/h`, `b = (y − c)/h` has
/// `∂/∂x = (h/2) a / √…`, `∂/∂y = (h/2) b / √…`, `∂/∂c = −(∂/∂x + ∂/∂y)`.
fn gradient_loop(n: usize, v: &[f64]) -> Vec<f64> {
    let h = 1.0 / (n + 1) as f64;
    let g = padded(n, v);
    let mut grad = vec![0.0; n * n];
    let mut add = |i: usize, j: usize, d: f64| {
        if (1..=n).contains(&i) && (1..=n).contains(&j) {
            grad[(j - 1) * n + (i - 1)] += d;
        }
    };
    let mut triangle = |c: (usize, usize), x: (usize, usize), y: (usize, usize)| {
        let a = (g[x.0][x.1] - g[c.0][c.1]) / h;
        let b = (g[y.0][y.1] - g[c.0][c.1]) / h;
        let root = (1.0 + a * a + b * b).sqrt();
        let (gx, gy) = (0.5 * h * a / root, 0.5 * h * b / root);
        add(x.0, x.1, gx);
        add(y.0, y.1, gy);
        add(c.0, c.1, -(gx + gy));
    };
    for i in 0..=n {
        for j in 0..=n {
            triangle((i, j), (i + 1, j), (i, j + 1));
        }
    }
    for i in 1..=n + 1 {
        for j in 1..=n + 1 {
            triangle((i, j), (i - 1, j), (i, j - 1));
        }
    }
    grad
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(0.0_f64, |m, x| m.max(x.abs()));
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= TOL * scale,
            "{what}[{k}]: {a} vs {b} (scale {scale})"
        );
    }
}

#[test]
fn scherk_solves_the_minimal_surface_equation() {
    // (1 + z_y²) z_xx − 2 z_x z_y z_xy + (1 + z_x²) z_yy = 0, with the
    // derivatives by central differences of step 1e-3 (error ~1e-6 · z⁗).
    let d = 1e-3;
    for &(x, y) in &[(0.2, 0.7), (0.5, 0.5), (0.9, 0.1), (0.05, 0.95)] {
        let z = |x, y| scherk(x, y);
        let zx = (z(x + d, y) - z(x - d, y)) / (2.0 * d);
        let zy = (z(x, y + d) - z(x, y - d)) / (2.0 * d);
        let zxx = (z(x + d, y) - 2.0 * z(x, y) + z(x - d, y)) / (d * d);
        let zyy = (z(x, y + d) - 2.0 * z(x, y) + z(x, y - d)) / (d * d);
        let zxy =
            (z(x + d, y + d) - z(x + d, y - d) - z(x - d, y + d) + z(x - d, y - d)) / (4.0 * d * d);
        let residual = (1.0 + zy * zy) * zxx - 2.0 * zx * zy * zxy + (1.0 + zx * zx) * zyy;
        let scale = (1.0 + zy * zy) * zxx.abs() + (1.0 + zx * zx) * zyy.abs();
        assert!(residual.abs() <= 1e-5 * scale, "at ({x}, {y}): {residual}");
    }
}

#[test]
fn array_area_equals_native_traced_and_plain_loop() {
    for n in [1, 2, 5, 8] {
        let p = MinimalSurface::new(n).unwrap();
        for seed in [1, 2] {
            let v = point(&p, seed);
            let native = area(&Dense::new(v.clone()), &p).unwrap();
            // The traced array program, evaluated: same arithmetic and the
            // same summation order as the native run.
            let prog =
                array::trace(|x: &[array::TArray]| area(&x[0], &p), &[v.as_slice()]).unwrap();
            let traced = prog.eval(&[v.as_slice()]).unwrap()[0][0];
            assert_eq!(native, traced, "N = {n}");
            // The loop sums 2 (N + 1)² positive terms in another order: the
            // two sums differ by at most (terms) ε relative.
            let bound = (p.triangles() + 8) as f64 * f64::EPSILON;
            assert_relative_eq!(native, area_loop(n, &v), max_relative = bound);
        }
    }
}

#[test]
fn program_is_a_few_instructions_whatever_n() {
    let len = |n: usize| {
        let p = MinimalSurface::new(n).unwrap();
        let x = p.start();
        let f = array::trace(|v: &[array::TArray]| area(&v[0], &p), &[x.as_slice()]).unwrap();
        let h = optic_ad::Hvp::array(|v| area(v, &p), &x).unwrap();
        (f.len(), h.array_program().unwrap().len())
    };
    let small = len(4);
    assert!(small.0 <= 25, "f: {} instructions", small.0);
    assert!(small.1 <= 100, "Hvp: {} instructions", small.1);
    assert_eq!(small, len(40));
    assert_eq!(small, len(300));
}

#[test]
fn gradient_matches_hand_derived_scalar_trace_and_num_dual() {
    for n in [4, 7] {
        let p = MinimalSurface::new(n).unwrap();
        let x = point(&p, 10 + n as u64);
        let g = crate::common::array_gradient(|v| area(v, &p), &x).unwrap();
        assert_close(&g, &gradient_loop(n, &x), "hand-derived");
        let g_scalar = optic_ad::gradient(|t| area(&Dense::new(t.to_vec()), &p), &x).unwrap();
        assert_close(&g, &g_scalar, "scalar trace");
        let g_dual: Vec<f64> = (0..x.len())
            .map(|k| {
                let t = x
                    .iter()
                    .enumerate()
                    .map(|(j, &xj)| Dual64::new(xj, if j == k { 1.0 } else { 0.0 }))
                    .collect();
                area(&Dense::new(t), &p).unwrap().eps
            })
            .collect();
        assert_close(&g, &g_dual, "Dual64");
    }
}

#[test]
fn hvp_matches_scalar_trace_and_num_dual() {
    for n in [4, 7] {
        let p = MinimalSurface::new(n).unwrap();
        let x = point(&p, 20 + n as u64);
        let u = uniform(30 + n as u64, x.len());
        let mut h = optic_ad::Hvp::array(|v| area(v, &p), &x).unwrap();
        h.linearize(&x).unwrap();
        let mut hu = vec![0.0; x.len()];
        h.apply(&u, &mut hu).unwrap();
        // The one-shot form (a fresh driver's one pass, `hvp_at`) and this
        // driver's one pass agree bit for bit; the two-stage product to
        // rounding.
        let mut one_pass = vec![0.0; x.len()];
        h.eval(&x, &u, &mut one_pass).unwrap();
        assert_eq!(
            one_pass,
            crate::common::array_hvp(|v| area(v, &p), &x, &u).unwrap()
        );
        assert_close(&hu, &one_pass, "one pass");
        // Value and gradient of the linearisation.
        assert_relative_eq!(h.value(), area_loop(n, &x), max_relative = 1e-13);
        assert_close(h.gradient(), &gradient_loop(n, &x), "Hvp::gradient");

        let hu_scalar = optic_ad::hvp(|t| area(&Dense::new(t.to_vec()), &p), &x, &u).unwrap();
        assert_close(&hu, &hu_scalar, "scalar trace");
        // (H u)_k = ∂²f/∂u∂e_k: eps1 along u, eps2 along e_k.
        let hu_dual: Vec<f64> = (0..x.len())
            .map(|k| {
                let t = x
                    .iter()
                    .zip(&u)
                    .enumerate()
                    .map(|(j, (&xj, &uj))| {
                        HyperDual64::new(xj, uj, if j == k { 1.0 } else { 0.0 }, 0.0)
                    })
                    .collect();
                area(&Dense::new(t), &p).unwrap().eps1eps2
            })
            .collect();
        assert_close(&hu, &hu_dual, "HyperDual64");
    }
}

/// ∫∫ √(1 + z_x² + z_y²) over the unit square for Scherk's surface, by the
/// 3-point Gauss–Legendre rule on m × m cells (exact for polynomials of
/// degree 5 in each variable; error O(m⁻⁶)).
fn scherk_area(m: usize) -> f64 {
    let a = SCHERK_A;
    let density = |x: f64, y: f64| {
        let (zx, zy) = ((a * (x - 0.5)).tan(), (a * (y - 0.5)).tan());
        (1.0 + zx * zx + zy * zy).sqrt()
    };
    let r = 0.6_f64.sqrt();
    let rule = [(-r, 5.0 / 9.0), (0.0, 8.0 / 9.0), (r, 5.0 / 9.0)];
    let w = 1.0 / m as f64;
    let mut total = 0.0;
    for i in 0..m {
        for j in 0..m {
            let mut cell = 0.0;
            for (s, ws) in rule {
                for (t, wt) in rule {
                    let x = (i as f64 + 0.5 + 0.5 * s) * w;
                    let y = (j as f64 + 0.5 + 0.5 * t) * w;
                    cell += ws * wt * density(x, y);
                }
            }
            total += cell * 0.25 * w * w;
        }
    }
    total
}

#[test]
fn newton_cg_converges_at_second_order_to_scherk() {
    let exact_area = scherk_area(120);
    // The rule has converged: its error falls like m⁻⁶, and halving the
    // cells moves it by 5e-12, so Q(120) is within about 1e-13 (the area
    // errors below are above 1e-4).
    assert!((scherk_area(60) - exact_area).abs() < 1e-11);

    let mut previous: Option<(f64, f64)> = None;
    for n in [7, 15, 31] {
        // levels(n) = [n] below 2 · COARSEST_N: one grid, from MINPACK-2's start.
        let r = run(n, true, |_| {}).unwrap();
        assert_eq!(r.levels.len(), 1);
        let s = &r.solution;
        let p = MinimalSurface::new(n).unwrap();
        let h = p.h();
        // Converged to the tolerance, with the gradient recomputed by hand.
        assert!(s.history.last().unwrap().converged);
        assert!(s.grad_inf <= Options::default().grad_tol * h * h);
        let g = gradient_loop(n, &s.v);
        let g_inf = g.iter().fold(0.0_f64, |m, x| m.max(x.abs()));
        assert!(
            g_inf <= Options::default().grad_tol * h * h,
            "N = {n}: {g_inf}"
        );
        assert_relative_eq!(s.area, area_loop(n, &s.v), max_relative = 1e-13);

        // The discrete optimum beats Scherk's surface sampled on the grid,
        // by far more than the rounding of f (about 1e-15).
        assert_eq!(r.exact_area, area(&Dense::new(p.exact()), &p).unwrap());
        assert!(r.exact_area - s.area > 1e-12, "N = {n}");

        // Errors against the closed form.
        let max_error =
            s.v.iter()
                .zip(p.exact())
                .fold(0.0_f64, |m, (a, b)| m.max((a - b).abs()));
        assert_eq!(max_error, r.max_error);
        let area_error = exact_area - s.area;
        assert!(
            area_error > 0.0,
            "the discrete area is below the continuous one"
        );
        if let Some((e, a)) = previous {
            // Second order: both errors fall by 4 when h halves, up to
            // relative terms of order h² (a few percent at h = 1/8; the
            // area's expansion is cleaner than the pointwise maximum's).
            let (re, ra) = (e / max_error, a / area_error);
            assert!((3.5..=4.5).contains(&re), "N = {n}: error ratio {re}");
            assert!(
                (3.95..=4.05).contains(&ra),
                "N = {n}: area error ratio {ra}"
            );
        }
        previous = Some((max_error, area_error));
    }
}

#[test]
fn nested_iteration_reaches_the_single_grid_minimiser() {
    // levels(63) = [31, 63]: the 31 × 31 solution, interpolated, starts 63.
    assert_eq!(levels(63), vec![31, 63]);
    let nested = run(63, true, |_| {}).unwrap();
    let single = run(63, false, |_| {}).unwrap();
    assert_eq!(nested.levels.len(), 2);
    assert_eq!(single.levels.len(), 1);
    // f is strictly convex: one minimiser. Both stop at ‖∇f‖∞ ≤ 1e-10 h², so
    // they differ by far less than the discretisation error.
    let diff = nested
        .solution
        .v
        .iter()
        .zip(&single.solution.v)
        .fold(0.0_f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        diff <= 1e-4 * single.max_error,
        "{diff} vs {}",
        single.max_error
    );
    assert_relative_eq!(
        nested.solution.area,
        single.solution.area,
        max_relative = 1e-14
    );
}

#[test]
fn levels_halve_down_to_the_coarsest() {
    assert_eq!(levels(1000), vec![31, 62, 125, 250, 500, 1000]);
    assert_eq!(levels(2 * COARSEST_N - 1), vec![2 * COARSEST_N - 1]);
    assert_eq!(levels(2 * COARSEST_N), vec![COARSEST_N, 2 * COARSEST_N]);
}

#[test]
fn interpolation_is_linear_on_the_coarse_triangles() {
    let coarse = MinimalSurface::new(5).unwrap();
    let v = point(&coarse, 40);
    let h = coarse.h();
    for (i, j) in [(0, 0), (1, 3), (5, 5), (6, 2), (6, 6)] {
        let want = coarse.value(&v, i, j).unwrap();
        let got = interpolate(&coarse, &v, i as f64 * h, j as f64 * h).unwrap();
        assert_relative_eq!(got, want, epsilon = 1e-15, max_relative = 1e-14);
    }
    // Inside the lower-left triangle of cell (2, 3), barycentric weights
    // (1 − s − t, s, t); inside the upper-right one of cell (1, 1),
    // (s + t − 1, 1 − s, 1 − t) on (2, 2), (1, 2), (2, 1).
    let at = |i, j| coarse.value(&v, i, j).unwrap();
    let (s, t) = (0.25, 0.5);
    let lower = (1.0 - s - t) * at(2, 3) + s * at(3, 3) + t * at(2, 4);
    let got = interpolate(&coarse, &v, (2.0 + s) * h, (3.0 + t) * h).unwrap();
    assert_relative_eq!(got, lower, max_relative = 1e-14);
    let (s, t) = (0.75, 0.5);
    let upper = (s + t - 1.0) * at(2, 2) + (1.0 - s) * at(1, 2) + (1.0 - t) * at(2, 1);
    let got = interpolate(&coarse, &v, (1.0 + s) * h, (1.0 + t) * h).unwrap();
    assert_relative_eq!(got, upper, max_relative = 1e-14);
    // Scherk's surface on the coarse grid, prolonged, is within the P1
    // interpolation error of Scherk's surface on the fine grid: at a point
    // of a triangle of diameter d, |z − I z| ≤ ½ d² max‖D²z‖₂, with
    // d = √2 h_c and D²z = diag(a sec²(a(x − ½)), −a sec²(a(y − ½))),
    // whose norm is at most 2 sec² 1 < 7 (a = 2): below 7 h_c².
    let fine = MinimalSurface::new(11).unwrap();
    let v_fine = prolong(&coarse, &coarse.exact(), &fine).unwrap();
    let err = fine.max_error(&v_fine).unwrap();
    assert!(err > 0.0 && err < 7.0 * h * h, "{err}");
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let p = MinimalSurface::new(4).unwrap();
    let short = vec![0.0; 15];
    assert!(matches!(
        area(&Dense::new(short.clone()), &p),
        Err(Error::LengthMismatch {
            expected: 16,
            got: 15,
            ..
        })
    ));
    assert!(matches!(
        crate::common::array_gradient(|v| area(v, &p), &[0.0; 17]),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        optic_ad::Hvp::array(|v| area(v, &p), &short),
        Err(Error::LengthMismatch { .. })
    ));
    let mut h = optic_ad::Hvp::array(|v| area(v, &p), &p.start()).unwrap();
    let mut out = vec![0.0; 16];
    assert!(matches!(
        h.apply(&[0.0; 16], &mut out),
        Err(Error::NotLinearized)
    ));
    assert!(h.linearize(&short).is_err());
    h.linearize(&p.start()).unwrap();
    assert!(h.apply(&short, &mut out).is_err());
    assert!(matches!(
        solve(&p, &short, &Options::default(), |_| {}),
        Err(SolveError::Ad(Error::LengthMismatch { .. }))
    ));
    assert!(matches!(MinimalSurface::new(0), Err(Error::EmptyInput(_))));
    assert!(matches!(
        MinimalSurface::new(MAX_N + 1),
        Err(Error::IndexOutOfRange { .. })
    ));
    assert!(matches!(
        run(0, true, |_| {}),
        Err(SolveError::Ad(Error::EmptyInput(_)))
    ));
    assert!(matches!(
        run(0, false, |_| {}),
        Err(SolveError::Ad(Error::EmptyInput(_)))
    ));
    let v = p.start();
    assert!(p.value(&v, 6, 0).is_err());
    assert!(p.value(&v, 0, 6).is_err());
    assert!(p.value(&short, 1, 1).is_err());
    assert!(p.max_error(&short).is_err());
    assert!(interpolate(&p, &short, 0.5, 0.5).is_err());
    let fine = MinimalSurface::new(9).unwrap();
    assert!(prolong(&p, &short, &fine).is_err());
    // A failure inside the iteration is reported, not a panic.
    let opts = Options {
        max_iter: 0,
        ..Options::default()
    };
    assert!(matches!(
        solve(&p, &p.start(), &opts, |_| {}),
        Err(SolveError::MaxIterations { .. })
    ));
}
