//! The SSA intermediate representation: a flat instruction stream.

use rustc_hash::FxHashMap;
use std::cmp::Ordering;

use super::custom::CustomRule;
use crate::error::{Error, Malformation};
use crate::rules::Prim;

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

    /// All slots, unused ones holding `Var(0)`; for the interpreter, which
    /// reads a fixed number of values (every instruction past the first may
    /// read value 0).
    #[inline(always)]
    pub(crate) fn padded(&self) -> [Var; MAX_ARITY] {
        self.vars
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

    /// [`Op::map_operands`], also renumbering a user rule through
    /// `rule_ids` (old index → index in the new program's table), for
    /// copying an instruction into another builder.
    #[inline]
    pub(crate) fn rebuilt(&self, rule_ids: &[u32], f: impl FnMut(Var) -> Var) -> Op {
        let mut op = self.map_operands(f);
        if let Op::Custom { rule, .. } = &mut op {
            *rule = rule_ids.get(*rule as usize).copied().unwrap_or(u32::MAX);
        }
        op
    }

    /// The primitive, for an [`Op::Apply`].
    pub fn prim(&self) -> Option<Prim> {
        match *self {
            Op::Apply { prim, .. } => Some(prim),
            _ => None,
        }
    }
}

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
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(try_from = "ProgramData"))]
pub struct Program {
    pub(crate) n_inputs: usize,
    pub(crate) ops: Vec<Op>,
    pub(crate) outputs: Vec<Var>,
    pub(crate) guards: Vec<Guard>,
    #[cfg_attr(feature = "serde", serde(skip))]
    pub(crate) rules: Vec<CustomRule>,
    /// Set where a user rule's pullback misused its builder while this
    /// program (or one it was derived from) was built: evaluation returns
    /// it instead of running.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub(crate) defect: Option<Error>,
    /// The compact form the interpreter runs, built on first evaluation.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub(crate) lowered: super::eval::Cache<super::eval::Lowered>,
    /// The register code of the lowered `f64` evaluator, built on first use.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub(crate) registers: super::eval::Cache<super::registers::RegisterCode>,
    /// Native code (feature `jit`), compiled once hot.
    #[cfg(feature = "jit")]
    #[cfg_attr(feature = "serde", serde(skip))]
    pub(crate) native: super::native::Native,
    pub(crate) input_blocks: Vec<usize>,
    pub(crate) output_blocks: Vec<usize>,
}

/// The serialised form of a [`Program`], checked by
/// [`Program::validate`] before it becomes one.
#[cfg(feature = "serde")]
#[derive(serde::Deserialize)]
struct ProgramData {
    n_inputs: usize,
    ops: Vec<Op>,
    outputs: Vec<Var>,
    guards: Vec<Guard>,
    input_blocks: Vec<usize>,
    output_blocks: Vec<usize>,
}

#[cfg(feature = "serde")]
impl TryFrom<ProgramData> for Program {
    type Error = crate::error::Error;
    fn try_from(d: ProgramData) -> Result<Self, Self::Error> {
        let p = Program {
            n_inputs: d.n_inputs,
            ops: d.ops,
            outputs: d.outputs,
            guards: d.guards,
            rules: Vec::new(),
            defect: None,
            lowered: Default::default(),
            registers: Default::default(),
            #[cfg(feature = "jit")]
            native: Default::default(),
            input_blocks: d.input_blocks,
            output_blocks: d.output_blocks,
        };
        p.validate()?;
        Ok(p)
    }
}

