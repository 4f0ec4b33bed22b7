//! Every driver called inside another driver's traced closure, on tracer
//! points (nested AD), and at num-dual points; the fallible closure forms.
//!
//! Each nested result is a derivative one order higher than the inner
//! driver computes. It is checked against a different construction of the
//! same number:
//!
//! * third derivatives against `d3` (Taylor mode, four univariate jets and
//!   the polarisation identity) or `taylor::<U3>`;
//! * fourth derivatives against `derivative::<U4>` / `taylor::<U4>` (one
//!   Taylor jet of degree 4);
//! * the non-`f64` paths of the Taylor drivers (∂⃗ applied N times to the
//!   traced program) against their `f64` Taylor paths.
//!
//! Tolerances: the two sides evaluate different floating-point expressions
//! for the same exact quantity, so they differ by rounding amplified by
//! cancellation among chain-rule terms (see `tests/drivers.rs`, whose
//! bound of 1e-10 on the scaled error, with the same random-program
//! generator, this file keeps). `d3` subtracts four jets of directions
//! `u ± v ± w`; its error scales with `|u| |v| |w|`, which is at most a few
//! units for the unit vectors and directions used here.

use crate::common;

use common::{check, err, point, RandomProgram};
use num_dual::Dual64;
use optic_ad::{
    d3, derivative, gradient, hessian, hvp, jacobian, taylor, Derivatives, Directional, Error,
    Gradient, Hvp, Program, Real, Tracer,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use typenum::{U2, U3, U4};

fn fail(e: Error) -> TestCaseError {
    TestCaseError::fail(format!("library error: {e}"))
}

/// Output 0 of a program on any scalar.
fn f0<T: Real>(p: &Program, x: &[T]) -> Result<T, Error> {
    Ok(p.eval(x)?[0])
}

/// Unit vector `e_i` of length `n`.
fn unit(n: usize, i: usize) -> Vec<f64> {
    let mut e = vec![0.0; n];
    e[i] = 1.0;
    e
}

/// A scalar program with a point and a direction, at least `min_n` inputs.
fn program_point_dir(min_n: usize) -> impl Strategy<Value = (RandomProgram, Vec<f64>, Vec<f64>)> {
    common::scalar_program()
        .prop_filter("enough inputs", move |p| p.n >= min_n)
        .prop_flat_map(|p| {
            let n = p.n;
            (Just(p), point(n), common::cotangent(n))
        })
}

/// `hessian` at a `Dual64` point `x + ε v`: the ε part of `H_ij` is
/// `D³f[v, e_i, e_j]`, which `d3` computes in Taylor mode.
#[test]
fn hessian_at_dual_points_matches_d3() {
    check(
        "hessian(Dual64) vs d3",
        96,
        program_point_dir(1),
        |(f, x, v), worst| {
            let p = &f.program;
            let n = x.len();
            let xd: Vec<Dual64> = x.iter().zip(&v).map(|(&a, &b)| Dual64::new(a, b)).collect();
            let h = hessian(|y| f0(p, y), &xd).map_err(fail)?;
            let plain = hessian(|y| f0(p, y), &x).map_err(fail)?;
            for i in 0..n {
                for j in 0..n {
                    // num-dual computes some primal values by other
                    // formulas than f64 (tanh as sinh/cosh): a few ulps.
                    let e = worst.note(err(h[i][j].re, plain[i][j]));
                    prop_assert!(e <= 1e-13, "primal part ({i},{j}): {e:e}");
                    let want = d3(|y| f0(p, y), &x, &v, &unit(n, i), &unit(n, j)).map_err(fail)?;
                    let e = worst.note(err(h[i][j].eps, want));
                    prop_assert!(e <= 1e-10, "({i},{j}): {} vs {want} ({e:e})", h[i][j].eps);
                }
            }
            Ok(())
        },
    );
}

/// `derivative::<U3>` on a tracer inside `gradient`: d/dx f‴(x) = f⁗(x),
/// against `derivative::<U4>` in Taylor mode; the inner non-`f64` path is
/// ∂⃗³, the outer ∂⃖.
#[test]
fn derivative_inside_gradient_is_the_next_order() {
    let strategy = (common::univariate_program(3..=25), -2.0f64..2.0);
    check(
        "gradient of derivative::<U3> vs derivative::<U4>",
        192,
        strategy,
        |(f, x), worst| {
            let p = &f.program;
            let g = gradient(
                |y| Ok(derivative::<U3, _, _>(|t| f0(p, &[t]), y[0])?[3]),
                &[x],
            )
            .map_err(fail)?;
            let want = derivative::<U4, _, _>(|t| f0(p, &[t]), x).map_err(fail)?;
            let e = worst.note(err(g[0], want[4]));
            prop_assert!(e <= 1e-10, "{} vs {} ({e:e})", g[0], want[4]);
            // The non-f64 path of derivative at a tracer point, taken alone,
            // agrees with its f64 Taylor path too.
            let inner = gradient(
                |y| {
                    let d = derivative::<U3, _, _>(|t| f0(p, &[t]), y[0])?;
                    Ok(d[0] + d[1] * 2.0 + d[2] * 3.0 + d[3] * 4.0)
                },
                &[x],
            )
            .map_err(fail)?;
            let combo = want[1] + want[2] * 2.0 + want[3] * 3.0 + want[4] * 4.0;
            let e = worst.note(err(inner[0], combo));
            prop_assert!(e <= 1e-10, "combination: {} vs {combo} ({e:e})", inner[0]);
            Ok(())
        },
    );
}

/// `taylor::<U2>` and `d3` on tracers inside `gradient`, dotted with the
/// direction: `∇ₓ D²f[v, v] · v = D³f[v, v, v]` and
/// `∇ₓ D³f[v, v, v] · v = D⁴f[v, v, v, v]`, against `taylor::<U4>`.
#[test]
fn taylor_and_d3_inside_gradient_are_the_next_order() {
    check(
        "gradient of taylor::<U2> and d3 vs taylor::<U4>",
        96,
        program_point_dir(1),
        |(f, x, v), worst| {
            let p = &f.program;
            let want = taylor::<U4, _, _>(|y| f0(p, y), &x, &v).map_err(fail)?;
            let g2 = gradient(
                |y| {
                    let vt: Vec<Tracer> = v.iter().map(|&c| Tracer::cst(c)).collect();
                    Ok(taylor::<U2, _, _>(|z| f0(p, z), y, &vt)?[2])
                },
                &x,
            )
            .map_err(fail)?;
            let dot = |g: &[f64]| g.iter().zip(&v).map(|(a, b)| a * b).sum::<f64>();
            let e = worst.note(err(dot(&g2), want[3]));
            prop_assert!(e <= 1e-10, "taylor: {} vs {} ({e:e})", dot(&g2), want[3]);
            let g3 = gradient(
                |y| {
                    let vt: Vec<Tracer> = v.iter().map(|&c| Tracer::cst(c)).collect();
                    d3(|z| f0(p, z), y, &vt, &vt, &vt)
                },
                &x,
            )
            .map_err(fail)?;
            let e = worst.note(err(dot(&g3), want[4]));
            prop_assert!(e <= 1e-10, "d3: {} vs {} ({e:e})", dot(&g3), want[4]);
            Ok(())
        },
    );
}

/// `jacobian` of the gradient, on tracers inside `gradient`: the Jacobian
/// of ∇f is the Hessian, and the gradient of its entry (0, 1) is
/// `D³f[e₀, e₁, e_k]`, against `d3`.
#[test]
fn jacobian_inside_gradient_gives_third_derivatives() {
    check(
        "gradient of jacobian(∇f)[0][1] vs d3",
        96,
        program_point_dir(2),
        |(f, x, _), worst| {
            let p = &f.program;
            let n = x.len();
            let g = gradient(
                |y| {
                    let j = jacobian(|z| gradient(|w| f0(p, w), z), y)?;
                    Ok(j[0][1])
                },
                &x,
            )
            .map_err(fail)?;
            for (k, &gk) in g.iter().enumerate() {
                let want =
                    d3(|y| f0(p, y), &x, &unit(n, 0), &unit(n, 1), &unit(n, k)).map_err(fail)?;
                let e = worst.note(err(gk, want));
                prop_assert!(e <= 1e-10, "k = {k}: {gk} vs {want} ({e:e})");
            }
            Ok(())
        },
    );
}

/// The compiled drivers at non-`f64` points: `Gradient::eval_at` at a
/// `Dual64` point gives `H v` in its ε parts (against `hvp`);
/// `Hvp::hvp_at` on tracers inside `gradient` gives `D³f[v, v, ·]`
/// (against `d3`); `Derivatives::eval_at` inside `gradient` gives the next
/// order (against `derivative::<U3>`).
#[test]
fn compiled_drivers_at_tracer_and_dual_points() {
    fn f<T: Real>(x: &[T]) -> T {
        (x[0] * x[1]).sin() + x[0].exp() * x[1].powi(3) / (x[0] * x[0] + 1.0)
    }
    let x = [0.4, -0.7];
    let v = [0.3, 1.1];
    let mut g = Gradient::new(f, &[1.0, 1.0]).unwrap();
    let xd = [Dual64::new(x[0], v[0]), Dual64::new(x[1], v[1])];
    let (y, grad) = g.eval_at(&xd).unwrap();
    let hv = hvp(f, &x, &v).unwrap();
    let plain = gradient(f, &x).unwrap();
    assert_eq!(y.re, f(&x));
    for i in 0..2 {
        assert_eq!(grad[i].re, plain[i]);
        assert!(
            err(grad[i].eps, hv[i]) <= 1e-13,
            "{} vs {}",
            grad[i].eps,
            hv[i]
        );
    }

    let mut h = Hvp::new(f, &[1.0, 1.0]).unwrap();
    h.linearize(&[0.1, 0.2]).unwrap();
    let third = gradient(
        |y| {
            let vt = [Tracer::cst(v[0]), Tracer::cst(v[1])];
            let hv = h.hvp_at(y, &vt)?;
            Ok(hv[0] * v[0] + hv[1] * v[1])
        },
        &x,
    )
    .unwrap();
    for (k, &tk) in third.iter().enumerate() {
        let want = d3(f, &x, &v, &v, &unit(2, k)).unwrap();
        assert!(err(tk, want) <= 1e-12, "k = {k}: {tk} vs {want}");
    }
    // hvp_at did not move the linearisation point of apply.
    let mut out = [0.0; 2];
    h.apply(&v, &mut out).unwrap();
    let at_lin = hvp(f, &[0.1, 0.2], &v).unwrap();
    assert!(err(out[0], at_lin[0]) <= 1e-14 && err(out[1], at_lin[1]) <= 1e-14);

    let mut d = Derivatives::<U2, _>::new(|t| t.atan() * t.exp(), 0.0).unwrap();
    let s = 0.35;
    let g = gradient(|y| Ok(d.eval_at(y[0])?[2]), &[s]).unwrap();
    let want = derivative::<U3, _, _>(|t| t.atan() * t.exp(), s).unwrap();
    assert!(err(g[0], want[3]) <= 1e-13, "{} vs {}", g[0], want[3]);
    // At f64 points eval_at is eval.
    let a = d.eval_at(s).unwrap();
    let b = d.eval(s).unwrap();
    assert_eq!(a, b);
}

/// An inner driver's error leaves the outer driver as its `Err`, at every
/// depth, and leaves the thread's trace stack clean.
#[test]
fn inner_errors_escape_through_fallible_closures() {
    let r = gradient(
        |x| {
            let h = hessian(|y| y[0] * y[1], &x[..0])?;
            Ok(x[0] * h.len() as f64)
        },
        &[1.0],
    );
    assert_eq!(r, Err(Error::EmptyInput("hessian")));

    // Two levels down: a length mismatch in an hvp inside a jacobian inside
    // a gradient.
    let r = gradient(
        |x| {
            let j = jacobian(|y| Ok(vec![hvp(|z| z[0] * z[0], y, &[y[0], y[0]])?[0]]), x)?;
            Ok(j[0][0])
        },
        &[2.0],
    );
    assert!(
        matches!(
            r,
            Err(Error::LengthMismatch {
                what: "hvp: direction",
                expected: 1,
                got: 2
            })
        ),
        "{r:?}"
    );

    // A user's own error value can be returned the same way.
    let r = derivative::<U3, _, _>(
        |t| {
            if t > 0.0 {
                Err(Error::EmptyInput("my model"))
            } else {
                Ok(t * t)
            }
        },
        1.0,
    );
    assert_eq!(r, Err(Error::EmptyInput("my model")));

    // The trace stack is clean afterwards.
    let g = gradient(|x| x[0] * x[0], &[3.0]).unwrap();
    assert_eq!(g, vec![6.0]);
}

/// An inner driver given an `f64` point while its closure captures values
/// of the enclosing trace cannot carry their dependence: it is refused,
/// and the message says how to pass the point.
#[test]
fn inner_f64_point_with_captures_is_refused_with_a_fix() {
    let r = gradient(
        |x| {
            let g = gradient(|y| y[0] * x[0], &[1.0])?;
            Ok(x[0] * g[0])
        },
        &[2.0],
    );
    let e = r.unwrap_err();
    assert_eq!(e, Error::CapturedOutsideTrace(1));
    assert!(e.to_string().contains("Tracer::cst"), "{e}");
    // The fix: the point as a tracer of the enclosing trace.
    let g = gradient(
        |x| {
            let g = gradient(|y| y[0] * x[0], &[Tracer::cst(1.0)])?;
            Ok(x[0] * g[0])
        },
        &[2.0],
    )
    .unwrap();
    assert_eq!(g, vec![4.0]); // d/dx (x · x) at 2
}

/// `Derivatives::eval_at` at tracer points re-traces where a guard fails,
/// as `eval` does: a branch on the sign of t, evaluated on both sides.
#[test]
fn derivatives_eval_at_retraces_across_a_branch() {
    let mut d =
        Derivatives::<U2, _>::new(|t: Tracer| if t > 0.0 { t.powi(3) } else { -(t * t) }, 1.0)
            .unwrap();
    // d/ds f″(s): f″ = 6s for s > 0 (so 6), −2 for s ≤ 0 (so 0).
    let pos = gradient(|y| Ok(d.eval_at(y[0])?[2]), &[0.5]).unwrap();
    assert_eq!(pos, vec![6.0]);
    let neg = gradient(|y| Ok(d.eval_at(y[0])?[2]), &[-0.5]).unwrap();
    assert_eq!(neg, vec![0.0]);
    let back = gradient(|y| Ok(d.eval_at(y[0])?[1]), &[2.0]).unwrap();
    assert_eq!(back, vec![12.0]); // f′ = 3s², d/ds = 6s
}

/// `Directional::eval_at` at non-`f64` points (∂⃗ᴷ of the traced program
/// along `v`), each result against another construction:
/// * at `Dual64` points moving along `v`, the ε part of entry `k` is
///   `Dᵏ⁺¹f(x)[v, …]`: entry `k + 1` of a `Directional` of one order more
///   at `f64` (Taylor mode);
/// * on tracers inside `gradient`, the gradient in `x` of `vᵀ H v` and the
///   gradient in `v` of `D³f[v, v, v]` are `D³f[v, v, ·]` and
///   `3 D³f[v, v, ·]`: against `d3` (polarisation of four jets);
/// * at `f64` points it is `eval`, bit for bit;
/// * code with a loop (traced on the array trace for `f64` points) is
///   served unrolled, and a guard that fails re-traces the other branch.
#[test]
fn directional_at_tracer_and_dual_points() {
    fn f<T: Real>(x: &[T]) -> T {
        (x[0] * x[1]).sin() + x[0].exp() * x[1].powi(3) / (x[0] * x[0] + 1.0)
    }
    let x = [0.4, -0.7];
    let v = [0.3, 1.1];
    let along = |x: &[f64], v: &[f64]| -> Vec<Dual64> {
        x.iter().zip(v).map(|(&a, &b)| Dual64::new(a, b)).collect()
    };
    let consts = |v: &[f64]| -> Vec<Dual64> { v.iter().map(|&b| Dual64::from(b)).collect() };
    for order in 0..=3 {
        let mut d = Directional::new(f, &[1.0, 1.0], order).unwrap();
        let mut next = Directional::new(f, &[1.0, 1.0], order + 1).unwrap();
        let mut want = vec![0.0; order + 2];
        next.eval(&x, &v, &mut want).unwrap();
        let got = d.eval_at(&along(&x, &v), &consts(&v)).unwrap();
        assert_eq!(got.len(), order + 1);
        for k in 0..=order {
            assert!(
                err(got[k].re, want[k]) <= 1e-13,
                "order {order}, k = {k}: {got:?} vs {want:?}"
            );
            let e = err(got[k].eps, want[k + 1]);
            assert!(
                e <= 1e-12,
                "order {order}, k = {k}: {} vs {}",
                got[k].eps,
                want[k + 1]
            );
        }
        // At f64 points, eval.
        let mut out = vec![0.0; order + 1];
        d.eval(&x, &v, &mut out).unwrap();
        assert_eq!(d.eval_at(&x, &v).unwrap(), out);
    }

    let mut d2 = Directional::new(f, &[1.0, 1.0], 2).unwrap();
    let gx = gradient(
        |y| {
            let vt = [Tracer::cst(v[0]), Tracer::cst(v[1])];
            Ok(d2.eval_at(y, &vt)?[2])
        },
        &x,
    )
    .unwrap();
    let mut dd3 = Directional::new(f, &[1.0, 1.0], 3).unwrap();
    let gv = gradient(
        |w| {
            let xt = [Tracer::cst(x[0]), Tracer::cst(x[1])];
            Ok(dd3.eval_at(&xt, w)?[3])
        },
        &v,
    )
    .unwrap();
    for j in 0..2 {
        let want = d3(f, &x, &v, &v, &unit(2, j)).unwrap();
        assert!(err(gx[j], want) <= 1e-12, "x, j = {j}: {} vs {want}", gx[j]);
        assert!(
            err(gv[j], 3.0 * want) <= 1e-12,
            "v, j = {j}: {} vs {}",
            gv[j],
            3.0 * want
        );
    }

    // A loop: x₁ ↦ x₁ (1 + x₀/8) eight times, read through sin.
    fn looped<T: Real>(x: &[T]) -> optic_ad::Result<T> {
        let [c] = optic_ad::fold(8, [x[1]], |[c]: [T; 1]| [c * (x[0] / 8.0 + 1.0)])?;
        Ok(c.sin())
    }
    let mut d = Directional::new(looped, &[1.0, 1.0], 2).unwrap();
    assert!(d.array_program().is_some(), "traced on the array trace");
    let mut want = vec![0.0; 4];
    Directional::new(looped, &[1.0, 1.0], 3)
        .unwrap()
        .eval(&x, &v, &mut want)
        .unwrap();
    let got = d.eval_at(&along(&x, &v), &consts(&v)).unwrap();
    for k in 0..=2 {
        assert!(err(got[k].re, want[k]) <= 1e-13, "loop, k = {k}");
        assert!(
            err(got[k].eps, want[k + 1]) <= 1e-12,
            "loop, k = {k}: {got:?} vs {want:?}"
        );
    }

    // A guard: built where x₀ > 0, evaluated where x₀ < 0 (f = x₀³ x₁
    // there: d²/dt² = 6 x₀ v₀² x₁ + 6 x₀² v₀ v₁).
    let branch = |x: &[Tracer]| {
        if x[0] > 0.0 {
            x[0].sin() * x[1]
        } else {
            x[0].powi(3) * x[1]
        }
    };
    let mut d = Directional::new(branch, &[1.0, 1.0], 2).unwrap();
    let (a, b) = (-0.5, 2.0);
    let got = d.eval_at(&along(&[a, b], &v), &consts(&v)).unwrap();
    let second = 6.0 * a * v[0] * v[0] * b + 6.0 * a * a * v[0] * v[1];
    assert!(err(got[2].re, second) <= 1e-14, "{got:?}");

    // Lengths, and a function of the array trace at other scalars.
    assert!(matches!(
        d.eval_at(&consts(&[1.0]), &consts(&v)),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        d.eval_at(&consts(&x), &consts(&[1.0, 2.0, 3.0])),
        Err(Error::LengthMismatch { .. })
    ));
    use optic_ad::array::Array;
    let mut a = Directional::array(|t| Ok(t.map(|s| s.sin()).sum()), &x, 2).unwrap();
    assert!(matches!(
        a.eval_at(&consts(&x), &consts(&v)),
        Err(Error::Unsupported(_))
    ));
    assert_eq!(a.eval_at(&x, &v).unwrap().len(), 3);
}

/// `Directional::eval_at` after `eval_point` moved to a point with other
/// data fields: the program of `eval_at` is traced again with them (before,
/// it kept the old harmonic: a silent wrong answer).
#[test]
fn directional_eval_at_follows_the_data_fields() {
    use optic_ad::Differentiable;
    #[derive(Clone, Differentiable)]
    struct Wave<T> {
        amplitude: T,
        phase: T,
        #[differentiable(skip)]
        harmonic: usize,
    }
    fn wave<T: Real>(w: &Wave<T>) -> T {
        w.amplitude * (w.phase * w.harmonic as f64).sin()
    }
    let at = |h: usize| Wave {
        amplitude: 2.0,
        phase: 0.3,
        harmonic: h,
    };
    let v = Wave {
        amplitude: 0.5,
        phase: 1.0,
        harmonic: 0,
    };
    let mut d = Directional::structured(wave, &at(3), 2).unwrap();
    let duals = |w: &Wave<f64>| vec![Dual64::from(w.amplitude), Dual64::from(w.phase)];
    let dir = [Dual64::from(v.amplitude), Dual64::from(v.phase)];
    let mut out = [0.0; 3];
    for h in [3, 5] {
        d.eval_point(&at(h), &v, &mut out).unwrap();
        let got = d.eval_at(&duals(&at(h)), &dir).unwrap();
        for k in 0..3 {
            assert!(
                err(got[k].re, out[k]) <= 1e-14,
                "h = {h}: {got:?} vs {out:?}"
            );
        }
    }
    // h = 5: d²/dt² of (2 + t/2) sin(5 (0.3 + t)) = 2·(1/2)·5 cos(1.5) − 2·25 sin(1.5).
    let want = 5.0 * 1.5_f64.cos() - 50.0 * 1.5_f64.sin();
    assert!(err(out[2], want) <= 1e-14, "{out:?} vs {want}");
}
