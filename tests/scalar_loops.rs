//! Loops under the scalar compiled drivers: `Gradient::new` and `Hvp::new`
//! on code written over `Real` with `fold` or `while_loop` trace it on the
//! array trace, where the loop is one instruction carrying its body, so
//! their programs do not grow with the number of steps. Where that trace
//! cannot hold the loop (a comparison inside its body), they fall back to
//! the scalar trace with the loop unrolled.
//!
//! References, each independent of the loop rules:
//! * the scalar trace with the loop unrolled (one copy of the body per
//!   step): `trace` and the scalar ∂⃖, and `jvp` of the gradient at tracer
//!   points (`crate::loops::unrolled_gradient`, `unrolled_hvp`);
//! * num-dual (`Dual64`, `HyperDual64`) through the plain Rust loop that
//!   `fold` runs on those types.
//!
//! Tolerances, relative to the largest component of the reference
//! (`vec_err`: each component of a gradient or of `H v` is a sum of terms
//! as large as the largest component, so its rounding is bounded on that
//! scale, not on its own, which cancellation can make small): 1e-12
//! against the unrolled trace, whose arithmetic is the same up to the order
//! of the sums of cotangent contributions; 1e-10 against num-dual, whose
//! division and products are associated differently.

use crate::common;

use common::scale_of;
use num_dual::{Dual64, HyperDual64};
use optic_ad::optic::Optic;
use optic_ad::{fold, while_loop, Differentiable, Error, Gradient, Hvp, Real, Result};

use crate::loops::lotka_volterra::{loss_while, P0, V};
use crate::loops::{unrolled_gradient, unrolled_hvp};

/// The issue's user code, verbatim: Lotka–Volterra by RK4, `steps` steps
/// of `h = 10/steps`, `p = (α, β, γ, δ, x₀, y₀)`.
fn loss<T: Real>(p: &[T], steps: usize) -> Result<T> {
    let h = 10.0 / steps as f64;
    let rhs = |x: T, y: T| (p[0] * x - p[1] * x * y, p[3] * x * y - p[2] * y);
    let [x, y] = fold(steps, [p[4], p[5]], |[x, y]: [T; 2]| {
        let (k1x, k1y) = rhs(x, y);
        let (k2x, k2y) = rhs(x + k1x * (h / 2.0), y + k1y * (h / 2.0));
        let (k3x, k3y) = rhs(x + k2x * (h / 2.0), y + k2y * (h / 2.0));
        let (k4x, k4y) = rhs(x + k3x * h, y + k3y * h);
        [
            x + (k1x + k2x * 2.0 + k3x * 2.0 + k4x) * (h / 6.0),
            y + (k1y + k2y * 2.0 + k3y * 2.0 + k4y) * (h / 6.0),
        ]
    })?;
    Ok((x - 1.0) * (x - 1.0) + (y - 1.0) * (y - 1.0))
}

/// The largest difference of `a` and `b` relative to the largest
/// component of `b` (at least 1); ∞ for different lengths or a NaN.
fn vec_err(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| if x == y { 0.0 } else { (x - y).abs() })
        .fold(0.0, |m: f64, e| {
            if e.is_nan() || m.is_nan() {
                f64::NAN
            } else {
                m.max(e)
            }
        });
    if d.is_nan() {
        return f64::INFINITY;
    }
    d / scale_of(b)
}

/// The gradient by num-dual through the plain loop, one direction per
/// coordinate.
fn gradient_dual(f: impl Fn(&[Dual64]) -> Result<Dual64>, x: &[f64]) -> Vec<f64> {
    (0..x.len())
        .map(|i| {
            let p: Vec<Dual64> = x
                .iter()
                .enumerate()
                .map(|(j, &xj)| Dual64::new(xj, if i == j { 1.0 } else { 0.0 }))
                .collect();
            f(&p).unwrap().eps
        })
        .collect()
}

/// `H v` by num-dual hyper-dual numbers through the plain loop: the
/// mixed part of `f(x + ε₁ eᵢ + ε₂ v)` is `eᵢᵀ H v`.
fn hvp_dual(f: impl Fn(&[HyperDual64]) -> Result<HyperDual64>, x: &[f64], v: &[f64]) -> Vec<f64> {
    (0..x.len())
        .map(|i| {
            let p: Vec<HyperDual64> = x
                .iter()
                .zip(v)
                .enumerate()
                .map(|(j, (&xj, &vj))| {
                    HyperDual64::new(xj, if i == j { 1.0 } else { 0.0 }, vj, 0.0)
                })
                .collect();
            f(&p).unwrap().eps1eps2
        })
        .collect()
}

