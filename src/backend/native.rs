//! The native backend (feature `jit`): the register code of the lowered
//! evaluator compiled to machine code with Cranelift.
//!
//! Two kinds of code come from one translation of the register
//! instructions:
//!
//! * **Whole programs** ([`compile_program`]), for [`Executable::eval_f64`](crate::Executable::eval_f64).
//!   The code is cut into functions of at most [`CHUNK`] instructions, so
//!   that compile time stays linear in the program's length. Inside a
//!   function every register is an SSA value that Cranelift allocates to
//!   machine registers; between functions a register that is still needed
//!   goes through the register file in memory (a store at the end of the
//!   function that last wrote it, a load in the first that reads it).
//! * **Block kernels** ([`compile_block`]), for the array tier's `map`:
//!   the body as a loop over a block of [`BLOCK`] elements, two elements
//!   per iteration in the two lanes of an SSE2 register; a body that calls
//!   out as several loops over the block, one per call and one per run of
//!   arithmetic between calls ([`pieces`]).
//!
//! Every instruction computes the floating-point operation the
//! interpreter computes, with the operands in the same order: `+ − · /`,
//! negation, `sqrt` and `abs` as machine instructions (all exact in IEEE
//! 754, so the same bits), `select` as a comparison and a blend, a product
//! fused into a sum as two separate roundings (never a fused
//! multiply-add), and every other primitive as a call to the very Rust
//! function the interpreter runs
//! ([`Prim::native_value`]). A `sin` and a `cos` of one value in one
//! function are one call ([`sin_cos`]) that evaluates both of those
//! functions, which the compiler turns into one `sincos`; glibc's
//! `sincos` gives the bits of its `sin` and `cos`. So the results equal
//! the interpreter's bit for bit; the tests check this on the random
//! programs of the property tests (whose derivatives take the `sin` and
//! the `cos` of the same values). Programs with user rules are not
//! compiled (they keep the register code).
//!
//! This module holds the crate's only `unsafe` code: turning the address
//! of finished machine code into a function pointer, calling it, and
//! freeing the code's memory. Each block carries its SAFETY argument.

#![allow(unsafe_code)]

use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F64, F64X2, I32, I64};
use cranelift_codegen::ir::{
    AbiParam, Endianness, InstBuilder, MemFlagsData, SigRef, Signature, Type, Value,
};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId, Linkage, Module};

use std::sync::OnceLock;

use super::code::{Ins, RegisterCode};
use crate::program::ir::Program;
use crate::rules::Prim;

/// The longest whole program compiled with Cranelift's backtracking
/// register allocator (better code, slower to compile) instead of its
/// single-pass one: one chunk. A loop body is such a program and runs
/// once per step: the one-pass HVP through the RK4 loop of the loops
/// benchmark (a reversed body of about 440 instructions) took 12.2× the
/// plain loop with the single-pass allocator and 8.1× with the
/// backtracking one at N = 10⁵ steps (criterion, 3 processes), for a few
/// milliseconds more compile time, once.
const SMALL_PROGRAM: usize = CHUNK;

/// The most register instructions in one compiled function of a whole
/// program.
pub(crate) const CHUNK: usize = 1024;

pub(crate) use super::BLOCK;

/// The most register instructions a map body may have to be compiled as
/// a block kernel (a longer body keeps the register code).
const MAX_BODY: usize = 4 * CHUNK;

/// How many times a program runs through [`Executable::eval_f64`](crate::Executable::eval_f64) before it
/// is compiled: compiling costs about as much as a few thousand runs of
/// the register code, so programs run only a few times never pay it.
pub(crate) const HOT_CALLS: u32 = 1000;

/// The longest program (in register instructions) compiled whole. Longer
/// straight-line code runs slower natively than as register code: it no
/// longer fits the instruction cache, while register code is compact and
/// loops over runs of one kind. Long programs with data-parallel structure
/// belong in the array tier, whose map bodies are compiled as loops.
pub(crate) const MAX_PROGRAM: usize = 1 << 15;

/// How many elements the register code computes for a map body before the
/// body is compiled as a kernel.
pub(crate) const HOT_ELEMENTS: u64 = 1 << 16;

/// A counter of runs (or elements) toward compiling, starting at zero.
#[derive(Debug, Default)]
pub(crate) struct Heat(AtomicU64);

impl Heat {
    /// Adds `k` and returns the new total.
    pub(crate) fn add(&self, k: u64) -> u64 {
        self.0.fetch_add(k, Ordering::Relaxed).saturating_add(k)
    }
}

/// An executable's native code and its counters toward compiling it.
#[derive(Debug, Default)]
pub(crate) struct Native {
    /// The whole program, compiled on its [`HOT_CALLS`]-th run; `None`
    /// inside where it cannot be compiled.
    pub(crate) whole: OnceLock<Option<NativeCode>>,
    /// The program as a map body's block kernel.
    pub(crate) block: OnceLock<Option<NativeCode>>,
    /// Runs of `eval_f64` so far.
    pub(crate) calls: Heat,
    /// Elements of map evaluation so far.
    pub(crate) elements: Heat,
}

/// A compiled function: `f(r, x)`. For a chunk of a whole program, `r` is
/// the register file and `x` the inputs; for a block kernel, `r` holds the
/// outputs and `x` the inputs, each as [`BLOCK`] consecutive values.
type Entry = unsafe extern "C" fn(*mut f64, *const f64);

