//! The array tier: data-parallel programs whose values are arrays of
//! `f64`, differentiated as arrays.
//!
//! A scalar trace records one instruction per element; an array trace
//! records one per array operation, so a model over a million data points
//! is a handful of instructions, built in microseconds. The primitives
//! are those of NumPy and JAX, and each has its value, pullback and
//! pushforward written once:
//!
//! * `map` (elementwise, with a scalar [`crate::Program`] as body): its
//!   pullback and pushforward are maps of the body's scalar pullback and
//!   pushforward (the scalar ∂⃖ and ∂⃗ of this crate);
//! * `sum` and `broadcast`, each the other's transpose;
//! * `slice` and `pad`, each the other's transpose;
//! * `gather` and `scatter_add`, each the other's transpose;
//! * `matvec` (`M v`) and `vecmat` (`Mᵀ v`) with constant matrices held
//!   by reference count, each the other's transpose;
//! * on traced matrices (rank 2, [`Mat`]): `matmul` with either factor
//!   transposed (its pullback is two more products), `transpose`,
//!   `reshape`, and `sum_axis` and `broadcast_axis`, each the other's
//!   transpose.
//!
//! The design follows the differentiation of data-parallel programs in
//! Futhark (Schenck, Rønning, Henriksen & Oancea, "AD for an array language
//! with nested parallelism", SC22) and Knossos's array primitives: keep
//! the structure in the program and differentiate it as structure.
//!
//! User code is written once against [`Array`], and runs on
//! [`Dense<f64>`] (native), [`Dense`] of num-dual numbers (forward mode),
//! [`Dense<Tracer>`](crate::Tracer) (a scalar trace) and [`TArray`] (an
//! array trace). The book's chapter "Arrays" gives the rules as math and a
//! worked logistic-regression example. [`nest`] and [`Nested`] give ∂⃖ᴺ in
//! the nested-closure encoding on array programs;
//! [`TaylorProgram`](crate::functor::TaylorProgram) and
//! [`crate::Directional::array`] give Taylor mode (jets of any degree up
//! to [`crate::functor::MAX_TAYLOR_ORDER`]) on them. The drivers of a
//! function of the array trace are the crate's compiled drivers, one type
//! for both traces: [`crate::Gradient::array`], [`crate::Hvp::array`] and
//! [`crate::Directional::array`].
//!
//! # Example
//!
//! ```
//! use approx::assert_relative_eq;
//! use optic_ad::array::{self, Array, Dense};
//!
//! fn rosenbrock<A: Array>(x: &A) -> optic_ad::Result<A::Scalar> {
//!     let n = x.len();
//!     let (a, b) = (x.slice(0, n - 1)?, x.slice(1, n - 1)?);
//!     Ok(a.map2(&b, |a, b| {
//!         let t = b - a * a;
//!         let u = -a + 1.0;
//!         t * t * 100.0 + u * u
//!     })?
//!     .sum())
//! }
//! let x = vec![0.5; 1000];
//! // Gradient::array: the compiled gradient of a function of the array
//! // trace (one instruction per array operation).
//! let (_, g) = optic_ad::Gradient::array(rosenbrock, &x).unwrap().eval_at(&x).unwrap();
//! // The same function on a scalar trace, one instruction per element:
//! let g2 = optic_ad::gradient(|x| rosenbrock(&Dense::new(x.to_vec())), &x).unwrap();
//! for (a, b) in g.iter().zip(&g2) {
//!     assert_relative_eq!(a, b, max_relative = 1e-14);
//! }
//! ```

mod api;
mod drivers;
mod exec;
mod fuse;
mod ir;
mod kernels;
mod map;
mod mat;
pub(crate) mod matmul;
mod nested;
mod param;
pub mod prims;
mod serial;
mod shape;
mod taylor;
mod trace;
mod transform;
mod unroll;

pub use crate::functor::nest;
pub use crate::functor::{forward, reverse_joint};
pub use api::{Array, Dense, Indices};
pub(crate) use drivers::{trace_scalar, GradientCore, HvpCore, PullbackCore};
pub use exec::ArrayWorkspace;
pub use ir::{
    AVar, ArrayBuilder, ArrayGuard, ArrayOp, ArrayPrim, ArrayPrimitive, ArrayProgram, Matrix,
    Operands, TaylorRule, MAX_ARRAY_ARITY,
};
pub use mat::Mat;
pub use matmul::MatMulDims;
pub use nested::{Level, Nested};
pub use param::{Param, ParamReader, PrimData};
pub use shape::Shape;
pub(crate) use taylor::LineJets;
pub(crate) use trace::trace_hosted;
pub use trace::{trace, ArrayOutput, TArray, TScalar};
