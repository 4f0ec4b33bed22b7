//! Passes over programs: dead-code elimination, specialisation (partial
//! evaluation with folding and CSE), block permutation and composition.

use super::ir::{Builder, Guard, Instr, Program, Var};
use crate::error::{Error, Result};

impl Program {
    /// Copies `self` into `b`, mapping input `k` to `inputs[k]`; returns the
    /// value map (old instruction index → new value). Guards are copied.
    ///
    /// Every instruction is pushed again (folded, simplified, shared), as
    /// it must be where an input becomes a constant. Where every input is
    /// a value that is not a constant, [`Program::copy_into`] gives the same
    /// values for less.
    pub(crate) fn inline_into(&self, b: &mut Builder, inputs: &[Var]) -> Vec<Var> {
        self.inline_with(b, inputs, Builder::push_instr)
    }

    /// [`Program::inline_into`] for inputs that are not constants (fresh
    /// inputs of `b`, or values computed there): the instructions were
    /// simplified by the builder that made `self`, so they are only shared
    /// with equal ones of `b` ([`Builder::copy_instr`]), not simplified
    /// again.
    pub(crate) fn copy_into(&self, b: &mut Builder, inputs: &[Var]) -> Vec<Var> {
        self.inline_with(b, inputs, Builder::copy_instr)
    }

