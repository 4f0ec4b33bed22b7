//! Taylor mode (`functor::TaylorProgram`, `derivative::<N>`,
//! `Derivatives<N>`, `taylor::<N>`, `d3`), checked against independent
//! sources:
//!
//! * the nested ∂⃖ᵏ construction (`functor::nested_derivatives`) to order 8
//!   on random programs and on the benchmark functions;
//! * num-dual's `Dual3_64` (forward mode, independent code) to order 3;
//! * closed forms at orders up to 60 (cited where used);
//! * ∂⃗ repeated, for Taylor over ∂⃗; `hvp` and central differences of it,
//!   for Taylor over ∂⃖;
//! * the functor laws `T(f ; g) = T(f) ; T(g)` and `T(id) = id`, by action,
//!   on random programs.
//!
//! The closed-form check of every primitive to order 30 is
//! `tests/taylor_closed_forms.rs`; the check of every primitive against
//! nested ∂⃖ to order 8 is in `tests/primitive_table.rs`.
//!
//! Tolerance: `common::err` (absolute below magnitude 1, relative above) of
//! 1e-10 between two exact methods, which differ only by rounding: the
//! nested programs at order 8 have hundreds of instructions and the jets
//! sums of up to `K` products per coefficient.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};

use approx::assert_relative_eq;
use common::{check, err, point, program, Worst};
use optic_ad::functor::laws::{taylor_composition_law, taylor_preserves_identity};
use optic_ad::functor::{forward, nested_derivatives, TaylorProgram, MAX_TAYLOR_ORDER};
use optic_ad::{
    d3, derivative, derivative_with_error, gradient, hvp, taylor, trace, Builder, CustomRule,
    Derivatives, Error, Real, Rule, ScalarRule, Tracer, Var,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use typenum::{U3, U50, U6, U8};

const TOL: f64 = 1e-10;

fn fail(e: Error) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

/// `[f, f′, …, f⁽ᴷ⁾]` of a program of one variable by Taylor mode.
fn taylor_derivatives(p: &optic_ad::Program, x: f64, k: usize) -> Result<Vec<f64>, Error> {
    let mut t = TaylorProgram::new(p, k)?;
    let mut input = vec![0.0; k + 1];
    input[0] = x;
    if k > 0 {
        input[1] = 1.0;
    }
    let mut out = vec![0.0; p.n_outputs() * (k + 1)];
    t.eval(&input, &mut out)?;
    let mut fact = 1.0;
    for (j, v) in out[..=k].iter_mut().enumerate().skip(1) {
        fact *= j as f64;
        *v *= fact;
    }
    Ok(out[..=k].to_vec())
}

/// Taylor mode equals nested ∂⃖ᵏ (k ≤ 5 on random programs of up to 20
/// steps; the nested bundle of a random program at order 8 is too large to
/// run 128 cases of) and num-dual's Dual3 (k ≤ 3).
#[test]
fn taylor_matches_nested_reverse_and_dual3_on_random_programs() {
    check(
        "Taylor vs nested ∂⃖⁵ and Dual3_64",
        128,
        common::univariate_program(3..=20).prop_flat_map(|f| (Just(f), -2.0..2.0f64)),
        |(f, x), worst| {
            let p = &f.program;
            let got = taylor_derivatives(p, x, 5).map_err(fail)?;
            let nested = nested_derivatives(p, 5).map_err(fail)?;
            let want = nested.eval(&[x]).map_err(fail)?;
            let scale = common::scale_of(&want);
            for k in 0..=5 {
                let e = worst.note(err(got[k] / scale, want[k] / scale));
                prop_assert!(
                    e <= TOL,
                    "order {k}: Taylor {} vs nested ∂⃖ {}",
                    got[k],
                    want[k]
                );
            }
            let dual = common::taylor3_dual3(p, x);
            for k in 0..=3 {
                let e = worst.note(err(got[k], dual[k]));
                prop_assert!(
                    e <= TOL,
                    "order {k}: Taylor {} vs Dual3 {}",
                    got[k],
                    dual[k]
                );
            }
            Ok(())
        },
    );
}

/// The benchmark functions at order 8 against nested ∂⃖⁸, at several points.
#[test]
fn benchmark_functions_match_nested_reverse_to_order_8() {
    fn f1<T: Real>(x: T) -> T {
        x.sin() * x.exp()
    }
    fn f2<T: Real>(x: T) -> T {
        x.sin().exp() / (x * x + 1.0)
    }
    for (name, f) in [
        ("sin·exp", f1::<Tracer> as fn(Tracer) -> Tracer),
        ("exp(sin)/(1+x²)", f2::<Tracer>),
    ] {
        for &x in &[-1.3, 0.0, 0.4, 2.2] {
            let p = trace(|t| vec![f(t[0])], &[x]).unwrap();
            let want = nested_derivatives(&p, 8).unwrap().eval(&[x]).unwrap();
            let got = derivative::<U8, _, _>(f, x).unwrap();
            let scale = common::scale_of(&want);
            for k in 0..=8 {
                assert!(
                    err(got[k] / scale, want[k] / scale) <= 1e-13,
                    "{name} at {x}, order {k}: {} vs {}",
                    got[k],
                    want[k]
                );
            }
        }
    }
}

/// Closed forms at high order: `dᵏ/dxᵏ sin x = sin(x + kπ/2)`,
/// `dᵏ/dxᵏ eˣ sin x = 2^{k/2} eˣ sin(x + kπ/4)`,
/// `dᵏ/dxᵏ 1/(1 − x) = k!/(1 − x)^{k+1}` and
/// `dᵏ/dxᵏ ln(1 + x) = (−1)^{k+1} (k − 1)!/(1 + x)ᵏ` (Abramowitz & Stegun
/// 4.1, 4.3; the product by Leibniz's rule on `Im e^{(1+i)x}`).
#[test]
fn high_orders_match_closed_forms() {
    use std::f64::consts::FRAC_PI_2;
    let x = 0.3_f64;
    let d = derivative::<U50, _, _>(|t| t.sin(), x).unwrap();
    for (k, dk) in d.iter().enumerate() {
        let want = (x + k as f64 * FRAC_PI_2).sin();
        assert!((dk - want).abs() <= 1e-12, "sin order {k}: {dk} vs {want}");
    }
    // The jet of the product is a convolution whose terms cancel: their
    // absolute values sum to 2ᵏ eˣ / k! (binomially) against a result of
    // 2^{k/2} eˣ / k!. Rounding is a few ulps of that sum, and the error
    // estimate says so.
    let (d, err) = derivative_with_error::<U50, _>(|t| t.exp() * t.sin(), x).unwrap();
    for (k, dk) in d.iter().enumerate() {
        let want = 2f64.powf(k as f64 / 2.0) * x.exp() * (x + k as f64 * FRAC_PI_2 / 2.0).sin();
        let terms = 2f64.powi(k as i32) * x.exp();
        assert!(
            (dk - want).abs() <= 16.0 * f64::EPSILON * terms,
            "eˣ sin x order {k}: {dk} vs {want}"
        );
        assert!(
            (dk - want).abs() <= err[k],
            "eˣ sin x order {k}: {dk} vs {want} ± {}",
            err[k]
        );
    }
    // `derivative` gives the same numbers.
    let plain = derivative::<U50, _, _>(|t| t.exp() * t.sin(), x).unwrap();
    assert_eq!(plain, d);
    let d = derivative::<U50, _, _>(|t| (Tracer::cst(1.0) - t).recip(), x).unwrap();
    let mut fact = 1.0;
    for (k, dk) in d.iter().enumerate() {
        if k > 0 {
            fact *= k as f64;
        }
        let want = fact / (1.0 - x).powi(k as i32 + 1);
        assert!(
            ((dk - want) / want).abs() <= 1e-12,
            "1/(1−x) order {k}: {dk} vs {want}"
        );
    }
    let d = derivative::<U50, _, _>(|t| t.ln_1p(), x).unwrap();
    let mut fact = 1.0; // (k − 1)!
    for (k, dk) in d.iter().enumerate().skip(1) {
        if k > 1 {
            fact *= (k - 1) as f64;
        }
        let sign = if k % 2 == 1 { 1.0 } else { -1.0 };
        let want = sign * fact / (1.0 + x).powi(k as i32);
        assert!(
            ((dk - want) / want).abs() <= 1e-12,
            "ln(1+x) order {k}: {dk} vs {want}"
        );
    }
}

/// `T(f ; g) = T(f) ; T(g)` and `T(id) = id`, by action, on random
/// programs and random input jets of degree 1 to 6.
#[test]
fn taylor_functor_laws() {
    let strategy =
        (1usize..=3, 1usize..=2, 1usize..=2, 1usize..=6).prop_flat_map(|(n, m, k, degree)| {
            (
                program(n, m, 3..=15, 2.0),
                program(m, k, 3..=15, 8.0),
                Just(degree),
                prop::collection::vec(-1.0f64..1.0, n * (degree + 1)),
            )
        });
    check(
        "Taylor functor laws",
        192,
        strategy,
        |(f, g, degree, jets), _: &Worst| {
            prop_assert!(
                taylor_composition_law(&f.program, &g.program, degree, &jets, TOL).map_err(fail)?
            );
            prop_assert!(taylor_preserves_identity(f.n, degree, &jets).map_err(fail)?);
            Ok(())
        },
    );
}

/// Taylor over ∂⃗ agrees with repeating ∂⃗: with `x(t) = x + t v` and the
/// tangent input `ẋ = v`, the tangent output of `T(∂⃗f)` is
/// `ẏ(t) = d/dt f(x + t v)`, so its coefficient `k` times `k!` is
/// `Dᵏ⁺¹f[v, …, v]`, the last output of `∂⃗ᵏ⁺¹f` seeded with `v` at every
/// tangent block that is a power of two.
#[test]
fn taylor_over_forward_agrees_with_repeated_forward() {
    check(
        "Taylor over ∂⃗ vs ∂⃗ᵏ",
        96,
        (1usize..=3).prop_flat_map(|n| (program(n, 1, 3..=15, 2.0), point(n), point(n))),
        |(f, x, v), worst| {
            let p = &f.program;
            let n = x.len();
            let degree = 2;
            let w = degree + 1;
            let fp = forward(p);
            let mut t = TaylorProgram::new(&fp, degree).map_err(fail)?;
            // Inputs of ∂⃗f: [x, ẋ]; jets x + t v and the constant ẋ = v.
            let mut jets = vec![0.0; 2 * n * w];
            for i in 0..n {
                jets[i * w] = x[i];
                jets[i * w + 1] = v[i];
                jets[(n + i) * w] = v[i];
            }
            let mut out = vec![0.0; 2 * w];
            t.eval(&jets, &mut out).map_err(fail)?;
            let mut q = p.clone();
            let mut fact = 1.0;
            for k in 0..=degree {
                q = forward(&q);
                if k > 0 {
                    fact *= k as f64;
                }
                // ∂⃗ᵏ⁺¹: 2ᵏ⁺¹ blocks of n inputs; x in block 0, v in the
                // power-of-two blocks.
                let blocks = 1usize << (k + 1);
                let mut seeds = vec![0.0; blocks * n];
                seeds[..n].copy_from_slice(&x);
                for b in (0..blocks).filter(|b| b.is_power_of_two()) {
                    seeds[b * n..(b + 1) * n].copy_from_slice(&v);
                }
                let want = *q.eval(&seeds).map_err(fail)?.last().unwrap();
                let got = out[w + k] * fact;
                let e = worst.note(err(got, want));
                prop_assert!(
                    e <= TOL,
                    "order {}: Taylor over ∂⃗ {got} vs ∂⃗ᵏ {want}",
                    k + 1
                );
            }
            Ok(())
        },
    );
}

/// Taylor over ∂⃖ is the gradient of a directional derivative:
/// `T(∇f)` along `x + t v` has coefficient `k` times `k!` equal to
/// `∇ₓ Dᵏf(x)[v, …, v] = D^{k+1}f(x)[v, …, v, ·]`. At `k = 1` that is the
/// Hessian-vector product (`hvp`, forward over reverse); at `k = 2` it is
/// checked against a central difference of `hvp` along `v`.
#[test]
fn taylor_over_reverse_is_gradient_of_directional_derivative() {
    fn f<T: Real>(x: &[T]) -> T {
        (x[0] * x[1]).sin() + x[2].exp() * x[0] + (x[1] * x[2]).atan()
    }
    let x = [0.4, -0.7, 0.3];
    let v = [0.5, 1.0, -0.8];
    let g = optic_ad::Gradient::new(f, &x).unwrap();
    // Gradient::program: x ↦ (f, ∇f).
    let gp = g.program().unwrap().clone();
    let degree = 2;
    let w = degree + 1;
    let mut t = TaylorProgram::new(gp.program(), degree).unwrap();
    let mut jets = vec![0.0; 3 * w];
    for i in 0..3 {
        jets[i * w] = x[i];
        jets[i * w + 1] = v[i];
    }
    let mut out = vec![0.0; gp.n_outputs() * w];
    t.eval(&jets, &mut out).unwrap();
    // Outputs: f, then ∇f.
    let grad_jet = |i: usize, k: usize| out[(1 + i) * w + k];
    let hv = hvp(f, &x, &v).unwrap();
    let h = 1e-4;
    let xp: Vec<f64> = x.iter().zip(&v).map(|(a, b)| a + h * b).collect();
    let xm: Vec<f64> = x.iter().zip(&v).map(|(a, b)| a - h * b).collect();
    let (hp, hm) = (hvp(f, &xp, &v).unwrap(), hvp(f, &xm, &v).unwrap());
    let g0 = gradient(f, &x).unwrap();
    for i in 0..3 {
        assert_relative_eq!(grad_jet(i, 0), g0[i], max_relative = 1e-14);
        assert_relative_eq!(grad_jet(i, 1), hv[i], max_relative = 1e-12, epsilon = 1e-14);
        // Central difference: truncation h² D⁵f/6 ≈ 1e-8, rounding
        // ε/h ≈ 1e-12.
        let fd = (hp[i] - hm[i]) / (2.0 * h);
        assert_relative_eq!(
            2.0 * grad_jet(i, 2),
            fd,
            max_relative = 1e-6,
            epsilon = 1e-7
        );
    }
}

/// `taylor::<N>` along `v` equals the univariate Taylor mode of
/// `t ↦ f(x + t v)` traced directly, and num-dual's Dual3 to order 3.
#[test]
fn directional_taylor_matches_univariate_and_dual3() {
    fn f<T: Real>(x: &[T]) -> T {
        x[0].powf(x[1]) * x[2].tanh() + (x[0] * x[2]).hypot(x[1])
    }
    let x = [1.3, 0.7, -0.4];
    let v = [0.2, -0.5, 1.1];
    let got = taylor::<U6, _, _>(f, &x, &v).unwrap();
    let along = |t: Tracer| {
        let a: Vec<Tracer> = x.iter().zip(&v).map(|(&xi, &vi)| t * vi + xi).collect();
        f(&a)
    };
    let want = derivative::<U6, _, _>(along, 0.0).unwrap();
    for k in 0..=6 {
        assert_relative_eq!(got[k], want[k], max_relative = 1e-13, epsilon = 1e-14);
    }
    let d: Vec<num_dual::Dual3_64> = x
        .iter()
        .zip(&v)
        .map(|(&xi, &vi)| num_dual::Dual3_64::new(xi, vi, 0.0, 0.0))
        .collect();
    let y = f(&d);
    for (k, want) in [y.re, y.v1, y.v2, y.v3].into_iter().enumerate() {
        assert_relative_eq!(got[k], want, max_relative = 1e-12, epsilon = 1e-14);
    }
}

/// The compiled `Directional` (scalar trace) on random programs against
/// num-dual's `Dual3_64` along the line `x + t v`, at three points and
/// directions per driver (a random program holds comparisons: a point
/// where one flips is served by a re-trace), and against the one-shot
/// `taylor::<N>` bit for bit (the same Taylor program).
#[test]
fn compiled_directional_matches_dual3_on_random_programs() {
    check(
        "Directional vs Dual3_64",
        96,
        common::scalar_program().prop_flat_map(|f| {
            let n = f.n;
            let pts = proptest::collection::vec((point(n), point(n)), 3);
            (Just(f), pts)
        }),
        |(f, pts), worst| {
            let p = &f.program;
            let call = |t: &[Tracer]| p.eval(t).map(|o| o[0]);
            let mut d = optic_ad::Directional::new(call, &pts[0].0, 3).map_err(fail)?;
            let mut out = [0.0; 4];
            for (x, v) in &pts {
                d.eval(x, v, &mut out).map_err(fail)?;
                let duals: Vec<num_dual::Dual3_64> = x
                    .iter()
                    .zip(v)
                    .map(|(&xi, &vi)| num_dual::Dual3_64::new(xi, vi, 0.0, 0.0))
                    .collect();
                let y = p.eval(&duals).map_err(fail)?[0];
                for (k, want) in [y.re, y.v1, y.v2, y.v3].into_iter().enumerate() {
                    let e = worst.note(err(out[k], want));
                    prop_assert!(
                        e <= TOL,
                        "order {k}: Directional {} vs Dual3 {want}",
                        out[k]
                    );
                }
                let once = taylor::<U3, _, _>(call, &x[..], &v[..]).map_err(fail)?;
                prop_assert!(
                    once.iter()
                        .zip(&out)
                        .all(|(a, b)| common::same_bits(*a, *b)),
                    "one-shot {once:?} vs compiled {out:?}"
                );
            }
            Ok(())
        },
    );
}

/// `Directional` re-traces where a guard fails, as the other compiled
/// drivers do, and refuses bad lengths with `out` untouched.
#[test]
fn compiled_directional_retraces_and_checks_lengths() {
    let f = |x: &[Tracer]| {
        if x[0] > 0.0 {
            x[0].sin() * x[1]
        } else {
            x[0].exp() * x[1]
        }
    };
    let mut d = optic_ad::Directional::new(f, &[0.5, 2.0], 3).unwrap();
    let mut out = [0.0; 4];
    for x0 in [0.5, -0.5, 0.7] {
        // Along v = (1, 0): x₁ times the k-th derivative of the branch.
        d.eval(&[x0, 2.0], &[1.0, 0.0], &mut out).unwrap();
        let want = if x0 > 0.0 {
            [x0.sin(), x0.cos(), -x0.sin(), -x0.cos()]
        } else {
            [x0.exp(); 4]
        };
        for k in 0..4 {
            assert_relative_eq!(out[k], 2.0 * want[k], max_relative = 1e-14);
        }
    }
    assert_eq!(d.order(), 3);
    assert!(d.program().is_some() && d.array_program().is_none());
    out = [7.0; 4];
    for r in [
        d.eval(&[1.0], &[1.0, 0.0], &mut out),
        d.eval(&[1.0, 0.0], &[1.0], &mut out),
        d.eval(&[1.0, 0.0], &[1.0, 0.0], &mut out[..3]),
    ] {
        assert!(matches!(r, Err(Error::LengthMismatch { .. })), "{r:?}");
    }
    assert_eq!(out, [7.0; 4]);
    assert!(matches!(
        optic_ad::Directional::new(f, &[], 2),
        Err(Error::EmptyInput(_))
    ));
    assert!(matches!(
        optic_ad::Directional::new(f, &[1.0, 1.0], MAX_TAYLOR_ORDER + 1),
        Err(Error::OrderTooHigh { .. })
    ));
    // A value that is zero by structure is +0.0 from every univariate
    // Taylor driver, as from the others.
    let zero = |_: Tracer| Tracer::cst(-0.0);
    let d = derivative::<U3, _, _>(zero, 1.0).unwrap();
    let (e, _) = derivative_with_error::<U3, _>(zero, 1.0).unwrap();
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&d), bits(&[0.0; 4]));
    assert_eq!(bits(&e), bits(&d));
    // Refused before `f` is traced (a long loop would otherwise be traced
    // unrolled first, only to be refused after).
    let never = |_: &[Tracer]| -> Tracer { unreachable!("traced for a refused order") };
    assert!(matches!(
        optic_ad::Directional::new(never, &[1.0], usize::MAX),
        Err(Error::OrderTooHigh { .. })
    ));
}