#[test]
fn the_issue_code_is_one_loop_under_gradient_and_hvp() {
    let mut sizes = Vec::new();
    for steps in [10, 300, 100_000] {
        let mut g = Gradient::new(|p| loss(p, steps), &P0).unwrap();
        assert!(g.program().is_none(), "N = {steps}: not hosted");
        let p = g.array_program().expect("an array program");
        let mut h = Hvp::new(|p| loss(p, steps), &P0).unwrap();
        let hp = h.array_program().expect("an array program");
        sizes.push((p.len(), hp.len()));

        let mut grad = [0.0; 6];
        let y = g.eval(&P0, &mut grad).unwrap();
        assert_eq!(y.to_bits(), loss(&P0, steps).unwrap().to_bits());
        let y_h = h.linearize(&P0).unwrap();
        assert_eq!(y_h.to_bits(), y.to_bits());
        let mut hv = [0.0; 6];
        h.apply(&V, &mut hv).unwrap();

        let g_dual = gradient_dual(|p| loss(p, steps), &P0);
        let hv_dual = hvp_dual(|p| loss(p, steps), &P0, &V);
        assert!(vec_err(&grad, &g_dual) < 1e-10, "{grad:?} vs {g_dual:?}");
        assert!(vec_err(&hv, &hv_dual) < 1e-10, "{hv:?} vs {hv_dual:?}");
        if steps <= 300 {
            // The unrolled trace (one copy of the body per step).
            let g_ref = unrolled_gradient(|p| loss(p, steps), &P0);
            let hv_ref = unrolled_hvp(|p| loss(p, steps), &P0, &V);
            assert!(vec_err(&grad, &g_ref) < 1e-12, "{grad:?} vs {g_ref:?}");
            assert!(vec_err(&hv, &hv_ref) < 1e-12, "{hv:?} vs {hv_ref:?}");
        }
    }
    // The programs do not grow with the number of steps.
    assert!(sizes.windows(2).all(|w| w[0] == w[1]), "{sizes:?}");
}

#[test]
fn hosted_drivers_evaluate_at_new_points() {
    let steps = 200;
    let mut g = Gradient::new(|p| loss(p, steps), &P0).unwrap();
    let mut h = Hvp::new(|p| loss(p, steps), &P0).unwrap();
    for k in 0..4 {
        let x: Vec<f64> = P0
            .iter()
            .enumerate()
            .map(|(i, &p)| p * (1.0 + 0.01 * ((k * 7 + i) % 5) as f64))
            .collect();
        let mut grad = [0.0; 6];
        let y = g.eval(&x, &mut grad).unwrap();
        let mut grad_h = [0.0; 6];
        let y_h = h.linearize_with_gradient(&x, &mut grad_h).unwrap();
        assert_eq!(y.to_bits(), y_h.to_bits());
        let g_ref = unrolled_gradient(|p| loss(p, steps), &x);
        assert!(vec_err(&grad, &g_ref) < 1e-12, "{grad:?} vs {g_ref:?}");
        assert!(vec_err(&grad_h, &g_ref) < 1e-12, "{grad_h:?} vs {g_ref:?}");

        // Two directions at once, each as `apply` gives it.
        let mut vs = V.to_vec();
        vs.extend(V.iter().rev());
        let mut many = vec![0.0; 12];
        h.apply_many(&vs, &mut many).unwrap();
        for (v, got) in vs.chunks(6).zip(many.chunks(6)) {
            let mut one = [0.0; 6];
            h.apply(v, &mut one).unwrap();
            assert_eq!(one, got);
            let hv_ref = unrolled_hvp(|p| loss(p, steps), &x, v);
            assert!(vec_err(&one, &hv_ref) < 1e-12, "{one:?} vs {hv_ref:?}");
        }
        // `hvp_at` at f64 points: one pass, the linearized point unmoved.
        let hv_at = h.hvp_at(&x, &V).unwrap();
        let hv_ref = unrolled_hvp(|p| loss(p, steps), &x, &V);
        assert!(vec_err(&hv_at, &hv_ref) < 1e-12, "{hv_at:?} vs {hv_ref:?}");
    }
}

#[test]
fn hosted_drivers_take_other_scalars_through_the_unrolled_trace() {
    let steps = 50;
    let mut g = Gradient::new(|p| loss(p, steps), &P0).unwrap();
    assert!(g.array_program().is_some());
    // num-dual points: the directional derivative of the gradient is H v.
    let x: Vec<Dual64> = P0
        .iter()
        .zip(&V)
        .map(|(&p, &v)| Dual64::new(p, v))
        .collect();
    let (_, grad) = g.eval_at(&x).unwrap();
    let hv: Vec<f64> = grad.iter().map(|d| d.eps).collect();
    let hv_ref = hvp_dual(|p| loss(p, steps), &P0, &V);
    assert!(vec_err(&hv, &hv_ref) < 1e-10, "{hv:?} vs {hv_ref:?}");
    // Tracer points: the compiled gradient inside another trace.
    let d = optic_ad::jvp(|p| Ok(g.eval_at(p)?.1), &P0, &V).unwrap().1;
    assert!(vec_err(&d, &hv_ref) < 1e-10, "{d:?} vs {hv_ref:?}");

    let mut h = Hvp::new(|p| loss(p, steps), &P0).unwrap();
    let hv_duals = h
        .hvp_at(
            &P0.map(|p| Dual64::new(p, 0.0)),
            &V.map(|v| Dual64::new(v, 0.0)),
        )
        .unwrap();
    let hv_at: Vec<f64> = hv_duals.iter().map(|d| d.re).collect();
    assert!(vec_err(&hv_at, &hv_ref) < 1e-10, "{hv_at:?} vs {hv_ref:?}");
}

