//! The `faer` feature: faer columns and matrices in and out of the drivers.
//!
//! The module only converts, so its matrices must equal the slice-based
//! drivers' results entry for entry, bit for bit, in the documented layout
//! (row `i` of a Jacobian is `∇fᵢ`). The Hessian is also checked against a
//! closed form, and the dense Newton example against the main job's
//! Newton-CG fit.

#[allow(dead_code)]
#[path = "../examples/dense_newton.rs"]
mod dense_newton;

#[path = "../examples/ode_fit.rs"]
#[allow(dead_code)]
mod ode_fit;

use approx::assert_relative_eq;
use faer::{col, Col, Mat};
use optic_ad::{faer_interop, Error, Hvp, Real, Tracer};

/// `f(x) = x₀² x₁ + sin(x₁x₂) + e^{x₀} x₃ + x₂ x₃²`.
fn f<T: Real>(x: &[T]) -> T {
    x[0] * x[0] * x[1] + (x[1] * x[2]).sin() + x[0].exp() * x[3] + x[2] * x[3] * x[3]
}

/// The Hessian of [`f`], by hand:
///
/// ```text
/// ∂f/∂x₀ = 2x₀x₁ + e^{x₀}x₃      ∂f/∂x₁ = x₀² + x₂ cos(x₁x₂)
/// ∂f/∂x₂ = x₁ cos(x₁x₂) + x₃²    ∂f/∂x₃ = e^{x₀} + 2x₂x₃
/// ```
fn f_hessian(x: &[f64]) -> [[f64; 4]; 4] {
    let (s, c) = (x[1] * x[2]).sin_cos();
    let e = x[0].exp();
    let h01 = 2.0 * x[0];
    let h12 = c - x[1] * x[2] * s;
    [
        [2.0 * x[1] + e * x[3], h01, 0.0, e],
        [h01, -x[2] * x[2] * s, h12, 0.0],
        [0.0, h12, -x[1] * x[1] * s, 2.0 * x[3]],
        [e, 0.0, 2.0 * x[3], 2.0 * x[2]],
    ]
}

/// `g : ℝ⁴ → ℝ³`, so that a transposed Jacobian has the wrong shape.
fn g<T: Real>(x: &[T]) -> Vec<T> {
    vec![
        x[0] * x[1] * x[2],
        (x[3] - x[0]).exp(),
        x[1].atan2(x[2]) * x[3],
    ]
}

const POINTS: [[f64; 4]; 3] = [
    [0.3, -1.2, 0.7, 2.0],
    [-1.5, 0.4, 2.2, -0.6],
    [1.1, 2.5, -0.3, 0.9],
];

fn column(x: &[f64]) -> Col<f64> {
    Col::from_fn(x.len(), |i| x[i])
}

fn assert_same_bits(got: f64, want: f64, what: &str) {
    assert_eq!(got.to_bits(), want.to_bits(), "{what}: {got:e} vs {want:e}");
}

#[test]
fn columns_and_matrices_equal_the_slice_drivers_bit_for_bit() {
    let v = [0.5, -2.0, 1.5, 0.25];
    for x in &POINTS {
        let xc = column(x);

        let want = optic_ad::gradient(f, x).unwrap();
        let got = faer_interop::gradient(f, &xc).unwrap();
        assert_eq!(got.nrows(), 4);
        for i in 0..4 {
            assert_same_bits(got[i], want[i], "gradient");
        }

        let (wy, wg) = optic_ad::value_and_gradient(f, x).unwrap();
        let (gy, gg) = faer_interop::value_and_gradient(f, xc.as_ref()).unwrap();
        assert_same_bits(gy, wy, "value");
        for i in 0..4 {
            assert_same_bits(gg[i], wg[i], "value_and_gradient");
        }

        let want = optic_ad::hvp(f, x, &v).unwrap();
        let got = faer_interop::hvp(f, &xc, column(&v)).unwrap();
        for i in 0..4 {
            assert_same_bits(got[i], want[i], "hvp");
        }

        let want = optic_ad::hessian(f, x).unwrap();
        let got = faer_interop::hessian(f, &xc).unwrap();
        assert_eq!((got.nrows(), got.ncols()), (4, 4));
        for (i, row) in want.iter().enumerate() {
            for (j, &w) in row.iter().enumerate() {
                assert_same_bits(got[(i, j)], w, "hessian");
            }
        }

        let want = optic_ad::jacobian(g, x).unwrap();
        let got = faer_interop::jacobian(g, &xc).unwrap();
        assert_eq!((got.nrows(), got.ncols()), (3, 4), "m × n");
        for (i, row) in want.iter().enumerate() {
            for (j, &w) in row.iter().enumerate() {
                assert_same_bits(got[(i, j)], w, "jacobian");
            }
        }
    }
}

