//! Loops as primitives: `fold` and `scan` on the array trace are one
//! `Scan` instruction, and its derivatives (gradient, HVP, Taylor mode, the
//! 2-optic of `array::nest`, checkpointed gradients) equal those of the
//! same loop unrolled on the scalar trace and of num-dual through the
//! plain loop.
//!
//! References, each independent of the `Scan` rules:
//! * num-dual (`Dual64`, `HyperDual64`, `Dual3_64`) through the plain
//!   Rust loop that `fold` runs on those types;
//! * the scalar trace, which unrolls the loop into one copy of the body
//!   per step and differentiates that with the scalar ∂⃖.
//!
//! Tolerance: 1e-12 relative (mixed measure `common::max_err`) for the
//! unrolled trace, whose arithmetic is the same up to the order of the
//! sums of cotangent contributions; 1e-10 for num-dual, whose `tanh` and
//! division follow other formulas.

use crate::common;

use common::{check, max_err};
use num_dual::{Dual3_64, Dual64, HyperDual64};
use optic_ad::array::{self, Array, TArray, TScalar};
use optic_ad::typenum::U3;
use optic_ad::{fold, Error, Real, Result, Tracer};
use proptest::prelude::*;

// The benchmark's problem: Lotka–Volterra by RK4, `steps` steps of
// `h = 10/steps`, `p = (α, β, γ, δ, x₀, y₀)`, the squared distance of the
// final state to `(1, 1)`; `loss_with` chooses the gradient's checkpoints.
#[path = "../benches/lotka_volterra.rs"]
pub(crate) mod lotka_volterra;

use lotka_volterra::{loss, loss_array, loss_with, P0, V};

/// `J_f(x)ᵀ ȳ` on the scalar trace with the loop unrolled (one copy of the
/// body per step): `trace` (which unrolls, having no array trace to send
/// loops to) and the scalar ∂⃖'s joint program `(x, ȳ) ↦ (y, x̄)`. (The
/// drivers take code with loops to the array trace.)
pub(crate) fn unrolled_vjp(
    f: impl FnOnce(&[Tracer]) -> Result<Vec<Tracer>>,
    x: &[f64],
    ybar: &[f64],
) -> Vec<f64> {
    let p = optic_ad::trace(|t| f(t).unwrap(), x).unwrap();
    let joint = optic_ad::functor::reverse_joint(&p);
    let mut inputs = x.to_vec();
    inputs.extend_from_slice(ybar);
    joint.eval(&inputs).unwrap().split_off(ybar.len())
}

/// The gradient on the scalar trace with the loop unrolled
/// ([`unrolled_vjp`] at `ȳ = 1`).
pub(crate) fn unrolled_gradient(
    f: impl FnOnce(&[Tracer]) -> Result<Tracer>,
    x: &[f64],
) -> Vec<f64> {
    unrolled_vjp(|t| Ok(vec![f(t)?]), x, &[1.0])
}

/// `H v` on the scalar trace with the loop unrolled: `jvp` of the gradient
/// at tracer points (a trace nested in another unrolls its loops, so the
/// outer `jvp` meets none and traces once).
pub(crate) fn unrolled_hvp(
    f: impl Fn(&[Tracer]) -> Result<Tracer>,
    x: &[f64],
    v: &[f64],
) -> Vec<f64> {
    optic_ad::jvp(|q: &[Tracer]| optic_ad::gradient(&f, q), x, v)
        .unwrap()
        .1
}

/// The elements of an array-trace input as scalars.
fn scalars(p: &TArray) -> Result<Vec<TScalar>> {
    (0..p.len()).map(|i| p.get(i)).collect()
}

/// The gradient and `H v` by num-dual through the plain loop.
fn dual_reference(steps: usize) -> (f64, Vec<f64>, Vec<f64>) {
    let mut grad = Vec::new();
    let mut value = 0.0;
    for j in 0..6 {
        let p: Vec<Dual64> = (0..6)
            .map(|i| Dual64::new(P0[i], if i == j { 1.0 } else { 0.0 }))
            .collect();
        let y = loss(&p, steps).unwrap();
        value = y.re;
        grad.push(y.eps);
    }
    let mut hv = Vec::new();
    for j in 0..6 {
        let p: Vec<HyperDual64> = (0..6)
            .map(|i| HyperDual64::new(P0[i], V[i], if i == j { 1.0 } else { 0.0 }, 0.0))
            .collect();
        hv.push(loss(&p, steps).unwrap().eps1eps2);
    }
    (value, grad, hv)
}

#[test]
fn lotka_volterra_gradient_and_hvp_through_fold() {
    for steps in [1, 10, 200] {
        let (value, grad_ref, hv_ref) = dual_reference(steps);
        // The array trace: one loop instruction.
        let mut g = optic_ad::Gradient::array(|p: &TArray| loss_array(p, steps), &P0).unwrap();
        let mut grad = vec![0.0; 6];
        let y = g.eval(&P0, &mut grad).unwrap();
        assert!(max_err(&[y], &[value]) < 1e-12, "value {y} vs {value}");
        assert!(
            max_err(&grad, &grad_ref) < 1e-10,
            "N = {steps}: gradient {grad:?} vs num-dual {grad_ref:?}"
        );
        // The scalar trace with the loop unrolled: the same numbers.
        let unrolled = unrolled_gradient(|p| loss(p, steps), &P0);
        assert!(
            max_err(&grad, &unrolled) < 1e-12,
            "N = {steps}: gradient {grad:?} vs unrolled {unrolled:?}"
        );
        let mut h = optic_ad::Hvp::array(|p: &TArray| loss_array(p, steps), &P0).unwrap();
        let mut hv = vec![0.0; 6];
        h.eval(&P0, &V, &mut hv).unwrap();
        assert!(
            max_err(&hv, &hv_ref) < 1e-10,
            "N = {steps}: Hv {hv:?} vs num-dual {hv_ref:?}"
        );
        let hv_unrolled = unrolled_hvp(|p| loss(p, steps), &P0, &V);
        assert!(
            max_err(&hv, &hv_unrolled) < 1e-12,
            "N = {steps}: Hv {hv:?} vs unrolled {hv_unrolled:?}"
        );
        let hv1 = crate::common::array_hvp(|p: &TArray| loss_array(p, steps), &P0, &V).unwrap();
        assert!(max_err(&hv1, &hv) < 1e-12);
    }
}

#[test]
fn third_directional_derivative_through_fold() {
    for steps in [3, 50] {
        // Dual3 along p + t v through the plain loop.
        let p: Vec<Dual3_64> = (0..6)
            .map(|i| Dual3_64::new(P0[i], V[i], 0.0, 0.0))
            .collect();
        let d = loss(&p, steps).unwrap();
        let want = [d.re, d.v1, d.v2, d.v3];
        let t =
            crate::common::array_taylor::<U3>(|p: &TArray| loss_array(p, steps), &P0, &V).unwrap();
        let got = [t[0], t[1], t[2], t[3]];
        assert!(
            max_err(&got, &want) < 1e-10,
            "N = {steps}: Taylor {got:?} vs Dual3 {want:?}"
        );
        let d3 = crate::arrays::directional3(|p: &TArray| loss_array(p, steps), &P0, &V).unwrap();
        assert!(
            max_err(&d3, &want) < 1e-10,
            "directional3 {d3:?} vs {want:?}"
        );
    }
}

