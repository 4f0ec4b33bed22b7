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
    /// An array operation got a value of the wrong shape (a scalar where a
    /// vector is needed, vectors of different lengths in one map, a
    /// program output that does not fit the next program's input).
    #[error("shape mismatch for {what}: expected {expected}, got {got}")]
    ShapeMismatch {
        /// Which operation or argument.
        what: &'static str,
        /// The shape it needed.
        expected: crate::array::Shape,
        /// The shape it got.
        got: crate::array::Shape,
    },
    /// A direction (or another second point) given with a structured point
    /// has another structure than the point: a `Vec` field of another
    /// length, a different type of point. Also returned if a hand-written
    /// [`crate::Differentiable`] implementation rebuilds a different
    /// number of leaves than it flattens.
    #[error("structure mismatch for {what}: it does not have the point's fields and lengths")]
    StructureMismatch {
        /// Which argument.
        what: &'static str,
    },
    /// An [`crate::array::ArrayWorkspace`] was given a program other than
    /// the one it was made for (its buffers are planned for that one).
    #[error("this array workspace was made for another program: make one with ArrayWorkspace::new(&program)")]
    WorkspaceMismatch,
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
    /// A traced value made while no trace was active (say `Tracer::cst(c)`
    /// called before any driver, or an array made outside
    /// `array::trace`) reached a trace. It belongs to no trace and carries
    /// no value. Make constants inside the traced function, or pass plain
    /// `f64` values.
    #[error("a traced value was made while no trace was active (e.g. Tracer::cst before any trace): it belongs to no trace; make constants inside the traced function, or pass f64 values")]
    TracerWithoutTrace,
    /// A function closed over traced values of an enclosing trace, but was
    /// differentiated at a point of a scalar type that cannot carry them
    /// (only tracers can): typically an inner driver given an `f64` point
    /// inside another driver's closure. The answer would depend on the
    /// enclosing trace's values, which an `f64` result cannot. Pass the
    /// point as tracers: values of the enclosing trace, or constants made
    /// with `Tracer::cst`. Compiled drivers ([`crate::Gradient`],
    /// [`crate::Hvp`], [`crate::Derivatives`]) keep their program across
    /// traces, so their closures may not capture tracers at all: call the
    /// one-shot drivers inside a trace, or the compiled drivers'
    /// `eval_at`/`hvp_at` on tracer points.
    #[error("the traced function captured {0} value(s) of an enclosing trace, which an f64 point cannot carry: pass the point as tracers (values of the enclosing trace, or Tracer::cst(c))")]
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
    /// A buffer of this many values could not be allocated (the memory is
    /// not there, or the size overflows). Returned before anything is
    /// written, instead of aborting the process.
    #[error("{what}: could not allocate {elements} values")]
    AllocationFailed {
        /// What the buffer was for.
        what: &'static str,
        /// The number of values asked for.
        elements: usize,
    },
    /// [`crate::Hvp::apply`] was called with no successful
    /// [`crate::Hvp::linearize`] since the `Hvp` was built or since the
    /// last `linearize` failed: there is no point to apply the Hessian at.
    #[error("Hvp::apply needs a successful Hvp::linearize first")]
    NotLinearized,
    /// A univariate driver or transform was given a program that is not a
    /// scalar function of one variable.
    #[error(
        "{what} needs a scalar function of one variable, got {inputs} inputs and {outputs} outputs"
    )]
    NotUnivariate {
        /// Which function or transform.
        what: &'static str,
        /// The program's number of inputs.
        inputs: usize,
        /// The program's number of outputs.
        outputs: usize,
    },
    /// A derived program lacks an output block that a driver reads. The
    /// drivers build these programs themselves, so this is never expected:
    /// it would be a bug in this crate, reported instead of a panic.
    #[error("output block {block} of width {width} is missing")]
    MissingBlock {
        /// Index of the output block.
        block: usize,
        /// The width the driver needs.
        width: usize,
    },
    /// An index argument is out of range.
    #[error("{what}: index {index} is out of range for length {len}")]
    IndexOutOfRange {
        /// Which argument.
        what: &'static str,
        /// The index that was passed.
        index: usize,
        /// The number of valid indices.
        len: usize,
    },
    /// An argument that must be a permutation of `0..len` is not.
    #[error("{what} is not a permutation of 0..{len}")]
    NotAPermutation {
        /// Which argument.
        what: &'static str,
        /// The length of the permuted sequence.
        len: usize,
    },
    /// A program is not well formed ([`crate::Program::validate`]): a
    /// deserialised program with bad data, or one assembled by hand with
    /// [`crate::Builder::push`].
    #[error("malformed program: {0}")]
    Malformed(Malformation),
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
    /// The code asks for something this release does not do (named in the
    /// message, with what to do instead where there is a way), rather than
    /// a wrong or partial answer.
    #[error("not supported: {0}")]
    Unsupported(&'static str),
    /// A program refers to a user-defined rule it does not carry (for
    /// example after deserialisation).
    #[error("program refers to custom rule {0}, which it does not carry")]
    MissingRule(usize),
    /// A program's rule table would hold more than [`crate::MAX_RULES`]
    /// distinct user rules (their index is stored in 16 bits of each
    /// instruction). Register one [`crate::CustomRule`] and apply it many
    /// times instead of making a new one per application.
    #[error("more than {max} distinct user rules in one program")]
    TooManyRules {
        /// The most a program holds.
        max: usize,
    },
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

/// How a program is malformed ([`Error::Malformed`]); the first problem
/// [`crate::Program::validate`] finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Malformation {
    /// More inputs than instructions (every input is an instruction).
    TooManyInputs {
        /// The declared number of inputs.
        inputs: usize,
        /// The number of instructions.
        instructions: usize,
    },
    /// An input instruction with an index out of range or already used.
    BadInput {
        /// The instruction.
        instruction: usize,
        /// Its input index.
        input: usize,
    },
    /// A primitive or rule applied to the wrong number of operands.
    Arity {
        /// The instruction.
        instruction: usize,
        /// The number of operands the primitive or rule takes.
        expected: usize,
        /// The number it was given.
        got: usize,
    },
    /// An instruction uses its own value or a later one (not SSA order).
    LaterValue {
        /// The instruction.
        instruction: usize,
    },
    /// A declared input has no input instruction.
    MissingInput,
    /// An output or guard refers past the last instruction.
    DanglingReference,
    /// The input or output block widths do not add up to the number of
    /// inputs or outputs.
    Blocks,
    /// An array operation whose name is not in the crate's primitive table
    /// (a deserialised array program; operations a user defines are not
    /// serialised).
    UnknownOperation {
        /// The instruction.
        instruction: usize,
    },
    /// An array operation's parameters do not fit the operation (a
    /// deserialised array program), or an instruction that must follow
    /// another does not (a map's second output after anything but the map).
    Parameters {
        /// The instruction.
        instruction: usize,
    },
}

