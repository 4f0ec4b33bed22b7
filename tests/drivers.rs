//! The drivers (`gradient`, `hvp`, `hessian`, `derivative`, `vjp`,
//! `Gradient`, `Hvp`) on random programs, against num-dual forward mode
//! (an independent implementation to check against) and against finite
//! differences of the order below; bad input; perturbation confusion;
//! guards.
//!
//! Random programs are turned into functions by re-recording them:
//! `|x: &[Tracer]| p.eval(x).unwrap()[0]`.
//!
//! # Tolerances
//!
//! Errors are measured as `|a − b| / max(1, |a|, |b|)` (absolute below
//! magnitude 1, relative above; `common::err`).
//!
//! * Against num-dual (gradient, vjp, Hessian-vector products, third
//!   derivatives): the two sides evaluate different floating-point
//!   expressions for the same exact quantity (reverse vs forward
//!   accumulation), so they differ by rounding amplified by cancellation
//!   among the chain-rule terms. The generator keeps every value within a
//!   few units and every `tanh` argument within ±3 (num-dual's `tanh` is
//!   `sinh / cosh` and loses ~cosh² ulps in its derivative parts; see
//!   `common::TANH_ARG`), so those terms stay within ~10² of the result.
//!   1e-10 is ~10³ times the worst error observed over 8000 cases per
//!   property (8e-14, at third order), while a wrong rule gives an error of
//!   order 1.
//! * Finite differences (order n against order n − 1, central differences
//!   with step h): the truncation error is estimated from the data by
//!   Richardson's argument, `|D(h) − D(2h)| / 3`, and allowed four times
//!   over (the estimate is only first-order accurate); the rounding part is
//!   bounded by `1e-7 · max(1, |lower-order value|)` for `h = 1e-4` (each
//!   lower-order value carries a relative error of at most ~10⁻¹³, divided
//!   by `2h`, times a factor of ~10² for the conditioning of the program).

use crate::common;

use std::cell::Cell;

use common::{check, cotangent, err, max_err, point, scale_of, RandomProgram};
use optic_ad::{
    d3, derivative, gradient, hessian, hvp, jacobian, jvp, nest, taylor, trace, vjp, Error,
    Gradient, Hvp, Nested, Program, Real, Tracer,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use typenum::{U2, U3, U4};

fn fail(e: Error) -> TestCaseError {
    TestCaseError::fail(format!("library error: {e}"))
}

/// Output 0 of a program, re-recorded on tracers.
fn as_fn(p: &Program) -> impl Fn(&[Tracer]) -> Tracer + '_ {
    move |x: &[Tracer]| p.eval(x).expect("eval on tracers")[0]
}

/// A scalar program with a point and a direction.
fn scalar_point_dir() -> impl Strategy<Value = (RandomProgram, Vec<f64>, Vec<f64>)> {
    common::scalar_program().prop_flat_map(|p| {
        let n = p.n;
        (Just(p), point(n), cotangent(n))
    })
}

// ---------------------------------------------------------------------------
// Against num-dual
// ---------------------------------------------------------------------------

/// `gradient` agrees with num-dual `Dual64`, one forward pass per
/// coordinate.
#[test]
fn gradient_matches_dual64() {
    check(
        "gradient vs Dual64",
        512,
        scalar_point_dir(),
        |(f, x, _), worst| {
            let p = &f.program;
            let got = gradient(as_fn(p), &x).map_err(fail)?;
            let want = common::gradient_dual(p, &x);
            let e = worst.note(max_err(&got, &want));
            prop_assert!(e <= 1e-10, "gradient error {e:e}: {got:?} vs {want:?}");
            Ok(())
        },
    );
}

/// `vjp` agrees with `Jᵀ ȳ` from num-dual, for programs with several
/// outputs; the primal values agree exactly with plain `f64` evaluation.
#[test]
fn vjp_matches_dual64() {
    check(
        "vjp vs Dual64",
        256,
        common::program_point_cotangent(),
        |(f, x, ybar), worst| {
            let p = &f.program;
            let (y, xbar) = vjp(|t: &[Tracer]| p.eval(t).unwrap(), &x, &ybar).map_err(fail)?;
            prop_assert_eq!(y, p.eval(&x).map_err(fail)?);
            let want = common::vjp_dual(p, &x, &ybar);
            let e = worst.note(max_err(&xbar, &want));
            prop_assert!(e <= 1e-10, "vjp error {e:e}");
            Ok(())
        },
    );
}

/// `pullback`, applied to several cotangents after one trace, agrees with
/// num-dual's `Jᵀ ȳ` for each (and its value with plain evaluation).
#[test]
fn pullback_applied_many_times_matches_dual64() {
    check(
        "pullback vs Dual64",
        128,
        common::program_point_cotangent(),
        |(f, x, ybar), worst| {
            let p = &f.program;
            let (y, mut back) =
                optic_ad::pullback(|t: &[Tracer]| p.eval(t).unwrap(), &x).map_err(fail)?;
            prop_assert_eq!(y, p.eval(&x).map_err(fail)?);
            prop_assert_eq!((back.n_inputs(), back.n_outputs()), (x.len(), ybar.len()));
            for scale in [1.0, -2.5, 0.0] {
                let yb: Vec<f64> = ybar.iter().map(|v| v * scale + (1.0 - scale)).collect();
                let xbar = back.call(&yb).map_err(fail)?;
                let want = common::vjp_dual(p, &x, &yb);
                let e = worst.note(max_err(&xbar, &want));
                prop_assert!(e <= 1e-10, "pullback error {e:e}");
            }
            // Wrong lengths are errors, and leave it usable.
            let long = back.call(&vec![1.0; ybar.len() + 1]);
            let is_length_error = matches!(long, Err(Error::LengthMismatch { .. }));
            prop_assert!(is_length_error, "{long:?}");
            let mut short = vec![0.0; x.len() + 1];
            prop_assert!(back.apply(&ybar, &mut short).is_err());
            let again = back.call(&ybar).map_err(fail)?;
            prop_assert!(max_err(&again, &common::vjp_dual(p, &x, &ybar)) <= 1e-10);
            Ok(())
        },
    );
}

