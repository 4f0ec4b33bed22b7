//! Trace once, evaluate many, with no allocation in steady state
//! (feature `count-allocations`, which installs a counting global
//! allocator; counts are per thread).

use allocation_counter::measure;
use optic_ad::{trace, Derivatives, Gradient, Hvp, Real, Workspace};
use typenum::U3;

fn f<T: Real>(x: &[T]) -> T {
    let mut s = T::cst(0.0);
    for i in 0..x.len() - 1 {
        let a = x[i + 1] - x[i] * x[i];
        s += a * a * 100.0 + (T::cst(1.0) - x[i]).powi(2) + x[i].sin().exp();
    }
    s
}

#[test]
fn program_eval_with_does_not_allocate() {
    let x = [0.3, -0.2, 0.9, 1.1];
    let p = trace(|t| vec![f(t)], &x).unwrap();
    let mut ws = Workspace::new();
    let mut out = [0.0];
    p.eval_with(&mut ws, &x, &mut out).unwrap();
    let info = measure(|| {
        for k in 0..10 {
            let y = [0.1 * k as f64, 0.2, 0.3, 0.4];
            p.eval_with(&mut ws, &y, &mut out).unwrap();
        }
    });
    assert_eq!(info.count_total, 0);
}

#[test]
fn compiled_gradient_does_not_allocate() {
    let x = [0.3, -0.2, 0.9, 1.1];
    let mut g = Gradient::new(f, &x).unwrap();
    let mut grad = [0.0; 4];
    g.eval(&x, &mut grad).unwrap();
    let info = measure(|| {
        for k in 0..10 {
            let y = [0.1 * k as f64, 0.2, 0.3, 0.4];
            g.eval(&y, &mut grad).unwrap();
        }
    });
    assert_eq!(info.count_total, 0);
}

#[test]
fn a_pullback_applies_without_allocating() {
    let x = [0.3, -0.2, 0.9, 1.1];
    let (_, mut back) = optic_ad::pullback(|t| vec![f(t), t[0] * t[1]], &x).unwrap();
    let mut xbar = [0.0; 4];
    back.apply(&[1.0, 0.0], &mut xbar).unwrap();
    let info = measure(|| {
        for k in 0..10 {
            back.apply(&[1.0, k as f64], &mut xbar).unwrap();
        }
    });
    assert_eq!(info.count_total, 0);
}

#[test]
fn compiled_hvp_does_not_allocate() {
    let x = [0.3, -0.2, 0.9, 1.1];
    let mut h = Hvp::new(f, &x).unwrap();
    let (mut grad, mut hv) = ([0.0; 4], [0.0; 4]);
    // Six directions: one full group of four lanes and a partial one.
    let vs: Vec<f64> = (0..24).map(|i| (i as f64 * 0.3).sin()).collect();
    let mut many = vec![0.0; 24];
    h.linearize_with_gradient(&x, &mut grad).unwrap();
    h.apply(&[1.0, 0.0, 0.0, 0.0], &mut hv).unwrap();
    h.apply_many(&vs, &mut many).unwrap();
    // The one-pass product's buffers are made by its first call.
    h.eval(&x, &[0.0, 1.0, 0.0, 0.0], &mut hv).unwrap();
    let info = measure(|| {
        for k in 0..10 {
            let y = [0.1 * k as f64, 0.2, 0.3, 0.4];
            h.linearize_with_gradient(&y, &mut grad).unwrap();
            for v in [[1.0, 0.0, 0.0, 0.0], [0.5, -1.0, 2.0, 0.0]] {
                h.apply(&v, &mut hv).unwrap();
            }
            h.apply_many(&vs, &mut many).unwrap();
            h.eval(&y, &[0.5, 0.5, 1.0, k as f64], &mut hv).unwrap();
        }
    });
    assert_eq!(info.count_total, 0);
}

#[test]
fn compiled_derivatives_do_not_allocate() {
    let mut d = Derivatives::<U3, _>::new(|t| t.sin().exp() * t.tanh(), 0.2).unwrap();
    d.eval(0.2).unwrap();
    // Directional derivatives along lines, scalar trace.
    let f = |x: &[optic_ad::Tracer]| x[0].sin().exp() * x[1].tanh() + x[2] * x[0];
    let mut line = optic_ad::Directional::new(f, &[0.2, 0.3, 0.4], 5).unwrap();
    let mut out = [0.0; 6];
    line.eval(&[0.2, 0.3, 0.4], &[1.0, 0.0, 0.0], &mut out)
        .unwrap();
    let info = measure(|| {
        for k in 0..10 {
            let v = d.eval(0.1 * k as f64).unwrap();
            assert!(v[3].is_finite());
            let x = [0.1 * k as f64, 0.3, 0.4];
            line.eval(&x, &[1.0, k as f64, 0.5], &mut out).unwrap();
            assert!(out[5].is_finite());
        }
    });
    assert_eq!(info.count_total, 0);
}

