//! The SSA intermediate representation: a flat instruction stream.

use rustc_hash::{FxHashMap, FxHashSet};
use std::any::Any;
use std::cmp::Ordering;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, OnceLock};

use crate::error::{Error, Malformation};

/// The opcodes the IR itself gives a meaning to. A built-in primitive's
/// opcode is [`FIRST_PRIM`](opcode::FIRST_PRIM) plus its place in the
/// primitive table (`crate::rules::opcode`): the IR stores it and hands it
/// to the table, and never interprets it.
pub(crate) mod opcode {
    /// An input.
    pub(crate) const INPUT: u8 = 0;
    /// A constant.
    pub(crate) const CONST: u8 = 1;
    /// A user rule.
    pub(crate) const CUSTOM: u8 = 2;
    /// The first built-in primitive's opcode.
    pub(crate) const FIRST_PRIM: u8 = 3;
}

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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

// User rules: the primitives a program defines at run time and carries
// in its own table (a dynamic definition beside the built-in table).

/// Cotangent contributions of one instruction, one per operand, in operand
/// order (`None`: a structural zero).
pub type Contribs = [Option<Var>; MAX_ARITY];

/// A user-defined primitive `y = f(x₁, …, xₖ)` with `1 ≤ k ≤ 3`: its
/// value, and its pullback written against the [`Builder`].
///
/// Because the pullback is emitted as instructions (it may use any
/// primitive, other rules included), ∂⃖ can differentiate it again, so one
/// rule serves every order. Its pushforward is the pullback transposed, so
/// ∂⃗ needs nothing more. For one argument, [`ScalarRule`](crate::ScalarRule) is shorter.
///
/// # Example
///
/// A two-argument rule, `f(x, y) = x·eʸ`:
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{gradient, Builder, CustomRule, Real, Rule, Var};
///
/// struct XExpY;
/// impl Rule for XExpY {
///     fn name(&self) -> &str {
///         "x_exp_y"
///     }
///     fn arity(&self) -> usize {
///         2
///     }
///     fn value(&self, x: &[f64]) -> f64 {
///         x[0] * x[1].exp()
///     }
///     fn pullback(&self, b: &mut Builder, x: &[Var], y: Var, ct: Var) -> Vec<Var> {
///         let e = b.exp(x[1]);
///         vec![b.mul(ct, e), b.mul(ct, y)]
///     }
/// }
/// let rule = CustomRule::new(XExpY);
/// let g = gradient(|v| Real::apply_rule_n(&rule, &[v[0], v[1]]), &[2.0, 0.5]).unwrap();
/// assert_relative_eq!(g[0], 0.5_f64.exp());
/// assert_relative_eq!(g[1], 2.0 * 0.5_f64.exp());
/// ```
pub trait Rule: Send + Sync + 'static {
    /// Name used when a program is printed.
    fn name(&self) -> &str;
    /// Number of arguments, from 1 to 3.
    fn arity(&self) -> usize;
    /// The primal value `f(x)`; `x` has [`Rule::arity`] entries.
    fn value(&self, x: &[f64]) -> f64;
    /// Emits the pullback: given the arguments `x`, the output `y = f(x)`
    /// and the cotangent `ct` of `y`, the cotangent of each argument,
    /// `∂ᵢf(x)·ct`, in order. It must be linear in `ct`, use only values of
    /// `b` (the arguments, `y`, `ct` and what it pushes), and return one
    /// value per argument.
    fn pullback(&self, b: &mut Builder, x: &[Var], y: Var, ct: Var) -> Vec<Var>;

    /// The rule's own Taylor rule, if it has one: from the arguments' jets
    /// `x` ([`Rule::arity`] slices of normalised Taylor coefficients,
    /// `xᵢ[k] = xᵢ⁽ᵏ⁾(0)/k!`, each as long as `y`), write the jet of
    /// `f(x(t))` into `y` and return `true`. `y[0]` is then replaced by
    /// [`Rule::value`].
    ///
    /// The default returns `false`, and the Taylor functor derives a rule
    /// from the pullback: with `y′ = Σᵢ ∂ᵢf(x) xᵢ′`, the jets of the
    /// partials `∂ᵢf(x(t))` (the pullback's program with `ȳ = 1`) are
    /// computed to degree `K − 1` and the recurrence
    /// `k yₖ = Σᵢ Σ_{j=1..k} j xᵢⱼ ∂ᵢf_{k−j}` closes. That costs `O(K²)`
    /// when the pullback neither reads `y` nor applies the rule again, and
    /// `O(K³)` when it does (the partials' jet then needs the rule's to
    /// one degree less, recursively).
    fn taylor(&self, x: &[&[f64]], y: &mut [f64]) -> bool {
        let _ = (x, y);
        false
    }
}

