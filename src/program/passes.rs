//! Passes over programs: dead-code elimination, specialisation (partial
//! evaluation with folding and CSE), block permutation and composition.

use super::ir::{Builder, Op, Program, Var};
use crate::error::{Error, Result};
use crate::rules::Prim;

impl Program {
    /// Copies `self` into `b`, mapping input `k` to `inputs[k]`; returns the
    /// value map (old instruction index → new value). Guards are copied.
    pub(crate) fn inline_into(&self, b: &mut Builder, inputs: &[Var]) -> Vec<Var> {
        if let Some(e) = &self.defect {
            b.poison(e.clone());
        }
        let rule_ids: Vec<u32> = self.rules.iter().map(|r| b.register_rule(r)).collect();
        let mut map: Vec<Var> = Vec::with_capacity(self.ops.len());
        for op in &self.ops {
            let v = match *op {
                Op::Input(k) => inputs[k as usize],
                ref other => b.push(other.rebuilt(&rule_ids, |o| map[o.index()])),
            };
            map.push(v);
        }
        for g in &self.guards {
            b.guard(map[g.a.index()], map[g.b.index()], g.ordering);
        }
        map
    }

    /// Removes instructions that neither an output nor a guard needs.
    /// Inputs are kept, so the program's signature does not change.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::Builder;
    ///
    /// let mut b = Builder::new();
    /// let x = b.input();
    /// let _unused = b.sin(x);
    /// let y = b.exp(x);
    /// let p = b.finish(&[y]).unwrap().dce();
    /// assert_eq!(p.len(), 2);
    /// ```
    pub fn dce(&self) -> Program {
        let n = self.ops.len();
        let mut live = vec![false; n];
        for v in &self.outputs {
            live[v.index()] = true;
        }
        for g in &self.guards {
            live[g.a.index()] = true;
            live[g.b.index()] = true;
        }
        for i in (0..n).rev() {
            if live[i] || matches!(self.ops[i], Op::Input(_)) {
                live[i] = true;
                for o in self.ops[i].operands().iter() {
                    live[o.index()] = true;
                }
            }
        }
        let mut map = vec![Var(0); n];
        let mut ops = Vec::with_capacity(n);
        for i in 0..n {
            if live[i] {
                map[i] = Var(ops.len() as u32);
                ops.push(self.ops[i].map_operands(|o| map[o.index()]));
            }
        }
        let mut p = self.clone();
        p.ops = ops;
        p.outputs = self.outputs.iter().map(|v| map[v.index()]).collect();
        for g in &mut p.guards {
            g.a = map[g.a.index()];
            g.b = map[g.b.index()];
        }
        p
    }

    /// Partial evaluation: input `k` becomes the constant `c` where
    /// `fixed[k] == Some(c)`; only the outputs listed in `keep` (indices
    /// into the outputs) remain. The result is rebuilt through the
    /// [`Builder`] (folding, structural zeros, CSE) and cleaned with
    /// [`Program::dce`]. It has one input block (the free inputs, in
    /// order) and one output block.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if `fixed` does not have one entry per
    /// input; [`Error::IndexOutOfRange`] if `keep` names an output that
    /// does not exist.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::{trace, Real};
    ///
    /// let p = trace(|x| vec![x[0] * x[1], x[0] + x[1]], &[1.0, 2.0]).unwrap();
    /// let q = p.specialize(&[None, Some(3.0)], &[0]).unwrap();
    /// assert_eq!(q.n_inputs(), 1);
    /// assert_eq!(q.eval(&[2.0]).unwrap(), vec![6.0]);
    /// ```
    pub fn specialize(&self, fixed: &[Option<f64>], keep: &[usize]) -> Result<Program> {
        let seeds: Vec<Seed> = fixed
            .iter()
            .map(|f| f.map_or(Seed::Free, Seed::Value))
            .collect();
        self.specialize_seeds(&seeds, keep)
    }

    /// [`Program::specialize`] with each input given as a [`Seed`], so that
    /// an input can be fixed to a structural zero by name.
    pub(crate) fn specialize_seeds(&self, fixed: &[Seed], keep: &[usize]) -> Result<Program> {
        if fixed.len() != self.n_inputs {
            return Err(Error::LengthMismatch {
                what: "specialize: fixed inputs",
                expected: self.n_inputs,
                got: fixed.len(),
            });
        }
        if let Some(&bad) = keep.iter().find(|&&k| k >= self.outputs.len()) {
            return Err(Error::IndexOutOfRange {
                what: "specialize: output",
                index: bad,
                len: self.outputs.len(),
            });
        }
        if fixed.iter().all(|f| *f == Seed::Free) {
            // Nothing to fold: select the outputs and prune, without
            // rebuilding (the program is already simplified).
            let mut p = self.clone();
            p.outputs = keep.iter().map(|&k| self.outputs[k]).collect();
            p.input_blocks = vec![self.n_inputs];
            p.output_blocks = vec![keep.len()];
            return Ok(p.dce());
        }
        let mut b = Builder::with_capacity(self.ops.len());
        let inputs: Vec<Var> = fixed
            .iter()
            .map(|f| match *f {
                Seed::Value(c) => b.constant(c),
                Seed::Zero => b.zero(),
                Seed::Free => b.input(),
            })
            .collect();
        let map = self.inline_into(&mut b, &inputs);
        let outs: Vec<Var> = keep.iter().map(|&k| map[self.outputs[k].index()]).collect();
        Ok(b.finish_unchecked(&outs).dce())
    }