/// Taylor mode at degree 30, with the gamma family (its own buffers) and a
/// user rule whose jet comes from its pullback (the partials' Taylor
/// program, built on first use, then reused).
#[test]
fn taylor_programs_do_not_allocate() {
    struct Softplus;
    impl optic_ad::ScalarRule for Softplus {
        fn name(&self) -> &str {
            "softplus"
        }
        fn value(&self, x: f64) -> f64 {
            x.max(0.0) + (-x.abs()).exp().ln_1p()
        }
        fn pullback(
            &self,
            b: &mut optic_ad::Builder,
            x: optic_ad::Var,
            _y: optic_ad::Var,
            ct: optic_ad::Var,
        ) -> optic_ad::Var {
            // σ(x) = 1 / (1 + e⁻ˣ).
            let nx = b.neg(x);
            let e = b.exp(nx);
            let one = b.constant(1.0);
            let d = b.add(one, e);
            b.div(ct, d)
        }
    }
    let rule = optic_ad::CustomRule::new(Softplus);
    let f = move |t: optic_ad::Tracer| t.ln_gamma() * t.apply_rule(&rule) + t.atan2(t * t + 1.0);
    let mut d = Derivatives::<typenum::U30, _>::new(f, 1.2).unwrap();
    d.eval(1.2).unwrap();
    let info = measure(|| {
        for k in 0..10 {
            let v = d.eval(1.0 + 0.05 * k as f64).unwrap();
            assert!(v[30].is_finite());
        }
    });
    assert_eq!(info.count_total, 0);
}

/// An array Taylor program whose map's jets are compiled makes that map's
/// buffers (and native kernel) when it is built: its first evaluation
/// allocates nothing.
#[test]
fn a_compiled_array_taylor_program_allocates_when_built() {
    use optic_ad::array::{self, Array, ArrayProgram};
    use optic_ad::functor::TaylorProgram;
    use optic_ad::Real;
    let x = [0.3, -0.2, 0.7];
    let p = array::trace(|x: &[_]| Ok(x[0].map(|t| t.sin() * t.exp()).sum()), &[&x]).unwrap();
    let mut t: TaylorProgram<ArrayProgram> = TaylorProgram::new(&p, 3).unwrap();
    assert_eq!(t.compiled_maps(), (1, 1));
    let jet = [0.3, -0.2, 0.7, 1.0, 0.5, -1.0, 0.1, 0.0, 0.2, 0.0, 0.0, 0.0];
    let info = measure(|| t.eval(&[&jet]).unwrap());
    assert_eq!(info.count_total, 0);
    assert!(t.output(0).iter().all(|c| c.is_finite()));
}

/// The counter does count: a one-shot driver traces, and tracing allocates.
#[test]
fn the_counter_sees_allocations() {
    let info = measure(|| {
        let g = optic_ad::gradient(f, &[0.3, -0.2, 0.9, 1.1]).unwrap();
        assert_eq!(g.len(), 4);
    });
    assert!(info.count_total > 0);
}

/// The array tier: a model with every kind of instruction (slices as
/// views, a sum fused into its map, gather, scatter-add, matvec, vecmat,
/// a product of traced matrices small enough that faer packs nothing).
fn array_model<A: optic_ad::array::Array>(x: &A) -> optic_ad::Result<A::Scalar> {
    use optic_ad::array::{Indices, Matrix};
    use std::sync::Arc;
    let n = x.len();
    let m = Arc::new(Matrix::new(
        2,
        n,
        (0..2 * n).map(|i| i as f64 * 0.1).collect(),
    )?);
    let (a, b) = (x.slice(0, n - 1)?, x.slice(1, n - 1)?);
    let r = a.map2(&b, |a, b| {
        (b - a * a) * (b - a * a) * 100.0 + (-a + 1.0) * (-a + 1.0)
    })?;
    let g = x.gather(&Indices::new(&[3, 0, 0]))?.map(|t| t.sin());
    let s = g.scatter_add(&Indices::new(&[1, 1, 0]), 2)?;
    let mx = A::matvec(&m, x)?;
    let back = A::vecmat(&m, &mx.map2(&s, |p, q| p * q)?)?;
    let sq = optic_ad::array::Mat::new(x.clone(), 2, 2)?;
    let c = sq.matmul_t(&sq, false, true)?.into_data();
    Ok(r.sum() + back.dot(x)? + c.dot(&c)?)
}