/// The compiled path (one `Hvp`, moved from point to point) gives the
/// same Hessian as the one-shot driver, and the same products.
#[test]
fn compiled_hessian_at_equals_the_one_shot_driver() {
    let mut h = Hvp::new(f, &POINTS[0]).unwrap();
    for x in &POINTS {
        let (y, grad, hess) = faer_interop::hessian_at(&mut h, column(x)).unwrap();
        assert_same_bits(y, f(x), "value");
        let want = optic_ad::gradient(f, x).unwrap();
        for i in 0..4 {
            assert_same_bits(grad[i], want[i], "gradient");
        }
        let want = optic_ad::hessian(f, x).unwrap();
        for (i, row) in want.iter().enumerate() {
            for (j, &w) in row.iter().enumerate() {
                assert_same_bits(hess[(i, j)], w, "hessian_at");
            }
        }
        // `hessian_at` leaves `h` linearised at `x`.
        let v = col![1.0, -1.0, 0.5, 2.0];
        let hv = faer_interop::apply(&mut h, &v).unwrap();
        let want = optic_ad::hvp(f, x, &[1.0, -1.0, 0.5, 2.0]).unwrap();
        for i in 0..4 {
            assert_same_bits(hv[i], want[i], "apply");
        }
    }
}

/// `f`'s Hessian against the closed form. Every entry is a few correctly
/// rounded operations (and the structural zeros are exact), so 1e-14
/// relative, with 1e-14 absolute for the zeros, is a strict bound.
#[test]
fn hessian_matches_the_closed_form() {
    for x in &POINTS {
        let got = faer_interop::hessian(f, column(x)).unwrap();
        let want = f_hessian(x);
        for i in 0..4 {
            for j in 0..4 {
                assert_relative_eq!(
                    got[(i, j)],
                    want[i][j],
                    epsilon = 1e-14,
                    max_relative = 1e-14
                );
            }
        }
        assert_eq!(got[(0, 2)], 0.0);
        assert_eq!(got[(1, 3)], 0.0);
    }
}

/// A column that is not contiguous (a row of a column-major matrix) is
/// read correctly: the same results as the contiguous copy.
#[test]
fn strided_columns_are_read_entry_by_entry() {
    let m = Mat::from_fn(3, 4, |i, j| POINTS[i][j]);
    for (i, x) in POINTS.iter().enumerate() {
        let strided = m.row(i).transpose();
        assert!(
            strided.try_as_col_major().is_none(),
            "the test needs a strided column"
        );
        let a = faer_interop::hessian(f, strided).unwrap();
        let b = faer_interop::hessian(f, column(x)).unwrap();
        assert_eq!(a, b);
        let a = faer_interop::hvp(f, strided, strided).unwrap();
        let b = optic_ad::hvp(f, x, x).unwrap();
        for k in 0..4 {
            assert_same_bits(a[k], b[k], "hvp on strided columns");
        }
    }
}

#[test]
fn bad_input_is_an_error() {
    let empty = Col::<f64>::zeros(0);
    assert!(matches!(
        faer_interop::gradient(f, &empty),
        Err(Error::EmptyInput(_))
    ));
    assert!(matches!(
        faer_interop::hessian(f, &empty),
        Err(Error::EmptyInput(_))
    ));
    assert!(matches!(
        faer_interop::jacobian(g, &empty),
        Err(Error::EmptyInput(_))
    ));
    assert!(matches!(
        faer_interop::hvp(f, column(&POINTS[0]), col![1.0, 2.0]),
        Err(Error::LengthMismatch { .. })
    ));

    let mut h = Hvp::new(|x: &[Tracer]| x[0] * x[1], &[1.0, 2.0]).unwrap();
    assert!(matches!(
        faer_interop::apply(&mut h, col![1.0, 0.0]),
        Err(Error::NotLinearized)
    ));
    assert!(matches!(
        faer_interop::hessian_at(&mut h, col![1.0, 2.0, 3.0]),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        faer_interop::linearize(&mut h, col![1.0]),
        Err(Error::LengthMismatch { .. })
    ));
    faer_interop::linearize(&mut h, col![1.0, 2.0]).unwrap();
    assert!(matches!(
        faer_interop::apply(&mut h, col![1.0, 0.0, 0.0]),
        Err(Error::LengthMismatch { .. })
    ));
}