/// `d3` against the nested-reverse third derivative: `D³f[u, v, w]` is the
/// gradient (∂⃖) of `x ↦ uᵀ H(x) v` (itself forward over reverse) dotted
/// with `w`, all by nesting the drivers inside a trace.
#[test]
fn d3_matches_nested_reverse() {
    fn f<T: Real>(x: &[T]) -> T {
        (x[0] * x[1]).sin() * x[2].exp() + x[0].powi(3) * x[1].atan() - x[2].ln_1p() * x[1]
    }
    let x = [0.4, -0.7, 0.3];
    let (u, v, w) = ([0.5, 1.0, -0.8], [-0.3, 0.2, 0.9], [1.0, 0.4, 0.6]);
    let got = d3(f, &x, &u, &v, &w).unwrap();
    let grad = gradient(
        |a: &[Tracer]| {
            let hv = hvp(f, a, &v.map(Tracer::cst)).unwrap();
            hv.iter()
                .zip(&u)
                .fold(Tracer::cst(0.0), |s, (h, &ui)| s + *h * ui)
        },
        &x,
    )
    .unwrap();
    let want: f64 = grad.iter().zip(&w).map(|(g, wi)| g * wi).sum();
    assert_relative_eq!(got, want, max_relative = 1e-12);
    // Symmetric in its directions.
    let swapped = d3(f, &x, &w, &u, &v).unwrap();
    assert_relative_eq!(got, swapped, max_relative = 1e-12);
    // Closed form: f = x y z has D³f[eₓ, e_y, e_z] = 1 and D³f[eₓ, eₓ, e_y] = 0.
    let xyz = |a: &[Tracer]| a[0] * a[1] * a[2];
    let e = |i: usize| {
        let mut d = [0.0; 3];
        d[i] = 1.0;
        d
    };
    assert_relative_eq!(
        d3(xyz, &x, &e(0), &e(1), &e(2)).unwrap(),
        1.0,
        max_relative = 1e-14
    );
    assert_eq!(d3(xyz, &x, &e(0), &e(0), &e(1)).unwrap(), 0.0);
}

