//! The interpreter: evaluates a [`Program`] over any [`Real`].

use super::ir::{Instr, Program, Var};
use crate::error::{Error, Result};
use crate::real::Real;
use crate::rules::Prim;

/// Reusable evaluation buffer: one slot per instruction. Keeping one per
/// program and calling [`Program::eval_with`] makes repeated evaluation
/// allocation-free.
#[derive(Debug, Clone, Default)]
pub struct Workspace<T> {
    vals: Vec<T>,
}

impl<T: Real> Workspace<T> {
    /// An empty workspace; it grows to the program's size on first use.
    pub fn new() -> Self {
        Workspace { vals: Vec::new() }
    }

    /// The value of `v` after the last evaluation.
    ///
    /// Returns `None` if `v` is out of range.
    pub fn value(&self, v: Var) -> Option<T> {
        self.vals.get(v.index()).copied()
    }
}

impl Program {
    /// Evaluates the program at `inputs`, returning its outputs.
    ///
    /// Shapes: `inputs.len() == self.n_inputs()`; the result has
    /// `self.n_outputs()` entries.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] for a wrong input length;
    /// [`Error::GuardFailed`] when a comparison recorded while tracing gives
    /// a different answer at `inputs`; [`Error::MissingRule`] if the program
    /// refers to a user rule it does not carry.
    ///
    /// # NaN and ∞
    ///
    /// Operations follow IEEE 754 (`ln` of a negative number is NaN, and so
    /// on); NaN propagates. A guard whose operands were unordered (NaN) at
    /// trace time holds only where they are unordered again.
    ///
    /// # Example
    ///
    /// ```
    /// use approx::assert_relative_eq;
    /// use optic_ad::{trace, Real};
    ///
    /// fn f<T: Real>(x: &[T]) -> T {
    ///     x[0].sin() * x[1]
    /// }
    /// let p = trace(|x| vec![f(x)], &[1.0, 2.0]).unwrap();
    /// // Trace once, evaluate many.
    /// let y = p.eval(&[0.3_f64, 4.0]).unwrap();
    /// assert_relative_eq!(y[0], 0.3_f64.sin() * 4.0);
    /// ```
    pub fn eval<T: Real>(&self, inputs: &[T]) -> Result<Vec<T>> {
        let mut ws = Workspace::new();
        let mut out = vec![T::cst(0.0); self.outputs.len()];
        self.eval_with(&mut ws, inputs, &mut out)?;
        Ok(out)
    }

    /// Evaluates into `outputs` using `ws` as scratch: no allocation once
    /// `ws` has grown to the program's size.
    ///
    /// Shapes: `inputs.len() == self.n_inputs()`,
    /// `outputs.len() == self.n_outputs()`.
    ///
    /// # Errors
    ///
    /// As [`Program::eval`], plus [`Error::LengthMismatch`] for `outputs`.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::{trace, Real, Workspace};
    ///
    /// let p = trace(|x| vec![x[0] * x[0]], &[1.0]).unwrap();
    /// let mut ws = Workspace::new();
    /// let mut out = [0.0];
    /// for i in 0..3 {
    ///     p.eval_with(&mut ws, &[i as f64], &mut out).unwrap();
    ///     assert_eq!(out[0], (i * i) as f64);
    /// }
    /// ```
    pub fn eval_with<T: Real>(
        &self,
        ws: &mut Workspace<T>,
        inputs: &[T],
        outputs: &mut [T],
    ) -> Result<()> {
        self.run(ws, inputs)?;
        if outputs.len() != self.outputs.len() {
            return Err(Error::LengthMismatch {
                what: "program outputs",
                expected: self.outputs.len(),
                got: outputs.len(),
            });
        }
        for (o, v) in outputs.iter_mut().zip(&self.outputs) {
            *o = ws.vals[v.index()];
        }
        Ok(())
    }