#[test]
fn the_trace_does_not_grow_with_the_steps() {
    let len = |steps: usize| {
        array::trace(|x: &[TArray]| loss_array(&x[0], steps), &[&P0])
            .unwrap()
            .len()
    };
    assert_eq!(len(10), len(100_000));
    let g = |steps: usize| {
        optic_ad::Gradient::array(|p: &TArray| loss_array(p, steps), &P0)
            .unwrap()
            .array_program()
            .unwrap()
            .len()
    };
    assert_eq!(g(10), g(100_000));
}

#[test]
fn loop_bodies_that_compare_or_read_arrays_are_refused() {
    // A comparison inside the body would be a guard inside the loop.
    let r = crate::common::array_gradient(
        |p: &TArray| {
            let a = p.get(0)?;
            let [c] = fold(
                3,
                [a],
                |[c]: [TScalar; 1]| {
                    if c > 0.0 {
                        [c * 2.0]
                    } else {
                        [c]
                    }
                },
            )?;
            Ok(c)
        },
        &[1.0],
    );
    assert!(matches!(r, Err(Error::Unsupported(_))), "{r:?}");
    // An array of the enclosing trace read inside the body.
    let r = crate::common::array_gradient(
        |p: &TArray| {
            let a = p.get(0)?;
            let [c] = fold(3, [a], |[c]: [TScalar; 1]| [c * p.sum()])?;
            Ok(c)
        },
        &[1.0, 2.0],
    );
    assert!(matches!(r, Err(Error::Unsupported(_))), "{r:?}");
}

#[test]
fn folds_nest_and_capture_through_both_levels() {
    // An inner fold inside an outer one, the inner reading the outer's
    // carry and a parameter: Σ-like recurrences of known closed form are
    // not needed, num-dual through the plain loops is the reference.
    fn f<T: Real>(p: &[T]) -> Result<T> {
        let [a, b] = fold(4, [p[0], p[1]], |[a, b]: [T; 2]| {
            let inner = fold(3, [a], |[s]: [T; 1]| [s * 0.5 + b * p[2]]);
            let [s] = inner.unwrap_or([T::cst(f64::NAN)]);
            [s.sin() + a * 0.1, b * 0.9 + s * 0.05]
        })?;
        Ok(a * b)
    }
    let x = [0.3, -0.7, 0.4];
    let g = crate::common::array_gradient(|p: &TArray| f(&scalars(p)?), &x).unwrap();
    let want: Vec<f64> = (0..3)
        .map(|j| {
            let p: Vec<Dual64> = (0..3)
                .map(|i| Dual64::new(x[i], if i == j { 1.0 } else { 0.0 }))
                .collect();
            f(&p).unwrap().eps
        })
        .collect();
    assert!(max_err(&g, &want) < 1e-12, "{g:?} vs {want:?}");
}

/// A random loop: a two-value carry updated by a body whose shape is
/// fixed and whose coefficients and trip count are drawn; the parameters
/// enter as captures and as the initial carry.
#[derive(Clone, Debug)]
struct RandomLoop {
    steps: usize,
    coef: [f64; 4],
    x: Vec<f64>,
    v: Vec<f64>,
}

fn random_loop() -> impl Strategy<Value = RandomLoop> {
    (
        0usize..25,
        prop::array::uniform4(-1.0f64..1.0),
        prop::collection::vec(-1.0f64..1.0, 4),
        prop::collection::vec(-1.0f64..1.0, 4),
    )
        .prop_map(|(steps, coef, x, v)| RandomLoop { steps, coef, x, v })
}

fn random_body<T: Real>(l: &RandomLoop, p: &[T]) -> Result<T> {
    random_body_with(l, p, optic_ad::Checkpoints::All)
}

fn random_body_with<T: Real>(l: &RandomLoop, p: &[T], ck: optic_ad::Checkpoints) -> Result<T> {
    let c = l.coef;
    let [a, b] = optic_ad::fold_with(l.steps, [p[0], p[1]], ck, |[a, b]: [T; 2]| {
        let s = (a * c[0] + b * p[2]).tanh();
        let t = (b * c[1] - a * a * 0.1 + p[3]).sin();
        [a * 0.8 + s * c[2], b * 0.7 + t * c[3]]
    })?;
    Ok(a * b + a.exp() * 0.1)
}

#[test]
fn random_loops_match_the_unrolled_trace() {
    check("random loops", 64, random_loop(), |l, worst| {
        let f = |p: &TArray| random_body(&l, &scalars(p)?);
        let g = crate::common::array_gradient(f, &l.x).unwrap();
        let g_ref = unrolled_gradient(|p| random_body(&l, p), &l.x);
        let e = max_err(&g, &g_ref);
        worst.note(e);
        prop_assert!(e < 1e-12, "gradient {g:?} vs unrolled {g_ref:?}");
        // Checkpointed with two snapshots: the same bits.
        let two = optic_ad::Checkpoints::Binomial(2);
        let gc = crate::common::array_gradient(
            |p: &TArray| random_body_with(&l, &scalars(p)?, two),
            &l.x,
        )
        .unwrap();
        prop_assert!(
            gc.iter().zip(&g).all(|(a, b)| common::same_bits(*a, *b)),
            "checkpointed gradient {gc:?} vs {g:?}"
        );
        let hv = crate::common::array_hvp(f, &l.x, &l.v).unwrap();
        let hv_ref = unrolled_hvp(|p| random_body(&l, p), &l.x, &l.v);
        let e = max_err(&hv, &hv_ref);
        worst.note(e);
        prop_assert!(e < 1e-12, "Hv {hv:?} vs unrolled {hv_ref:?}");
        let t = crate::common::array_taylor::<U3>(f, &l.x, &l.v).unwrap();
        let xd: Vec<Dual3_64> = (0..4)
            .map(|i| Dual3_64::new(l.x[i], l.v[i], 0.0, 0.0))
            .collect();
        let d = random_body(&l, &xd).unwrap();
        let e = max_err(&[t[0], t[1], t[2], t[3]], &[d.re, d.v1, d.v2, d.v3]);
        worst.note(e);
        prop_assert!(e < 1e-10, "Taylor {t:?} vs Dual3 {d:?}");
        Ok(())
    });
}

/// `β(c, r) = (c + r)! / (c! r!)`.
fn beta(c: usize, r: usize) -> usize {
    (1..=r).fold(1, |b, j| b * (c + j) / j)
}

/// The fewest forward steps that reverse `l` steps with `s` snapshots
/// besides the first, by exhaustive search over the first split
/// (`T(l, s) = min_m m + T(l − m, s − 1) + T(m, s)`, `T(1, s) = 0`,
/// `T(l, 0) = l(l − 1)/2`).
fn fewest(
    l: usize,
    s: usize,
    memo: &mut std::collections::HashMap<(usize, usize), usize>,
) -> usize {
    if l <= 1 {
        return 0;
    }
    if s == 0 {
        return l * (l - 1) / 2;
    }
    if let Some(&t) = memo.get(&(l, s)) {
        return t;
    }
    let t = (1..l)
        .map(|m| m + fewest(l - m, s - 1, memo) + fewest(m, s, memo))
        .min()
        .unwrap_or(0);
    memo.insert((l, s), t);
    t
}

