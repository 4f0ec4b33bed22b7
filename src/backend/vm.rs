//! The register VM: runs of one kind executed by loops specialised to
//! their kind, strided runs with no code to read, and the same loops over
//! [`LANES`] (or a map block's) points at once.

use super::code::{unpack, width, Ins, RegisterCode, STRIDED};

/// The registers of [`Executable::eval_f64`](crate::Executable::eval_f64): keep one per program and
/// evaluation allocates nothing once it has grown to the program's needs.
#[derive(Debug, Clone, Default)]
pub struct Registers {
    pub(crate) regs: Vec<f64>,
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

/// A register's contents: one `f64`, or one per lane of
/// [`Executable::eval_f64_lanes`](crate::Executable::eval_f64_lanes). Each instruction's arithmetic is written
/// once, in [`step`], over this trait.
pub(crate) trait Lane: Copy {
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

/// Runs the whole register code: each run by [`run_of_kind`].
#[inline(always)]
pub(crate) fn run_all<V: Lane>(
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
pub(crate) fn run_of_kind<V: Lane>(
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
pub(crate) fn strided_run<V: Lane>(
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
pub(crate) const fn registers_of(k: u8) -> usize {
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
pub(crate) fn unit_stride_f64(k: u8, count: usize, base: &[u32], r: &mut [f64]) -> bool {
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
pub(crate) fn unit_run<const W: usize, const NR: usize>(
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
pub(crate) fn unit_stride_one<V: Lane>(k: u8, count: usize, base: &[u32], r: &mut [V]) -> bool {
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
pub(crate) fn unit_one<V: Lane, const W: usize, const NR: usize>(
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

/// Runs one instruction: the one definition of what each instruction
/// computes, for one value or for lanes.
#[inline(always)]
pub(crate) fn step<V: Lane>(
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

/// How many inputs [`Executable::eval_f64_lanes`](crate::Executable::eval_f64_lanes) evaluates at once: four
/// `f64` lanes, one AVX register or two SSE registers per value.
pub(crate) const LANES: usize = 4;

/// Registers of [`Executable::eval_f64_lanes`](crate::Executable::eval_f64_lanes): [`LANES`] values each.
#[derive(Debug, Clone, Default)]
pub(crate) struct LaneRegisters {
    pub(crate) regs: Vec<[f64; LANES]>,
}

#[cfg(test)]
mod tests {
    //! Strided runs against the instructions they stand for: random register
    //! code made of stretches of one kind whose fields step by small
    //! amounts (recurrences at distances 1 to 5 among them, the case the
    //! four-at-a-time path must refuse), run one instruction at a time and
    //! through `encode_runs` + [`run_all`], in `f64` and in lanes.
    use super::*;
    use crate::backend::code::encode_runs;
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