#[test]
fn hosted_hvp_is_an_optic_whose_residual_is_the_point() {
    let steps = 100;
    let mut h = Hvp::new(|p| loss(p, steps), &P0).unwrap();
    assert_eq!(h.residual_len(), 6);
    assert!(h.programs().is_none() && h.staged().is_none());
    let (m, (y, grad)) = h.left(P0.to_vec()).unwrap();
    let hv = h.right(m, V.to_vec()).unwrap();
    let mut grad_ref = [0.0; 6];
    let y_ref = h.linearize_with_gradient(&P0, &mut grad_ref).unwrap();
    let mut hv_ref = [0.0; 6];
    h.apply(&V, &mut hv_ref).unwrap();
    assert_eq!(y.to_bits(), y_ref.to_bits());
    assert_eq!(grad, grad_ref);
    assert_eq!(hv, hv_ref);
    assert!(matches!(
        h.right(vec![0.0; 5], V.to_vec()),
        Err(Error::LengthMismatch { .. })
    ));
}

#[test]
fn a_while_loop_is_hosted_too() {
    let steps = 400;
    let mut g = Gradient::new(|p| loss_while(p, steps), &P0).unwrap();
    assert!(g.array_program().is_some());
    let mut grad = [0.0; 6];
    g.eval(&P0, &mut grad).unwrap();
    let g_fold = unrolled_gradient(|p| loss(p, steps), &P0);
    assert!(vec_err(&grad, &g_fold) < 1e-12, "{grad:?} vs {g_fold:?}");
    let mut h = Hvp::new(|p| loss_while(p, steps), &P0).unwrap();
    h.linearize(&P0).unwrap();
    let mut hv = [0.0; 6];
    h.apply(&V, &mut hv).unwrap();
    let hv_ref = hvp_dual(|p| loss_while(p, steps), &P0, &V);
    assert!(vec_err(&hv, &hv_ref) < 1e-10, "{hv:?} vs {hv_ref:?}");
}

/// A loop whose body branches: the array trace refuses a comparison inside
/// a loop body, so the drivers fall back to the unrolled scalar trace, with
/// each comparison a guard.
fn kinked<T: Real>(p: &[T]) -> Result<T> {
    let [x] = fold(30, [p[0]], |[x]: [T; 1]| {
        if x > 1.0 {
            [x * 0.5 + p[1]]
        } else {
            [x * x + p[1]]
        }
    })?;
    Ok(x * p[0])
}

#[test]
fn a_body_that_branches_is_unrolled() {
    let x = [0.7, 0.3];
    let mut g = Gradient::new(kinked, &x).unwrap();
    assert!(g.program().is_some() && g.array_program().is_none());
    let mut grad = [0.0; 2];
    g.eval(&x, &mut grad).unwrap();
    let want = gradient_dual(kinked, &x);
    assert!(vec_err(&grad, &want) < 1e-10, "{grad:?} vs {want:?}");
    let mut h = Hvp::new(kinked, &x).unwrap();
    assert!(h.programs().is_some());
    h.linearize(&x).unwrap();
    let mut hv = [0.0; 2];
    h.apply(&[1.0, -1.0], &mut hv).unwrap();
    let want = hvp_dual(kinked, &x, &[1.0, -1.0]);
    assert!(vec_err(&hv, &want) < 1e-10, "{hv:?} vs {want:?}");
}

/// A branch outside the loop picks one of two loops: the hosted program
/// records it as a guard and is traced again where it flips.
fn two_loops<T: Real>(p: &[T]) -> Result<T> {
    let r = if p[0] > 0.0 { p[1] } else { -p[1] };
    let [c] = fold(40, [p[0]], |[c]: [T; 1]| [(c * r).sin() + c * 0.5])?;
    Ok(c * c)
}

#[test]
fn hosted_drivers_trace_again_where_a_guard_fails() {
    let mut g = Gradient::new(two_loops, &[0.4, 0.9]).unwrap();
    let mut h = Hvp::new(two_loops, &[0.4, 0.9]).unwrap();
    assert!(g.array_program().is_some() && h.array_program().is_some());
    for x in [[0.4, 0.9], [-0.3, 0.9], [0.2, -1.1], [-0.5, 0.4]] {
        let mut grad = [0.0; 2];
        g.eval(&x, &mut grad).unwrap();
        let want = gradient_dual(two_loops, &x);
        assert!(vec_err(&grad, &want) < 1e-10, "{x:?}: {grad:?} vs {want:?}");
        h.linearize(&x).unwrap();
        let mut hv = [0.0; 2];
        h.apply(&[0.3, 1.0], &mut hv).unwrap();
        let want = hvp_dual(two_loops, &x, &[0.3, 1.0]);
        assert!(vec_err(&hv, &want) < 1e-10, "{x:?}: {hv:?} vs {want:?}");
    }
}

#[derive(Clone, Debug, Differentiable)]
struct Orbit<T> {
    rate: T,
    start: T,
}

#[test]
fn structured_points_with_loops_are_hosted() {
    fn f<T: Real>(o: &Orbit<T>) -> Result<T> {
        let [c] = fold(500, [o.start], |[c]: [T; 1]| [c * o.rate * (-c + 1.0)])?;
        Ok(c)
    }
    let p0 = Orbit {
        rate: 2.9,
        start: 0.3,
    };
    let mut g = Gradient::structured(f, &p0).unwrap();
    assert!(g.array_program().is_some());
    let (y, grad) = g.eval_point(&p0).unwrap();
    let plain = |o: &Orbit<f64>| {
        let mut c = o.start;
        for _ in 0..500 {
            c = c * o.rate * (-c + 1.0);
        }
        c
    };
    assert_eq!(y.to_bits(), plain(&p0).to_bits());
    let d = gradient_dual(
        |q| {
            let [c] = fold(500, [q[1]], |[c]: [Dual64; 1]| [c * q[0] * (-c + 1.0)])?;
            Ok(c)
        },
        &[2.9, 0.3],
    );
    assert!(vec_err(&[grad.rate, grad.start], &d) < 1e-10);
}