/// Machine code for one program, with the memory it lives in.
pub(crate) struct NativeCode {
    entries: Vec<Entry>,
    /// Values of `x` the code reads (a whole program), or its inputs (a
    /// block kernel).
    x_len: usize,
    /// Values of `r` the code reads and writes (a whole program), or of
    /// the scratch area (a block kernel).
    r_len: usize,
    /// Rows a block kernel writes: guard operands and outputs (0 for a
    /// whole program).
    out_rows: usize,
    /// Where the guard operands start in `r` (pairs, in guard order; for a
    /// kernel, in units of [`BLOCK`] values).
    pub(crate) guard_base: usize,
    /// Where the outputs start in `r` (for a kernel, in units of
    /// [`BLOCK`]).
    pub(crate) out_base: usize,
    /// Instructions compiled (for the benchmarks' compile time per
    /// instruction).
    pub(crate) n_instructions: usize,
    /// The memory of the code. Held only to be freed on drop; the mutex
    /// makes the owner `Sync` (the module itself is not used after
    /// finalisation).
    module: Option<Mutex<JITModule>>,
}

/// `r` grown to `len` values (out of line: the first run only, and a
/// small program's hot path keeps fewer registers without it).
#[cold]
#[inline(never)]
fn grow(r: &mut Vec<f64>, len: usize) {
    r.resize(len, 0.0);
}

impl fmt::Debug for NativeCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NativeCode")
            .field("functions", &self.entries.len())
            .field("instructions", &self.n_instructions)
            .finish()
    }
}

impl Drop for NativeCode {
    fn drop(&mut self) {
        if let Some(m) = self.module.take() {
            let m = m.into_inner().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the only pointers into this module's memory are
            // `self.entries`, which are dropped with `self`. Every call
            // through them borrows `self` (`run`, `run_block`), so none
            // is executing now and none can happen later.
            unsafe { m.free_memory() };
        }
    }
}

impl NativeCode {
    /// Runs a whole program: `r` is grown to the code's needs, `x` holds
    /// the inputs. Afterwards `r[out_base..]` holds the outputs and
    /// `r[guard_base..]` the guard operands. Returns `false`, running
    /// nothing, if `x` is too short.
    #[inline]
    pub(crate) fn run(&self, r: &mut Vec<f64>, x: &[f64]) -> bool {
        if x.len() < self.x_len {
            return false;
        }
        if r.len() < self.r_len {
            grow(r, self.r_len);
        }
        for f in &self.entries {
            // SAFETY: `f` is finished code of this module (alive while
            // `self` is borrowed) with the signature `Entry`, generated by
            // `compile_program`. It reads `x[k]` only for `k < x_len`
            // (inputs past that compile to NaN constants) and reads and
            // writes `r[i]` only for `i < r_len`; both lengths were
            // checked above, and the two slices do not overlap. The code
            // calls only `Prim::native_value` functions and `sin_cos`,
            // which are safe Rust (`sin_cos` returns its pair in two
            // registers on the hosts where `SIN_COS` lets it be called, as
            // the generated call expects), and keeps no pointer after it
            // returns.
            unsafe { f(r.as_mut_ptr(), x.as_ptr()) };
        }
        true
    }

    /// Values of the scratch area a block kernel needs ([`BLOCK`] per
    /// register that crosses from one of its loops to a later one).
    pub(crate) fn scratch_len(&self) -> usize {
        self.r_len
    }

    /// Runs a block kernel on the blocks in `args` (each input's
    /// [`BLOCK`] lanes, each guard operand's and output's row, wherever
    /// they lie), with `scratch` as its working memory. Returns `false`,
    /// running nothing, if `args` does not have one block per input and one
    /// row per guard operand and output, each at least [`BLOCK`] long, or
    /// `scratch` is shorter than [`NativeCode::scratch_len`].
    pub(crate) fn run_block(&self, args: BlockArgs<'_>, scratch: &mut [f64]) -> bool {
        let BlockArgs {
            inputs,
            rows,
            complete,
            ..
        } = args;
        if !complete
            || inputs.len() != self.x_len
            || rows.len() != self.out_rows
            || scratch.len() < self.r_len
        {
            return false;
        }
        let Some(&f) = self.entries.first() else {
            return false;
        };
        rows.push(scratch.as_mut_ptr() as usize);
        // SAFETY: `f` is finished code of this module with the signature
        // `Entry`, generated by `compile_block` for `x_len` inputs and
        // `out_rows` rows. It reads the `x_len` addresses of `inputs` and
        // the `out_rows + 1` of `rows` (their lengths, checked above and
        // just pushed), reads `BLOCK` values at each input address, writes
        // `BLOCK` values at each row address and reads and writes the
        // first `r_len` values at the scratch address. Every address was
        // taken by `BlockArgs` from a slice at least `BLOCK` long
        // (`complete`), borrowed for the lifetime of `args`, which this
        // call still holds: the inputs shared, the rows exclusive, so no
        // row overlaps another row or an input; `scratch` is a further
        // exclusive borrow, checked long enough above. The code calls only
        // `Prim::native_value` functions, which are safe Rust, and keeps
        // no address after it returns.
        unsafe {
            f(
                rows.as_mut_ptr().cast::<f64>(),
                inputs.as_ptr().cast::<f64>(),
            )
        };
        true
    }
}

/// The blocks one call of a block kernel reads and writes
/// ([`NativeCode::run_block`]): the addresses of slices borrowed for
/// `'a`, each checked to hold at least [`BLOCK`] values. The address
/// lists are the caller's, reused from block to block.
pub(crate) struct BlockArgs<'a> {
    inputs: &'a mut Vec<usize>,
    rows: &'a mut Vec<usize>,
    /// Whether every slice given was long enough.
    complete: bool,
    _blocks: PhantomData<&'a mut [f64]>,
}

impl<'a> BlockArgs<'a> {
    /// No blocks yet, in the (cleared) address lists `inputs` and `rows`.
    pub(crate) fn new(inputs: &'a mut Vec<usize>, rows: &'a mut Vec<usize>) -> Self {
        inputs.clear();
        rows.clear();
        BlockArgs {
            inputs,
            rows,
            complete: true,
            _blocks: PhantomData,
        }
    }

    /// The block of the next input: its first [`BLOCK`] values.
    pub(crate) fn input(&mut self, block: &'a [f64]) {
        self.complete &= block.len() >= BLOCK;
        self.inputs.push(block.as_ptr() as usize);
    }