/// The checkpointing schedule recomputes the fewest forward steps there
/// are, and as many as Griewank & Walther's formula says ("Evaluating
/// Derivatives", 2nd ed., ch. 12): `r·l − β(s + 2, r − 1)` with `r` the
/// least such that `β(s + 1, r) ≥ l` (`s + 1` checkpoints counting the
/// first carry).
#[test]
fn binomial_schedule_recomputes_the_fewest_steps() {
    use optic_ad::array::prims::binomial_forward_steps;
    let mut memo = std::collections::HashMap::new();
    for s in 1..7 {
        for l in 1..200 {
            let got = binomial_forward_steps(l, s);
            let r = (0..).find(|&r| beta(s + 1, r) >= l).unwrap();
            let formula = if r == 0 {
                0
            } else {
                r * l - beta(s + 2, r - 1)
            };
            assert_eq!(got, fewest(l, s, &mut memo), "l = {l}, s = {s}");
            assert_eq!(got, formula, "l = {l}, s = {s}");
        }
    }
    // At the benchmark's size: two snapshots' worth of extra passes.
    let n = 1_000_000;
    let s = (1..).find(|&s| beta(s + 1, 2) >= n).unwrap();
    assert_eq!(binomial_forward_steps(n, s), 2 * n - beta(s + 2, 1));
}

/// Checkpointed and stored schedules run the same arithmetic on the same
/// carries: the same bits for the gradient, in every case where the
/// schedule really recomputes (fewer snapshots than steps minus one),
/// which also checks that each reverse step got the right carry; the HVP
/// through a checkpointed loop (which keeps its carries) agrees to 1e-14.
#[test]
fn checkpointed_gradients_equal_stored_ones_bit_for_bit() {
    use optic_ad::Checkpoints as C;
    for (steps, snapshots) in [(7, 1), (7, 3), (300, 1), (300, 3), (300, 40), (1000, 5)] {
        let c = C::Binomial(snapshots);
        assert!(snapshots + 1 < steps);
        let g = |c: C| {
            crate::common::array_gradient(|p: &TArray| loss_with(&scalars(p)?, steps, c), &P0)
                .unwrap()
        };
        let (stored, got) = (g(C::All), g(c));
        assert!(
            got.iter()
                .zip(&stored)
                .all(|(a, b)| common::same_bits(*a, *b)),
            "N = {steps}, {c:?}: {got:?} vs {stored:?}"
        );
        let hv = |c: C| {
            crate::common::array_hvp(|p: &TArray| loss_with(&scalars(p)?, steps, c), &P0, &V)
                .unwrap()
        };
        let (a, b) = (hv(C::All), hv(c));
        assert!(
            a.iter().zip(&b).all(|(a, b)| common::same_bits(*a, *b)),
            "HVP, N = {steps}, {c:?}: {b:?} vs {a:?}"
        );
    }
    // The program differs: one checkpointed instruction, no stored carries.
    let prog = |c: C| {
        optic_ad::Gradient::array(|p: &TArray| loss_with(&scalars(p)?, 1000, c), &P0)
            .unwrap()
            .array_program()
            .unwrap()
            .to_string()
    };
    assert!(prog(C::Binomial(8)).contains("revolve (8 snapshots)"));
    assert!(!prog(C::All).contains("revolve"));
    // The default keeps every carry up to 2²⁰ values, then the fewest
    // snapshots that recompute each step at most twice (β(s + 1, 2) ≥ N).
    assert_eq!(C::Auto.snapshots(2, 1 << 19), None);
    for n in [(1usize << 19) + 1, 10_000_000, usize::MAX / 4] {
        let s = C::Auto.snapshots(2, n).unwrap();
        let b2 = |s: usize| (s as u128 + 3) * (s as u128 + 2) / 2;
        assert!(b2(s) >= n as u128 && b2(s - 1) < n as u128, "N = {n}: {s}");
    }
}

/// The largest value any instruction of an array program holds, read off
/// its printed form (the instructions at the top level, not in bodies).
fn largest_value(p: &array::ArrayProgram) -> usize {
    p.to_string()
        .lines()
        .filter_map(|l| l.strip_prefix("  %"))
        .filter_map(|l| {
            let shape = l.split(": ").nth(1)?.split(' ').next()?;
            match shape {
                "scalar" => Some(1),
                s => s.strip_prefix("vector[")?.strip_suffix(']')?.parse().ok(),
            }
        })
        .max()
        .unwrap_or(0)
}

/// `(x, v) ↦ (H v, D³f[v, v, ·])` on a scalar-valued array program: ∂⃗ of
/// ∂⃗ of its joint program ∂⃖, evaluated at `ȳ = 1` with the tangent `v`
/// on `x` at both levels. The programs are returned with the results.
fn second_and_third(
    prog: &array::ArrayProgram,
    x: &[f64],
    v: &[f64],
) -> (Vec<f64>, Vec<f64>, array::ArrayProgram) {
    let joint = array::reverse_joint(prog).unwrap(); // (x, ȳ) ↦ (y, x̄)
    let hvp = array::forward(&joint).unwrap(); // (x, ȳ, ẋ, ȳ̇) ↦ (y, x̄, ẏ, x̄̇)
    let third = array::forward(&hvp).unwrap(); // and the tangents of those
    let z = vec![0.0; x.len()];
    let out = third
        .eval(&[x, &[1.0], v, &[0.0], v, &[0.0], &z, &[0.0]])
        .unwrap();
    (out[3].clone(), out[7].clone(), third)
}

/// Checkpointing bounds the memory of every derivative through the loop,
/// not only the gradient's: the HVP (∂⃗ over ∂⃖), the third derivative
/// (∂⃗ over ∂⃗ over ∂⃖) and the 2-optic (∂⃖ over ∂⃖) of a checkpointed
/// loop hold no value larger than a few carries (the stored ones hold all
/// `K × N`), and give the stored schedule's bits (∂⃗ over ∂⃖ runs the
/// same arithmetic) or agree with it to rounding (∂⃖ over ∂⃖, whose
/// checkpointed form is the reverse-over-forward second-order adjoint),
/// and with num-dual through the plain loop.
#[test]
fn derivatives_of_checkpointed_loops_are_checkpointed_loops() {
    use optic_ad::Checkpoints as C;
    let steps = 1000;
    let prog = |c: C| {
        array::trace(
            |x: &[TArray]| lotka_volterra::loss_array_with(&x[0], steps, c),
            &[&P0],
        )
        .unwrap()
    };
    let (stored, ck) = (prog(C::All), prog(C::Binomial(8)));
    let (hv_s, d3_s, third_s) = second_and_third(&stored, &P0, &V);
    let (hv_c, d3_c, third_c) = second_and_third(&ck, &P0, &V);
    assert!(largest_value(&third_s) >= 2 * steps);
    assert!(
        largest_value(&third_c) < 64,
        "{} values",
        largest_value(&third_c)
    );
    assert!(third_c.to_string().contains("revolve (8 snapshots)"));
    for (a, b) in [(&hv_c, &hv_s), (&d3_c, &d3_s)] {
        assert!(
            a.iter().zip(b).all(|(a, b)| common::same_bits(*a, *b)),
            "{a:?} vs {b:?}"
        );
    }
    let (_, _, hv_ref) = dual_reference(steps);
    assert!(max_err(&hv_c, &hv_ref) < 1e-10, "{hv_c:?} vs {hv_ref:?}");
    // D³f[v, v, v] against Dual3 along P0 + t V.
    let p: Vec<Dual3_64> = (0..6)
        .map(|i| Dual3_64::new(P0[i], V[i], 0.0, 0.0))
        .collect();
    let want = loss(&p, steps).unwrap().v3;
    let got: f64 = d3_c.iter().zip(&V).map(|(a, b)| a * b).sum();
    assert!(max_err(&[got], &[want]) < 1e-10, "{got} vs {want}");
    // The 2-optic: its H v closure.
    let nested = |p: &array::ArrayProgram| {
        let p2 = array::nest(p, 2).unwrap();
        let out = p2.eval(&[&P0, &[1.0], &V, &[0.0]]).unwrap();
        (out[3..].concat(), p2)
    };
    let ((hv2_s, _), (hv2_c, p2_c)) = (nested(&stored), nested(&ck));
    assert!(largest_value(&p2_c) < 64, "{} values", largest_value(&p2_c));
    assert!(max_err(&hv2_c, &hv2_s) < 1e-13, "{hv2_c:?} vs {hv2_s:?}");
    assert!(max_err(&hv2_c, &hv_ref) < 1e-10);
}

