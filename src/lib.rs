//! optic-ad: higher-order, nested automatic differentiation built on optics.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod drivers;
mod error;
pub mod functor;
pub mod optic;
mod program;
mod real;
pub mod rules;

pub use drivers::{derivative, gradient, hessian, hvp, vjp, Gradient, Hvp};
pub use error::{Error, Result};
pub use functor::{nest, reverse, Nested, ReverseOptic};
pub use program::{trace, Builder, Guard, Op, OperandIter, Program, Tracer, Var, Workspace};
pub use real::Real;
pub use rules::{CustomRule, ScalarRule};

#[cfg(doctest)]
mod book;
