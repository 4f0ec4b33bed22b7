//! Programs: the SSA intermediate representation, tracing, the interpreter,
//! passes, staging and printing (layers 1, 4 and 6 of the architecture
//! chapter). The backends that run programs on `f64` are in
//! `crate::backend`.

pub(crate) mod custom;
pub(crate) mod eval;
pub(crate) mod fmt;
pub(crate) mod ir;
pub(crate) mod op;
pub(crate) mod passes;
pub(crate) mod staging;
pub(crate) mod trace;

pub use eval::Workspace;
pub use ir::{Args, Builder, Guard, Program, Var, MAX_ARITY, MAX_RULES};
pub(crate) use ir::{Instr, OptVar};
pub use op::Op;
pub(crate) use passes::{block_starts, live_from, Seed};
pub use staging::{split_stages, Stage, Staged, StagedWorkspace};
pub use trace::{trace, Tracer};