/// The same with per-step data, per-step outputs and captured constants
/// (a checkpointed `scan`): the cotangents of the data come out of the
/// checkpointed loops too.
#[test]
fn derivatives_of_checkpointed_scans_with_data() {
    use optic_ad::array::Dense;
    use optic_ad::Checkpoints as C;
    let n = 300;
    let x: Vec<f64> = (0..n)
        .map(|i| (i as f64 * 0.3).sin())
        .chain([1.7, 0.2, 0.4, -0.3])
        .collect();
    let v: Vec<f64> = (0..n + 4).map(|i| ((i as f64) * 1.1).cos()).collect();
    let prog = |c: C| {
        array::trace(
            |a: &[TArray]| {
                let xs = a[0].slice(0, n)?;
                let p: Vec<TScalar> = (n..n + 4).map(|i| a[0].get(i)).collect::<Result<_>>()?;
                driven_with(&xs, &p, c)
            },
            &[&x],
        )
        .unwrap()
    };
    let (stored, ck) = (prog(C::All), prog(C::Binomial(3)));
    let (hv_s, d3_s, _) = second_and_third(&stored, &x, &v);
    let (hv_c, d3_c, third_c) = second_and_third(&ck, &x, &v);
    assert!(third_c.to_string().contains("revolve (3 snapshots)"));
    for (a, b) in [(&hv_c, &hv_s), (&d3_c, &d3_s)] {
        assert!(
            a.iter().zip(b).all(|(a, b)| common::same_bits(*a, *b)),
            "{a:?} vs {b:?}"
        );
    }
    let scalar = |x: &[optic_ad::Tracer]| driven(&Dense::new(x[..n].to_vec()), &x[n..]);
    let hv_ref = optic_ad::hvp(scalar, &x, &v).unwrap();
    assert!(max_err(&hv_c, &hv_ref) < 1e-12);
    let xd: Vec<Dual3_64> = x
        .iter()
        .zip(&v)
        .map(|(&a, &b)| Dual3_64::new(a, b, 0.0, 0.0))
        .collect();
    let want = driven(&Dense::new(xd[..n].to_vec()), &xd[n..]).unwrap().v3;
    let got: f64 = d3_c.iter().zip(&v).map(|(a, b)| a * b).sum();
    assert!(max_err(&[got], &[want]) < 1e-10, "{got} vs {want}");
    let nested = |p: &array::ArrayProgram| {
        let p2 = array::nest(p, 2).unwrap();
        p2.eval(&[&x, &[1.0], &v, &[0.0]]).unwrap()[3..].concat()
    };
    let (a, b) = (nested(&ck), nested(&stored));
    assert!(max_err(&a, &b) < 1e-13, "2-optic H v");
}

/// A raw scan of every layout: carry `k`, constants `p`, per-step data
/// `x`, per-step outputs `y`, either direction, its outputs squared and
/// summed (so every output gets a cotangent), with its pullback
/// checkpointed by `snapshots` or (`None`) keeping every carry.
fn raw_scan(
    (k, p, x, y, reverse, steps): (usize, usize, usize, usize, bool, usize),
    snapshots: Option<usize>,
) -> array::ArrayProgram {
    use optic_ad::array::prims::Scan;
    use optic_ad::array::{ArrayBuilder, Shape};
    // Body inputs (carry, xᵢ, p), outputs (carry, yᵢ): every input reaches
    // every output, nonlinearly.
    let point: Vec<f64> = (0..k + x + p).map(|i| 0.1 * i as f64).collect();
    let body = optic_ad::trace(
        |t: &[Tracer]| {
            let s = t.iter().fold(Tracer::cst(0.3), |a, &b| a + b * 0.4);
            let mut out: Vec<Tracer> = (0..k)
                .map(|j| (t[j] * 0.7 + s.sin() * 0.2 + t[(j + 1) % t.len()] * 0.1).tanh())
                .collect();
            out.extend((0..y).map(|j| (s * (0.5 + j as f64)).cos() * t[0]));
            out
        },
        &point,
    )
    .unwrap();
    let scan = Scan::new(body, steps, k, x, p, reverse)
        .unwrap()
        .with_snapshots(snapshots);
    let square = optic_ad::trace(|t: &[Tracer]| vec![t[0] * t[0]], &[1.0]).unwrap();
    let mut b = ArrayBuilder::new();
    let mut args = vec![b.input(Shape::Vector(k))];
    if p > 0 {
        args.push(b.input(Shape::Vector(p)));
    }
    if x > 0 {
        args.push(b.input(Shape::Vector(x * steps)));
    }
    let r = b.scan(scan, &args);
    let sq = b.map(std::sync::Arc::new(square), &[r])[0];
    let total = b.sum(sq);
    b.finish(&[total]).unwrap()
}

/// Inputs of every shape `p` takes: deterministic, distinct values.
fn inputs_for(p: &array::ArrayProgram) -> Vec<Vec<f64>> {
    p.input_shapes()
        .iter()
        .enumerate()
        .map(|(i, s)| {
            (0..s.len())
                .map(|j| (0.37 * j as f64 + 1.3 * i as f64).sin() * 0.8)
                .collect()
        })
        .collect()
}

