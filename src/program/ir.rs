//! The SSA intermediate representation: a flat instruction stream.

use rustc_hash::FxHashMap;
use std::cmp::Ordering;

use crate::rules::CustomRule;

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

/// One primitive operation. Each one has a rule (value, pullback) in
/// [`crate::rules`].
///
/// Units: angles are in radians. `Powi` takes a fixed integer exponent,
/// `Select(c, a, b)` is `a` where `c > 0` and `b` otherwise (branch-free
/// code, DESIGN.md §2).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Op {
    /// The `k`-th input of the program.
    Input(u32),
    /// A constant.
    Const(f64),
    /// `a + b`.
    Add(Var, Var),
    /// `a − b`.
    Sub(Var, Var),
    /// `a · b`.
    Mul(Var, Var),
    /// `a / b`.
    Div(Var, Var),
    /// `−a`.
    Neg(Var),
    /// `sin a` (radians).
    Sin(Var),
    /// `cos a` (radians).
    Cos(Var),
    /// `eᵃ`.
    Exp(Var),
    /// `ln a` (NaN for `a < 0`).
    Ln(Var),
    /// `√a` (NaN for `a < 0`).
    Sqrt(Var),
    /// `tanh a`.
    Tanh(Var),
    /// `aⁿ` for a fixed integer `n`.
    Powi(Var, i32),
    /// `a` where `c > 0`, else `b`.
    Select(Var, Var, Var),
    /// A user-defined scalar primitive: index into the program's rule table.
    Custom(u32, Var),
}

impl Op {
    /// The operands of this operation, in order.
    pub fn operands(&self) -> OperandIter {
        let (arr, n) = match *self {
            Op::Input(_) | Op::Const(_) => ([Var(0); 3], 0),
            Op::Add(a, b) | Op::Sub(a, b) | Op::Mul(a, b) | Op::Div(a, b) => ([a, b, a], 2),
            Op::Neg(a)
            | Op::Sin(a)
            | Op::Cos(a)
            | Op::Exp(a)
            | Op::Ln(a)
            | Op::Sqrt(a)
            | Op::Tanh(a)
            | Op::Powi(a, _)
            | Op::Custom(_, a) => ([a, a, a], 1),
            Op::Select(c, a, b) => ([c, a, b], 3),
        };
        OperandIter { arr, n, i: 0 }
    }

    /// The same operation with every operand passed through `f`.
    pub fn map_operands(&self, mut f: impl FnMut(Var) -> Var) -> Op {
        match *self {
            Op::Input(k) => Op::Input(k),
            Op::Const(c) => Op::Const(c),
            Op::Add(a, b) => Op::Add(f(a), f(b)),
            Op::Sub(a, b) => Op::Sub(f(a), f(b)),
            Op::Mul(a, b) => Op::Mul(f(a), f(b)),
            Op::Div(a, b) => Op::Div(f(a), f(b)),
            Op::Neg(a) => Op::Neg(f(a)),
            Op::Sin(a) => Op::Sin(f(a)),
            Op::Cos(a) => Op::Cos(f(a)),
            Op::Exp(a) => Op::Exp(f(a)),
            Op::Ln(a) => Op::Ln(f(a)),
            Op::Sqrt(a) => Op::Sqrt(f(a)),
            Op::Tanh(a) => Op::Tanh(f(a)),
            Op::Powi(a, n) => Op::Powi(f(a), n),
            Op::Select(c, a, b) => Op::Select(f(c), f(a), f(b)),
            Op::Custom(r, a) => Op::Custom(r, f(a)),
        }
    }
}

/// Iterator over the operands of an [`Op`].
#[derive(Debug, Clone)]
pub struct OperandIter {
    arr: [Var; 3],
    n: usize,
    i: usize,
}

impl Iterator for OperandIter {
    type Item = Var;
    fn next(&mut self) -> Option<Var> {
        if self.i < self.n {
            self.i += 1;
            Some(self.arr[self.i - 1])
        } else {
            None
        }
    }
}