    fn inline_with(
        &self,
        b: &mut Builder,
        inputs: &[Var],
        mut push: impl FnMut(&mut Builder, Instr) -> Var,
    ) -> Vec<Var> {
        if let Some(e) = &self.defect {
            b.poison(e.clone());
        }
        let rule_ids: Vec<u16> = self
            .rules
            .iter()
            .map(|r| u16::try_from(b.register_rule(r)).unwrap_or(u16::MAX))
            .collect();
        let mut map: Vec<Var> = Vec::with_capacity(self.code.len());
        for ins in &self.code {
            let v = match ins.as_input() {
                Some(k) => inputs[k as usize],
                None => {
                    let mut new = ins.map_operands(|o| map[o.index()]);
                    if new.is_custom() {
                        new.rule = rule_ids.get(new.rule as usize).copied().unwrap_or(u16::MAX);
                    }
                    push(b, new)
                }
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
        self.clone().into_dce()
    }

    /// [`Program::dce`] of a program that is no longer needed: nothing is
    /// copied when nothing is dead, and the instructions are compacted in
    /// place otherwise.
    pub(crate) fn into_dce(self) -> Program {
        let live = self.live();
        if live.iter().all(|&l| l) {
            return self;
        }
        let mut p = self;
        let mut code = std::mem::take(&mut p.code);
        let mut map = vec![Var(0); code.len()];
        let mut next = 0usize;
        for i in 0..code.len() {
            if live[i] {
                map[i] = Var(next as u32);
                code[next] = code[i].map_operands(|o| map[o.index()]);
                next += 1;
            }
        }
        code.truncate(next);
        code.shrink_to_fit();
        let outputs = p.outputs.iter().map(|v| map[v.index()]).collect();
        let guards = renumber_guards(&p.guards, &map);
        p.with_code(code, outputs, guards)
    }

    /// Which instructions an output or a guard needs; inputs are always
    /// live.
    pub(crate) fn live(&self) -> Vec<bool> {
        let roots = self
            .outputs
            .iter()
            .chain(self.guards.iter().flat_map(|g| [&g.a, &g.b]));
        let mut live = live_from(&self.code, roots);
        for (l, ins) in live.iter_mut().zip(&self.code) {
            *l |= ins.is_input();
        }
        live
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
            return Ok(p.into_dce());
        }
        let mut b = Builder::with_capacity(self.code.len());
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
        Ok(b.finish_unchecked(&outs).into_dce())
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
        let in_starts = block_starts(&self.input_blocks);
        let mut new_index = vec![0u32; self.n_inputs];
        let mut next = 0u32;
        for &blk in input_perm {
            for i in 0..self.input_blocks[blk] {
                new_index[in_starts[blk] + i] = next;
                next += 1;
            }
        }
        let out_starts = block_starts(&self.output_blocks);
        let mut outputs = Vec::with_capacity(self.outputs.len());
        for &blk in output_perm {
            outputs.extend_from_slice(
                &self.outputs[out_starts[blk]..out_starts[blk] + self.output_blocks[blk]],
            );
        }
        let mut p = self.clone();
        for ins in &mut p.code {
            if let Some(k) = ins.as_input() {
                *ins = Instr::input(new_index[k as usize]);
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
        let mut b = Builder::with_capacity(self.code.len() + next.code.len());
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
        let is_structural = |ins: &Instr| {
            ins.as_const()
                .is_some_and(|c| c.to_bits() == super::ir::STRUCTURAL_ZERO.to_bits())
        };
        if !self
            .outputs
            .iter()
            .any(|o| is_structural(&self.code[o.index()]))
        {
            return self;
        }
        // A `+0.0` of the program's own, or a new one at the end.
        let zero = match self.code.iter().position(|ins| {
            ins.as_const()
                .is_some_and(|c| c.to_bits() == 0.0f64.to_bits())
        }) {
            Some(i) => Var(i as u32),
            None => {
                self.code.push(Instr::constant(0.0));
                Var(self.code.len() as u32 - 1)
            }
        };
        for o in &mut self.outputs {
            if is_structural(&self.code[o.index()]) {
                *o = zero;
            }
        }
        self
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
    /// Reorders instructions so that the evaluators meet long runs of the
    /// same operation: each instruction first moves up to just after its
    /// operands (so a pullback that needs only one element's values runs
    /// next to them), then windows of that order are sorted by dependency
    /// level, and by operation within a level (see the book's chapter "How
    /// programs run"). Every instruction still follows its operands and
    /// computes exactly what it computed before, so results are
    /// bit-for-bit unchanged. Linear in the program's length.
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
        let live = vec![true; self.code.len()];
        self.clone().scheduled(&live)
    }

    /// [`Program::schedule`] of a program that is no longer needed, with
    /// dead instructions dropped on the way (one pass for both).
    pub(crate) fn into_schedule(self) -> Program {
        let live = self.live();
        self.scheduled(&live)
    }

    /// The `live` instructions in the order of [`Program::schedule`].
    fn scheduled(self, live: &[bool]) -> Program {
        let order = schedule_order(&self.code, live);
        let mut new_of = vec![Var(0); self.code.len()];
        for (new, &old) in order.iter().enumerate() {
            new_of[old as usize] = Var(new as u32);
        }
        let code = order
            .iter()
            .map(|&old| self.code[old as usize].map_operands(|o| new_of[o.index()]))
            .collect();
        let outputs = self.outputs.iter().map(|v| new_of[v.index()]).collect();
        let guards = renumber_guards(&self.guards, &new_of);
        self.with_code(code, outputs, guards)
    }
}

/// Which of the instructions `code` the values `roots` need, themselves
/// included: one pass in reverse order.
pub(crate) fn live_from<'a>(code: &[Instr], roots: impl IntoIterator<Item = &'a Var>) -> Vec<bool> {
    let mut live = vec![false; code.len()];
    for v in roots {
        if let Some(l) = live.get_mut(v.index()) {
            *l = true;
        }
    }
    for i in (0..code.len()).rev() {
        if live[i] {
            for o in code[i].operands() {
                live[o.index()] = true;
            }
        }
    }
    live
}

/// Where each block starts, given the block widths `w`.
pub(crate) fn block_starts(w: &[usize]) -> Vec<usize> {
    w.iter()
        .scan(0, |acc, &x| {
            let s = *acc;
            *acc += x;
            Some(s)
        })
        .collect()
}

/// The guards with their operands renumbered by `map`.
fn renumber_guards(guards: &[Guard], map: &[Var]) -> Vec<Guard> {
    guards
        .iter()
        .map(|g| Guard {
            a: map[g.a.index()],
            b: map[g.b.index()],
            ordering: g.ordering,
        })
        .collect()
}

/// The order [`Program::schedule`] puts the live instructions of `code` in
/// (old indices): see [`Scheduler`].
pub(crate) fn schedule_order(code: &[Instr], live: &[bool]) -> Vec<u32> {
    let mut items: Vec<u32> = (0..code.len() as u32)
        .filter(|&i| live[i as usize])
        .collect();
    Scheduler::default().sort(code, &mut items);
    items
}

/// How many consecutive instructions [`Program::schedule`] reorders among
/// themselves by level: enough for long runs of one operation, few enough
/// that the values a window computes stay in cache (sorting a whole long
/// program by level would compute every element's first step, then every
/// element's second, keeping all of them alive at once). With the packed
/// register code, 8192 ran the scalar Rosenbrock gradient at n = 10⁵ at
/// 0.81 ns per instruction against 1.03 for 16 384 and 1.05 for 65 536
/// (equal at 10⁴; best of 5 in one process; `benches/RESULTS.md`).
pub(crate) const SCHEDULE_WINDOW: usize = 8192;

/// A source read by more instructions than this is shared (a parameter
/// every element reads, a constant): [`Scheduler`] does not anchor its
/// readers to its first read.
const SHARED_READS: u32 = 32;

/// Bits of a level in [`Scheduler`]'s packed (window, level) words:
/// enough for [`SCHEDULE_WINDOW`] levels, leaving 2¹⁸ windows.
const LEVEL_BITS: u32 = 14;
/// The flag of a source in [`Scheduler`]'s anchors (a position below it).
const SOURCE: u32 = 1 << 31;
/// The flag of a computed value whose earliest reader's anchor
/// [`Scheduler::sink`] has recorded (positions stay below it).
const READ_BY: u32 = 1 << 30;
/// How far past its own anchor an instruction's earliest reader must be
/// anchored for [`Scheduler::sink`] to move it there.
const SINK_GAP: u32 = 512;
/// The bits of [`Scheduler`]'s read counts (above [`SHARED_READS`]).
const READS: u8 = 0x7f;
const _: () = assert!(SHARED_READS < READS as u32);
/// The flag of a constant among [`Scheduler`]'s sources.
const CONST_SOURCE: u8 = 0x80;
const _: () = assert!(SCHEDULE_WINDOW <= 1 << LEVEL_BITS);

/// Orders a stage's instructions for the evaluators, as
/// [`Program::schedule`] orders a program, in two steps.
///
/// 1. **Anchors.** Each instruction moves up to just after the last of
///    its operands: its anchor is the highest anchor among its operands,
///    where an operand without operands of its own (an input, a constant,
///    a value of an earlier stage) counts as the position of its first
///    reader. Sorting by anchor, stable in program order, keeps every
///    instruction after its operands. Reverse mode appends the pullbacks
///    after the whole forward sweep; where a pullback needs only one
///    element's forward values (a constant seed, a sum of terms), this
///    puts it next to them, so those values die young instead of living
///    across the whole program. Then, in reverse, an instruction whose
///    readers all sit more than [`SINK_GAP`] positions later sinks to the
///    earliest of them (see [`Scheduler::sink`]).
/// 2. **Levels.** Windows of [`SCHEDULE_WINDOW`] consecutive instructions
///    of that order are each sorted by dependency level, and by operation
///    within a level: an instruction is one level above the highest of its
///    operands in the same window (operands outside it count as level 0).
///    The same step of many elements then sits together in a run of one
///    operation.
///
/// Stable counting sorts on keys computed once (a least-significant-digit
/// radix sort), in buffers reused between stages: linear in the number of
/// instructions.
#[derive(Default)]
pub(crate) struct Scheduler {
    /// Per value of `code`: its anchor, or for a value without operands
    /// the position of its first reader (`u32::MAX` while unread).
    anchor: Vec<u32>,
    /// Per value of `code`, for sources: how often the stage reads it
    /// (saturating at [`READS`]), and [`CONST_SOURCE`] for a constant.
    reads: Vec<u8>,
    /// Per position of the stage: the anchor of the instruction there
    /// (`u32::MAX` for a source).
    at: Vec<u32>,
    /// The computing instructions in anchor order.
    order: Vec<u32>,
    /// (key, operation, instruction) entries being sorted.
    keys: Vec<(u32, u32, u32)>,
    tmp: Vec<(u32, u32, u32)>,
    start: Vec<u32>,
}

impl Scheduler {
    /// Sorts `items` (indices into `code`, increasing). The values of
    /// `code` that `items` read but do not list (an earlier stage's, when
    /// sorting one stage) count as sources.
    pub(crate) fn sort(&mut self, code: &[Instr], items: &mut [u32]) {
        let len = items.len();
        // Positions are kept below two flag bits; a stage this long does not
        // fit in memory anyway, but would simply stay in program order.
        if len == 0 || len >= READ_BY as usize {
            return;
        }
        // Pass 1, per value: a source (anything `items` reads before it
        // is computed here, or never computed here) holds `SOURCE |` the
        // position of its first reader and counts its reads; a computing
        // item is marked as such (`anchor < SOURCE`) when reached, so
        // that its readers, later in program order, see it.
        self.anchor.clear();
        self.anchor.resize(code.len(), u32::MAX);
        self.reads.clear();
        self.reads.resize(code.len(), 0);
        let mut sources_listed = false;
        for (p, &i) in items.iter().enumerate() {
            let ops = code[i as usize].operands();
            for o in ops {
                let o = o.index();
                let a = self.anchor[o];
                if a >= SOURCE {
                    let r = &mut self.reads[o];
                    if a == u32::MAX && code[o].is_const() {
                        // First read: constants are told apart once here,
                        // for the windows' `kind`, instead of at each read.
                        *r = CONST_SOURCE;
                    }
                    *r += u8::from(*r & READS < READS);
                    self.anchor[o] = a.min(SOURCE | p as u32);
                }
            }
            if ops.is_empty() {
                sources_listed = true;
            } else {
                self.anchor[i as usize] = 0;
            }
        }
        // Pass 2, in program order: the anchors of the computing items,
        // kept by position in `at` (`u32::MAX` for a source) and counted
        // for the sort.
        self.at.clear();
        self.at.resize(len, u32::MAX);
        self.start.clear();
        self.start.resize(len + 1, 0);
        let mut may_sink = false;
        for (p, &i) in items.iter().enumerate() {
            let ops = code[i as usize].operands();
            if ops.is_empty() {
                continue;
            }
            let p = p as u32;
            let mut computed = None;
            let mut lowest = u32::MAX;
            let mut first_read = u32::MAX;
            for o in ops {
                let o = o.index();
                let a = self.anchor[o];
                if a < SOURCE {
                    computed = Some(computed.map_or(a, |c: u32| c.max(a)));
                    lowest = lowest.min(a);
                } else if u32::from(self.reads[o] & READS) <= SHARED_READS {
                    first_read = first_read.min(a & !SOURCE);
                }
            }
            // Reading computed values: just after the latest of them.
            // Sources only: next to the first reader of a source read by
            // few instructions (an element's own input); a source read
            // everywhere (a shared parameter, a constant) says nothing
            // about where the instruction belongs. Never past its own
            // place.
            let a = computed.unwrap_or(first_read).min(p);
            self.anchor[i as usize] = a;
            self.at[p as usize] = a;
            self.start[a as usize + 1] += 1;
            // Whether pass 3 can move anything: the first instruction it
            // moves (in reverse) has readers that did not move, so one of
            // them is anchored far after it here already.
            may_sink |= lowest != u32::MAX && a > lowest + SINK_GAP;
        }
        if may_sink {
            self.sink(code, items);
        }
        // A stable counting sort of the computing items by anchor (anchors
        // are positions, so the range is the stage's length).
        for k in 1..self.start.len() {
            self.start[k] += self.start[k - 1];
        }
        let computing = self.start[len] as usize;
        self.order.clear();
        self.order.resize(computing, 0);
        for (&a, &i) in self.at.iter().zip(items.iter()) {
            if a != u32::MAX {
                let slot = &mut self.start[a as usize];
                self.order[*slot as usize] = i;
                *slot += 1;
            }
        }
        if sources_listed {
            self.place_sources(code, items);
        } else {
            items.copy_from_slice(&self.order);
        }
        // The anchors are done with: the array now holds each value's
        // window (plus one) and level there, as `window << LEVEL_BITS |
        // level` (a window has at most SCHEDULE_WINDOW levels).
        self.anchor.fill(0);
        for (w, window) in items.chunks_mut(SCHEDULE_WINDOW).enumerate() {
            self.sort_window(code, window, w as u32 + 1);
        }
    }

    /// Pass 3, in reverse program order: an instruction whose readers are
    /// all anchored more than [`SINK_GAP`] positions after its own anchor
    /// sinks to the earliest of them, so that it is computed where it is
    /// used instead of living from its operands to its readers (in a
    /// gradient, a product `xᵢⱼ · r̄ᵢ` made beside row `i` but summed into a
    /// chain that runs at the end); its operands may then sink after it.
    /// It still follows its operands (its anchor only grows) and precedes
    /// its readers (an anchor no later than theirs, and earlier in program
    /// order). Moves the counts of the anchors it changes.
    fn sink(&mut self, code: &[Instr], items: &[u32]) {
        for (p, &i) in items.iter().enumerate().rev() {
            let mut a = self.at[p];
            if a == u32::MAX {
                continue;
            }
            let read = self.anchor[i as usize];
            if read & READ_BY != 0 {
                let r = read & !READ_BY;
                if r > a + SINK_GAP {
                    self.start[a as usize + 1] -= 1;
                    self.start[r as usize + 1] += 1;
                    a = r;
                    self.at[p] = a;
                }
            }
            // Each computed operand learns its earliest reader's anchor
            // (`anchor` of a computed value now holds that, flagged).
            for o in code[i as usize].operands() {
                let e = &mut self.anchor[o.index()];
                if *e < SOURCE {
                    *e = READ_BY
                        | if *e & READ_BY != 0 {
                            (*e & !READ_BY).min(a)
                        } else {
                            a
                        };
                }
            }
        }
    }

    /// Writes into `items` the computing items in anchor order (`order`),
    /// each source that `items` lists just before its first reader there,
    /// unread ones first.
    fn place_sources(&mut self, code: &[Instr], items: &mut [u32]) {
        // `anchor` marks the sources still to place.
        const TO_PLACE: u32 = u32::MAX - 1;
        let mut w = 0;
        for p in 0..items.len() {
            let i = items[p] as usize;
            if code[i].operands().is_empty() {
                if self.reads[i] & READS == 0 {
                    items[w] = i as u32;
                    w += 1;
                } else {
                    self.anchor[i] = TO_PLACE;
                }
            }
        }
        for &i in &self.order {
            for o in code[i as usize].operands() {
                let o = o.index();
                if self.anchor[o] == TO_PLACE {
                    self.anchor[o] = 0;
                    items[w] = o as u32;
                    w += 1;
                }
            }
            items[w] = i;
            w += 1;
        }
        debug_assert_eq!(w, items.len());
    }

    /// Sorts one window by (level, operation), stable.
    fn sort_window(&mut self, code: &[Instr], window: &mut [u32], stamp: u32) {
        self.keys.clear();
        let (mut max_level, mut max_kind) = (0, 0);
        for &i in window.iter() {
            let ins = &code[i as usize];
            let l = 1 + ins
                .operands()
                .iter()
                .map(|o| match self.anchor[o.index()] {
                    x if x >> LEVEL_BITS == stamp => x & ((1 << LEVEL_BITS) - 1),
                    _ => 0,
                })
                .max()
                .unwrap_or(0);
            self.anchor[i as usize] = stamp << LEVEL_BITS | l;
            let k = kind(&self.reads, ins);
            max_level = max_level.max(l);
            max_kind = max_kind.max(k);
            self.keys.push((l, k, i));
        }
        self.tmp.clear();
        self.tmp.resize(window.len(), (0, 0, 0));
        let kinds = max_kind + 1;
        if (max_level as usize + 1) * kinds as usize <= 2 * window.len() {
            // Few (level, operation) pairs: one sort on the pair.
            let max = max_level * kinds + max_kind;
            counting_sort(&self.keys, &mut self.tmp, &mut self.start, max, |e| {
                e.0 * kinds + e.1
            });
            for (w, e) in window.iter_mut().zip(&self.tmp) {
                *w = e.2;
            }
            return;
        }
        counting_sort(&self.keys, &mut self.tmp, &mut self.start, max_kind, |e| {
            e.1
        });
        counting_sort(&self.tmp, &mut self.keys, &mut self.start, max_level, |e| {
            e.0
        });
        for (w, e) in window.iter_mut().zip(&self.keys) {
            *w = e.2;
        }
    }
}

/// The scheduling class of an instruction: inputs, constants, user rules,
/// then each primitive by its opcode, told apart by which operand is a
/// constant (the lowered code takes a constant operand as an immediate,
/// a different instruction, so `x · c` and `x · y` make separate runs).
/// `reads` flags the constants ([`CONST_SOURCE`]).
fn kind(reads: &[u8], ins: &Instr) -> u32 {
    let ops = ins.operands();
    let is_const = |j: usize| {
        ops.get(j)
            .is_some_and(|o| reads[o.index()] & CONST_SOURCE != 0)
    };
    let k = match (is_const(0), is_const(1)) {
        (true, false) => 1,
        (false, true) => 2,
        _ => 0,
    };
    3 * u32::from(ins.code) + k
}

/// A stable counting sort of `from` into `to` by `key` (at most `max`).
fn counting_sort<T: Copy>(
    from: &[T],
    to: &mut [T],
    start: &mut Vec<u32>,
    max: u32,
    key: impl Fn(&T) -> u32,
) {
    start.clear();
    start.resize(max as usize + 2, 0);
    for e in from {
        start[key(e) as usize + 1] += 1;
    }
    for k in 1..start.len() {
        start[k] += start[k - 1];
    }
    for e in from {
        let k = key(e) as usize;
        to[start[k] as usize] = *e;
        start[k] += 1;
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