#[test]
fn errors_of_the_function_come_through() {
    // The function's own error, with and without loops.
    let bad = |p: &[_]| -> Result<_> {
        let [c] = fold(5, [p[0]], |[c]| [c * 2.0])?;
        if p.len() > 1 {
            return Err(Error::Unsupported("two parameters"));
        }
        Ok(c)
    };
    assert!(matches!(
        Gradient::new(bad, &[1.0, 2.0]),
        Err(Error::Unsupported("two parameters"))
    ));
    assert!(matches!(
        Hvp::new(bad, &[1.0, 2.0]),
        Err(Error::Unsupported("two parameters"))
    ));
    let mut g = Gradient::new(bad, &[1.0]).unwrap();
    let mut grad = [0.0; 2];
    assert!(matches!(
        g.eval(&[1.0, 2.0], &mut grad),
        Err(Error::LengthMismatch { .. })
    ));
}

#[test]
fn one_shot_drivers_take_loops_too() {
    let steps = 100_000;
    let mut g = Gradient::new(|p| loss(p, steps), &P0).unwrap();
    let mut grad = [0.0; 6];
    let y = g.eval(&P0, &mut grad).unwrap();
    let mut h = Hvp::new(|p| loss(p, steps), &P0).unwrap();
    h.linearize(&P0).unwrap();
    let mut hv = [0.0; 6];
    h.apply(&V, &mut hv).unwrap();
    // The same programs, so the same bits.
    let (y1, g1) = optic_ad::value_and_gradient(|p| loss(p, steps), &P0).unwrap();
    assert_eq!((y1.to_bits(), g1.as_slice()), (y.to_bits(), &grad[..]));
    assert_eq!(optic_ad::gradient(|p| loss(p, steps), &P0).unwrap(), grad);
    assert_eq!(optic_ad::hvp(|p| loss(p, steps), &P0, &V).unwrap(), hv);
    let rows = optic_ad::hessian(|p| loss(p, steps), &P0).unwrap();
    for (i, row) in rows.iter().enumerate() {
        let mut e = [0.0; 6];
        e[i] = 1.0;
        let mut col = [0.0; 6];
        h.apply(&e, &mut col).unwrap();
        assert_eq!(row.as_slice(), &col[..]);
    }
    // The Hessian is symmetric to rounding.
    let scale = rows.iter().flatten().fold(1.0_f64, |m, x| m.max(x.abs()));
    for (i, row) in rows.iter().enumerate() {
        for (j, hij) in row.iter().enumerate() {
            assert!((hij - rows[j][i]).abs() < 1e-10 * scale, "{i}, {j}");
        }
    }
    // An FnMut closure is called once per trace: twice for code with loops.
    let mut calls = 0;
    optic_ad::gradient(
        |p| {
            calls += 1;
            loss(p, 10)
        },
        &P0,
    )
    .unwrap();
    assert_eq!(calls, 2);
}

/// `[f, f′, f″, f‴]` of `t ↦ loss(P0 + t V, steps)` at 0 by num-dual's
/// third-order dual numbers through the plain loop.
fn dual3_along_v(steps: usize) -> [f64; 4] {
    use num_dual::Dual3_64;
    let x: Vec<Dual3_64> = P0
        .iter()
        .zip(&V)
        .map(|(&p, &v)| Dual3_64::new(p, v, 0.0, 0.0))
        .collect();
    let y = loss(&x, steps).unwrap();
    [y.re, y.v1, y.v2, y.v3]
}

#[test]
fn taylor_along_a_line_through_the_loop() {
    use optic_ad::typenum::U3;
    let steps = 2000;
    let mut calls = 0;
    let d = optic_ad::taylor::<U3, _, _>(
        |p| {
            calls += 1;
            loss(p, steps)
        },
        &P0,
        &V,
    )
    .unwrap();
    assert_eq!(calls, 2, "one scalar trace stopped at the loop, one hosted");
    let want = dual3_along_v(steps);
    assert!(vec_err(&d, &want) < 1e-10, "{d:?} vs {want:?}");
}

// Regressions found in review: code that reads or compares values, or
// unwraps `fold`, under the drivers that take loops to the array trace.

/// `fold(..).unwrap()` in a function that returns `T`: the first trace is
/// unwound at the loop, so the function never sees an error to unwrap.
fn unwrapping<T: Real>(x: &[T]) -> T {
    let [c] = fold(10, [x[0]], |[c]: [T; 1]| [c * 1.1]).unwrap();
    c
}

#[test]
fn an_unwrapped_fold_is_hosted() {
    let mut g = Gradient::new(unwrapping::<optic_ad::Tracer>, &[1.0]).unwrap();
    assert!(g.array_program().is_some());
    let mut grad = [0.0];
    g.eval(&[1.0], &mut grad).unwrap();
    assert!((grad[0] - 1.1f64.powi(10)).abs() < 1e-13, "{grad:?}");
    // f(x) = 1.1¹⁰ x is linear: H = 0.
    let mut h = Hvp::new(unwrapping::<optic_ad::Tracer>, &[1.0]).unwrap();
    h.linearize(&[1.0]).unwrap();
    let mut hv = [1.0];
    h.apply(&[1.0], &mut hv).unwrap();
    assert_eq!(hv, [0.0]);
    assert_eq!(optic_ad::gradient(unwrapping, &[1.0]).unwrap(), grad);
}