/// faer's `matmul` takes no workspace: a product of more than 16³
/// multiply-adds allocates faer's packing buffers on each call. The
/// gradient of `Σ sin(A B)` with 16 × 16 factors (16³ multiply-adds per
/// product) allocates nothing, with 20 × 20 factors the same number of
/// times at every evaluation. Without the feature `gemm` neither allocates.
#[test]
fn only_large_matrix_products_allocate() {
    use optic_ad::array::{Array, Mat, TArray};
    fn per_eval<const S: usize>() -> (u64, u64) {
        let f = |t: &TArray| -> optic_ad::Result<optic_ad::array::TScalar> {
            let a = Mat::new(t.slice(0, S * S)?, S, S)?;
            let b = Mat::new(t.slice(S * S, S * S)?, S, S)?;
            Ok(a.matmul(&b)?.into_data().map(|v| v.sin()).sum())
        };
        let x: Vec<f64> = (0..2 * S * S).map(|i| (i as f64 * 0.37).sin()).collect();
        let mut g = optic_ad::Gradient::array(f, &x).unwrap();
        let mut grad = vec![0.0; x.len()];
        g.eval(&x, &mut grad).unwrap();
        let one = measure(|| {
            g.eval(&x, &mut grad).unwrap();
        })
        .count_total;
        let ten = measure(|| {
            for _ in 0..10 {
                g.eval(&x, &mut grad).unwrap();
            }
        })
        .count_total;
        (one, ten)
    }
    assert_eq!(per_eval::<16>(), (0, 0));
    let (one, ten) = per_eval::<20>();
    if cfg!(feature = "gemm") {
        assert!(one > 0 && ten == 10 * one, "{one} then {ten}");
    } else {
        assert_eq!((one, ten), (0, 0));
    }
}

#[test]
fn array_drivers_do_not_allocate() {
    let x = [0.3, -0.2, 0.9, 1.1];
    let mut g = optic_ad::Gradient::array(array_model, &x).unwrap();
    let mut h = optic_ad::Hvp::array(array_model, &x).unwrap();
    let mut d = optic_ad::Directional::array(array_model, &x, 5).unwrap();
    let (mut grad, mut hv, mut dk) = ([0.0; 4], [0.0; 4], [0.0; 6]);
    g.eval(&x, &mut grad).unwrap();
    d.eval(&x, &[1.0, 0.0, 0.0, 0.0], &mut dk).unwrap();
    h.linearize(&x).unwrap();
    h.apply(&[1.0, 0.0, 0.0, 0.0], &mut hv).unwrap();
    h.eval(&x, &[1.0, 0.0, 0.0, 0.0], &mut hv).unwrap();
    let info = measure(|| {
        for k in 0..10 {
            let y = [0.1 * k as f64, 0.2, 0.3, 0.4];
            g.eval(&y, &mut grad).unwrap();
            h.linearize(&y).unwrap();
            h.apply(&[1.0, 0.5, 0.0, k as f64], &mut hv).unwrap();
            h.eval(&y, &[0.5, 0.5, 1.0, k as f64], &mut hv).unwrap();
            d.eval(&y, &[0.5, 0.5, 1.0, k as f64], &mut dk).unwrap();
        }
    });
    assert_eq!(info.count_total, 0);
}

/// Loops: a Runge–Kutta `fold` (one loop instruction on the array trace,
/// with a capture), then a `while_loop` (its per-step comparisons and
/// guards), through every array driver.
fn loop_model<A: optic_ad::array::Array>(x: &A) -> optic_ad::Result<A::Scalar> {
    use optic_ad::Real;
    let (a, b) = (x.get(0)?, x.get(1)?);
    let [u, v] = optic_ad::fold(50, [a, b], |[u, v]: [A::Scalar; 2]| {
        let du = u * 0.5 - u * v * a * 0.01;
        let dv = u * v * 0.01 - v * 0.3;
        [u + du * 0.02, v + dv * 0.02]
    })?;
    let zero = A::Scalar::cst(0.0);
    let [w, _] = optic_ad::while_loop(
        60,
        [u, zero],
        |[_, t]| *t < 0.99,
        |[w, t]: [A::Scalar; 2]| [w * 0.99 + v * 0.001, t + 0.02],
    )?;
    Ok(u * v + w + x.sum())
}

