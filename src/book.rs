//! The book's chapters, compiled as doctests so that every Rust block in
//! `book/src` is tested by `cargo test`.

#[doc = include_str!("../book/src/introduction.md")]
mod introduction {}

#[doc = include_str!("../book/src/getting_started.md")]
mod getting_started {}

#[doc = include_str!("../book/src/architecture.md")]
mod architecture {}

#[doc = include_str!("../book/src/optics.md")]
mod optics {}

#[doc = include_str!("../book/src/functor.md")]
mod functor {}

#[doc = include_str!("../book/src/programs.md")]
mod programs {}

#[doc = include_str!("../book/src/rules.md")]
mod rules {}

#[doc = include_str!("../book/src/higher_order.md")]
mod higher_order {}

#[doc = include_str!("../book/src/taylor.md")]
mod taylor {}

#[doc = include_str!("../book/src/drivers.md")]
mod drivers {}

#[doc = include_str!("../book/src/your_types.md")]
mod your_types {}

#[doc = include_str!("../book/src/arrays.md")]
mod arrays {}

#[doc = include_str!("../book/src/loops.md")]
mod loops {}

// Its blocks use faer: tested with `--features faer` (or `--all-features`,
// the README's test command).
#[cfg(feature = "faer")]
#[doc = include_str!("../book/src/interop.md")]
mod interop {}

#[doc = include_str!("../book/src/peng_robinson.md")]
mod peng_robinson {}

#[doc = include_str!("../book/src/minimal_surface.md")]
mod minimal_surface {}

#[doc = include_str!("../README.md")]
mod readme {}

// Its blocks use argmin: tested with `--features argmin` (or
// `--all-features`, the README's test command).
#[cfg(feature = "argmin")]
#[doc = include_str!("../book/src/argmin.md")]
mod argmin {}