/// A Rust loop on a comparison and an `unwrap` of `partial_cmp` before the
/// `fold`: the array trace keeps the point from the start, so both see the
/// values (a pass without them would loop forever or panic).
fn compares_first<T: Real>(p: &[T]) -> Result<T> {
    let mut x = p[0];
    let mut halvings = 0;
    while x >= 1.0 {
        x = x * 0.5;
        halvings += 1;
        assert!(halvings < 64, "runaway halving");
    }
    let m = match x.partial_cmp(&p[1]).unwrap() {
        std::cmp::Ordering::Greater => x,
        _ => p[1],
    };
    let [c] = fold(3, [m], |[c]: [T; 1]| [c * 2.0 + p[1]])?;
    Ok(c)
}

#[test]
fn comparisons_before_the_loop_see_values() {
    for x in [[5.0, 0.1], [5.0, 0.9], [0.3, 0.2]] {
        let mut g = Gradient::new(compares_first, &x).unwrap();
        assert!(g.array_program().is_some());
        let mut grad = [0.0; 2];
        g.eval(&x, &mut grad).unwrap();
        let want = gradient_dual(compares_first, &x);
        assert!(vec_err(&grad, &want) < 1e-13, "{x:?}: {grad:?} vs {want:?}");
    }
}

/// A value read inside a `while_loop` condition: the body is traced once
/// for every step, so the read is refused there and the loop unrolled
/// (each step its own value), rather than every step reading the first.
fn reads_in_the_condition<T: Real>(p: &[T]) -> Result<T> {
    let [x] = while_loop(
        200,
        [p[0]],
        |[x]| x.primal() > 1e-3,
        |[x]: [T; 1]| [x * p[1]],
    )?;
    Ok(x)
}

#[test]
fn a_value_read_in_a_loop_body_is_unrolled() {
    let x = [1.0, 0.5];
    let mut g = Gradient::new(reads_in_the_condition, &x).unwrap();
    assert!(g.program().is_some(), "traced unrolled");
    let mut grad = [0.0; 2];
    let y = g.eval(&x, &mut grad).unwrap();
    // Ten halvings reach 2⁻¹⁰ < 10⁻³: y = x₀ p₁¹⁰.
    assert_eq!(y, 0.5f64.powi(10));
    assert_eq!(grad, [0.5f64.powi(10), 10.0 * 0.5f64.powi(9)]);
    assert_eq!(
        optic_ad::gradient(reads_in_the_condition, &x).unwrap(),
        grad
    );
}

/// A loop whose trip count depends on the point: `x ← 0.99 x + p₁` while
/// `x > 1`.
fn shrinking<T: Real>(p: &[T]) -> Result<T> {
    let [x] = while_loop(
        10_000,
        [p[0]],
        |[x]| *x > 1.0,
        |[x]: [T; 1]| [x * 0.99 + p[1]],
    )?;
    Ok(x * x)
}

#[test]
fn hvp_at_traces_again_where_a_guard_fails() {
    let calls = std::cell::Cell::new(0);
    let f = |p: &[optic_ad::Tracer]| {
        calls.set(calls.get() + 1);
        shrinking(p)
    };
    let mut h = Hvp::new(f, &[8.0, 0.0]).unwrap();
    assert!(h.array_program().is_some());
    // Another trip count at 100: traced again once, then served by the
    // new programs.
    let first = h.hvp_at(&[100.0, 0.0], &[1.0, 0.0]).unwrap();
    calls.set(0);
    let again = h.hvp_at(&[100.0, 0.0], &[1.0, 0.0]).unwrap();
    assert_eq!(calls.get(), 0, "no trace on the second call");
    assert_eq!(first, again);
    assert!(h.array_program().is_some());
    let want = hvp_dual(shrinking, &[100.0, 0.0], &[1.0, 0.0]);
    assert!(vec_err(&again, &want) < 1e-10, "{again:?} vs {want:?}");
}

#[test]
fn other_scalars_trace_the_unrolled_programs_once() {
    let calls = std::cell::Cell::new(0);
    let f = |p: &[optic_ad::Tracer]| {
        calls.set(calls.get() + 1);
        shrinking(p)
    };
    let mut g = Gradient::new(f, &[8.0, 0.5]).unwrap();
    let mut h = Hvp::new(f, &[8.0, 0.5]).unwrap();
    let at = [Dual64::new(8.0, 1.0), Dual64::new(0.5, 0.0)];
    let dir = [Dual64::new(1.0, 0.0), Dual64::new(0.0, 0.0)];
    let (g1, h1) = (g.eval_at(&at).unwrap(), h.hvp_at(&at, &dir).unwrap());
    calls.set(0);
    let (g2, h2) = (g.eval_at(&at).unwrap(), h.hvp_at(&at, &dir).unwrap());
    assert_eq!(calls.get(), 0, "the unrolled programs are kept");
    assert_eq!(g1.1, g2.1);
    assert_eq!(h1, h2);
    // ∂/∂x₀ of the gradient (the dual parts) is the first Hessian column.
    let col: Vec<f64> = g2.1.iter().map(|d| d.eps).collect();
    let want = hvp_dual(shrinking, &[8.0, 0.5], &[1.0, 0.0]);
    assert!(vec_err(&col, &want) < 1e-10, "{col:?} vs {want:?}");
    let hv: Vec<f64> = h2.iter().map(|d| d.re).collect();
    assert!(vec_err(&hv, &want) < 1e-10, "{hv:?} vs {want:?}");
}

