//! Backends: how a [`Program`] runs on `f64`, kept out of the IR. An
//! [`Executable`] owns a program together with its compiled forms (register
//! code, and native code under the feature `jit`) and the policy that
//! chooses between them; the IR holds none of them.
//!
//! # The lowered `f64` evaluator
//!
//! A program compiled once to register code is the path the compiled
//! drivers take in steady state.
//!
//! The interpreter ([`Program::eval_with`]) keeps one slot per instruction
//! and runs on any [`crate::Real`]. For `f64` a program is lowered further,
//! once, when it is first run this way:
//!
//! * **Registers from liveness.** A value's slot is freed after its last
//!   use and reused by the next value (a linear scan over straight-line
//!   SSA code, freed slots taken last-in first-out so that they are still
//!   in cache). The working set is the program's largest number of values
//!   alive at once, not its length.
//! * **Constants as immediates.** `x + c`, `c − x`, `x · c`, `c / x`, … carry
//!   `c` in the instruction; a constant that some other primitive reads is
//!   a register loaded at the start of the run.
//! * **Fused instructions.** A product used once, by a sum or a difference,
//!   is computed inside it: `a·b + c`, `a·b − c`, `c − a·b`. The rounding is
//!   that of the two separate operations (not a fused multiply-add), so the
//!   results stay those of the interpreter, bit for bit.
//! * **Runs of one kind.** [`Program::schedule`] orders each dependency
//!   level by operation, so consecutive instructions often share their
//!   kind; each such run executes in a loop specialised to that operation,
//!   with no dispatch per instruction.
//! * **Packed runs.** A run of arithmetic is stored as its registers'
//!   32-bit words with no tag (the run knows its kind), an immediate as
//!   two more words: 8–16 bytes an instruction instead of 24. Once the code
//!   outgrows the cache, reading it bounds the run time.
//! * **Strided runs.** A scalar loop traces to the same few operations
//!   once per element. The scheduler puts each element's steps of one
//!   kind side by side, and in a program longer than one scheduling
//!   window a value read only inside its window takes that window's
//!   scratch register at its offset, so such a run writes consecutive
//!   registers and reads registers that step evenly. A stretch of four or
//!   more instructions whose words step by the same amounts is stored
//!   once, as its first instruction's words and the steps, and runs with
//!   no code to read at all; where every register steps by one, four
//!   instructions at a time on vector registers. A running sum (an
//!   operand that is the previous instruction's result) is carried in a
//!   machine register instead. This is what brings a traced loop close to
//!   the array tier's speed.
//!
//! Every instruction computes exactly the floating-point operation the
//! interpreter computes, with the operands in the same order, so the two
//! agree bit for bit on every input; the tests check this on the random
//! programs of the property tests and on the drivers' derived programs. The
//! one difference: where a result is NaN, its sign and payload may differ,
//! because Rust's floating-point semantics leave them unspecified (RFC 3514)
//! and the compiler may commute the operands of `+` and `·`.

mod code;
mod lower;
#[cfg(feature = "jit")]
pub(crate) mod native;
mod vm;

use std::ops::Deref;
use std::sync::OnceLock;

use crate::error::Result;
use crate::program::eval::check_guard_operands;
use crate::program::ir::Program;
/// Elements per block of an array map: one call of a native block kernel
/// computes a block (feature `jit`), and the register code runs each body
/// instruction once over a block, as a loop over its lanes that the
/// compiler vectorises. With `jit`, 128 (1 KiB per value) amortises the
/// per-block work of the array executor (gathering a view's edges, adding
/// outputs into sums) four times better than 32: Rosenbrock's gradient at
/// n = 10⁵ took 0.70× its time, the minimal surface's 0.91×
/// (`benches/RESULTS.md`, twelfth session); the register code then runs a
/// block in four runs of 32 lanes. Without `jit`, 32: rows of 128 lanes
/// made the register code slower (the minimal surface's gradient 1.4×).
#[cfg(feature = "jit")]
pub(crate) const BLOCK: usize = 128;
/// Elements per block of an array map (see the `jit` build's).
#[cfg(not(feature = "jit"))]
pub(crate) const BLOCK: usize = 32;
use vm::{run_all, Lane};

/// Whether this build has the native backend (feature `jit`): the one
/// switch the drivers read, so that the feature is decided here and not
/// across the crate.
pub(crate) const NATIVE: bool = cfg!(feature = "jit");

pub(crate) use code::RegisterCode;
pub use vm::Registers;
pub(crate) use vm::{LaneRegisters, LANES};