/// A comparison recorded while tracing: at the trace point,
/// `a.partial_cmp(b)` was `ordering`. A program is only valid where every
/// guard still holds (DESIGN.md §2: branches become guards).
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
    /// [`Error::Layout`] describing the first problem found;
    /// [`Error::MissingRule`] for a user rule the program does not carry
    /// (user rules are not serialised).
    ///
    /// [`Error::Layout`]: crate::Error::Layout
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
        use crate::error::Error;
        let n = self.ops.len();
        let mut seen = vec![false; self.n_inputs];
        for (i, op) in self.ops.iter().enumerate() {
            if let Op::Input(k) = *op {
                match seen.get_mut(k as usize) {
                    Some(s) if !*s => *s = true,
                    _ => {
                        return Err(Error::Layout(format!(
                            "instruction {i}: bad or repeated input {k}"
                        )))
                    }
                }
            }
            if let Op::Custom(r, _) = *op {
                if r as usize >= self.rules.len() {
                    return Err(Error::MissingRule(r as usize));
                }
            }
            if op.operands().any(|o| o.index() >= i) {
                return Err(Error::Layout(format!("instruction {i} uses a later value")));
            }
        }
        if seen.iter().any(|s| !s) {
            return Err(Error::Layout("an input has no instruction".into()));
        }
        let refs = self
            .outputs
            .iter()
            .chain(self.guards.iter().flat_map(|g| [&g.a, &g.b]));
        if refs.into_iter().any(|v| v.index() >= n) {
            return Err(Error::Layout(
                "an output or guard refers past the end".into(),
            ));
        }
        if self.input_blocks.iter().sum::<usize>() != self.n_inputs
            || self.output_blocks.iter().sum::<usize>() != self.outputs.len()
        {
            return Err(Error::Layout("blocks do not add up".into()));
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

/// Hashable key of an operation, for common-subexpression elimination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    Const(u64),
    Un(u8, Var),
    Bin(u8, Var, Var),
    Powi(Var, i32),
    Sel(Var, Var, Var),
    Custom(u32, Var),
}

fn key(op: &Op) -> Option<Key> {
    Some(match *op {
        Op::Input(_) => return None,
        Op::Const(c) => Key::Const(c.to_bits()),
        Op::Add(a, b) => Key::Bin(0, a, b),
        Op::Sub(a, b) => Key::Bin(1, a, b),
        Op::Mul(a, b) => Key::Bin(2, a, b),
        Op::Div(a, b) => Key::Bin(3, a, b),
        Op::Neg(a) => Key::Un(0, a),
        Op::Sin(a) => Key::Un(1, a),
        Op::Cos(a) => Key::Un(2, a),
        Op::Exp(a) => Key::Un(3, a),
        Op::Ln(a) => Key::Un(4, a),
        Op::Sqrt(a) => Key::Un(5, a),
        Op::Tanh(a) => Key::Un(6, a),
        Op::Powi(a, n) => Key::Powi(a, n),
        Op::Select(c, a, b) => Key::Sel(c, a, b),
        Op::Custom(r, a) => Key::Custom(r, a),
    })
}