    /// The next row (guard operands, then outputs): its first [`BLOCK`]
    /// values are written.
    pub(crate) fn row(&mut self, row: &'a mut [f64]) {
        self.complete &= row.len() >= BLOCK;
        self.rows.push(row.as_mut_ptr() as usize);
    }
}

/// A fresh JIT module for the host. Kernels (`fast_code`) get Cranelift's
/// optimisations and backtracking register allocator; whole programs, whose
/// compile time matters more than the last percent of speed, the
/// single-pass allocator.
fn module(fast_code: bool) -> Option<JITModule> {
    let mut flags = settings::builder();
    flags.set("opt_level", "speed").ok()?;
    let allocator = if fast_code {
        "backtracking"
    } else {
        "single_pass"
    };
    flags.set("regalloc_algorithm", allocator).ok()?;
    flags.set("use_colocated_libcalls", "false").ok()?;
    flags.set("is_pic", "false").ok()?;
    // The generated code is checked by the tests against the interpreter;
    // the IR verifier would add a quarter to the compile time.
    flags.set("enable_verifier", "false").ok()?;
    let isa = cranelift_native::builder()
        .ok()?
        .finish(settings::Flags::new(flags))
        .ok()?;
    Some(JITModule::new(JITBuilder::with_isa(
        isa,
        default_libcall_names(),
    )))
}

/// Whether native code calls out for this instruction (a primitive other
/// than the arithmetic, `sqrt`, `abs` and `select`). A block kernel makes
/// such a call in a loop of its own over the block ([`Piece::Call`]):
/// every machine register holding a value is caller-saved, so a call per
/// element inside the vector loop would spill them all each time.
fn calls(ins: &Ins) -> bool {
    match *ins {
        Ins::Unary { prim, .. } => !matches!(prim, Prim::Sqrt | Prim::Abs),
        Ins::Ternary {
            prim: Prim::Select, ..
        } => false,
        Ins::Binary { .. } | Ins::Ternary { .. } | Ins::Custom { .. } => true,
        _ => false,
    }
}

/// `sin x` and `cos x` from one call: the values of [`Prim::Sin`] and
/// [`Prim::Cos`], which the compiler computes with one `sincos` (about
/// 40% less than the two calls). Returned in two floating-point registers
/// under the C calling convention of Unix hosts, as Cranelift returns two
/// `f64` results ([`SIN_COS`]).
#[repr(C)]
struct SinCos {
    sin: f64,
    cos: f64,
}

extern "C" fn sin_cos(x: f64) -> SinCos {
    SinCos {
        sin: Prim::Sin.value(&[x], 0),
        cos: Prim::Cos.value(&[x], 0),
    }
}

/// The `sin`/`cos` pairs a function has computed, by their operand's key
/// ([`sin_cos_pairs`]).
type SinCosPairs = HashMap<(u32, u32), (Value, Value)>;

/// Whether whole programs compute a `sin` and a `cos` of one value with
/// one call ([`sin_cos`]): only on the calling conventions known to return
/// a `#[repr(C)]` pair of `f64` in two floating-point registers, as
/// Cranelift returns two results: x86-64 System V (xmm0, xmm1) and the
/// AArch64 procedure call standard (d0, d1, a homogeneous floating-point
/// aggregate), off Windows. Elsewhere (Windows x64 returns the pair
/// through memory, as does s390x) the two values are two calls.
const SIN_COS: bool = cfg!(all(
    not(windows),
    any(target_arch = "x86_64", target_arch = "aarch64")
));

/// For each instruction of `ins`: for a `sin` or `cos` of a value whose
/// `cos` or `sin` the same instructions also take, the value as (register,
/// how often it was written before), the key under which [`Gen`] keeps the
/// pair from one [`sin_cos`] call.
fn sin_cos_pairs(ins: &[Ins], n_regs: usize) -> Vec<Option<(u32, u32)>> {
    let mut writes = vec![0u32; n_regs];
    let mut keys = vec![None; ins.len()];
    let mut taken: HashMap<(u32, u32), u8> = HashMap::new();
    for (j, i) in ins.iter().enumerate() {
        if let Ins::Unary {
            a,
            prim: prim @ (Prim::Sin | Prim::Cos),
            ..
        } = *i
        {
            let key = (a, writes[a as usize]);
            *taken.entry(key).or_default() |= if prim == Prim::Sin { 1 } else { 2 };
            keys[j] = Some(key);
        }
        writes[destination(i) as usize] += 1;
    }
    for k in &mut keys {
        if k.is_some_and(|key| taken.get(&key) != Some(&3)) {
            *k = None;
        }
    }
    keys
}

/// The registers an instruction reads, and how many.
fn operands(ins: &Ins) -> ([u32; 3], usize) {
    match *ins {
        Ins::Input { .. } | Ins::Custom { .. } => ([0; 3], 0),
        Ins::Neg { a, .. }
        | Ins::AddK { a, .. }
        | Ins::KAdd { a, .. }
        | Ins::SubK { a, .. }
        | Ins::KSub { a, .. }
        | Ins::MulK { a, .. }
        | Ins::KMul { a, .. }
        | Ins::DivK { a, .. }
        | Ins::KDiv { a, .. }
        | Ins::Unary { a, .. } => ([a, 0, 0], 1),
        Ins::Add { a, b, .. }
        | Ins::Sub { a, b, .. }
        | Ins::Mul { a, b, .. }
        | Ins::Div { a, b, .. }
        | Ins::Binary { a, b, .. } => ([a, b, 0], 2),
        Ins::MulAdd { a, b, c, .. }
        | Ins::AddMul { a, b, c, .. }
        | Ins::MulSub { a, b, c, .. }
        | Ins::SubMul { a, b, c, .. }
        | Ins::Ternary { a, b, c, .. } => ([a, b, c], 3),
    }
}

