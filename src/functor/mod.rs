//! Functors on programs (the *transform* step of the book's introduction):
//! ∂⃖, the reverse-mode AD optic functor (K. Fischer, "∂P.jl terminology and
//! notation guide", §VI), its repetition ∂⃖ᴺ in the nested-closure encoding
//! (§VII.B), and ∂⃗, the forward-mode pushforward (§IV).

pub(crate) mod dual;
pub(crate) mod forward;
pub(crate) mod jet_program;
pub(crate) mod kind;
pub mod laws;
pub(crate) mod nested;
pub(crate) mod reverse;
pub(crate) mod taylor;

pub use crate::program::{split_stages, Stage};
pub use forward::forward;
pub(crate) use kind::sealed::Sealed as ProgramKindSealed;
pub use nested::{
    nest, nested_derivatives, Closures, Level, MaxOrder, Nested, ProgramKind, MAX_NESTED_LEN,
    MAX_ORDER,
};
pub use reverse::{reverse, reverse_joint, ReverseOptic};
pub use taylor::{MaxTaylorOrder, TaylorProgram, ERROR_SAMPLES, MAX_TAYLOR_ORDER};
