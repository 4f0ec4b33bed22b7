//! Higher-order, nested automatic differentiation built on **optics**.
//!
//! Write a numeric function once, generic over [`Real`]. optic-ad
//!
//! 1. traces it into a flat SSA [`Program`] ([`trace`]);
//! 2. applies the reverse-mode AD optic functor ∂⃖ to that program as often
//!    as the order requires ([`reverse`], [`nest`], [`Nested`]): each
//!    application yields an optic whose `left` and `right` are programs
//!    again (K. Fischer, "∂P.jl terminology and notation guide",
//!    §VI–§VII);
//! 3. evaluates the derived programs fast and many times ([`Program::eval`],
//!    [`Gradient`], [`Hvp`]).
//!
//! High-order derivatives of one variable, and directional derivatives,
//! run in Taylor mode ([`functor::TaylorProgram`], [`derivative`],
//! [`taylor()`], [`d3`]): jets of degree N through the traced program, at a
//! cost that grows like N² (Griewank & Walther, *Evaluating Derivatives*,
//! ch. 13); the nested ∂⃖ᴺ construction stays as their independent check.
//!
//! ```
//! use approx::assert_relative_eq;
//! use optic_ad::{derivative, gradient, hvp, Real};
//! use optic_ad::typenum::U3;
//!
//! fn f<T: Real>(x: &[T]) -> T {
//!     x[0].sin() * x[1] + x[1].powi(3) * 0.5
//! }
//! let (x, v) = ([0.3, 2.0], [1.0, -1.0]);
//! let g = gradient(f, &x).unwrap(); // [x₁ cos x₀, sin x₀ + 1.5 x₁²]
//! assert_relative_eq!(g[1], 0.3_f64.sin() + 6.0);
//! let hv = hvp(f, &x, &v).unwrap(); // H = [[−x₁ sin x₀, cos x₀], [cos x₀, 3 x₁]]
//! assert_relative_eq!(hv[0], -2.0 * 0.3_f64.sin() - 0.3_f64.cos());
//! let d = derivative::<U3, _, _>(|t| t.sin() * t.exp(), 0.5).unwrap(); // [f, f′, f″, f‴]
//! assert_relative_eq!(d[3], 2.0 * 0.5_f64.exp() * (0.5_f64.cos() - 0.5_f64.sin()), max_relative = 1e-14);
//! ```
//!
//! # Vocabulary
//!
//! The terms of Keno Fischer's "∂P.jl terminology and notation guide" (the
//! design notes behind Diffractor.jl) and their names here:
//!
//! | Fischer's term | here |
//! |---|---|
//! | optic ⟨l \| r⟩ with residual M | [`optic::Optic`] (`left`, `right`, `Residual`) |
//! | sequential composition `§` | [`optic::Optic::then`], [`optic::Then`] |
//! | monoidal product ⊗ | [`optic::Tensor`] |
//! | `OpticRepr` | [`optic::OpticRepr`] |
//! | `SetIndex`, `FastSetIndex` | [`optic::Index`], [`optic::Path`] |
//! | block / continuation style (Snippet 4) | [`optic::Optic::modify`], [`optic::Optic::view`] |
//! | SSA program; copy, delete, branch | [`Program`]; cotangent sums, zero cotangents, [`Guard`]s |
//! | reverse-mode AD optic functor ∂⃖ | [`reverse`] → [`ReverseOptic`] |
//! | primal value, pullback f* | `left`'s output `y`, [`ReverseOptic::right_program`] |
//! | higher-order optic ∂⃖ⁿ, nested closures | [`nest`], [`Nested`], [`functor::Level`] |
//! | pushforward f₊ (§IV), forward mode | [`functor::forward`] (∂⃗) |
//! | `rrule` (Snippets 18–20) | [`CustomRule`], [`ScalarRule`] |
//! | derivative inside the primal (Snippets 21–23) | drivers over [`Tracer`]: captured, never confused |
//!
//! # Generic code and constants
//!
//! In code generic over `T: Real`, write constants on the right (`x * 2.0`)
//! or lift them with [`Real::cst`]; see [`Real`] for why `2.0 * x` cannot be
//! offered generically.
//!
//! # Cargo features
//!
//! - `argmin`: the module `argmin_interop`, problems for the argmin
//!   optimisers (cost, gradient and a matrix-free Hessian for Newton-CG)
//!   from one generic function.
//! - `gemm` (default): matrix products on `f64` by faer's blocked GEMM
//!   (without it, the crate's own dot products).
//! - `faer`: the module `faer_interop`, faer columns and matrices in and out of the
//!   drivers (dense Hessians and Jacobians as `faer::Mat`); implies `gemm`.
//! - `serde`: `Serialize`/`Deserialize` for scalar and array programs.
//! - `jit`: the native backend: `f64` programs and loop and map bodies
//!   compiled to machine code with Cranelift, once they run often.
//!
//! # Errors, panics, NaN
//!
//! Public functions return [`Result`] with [`Error`]; none panics on bad
//! input. Values follow IEEE 754 and NaN propagates; derived programs keep
//! *structural* zeros exact (see [`Builder`]). Comparisons made while
//! tracing become guards; where one fails, a raw program returns
//! [`Error::GuardFailed`] and the compiled drivers re-trace.
// The one exception is the native backend (`program::native`, feature
// `jit`), which calls the machine code it generates.
#![deny(unsafe_code)]
// On docs.rs, each item behind a feature is marked with it.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

#[cfg(feature = "argmin")]
pub mod argmin_interop;
pub mod array;
mod backend;
pub mod differentiable;
mod drivers;
mod error;
#[cfg(feature = "faer")]
pub mod faer_interop;
mod float;
pub mod functor;
mod loops;
pub mod optic;
pub mod prelude;
mod program;
mod real;
pub mod rules;

pub use backend::{Executable, Registers};
pub use differentiable::{leaf_names, Carry, Differentiable, Leaves, Point, Rebuild, Tangent};
pub use drivers::{
    d3, derivative, derivative_with_error, gradient, hessian, hvp, jacobian, jvp, pullback, taylor,
    value_and_gradient, vjp, Derivatives, Directional, Gradient, Hvp, IntoTraced, LeafFunction,
    OnArray, OnPoint, Pullback,
};
pub use error::{Error, Malformation, Result, RuleMisuse};
pub use functor::{nest, reverse, Nested, ReverseOptic};
pub use loops::{fold, fold_with, scan, scan_with, while_loop, while_loop_with, Checkpoints};
pub use program::{
    split_stages, trace, Args, Builder, Guard, Op, Program, Stage, Staged, StagedWorkspace, Tracer,
    Var, Workspace, MAX_ARITY, MAX_RULES,
};
pub use real::Real;
pub use rules::{CustomRule, Prim, Rule, ScalarRule};

/// The crate's type-level numbers, re-exported so that orders can be named
/// without a dependency of your own: `optic_ad::typenum::U3` in
/// `derivative::<U3, _, _>`.
pub use typenum;

/// The fixed-size arrays the typed drivers return (`derivative::<N>`
/// returns a `GenericArray<f64, N + 1>`), re-exported for naming them.
pub use generic_array;

/// `#[derive(Differentiable)]` (feature `derive`, on by default): see
/// [`differentiable`].
#[cfg(feature = "derive")]
pub use optic_ad_derive::Differentiable;

#[cfg(doctest)]
mod book;
