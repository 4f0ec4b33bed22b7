//! The readable view of instructions ([`Op`]), which the public API hands
//! out and takes, and the serialised form of programs built on it.
//!
//! The stored form ([`Instr`], 16 bytes) names a primitive by its opcode;
//! [`Op`] names it by [`Prim`], the table's handle, so this view sits above
//! the primitive table.

use super::ir::{opcode, Args, Builder, Instr, Program, Var};
#[cfg(feature = "serde")]
use super::ir::{Guard, MAX_RULES};
#[cfg(feature = "serde")]
use crate::error::Error;
use crate::rules::Prim;

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
    /// A finite number is written in the shortest form that denotes its
    /// bits; whether it reads back to them is the reader's part: serde_json
    /// does with its feature `float_roundtrip`, and without it may be one
    /// unit in the last place off (`-2.0514672033128614` was, found by
    /// `tests/fuzz.rs`).
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

impl Instr {
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
}

impl Program {
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
}

impl Builder {
    /// The instructions pushed so far.
    pub fn ops(&self) -> impl ExactSizeIterator<Item = Op> + DoubleEndedIterator + Clone + '_ {
        self.code.iter().map(Instr::op)
    }

    /// The instruction that defines `v`, or `None` if `v` is not (yet) a
    /// value of this builder.
    pub fn op(&self, v: Var) -> Option<Op> {
        self.code.get(v.index()).map(Instr::op)
    }

    /// Pushes an operation after simplification and CSE, returning the
    /// value that holds its result (possibly an existing one).
    ///
    /// A malformed operation (an operand that is not a value of this
    /// builder, the wrong number of operands, an unregistered rule) is
    /// recorded as it is, and [`Builder::finish`] reports it (a rule index
    /// of [`MAX_RULES`](crate::MAX_RULES) or more, never a registered one, as
    /// [`Error::MissingRule`](crate::Error::MissingRule)`(MAX_RULES)`).
    pub fn push(&mut self, op: Op) -> Var {
        self.push_instr(Instr::of_op(&op))
    }
}

/// Serialises a constant losslessly: a number when finite, otherwise a
/// tagged string (`"inf"`, `"-inf"`, `"nan:0x7ff8000000000000"`).
#[cfg(feature = "serde")]
pub(crate) mod constant_serde {
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
impl serde::Serialize for Program {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ProgramData::from(self.clone()).serialize(s)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Program {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Program, D::Error> {
        let data = ProgramData::deserialize(d)?;
        Program::try_from(data).map_err(serde::de::Error::custom)
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
