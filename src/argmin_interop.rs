//! Problems for the argmin optimisers (feature `argmin`): the cost, the
//! gradient and a matrix-free Hessian of one function written generic over
//! [`Real`](crate::Real), traced once.
//!
//! [`ArgminProblem`] (on the scalar trace, [`ArgminProblem::new`], or the
//! array trace, [`ArgminProblem::new_array`]) implements argmin's
//! `CostFunction` (`Vec<f64>` to
//! `f64`), `Gradient` (`Vec<f64>`) and `Hessian`, whose value is a
//! [`HessianAt`]: the Hessian at a point as an operator, `H v` by one
//! Hessian-vector product (argmin's `ArgminDot`), never a matrix. That is
//! what argmin's Newton-CG (`argmin::solver::newton::NewtonCG`) asks of a
//! Hessian; the gradient serves its line searches, L-BFGS and the
//! nonlinear conjugate gradients.
//!
//! Underneath are the compiled drivers ([`crate::Gradient`] and
//! [`crate::Hvp`], or their array forms): the function is traced at the first point and the
//! programs are evaluated at the next ones without tracing again (a guard
//! that fails re-traces, as with the drivers).
//!
//! # Example
//!
//! Rosenbrock's function minimised from (−1.2, 1) by argmin's trust-region
//! method with the Steihaug conjugate-gradient subproblem, which needs
//! only Hessian-vector products:
//!
//! ```
//! use argmin::core::{Executor, State};
//! use argmin::solver::trustregion::{Steihaug, TrustRegion};
//! use optic_ad::argmin_interop::ArgminProblem;
//! use optic_ad::Real;
//!
//! fn rosenbrock<T: Real>(x: &[T]) -> T {
//!     let a = T::cst(1.0) - x[0];
//!     let b = x[1] - x[0] * x[0];
//!     a * a + b * b * 100.0
//! }
//! let problem = ArgminProblem::new(rosenbrock, &[-1.2, 1.0]).unwrap();
//! let solver = TrustRegion::new(Steihaug::new().with_max_iters(2));
//! let res = Executor::new(problem, solver)
//!     .configure(|state| state.param(vec![-1.2, 1.0]).max_iters(100))
//!     .run()
//!     .unwrap();
//! let x = res.state().get_best_param().unwrap();
//! assert!((x[0] - 1.0).abs() < 1e-10 && (x[1] - 1.0).abs() < 1e-10, "{x:?}");
//! ```
//!
//! argmin's Newton-CG (`NewtonCG::new(MoreThuenteLineSearch::new())`)
//! runs on the same problem; its iterates are those it takes with the
//! hand-written derivatives of `argmin_testfunctions` (the crate's tests
//! compare them), slow on this function from this start point either way.

use std::sync::{Arc, Mutex, PoisonError};

use argmin::core::{CostFunction, Error as ArgminError, Gradient as ArgminGradient, Hessian};
use argmin_math::ArgminDot;

use crate::array::{TArray, TScalar};
use crate::drivers::{IntoTraced, LeafFunction, OnArray};
use crate::error::{check_len, Result};
use crate::program::Tracer;

/// The compiled drivers of one function: [`crate::Gradient`] and
/// [`crate::Hvp`], on the scalar trace or (for [`crate::OnArray`]) the
/// array trace.
struct Drivers<F> {
    gradient: crate::Gradient<F>,
    hvp: crate::Hvp<F>,
}

/// The compiled programs and the point the Hessian-vector product is
/// linearised at.
struct Compiled<F> {
    drivers: Drivers<F>,
    /// The point last linearised at.
    at: Vec<f64>,
    /// The point of `value` and `grad` (empty before the first
    /// evaluation): argmin's solvers ask for the cost and the gradient at
    /// one point in two calls, which one evaluation answers.
    evaluated_at: Vec<f64>,
    value: f64,
    grad: Vec<f64>,
}

impl<F: LeafFunction> Compiled<F> {
    /// `f(x)`, with `∇f(x)` in `grad`: evaluated unless `x` is the point
    /// they already hold.
    fn evaluate(&mut self, x: &[f64]) -> Result<f64> {
        if self.evaluated_at.as_slice() != x || x.is_empty() {
            self.evaluated_at.clear();
            self.value = self.drivers.gradient.eval(x, &mut self.grad)?;
            self.evaluated_at.extend_from_slice(x);
        }
        Ok(self.value)
    }
}

/// An argmin problem from a function `f : ℝⁿ → ℝ` traced once: its cost,
/// gradient and Hessian (as the operator [`HessianAt`]), on the scalar
/// trace ([`ArgminProblem::new`]) or the array trace
/// ([`ArgminProblem::new_array`]). See the [module documentation](self).
///
/// Shapes: every parameter vector has the `n` entries of the point it
/// was made at; the gradient has `n`.
pub struct ArgminProblem<F> {
    n: usize,
    compiled: Arc<Mutex<Compiled<F>>>,
}

impl<F> std::fmt::Debug for ArgminProblem<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgminProblem").field("n", &self.n).finish()
    }
}