#[test]
fn derivative_along_a_line_through_the_loop() {
    use optic_ad::typenum::U3;
    let steps = 2000;
    let along = |t: optic_ad::Tracer| {
        let p: Vec<optic_ad::Tracer> = P0.iter().zip(&V).map(|(&p, &v)| t * v + p).collect();
        loss(&p, steps)
    };
    let d = optic_ad::derivative::<U3, _, _>(along, 0.0).unwrap();
    let want = dual3_along_v(steps);
    assert!(vec_err(&d, &want) < 1e-10, "{d:?} vs {want:?}");
    // The same as `taylor` along the line.
    let t = optic_ad::taylor::<U3, _, _>(|p| loss(p, steps), &P0, &V).unwrap();
    assert!(vec_err(&d, &t) < 1e-12, "{d:?} vs {t:?}");
}

/// A loop in a `Drop` of the traced code, run while the first trace
/// unwinds at the function's own loop: unrolled there (a second unwinding
/// would abort the process).
struct FoldsOnDrop(optic_ad::Tracer);

impl Drop for FoldsOnDrop {
    fn drop(&mut self) {
        let _ = fold(2, [self.0], |[c]: [optic_ad::Tracer; 1]| [c * 2.0]);
    }
}

#[test]
fn a_loop_in_a_drop_during_the_unwinding_is_unrolled() {
    let f = |p: &[optic_ad::Tracer]| {
        let _d = FoldsOnDrop(p[0]);
        loss(p, 20)
    };
    let g = optic_ad::gradient(f, &P0).unwrap();
    let want = gradient_dual(|p| loss(p, 20), &P0);
    assert!(vec_err(&g, &want) < 1e-10, "{g:?} vs {want:?}");
}

#[test]
fn third_derivatives_through_the_loop() {
    use optic_ad::Tracer;
    let steps = 50;
    // Along one direction: the third derivative of num-dual's line.
    let d = optic_ad::d3(|p| loss(p, steps), &P0, &V, &V, &V).unwrap();
    let want = dual3_along_v(steps)[3];
    assert!(
        (d - want).abs() <= 1e-10 * want.abs().max(1.0),
        "{d} vs {want}"
    );
    // Mixed: D³f[u, v, w] = ∂ᵤ (wᵀ H v), with H v by the unrolled scalar
    // trace (a driver at tracer points) and ∂ᵤ by `jvp`.
    let u = [0.02, 0.001, -0.01, 0.002, 0.3, -0.1];
    let w = [-0.01, 0.003, 0.02, -0.001, 0.2, 0.4];
    let got = optic_ad::d3(|p| loss(p, steps), &P0, &u, &V, &w).unwrap();
    let (_, du) = optic_ad::jvp(
        |q: &[Tracer]| -> Result<Vec<Tracer>> {
            let v: Vec<Tracer> = V.iter().map(|&c| Tracer::cst(c)).collect();
            let hv = optic_ad::hvp(|p| loss(p, steps), q, &v[..])?;
            Ok(vec![hv.iter().zip(&w).map(|(&h, &wi)| h * wi).sum()])
        },
        &P0,
        &u,
    )
    .unwrap();
    assert!(
        (got - du[0]).abs() <= 1e-10 * du[0].abs().max(1.0),
        "{got} vs {}",
        du[0]
    );
}

/// The state at `t = 10` (`ℝ⁶ → ℝ²`), with the loop as `fold`.
fn final_state<T: Real>(p: &[T], steps: usize) -> Result<Vec<T>> {
    let s = crate::loops::lotka_volterra::final_state_with(p, steps, optic_ad::Checkpoints::Auto)?;
    Ok(s.to_vec())
}

/// The Jacobian of `final_state` by num-dual through the plain loop, one
/// column per coordinate.
fn final_state_jacobian_dual(steps: usize) -> Vec<Vec<f64>> {
    let cols: Vec<Vec<f64>> = (0..6)
        .map(|j| {
            let p: Vec<Dual64> = (0..6)
                .map(|i| Dual64::new(P0[i], if i == j { 1.0 } else { 0.0 }))
                .collect();
            final_state(&p, steps)
                .unwrap()
                .iter()
                .map(|y| y.eps)
                .collect()
        })
        .collect();
    (0..2)
        .map(|i| cols.iter().map(|c| c[i]).collect())
        .collect()
}

/// The Jacobian of `final_state` on the scalar trace with the loop
/// unrolled: one unrolled pullback per row.
fn final_state_jacobian_unrolled(steps: usize) -> Vec<Vec<f64>> {
    [[1.0, 0.0], [0.0, 1.0]]
        .iter()
        .map(|e| crate::loops::unrolled_vjp(|t| final_state(t, steps), &P0, e))
        .collect()
}

