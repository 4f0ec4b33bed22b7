//! What the functors and the nested-closure encoding need of a kind of
//! program: [`ProgramKind`], implemented for scalar and array programs.

use crate::error::Result;

/// A kind of program that the nested-closure encoding applies to: scalar
/// [`Program`](crate::Program)s (inputs and outputs are numbers) and
/// [`ArrayProgram`](crate::array::ArrayProgram)s (inputs and outputs are
/// arrays). [`crate::nest`], [`crate::Nested`], [`crate::functor::Level`],
/// [`crate::functor::forward`], [`crate::functor::reverse_joint`] and
/// [`crate::functor::TaylorProgram`] are written once over it.
/// Sealed: the crate implements it for those two.
pub trait ProgramKind: Clone + std::fmt::Debug + sealed::Sealed {
    /// A block of closure inputs as a caller gives it: `&[f64]` for a
    /// scalar program, one slice per array (`&[&[f64]]`) for an array
    /// program.
    type Block<'a>: Copy;
    /// A block of closure outputs as returned: `Vec<f64>`, or one vector
    /// per array.
    type Values;
    /// The planned stages of a bundle and the buffers they run in.
    #[doc(hidden)]
    type Stages: Clone + std::fmt::Debug;
    /// What [`crate::functor::forward`] and
    /// [`crate::functor::reverse_joint`] return for this kind: the
    /// [`Program`](crate::Program) itself for a scalar program (the transforms cannot
    /// fail), `Result<ArrayProgram>` for an array program (a shape rule
    /// that refuses is reported, not a panic).
    type Derived;
    /// The Taylor program's program, degree and buffers
    /// ([`crate::functor::TaylorProgram`]).
    #[doc(hidden)]
    type Jets: Clone + std::fmt::Debug;

    /// ∂⃗ of the program.
    #[doc(hidden)]
    fn forward_kind(&self) -> Self::Derived;
    /// The joint program of ∂⃖.
    #[doc(hidden)]
    fn reverse_joint_kind(&self) -> Self::Derived;

    /// The Taylor program of degree `degree` (at most
    /// [`crate::functor::MAX_TAYLOR_ORDER`], checked by the caller).
    #[doc(hidden)]
    fn taylor_jets(&self, degree: usize) -> Result<Self::Jets>;
    /// The degree of a Taylor program.
    #[doc(hidden)]
    fn jets_degree(jets: &Self::Jets) -> usize;
    /// The program of a Taylor program.
    #[doc(hidden)]
    fn jets_program(jets: &Self::Jets) -> &Self;

    /// The number of inputs and of outputs (numbers, or arrays).
    #[doc(hidden)]
    fn io(&self) -> (usize, usize);
    /// The instructions a nesting level copies (map bodies included).
    #[doc(hidden)]
    fn nested_len(&self) -> usize;
    /// ∂⃖ as one joint program whose input blocks (of `in_w` and then
    /// `out_w` entries: `[x…, ȳ…]`) and output blocks (`out_w`, then
    /// `in_w`) are taken in the order `perm`.
    #[doc(hidden)]
    fn joint_ordered(&self, in_w: &[usize], out_w: &[usize], perm: &[usize]) -> Result<Self>;
    /// The program as the order-0 bundle.
    #[doc(hidden)]
    fn order_zero(&self) -> Self;
    /// Plans the stages of `bundle`, the order-`order` bundle of a program
    /// with `io` inputs and outputs.
    #[doc(hidden)]
    fn plan(bundle: Self, io: (usize, usize), order: usize) -> Result<Self::Stages>;
    /// Runs stage `k` of the bundle on its own inputs.
    #[doc(hidden)]
    fn run_stage(
        stages: &mut Self::Stages,
        k: usize,
        given: Self::Block<'_>,
    ) -> Result<Self::Values>;
}

pub(crate) mod sealed {
    /// Only the crate's program kinds implement
    /// [`ProgramKind`](super::ProgramKind).
    pub trait Sealed {}
}