impl<F> ArgminProblem<F> {
    fn from_drivers(drivers: Drivers<F>, n: usize) -> Self {
        ArgminProblem {
            n,
            compiled: Arc::new(Mutex::new(Compiled {
                drivers,
                at: Vec::new(),
                evaluated_at: Vec::new(),
                value: f64::NAN,
                grad: vec![0.0; n],
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Compiled<F>> {
        self.compiled.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<F, R> ArgminProblem<F>
where
    F: Fn(&[Tracer]) -> R + Clone,
    R: IntoTraced<Tracer>,
{
    /// Traces `f`, generic over [`Real`](crate::Real) and called on
    /// tracers, at `x0` and builds its gradient and Hessian-vector product
    /// programs ([`crate::Gradient`], [`crate::Hvp`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Gradient::new`] and [`crate::Hvp::new`]
    /// ([`Error::EmptyInput`](crate::Error::EmptyInput) for an empty `x0`).
    pub fn new(f: F, x0: &[f64]) -> Result<Self> {
        let gradient = crate::Gradient::new(f.clone(), x0)?;
        let hvp = crate::Hvp::new(f, x0)?;
        Ok(Self::from_drivers(Drivers { gradient, hvp }, x0.len()))
    }
}

impl<F> ArgminProblem<OnArray<F>>
where
    F: Fn(&TArray) -> Result<TScalar> + Clone,
{
    /// Traces `f`, written over [`Array`](crate::array::Array) and called
    /// on the array trace, at `x0` and builds its gradient and
    /// Hessian-vector product programs ([`crate::Gradient::array`],
    /// [`crate::Hvp::array`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Gradient::array`] and [`crate::Hvp::array`];
    /// [`Error::EmptyInput`](crate::Error::EmptyInput) for an empty `x0`.
    pub fn new_array(f: F, x0: &[f64]) -> Result<Self> {
        if x0.is_empty() {
            return Err(crate::Error::EmptyInput("ArgminProblem::new_array: x0"));
        }
        let gradient = crate::Gradient::array(f.clone(), x0)?;
        let hvp = crate::Hvp::array(f, x0)?;
        Ok(Self::from_drivers(Drivers { gradient, hvp }, x0.len()))
    }
}

impl<F: LeafFunction> CostFunction for ArgminProblem<F> {
    type Param = Vec<f64>;
    type Output = f64;

    /// `f(x)`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) for a
    /// parameter of another length; those of the gradient driver.
    fn cost(&self, x: &Vec<f64>) -> std::result::Result<f64, ArgminError> {
        check_len("argmin cost: parameter", self.n, x.len())?;
        Ok(self.lock().evaluate(x)?)
    }
}

impl<F: LeafFunction> ArgminGradient for ArgminProblem<F> {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;

    /// `∇f(x)`.
    ///
    /// # Errors
    ///
    /// As [`CostFunction::cost`].
    fn gradient(&self, x: &Vec<f64>) -> std::result::Result<Vec<f64>, ArgminError> {
        check_len("argmin gradient: parameter", self.n, x.len())?;
        let mut c = self.lock();
        c.evaluate(x)?;
        Ok(c.grad.clone())
    }
}

impl<F: LeafFunction> Hessian for ArgminProblem<F> {
    type Param = Vec<f64>;
    type Hessian = HessianAt<F>;

    /// The Hessian at `x` as an operator: linearises the Hessian-vector
    /// product there (one forward and one reverse sweep), after which each
    /// product costs one more.
    ///
    /// # Errors
    ///
    /// As [`CostFunction::cost`], and those of linearising.
    fn hessian(&self, x: &Vec<f64>) -> std::result::Result<HessianAt<F>, ArgminError> {
        check_len("argmin Hessian: parameter", self.n, x.len())?;
        let mut c = self.lock();
        c.drivers.hvp.linearize(x)?;
        c.at.clone_from(x);
        Ok(HessianAt {
            x: x.as_slice().into(),
            compiled: Arc::clone(&self.compiled),
        })
    }
}

/// The Hessian of an [`ArgminProblem`] at a point, as a linear operator:
/// `h.dot(&v)` (argmin's `ArgminDot`) is `H v`, one Hessian-vector product
/// (re-linearising first if another point was linearised since). Cloning
/// it shares the compiled programs.
///
/// `dot` cannot return an error: for a `v` of the wrong length, or where
/// the product fails (a guard that no longer holds at this point and
/// whose re-trace fails), it returns NaNs, which argmin's solvers stop on.
/// [`HessianAt::apply`] returns the error.
pub struct HessianAt<F> {
    x: Arc<[f64]>,
    compiled: Arc<Mutex<Compiled<F>>>,
}

impl<F> Clone for HessianAt<F> {
    fn clone(&self) -> Self {
        HessianAt {
            x: Arc::clone(&self.x),
            compiled: Arc::clone(&self.compiled),
        }
    }
}

impl<F> std::fmt::Debug for HessianAt<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HessianAt").field("x", &self.x).finish()
    }
}

impl<F: LeafFunction> HessianAt<F> {
    /// The point.
    pub fn point(&self) -> &[f64] {
        &self.x
    }

    /// Writes `H v` into `out`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) unless `v`
    /// and `out` have `n` entries; those of linearising and of the
    /// product.
    pub fn apply(&self, v: &[f64], out: &mut [f64]) -> Result<()> {
        check_len("HessianAt::apply: v", self.x.len(), v.len())?;
        check_len("HessianAt::apply: out", self.x.len(), out.len())?;
        let mut c = self.compiled.lock().unwrap_or_else(PoisonError::into_inner);
        if c.at.as_slice() != &*self.x {
            c.drivers.hvp.linearize(&self.x)?;
            c.at.clear();
            c.at.extend_from_slice(&self.x);
        }
        c.drivers.hvp.apply(v, out)
    }
}

impl<F: LeafFunction> ArgminDot<Vec<f64>, Vec<f64>> for HessianAt<F> {
    fn dot(&self, v: &Vec<f64>) -> Vec<f64> {
        let mut out = vec![0.0; self.x.len()];
        if self.apply(v, &mut out).is_err() {
            out.fill(f64::NAN);
        }
        out
    }
}