#[test]
fn loop_drivers_do_not_allocate() {
    let x = [1.3, 0.7, 0.2];
    let mut g = optic_ad::Gradient::array(loop_model, &x).unwrap();
    let mut h = optic_ad::Hvp::array(loop_model, &x).unwrap();
    let mut d = optic_ad::Directional::array(loop_model, &x, 4).unwrap();
    let (mut grad, mut hv, mut dk) = ([0.0; 3], [0.0; 3], [0.0; 5]);
    let run = |k: usize| {
        let y = [1.0 + 0.1 * k as f64, 0.7, 0.2];
        g.eval(&y, &mut grad).unwrap();
        h.linearize(&y).unwrap();
        h.apply(&[1.0, 0.5, k as f64], &mut hv).unwrap();
        h.eval(&y, &[0.5, 0.5, k as f64], &mut hv).unwrap();
        d.eval(&y, &[0.5, 0.5, k as f64], &mut dk).unwrap();
    };
    assert_steady_state_allocates_nothing(run);
}

/// The scalar model of [`loop_model`]: the same loops written over `Real`,
/// which the scalar compiled drivers trace on the array trace.
fn scalar_loop_model<T: Real>(x: &[T]) -> optic_ad::Result<T> {
    let (a, b) = (x[0], x[1]);
    let [u, v] = optic_ad::fold(50, [a, b], |[u, v]: [T; 2]| {
        let du = u * 0.5 - u * v * a * 0.01;
        let dv = u * v * 0.01 - v * 0.3;
        [u + du * 0.02, v + dv * 0.02]
    })?;
    let [w, _] = optic_ad::while_loop(
        60,
        [u, T::cst(0.0)],
        |[_, t]| *t < 0.99,
        |[w, t]: [T; 2]| [w * 0.99 + v * 0.001, t + 0.02],
    )?;
    Ok(u * v + w + x[0] + x[1] + x[2])
}

#[test]
fn scalar_drivers_with_loops_do_not_allocate() {
    let x = [1.3, 0.7, 0.2];
    let mut g = optic_ad::Gradient::new(scalar_loop_model, &x).unwrap();
    let mut h = optic_ad::Hvp::new(scalar_loop_model, &x).unwrap();
    let mut d = optic_ad::Directional::new(scalar_loop_model, &x, 3).unwrap();
    assert!(g.array_program().is_some() && h.array_program().is_some());
    assert!(d.array_program().is_some());
    // The pullback of a function with loops and two results.
    let (_, mut back) = optic_ad::pullback(
        |t| -> optic_ad::Result<Vec<optic_ad::Tracer>> {
            Ok(vec![scalar_loop_model(t)?, t[0] * t[1]])
        },
        &x,
    )
    .unwrap();
    assert!(back.array_program().is_some());
    let (mut grad, mut hv, mut many, mut xbar) = ([0.0; 3], [0.0; 3], [0.0; 6], [0.0; 3]);
    let mut dk = [0.0; 4];
    let run = |k: usize| {
        back.apply(&[1.0, k as f64], &mut xbar).unwrap();
        let y = [1.0 + 0.1 * k as f64, 0.7, 0.2];
        g.eval(&y, &mut grad).unwrap();
        h.linearize_with_gradient(&y, &mut grad).unwrap();
        h.apply(&[1.0, 0.5, k as f64], &mut hv).unwrap();
        h.apply_many(&[1.0, 0.5, k as f64, 0.0, 1.0, 0.0], &mut many)
            .unwrap();
        d.eval(&y, &[1.0, 0.5, k as f64], &mut dk).unwrap();
    };
    assert_steady_state_allocates_nothing(run);
}

/// A loop whose gradient checkpoints (binomial, 3 snapshots for 50 steps):
/// the schedule's bookkeeping is kept between runs too, for the gradient,
/// a pullback and the HVP (a checkpointed loop of the tangent body).
fn checkpointed_loop_model<T: Real>(x: &[T]) -> optic_ad::Result<T> {
    let [u, v] = optic_ad::fold_with(
        50,
        [x[0], x[1]],
        optic_ad::Checkpoints::Binomial(3),
        |[u, v]: [T; 2]| {
            let du = u * 0.5 - u * v * 0.01;
            let dv = u * v * 0.01 - v * 0.3;
            [u + du * 0.02, v + dv * 0.02]
        },
    )?;
    Ok(u * v)
}