// A user rule with no Taylor rule of its own gets one from its pullback:
// `softplus(x) = ln(1 + eˣ)`, whose pullback `σ(x) = exp(−softplus(−x))`
// calls the rule itself (so the derived rule recurses, one degree lower
// each time). Checked against the nested ∂⃖ construction to order 8 and
// against a rule that supplies its own Taylor rule.
use crate::rrule;

fn softplus() -> &'static CustomRule {
    rrule::softplus_rule()
}

/// `x³` with its own Taylor rule (the jet cubed by two convolutions),
/// counting how often that rule runs.
struct Cube;
static CUBE_TAYLOR_CALLS: AtomicUsize = AtomicUsize::new(0);
impl ScalarRule for Cube {
    fn name(&self) -> &str {
        "cube"
    }
    fn value(&self, x: f64) -> f64 {
        x * x * x
    }
    fn pullback(&self, b: &mut Builder, x: Var, _y: Var, ct: Var) -> Var {
        let x2 = b.mul(x, x);
        let d = b.scale(3.0, x2);
        b.mul(ct, d)
    }
    fn taylor(&self, x: &[f64], y: &mut [f64]) -> bool {
        CUBE_TAYLOR_CALLS.fetch_add(1, Ordering::Relaxed);
        let n = y.len();
        let sq: Vec<f64> = (0..n)
            .map(|k| (0..=k).map(|i| x[i] * x[k - i]).sum())
            .collect();
        for (k, yk) in y.iter_mut().enumerate() {
            *yk = (0..=k).map(|i| sq[i] * x[k - i]).sum();
        }
        true
    }
}