/// `examples/dense_newton`: full Newton steps with a Cholesky solve on the
/// dense AD Hessian reach the main job's Newton-CG optimum, within the
/// strong-convexity bounds derived in the example's documentation.
#[test]
fn dense_newton_agrees_with_newton_cg() {
    let c = dense_newton::run(&dense_newton::default_data(), |_| {}).unwrap();
    let last = c.dense.history.last().unwrap();
    println!(
        "dense Newton: {} iterations, ‖∇L‖∞ {:.3e}; Newton-CG: {} iterations; \
         ‖Δθ‖₂ {:.3e} (bound {:.3e}), |ΔL| {:.3e} (bound {:.3e}), λ_min {:.4}",
        c.dense.history.len() - 1,
        last.grad_inf,
        c.cg_iterations,
        c.coef_distance,
        c.coef_bound,
        c.objective_difference,
        c.objective_bound,
        c.dense.eigenvalues[0]
    );
    assert!(last.grad_inf < 1e-9 && last.step == 0.0);
    // The bound needs a positive definite Hessian at the optimum.
    assert!(c.dense.eigenvalues[0] > 0.0);
    assert!(
        c.coef_distance <= c.coef_bound,
        "‖Δθ‖₂ = {:.3e} > {:.3e}",
        c.coef_distance,
        c.coef_bound
    );
    assert!(
        c.objective_difference <= c.objective_bound,
        "|ΔL| = {:.3e} > {:.3e}",
        c.objective_difference,
        c.objective_bound
    );
    // The objective decreases at every step.
    for w in c.dense.history.windows(2) {
        assert!(w[1].objective < w[0].objective, "{w:?}");
    }
}

/// `examples/ode_fit`: Newton on the Lotka–Volterra least squares, with
/// Hessian-vector products through 20 loops of 50 Runge–Kutta steps,
/// against scipy's `least_squares` on the same discretisation (the kept
/// script `examples/data/lynx_hare_fit.py`, exact Jacobian by the complex
/// step), to 1e-8 relative in every parameter.
#[test]
fn ode_fit_matches_scipy() {
    let d = ode_fit::pelts().unwrap();
    let fit = ode_fit::newton(&d, |_, _, _| {}).unwrap();
    assert!(fit.grad_inf < 1e-10);
    let want = ode_fit::reference().unwrap();
    assert_eq!(want.len(), 6);
    for (got, want) in fit.p.iter().zip(&want) {
        assert!(
            (got - want).abs() <= 1e-8 * want.abs(),
            "{:?} vs scipy {want:?}",
            fit.p
        );
    }
}

/// faer's `Col` and `Mat` as fields of a structured point, and a `Col` as
/// a point of its own: the derivatives equal the flat forms' bit for bit.
#[test]
fn faer_columns_and_matrices_are_differentiable_fields() {
    use optic_ad::{gradient, hvp, leaf_names, Differentiable, Real, Tracer};

    #[derive(Clone, Debug, Differentiable)]
    struct Quadratic<T> {
        a: faer::Mat<T>,
        b: faer::Col<T>,
        c: T,
    }
    // f = xᵀ A x + bᵀ x + c at x = (1, 2), as a function of (A, b, c).
    fn f<T: Real>(q: &Quadratic<T>) -> T {
        let x = [1.0, 2.0];
        let mut s = q.c;
        for i in 0..2 {
            s += q.b[i] * x[i];
            for j in 0..2 {
                s += q.a[(i, j)] * (x[i] * x[j]);
            }
        }
        s * s
    }
    // Leaves: A column-major, then b, then c.
    fn f_flat<T: Real>(l: &[T]) -> T {
        let x = [1.0, 2.0];
        let mut s = l[6];
        for i in 0..2 {
            s += l[4 + i] * x[i];
            for j in 0..2 {
                s += l[j * 2 + i] * (x[i] * x[j]);
            }
        }
        s * s
    }
    let q = Quadratic {
        a: faer::mat![[1.0, 0.5], [-0.5, 2.0]],
        b: faer::col![0.3, -0.2],
        c: 0.7,
    };
    assert_eq!(
        leaf_names(&q),
        ["a[0, 0]", "a[1, 0]", "a[0, 1]", "a[1, 1]", "b[0]", "b[1]", "c"]
    );
    let mut leaves = Vec::new();
    q.flatten_into(&mut leaves);
    assert_eq!(leaves, [1.0, -0.5, 0.5, 2.0, 0.3, -0.2, 0.7]);
    let g = gradient(f, &q).unwrap();
    let gf = gradient(f_flat, &leaves).unwrap();
    let mut gl = Vec::new();
    g.flatten_into(&mut gl);
    assert_eq!(gl, gf);
    // ∂f/∂A_ij = 2 s xᵢ xⱼ with s = 1 + 0.5·2 − 0.5·2 + 2·4 + 0.3 − 0.4 + 0.7.
    let s = 1.0 + 1.0 - 1.0 + 8.0 + 0.3 - 0.4 + 0.7;
    assert_relative_eq!(g.a[(1, 0)], 2.0 * s * 2.0, epsilon = 1e-14);
    let hv = hvp(f, &q, &g).unwrap();
    let mut hl = Vec::new();
    hv.flatten_into(&mut hl);
    assert_eq!(hl, hvp(f_flat, &leaves, &gf).unwrap());

    // A column as the point: the function receives a `Col` of tracers.
    let norm2 = |c: &faer::Col<Tracer>| c[0] * c[0] + c[1] * c[1].sin();
    let g = gradient(norm2, &faer::col![3.0, 0.5]).unwrap();
    assert_eq!(g[0], 6.0);
    assert_relative_eq!(g[1], 0.5_f64.sin() + 0.5 * 0.5_f64.cos(), epsilon = 1e-15);
}
