//! The SSA intermediate representation: a flat instruction stream.

use rustc_hash::{FxHashMap, FxHashSet};
use std::cmp::Ordering;

use super::custom::CustomRule;
use crate::error::{Error, Malformation};
use crate::rules::{opcode, Prim};

/// An SSA value: the result of the instruction at this index of a
/// [`Program`] or [`Builder`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Var(pub(crate) u32);

impl Var {
    /// The index of the instruction that defines this value.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A value or none, in four bytes (`Option<Var>` takes eight): the
/// transforms keep one per instruction (a cotangent, a tangent), so the
/// size counts at millions of instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OptVar(u32);

impl OptVar {
    /// No value.
    pub(crate) const NONE: OptVar = OptVar(u32::MAX);

    /// The value `v`.
    #[inline(always)]
    pub(crate) fn some(v: Var) -> OptVar {
        OptVar(v.0)
    }

    /// As an `Option`.
    #[inline(always)]
    pub(crate) fn get(self) -> Option<Var> {
        (self.0 != u32::MAX).then_some(Var(self.0))
    }
}

impl From<Option<Var>> for OptVar {
    #[inline(always)]
    fn from(v: Option<Var>) -> OptVar {
        v.map_or(OptVar::NONE, OptVar::some)
    }
}

/// The most operands an instruction has (`select`, `mul_add` and `clamp`
/// have three; user rules may have up to this many).
pub const MAX_ARITY: usize = 3;

/// The operands of an instruction: up to [`MAX_ARITY`] values, stored
/// inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(try_from = "Vec<Var>", into = "Vec<Var>"))]
pub struct Args {
    len: u8,
    vars: [Var; MAX_ARITY],
}

impl Args {
    /// No operands.
    pub const EMPTY: Args = Args {
        len: 0,
        vars: [Var(0); MAX_ARITY],
    };

    /// The operands `x`; `None` if there are more than [`MAX_ARITY`].
    pub fn new(x: &[Var]) -> Option<Args> {
        if x.len() > MAX_ARITY {
            return None;
        }
        let mut vars = [Var(0); MAX_ARITY];
        vars[..x.len()].copy_from_slice(x);
        Some(Args {
            len: x.len() as u8,
            vars,
        })
    }

    /// The operands, in order.
    #[inline(always)]
    pub fn as_slice(&self) -> &[Var] {
        &self.vars[..self.len as usize]
    }

    /// Number of operands.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether there are no operands.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The same operands passed through `f` (unused slots stay canonical,
    /// so equal operand lists hash equally).
    #[inline]
    pub fn map(&self, mut f: impl FnMut(Var) -> Var) -> Args {
        let mut out = *self;
        for v in &mut out.vars[..self.len as usize] {
            *v = f(*v);
        }
        out
    }
}

#[cfg(feature = "serde")]
impl TryFrom<Vec<Var>> for Args {
    type Error = String;
    fn try_from(v: Vec<Var>) -> Result<Self, String> {
        Args::new(&v).ok_or_else(|| format!("{} operands; at most {MAX_ARITY}", v.len()))
    }
}

#[cfg(feature = "serde")]
impl From<Args> for Vec<Var> {
    fn from(a: Args) -> Vec<Var> {
        a.as_slice().to_vec()
    }
}

/// One instruction of a [`Program`].
///
/// Built-in primitives are named by [`Prim`], whose one definition each
/// (value, pullback, pushforward, printing) is in [`crate::rules`]; code
/// that walks programs asks the primitive, so this enum never grows with
/// the primitive set.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Op {
    /// The `k`-th input of the program.
    Input(u32),
    /// A constant. Serialised as a JSON number when finite, and as the
    /// string `"inf"`, `"-inf"` or `"nan:0x…"` (the bit pattern, so every
    /// NaN payload survives) otherwise, since JSON has no number for those.
    Const(#[cfg_attr(feature = "serde", serde(with = "constant_serde"))] f64),
    /// A built-in primitive applied to `args` (`prim.arity()` of them);
    /// `param` is its integer attribute (the exponent of `powi`, the order
    /// of `polygamma`; 0 for the others).
    Apply {
        /// The primitive.
        prim: Prim,
        /// Its integer attribute.
        param: i32,
        /// Its operands.
        args: Args,
    },
    /// A user-defined primitive: index into the program's rule table.
    Custom {
        /// Index of the rule in [`Program::custom_rules`].
        rule: u32,
        /// Its operands.
        args: Args,
    },
}

impl Op {
    /// The operands of this operation, in order.
    #[inline]
    pub fn operands(&self) -> &[Var] {
        match self {
            Op::Input(_) | Op::Const(_) => &[],
            Op::Apply { args, .. } | Op::Custom { args, .. } => args.as_slice(),
        }
    }

    /// The same operation with every operand passed through `f`.
    #[inline]
    pub fn map_operands(&self, f: impl FnMut(Var) -> Var) -> Op {
        match *self {
            Op::Input(k) => Op::Input(k),
            Op::Const(c) => Op::Const(c),
            Op::Apply { prim, param, args } => Op::Apply {
                prim,
                param,
                args: args.map(f),
            },
            Op::Custom { rule, args } => Op::Custom {
                rule,
                args: args.map(f),
            },
        }
    }