/// `x·eʸ`, two arguments, no Taylor rule: derived from the pullback.
struct XExpY;
impl Rule for XExpY {
    fn name(&self) -> &str {
        "x_exp_y"
    }
    fn arity(&self) -> usize {
        2
    }
    fn value(&self, x: &[f64]) -> f64 {
        x[0] * x[1].exp()
    }
    fn pullback(&self, b: &mut Builder, x: &[Var], y: Var, ct: Var) -> Vec<Var> {
        let e = b.exp(x[1]);
        vec![b.mul(ct, e), b.mul(ct, y)]
    }
}

#[test]
fn user_rules_in_taylor_mode() {
    let sp = softplus();
    for &x in &[-3.0, -0.2, 0.0, 0.7, 4.0] {
        let f = |t: Tracer| (t * 0.5 + t * t * 0.3).apply_rule(sp);
        let got = derivative::<U8, _, _>(f, x).unwrap();
        let p = trace(|t| vec![f(t[0])], &[x]).unwrap();
        let want = nested_derivatives(&p, 8).unwrap().eval(&[x]).unwrap();
        // Against the same composite with softplus written out, in the form
        // whose jets do not cancel: ln(1 + eᵘ) for u ≤ 0 and
        // u + ln(1 + e⁻ᵘ) above (ln(1 + eᵘ) at u = 6.8 loses seven digits
        // at order 8 to the cancellation of e⁶·⁸-sized coefficients).
        let plain = derivative::<U8, _, _>(
            |t: Tracer| {
                let u = t * 0.5 + t * t * 0.3;
                if u > 0.0 {
                    u + (-u).exp().ln_1p()
                } else {
                    u.exp().ln_1p()
                }
            },
            x,
        )
        .unwrap();
        // num-dual's Dual3 through the rule's bridge (∂⃗ of its program).
        let t = num_dual::Dual3_64::new(x, 1.0, 0.0, 0.0);
        let dual = (t * 0.5 + t * t * 0.3).apply_rule(sp);
        for (k, d) in [dual.re, dual.v1, dual.v2, dual.v3].into_iter().enumerate() {
            assert_relative_eq!(got[k], d, max_relative = 1e-12, epsilon = 1e-14);
        }
        let scale = common::scale_of(&want);
        for k in 0..=8 {
            assert!(
                err(got[k] / scale, want[k] / scale) <= 1e-12,
                "softplus at {x}, order {k}: Taylor {} vs nested ∂⃖ {}",
                got[k],
                want[k]
            );
            assert!(
                err(got[k] / scale, plain[k] / scale) <= 1e-12,
                "softplus at {x}, order {k}: Taylor {} vs ln(1 + eᵘ) {}",
                got[k],
                plain[k]
            );
        }
    }

    let cube = CustomRule::new(Cube);
    let before = CUBE_TAYLOR_CALLS.load(Ordering::Relaxed);
    let got = derivative::<U6, _, _>(|t: Tracer| t.sin().apply_rule(&cube), 0.4).unwrap();
    assert!(
        CUBE_TAYLOR_CALLS.load(Ordering::Relaxed) > before,
        "own Taylor rule used"
    );
    let want = derivative::<U6, _, _>(|t: Tracer| t.sin().powi(3), 0.4).unwrap();
    for k in 0..=6 {
        assert_relative_eq!(got[k], want[k], max_relative = 1e-13, epsilon = 1e-14);
    }

    let xey = CustomRule::new(XExpY);
    let f = |a: &[Tracer]| Real::apply_rule_n(&xey, &[a[0].sin(), a[1] * a[0]]);
    let plain = |a: &[Tracer]| a[0].sin() * (a[1] * a[0]).exp();
    let (x, v) = ([0.3, -0.8], [1.0, 0.6]);
    let got = taylor::<U6, _, _>(f, &x, &v).unwrap();
    let want = taylor::<U6, _, _>(plain, &x, &v).unwrap();
    for k in 0..=6 {
        assert_relative_eq!(got[k], want[k], max_relative = 1e-12, epsilon = 1e-14);
    }
}

