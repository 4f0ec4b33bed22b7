//! optic-ad: higher-order, nested automatic differentiation built on optics.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod optic;