/// Every layout of a checkpointed scan (carry of 1 to 3 values, with and
/// without constants, per-step data and per-step outputs, as many of
/// either as the other or not, forward and reversed, snapshots below, at
/// and above the steps): ∂⃗ ∂⃖, ∂⃗ ∂⃗ ∂⃖ and ∂⃗ ∂⃗ ∂⃗ ∂⃖ give the stored
/// schedule's bits at arbitrary inputs; the 2- and 3-optics (∂⃖ over ∂⃖)
/// agree with the stored ones to rounding and with the loop unrolled on
/// the scalar trace (`unroll`, then the scalar `nest`).
#[test]
fn every_layout_of_a_checkpointed_scan_differentiates_as_the_stored_one() {
    let layouts = [
        (1, 0, 1, 2, false, 7, 2),
        (1, 0, 1, 0, true, 9, 1),
        (2, 1, 2, 1, true, 12, 3),
        (3, 2, 0, 2, false, 5, 1),
        (1, 1, 1, 1, false, 3, 1),
        (2, 0, 0, 0, true, 6, 2),
        (2, 2, 1, 3, true, 4, 9),
        (1, 0, 0, 0, false, 2, 1),
    ];
    for (k, p, x, y, reverse, steps, s) in layouts {
        let shape = (k, p, x, y, reverse, steps);
        let (ck, stored) = (raw_scan(shape, Some(s)), raw_scan(shape, None));
        let mut fwd_c = array::reverse_joint(&ck).unwrap();
        let mut fwd_s = array::reverse_joint(&stored).unwrap();
        for order in 2..=4 {
            fwd_c = array::forward(&fwd_c).unwrap();
            fwd_s = array::forward(&fwd_s).unwrap();
            if s + 1 < steps {
                assert!(fwd_c.to_string().contains("revolve"), "{shape:?}");
            }
            let ins = inputs_for(&fwd_c);
            let refs: Vec<&[f64]> = ins.iter().map(Vec::as_slice).collect();
            let (a, b) = (fwd_c.eval(&refs).unwrap(), fwd_s.eval(&refs).unwrap());
            assert!(
                a.concat()
                    .iter()
                    .zip(&b.concat())
                    .all(|(u, v)| common::same_bits(*u, *v)),
                "{shape:?}, order {order}: {a:?} vs {b:?}"
            );
        }
        for order in [2, 3] {
            let (nc, ns) = (
                array::nest(&ck, order).unwrap(),
                array::nest(&stored, order).unwrap(),
            );
            let ins = inputs_for(&nc);
            let refs: Vec<&[f64]> = ins.iter().map(Vec::as_slice).collect();
            let (a, b) = (
                nc.eval(&refs).unwrap().concat(),
                ns.eval(&refs).unwrap().concat(),
            );
            let e = max_err(&a, &b);
            assert!(e < 1e-12, "{shape:?}, nest {order}: {e:e}");
            let scalar = optic_ad::nest(&stored.unroll().unwrap(), order).unwrap();
            let u = scalar.eval(&ins.concat()).unwrap();
            let e = max_err(&a, &u);
            assert!(e < 1e-12, "{shape:?}, nest {order} vs unrolled: {e:e}");
        }
    }
}

/// `while_loop_with` checkpoints the loop of the trip count it takes: a
/// clocked integration of 300 steps, its gradient and HVP with three
/// snapshots against every carry kept, the same bits, through a
/// checkpointed instruction.
#[test]
fn while_loops_checkpoint_as_folds_do() {
    use optic_ad::Checkpoints as C;
    fn clocked<T: Real>(p: &[T], c: C) -> Result<T> {
        let h = 0.01;
        let (x, y, _) = optic_ad::while_loop_with(
            1000,
            (p[0], p[1], T::cst(0.0)),
            c,
            |(_, _, t)| *t < 3.0 - h / 2.0,
            |(x, y, t): (T, T, T)| (x + (y * p[2]).sin() * h, y - x * h, t + h),
        )?;
        Ok(x * y)
    }
    let (x, v) = ([0.4, -0.3, 1.2], [1.0, 0.5, -0.7]);
    let f = |c: C| move |p: &TArray| clocked(&scalars(p)?, c);
    let g = |c: C| crate::common::array_gradient(f(c), &x).unwrap();
    let hv = |c: C| crate::common::array_hvp(f(c), &x, &v).unwrap();
    let same = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(u, w)| common::same_bits(*u, *w));
    assert!(same(&g(C::Binomial(3)), &g(C::All)));
    assert!(same(&hv(C::Binomial(3)), &hv(C::All)));
    let program = optic_ad::Hvp::array(f(C::Binomial(3)), &x)
        .unwrap()
        .array_program()
        .unwrap()
        .to_string();
    assert!(
        program.contains("revolve (3 snapshots) 300 steps"),
        "{program}"
    );
    // Against num-dual through the plain loop.
    let hd: Vec<f64> = (0..3)
        .map(|j| {
            let p: Vec<HyperDual64> = (0..3)
                .map(|i| HyperDual64::new(x[i], v[i], if i == j { 1.0 } else { 0.0 }, 0.0))
                .collect();
            clocked(&p, C::Auto).unwrap().eps1eps2
        })
        .collect();
    assert!(max_err(&hv(C::Binomial(3)), &hd) < 1e-10);
}

/// The 2-optic of the array program through a loop (`array::nest`, the
/// nested-closure encoding): its `H v` closure against hyper-dual numbers
/// through the plain loop.
#[test]
fn the_second_order_optic_through_a_loop() {
    for steps in [4, 60] {
        let prog = array::trace(|x: &[TArray]| loss_array(&x[0], steps), &[&P0]).unwrap();
        let p2 = array::nest(&prog, 2).unwrap();
        let out = p2.eval(&[&P0, &[1.0], &V, &[0.0]]).unwrap();
        // Outputs [y, r₁ (one array), r₂, r₃ (one array)]: r₃ = H v.
        let hv = out[3..].concat();
        let (_, _, hv_ref) = dual_reference(steps);
        assert!(
            max_err(&hv, &hv_ref) < 1e-10,
            "N = {steps}: {hv:?} vs {hv_ref:?}"
        );
    }
}

/// A scan with data: a damped oscillator driven by the data, `(u, v)`
/// carried, the output the energy, summed with weights; parameters
/// captured. Generic over the array, so the same code runs on `Dense<f64>`,
/// num-dual, the scalar trace (unrolled) and the array trace (one loop).
fn driven<A: Array>(xs: &A, p: &[A::Scalar]) -> Result<A::Scalar> {
    driven_with(xs, p, optic_ad::Checkpoints::Auto)
}

/// [`driven`] with the residual of its derivatives chosen by `ck`.
fn driven_with<A: Array>(xs: &A, p: &[A::Scalar], ck: optic_ad::Checkpoints) -> Result<A::Scalar> {
    let (k, c) = (p[0], p[1]);
    let h = 0.05;
    let ([u, v], e) = optic_ad::scan_with(xs, [p[2], p[3]], ck, |[u, v]: [A::Scalar; 2], f| {
        let a = f - u * k - v * c;
        let (u2, v2) = (u + v * h, v + a * h);
        ([u2, v2], (u2 * u2 * k + v2 * v2) * 0.5)
    })?;
    let w = e.map(|t| t.sqrt());
    Ok(w.sum() + u * v)
}

#[test]
fn scan_with_data_matches_num_dual_and_the_unrolled_trace() {
    use optic_ad::array::Dense;
    for n in [1usize, 5, 200] {
        let data: Vec<f64> = (0..n).map(|i| (i as f64 * 0.3).sin()).collect();
        let p = [1.7, 0.2, 0.4, -0.3];
        // Differentiate in the data and the parameters together.
        let x: Vec<f64> = data.iter().chain(&p).copied().collect();
        let split = |x: &TArray| -> Result<(TArray, Vec<TScalar>)> {
            let xs = x.slice(0, n)?;
            let p = (n..n + 4).map(|i| x.get(i)).collect::<Result<_>>()?;
            Ok((xs, p))
        };
        let f = |x: &TArray| {
            let (xs, p) = split(x)?;
            driven(&xs, &p)
        };
        let g = crate::common::array_gradient(f, &x).unwrap();
        let scalar = |x: &[optic_ad::Tracer]| driven(&Dense::new(x[..n].to_vec()), &x[n..]);
        let g_ref = optic_ad::gradient(scalar, &x).unwrap();
        assert!(max_err(&g, &g_ref) < 1e-12, "N = {n}: {g:?} vs {g_ref:?}");
        let v: Vec<f64> = (0..n + 4).map(|i| ((i as f64) * 1.1).cos()).collect();
        let hv = crate::common::array_hvp(f, &x, &v).unwrap();
        let hv_ref = optic_ad::hvp(scalar, &x, &v).unwrap();
        assert!(max_err(&hv, &hv_ref) < 1e-12, "N = {n}: Hv");
        let t = crate::common::array_taylor::<U3>(f, &x, &v).unwrap();
        let xd: Vec<Dual3_64> = x
            .iter()
            .zip(&v)
            .map(|(&a, &b)| Dual3_64::new(a, b, 0.0, 0.0))
            .collect();
        let d = driven(&Dense::new(xd[..n].to_vec()), &xd[n..]).unwrap();
        let want = [d.re, d.v1, d.v2, d.v3];
        assert!(
            max_err(&[t[0], t[1], t[2], t[3]], &want) < 1e-10,
            "N = {n}: {t:?} vs {want:?}"
        );
        // One loop instruction, whatever N.
        let len = array::trace(|x: &[TArray]| f(&x[0]), &[&x]).unwrap().len();
        assert!(len < 60, "{len} instructions");
    }
    // A carry of nothing is refused, on every array.
    let r = optic_ad::scan(&Dense::new(vec![1.0, 2.0]), [], |c: [f64; 0], x| (c, x));
    assert!(matches!(r, Err(Error::EmptyInput(_))));
}