/// The compiled `Derivatives` re-traces where a branch flips, and the
/// Taylor program reports a failed guard itself.
#[test]
fn guards_in_taylor_mode() {
    let f = |t: Tracer| if t > 0.0 { t.sin() } else { t.exp() };
    let mut d = Derivatives::<U3, _>::new(f, 0.5).unwrap();
    let a = d.eval(0.5).unwrap();
    assert_relative_eq!(a[3], -(0.5f64.cos()));
    let b = d.eval(-0.5).unwrap();
    assert_relative_eq!(b[3], (-0.5f64).exp());
    let p = trace(
        |x| vec![if x[0] > 0.0 { x[0].sin() } else { x[0].exp() }],
        &[0.5],
    )
    .unwrap();
    let mut t = TaylorProgram::new(&p, 2).unwrap();
    let mut out = [0.0; 3];
    assert!(matches!(
        t.eval(&[-0.5, 1.0, 0.0], &mut out),
        Err(Error::GuardFailed { .. })
    ));
    t.eval(&[0.5, 1.0, 0.0], &mut out).unwrap();
}

/// Bad input is an error, never a panic.
#[test]
fn taylor_errors() {
    let p = trace(|x| vec![x[0].sin() * x[1]], &[1.0, 2.0]).unwrap();
    assert!(matches!(
        TaylorProgram::new(&p, MAX_TAYLOR_ORDER + 1),
        Err(Error::OrderTooHigh {
            order: 171,
            max: 170
        })
    ));
    let mut t = TaylorProgram::new(&p, 3).unwrap();
    let mut out = [0.0; 4];
    assert!(matches!(
        t.eval(&[1.0; 7], &mut out),
        Err(Error::LengthMismatch {
            expected: 8,
            got: 7,
            ..
        })
    ));
    assert!(matches!(
        t.eval(&[1.0; 8], &mut [0.0; 3]),
        Err(Error::LengthMismatch {
            expected: 4,
            got: 3,
            ..
        })
    ));
    let f = |a: &[Tracer]| a[0] * a[1];
    assert!(matches!(
        taylor::<U3, _, _>(f, &[1.0, 2.0], &[1.0]),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        taylor::<U3, [f64], _>(f, &[], &[0.0; 0]),
        Err(Error::EmptyInput(_))
    ));
    assert!(matches!(
        d3(f, &[1.0, 2.0], &[1.0, 0.0], &[0.0], &[1.0, 1.0]),
        Err(Error::LengthMismatch { .. })
    ));
    // Degree 0: the jet is the value.
    let mut t0 = TaylorProgram::new(&p, 0).unwrap();
    let mut y = [0.0];
    t0.eval(&[0.5, 3.0], &mut y).unwrap();
    assert_eq!(y[0], 0.5f64.sin() * 3.0);
    let d = derivative::<typenum::U0, _, _>(|t| t.cos(), 0.5).unwrap();
    assert_eq!(d[0], 0.5f64.cos());
}