impl Program {
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
        let n = self.ops.len();
        // Every input is an instruction, so a larger count is bad data:
        // checked before anything of that size is allocated.
        if self.n_inputs > n {
            return Err(Error::Malformed(Malformation::TooManyInputs {
                inputs: self.n_inputs,
                instructions: n,
            }));
        }
        let mut seen = vec![false; self.n_inputs];
        for (i, op) in self.ops.iter().enumerate() {
            match *op {
                Op::Input(k) => match seen.get_mut(k as usize) {
                    Some(s) if !*s => *s = true,
                    _ => {
                        return Err(Error::Malformed(Malformation::BadInput {
                            instruction: i,
                            input: k as usize,
                        }))
                    }
                },
                Op::Const(_) => {}
                Op::Apply { prim, args, .. } => {
                    if args.len() != prim.arity() {
                        return Err(Error::Malformed(Malformation::Arity {
                            instruction: i,
                            expected: prim.arity(),
                            got: args.len(),
                        }));
                    }
                }
                Op::Custom { rule, args } => match self.rules.get(rule as usize) {
                    None => return Err(Error::MissingRule(rule as usize)),
                    Some(r) if r.arity() != args.len() => {
                        return Err(Error::Malformed(Malformation::Arity {
                            instruction: i,
                            expected: r.arity(),
                            got: args.len(),
                        }))
                    }
                    Some(_) => {}
                },
            }
            if op.operands().iter().any(|o| o.index() >= i) {
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
        self.ops.len()
    }

    /// Whether the program has no instructions.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The instruction stream.
    pub fn ops(&self) -> &[Op] {
        &self.ops
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

/// How the builder shares an operation with an equal one pushed before
/// (common-subexpression elimination).
enum Key {
    /// A constant or a well-formed primitive, keyed by its 16-byte compact
    /// form (the interpreter's; small keys keep the table cache-friendly).
    Compact(super::eval::Instr),
    /// A user rule's application.
    Custom(u32, Args),
    /// Not shared: an input, or a malformed operation kept as it is for
    /// [`Builder::finish`] to report.
    None,
}

fn key(op: &Op) -> Key {
    match *op {
        Op::Input(_) => Key::None,
        Op::Apply { prim, args, .. } if args.len() != prim.arity() => Key::None,
        Op::Custom { rule, args } => Key::Custom(rule, args),
        Op::Const(_) | Op::Apply { .. } => match super::eval::Instr::of(op) {
            Some(i) => Key::Compact(i),
            None => Key::None,
        },
    }
}

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
    ops: Vec<Op>,
    n_inputs: usize,
    cse: FxHashMap<super::eval::Instr, Var>,
    cse_custom: FxHashMap<(u32, Args), Var>,
    guards: Vec<Guard>,
    rules: Vec<CustomRule>,
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
    /// transform of known size does not rehash as it grows.
    pub fn with_capacity(n: usize) -> Self {
        Builder {
            ops: Vec::with_capacity(n),
            cse: FxHashMap::with_capacity_and_hasher(n, Default::default()),
            ..Self::default()
        }
    }

    /// The instructions pushed so far.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// Number of instructions pushed so far.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether no instruction has been pushed.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Number of inputs declared so far.
    pub fn n_inputs(&self) -> usize {
        self.n_inputs
    }

    /// Declares the next input.
    pub fn input(&mut self) -> Var {
        let k = self.n_inputs as u32;
        self.n_inputs += 1;
        self.raw(Op::Input(k))
    }

    fn raw(&mut self, op: Op) -> Var {
        let v = Var(self.ops.len() as u32);
        self.ops.push(op);
        v
    }

    /// Appends `op` without folding, simplifying or sharing, only putting
    /// the operands of `+` and `·` in the builder's canonical order (the
    /// lower value first; exact, both commute). For passes that copy
    /// instructions out of a program whose builder already simplified and
    /// shared them, in the same order, with distinct values mapped to
    /// distinct values (as [`crate::split_stages`] does): pushing them
    /// again would find nothing to fold or share, only pay for the
    /// look-ups. Anything malformed is still reported by
    /// [`Builder::finish`].
    pub(crate) fn copy_op(&mut self, op: Op) -> Var {
        let op = match op {
            Op::Apply {
                prim: prim @ (Prim::Add | Prim::Mul),
                param,
                args,
            } if args.len() == 2 && args.as_slice()[0] > args.as_slice()[1] => {
                let [a, b, _] = args.padded();
                Op::Apply {
                    prim,
                    param,
                    args: Args::new(&[b, a]).unwrap_or(args),
                }
            }
            other => other,
        };
        self.raw(op)
    }

    /// `Some(a)` when `v` is `−a`. (`None` for a value not of this
    /// builder; [`Builder::finish`] reports those.)
    pub(crate) fn negated(&self, v: Var) -> Option<Var> {
        match self.ops.get(v.index()) {
            Some(Op::Apply {
                prim: Prim::Neg,
                args,
                ..
            }) => Some(args.as_slice()[0]),
            _ => None,
        }
    }

    /// The constant `v` holds, if it is one.
    pub(crate) fn constant_of(&self, v: Var) -> Option<f64> {
        match self.ops.get(v.index()) {
            Some(Op::Const(c)) => Some(*c),
            _ => None,
        }
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
        self.push(Op::Const(c))
    }

    /// A structural zero: "no dependence" (see the type's docs). It is the
    /// constant `−0.0`; drivers normalise it to `+0.0` in their results.
    pub fn zero(&mut self) -> Var {
        self.constant(STRUCTURAL_ZERO)
    }

    /// Registers a user-defined rule and returns its index in this
    /// builder's rule table (the same rule is registered once).
    pub fn register_rule(&mut self, rule: &CustomRule) -> u32 {
        if let Some(i) = self.rules.iter().position(|r| r.same(rule)) {
            return i as u32;
        }
        self.rules.push(rule.clone());
        (self.rules.len() - 1) as u32
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
        if len > self.ops.len() || n_inputs > self.n_inputs {
            return;
        }
        self.ops.truncate(len);
        self.n_inputs = n_inputs;
        self.cse.retain(|_, v| v.index() < len);
        self.cse_custom.retain(|_, v| v.index() < len);
        self.guards
            .retain(|g| g.a.index() < len && g.b.index() < len);
    }

    /// Records a guard.
    pub fn guard(&mut self, a: Var, b: Var, ordering: Option<Ordering>) {
        let g = Guard { a, b, ordering };
        if !self.guards.contains(&g) {
            self.guards.push(g);
        }
    }

    /// Pushes an operation after simplification and CSE, returning the
    /// value that holds its result (possibly an existing one).
    ///
    /// A malformed operation (an operand that is not a value of this
    /// builder, the wrong number of operands, an unregistered rule) is
    /// recorded as it is, and [`Builder::finish`] reports it.
    pub fn push(&mut self, op: Op) -> Var {
        if let Op::Apply { prim, param, args } = op {
            let x = args.as_slice();
            let well_formed =
                x.len() == prim.arity() && x.iter().all(|v| v.index() < self.ops.len());
            if well_formed {
                // Constant folding (user rules are never folded: their value
                // may use the drivers, and is computed where tracing can
                // re-enter).
                let mut vals = [0.0; MAX_ARITY];
                let mut all_const = true;
                for (slot, v) in vals.iter_mut().zip(x) {
                    match self.constant_of(*v) {
                        Some(c) => *slot = c,
                        None => all_const = false,
                    }
                }
                if all_const {
                    let value = prim.value(&vals[..x.len()], param);
                    return self.constant(value);
                }
                if let Some(v) = prim.simplify(self, x, param) {
                    return v;
                }
            }
        }
        let next = Var(self.ops.len() as u32);
        let slot = match key(&op) {
            Key::Compact(k) => self.cse.entry(k).or_insert(next),
            Key::Custom(r, a) => self.cse_custom.entry((r, a)).or_insert(next),
            Key::None => return self.raw(op),
        };
        let v = *slot;
        if v == next {
            self.ops.push(op);
        }
        v
    }

    /// Applies a built-in primitive with integer attribute `param` (0 where
    /// it has none) to the operands `x`.
    ///
    /// More than [`MAX_ARITY`] operands, or a number the primitive does not
    /// take, is reported by [`Builder::finish`].
    pub fn apply(&mut self, prim: Prim, param: i32, x: &[Var]) -> Var {
        match Args::new(x) {
            Some(args) => self.push(Op::Apply { prim, param, args }),
            None => {
                // Recorded with no operands: the arity check of `finish`
                // reports it.
                self.raw(Op::Apply {
                    prim,
                    param,
                    args: Args::EMPTY,
                })
            }
        }
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
        match Args::new(x) {
            Some(args) => self.push(Op::Custom { rule: r, args }),
            // Recorded with no operands: the arity check of `finish`
            // reports it.
            None => self.raw(Op::Custom {
                rule: r,
                args: Args::EMPTY,
            }),
        }
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
    /// index this builder never registered. A value of another builder whose
    /// index happens to exist here cannot be told apart: keep each builder's
    /// values to itself.
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
        Program {
            n_inputs: self.n_inputs,
            ops: self.ops,
            outputs: outputs.to_vec(),
            guards: self.guards,
            rules: self.rules,
            defect: self.defect,
            lowered: Default::default(),
            registers: Default::default(),
            #[cfg(feature = "jit")]
            native: Default::default(),
            input_blocks,
            output_blocks,
        }
    }
}