#[test]
fn jvp_vjp_jacobian_and_pullback_take_loops_to_the_array_trace() {
    let steps = 500;
    let want = final_state_jacobian_dual(steps);
    let unrolled = final_state_jacobian_unrolled(steps);
    let y_plain = final_state(&P0, steps).unwrap();
    // Each driver calls the function twice: the first (scalar) trace stops
    // at the loop, the second is the array trace; unrolled, it would be
    // once, and three times where the array trace declines.
    let calls = std::cell::Cell::new(0);
    let f = |p: &[optic_ad::Tracer]| {
        calls.set(calls.get() + 1);
        final_state(p, steps)
    };
    let j = optic_ad::jacobian(f, &P0[..]).unwrap();
    assert_eq!(calls.replace(0), 2);
    for i in 0..2 {
        assert!(
            vec_err(&j[i], &want[i]) < 1e-10,
            "row {i}: {:?} vs {:?}",
            j[i],
            want[i]
        );
        assert!(
            vec_err(&j[i], &unrolled[i]) < 1e-12,
            "row {i}: {:?} vs {:?}",
            j[i],
            unrolled[i]
        );
    }
    let (y, jv) = optic_ad::jvp(f, &P0[..], &V[..]).unwrap();
    assert_eq!(calls.replace(0), 2);
    assert_eq!(y, y_plain);
    let jv_want: Vec<f64> = want
        .iter()
        .map(|row| row.iter().zip(&V).map(|(a, b)| a * b).sum())
        .collect();
    assert!(vec_err(&jv, &jv_want) < 1e-10, "{jv:?} vs {jv_want:?}");
    let ybar = [0.7, -1.3];
    let (y, xbar) = optic_ad::vjp(f, &P0[..], &ybar).unwrap();
    assert_eq!(calls.replace(0), 2);
    assert_eq!(y, y_plain);
    let xbar_want: Vec<f64> = (0..6)
        .map(|k| ybar[0] * want[0][k] + ybar[1] * want[1][k])
        .collect();
    assert!(
        vec_err(&xbar, &xbar_want) < 1e-10,
        "{xbar:?} vs {xbar_want:?}"
    );
    // One pullback, applied to each row's cotangent: the Jacobian's rows,
    // bit for bit (the same programs), and nothing traced again.
    let (y, mut back) = optic_ad::pullback(f, &P0).unwrap();
    assert_eq!(calls.replace(0), 2);
    assert_eq!(y, y_plain);
    assert_eq!((back.n_outputs(), back.n_inputs()), (2, 6));
    assert_eq!(back.call(&[1.0, 0.0]).unwrap(), j[0]);
    assert_eq!(back.call(&[0.0, 1.0]).unwrap(), j[1]);
    assert_eq!(calls.get(), 0);
    // Wrong lengths are errors, not panics.
    assert!(matches!(
        back.call(&[1.0]),
        Err(Error::LengthMismatch { .. })
    ));
    let mut short = [0.0; 5];
    assert!(matches!(
        back.apply(&[1.0, 0.0], &mut short),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        optic_ad::vjp(f, &P0[..], &[1.0]),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        optic_ad::jvp(f, &P0[..], &[1.0][..]),
        Err(Error::StructureMismatch { .. }) | Err(Error::LengthMismatch { .. })
    ));
}

#[test]
fn the_jacobian_of_a_long_loop_is_one_loop() {
    // 10⁵ steps: unrolled, this trace alone held 1.7·10⁷ instructions
    // (2.4 GB for the gradient in the loops issue's table).
    let steps = 100_000;
    let calls = std::cell::Cell::new(0);
    let j = optic_ad::jacobian(
        |p: &[optic_ad::Tracer]| {
            calls.set(calls.get() + 1);
            final_state(p, steps)
        },
        &P0[..],
    )
    .unwrap();
    assert_eq!(calls.get(), 2);
    // The last column (∂/∂y₀) against num-dual's.
    let p: Vec<Dual64> = (0..6)
        .map(|i| Dual64::new(P0[i], if i == 5 { 1.0 } else { 0.0 }))
        .collect();
    let col: Vec<f64> = final_state(&p, steps)
        .unwrap()
        .iter()
        .map(|y| y.eps)
        .collect();
    let got = [j[0][5], j[1][5]];
    assert!(vec_err(&got, &col) < 1e-10, "{got:?} vs {col:?}");
}

#[test]
fn structural_zeros_through_loops_are_positive() {
    // The second result is a constant and x₁ is not read: their tangent
    // and cotangent are structural zeros, returned as +0.0 by every
    // driver, with loops as without.
    fn f<T: Real>(p: &[T]) -> Result<Vec<T>> {
        let a = fold(5, p[0], |s: T| s * 1.1)?;
        Ok(vec![a, T::cst(2.0)])
    }
    let x = [0.8, 1.2];
    let (_, jv) = optic_ad::jvp(|q: &[optic_ad::Tracer]| f(q), &x[..], &[1.0, 1.0][..]).unwrap();
    assert_eq!(jv[1].to_bits(), 0.0_f64.to_bits(), "{jv:?}");
    let (_, xbar) = optic_ad::vjp(|q: &[optic_ad::Tracer]| f(q), &x[..], &[1.0, 1.0]).unwrap();
    assert_eq!(xbar[1].to_bits(), 0.0_f64.to_bits(), "{xbar:?}");
    let j = optic_ad::jacobian(|q: &[optic_ad::Tracer]| f(q), &x[..]).unwrap();
    for v in [j[0][1], j[1][0], j[1][1]] {
        assert_eq!(v.to_bits(), 0.0_f64.to_bits(), "{j:?}");
    }
    assert!((j[0][0] - 1.1_f64.powi(5)).abs() < 1e-15);
}