    /// What every evaluator checks before it runs: the defect of a program
    /// derived through a misused user rule, then the number of inputs and,
    /// where given, of output slots. Inlined, with the errors out of line:
    /// on a small compiled program (`Derivatives<U3>`) the call was a few
    /// percent of the time.
    #[inline]
    pub(crate) fn check_run(&self, inputs: usize, outputs: Option<usize>) -> Result<()> {
        let fits = outputs.is_none_or(|got| got == self.outputs.len());
        if self.defect.is_none() && inputs == self.n_inputs && fits {
            return Ok(());
        }
        self.run_error(inputs, outputs)
    }

    /// The error [`Program::check_run`] reports.
    #[cold]
    #[inline(never)]
    fn run_error(&self, inputs: usize, outputs: Option<usize>) -> Result<()> {
        if let Some(e) = &self.defect {
            return Err(e.clone());
        }
        if inputs != self.n_inputs {
            return Err(Error::LengthMismatch {
                what: "program inputs",
                expected: self.n_inputs,
                got: inputs,
            });
        }
        match outputs {
            Some(got) if got != self.outputs.len() => Err(Error::LengthMismatch {
                what: "program outputs",
                expected: self.outputs.len(),
                got,
            }),
            _ => Ok(()),
        }
    }

    /// A user rule's instruction (kept off the interpreter's hot path).
    #[inline(never)]
    fn custom<T: Real>(&self, ins: &Instr, vals: &[T]) -> T {
        let [a, b, c] = ins.args;
        let x = [vals[a.index()], vals[b.index()], vals[c.index()]];
        match self.rules.get(ins.rule as usize) {
            Some(r) if ins.is_custom() => T::apply_custom(r, &x[..ins.operands().len()]),
            _ => T::cst(f64::NAN),
        }
    }

    /// Runs every instruction and checks the guards, leaving all values in
    /// `ws`.
    pub(crate) fn run<T: Real>(&self, ws: &mut Workspace<T>, inputs: &[T]) -> Result<()> {
        self.check_run(inputs.len(), None)?;
        let code = &self.code;
        let vals = &mut ws.vals;
        // Sized once (no allocation in steady state), then written in
        // place: no length update or capacity check per instruction.
        // Operands always precede their use, so every read is of a value
        // already written in this run.
        if vals.len() != code.len() {
            // Any value will do as filler; an input's, because a constant
            // would be recorded by a tracer.
            let filler = inputs.first().copied().unwrap_or_else(|| T::cst(0.0));
            vals.clear();
            vals.resize(code.len(), filler);
        }
        for (i, ins) in code.iter().enumerate() {
            let v = Prim::eval_instr(ins, inputs, vals, T::cst, || self.custom(ins, vals));
            vals[i] = v;
        }
        check_guards(&self.guards, |v| vals[v.index()])
    }
}

/// [`Error::GuardFailed`] for the first recorded comparison that does not
/// hold for the values `value` reads (of f64, of a tracer's primal, or of a
/// jet's constant term).
pub(crate) fn check_guards<T: PartialOrd>(
    guards: &[super::ir::Guard],
    value: impl Fn(super::ir::Var) -> T,
) -> Result<()> {
    check_guard_operands(guards, |_, g| (value(g.a), value(g.b)))
}

/// [`check_guards`] with the operands of guard `i` given by `operands(i,
/// guard)`, for evaluators that keep them elsewhere than by value number
/// (the lowered evaluator's registers).
pub(crate) fn check_guard_operands<T: PartialOrd>(
    guards: &[super::ir::Guard],
    operands: impl Fn(usize, &super::ir::Guard) -> (T, T),
) -> Result<()> {
    for (index, g) in guards.iter().enumerate() {
        let (a, b) = operands(index, g);
        let now = a.partial_cmp(&b);
        if now != g.ordering {
            return Err(Error::GuardFailed {
                index,
                traced: g.ordering,
                now,
            });
        }
    }
    Ok(())
}
