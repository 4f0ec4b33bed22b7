//! Shared test support: a random-program generator (proptest strategies
//! for programs, points and cotangents), num-dual forward-mode reference
//! evaluation (an independent implementation to check against), error
//! measures, and a deterministic proptest runner that reports the worst
//! error it saw.
//!
//! Use from an integration test with `mod common;`.

#![allow(dead_code)]

use std::cell::Cell;
use std::fmt;
use std::ops::RangeInclusive;

use num_dual::{Dual2_64, Dual3_64, Dual64, HyperDual64};
use optic_ad::{Builder, Op, Prim, Program, Var};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};

// ---------------------------------------------------------------------------
// Random programs
// ---------------------------------------------------------------------------

/// Magnitude above which a generated value is squashed back (by `tanh` or
/// by a constant scale), so that values and derivatives stay moderate.
pub const LIMIT: f64 = 6.0;

/// The primitive kinds of [`Step`], in the order of [`Step::kind`].
pub const KINDS: [&str; 13] = [
    "add", "sub", "mul", "div", "neg", "sin", "cos", "exp", "ln", "sqrt", "tanh", "powi", "select",
];

/// One generated instruction: which primitive, which safe form of it
/// (`variant`), which operands (picked from the values built so far), and
/// its parameters.
#[derive(Clone, Debug)]
pub struct Step {
    /// Index into [`KINDS`].
    pub kind: u8,
    /// Which safe form of the primitive (0, 1 or 2).
    pub variant: u8,
    /// First operand: one of the most recent values (so programs are deep).
    pub a: Index,
    /// Second operand: any value so far.
    pub b: Index,
    /// Third operand (the condition of `select`): any value so far.
    pub c: Index,
    /// Exponent of `powi`, in −3..=4.
    pub k: i32,
    /// A constant operand, in [−2, 2].
    pub constant: f64,
}

fn step() -> impl Strategy<Value = Step> {
    (
        0u8..KINDS.len() as u8,
        0u8..3,
        any::<Index>(),
        any::<Index>(),
        any::<Index>(),
        -3i32..=4,
        -2.0f64..2.0,
    )
        .prop_map(|(kind, variant, a, b, c, k, constant)| Step {
            kind,
            variant,
            a,
            b,
            c,
            k,
            constant,
        })
}

/// A generated program together with its shape and the recipe it was
/// built from. Its `Debug` form prints the program, for readable proptest
/// failures.
#[derive(Clone)]
pub struct RandomProgram {
    /// The program, built with [`optic_ad::Builder`].
    pub program: Program,
    /// Number of inputs.
    pub n: usize,
    /// Number of outputs.
    pub m: usize,
    /// The steps it was built from.
    pub steps: Vec<Step>,
}

impl fmt::Debug for RandomProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RandomProgram (n = {}, m = {})\n{}",
            self.n, self.m, self.program
        )
    }
}

/// A value being built, with a bound on its magnitude when every input is
/// bounded by the input bound (a heuristic bound, used only to decide when
/// to squash).
#[derive(Clone, Copy)]
struct Val {
    v: Var,
    bound: f64,
}

fn one_plus_square(b: &mut Builder, x: Var) -> Var {
    let one = b.constant(1.0);
    let sq = b.mul(x, x);
    b.add(one, sq)
}

/// Largest `|v|` that `tanh` is applied to. num-dual computes `tanh` as
/// `sinh / cosh` with the quotient rule, whose derivative parts lose about
/// `cosh²(v)` ulps to cancellation (at |v| = 20 they are pure noise, and
/// beyond 710 NaN), so the reference is only accurate for moderate
/// arguments: `cosh²(3) ≈ 100`.
pub const TANH_ARG: f64 = 3.0;

/// `tanh v`, scaling `v` down first if its bound exceeds [`TANH_ARG`].
fn tanh_of(b: &mut Builder, x: Var, bound: f64) -> Var {
    if bound > TANH_ARG {
        let s = b.scale(TANH_ARG / bound, x);
        b.tanh(s)
    } else {
        b.tanh(x)
    }
}

