//! Adversarial review checks (a second pair of eyes on the transform, the
//! tracer and the drivers). Several are regression tests for defects the
//! review found and that are now fixed (cross-thread tracers, malformed
//! builder programs, re-entrant rule values, the sign of zero in rewrites,
//! `powi(i32::MIN)`); the comment above each test says what the right answer
//! is and where it comes from.

use std::cell::Cell;

use num_dual::{Dual2_64, Dual3_64, HyperDual64};
use optic_ad::{
    derivative, gradient, hvp, jvp, trace, vjp, Builder, CustomRule, Derivatives, Error, Gradient,
    Hvp, Op, Real, ScalarRule, Tracer, Var,
};
use typenum::{U4, U6};

/// Runs `f`, turning a panic into `Err(())` (quietly).
fn catch<T>(f: impl FnOnce() -> T) -> Result<T, ()> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|_| ())
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * 1f64.max(a.abs()).max(b.abs())
}

// ---------------------------------------------------------------------------
// Program::eval on programs the public Builder can produce
// ---------------------------------------------------------------------------

/// `Builder::push` is public and accepts `Op::Custom(99, x)` with a rule
/// index the builder never registered. Such a program must be refused with
/// `Error::MissingRule` (the documented error), by `finish`, so that no
/// malformed program reaches `eval` or ∂⃖ (where it would panic, or give
/// x̄ = 0: a silent wrong answer).
#[test]
fn custom_op_without_rule_is_refused() {
    let mut b = Builder::new();
    let x = b.input();
    let r = catch(|| {
        let y = b.push(Op::Custom {
            rule: 99,
            args: optic_ad::Args::new(&[x]).unwrap(),
        });
        b.finish(&[y])
    });
    assert!(matches!(r, Ok(Err(Error::MissingRule(99)))), "{r:?}");
}

/// `Builder::push(Op::Input(7))` records an input that `n_inputs` does not
/// count; `Program::eval` would index `inputs[7]`. `finish` refuses it.
#[test]
fn pushed_input_op_is_refused() {
    let r = catch(|| {
        let mut b = Builder::new();
        let v = b.push(Op::Input(7));
        b.finish(&[v])
    });
    assert!(matches!(r, Ok(Err(Error::Malformed(_)))), "{r:?}");
}

/// A `Var` from another builder, out of range here, used as an output or as
/// an operand: refused by `finish`, and `push` does not panic on it.
#[test]
fn value_from_another_builder_is_refused() {
    let mut other = Builder::new();
    for _ in 0..5 {
        other.input();
    }
    let foreign = other.input();
    let r = catch(|| {
        let mut b = Builder::new();
        b.input();
        b.finish(&[foreign])
    });
    assert!(matches!(r, Ok(Err(Error::Malformed(_)))), "{r:?}");
    let r = catch(|| {
        let mut b = Builder::new();
        let x = b.input();
        let y = b.mul(x, foreign);
        let z = b.neg(foreign);
        b.finish(&[y, z])
    });
    assert!(matches!(r, Ok(Err(Error::Malformed(_)))), "{r:?}");
}

// ---------------------------------------------------------------------------
// Tracer across threads
// ---------------------------------------------------------------------------

/// Regression: trace ids came from a *thread-local* counter, so the first
/// trace of every thread had id 1, and a tracer (which is `Send`) that
/// escaped from thread A's first trace was taken, in thread B's first
/// trace, for B's own value `var 0`: `gradient(|x| x[0] * escaped, [3])`
/// silently became d/dx (x·x) = 6. Ids are now process-wide, and the misuse
/// is reported as `Error::ForeignTracer`, as it is within one thread.
#[test]
fn tracer_from_another_thread_is_detected() {
    let escaped: Tracer = std::thread::spawn(|| {
        let stash = Cell::new(None);
        trace(
            |x| {
                stash.set(Some(x[0]));
                vec![x[0] * 2.0]
            },
            &[1.0],
        )
        .unwrap();
        stash.get().unwrap()
    })
    .join()
    .unwrap();
    let r = std::thread::spawn(move || gradient(|x: &[Tracer]| x[0] * escaped, &[3.0]))
        .join()
        .unwrap();
    assert!(
        matches!(r, Err(Error::ForeignTracer { .. })),
        "silent perturbation confusion across threads: {r:?}"
    );
}