    /// Reorders the input and output blocks: new input block `j` is old
    /// block `input_perm[j]`, and likewise for outputs.
    ///
    /// # Errors
    ///
    /// [`Error::NotAPermutation`] if either argument is not a permutation
    /// of the block indices.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::functor::reverse_joint;
    /// use optic_ad::{trace, Real};
    ///
    /// let p = trace(|x| vec![x[0] * 3.0], &[1.0]).unwrap();
    /// let j = reverse_joint(&p); // inputs [x, ȳ], outputs [y, x̄]
    /// let swapped = j.permute_blocks(&[1, 0], &[1, 0]).unwrap(); // [ȳ, x] -> [x̄, y]
    /// assert_eq!(swapped.eval(&[2.0, 5.0]).unwrap(), vec![6.0, 15.0]);
    /// assert!(j.permute_blocks(&[0, 0], &[0, 1]).is_err());
    /// ```
    pub fn permute_blocks(&self, input_perm: &[usize], output_perm: &[usize]) -> Result<Program> {
        fn is_perm(p: &[usize], n: usize) -> bool {
            let mut seen = vec![false; n];
            p.len() == n
                && p.iter()
                    .all(|&i| i < n && !std::mem::replace(&mut seen[i], true))
        }
        if !is_perm(input_perm, self.input_blocks.len()) {
            return Err(Error::NotAPermutation {
                what: "permute_blocks: input_perm",
                len: self.input_blocks.len(),
            });
        }
        if !is_perm(output_perm, self.output_blocks.len()) {
            return Err(Error::NotAPermutation {
                what: "permute_blocks: output_perm",
                len: self.output_blocks.len(),
            });
        }
        let starts = |w: &[usize]| -> Vec<usize> {
            w.iter()
                .scan(0, |acc, &x| {
                    let s = *acc;
                    *acc += x;
                    Some(s)
                })
                .collect()
        };
        let in_starts = starts(&self.input_blocks);
        let mut new_index = vec![0u32; self.n_inputs];
        let mut next = 0u32;
        for &blk in input_perm {
            for i in 0..self.input_blocks[blk] {
                new_index[in_starts[blk] + i] = next;
                next += 1;
            }
        }
        let out_starts = starts(&self.output_blocks);
        let mut outputs = Vec::with_capacity(self.outputs.len());
        for &blk in output_perm {
            outputs.extend_from_slice(
                &self.outputs[out_starts[blk]..out_starts[blk] + self.output_blocks[blk]],
            );
        }
        let mut p = self.clone();
        for op in &mut p.ops {
            if let Op::Input(k) = op {
                *k = new_index[*k as usize];
            }
        }
        p.outputs = outputs;
        p.input_blocks = input_perm.iter().map(|&i| self.input_blocks[i]).collect();
        p.output_blocks = output_perm.iter().map(|&i| self.output_blocks[i]).collect();
        Ok(p)
    }

    /// Sequential composition of programs, `next ∘ self`: the outputs of
    /// `self` feed the inputs of `next`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if `self` has a different number of outputs
    /// than `next` has inputs.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::{trace, Real};
    ///
    /// let f = trace(|x| vec![x[0] * 2.0], &[1.0]).unwrap();
    /// let g = trace(|y| vec![y[0].exp()], &[1.0]).unwrap();
    /// let gf = f.then(&g).unwrap();
    /// assert_eq!(gf.eval(&[0.5]).unwrap()[0], 1.0_f64.exp());
    /// ```
    pub fn then(&self, next: &Program) -> Result<Program> {
        if self.outputs.len() != next.n_inputs {
            return Err(Error::LengthMismatch {
                what: "program composition",
                expected: next.n_inputs,
                got: self.outputs.len(),
            });
        }
        let mut b = Builder::with_capacity(self.ops.len() + next.ops.len());
        let inputs: Vec<Var> = (0..self.n_inputs).map(|_| b.input()).collect();
        let m1 = self.inline_into(&mut b, &inputs);
        let mid: Vec<Var> = self.outputs.iter().map(|v| m1[v.index()]).collect();
        let m2 = next.inline_into(&mut b, &mid);
        let outs: Vec<Var> = next.outputs.iter().map(|v| m2[v.index()]).collect();
        Ok(b.finish_blocks(&outs, self.input_blocks.clone(), next.output_blocks.clone()))
    }