    /// The primitive, for an [`Op::Apply`].
    pub fn prim(&self) -> Option<Prim> {
        match *self {
            Op::Apply { prim, .. } => Some(prim),
            _ => None,
        }
    }
}

/// The stored form of one instruction: 16 bytes, no padding.
///
/// * `code`: the opcode, [`opcode::INPUT`], [`opcode::CONST`],
///   [`opcode::CUSTOM`], or a primitive's ([`opcode::of`]);
/// * `len`: the number of operands (0 for an input or a constant);
/// * `rule`: for a user rule, its index in the program's rule table;
/// * `args`: the operands, unused slots `Var(0)`. A primitive of fewer than
///   three operands keeps its integer attribute in the last slot; a
///   constant keeps its bits in the last two (low word first); an input its
///   number in the first.
///
/// Programs and builders store these; [`Op`] is the readable view the
/// public API hands out ([`Program::ops`]). Equal instructions have equal
/// bits (constants compare by bit pattern), which is what sharing needs.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Instr {
    pub(crate) code: u8,
    pub(crate) len: u8,
    pub(crate) rule: u16,
    pub(crate) args: [Var; MAX_ARITY],
}

const _: () = assert!(std::mem::size_of::<Instr>() == 16);

impl Instr {
    /// The `k`-th input.
    #[inline]
    pub(crate) const fn input(k: u32) -> Instr {
        Instr {
            code: opcode::INPUT,
            len: 0,
            rule: 0,
            args: [Var(k), Var(0), Var(0)],
        }
    }

    /// The constant `c` (kept by bit pattern).
    #[inline]
    pub(crate) fn constant(c: f64) -> Instr {
        let bits = c.to_bits();
        Instr {
            code: opcode::CONST,
            len: 0,
            rule: 0,
            args: [Var(0), Var(bits as u32), Var((bits >> 32) as u32)],
        }
    }

    /// `prim` with attribute `param` applied to `x`. Operands past
    /// [`MAX_ARITY`] are dropped (the count is kept, so the arity check
    /// reports them); a primitive of three operands has no attribute.
    #[inline]
    pub(crate) fn apply(prim: Prim, param: i32, x: &[Var]) -> Instr {
        let mut args = [Var(0); MAX_ARITY];
        let n = x.len().min(MAX_ARITY);
        args[..n].copy_from_slice(&x[..n]);
        if n < MAX_ARITY {
            args[MAX_ARITY - 1] = Var(param as u32);
        }
        Instr {
            code: opcode::of(prim),
            len: x.len().min(u8::MAX as usize) as u8,
            rule: 0,
            args,
        }
    }

    /// User rule `rule` applied to `x` (at most [`MAX_ARITY`] operands are
    /// kept; the count is, so the arity check reports the rest).
    #[inline]
    pub(crate) fn custom(rule: u16, x: &[Var]) -> Instr {
        let mut args = [Var(0); MAX_ARITY];
        let n = x.len().min(MAX_ARITY);
        args[..n].copy_from_slice(&x[..n]);
        Instr {
            code: opcode::CUSTOM,
            len: x.len().min(u8::MAX as usize) as u8,
            rule,
            args,
        }
    }

    /// The stored form of `op`. A user-rule index above `u16::MAX` (never a
    /// registered one: see [`MAX_RULES`]) becomes `u16::MAX`.
    pub(crate) fn of_op(op: &Op) -> Instr {
        match *op {
            Op::Input(k) => Instr::input(k),
            Op::Const(c) => Instr::constant(c),
            Op::Apply { prim, param, args } => Instr::apply(prim, param, args.as_slice()),
            Op::Custom { rule, args } => {
                Instr::custom(u16::try_from(rule).unwrap_or(u16::MAX), args.as_slice())
            }
        }
    }

    /// The readable view.
    pub(crate) fn op(&self) -> Op {
        let args = || Args::new(self.operands()).unwrap_or(Args::EMPTY);
        match self.code {
            opcode::INPUT => Op::Input(self.args[0].0),
            opcode::CONST => Op::Const(self.const_bits()),
            opcode::CUSTOM => Op::Custom {
                rule: u32::from(self.rule),
                args: args(),
            },
            _ => match self.prim() {
                Some(prim) => Op::Apply {
                    prim,
                    param: self.param(),
                    args: args(),
                },
                // Never stored: every opcode is one of the above.
                None => Op::Const(f64::NAN),
            },
        }
    }

    /// The operands, in order (none for an input or a constant).
    #[inline(always)]
    pub(crate) fn operands(&self) -> &[Var] {
        &self.args[..(self.len as usize).min(MAX_ARITY)]
    }

    /// The same instruction with every operand passed through `f` (the
    /// attribute and unused slots unchanged).
    #[inline(always)]
    pub(crate) fn map_operands(mut self, mut f: impl FnMut(Var) -> Var) -> Instr {
        let n = (self.len as usize).min(MAX_ARITY);
        for v in &mut self.args[..n] {
            *v = f(*v);
        }
        self
    }

    /// The primitive, for a primitive's instruction.
    #[inline(always)]
    pub(crate) fn prim(&self) -> Option<Prim> {
        Prim::of_opcode(self.code)
    }

    /// The integer attribute of a primitive (0 for one of three operands).
    #[inline(always)]
    pub(crate) fn param(&self) -> i32 {
        if self.len < MAX_ARITY as u8 {
            self.args[MAX_ARITY - 1].0 as i32
        } else {
            0
        }
    }

    /// The value of a constant's instruction, read from its bits.
    #[inline(always)]
    pub(crate) fn const_bits(&self) -> f64 {
        f64::from_bits(u64::from(self.args[1].0) | (u64::from(self.args[2].0) << 32))
    }

    /// The constant this instruction is, if it is one.
    #[inline(always)]
    pub(crate) fn as_const(&self) -> Option<f64> {
        (self.code == opcode::CONST).then(|| self.const_bits())
    }