fn two_plus(b: &mut Builder, x: Var) -> Var {
    let two = b.constant(2.0);
    b.add(two, x)
}

/// Emits one step. Every form is defined and smooth (except `select`'s
/// jump and the kink of `max`) on all of ℝ: `ln` and `sqrt` only see
/// `1 + v²`, `1 + eᵛ`, `2 + cos v` or `eᵛ`; `div` only divides by `1 + v²`
/// or `2 + sin v`; `exp` sees `tanh v`, `−v²` or `v` scaled to |v| ≤ 1;
/// negative powers apply to `1 + v²` or `2 + sin v`; `tanh` never sees an
/// argument beyond ±[`TANH_ARG`].
fn emit(b: &mut Builder, pool: &[Val], s: &Step) -> Val {
    let len = pool.len();
    let x = pool[len - 1 - s.a.index(len.min(5))];
    let y = pool[s.b.index(len)];
    let z = pool[s.c.index(len)];
    let (bx, by) = (x.bound, y.bound);
    let (x, y, z) = (x.v, y.v, z.v);
    let cst = s.constant;
    let (v, bound) = match (s.kind, s.variant) {
        // add
        (0, 0) => (b.add(x, y), bx + by),
        (0, 1) => {
            let k = b.constant(cst);
            (b.add(x, k), bx + cst.abs())
        }
        (0, _) => (b.add(x, x), 2.0 * bx),
        // sub
        (1, 0) => (b.sub(x, y), bx + by),
        (1, 1) => {
            let k = b.constant(cst);
            (b.sub(k, x), bx + cst.abs())
        }
        (1, _) => (b.sub(y, x), bx + by),
        // mul
        (2, 0) => (b.mul(x, y), bx * by),
        (2, 1) => (b.scale(cst, x), bx * cst.abs()),
        (2, _) => (b.mul(x, x), bx * bx),
        // div: denominators ≥ 1
        (3, 0) => {
            let d = one_plus_square(b, y);
            (b.div(x, d), bx)
        }
        (3, 1) => {
            let s = b.sin(y);
            let d = two_plus(b, s);
            (b.div(x, d), bx)
        }
        (3, _) => {
            let k = b.constant(cst);
            let d = one_plus_square(b, x);
            (b.div(k, d), cst.abs())
        }
        // neg
        (4, _) => (b.neg(x), bx),
        // sin
        (5, 0) | (5, 2) => (b.sin(x), bx.min(1.0)),
        (5, _) => {
            let p = b.mul(x, y);
            (b.sin(p), 1.0)
        }
        // cos
        (6, _) => (b.cos(x), 1.0),
        // exp
        (7, 0) => {
            let t = tanh_of(b, x, bx);
            (b.exp(t), 1f64.exp())
        }
        (7, 1) => {
            let t = b.scale(1.0 / bx.max(1.0), x);
            (b.exp(t), 1f64.exp())
        }
        (7, _) => {
            let sq = b.mul(x, x);
            let t = b.neg(sq);
            (b.exp(t), 1.0)
        }
        // ln: arguments ≥ 1
        (8, 0) => {
            let a = one_plus_square(b, x);
            (b.ln(a), (1.0 + bx * bx).ln())
        }
        (8, 1) => {
            let e = b.exp(x);
            let one = b.constant(1.0);
            let a = b.add(one, e);
            (b.ln(a), bx + 2f64.ln())
        }
        (8, _) => {
            let c = b.cos(x);
            let a = two_plus(b, c);
            (b.ln(a), 3f64.ln())
        }
        // sqrt: arguments ≥ 1 or eᵛ
        (9, 0) => {
            let a = one_plus_square(b, x);
            (b.sqrt(a), (1.0 + bx * bx).sqrt())
        }
        (9, 1) => {
            let e = b.exp(x);
            (b.sqrt(e), (bx / 2.0).exp())
        }
        (9, _) => {
            let a = one_plus_square(b, x);
            let sq = b.mul(y, y);
            let a = b.add(a, sq);
            (b.sqrt(a), (1.0 + bx * bx + by * by).sqrt())
        }
        // tanh
        (10, 0) => (tanh_of(b, x, bx), 1.0),
        (10, 1) => {
            let p = b.mul(x, y);
            (tanh_of(b, p, bx * by), 1.0)
        }
        (10, _) => {
            let t = tanh_of(b, x, bx);
            (b.mul(t, y), by)
        }
        // powi: k ≥ 0 on anything, k < 0 on a base ≥ 1
        (11, variant) => {
            if s.k >= 0 {
                (b.powi(x, s.k), bx.powi(s.k))
            } else if variant == 2 {
                let sn = b.sin(x);
                let base = two_plus(b, sn);
                (b.powi(base, s.k), 1.0)
            } else {
                let base = one_plus_square(b, x);
                (b.powi(base, s.k), 1.0)
            }
        }
        // select
        (12, 0) => (b.select(z, x, y), bx.max(by)),
        (12, 1) => {
            // max(x, y): continuous.
            let d = b.sub(x, y);
            (b.select(d, x, y), bx.max(by))
        }
        (_, _) => {
            let k = b.constant(cst);
            (b.select(z, x, k), bx.max(cst.abs()))
        }
    };
    if bound > LIMIT {
        if s.variant % 2 == 0 {
            Val {
                v: tanh_of(b, v, bound),
                bound: 1.0,
            }
        } else {
            Val {
                v: b.scale(2.0 / bound, v),
                bound: 2.0,
            }
        }
    } else {
        Val { v, bound }
    }
}