/// `jvp` (the second closure of ∂⃖², transposing the pullback) agrees with
/// num-dual's `J v`, and `jacobian` (m vjps) with num-dual's Jacobian, for
/// programs with several outputs.
#[test]
fn jvp_and_jacobian_match_dual64() {
    let strategy = common::program_point_cotangent().prop_flat_map(|(f, x, _)| {
        let n = f.n;
        (Just(f), Just(x), cotangent(n))
    });
    check(
        "jvp and jacobian vs Dual64",
        256,
        strategy,
        |(f, x, v), worst| {
            let p = &f.program;
            let (y, jv) = jvp(|t: &[Tracer]| p.eval(t).unwrap(), &x, &v).map_err(fail)?;
            let (y_want, jv_want) = common::jvp_dual(p, &x, &v);
            prop_assert_eq!(&y, &p.eval(&x).map_err(fail)?);
            prop_assert!(max_err(&y, &y_want) <= 1e-15);
            let e = worst.note(max_err(&jv, &jv_want));
            prop_assert!(e <= 1e-10, "jvp error {e:e}");
            let jac = jacobian(|t: &[Tracer]| p.eval(t).unwrap(), &x).map_err(fail)?;
            let jac_want = common::jacobian_dual(p, &x);
            prop_assert_eq!(jac.len(), p.n_outputs());
            for (row, want) in jac.iter().zip(&jac_want) {
                let e = worst.note(max_err(row, want));
                prop_assert!(e <= 1e-10, "jacobian error {e:e}");
            }
            Ok(())
        },
    );
}

/// `hvp` agrees with the dense `hessian` times `v`, with num-dual
/// `HyperDual64` (ε₁ = eᵢ, ε₂ = v gives (Hv)ᵢ), and `vᵀ H v` with
/// `Dual2_64`; the Hessian is symmetric.
#[test]
fn hvp_matches_hessian_and_hyperdual() {
    check(
        "hvp vs hessian, HyperDual64, Dual2_64",
        256,
        scalar_point_dir(),
        |(f, x, v), worst| {
            let p = &f.program;
            let n = x.len();
            let hv = hvp(as_fn(p), &x, &v).map_err(fail)?;
            let h = hessian(as_fn(p), &x).map_err(fail)?;
            prop_assert_eq!(h.len(), n);
            let hv_dense: Vec<f64> = h
                .iter()
                .map(|row| row.iter().zip(&v).map(|(a, b)| a * b).sum())
                .collect();
            let scale = scale_of(&h.concat()) * scale_of(&v);
            let e = worst.note(max_err(&hv, &hv_dense) / scale);
            prop_assert!(e <= 1e-12, "hvp vs hessian·v: {e:e}");
            for (i, row) in h.iter().enumerate() {
                for (j, &hij) in row.iter().enumerate().take(i) {
                    let e = worst.note(err(hij, h[j][i]));
                    prop_assert!(e <= 1e-10, "asymmetric Hessian ({i},{j}): {e:e}");
                }
            }
            let want = common::hvp_hyperdual(p, &x, &v);
            let e = worst.note(max_err(&hv, &want));
            prop_assert!(e <= 1e-10, "hvp vs HyperDual64: {e:e}: {hv:?} vs {want:?}");
            let (_, _, vhv) = common::second_directional_dual2(p, &x, &v);
            let ours: f64 = hv.iter().zip(&v).map(|(a, b)| a * b).sum();
            let e = worst.note(err(ours, vhv) / scale_of(&v));
            prop_assert!(e <= 1e-10, "vᵀHv vs Dual2_64: {ours} vs {vhv}");
            Ok(())
        },
    );
}

/// Two derivations of the same products agree: `hvp` (forward over reverse, ∂⃗
/// of the gradient program) with the last closure of the order-2 bundle ∂⃖²f at
/// `d₁ = 1`, `d₂ = v`, `d₃ = 0` (reverse over reverse, see the book's chapter
/// "Higher order and the nested-closure encoding"); and `jvp` (∂⃗f) with the
/// second closure of ∂⃖²f at `d₁ = 0`, `d₂ = v` (transposition of the linear
/// map `d₁ ↦ Jᵀd₁`).
#[test]
fn forward_and_reverse_derivations_agree() {
    check(
        "hvp/jvp: forward vs nested reverse",
        256,
        scalar_point_dir(),
        |(f, x, v), worst| {
            let p = &f.program;
            let n = x.len();
            let p2 = nest(p, 2).map_err(fail)?; // [x, d₁, d₂, d₃] -> [y, r₁, r₂, r₃]
            let mut inp = x.clone();
            inp.push(1.0);
            inp.extend_from_slice(&v);
            inp.push(0.0);
            let out = p2.eval(&inp).map_err(fail)?;
            let hv_bundle = &out[2 + n..];
            let hv = hvp(as_fn(p), &x, &v).map_err(fail)?;
            let e = worst.note(max_err(&hv, hv_bundle));
            prop_assert!(e <= 1e-10, "hvp vs bundle: {e:e}");
            inp[n] = 0.0;
            let out = p2.eval(&inp).map_err(fail)?;
            let (_, jv) = jvp(|t: &[Tracer]| p.eval(t).unwrap(), &x, &v).map_err(fail)?;
            let e = worst.note(err(jv[0], out[1 + n]));
            prop_assert!(e <= 1e-10, "jvp vs transposition: {e:e}");
            Ok(())
        },
    );
}