/// A program with its compiled forms for `f64`: register code, lowered on
/// first use, and (feature `jit`) native code, compiled once the program is
/// hot. The program itself is reached through `Deref`.
///
/// Build one per program you evaluate many times, and keep it: the
/// compiled forms live as long as it does. Clones start without them.
///
/// # Example
///
/// ```
/// use optic_ad::{trace, Executable, Real, Registers};
///
/// let p = trace(|x| vec![(x[0] * x[1] + 1.0).sin()], &[1.0, 2.0]).unwrap();
/// let e = Executable::new(p);
/// let mut regs = Registers::new();
/// let mut out = [0.0];
/// e.eval_f64(&mut regs, &[0.5, 0.5], &mut out).unwrap();
/// assert_eq!(out[0], e.eval(&[0.5, 0.5]).unwrap()[0]); // bit for bit
/// ```
#[derive(Debug)]
pub struct Executable {
    program: Program,
    /// The register code, lowered on first use.
    code: OnceLock<RegisterCode>,
    /// The native code and the counters toward compiling it.
    #[cfg(feature = "jit")]
    native: native::Native,
}

impl Clone for Executable {
    fn clone(&self) -> Self {
        Executable::new(self.program.clone())
    }
}

impl PartialEq for Executable {
    fn eq(&self, other: &Self) -> bool {
        self.program == other.program
    }
}

impl Deref for Executable {
    type Target = Program;
    fn deref(&self) -> &Program {
        &self.program
    }
}

impl std::fmt::Display for Executable {
    /// The program, as [`Program`] prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.program.fmt(f)
    }
}

impl From<Program> for Executable {
    fn from(program: Program) -> Self {
        Executable::new(program)
    }
}

impl Executable {
    /// Test hook: the elements of one block of an array map.
    #[doc(hidden)]
    pub const BLOCK: usize = BLOCK;

    /// The program, with no compiled form yet.
    pub fn new(program: Program) -> Self {
        Executable {
            program,
            code: OnceLock::new(),
            #[cfg(feature = "jit")]
            native: Default::default(),
        }
    }

    /// The program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The program, without its compiled forms.
    pub fn into_program(self) -> Program {
        self.program
    }

    /// Whether the program's block kernel (a map body's native code) is
    /// compiled.
    /// (Never without the native backend.)
    pub(crate) fn has_native_block(&self) -> bool {
        #[cfg(feature = "jit")]
        return self.native.block.get().is_some_and(Option::is_some);
        #[cfg(not(feature = "jit"))]
        false
    }

    /// The register code, lowered on first use.
    #[inline]
    pub(crate) fn code(&self) -> &RegisterCode {
        self.code.get_or_init(|| self.program.lower_to_registers())
    }

    /// Evaluates the program on `f64` with the lowered evaluator: register
    /// code built once (on the first call) from this program, run in
    /// `regs`. The results are those of [`Program::eval_with`], bit for
    /// bit (a NaN's sign and payload aside, which Rust leaves unspecified);
    /// this is the path the compiled drivers take in steady state.
    ///
    /// Shapes: `inputs.len() == self.n_inputs()`,
    /// `outputs.len() == self.n_outputs()`.
    ///
    /// # Errors
    ///
    /// As [`Program::eval_with`]: [`Error::LengthMismatch`](crate::Error::LengthMismatch) for wrong
    /// lengths, [`Error::GuardFailed`](crate::Error::GuardFailed) where a recorded comparison no
    /// longer holds, the defect of a program derived through a misused
    /// user rule.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::{trace, Executable, Real, Registers};
    ///
    /// let p = trace(|x| vec![(x[0] * x[1] + 1.0).sin()], &[1.0, 2.0]).unwrap();
    /// let p = Executable::new(p);
    /// let mut regs = Registers::new();
    /// let mut out = [0.0];
    /// for i in 0..3 {
    ///     let x = [i as f64, 0.5];
    ///     p.eval_f64(&mut regs, &x, &mut out).unwrap();
    ///     assert_eq!(out[0], p.eval(&x).unwrap()[0]); // bit for bit
    /// }
    /// ```
    pub fn eval_f64(
        &self,
        regs: &mut Registers,
        inputs: &[f64],
        outputs: &mut [f64],
    ) -> Result<()> {
        self.check_run(inputs.len(), Some(outputs.len()))?;
        let rc = self.code();
        #[cfg(feature = "jit")]
        if self.native_when_hot(rc).is_some() {
            if let Some(out) = self.eval_f64_compiled(regs, inputs) {
                copy_outputs(out?, outputs);
                return Ok(());
            }
        }
        self.eval_registers(rc, regs, inputs, outputs)
    }

