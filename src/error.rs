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
    /// detected (K. Fischer, "∂P.jl terminology and notation guide",
    /// Snippets 21–23).
    #[error("a traced value from trace {trace} was used where that trace is not active (escaped tracer or perturbation confusion)")]
    ForeignTracer {
        /// Identifier of the trace the value belongs to.
        trace: u64,
    },
    /// A function closed over traced values of an enclosing trace, but was
    /// differentiated with a scalar type that cannot carry them (only
    /// tracers can).
    #[error("the traced function captured {0} value(s) of an enclosing trace; differentiate it with tracer arguments")]
    CapturedOutsideTrace(usize),
    /// A derivative order above what the nested-closure encoding supports
    /// (its bundle has 2ᴺ − 1 closures); checked before anything is built.
    #[error("order {order} is above the highest supported order {max}")]
    OrderTooHigh {
        /// The order asked for.
        order: usize,
        /// The highest supported order.
        max: usize,
    },
    /// Nesting ∂⃖ once more would build a program larger than
    /// [`crate::functor::MAX_NESTED_LEN`] instructions (a lower-bound
    /// estimate: each level at least doubles the program); refused before
    /// it is built.
    #[error("the nested program would have at least {estimate} instructions, above {max}")]
    ProgramTooLarge {
        /// The lower-bound estimate of the program's size.
        estimate: usize,
        /// The limit.
        max: usize,
    },
    /// A program's block layout does not match what a transform needs.
    #[error("program layout: {0}")]
    Layout(String),
    /// An output of a nested program depends on a later closure's input, so
    /// the program cannot be split into nested closures (see the book's
    /// chapter "Higher order and the nested-closure encoding").
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
    /// A user rule's pullback misused the builder it was given: it returned
    /// the wrong number of values, a value that is not of that builder,
    /// declared an input, or applied a rule the builder does not know.
    /// Every program derived through such a pullback reports this error
    /// when it is evaluated or finished, instead of a wrong derivative.
    #[error("user rule `{rule}`: its pullback {misuse}")]
    BadRule {
        /// The rule's name.
        rule: String,
        /// What it did.
        misuse: RuleMisuse,
    },
}

/// How a user rule's pullback misused its builder ([`Error::BadRule`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RuleMisuse {
    /// It returned this many values, not one per argument.
    WrongCount(usize),
    /// It returned a value that is not a value of its builder.
    ForeignValue,
    /// It declared an input of the builder.
    DeclaredInput,
    /// It applied a user rule that its builder does not have.
    UnknownRule,
    /// It pushed an instruction with an operand that is not a value of its
    /// builder, or with the wrong number of operands.
    Malformed,
}

impl std::fmt::Display for RuleMisuse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuleMisuse::WrongCount(n) => write!(f, "returned {n} values, not one per argument"),
            RuleMisuse::ForeignValue => f.write_str("returned a value of another builder"),
            RuleMisuse::DeclaredInput => f.write_str("declared an input of its builder"),
            RuleMisuse::UnknownRule => f.write_str("applied a rule its builder does not have"),
            RuleMisuse::Malformed => f.write_str("pushed a malformed instruction"),
        }
    }
}

/// Shorthand for `Result<T, optic_ad::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