/// The register an instruction writes.
fn destination(ins: &Ins) -> u32 {
    match *ins {
        Ins::Input { dst, .. }
        | Ins::Custom { dst, .. }
        | Ins::Neg { dst, .. }
        | Ins::AddK { dst, .. }
        | Ins::KAdd { dst, .. }
        | Ins::SubK { dst, .. }
        | Ins::KSub { dst, .. }
        | Ins::MulK { dst, .. }
        | Ins::KMul { dst, .. }
        | Ins::DivK { dst, .. }
        | Ins::KDiv { dst, .. }
        | Ins::Unary { dst, .. }
        | Ins::Add { dst, .. }
        | Ins::Sub { dst, .. }
        | Ins::Mul { dst, .. }
        | Ins::Div { dst, .. }
        | Ins::Binary { dst, .. }
        | Ins::MulAdd { dst, .. }
        | Ins::AddMul { dst, .. }
        | Ins::MulSub { dst, .. }
        | Ins::SubMul { dst, .. }
        | Ins::Ternary { dst, .. } => dst,
    }
}

/// Where an instruction's inputs come from.
#[derive(Clone, Copy)]
enum Inputs<'a> {
    /// `x[k]` for `k < n` (a whole program).
    Scalar { n: usize },
    /// Lanes at byte offset `off` of the block of input `k`, whose address
    /// is `rows[k]` (a block kernel).
    Rows { off: Value, rows: &'a [Value] },
}

/// The translation of register instructions into one Cranelift function.
struct Gen<'a, 'f> {
    b: &'a mut FunctionBuilder<'f>,
    /// `F64`, or `F64X2` for a block kernel.
    ty: Type,
    /// The current SSA value of each register in this function.
    vals: Vec<Option<Value>>,
    /// The constant each constant register holds.
    consts: &'a [Option<f64>],
    /// The register file (whole programs; loads of registers that this
    /// function has not written).
    r: Value,
    /// Whether `r` is the register file (a whole program) or the outputs
    /// (a kernel, where every register is written before it is read).
    register_file: bool,
    x: Value,
    inputs: Inputs<'a>,
    /// The signature of [`Prim::native_value`].
    sig: SigRef,
    ptr: Type,
    /// A block kernel with calls: the address of this iteration's lanes
    /// in `r` and the first scratch row, where a register written in an
    /// earlier piece of the kernel is read from.
    scratch: Option<(Value, usize)>,
    /// The signature of [`sin_cos`] and the pairs it has computed, by
    /// their operand's key ([`sin_cos_pairs`]); whole programs only.
    sin_cos: Option<(SigRef, SinCosPairs)>,
}

/// Memory flags of scalar accesses: they cannot trap (every offset is
/// checked against the slices' lengths before the call) and are aligned
/// (`f64` slices are 8-byte aligned).
fn flags() -> MemFlagsData {
    MemFlagsData::trusted()
}

/// Memory flags of two-lane accesses: they cannot trap, but are not
/// claimed aligned, because a block of `[f64; BLOCK]` is only 8-byte aligned
/// (an access claimed aligned may become an SSE instruction that faults
/// on a 16-byte boundary it does not have).
fn vector_flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

impl Gen<'_, '_> {
    fn konst(&mut self, k: f64) -> Value {
        let c = self.b.ins().f64const(k);
        if self.ty == F64 {
            c
        } else {
            self.b.ins().splat(self.ty, c)
        }
    }

    fn get(&mut self, reg: u32) -> Value {
        let i = reg as usize;
        if let Some(v) = self.vals[i] {
            return v;
        }
        let v = match self.consts.get(i).copied().flatten() {
            Some(c) => self.konst(c),
            None if self.register_file => {
                self.b.ins().load(self.ty, flags(), self.r, (i * 8) as i32)
            }
            None if self.scratch.is_some() => {
                let (base, row) = self.scratch.unwrap_or((self.r, 0));
                let at = ((row + i) * BLOCK * 8) as i32;
                self.b.ins().load(self.ty, vector_flags(), base, at)
            }
            // Not reached: register code writes each register before it
            // reads it.
            None => self.konst(f64::NAN),
        };
        self.vals[i] = Some(v);
        v
    }

    /// Stores register `reg`'s current value into the register file.
    fn store(&mut self, reg: u32) {
        if self.consts.get(reg as usize).copied().flatten().is_some() {
            return;
        }
        let v = self.get(reg);
        self.b
            .ins()
            .store(flags(), v, self.r, (reg as usize * 8) as i32);
    }

    fn input(&mut self, k: u32) -> Value {
        let k = k as usize;
        match self.inputs {
            Inputs::Scalar { n } if k < n => {
                self.b.ins().load(F64, flags(), self.x, (k * 8) as i32)
            }
            Inputs::Rows { off, rows } if k < rows.len() => {
                let p = self.b.ins().iadd(rows[k], off);
                self.b.ins().load(self.ty, vector_flags(), p, 0)
            }
            _ => self.konst(f64::NAN),
        }
    }

    /// A call of `prim`'s value on each lane.
    fn call(&mut self, prim: Prim, param: i32, args: &[Value]) -> Value {
        let f = self
            .b
            .ins()
            .iconst(self.ptr, prim.native_value() as usize as i64);
        let p = self.b.ins().iconst(I32, i64::from(param));
        let zero = self.b.ins().f64const(0.0);
        let lanes = if self.ty == F64 { 1 } else { 2 };
        let mut out = None;
        for l in 0..lanes {
            let mut a = [zero; 3];
            for (slot, &v) in a.iter_mut().zip(args) {
                *slot = if lanes == 1 {
                    v
                } else {
                    self.b.ins().extractlane(v, l as u8)
                };
            }
            let call = self
                .b
                .ins()
                .call_indirect(self.sig, f, &[a[0], a[1], a[2], p]);
            let y = self.b.inst_results(call)[0];
            out = Some(match out {
                None if lanes == 1 => y,
                None => self.b.ins().scalar_to_vector(self.ty, y),
                Some(v) => self.b.ins().insertlane(v, y, l as u8),
            });
        }
        out.unwrap_or(zero)
    }