/// Builds a program from a recipe: `n` inputs bounded by `input_bound`
/// (scaled down first if that exceeds [`LIMIT`]), the steps, and `m`
/// outputs: the last value, then values picked by `outs`.
pub fn build(n: usize, m: usize, input_bound: f64, steps: &[Step], outs: &[Index]) -> Program {
    let mut b = Builder::new();
    let mut pool: Vec<Val> = Vec::new();
    for _ in 0..n {
        let x = b.input();
        if input_bound > LIMIT {
            let v = b.scale(2.0 / input_bound, x);
            pool.push(Val { v, bound: 2.0 });
        } else {
            pool.push(Val {
                v: x,
                bound: input_bound,
            });
        }
    }
    for s in steps {
        let v = emit(&mut b, &pool, s);
        pool.push(v);
    }
    let mut outputs = vec![pool[pool.len() - 1].v];
    for i in outs.iter().take(m - 1) {
        outputs.push(pool[i.index(pool.len())].v);
    }
    b.finish(&outputs)
        .expect("generated programs are well formed")
}

/// Random programs ℝⁿ → ℝᵐ with `len` generated steps (each step is one to
/// four instructions), for inputs bounded by `input_bound`.
pub fn program(
    n: usize,
    m: usize,
    len: RangeInclusive<usize>,
    input_bound: f64,
) -> impl Strategy<Value = RandomProgram> {
    assert!(n >= 1 && m >= 1);
    (
        prop::collection::vec(step(), len),
        prop::collection::vec(any::<Index>(), m - 1),
    )
        .prop_map(move |(steps, outs)| RandomProgram {
            program: build(n, m, input_bound, &steps, &outs),
            n,
            m,
            steps,
        })
}

/// Random programs with 1..=4 inputs, 1..=3 outputs and 3..=25 steps, for
/// points in [−2, 2].
pub fn any_program() -> impl Strategy<Value = RandomProgram> {
    (1usize..=4, 1usize..=3).prop_flat_map(|(n, m)| program(n, m, 3..=25, 2.0))
}

/// Random scalar programs (one output) with 1..=4 inputs.
pub fn scalar_program() -> impl Strategy<Value = RandomProgram> {
    (1usize..=4).prop_flat_map(|n| program(n, 1, 3..=25, 2.0))
}

/// Random programs of one variable with one output.
pub fn univariate_program(len: RangeInclusive<usize>) -> impl Strategy<Value = RandomProgram> {
    program(1, 1, len, 2.0)
}

