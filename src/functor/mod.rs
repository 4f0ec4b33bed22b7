//! Functors on programs (DESIGN.md §2, layer 5): ∂⃖, the reverse-mode AD
//! optic functor (seed 000 §VI), its repetition ∂⃖ᴺ in the nested-closure
//! encoding (§VII.B), and ∂⃗, the forward-mode pushforward (§IV).

pub(crate) mod dual;
mod forward;
pub mod laws;
pub(crate) mod nested;
pub(crate) mod reverse;

pub use crate::program::{split_stages, Stage};
pub use forward::forward;
pub use nested::{nest, Closures, Level, MaxOrder, Nested, MAX_NESTED_LEN, MAX_ORDER};
pub use reverse::{reverse, reverse_joint, ReverseOptic};