/// `Hvp` as an optic: `left` gives (f, ∇f) and a residual, `right` gives
/// H v, bit-for-bit equal to `linearize` + `apply` (the same two programs),
/// and `modify` is the block-style form of the same thing.
#[test]
fn hvp_optic_matches_linearize_apply() {
    use optic_ad::optic::Optic;
    check(
        "Hvp as an optic",
        256,
        scalar_point_dir(),
        |(f, x, v), _| {
            let p = &f.program;
            let n = x.len();
            let mut h = Hvp::new(as_fn(p), &x).map_err(fail)?;
            let (m, (y, g)) = h.left(x.clone()).map_err(fail)?;
            prop_assert_eq!(m.len(), h.residual_len());
            let hv = h.right(m, v.clone()).map_err(fail)?;
            let mut g2 = vec![0.0; n];
            let y2 = h.linearize_with_gradient(&x, &mut g2).map_err(fail)?;
            let mut hv2 = vec![0.0; n];
            h.apply(&v, &mut hv2).map_err(fail)?;
            prop_assert_eq!(y.to_bits(), y2.to_bits());
            prop_assert_eq!(&g, &g2);
            prop_assert_eq!(&hv, &hv2);
            prop_assert_eq!(h.modify(x.clone(), |_| v.clone()).map_err(fail)?, hv2);
            prop_assert!(h.right(vec![0.0; h.residual_len() + 1], v.clone()).is_err());
            Ok(())
        },
    );
}

/// The compiled `Hvp` (linearize, then apply) traced at one point and
/// used at another agrees with `HyperDual64` there; so does its gradient
/// and value.
#[test]
fn compiled_hvp_at_new_point() {
    let strategy = common::scalar_program().prop_flat_map(|p| {
        let n = p.n;
        (Just(p), point(n), point(n), cotangent(n), cotangent(n))
    });
    check(
        "Hvp linearize/apply vs HyperDual64",
        256,
        strategy,
        |(f, x0, x1, v, w), worst| {
            let p = &f.program;
            let n = x0.len();
            let mut h = Hvp::new(as_fn(p), &x0).map_err(fail)?;
            let mut grad = vec![0.0; n];
            let y = h.linearize_with_gradient(&x1, &mut grad).map_err(fail)?;
            prop_assert_eq!(y, p.eval(&x1).map_err(fail)?[0]);
            let e = worst.note(max_err(&grad, &common::gradient_dual(p, &x1)));
            prop_assert!(e <= 1e-10, "Hvp gradient: {e:e}");
            // Two directions per linearisation: the residual is reused.
            for dir in [&v, &w] {
                let mut out = vec![0.0; n];
                h.apply(dir, &mut out).map_err(fail)?;
                let want = common::hvp_hyperdual(p, &x1, dir);
                let e = worst.note(max_err(&out, &want));
                prop_assert!(e <= 1e-10, "Hvp::apply at new point: {e:e}");
            }
            Ok(())
        },
    );
}

/// The compiled `Gradient` traced at one point agrees with `Dual64` at
/// others.
#[test]
fn compiled_gradient_at_new_points() {
    let strategy = common::scalar_program().prop_flat_map(|p| {
        let n = p.n;
        (Just(p), point(n), prop::collection::vec(point(n), 1..4))
    });
    check(
        "Gradient::eval vs Dual64",
        256,
        strategy,
        |(f, x0, xs), worst| {
            let p = &f.program;
            let mut g = Gradient::new(as_fn(p), &x0).map_err(fail)?;
            let mut grad = vec![0.0; x0.len()];
            for x in xs {
                let y = g.eval(&x, &mut grad).map_err(fail)?;
                prop_assert_eq!(y, p.eval(&x).map_err(fail)?[0]);
                let e = worst.note(max_err(&grad, &common::gradient_dual(p, &x)));
                prop_assert!(e <= 1e-10, "Gradient::eval: {e:e}");
            }
            Ok(())
        },
    );
}