/// A random point in [−2, 2]ⁿ.
pub fn point(n: usize) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(-2.0f64..2.0, n)
}

/// A random cotangent (or direction) in [−2, 2]ᵐ.
pub fn cotangent(m: usize) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(-2.0f64..2.0, m)
}

/// A program with a point and a cotangent of matching sizes.
pub fn program_point_cotangent() -> impl Strategy<Value = (RandomProgram, Vec<f64>, Vec<f64>)> {
    any_program().prop_flat_map(|p| {
        let (n, m) = (p.n, p.m);
        (Just(p), point(n), cotangent(m))
    })
}

/// The sign of every `select` condition of `p` at `x` (`true`: the first
/// branch is taken). Finite-difference checks compare these across their
/// stencil so that no difference straddles a jump or a kink.
pub fn select_branches(p: &Program, x: &[f64]) -> Vec<bool> {
    let mut ws = optic_ad::Workspace::new();
    let mut out = vec![0.0; p.n_outputs()];
    p.eval_with(&mut ws, x, &mut out).expect("evaluation");
    p.ops()
        .filter_map(|op| match op {
            Op::Apply {
                prim: Prim::Select,
                args,
                ..
            } => Some(ws.value(args.as_slice()[0]).expect("value") > 0.0),
            _ => None,
        })
        .collect()
}

/// Whether every `select` of `p` takes the same branch at all `points`.
pub fn same_branches(p: &Program, points: &[Vec<f64>]) -> bool {
    let first = select_branches(p, &points[0]);
    points[1..].iter().all(|x| select_branches(p, x) == first)
}

// ---------------------------------------------------------------------------
// num-dual references (forward mode: independent of ∂⃖)
// ---------------------------------------------------------------------------

/// Values and the directional derivative `J(x) v` of `p`, with [`Dual64`].
pub fn jvp_dual(p: &Program, x: &[f64], v: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let inp: Vec<Dual64> = x.iter().zip(v).map(|(&a, &e)| Dual64::new(a, e)).collect();
    let out = p.eval(&inp).expect("Dual64 evaluation");
    (
        out.iter().map(|d| d.re).collect(),
        out.iter().map(|d| d.eps).collect(),
    )
}

/// The Jacobian `J(x)` (m rows of n), one [`Dual64`] pass per column.
pub fn jacobian_dual(p: &Program, x: &[f64]) -> Vec<Vec<f64>> {
    let n = x.len();
    let m = p.n_outputs();
    let mut jac = vec![vec![0.0; n]; m];
    let mut e = vec![0.0; n];
    for j in 0..n {
        e[j] = 1.0;
        let (_, col) = jvp_dual(p, x, &e);
        e[j] = 0.0;
        for i in 0..m {
            jac[i][j] = col[i];
        }
    }
    jac
}

/// The gradient of output 0, one [`Dual64`] pass per coordinate.
pub fn gradient_dual(p: &Program, x: &[f64]) -> Vec<f64> {
    jacobian_dual(p, x).swap_remove(0)
}

/// `Jᵀ ȳ` from the num-dual Jacobian.
pub fn vjp_dual(p: &Program, x: &[f64], ybar: &[f64]) -> Vec<f64> {
    let jac = jacobian_dual(p, x);
    (0..x.len())
        .map(|j| jac.iter().zip(ybar).map(|(row, &w)| row[j] * w).sum())
        .collect()
}

/// `H(x) v` of output 0 with [`HyperDual64`]: pass `i` seeds `ε₁ = eᵢ`,
/// `ε₂ = v` and reads `(H v)ᵢ` off the `ε₁ε₂` part.
pub fn hvp_hyperdual(p: &Program, x: &[f64], v: &[f64]) -> Vec<f64> {
    (0..x.len())
        .map(|i| {
            let inp: Vec<HyperDual64> = x
                .iter()
                .zip(v)
                .enumerate()
                .map(|(j, (&a, &e))| HyperDual64::new(a, if i == j { 1.0 } else { 0.0 }, e, 0.0))
                .collect();
            p.eval(&inp).expect("HyperDual64 evaluation")[0].eps1eps2
        })
        .collect()
}

