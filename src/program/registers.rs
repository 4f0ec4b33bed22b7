//! The lowered `f64` evaluator: a program compiled once to register code,
//! the path the compiled drivers take in steady state.
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

use super::eval::check_guard_operands;
use super::ir::{Instr, Program, Var};
#[cfg(feature = "jit")]
use super::native::BLOCK;
use super::op::Op;
use super::passes::SCHEDULE_WINDOW;
use crate::error::Result;
use crate::rules::Prim;

/// One register instruction. Operands and destinations are register
/// numbers; `k` is an immediate constant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Ins {
    /// `dst = inputs[k]`.
    Input { dst: u32, k: u32 },
    /// `dst = a + b`.
    Add { dst: u32, a: u32, b: u32 },
    /// `dst = a − b`.
    Sub { dst: u32, a: u32, b: u32 },
    /// `dst = a · b`.
    Mul { dst: u32, a: u32, b: u32 },
    /// `dst = a / b`.
    Div { dst: u32, a: u32, b: u32 },
    /// `dst = −a`.
    Neg { dst: u32, a: u32 },
    /// `dst = a + k`.
    AddK { dst: u32, a: u32, k: f64 },
    /// `dst = k + a`.
    KAdd { dst: u32, a: u32, k: f64 },
    /// `dst = a − k`.
    SubK { dst: u32, a: u32, k: f64 },
    /// `dst = k − a`.
    KSub { dst: u32, a: u32, k: f64 },
    /// `dst = a · k`.
    MulK { dst: u32, a: u32, k: f64 },
    /// `dst = k · a`.
    KMul { dst: u32, a: u32, k: f64 },
    /// `dst = a / k`.
    DivK { dst: u32, a: u32, k: f64 },
    /// `dst = k / a`.
    KDiv { dst: u32, a: u32, k: f64 },
    /// `dst = a · b + c` (two roundings).
    MulAdd { dst: u32, a: u32, b: u32, c: u32 },
    /// `dst = c + a · b` (two roundings).
    AddMul { dst: u32, a: u32, b: u32, c: u32 },
    /// `dst = a · b − c` (two roundings).
    MulSub { dst: u32, a: u32, b: u32, c: u32 },
    /// `dst = c − a · b` (two roundings).
    SubMul { dst: u32, a: u32, b: u32, c: u32 },
    /// Any other primitive of one operand.
    Unary {
        dst: u32,
        a: u32,
        prim: Prim,
        param: i32,
    },
    /// Any other primitive of two operands.
    Binary {
        dst: u32,
        a: u32,
        b: u32,
        prim: Prim,
        param: i32,
    },
    /// A primitive of three operands.
    Ternary {
        dst: u32,
        a: u32,
        b: u32,
        c: u32,
        prim: Prim,
    },
    /// A user rule; its rule and operand registers are `customs[slot]`.
    Custom { dst: u32, slot: u32 },
}

/// One run of [`RegisterCode::runs`]: its kind, and where it ends in
/// `other` and in `packed`.
type Run = (u8, u32, u32);

/// A program lowered to register code.
#[derive(Debug, Default)]
pub(crate) struct RegisterCode {
    /// The instructions of kind 0 ([`kind`]: calls of other primitives,
    /// user rules), in order; the others are in `packed`.
    /// [`RegisterCode::instructions`] gives them all.
    other: Vec<Ins>,
    /// How many instructions there are in all.
    pub(crate) len: usize,
    /// How many of them are in strided runs (the native backend skips
    /// mostly strided code).
    #[cfg_attr(not(feature = "jit"), allow(dead_code))]
    pub(crate) strided: usize,
    /// Runs of consecutive instructions of one kind ([`kind`]), as
    /// `(kind, end in other, end in packed)`: each run is executed by a loop
    /// specialised to its kind, with no dispatch per instruction.
    /// [`Program::schedule`] groups instructions by operation within each
    /// dependency level, so the runs are long. A kind with the
    /// [`STRIDED`] flag is a strided run ([`encode_runs`]): its words in
    /// `packed` are a count and each field's first value and step.
    runs: Vec<Run>,
    /// The instructions of the other kinds (`kind > 0`) as the run
    /// loops read them: their fields as [`width`] `u32` words each, with no
    /// enum tag (the run knows its kind), an immediate as the two halves
    /// of its bits. That is 8–16 bytes per instruction instead of
    /// [`Ins`]'s 24: once a program's code no longer fits in cache, reading
    /// the code bounds the run time, so its size is the speed. (A table of
    /// distinct immediates indexed by one word was tried: data-fitting
    /// programs have thousands of distinct constants, and the table became
    /// a second stream of loads that made them 5–12% slower.)
    packed: Vec<u32>,
    /// Constants that some instruction reads from a register: loaded at the
    /// start of every run.
    pub(crate) consts: Vec<(u32, f64)>,
    /// User-rule applications: the rule's index and its operand registers.
    pub(crate) customs: Vec<(u32, [u32; 3], u8)>,
    /// The registers of the outputs, in order.
    pub(crate) outputs: Vec<u32>,
    /// The registers of each guard's two operands, in guard order.
    pub(crate) guard_regs: Vec<(u32, u32)>,
    pub(crate) n_regs: usize,
}

/// The registers of [`Program::eval_f64`]: keep one per program and
/// evaluation allocates nothing once it has grown to the program's needs.
#[derive(Debug, Clone, Default)]
pub struct Registers {
    regs: Vec<f64>,
}

impl Registers {
    /// Empty registers; they grow on first use.
    pub fn new() -> Self {
        Registers::default()
    }

    /// How many registers these hold: the most that any program run with
    /// them has needed.
    pub fn len(&self) -> usize {
        self.regs.len()
    }