/// Builds programs one instruction at a time, folding constants, removing
/// structural zeros and ones, and sharing common subexpressions.
///
/// Every rule's pullback is written against this builder (DESIGN.md §2,
/// layer 4), so a pullback is itself a program and can be differentiated
/// again.
///
/// # Structural zeros and NaN
///
/// The builder rewrites `x · 0 → 0`, `0 / x → 0` and `x − x → 0` without
/// looking at `x`. A zero produced this way is a *structural* zero (seed
/// 002's `Zero`): it means "no dependence", so a derived program gives `0`,
/// not `NaN`, where an infinite or NaN intermediate meets a zero cotangent.
/// It is written as the constant `−0.0`, and the drivers seed unused
/// directions with it, because `a + (−0) = a` holds exactly for every `a`:
/// adding a structural zero is then folded away. Every other rewrite is
/// exact in IEEE 754 (`a + (−0) → a`, `a − (+0) → a`, `(−0) − b → −b`,
/// `a · 1 → a`, `a + (−b) → a − b`, `(−a)(−b) → ab`, …); in particular a
/// user's `x + 0.0` is kept, since `−0 + 0 = +0`. Values that do flow follow
/// IEEE 754.
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
    cse: FxHashMap<Key, Var>,
    guards: Vec<Guard>,
    rules: Vec<CustomRule>,
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

    /// `Some(a)` when `v` is `−a`. (`None` for a value not of this
    /// builder; [`Builder::finish`] reports those.)
    fn negated(&self, v: Var) -> Option<Var> {
        match self.ops.get(v.index()) {
            Some(Op::Neg(a)) => Some(*a),
            _ => None,
        }
    }

    fn constant_of(&self, v: Var) -> Option<f64> {
        match self.ops.get(v.index()) {
            Some(Op::Const(c)) => Some(*c),
            _ => None,
        }
    }

    /// A constant.
    pub fn constant(&mut self, c: f64) -> Var {
        self.push(Op::Const(c))
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

    /// Records a guard.
    pub fn guard(&mut self, a: Var, b: Var, ordering: Option<Ordering>) {
        let g = Guard { a, b, ordering };
        if !self.guards.contains(&g) {
            self.guards.push(g);
        }
    }

    /// Pushes an operation after simplification and CSE, returning the
    /// value that holds its result (possibly an existing one).
    pub fn push(&mut self, op: Op) -> Var {
        let op = match self.simplify(op) {
            Ok(v) => return v,
            Err(op) => op,
        };
        match key(&op) {
            Some(k) => match self.cse.entry(k) {
                std::collections::hash_map::Entry::Occupied(e) => *e.get(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let v = Var(self.ops.len() as u32);
                    self.ops.push(op);
                    *e.insert(v)
                }
            },
            None => self.raw(op),
        }
    }

    /// Algebraic simplification: `Ok(v)` when the op reduces to an existing
    /// or new value, `Err(op)` with a canonical op otherwise.
    fn simplify(&mut self, op: Op) -> Result<Var, Op> {
        use Op::*;
        let c = |s: &Self, v: Var| s.constant_of(v);
        // Bit patterns of the two zeros: the rewrites below are exact in
        // IEEE 754 only for the right sign.
        let is_neg_zero =
            |s: &Self, v: Var| c(s, v).is_some_and(|k| k.to_bits() == (-0.0f64).to_bits());
        let is_pos_zero =
            |s: &Self, v: Var| c(s, v).is_some_and(|k| k.to_bits() == 0.0f64.to_bits());
        // Constant folding. User rules are not folded: their value may use
        // the drivers, and it is computed where tracing can re-enter.
        let all_const = op.operands().all(|v| c(self, v).is_some());
        if all_const && !matches!(op, Input(_) | Const(_) | Custom(..)) {
            let vals: Vec<f64> = op.operands().map(|v| c(self, v).unwrap_or(0.0)).collect();
            let mut get = |i: usize| vals[i];
            let value = crate::program::eval::apply_op_f64(&op, &mut get, &self.rules);
            return Ok(self.push(Const(value)));
        }
        match op {
            Add(a, b) => {
                // a + (−0) = a for every a (a + (+0) is not: −0 + 0 = +0).
                if is_neg_zero(self, a) {
                    return Ok(b);
                }
                if is_neg_zero(self, b) {
                    return Ok(a);
                }
                // a + (−b) = a − b, exactly in IEEE 754.
                if let Some(nb) = self.negated(b) {
                    return Ok(self.push(Sub(a, nb)));
                }
                if let Some(na) = self.negated(a) {
                    return Ok(self.push(Sub(b, na)));
                }
                Err(Add(a.min(b), a.max(b)))
            }
            Sub(a, b) => {
                // a − (+0) = a and (−0) − b = −b, exactly.
                if is_pos_zero(self, b) {
                    return Ok(a);
                }
                if is_neg_zero(self, a) {
                    return Ok(self.push(Neg(b)));
                }
                if a == b {
                    // Structural: x − x is 0 whatever x is.
                    return Ok(self.push(Const(STRUCTURAL_ZERO)));
                }
                // a − (−b) = a + b, exactly.
                if let Some(nb) = self.negated(b) {
                    return Ok(self.push(Add(a, nb)));
                }
                Err(op)
            }
            Mul(a, b) => {
                for (x, y) in [(a, b), (b, a)] {
                    match c(self, x) {
                        Some(0.0) => return Ok(self.push(Const(STRUCTURAL_ZERO))),
                        Some(1.0) => return Ok(y),
                        Some(-1.0) => return Ok(self.push(Neg(y))),
                        _ => {}
                    }
                }
                // (−a)(−b) = ab and (−a)·k = a·(−k), exactly.
                match (self.negated(a), self.negated(b)) {
                    (Some(na), Some(nb)) => return Ok(self.push(Mul(na, nb))),
                    (Some(na), None) => {
                        if let Some(k) = c(self, b) {
                            let nk = self.push(Const(-k));
                            return Ok(self.push(Mul(na, nk)));
                        }
                    }
                    (None, Some(nb)) => {
                        if let Some(k) = c(self, a) {
                            let nk = self.push(Const(-k));
                            return Ok(self.push(Mul(nb, nk)));
                        }
                    }
                    (None, None) => {}
                }
                Err(Mul(a.min(b), a.max(b)))
            }
            Div(a, b) => {
                if c(self, a) == Some(0.0) {
                    return Ok(self.push(Const(STRUCTURAL_ZERO)));
                }
                if c(self, b) == Some(1.0) {
                    return Ok(a);
                }
                if c(self, b) == Some(-1.0) {
                    return Ok(self.push(Neg(a)));
                }
                // (−a)/(−b) = a/b, exactly.
                if let (Some(na), Some(nb)) = (self.negated(a), self.negated(b)) {
                    return Ok(self.push(Div(na, nb)));
                }
                Err(op)
            }
            Neg(a) => {
                if let Some(inner) = self.negated(a) {
                    return Ok(inner);
                }
                Err(op)
            }
            Powi(a, n) => match n {
                0 => Ok(self.push(Const(1.0))),
                1 => Ok(a),
                _ => Err(op),
            },
            Select(cond, a, b) => {
                if a == b {
                    return Ok(a);
                }
                let _ = cond;
                Err(op)
            }
            _ => Err(op),
        }
    }

    /// `a + b`.
    pub fn add(&mut self, a: Var, b: Var) -> Var {
        self.push(Op::Add(a, b))
    }
    /// `a − b`.
    pub fn sub(&mut self, a: Var, b: Var) -> Var {
        self.push(Op::Sub(a, b))
    }
    /// `a · b`.
    pub fn mul(&mut self, a: Var, b: Var) -> Var {
        self.push(Op::Mul(a, b))
    }
    /// `a / b`.
    pub fn div(&mut self, a: Var, b: Var) -> Var {
        self.push(Op::Div(a, b))
    }
    /// `−a`.
    pub fn neg(&mut self, a: Var) -> Var {
        self.push(Op::Neg(a))
    }
    /// `sin a` (radians).
    pub fn sin(&mut self, a: Var) -> Var {
        self.push(Op::Sin(a))
    }
    /// `cos a` (radians).
    pub fn cos(&mut self, a: Var) -> Var {
        self.push(Op::Cos(a))
    }
    /// `exp a`.
    pub fn exp(&mut self, a: Var) -> Var {
        self.push(Op::Exp(a))
    }
    /// `ln a`.
    pub fn ln(&mut self, a: Var) -> Var {
        self.push(Op::Ln(a))
    }
    /// `√a`.
    pub fn sqrt(&mut self, a: Var) -> Var {
        self.push(Op::Sqrt(a))
    }
    /// `tanh a`.
    pub fn tanh(&mut self, a: Var) -> Var {
        self.push(Op::Tanh(a))
    }
    /// `aⁿ` for a fixed integer `n`.
    pub fn powi(&mut self, a: Var, n: i32) -> Var {
        self.push(Op::Powi(a, n))
    }
    /// `a` where `c > 0`, else `b`.
    pub fn select(&mut self, c: Var, a: Var, b: Var) -> Var {
        self.push(Op::Select(c, a, b))
    }
    /// `c · a` for a constant `c`.
    pub fn scale(&mut self, c: f64, a: Var) -> Var {
        let k = self.constant(c);
        self.mul(k, a)
    }
    /// Applies a user-defined rule.
    pub fn custom(&mut self, rule: &CustomRule, a: Var) -> Var {
        let r = self.register_rule(rule);
        self.push(Op::Custom(r, a))
    }

    /// Finishes the program with the given outputs, as one input block and
    /// one output block, and checks it ([`Program::validate`]).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Layout`] if the program is not well formed: an
    /// output or operand that is not a value of this builder, or an input
    /// pushed as [`Op::Input`] instead of declared with [`Builder::input`];
    /// [`crate::Error::MissingRule`] for an [`Op::Custom`] pushed with a rule
    /// index this builder never registered. A value of another builder whose
    /// index happens to exist here cannot be told apart: keep each builder's
    /// values to itself.
    pub fn finish(self, outputs: &[Var]) -> Result<Program, crate::error::Error> {
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
            input_blocks,
            output_blocks,
        }
    }
}