/// `(f, ∇f·v, vᵀ H v)` of output 0 with [`Dual2_64`] (one pass).
pub fn second_directional_dual2(p: &Program, x: &[f64], v: &[f64]) -> (f64, f64, f64) {
    let inp: Vec<Dual2_64> = x
        .iter()
        .zip(v)
        .map(|(&a, &e)| Dual2_64::new(a, e, 0.0))
        .collect();
    let out = p.eval(&inp).expect("Dual2_64 evaluation")[0];
    (out.re, out.v1, out.v2)
}

/// `[f, f′, f″, f‴]` of a program of one variable (output 0) with
/// [`Dual3_64`].
pub fn taylor3_dual3(p: &Program, x: f64) -> [f64; 4] {
    let out = p
        .eval(&[Dual3_64::new(x, 1.0, 0.0, 0.0)])
        .expect("Dual3_64 evaluation")[0];
    [out.re, out.v1, out.v2, out.v3]
}

// ---------------------------------------------------------------------------
// Error measures
// ---------------------------------------------------------------------------

/// Mixed absolute/relative error `|a − b| / max(1, |a|, |b|)`: absolute
/// below magnitude 1, relative above. Exact equality (including equal
/// infinities) is 0; any other non-finite value is ∞, so NaN never passes.
pub fn err(a: f64, b: f64) -> f64 {
    if a == b {
        return 0.0;
    }
    if !a.is_finite() || !b.is_finite() {
        return f64::INFINITY;
    }
    (a - b).abs() / 1f64.max(a.abs()).max(b.abs())
}

/// The largest [`err`] over two vectors; ∞ if their lengths differ.
pub fn max_err(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    a.iter()
        .zip(b)
        .map(|(&x, &y)| err(x, y))
        .fold(0.0, f64::max)
}

/// The largest magnitude in a vector (at least 1).
pub fn scale_of(a: &[f64]) -> f64 {
    a.iter().fold(1.0, |s: f64, &x| s.max(x.abs()))
}

// ---------------------------------------------------------------------------
// Runner
// ---------------------------------------------------------------------------

/// Tracks the worst error a property saw, for the report.
#[derive(Default)]
pub struct Worst(Cell<f64>);

impl Worst {
    /// Records an error and returns it.
    pub fn note(&self, e: f64) -> f64 {
        if e > self.0.get() || e.is_nan() {
            self.0.set(e);
        }
        e
    }

    /// The worst error so far.
    pub fn get(&self) -> f64 {
        self.0.get()
    }
}

/// The seed used unless `PROPTEST_RNG_SEED` is set: runs are deterministic.
pub const SEED: u64 = 0x0971_c0ad;

/// Runs a property over `cases` random values (or `PROPTEST_CASES` if set)
/// with a fixed seed (or `PROPTEST_RNG_SEED` if set) and no persistence
/// file; panics with the shrunk counterexample on failure and prints the
/// worst error noted.
pub fn check<S, F>(name: &str, cases: u32, strategy: S, test: F)
where
    S: Strategy,
    S::Value: fmt::Debug,
    F: Fn(S::Value, &Worst) -> Result<(), TestCaseError>,
{
    let mut config = Config {
        failure_persistence: None,
        ..Config::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    if matches!(config.rng_seed, RngSeed::Random) {
        config.rng_seed = RngSeed::Fixed(SEED);
    }
    let seed = config.rng_seed;
    let worst = Worst::default();
    let runs = Cell::new(0u32);
    let mut runner = TestRunner::new(config);
    let result = runner.run(&strategy, |v| {
        runs.set(runs.get() + 1);
        test(v, &worst)
    });
    eprintln!(
        "[{name}] {} runs, worst error noted: {:.3e}",
        runs.get(),
        worst.get()
    );
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, value)) => {
            panic!(
                "[{name}] property failed ({seed:?}): {reason}\nminimal failing input: {value:#?}"
            )
        }
        Err(TestError::Abort(reason)) => panic!("[{name}] aborted ({seed:?}): {reason}"),
    }
}

