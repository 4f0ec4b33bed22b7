//! Programs: the SSA intermediate representation, tracing, the interpreter,
//! passes and printing (DESIGN.md §2, layer 3).

pub(crate) mod eval;
mod fmt;
pub(crate) mod ir;
mod passes;
pub(crate) mod trace;

pub use eval::Workspace;
pub use ir::{Builder, Guard, Op, OperandIter, Program, Var};
pub use trace::{trace, Tracer};