    /// The input number, for an input's instruction.
    #[inline(always)]
    pub(crate) fn as_input(&self) -> Option<u32> {
        (self.code == opcode::INPUT).then_some(self.args[0].0)
    }

    /// The same instruction with the operands of `+` and `·` in the
    /// builder's canonical order, the lower value first (exact: both
    /// commute), so that equal sums and products are shared and print
    /// alike.
    #[inline(always)]
    pub(crate) fn canonical(mut self) -> Instr {
        if (self.code == opcode::of(Prim::Add) || self.code == opcode::of(Prim::Mul))
            && self.len == 2
            && self.args[0] > self.args[1]
        {
            self.args.swap(0, 1);
        }
        self
    }

    /// Whether this is an input.
    #[inline(always)]
    pub(crate) fn is_input(&self) -> bool {
        self.code == opcode::INPUT
    }

    /// Whether this is a constant.
    #[inline(always)]
    pub(crate) fn is_const(&self) -> bool {
        self.code == opcode::CONST
    }

    /// Whether this is a user rule's application.
    #[inline(always)]
    pub(crate) fn is_custom(&self) -> bool {
        self.code == opcode::CUSTOM
    }
}

impl std::fmt::Debug for Instr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.op().fmt(f)
    }
}

/// The most user rules one program's table holds, `65 535` (their index
/// is stored in 16 bits of each instruction); registering more is
/// [`Error::TooManyRules`].
pub const MAX_RULES: usize = u16::MAX as usize;

/// A comparison recorded while tracing: at the trace point,
/// `a.partial_cmp(b)` was `ordering`. A program is only valid where every
/// guard still holds (branches become guards: see the book's chapter "The
/// AD optic functor", section "Copy, delete, branch").
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Guard {
    /// Left operand.
    pub a: Var,
    /// Right operand.
    pub b: Var,
    /// The ordering seen at the trace point (`None`: a NaN was involved).
    #[cfg_attr(feature = "serde", serde(with = "ordering_serde"))]
    pub ordering: Option<Ordering>,
}

/// Serialises a constant losslessly: a number when finite, otherwise a
/// tagged string (`"inf"`, `"-inf"`, `"nan:0x7ff8000000000000"`).
#[cfg(feature = "serde")]
mod constant_serde {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Number(f64),
        Tagged(String),
    }

    pub fn serialize<S: Serializer>(c: &f64, s: S) -> Result<S::Ok, S::Error> {
        if c.is_finite() {
            Repr::Number(*c).serialize(s)
        } else if c.is_nan() {
            Repr::Tagged(format!("nan:{:#018x}", c.to_bits())).serialize(s)
        } else if *c > 0.0 {
            Repr::Tagged("inf".into()).serialize(s)
        } else {
            Repr::Tagged("-inf".into()).serialize(s)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Number(c) => Ok(c),
            Repr::Tagged(t) => match t.as_str() {
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                _ => t
                    .strip_prefix("nan:0x")
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
                    .map(f64::from_bits)
                    .filter(|c| c.is_nan())
                    .ok_or_else(|| {
                        serde::de::Error::custom(format!(
                            "constant {t:?} is not a number, \"inf\", \"-inf\" or \"nan:0x…\""
                        ))
                    }),
            },
        }
    }
}

/// Serialises an `Option<Ordering>` as `-1`, `0`, `1` or `null`.
#[cfg(feature = "serde")]
mod ordering_serde {
    use std::cmp::Ordering;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(o: &Option<Ordering>, s: S) -> Result<S::Ok, S::Error> {
        o.map(|o| o as i8).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Ordering>, D::Error> {
        match Option::<i8>::deserialize(d)? {
            None => Ok(None),
            Some(-1) => Ok(Some(Ordering::Less)),
            Some(0) => Ok(Some(Ordering::Equal)),
            Some(1) => Ok(Some(Ordering::Greater)),
            Some(k) => Err(serde::de::Error::custom(format!(
                "ordering {k} is not -1, 0 or 1"
            ))),
        }
    }
}

/// A straight-line SSA program with `n_inputs` scalar inputs and a list of
/// scalar outputs.
///
/// The value of instruction `i` is `Var(i)`; operands always refer to
/// earlier instructions. Programs are produced by tracing
/// ([`crate::trace`]), by the functor ([`crate::reverse`]) and by the
/// passes; they are evaluated by [`Program::eval`] over any [`crate::Real`].
///
/// Inputs and outputs are grouped into *blocks* (for example `x`, then the
/// cotangent of `y`); the block widths are kept so that transforms can
/// reorder them. A plain traced program has one input block and one output
/// block.
///
/// Instructions are stored in a compact form of 16 bytes each;
/// [`Program::ops`] reads them as [`Op`]s.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(try_from = "ProgramData", into = "ProgramData")
)]
pub struct Program {
    pub(crate) n_inputs: usize,
    pub(crate) code: Vec<Instr>,
    pub(crate) outputs: Vec<Var>,
    pub(crate) guards: Vec<Guard>,
    pub(crate) rules: Vec<CustomRule>,
    /// Set where a user rule's pullback misused its builder while this
    /// program (or one it was derived from) was built: evaluation returns
    /// it instead of running.
    pub(crate) defect: Option<Error>,
    /// The register code of the lowered `f64` evaluator, built on first use.
    pub(crate) registers: super::eval::Cache<super::registers::RegisterCode>,
    /// Native code (feature `jit`), compiled once hot.
    #[cfg(feature = "jit")]
    pub(crate) native: super::native::Native,
    pub(crate) input_blocks: Vec<usize>,
    pub(crate) output_blocks: Vec<usize>,
}