    /// `sin` (or `cos`) of register `a`, whose value has the key `key`:
    /// from the pair of one [`sin_cos`] call, made at the first of the two.
    fn sin_or_cos(&mut self, key: (u32, u32), a: u32, prim: Prim) -> Option<Value> {
        let (sig, _) = self.sin_cos.as_ref()?;
        let sig = *sig;
        let pair = match self.sin_cos.as_ref().and_then(|(_, m)| m.get(&key)) {
            Some(&pair) => pair,
            None => {
                let x = self.get(a);
                let f = self.b.ins().iconst(
                    self.ptr,
                    sin_cos as extern "C" fn(f64) -> SinCos as usize as i64,
                );
                let call = self.b.ins().call_indirect(sig, f, &[x]);
                let r = self.b.inst_results(call);
                let pair = (r[0], r[1]);
                if let Some((_, m)) = self.sin_cos.as_mut() {
                    m.insert(key, pair);
                }
                pair
            }
        };
        Some(if prim == Prim::Sin { pair.0 } else { pair.1 })
    }

    /// `select(c, a, b)`: `a` where `c > 0`, else `b` (an ordered
    /// comparison, false for NaN, as [`Prim::Select`]'s value).
    fn select(&mut self, c: Value, a: Value, b: Value) -> Value {
        let zero = self.konst(0.0);
        let positive = self.b.ins().fcmp(FloatCC::GreaterThan, c, zero);
        if self.ty == F64 {
            self.b.ins().select(positive, a, b)
        } else {
            // The lane mask (all ones where c > 0) as the bits of `ty`.
            let little = MemFlagsData::new().with_endianness(Endianness::Little);
            let mask = self.b.ins().bitcast(self.ty, little, positive);
            self.b.ins().bitselect(mask, a, b)
        }
    }

    /// Translates one instruction; `false` for a user rule.
    fn ins(&mut self, ins: &Ins) -> bool {
        let (o, n) = operands(ins);
        let mut v = [None; 3];
        for j in 0..n {
            v[j] = Some(self.get(o[j]));
        }
        let [a, b, c] = v.map(|x| x.unwrap_or(self.r));
        let y = match *ins {
            Ins::Input { k, .. } => self.input(k),
            Ins::Custom { .. } => return false,
            Ins::Add { .. } => self.b.ins().fadd(a, b),
            Ins::Sub { .. } => self.b.ins().fsub(a, b),
            Ins::Mul { .. } => self.b.ins().fmul(a, b),
            Ins::Div { .. } => self.b.ins().fdiv(a, b),
            Ins::Neg { .. } => self.b.ins().fneg(a),
            Ins::AddK { k, .. } => {
                let k = self.konst(k);
                self.b.ins().fadd(a, k)
            }
            Ins::KAdd { k, .. } => {
                let k = self.konst(k);
                self.b.ins().fadd(k, a)
            }
            Ins::SubK { k, .. } => {
                let k = self.konst(k);
                self.b.ins().fsub(a, k)
            }
            Ins::KSub { k, .. } => {
                let k = self.konst(k);
                self.b.ins().fsub(k, a)
            }
            Ins::MulK { k, .. } => {
                let k = self.konst(k);
                self.b.ins().fmul(a, k)
            }
            Ins::KMul { k, .. } => {
                let k = self.konst(k);
                self.b.ins().fmul(k, a)
            }
            Ins::DivK { k, .. } => {
                let k = self.konst(k);
                self.b.ins().fdiv(a, k)
            }
            Ins::KDiv { k, .. } => {
                let k = self.konst(k);
                self.b.ins().fdiv(k, a)
            }
            Ins::MulAdd { .. } => {
                let p = self.b.ins().fmul(a, b);
                self.b.ins().fadd(p, c)
            }
            Ins::AddMul { .. } => {
                let p = self.b.ins().fmul(a, b);
                self.b.ins().fadd(c, p)
            }
            Ins::MulSub { .. } => {
                let p = self.b.ins().fmul(a, b);
                self.b.ins().fsub(p, c)
            }
            Ins::SubMul { .. } => {
                let p = self.b.ins().fmul(a, b);
                self.b.ins().fsub(c, p)
            }
            Ins::Unary { prim, param, .. } => match prim {
                Prim::Sqrt => self.b.ins().sqrt(a),
                Prim::Abs => self.b.ins().fabs(a),
                _ => self.call(prim, param, &[a]),
            },
            Ins::Binary { prim, param, .. } => self.call(prim, param, &[a, b]),
            Ins::Ternary {
                prim: Prim::Select, ..
            } => self.select(a, b, c),
            Ins::Ternary { prim, .. } => self.call(prim, 0, &[a, b, c]),
        };
        self.vals[destination(ins) as usize] = Some(y);
        true
    }
}

/// How far ahead (in instructions) a value is kept in a machine register
/// for its next read; values read later go through the register file.
const HORIZON: usize = 48;

/// For each instruction of `ins`, the position of the next read of the
/// register it writes and of each register it reads, before that register
/// is written again (`usize::MAX`: not read again in `ins`).
#[allow(clippy::type_complexity)]
fn next_reads(ins: &[Ins], n_regs: usize) -> (Vec<usize>, Vec<[usize; 3]>) {
    let mut next = vec![usize::MAX; n_regs];
    let mut next_dst = vec![usize::MAX; ins.len()];
    let mut next_op = vec![[usize::MAX; 3]; ins.len()];
    for (j, i) in ins.iter().enumerate().rev() {
        let d = destination(i) as usize;
        next_dst[j] = next[d];
        next[d] = usize::MAX;
        let (o, n) = operands(i);
        for k in 0..n {
            next_op[j][k] = next[o[k] as usize];
        }
        for &a in &o[..n] {
            next[a as usize] = j;
        }
    }
    (next_dst, next_op)
}