/// A shareable handle to a user-defined primitive ([`Rule`] or
/// [`ScalarRule`](crate::ScalarRule)), applied with [`crate::Real::apply_rule`] or
/// [`crate::Real::apply_rule_n`].
///
/// On forward-mode (num-dual) numbers the rule's derivative parts are
/// computed from its own pushforward (∂⃗ of its one-instruction program,
/// applied up to three times), built once and cached.
#[derive(Clone)]
pub struct CustomRule {
    pub(crate) inner: Arc<dyn Rule>,
    id: u64,
    /// What the functor layer derives from the rule, built once.
    derived: Arc<OnceLock<Box<dyn Any + Send + Sync>>>,
}

/// Identifiers of rule handles, unique in the process.
static NEXT_RULE: AtomicU64 = AtomicU64::new(1);

impl CustomRule {
    /// Wraps a rule.
    pub fn new<R: Rule>(rule: R) -> Self {
        CustomRule {
            inner: Arc::new(rule),
            id: NEXT_RULE.fetch_add(1, AtomicOrdering::Relaxed),
            derived: Arc::new(OnceLock::new()),
        }
    }

    /// The slot for what the functor layer derives from this rule.
    pub(crate) fn derived(&self) -> &OnceLock<Box<dyn Any + Send + Sync>> {
        &self.derived
    }

    /// The same rule with an empty slot of its own, for programs stored in
    /// that slot (so the slot does not own itself).
    pub(crate) fn detached(&self) -> CustomRule {
        CustomRule {
            inner: Arc::clone(&self.inner),
            id: self.id,
            derived: Arc::new(OnceLock::new()),
        }
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Number of arguments.
    pub fn arity(&self) -> usize {
        self.inner.arity()
    }

    /// A process-wide identifier of this handle (shared by its clones).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether two handles share one rule.
    pub fn same(&self, other: &CustomRule) -> bool {
        self.id == other.id
    }
    /// The primal value `f(x)`; NaN if `x` does not have
    /// [`CustomRule::arity`] entries.
    pub fn value(&self, x: &[f64]) -> f64 {
        if x.len() == self.arity() {
            self.inner.value(x)
        } else {
            f64::NAN
        }
    }

    /// The rule's own Taylor rule (see [`Rule::taylor`]); `false` where
    /// it has none or the shapes do not fit (`x.len()` is not the arity or
    /// a jet is shorter than `y`).
    pub fn taylor(&self, x: &[&[f64]], y: &mut [f64]) -> bool {
        if x.len() != self.arity() || x.iter().any(|j| j.len() < y.len()) || y.is_empty() {
            return false;
        }
        self.inner.taylor(x, y)
    }

    /// Emits the pullback (see [`Rule::pullback`]).
    pub fn pullback(&self, b: &mut Builder, x: &[Var], y: Var, ct: Var) -> Vec<Var> {
        self.inner.pullback(b, x, y, ct)
    }
}

impl fmt::Debug for CustomRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CustomRule({})", self.name())
    }
}