// ---------------------------------------------------------------------------
// Rules
// ---------------------------------------------------------------------------

/// Regression: `powi` with `n = i32::MIN` made the pullback compute `n − 1`,
/// which overflows (a panic with overflow checks, as in tests); it now uses
/// `xⁿ / x` there. d/dx xⁿ = n xⁿ⁻¹ = n at x = 1.
#[test]
fn gradient_of_powi_i32_min_does_not_overflow() {
    let r = catch(|| gradient(|x: &[Tracer]| x[0].powi(i32::MIN), &[1.0]));
    match r {
        Ok(Ok(g)) => assert_eq!(g[0], f64::from(i32::MIN)),
        Ok(Err(e)) => panic!("error {e:?}"),
        Err(()) => panic!("gradient panicked (i32 overflow in the powi pullback)"),
    }
}

/// A rule whose *value* is computed with this crate's own drivers (e.g. a
/// Newton solve for an implicit function, here ∛x by Newton on t³ − x with
/// the derivative from `derivative`). Regression: applying it on a tracer
/// called `value` while the thread-local trace stack was borrowed, so the
/// nested `trace` panicked with "already borrowed"; rule values are now
/// computed with the stack released. Expected: ∛8 = 2 and
/// d/dx ∛x = 1/(3 x^{2/3}) = 1/12 at x = 8.
#[test]
fn rule_value_may_use_the_drivers() {
    struct Cbrt;
    impl ScalarRule for Cbrt {
        fn name(&self) -> &str {
            "cbrt"
        }
        fn value(&self, x: f64) -> f64 {
            let mut t = 1.0_f64.max(x.abs());
            for _ in 0..60 {
                let d = derivative::<typenum::U1, _, _>(move |s| s * s * s - x, t).unwrap();
                t -= d[0] / d[1];
            }
            t
        }
        fn pullback(&self, b: &mut Builder, _x: Var, y: Var, ct: Var) -> Var {
            let y2 = b.mul(y, y);
            let d = b.scale(3.0, y2);
            b.div(ct, d)
        }
    }
    let cbrt = CustomRule::new(Cbrt);
    assert!(close(cbrt.value(&[8.0]), 2.0, 1e-14));
    let r = catch(|| gradient(|x: &[Tracer]| x[0].apply_rule(&cbrt), &[8.0]));
    match r {
        Ok(Ok(g)) => assert!(close(g[0], 1.0 / 12.0, 1e-14), "{g:?}"),
        Ok(Err(e)) => panic!("error {e:?}"),
        Err(()) => panic!("tracing a rule whose value uses `derivative` panicked"),
    }
}

// ---------------------------------------------------------------------------
// Orders up to 6 against closed forms
// ---------------------------------------------------------------------------