/// `derivative::<U3>` of a random program of one variable agrees with
/// `Dual3_64` seeded with `v₁ = 1`: `[f, f′, f″, f‴]`.
#[test]
fn third_derivative_matches_dual3() {
    let strategy = (common::univariate_program(3..=25), -2.0f64..2.0);
    check(
        "derivative::<U3> vs Dual3_64",
        256,
        strategy,
        |(f, x), worst| {
            let p = &f.program;
            let got = derivative::<U3, _, _>(|t| p.eval(&[t]).unwrap()[0], x).map_err(fail)?;
            let want = common::taylor3_dual3(p, x);
            for k in 0..4 {
                let e = worst.note(err(got[k], want[k]));
                prop_assert!(
                    e <= 1e-10,
                    "order {k}: {} vs {} (error {e:e})",
                    got[k],
                    want[k]
                );
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------
// Order n against finite differences of order n − 1
// ---------------------------------------------------------------------------

/// Allowed error of a central difference with steps `h` and `2h`: four
/// times the Richardson estimate of the truncation error, plus rounding
/// (see the module docs).
fn fd_tolerance(d_h: f64, d_2h: f64, lower_scale: f64) -> f64 {
    4.0 * (d_h - d_2h).abs() / 3.0 + 1e-7 * lower_scale.max(1.0)
}

const H: f64 = 1e-4;

/// Order 2 against order 1: `hvp(x, v)` against the central difference of
/// `gradient` along `v`.
#[test]
fn hvp_matches_finite_difference_of_gradient() {
    check(
        "hvp vs FD of gradient",
        256,
        scalar_point_dir(),
        |(f, x, v), worst| {
            let p = &f.program;
            let at = |t: f64| -> Vec<f64> { x.iter().zip(&v).map(|(a, b)| a + t * b).collect() };
            let stencil: Vec<Vec<f64>> = [-2.0, -1.0, 0.0, 1.0, 2.0]
                .iter()
                .map(|&s| at(s * H))
                .collect();
            if !common::same_branches(p, &stencil) {
                return Ok(()); // a select changes branch inside the stencil
            }
            let g = |t: f64| gradient(as_fn(p), &at(t)).map_err(fail);
            let (gp1, gm1, gp2, gm2) = (g(H)?, g(-H)?, g(2.0 * H)?, g(-2.0 * H)?);
            let hv = hvp(as_fn(p), &x, &v).map_err(fail)?;
            let lower = scale_of(&gp1);
            for i in 0..x.len() {
                let d_h = (gp1[i] - gm1[i]) / (2.0 * H);
                let d_2h = (gp2[i] - gm2[i]) / (4.0 * H);
                let tol = fd_tolerance(d_h, d_2h, lower);
                let e = (hv[i] - d_h).abs();
                worst.note(e / tol);
                prop_assert!(e <= tol, "(Hv)_{i} = {} vs FD {d_h} (tol {tol:e})", hv[i]);
            }
            Ok(())
        },
    );
}

/// Order 4 against order 3: `derivative::<U4>` against the central
/// difference of `derivative::<U3>`'s f‴.
#[test]
fn fourth_derivative_matches_finite_difference_of_third() {
    let strategy = (common::univariate_program(3..=20), -2.0f64..2.0);
    check("f'''' vs FD of f'''", 128, strategy, |(f, x), worst| {
        let p = &f.program;
        let stencil: Vec<Vec<f64>> = [-2.0, -1.0, 0.0, 1.0, 2.0]
            .iter()
            .map(|&s| vec![x + s * H])
            .collect();
        if !common::same_branches(p, &stencil) {
            return Ok(());
        }
        let f3 = |t: f64| -> Result<f64, TestCaseError> {
            Ok(derivative::<U3, _, _>(|s| p.eval(&[s]).unwrap()[0], t).map_err(fail)?[3])
        };
        let d4 = derivative::<U4, _, _>(|s| p.eval(&[s]).unwrap()[0], x).map_err(fail)?;
        let (p1, m1, p2, m2) = (f3(x + H)?, f3(x - H)?, f3(x + 2.0 * H)?, f3(x - 2.0 * H)?);
        let d_h = (p1 - m1) / (2.0 * H);
        let d_2h = (p2 - m2) / (4.0 * H);
        let tol = fd_tolerance(d_h, d_2h, p1.abs().max(m1.abs()));
        let e = (d4[4] - d_h).abs();
        worst.note(e / tol);
        prop_assert!(e <= tol, "f'''' = {} vs FD {d_h} (tol {tol:e})", d4[4]);
        // Orders 0 … 3 of the order-4 call agree with the order-3 call.
        let d3 = derivative::<U3, _, _>(|s| p.eval(&[s]).unwrap()[0], x).map_err(fail)?;
        for k in 0..4 {
            prop_assert_eq!(d4[k], d3[k]);
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------
// Bad input never panics
// ---------------------------------------------------------------------------

/// Scalars including NaN, ±∞, zero, huge and tiny values.
fn wild() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => -3.0f64..3.0,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(0.0),
        1 => any::<f64>(),
    ]
}

fn wild_vec(max_len: usize) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(wild(), 0..=max_len)
}

/// A function of any number of variables that uses every input.
fn sum_sin<T: Real>(x: &[T]) -> T {
    let mut acc = T::cst(0.0);
    for &xi in x {
        acc += xi.sin();
    }
    acc
}

/// Fuzzes every public driver with random lengths (0 included) and wild
/// values: each returns `Err` for bad shapes and `Ok` otherwise, never
/// panics (proptest reports a panic as a failure).
#[test]
fn drivers_never_panic_on_bad_input() {
    let strategy = (wild_vec(5), wild_vec(5), wild_vec(5), wild_vec(5));
    check("fuzz drivers", 512, strategy, |(x, v, ybar, x2), _| {
        let n = x.len();
        // gradient
        let r = gradient(sum_sin, &x);
        prop_assert_eq!(r.is_ok(), n > 0, "gradient: {:?}", r);
        if n == 0 {
            prop_assert!(matches!(r, Err(Error::EmptyInput(_))));
        }
        // hvp with a possibly mismatched direction
        let r = hvp(sum_sin, &x, &v);
        prop_assert_eq!(r.is_ok(), n > 0 && v.len() == n, "hvp: {:?}", r);
        // hessian
        prop_assert_eq!(hessian(sum_sin, &x).is_ok(), n > 0);
        // vjp with a possibly mismatched cotangent (f has 2 outputs)
        let two = |t: &[Tracer]| vec![sum_sin(t), sum_sin(t) * sum_sin(t)];
        let r = vjp(two, &x, &ybar);
        prop_assert_eq!(r.is_ok(), n > 0 && ybar.len() == 2, "vjp: {:?}", r);
        // Gradient: construction, then eval with mismatched x and grad
        match Gradient::new(sum_sin, &x) {
            Err(e) => prop_assert!(n == 0 && matches!(e, Error::EmptyInput(_))),
            Ok(mut g) => {
                let mut grad = vec![0.0; v.len()];
                let r = g.eval(&x2, &mut grad);
                prop_assert_eq!(
                    r.is_ok(),
                    x2.len() == n && v.len() == n,
                    "Gradient::eval: {:?}",
                    r
                );
            }
        }
        // Hvp: apply before linearize, then mismatched lengths
        match Hvp::new(sum_sin, &x) {
            Err(e) => prop_assert!(n == 0 && matches!(e, Error::EmptyInput(_))),
            Ok(mut h) => {
                let mut out = vec![0.0; n];
                let r = h.apply(&v, &mut out);
                prop_assert!(r.is_err(), "apply before linearize: {:?}", r);
                let r = h.linearize(&x2);
                prop_assert_eq!(r.is_ok(), x2.len() == n);
                let r = h.apply(&v, &mut out);
                prop_assert_eq!(r.is_ok(), x2.len() == n && v.len() == n, "apply: {:?}", r);
                let mut short = vec![0.0; n.saturating_sub(1)];
                prop_assert!(h.apply(&v, &mut short).is_err());
            }
        }
        // The non-f64 paths: drivers on tracers inside a trace, with
        // mismatched lengths; every error leaves through the outer driver.
        let r = gradient(
            |t: &[Tracer]| {
                let xs: Vec<Tracer> = x.iter().map(|&c| t[0] * c).collect();
                let vs: Vec<Tracer> = v.iter().map(|&c| Tracer::cst(c)).collect();
                let h = hessian(sum_sin, &xs)?;
                let j = jacobian(two, &xs)?;
                let d = taylor::<U2, _, _>(sum_sin, &xs, &vs)?;
                let e = d3(sum_sin, &xs, &vs, &vs, &vs)?;
                Ok(h.len() as f64 * t[0] + j[0][0] + d[2] + e)
            },
            &[1.0],
        );
        prop_assert_eq!(r.is_ok(), n > 0 && v.len() == n, "nested: {:?}", r);
        if n == 0 {
            prop_assert!(matches!(r, Err(Error::EmptyInput(_))), "{:?}", r);
        }
        Ok(())
    });
}

/// Fuzzes `Program::eval`, `specialize`, `permute_blocks` and the nested
/// levels with random shapes on random programs.
#[test]
fn program_api_never_panics_on_bad_input() {
    let strategy = (
        common::any_program(),
        wild_vec(8),
        prop::collection::vec(prop::option::of(wild()), 0..8),
        prop::collection::vec(0usize..8, 0..5),
        prop::collection::vec(0usize..5, 0..5),
        prop::collection::vec(0usize..5, 0..5),
        (wild_vec(5), wild_vec(5), wild_vec(5)),
    );
    check(
        "fuzz program API",
        512,
        strategy,
        |(f, x, fixed, keep, in_perm, out_perm, (d1, d2, d3)), _| {
            let p = &f.program;
            let (n, m) = (f.n, f.m);
            // eval / eval_with with wrong lengths
            let r = p.eval(&x);
            prop_assert_eq!(r.is_ok(), x.len() == n, "eval: {:?}", r);
            if let Err(e) = &r {
                prop_assert!(matches!(e, Error::LengthMismatch { .. }), "{e:?}");
            }
            let mut ws = optic_ad::Workspace::new();
            let mut out = vec![0.0; keep.len()];
            let r = p.eval_with(&mut ws, &x, &mut out);
            prop_assert_eq!(r.is_ok(), x.len() == n && keep.len() == m);
            // specialize with bad arguments
            let r = p.specialize(&fixed, &keep);
            let valid = fixed.len() == n && keep.iter().all(|&k| k < m);
            prop_assert_eq!(r.is_ok(), valid, "specialize: {:?}", r.as_ref().err());
            if let Ok(q) = r {
                let free = fixed.iter().filter(|f| f.is_none()).count();
                prop_assert_eq!(q.n_inputs(), free);
                prop_assert_eq!(q.n_outputs(), keep.len());
                let ok = q.eval(&vec![0.5; free]);
                prop_assert!(ok.is_ok());
            }
            // permute_blocks with (non-)permutations: nest(f, 1) has two
            // input blocks and two output blocks.
            let bundle = nest(p, 1).map_err(fail)?;
            let is_perm = |v: &[usize], k: usize| {
                let mut s = v.to_vec();
                s.sort_unstable();
                s == (0..k).collect::<Vec<_>>()
            };
            let r = bundle.permute_blocks(&in_perm, &out_perm);
            prop_assert_eq!(
                r.is_ok(),
                is_perm(&in_perm, 2) && is_perm(&out_perm, 2),
                "permute_blocks({:?}, {:?})",
                in_perm,
                out_perm
            );
            // Nested levels with wrong lengths
            let mut nested = Nested::<U2>::new(p).map_err(fail)?;
            match nested.primal(&x) {
                Err(_) => prop_assert!(x.len() != n),
                Ok((y, l0)) => {
                    prop_assert_eq!(x.len(), n);
                    prop_assert_eq!(y.len(), m);
                    match l0.call(&d1) {
                        Err(_) => prop_assert!(d1.len() != m),
                        Ok((r1, l1)) => {
                            prop_assert_eq!(d1.len(), m);
                            prop_assert_eq!(r1.len(), n);
                            match l1.call(&d2) {
                                Err(_) => prop_assert!(d2.len() != n),
                                Ok((_, l2)) => {
                                    prop_assert_eq!(d2.len(), n);
                                    let r = l2.call(&d3);
                                    prop_assert_eq!(r.is_ok(), d3.len() == m);
                                }
                            }
                        }
                    }
                }
            }
            Ok(())
        },
    );
}

/// NaN semantics (observed and documented in `drivers`): values follow
/// IEEE 754 along data dependences only. For the separable
/// `f(x) = Σ sin xᵢ`, `f` is NaN iff some xᵢ is non-finite (sin ±∞ = NaN);
/// `(∇f)ᵢ = cos xᵢ` is NaN iff xᵢ is non-finite; `(Hv)ᵢ = −sin xᵢ · vᵢ`
/// is NaN if xᵢ is non-finite or vᵢ is NaN, and finite if both are finite.
/// Entries of other coordinates are unaffected: no cross-contamination.
#[test]
fn nan_in_nan_out_along_dependences() {
    let strategy = (1usize..=5).prop_flat_map(|n| {
        (
            prop::collection::vec(wild(), n),
            prop::collection::vec(wild(), n),
        )
    });
    check("NaN semantics", 256, strategy, |(x, v), _| {
        let n = x.len();
        let mut g = Gradient::new(sum_sin, &x).map_err(fail)?;
        let mut grad = vec![0.0; n];
        let y = g.eval(&x, &mut grad).map_err(fail)?;
        prop_assert_eq!(y.is_nan(), x.iter().any(|a| !a.is_finite()), "f = {}", y);
        for i in 0..n {
            prop_assert_eq!(
                grad[i].is_nan(),
                !x[i].is_finite(),
                "grad[{}] = {}",
                i,
                grad[i]
            );
        }
        let g2 = gradient(sum_sin, &x).map_err(fail)?;
        for i in 0..n {
            prop_assert!(grad[i] == g2[i] || (grad[i].is_nan() && g2[i].is_nan()));
        }
        let hv = hvp(sum_sin, &x, &v).map_err(fail)?;
        for i in 0..n {
            if !x[i].is_finite() || v[i].is_nan() {
                prop_assert!(hv[i].is_nan(), "hv[{}] = {}", i, hv[i]);
            }
            if x[i].is_finite() && v[i].is_finite() {
                prop_assert!(hv[i].is_finite(), "hv[{}] = {}", i, hv[i]);
            }
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------
// Perturbation confusion
// ---------------------------------------------------------------------------

/// The classic perturbation-confusion test (see the book's chapter "SSA
/// programs"): d/dx [x · d/dy (x + y)] at x = 1 is 1 (the inner
/// derivative is 1; confusing the perturbations would give 2).
#[test]
fn perturbation_confusion_classic() {
    let outer = |x: &[Tracer]| {
        let x0 = x[0];
        // The inner function closes over the outer tracer x0.
        let inner = gradient(|y: &[Tracer]| x0 + y[0], &[x0]).expect("inner gradient");
        x0 * inner[0]
    };
    let d = gradient(outer, &[1.0]).unwrap();
    assert_eq!(d, vec![1.0]);
    // At other points too, and at second order: the function is x, so its
    // second derivative is 0.
    for x in [-1.5, 0.0, 2.0] {
        assert_eq!(gradient(outer, &[x]).unwrap(), vec![1.0]);
        assert_eq!(hvp(outer, &[x], &[1.0]).unwrap(), vec![0.0]);
    }
}

/// A nested variant where the inner derivative depends on the outer
/// variable: d/dx [x · d/dy (x y²)]|_{y = x} = d/dx [2 x³] = 6 x².
#[test]
fn perturbation_confusion_nonlinear() {
    let outer = |x: &[Tracer]| {
        let x0 = x[0];
        let inner = gradient(|y: &[Tracer]| x0 * y[0] * y[0], &[x0]).expect("inner gradient");
        x0 * inner[0]
    };
    for x in [-1.5, 0.5, 2.0] {
        let d = gradient(outer, &[x]).unwrap();
        assert!((d[0] - 6.0 * x * x).abs() <= 1e-12, "{d:?} at {x}");
        // Second order through the nested gradient: (2x³)″ = 12x.
        let h = hvp(outer, &[x], &[1.0]).unwrap();
        assert!((h[0] - 12.0 * x).abs() <= 1e-12, "{h:?} at {x}");
    }
}

/// Three levels: d/dx [x · d/dy [y · d/dz (x + y + z)]] = d/dx [x · 1] = 1,
/// each level closing over the tracers of all enclosing levels.
#[test]
fn perturbation_confusion_three_levels() {
    let outer = |x: &[Tracer]| {
        let x0 = x[0];
        let middle = |y: &[Tracer]| {
            let y0 = y[0];
            let inner = gradient(|z: &[Tracer]| x0 + y0 + z[0], &[y0]).expect("inner");
            y0 * inner[0]
        };
        x0 * gradient(middle, &[x0]).expect("middle")[0]
    };
    for x in [-1.0, 1.0, 3.0] {
        assert_eq!(gradient(outer, &[x]).unwrap(), vec![1.0]);
    }
}

/// A tracer that escaped a finished trace is detected when used in
/// another: `Err(Error::ForeignTracer)`, never a silent wrong answer.
#[test]
fn escaped_tracer_is_detected() {
    let stash: Cell<Option<Tracer>> = Cell::new(None);
    let first = trace(
        |x| {
            stash.set(Some(x[0]));
            vec![x[0] * 2.0]
        },
        &[1.0],
    );
    assert!(first.is_ok());
    let escaped = stash.get().unwrap();
    let r = trace(|x| vec![x[0] + escaped], &[2.0]);
    assert!(matches!(r, Err(Error::ForeignTracer { .. })), "{r:?}");
    let r = gradient(|x: &[Tracer]| x[0] * escaped, &[2.0]);
    assert!(matches!(r, Err(Error::ForeignTracer { .. })), "{r:?}");
    let r = derivative::<U2, _, _>(|t| t.sin() + escaped, 0.5);
    assert!(matches!(r, Err(Error::ForeignTracer { .. })), "{r:?}");
    let r = Gradient::new(|x: &[Tracer]| x[0] - escaped, &[0.0]);
    assert!(matches!(r, Err(Error::ForeignTracer { .. })), "{r:?}");
}

// ---------------------------------------------------------------------------
// Guards
// ---------------------------------------------------------------------------

fn branchy(x: &[Tracer]) -> Tracer {
    if x[0] > 0.0 {
        x[0] * x[0]
    } else {
        -x[0]
    }
}

/// A branch becomes a guard: the program traced at x = 1 refuses x = −1;
/// the compiled drivers re-trace there and return the right derivatives.
#[test]
fn guards_fail_and_drivers_retrace() {
    let p = trace(|x| vec![branchy(x)], &[1.0]).unwrap();
    assert_eq!(p.eval(&[2.0]).unwrap(), vec![4.0]);
    assert!(matches!(p.eval(&[-1.0]), Err(Error::GuardFailed { .. })));

    let mut g = Gradient::new(branchy, &[1.0]).unwrap();
    let mut grad = [0.0];
    assert_eq!(g.eval(&[-1.0], &mut grad).unwrap(), 1.0);
    assert_eq!(grad, [-1.0]);
    assert_eq!(g.eval(&[3.0], &mut grad).unwrap(), 9.0);
    assert_eq!(grad, [6.0]);
    assert_eq!(g.eval(&[-2.0], &mut grad).unwrap(), 2.0);
    assert_eq!(grad, [-1.0]);

    let mut h = Hvp::new(branchy, &[1.0]).unwrap();
    let mut hv = [0.0];
    assert_eq!(h.linearize(&[-1.0]).unwrap(), 1.0);
    h.apply(&[1.0], &mut hv).unwrap();
    assert_eq!(hv, [0.0]);
    assert_eq!(h.linearize(&[0.5]).unwrap(), 0.25);
    h.apply(&[1.0], &mut hv).unwrap();
    assert_eq!(hv, [2.0]);

    // The one-shot drivers trace at the point they are given.
    assert_eq!(gradient(branchy, &[-1.0]).unwrap(), vec![-1.0]);
    assert_eq!(hvp(branchy, &[1.0], &[1.0]).unwrap(), vec![2.0]);
}

/// The later public entry points never panic on bad input either: ∂⃗
/// (`functor::forward`), `schedule`, the law checkers of `functor::laws`,
/// `jvp`/`jacobian`, and `Hvp` through the `Optic` trait, with random
/// lengths (including 0) and non-finite values. Each returns `Err` exactly
/// when a length is wrong.
#[test]
fn later_entry_points_never_panic_on_bad_input() {
    use optic_ad::functor::laws::{
        composition_law, forward_composition_law, forward_preserves_identity, identity_laws,
        preserves_identity,
    };
    use optic_ad::optic::Optic;
    let strategy = (
        common::any_program(),
        common::any_program(),
        wild_vec(6),
        wild_vec(6),
        0usize..5,
    );
    check("fuzz later API", 512, strategy, |(f, g, x, v, k), _| {
        let (p, q) = (&f.program, &g.program);
        let (n, m) = (f.n, f.m);
        let both_fit = x.len() == n && v.len() == n;
        // ∂⃗ and scheduling are total on valid programs.
        let fp = optic_ad::functor::forward(p);
        prop_assert_eq!(fp.n_inputs(), 2 * n);
        let mut xv = x.clone();
        xv.extend_from_slice(&v);
        prop_assert_eq!(fp.eval(&xv).is_ok(), xv.len() == 2 * n);
        let s = p.schedule();
        prop_assert_eq!(s.eval(&x).is_ok(), x.len() == n);
        // Law checkers: shapes that do not compose are errors.
        let composes = m == g.n;
        let r = composition_law(p, q, &x, &v, 1e-10);
        prop_assert_eq!(
            r.is_ok(),
            composes && x.len() == n && v.len() == g.m,
            "{:?}",
            r
        );
        let r = forward_composition_law(p, q, &x, &v, 1e-10);
        prop_assert_eq!(r.is_ok(), composes && both_fit, "{:?}", r);
        let r = identity_laws(p, &x, &v, 0.0);
        prop_assert_eq!(r.is_ok(), x.len() == n && v.len() == m, "{:?}", r);
        let r = preserves_identity(k, &x, &v);
        prop_assert_eq!(r.is_ok(), x.len() == k && v.len() == k, "{:?}", r);
        let r = forward_preserves_identity(k, &x, &v);
        prop_assert_eq!(r.is_ok(), x.len() == k && v.len() == k, "{:?}", r);
        // jvp / jacobian through tracers; the user function itself
        // tolerates any length (no outputs for a wrong one), so only the
        // drivers' own checks decide.
        let user = |t: &[Tracer]| p.eval(t).unwrap_or_default();
        let r = optic_ad::jvp(user, &x, &v);
        prop_assert_eq!(r.is_ok(), !x.is_empty() && v.len() == x.len(), "{:?}", r);
        let r = optic_ad::jacobian(user, &x);
        prop_assert_eq!(r.is_ok(), !x.is_empty(), "{:?}", r);
        // Hvp through the Optic trait, with residuals of the wrong size.
        if m == 1 {
            let h = Hvp::new(as_fn(p), &vec![0.5; n]).map_err(fail)?;
            let r = h.left(x.clone());
            prop_assert_eq!(r.is_ok(), x.len() == n, "{:?}", r);
            let bad = vec![0.0; k];
            let r = h.right(bad, v.clone());
            prop_assert_eq!(r.is_ok(), k == h.residual_len() && v.len() == n, "{:?}", r);
        }
        Ok(())
    });
}

/// Issue 6: the structural zero (−0.0 inside programs) leaked into results:
/// the derivatives of the identity came back as `[1, 1, -0.0]`. Drivers
/// return `+0.0`.
#[test]
fn issue_6_structural_zeros_are_positive_in_results() {
    use typenum::U2;
    let d = optic_ad::derivative::<U2, _, _>(|x| x, 1.0).unwrap();
    assert_eq!(d[2].to_bits(), 0.0f64.to_bits(), "{d:?}");
    let g = optic_ad::gradient(|x| x[0] * 2.0, &[1.0, 5.0]).unwrap();
    assert_eq!(g[1].to_bits(), 0.0f64.to_bits(), "{g:?}");
    let h = optic_ad::hvp(|x| x[0] * x[1], &[1.0, 2.0], &[1.0, 0.0]).unwrap();
    assert_eq!(h[0].to_bits(), 0.0f64.to_bits(), "{h:?}");
    let (_, jv) = optic_ad::jvp(|x| vec![x[0], x[1]], &[1.0, 2.0], &[1.0, 0.0]).unwrap();
    assert_eq!(jv[1].to_bits(), 0.0f64.to_bits(), "{jv:?}");
}

/// `value_and_gradient` is `(f(x), gradient(f, x))`, nests like `gradient`,
/// and rejects an empty point.
#[test]
fn value_and_gradient_matches_value_and_gradient() {
    fn f<T: Real>(x: &[T]) -> T {
        (x[0] * x[1]).sin() + x[2].exp() * x[0]
    }
    let x = [0.4, -0.7, 0.3];
    let (y, g) = optic_ad::value_and_gradient(f, &x).unwrap();
    assert_eq!(y, f(&x));
    assert_eq!(g, optic_ad::gradient(f, &x).unwrap());
    // Nested: d/dx of the value and of ∂f/∂y inside an outer gradient.
    let outer = optic_ad::gradient(
        |a: &[Tracer]| {
            let (v, g) = optic_ad::value_and_gradient(|b| b[0] * b[0] * a[0], &[a[0]]).unwrap();
            v + g[0]
        },
        &[1.5],
    )
    .unwrap();
    // v = a³, g = 2a², so d/da (a³ + 2a²) = 3a² + 4a.
    assert!((outer[0] - (3.0 * 1.5 * 1.5 + 4.0 * 1.5)).abs() < 1e-13);
    assert!(matches!(
        optic_ad::value_and_gradient(|x| x[0], &[] as &[f64]),
        Err(optic_ad::Error::EmptyInput(_))
    ));
}

/// One-shot drivers call `f` once and accept closures that mutate their
/// environment (`FnMut`, even `FnOnce`): counting evaluations compiles.
#[test]
fn one_shot_drivers_take_fnmut_closures() {
    let mut calls = 0;
    let g = optic_ad::gradient(
        |x| {
            calls += 1;
            x[0] * x[0]
        },
        &[2.0],
    )
    .unwrap();
    assert_eq!(g, vec![4.0]);
    let d = optic_ad::derivative::<U3, _, _>(
        |t| {
            calls += 1;
            t.sin()
        },
        0.5,
    )
    .unwrap();
    assert!((d[3] + 0.5f64.cos()).abs() < 1e-15);
    let (_, jv) = optic_ad::jvp(
        |x| {
            calls += 1;
            vec![x[0] * x[1]]
        },
        &[2.0, 3.0],
        &[1.0, 0.0],
    )
    .unwrap();
    assert_eq!(jv, vec![3.0]);
    let hv = optic_ad::hvp(
        |x| {
            calls += 1;
            x[0] * x[0] * x[1]
        },
        &[2.0, 3.0],
        &[1.0, 0.0],
    )
    .unwrap();
    assert_eq!(hv, vec![6.0, 4.0]);
    assert_eq!(calls, 4);
}

/// A tracer shows its primal value while its trace is live, and says so
/// when the trace has finished.
#[test]
fn tracers_show_their_value() {
    let mut shown = String::new();
    let mut escaped = None;
    optic_ad::gradient(
        |x| {
            let y = x[0] * 2.0;
            shown = format!("{y:?}");
            escaped = Some(y);
            assert_eq!(y.value(), Some(1.5));
            y
        },
        &[0.75],
    )
    .unwrap();
    assert!(shown.starts_with("Tracer(1.5 @ trace"), "{shown}");
    let y = escaped.unwrap();
    assert_eq!(y.value(), None);
    assert!(format!("{y:?}").starts_with("Tracer(finished trace"));
}

/// Constants through `From<f64>` and iterator sums and products, in code
/// generic over `Real`: `f(x) = Σ xᵢ² · 2 + Π xᵢ + 0.5` (closed-form
/// gradient `4xᵢ + Π_{j≠i} xⱼ`), on f64, num-dual, the scalar trace and the
/// array trace; empty sums and products are 0 and 1.
#[test]
fn constants_by_from_and_iterator_sums_and_products() {
    fn f<T: optic_ad::Real>(x: &[T]) -> T {
        let two = T::from(2.0);
        let half: T = 0.5.into();
        let s: T = x.iter().map(|&t| t * t * two).sum();
        let p: T = x.iter().copied().product();
        s + p + half
    }
    let x = [0.7, -1.3, 2.1];
    let prod: f64 = x.iter().product();
    let want: Vec<f64> = x.iter().map(|&t| 4.0 * t + prod / t).collect();
    assert_eq!(
        f(&x),
        x.iter().map(|t| 2.0 * t * t).sum::<f64>() + prod + 0.5
    );
    let g = optic_ad::gradient(f, &x).unwrap();
    for (a, b) in g.iter().zip(&want) {
        assert!((a - b).abs() < 1e-13, "{g:?} vs {want:?}");
    }
    let d = f(&[num_dual::Dual64::new(x[0], 1.0), x[1].into(), x[2].into()]);
    assert!((d.eps - want[0]).abs() < 1e-13);
    use optic_ad::array::Array;
    let ga = crate::common::array_gradient(
        |v| {
            let s: Vec<_> = (0..3).map(|i| v.get(i)).collect::<optic_ad::Result<_>>()?;
            Ok(f(&s))
        },
        &x,
    )
    .unwrap();
    for (a, b) in ga.iter().zip(&want) {
        assert!((a - b).abs() < 1e-13, "{ga:?} vs {want:?}");
    }
    let empty: [f64; 0] = [];
    assert_eq!(empty.iter().copied().sum::<f64>(), 0.0);
    let e = optic_ad::trace(
        |t| {
            let none: Vec<optic_ad::Tracer> = Vec::new();
            vec![
                t[0] + none.iter().copied().sum::<optic_ad::Tracer>(),
                t[0] * none.into_iter().product::<optic_ad::Tracer>(),
            ]
        },
        &[3.0],
    )
    .unwrap()
    .eval(&[3.0])
    .unwrap();
    assert_eq!(e, vec![3.0, 3.0]);
}