    /// The same program with every output that is a structural zero (the
    /// constant `−0.0`, see [`Builder`]) returning `+0.0` instead: what the
    /// drivers hand to users, for whom "no dependence" is the number 0.
    pub(crate) fn positive_zero_outputs(mut self) -> Program {
        let is_structural = |op: &Op| matches!(op, Op::Const(c) if c.to_bits() == super::ir::STRUCTURAL_ZERO.to_bits());
        if !self
            .outputs
            .iter()
            .any(|o| is_structural(&self.ops[o.index()]))
        {
            return self;
        }
        let zero = Var(self.ops.len() as u32);
        self.ops.push(Op::Const(0.0));
        // Every cache of the old instructions goes.
        self.lowered = Default::default();
        self.registers = Default::default();
        #[cfg(feature = "jit")]
        {
            self.native = Default::default();
        }
        for o in &mut self.outputs {
            if is_structural(&self.ops[o.index()]) {
                *o = zero;
            }
        }
        self
    }

    /// The positions of output block `j` among the outputs; `None` if there
    /// is no such block.
    pub(crate) fn output_range(&self, j: usize) -> Option<std::ops::Range<usize>> {
        let start = self.output_blocks.get(..j)?.iter().sum::<usize>();
        Some(start..start + *self.output_blocks.get(j)?)
    }

    /// The same program with all inputs as one block and all outputs as one
    /// block.
    pub fn flatten_blocks(&self) -> Program {
        let mut p = self.clone();
        p.input_blocks = vec![self.n_inputs];
        p.output_blocks = vec![self.outputs.len()];
        p
    }
}

impl Program {
    /// Reorders instructions by dependency level, and by operation within a
    /// level, so that the interpreter meets long runs of the same operation
    /// (fewer mispredicted dispatches). Every instruction still follows its
    /// operands and computes exactly what it computed before, so results
    /// are bit-for-bit unchanged.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::{trace, Real};
    ///
    /// let p = trace(|x| vec![x[0].sin() * x[1] + x[1].sin() * x[0]], &[1.0, 2.0]).unwrap();
    /// let q = p.schedule();
    /// assert_eq!(q.eval(&[0.3, 0.4]).unwrap(), p.eval(&[0.3, 0.4]).unwrap());
    /// ```
    pub fn schedule(&self) -> Program {
        let n = self.ops.len();
        let mut level = vec![0u32; n];
        for (i, op) in self.ops.iter().enumerate() {
            level[i] = op
                .operands()
                .iter()
                .map(|o| level[o.index()] + 1)
                .max()
                .unwrap_or(0);
        }
        // Group by operation: inputs, constants, user rules, then each
        // primitive by its ordinal.
        const KINDS: usize = 3 + Prim::ORDINALS;
        let kind = |op: &Op| -> usize {
            match op {
                Op::Input(_) => 0,
                Op::Const(_) => 1,
                Op::Custom { .. } => 2,
                Op::Apply { prim, .. } => 3 + prim.ordinal(),
            }
        };
        // Counting sort on (level, operation), stable in the old order: linear
        // time, so scheduling costs about one pass over the program.
        let max_level = level.iter().copied().max().unwrap_or(0) as usize;
        let key = |i: usize| level[i] as usize * KINDS + kind(&self.ops[i]);
        let mut start = vec![0usize; (max_level + 1) * KINDS + 1];
        for i in 0..n {
            start[key(i) + 1] += 1;
        }
        for b in 1..start.len() {
            start[b] += start[b - 1];
        }
        let mut order = vec![0usize; n];
        for i in 0..n {
            let k = key(i);
            order[start[k]] = i;
            start[k] += 1;
        }
        let mut new_of = vec![Var(0); n];
        for (new, &old) in order.iter().enumerate() {
            new_of[old] = Var(new as u32);
        }
        let mut p = self.clone();
        p.ops = order
            .iter()
            .map(|&old| self.ops[old].map_operands(|o| new_of[o.index()]))
            .collect();
        p.outputs = self.outputs.iter().map(|v| new_of[v.index()]).collect();
        for g in &mut p.guards {
            g.a = new_of[g.a.index()];
            g.b = new_of[g.b.index()];
        }
        p
    }
}

/// How [`Program::specialize_seeds`] treats one input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Seed {
    /// Stays an input of the specialised program.
    Free,
    /// Fixed to this constant.
    Value(f64),
    /// Fixed to a structural zero ("no dependence", see [`Builder`]): terms
    /// it multiplies are removed, even where they would be `∞ · 0`.
    Zero,
}