fn binom(n: usize, k: usize) -> f64 {
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

fn factorial(n: usize) -> f64 {
    (1..=n).map(|i| i as f64).product()
}

/// dⁿ/dxⁿ 1/(1+x²) = (−1)ⁿ n! Im[(x − i)^{−(n+1)}] (partial fractions:
/// 1/(1+x²) = Im 1/(x − i)).
fn lorentz_d(x: f64, n: usize) -> f64 {
    // (x − i)^{-1} = (x + i)/(x² + 1); raise to the power n + 1.
    let (a, b) = (x / (x * x + 1.0), 1.0 / (x * x + 1.0));
    let (mut re, mut im) = (1.0, 0.0);
    for _ in 0..=n {
        (re, im) = (re * a - im * b, re * b + im * a);
    }
    let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
    sign * factorial(n) * im
}

/// dⁿ/dxⁿ [x³ sin x] by Leibniz: Σ C(n,k) (x³)^{(k)} sin^{(n−k)} x.
fn x3sin_d(x: f64, n: usize) -> f64 {
    let p = [x.powi(3), 3.0 * x * x, 6.0 * x, 6.0];
    let s = |m: usize| match m % 4 {
        0 => x.sin(),
        1 => x.cos(),
        2 => -x.sin(),
        _ => -x.cos(),
    };
    (0..=n.min(3)).map(|k| binom(n, k) * p[k] * s(n - k)).sum()
}

fn x5_d(x: f64, n: usize) -> f64 {
    if n > 5 {
        0.0
    } else {
        factorial(5) / factorial(5 - n) * x.powi(5 - n as i32)
    }
}

/// `derivative::<U6>` and the compiled `Derivatives::<U6>` (one program for
/// every order, traced once, evaluated at other points) against closed
/// forms for eˣ, 1/(1+x²), x⁵ (as `powi` and as a product) and x³ sin x.
#[test]
fn sixth_order_derivatives_match_closed_forms() {
    type F = fn(Tracer) -> Tracer;
    type D = fn(f64, usize) -> f64;
    let cases: [(&str, F, D); 5] = [
        ("exp", |t| t.exp(), |x, _| x.exp()),
        ("lorentz", |t| (t * t + 1.0).recip(), lorentz_d),
        ("powi5", |t| t.powi(5), x5_d),
        ("x*x*x*x*x", |t| t * t * t * t * t, x5_d),
        ("x3 sin", |t| t.powi(3) * t.sin(), x3sin_d),
    ];
    for (name, f, d) in cases {
        let mut compiled = Derivatives::<U6, _>::new(f, 0.3).unwrap();
        for x in [-1.7, -0.4, 0.0, 0.6, 2.3] {
            let one = derivative::<U6, _, _>(f, x).unwrap();
            let many = compiled.eval(x).unwrap();
            for n in 0..=6 {
                let want = d(x, n);
                assert!(
                    close(one[n], want, 1e-12) && close(many[n], want, 1e-12),
                    "{name}: order {n} at {x}: {} / {} vs {want}",
                    one[n],
                    many[n]
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Nested drivers that close over the outer tracer
// ---------------------------------------------------------------------------

/// F(x) = [H_g(y) e₁]₀ at y = (x, 1) for g(y) = y₀³ y₁ x (x captured):
/// H₀₀ = 6 y₀ y₁ x, so F = 6x², F′ = 12x, F″ = 12. The point, the direction
/// and the capture are all outer tracers.
#[test]
fn gradient_of_inner_hvp_with_capture() {
    let outer = |x: &[Tracer]| {
        let x0 = x[0];
        let one = Tracer::cst(1.0);
        let zero = Tracer::cst(0.0);
        let hv = hvp(
            |y: &[Tracer]| y[0].powi(3) * y[1] * x0,
            &[x0, one],
            &[one, zero],
        )
        .expect("inner hvp");
        hv[0]
    };
    for x in [-1.3, 0.4, 2.0] {
        let g = gradient(outer, &[x]).unwrap();
        assert!(close(g[0], 12.0 * x, 1e-13), "{g:?} at {x}");
        let h = hvp(outer, &[x], &[1.0]).unwrap();
        assert!(close(h[0], 12.0, 1e-13), "{h:?} at {x}");
    }
}

/// F(x) = J v for g(y) = y₀³ x at y = x, v = x: J v = 3y₀² x v = 3x⁴,
/// F′ = 12x³. And the vjp form: G(x) = Jᵀ ȳ for h(y) = sin(y₀) x at y = x,
/// ȳ = x: G = x² cos x, G′ = 2x cos x − x² sin x.
#[test]
fn gradient_of_inner_jvp_and_vjp_with_capture() {
    let fj = |x: &[Tracer]| {
        let x0 = x[0];
        jvp(|y: &[Tracer]| vec![y[0].powi(3) * x0], &[x0], &[x0])
            .expect("jvp")
            .1[0]
    };
    let fv = |x: &[Tracer]| {
        let x0 = x[0];
        vjp(|y: &[Tracer]| vec![y[0].sin() * x0], &[x0], &[x0])
            .expect("vjp")
            .1[0]
    };
    for x in [-1.1, 0.7, 1.9] {
        let g = gradient(fj, &[x]).unwrap();
        assert!(close(g[0], 12.0 * x.powi(3), 1e-13), "jvp: {g:?} at {x}");
        let g = gradient(fv, &[x]).unwrap();
        let want = 2.0 * x * x.cos() - x * x * x.sin();
        assert!(close(g[0], want, 1e-13), "vjp: {g:?} at {x}");
    }
}

/// A branch on a *captured* value inside an inner gradient must become a
/// guard of the outer program. Inner g(y) = x₀ y if x₀ > 1 else y²; its
/// derivative at y = x₀ is x₀ or 2x₀, so F(x) = x · g′ is x² (F′ = 2x) or
/// 2x² (F′ = 4x). The compiled Gradient traced at x = 2 must re-trace at
/// x = 0.5 (F′ = 2), not reuse the x > 1 branch (which would give 1).
#[test]
fn guard_on_captured_value_reaches_the_outer_program() {
    let outer = |x: &[Tracer]| {
        let x0 = x[0];
        let inner = gradient(
            |y: &[Tracer]| if x0 > 1.0 { x0 * y[0] } else { y[0] * y[0] },
            &[x0],
        )
        .expect("inner");
        x0 * inner[0]
    };
    let mut g = Gradient::new(outer, &[2.0]).unwrap();
    let mut grad = [0.0];
    assert_eq!(g.eval(&[2.0], &mut grad).unwrap(), 4.0);
    assert_eq!(grad, [4.0]);
    assert_eq!(g.eval(&[0.5], &mut grad).unwrap(), 0.5);
    assert_eq!(grad, [2.0]);
    assert_eq!(g.eval(&[3.0], &mut grad).unwrap(), 9.0);
    assert_eq!(grad, [6.0]);
}

// ---------------------------------------------------------------------------
// Hvp re-trace with a different residual
// ---------------------------------------------------------------------------

/// Two branches with residuals of different lengths. f = sin(x₀) e^{x₀x₁}
/// for x₀ > 0, else x₀ x₁. Closed-form Hessians:
/// branch 1 with s = sin x₀, c = cos x₀, E = e^{x₀x₁}:
///   H₀₀ = E(−s + 2c x₁ + s x₁²), H₀₁ = E(c x₀ + s(1 + x₀x₁)), H₁₁ = s x₀² E;
/// branch 2: H = [[0, 1], [1, 0]].
#[test]
fn hvp_retrace_changes_residual_length() {
    fn f(x: &[Tracer]) -> Tracer {
        if x[0] > 0.0 {
            x[0].sin() * (x[0] * x[1]).exp()
        } else {
            x[0] * x[1]
        }
    }
    fn hess(x: [f64; 2]) -> [[f64; 2]; 2] {
        if x[0] > 0.0 {
            let (s, c, e) = (x[0].sin(), x[0].cos(), (x[0] * x[1]).exp());
            let h00 = e * (-s + 2.0 * c * x[1] + s * x[1] * x[1]);
            let h01 = e * (c * x[0] + s * (1.0 + x[0] * x[1]));
            [[h00, h01], [h01, s * x[0] * x[0] * e]]
        } else {
            [[0.0, 1.0], [1.0, 0.0]]
        }
    }
    let mut h = Hvp::new(f, &[-1.0, 0.5]).unwrap();
    let r_small = h.residual_len();
    let mut out = [0.0; 2];
    for x in [[-1.0, 0.5], [0.7, -0.3], [-2.0, 1.0], [1.2, 0.4]] {
        h.linearize(&x).unwrap();
        let want = hess(x);
        for (j, v) in [[1.0, 0.0], [0.0, 1.0]].iter().enumerate() {
            h.apply(v, &mut out).unwrap();
            for i in 0..2 {
                assert!(
                    close(out[i], want[i][j], 1e-13),
                    "{out:?} vs {want:?} at {x:?}"
                );
            }
        }
    }
    h.linearize(&[1.0, 1.0]).unwrap();
    assert_ne!(h.residual_len(), r_small);
}

// ---------------------------------------------------------------------------
// Custom rules: pullbacks that call other custom rules; num-dual chain rule
// ---------------------------------------------------------------------------

use std::sync::OnceLock;

/// sin and cos as two user rules whose pullbacks call each other (the
/// pullback of each is written with the other rule), so every order needs
/// a custom rule emitted inside a custom rule's pullback.
struct MySin;
struct MyCos;
fn my_sin() -> &'static CustomRule {
    static R: OnceLock<CustomRule> = OnceLock::new();
    R.get_or_init(|| CustomRule::new(MySin))
}
fn my_cos() -> &'static CustomRule {
    static R: OnceLock<CustomRule> = OnceLock::new();
    R.get_or_init(|| CustomRule::new(MyCos))
}
impl ScalarRule for MySin {
    fn name(&self) -> &str {
        "mysin"
    }
    fn value(&self, x: f64) -> f64 {
        x.sin()
    }
    fn pullback(&self, b: &mut Builder, x: Var, _y: Var, ct: Var) -> Var {
        let c = b.custom(my_cos(), &[x]);
        b.mul(ct, c)
    }
}
impl ScalarRule for MyCos {
    fn name(&self) -> &str {
        "mycos"
    }
    fn value(&self, x: f64) -> f64 {
        x.cos()
    }
    fn pullback(&self, b: &mut Builder, x: Var, _y: Var, ct: Var) -> Var {
        let s = b.custom(my_sin(), &[x]);
        let t = b.mul(ct, s);
        b.neg(t)
    }
}

fn g_custom<T: Real>(x: T) -> T {
    (x * x).apply_rule(my_sin()) * x.apply_rule(my_cos()) + x
}
fn g_builtin<T: Real>(x: T) -> T {
    (x * x).sin() * x.cos() + x
}

/// Mutually recursive rules at orders up to 6 (`derivative`), against the
/// same function written with the built-in sin and cos.
#[test]
fn mutually_recursive_custom_rules_to_order_six() {
    for x in [-1.2, 0.3, 0.9] {
        let a = derivative::<U6, _, _>(g_custom::<Tracer>, x).unwrap();
        let b = derivative::<U6, _, _>(g_builtin::<Tracer>, x).unwrap();
        for n in 0..=6 {
            assert!(
                close(a[n], b[n], 1e-12),
                "order {n} at {x}: {} vs {}",
                a[n],
                b[n]
            );
        }
    }
}

/// The num-dual `apply_rule` (src/real.rs, Faà di Bruno with the rule's
/// derivatives from ∂⃖ of its own pullback) against num-dual's own sin and
/// cos: Dual2 (v₁ = 1, v₂ = 0.5), Dual3 (v₁ = 1, v₂ = −0.3, v₃ = 0.7,
/// exercising the 3v₁v₂f″ term) and HyperDual (ε₁ = 0.4, ε₂ = −1.1).
#[test]
fn custom_rule_chain_rule_on_num_dual_matches_builtin() {
    for x in [-0.8, 0.25, 1.4] {
        let a = g_custom(Dual2_64::new(x, 1.0, 0.5));
        let b = g_builtin(Dual2_64::new(x, 1.0, 0.5));
        for (p, q) in [(a.re, b.re), (a.v1, b.v1), (a.v2, b.v2)] {
            assert!(close(p, q, 1e-13), "Dual2 at {x}: {a:?} vs {b:?}");
        }
        let a = g_custom(Dual3_64::new(x, 1.0, -0.3, 0.7));
        let b = g_builtin(Dual3_64::new(x, 1.0, -0.3, 0.7));
        for (p, q) in [(a.re, b.re), (a.v1, b.v1), (a.v2, b.v2), (a.v3, b.v3)] {
            assert!(close(p, q, 1e-13), "Dual3 at {x}: {a:?} vs {b:?}");
        }
        let a = g_custom(HyperDual64::new(x, 0.4, -1.1, 0.2));
        let b = g_builtin(HyperDual64::new(x, 0.4, -1.1, 0.2));
        for (p, q) in [
            (a.re, b.re),
            (a.eps1, b.eps1),
            (a.eps2, b.eps2),
            (a.eps1eps2, b.eps1eps2),
        ] {
            assert!(close(p, q, 1e-13), "HyperDual at {x}: {a:?} vs {b:?}");
        }
    }
}

/// Forward-over-reverse through the drivers: `gradient` evaluated on
/// `Dual64` inputs gives ∇f and its directional derivative H v, and the
/// derived program contains custom ops emitted by custom pullbacks.
/// f(x) = mysin(x₀ x₁): ∇f = cos(x₀x₁)(x₁, x₀); with ẋ = (1, 0),
/// d/dε ∇f = (−x₁² sin, cos − x₀x₁ sin).
#[test]
fn gradient_over_dual_through_custom_rules() {
    let (x0, x1) = (0.7, -1.3);
    let g = gradient(
        |x: &[Tracer]| (x[0] * x[1]).apply_rule(my_sin()),
        &[
            num_dual::Dual64::new(x0, 1.0),
            num_dual::Dual64::new(x1, 0.0),
        ],
    )
    .unwrap();
    let (s, c) = (x0 * x1).sin_cos();
    assert!(close(g[0].re, c * x1, 1e-14) && close(g[1].re, c * x0, 1e-14));
    assert!(close(g[0].eps, -x1 * x1 * s, 1e-14), "{g:?}");
    assert!(close(g[1].eps, c - x0 * x1 * s, 1e-14), "{g:?}");
}

// ---------------------------------------------------------------------------
// Tracer: panics inside traced code
// ---------------------------------------------------------------------------

/// A panic inside an inner trace, caught inside the outer traced function:
/// the inner frame is popped, the outer trace continues and gives the right
/// gradient, and a tracer of the panicked trace is then foreign.
#[test]
fn panic_in_inner_trace_leaves_outer_trace_usable() {
    let leaked: Cell<Option<Tracer>> = Cell::new(None);
    let outer = |x: &[Tracer]| {
        let x0 = x[0];
        let r = catch(|| {
            gradient(
                |y: &[Tracer]| -> Tracer {
                    leaked.set(Some(y[0]));
                    let _ = y[0] * x0;
                    panic!("boom")
                },
                &[x0],
            )
        });
        assert!(r.is_err());
        x0.sin() * x0
    };
    let g = gradient(outer, &[0.8]).unwrap();
    assert!(close(g[0], 0.8_f64.cos() * 0.8 + 0.8_f64.sin(), 1e-14));
    let stale = leaked.get().unwrap();
    let r = gradient(|x: &[Tracer]| x[0] + stale, &[1.0]);
    assert!(matches!(r, Err(Error::ForeignTracer { .. })), "{r:?}");
}

// ---------------------------------------------------------------------------
// split_stages and Nested
// ---------------------------------------------------------------------------

use optic_ad::functor::split_stages;
use optic_ad::{nest, Nested};

/// Order 4 (15 closures) of a two-input, two-output program: calling the
/// closures of `Nested::<U4>` one after another (residuals routed by
/// `split_stages`) gives exactly what evaluating the whole bundle program
/// `nest(p, 4)` at once gives, for arbitrary seeds.
#[test]
fn nested_order_four_levels_agree_with_the_bundle_program() {
    let p = trace(
        |x| {
            vec![
                x[0].sin() * x[1].powi(3) + x[0].exp(),
                (x[0] * x[1]).tanh() - 2.0,
            ]
        },
        &[0.4, -0.7],
    )
    .unwrap();
    let bundle = nest(&p, 4).unwrap();
    let mut n = Nested::<U4>::new(&p).unwrap();
    let widths = &bundle.input_blocks()[1..];
    assert_eq!(widths.len(), 15);
    let x = [0.9, 0.35];
    let seeds: Vec<Vec<f64>> = widths
        .iter()
        .enumerate()
        .map(|(k, &w)| {
            (0..w)
                .map(|i| ((k * 7 + i * 3) % 11) as f64 / 5.0 - 1.0)
                .collect()
        })
        .collect();
    let mut inputs = x.to_vec();
    for s in &seeds {
        inputs.extend_from_slice(s);
    }
    let all = bundle.eval(&inputs).unwrap();
    let out_w = bundle.output_blocks();
    let mut start = 0;
    let mut want: Vec<&[f64]> = Vec::new();
    for &w in out_w {
        want.push(&all[start..start + w]);
        start += w;
    }
    let (y, l) = n.primal(&x).unwrap();
    assert_eq!(&y[..], want[0]);
    macro_rules! step {
        ($l:ident, $k:expr) => {{
            let (r, next) = $l.call(&seeds[$k - 1]).unwrap();
            assert_eq!(&r[..], want[$k], "closure {}", $k);
            next
        }};
    }
    let l = step!(l, 1);
    let l = step!(l, 2);
    let l = step!(l, 3);
    let l = step!(l, 4);
    let l = step!(l, 5);
    let l = step!(l, 6);
    let l = step!(l, 7);
    let l = step!(l, 8);
    let l = step!(l, 9);
    let l = step!(l, 10);
    let l = step!(l, 11);
    let l = step!(l, 12);
    let l = step!(l, 13);
    let l = step!(l, 14);
    let _ = step!(l, 15);
}

/// Three stages of the joint program of f(x₀, x₁) = (x₀, 3, x₀x₁) with a
/// guard x₁ > x₀: J(x, ȳ) = (y, x̄), x̄ = (ȳ₀ + ȳ₂x₁, ȳ₂x₀). Inputs x at
/// stage 0 and ȳ at stage 1; x̄ due at stage 1 and y only at stage 2, so y
/// (an input, a constant and a product) must pass through stage 1 as
/// residual. The guard runs in stage 0, where its operands are.
#[test]
fn split_stages_pass_through_outputs_constants_and_guard() {
    let p = trace(
        |x| {
            let _ = x[1] > x[0];
            vec![x[0], Tracer::cst(3.0), x[0] * x[1]]
        },
        &[0.5, 2.0],
    )
    .unwrap();
    let j = optic_ad::functor::reverse_joint(&p);
    let st = split_stages(&j, &[0, 1], &[2, 1], 3).unwrap();
    assert_eq!(st.len(), 3);
    assert_eq!(st[0].program.guards().len(), 1);
    assert!(st[1].program.guards().is_empty() && st[2].program.guards().is_empty());
    let (x, yb) = ([1.5, -0.5], [2.0, 7.0, -3.0]);
    // The guard fails at x = (1.5, −0.5): stage 0 refuses.
    assert!(matches!(
        st[0].program.eval(&x),
        Err(Error::GuardFailed { .. })
    ));
    let x = [0.25, 4.0];
    let m0 = st[0].program.eval(&x).unwrap();
    assert_eq!(st[0].own_outputs, 0);
    let mut in1 = m0.clone();
    in1.extend_from_slice(&yb);
    let o1 = st[1].program.eval(&in1).unwrap();
    assert_eq!(&o1[..2], &[yb[0] + yb[2] * x[1], yb[2] * x[0]]);
    let o2 = st[2].program.eval(&o1[2..]).unwrap();
    assert_eq!(o2, vec![x[0], 3.0, x[0] * x[1]]);
    // The constant is re-created, not carried.
    assert!(st[1].residual_out <= 2, "{:?}", st[1]);
}

/// Functions with no outputs (m = 0): every driver that accepts them
/// returns empty results without panicking, and ∂⃖² splits into closures
/// of width 0 and n.
#[test]
fn zero_output_functions_do_not_panic() {
    let f = |_: &[Tracer]| Vec::<Tracer>::new();
    let r = catch(|| {
        let (y, xb) = vjp(f, &[1.0, 2.0], &[]).unwrap();
        assert!(y.is_empty() && xb == vec![0.0, 0.0]);
        let (y, jv) = jvp(f, &[1.0, 2.0], &[1.0, 1.0]).unwrap();
        assert!(y.is_empty() && jv.is_empty());
        assert!(optic_ad::jacobian(f, &[1.0]).unwrap().is_empty());
        let p = trace(f, &[1.0, 2.0]).unwrap();
        let mut n = Nested::<typenum::U2>::new(&p).unwrap();
        let (y, l) = n.primal(&[1.0, 2.0]).unwrap();
        let (r1, l) = l.call(&[]).unwrap();
        let (r2, l) = l.call(&[3.0, 4.0]).unwrap();
        let (r3, _) = l.call(&[]).unwrap();
        assert!(y.is_empty() && r2.is_empty());
        assert_eq!((r1, r3), (vec![0.0, 0.0], vec![0.0, 0.0]));
    });
    assert!(r.is_ok(), "panicked");
}

// ---------------------------------------------------------------------------
// Builder rewrites must be exact
// ---------------------------------------------------------------------------

/// Regression: the Builder rewrote `0 − b → −b`, which is not exact at
/// b = +0 (IEEE gives 0 − 0 = +0, the rewrite gave −0), and the sign then
/// changed a value: f(x) = exp(1/(0 − x)) at x = 0 is exp(+∞) = +∞ in plain
/// f64, but the traced program returned exp(−∞) = 0. (Likewise
/// `a + (+0) → a` at a = −0.) Only the exact forms remain: `(−0) − b → −b`,
/// `a + (−0) → a`, `a − (+0) → a`, checked on the constant's bits.
#[test]
fn zero_minus_x_keeps_the_sign_of_zero() {
    fn f<T: Real>(x: T) -> T {
        (T::cst(0.0) - x).recip().exp()
    }
    let plain = f(0.0_f64);
    assert_eq!(plain, f64::INFINITY);
    let p = trace(|x| vec![f(x[0])], &[1.0]).unwrap();
    let traced = p.eval(&[0.0_f64]).unwrap()[0];
    assert_eq!(
        traced, plain,
        "traced program gives {traced}, f64 gives {plain}"
    );
}
