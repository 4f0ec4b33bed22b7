//! The argmin adapter (feature `argmin`): its cost, gradient and
//! matrix-free Hessian against the hand-written ones of
//! `argmin_testfunctions`; argmin's Newton-CG takes the same iterates with
//! the adapter as with those hand-written derivatives; and argmin's
//! trust-region method fits the main job's model (WDBC logistic
//! regression) to the optimum of the example's own Newton-CG.

use crate::common;

use argmin::core::{CostFunction, Executor, Gradient, Hessian, State};
use argmin::solver::linesearch::MoreThuenteLineSearch;
use argmin::solver::newton::NewtonCG;
use argmin::solver::trustregion::{Steihaug, TrustRegion};
use argmin_math::ArgminDot;
use argmin_testfunctions as tf;
use common::max_err;
use optic_ad::argmin_interop::ArgminProblem;
use optic_ad::Tracer;

use crate::model;

/// Rosenbrock in 4 dimensions with the hand-written derivatives of
/// `argmin_testfunctions`.
struct Hand;

impl CostFunction for Hand {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, x: &Vec<f64>) -> Result<f64, argmin::core::Error> {
        Ok(tf::rosenbrock(x))
    }
}

impl Gradient for Hand {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, x: &Vec<f64>) -> Result<Vec<f64>, argmin::core::Error> {
        Ok(tf::rosenbrock_derivative(x))
    }
}

impl Hessian for Hand {
    type Param = Vec<f64>;
    type Hessian = Vec<Vec<f64>>;
    fn hessian(&self, x: &Vec<f64>) -> Result<Vec<Vec<f64>>, argmin::core::Error> {
        Ok(tf::rosenbrock_hessian(x))
    }
}

fn rosenbrock(x: &[Tracer]) -> Tracer {
    tf::rosenbrock(x)
}

#[test]
fn the_adapter_gives_the_hand_written_derivatives() {
    let x0 = vec![-1.2, 1.0, 0.3, -0.5];
    let p = ArgminProblem::new(rosenbrock, &x0).unwrap();
    for x in [x0.clone(), vec![0.5, 0.25, 1.5, 2.0], vec![1.0; 4]] {
        assert_eq!(p.cost(&x).unwrap(), tf::rosenbrock(&x));
        let g = p.gradient(&x).unwrap();
        assert!(max_err(&g, &tf::rosenbrock_derivative(&x)) < 1e-13);
        let h = p.hessian(&x).unwrap();
        let want = tf::rosenbrock_hessian(&x);
        for v in [vec![1.0, 0.0, 0.0, 0.0], vec![0.3, -1.0, 2.0, 0.5]] {
            let hv = h.dot(&v);
            let hv_ref: Vec<f64> = want
                .iter()
                .map(|row| row.iter().zip(&v).map(|(a, b)| a * b).sum())
                .collect();
            assert!(max_err(&hv, &hv_ref) < 1e-13, "{hv:?} vs {hv_ref:?}");
        }
    }
    // An operator for an earlier point re-linearises there.
    let h1 = p.hessian(&vec![0.5, 0.25, 1.5, 2.0]).unwrap();
    let _ = p.hessian(&x0).unwrap();
    let e = [1.0, 0.0, 0.0, 0.0];
    let want = tf::rosenbrock_hessian(&[0.5, 0.25, 1.5, 2.0]);
    let col: Vec<f64> = want.iter().map(|r| r[0]).collect();
    assert!(max_err(&h1.dot(&e.to_vec()), &col) < 1e-13);
    // Wrong lengths are errors (or NaNs from the operator), never panics.
    assert!(p.cost(&vec![1.0; 3]).is_err());
    assert!(p.gradient(&vec![1.0; 5]).is_err());
    assert!(p.hessian(&vec![]).is_err());
    assert!(h1.dot(&vec![1.0; 2]).iter().all(|v| v.is_nan()));
    assert!(ArgminProblem::new(rosenbrock, &[]).is_err());
}