/// The serialised form of a [`Program`], with its instructions as [`Op`]s,
/// checked by [`Program::validate`] before it becomes one.
#[cfg(feature = "serde")]
#[derive(serde::Serialize, serde::Deserialize)]
struct ProgramData {
    n_inputs: usize,
    ops: Vec<Op>,
    outputs: Vec<Var>,
    guards: Vec<Guard>,
    input_blocks: Vec<usize>,
    output_blocks: Vec<usize>,
}

#[cfg(feature = "serde")]
impl From<Program> for ProgramData {
    fn from(p: Program) -> ProgramData {
        ProgramData {
            n_inputs: p.n_inputs,
            ops: p.ops().collect(),
            outputs: p.outputs,
            guards: p.guards,
            input_blocks: p.input_blocks,
            output_blocks: p.output_blocks,
        }
    }
}

#[cfg(feature = "serde")]
impl TryFrom<ProgramData> for Program {
    type Error = crate::error::Error;
    fn try_from(d: ProgramData) -> Result<Self, Self::Error> {
        // A user-rule index that does not fit the compact form is never a
        // carried rule (user rules are not serialised).
        if let Some(rule) = d.ops.iter().find_map(|op| match *op {
            Op::Custom { rule, .. } if rule >= MAX_RULES as u32 => Some(rule),
            _ => None,
        }) {
            return Err(Error::MissingRule(rule as usize));
        }
        let p = Program::from_parts(
            d.n_inputs,
            d.ops.iter().map(Instr::of_op).collect(),
            d.outputs,
            d.guards,
            Vec::new(),
            None,
            d.input_blocks,
            d.output_blocks,
        );
        p.validate()?;
        Ok(p)
    }
}

impl Program {
    /// A program from its parts, with empty caches.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_parts(
        n_inputs: usize,
        code: Vec<Instr>,
        outputs: Vec<Var>,
        guards: Vec<Guard>,
        rules: Vec<CustomRule>,
        defect: Option<Error>,
        input_blocks: Vec<usize>,
        output_blocks: Vec<usize>,
    ) -> Program {
        Program {
            n_inputs,
            code,
            outputs,
            guards,
            rules,
            defect,
            registers: Default::default(),
            #[cfg(feature = "jit")]
            native: Default::default(),
            input_blocks,
            output_blocks,
        }
    }

    /// The same program with other instructions and outputs (guards
    /// renumbered by the caller), every cache of the old instructions
    /// dropped.
    pub(crate) fn with_code(
        self,
        code: Vec<Instr>,
        outputs: Vec<Var>,
        guards: Vec<Guard>,
    ) -> Program {
        Program::from_parts(
            self.n_inputs,
            code,
            outputs,
            guards,
            self.rules,
            self.defect,
            self.input_blocks,
            self.output_blocks,
        )
    }

    /// Checks that the program is well formed: every operand refers to an
    /// earlier instruction, inputs are numbered below
    /// [`Program::n_inputs`] and each appears once, outputs and guards
    /// refer to instructions, blocks add up, and every user rule is carried.
    /// Programs built by this crate always are; a deserialised one is
    /// checked on loading.
    ///
    /// # Errors
    ///
    /// [`Error::Malformed`] describing the first problem found;
    /// [`Error::MissingRule`] for a user rule the program does not carry
    /// (user rules are not serialised).
    ///
    /// [`Error::Malformed`]: crate::Error::Malformed
    /// [`Error::MissingRule`]: crate::Error::MissingRule
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::{trace, Real};
    ///
    /// let p = trace(|x| vec![x[0].sin()], &[0.1]).unwrap();
    /// assert!(p.validate().is_ok());
    /// ```
    pub fn validate(&self) -> Result<(), crate::error::Error> {
        let n = self.code.len();
        // Every input is an instruction, so a larger count is bad data:
        // checked before anything of that size is allocated.
        if self.n_inputs > n {
            return Err(Error::Malformed(Malformation::TooManyInputs {
                inputs: self.n_inputs,
                instructions: n,
            }));
        }
        let mut seen = vec![false; self.n_inputs];
        for (i, ins) in self.code.iter().enumerate() {
            if let Some(k) = ins.as_input() {
                match seen.get_mut(k as usize) {
                    Some(s) if !*s => *s = true,
                    _ => {
                        return Err(Error::Malformed(Malformation::BadInput {
                            instruction: i,
                            input: k as usize,
                        }))
                    }
                }
            } else if ins.is_custom() {
                match self.rules.get(ins.rule as usize) {
                    None => return Err(Error::MissingRule(ins.rule as usize)),
                    Some(r) if r.arity() != ins.len as usize => {
                        return Err(Error::Malformed(Malformation::Arity {
                            instruction: i,
                            expected: r.arity(),
                            got: ins.len as usize,
                        }))
                    }
                    Some(_) => {}
                }
            } else if let Some(prim) = ins.prim() {
                if ins.len as usize != prim.arity() {
                    return Err(Error::Malformed(Malformation::Arity {
                        instruction: i,
                        expected: prim.arity(),
                        got: ins.len as usize,
                    }));
                }
            }
            if ins.operands().iter().any(|o| o.index() >= i) {
                return Err(Error::Malformed(Malformation::LaterValue {
                    instruction: i,
                }));
            }
        }
        if seen.iter().any(|s| !s) {
            return Err(Error::Malformed(Malformation::MissingInput));
        }
        let refs = self
            .outputs
            .iter()
            .chain(self.guards.iter().flat_map(|g| [&g.a, &g.b]));
        if refs.into_iter().any(|v| v.index() >= n) {
            return Err(Error::Malformed(Malformation::DanglingReference));
        }
        let sum = |w: &[usize]| w.iter().try_fold(0usize, |acc, &x| acc.checked_add(x));
        if sum(&self.input_blocks) != Some(self.n_inputs)
            || sum(&self.output_blocks) != Some(self.outputs.len())
        {
            return Err(Error::Malformed(Malformation::Blocks));
        }
        Ok(())
    }

    /// Number of scalar inputs.
    pub fn n_inputs(&self) -> usize {
        self.n_inputs
    }

    /// Number of scalar outputs.
    pub fn n_outputs(&self) -> usize {
        self.outputs.len()
    }

    /// Number of instructions (inputs and constants included).
    pub fn len(&self) -> usize {
        self.code.len()
    }

    /// Whether the program has no instructions.
    pub fn is_empty(&self) -> bool {
        self.code.is_empty()
    }

    /// The instruction stream, in order: instruction `i` defines the value
    /// `Var(i)`.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::{trace, Op, Prim, Real};
    ///
    /// let p = trace(|x| vec![x[0].sin()], &[0.1]).unwrap();
    /// let ops: Vec<Op> = p.ops().collect();
    /// assert_eq!(ops[0], Op::Input(0));
    /// assert_eq!(ops[1].prim(), Some(Prim::Sin));
    /// ```
    pub fn ops(&self) -> impl ExactSizeIterator<Item = Op> + DoubleEndedIterator + Clone + '_ {
        self.code.iter().map(Instr::op)
    }

    /// Instruction `i` (the definition of `Var(i)`), or `None` past the
    /// end.
    pub fn op(&self, i: usize) -> Option<Op> {
        self.code.get(i).map(Instr::op)
    }

    /// The output values, in order.
    pub fn outputs(&self) -> &[Var] {
        &self.outputs
    }

    /// The guards recorded while tracing.
    pub fn guards(&self) -> &[Guard] {
        &self.guards
    }

    /// Widths of the input blocks; they sum to [`Program::n_inputs`].
    pub fn input_blocks(&self) -> &[usize] {
        &self.input_blocks
    }

    /// Widths of the output blocks; they sum to [`Program::n_outputs`].
    pub fn output_blocks(&self) -> &[usize] {
        &self.output_blocks
    }

    /// The user-defined rules this program calls.
    pub fn custom_rules(&self) -> &[CustomRule] {
        &self.rules
    }
}