    /// [`Executable::eval_f64`] where the whole program already runs as native
    /// code (feature `jit`): its outputs, left in `regs`, or `None` (nothing
    /// run) while the program is not compiled or `inputs` does not have
    /// [`Program::n_inputs`] values. `eval_f64` runs native code through
    /// here; [`crate::Derivatives`] calls it directly once its program is
    /// compiled, skipping the checks and bookkeeping that only matter
    /// before.
    ///
    /// # Errors
    ///
    /// [`Error::GuardFailed`](crate::Error::GuardFailed) where a recorded
    /// comparison no longer holds.
    #[cfg(feature = "jit")]
    #[inline]
    pub(crate) fn eval_f64_compiled<'r>(
        &self,
        regs: &'r mut Registers,
        inputs: &[f64],
    ) -> Option<Result<&'r [f64]>> {
        let nc = self.native.whole.get()?.as_ref()?;
        if inputs.len() != self.n_inputs {
            return None;
        }
        let r = &mut regs.regs;
        if !nc.run(r, inputs) {
            return None;
        }
        if !self.guards.is_empty() {
            let g = nc.guard_base;
            if let Err(e) =
                check_guard_operands(&self.guards, |i, _| (r[g + 2 * i], r[g + 2 * i + 1]))
            {
                return Some(Err(e));
            }
        }
        r.get(nc.out_base..nc.out_base + self.outputs.len()).map(Ok)
    }

    /// Without the native backend there is no compiled code: `None`.
    #[cfg(not(feature = "jit"))]
    #[inline]
    pub(crate) fn eval_f64_compiled<'r>(
        &self,
        _: &'r mut Registers,
        _: &[f64],
    ) -> Option<Result<&'r [f64]>> {
        None
    }

    /// The native code of the whole program (feature `jit`), compiled on
    /// first use.
    #[cfg(feature = "jit")]
    fn native_code(&self, rc: &RegisterCode) -> Option<&native::NativeCode> {
        self.native
            .whole
            .get_or_init(|| native::compile_program(self, rc))
            .as_ref()
    }

    /// The native code of the whole program once it is hot: compiled at
    /// its [`HOT_CALLS`](native::HOT_CALLS)-th run, if it is at most
    /// [`MAX_PROGRAM`](native::MAX_PROGRAM) instructions long and
    /// at most half of them are in strided runs.
    #[cfg(feature = "jit")]
    fn native_when_hot(&self, rc: &RegisterCode) -> Option<&native::NativeCode> {
        use native::{HOT_CALLS, MAX_PROGRAM};
        if let Some(n) = self.native.whole.get() {
            return n.as_ref();
        }
        // Mostly strided code runs faster as it is: its runs are vector
        // loops over registers, where native code is one instruction per
        // instruction.
        let strided = 2 * rc.strided > rc.len;
        if rc.len > MAX_PROGRAM || strided || self.native.calls.add(1) < u64::from(HOT_CALLS) {
            return None;
        }
        self.native_code(rc)
    }

    /// The block kernel of the program as a map body once it is hot:
    /// compiled when the map evaluations so far, counting the `n` elements
    /// of this one, reach [`HOT_ELEMENTS`](native::HOT_ELEMENTS).
    #[cfg(feature = "jit")]
    pub(crate) fn native_block_when_hot(&self, n: usize) -> Option<&native::NativeCode> {
        if let Some(k) = self.native.block.get() {
            return k.as_ref();
        }
        if self.native.elements.add(n as u64) < native::HOT_ELEMENTS {
            return None;
        }
        self.native_block()
    }

    /// The native block kernel of the program as a map body (feature
    /// `jit`), compiled on first use.
    #[cfg(feature = "jit")]
    pub(crate) fn native_block(&self) -> Option<&native::NativeCode> {
        let rc = self.code();
        self.native
            .block
            .get_or_init(|| native::compile_block(self, rc))
            .as_ref()
    }

    /// Test hooks of the native backend (feature `jit`): how many
    /// instructions the whole-program code and the block kernel compiled
    /// (`None` where the program is not compiled).
    #[cfg(feature = "jit")]
    #[doc(hidden)]
    pub fn native_instructions(&self) -> (Option<usize>, Option<usize>) {
        let rc = self.code();
        (
            self.native_code(rc).map(|n| n.n_instructions),
            self.native_block().map(|n| n.n_instructions),
        )
    }

    /// Test hook of the native backend (feature `jit`): the program
    /// compiled afresh with at most `chunk` instructions per function, run
    /// once at `inputs`. `None` where it is not compiled.
    #[cfg(feature = "jit")]
    #[doc(hidden)]
    pub fn eval_f64_native_chunked(
        &self,
        chunk: usize,
        inputs: &[f64],
    ) -> Option<Result<Vec<f64>>> {
        if let Err(e) = self.check_run(inputs.len(), None) {
            return Some(Err(e));
        }
        let rc = self.code();
        let nc = native::compile_chunked(self, rc, chunk)?;
        let mut r = Vec::new();
        if !nc.run(&mut r, inputs) {
            return None;
        }
        let g = nc.guard_base;
        if let Err(e) = check_guard_operands(&self.guards, |i, _| (r[g + 2 * i], r[g + 2 * i + 1]))
        {
            return Some(Err(e));
        }
        Some(Ok(r[nc.out_base..nc.out_base + self.n_outputs()].to_vec()))
    }

    /// Test hook: the program run as a map body over one block of
    /// `BLOCK` elements (128 with `jit`), by the native kernel
    /// (`native`, feature `jit`) or by the register code. Guards are
    /// checked in every lane. `None` where the kernel is not compiled.
    #[doc(hidden)]
    pub fn eval_f64_one_block(
        &self,
        native: bool,
        inputs: &[[f64; BLOCK]],
        outputs: &mut [[f64; BLOCK]],
    ) -> Option<Result<()>> {
        if let Err(e) = self.check_run(inputs.len(), Some(outputs.len())) {
            return Some(Err(e));
        }
        if !native {
            let mut r = Vec::new();
            return Some(self.eval_f64_block(&mut r, |k| inputs[k as usize], outputs));
        }
        #[cfg(feature = "jit")]
        {
            let nc = self.native_block()?;
            let mut x = Vec::new();
            let mut y = Vec::new();
            let mut scratch = Vec::new();
            let r = self.eval_f64_block_native(
                nc,
                &mut x,
                |k| inputs[k as usize],
                &mut y,
                &mut scratch,
            );
            if r.is_ok() {
                let n = outputs.len();
                outputs.copy_from_slice(&y[nc.out_base..nc.out_base + n]);
            }
            Some(r)
        }
        #[cfg(not(feature = "jit"))]
        None
    }

    /// Runs the block kernel `nc` of this program on the inputs `input(k)`,
    /// gathered into `x`, leaving the outputs in `y[nc.out_base..]` (`x`,
    /// `y` and `scratch` are grown as needed and reused). The native
    /// counterpart of [`Executable::eval_f64_block`], with the same results
    /// bit for bit.
    ///
    /// # Errors
    ///
    /// [`crate::Error::GuardFailed`] if a guard fails in any lane.
    #[cfg(feature = "jit")]
    pub(crate) fn eval_f64_block_native(
        &self,
        nc: &native::NativeCode,
        x: &mut Vec<[f64; BLOCK]>,
        input: impl Fn(u32) -> [f64; BLOCK],
        y: &mut Vec<[f64; BLOCK]>,
        scratch: &mut Vec<f64>,
    ) -> Result<()> {
        x.clear();
        x.extend((0..self.n_inputs as u32).map(input));
        y.resize(nc.out_base + self.outputs.len(), [0.0; BLOCK]);
        let (mut at_in, mut at_rows) = (Vec::new(), Vec::new());
        let mut args = native::BlockArgs::new(&mut at_in, &mut at_rows);
        for row in x.iter() {
            args.input(row);
        }
        for row in y.iter_mut() {
            args.row(row);
        }
        if !self.run_block_kernel(nc, args, scratch)? {
            // Not reached: the kernel was compiled for this program.
            let lanes = |k: u32| x.get(k as usize).copied().unwrap_or([f64::NAN; BLOCK]);
            return self.eval_f64_block(&mut Vec::new(), lanes, &mut y[nc.out_base..]);
        }
        self.check_block_guards(nc, y)
    }

    /// Runs the block kernel `nc` of this program on the blocks in `args`
    /// (read and written where they lie); `scratch` is grown as needed and
    /// reused. `Ok(false)` if `args` does not fit the kernel (nothing
    /// ran). The guard operands are left in their rows for
    /// [`Program::check_block_guards`].
    ///
    /// # Errors
    ///
    /// The program's defect, if it has one.
    #[cfg(feature = "jit")]
    pub(crate) fn run_block_kernel(
        &self,
        nc: &native::NativeCode,
        args: native::BlockArgs<'_>,
        scratch: &mut Vec<f64>,
    ) -> Result<bool> {
        if let Some(e) = &self.defect {
            return Err(e.clone());
        }
        if scratch.len() < nc.scratch_len() {
            scratch.resize(nc.scratch_len(), 0.0);
        }
        Ok(nc.run_block(args, scratch))
    }

    /// Checks the guards in all [`BLOCK`] lanes of the guard operands that
    /// the block kernel `nc` left in `rows` (pairs from `nc.guard_base`).
    ///
    /// # Errors
    ///
    /// [`crate::Error::GuardFailed`] if a guard fails in any lane.
    #[cfg(feature = "jit")]
    pub(crate) fn check_block_guards(
        &self,
        nc: &native::NativeCode,
        rows: &[[f64; BLOCK]],
    ) -> Result<()> {
        if self.guards.is_empty() {
            return Ok(());
        }
        let at = |r: usize, l: usize| rows.get(r).map_or(f64::NAN, |v| v[l]);
        let g = nc.guard_base;
        (0..BLOCK).try_for_each(|l| {
            check_guard_operands(&self.guards, |i, _| {
                (at(g + 2 * i, l), at(g + 2 * i + 1, l))
            })
        })
    }

    /// [`Executable::eval_f64`] on the register code, never native code: the
    /// reference the native backend is tested against.
    #[doc(hidden)]
    pub fn eval_f64_registers(
        &self,
        regs: &mut Registers,
        inputs: &[f64],
        outputs: &mut [f64],
    ) -> Result<()> {
        self.check_run(inputs.len(), Some(outputs.len()))?;
        let rc = self.code();
        self.eval_registers(rc, regs, inputs, outputs)
    }

    fn eval_registers(
        &self,
        rc: &RegisterCode,
        regs: &mut Registers,
        inputs: &[f64],
        outputs: &mut [f64],
    ) -> Result<()> {
        let r = &mut regs.regs;
        if r.len() < rc.n_regs {
            r.resize(rc.n_regs, 0.0);
        }
        for &(i, c) in &rc.consts {
            r[i as usize] = c;
        }
        let input = |k: u32| inputs.get(k as usize).copied().unwrap_or(f64::NAN);
        let custom = |slot: u32, r: &[f64]| self.custom_f64(rc, slot, r);
        run_all(rc, r, &input, &custom);
        if !rc.guard_regs.is_empty() {
            check_guard_operands(&self.guards, |i, _| {
                let (a, b) = rc.guard_regs.get(i).copied().unwrap_or((0, 0));
                (r[a as usize], r[b as usize])
            })?;
        }
        for (o, &i) in outputs.iter_mut().zip(&rc.outputs) {
            *o = r[i as usize];
        }
        Ok(())
    }

    /// A user rule's instruction, off the hot path.
    #[inline(never)]
    fn custom_f64(&self, rc: &RegisterCode, slot: u32, r: &[f64]) -> f64 {
        let Some(&(rule, o, len)) = rc.customs.get(slot as usize) else {
            return f64::NAN;
        };
        let x = [r[o[0] as usize], r[o[1] as usize], r[o[2] as usize]];
        match self.rules.get(rule as usize) {
            Some(rule) => rule.value(&x[..len as usize]),
            None => f64::NAN,
        }
    }

    /// Compiles the whole program to native code now, whatever its heat,
    /// where the native backend can (feature `jit`, no longer than it
    /// compiles): for a caller that knows the program will run many
    /// times, so that no run waits for [`HOT_CALLS`](native::HOT_CALLS)
    /// as register code. Whether native code exists afterwards.
    pub(crate) fn compile_whole(&self) -> bool {
        #[cfg(feature = "jit")]
        {
            let rc = self.code();
            rc.len <= native::MAX_PROGRAM && self.native_code(rc).is_some()
        }
        #[cfg(not(feature = "jit"))]
        false
    }

    /// Whether the native backend compiles this whole program: built with
    /// feature `jit`, and no longer than it compiles.
    pub(crate) fn compiles_natively(&self) -> bool {
        #[cfg(feature = "jit")]
        return self.register_code_size().0 <= native::MAX_PROGRAM;
        #[cfg(not(feature = "jit"))]
        false
    }

    /// Length of the register code and number of registers (for tests and
    /// benchmarks).
    #[doc(hidden)]
    pub fn register_code_size(&self) -> (usize, usize) {
        let rc = self.code();
        (rc.len, rc.n_regs)
    }

    /// Runs the register code on [`LANES`] inputs at once, the same
    /// instructions for every lane, so that decoding an instruction is paid
    /// once per four values. Input `k` is `shared[k]` in every lane for
    /// `k < shared.len()`, and `lanes[k − shared.len()]` (one value per
    /// lane) after that. Each lane's results equal those of
    /// [`Executable::eval_f64`] on that lane's inputs, bit for bit.
    ///
    /// # Errors
    ///
    /// As [`Executable::eval_f64`]; a guard fails if it fails in any lane.
    pub(crate) fn eval_f64_lanes(
        &self,
        regs: &mut LaneRegisters,
        shared: &[f64],
        lanes: &[[f64; LANES]],
        outputs: &mut [[f64; LANES]],
    ) -> Result<()> {
        self.check_run(shared.len() + lanes.len(), Some(outputs.len()))?;
        let input = |k: u32| -> [f64; LANES] {
            let k = k as usize;
            match shared.get(k) {
                Some(&v) => [v; LANES],
                None => lanes
                    .get(k - shared.len())
                    .copied()
                    .unwrap_or([f64::NAN; LANES]),
            }
        };
        self.eval_f64_block(&mut regs.regs, input, outputs)
    }

    /// Runs the register code on `N` points at once (one lane each), with
    /// input `k` given by `input(k)` and no check of lengths: the kernel of
    /// [`Executable::eval_f64_lanes`] and of the array tier's `map`, which
    /// evaluates a body over a block of elements with one pass of each
    /// instruction. Each lane's results equal those of
    /// [`Executable::eval_f64`] on that lane's inputs, bit for bit.
    ///
    /// # Errors
    ///
    /// A defect of the program; [`crate::Error::GuardFailed`] if a guard
    /// fails in any lane.
    pub(crate) fn eval_f64_block<const N: usize>(
        &self,
        r: &mut Vec<[f64; N]>,
        input: impl Fn(u32) -> [f64; N],
        outputs: &mut [[f64; N]],
    ) -> Result<()> {
        if let Some(e) = &self.defect {
            return Err(e.clone());
        }
        let rc = self.code();
        if r.len() < rc.n_regs {
            r.resize(rc.n_regs, [0.0; N]);
        }
        for &(i, c) in &rc.consts {
            r[i as usize] = Lane::splat(c);
        }
        let custom = |slot: u32, r: &[[f64; N]]| -> [f64; N] {
            let Some(&(rule, o, len)) = rc.customs.get(slot as usize) else {
                return [f64::NAN; N];
            };
            let x = [r[o[0] as usize], r[o[1] as usize], r[o[2] as usize]];
            std::array::from_fn(|l| {
                let v = [x[0][l], x[1][l], x[2][l]];
                self.rules
                    .get(rule as usize)
                    .map_or(f64::NAN, |rule| rule.value(&v[..len as usize]))
            })
        };
        run_all(rc, r, &input, &custom);
        // Every lane must keep every guard.
        if !rc.guard_regs.is_empty() {
            (0..N).try_for_each(|l| {
                check_guard_operands(&self.guards, |i, _| {
                    let (a, b) = rc.guard_regs.get(i).copied().unwrap_or((0, 0));
                    (r[a as usize][l], r[b as usize][l])
                })
            })?;
        }
        for (o, &i) in outputs.iter_mut().zip(&rc.outputs) {
            *o = r[i as usize];
        }
        Ok(())
    }
}

/// `dst = src` (equal lengths). Up to four values are moved as a fixed
/// array, inline: `copy_from_slice` of a length known only at run time
/// calls `memcpy`, which cost more than the rest of a small program's
/// native run (`Derivatives<U3>`: four outputs).
#[cfg(feature = "jit")]
#[inline]
fn copy_outputs(src: &[f64], dst: &mut [f64]) {
    macro_rules! fixed {
        ($($n:literal)*) => {
            $(
                if let (Ok(s), Ok(d)) = (<&[f64; $n]>::try_from(src), <&mut [f64; $n]>::try_from(&mut *dst)) {
                    *d = *s;
                    return;
                }
            )*
        };
    }
    fixed!(1 2 3 4);
    dst.copy_from_slice(src);
}