    /// Whether no program has run with these registers yet.
    pub fn is_empty(&self) -> bool {
        self.regs.is_empty()
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

/// A value's role in the lowered code.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Role {
    /// Computed into a register.
    Register,
    /// A constant read only as an immediate: no register, no instruction.
    Immediate,
    /// A constant that some instruction reads from a register.
    ConstRegister,
    /// A product computed inside its one consumer.
    FusedProduct,
}

/// An instruction before register allocation: operands are value numbers.
#[derive(Clone, Copy, Debug)]
struct Pending {
    ins: Ins,
    dst: u32,
    operands: [u32; 3],
    n_operands: u8,
}

/// The constant a value is, if it is one.
fn constant(ops: &[Instr], v: Var) -> Option<f64> {
    ops.get(v.index()).and_then(Instr::as_const)
}

/// Whether `prim` takes a constant operand as an immediate (the four
/// arithmetic operations), given its operands.
fn takes_immediate(ops: &[Instr], prim: Prim, args: &[Var]) -> Option<usize> {
    if !matches!(prim, Prim::Add | Prim::Sub | Prim::Mul | Prim::Div) || args.len() != 2 {
        return None;
    }
    match (constant(ops, args[0]), constant(ops, args[1])) {
        (Some(_), None) => Some(0),
        (None, Some(_)) => Some(1),
        _ => None,
    }
}

impl Program {
    /// Lowers the program to register code.
    fn lower_to_registers(&self) -> RegisterCode {
        let ops = &self.code;
        let n = ops.len();
        // How often each value is read, and by whom last.
        let mut uses = vec![0u32; n];
        for op in ops {
            for a in op.operands() {
                uses[a.index()] += 1;
            }
        }
        let mut pinned = vec![false; n]; // outputs and guard operands
        for v in self
            .outputs
            .iter()
            .chain(self.guards.iter().flat_map(|g| [&g.a, &g.b]))
        {
            pinned[v.index()] = true;
        }

        // Roles: constants read only as immediates need nothing; products
        // used once by a sum or difference are fused into it.
        let mut role = vec![Role::Register; n];
        let mut immediate_uses = vec![0u32; n];
        let mut fused_into = vec![u32::MAX; n];
        for (i, op) in ops.iter().enumerate() {
            let Some(prim) = op.prim() else {
                continue;
            };
            let args = op.operands();
            if let Some(j) = takes_immediate(ops, prim, args) {
                immediate_uses[args[j].index()] += 1;
                continue;
            }
            if matches!(prim, Prim::Add | Prim::Sub) {
                // Fuse one operand that is a product read only here.
                let fusable = |v: Var| {
                    let k = v.index();
                    let a = ops[k].operands();
                    ops[k].prim() == Some(Prim::Mul)
                        && a.len() == 2
                        && takes_immediate(ops, Prim::Mul, a).is_none()
                        && constant(ops, a[0]).is_none()
                        && constant(ops, a[1]).is_none()
                        && uses[k] == 1
                        && !pinned[k]
                        && fused_into[k] == u32::MAX
                };
                if let Some(&m) = args.iter().find(|&&v| fusable(v)) {
                    // Not both operands: the other stays a register.
                    fused_into[m.index()] = i as u32;
                    role[m.index()] = Role::FusedProduct;
                }
            }
        }
        for (i, op) in ops.iter().enumerate() {
            if op.is_const() {
                role[i] = if immediate_uses[i] == uses[i] && !pinned[i] {
                    Role::Immediate
                } else {
                    Role::ConstRegister
                };
            }
        }

        // Instructions over value numbers.
        let mut pending: Vec<Pending> = Vec::with_capacity(n);
        let mut customs = Vec::new();
        let reg = |v: Var| v.index() as u32;
        for (i, op) in ops.iter().enumerate() {
            if role[i] != Role::Register {
                continue;
            }
            let dst = i as u32;
            let mut p = |ins: Ins, operands: &[u32]| {
                let mut o = [0; 3];
                o[..operands.len()].copy_from_slice(operands);
                pending.push(Pending {
                    ins,
                    dst,
                    operands: o,
                    n_operands: operands.len() as u8,
                });
            };
            match op.op() {
                Op::Input(k) => p(Ins::Input { dst, k }, &[]),
                Op::Const(_) => {}
                Op::Custom { rule, args } => {
                    let a = args.as_slice();
                    let mut o = [0; 3];
                    for (slot, &v) in o.iter_mut().zip(a) {
                        *slot = reg(v);
                    }
                    customs.push((rule, o, a.len() as u8));
                    let slot = (customs.len() - 1) as u32;
                    p(Ins::Custom { dst, slot }, &o[..a.len()]);
                }
                Op::Apply { prim, param, args } => {
                    let a = args.as_slice();
                    if let Some(j) = takes_immediate(ops, prim, a) {
                        let k = constant(ops, a[j]).unwrap_or(f64::NAN);
                        let x = reg(a[1 - j]);
                        let ins = match (prim, j) {
                            (Prim::Add, 1) => Ins::AddK { dst, a: x, k },
                            (Prim::Add, _) => Ins::KAdd { dst, a: x, k },
                            (Prim::Sub, 1) => Ins::SubK { dst, a: x, k },
                            (Prim::Sub, _) => Ins::KSub { dst, a: x, k },
                            (Prim::Mul, 1) => Ins::MulK { dst, a: x, k },
                            (Prim::Mul, _) => Ins::KMul { dst, a: x, k },
                            (Prim::Div, 1) => Ins::DivK { dst, a: x, k },
                            _ => Ins::KDiv { dst, a: x, k },
                        };
                        p(ins, &[x]);
                        continue;
                    }
                    let fused = a.iter().position(|v| fused_into[v.index()] == i as u32);
                    if let Some((j, m)) = fused.map(|j| (j, ops[a[j].index()].operands())) {
                        let (x, y) = (reg(m[0]), reg(m[1]));
                        let c = reg(a[1 - j]);
                        let ins = match (prim, j) {
                            (Prim::Add, 0) => Ins::MulAdd { dst, a: x, b: y, c },
                            (Prim::Add, _) => Ins::AddMul { dst, a: x, b: y, c },
                            (Prim::Sub, 0) => Ins::MulSub { dst, a: x, b: y, c },
                            _ => Ins::SubMul { dst, a: x, b: y, c },
                        };
                        p(ins, &[x, y, c]);
                        continue;
                    }
                    let mut o = [0u32; 3];
                    for (slot, &v) in o.iter_mut().zip(a) {
                        *slot = reg(v);
                    }
                    let o = &o[..a.len().min(3)];
                    let ins = match (prim, o.len()) {
                        (Prim::Add, 2) => Ins::Add {
                            dst,
                            a: o[0],
                            b: o[1],
                        },
                        (Prim::Sub, 2) => Ins::Sub {
                            dst,
                            a: o[0],
                            b: o[1],
                        },
                        (Prim::Mul, 2) => Ins::Mul {
                            dst,
                            a: o[0],
                            b: o[1],
                        },
                        (Prim::Div, 2) => Ins::Div {
                            dst,
                            a: o[0],
                            b: o[1],
                        },
                        (Prim::Neg, 1) => Ins::Neg { dst, a: o[0] },
                        (_, 1) => Ins::Unary {
                            dst,
                            a: o[0],
                            prim,
                            param,
                        },
                        (_, 2) => Ins::Binary {
                            dst,
                            a: o[0],
                            b: o[1],
                            prim,
                            param,
                        },
                        _ => Ins::Ternary {
                            dst,
                            a: o[0],
                            b: o.get(1).copied().unwrap_or(0),
                            c: o.get(2).copied().unwrap_or(0),
                            prim,
                        },
                    };
                    p(ins, o);
                }
            }
        }

        // A program longer than a scheduling window is first given scratch
        // registers (see `allocate`); if less than half of its code then
        // comes out as strided runs, it is not loop-like, and the free
        // list alone keeps its registers fewer and in cache. A shorter
        // program fits in cache either way and takes the free list at once.
        let long = n > SCHEDULE_WINDOW;
        let mut alloc = if long {
            allocate(ops, &role, &pinned, pending.clone(), true)
        } else {
            allocate(ops, &role, &pinned, std::mem::take(&mut pending), false)
        };
        let mut encoded = encode_runs(&alloc.code);
        if long && 2 * strided_len(&encoded.1, &encoded.2) <= alloc.code.len() {
            alloc = allocate(ops, &role, &pinned, pending, false);
            encoded = encode_runs(&alloc.code);
        }
        let Allocation {
            code,
            map,
            n_regs,
            consts,
        } = alloc;
        for c in &mut customs {
            for r in &mut c.1[..c.2 as usize] {
                *r = map[*r as usize];
            }
        }
        let (other, runs, packed) = encoded;
        let strided = strided_len(&runs, &packed);
        let len = code.len();
        RegisterCode {
            other,
            len,
            strided,
            runs,
            packed,
            consts,
            customs,
            outputs: self.outputs.iter().map(|v| map[v.index()]).collect(),
            guard_regs: self
                .guards
                .iter()
                .map(|g| (map[g.a.index()], map[g.b.index()]))
                .collect(),
            n_regs: n_regs as usize,
        }
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
    /// use optic_ad::{trace, Real, Registers};
    ///
    /// let p = trace(|x| vec![(x[0] * x[1] + 1.0).sin()], &[1.0, 2.0]).unwrap();
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
        let rc = self.registers.0.get_or_init(|| self.lower_to_registers());
        #[cfg(feature = "jit")]
        if self.native_when_hot(rc).is_some() {
            if let Some(out) = self.eval_f64_compiled(regs, inputs) {
                copy_outputs(out?, outputs);
                return Ok(());
            }
        }
        self.eval_registers(rc, regs, inputs, outputs)
    }