impl PartialEq for CustomRule {
    fn eq(&self, other: &Self) -> bool {
        self.same(other)
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

/// Serialises an `Option<Ordering>` as `-1`, `0`, `1` or `null`.
#[cfg(feature = "serde")]
pub(crate) mod ordering_serde {
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
/// [`Program::ops`] reads them as [`Op`](crate::Op)s.
#[derive(Clone, Debug, PartialEq)]
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
    pub(crate) input_blocks: Vec<usize>,
    pub(crate) output_blocks: Vec<usize>,
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

/// Where an instruction with operands is filed for sharing: its latest
/// operand that is not a constant (one constant, the `1` in every `1 − xᵢ`,
/// is read all over a program, so its few slots would send every later
/// reader to the table), or its latest operand if all are constants.
#[inline]
fn anchor(code: &[Instr], ins: &Instr) -> usize {
    let ops = ins.operands();
    // (An operand past the end, in a malformed instruction being rolled
    // back, counts as not a constant.)
    ops.iter()
        .filter(|v| code.get(v.index()).is_none_or(|i| !i.is_const()))
        .max()
        .or_else(|| ops.iter().max())
        .map_or(0, |v| v.index())
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
/// The transforms write a *structural* zero (the `Zero` of the ChainRules
/// design notes) where a cotangent or tangent is known to be zero: it
/// means "no dependence", so a derived program gives `0`, not `NaN`, where
/// an infinite or NaN intermediate meets it. It is the constant `−0.0`
/// ([`Builder::zero`]), because `a + (−0) = a` holds exactly for every
/// `a`: adding it is folded away, and the builder rewrites `x · (−0) → −0`
/// and `(−0) / x → −0` without looking at `x`. A constant `+0.0` (a user's
/// `0.0`) is a value: `x · 0.0` is computed, since its sign and its NaN at
/// `x = ±∞` depend on `x`. `x − x` is rewritten to `+0`, which IEEE 754
/// gives for every finite `x` (for `x = ±∞` or NaN it gives `+0`, not
/// NaN: the one rewrite that does not look at a value). Every other
/// rewrite is exact in IEEE 754 (`a − (+0) → a`, `(−0) − b → −b`,
/// `a · 1 → a`, `a + (−b) → a − b`, `(−a)(−b) → ab`, …); in particular a
/// user's `x + 0.0` is kept, since `−0 + 0 = +0`. So a traced program
/// computes what the same code computes on `f64`, sign of zero included,
/// but for `x − x` at `x = ±∞` or NaN and for a literal `−0.0` in the
/// traced code, which is taken for a structural zero.
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
    pub(crate) code: Vec<Instr>,
    n_inputs: usize,
    cse: Cse,
    guards: Vec<Guard>,
    /// The guards recorded, to record each once.
    guard_set: FxHashSet<(u32, u32, Option<Ordering>)>,
    rules: Vec<CustomRule>,
    /// The index of each registered rule, by [`CustomRule::id`].
    rule_index: FxHashMap<u64, u32>,
    pub(crate) defect: Option<Error>,
}

impl Builder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty builder with room for about `n` instructions, so that a
    /// transform of known size does not reallocate as it grows (memory
    /// reserved but never written is not taken from the system). `n` is a
    /// hint: where that room cannot be reserved (say `n = usize::MAX`),
    /// the builder starts with none and grows as it is used.
    pub fn with_capacity(n: usize) -> Self {
        let mut b = Self::default();
        let reserved =
            b.code.try_reserve_exact(n).is_ok() && b.cse.slots.try_reserve_exact(n).is_ok();
        if !reserved {
            b.code = Vec::new();
            b.cse.slots = Vec::new();
        }
        b
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
    pub(crate) fn raw(&mut self, ins: Instr) -> Var {
        let v = Var(self.code.len() as u32);
        self.code.push(ins);
        self.cse.slots.push([EMPTY; SLOTS]);
        v
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
            if self.code[i].operands().is_empty() {
                continue;
            }
            let a = anchor(&self.code, &self.code[i]);
            if let Some(s) = self.cse.slots.get_mut(a) {
                for e in s.iter_mut().filter(|e| **e == i as u32) {
                    *e = EMPTY;
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
    /// the wrong number of operands, or with more than [`MAX_ARITY`] (the
    /// arity check of
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
            // An instruction holds at most `MAX_ARITY` operands, whatever
            // the rule says it takes.
            let expected = r.arity().min(MAX_ARITY);
            (expected != ins.len as usize).then_some(Error::Malformed(Malformation::Arity {
                instruction: i,
                expected,
                got: ins.len as usize,
            }))
        })
    }

    /// Records a guard.
    pub fn guard(&mut self, a: Var, b: Var, ordering: Option<Ordering>) {
        if self.guard_set.insert((a.0, b.0, ordering)) {
            self.guards.push(Guard { a, b, ordering });
        }
    }

    /// The value of an instruction equal to `ins` pushed before, or `ins`
    /// appended as a new one. `ins` has operands, all values of this
    /// builder.
    #[inline]
    pub(crate) fn share(&mut self, ins: Instr) -> Var {
        let next = self.code.len() as u32;
        // Filed under the latest operand that is not a constant: one
        // constant (a `1` in every `1 − xᵢ`) is read all over a program,
        // so its few slots would send every later reader to the table.
        let anchor = anchor(&self.code, &ins);
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