/// Sizes that cannot be held are errors, not panics or hangs: a scan of
/// `usize::MAX` steps with per-step data, and `fold`'s default policy for
/// `usize::MAX` steps (whose snapshot count is computed, not searched).
#[test]
fn impossible_loop_sizes_are_errors() {
    use optic_ad::array::prims::Scan;
    let mut b = optic_ad::Builder::new();
    let (c, x) = (b.input(), b.input());
    let y = b.add(c, x);
    let body = b.finish(&[y, y]).unwrap();
    assert!(matches!(
        Scan::new(body, usize::MAX, 1, 1, 0, false),
        Err(Error::AllocationFailed { .. })
    ));
    // Tracing a fold of usize::MAX steps records one instruction and
    // returns at once (evaluating it would take forever; it is not run).
    let p = array::trace(
        |x: &[TArray]| {
            let a = x[0].get(0)?;
            let [c] = fold(usize::MAX, [a], |[c]: [TScalar; 1]| [c * 0.5])?;
            Ok(c)
        },
        &[&[1.0]],
    )
    .unwrap();
    assert!(p.len() < 10);
}

/// A random bounded loop: a clock `t` that advances by a data-dependent
/// amount in `[0.25, 0.75]` each step, and a two-value state; the loop
/// runs while `t < bound`, at most `max` steps, so the trip count depends
/// on the point and sometimes the bound stops it.
#[derive(Clone, Debug)]
struct RandomWhile {
    coef: [f64; 4],
    bound: f64,
    max: usize,
    x: Vec<f64>,
    v: Vec<f64>,
}

fn random_while() -> impl Strategy<Value = RandomWhile> {
    (
        prop::array::uniform4(-1.0f64..1.0),
        0.0f64..12.0,
        0usize..30,
        prop::collection::vec(-1.0f64..1.0, 4),
        prop::collection::vec(-1.0f64..1.0, 4),
    )
        .prop_map(|(coef, bound, max, x, v)| RandomWhile {
            coef,
            bound,
            max,
            x,
            v,
        })
}

fn random_while_body<T: Real>(l: &RandomWhile, p: &[T]) -> Result<T> {
    let c = l.coef;
    let bound = l.bound;
    let [a, b, t] = optic_ad::while_loop(
        l.max,
        [p[0], p[1], T::cst(0.0)],
        |[_, _, t]| *t < bound,
        |[a, b, t]: [T; 3]| {
            let s = (a * c[0] + b * p[2]).tanh();
            let u = (b * c[1] - a * a * 0.1 + p[3]).sin();
            [a * 0.8 + s * c[2], b * 0.7 + u * c[3], t + 0.5 + s * 0.25]
        },
    )?;
    Ok(a * b + a.exp() * 0.1 + t * p[2])
}

/// The trip count of a random bounded loop at `x`, by the plain loop.
fn trip_count(l: &RandomWhile, x: &[f64]) -> usize {
    let c = l.coef;
    let (mut a, mut b, mut t) = (x[0], x[1], 0.0);
    let mut n = 0;
    while n < l.max && t < l.bound {
        let s = (a * c[0] + b * x[2]).tanh();
        let u = (b * c[1] - a * a * 0.1 + x[3]).sin();
        (a, b, t) = (a * 0.8 + s * c[2], b * 0.7 + u * c[3], t + 0.5 + s * 0.25);
        n += 1;
    }
    n
}

#[test]
fn random_while_loops_match_the_unrolled_trace_and_num_dual() {
    check("random while loops", 64, random_while(), |l, worst| {
        let f = |p: &TArray| random_while_body(&l, &scalars(p)?);
        let g = crate::common::array_gradient(f, &l.x).unwrap();
        let g_ref = unrolled_gradient(|p| random_while_body(&l, p), &l.x);
        let e = max_err(&g, &g_ref);
        worst.note(e);
        prop_assert!(e < 1e-12, "gradient {g:?} vs unrolled {g_ref:?}");
        let hv = crate::common::array_hvp(f, &l.x, &l.v).unwrap();
        let hv_ref = unrolled_hvp(|p| random_while_body(&l, p), &l.x, &l.v);
        let e = max_err(&hv, &hv_ref);
        worst.note(e);
        prop_assert!(e < 1e-12, "Hv {hv:?} vs unrolled {hv_ref:?}");
        let t = crate::common::array_taylor::<U3>(f, &l.x, &l.v).unwrap();
        let xd: Vec<Dual3_64> = (0..4)
            .map(|i| Dual3_64::new(l.x[i], l.v[i], 0.0, 0.0))
            .collect();
        let d = random_while_body(&l, &xd).unwrap();
        let e = max_err(&[t[0], t[1], t[2], t[3]], &[d.re, d.v1, d.v2, d.v3]);
        worst.note(e);
        prop_assert!(e < 1e-10, "Taylor {t:?} vs Dual3 {d:?}");
        // The trace is one loop of the trip count at the trace point.
        let prog = array::trace(|x: &[TArray]| f(&x[0]), &[&l.x]).unwrap();
        let loops: Vec<usize> = prog
            .ops()
            .iter()
            .filter_map(|op| Some(op.prim::<optic_ad::array::prims::Scan>()?.0.steps()))
            .collect();
        let n = trip_count(&l, &l.x);
        prop_assert!(
            loops == if n == 0 { vec![] } else { vec![n] },
            "{loops:?}, n = {n}"
        );
        Ok(())
    });
}

/// Newton's method for the cube root: `x ← x − (x³ − a)/(3x²)` while the
/// residual `|x³ − a|` exceeds 10⁻¹³ relative.
fn cbrt<T: Real>(a: T) -> Result<T> {
    let [x] = optic_ad::while_loop(
        200,
        [T::cst(1.0)],
        |[x]| (*x * *x * *x - a).abs() > a.abs() * 1e-13,
        |[x]: [T; 1]| [x - (x * x * x - a) / (x * x * 3.0)],
    )?;
    Ok(x)
}

fn cbrt_newton_steps(a: f64) -> usize {
    let mut x = 1.0f64;
    let mut n = 0;
    while (x * x * x - a).abs() > a.abs() * 1e-13 {
        x -= (x * x * x - a) / (x * x * 3.0);
        n += 1;
    }
    n
}