    /// [`Program::eval_f64`] where the whole program already runs as native
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
        let nc = self.native.whole.0.get()?.as_ref()?;
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

    /// The native code of the whole program (feature `jit`), compiled on
    /// first use.
    #[cfg(feature = "jit")]
    fn native_code(&self, rc: &RegisterCode) -> Option<&super::native::NativeCode> {
        self.native
            .whole
            .0
            .get_or_init(|| super::native::compile_program(self, rc))
            .as_ref()
    }

    /// The native code of the whole program once it is hot: compiled at
    /// its [`HOT_CALLS`](super::native::HOT_CALLS)-th run, if it is at most
    /// [`MAX_PROGRAM`](super::native::MAX_PROGRAM) instructions long and
    /// at most half of them are in strided runs.
    #[cfg(feature = "jit")]
    fn native_when_hot(&self, rc: &RegisterCode) -> Option<&super::native::NativeCode> {
        use super::native::{HOT_CALLS, MAX_PROGRAM};
        if let Some(n) = self.native.whole.0.get() {
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
    /// of this one, reach [`HOT_ELEMENTS`](super::native::HOT_ELEMENTS).
    #[cfg(feature = "jit")]
    pub(crate) fn native_block_when_hot(&self, n: usize) -> Option<&super::native::NativeCode> {
        if let Some(k) = self.native.block.0.get() {
            return k.as_ref();
        }
        if self.native.elements.add(n as u64) < super::native::HOT_ELEMENTS {
            return None;
        }
        self.native_block()
    }

    /// The native block kernel of the program as a map body (feature
    /// `jit`), compiled on first use.
    #[cfg(feature = "jit")]
    pub(crate) fn native_block(&self) -> Option<&super::native::NativeCode> {
        let rc = self.registers.0.get_or_init(|| self.lower_to_registers());
        self.native
            .block
            .0
            .get_or_init(|| super::native::compile_block(self, rc))
            .as_ref()
    }

    /// Test hooks of the native backend (feature `jit`): how many
    /// instructions the whole-program code and the block kernel compiled
    /// (`None` where the program is not compiled).
    #[cfg(feature = "jit")]
    #[doc(hidden)]
    pub fn native_instructions(&self) -> (Option<usize>, Option<usize>) {
        let rc = self.registers.0.get_or_init(|| self.lower_to_registers());
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
        let rc = self.registers.0.get_or_init(|| self.lower_to_registers());
        let nc = super::native::compile_chunked(self, rc, chunk)?;
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
    /// [`native::BLOCK`](super::native) = 32 elements, by the native kernel
    /// (`native`, feature `jit`) or by the register code. Guards are
    /// checked in every lane. `None` where the kernel is not compiled.
    #[doc(hidden)]
    pub fn eval_f64_block32(
        &self,
        native: bool,
        inputs: &[[f64; 32]],
        outputs: &mut [[f64; 32]],
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
    /// counterpart of [`Program::eval_f64_block`], with the same results
    /// bit for bit.
    ///
    /// # Errors
    ///
    /// [`crate::Error::GuardFailed`] if a guard fails in any lane.
    #[cfg(feature = "jit")]
    pub(crate) fn eval_f64_block_native(
        &self,
        nc: &super::native::NativeCode,
        x: &mut Vec<[f64; BLOCK]>,
        input: impl Fn(u32) -> [f64; BLOCK],
        y: &mut Vec<[f64; BLOCK]>,
        scratch: &mut Vec<f64>,
    ) -> Result<()> {
        x.clear();
        x.extend((0..self.n_inputs as u32).map(input));
        y.resize(nc.out_base + self.outputs.len(), [0.0; BLOCK]);
        let (mut at_in, mut at_rows) = (Vec::new(), Vec::new());
        let mut args = super::native::BlockArgs::new(&mut at_in, &mut at_rows);
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
        nc: &super::native::NativeCode,
        args: super::native::BlockArgs<'_>,
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
        nc: &super::native::NativeCode,
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

    /// [`Program::eval_f64`] on the register code, never native code: the
    /// reference the native backend is tested against.
    #[doc(hidden)]
    pub fn eval_f64_registers(
        &self,
        regs: &mut Registers,
        inputs: &[f64],
        outputs: &mut [f64],
    ) -> Result<()> {
        self.check_run(inputs.len(), Some(outputs.len()))?;
        let rc = self.registers.0.get_or_init(|| self.lower_to_registers());
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

    /// Length of the register code and number of registers (for tests and
    /// benchmarks).
    #[doc(hidden)]
    pub fn register_code_size(&self) -> (usize, usize) {
        let rc = self.registers.0.get_or_init(|| self.lower_to_registers());
        (rc.len, rc.n_regs)
    }
}

/// Register code before packing: the instructions over registers, the
/// register of each value, how many registers, and the constants loaded
/// into registers.
struct Allocation {
    code: Vec<Ins>,
    map: Vec<u32>,
    n_regs: u32,
    consts: Vec<(u32, f64)>,
}

/// Gives the values of `pending` registers. With `long`, inputs move to
/// their first reading run ([`sink_inputs`]) and values read soon after
/// they are made take scratch registers by position (a ring), the layout
/// that makes strided runs; otherwise every value takes a register from
/// a last-in first-out free list.
fn allocate(
    ops: &[Instr],
    role: &[Role],
    pinned: &[bool],
    mut pending: Vec<Pending>,
    long: bool,
) -> Allocation {
    let n = ops.len();
    if long {
        pending = sink_inputs(pending, n);
    }

    // Liveness: where each value is made and last read; outputs and
    // guard operands live to the end.
    const END: u32 = u32::MAX;
    let mut made = vec![0u32; n];
    let mut last = vec![0u32; n];
    let mut read = vec![false; n];
    for (t, q) in pending.iter().enumerate() {
        made[q.dst as usize] = t as u32;
        for &v in &q.operands[..q.n_operands as usize] {
            last[v as usize] = t as u32;
            read[v as usize] = true;
        }
    }
    for (i, &pin) in pinned.iter().enumerate() {
        if pin {
            last[i] = END;
        }
    }

    // Registers: constants read from registers first (never freed).
    // Then, in a long program, a value whose last read comes fewer
    // than SCHEDULE_WINDOW instructions after it is made takes the
    // scratch register at its position modulo that length (a ring: the
    // value that next takes it is made after the last read). A run of
    // one operation over consecutive instructions then writes
    // consecutive registers, and reads registers that step evenly, so
    // it is stored as a strided run. The other values take registers by
    // a linear scan with a last-in first-out free list.
    let ring = SCHEDULE_WINDOW as u32;
    let local = |v: u32| {
        let v = v as usize;
        long && read[v] && last[v] != END && last[v] - made[v] < ring
    };
    let mut map = vec![u32::MAX; n];
    let mut n_regs = 0u32;
    let mut consts = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if let (Some(c), Role::ConstRegister) = (op.as_const(), role[i]) {
            map[i] = n_regs;
            consts.push((n_regs, c));
            n_regs += 1;
        }
    }
    let scratch = n_regs;
    if long {
        n_regs += ring;
    }
    let mut free: Vec<u32> = Vec::new();
    let mut code = Vec::with_capacity(pending.len());
    for (t, q) in pending.iter().enumerate() {
        let operands = &q.operands[..q.n_operands as usize];
        // Operands are read before the destination is written, so a
        // register freed here may be the destination.
        for (j, &v) in operands.iter().enumerate() {
            let first = operands[..j].iter().all(|&w| w != v);
            if first
                && last[v as usize] == t as u32
                && role[v as usize] == Role::Register
                && !local(v)
            {
                free.push(map[v as usize]);
            }
        }
        let d = q.dst as usize;
        let dst = if local(q.dst) {
            scratch + t as u32 % ring
        } else {
            let dst = free.pop().unwrap_or_else(|| {
                n_regs += 1;
                n_regs - 1
            });
            if !read[d] && !pinned[d] {
                // Never read (dead code the passes left): free at once.
                free.push(dst);
            }
            dst
        };
        map[d] = dst;
        code.push(rename(q.ins, &map));
    }
    Allocation {
        code,
        map,
        n_regs,
        consts,
    }
}

/// `pending` with each input moved to just before the run of one kind
/// ([`kind`]) that first reads it, so that an input is loaded next to its
/// use rather than all of them at the start (a stage of a staged program
/// receives its inputs first). The moved inputs of a run are one run of
/// loads: those its instructions read as first operands, in order, then
/// those read as second operands, and so on. Inputs never read keep their
/// place at the start.
fn sink_inputs(pending: Vec<Pending>, n: usize) -> Vec<Pending> {
    let is_input = |q: &Pending| matches!(q.ins, Ins::Input { .. });
    // Where each input is in `pending`.
    let mut input_at = vec![usize::MAX; n];
    for (t, q) in pending.iter().enumerate() {
        if is_input(q) {
            input_at[q.dst as usize] = t;
        }
    }
    // (start of the run that first reads it, operand slot, input).
    let mut first_reads: Vec<(usize, usize, u32)> = Vec::new();
    let mut claimed = vec![false; n];
    let mut run: Option<(usize, u8)> = None;
    for (t, q) in pending.iter().enumerate() {
        if is_input(q) {
            continue;
        }
        let k = kind(&q.ins);
        let start = match run {
            Some((start, rk)) if rk == k => start,
            _ => t,
        };
        run = Some((start, k));
        for (slot, &v) in q.operands[..q.n_operands as usize].iter().enumerate() {
            let v = v as usize;
            if input_at[v] != usize::MAX && !claimed[v] {
                claimed[v] = true;
                first_reads.push((start, slot, v as u32));
            }
        }
    }
    // Within a run, the inputs its instructions read first as their first
    // operands, then those read as their second, …: consecutive registers
    // for each operand, so the run stays strided.
    first_reads.sort_by_key(|&(start, slot, _)| (start, slot));
    let mut out = Vec::with_capacity(pending.len());
    out.extend(
        pending
            .iter()
            .filter(|q| is_input(q) && !claimed[q.dst as usize]),
    );
    let mut next = first_reads.iter().peekable();
    for (t, q) in pending.iter().enumerate() {
        if is_input(q) {
            continue;
        }
        while let Some(&(_, _, v)) = next.next_if(|&&(at, _, _)| at == t) {
            out.push(pending[input_at[v as usize]]);
        }
        out.push(*q);
    }
    out
}

/// `ins` with its operand and destination value numbers replaced by
/// registers.
fn rename(mut ins: Ins, map: &[u32]) -> Ins {
    for_each_register(&mut ins, |v| *v = map[*v as usize]);
    ins
}

/// Calls `f` on each register field of `ins` (destination and operands).
fn for_each_register(ins: &mut Ins, mut f: impl FnMut(&mut u32)) {
    match ins {
        Ins::Input { dst, .. } | Ins::Custom { dst, .. } => f(dst),
        Ins::Neg { dst, a }
        | Ins::AddK { dst, a, .. }
        | Ins::KAdd { dst, a, .. }
        | Ins::SubK { dst, a, .. }
        | Ins::KSub { dst, a, .. }
        | Ins::MulK { dst, a, .. }
        | Ins::KMul { dst, a, .. }
        | Ins::DivK { dst, a, .. }
        | Ins::KDiv { dst, a, .. }
        | Ins::Unary { dst, a, .. } => {
            f(dst);
            f(a);
        }
        Ins::Add { dst, a, b }
        | Ins::Sub { dst, a, b }
        | Ins::Mul { dst, a, b }
        | Ins::Div { dst, a, b }
        | Ins::Binary { dst, a, b, .. } => {
            f(dst);
            f(a);
            f(b);
        }
        Ins::MulAdd { dst, a, b, c }
        | Ins::AddMul { dst, a, b, c }
        | Ins::MulSub { dst, a, b, c }
        | Ins::SubMul { dst, a, b, c }
        | Ins::Ternary { dst, a, b, c, .. } => {
            f(dst);
            f(a);
            f(b);
            f(c);
        }
    }
}

/// The kind of an instruction: which loop of [`run_of_kind`] runs it.
fn kind(ins: &Ins) -> u8 {
    match ins {
        Ins::Add { .. } => 1,
        Ins::Sub { .. } => 2,
        Ins::Mul { .. } => 3,
        Ins::Div { .. } => 4,
        Ins::Neg { .. } => 5,
        Ins::AddK { .. } => 6,
        Ins::KAdd { .. } => 7,
        Ins::SubK { .. } => 8,
        Ins::KSub { .. } => 9,
        Ins::MulK { .. } => 10,
        Ins::KMul { .. } => 11,
        Ins::MulAdd { .. } => 12,
        Ins::AddMul { .. } => 13,
        Ins::MulSub { .. } => 14,
        Ins::SubMul { .. } => 15,
        Ins::Input { .. } => 16,
        _ => 0,
    }
}

/// A register's contents: one `f64`, or one per lane of
/// [`Program::eval_f64_lanes`]. Each instruction's arithmetic is written
/// once, in [`step`], over this trait.
trait Lane: Copy {
    /// Runs a strided run of arithmetic kind `k` whose register fields all
    /// step by one (`base`: the first instruction's packed words), several
    /// instructions at a time; `false`, having run nothing, where this
    /// lane type has no such path or the run does not qualify.
    #[inline(always)]
    fn run_unit_stride(_k: u8, _count: usize, _base: &[u32], _r: &mut [Self]) -> bool {
        false
    }
    fn splat(c: f64) -> Self;
    fn map(self, f: impl Fn(f64) -> f64) -> Self;
    fn zip(self, b: Self, f: impl Fn(f64, f64) -> f64) -> Self;
    fn zip3(self, b: Self, c: Self, f: impl Fn(f64, f64, f64) -> f64) -> Self;
}

impl Lane for f64 {
    #[inline(always)]
    fn run_unit_stride(k: u8, count: usize, base: &[u32], r: &mut [Self]) -> bool {
        unit_stride_f64(k, count, base, r)
    }
    #[inline(always)]
    fn splat(c: f64) -> Self {
        c
    }
    #[inline(always)]
    fn map(self, f: impl Fn(f64) -> f64) -> Self {
        f(self)
    }
    #[inline(always)]
    fn zip(self, b: Self, f: impl Fn(f64, f64) -> f64) -> Self {
        f(self, b)
    }
    #[inline(always)]
    fn zip3(self, b: Self, c: Self, f: impl Fn(f64, f64, f64) -> f64) -> Self {
        f(self, b, c)
    }
}

impl<const N: usize> Lane for [f64; N] {
    #[inline(always)]
    fn run_unit_stride(k: u8, count: usize, base: &[u32], r: &mut [Self]) -> bool {
        unit_stride_one(k, count, base, r)
    }
    // Plain loops over the lanes (not `array::from_fn`, which is not
    // always inlined for wide arrays), so that each compiles to a few
    // vector instructions on values kept in registers.
    #[inline(always)]
    fn splat(c: f64) -> Self {
        [c; N]
    }
    #[inline(always)]
    fn map(mut self, f: impl Fn(f64) -> f64) -> Self {
        for x in &mut self {
            *x = f(*x);
        }
        self
    }
    #[inline(always)]
    fn zip(mut self, b: Self, f: impl Fn(f64, f64) -> f64) -> Self {
        for (x, y) in self.iter_mut().zip(b) {
            *x = f(*x, y);
        }
        self
    }
    #[inline(always)]
    fn zip3(mut self, b: Self, c: Self, f: impl Fn(f64, f64, f64) -> f64) -> Self {
        for ((x, y), z) in self.iter_mut().zip(b).zip(c) {
            *x = f(*x, y, z);
        }
        self
    }
}

impl RegisterCode {
    /// The runs in order: each run's kind, its instructions of kind 0 (in
    /// `other`; empty for the other kinds) and its packed words (empty for
    /// kind 0).
    #[inline(always)]
    fn each_run(&self) -> impl Iterator<Item = (u8, &[Ins], &[u32])> + '_ {
        let (mut start, mut pstart) = (0, 0);
        self.runs.iter().map(move |&(k, end, pend)| {
            let (end, pend) = (end as usize, pend as usize);
            let run = self.other.get(start..end).unwrap_or(&[]);
            let words = self.packed.get(pstart..pend).unwrap_or(&[]);
            (start, pstart) = (end, pend);
            (k, run, words)
        })
    }

    /// Every instruction, in order (kind 0 from `other`, the rest unpacked
    /// from `packed`): for the native backend, which compiles the code
    /// once.
    #[cfg(feature = "jit")]
    pub(crate) fn instructions(&self) -> Vec<Ins> {
        let mut all = Vec::with_capacity(self.len);
        for (k, run, words) in self.each_run() {
            all.extend_from_slice(run);
            if k & STRIDED != 0 {
                let k = k & !STRIDED;
                let w = width(k);
                let count = words.first().copied().unwrap_or(0);
                let mut cur: Vec<u32> = (0..w).map(|c| words[1 + 2 * c]).collect();
                for _ in 0..count {
                    all.push(unpack(k, &cur));
                    for (c, x) in cur.iter_mut().enumerate() {
                        *x = x.wrapping_add(words[2 + 2 * c]);
                    }
                }
            } else if k != 0 {
                all.extend(words.chunks_exact(width(k)).map(|w| unpack(k, w)));
            }
        }
        all
    }
}

/// How many `u32` words an instruction of kind `k > 0` takes in
/// [`RegisterCode::packed`]: the destination and the operands, or the
/// destination, the operand and the immediate's two halves.
#[inline(always)]
const fn width(k: u8) -> usize {
    match k {
        5 | 16 => 2,
        1..=4 => 3,
        _ => 4,
    }
}

/// Appends `ins` to the packed code if its kind is not 0 ([`width`] words;
/// the inverse of [`unpack`]).
fn pack(ins: &Ins, words: &mut Vec<u32>) {
    match *ins {
        Ins::Add { dst, a, b }
        | Ins::Sub { dst, a, b }
        | Ins::Mul { dst, a, b }
        | Ins::Div { dst, a, b } => words.extend([dst, a, b]),
        Ins::Neg { dst, a } => words.extend([dst, a]),
        Ins::Input { dst, k } => words.extend([dst, k]),
        Ins::AddK { dst, a, k }
        | Ins::KAdd { dst, a, k }
        | Ins::SubK { dst, a, k }
        | Ins::KSub { dst, a, k }
        | Ins::MulK { dst, a, k }
        | Ins::KMul { dst, a, k } => {
            let bits = k.to_bits();
            words.extend([dst, a, bits as u32, (bits >> 32) as u32]);
        }
        Ins::MulAdd { dst, a, b, c }
        | Ins::AddMul { dst, a, b, c }
        | Ins::MulSub { dst, a, b, c }
        | Ins::SubMul { dst, a, b, c } => words.extend([dst, a, b, c]),
        _ => {}
    }
}

/// The instruction of kind `k > 0` packed in `w` ([`width`]`(k)` words).
/// Inlined into a loop whose `k` is a constant, it folds to the fields'
/// loads.
#[inline(always)]
fn unpack(k: u8, w: &[u32]) -> Ins {
    let (dst, a) = (w[0], w[1]);
    let b = || w[2];
    let c = || w[3];
    let k_at = || f64::from_bits(u64::from(w[2]) | (u64::from(w[3]) << 32));
    match k {
        1 => Ins::Add { dst, a, b: b() },
        2 => Ins::Sub { dst, a, b: b() },
        3 => Ins::Mul { dst, a, b: b() },
        4 => Ins::Div { dst, a, b: b() },
        5 => Ins::Neg { dst, a },
        16 => Ins::Input { dst, k: a },
        6 => Ins::AddK { dst, a, k: k_at() },
        7 => Ins::KAdd { dst, a, k: k_at() },
        8 => Ins::SubK { dst, a, k: k_at() },
        9 => Ins::KSub { dst, a, k: k_at() },
        10 => Ins::MulK { dst, a, k: k_at() },
        11 => Ins::KMul { dst, a, k: k_at() },
        12 => Ins::MulAdd {
            dst,
            a,
            b: b(),
            c: c(),
        },
        13 => Ins::AddMul {
            dst,
            a,
            b: b(),
            c: c(),
        },
        14 => Ins::MulSub {
            dst,
            a,
            b: b(),
            c: c(),
        },
        _ => Ins::SubMul {
            dst,
            a,
            b: b(),
            c: c(),
        },
    }
}

/// Runs the whole register code: each run by [`run_of_kind`].
#[inline(always)]
fn run_all<V: Lane>(
    rc: &RegisterCode,
    r: &mut [V],
    input: &impl Fn(u32) -> V,
    custom: &impl Fn(u32, &[V]) -> V,
) {
    for (k, run, words) in rc.each_run() {
        run_of_kind(k, run, words, r, input, custom);
    }
}

/// Runs one run of kind `k` ([`kind`]): the arithmetic kinds from their
/// packed words, in a loop specialised to the kind, so that [`step`]
/// inlines to that one operation; kind 0 instruction by instruction.
#[inline(always)]
fn run_of_kind<V: Lane>(
    k: u8,
    run: &[Ins],
    words: &[u32],
    r: &mut [V],
    input: &impl Fn(u32) -> V,
    custom: &impl Fn(u32, &[V]) -> V,
) {
    if k & STRIDED != 0 {
        return strided_run(k & !STRIDED, words, r, input, custom);
    }
    macro_rules! specialised {
        ($($k:literal)*) => {
            match k {
                $( $k => {
                    for w in words.chunks_exact(width($k)) {
                        step(&unpack($k, w), r, input, custom);
                    }
                } )*
                _ => {
                    for ins in run {
                        step(ins, r, input, custom);
                    }
                }
            }
        };
    }
    specialised!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);
}

/// Runs one strided run of kind `k`: `count` instructions whose packed
/// words are `base + i · stride` (wrapping) for `i = 0, 1, …`, stored as
/// `[count, base₀, stride₀, base₁, stride₁, …]`.
#[inline(always)]
fn strided_run<V: Lane>(
    k: u8,
    words: &[u32],
    r: &mut [V],
    input: &impl Fn(u32) -> V,
    custom: &impl Fn(u32, &[V]) -> V,
) {
    macro_rules! specialised {
        ($($k:literal)*) => {
            match k {
                $( $k => {
                    const W: usize = width($k);
                    let (Some(&count), Some(fields)) = (words.first(), words.get(1..1 + 2 * W)) else {
                        return;
                    };
                    let mut cur = [0u32; W];
                    let mut stride = [0u32; W];
                    for c in 0..W {
                        cur[c] = fields[2 * c];
                        stride[c] = fields[2 * c + 1];
                    }
                    let n_reg = registers_of($k);
                    if stride[..n_reg].iter().all(|&s| s == 1)
                        && V::run_unit_stride($k, count as usize, &cur, r)
                    {
                        return;
                    }
                    for _ in 0..count {
                        step(&unpack($k, &cur), r, input, custom);
                        for c in 0..W {
                            cur[c] = cur[c].wrapping_add(stride[c]);
                        }
                    }
                } )*
                _ => {}
            }
        };
    }
    specialised!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);
}

/// How many of the packed words of an instruction of kind `k > 0` are
/// registers (the rest are an immediate's halves).
#[inline(always)]
const fn registers_of(k: u8) -> usize {
    match k {
        6..=11 => 2,
        _ => width(k),
    }
}

/// [`Lane::run_unit_stride`] for `f64`: four instructions at a time, their
/// operands loaded as arrays and their results stored as one, which the
/// compiler turns into vector instructions. Every result is computed by
/// [`step`], so it is the one a single instruction gives. Loading four
/// instructions' operands before storing their results is what running
/// them one by one does, unless one of the four reads what an earlier one
/// of them writes (an operand range starting one to three registers below
/// the destinations). Such a run goes one instruction at a time here when
/// the operand is the previous instruction's result (a running sum,
/// carried in a machine register); otherwise it, and kinds without a
/// unit-stride form (inputs), return `false`.
fn unit_stride_f64(k: u8, count: usize, base: &[u32], r: &mut [f64]) -> bool {
    macro_rules! specialised {
        ($($k:literal)*) => {
            match k {
                $( $k => {
                    const NR: usize = registers_of($k);
                    let Some(ins) = unit_run::<{ width($k) }, NR>($k, base, count, r.len()) else {
                        return false;
                    };
                    let d = base[0] as usize;
                    let below = |a: u32| d.checked_sub(a as usize).filter(|&g| g > 0);
                    let hazard = base[1..NR].iter().any(|&a| below(a).is_some_and(|g| g < 4));
                    if hazard {
                        // A recurrence: an operand is the previous
                        // instruction's result (a running sum). One at a
                        // time, that operand carried from the last step
                        // instead of stored and loaded again.
                        let Some(chain) = (1..NR).find(|&c| below(base[c]) == Some(1)) else {
                            return false;
                        };
                        // The carried operand's index as a constant, so
                        // that it stays in a machine register.
                        macro_rules! carried {
                            ($c:literal) => {{
                                let mut acc = r[base[$c] as usize];
                                for i in 0..count {
                                    let mut t = [0.0; 4];
                                    for c in 1..NR {
                                        if c != $c {
                                            t[c] = r[base[c] as usize + i];
                                        }
                                    }
                                    t[$c] = acc;
                                    step(&ins, &mut t, &|_| f64::NAN, &|_, _| f64::NAN);
                                    r[d + i] = t[0];
                                    acc = t[0];
                                }
                            }};
                        }
                        match chain {
                            1 => carried!(1),
                            2 => carried!(2),
                            _ => carried!(3),
                        }
                        return true;
                    }
                    let none = |_: u32| [f64::NAN; 4];
                    let no_rule = |_: u32, _: &[[f64; 4]]| [f64::NAN; 4];
                    let mut i = 0;
                    while i + 4 <= count {
                        let mut t = [[0.0; 4]; 4];
                        for c in 1..NR {
                            let a = base[c] as usize + i;
                            t[c].copy_from_slice(&r[a..a + 4]);
                        }
                        step(&ins, &mut t, &none, &no_rule);
                        r[d + i..d + i + 4].copy_from_slice(&t[0]);
                        i += 4;
                    }
                    while i < count {
                        let mut t = [0.0; 4];
                        for c in 1..NR {
                            t[c] = r[base[c] as usize + i];
                        }
                        step(&ins, &mut t, &|_| f64::NAN, &|_, _| f64::NAN);
                        r[d + i] = t[0];
                        i += 1;
                    }
                    true
                } )*
                _ => false,
            }
        };
    }
    specialised!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
}

/// The first instruction of a strided run of kind `k` whose registers all
/// step by one, rewritten onto temporaries (0 the result, 1.. its operands;
/// an immediate as it is), if `base` holds its words and every register
/// stays below `len` for all `count` instructions.
/// `W` and `NR` are the kind's [`width`] and [`registers_of`].
#[inline(always)]
fn unit_run<const W: usize, const NR: usize>(
    k: u8,
    base: &[u32],
    count: usize,
    len: usize,
) -> Option<Ins> {
    let base = base.get(..W)?;
    if !base[..NR].iter().all(|&b| b as usize + count <= len) {
        return None;
    }
    let mut t = [0u32; W];
    t.copy_from_slice(base);
    for (c, x) in t.iter_mut().enumerate().take(NR) {
        *x = c as u32;
    }
    Some(unpack(k, &t))
}

/// [`Lane::run_unit_stride`] for lanes, whose registers are already
/// vectors: one instruction at a time, in order (so a recurrence is run as
/// written), on temporaries, with the registers' bounds checked once for the
/// run instead of at every instruction. Every result is computed by
/// [`step`]. `false` for kinds without a unit-stride form (inputs) or a run
/// that would leave the registers. Kept out of line: inlined, it made the
/// `f64` path slower too (`Hvp::apply` at n = 10³: 4.8 → 6.1 µs in a
/// scratch timing).
#[inline(never)]
fn unit_stride_one<V: Lane>(k: u8, count: usize, base: &[u32], r: &mut [V]) -> bool {
    macro_rules! specialised {
        ($($k:literal)*) => {
            match k {
                $( $k => unit_one::<V, { width($k) }, { registers_of($k) }>($k, count, base, r), )*
                _ => false,
            }
        };
    }
    specialised!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
}

/// [`unit_stride_one`] for kind `k`, of [`width`] `W` and
/// [`registers_of`] `NR`.
#[inline(always)]
fn unit_one<V: Lane, const W: usize, const NR: usize>(
    k: u8,
    count: usize,
    base: &[u32],
    r: &mut [V],
) -> bool {
    let Some(ins) = unit_run::<W, NR>(k, base, count, r.len()) else {
        return false;
    };
    let none = |_: u32| V::splat(f64::NAN);
    let no_rule = |_: u32, _: &[V]| V::splat(f64::NAN);
    let d = base[0] as usize;
    for i in 0..count {
        let mut t = [V::splat(0.0); 4];
        for c in 1..NR {
            t[c] = r[base[c] as usize + i];
        }
        step(&ins, &mut t, &none, &no_rule);
        r[d + i] = t[0];
    }
    true
}

/// How many instructions the strided runs among `runs` stand for.
fn strided_len(runs: &[Run], packed: &[u32]) -> usize {
    let mut start = 0;
    let mut n = 0;
    for &(k, _, end) in runs {
        if k & STRIDED != 0 {
            n += packed.get(start as usize).copied().unwrap_or(0) as usize;
        }
        start = end;
    }
    n
}

/// The flag of a strided run's kind in [`RegisterCode::runs`].
const STRIDED: u8 = 0x20;

/// The shortest stretch of instructions stored as a strided run.
const MIN_STRIDED: usize = 4;

/// Splits `code` into runs of one kind ([`kind`]): the instructions of
/// kind 0 go to `other`, the others are packed ([`pack`]). Within a run,
/// a stretch of at least [`MIN_STRIDED`] instructions whose packed words
/// step by the same amount from one instruction to the next (the same
/// operation over consecutive registers, as the scheduler and the scratch
/// registers make the steps of a loop's elements) is stored once, as a
/// strided run ([`strided_run`]): its words are rebuilt exactly, so it
/// computes what the instructions would, in the same order.
fn encode_runs(code: &[Ins]) -> (Vec<Ins>, Vec<Run>, Vec<u32>) {
    let mut other = Vec::new();
    let mut runs: Vec<Run> = Vec::new();
    let mut packed = Vec::new();
    let mut tmp = Vec::new();
    let push_run = |runs: &mut Vec<Run>, k: u8, end: usize, pend: usize| {
        let (end, pend) = (end as u32, pend as u32);
        match runs.last_mut() {
            Some((last, e, pe)) if *last == k && k & STRIDED == 0 => (*e, *pe) = (end, pend),
            _ => runs.push((k, end, pend)),
        }
    };
    let mut i = 0;
    while i < code.len() {
        let k = kind(&code[i]);
        let m = code[i..].iter().take_while(|ins| kind(ins) == k).count();
        let run = &code[i..i + m];
        i += m;
        if k == 0 {
            other.extend_from_slice(run);
            push_run(&mut runs, 0, other.len(), packed.len());
            continue;
        }
        let w = width(k);
        tmp.clear();
        for ins in run {
            pack(ins, &mut tmp);
        }
        let at = |j: usize, c: usize| tmp[j * w + c];
        let mut j = 0;
        while j < m {
            if j + MIN_STRIDED <= m {
                let mut stride = [0u32; 4];
                for (c, st) in stride.iter_mut().enumerate().take(w) {
                    *st = at(j + 1, c).wrapping_sub(at(j, c));
                }
                let steps =
                    |e: usize| (0..w).all(|c| at(e, c) == at(e - 1, c).wrapping_add(stride[c]));
                let mut e = j + 2;
                while e < m && steps(e) {
                    e += 1;
                }
                if e - j >= MIN_STRIDED {
                    packed.push((e - j) as u32);
                    for (c, &st) in stride.iter().enumerate().take(w) {
                        packed.extend([at(j, c), st]);
                    }
                    push_run(&mut runs, k | STRIDED, other.len(), packed.len());
                    j = e;
                    continue;
                }
            }
            packed.extend_from_slice(&tmp[j * w..(j + 1) * w]);
            push_run(&mut runs, k, other.len(), packed.len());
            j += 1;
        }
    }
    (other, runs, packed)
}

/// Runs one instruction: the one definition of what each instruction
/// computes, for one value or for lanes.
#[inline(always)]
fn step<V: Lane>(
    ins: &Ins,
    r: &mut [V],
    input: &impl Fn(u32) -> V,
    custom: &impl Fn(u32, &[V]) -> V,
) {
    let g = |r: &[V], i: u32| r[i as usize];
    let (dst, v) = match *ins {
        Ins::Input { dst, k } => (dst, input(k)),
        Ins::Add { dst, a, b } => (dst, g(r, a).zip(g(r, b), |x, y| x + y)),
        Ins::Sub { dst, a, b } => (dst, g(r, a).zip(g(r, b), |x, y| x - y)),
        Ins::Mul { dst, a, b } => (dst, g(r, a).zip(g(r, b), |x, y| x * y)),
        Ins::Div { dst, a, b } => (dst, g(r, a).zip(g(r, b), |x, y| x / y)),
        Ins::Neg { dst, a } => (dst, g(r, a).map(|x| -x)),
        Ins::AddK { dst, a, k } => (dst, g(r, a).map(|x| x + k)),
        Ins::KAdd { dst, a, k } => (dst, g(r, a).map(|x| k + x)),
        Ins::SubK { dst, a, k } => (dst, g(r, a).map(|x| x - k)),
        Ins::KSub { dst, a, k } => (dst, g(r, a).map(|x| k - x)),
        Ins::MulK { dst, a, k } => (dst, g(r, a).map(|x| x * k)),
        Ins::KMul { dst, a, k } => (dst, g(r, a).map(|x| k * x)),
        Ins::DivK { dst, a, k } => (dst, g(r, a).map(|x| x / k)),
        Ins::KDiv { dst, a, k } => (dst, g(r, a).map(|x| k / x)),
        Ins::MulAdd { dst, a, b, c } => (dst, g(r, a).zip3(g(r, b), g(r, c), |x, y, z| x * y + z)),
        Ins::AddMul { dst, a, b, c } => (dst, g(r, a).zip3(g(r, b), g(r, c), |x, y, z| z + x * y)),
        Ins::MulSub { dst, a, b, c } => (dst, g(r, a).zip3(g(r, b), g(r, c), |x, y, z| x * y - z)),
        Ins::SubMul { dst, a, b, c } => (dst, g(r, a).zip3(g(r, b), g(r, c), |x, y, z| z - x * y)),
        Ins::Unary {
            dst,
            a,
            prim,
            param,
        } => (dst, g(r, a).map(|x| prim.value(&[x], param))),
        Ins::Binary {
            dst,
            a,
            b,
            prim,
            param,
        } => (dst, g(r, a).zip(g(r, b), |x, y| prim.value(&[x, y], param))),
        Ins::Ternary { dst, a, b, c, prim } => (
            dst,
            g(r, a).zip3(g(r, b), g(r, c), |x, y, z| prim.value(&[x, y, z], 0)),
        ),
        Ins::Custom { dst, slot } => (dst, custom(slot, r)),
    };
    r[dst as usize] = v;
}

/// How many inputs [`Program::eval_f64_lanes`] evaluates at once: four
/// `f64` lanes, one AVX register or two SSE registers per value.
pub(crate) const LANES: usize = 4;

/// Registers of [`Program::eval_f64_lanes`]: [`LANES`] values each.
#[derive(Debug, Clone, Default)]
pub(crate) struct LaneRegisters {
    regs: Vec<[f64; LANES]>,
}

impl Program {
    /// Runs the register code on [`LANES`] inputs at once, the same
    /// instructions for every lane, so that decoding an instruction is paid
    /// once per four values. Input `k` is `shared[k]` in every lane for
    /// `k < shared.len()`, and `lanes[k − shared.len()]` (one value per
    /// lane) after that. Each lane's results equal those of
    /// [`Program::eval_f64`] on that lane's inputs, bit for bit.
    ///
    /// # Errors
    ///
    /// As [`Program::eval_f64`]; a guard fails if it fails in any lane.
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
    /// [`Program::eval_f64_lanes`] and of the array tier's `map`, which
    /// evaluates a body over a block of elements with one pass of each
    /// instruction. Each lane's results equal those of
    /// [`Program::eval_f64`] on that lane's inputs, bit for bit.
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
        let rc = self.registers.0.get_or_init(|| self.lower_to_registers());
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

#[cfg(test)]
mod tests {
    //! Strided runs against the instructions they stand for: random register
    //! code made of stretches of one kind whose fields step by small
    //! amounts (recurrences at distances 1 to 5 among them, the case the
    //! four-at-a-time path must refuse), run one instruction at a time and
    //! through [`encode_runs`] + [`run_all`], in `f64` and in lanes.
    use super::*;
    use proptest::prelude::*;

    const R: u32 = 48;

    /// One stretch: kind, count, first destination, destination stride,
    /// operand offsets below the destination (or absolute registers), and
    /// their strides.
    #[derive(Clone, Debug)]
    struct Stretch {
        k: u8,
        count: u32,
        dst: u32,
        dst_stride: i32,
        operands: [(bool, u32, i32); 3],
        imm: f64,
    }

    fn stretch() -> impl Strategy<Value = Stretch> {
        let operand = (any::<bool>(), 0u32..R, -1i32..=2);
        (
            1u8..=16,
            1u32..=11,
            0u32..R,
            -1i32..=2,
            [operand.clone(), operand.clone(), operand],
            -2.0f64..2.0,
        )
            .prop_map(|(k, count, dst, dst_stride, operands, imm)| Stretch {
                k,
                count,
                dst,
                dst_stride,
                operands,
                imm,
            })
    }

    /// The register of field `base + i · stride`, kept inside the file by
    /// falling back to stride 0.
    fn field(base: u32, stride: i32, count: u32) -> (u32, i32) {
        let last = i64::from(base) + i64::from(stride) * i64::from(count.saturating_sub(1));
        if (0..i64::from(R)).contains(&last) {
            (base, stride)
        } else {
            (base, 0)
        }
    }

    fn code_of(stretches: &[Stretch]) -> Vec<Ins> {
        let mut code = Vec::new();
        for s in stretches {
            let (d0, sd) = field(s.dst, s.dst_stride, s.count);
            // Operands at a distance below the destination (recurrences)
            // or anywhere.
            let ops: Vec<(u32, i32)> = s
                .operands
                .iter()
                .map(|&(below, x, st)| {
                    if below {
                        let gap = 1 + x % 5;
                        field(d0.saturating_sub(gap), sd, s.count)
                    } else {
                        field(x, st, s.count)
                    }
                })
                .collect();
            for i in 0..s.count as i32 {
                let at = |(b, st): (u32, i32)| (b as i32 + st * i) as u32;
                let dst = at((d0, sd));
                let (a, b, c) = (at(ops[0]), at(ops[1]), at(ops[2]));
                let k = s.imm;
                code.push(match s.k {
                    1 => Ins::Add { dst, a, b },
                    2 => Ins::Sub { dst, a, b },
                    3 => Ins::Mul { dst, a, b },
                    4 => Ins::Div { dst, a, b },
                    5 => Ins::Neg { dst, a },
                    6 => Ins::AddK { dst, a, k },
                    7 => Ins::KAdd { dst, a, k },
                    8 => Ins::SubK { dst, a, k },
                    9 => Ins::KSub { dst, a, k },
                    10 => Ins::MulK { dst, a, k },
                    11 => Ins::KMul { dst, a, k },
                    12 => Ins::MulAdd { dst, a, b, c },
                    13 => Ins::AddMul { dst, a, b, c },
                    14 => Ins::MulSub { dst, a, b, c },
                    15 => Ins::SubMul { dst, a, b, c },
                    _ => Ins::Input { dst, k: a },
                });
            }
        }
        code
    }

    fn same(a: f64, b: f64) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn strided_runs_compute_their_instructions(
            stretches in prop::collection::vec(stretch(), 1..8),
            init in prop::collection::vec(-2.0f64..2.0, R as usize),
        ) {
            let code = code_of(&stretches);
            let (other, runs, packed) = encode_runs(&code);
            let rc = RegisterCode { other, len: code.len(), runs, packed, ..RegisterCode::default() };
            #[cfg(feature = "jit")]
            prop_assert_eq!(rc.instructions(), code.clone());
            let input = |k: u32| 0.25 * f64::from(k) - 1.0;
            let custom = |_: u32, _: &[f64]| f64::NAN;
            let mut want = init.clone();
            for ins in &code {
                step(ins, &mut want, &input, &custom);
            }
            let mut got = init.clone();
            run_all(&rc, &mut got, &input, &custom);
            for (i, (a, b)) in want.iter().zip(&got).enumerate() {
                prop_assert!(same(*a, *b), "register {}: {:e} vs {:e}", i, a, b);
            }
            // Lanes: the generic loop, lane by lane the same.
            let lanes = |r: &[f64]| -> Vec<[f64; 2]> { r.iter().map(|&x| [x, -x]).collect() };
            let linput = |k: u32| [input(k), input(k)];
            let lcustom = |_: u32, _: &[[f64; 2]]| [f64::NAN; 2];
            let mut lgot = lanes(&init);
            run_all(&rc, &mut lgot, &linput, &lcustom);
            let mut lwant = lanes(&init);
            for ins in &code {
                step(ins, &mut lwant, &linput, &lcustom);
            }
            for (a, b) in lwant.iter().zip(&lgot) {
                prop_assert!(same(a[0], b[0]) && same(a[1], b[1]));
            }
        }
    }

    /// The stretches become strided runs: a long program of such stretches
    /// is stored in far fewer words than one instruction each.
    #[test]
    fn stretches_are_stored_once() {
        let s = Stretch {
            k: 1,
            count: 40,
            dst: 0,
            dst_stride: 1,
            operands: [(false, 0, 0); 3],
            imm: 0.0,
        };
        let code = code_of(&[s]);
        let (_, runs, packed) = encode_runs(&code);
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].0, 1 | STRIDED);
        assert_eq!(packed.len(), 1 + 2 * width(1));
    }
}
