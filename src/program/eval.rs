//! The interpreter: evaluates a [`Program`] over any [`Real`].

use super::ir::{Op, Program, Var};
use crate::error::{Error, Result};
use crate::real::Real;

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

    /// Runs every instruction and checks the guards, leaving all values in
    /// `ws`.
    pub(crate) fn run<T: Real>(&self, ws: &mut Workspace<T>, inputs: &[T]) -> Result<()> {
        if let Some(e) = &self.defect {
            return Err(e.clone());
        }
        if inputs.len() != self.n_inputs {
            return Err(Error::LengthMismatch {
                what: "program inputs",
                expected: self.n_inputs,
                got: inputs.len(),
            });
        }
        let vals = &mut ws.vals;
        vals.clear();
        vals.reserve(self.ops.len());
        for op in &self.ops {
            // Operands always precede their use, so every index is below
            // `vals.len()`.
            let v = match *op {
                Op::Input(k) => inputs[k as usize],
                Op::Const(c) => T::cst(c),
                Op::Apply { prim, param, args } => T::apply_prim_at(prim, param, &args, vals),
                Op::Custom { rule, args } => {
                    let [a, b, c] = args.padded();
                    let x = [vals[a.index()], vals[b.index()], vals[c.index()]];
                    T::apply_custom(&self.rules[rule as usize], &x[..args.len()])
                }
            };
            vals.push(v);
        }
        for (index, g) in self.guards.iter().enumerate() {
            let now = vals[g.a.index()].partial_cmp(&vals[g.b.index()]);
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
}
