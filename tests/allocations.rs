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
fn compiled_hvp_does_not_allocate() {
    let x = [0.3, -0.2, 0.9, 1.1];
    let mut h = Hvp::new(f, &x).unwrap();
    let (mut grad, mut hv) = ([0.0; 4], [0.0; 4]);
    h.linearize_with_gradient(&x, &mut grad).unwrap();
    h.apply(&[1.0, 0.0, 0.0, 0.0], &mut hv).unwrap();
    let info = measure(|| {
        for k in 0..10 {
            let y = [0.1 * k as f64, 0.2, 0.3, 0.4];
            h.linearize_with_gradient(&y, &mut grad).unwrap();
            for v in [[1.0, 0.0, 0.0, 0.0], [0.5, -1.0, 2.0, 0.0]] {
                h.apply(&v, &mut hv).unwrap();
            }
        }
    });
    assert_eq!(info.count_total, 0);
}

#[test]
fn compiled_derivatives_do_not_allocate() {
    let mut d = Derivatives::<U3, _>::new(|t| t.sin().exp() * t.tanh(), 0.2).unwrap();
    d.eval(0.2).unwrap();
    let info = measure(|| {
        for k in 0..10 {
            let v = d.eval(0.1 * k as f64).unwrap();
            assert!(v[3].is_finite());
        }
    });
    assert_eq!(info.count_total, 0);
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