/// The constant a structural zero is written as: −0.0, because
/// `a + (−0) = a` holds exactly for every `a` in IEEE 754, so adding a
/// structural zero can always be folded away.
pub(crate) const STRUCTURAL_ZERO: f64 = -0.0;

/// Where the builder looks for an equal instruction pushed before
/// (common-subexpression elimination), laid out so that a look-up touches
/// memory near the values it involves.
///
/// An instruction with operands is filed under its *anchor*, its latest
/// operand that is not a constant (its latest operand if all are): the
/// first [`SLOTS`] instructions anchored at a value are
/// listed beside that value, and only later ones go to a hash table. A
/// look-up reads the anchor's slots and the few instructions they name,
/// all recently touched in a transform that walks the program in order
/// (or in reverse), instead of a random bucket of a table as large as the
/// program. Constants are shared through their own table: there are few
/// distinct ones. Every instruction is found again exactly as with one
/// table; only where the entries live differs.
#[derive(Debug, Default)]
struct Cse {
    /// For each value, the instructions anchored at it (`EMPTY` past the
    /// last), in the order they were pushed.
    slots: Vec<[u32; SLOTS]>,
    /// Anchored instructions beyond the first [`SLOTS`] of their anchor.
    overflow: FxHashMap<Instr, Var>,
    /// Constants, by bit pattern.
    consts: FxHashMap<u64, Var>,
}

/// Instructions listed beside their anchor before the overflow table is
/// used: most values anchor at most three (measured on the drivers'
/// derived programs).
const SLOTS: usize = 3;
/// An unused slot.
const EMPTY: u32 = u32::MAX;

/// Builds programs one instruction at a time, folding constants, removing
/// structural zeros and ones, and sharing common subexpressions.
///
/// Every rule's pullback is written against this builder, so a pullback is
/// itself a program and can be differentiated again. The simplifications
/// each primitive allows are part of its definition in [`crate::rules`].
///
/// # Structural zeros and NaN
///
/// The builder rewrites `x · 0 → 0`, `0 / x → 0` and `x − x → 0` without
/// looking at `x`. A zero produced this way is a *structural* zero (the
/// `Zero` of the ChainRules design notes): it means "no dependence", so a
/// derived program gives `0`, not `NaN`, where an infinite or NaN
/// intermediate meets a zero cotangent. It is written as the constant
/// `−0.0` ([`Builder::zero`]), because `a + (−0) = a` holds exactly for
/// every `a`: adding a structural zero is then folded away. Every other
/// rewrite is exact in IEEE 754 (`a + (−0) → a`, `a − (+0) → a`,
/// `(−0) − b → −b`, `a · 1 → a`, `a + (−b) → a − b`, `(−a)(−b) → ab`, …);
/// in particular a user's `x + 0.0` is kept, since `−0 + 0 = +0`. Values
/// that do flow follow IEEE 754.
///
/// # Example
///
/// ```
/// use optic_ad::Builder;
///
/// let mut b = Builder::new();
/// let x = b.input();
/// let s = b.sin(x);
/// let one = b.constant(1.0);
/// let y = b.mul(s, one); // folded: y is s
/// assert_eq!(y, s);
/// let p = b.finish(&[y]).unwrap();
/// assert_eq!(p.eval(&[0.5_f64]).unwrap()[0], 0.5_f64.sin());
/// ```
#[derive(Debug, Default)]
pub struct Builder {
    code: Vec<Instr>,
    n_inputs: usize,
    cse: Cse,
    guards: Vec<Guard>,
    /// The guards recorded, to record each once.
    guard_set: FxHashSet<(u32, u32, Option<Ordering>)>,
    rules: Vec<CustomRule>,
    /// The index of each registered rule, by [`CustomRule::id`].
    rule_index: FxHashMap<u64, u32>,
    defect: Option<Error>,
}