#[test]
fn checkpointed_loops_do_not_allocate() {
    let x = [1.3, 0.7];
    let mut g = optic_ad::Gradient::new(checkpointed_loop_model, &x).unwrap();
    assert!(g.array_program().is_some());
    let (_, mut back) = optic_ad::pullback(
        |t| -> optic_ad::Result<Vec<optic_ad::Tracer>> {
            Ok(vec![checkpointed_loop_model(t)?, t[1]])
        },
        &x,
    )
    .unwrap();
    assert!(back.array_program().is_some());
    // Its HVP: a checkpointed loop of the tangent body.
    let mut h = optic_ad::Hvp::new(checkpointed_loop_model, &x).unwrap();
    assert!(h.array_program().unwrap().to_string().contains("revolve"));
    let (mut grad, mut xbar, mut hv) = ([0.0; 2], [0.0; 2], [0.0; 2]);
    let run = |k: usize| {
        let y = [1.0 + 0.1 * k as f64, 0.7];
        g.eval(&y, &mut grad).unwrap();
        back.apply(&[1.0, k as f64], &mut xbar).unwrap();
        h.eval(&y, &[0.5, k as f64], &mut hv).unwrap();
        h.linearize(&y).unwrap();
        h.apply(&[k as f64, 0.25], &mut hv).unwrap();
    };
    assert_steady_state_allocates_nothing(run);
}

/// Runs `run(k)` for `k < 100`, the steady state (with `jit`, a loop body
/// runs thousands of times per evaluation and is compiled once it is hot,
/// within the first rounds), then 10 more runs, which must not allocate.
fn assert_steady_state_allocates_nothing(mut run: impl FnMut(usize)) {
    for k in 0..100 {
        run(k);
    }
    let info = measure(|| {
        for k in 0..10 {
            run(k);
        }
    });
    assert_eq!(info.count_total, 0);
}

/// Maps long enough to run on several threads:
/// the gradient and the HVP, called inside a pool of two threads, allocate
/// nothing after their first run. (Called from outside the pool, rayon's
/// queue allocates a block every 63 hand-offs; `ArrayWorkspace::run`
/// documents it.)
#[test]
fn threaded_array_drivers_do_not_allocate_inside_a_pool() {
    use optic_ad::array::Array;
    fn f<A: Array>(x: &A) -> optic_ad::Result<A::Scalar> {
        let n = x.len();
        let (a, b) = (x.slice(0, n - 1)?, x.slice(1, n - 1)?);
        Ok(a.map2(&b, |a, b| {
            let t = b - a * a;
            t * t * 100.0 + (-a + 1.0) * (-a + 1.0)
        })?
        .sum())
    }
    let n = 2 * optic_ad::array::ArrayWorkspace::PARALLEL_MIN + 5;
    let x: Vec<f64> = (0..n)
        .map(|i| 0.5 + 0.4 * (i as f64 * 0.37).sin())
        .collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    pool.install(|| {
        let mut g = optic_ad::Gradient::array(f, &x).unwrap();
        let mut h = optic_ad::Hvp::array(f, &x).unwrap();
        let (mut grad, mut hv) = (vec![0.0; n], vec![0.0; n]);
        g.eval(&x, &mut grad).unwrap();
        h.eval(&x, &x, &mut hv).unwrap();
        let info = measure(|| {
            for _ in 0..100 {
                g.eval(&x, &mut grad).unwrap();
                h.eval(&x, &x, &mut hv).unwrap();
            }
        });
        assert_eq!(info.count_total, 0);
    });
}

/// `Directional::eval_point` on a structured point (a tuple of a scalar
/// and a `Vec`): the leaves and the direction go into kept buffers.
#[test]
fn structured_directional_does_not_allocate() {
    fn f<T: Real>(p: &(T, Vec<T>)) -> T {
        p.1.iter().fold(p.0, |s, &w| s * w.sin())
    }
    let p = (0.5, vec![0.3, -0.2, 1.1]);
    let v = (1.0, vec![0.0, 1.0, 0.5]);
    let mut d = optic_ad::Directional::structured(f, &p, 4).unwrap();
    let mut out = [0.0; 5];
    d.eval_point(&p, &v, &mut out).unwrap();
    let mut q = p.clone();
    let run = |k: usize| {
        q.0 = 0.5 + 0.1 * k as f64;
        d.eval_point(&q, &v, &mut out).unwrap();
        assert!(out[4].is_finite());
    };
    assert_steady_state_allocates_nothing(run);
}