#[test]
fn newton_cg_takes_the_same_iterates_as_with_hand_written_derivatives() {
    let x0 = vec![-1.2, 1.0, 0.3, -0.5];
    let run = |iters: u64| {
        let ours = Executor::new(
            ArgminProblem::new(rosenbrock, &x0).unwrap(),
            NewtonCG::new(MoreThuenteLineSearch::new()),
        )
        .configure(|s| s.param(x0.clone()).max_iters(iters))
        .run()
        .unwrap();
        let hand = Executor::new(Hand, NewtonCG::new(MoreThuenteLineSearch::new()))
            .configure(|s| s.param(x0.clone()).max_iters(iters))
            .run()
            .unwrap();
        (
            ours.state().get_param().unwrap().clone(),
            hand.state().get_param().unwrap().clone(),
        )
    };
    for iters in [1, 5, 30] {
        let (a, b) = run(iters);
        assert!(max_err(&a, &b) < 1e-10, "after {iters}: {a:?} vs {b:?}");
    }
}

#[test]
fn a_trust_region_fits_the_main_job_to_its_optimum() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/wdbc.csv");
    let data = model::load_wdbc(&path).unwrap();
    let fit = model::newton_cg(&data, &model::NewtonOptions::default(), |_| {}).unwrap();
    let theta0 = vec![0.0; data.n_params()];
    // On the scalar trace (the generic objective) and on the array trace
    // (the main job's array objective).
    let scalar = ArgminProblem::new(|t: &[Tracer]| model::objective(t, &data), &theta0).unwrap();
    let res = Executor::new(scalar, TrustRegion::new(Steihaug::new()))
        .configure(|s| s.param(theta0.clone()).max_iters(30))
        .run()
        .unwrap();
    let theta = res.state().get_best_param().unwrap();
    let e = max_err(theta, &fit.theta);
    assert!(e < 1e-10, "trust region (scalar trace) vs Newton-CG: {e:e}");
    let design = data.design();
    let arrays = ArgminProblem::new_array(|t| model::objective_array(t, &design), &theta0).unwrap();
    let res = Executor::new(arrays, TrustRegion::new(Steihaug::new()))
        .configure(|s| s.param(theta0.clone()).max_iters(30))
        .run()
        .unwrap();
    let theta = res.state().get_best_param().unwrap();
    let e = max_err(theta, &fit.theta);
    assert!(e < 1e-10, "trust region (array trace) vs Newton-CG: {e:e}");
}

/// Cost and gradient are answered from one evaluation per point: calls
/// that alternate between points still get each point's own values
/// (against the test functions' hand-written derivatives).
#[test]
fn cost_and_gradient_at_alternating_points_are_each_points_own() {
    let f = |x: &[Tracer]| tf::rosenbrock(x);
    let p = ArgminProblem::new(f, &[0.0, 0.0]).unwrap();
    let (a, b) = (vec![0.3, -0.2], vec![1.5, 0.7]);
    for x in [&a, &b, &b, &a, &b] {
        assert!((p.cost(x).unwrap() - tf::rosenbrock(x)).abs() <= 1e-14 * tf::rosenbrock(x).abs());
        let g = p.gradient(x).unwrap();
        assert!(max_err(&g, &tf::rosenbrock_derivative(x)) < 1e-12);
        assert!((p.cost(x).unwrap() - tf::rosenbrock(x)).abs() <= 1e-14 * tf::rosenbrock(x).abs());
    }
    let g_b = p.gradient(&b).unwrap();
    assert!(max_err(&g_b, &tf::rosenbrock_derivative(&b)) < 1e-12);
    let _ = p.cost(&a).unwrap();
    assert!(max_err(&p.gradient(&a).unwrap(), &tf::rosenbrock_derivative(&a)) < 1e-12);
}