/// Builder methods for primitives, each a one-line call of
/// [`Builder::apply`].
macro_rules! builder_prims {
    ($($(#[$m:meta])* $name:ident($($a:ident),+) => $prim:expr;)*) => {
        $(
            $(#[$m])*
            pub fn $name(&mut self, $($a: Var),+) -> Var {
                self.apply($prim, 0, &[$($a),+])
            }
        )*
    };
}

impl Builder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty builder with room for about `n` instructions, so that a
    /// transform of known size does not reallocate as it grows (memory
    /// reserved but never written is not taken from the system).
    pub fn with_capacity(n: usize) -> Self {
        Builder {
            code: Vec::with_capacity(n),
            cse: Cse {
                slots: Vec::with_capacity(n),
                ..Cse::default()
            },
            ..Self::default()
        }
    }

    /// The instructions pushed so far.
    pub fn ops(&self) -> impl ExactSizeIterator<Item = Op> + DoubleEndedIterator + Clone + '_ {
        self.code.iter().map(Instr::op)
    }

    /// The instruction that defines `v`, or `None` if `v` is not (yet) a
    /// value of this builder.
    pub fn op(&self, v: Var) -> Option<Op> {
        self.code.get(v.index()).map(Instr::op)
    }

    /// The stored instructions pushed so far.
    #[inline]
    pub(crate) fn code(&self) -> &[Instr] {
        &self.code
    }

    /// Number of instructions pushed so far.
    pub fn len(&self) -> usize {
        self.code.len()
    }

    /// Whether no instruction has been pushed.
    pub fn is_empty(&self) -> bool {
        self.code.is_empty()
    }

    /// Number of inputs declared so far.
    pub fn n_inputs(&self) -> usize {
        self.n_inputs
    }

    /// Declares the next input.
    pub fn input(&mut self) -> Var {
        let k = self.n_inputs as u32;
        self.n_inputs += 1;
        self.raw(Instr::input(k))
    }

    /// Appends `ins` as it is: no folding, simplification or sharing.
    #[inline]
    fn raw(&mut self, ins: Instr) -> Var {
        let v = Var(self.code.len() as u32);
        self.code.push(ins);
        self.cse.slots.push([EMPTY; SLOTS]);
        v
    }

    /// `Some(a)` when `v` is `−a`. (`None` for a value not of this
    /// builder; [`Builder::finish`] reports those.)
    #[inline]
    pub(crate) fn negated(&self, v: Var) -> Option<Var> {
        match self.code.get(v.index()) {
            Some(ins) if ins.prim() == Some(Prim::Neg) && ins.len == 1 => Some(ins.args[0]),
            _ => None,
        }
    }

    /// The constant `v` holds, if it is one.
    #[inline]
    pub(crate) fn constant_of(&self, v: Var) -> Option<f64> {
        self.code.get(v.index()).and_then(Instr::as_const)
    }

    /// Whether `v` is the constant `−0.0` (a structural zero; the rewrites
    /// that drop it are exact in IEEE 754 only for this sign).
    pub(crate) fn is_neg_zero(&self, v: Var) -> bool {
        self.constant_of(v)
            .is_some_and(|k| k.to_bits() == STRUCTURAL_ZERO.to_bits())
    }

    /// Whether `v` is the constant `+0.0`.
    pub(crate) fn is_pos_zero(&self, v: Var) -> bool {
        self.constant_of(v)
            .is_some_and(|k| k.to_bits() == 0.0f64.to_bits())
    }

    /// Whether `v` is a structural zero.
    pub(crate) fn is_structural_zero(&self, v: Var) -> bool {
        self.is_neg_zero(v)
    }

    /// A constant.
    pub fn constant(&mut self, c: f64) -> Var {
        let next = Var(self.code.len() as u32);
        let v = *self.cse.consts.entry(c.to_bits()).or_insert(next);
        if v == next {
            self.raw(Instr::constant(c));
        }
        v
    }

    /// A structural zero: "no dependence" (see the type's docs). It is the
    /// constant `−0.0`; drivers normalise it to `+0.0` in their results.
    pub fn zero(&mut self) -> Var {
        self.constant(STRUCTURAL_ZERO)
    }

    /// Registers a user-defined rule and returns its index in this
    /// builder's rule table (the same rule is registered once).
    ///
    /// A table holds at most [`MAX_RULES`] rules: past that the builder
    /// records [`Error::TooManyRules`], which [`Builder::finish`] returns.
    pub fn register_rule(&mut self, rule: &CustomRule) -> u32 {
        if let Some(&i) = self.rule_index.get(&rule.id()) {
            return i;
        }
        if self.rules.len() >= MAX_RULES {
            self.poison(Error::TooManyRules { max: MAX_RULES });
            return MAX_RULES as u32;
        }
        let i = self.rules.len() as u32;
        self.rules.push(rule.clone());
        self.rule_index.insert(rule.id(), i);
        i
    }

    /// The rule table.
    pub fn rules(&self) -> &[CustomRule] {
        &self.rules
    }

    /// Records that what this builder builds is not valid (the first
    /// defect is kept): [`Builder::finish`] returns it, and every program
    /// finished or derived from here reports it when evaluated.
    pub(crate) fn poison(&mut self, e: Error) {
        if self.defect.is_none() {
            self.defect = Some(e);
        }
    }

    /// Removes everything pushed after the builder had `len` instructions
    /// and `n_inputs` inputs (what a misbehaving pullback added), so that
    /// the builder stays well formed.
    pub(crate) fn rollback(&mut self, len: usize, n_inputs: usize) {
        if len > self.code.len() || n_inputs > self.n_inputs {
            return;
        }
        // Slots are filled in push order, so the entries of removed
        // instructions are the tail of their anchor's slots.
        for i in len..self.code.len() {
            if let Some(&anchor) = self.code[i].operands().iter().max() {
                if let Some(s) = self.cse.slots.get_mut(anchor.index()) {
                    for e in s.iter_mut().filter(|e| **e == i as u32) {
                        *e = EMPTY;
                    }
                }
            }
        }
        self.code.truncate(len);
        self.cse.slots.truncate(len);
        self.n_inputs = n_inputs;
        self.cse.overflow.retain(|_, v| v.index() < len);
        self.cse.consts.retain(|_, v| v.index() < len);
        self.guards
            .retain(|g| g.a.index() < len && g.b.index() < len);
        self.guard_set
            .retain(|&(a, b, _)| (a as usize) < len && (b as usize) < len);
    }

    /// [`Error::Malformed`] for the first application of a user rule with
    /// the wrong number of operands (the arity check of
    /// [`Program::validate`], for the rule applications alone).
    pub(crate) fn custom_arity_error(&self) -> Option<Error> {
        if self.rules.is_empty() {
            return None;
        }
        self.code.iter().enumerate().find_map(|(i, ins)| {
            let r = self
                .rules
                .get(ins.rule as usize)
                .filter(|_| ins.is_custom())?;
            (r.arity() != ins.len as usize).then(|| {
                Error::Malformed(Malformation::Arity {
                    instruction: i,
                    expected: r.arity(),
                    got: ins.len as usize,
                })
            })
        })
    }

    /// Records a guard.
    pub fn guard(&mut self, a: Var, b: Var, ordering: Option<Ordering>) {
        if self.guard_set.insert((a.0, b.0, ordering)) {
            self.guards.push(Guard { a, b, ordering });
        }
    }

    /// Pushes an operation after simplification and CSE, returning the
    /// value that holds its result (possibly an existing one).
    ///
    /// A malformed operation (an operand that is not a value of this
    /// builder, the wrong number of operands, an unregistered rule) is
    /// recorded as it is, and [`Builder::finish`] reports it (a rule index
    /// of [`MAX_RULES`] or more, never a registered one, as
    /// [`Error::MissingRule`]`(MAX_RULES)`).
    pub fn push(&mut self, op: Op) -> Var {
        self.push_instr(Instr::of_op(&op))
    }

    /// [`Builder::push`] of the stored form.
    #[inline]
    pub(crate) fn push_instr(&mut self, ins: Instr) -> Var {
        if ins.is_const() {
            return self.constant(ins.const_bits());
        }
        if ins.is_input() {
            // Inputs are declared with `input`; `finish` reports this one.
            return self.raw(ins);
        }
        let x = ins.operands();
        let well_formed = x.len() == ins.len as usize
            && x.iter().all(|v| v.index() < self.code.len())
            && match ins.prim() {
                Some(prim) => x.len() == prim.arity(),
                None => !x.is_empty(),
            };
        if !well_formed {
            return self.raw(ins);
        }
        if let Some(prim) = ins.prim() {
            let param = ins.param();
            // Constant folding (user rules are never folded: their value
            // may use the drivers, and is computed where tracing can
            // re-enter).
            let mut vals = [0.0; MAX_ARITY];
            let mut all_const = true;
            for (slot, v) in vals.iter_mut().zip(x) {
                match self.code[v.index()].as_const() {
                    Some(c) => *slot = c,
                    None => all_const = false,
                }
            }
            if all_const {
                let value = prim.value(&vals[..x.len()], param);
                return self.constant(value);
            }
            let args = ins.args;
            if let Some(v) = prim.simplify(self, &args[..x.len()], param) {
                return v;
            }
        }
        self.share(ins)
    }

    /// The value of an instruction equal to `ins` pushed before, or `ins`
    /// appended as a new one. `ins` has operands, all values of this
    /// builder.
    #[inline]
    fn share(&mut self, ins: Instr) -> Var {
        let next = self.code.len() as u32;
        // Filed under the latest operand that is not a constant: one
        // constant (a `1` in every `1 − xᵢ`) is read all over a program,
        // so its few slots would send every later reader to the table.
        let ops = ins.operands();
        let code = &self.code;
        let anchor = ops
            .iter()
            .filter(|v| !code[v.index()].is_const())
            .max()
            .or_else(|| ops.iter().max())
            .map_or(0, |v| v.index());
        let Cse {
            slots, overflow, ..
        } = &mut self.cse;
        for e in slots[anchor].iter_mut() {
            if *e == EMPTY {
                *e = next;
                return self.raw(ins);
            }
            if self.code[*e as usize] == ins {
                return Var(*e);
            }
        }
        let v = *overflow.entry(ins).or_insert(Var(next));
        if v.0 == next {
            self.raw(ins);
        }
        v
    }

    /// Appends an instruction copied from a program that its own builder
    /// already simplified and shared, with operands renamed to values of
    /// this builder: it is shared with an equal one pushed before, but not
    /// simplified again (a rewrite found nothing there, and finds nothing
    /// under a renaming that keeps distinct values distinct, as copying a
    /// program's instructions in order onto values that are not constants
    /// does; the operands of `+` and `·` are put in canonical order).
    /// Constants are shared; anything malformed is kept for
    /// [`Builder::finish`] to report.
    #[inline]
    pub(crate) fn copy_instr(&mut self, ins: Instr) -> Var {
        let ins = ins.canonical();
        if ins.is_const() {
            return self.constant(ins.const_bits());
        }
        let x = ins.operands();
        if ins.is_input()
            || x.is_empty()
            || x.len() != ins.len as usize
            || x.iter().any(|v| v.index() >= self.code.len())
        {
            return self.raw(ins);
        }
        self.share(ins)
    }

    /// Applies a built-in primitive with integer attribute `param` (0 where
    /// it has none) to the operands `x`.
    ///
    /// More than [`MAX_ARITY`] operands, or a number the primitive does not
    /// take, is reported by [`Builder::finish`].
    #[inline]
    pub fn apply(&mut self, prim: Prim, param: i32, x: &[Var]) -> Var {
        self.push_instr(Instr::apply(prim, param, x))
    }

    builder_prims! {
        /// `a + b`.
        add(a, b) => Prim::Add;
        /// `a − b`.
        sub(a, b) => Prim::Sub;
        /// `a · b`.
        mul(a, b) => Prim::Mul;
        /// `a / b`.
        div(a, b) => Prim::Div;
        /// `−a`.
        neg(a) => Prim::Neg;
        /// `a · b + c`, rounded once.
        mul_add(a, b, c) => Prim::MulAdd;
        /// `sin a` (radians).
        sin(a) => Prim::Sin;
        /// `cos a` (radians).
        cos(a) => Prim::Cos;
        /// `eᵃ`.
        exp(a) => Prim::Exp;
        /// `ln a`.
        ln(a) => Prim::Ln;
        /// `√a`.
        sqrt(a) => Prim::Sqrt;
        /// `aᵇ`, both differentiable.
        powf(a, b) => Prim::Powf;
        /// `√(a² + b²)` without overflow.
        hypot(a, b) => Prim::Hypot;
        /// `sinh a`.
        sinh(a) => Prim::Sinh;
        /// `cosh a`.
        cosh(a) => Prim::Cosh;
        /// `tanh a`.
        tanh(a) => Prim::Tanh;
        /// `a` where `c > 0`, else `b`.
        select(c, a, b) => Prim::Select;
    }

    /// `aⁿ` for a fixed integer `n`.
    pub fn powi(&mut self, a: Var, n: i32) -> Var {
        self.apply(Prim::Powi, n, &[a])
    }

    /// `ψ⁽ⁿ⁾(a)`, the polygamma function of order `n`.
    pub fn polygamma(&mut self, a: Var, n: i32) -> Var {
        self.apply(Prim::Polygamma, n, &[a])
    }

    /// `c · a` for a constant `c`.
    pub fn scale(&mut self, c: f64, a: Var) -> Var {
        let k = self.constant(c);
        self.mul(k, a)
    }

    /// Applies a user-defined rule to the operands `x` (as many as the
    /// rule's [`Rule::arity`](crate::Rule::arity)).
    pub fn custom(&mut self, rule: &CustomRule, x: &[Var]) -> Var {
        let r = self.register_rule(rule);
        let ins = Instr::custom(u16::try_from(r).unwrap_or(u16::MAX), x);
        if x.len() > MAX_ARITY {
            // The arity check of `finish` reports it.
            return self.raw(ins);
        }
        self.push_instr(ins)
    }

    /// Finishes the program with the given outputs, as one input block and
    /// one output block, and checks it ([`Program::validate`]).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Malformed`] if the program is not well formed: an
    /// output or operand that is not a value of this builder, an input
    /// pushed as [`Op::Input`] instead of declared with [`Builder::input`],
    /// or a primitive or rule given the wrong number of operands;
    /// [`crate::Error::MissingRule`] for an [`Op::Custom`] pushed with a rule
    /// index this builder never registered;
    /// [`crate::Error::TooManyRules`] past [`MAX_RULES`] rules. A value of
    /// another builder whose index happens to exist here cannot be told
    /// apart: keep each builder's values to itself.
    pub fn finish(mut self, outputs: &[Var]) -> Result<Program, crate::error::Error> {
        if let Some(e) = self.defect.take() {
            return Err(e);
        }
        let p = self.finish_unchecked(outputs);
        p.validate()?;
        Ok(p)
    }

    /// [`Builder::finish`] without the check, for the crate's transforms,
    /// whose programs are well formed by construction.
    pub(crate) fn finish_unchecked(self, outputs: &[Var]) -> Program {
        let n_in = self.n_inputs;
        let n_out = outputs.len();
        self.finish_blocks(outputs, vec![n_in], vec![n_out])
    }

    /// Finishes the program with explicit input and output block widths.
    pub(crate) fn finish_blocks(
        self,
        outputs: &[Var],
        input_blocks: Vec<usize>,
        output_blocks: Vec<usize>,
    ) -> Program {
        debug_assert_eq!(input_blocks.iter().sum::<usize>(), self.n_inputs);
        debug_assert_eq!(output_blocks.iter().sum::<usize>(), outputs.len());
        // The sharing tables go first, before the program is handed on.
        drop(self.cse);
        Program::from_parts(
            self.n_inputs,
            self.code,
            outputs.to_vec(),
            self.guards,
            self.rules,
            self.defect,
            input_blocks,
            output_blocks,
        )
    }
}
