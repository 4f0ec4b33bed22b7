//! Binding a primitive in a [`Builder`] (JAX's `bind`): the arity check,
//! constant folding by the primitive's value, the primitive's own
//! simplifications, then sharing. This is the builder's half that knows the
//! primitive table; the IR (`program::ir`) stores opcodes and shares
//! instructions without interpreting them. Also here: the convenience
//! methods of [`Builder`] for each primitive, and the check of a finished
//! [`Program`] against the table ([`Program::validate`]).

use super::{opcode, Prim};
use crate::error::{Error, Malformation, RuleMisuse};
use crate::program::ir::{Builder, Contribs, CustomRule, Instr, Program, Var, MAX_ARITY};

impl Instr {
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

    /// The primitive, for a primitive's instruction.
    #[inline(always)]
    pub(crate) fn prim(&self) -> Option<Prim> {
        Prim::of_opcode(self.code)
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

    /// `Some(a)` when `v` is `−a`. (`None` for a value not of this
    /// builder; [`Builder::finish`] reports those.)
    #[inline]
    pub(crate) fn negated(&self, v: Var) -> Option<Var> {
        match self.code.get(v.index()) {
            Some(ins) if ins.prim() == Some(Prim::Neg) && ins.len == 1 => Some(ins.args[0]),
            _ => None,
        }
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
    /// pushed as [`Op::Input`](crate::Op::Input) instead of declared with [`Builder::input`],
    /// or a primitive or rule given the wrong number of operands;
    /// [`crate::Error::MissingRule`] for an [`Op::Custom`](crate::Op::Custom) pushed with a rule
    /// index this builder never registered;
    /// [`crate::Error::TooManyRules`] past [`MAX_RULES`](crate::MAX_RULES) rules. A value of
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
}

impl CustomRule {
    /// The pullback as contributions per operand; what the rule returns
    /// beyond its arity is ignored, and what it does not return counts as a
    /// structural zero.
    pub(crate) fn pullback_contribs(
        &self,
        b: &mut Builder,
        x: &[Var],
        y: Var,
        ct: Var,
    ) -> Contribs {
        let (inputs, start) = (b.n_inputs(), b.len());
        let g = self.inner.pullback(b, x, y, ct);
        if let Some(misuse) = misuse(b, inputs, start, x.len(), &g) {
            b.rollback(start, inputs);
            b.poison(Error::BadRule {
                rule: self.name().to_string(),
                misuse,
            });
            return [None; MAX_ARITY];
        }
        let mut out = [None; MAX_ARITY];
        for (slot, v) in out.iter_mut().zip(g) {
            *slot = Some(v);
        }
        out
    }
}

/// How a pullback that started with `inputs` inputs and `start`
/// instructions in `b`, and returned `g` for `arity` arguments, misused the
/// builder, if it did. (A value of another builder whose index also exists
/// in `b` cannot be told apart.)
fn misuse(b: &Builder, inputs: usize, start: usize, arity: usize, g: &[Var]) -> Option<RuleMisuse> {
    if b.n_inputs() != inputs {
        return Some(RuleMisuse::DeclaredInput);
    }
    if g.len() != arity {
        return Some(RuleMisuse::WrongCount(g.len()));
    }
    if g.iter().any(|v| v.index() >= b.len()) {
        return Some(RuleMisuse::ForeignValue);
    }
    for (i, ins) in b.code().iter().enumerate().skip(start) {
        if ins.operands().iter().any(|o| o.index() >= i) {
            return Some(RuleMisuse::Malformed);
        }
        let n = ins.len as usize;
        if ins.is_custom() {
            match b.rules().get(ins.rule as usize) {
                Some(r) if r.arity() == n => {}
                _ => return Some(RuleMisuse::UnknownRule),
            }
        }
        if ins.prim().is_some_and(|p| p.arity() != n) {
            return Some(RuleMisuse::Malformed);
        }
    }
    None
}
