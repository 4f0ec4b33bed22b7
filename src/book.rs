//! The book's chapters, compiled as doctests so that every Rust block in
//! `book/src` is tested by `cargo test`.

#[doc = include_str!("../book/src/optics.md")]
mod optics {}