#[test]
fn a_newton_solve_differentiates_to_the_closed_form_and_re_traces_where_the_trip_count_changes() {
    // d/da a^(1/3) = a^(−2/3)/3, d² = −(2/9) a^(−5/3), d³ = (10/27) a^(−8/3).
    let closed = |a: f64| {
        [
            a.cbrt(),
            a.powf(-2.0 / 3.0) / 3.0,
            -2.0 / 9.0 * a.powf(-5.0 / 3.0),
            10.0 / 27.0 * a.powf(-8.0 / 3.0),
        ]
    };
    let f = |x: &TArray| cbrt(x.get(0)?);
    let (a0, a1) = (2.0, 50.0);
    assert_ne!(cbrt_newton_steps(a0), cbrt_newton_steps(a1));
    for a in [a0, a1] {
        let want = closed(a);
        let t = crate::common::array_taylor::<U3>(f, &[a], &[1.0]).unwrap();
        // The derivatives along v = 1: f, f', f'', f'''.
        let got = [t[0], t[1], t[2], t[3]];
        assert!(max_err(&got, &want) < 1e-12, "a = {a}: {got:?} vs {want:?}");
        let hv = crate::common::array_hvp(f, &[a], &[1.0]).unwrap();
        assert!(max_err(&hv, &want[2..3]) < 1e-12, "{hv:?} vs {want:?}");
    }
    // A gradient built at a0 and evaluated at a1 (more Newton steps):
    // the guard fails and the driver re-traces there.
    let mut g = optic_ad::Gradient::array(f, &[a0]).unwrap();
    let mut grad = [0.0];
    let y = g.eval(&[a1], &mut grad).unwrap();
    assert!(max_err(&[y, grad[0]], &closed(a1)[..2]) < 1e-12);
    // And back, to fewer steps.
    let y = g.eval(&[a0], &mut grad).unwrap();
    assert!(max_err(&[y, grad[0]], &closed(a0)[..2]) < 1e-12);
    let mut h = optic_ad::Hvp::array(f, &[a0]).unwrap();
    let mut hv = [0.0];
    h.eval(&[a1], &[1.0], &mut hv).unwrap();
    assert!(max_err(&hv, &closed(a1)[2..3]) < 1e-12, "{hv:?}");
    // A raw program reports the changed trip count, in both directions.
    let prog = array::trace(|x: &[TArray]| f(&x[0]), &[&[8.0]]).unwrap();
    assert_eq!(prog.eval(&[&[8.0]]).unwrap()[0][0], 2.0);
    for a in [2.0, 50.0] {
        assert_ne!(cbrt_newton_steps(a), cbrt_newton_steps(8.0));
        assert!(
            matches!(prog.eval(&[&[a]]), Err(Error::GuardFailed { .. })),
            "a = {a}"
        );
    }
    // The 2-optic of the nested-closure encoding through the loop: its
    // last output is the second derivative (at the trace point; elsewhere
    // its guards fail as the program's do).
    let p2 = array::nest(&prog, 2).unwrap();
    let out = p2.eval(&[&[8.0], &[1.0], &[1.0], &[0.0]]).unwrap();
    assert!(max_err(&out[3], &closed(8.0)[2..3]) < 1e-12, "{out:?}");
    assert!(matches!(
        p2.eval(&[&[2.0], &[1.0], &[1.0], &[0.0]]),
        Err(Error::GuardFailed { .. })
    ));
    let grad_prog = array::reverse_joint(&prog).unwrap();
    assert!(matches!(
        grad_prog.eval(&[&[50.0], &[1.0]]),
        Err(Error::GuardFailed { .. })
    ));
}

#[test]
fn while_loops_whose_path_changes_between_steps_are_refused() {
    // `x > 0.5 || y > 0.5`: the first clause decides at step 0, the
    // second at step 1.
    let f = |p: &TArray| -> Result<TScalar> {
        let (x, y) = (p.get(0)?, p.get(1)?);
        let [x, y] = optic_ad::while_loop(
            10,
            [x, y],
            |[x, y]| *x > 0.5 || *y > 0.5,
            |[x, y]: [TScalar; 2]| [x * 0.4, y + 0.6],
        )?;
        Ok(x + y)
    };
    assert!(matches!(
        crate::common::array_gradient(f, &[1.0, 0.0]),
        Err(Error::Unsupported(_))
    ));
    // The same on plain numbers is an ordinary loop.
    let plain = |x: f64, y: f64| {
        optic_ad::while_loop(
            10,
            [x, y],
            |[x, y]| *x > 0.5 || *y > 0.5,
            |[x, y]: [f64; 2]| [x * 0.4, y + 0.6],
        )
        .unwrap()
    };
    // (y > 0.5 from step 1 on: the bound of 10 steps stops it.)
    let [x, y] = plain(1.0, 0.0);
    assert!(
        max_err(&[x, y], &[0.4f64.powi(10), 6.0]) < 1e-14,
        "{x}, {y}"
    );
    // A branch in the body that changes between steps is refused too; one
    // that does not is a per-step guard.
    let g = |flip: f64| {
        move |p: &TArray| -> Result<TScalar> {
            let x = p.get(0)?;
            let [x, k] = optic_ad::while_loop(
                5,
                [x, TScalar::cst(0.0)],
                |_| true,
                |[x, k]: [TScalar; 2]| {
                    let y = if x > 0.0 { x * 0.5 } else { x * 2.0 };
                    [y - flip, k + 1.0]
                },
            )?;
            Ok(x * k)
        }
    };
    assert!(matches!(
        crate::common::array_gradient(g(1.0), &[1.0]),
        Err(Error::Unsupported(_))
    ));
    let grad = crate::common::array_gradient(g(0.0), &[1.0]).unwrap();
    assert_eq!(grad, vec![5.0 * 0.5f64.powi(5)]);
    // Inside a fold's body a while_loop is a comparison: refused.
    let nested = |p: &TArray| -> Result<TScalar> {
        let x = p.get(0)?;
        let [y] = fold(3, [x], |[y]: [TScalar; 1]| {
            let r = optic_ad::while_loop(4, [y], |[z]| *z > 0.1, |[z]: [TScalar; 1]| [z * 0.5]);
            r.unwrap_or([y])
        })?;
        Ok(y)
    };
    assert!(matches!(
        crate::common::array_gradient(nested, &[1.0]),
        Err(Error::Unsupported(_))
    ));
}