/// The constant held by each register of `rc` (`None` for the others).
fn constant_registers(rc: &RegisterCode) -> Vec<Option<f64>> {
    let mut consts = vec![None; rc.n_regs];
    for &(i, c) in &rc.consts {
        if let Some(slot) = consts.get_mut(i as usize) {
            *slot = Some(c);
        }
    }
    consts
}

/// Declares, translates and defines one function of signature [`Entry`];
/// `body` emits its code and returns `false` to give up.
fn define(
    module: &mut JITModule,
    fbc: &mut FunctionBuilderContext,
    name: &str,
    body: impl FnOnce(&mut FunctionBuilder<'_>, Value, Value, SigRef, Type) -> bool,
) -> Option<FuncId> {
    let config = module.target_config();
    let ptr = config.pointer_type();
    let mut ctx = module.make_context();
    ctx.func.signature.params.push(AbiParam::new(ptr));
    ctx.func.signature.params.push(AbiParam::new(ptr));
    let mut prim_sig = module.make_signature();
    for _ in 0..3 {
        prim_sig.params.push(AbiParam::new(F64));
    }
    prim_sig.params.push(AbiParam::new(I32));
    prim_sig.returns.push(AbiParam::new(F64));
    let ok = {
        let mut b = FunctionBuilder::new(&mut ctx.func, fbc);
        let sig = b.import_signature(prim_sig);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        b.seal_block(entry);
        let (r, x) = (b.block_params(entry)[0], b.block_params(entry)[1]);
        let ok = body(&mut b, r, x, sig, ptr);
        // A half-built function is dropped unfinished: it is never
        // defined.
        if ok {
            b.finalize(config);
        }
        ok
    };
    if !ok {
        return None;
    }
    let id = module
        .declare_function(name, Linkage::Local, &ctx.func.signature)
        .ok()?;
    module.define_function(id, &mut ctx).ok()?;
    module.clear_context(&mut ctx);
    Some(id)
}

/// Finishes the module and takes the entry points of `ids`.
fn finish(mut module: JITModule, ids: &[FuncId]) -> Option<(JITModule, Vec<Entry>)> {
    module.finalize_definitions().ok()?;
    let entries = ids
        .iter()
        .map(|&id| {
            let p = module.get_finalized_function(id);
            // SAFETY: `p` is the start of a function this module compiled
            // and has just made executable, declared in `define` with two
            // pointer parameters and no results under the host's default
            // calling convention, which is `extern "C"` on every host
            // Cranelift supports; so it has the type `Entry`.
            unsafe { std::mem::transmute::<*const u8, Entry>(p) }
        })
        .collect();
    Some((module, entries))
}

/// Compiles a whole program's register code, or `None` if it has user
/// rules or Cranelift refuses it (the caller keeps the register code).
pub(crate) fn compile_program(p: &Program, rc: &RegisterCode) -> Option<NativeCode> {
    compile_chunked(p, rc, CHUNK)
}

/// [`compile_program`] with at most `chunk` (≥ 1) instructions per
/// function.
pub(crate) fn compile_chunked(p: &Program, rc: &RegisterCode, chunk: usize) -> Option<NativeCode> {
    let size = chunk.max(1);
    if p.defect.is_some() || !rc.customs.is_empty() {
        return None;
    }
    let n_regs = rc.n_regs;
    let guard_base = n_regs;
    let out_base = guard_base + 2 * rc.guard_regs.len();
    let r_len = out_base + rc.outputs.len();
    if r_len.max(p.n_inputs) > (i32::MAX / 8) as usize {
        return None;
    }
    let consts = constant_registers(rc);
    let code = &rc.instructions();
    let n_chunks = code.len().div_ceil(size).max(1);
    let chunk = |c: usize| &code[(c * size).min(code.len())..((c + 1) * size).min(code.len())];

    // Instructions whose result must be stored: the last write of a
    // register in its chunk, where a later chunk reads the register. The
    // store follows the write at once, so that no value stays alive to
    // the end of its function only to be stored.
    let mut live = vec![false; n_regs];
    for &i in rc
        .outputs
        .iter()
        .chain(rc.guard_regs.iter().flat_map(|(a, b)| [a, b]))
    {
        live[i as usize] = true;
    }
    let mut store_after = vec![false; code.len()];
    let mut seen = vec![false; n_regs];
    for c in (0..n_chunks).rev() {
        let start = (c * size).min(code.len());
        let ins = chunk(c);
        for (j, i) in ins.iter().enumerate().rev() {
            let d = destination(i) as usize;
            if !seen[d] {
                seen[d] = true;
                store_after[start + j] = live[d];
            }
        }
        for i in ins {
            seen[destination(i) as usize] = false;
        }
        for i in ins.iter().rev() {
            live[destination(i) as usize] = false;
            let (o, n) = operands(i);
            for &a in &o[..n] {
                live[a as usize] = true;
            }
        }
    }

    // A short program is compiled with the better register allocator (its
    // compile time is small either way); a long one with the linear one.
    let mut module = module(code.len() <= SMALL_PROGRAM)?;
    let call_conv = module.target_config().default_call_conv;
    let mut fbc = FunctionBuilderContext::new();
    let mut ids = Vec::with_capacity(n_chunks);
    for c in 0..n_chunks {
        let start = (c * size).min(code.len());
        let last = c + 1 == n_chunks;
        let id = define(
            &mut module,
            &mut fbc,
            &format!("chunk{c}"),
            |b, r, x, sig, ptr| {
                let mut g = Gen {
                    b,
                    ty: F64,
                    vals: vec![None; n_regs],
                    consts: &consts,
                    r,
                    register_file: true,
                    x,
                    inputs: Inputs::Scalar { n: p.n_inputs },
                    sig,
                    ptr,
                    scratch: None,
                    sin_cos: None,
                };
                let ins = chunk(c);
                let pairs = if SIN_COS {
                    sin_cos_pairs(ins, n_regs)
                } else {
                    vec![None; ins.len()]
                };
                if pairs.iter().any(Option::is_some) {
                    let mut sc = Signature::new(call_conv);
                    sc.params.push(AbiParam::new(F64));
                    sc.returns.push(AbiParam::new(F64));
                    sc.returns.push(AbiParam::new(F64));
                    let sc = g.b.import_signature(sc);
                    g.sin_cos = Some((sc, HashMap::new()));
                }
                let (next_dst, next_op) = next_reads(ins, n_regs);
                // Whether a register's current value is in the register file:
                // yes for values from earlier functions, no for a value written
                // here until it is stored.
                let mut in_memory = vec![true; n_regs];
                // The last function keeps the final values it computes near
                // its end in machine registers for the output and guard
                // stores, instead of storing them to their registers and
                // loading them back (registers nothing reads after the run).
                let mut for_end = vec![false; n_regs];
                for (j, i) in ins.iter().enumerate() {
                    let paired = match (pairs[j], *i) {
                        (Some(key), Ins::Unary { dst, a, prim, .. }) => g
                            .sin_or_cos(key, a, prim)
                            .map(|y| g.vals[dst as usize] = Some(y)),
                        _ => None,
                    };
                    if paired.is_none() && !g.ins(i) {
                        return false;
                    }
                    let d = destination(i);
                    in_memory[d as usize] = false;
                    for_end[d as usize] = false;
                    if store_after[start + j] {
                        if last && j + HORIZON >= ins.len() {
                            for_end[d as usize] = true;
                        } else {
                            g.store(d);
                            in_memory[d as usize] = true;
                        }
                    }
                    // Values not read again soon leave the machine registers:
                    // stored if a later instruction of this function reads
                    // them, and loaded again there. This bounds the number of
                    // values alive at once, so register allocation stays
                    // linear in the function's length.
                    let (o, n) = operands(i);
                    let later = o[..n]
                        .iter()
                        .zip(next_op[j])
                        .filter(|&(&a, _)| a != d)
                        .map(|(&a, t)| (a, t))
                        .chain([(d, next_dst[j])]);
                    for (a, t) in later {
                        if t <= j + HORIZON || (t == usize::MAX && for_end[a as usize]) {
                            continue;
                        }
                        if t != usize::MAX && !in_memory[a as usize] {
                            g.store(a);
                            in_memory[a as usize] = true;
                        }
                        g.vals[a as usize] = None;
                    }
                }
                if last {
                    let pairs = rc.guard_regs.iter().flat_map(|&(a, b)| [a, b]);
                    for (k, reg) in pairs.enumerate() {
                        let v = g.get(reg);
                        g.b.ins()
                            .store(flags(), v, r, ((guard_base + k) * 8) as i32);
                    }
                    // Outputs in pairs, one 16-byte store each: the caller
                    // copies them out with 16-byte loads, which a pair of
                    // 8-byte stores could not forward (a stall of about 10
                    // cycles, on a `Derivatives<U3>` call a third of the
                    // time outside libm).
                    for (k, pair) in rc.outputs.chunks(2).enumerate() {
                        let at = ((out_base + 2 * k) * 8) as i32;
                        let v = g.get(pair[0]);
                        if let Some(&second) = pair.get(1) {
                            let w = g.get(second);
                            let both = g.b.ins().scalar_to_vector(F64X2, v);
                            let both = g.b.ins().insertlane(both, w, 1);
                            g.b.ins().store(vector_flags(), both, r, at);
                        } else {
                            g.b.ins().store(flags(), v, r, at);
                        }
                    }
                }
                g.b.ins().return_(&[]);
                true
            },
        )?;
        ids.push(id);
    }
    let (module, entries) = finish(module, &ids)?;
    Some(NativeCode {
        entries,
        x_len: p.n_inputs,
        r_len,
        out_rows: 0,
        guard_base,
        out_base,
        n_instructions: code.len(),
        module: Some(Mutex::new(module)),
    })
}

/// A run of a block kernel ([`compile_block`]).
#[derive(Debug, PartialEq)]
enum Piece {
    /// Instructions without calls, as one loop over the block, two
    /// elements per iteration; then the registers listed are stored to
    /// their scratch rows for the pieces after it.
    Vector(std::ops::Range<usize>, Vec<u32>),
    /// One instruction that calls out, as a loop of one element per
    /// iteration that reads its operands from their scratch rows and
    /// writes its result to its own.
    Call(usize),
}

/// The pieces of a body's register code: maximal runs of instructions
/// without calls, each call on its own, and always a last
/// [`Piece::Vector`] (possibly empty), which stores the outputs. A vector
/// piece stores to scratch each register it writes that a later piece
/// reads before writing it again, or that is an output or guard operand
/// and not written again.
fn pieces(rc: &RegisterCode, code: &[Ins]) -> Vec<Piece> {
    // For each instruction, the last read of the value it writes (before
    // its register is written again; `None`: never read).
    let mut last_read: Vec<Option<usize>> = vec![None; code.len()];
    let mut writer = vec![usize::MAX; rc.n_regs];
    let mut last_write = vec![usize::MAX; rc.n_regs];
    for (j, i) in code.iter().enumerate() {
        let (o, n) = operands(i);
        for &a in &o[..n] {
            if let Some(slot) = last_read.get_mut(writer[a as usize]) {
                *slot = Some(j);
            }
        }
        let d = destination(i) as usize;
        writer[d] = j;
        last_write[d] = j;
    }
    let mut is_row = vec![false; rc.n_regs];
    let pairs = rc.guard_regs.iter().flat_map(|&(a, b)| [a, b]);
    for r in pairs.chain(rc.outputs.iter().copied()) {
        if let Some(slot) = is_row.get_mut(r as usize) {
            *slot = true;
        }
    }
    let mut written = vec![false; rc.n_regs];
    let mut vector = |range: std::ops::Range<usize>| {
        // Each register's last write in the range, latest first.
        let mut stores: Vec<u32> = Vec::new();
        for j in range.clone().rev() {
            let d = destination(&code[j]);
            let di = d as usize;
            if std::mem::replace(&mut written[di], true) {
                continue;
            }
            let read_later = last_read[j].is_some_and(|k| k >= range.end);
            if read_later || (is_row[di] && last_write[di] == j) {
                stores.push(d);
            }
        }
        for i in &code[range.clone()] {
            written[destination(i) as usize] = false;
        }
        Piece::Vector(range, stores)
    };
    let mut out = Vec::new();
    let mut start = 0;
    for (j, i) in code.iter().enumerate() {
        if calls(i) {
            if start < j {
                out.push(vector(start..j));
            }
            out.push(Piece::Call(j));
            start = j + 1;
        }
    }
    // The last piece stores the outputs and guard operands to their own
    // rows, nothing to scratch.
    out.push(Piece::Vector(start..code.len(), Vec::new()));
    out
}

/// Compiles a map body's register code into a block kernel: the body over
/// [`BLOCK`] elements, two per iteration. A body that calls out (the
/// transcendental primitives) runs as several loops over the block
/// ([`pieces`]): the arithmetic between calls two elements at a time, each
/// call one element at a time, and the values that cross from one loop to
/// the next through a scratch area. The kernel is given the address of
/// each input's block and of each output row's ([`NativeCode::run_block`]),
/// so it reads and writes the caller's buffers in place. `None` for user
/// rules, bodies longer than the limit, or code Cranelift refuses.
pub(crate) fn compile_block(p: &Program, rc: &RegisterCode) -> Option<NativeCode> {
    if p.defect.is_some() || !rc.customs.is_empty() || rc.len > MAX_BODY {
        return None;
    }
    let code = rc.instructions();
    const W: usize = 2;
    let guard_base = 0;
    let out_base = 2 * rc.guard_regs.len();
    let n_rows = out_base + rc.outputs.len();
    if (n_rows + 1).max(p.n_inputs) > (i32::MAX / 8) as usize
        || rc.n_regs * BLOCK > (i32::MAX / 8) as usize
    {
        return None;
    }
    let pieces = pieces(rc, &code);
    let has_calls = pieces.len() > 1;
    // One scratch row per register, for a body with calls.
    let scratch_len = if has_calls { rc.n_regs * BLOCK } else { 0 };
    let consts = constant_registers(rc);
    let pairs = rc.guard_regs.iter().flat_map(|&(a, b)| [a, b]);
    let rows: Vec<u32> = pairs.chain(rc.outputs.iter().copied()).collect();
    let at = |reg: u32| (reg as usize * BLOCK * 8) as i32;
    let mut module = module(true)?;
    let mut fbc = FunctionBuilderContext::new();
    let id = define(&mut module, &mut fbc, "block", |b, r, x, sig, ptr| {
        // The addresses, loaded once: `x` holds the inputs', `r` the
        // rows' and then the scratch area's.
        let load_ptr = |b: &mut FunctionBuilder<'_>, base: Value, k: usize| {
            b.ins().load(ptr, flags(), base, (k * 8) as i32)
        };
        let in_rows: Vec<Value> = (0..p.n_inputs).map(|k| load_ptr(b, x, k)).collect();
        let out_rows: Vec<Value> = (0..n_rows).map(|k| load_ptr(b, r, k)).collect();
        let scratch = load_ptr(b, r, n_rows);
        for (k, piece) in pieces.iter().enumerate() {
            // A loop over the block: `off` is the byte offset of its lanes.
            let (width, ty) = match piece {
                Piece::Vector(..) => (W, F64X2),
                Piece::Call(_) => (1, F64),
            };
            let body = b.create_block();
            let exit = b.create_block();
            b.append_block_param(body, I64);
            let zero = b.ins().iconst(I64, 0);
            b.ins().jump(body, &[zero.into()]);
            b.switch_to_block(body);
            let off = b.block_params(body)[0];
            let base = if has_calls {
                b.ins().iadd(scratch, off)
            } else {
                scratch
            };
            let mut g = Gen {
                b: &mut *b,
                ty,
                vals: vec![None; rc.n_regs],
                consts: &consts,
                r,
                register_file: false,
                x,
                inputs: Inputs::Rows {
                    off,
                    rows: &in_rows,
                },
                sig,
                ptr,
                scratch: has_calls.then_some((base, 0)),
                sin_cos: None,
            };
            match piece {
                Piece::Vector(range, stores) => {
                    for i in &code[range.clone()] {
                        if !g.ins(i) {
                            return false;
                        }
                    }
                    for &reg in stores {
                        let v = g.get(reg);
                        g.b.ins().store(vector_flags(), v, base, at(reg));
                    }
                    if k + 1 == pieces.len() {
                        for (&reg, &row) in rows.iter().zip(&out_rows) {
                            let v = g.get(reg);
                            let to = g.b.ins().iadd(row, off);
                            g.b.ins().store(vector_flags(), v, to, 0);
                        }
                    }
                }
                Piece::Call(j) => {
                    let i = &code[*j];
                    if !g.ins(i) {
                        return false;
                    }
                    let d = destination(i);
                    let v = g.get(d);
                    g.b.ins().store(flags(), v, base, at(d));
                }
            }
            let next = b.ins().iadd_imm_u(off, (width * 8) as i64);
            let more = b
                .ins()
                .icmp_imm_u(IntCC::UnsignedLessThan, next, (BLOCK * 8) as i64);
            b.ins().brif(more, body, &[next.into()], exit, &[]);
            b.seal_block(body);
            b.switch_to_block(exit);
            b.seal_block(exit);
        }
        b.ins().return_(&[]);
        true
    })?;
    let (module, entries) = finish(module, &[id])?;
    Some(NativeCode {
        entries,
        x_len: p.n_inputs,
        r_len: scratch_len,
        out_rows: n_rows,
        guard_base,
        out_base,
        n_instructions: rc.len,
        module: Some(Mutex::new(module)),
    })
}
