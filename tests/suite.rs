//! The integration tests, as one test binary: each file of `tests/` is a
//! module of it (`cargo test --test suite <module>::` runs one file's
//! tests). One binary links the crate once, where a binary per file linked
//! it once per file; files that need a feature are compiled with it only.

mod common;
mod nested_data;

// Examples that several test files check, compiled once.
#[allow(dead_code)]
#[path = "../examples/rrule.rs"]
mod rrule;
// `dense_newton` (checked in `faer_tests`) includes it again for itself.
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../examples/newton_cg/model.rs"]
mod model;

#[cfg(feature = "count-allocations")]
mod allocations;

mod architecture;

#[cfg(feature = "argmin")]
#[path = "argmin.rs"]
mod argmin_tests;

mod array_table;

mod arrays;

mod build;

mod doc_references;

mod drivers;

mod elementary;

mod examples;

#[cfg(feature = "faer")]
#[path = "faer.rs"]
mod faer_tests;

mod functor_laws;

#[cfg(feature = "serde")]
mod fuzz;

mod hardening;

mod higher_order;

mod law_checkers;

mod lens_laws;

mod loops;

mod main_job;

#[path = "minimal_surface.rs"]
mod minimal_surface_tests;

#[cfg(feature = "jit")]
mod native;

mod nesting;

mod num_dual_scalars;

#[path = "num_traits.rs"]
mod num_traits_float;

mod optic_laws;

mod orders;

#[path = "peng_robinson.rs"]
mod peng_robinson_tests;

mod primitive_table;

mod registers;

mod review;

mod scalar_loops;

#[cfg(feature = "serde")]
#[path = "serde.rs"]
mod serde_programs;

mod structured;

mod taylor;

mod taylor_accuracy;

mod taylor_closed_forms;

mod user_rules;
