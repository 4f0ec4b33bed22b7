//! Programs: the SSA intermediate representation, tracing, the interpreter,
//! passes, staging and printing (layer 3 of the architecture chapter).

pub(crate) mod custom;
pub(crate) mod eval;
pub(crate) mod fmt;
pub(crate) mod ir;
#[cfg(feature = "jit")]
pub(crate) mod native;
mod op;
mod passes;
pub(crate) mod registers;
pub(crate) mod staging;
pub(crate) mod trace;

pub use eval::Workspace;
pub use ir::{Args, Builder, Guard, Program, Var, MAX_ARITY, MAX_RULES};
pub(crate) use ir::{Instr, OptVar};
pub use op::Op;
pub(crate) use passes::{block_starts, live_from, Seed};
pub use registers::Registers;
pub use staging::{split_stages, Stage, Staged, StagedWorkspace};
pub use trace::{trace, Tracer};