// ---------------------------------------------------------------------------
// Shared fixtures
// ---------------------------------------------------------------------------

/// Whether two results are the same: equal bits, or both NaN. The sign and
/// payload of a NaN that arithmetic produces are not specified by Rust's
/// floating-point semantics (RFC 3514, "float semantics"), and the compiler
/// may commute the operands of `+` and `·`, which changes them, so no two
/// evaluators can promise them.
pub fn same_bits(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// The chained Rosenbrock function as a scalar loop,
/// `Σᵢ 100 (xᵢ₊₁ − xᵢ²)² + (1 − xᵢ)²`.
pub fn rosenbrock<T: optic_ad::Real>(x: &[T]) -> T {
    let mut s = T::cst(0.0);
    for i in 0..x.len() - 1 {
        let a = x[i + 1] - x[i] * x[i];
        let b = T::cst(1.0) - x[i];
        s += a * a * 100.0 + b * b;
    }
    s
}

/// Closed forms of the Rosenbrock gradient and Hessian-vector product
/// (Nocedal & Wright, *Numerical Optimization*, 2nd ed., eq. 2.23 and
/// exercise 2.1, for the chained form).
pub fn rosenbrock_closed(x: &[f64], v: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let n = x.len();
    let mut g = vec![0.0; n];
    let mut hv = vec![0.0; n];
    for i in 0..n - 1 {
        let t = x[i + 1] - x[i] * x[i];
        g[i] += -400.0 * x[i] * t - 2.0 * (1.0 - x[i]);
        g[i + 1] += 200.0 * t;
        let hii = 1200.0 * x[i] * x[i] - 400.0 * x[i + 1] + 2.0;
        let hij = -400.0 * x[i];
        hv[i] += hii * v[i] + hij * v[i + 1];
        hv[i + 1] += hij * v[i] + 200.0 * v[i + 1];
    }
    (g, hv)
}

// ---------------------------------------------------------------------------
// One-shot drivers of array-trace functions, through the compiled drivers
// (the crate has one `Gradient`, `Hvp` and `Directional` for both traces)
// ---------------------------------------------------------------------------

/// `∇f(x)` of a function of the array trace: `Gradient::array` traced
/// and run once.
pub fn array_gradient(
    f: impl Fn(&optic_ad::array::TArray) -> optic_ad::Result<optic_ad::array::TScalar>,
    x: &[f64],
) -> optic_ad::Result<Vec<f64>> {
    Ok(optic_ad::Gradient::array(f, x)?.eval_at(x)?.1)
}

/// `H(x) v` of a function of the array trace: `Hvp::array` traced and
/// run once.
pub fn array_hvp(
    f: impl Fn(&optic_ad::array::TArray) -> optic_ad::Result<optic_ad::array::TScalar>,
    x: &[f64],
    v: &[f64],
) -> optic_ad::Result<Vec<f64>> {
    optic_ad::Hvp::array(f, x)?.hvp_at(x, v)
}

/// `dᵏ/dtᵏ f(x + t v)`, `k = 0 … N`, of a function of the array trace:
/// `Directional::array` traced and run once.
pub fn array_taylor<N>(
    f: impl Fn(&optic_ad::array::TArray) -> optic_ad::Result<optic_ad::array::TScalar>,
    x: &[f64],
    v: &[f64],
) -> optic_ad::Result<optic_ad::generic_array::GenericArray<f64, optic_ad::typenum::Add1<N>>>
where
    N: optic_ad::typenum::Unsigned + std::ops::Add<optic_ad::typenum::B1>,
    optic_ad::typenum::Add1<N>: optic_ad::generic_array::ArrayLength,
{
    let mut d = optic_ad::Directional::array(f, x, N::to_usize())?;
    let mut out = optic_ad::generic_array::GenericArray::default();
    d.eval(x, v, &mut out)?;
    Ok(out)
}