impl std::fmt::Display for Malformation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Malformation::TooManyInputs {
                inputs,
                instructions,
            } => write!(f, "{inputs} inputs but only {instructions} instructions"),
            Malformation::BadInput { instruction, input } => {
                write!(
                    f,
                    "instruction {instruction}: bad or repeated input {input}"
                )
            }
            Malformation::Arity {
                instruction,
                expected,
                got,
            } => write!(
                f,
                "instruction {instruction} takes {expected} operands, got {got}"
            ),
            Malformation::LaterValue { instruction } => {
                write!(f, "instruction {instruction} uses a later value")
            }
            Malformation::MissingInput => f.write_str("an input has no instruction"),
            Malformation::DanglingReference => {
                f.write_str("an output or guard refers past the end")
            }
            Malformation::Blocks => f.write_str("blocks do not add up"),
            Malformation::UnknownOperation { instruction } => write!(
                f,
                "instruction {instruction} is an array operation not in the primitive table"
            ),
            Malformation::Parameters { instruction } => write!(
                f,
                "instruction {instruction} has parameters or a position its operation does not take"
            ),
        }
    }
}

/// Shorthand for `Result<T, optic_ad::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `Ok` when a length is the expected one, else [`Error::LengthMismatch`]
/// naming `what` (the check every public entry point makes on its slices).
pub(crate) fn check_len(what: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected != got {
        Err(Error::LengthMismatch {
            what,
            expected,
            got,
        })
    } else {
        Ok(())
    }
}

/// `len` copies of `value` in a new vector, or
/// [`Error::AllocationFailed`] where the memory cannot be had (instead of
/// the abort of `vec![value; len]`).
pub(crate) fn try_filled<T: Clone>(what: &'static str, len: usize, value: T) -> Result<Vec<T>> {
    let mut v = Vec::new();
    grow_to(what, &mut v, len, value)?;
    Ok(v)
}

/// Resizes `v` to `len` elements (new ones `value`), or
/// [`Error::AllocationFailed`] where the memory cannot be had.
pub(crate) fn grow_to<T: Clone>(
    what: &'static str,
    v: &mut Vec<T>,
    len: usize,
    value: T,
) -> Result<()> {
    if len > v.len() {
        v.try_reserve_exact(len - v.len())
            .map_err(|_| Error::AllocationFailed {
                what,
                elements: len,
            })?;
    }
    v.resize(len, value);
    Ok(())
}

/// The error for a traced value of trace `trace` used where that trace is
/// not active: [`Error::TracerWithoutTrace`] for a value made with no
/// trace active (identifier 0), [`Error::ForeignTracer`] otherwise.
pub(crate) fn foreign_tracer(trace: u64) -> Error {
    if trace == 0 {
        Error::TracerWithoutTrace
    } else {
        Error::ForeignTracer { trace }
    }
}
