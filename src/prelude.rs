//! The names a first program needs, in one import:
//! `use optic_ad::prelude::*;`.
//!
//! The scalar trait [`Real`], the error types, the scalar tracer, the
//! drivers of the crate root (gradients, Hessian-vector products,
//! Jacobians, n-th derivatives, their compiled forms), the loops,
//! `Differentiable` (the trait and, with the default feature `derive`, its
//! derive) for structs as points, and the orders `U1` … `U4` for
//! `derivative::<N>`.
//!
//! # Example
//!
//! ```
//! use optic_ad::prelude::*;
//!
//! fn f<T: Real>(x: &[T]) -> T {
//!     x[0].sin() * x[1]
//! }
//! let g = gradient(f, &[0.5, 2.0]).unwrap();
//! assert!((g[1] - 0.5f64.sin()).abs() < 1e-15);
//! let d = derivative::<U3, _, _>(|t| t.exp(), 0.0).unwrap();
//! assert_eq!(d.as_slice(), &[1.0; 4]);
//! ```

pub use crate::typenum::{U1, U2, U3, U4};
pub use crate::{
    d3, derivative, fold, fold_with, gradient, hessian, hvp, jacobian, jvp, pullback, scan,
    scan_with, taylor, value_and_gradient, vjp, while_loop, while_loop_with, Checkpoints,
    Derivatives, Differentiable, Directional, Error, Gradient, Hvp, Pullback, Real, Result, Tracer,
};