/// No panic on random programs with random input jets of any length, and
/// the constant term is the f64 value bit for bit.
#[test]
fn taylor_never_panics_and_keeps_the_primal() {
    let strategy = (1usize..=3).prop_flat_map(|n| {
        (
            program(n, 1, 3..=20, 2.0),
            0usize..=8,
            prop::collection::vec(prop::num::f64::ANY, 0..40),
            prop::collection::vec(-2.0f64..2.0, n),
        )
    });
    check(
        "Taylor: no panics, constant term is the value",
        256,
        strategy,
        |(f, degree, junk, x), _| {
            let mut t = TaylorProgram::new(&f.program, degree).map_err(fail)?;
            let w = degree + 1;
            // Arbitrary lengths and values: an error or a result, no panic.
            let mut out = vec![0.0; junk.len() % 5];
            let _ = t.eval(&junk, &mut out);
            // A well-formed call: the constant term is the value.
            let mut jets = vec![0.0; f.n * w];
            for (i, xi) in x.iter().enumerate() {
                jets[i * w] = *xi;
                if w > 1 {
                    jets[i * w + 1] = 1.0;
                }
            }
            let mut out = vec![0.0; w];
            t.eval(&jets, &mut out).map_err(fail)?;
            let y = f.program.eval(&x).map_err(fail)?[0];
            prop_assert!(
                out[0].to_bits() == y.to_bits() || (out[0].is_nan() && y.is_nan()),
                "constant term {} vs value {y}",
                out[0]
            );
            Ok(())
        },
    );
}

