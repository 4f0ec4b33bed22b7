//! The crate's one error type.

use std::cmp::Ordering;

/// Everything that can go wrong when tracing, transforming or evaluating a
/// program, or when calling a driver.
///
/// No public function of this crate panics on bad input; it returns one of
/// these instead.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument had the wrong length.
    #[error("length mismatch for {what}: expected {expected}, got {got}")]
    LengthMismatch {
        /// Which argument.
        what: &'static str,
        /// The length the program or driver needs.
        expected: usize,
        /// The length that was passed.
        got: usize,
    },
    /// A driver was given an empty point (a function of no variables).
    #[error("empty input: {0} needs at least one variable")]
    EmptyInput(&'static str),
    /// A comparison recorded while tracing gives a different answer at the
    /// point being evaluated: the program no longer describes the function
    /// there. Drivers re-trace on this error; a raw [`crate::Program`]
    /// returns it.
    #[error(
        "guard {index} no longer holds: traced as {traced:?}, now {now:?} (re-trace at the new point)"
    )]
    GuardFailed {
        /// Index of the guard in the program.
        index: usize,
        /// The ordering recorded while tracing (`None`: unordered, a NaN).
        traced: Option<Ordering>,
        /// The ordering at the new point.
        now: Option<Ordering>,
    },
    /// A traced value was used in a trace it does not belong to and that
    /// could not capture it: it escaped from a finished trace, or it was
    /// created with no trace active. This is how perturbation confusion is
    /// detected (seed 000, Snippets 21–23).
    #[error("a traced value from trace {trace} was used where that trace is not active (escaped tracer or perturbation confusion)")]
    ForeignTracer {
        /// Identifier of the trace the value belongs to.
        trace: u32,
    },
    /// A function closed over traced values of an enclosing trace, but was
    /// differentiated with a scalar type that cannot carry them (only
    /// tracers can).
    #[error("the traced function captured {0} value(s) of an enclosing trace; differentiate it with tracer arguments")]
    CapturedOutsideTrace(usize),
    /// A program's block layout does not match what a transform needs.
    #[error("program layout: {0}")]
    Layout(String),
    /// An output of a nested program depends on a later closure's input, so
    /// the program cannot be split into nested closures (DESIGN.md §3).
    #[error("output block {output} depends on input block {input}, which comes after it")]
    NotCausal {
        /// Output block index.
        output: usize,
        /// Input block index it depends on.
        input: usize,
    },
    /// A program refers to a user-defined rule it does not carry (for
    /// example after deserialisation).
    #[error("program refers to custom rule {0}, which it does not carry")]
    MissingRule(usize),
}

/// Shorthand for `Result<T, optic_ad::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