/// The same RK4 step on a carry of `[T; 2]`, a pair, a `GenericArray` and
/// (for a one-value loop) a bare scalar: the same values and derivatives
/// on the array trace, and against num-dual through the plain loop.
#[test]
fn carries_of_every_kind_give_the_same_loop() {
    use optic_ad::generic_array::GenericArray;
    use optic_ad::typenum::U2;
    fn step<T: Real>(x: T, y: T, p: &[T]) -> (T, T) {
        let h = 0.05;
        (
            x + (p[0] * x - p[1] * x * y) * h,
            y + (p[3] * x * y - p[2] * y) * h,
        )
    }
    fn with_array<T: Real>(p: &[T]) -> Result<T> {
        let [x, y] = fold(40, [p[4], p[5]], |[x, y]: [T; 2]| {
            let (a, b) = step(x, y, p);
            [a, b]
        })?;
        Ok(x * y)
    }
    fn with_tuple<T: Real>(p: &[T]) -> Result<T> {
        let (x, y) = fold(40, (p[4], p[5]), |(x, y): (T, T)| step(x, y, p))?;
        Ok(x * y)
    }
    fn with_generic_array<T: Real>(p: &[T]) -> Result<T> {
        let init = GenericArray::<T, U2>::from_array([p[4], p[5]]);
        let c = fold(40, init, |c: GenericArray<T, U2>| {
            let (a, b) = step(c[0], c[1], p);
            GenericArray::from_array([a, b])
        })?;
        Ok(c[0] * c[1])
    }
    fn with_scalar<T: Real>(p: &[T]) -> Result<T> {
        let r = p[0];
        let c = fold(40, p[4], |c: T| c + r * c * (-c + 1.0) * 0.05)?;
        // A bounded loop on a bare scalar too: halve while above y₀.
        let d = optic_ad::while_loop(60, c, |d| *d > p[5], |d: T| d * 0.5)?;
        Ok(c * c + d)
    }
    let p = [1.1, 0.4, 0.9, 0.3, 1.2, 0.8];
    let want = crate::common::array_gradient(|x: &TArray| with_array(&scalars(x)?), &p).unwrap();
    for (name, g) in [
        (
            "tuple",
            crate::common::array_gradient(|x: &TArray| with_tuple(&scalars(x)?), &p).unwrap(),
        ),
        (
            "GenericArray",
            crate::common::array_gradient(|x: &TArray| with_generic_array(&scalars(x)?), &p)
                .unwrap(),
        ),
    ] {
        assert_eq!(g, want, "{name}");
    }
    // Against num-dual through the plain loops.
    for j in 0..6 {
        let pd: Vec<Dual64> = (0..6)
            .map(|i| Dual64::new(p[i], if i == j { 1.0 } else { 0.0 }))
            .collect();
        assert!((with_tuple(&pd).unwrap().eps - want[j]).abs() < 1e-12 * want[j].abs().max(1.0));
        let g = crate::common::array_gradient(|x: &TArray| with_scalar(&scalars(x)?), &p).unwrap();
        let d = with_scalar(&pd).unwrap();
        assert!(
            (d.eps - g[j]).abs() < 1e-12 * d.eps.abs().max(1.0),
            "{j}: {d:?} vs {g:?}"
        );
    }
    // A scan with a pair carried: s ← s + w·x, w ← w/2, emitting s before
    // the step. By hand: (s, w) = (0, 1) → (0.5, 0.5) → (0.375, 0.25) →
    // (0.625, 0.125); the outputs are 0, 0.5, 0.375 (all exact in binary).
    let xs = array::Dense::new(vec![0.5, -0.25, 1.0]);
    let (c, ys) = optic_ad::scan(&xs, (0.0, 1.0), |(s, w): (f64, f64), x| {
        ((s + w * x, w * 0.5), s)
    })
    .unwrap();
    assert_eq!(c, (0.5 - 0.125 + 0.25, 0.125));
    assert_eq!(ys.into_vec(), vec![0.0, 0.5, 0.375]);
}

/// The benchmark's Lotka–Volterra loss as a `while_loop` on a clock: the
/// same steps as the `fold`, so the same value and derivatives (the clock
/// only decides when to stop).
#[test]
fn the_benchmark_loop_as_a_while_loop() {
    for steps in [10, 250] {
        let f = |p: &TArray| loss_array(p, steps);
        let w = |p: &TArray| lotka_volterra::loss_while_array(p, steps);
        let (g, gw) = (
            crate::common::array_gradient(f, &P0).unwrap(),
            crate::common::array_gradient(w, &P0).unwrap(),
        );
        assert!(max_err(&gw, &g) < 1e-12, "{gw:?} vs {g:?}");
        let hv = crate::common::array_hvp(w, &P0, &V).unwrap();
        let (_, _, hv_ref) = dual_reference(steps);
        assert!(max_err(&hv, &hv_ref) < 1e-10, "{hv:?} vs {hv_ref:?}");
        let d = lotka_volterra::loss_while(&P0, steps).unwrap();
        assert_eq!(d, lotka_volterra::loss(&P0, steps).unwrap());
    }
}

/// A struct deriving `Differentiable` as a loop's carry.
#[derive(Clone, Copy, Debug, PartialEq, optic_ad::Differentiable)]
struct Orbit<T> {
    x: T,
    v: T,
}

/// A damped oscillator by symplectic Euler, carried as a struct, as a
/// tuple and as a `Vec` (whose length the initial carry fixes): the same
/// arithmetic, so the same traced loop and the same numbers, bit for bit.
#[test]
fn struct_tuple_and_vec_carries_give_the_same_loop() {
    fn by_struct<T: Real>(k: T, c: T) -> Result<T> {
        by_struct_steps(k, c, 300)
    }
    fn by_struct_steps<T: Real>(k: T, c: T, steps: usize) -> Result<T> {
        let init = Orbit {
            x: T::cst(1.0),
            v: T::cst(0.0),
        };
        let end = fold(steps, init, |s: Orbit<T>| {
            let v = s.v - (s.x * k + s.v * c) * 0.01;
            Orbit {
                x: s.x + v * 0.01,
                v,
            }
        })?;
        Ok(end.x * end.x + end.v)
    }
    fn by_tuple<T: Real>(k: T, c: T) -> Result<T> {
        let (x, v) = fold(300, (T::cst(1.0), T::cst(0.0)), |(x, v): (T, T)| {
            let v = v - (x * k + v * c) * 0.01;
            (x + v * 0.01, v)
        })?;
        Ok(x * x + v)
    }
    fn by_vec<T: Real>(k: T, c: T) -> Result<T> {
        let end = fold(300, vec![T::cst(1.0), T::cst(0.0)], |s: Vec<T>| {
            let v = s[1] - (s[0] * k + s[1] * c) * 0.01;
            vec![s[0] + v * 0.01, v]
        })?;
        Ok(end[0] * end[0] + end[1])
    }
    let p = [2.0, 0.3];
    let g = crate::common::array_gradient(|q| by_struct(q.get(0)?, q.get(1)?), &p).unwrap();
    assert_eq!(
        g,
        crate::common::array_gradient(|q| by_tuple(q.get(0)?, q.get(1)?), &p).unwrap()
    );
    assert_eq!(
        g,
        crate::common::array_gradient(|q| by_vec(q.get(0)?, q.get(1)?), &p).unwrap()
    );
    // Against forward mode on the same code.
    let dk = by_struct(Dual64::new(2.0, 1.0), Dual64::new(0.3, 0.0)).unwrap();
    let dc = by_struct(Dual64::new(2.0, 0.0), Dual64::new(0.3, 1.0)).unwrap();
    assert!(max_err(&g, &[dk.eps, dc.eps]) < 1e-12);
    // One loop instruction in the trace, whatever the carry's type.
    let len = |steps: usize| {
        array::trace(
            |q: &[TArray]| by_struct_steps(q[0].get(0)?, q[0].get(1)?, steps),
            &[&p],
        )
        .unwrap()
        .len()
    };
    assert_eq!(len(3), len(300));
    // A carry whose body changes its structure is refused, not truncated.
    let r = crate::common::array_gradient(
        |q| {
            let end = fold(3, vec![q.get(0)?], |mut s: Vec<TScalar>| {
                s.push(s[0]);
                s
            })?;
            Ok(end[0])
        },
        &[1.0],
    );
    assert!(r.is_err());
}