/// The order bound: `derivative::<N>` compiles to 170 and runs at 100.
#[test]
fn order_one_hundred() {
    let d = derivative::<typenum::U100, _, _>(|t| t.exp(), 0.25).unwrap();
    for dk in d.iter() {
        assert_relative_eq!(*dk, 0.25f64.exp(), max_relative = 1e-12);
    }
}

/// The rounding-error estimate where the first-order model saturates: a
/// cosine of a computed argument near 8·10²¹, whose last bit is worth
/// about 10⁶ radians. `cos(x)` and `cos((x · 0.1) · 10)` are the same
/// function, the second with two roundings of its argument; their
/// derivatives differ by as much as cosines can, and the estimates must
/// cover that difference (before the second, smaller perturbation they
/// were about 10⁶ times too small). `x` itself is exact, so the first
/// has no error.
#[test]
fn error_estimates_cover_a_saturated_cosine() {
    use optic_ad::typenum::U3;
    let x = 8e21 + 3.0 * 2f64.powi(20);
    let (a, ea) = optic_ad::derivative_with_error::<U3, _>(|t| t.cos(), x).unwrap();
    let (b, eb) =
        optic_ad::derivative_with_error::<U3, _>(|t| ((t * 0.1) * 10.0).cos(), x).unwrap();
    assert_ne!((x * 0.1) * 10.0, x, "the argument must round away from x");
    for k in 0..4 {
        let d = (a[k] - b[k]).abs();
        assert!(
            d <= ea[k] + eb[k],
            "order {k}: |{} − {}| = {d:e} > {:e} + {:e}",
            a[k],
            b[k],
            ea[k],
            eb[k]
        );
    }
    // And where the model holds, the estimate stays first-order small.
    let (c, ec) = optic_ad::derivative_with_error::<U3, _>(|t| (t * 3.0).cos(), 0.7).unwrap();
    for k in 0..4 {
        assert!(
            ec[k] < 1e-13 * c[k].abs().max(1.0),
            "order {k}: {:e}",
            ec[k]
        );
    }
}
