//! Register code: the instructions of the lowered evaluator ([`Ins`]), and
//! their packed form ([`RegisterCode`]): runs of one kind stored as `u32`
//! words with no tag, strided runs stored once with their steps.

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
pub(crate) type Run = (u8, u32, u32);

/// A program lowered to register code.
#[derive(Debug, Default)]
pub(crate) struct RegisterCode {
    /// The instructions of kind 0 ([`kind`]: calls of other primitives,
    /// user rules), in order; the others are in `packed`.
    /// [`RegisterCode::instructions`] gives them all.
    pub(crate) other: Vec<Ins>,
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
    pub(crate) runs: Vec<Run>,
    /// The instructions of the other kinds (`kind > 0`) as the run
    /// loops read them: their fields as [`width`] `u32` words each, with no
    /// enum tag (the run knows its kind), an immediate as the two halves
    /// of its bits. That is 8–16 bytes per instruction instead of
    /// [`Ins`]'s 24: once a program's code no longer fits in cache, reading
    /// the code bounds the run time, so its size is the speed. (A table of
    /// distinct immediates indexed by one word was tried: data-fitting
    /// programs have thousands of distinct constants, and the table became
    /// a second stream of loads that made them 5–12% slower.)
    pub(crate) packed: Vec<u32>,
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

/// The kind of an instruction: which loop of [`run_of_kind`] runs it.
pub(crate) fn kind(ins: &Ins) -> u8 {
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

impl RegisterCode {
    /// The runs in order: each run's kind, its instructions of kind 0 (in
    /// `other`; empty for the other kinds) and its packed words (empty for
    /// kind 0).
    #[inline(always)]
    pub(crate) fn each_run(&self) -> impl Iterator<Item = (u8, &[Ins], &[u32])> + '_ {
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
pub(crate) const fn width(k: u8) -> usize {
    match k {
        5 | 16 => 2,
        1..=4 => 3,
        _ => 4,
    }
}

/// Appends `ins` to the packed code if its kind is not 0 ([`width`] words;
/// the inverse of [`unpack`]).
pub(crate) fn pack(ins: &Ins, words: &mut Vec<u32>) {
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
pub(crate) fn unpack(k: u8, w: &[u32]) -> Ins {
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

/// How many instructions the strided runs among `runs` stand for.
pub(crate) fn strided_len(runs: &[Run], packed: &[u32]) -> usize {
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
pub(crate) const STRIDED: u8 = 0x20;

/// The shortest stretch of instructions stored as a strided run.
pub(crate) const MIN_STRIDED: usize = 4;

/// Splits `code` into runs of one kind ([`kind`]): the instructions of
/// kind 0 go to `other`, the others are packed ([`pack`]). Within a run,
/// a stretch of at least [`MIN_STRIDED`] instructions whose packed words
/// step by the same amount from one instruction to the next (the same
/// operation over consecutive registers, as the scheduler and the scratch
/// registers make the steps of a loop's elements) is stored once, as a
/// strided run ([`strided_run`]): its words are rebuilt exactly, so it
/// computes what the instructions would, in the same order.
pub(crate) fn encode_runs(code: &[Ins]) -> (Vec<Ins>, Vec<Run>, Vec<u32>) {
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
