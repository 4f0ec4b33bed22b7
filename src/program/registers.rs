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
//!
//! Every instruction computes exactly the floating-point operation the
//! interpreter computes, with the operands in the same order, so the two
//! agree bit for bit on every input; the tests check this on the random
//! programs of the property tests and on the drivers' derived programs. The
//! one difference: where a result is NaN, its sign and payload may differ,
//! because Rust's floating-point semantics leave them unspecified (RFC 3514)
//! and the compiler may commute the operands of `+` and `·`.

use super::eval::check_guard_operands;
use super::ir::{Instr, Op, Program, Var};
#[cfg(feature = "jit")]
use super::native::BLOCK;
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

/// A program lowered to register code.
#[derive(Debug, Default)]
pub(crate) struct RegisterCode {
    /// The instructions of kind 0 ([`kind`]: inputs, calls of other
    /// primitives, user rules), in order; the others are in `packed`.
    /// [`RegisterCode::instructions`] gives them all.
    other: Vec<Ins>,
    /// How many instructions there are in all.
    pub(crate) len: usize,
    /// Runs of consecutive instructions of one kind ([`kind`]), as
    /// `(kind, end in other, end in packed)`: each run is executed by a loop
    /// specialised to its kind, with no dispatch per instruction.
    /// [`Program::schedule`] groups instructions by operation within each
    /// dependency level, so the runs are long.
    runs: Vec<(u8, u32, u32)>,
    /// The instructions of the arithmetic kinds (`kind > 0`) as the run
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

        // Liveness: the last instruction reading each value; outputs and
        // guard operands live to the end.
        const END: u32 = u32::MAX;
        let mut last = vec![0u32; n];
        let mut read = vec![false; n];
        for (t, q) in pending.iter().enumerate() {
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

        // Registers: constants read from registers first (never freed),
        // then a linear scan with a last-in first-out free list.
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
        let mut free: Vec<u32> = Vec::new();
        let mut code = Vec::with_capacity(pending.len());
        for (t, q) in pending.iter().enumerate() {
            let operands = &q.operands[..q.n_operands as usize];
            // Operands are read before the destination is written, so a
            // register freed here may be the destination.
            for (j, &v) in operands.iter().enumerate() {
                let first = operands[..j].iter().all(|&w| w != v);
                if first && last[v as usize] == t as u32 && role[v as usize] == Role::Register {
                    free.push(map[v as usize]);
                }
            }
            let dst = free.pop().unwrap_or_else(|| {
                n_regs += 1;
                n_regs - 1
            });
            map[q.dst as usize] = dst;
            if !read[q.dst as usize] && !pinned[q.dst as usize] {
                // Never read (dead code the passes left): free at once.
                free.push(dst);
            }
            code.push(rename(q.ins, &map));
        }
        for c in &mut customs {
            for r in &mut c.1[..c.2 as usize] {
                *r = map[*r as usize];
            }
        }
        let mut runs: Vec<(u8, u32, u32)> = Vec::new();
        let mut packed = Vec::new();
        let len = code.len();
        let mut other = Vec::new();
        for ins in code {
            let k = kind(&ins);
            if k == 0 {
                other.push(ins);
            } else {
                pack(&ins, &mut packed);
            }
            let (end, pend) = (other.len() as u32, packed.len() as u32);
            match runs.last_mut() {
                Some((last, e, pe)) if *last == k => (*e, *pe) = (end, pend),
                _ => runs.push((k, end, pend)),
            }
        }
        RegisterCode {
            other,
            len,
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
        if let Some(nc) = self.native_when_hot(rc) {
            let r = &mut regs.regs;
            if nc.run(r, inputs) {
                if !rc.guard_regs.is_empty() {
                    let g = nc.guard_base;
                    check_guard_operands(&self.guards, |i, _| (r[g + 2 * i], r[g + 2 * i + 1]))?;
                }
                copy_outputs(&r[nc.out_base..nc.out_base + outputs.len()], outputs);
                return Ok(());
            }
        }
        self.eval_registers(rc, regs, inputs, outputs)
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
    /// [`MAX_PROGRAM`](super::native::MAX_PROGRAM) instructions long.
    #[cfg(feature = "jit")]
    fn native_when_hot(&self, rc: &RegisterCode) -> Option<&super::native::NativeCode> {
        use super::native::{HOT_CALLS, MAX_PROGRAM};
        if let Some(n) = self.native.whole.0.get() {
            return n.as_ref();
        }
        if rc.len > MAX_PROGRAM || self.native.calls.add(1) < u64::from(HOT_CALLS) {
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

/// `ins` with its operand and destination value numbers replaced by
/// registers.
fn rename(mut ins: Ins, map: &[u32]) -> Ins {
    let m = |v: &mut u32| *v = map[*v as usize];
    match &mut ins {
        Ins::Input { dst, .. } | Ins::Custom { dst, .. } => m(dst),
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
            m(dst);
            m(a);
        }
        Ins::Add { dst, a, b }
        | Ins::Sub { dst, a, b }
        | Ins::Mul { dst, a, b }
        | Ins::Div { dst, a, b }
        | Ins::Binary { dst, a, b, .. } => {
            m(dst);
            m(a);
            m(b);
        }
        Ins::MulAdd { dst, a, b, c }
        | Ins::AddMul { dst, a, b, c }
        | Ins::MulSub { dst, a, b, c }
        | Ins::SubMul { dst, a, b, c }
        | Ins::Ternary { dst, a, b, c, .. } => {
            m(dst);
            m(a);
            m(b);
            m(c);
        }
    }
    ins
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
        _ => 0,
    }
}

/// A register's contents: one `f64`, or one per lane of
/// [`Program::eval_f64_lanes`]. Each instruction's arithmetic is written
/// once, in [`step`], over this trait.
trait Lane: Copy {
    fn splat(c: f64) -> Self;
    fn map(self, f: impl Fn(f64) -> f64) -> Self;
    fn zip(self, b: Self, f: impl Fn(f64, f64) -> f64) -> Self;
    fn zip3(self, b: Self, c: Self, f: impl Fn(f64, f64, f64) -> f64) -> Self;
}

impl Lane for f64 {
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
            if k != 0 {
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
fn width(k: u8) -> usize {
    match k {
        5 => 2,
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
    specialised!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
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