#[test]
fn compiled_derivatives_through_the_loop() {
    use optic_ad::typenum::U3;
    use optic_ad::{Derivatives, Tracer};
    let steps = 2000;
    let along = |t: Tracer| {
        let p: Vec<Tracer> = P0.iter().zip(&V).map(|(&p, &v)| t * v + p).collect();
        loss(&p, steps)
    };
    let mut d = Derivatives::<U3, _>::new(along, 0.0).unwrap();
    // One loop instruction carrying the jets.
    assert!(d.program().is_none() && d.array_program().is_some());
    let got = d.eval(0.0).unwrap();
    let want = dual3_along_v(steps);
    assert!(vec_err(&got, &want) < 1e-10, "{got:?} vs {want:?}");
    // At another point: the one-shot driver's numbers (the same programs).
    let at = d.eval(0.01).unwrap();
    let one_shot = optic_ad::derivative::<U3, _, _>(along, 0.01).unwrap();
    assert_eq!(at.as_slice(), one_shot.as_slice());
    // Error estimates need the scalar Taylor programs.
    assert!(matches!(d.eval_with_error(0.0), Err(Error::Unsupported(_))));
    // At num-dual points: the unrolled program, ∂/∂t of [f, f′, f″, f‴]
    // is [f′, f″, f‴, f⁗]; its first three entries are `got`'s last three.
    let dual = d.eval_at(Dual64::new(0.0, 1.0)).unwrap();
    let re: Vec<f64> = dual.iter().map(|x| x.re).collect();
    let eps: Vec<f64> = dual.iter().take(3).map(|x| x.eps).collect();
    assert!(vec_err(&re, &want) < 1e-10, "{re:?} vs {want:?}");
    assert!(
        vec_err(&eps, &want[1..]) < 1e-10,
        "{eps:?} vs {:?}",
        &want[1..]
    );
}

/// A loop on one side of a branch only: `x sin x` for `x ≤ 0`.
fn branchy<T: Real>(x: T) -> Result<T> {
    if x > T::cst(0.0) {
        fold(20, x, |c: T| c * 0.99 + c * c * 0.001)
    } else {
        Ok(x.sin() * x)
    }
}

/// `[f, f′, f″, f‴]` of `branchy` by num-dual's third-order dual numbers.
fn branchy_dual3(x: f64) -> [f64; 4] {
    let y = branchy(num_dual::Dual3_64::new(x, 1.0, 0.0, 0.0)).unwrap();
    [y.re, y.v1, y.v2, y.v3]
}

#[test]
fn derivatives_follow_a_branch_into_and_out_of_a_loop() {
    use optic_ad::typenum::U3;
    use optic_ad::{Derivatives, Tracer};
    let mut d = Derivatives::<U3, _>::new(|t: Tracer| branchy(t), 1.0).unwrap();
    assert!(d.array_program().is_some());
    let got = d.eval(1.5).unwrap();
    let want = branchy_dual3(1.5);
    assert!(vec_err(&got, &want) < 1e-12, "{got:?} vs {want:?}");
    // At a point without the loop the guard re-traces there, whatever the
    // method: error estimates are available again (closed forms of x sin x:
    // f′ = sin x + x cos x, f″ = 2 cos x − x sin x, f‴ = −3 sin x − x cos x).
    let x = -0.5_f64;
    let closed = [
        x * x.sin(),
        x.sin() + x * x.cos(),
        2.0 * x.cos() - x * x.sin(),
        -3.0 * x.sin() - x * x.cos(),
    ];
    let (v, err) = d.eval_with_error(x).unwrap();
    assert!(d.program().is_some() && d.array_program().is_none());
    assert!(vec_err(&v, &closed) < 1e-14, "{v:?} vs {closed:?}");
    assert!(err.iter().all(|e| e.is_finite()));
    // And back into the loop: the array trace again, then the native or
    // Taylor path on this side as it was before.
    let back = d.eval(1.5).unwrap();
    assert_eq!(back.as_slice(), got.as_slice());
    assert!(d.array_program().is_some());
    assert!(matches!(d.eval_with_error(1.5), Err(Error::Unsupported(_))));
    let again = d.eval(x).unwrap();
    assert!(vec_err(&again, &closed) < 1e-14, "{again:?} vs {closed:?}");
    // `eval_at` at num-dual points re-traces its own (unrolled) program
    // and leaves the `f64` programs as they are.
    let mut d2 = Derivatives::<U3, _>::new(|t: Tracer| branchy(t), -1.0).unwrap();
    let dual = d2.eval_at(Dual64::new(1.5, 1.0)).unwrap();
    let re: Vec<f64> = dual.iter().map(|v| v.re).collect();
    assert!(vec_err(&re, &want) < 1e-12, "{re:?} vs {want:?}");
    assert!(d2.program().is_some() && d2.array_program().is_none());
    let at = d2.eval(1.5).unwrap();
    assert!(d2.array_program().is_some());
    assert_eq!(at.as_slice(), got.as_slice());
}
