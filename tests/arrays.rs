//! The array tier, checked against independent computations:
//!
//! * the same generic function run as a scalar trace (`Dense<Tracer>`, one
//!   instruction per element) through the scalar drivers;
//! * num-dual forward mode on `Dense<Dual64>`, `Dense<HyperDual64>` and
//!   `Dense<Dual3_64>`;
//! * the functor laws of ∂⃗ and ∂⃖ on random array programs, by action, at
//!   orders 1–3;
//! * native `Dense<f64>` against the array evaluator.
//!
//! Tolerance 1e-12 relative to the scale of the compared vector: the array
//! and scalar paths evaluate the same arithmetic, but sums run in a
//! different association (four partial sums in the array evaluator, faer's
//! blocked GEMM for its matrix products, CSE and folding differ between the
//! two builders), which moves a result by a few ulps of the sum of
//! magnitudes; the objective keeps its output well conditioned (see
//! `objective`), so 1e-12 leaves a margin of about 10³ while any wrong term
//! is of order 1.

use std::sync::Arc;

use crate::common;

use common::rosenbrock_closed;
use num_dual::{Dual3_64, Dual64, HyperDual64};
use optic_ad::array::{
    self, forward, reverse_joint, Array, ArrayProgram, ArrayWorkspace, Dense, Indices, Mat, Matrix,
    TArray, TScalar,
};
use optic_ad::functor::TaylorProgram;
use optic_ad::{Error, Real, Tracer};
use proptest::prelude::*;
use typenum::{U3, U4, U5, U6};

const TOL: f64 = 1e-12;

/// One step of a random array function on vectors of length `n`.
#[derive(Clone, Debug)]
enum Step {
    /// `map` with unary body `k`.
    Unary(u8),
    /// `map2` of the current value with the value `j` steps back, body `k`.
    Binary(u8, usize),
    /// `map_with` the sum of the current value, body `k`.
    WithSum(u8),
    /// A rotation by `k` (two slices, concatenated).
    Rotate(usize),
    /// `gather` with these indices.
    Gather(Vec<usize>),
    /// `scatter_add` with these indices.
    Scatter(Vec<usize>),
    /// `matvec` with this `n × n` matrix (row-major).
    MatVec(Vec<f64>),
    /// `vecmat` with this `n × n` matrix.
    VecMat(Vec<f64>),
    /// The prefix sums, scaled by `1/n`.
    Cumsum,
    /// `map_with` the maximum of the current value, body `k` (a tie,
    /// which gathers make, follows JAX's convention on both sides).
    WithMax(u8),
    /// `map3` of the current value and the two before it.
    Ternary,
    /// `map_n` of the current value and the three before it.
    Quaternary,
    /// A matrix product of traced matrices: `A = map_k(u yᵀ)` (`p × n`,
    /// `u` the first `p` elements of the value `j` steps back) times `B`
    /// (a traced outer product, or this constant data), each transposed
    /// where its flag says, summed to `n` elements along `axis` (directly
    /// or through a transpose), scaled to order 1.
    MatMul {
        p: usize,
        j: usize,
        k: u8,
        ta: bool,
        tb: bool,
        constant: Option<Vec<f64>>,
        axis: usize,
    },
    /// A traced matrix times traced vectors: `A = map_k(u yᵀ)` as above,
    /// `z = Aᵀ (A y)`.
    MatVecTraced { p: usize, j: usize, k: u8 },
    /// `y` repeated along `axis` into a `p × n` matrix (axis 0) or an
    /// `n × p` one (axis 1), times a traced outer product elementwise,
    /// summed back to `n` elements (through a transpose if `transpose`).
    Broadcast {
        p: usize,
        j: usize,
        axis: usize,
        transpose: bool,
    },
}

#[derive(Clone, Debug)]
struct Recipe {
    n: usize,
    steps: Vec<Step>,
}

fn unary<T: Real>(k: u8, t: T) -> T {
    match k % 6 {
        0 => t.sin(),
        // tanh of a bounded argument: num-dual, the reference, computes
        // tanh's derivatives as sinh / cosh by the quotient rule, losing
        // about cosh²(t) ulps to cancellation (1e-10 of f‴ at |t| ≈ 6,
        // found by a CI seed); here |t / (1 + t²)| ≤ ½.
        1 => (t / (t * t + 1.0)).tanh() * 1.5,
        2 => t * 0.8 + 0.1,
        3 => (-(t * t)).exp(),
        4 => t.cos() * t,
        _ => (t * t + 1.0).sqrt(),
    }
}

fn binary<T: Real>(k: u8, a: T, b: T) -> T {
    match k % 5 {
        0 => a * b * 0.5,
        1 => a + b,
        2 => a * b.sin(),
        3 => (a - b) * 0.5,
        _ => (a * 0.3).atan() + b,
    }
}

/// `u / √(u² + 1)`: the traced matrix steps are cubic (`Aᵀ(A y)` with `A`
/// made from the value) or quadratic in their argument, so that a chain of
/// three reached 10⁹ … 10¹⁵, where summing in another order (the array
/// tier's GEMM, the scalar trace's dot products) changes the 12th digit;
/// bounded by 1, the derivatives compare at 10⁻¹² (two CI seeds).
fn squash<T: Real>(u: T) -> T {
    u / (u * u + 1.0).sqrt()
}

/// Runs the recipe on any [`Array`]; the result has length `n`.
fn run<A: Array>(x: &A, r: &Recipe) -> optic_ad::Result<A> {
    let n = r.n;
    let mut vals: Vec<A> = vec![x.clone()];
    for s in &r.steps {
        let cur = vals.last().expect("non-empty").clone();
        let next = match s {
            Step::Unary(k) => cur.map(|t| unary(*k, t)),
            Step::Binary(k, j) => {
                let other = &vals[vals.len() - 1 - j % vals.len()];
                cur.map2(other, |a, b| binary(*k, a, b))?
            }
            Step::WithSum(k) => {
                let s = cur.sum() * (1.0 / n as f64);
                cur.map_with(s, |a, s| binary(*k, a, s))
            }
            Step::Rotate(k) => {
                let k = k % n;
                if k == 0 {
                    cur
                } else {
                    cur.slice(k, n - k)?.concat(&cur.slice(0, k)?)
                }
            }
            Step::Cumsum => cur.cumsum().map(|t| t * (1.0 / n as f64)),
            Step::WithMax(k) => {
                let m = cur.max()?;
                cur.map_with(m, |a, m| binary(*k, a, m))
            }
            Step::Gather(idx) => cur.gather(&Indices::new(idx))?,
            Step::Scatter(idx) => cur.scatter_add(&Indices::new(idx), n)?,
            Step::MatVec(m) => A::matvec(&Arc::new(Matrix::new(n, n, m.clone())?), &cur)?,
            Step::VecMat(m) => A::vecmat(&Arc::new(Matrix::new(n, n, m.clone())?), &cur)?,
            Step::Ternary => {
                let b = &vals[vals.len().saturating_sub(2)];
                let c = &vals[vals.len().saturating_sub(3)];
                cur.map3(b, c, |a, b, c| a * b + c.sin())?
            }
            Step::Quaternary => {
                let back = |j: usize| &vals[vals.len().saturating_sub(j + 1)];
                cur.map_n(&[back(1), back(2), back(3)], |x| {
                    x[0] * x[1] * 0.5 + (x[2] - x[3] * 0.7).sin()
                })?
            }
            Step::MatMul {
                p,
                j,
                k,
                ta,
                tb,
                constant,
                axis,
            } => {
                let o = &vals[vals.len() - 1 - j % vals.len()];
                let a = Mat::outer(&o.slice(0, *p)?, &cur)?.map(|t| unary(*k, t));
                // op(A) is m × inner; op(B) must be inner × n.
                let (m, inner) = if *ta { (n, *p) } else { (*p, n) };
                let (rows, cols) = if *tb { (n, inner) } else { (inner, n) };
                let b = match constant {
                    Some(d) => Mat::constant(&Matrix::new(rows, cols, d[..rows * cols].to_vec())?),
                    None => Mat::outer(&o.map(|t| t.cos()).slice(0, rows)?, &cur.slice(0, cols)?)?,
                };
                let c = a.matmul_t(&b, *ta, *tb)?;
                let sums = if *axis == 0 {
                    c.sum_axis(0)?
                } else {
                    c.t().sum_axis(1)?
                };
                let s = 1.0 / (m * inner) as f64;
                sums.map(|t| squash(t * s))
            }
            Step::MatVecTraced { p, j, k } => {
                let o = &vals[vals.len() - 1 - j % vals.len()];
                let a = Mat::outer(&o.slice(0, *p)?, &cur)?.map(|t| unary(*k, t));
                let y = a.matvec(&cur)?;
                let s = 1.0 / (n * p) as f64;
                a.vecmat(&y)?.map(|t| squash(t * s))
            }
            Step::Broadcast {
                p,
                j,
                axis,
                transpose,
            } => {
                let o = &vals[vals.len() - 1 - j % vals.len()];
                let u = o.slice(0, *p)?;
                let (m, other) = if *axis == 0 {
                    (
                        Mat::broadcast_axis(&cur, 0, *p, n)?,
                        Mat::outer(&u, &o.map(|t| t.sin()))?,
                    )
                } else {
                    (
                        Mat::broadcast_axis(&cur, 1, n, *p)?,
                        Mat::outer(&o.map(|t| t.sin()), &u)?,
                    )
                };
                let prod = m.map2(&other, |a, b| a * b + b * 0.5)?;
                let sums = match (*axis, *transpose) {
                    (0, false) => prod.sum_axis(0)?,
                    (0, true) => prod.t().sum_axis(1)?,
                    (_, false) => prod.sum_axis(1)?,
                    (_, true) => prod.t().sum_axis(0)?,
                };
                let s = 1.0 / *p as f64;
                sums.map(|t| t * s)
            }
        };
        vals.push(next);
    }
    Ok(vals.pop().expect("non-empty"))
}

/// A scalar function of the recipe: `½ Σ yᵢ² + sin(y₀) · Σ yᵢ`.
fn objective<A: Array>(x: &A, r: &Recipe) -> optic_ad::Result<A::Scalar> {
    let y = run(x, r)?;
    let half = y.dot(&y)? * 0.5;
    // sin of a bounded argument: sin(y₀) itself would turn the last-bit
    // differences between the array tier's GEMM and the scalar trace's dot
    // products (sums in another order) into relative differences of about
    // |y₀| u, and chained matrix steps make |y₀| reach 10⁶ (3e-10 seen).
    let y0 = y.get(0)?;
    Ok(half + (y0 / (y0 * y0 + 1.0)).sin() * y.sum())
}

/// The steps without matrices, on vectors of `n` elements.
fn vector_step(n: usize) -> impl Strategy<Value = Step> {
    let idx = prop::collection::vec(0..n, n);
    prop_oneof![
        (0..6u8).prop_map(Step::Unary),
        ((0..5u8), (0..4usize)).prop_map(|(k, j)| Step::Binary(k, j)),
        (0..5u8).prop_map(Step::WithSum),
        (0..n).prop_map(Step::Rotate),
        idx.clone().prop_map(Step::Gather),
        idx.prop_map(Step::Scatter),
        Just(Step::Ternary),
        Just(Step::Quaternary),
        Just(Step::Cumsum),
        (0..5u8).prop_map(Step::WithMax),
    ]
}

/// The steps on traced matrices (rank 2), with rectangular shapes
/// (`p × n`, `p` from 1 to `n`).
fn matrix_step(n: usize) -> impl Strategy<Value = Step> {
    let data = prop::collection::vec(-0.6..0.6f64, n * n);
    prop_oneof![
        (
            1..=n,
            0..4usize,
            0..6u8,
            any::<bool>(),
            any::<bool>(),
            prop::option::of(data),
            0..2usize
        )
            .prop_map(|(p, j, k, ta, tb, constant, axis)| Step::MatMul {
                p,
                j,
                k,
                ta,
                tb,
                constant,
                axis
            }),
        (1..=n, 0..4usize, 0..6u8).prop_map(|(p, j, k)| Step::MatVecTraced { p, j, k }),
        (1..=n, 0..4usize, 0..2usize, any::<bool>()).prop_map(|(p, j, axis, transpose)| {
            Step::Broadcast {
                p,
                j,
                axis,
                transpose,
            }
        }),
    ]
}

/// Every step: the ten vector kinds, constant matrices (matvec, vecmat)
/// and the three kinds on traced matrices, each equally likely.
fn step(n: usize) -> impl Strategy<Value = Step> {
    let mat = prop::collection::vec(-0.6..0.6f64, n * n);
    prop_oneof![
        10 => vector_step(n),
        1 => mat.clone().prop_map(Step::MatVec),
        1 => mat.prop_map(Step::VecMat),
        3 => matrix_step(n),
    ]
}

/// Recipes on vectors of 2050 … 2200 elements (a few runs make their map
/// bodies hot for the native backend), without matrices.
#[cfg(feature = "jit")]
fn long_recipe_point_dir() -> impl Strategy<Value = (Recipe, Vec<f64>, Vec<f64>)> {
    (2050..2200usize).prop_flat_map(|n| {
        (
            prop::collection::vec(vector_step(n), 1..6).prop_map(move |steps| Recipe { n, steps }),
            prop::collection::vec(-1.5..1.5f64, n),
            prop::collection::vec(-1.0..1.0f64, n),
        )
    })
}

fn recipe() -> impl Strategy<Value = Recipe> {
    (2..7usize).prop_flat_map(|n| {
        prop::collection::vec(step(n), 1..7).prop_map(move |steps| Recipe { n, steps })
    })
}

fn recipe_point_dir() -> impl Strategy<Value = (Recipe, Vec<f64>, Vec<f64>)> {
    recipe().prop_flat_map(|r| {
        let n = r.n;
        (
            Just(r),
            prop::collection::vec(-1.5..1.5f64, n),
            prop::collection::vec(-1.0..1.0f64, n),
        )
    })
}

/// Largest `|a − b|` over the scale of `b` (at least 1); ∞ where either
/// side is NaN and the other is not (a fold with `f64::max` would drop it).
fn rel_err(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(1.0_f64, |m, v| m.max(v.abs()));
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            if x.is_nan() != y.is_nan() {
                f64::INFINITY
            } else {
                (x - y).abs() / scale
            }
        })
        .fold(0.0, f64::max)
}

fn dense<T: Real>(x: &[T]) -> Dense<T> {
    Dense::new(x.to_vec())
}

fn gradient_num_dual(r: &Recipe, x: &[f64]) -> Vec<f64> {
    (0..x.len())
        .map(|i| {
            let xd: Vec<Dual64> = x
                .iter()
                .enumerate()
                .map(|(j, &v)| Dual64::new(v, if i == j { 1.0 } else { 0.0 }))
                .collect();
            objective(&dense(&xd), r).expect("num-dual run").eps
        })
        .collect()
}

fn hvp_num_dual(r: &Recipe, x: &[f64], v: &[f64]) -> Vec<f64> {
    (0..x.len())
        .map(|i| {
            let xd: Vec<HyperDual64> = x
                .iter()
                .zip(v)
                .enumerate()
                .map(|(j, (&xj, &vj))| {
                    HyperDual64::new(xj, vj, if i == j { 1.0 } else { 0.0 }, 0.0)
                })
                .collect();
            objective(&dense(&xd), r).expect("num-dual run").eps1eps2
        })
        .collect()
}

/// `[f(x), Df(x)[v], D²f(x)[v, v], D³f(x)[v, v, v]]` by ∂⃗ applied three
/// times to the array program (each application a program again): a
/// route to third derivatives independent of Taylor mode
/// (`crate::common::array_taylor::<U3>`), built from the public functor only.
pub(crate) fn directional3(
    f: impl Fn(&TArray) -> optic_ad::Result<TScalar>,
    x: &[f64],
    v: &[f64],
) -> optic_ad::Result<[f64; 4]> {
    if v.len() != x.len() {
        return Err(Error::LengthMismatch {
            what: "directional3: v",
            expected: x.len(),
            got: v.len(),
        });
    }
    let p = array::trace(|xs: &[TArray]| f(&xs[0]), &[x])?;
    let f3 = forward(&forward(&forward(&p)?)?)?;
    // Inputs [x, ẋ, x′, ẋ′, x″, ẋ″, x‴, ẋ‴]: ẋ = x′ = x″ = v, the rest
    // structural zeros; outputs [y, ẏ, y′, ẏ′, y″, ẏ″, y‴, ẏ‴].
    let z = Some(-0.0);
    let q = f3.specialize(&[None, None, None, z, None, z, z, z], &[0, 1, 3, 7])?;
    let out = q.eval(&[x, v, v, v])?;
    let at = |k: usize| {
        out.get(k)
            .and_then(|o| o.first())
            .copied()
            .unwrap_or(f64::NAN)
    };
    Ok([at(0), at(1), at(2), at(3)])
}

fn directional3_num_dual(r: &Recipe, x: &[f64], v: &[f64]) -> [f64; 4] {
    let xd: Vec<Dual3_64> = x
        .iter()
        .zip(v)
        .map(|(&xj, &vj)| Dual3_64::new(xj, vj, 0.0, 0.0))
        .collect();
    let y = objective(&dense(&xd), r).expect("num-dual run");
    [y.re, y.v1, y.v2, y.v3]
}

/// Whether `got` is within twice Higham's bound `γₖ Σ |tᵢ|`,
/// `γₖ = k u / (1 − k u)` (*Accuracy and Stability of Numerical
/// Algorithms*, 2nd ed., §3.1), of the terms summed in order: both sums are
/// that close to the exact one.
fn within(got: f64, terms: &[f64]) -> bool {
    let k = terms.len() as f64;
    let u = f64::EPSILON / 2.0;
    let gamma = k * u / (1.0 - k * u);
    let mut seq = 0.0;
    for t in terms {
        seq += t;
    }
    let bound = 2.0 * gamma * terms.iter().map(|t| t.abs()).sum::<f64>();
    (got - seq).abs() <= bound
}

/// An estimate of how much the derivatives of the recipe's objective at
/// `x` amplify relative perturbations of the point: the largest change of
/// num-dual's gradient, HVP and third directional derivative (each relative
/// to its largest element, as [`rel_err`] measures) when every `xᵢ` moves
/// by a relative `±10⁻⁹`, divided by `10⁻⁹`.
///
/// Rounding errors of the forward sweep act like such perturbations of
/// intermediate values, so two correct implementations that sum in
/// different orders differ by about this number times the unit roundoff.
/// Over 3000 generated cases the array tier's difference from num-dual
/// stayed under 3 κ ε; one case in about 750 has κ above 10³. One such
/// case (stacked traced matrix products, gradient entries of 10³) put both
/// the array tier and num-dual 2–7 · 10⁻¹² away from a 60-digit reference.
fn condition(r: &Recipe, x: &[f64], v: &[f64]) -> f64 {
    let h = 1e-9;
    let xp: Vec<f64> = x
        .iter()
        .enumerate()
        .map(|(i, a)| a * (1.0 + if i % 2 == 0 { h } else { -h }))
        .collect();
    let g = rel_err(&gradient_num_dual(r, &xp), &gradient_num_dual(r, x));
    let hv = rel_err(&hvp_num_dual(r, &xp, v), &hvp_num_dual(r, x, v));
    let d = rel_err(
        &directional3_num_dual(r, &xp, v),
        &directional3_num_dual(r, x, v),
    );
    g.max(hv).max(d) / h
}

/// The bit patterns (so that `-0.0` and `+0.0` differ).
fn bits(x: &[f64]) -> Vec<u64> {
    x.iter().map(|v| v.to_bits()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Array gradient, HVP and third directional derivative against the
    /// scalar trace of the same code and against num-dual.
    #[test]
    fn array_derivatives_match_scalar_trace_and_num_dual((r, x, v) in recipe_point_dir()) {
        // Ill-conditioned cases, where summing in another order alone moves
        // the derivatives by more than TOL, are outside this comparison.
        prop_assume!(condition(&r, &x, &v) < 1e3);
        let g = crate::common::array_gradient(|t| objective(t, &r), &x).unwrap();
        let g_scalar = optic_ad::gradient(|t: &[Tracer]| objective(&dense(t), &r), &x).unwrap();
        prop_assert!(rel_err(&g, &g_scalar) < TOL, "gradient vs scalar: {g:?} {g_scalar:?}");
        let g_dual = gradient_num_dual(&r, &x);
        prop_assert!(rel_err(&g, &g_dual) < TOL, "gradient vs num-dual: {g:?} {g_dual:?}");

        let hv = crate::common::array_hvp(|t| objective(t, &r), &x, &v).unwrap();
        let hv_scalar =
            optic_ad::hvp(|t: &[Tracer]| objective(&dense(t), &r), &x, &v).unwrap();
        prop_assert!(rel_err(&hv, &hv_scalar) < TOL, "hvp vs scalar: {hv:?} {hv_scalar:?}");
        let hv_dual = hvp_num_dual(&r, &x, &v);
        prop_assert!(rel_err(&hv, &hv_dual) < TOL, "hvp vs num-dual: {hv:?} {hv_dual:?}");
        // The one-pass product at a point other than the traced one (its
        // own program, not the linearize/apply split), against num-dual
        // there; the linearized state is untouched by it.
        let mut h = optic_ad::Hvp::array(|t| objective(t, &r), &x).unwrap();
        h.linearize(&x).unwrap();
        let y: Vec<f64> = x.iter().map(|a| a * 0.9 + 0.05).collect();
        let mut hv_one = vec![0.0; x.len()];
        h.eval(&y, &v, &mut hv_one).unwrap();
        let hv_one_dual = hvp_num_dual(&r, &y, &v);
        prop_assert!(rel_err(&hv_one, &hv_one_dual) < TOL, "one-pass hvp vs num-dual: {hv_one:?} {hv_one_dual:?}");
        let mut hv_apply = vec![0.0; x.len()];
        h.apply(&v, &mut hv_apply).unwrap();
        prop_assert!(rel_err(&hv_apply, &hv) < TOL, "apply after eval: {hv_apply:?} {hv:?}");

        let d = directional3(|t| objective(t, &r), &x, &v).unwrap();
        let d_dual = directional3_num_dual(&r, &x, &v);
        prop_assert!(rel_err(&d, &d_dual) < TOL, "d3 vs num-dual: {d:?} {d_dual:?}");
        // The scalar trace's Taylor mode on t ↦ f(x + t v).
        let d_scalar = optic_ad::derivative::<U3, _, _>(
            |t: Tracer| {
                let xt: Vec<Tracer> = x.iter().zip(&v).map(|(&a, &b)| t * b + a).collect();
                objective(&dense(&xt), &r)
            },
            0.0,
        )
        .unwrap();
        prop_assert!(rel_err(&d, &d_scalar) < TOL, "d3 vs scalar Taylor: {d:?} {d_scalar:?}");
    }

    /// The array evaluator computes what native `Dense<f64>` code computes,
    /// exactly: the same operations in the same order. (Equal as numbers:
    /// the builder folds `x − x` to a zero, whose sign may differ from the
    /// native result's.)
    #[test]
    fn array_program_matches_native((r, x, _v) in recipe_point_dir()) {
        let native = run(&dense(&x), &r).unwrap().into_vec();
        let p = array::trace(|t: &[TArray]| run(&t[0], &r), &[&x]).unwrap();
        let traced = p.eval(&[&x]).unwrap().remove(0);
        for (a, b) in traced.iter().zip(&native) {
            prop_assert!(a == b || (a.is_nan() && b.is_nan()), "{:?} vs {:?}", traced, native);
        }
    }
}

/// Random array programs `f, g : ℝⁿ → ℝⁿ` as traced programs.
fn program_of(r: &Recipe) -> ArrayProgram {
    let x = vec![0.25; r.n];
    array::trace(|t: &[TArray]| run(&t[0], r), &[&x]).unwrap()
}

/// `forwardᵏ`.
fn forward_k(p: &ArrayProgram, k: usize) -> ArrayProgram {
    (0..k).fold(p.clone(), |q, _| forward(&q).unwrap())
}

fn eval_flat(p: &ArrayProgram, inputs: &[Vec<f64>]) -> Vec<f64> {
    let ins: Vec<&[f64]> = inputs.iter().map(Vec::as_slice).collect();
    p.eval(&ins).unwrap().concat()
}

/// Inputs of `p`'s shapes, input `i` element `j` from
/// `ins[i mod ·][j mod ·]`.
fn inputs_for(p: &ArrayProgram, ins: &[Vec<f64>]) -> Vec<Vec<f64>> {
    p.input_shapes()
        .iter()
        .enumerate()
        .map(|(i, s)| {
            (0..s.len())
                .map(|j| ins[i % ins.len()][j % ins[0].len()])
                .collect()
        })
        .collect()
}

fn two_recipes_and_inputs() -> impl Strategy<Value = (Recipe, Recipe, Vec<Vec<f64>>)> {
    (2..6usize).prop_flat_map(|n| {
        let r =
            move || prop::collection::vec(step(n), 1..5).prop_map(move |steps| Recipe { n, steps });
        (
            r(),
            r(),
            prop::collection::vec(prop::collection::vec(-1.0..1.0f64, n), 16),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// ∂⃗ᵏ(g ∘ f) = ∂⃗ᵏg ∘ ∂⃗ᵏf by action, k = 1, 2, 3, and ∂⃗ᵏ(id) = id.
    #[test]
    fn forward_functor_laws((rf, rg, ins) in two_recipes_and_inputs()) {
        let (f, g) = (program_of(&rf), program_of(&rg));
        let gf = f.then(&g).unwrap();
        for k in 1..=3 {
            let lhs = forward_k(&gf, k);
            let rhs = forward_k(&f, k).then(&forward_k(&g, k)).unwrap();
            let inputs: Vec<Vec<f64>> = ins[..1 << k].to_vec();
            let (a, b) = (eval_flat(&lhs, &inputs), eval_flat(&rhs, &inputs));
            prop_assert!(rel_err(&a, &b) < 1e-10, "order {k}: {a:?} vs {b:?}");
        }
        let n = rf.n;
        let id = array::trace(|t: &[TArray]| Ok(t[0]), &[&vec![0.0; n]]).unwrap();
        for k in 1..=3 {
            let fid = forward_k(&id, k);
            let inputs: Vec<Vec<f64>> = ins[..1 << k].to_vec();
            prop_assert_eq!(eval_flat(&fid, &inputs), inputs.concat());
        }
    }

    /// ∂⃖(g ∘ f) composed by action from ∂⃖f and ∂⃖g, at orders 1–3 (the
    /// law applied to ∂⃗ᵏ⁻¹f and ∂⃗ᵏ⁻¹g), and ∂⃖(id) = id.
    #[test]
    fn reverse_functor_laws((rf, rg, ins) in two_recipes_and_inputs()) {
        let (f0, g0) = (program_of(&rf), program_of(&rg));
        for k in 1..=3 {
            let (f, g) = (forward_k(&f0, k - 1), forward_k(&g0, k - 1));
            let w = 1 << (k - 1); // input blocks of f and g
            let x = ins[..w].to_vec();
            let zbar = ins[w..2 * w].to_vec();
            let lhs = reverse_joint(&f.then(&g).unwrap()).unwrap();
            let mut inputs = x.clone();
            inputs.extend(zbar.iter().cloned());
            let out = lhs.eval(&inputs.iter().map(Vec::as_slice).collect::<Vec<_>>()).unwrap();
            // By action: y = f(x); (z, ȳ) = J_g(y, z̄); (_, x̄) = J_f(x, ȳ).
            let (jf, jg) = (reverse_joint(&f).unwrap(), reverse_joint(&g).unwrap());
            let y = f.eval(&x.iter().map(Vec::as_slice).collect::<Vec<_>>()).unwrap();
            let mut gin = y.clone();
            gin.extend(zbar.iter().cloned());
            let gout = jg.eval(&gin.iter().map(Vec::as_slice).collect::<Vec<_>>()).unwrap();
            let (z, ybar) = gout.split_at(w);
            let mut fin = x.clone();
            fin.extend(ybar.iter().cloned());
            let fout = jf.eval(&fin.iter().map(Vec::as_slice).collect::<Vec<_>>()).unwrap();
            let rhs: Vec<f64> = z.concat().into_iter().chain(fout[w..].concat()).collect();
            let lhs_flat = out.concat();
            prop_assert!(rel_err(&lhs_flat, &rhs) < 1e-10, "order {k}: {lhs_flat:?} vs {rhs:?}");
        }
        let n = rf.n;
        let id = array::trace(|t: &[TArray]| Ok(t[0]), &[&vec![0.0; n]]).unwrap();
        let jid = reverse_joint(&id).unwrap();
        let out = eval_flat(&jid, &ins[..2]);
        prop_assert_eq!(out, ins[..2].concat());
    }

    /// ∂⃖ transposes ∂⃗ on programs that are themselves derived (orders 1–3):
    /// ⟨ȳ, J ẋ⟩ = ⟨Jᵀ ȳ, ẋ⟩ for `∂⃖ᵏ⁻¹`-style joint programs.
    #[test]
    fn reverse_transposes_forward_on_derived_programs((rf, _rg, ins) in two_recipes_and_inputs()) {
        let mut p = program_of(&rf);
        for k in 1..=3 {
            let lens: Vec<usize> = p.input_shapes().iter().map(|s| s.len()).collect();
            let olens: Vec<usize> = p.output_shapes().iter().map(|s| s.len()).collect();
            let pick = |i: usize, len: usize| -> Vec<f64> {
                (0..len).map(|j| ins[i % ins.len()][j % ins[0].len()] * (1.0 + 0.1 * i as f64)).collect()
            };
            let x: Vec<Vec<f64>> = lens.iter().enumerate().map(|(i, &l)| pick(i, l)).collect();
            let xdot: Vec<Vec<f64>> = lens.iter().enumerate().map(|(i, &l)| pick(i + 5, l)).collect();
            let ybar: Vec<Vec<f64>> = olens.iter().enumerate().map(|(i, &l)| pick(i + 9, l)).collect();
            let fwd = forward(&p).unwrap();
            let mut fin = x.clone();
            fin.extend(xdot.iter().cloned());
            let fout = eval_flat(&fwd, &fin);
            let ydot = &fout[fout.len() - olens.iter().sum::<usize>()..];
            let rev = reverse_joint(&p).unwrap();
            let mut rin = x.clone();
            rin.extend(ybar.iter().cloned());
            let rout = eval_flat(&rev, &rin);
            let xbar = &rout[rout.len() - lens.iter().sum::<usize>()..];
            let lhs: f64 = ybar.concat().iter().zip(ydot).map(|(a, b)| a * b).sum();
            let rhs: f64 = xbar.iter().zip(xdot.concat()).map(|(a, b)| a * b).sum();
            let scale = 1.0_f64.max(lhs.abs());
            prop_assert!((lhs - rhs).abs() / scale < 1e-10, "order {k}: {lhs} vs {rhs}");
            // The next order is ∂⃖ of this joint program.
            p = rev;
        }
    }
}

fn rosenbrock<A: Array>(x: &A) -> optic_ad::Result<A::Scalar> {
    let n = x.len();
    let (a, b) = (x.slice(0, n - 1)?, x.slice(1, n - 1)?);
    Ok(a.map2(&b, |a, b| {
        let t = b - a * a;
        let u = -a + 1.0;
        t * t * 100.0 + u * u
    })?
    .sum())
}

#[test]
fn rosenbrock_against_closed_form_at_scale() {
    let n = 100_000;
    let x: Vec<f64> = (0..n)
        .map(|i| 0.5 + 0.4 * ((i as f64) * 0.37).sin())
        .collect();
    let v: Vec<f64> = (0..n).map(|i| ((i as f64) * 0.11).cos()).collect();
    let (g_ref, hv_ref) = rosenbrock_closed(&x, &v);
    let g = crate::common::array_gradient(rosenbrock, &x).unwrap();
    assert!(rel_err(&g, &g_ref) < 1e-13, "{}", rel_err(&g, &g_ref));
    let hv = crate::common::array_hvp(rosenbrock, &x, &v).unwrap();
    assert!(rel_err(&hv, &hv_ref) < 1e-13, "{}", rel_err(&hv, &hv_ref));
}

#[test]
fn program_size_does_not_grow_with_n() {
    let len = |n: usize| {
        let x = vec![0.3; n];
        let h = optic_ad::Hvp::array(rosenbrock, &x).unwrap();
        (
            h.array_program().unwrap().len(),
            h.array_program().unwrap().body_len(),
        )
    };
    assert_eq!(len(10), len(100_000));
    let (ops, body) = len(10);
    assert!(
        ops < 40 && body < 200,
        "{ops} instructions, {body} in bodies"
    );
}

#[test]
fn shape_errors_are_errors() {
    let x = [1.0, 2.0, 3.0];
    let e = crate::common::array_gradient(|t| Ok(t.map2(&t.slice(0, 2)?, |a, b| a * b)?.sum()), &x);
    assert!(matches!(e, Err(Error::LengthMismatch { .. })), "{e:?}");
    let e = crate::common::array_gradient(|t| Ok(t.slice(2, 2)?.sum()), &x);
    assert!(matches!(e, Err(Error::IndexOutOfRange { .. })), "{e:?}");
    let e = crate::common::array_gradient(|t| Ok(t.gather(&Indices::new(&[0, 3]))?.sum()), &x);
    assert!(matches!(e, Err(Error::IndexOutOfRange { .. })), "{e:?}");
    // The first index out of range is the one reported (the indices'
    // bound is found once, when they are made).
    let idx = Indices::new(&[0, 4, 1, 7, 2]);
    let e = crate::common::array_gradient(|t| Ok(t.gather(&idx)?.sum()), &x);
    assert!(
        matches!(
            e,
            Err(Error::IndexOutOfRange {
                index: 4,
                len: 3,
                ..
            })
        ),
        "{e:?}"
    );
    let e = crate::common::array_gradient(
        |t| {
            Ok(t.slice(0, 2)?
                .concat(&t.slice(0, 3)?)
                .scatter_add(&idx, 5)?
                .sum())
        },
        &x,
    );
    assert!(
        matches!(
            e,
            Err(Error::IndexOutOfRange {
                index: 7,
                len: 5,
                ..
            })
        ),
        "{e:?}"
    );
    let e =
        crate::common::array_gradient(|t| Ok(t.scatter_add(&Indices::new(&[0, 1]), 3)?.sum()), &x);
    assert!(matches!(e, Err(Error::LengthMismatch { .. })), "{e:?}");
    let m = Arc::new(Matrix::new(2, 2, vec![1.0; 4]).unwrap());
    let e = crate::common::array_gradient(|t| Ok(TArray::matvec(&m, t)?.sum()), &x);
    assert!(matches!(e, Err(Error::LengthMismatch { .. })), "{e:?}");
    // The same errors natively.
    assert!(Dense::new(x.to_vec()).slice(2, 2).is_err());
    assert!(Dense::<f64>::matvec(&m, &Dense::new(x.to_vec())).is_err());
    // Lengths at evaluation.
    let mut g = optic_ad::Gradient::array(|t| Ok(t.sum()), &x).unwrap();
    let mut out = [0.0; 3];
    assert!(matches!(
        g.eval(&[1.0], &mut out),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        g.eval(&x, &mut [0.0; 2]),
        Err(Error::LengthMismatch { .. })
    ));
    let mut h = optic_ad::Hvp::array(|t| Ok(t.sum()), &x).unwrap();
    assert!(matches!(h.apply(&x, &mut out), Err(Error::NotLinearized)));
    for (a, b, c) in [
        (&x[..2], &x[..], 3),
        (&x[..], &x[..1], 3),
        (&x[..], &x[..], 4),
    ] {
        let mut o = vec![7.0; c];
        let e = h.eval(a, b, &mut o);
        assert!(matches!(e, Err(Error::LengthMismatch { .. })), "{e:?}");
        assert!(o.iter().all(|&v| v == 7.0), "out untouched on error");
    }
    assert!(matches!(
        directional3(|t| Ok(t.sum()), &x, &[1.0]),
        Err(Error::LengthMismatch { .. })
    ));
}

#[test]
fn array_nest_orders_and_bounds() {
    let x = [0.3, -0.7, 1.1];
    let p = array::trace(|t: &[TArray]| Ok(t[0].map(|v| v.sin()).sum()), &[&x]).unwrap();
    // Order 0 is the program itself; order k has 2ᵏ input and output blocks.
    let p0 = array::nest(&p, 0).unwrap();
    assert_eq!(p0.eval(&[&x]).unwrap(), p.eval(&[&x]).unwrap());
    for k in 1..=4 {
        let pk = array::nest(&p, k).unwrap();
        assert_eq!(pk.input_shapes().len(), 1 << k);
        assert_eq!(pk.outputs().len(), 1 << k);
    }
    assert!(matches!(
        array::nest(&p, optic_ad::functor::MAX_ORDER + 1),
        Err(Error::OrderTooHigh { .. })
    ));
}

#[test]
fn comparisons_record_guards() {
    // A scalar branch: f = Σx² if Σx > 0, else Σx.
    let f = |t: &TArray| -> optic_ad::Result<optic_ad::array::TScalar> {
        let s = t.sum();
        Ok(if s > 0.0 { t.dot(t)? } else { s })
    };
    let p = array::trace(|xs: &[TArray]| f(&xs[0]), &[&[1.0, 2.0]]).unwrap();
    assert!(matches!(
        p.eval(&[&[-3.0, 1.0]]),
        Err(Error::GuardFailed { .. })
    ));
    let mut g = optic_ad::Gradient::array(f, &[1.0, 2.0]).unwrap();
    let mut out = [0.0; 2];
    assert_eq!(g.eval(&[3.0, 1.0], &mut out).unwrap(), 10.0);
    assert_eq!(out, [6.0, 2.0]);
    // The compiled gradient re-traces on the other side of the branch.
    assert_eq!(g.eval(&[-3.0, 1.0], &mut out).unwrap(), -2.0);
    assert_eq!(out, [1.0, 1.0]);
    // A comparison in a map body must hold for every element.
    let body_branch = |t: &TArray| Ok(t.map(|x| if x > 0.0 { x } else { -x }).sum());
    let e = crate::common::array_gradient(body_branch, &[1.0, -2.0]);
    assert!(matches!(e, Err(Error::GuardFailed { .. })), "{e:?}");
    // The branch-free form works everywhere.
    let g = crate::common::array_gradient(|t| Ok(t.map(|x| x.abs()).sum()), &[1.0, -2.0]).unwrap();
    assert_eq!(g, vec![1.0, -1.0]);
}

#[test]
fn gather_scatter_concat_values() {
    let x = [1.0, 2.0, 3.0];
    let p = array::trace(
        |t: &[TArray]| {
            let g = t[0].gather(&Indices::new(&[2, 2, 0]))?;
            let s = g.scatter_add(&Indices::new(&[1, 1, 0]), 2)?;
            Ok(vec![g, s, t[0].concat(&s)])
        },
        &[&x],
    )
    .unwrap();
    let out = p.eval(&[&x]).unwrap();
    assert_eq!(out[0], vec![3.0, 3.0, 1.0]);
    assert_eq!(out[1], vec![1.0, 6.0]);
    assert_eq!(out[2], vec![1.0, 2.0, 3.0, 1.0, 6.0]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// `array::nest` (∂⃖ᴺ in the nested-closure encoding on the array
    /// program) against `nest` on the scalar trace of the same function, at
    /// orders 1 to 3: the same blocks, flattened, and the same values at
    /// random inputs, to 1e-12 relative.
    #[test]
    fn array_nest_matches_scalar_nest(
        (r, x, _v) in recipe_point_dir(),
        order in 1usize..=3,
        seed in any::<u64>(),
    ) {
        let p = array::trace(|t: &[TArray]| objective(&t[0], &r), &[&x]).unwrap();
        let s = optic_ad::trace(|t: &[Tracer]| vec![objective(&dense(t), &r).unwrap()], &x).unwrap();
        let pa = array::nest(&p, order).unwrap();
        let ps = optic_ad::nest(&s, order).unwrap();
        // x itself, then uniform numbers in [−1, 1) for every other block.
        let mut state = seed | 1;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        };
        let inputs: Vec<Vec<f64>> = pa
            .input_shapes()
            .iter()
            .enumerate()
            .map(|(i, sh)| if i == 0 { x.clone() } else { (0..sh.len()).map(|_| next()).collect() })
            .collect();
        let flat = inputs.concat();
        prop_assert_eq!(flat.len(), ps.n_inputs());
        let refs: Vec<&[f64]> = inputs.iter().map(Vec::as_slice).collect();
        let ya = pa.eval(&refs).unwrap().concat();
        let ys = ps.eval(&flat).unwrap();
        prop_assert_eq!(ya.len(), ys.len());
        prop_assert!(rel_err(&ya, &ys) < TOL, "order {}: {:?} vs {:?}", order, ya, ys);
        // The typed bundle runs the same program in stages, after a first
        // run at other inputs (whose residual must not leak into this one).
        let other: Vec<Vec<f64>> = inputs.iter().map(|v| v.iter().map(|t| t * 0.5 - 0.25).collect()).collect();
        let staged = match order {
            1 => staged_bundle::<typenum::U1>(&p, &other, &inputs),
            2 => staged_bundle::<typenum::U2>(&p, &other, &inputs),
            _ => staged_bundle::<typenum::U3>(&p, &other, &inputs),
        };
        prop_assert!(rel_err(&staged, &ya) < 1e-14, "order {}: staged {:?} vs {:?}", order, staged, ya);
    }

    /// `matvec` and `vecmat` run the library GEMM: each entry is within
    /// the rounding bound of a dot product of `k` terms, `γₖ Σ |aᵢ xᵢ|` with
    /// `γₖ = k u / (1 − k u)` (Higham, *Accuracy and Stability of Numerical
    /// Algorithms*, 2nd ed., §3.1), of the sum taken in order, doubled to
    /// cover both sums, for every shape (rows or columns not a multiple of
    /// the kernel's block, none at all); and `Dense<f64>` computes the
    /// program's bits.
    #[test]
    fn matvec_and_vecmat_are_dot_products_within_rounding(
        (rows, cols, data, x) in (0usize..11, 0usize..11).prop_flat_map(|(r, c)| (
            Just(r),
            Just(c),
            prop::collection::vec(-3.0f64..3.0, r * c),
            prop::collection::vec(-3.0f64..3.0, c),
        ))
    ) {
        let m = Arc::new(Matrix::new(rows, cols, data.clone()).unwrap());
        let p = array::trace(|t: &[TArray]| TArray::matvec(&m, &t[0]), &[&x]).unwrap();
        let got = p.eval(&[&x]).unwrap().remove(0);
        prop_assert_eq!(got.len(), rows);
        for (r, y) in got.iter().enumerate() {
            let terms: Vec<f64> = (0..cols).map(|j| data[r * cols + j] * x[j]).collect();
            prop_assert!(within(*y, &terms), "row {} of {}x{}: {}", r, rows, cols, y);
        }
        prop_assert_eq!(bits(&Dense::<f64>::matvec(&m, &Dense(x.clone())).unwrap().0), bits(&got));
        let y: Vec<f64> = (0..rows).map(|r| (r as f64 * 0.7).sin()).collect();
        let p = array::trace(|t: &[TArray]| TArray::vecmat(&m, &t[0]), &[&y]).unwrap();
        let got = p.eval(&[&y]).unwrap().remove(0);
        prop_assert_eq!(got.len(), cols);
        for (j, g) in got.iter().enumerate() {
            let terms: Vec<f64> = (0..rows).map(|r| y[r] * data[r * cols + j]).collect();
            prop_assert!(within(*g, &terms), "column {} of {}x{}: {}", j, rows, cols, g);
        }
        prop_assert_eq!(bits(&Dense::<f64>::vecmat(&m, &Dense(y.clone())).unwrap().0), bits(&got));
    }

    /// Products of traced matrices large enough for faer to pack its
    /// operands (more than 16³ multiply-adds), every flag combination:
    /// each entry within Higham's bound of the sum in order, and
    /// `Dense<f64>` computes the program's bits.
    #[test]
    fn large_matrix_products_are_dot_products_within_rounding(
        (m, k, n, ta, tb, a, b) in (1usize..40, 1usize..40, 1usize..40, any::<bool>(), any::<bool>())
            .prop_flat_map(|(m, k, n, ta, tb)| (
                Just(m), Just(k), Just(n), Just(ta), Just(tb),
                prop::collection::vec(-3.0f64..3.0, m * k),
                prop::collection::vec(-3.0f64..3.0, k * n),
            ))
    ) {
        // Stored shapes: op(A) is m × k, op(B) is k × n.
        let ad = if ta { (k, m) } else { (m, k) };
        let bd = if tb { (n, k) } else { (k, n) };
        let at = |i: usize, l: usize| if ta { a[l * m + i] } else { a[i * k + l] };
        let bt = |l: usize, j: usize| if tb { b[j * k + l] } else { b[l * n + j] };
        let p = array::trace(
            |t: &[TArray]| {
                Ok(Mat::new(t[0], ad.0, ad.1)?
                    .matmul_t(&Mat::new(t[1], bd.0, bd.1)?, ta, tb)?
                    .into_data())
            },
            &[&a, &b],
        )
        .unwrap();
        let got = p.eval(&[&a, &b]).unwrap().remove(0);
        prop_assert_eq!(got.len(), m * n);
        for i in 0..m {
            for j in 0..n {
                let terms: Vec<f64> = (0..k).map(|l| at(i, l) * bt(l, j)).collect();
                prop_assert!(within(got[i * n + j], &terms), "({}, {}) of {}x{}x{}", i, j, m, k, n);
            }
        }
        let dense = Mat::new(Dense(a.clone()), ad.0, ad.1)
            .unwrap()
            .matmul_t(&Mat::new(Dense(b.clone()), bd.0, bd.1).unwrap(), ta, tb)
            .unwrap();
        prop_assert_eq!(bits(&dense.data().0), bits(&got));
    }

    /// The fused plan (views for slices and pads, sums inside maps, shared
    /// buffers) computes what storing every value computes, bit for bit,
    /// on random programs and their derivatives up to order 3.
    #[test]
    fn fused_plan_matches_unfused((rf, _rg, ins) in two_recipes_and_inputs()) {
        let mut p = program_of(&rf);
        for _ in 0..3 {
            p = reverse_joint(&forward(&p).unwrap()).unwrap();
            let inputs = inputs_for(&p, &ins);
            let refs: Vec<&[f64]> = inputs.iter().map(Vec::as_slice).collect();
            let mut a = array::ArrayWorkspace::new(&p);
            let mut b = array::ArrayWorkspace::unfused(&p);
            a.run(&p, &refs).unwrap();
            b.run(&p, &refs).unwrap();
            for k in 0..p.outputs().len() {
                let (x, y) = (a.output(&p, k), b.output(&p, k));
                prop_assert_eq!(x.len(), y.len());
                for (u, w) in x.iter().zip(y) {
                    prop_assert!(u.to_bits() == w.to_bits() || (u.is_nan() && w.is_nan()), "output {k}: {x:?} vs {y:?}");
                }
            }
        }
    }
}

fn map_count(p: &ArrayProgram) -> usize {
    p.ops()
        .iter()
        .filter(|o| matches!(o, array::ArrayOp::Map { .. }))
        .count()
}

/// Output `k` of `p` and `q` on `inputs`, bit for bit (NaN as NaN).
pub(crate) fn same_bits(
    p: &ArrayProgram,
    q: &ArrayProgram,
    inputs: &[&[f64]],
) -> Result<(), String> {
    same_outputs(
        &p.eval(inputs).map_err(|e| e.to_string())?,
        &q.eval(inputs).map_err(|e| e.to_string())?,
    )
}

/// Two runs' outputs have the same bits (any NaN equal to any NaN).
pub(crate) fn same_outputs(x: &[Vec<f64>], y: &[Vec<f64>]) -> Result<(), String> {
    if x.len() != y.len() {
        return Err(format!("{} vs {} outputs", x.len(), y.len()));
    }
    for (k, (a, b)) in x.iter().zip(y).enumerate() {
        let same = a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(u, w)| u.to_bits() == w.to_bits() || (u.is_nan() && w.is_nan()));
        if !same {
            return Err(format!("output {k}: {a:?} vs {b:?}"));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Vertical fusion (a map reading an earlier map's outputs runs in
    /// its loop) gives the bits of the unfused program on random programs
    /// and their derivatives up to order 3, also when maps may fuse only
    /// within random stages; it never adds a map.
    #[test]
    fn fused_chains_keep_the_bits(
        (rf, _rg, ins) in two_recipes_and_inputs(),
        seed in any::<u64>(),
    ) {
        let mut p = program_of(&rf);
        for order in 0..4 {
            if order > 0 {
                p = reverse_joint(&forward(&p).unwrap()).unwrap();
            }
            let inputs = inputs_for(&p, &ins);
            let refs: Vec<&[f64]> = inputs.iter().map(Vec::as_slice).collect();
            let q = p.fuse_chains().unwrap();
            prop_assert!(map_count(&q) <= map_count(&p));
            if let Err(e) = same_bits(&p, &q, &refs) {
                return Err(TestCaseError::fail(format!("order {order}: {e}\n{p}\n{q}")));
            }
            // Random stages: a map fuses only with maps of its own label.
            let stage: Vec<u32> = (0..p.len() as u64)
                .map(|i| ((seed >> (i % 61)) & 1) as u32)
                .collect();
            let s = p.fuse_chains_in_stages(&stage).unwrap();
            // Fusion is greedy, so stages may even end with fewer maps
            // than no stages (16 against 17 of 24 in one CI case); it never
            // adds one.
            prop_assert!(
                map_count(&s) <= map_count(&p),
                "order {}: {} maps unfused, {} fused, {} fused in stages",
                order, map_count(&p), map_count(&q), map_count(&s)
            );
            if let Err(e) = same_bits(&p, &s, &refs) {
                return Err(TestCaseError::fail(format!("order {order}, stages: {e}\n{p}\n{s}")));
            }
        }
    }
}

/// A chain of two maps and a sum: the gradient is one map (the sum in its
/// loop); the HVP's two stages are one map each, the direction's map
/// reading the point's outputs, never recomputing them.
#[test]
fn drivers_fuse_map_chains_within_each_stage() {
    fn f<A: Array>(x: &A) -> optic_ad::Result<A::Scalar> {
        let y = x.map(|t| t.sin() * t);
        Ok(y.map(|u| u.exp() + u * u).sum())
    }
    let x = [0.3, -0.7, 1.1, 0.05];
    let v = [1.0, -0.5, 0.25, 2.0];
    let g = optic_ad::Gradient::array(f, &x).unwrap();
    assert_eq!(map_count(g.array_program().unwrap()), 1);
    let mut h = optic_ad::Hvp::array(f, &x).unwrap();
    let p = h.array_program().unwrap().clone();
    assert_eq!(map_count(&p), 2);
    // The map that reads the direction (input 1) reads no input 0 value
    // except through the first map's outputs, and the first map does not
    // read the direction.
    let maps: Vec<&array::ArrayOp> = p
        .ops()
        .iter()
        .filter(|o| matches!(o, array::ArrayOp::Map { .. }))
        .collect();
    let reads_input = |op: &array::ArrayOp, k: u32| match op {
        array::ArrayOp::Map { args, .. } => args
            .iter()
            .any(|a| matches!(p.ops()[a.index()], array::ArrayOp::Input(j) if j == k)),
        _ => false,
    };
    assert!(!reads_input(maps[0], 1) && reads_input(maps[1], 1));
    // Against num-dual: f(x + t v) along v, second derivative.
    h.linearize(&x).unwrap();
    let mut hv = [0.0; 4];
    h.apply(&v, &mut hv).unwrap();
    let vhv: f64 = hv.iter().zip(&v).map(|(a, b)| a * b).sum();
    let line = |t: HyperDual64| {
        let xs: Vec<HyperDual64> = x.iter().zip(&v).map(|(&xi, &vi)| t * vi + xi).collect();
        f(&Dense(xs)).unwrap()
    };
    let d = line(HyperDual64::new(0.0, 1.0, 1.0, 0.0));
    assert!((vhv - d.eps1eps2).abs() <= 1e-12 * d.eps1eps2.abs().max(1.0));
}

/// Fusion copies bodies, never simplifies across them: `(u − w)·c` where
/// `u` and `w` are the same `exp x` computed by two maps stays `∞ − ∞ =
/// NaN` (and `+0`) where simplifying would give `−0`; also when the fused
/// map is then merged with another over the same arguments.
#[test]
fn fusion_does_not_simplify_across_bodies() {
    let body = |f: &dyn Fn(&mut optic_ad::Builder, &[optic_ad::Var]) -> optic_ad::Var, n: usize| {
        let mut sb = optic_ad::Builder::new();
        let xs: Vec<optic_ad::Var> = (0..n).map(|_| sb.input()).collect();
        let y = f(&mut sb, &xs);
        Arc::new(sb.finish(&[y]).unwrap())
    };
    let mut b = array::ArrayBuilder::new();
    let (x, y) = (
        b.input(array::Shape::Vector(3)),
        b.input(array::Shape::Vector(3)),
    );
    let a1 = b.map(body(&|sb, v| sb.exp(v[0]), 1), &[x])[0];
    let a2 = b.map(body(&|sb, v| sb.exp(v[0]), 1), &[x])[0];
    let diff = |sb: &mut optic_ad::Builder, v: &[optic_ad::Var]| {
        let d = sb.sub(v[0], v[1]);
        sb.mul(d, v[2])
    };
    let m = b.map(body(&diff, 3), &[a1, a2, y])[0];
    let mm = b.map(body(&|sb, v| sb.mul(v[0], v[1]), 2), &[x, y])[0];
    let p = b.finish(&[m, mm]).unwrap();
    let q = p.fuse_chains().unwrap();
    assert!(map_count(&q) < map_count(&p), "{q}");
    for xv in [[0.3, 0.7, 1000.0], [0.3, 0.7, 1.1]] {
        let w = [2.0, -1.0, 0.5];
        if let Err(e) = same_bits(&p, &q, &[&xv, &w]) {
            panic!("{e}\n{p}\n{q}");
        }
        let out = q.eval(&[&xv, &w]).unwrap();
        assert_eq!(out[0][0].to_bits(), 0.0f64.to_bits());
        if xv[2] > 700.0 {
            assert!(out[0][2].is_nan());
        }
    }
}

/// A map whose body holds a user rule (which has no native kernel) is not
/// fused with a map without one, so the latter keeps its kernel.
#[test]
fn bodies_with_user_rules_are_not_fused() {
    struct Twice;
    impl optic_ad::ScalarRule for Twice {
        fn name(&self) -> &str {
            "twice"
        }
        fn value(&self, x: f64) -> f64 {
            2.0 * x
        }
        fn pullback(
            &self,
            b: &mut optic_ad::Builder,
            _: optic_ad::Var,
            _: optic_ad::Var,
            ct: optic_ad::Var,
        ) -> optic_ad::Var {
            b.add(ct, ct)
        }
    }
    let rule = optic_ad::CustomRule::new(Twice);
    let mut sb = optic_ad::Builder::new();
    let u = sb.input();
    let s = sb.sin(u);
    let plain = Arc::new(sb.finish(&[s]).unwrap());
    let mut sb = optic_ad::Builder::new();
    let u = sb.input();
    let t = sb.custom(&rule, &[u]);
    let ruled = Arc::new(sb.finish(&[t]).unwrap());
    let mut b = array::ArrayBuilder::new();
    let x = b.input(array::Shape::Vector(4));
    let a = b.map(plain.clone(), &[x])[0];
    let c = b.map(ruled, &[a])[0];
    let d = b.map(plain, &[c])[0];
    let p = b.finish(&[d]).unwrap();
    let q = p.fuse_chains().unwrap();
    assert_eq!(map_count(&q), 3, "{q}");
    let xv = [0.1, -2.0, 3.0, 0.5];
    same_bits(&p, &q, &[&xv]).unwrap();
    assert_eq!(q.eval(&[&xv]).unwrap()[0][1], (2.0 * (-2.0f64).sin()).sin());
}

/// A value a map computes twice (a body returning it twice, or two maps
/// over the same arguments that the builder merges) is one output, stored
/// once.
#[test]
fn equal_map_outputs_are_stored_once() {
    let mut sb = optic_ad::Builder::new();
    let (x0, x1) = (sb.input(), sb.input());
    let s = sb.sin(x0);
    let y = sb.mul(s, x1);
    let z = sb.add(x0, x1);
    let body = Arc::new(sb.finish(&[y, z, y]).unwrap());
    let mut b = array::ArrayBuilder::new();
    let (a, c) = (
        b.input(array::Shape::Vector(3)),
        b.input(array::Shape::Vector(3)),
    );
    let outs = b.map(body, &[a, c]);
    assert_eq!(outs[0], outs[2]);
    assert_ne!(outs[0], outs[1]);
    // A second map over the same arguments computing sin(x0)·x1 again:
    // merged into the first, its output is the first's.
    let mut sb = optic_ad::Builder::new();
    let (u0, u1) = (sb.input(), sb.input());
    let s = sb.sin(u0);
    let y = sb.mul(s, u1);
    let again = b.map(Arc::new(sb.finish(&[y]).unwrap()), &[a, c])[0];
    let mut sb = optic_ad::Builder::new();
    let (u0, u1) = (sb.input(), sb.input());
    let d = sb.sub(u0, u1);
    let q = b.map(Arc::new(sb.finish(&[d]).unwrap()), &[outs[1], again])[0];
    let p = b.finish(&[outs[0], q, again]).unwrap();
    assert_eq!(map_count(&p), 2, "{p}");
    let map_outputs = p
        .ops()
        .iter()
        .filter(|o| matches!(o, array::ArrayOp::MapOut(_)))
        .count();
    // The merged map's outputs are sin(x0)·x1 and x0 + x1, once each; the
    // subtraction is a map of its own.
    assert_eq!(map_outputs, 1, "{p}");
    let (u, w) = ([0.5, -1.0, 2.0], [1.5, 0.25, -3.0]);
    let out = p.eval(&[&u, &w]).unwrap();
    for i in 0..3 {
        let y = u[i].sin() * w[i];
        assert_eq!(out[0][i], y);
        assert_eq!(out[1][i], (u[i] + w[i]) - y);
        assert_eq!(out[2][i], y);
    }
}

/// Values where the sign of zero matters: a sum of two cotangents that
/// maps add in place must give the bits of `a + b`.
fn signed_values(n: usize) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(
        prop::sample::select(vec![-0.0, 0.0, 1.0, -1.0, 2.5, -0.75, f64::INFINITY]),
        n,
    )
}

/// One argument of a sum of two: map output `k` (or the input `u`, which
/// no map writes), sliced from `from`, padded at `at` to the sum's length.
#[derive(Clone, Debug)]
struct Term {
    k: usize,
    from: usize,
    at: usize,
}

fn term(n: usize) -> impl Strategy<Value = Term> {
    (0usize..3, 0..3usize, 0..3usize).prop_map(move |(k, from, at)| Term {
        k,
        from: from.min(n - 1),
        at,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Sums of two map outputs read through slices and pads (as the reverse
    /// transform accumulates cotangents), which the fused plan adds in
    /// place into the sum's buffer or the caller's slice, give the bits
    /// of `a + b`, signed zeros and borders included; also when one term
    /// is an input read in place.
    #[test]
    fn sums_added_in_place_keep_the_bits(
        (n, u, w, t0, t1, chain) in (2usize..7).prop_flat_map(|n| {
            (Just(n), signed_values(n), signed_values(n), term(n), term(n), any::<bool>())
        })
    ) {
        let mut body = optic_ad::Builder::new();
        let (x0, x1) = (body.input(), body.input());
        let y0 = body.mul(x0, x1);
        let y1 = body.sub(x0, x1);
        let body = Arc::new(body.finish(&[y0, y1]).unwrap());
        let len = n + 2;
        let mut b = array::ArrayBuilder::new();
        let (xu, xw) = (b.input(array::Shape::Vector(n)), b.input(array::Shape::Vector(n)));
        let outs = b.map(body, &[xu, xw]);
        let arg = |b: &mut array::ArrayBuilder, t: &Term| {
            let v = if t.k < 2 { outs[t.k] } else { xu };
            let s = b.slice(v, t.from, n - t.from);
            b.pad(s, t.at, len)
        };
        let (a0, a1) = (arg(&mut b, &t0), arg(&mut b, &t1));
        let mut sum = b.add(a0, a1);
        if chain {
            // A second sum of two, over the first and a fresh term.
            let a2 = arg(&mut b, &Term { k: 1 - t0.k.min(1), from: 0, at: 2 });
            sum = b.add(sum, a2);
        }
        let p = b.finish(&[sum]).unwrap();
        let refs: [&[f64]; 2] = [&u, &w];
        let mut fused = array::ArrayWorkspace::new(&p);
        let mut plain = array::ArrayWorkspace::unfused(&p);
        fused.run(&p, &refs).unwrap();
        plain.run(&p, &refs).unwrap();
        let (x, y) = (fused.output(&p, 0), plain.output(&p, 0));
        prop_assert_eq!(x.len(), y.len());
        for (a, c) in x.iter().zip(y) {
            prop_assert!(a.to_bits() == c.to_bits() || (a.is_nan() && c.is_nan()),
                "{:?} vs {:?}\n{}", x, y, p);
        }
    }
}

#[test]
fn workspace_belongs_to_its_program() {
    let x = [1.0, 2.0];
    let p = array::trace(|t: &[TArray]| Ok(t[0].sum()), &[&x]).unwrap();
    let q = array::trace(|t: &[TArray]| Ok(t[0].map(|v| v * 2.0).sum()), &[&x]).unwrap();
    let mut ws = array::ArrayWorkspace::new(&p);
    assert!(matches!(ws.run(&q, &[&x]), Err(Error::WorkspaceMismatch)));
    ws.run(&p.clone(), &[&x]).unwrap();
    assert_eq!(ws.output(&p, 0), &[3.0]);
    // Same program text, traced twice: different programs.
    let p2 = array::trace(|t: &[TArray]| Ok(t[0].sum()), &[&x]).unwrap();
    assert!(matches!(ws.run(&p2, &[&x]), Err(Error::WorkspaceMismatch)));
}

/// With the native backend, a map body is compiled once it has run 2¹⁶
/// elements; its kernel then reads the views that hold a whole block where
/// they lie and writes its outputs straight into their buffers, gathering
/// only the blocks at a view's edges. The gradient, the linearized HVP, its
/// products and the one-pass product after that equal the first run's bit
/// for bit (register code, except for bodies shared by every program, such
/// as `a + b`, that earlier cases made hot), on random programs whose views
/// start and end anywhere in a block. At least half the programs must have compiled kernels (the others have
/// only maps the executor runs without their body, such as sums of two).
#[cfg(feature = "jit")]
#[test]
fn native_maps_keep_the_bits() {
    use proptest::test_runner::{Config, TestRunner};
    let cases = 24;
    let hot = std::cell::Cell::new(0u32);
    let mut runner = TestRunner::new(Config::with_cases(cases));
    let result = runner.run(&long_recipe_point_dir(), |(r, x, v)| {
        let n = r.n;
        let f = |t: &TArray| objective(t, &r);
        let mut g = optic_ad::Gradient::array(f, &x).unwrap();
        let mut h = optic_ad::Hvp::array(f, &x).unwrap();
        let (mut g0, mut hv0, mut one0) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        let y0 = g.eval(&x, &mut g0).unwrap();
        h.linearize(&x).unwrap();
        h.apply(&v, &mut hv0).unwrap();
        h.eval(&x, &v, &mut one0).unwrap();
        let (mut g1, mut hv1, mut one1) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        let mut y1 = 0.0;
        for _ in 0..40 {
            y1 = g.eval(&x, &mut g1).unwrap();
            h.linearize(&x).unwrap();
            h.apply(&v, &mut hv1).unwrap();
            h.eval(&x, &v, &mut one1).unwrap();
        }
        if g.native_kernels().0 > 0 && h.native_kernels().0 > 0 {
            hot.set(hot.get() + 1);
        }
        prop_assert_eq!(y0.to_bits(), y1.to_bits());
        for k in 0..n {
            prop_assert_eq!(g0[k].to_bits(), g1[k].to_bits(), "gradient[{}]", k);
            prop_assert_eq!(hv0[k].to_bits(), hv1[k].to_bits(), "hvp[{}]", k);
            prop_assert_eq!(one0[k].to_bits(), one1[k].to_bits(), "one-pass hvp[{}]", k);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(
        2 * hot.get() >= cases,
        "{} of {cases} programs ran hot",
        hot.get()
    );
}

/// `array::Nested::<N>` on `p`: `call_all` at `first`, then at `inputs`
/// (one array per input of the bundle program, which has one array per
/// block here); the second run's `[y, r₁ … r_K]`, flattened.
fn staged_bundle<N>(p: &ArrayProgram, first: &[Vec<f64>], inputs: &[Vec<f64>]) -> Vec<f64>
where
    N: typenum::Unsigned
        + typenum::IsLessOrEqual<optic_ad::functor::MaxOrder, Output = typenum::True>,
{
    let mut bundle = array::Nested::<N>::new(p).unwrap();
    let mut run = |ins: &[Vec<f64>]| {
        let d: Vec<[&[f64]; 1]> = ins[1..].iter().map(|v| [v.as_slice()]).collect();
        let d: Vec<&[&[f64]]> = d.iter().map(|b| b.as_slice()).collect();
        let (y, r) = bundle.call_all(&[&ins[0]], &d).unwrap();
        y.into_iter()
            .chain(r.into_iter().flatten())
            .flatten()
            .collect::<Vec<f64>>()
    };
    run(first);
    run(inputs)
}

/// Naive `op(A) op(B)` by indices (`A` stored `ar × ac`, `B` `br × bc`).
fn naive_matmul(
    a: &[f64],
    (ar, ac): (usize, usize),
    b: &[f64],
    (br, bc): (usize, usize),
    ta: bool,
    tb: bool,
) -> Vec<f64> {
    let at = |i: usize, p: usize| if ta { a[p * ac + i] } else { a[i * ac + p] };
    let bt = |p: usize, j: usize| if tb { b[j * bc + p] } else { b[p * bc + j] };
    let (m, k) = if ta { (ac, ar) } else { (ar, ac) };
    let n = if tb { br } else { bc };
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
        }
    }
    out
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && rel_err(a, b) < 1e-13
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The rank-2 operations on `Dense<f64>` (the kernels the evaluator
    /// shares) against loops over indices, on rectangular shapes, and the
    /// traced program against both.
    #[test]
    fn matrix_operations_match_index_loops(
        (m, k, n) in (1..9usize, 0..9usize, 1..9usize),
        ta in any::<bool>(),
        tb in any::<bool>(),
        seed in prop::collection::vec(-2.0..2.0f64, 64 * 3),
    ) {
        let a = &seed[..m * k];
        let b = &seed[64..64 + k * n];
        let v = &seed[128..128 + n];
        // Stored so that op(A) is m × k and op(B) is k × n.
        let (ad, bd) = (if ta { (k, m) } else { (m, k) }, if tb { (n, k) } else { (k, n) });
        let want = naive_matmul(a, ad, b, bd, ta, tb);
        let ma = Mat::new(Dense(a.to_vec()), ad.0, ad.1).unwrap();
        let mb = Mat::new(Dense(b.to_vec()), bd.0, bd.1).unwrap();
        let c = ma.matmul_t(&mb, ta, tb).unwrap();
        prop_assert_eq!((c.rows(), c.cols()), (m, n));
        prop_assert!(close(c.data().as_slice(), &want), "{:?} vs {:?}", c, want);
        // Transpose, sums along each axis, broadcasts, products with
        // vectors and the outer product.
        let ct = c.t();
        for i in 0..m {
            for j in 0..n {
                prop_assert_eq!(ct.data().0[j * m + i], c.data().0[i * n + j]);
            }
        }
        let col_sums: Vec<f64> = (0..n).map(|j| (0..m).map(|i| want[i * n + j]).sum()).collect();
        let row_sums: Vec<f64> = (0..m).map(|i| want[i * n..(i + 1) * n].iter().sum()).collect();
        prop_assert!(close(&c.sum_axis(0).unwrap().0, &col_sums));
        prop_assert!(close(&c.sum_axis(1).unwrap().0, &row_sums));
        prop_assert!(c.sum_axis(2).is_err());
        let rows = Mat::broadcast_axis(&Dense(v.to_vec()), 0, m, n).unwrap();
        let cols = Mat::broadcast_axis(&Dense(v[..m.min(n)].to_vec()), 1, m.min(n), n).unwrap();
        for i in 0..m {
            for j in 0..n {
                prop_assert_eq!(rows.data().0[i * n + j], v[j]);
                if i < m.min(n) {
                    prop_assert_eq!(cols.data().0[i * n + j], v[i]);
                }
            }
        }
        let cv: Vec<f64> = (0..m).map(|i| (0..n).map(|j| want[i * n + j] * v[j]).sum()).collect();
        prop_assert!(close(&c.matvec(&Dense(v.to_vec())).unwrap().0, &cv));
        let u = &seed[..m];
        let uc: Vec<f64> = (0..n).map(|j| (0..m).map(|i| u[i] * want[i * n + j]).sum()).collect();
        prop_assert!(close(&c.vecmat(&Dense(u.to_vec())).unwrap().0, &uc));
        let o = Mat::outer(&Dense(u.to_vec()), &Dense(v.to_vec())).unwrap();
        for (i, ui) in u.iter().enumerate() {
            for (j, vj) in v.iter().enumerate() {
                prop_assert_eq!(o.data().0[i * n + j], ui * vj);
            }
        }
        // Traced: the same values, bit for bit, from one program.
        let p = array::trace(
            |t: &[TArray]| {
                let ma = Mat::new(t[0], ad.0, ad.1)?;
                let mb = Mat::new(t[1], bd.0, bd.1)?;
                let c = ma.matmul_t(&mb, ta, tb)?;
                Ok(vec![
                    c.clone().into_data(),
                    c.t().into_data(),
                    c.sum_axis(0)?,
                    c.sum_axis(1)?,
                    c.matvec(&t[2])?,
                    Mat::broadcast_axis(&t[2], 0, m, n)?.into_data(),
                ])
            },
            &[a, b, v],
        )
        .unwrap();
        let out = p.eval(&[a, b, v]).unwrap();
        prop_assert_eq!(&out[0], &c.data().0);
        prop_assert_eq!(&out[1], &ct.data().0);
        prop_assert_eq!(&out[2], &c.sum_axis(0).unwrap().0);
        prop_assert_eq!(&out[3], &c.sum_axis(1).unwrap().0);
        prop_assert_eq!(&out[4], &c.matvec(&Dense(v.to_vec())).unwrap().0);
        prop_assert_eq!(&out[5], &rows.data().0);
    }
}

/// `f(A) = uᵀ A v` has the gradient `u vᵀ` and `g(A) = ½ ‖A‖²_F` the
/// gradient `A`; `h(A, B) = tr(A B)` has `∂/∂A = Bᵀ` (closed forms).
#[test]
fn matrix_gradients_against_closed_forms() {
    let (u, v) = ([1.5, -2.0, 0.5], [0.25, 3.0]);
    let a: Vec<f64> = (0..6).map(|i| 0.1 * i as f64 - 0.2).collect();
    let g = crate::common::array_gradient(
        |t| {
            let a = Mat::new(*t, 3, 2)?;
            let (u, v) = (TArray::constant(&u.into()), TArray::constant(&v.into()));
            a.vecmat(&u)?.dot(&v)
        },
        &a,
    )
    .unwrap();
    let want: Vec<f64> = (0..3)
        .flat_map(|i| (0..2).map(move |j| u[i] * v[j]))
        .collect();
    assert_eq!(g, want);
    let g =
        crate::common::array_gradient(|t| Ok(Mat::new(*t, 2, 3)?.map(|x| x * x * 0.5).sum()), &a)
            .unwrap();
    assert_eq!(g, a);
    // tr(A B) for A (2 × 3) and B (3 × 2), both in one input vector: the
    // gradient in A is Bᵀ and in B is Aᵀ.
    let ab: Vec<f64> = (0..12).map(|i| (i as f64 * 0.7).sin()).collect();
    let g = crate::common::array_gradient(
        |t| {
            let a = Mat::new(t.slice(0, 6)?, 2, 3)?;
            let b = Mat::new(t.slice(6, 6)?, 3, 2)?;
            let c = a.matmul(&b)?;
            Ok(c.get(0, 0)? + c.get(1, 1)?)
        },
        &ab,
    )
    .unwrap();
    let (a, b) = (&ab[..6], &ab[6..]);
    for i in 0..2 {
        for j in 0..3 {
            assert_eq!(g[i * 3 + j], b[j * 2 + i], "∂/∂A[{i},{j}]");
            assert_eq!(g[6 + j * 2 + i], a[i * 3 + j], "∂/∂B[{j},{i}]");
        }
    }
}

#[test]
fn matrix_shape_errors_are_errors() {
    let x = [1.0; 6];
    let e = crate::common::array_gradient(|t| Ok(Mat::new(*t, 4, 2)?.sum()), &x);
    assert!(matches!(e, Err(Error::LengthMismatch { .. })), "{e:?}");
    let e = crate::common::array_gradient(
        |t| {
            let a = Mat::new(*t, 2, 3)?;
            Ok(a.matmul(&a)?.sum())
        },
        &x,
    );
    assert!(
        matches!(
            e,
            Err(Error::LengthMismatch {
                expected: 3,
                got: 2,
                ..
            })
        ),
        "{e:?}"
    );
    let e = crate::common::array_gradient(
        |t| Ok(Mat::new(*t, 2, 3)?.matvec(&t.slice(0, 2)?)?.sum()),
        &x,
    );
    assert!(matches!(e, Err(Error::LengthMismatch { .. })), "{e:?}");
    let e = crate::common::array_gradient(|t| Ok(Mat::new(*t, 2, 3)?.sum_axis(2)?.sum()), &x);
    assert!(matches!(e, Err(Error::IndexOutOfRange { .. })), "{e:?}");
    let e = crate::common::array_gradient(|t| Ok(Mat::broadcast_axis(t, 1, 2, 3)?.sum()), &x);
    assert!(matches!(e, Err(Error::LengthMismatch { .. })), "{e:?}");
    let e = crate::common::array_gradient(|t| Mat::new(*t, 2, 3)?.get(1, 3), &x);
    assert!(matches!(e, Err(Error::IndexOutOfRange { .. })), "{e:?}");
    let e = crate::common::array_gradient(|t| Ok(Mat::new(*t, 2, 3)?.row(2)?.sum()), &x);
    assert!(matches!(e, Err(Error::IndexOutOfRange { .. })), "{e:?}");
    let e = Mat::new(Dense(vec![0.0; 1]), usize::MAX, 2);
    assert!(matches!(e, Err(Error::IndexOutOfRange { .. })), "{e:?}");
}

// ---------- Taylor mode on array programs ----------

/// `dᵏ/dtᵏ` to Taylor coefficients (`÷ k!`).
fn coefficients(d: &[f64]) -> Vec<f64> {
    let mut fact = 1.0;
    d.iter()
        .enumerate()
        .map(|(k, &x)| {
            fact *= k.max(1) as f64;
            x / fact
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Jets of degree 6 through the array program (maps by the scalar
    /// Taylor functor of their bodies, linear instructions per
    /// coefficient, traced matrix products by Cauchy products) against the
    /// scalar trace's Taylor mode on the same function, and orders 0–3
    /// against num-dual's `Dual3_64`. Compared as Taylor coefficients
    /// (derivatives ÷ k!), which stay of order 1.
    #[test]
    fn array_taylor_matches_scalar_taylor_and_num_dual((r, x, v) in recipe_point_dir()) {
        let d = crate::common::array_taylor::<U6>(|t| objective(t, &r), &x, &v).unwrap();
        let d_scalar =
            optic_ad::taylor::<U6, _, _>(|t: &[Tracer]| objective(&dense(t), &r), &x, &v).unwrap();
        let (c, c_scalar) = (coefficients(&d), coefficients(&d_scalar));
        prop_assert!(rel_err(&c, &c_scalar) < TOL, "array vs scalar Taylor: {c:?} {c_scalar:?}");
        let d_dual = directional3_num_dual(&r, &x, &v);
        prop_assert!(rel_err(&d[..4], &d_dual) < TOL, "vs num-dual: {d:?} {d_dual:?}");
        // Trace once, evaluate many: a second point and direction through
        // the same compiled program.
        let mut dir = optic_ad::Directional::array(|t| objective(t, &r), &x, 3).unwrap();
        let y: Vec<f64> = x.iter().map(|a| a * 0.9 + 0.05).collect();
        let w: Vec<f64> = v.iter().map(|a| 0.5 - a).collect();
        let mut out = [0.0; 4];
        dir.eval(&y, &w, &mut out).unwrap();
        let want = directional3_num_dual(&r, &y, &w);
        prop_assert!(rel_err(&out, &want) < TOL, "second point: {out:?} {want:?}");
    }
}

/// Closed forms through traced matrix products: for a square `A` and a
/// direction `V`, `tr((A + tV)²) = tr A² + 2t tr(AV) + t² tr V²` and
/// `d³/dt³ tr((A + tV)³) = 6 tr V³`, every higher derivative zero.
#[test]
fn array_taylor_of_matrix_powers_against_closed_forms() {
    let n = 3;
    let a: Vec<f64> = (0..n * n).map(|i| (i as f64 * 0.9).sin()).collect();
    let v: Vec<f64> = (0..n * n).map(|i| (i as f64 * 0.4).cos()).collect();
    let mul = |x: &[f64], y: &[f64]| -> Vec<f64> {
        (0..n * n)
            .map(|ij| (0..n).map(|k| x[ij / n * n + k] * y[k * n + ij % n]).sum())
            .collect()
    };
    let tr = |x: &[f64]| (0..n).map(|i| x[i * n + i]).sum::<f64>();
    let trace_of = |m: &Mat<TArray>| -> optic_ad::Result<TScalar> {
        let mut s = m.get(0, 0)?;
        for i in 1..n {
            s += m.get(i, i)?;
        }
        Ok(s)
    };
    let d2 = crate::common::array_taylor::<U4>(
        |t| {
            let m = Mat::new(*t, n, n)?;
            trace_of(&m.matmul(&m)?)
        },
        &a,
        &v,
    )
    .unwrap();
    let want2 = [
        tr(&mul(&a, &a)),
        2.0 * tr(&mul(&a, &v)),
        2.0 * tr(&mul(&v, &v)),
        0.0,
        0.0,
    ];
    assert!(rel_err(&d2, &want2) < 1e-14, "{d2:?} {want2:?}");
    let d3 = crate::common::array_taylor::<U5>(
        |t| {
            let m = Mat::new(*t, n, n)?;
            trace_of(&m.matmul(&m)?.matmul(&m)?)
        },
        &a,
        &v,
    )
    .unwrap();
    let v3 = mul(&mul(&v, &v), &v);
    assert!((d3[3] - 6.0 * tr(&v3)).abs() < 1e-13, "{d3:?}");
    assert_eq!((d3[4], d3[5]), (0.0, 0.0));
    // A product with constant data stays of degree 1 in t: only the
    // first derivative survives.
    let c: Arc<[f64]> = v.clone().into();
    let d1 = crate::common::array_taylor::<U3>(
        |t| {
            let m = Mat::new(*t, n, n)?;
            let k = Mat::new(TArray::constant(&c), n, n)?;
            trace_of(&m.matmul(&k)?)
        },
        &a,
        &v,
    )
    .unwrap();
    assert!((d1[1] - tr(&mul(&v, &v))).abs() < 1e-14, "{d1:?}");
    assert_eq!((d1[2], d1[3]), (0.0, 0.0));
}

/// `f(x) = Σ sin xᵢ` at order 20: `Σ vᵢ²⁰ sin⁽²⁰⁾ xᵢ = Σ vᵢ²⁰ sin xᵢ`
/// (closed form), for 10⁴ elements and a program of a handful of
/// instructions.
#[test]
fn array_taylor_high_order_closed_form() {
    let n = 10_000;
    let x: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
    let v: Vec<f64> = (0..n)
        .map(|i| 1.0 + 0.1 * (i as f64 * 0.11).cos())
        .collect();
    let mut d = optic_ad::Directional::array(|t| Ok(t.map(|s| s.sin()).sum()), &x, 20).unwrap();
    assert!(d.array_program().unwrap().program().len() < 5);
    let mut out = vec![0.0; 21];
    d.eval(&x, &v, &mut out).unwrap();
    for k in [0usize, 1, 2, 7, 20] {
        let want: f64 = x
            .iter()
            .zip(&v)
            .map(|(&a, &b)| {
                b.powi(k as i32)
                    * match k % 4 {
                        0 => a.sin(),
                        1 => a.cos(),
                        2 => -a.sin(),
                        _ => -a.cos(),
                    }
            })
            .sum();
        let scale = want.abs().max(1.0);
        assert!(
            (out[k] - want).abs() < 1e-11 * scale,
            "order {k}: {} vs {want}",
            out[k]
        );
    }
}

#[test]
fn array_taylor_errors() {
    let f = |t: &TArray| Ok(t.map(|s| s * s).sum());
    let x = [1.0, 2.0];
    assert!(matches!(
        crate::common::array_taylor::<U3>(f, &x, &[1.0]),
        Err(Error::LengthMismatch { .. })
    ));
    let mut d = optic_ad::Directional::array(f, &x, 3).unwrap();
    let mut out = [7.0; 4];
    assert!(matches!(
        d.eval(&x, &x, &mut out[..3]),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        d.eval(&[1.0], &[1.0], &mut out),
        Err(Error::LengthMismatch { .. })
    ));
    assert_eq!(out, [7.0; 4]);
    assert!(matches!(
        optic_ad::Directional::array(f, &x, 171),
        Err(Error::OrderTooHigh { .. })
    ));
    // Also for a program without maps (no scalar Taylor program to refuse).
    let linear = array::trace(|t: &[TArray]| Ok(t[0].sum()), &[&x]).unwrap();
    assert!(matches!(
        TaylorProgram::new(&linear, 171),
        Err(Error::OrderTooHigh { .. })
    ));
    // A guard in the program: the sum was positive at the trace point.
    // Where it fails, the driver traces again (the other branch, −s).
    let g = |t: &TArray| {
        let s = t.sum();
        Ok(if s > 0.0 { s * s } else { -s })
    };
    let mut d = optic_ad::Directional::array(g, &[1.0, 1.0], 2).unwrap();
    d.eval(&[-1.0, -1.0], &[1.0, 1.0], &mut out[..3]).unwrap();
    // s(t) = −2 + 2t: −s = 2 − 2t.
    assert_eq!(out[..3], [2.0, -2.0, 0.0]);
    d.eval(&[1.0, 2.0], &[1.0, 1.0], &mut out[..3]).unwrap();
    // s(t) = 3 + 2t: s² = 9 + 12t + 4t², second derivative 8.
    assert_eq!(out[..3], [9.0, 12.0, 8.0]);
    // A guard in a map body must hold in every element: re-tracing cannot
    // make it, and the error is returned with `out` untouched.
    let body = |t: &TArray| Ok(t.map(|u| if u > 0.0 { u } else { -u }).sum());
    let mut d = optic_ad::Directional::array(body, &[1.0, 1.0], 2).unwrap();
    out = [7.0; 4];
    assert!(matches!(
        d.eval(&[-1.0, 1.0], &[1.0, 1.0], &mut out[..3]),
        Err(Error::GuardFailed { .. })
    ));
    assert_eq!(out, [7.0; 4]);
    // The raw program: one jet per input, each (K + 1)·len.
    let p = array::trace(|t: &[TArray]| Ok(t[0].sum()), &[&x]).unwrap();
    let mut t = TaylorProgram::new(&p, 2).unwrap();
    assert!(matches!(
        t.eval(&[&[1.0; 5]]),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(t.eval(&[]), Err(Error::LengthMismatch { .. })));
    t.eval(&[&[1.0, 2.0, 0.5, 0.5, 0.0, 0.0]]).unwrap();
    assert_eq!(t.output(0), &[3.0, 1.0, 0.0]);
    assert!(t.output(1).is_empty());
}

/// `Σ tanh(√(eᵃ + b²)) / (1 + a²)` over the neighbour pairs `(a, b)`.
fn smooth_pairs<A: Array>(x: &A) -> optic_ad::Result<A::Scalar> {
    let n = x.len();
    let (a, b) = (x.slice(0, n - 1)?, x.slice(1, n - 1)?);
    Ok(
        a.map2(&b, |a, b| (a.exp() + b * b).sqrt().tanh() / (a * a + 1.0))?
            .sum(),
    )
}

/// The jets of a smooth map body run as one program of its Taylor
/// coefficients (∂⃗ applied K times) at degrees 1 … 8; at every degree
/// they equal, to rounding, the scalar trace's recurrences on the same
/// function (`Directional::new`, an independent path: another trace,
/// another algorithm), and above 8 the body's recurrences run again.
#[test]
fn compiled_map_jets_agree_with_the_scalar_recurrences() {
    let n = 7;
    let x: Vec<f64> = (0..n).map(|i| (i as f64 * 0.9).sin() * 0.8).collect();
    let v: Vec<f64> = (0..n).map(|i| 0.5 - (i as f64 * 0.4).cos()).collect();
    for order in 1..=9 {
        let mut d = optic_ad::Directional::array(smooth_pairs, &x, order).unwrap();
        let compiled = d.array_program().unwrap().compiled_maps();
        assert_eq!(compiled, (usize::from(order <= 8), 1), "order {order}");
        let mut s =
            optic_ad::Directional::new(|t: &[Tracer]| smooth_pairs(&dense(t)), &x, order).unwrap();
        let (mut got, mut want) = (vec![0.0; order + 1], vec![0.0; order + 1]);
        d.eval(&x, &v, &mut got).unwrap();
        s.eval(&x, &v, &mut want).unwrap();
        assert_eq!(got[0].to_bits(), want[0].to_bits(), "the value");
        let (c, c_scalar) = (coefficients(&got), coefficients(&want));
        assert!(
            rel_err(&c, &c_scalar) < 1e-12,
            "order {order}: {c:?} vs {c_scalar:?}"
        );
    }
}

/// `Directional` plans its jets for lines `x + t v` (no coefficient above
/// the first); its Taylor program, evaluated on its own with a curve,
/// plans again and gives what a fresh one gives.
#[test]
fn a_directional_taylor_program_takes_curves_too() {
    let f = |t: &TArray| Ok(t.map(|s| s.sin() * s.exp()).sum());
    let d = optic_ad::Directional::array(f, &[0.3, -0.2], 3).unwrap();
    let mut c = d.array_program().unwrap().clone();
    let mut fresh = TaylorProgram::new(c.program(), 3).unwrap();
    let jet = [0.3, -0.2, 1.0, 0.5, 0.25, 0.125, 0.0, 0.0];
    c.eval(&[&jet]).unwrap();
    fresh.eval(&[&jet]).unwrap();
    assert_eq!(c.output(0), fresh.output(0));
    assert!(c.output(0)[2] != 0.0);
}

/// `e^{−x²}` at `x = ∞`: the coefficient program's `e^{−x²} · (−2x ẋ)`
/// is `0 · ∞ = NaN`, where the recurrences, whose structural zeros are
/// never multiplied, give `0` in every coefficient. That element is taken
/// from the recurrences; the other, `e^{−(½ + t)²}`, is the program's.
#[test]
fn compiled_map_jets_fall_back_to_the_recurrences_where_not_finite() {
    let f = |t: &TArray| Ok(t.map(|s| (-(s * s)).exp()).sum());
    let (x, v) = ([f64::INFINITY, 0.5], [1.0, 1.0]);
    let mut d = optic_ad::Directional::array(f, &x, 3).unwrap();
    assert_eq!(d.array_program().unwrap().compiled_maps(), (1, 1));
    let mut out = [0.0; 4];
    d.eval(&x, &v, &mut out).unwrap();
    let scalar = optic_ad::taylor::<U3, _, _>(
        |t: &[Tracer]| (-(t[0] * t[0])).exp() + (-(t[1] * t[1])).exp(),
        &x,
        &v,
    )
    .unwrap();
    assert!(out.iter().all(|c| c.is_finite()), "{out:?} vs {scalar:?}");
    // The closed form of the finite element: e^{−u²} with u = ½ + t has
    // derivatives e^{−u²}·(1, −2u, 4u² − 2, −8u³ + 12u) at t = 0.
    let (u, e) = (0.5f64, (-0.25f64).exp());
    let want = [
        e,
        -2.0 * u * e,
        (4.0 * u * u - 2.0) * e,
        (-8.0 * u * u * u + 12.0 * u) * e,
    ];
    assert!(rel_err(&out, &want) < 1e-15, "{out:?} vs {want:?}");
    assert!(rel_err(&out, &scalar) < 1e-15, "{out:?} vs {scalar:?}");
}

/// A branch on an array value: `f(x) = Σ xᵢ²` where `Σ xᵢ > 0`, else
/// `Σ sin xᵢ`. ∇f = 2x or cos x, H v = 2v or −sin(x)·v.
fn branchy_sum(x: &TArray) -> optic_ad::Result<TScalar> {
    if x.sum() > 0.0 {
        Ok(x.map(|t| t * t).sum())
    } else {
        Ok(x.map(|t| t.sin()).sum())
    }
}

/// The array drivers re-trace where a guard fails, as the scalar ones do
/// (`guards_fail_and_drivers_retrace` in `tests/drivers.rs`): the raw
/// program reports the failed guard; `Gradient::eval`, `Hvp::linearize`
/// (then `apply`) and `Hvp::eval` give the other branch's derivatives,
/// against their closed forms, and come back when the sign changes again.
#[test]
fn array_guards_fail_and_drivers_retrace() {
    let (pos, neg) = ([1.0, 2.0, 0.5], [-1.0, -2.0, 0.5]);
    let v = [0.3, -0.7, 1.1];
    let p = array::trace(|xs: &[TArray]| branchy_sum(&xs[0]), &[&pos]).unwrap();
    assert!(matches!(p.eval(&[&neg]), Err(Error::GuardFailed { .. })));

    let mut g = optic_ad::Gradient::array(branchy_sum, &pos).unwrap();
    let mut grad = [0.0; 3];
    for x in [neg, pos, neg] {
        let y = g.eval(&x, &mut grad).unwrap();
        let positive = x.iter().sum::<f64>() > 0.0;
        for k in 0..3 {
            let want = if positive { 2.0 * x[k] } else { x[k].cos() };
            assert_eq!(grad[k], want, "x = {x:?}, k = {k}");
        }
        let want_y: f64 = if positive {
            x.iter().map(|t| t * t).sum()
        } else {
            x.iter().map(|t| t.sin()).sum()
        };
        approx::assert_relative_eq!(y, want_y, max_relative = 1e-15);
    }

    let mut h = optic_ad::Hvp::array(branchy_sum, &pos).unwrap();
    let (mut hv, mut one) = ([0.0; 3], [0.0; 3]);
    for x in [neg, pos, neg] {
        let positive = x.iter().sum::<f64>() > 0.0;
        h.linearize(&x).unwrap();
        h.apply(&v, &mut hv).unwrap();
        h.eval(&x, &v, &mut one).unwrap();
        for k in 0..3 {
            let want = if positive {
                2.0 * v[k]
            } else {
                -x[k].sin() * v[k]
            };
            approx::assert_relative_eq!(hv[k], want, max_relative = 1e-15);
            approx::assert_relative_eq!(one[k], want, max_relative = 1e-15);
            let grad = if positive { 2.0 * x[k] } else { x[k].cos() };
            assert_eq!(h.gradient()[k], grad);
        }
    }

    // The one-shot drivers trace at the point they are given.
    assert_eq!(
        crate::common::array_gradient(branchy_sum, &neg).unwrap(),
        neg.map(f64::cos).to_vec()
    );
    let hv = crate::common::array_hvp(branchy_sum, &pos, &v).unwrap();
    assert_eq!(hv, v.map(|t| 2.0 * t).to_vec());
}

/// A comparison inside a map body is recorded once, for the body traced at
/// an arbitrary point (0.5), and must hold in every element: where an
/// element takes the other branch, re-tracing cannot help (the body is
/// traced at 0.5 again), and the drivers return the failed guard rather
/// than a wrong derivative; where all take the traced branch, they run.
#[test]
fn array_guards_inside_maps_are_reported() {
    let f = |x: &TArray| Ok(x.map(|t| if t > 0.0 { t * t } else { -t }).sum());
    let mut g = optic_ad::Gradient::array(f, &[1.0, 2.0]).unwrap();
    let mut grad = [0.0; 2];
    for x in [[1.0, -2.0], [-1.0, -2.0]] {
        assert!(matches!(
            g.eval(&x, &mut grad),
            Err(Error::GuardFailed { .. })
        ));
    }
    g.eval(&[3.0, 0.25], &mut grad).unwrap();
    assert_eq!(grad, [6.0, 0.5]);
    let mut h = optic_ad::Hvp::array(f, &[1.0, 2.0]).unwrap();
    assert!(matches!(
        h.linearize(&[1.0, -2.0]),
        Err(Error::GuardFailed { .. })
    ));
    let mut hv = [0.0; 2];
    assert!(matches!(
        h.eval(&[-1.0, -2.0], &[1.0, 1.0], &mut hv),
        Err(Error::GuardFailed { .. })
    ));
}

/// The maximum follows JAX's convention at ties (`jax.lax.reduce_max`'s
/// JVP: the tangent is the mean of the tangents of the tied elements):
/// closed forms for the gradient, the Hessian of `(max x)²`, and the
/// Taylor coefficients of `(max x)³`, on both sides of a tie; the traced
/// and the native `Dense` versions agree with each other and with
/// num-dual; an empty array is an error.
#[test]
fn max_follows_jax_at_ties() {
    // A tie between elements 1 and 3: each gets half.
    let x = [0.5, 2.0, -1.0, 2.0];
    let g = crate::common::array_gradient(|x| x.max(), &x).unwrap();
    assert_eq!(g, vec![0.0, 0.5, 0.0, 0.5]);
    // Off the tie, all of it.
    let g = crate::common::array_gradient(|x| x.max(), &[0.5, 2.0, -1.0, 1.5]).unwrap();
    assert_eq!(g, vec![0.0, 1.0, 0.0, 0.0]);
    // f = (max x)²: ∇f = 2m e, H = 2 e eᵀ with e the tie indicator over
    // the count; at the tie e = (0, ½, 0, ½).
    let f = |x: &TArray| -> optic_ad::Result<TScalar> {
        let m = x.max()?;
        Ok(m * m)
    };
    let v = [1.0, 3.0, -2.0, 1.0];
    let hv = crate::common::array_hvp(f, &x, &v).unwrap();
    let e_dot_v = 0.5 * 3.0 + 0.5 * 1.0;
    let want = [0.0, e_dot_v, 0.0, e_dot_v];
    assert!(rel_err(&hv, &want) < TOL, "{hv:?} vs {want:?}");
    // Native Dense against the trace, and num-dual through Dense.
    let dense = |x: &[f64]| Dense::new(x.to_vec()).max().unwrap();
    let traced = array::trace(|x: &[TArray]| x[0].max(), &[&x]).unwrap();
    assert_eq!(traced.eval(&[&x]).unwrap()[0][0], dense(&x));
    let xd: Vec<Dual64> = x.iter().zip(&v).map(|(&a, &b)| Dual64::new(a, b)).collect();
    let d = Dense::new(xd).max().unwrap();
    assert_eq!((d.re, d.eps), (2.0, 2.0));
    // (max x)³ along v at a unique maximum m = xᵢ: 3m²vᵢ, 6m vᵢ², 6vᵢ³.
    let cube = |x: &TArray| -> optic_ad::Result<TScalar> {
        let m = x.max()?;
        Ok(m * m * m)
    };
    let x1 = [0.5, 2.0, -1.0, 1.5];
    let d = directional3(cube, &x1, &v).unwrap();
    let want = [8.0, 3.0 * 4.0 * 3.0, 6.0 * 2.0 * 9.0, 6.0 * 27.0];
    assert!(rel_err(&d, &want) < TOL, "{d:?} vs {want:?}");
    // Empty arrays have no maximum.
    assert!(matches!(
        array::trace(|x: &[TArray]| x[0].max(), &[&[]]),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(Dense::new(Vec::<f64>::new()).max().is_err());
}

/// One compiled `Gradient` and one `Hvp` for both traces: the array
/// function's drivers are the scalar ones' types, with the same methods.
/// Checked against the closed form of f(x) = Σ xᵢ³ + (Σ xᵢ)², whose
/// gradient is 3xᵢ² + 2Σx and whose Hessian is diag(6x) + 2·𝟙𝟙ᵀ.
#[test]
fn one_gradient_and_one_hvp_type_for_both_traces() {
    fn f_array(x: &TArray) -> optic_ad::Result<TScalar> {
        let s = x.sum();
        Ok(x.map(|t| t * t * t).sum() + s * s)
    }
    fn f_scalar<T: Real>(x: &[T]) -> T {
        let s = x.iter().fold(T::cst(0.0), |a, &b| a + b);
        x.iter().fold(T::cst(0.0), |a, &b| a + b * b * b) + s * s
    }
    let closed_grad = |x: &[f64]| -> Vec<f64> {
        let s: f64 = x.iter().sum();
        x.iter().map(|t| 3.0 * t * t + 2.0 * s).collect()
    };
    let closed_hv = |x: &[f64], v: &[f64]| -> Vec<f64> {
        let sv: f64 = v.iter().sum();
        x.iter()
            .zip(v)
            .map(|(t, w)| 6.0 * t * w + 2.0 * sv)
            .collect()
    };
    let x0 = [0.5, -1.0, 2.0];
    let (x1, v) = ([1.5, 0.25, -0.75], [1.0, -2.0, 0.5]);
    // The same type, `optic_ad::Gradient<_>`, from either constructor.
    let mut ga: optic_ad::Gradient<optic_ad::OnArray<_>> =
        optic_ad::Gradient::array(f_array, &x0).unwrap();
    let mut gs = optic_ad::Gradient::new(f_scalar, &x0).unwrap();
    assert!(ga.array_program().is_some() && ga.program().is_none());
    assert!(gs.array_program().is_none() && gs.program().is_some());
    let (mut a, mut b) = ([0.0; 3], [0.0; 3]);
    let ya = ga.eval(&x1, &mut a).unwrap();
    let ys = gs.eval(&x1, &mut b).unwrap();
    assert!((ya - ys).abs() < 1e-13 * ys.abs());
    for ((p, q), c) in a.iter().zip(&b).zip(closed_grad(&x1)) {
        assert!((p - c).abs() < 1e-13 * c.abs() && (q - c).abs() < 1e-13 * c.abs());
    }
    // `eval_at` at `f64` serves the array function; other scalars are
    // refused with a clear error, not a wrong answer.
    let (y_at, g_at) = ga.eval_at(&x1).unwrap();
    assert_eq!((y_at, g_at.as_slice()), (ya, &a[..]));
    let duals: Vec<Dual64> = x1.iter().map(|&t| Dual64::from(t)).collect();
    assert!(matches!(ga.eval_at(&duals), Err(Error::Unsupported(_))));
    assert!(gs.eval_at(&duals).is_ok());

    // One check, generic over the function kind, for both `Hvp`s.
    fn check_hvp<F: optic_ad::LeafFunction>(
        mut h: optic_ad::Hvp<F>,
        (x0, x1, v): (&[f64], &[f64], &[f64]),
        closed_hv: impl Fn(&[f64], &[f64]) -> Vec<f64>,
    ) {
        // Before any linearize: no value, no gradient, no product.
        assert!(h.value().is_nan() && h.gradient().is_empty());
        h.linearize(x0).unwrap();
        let (y0, g0) = (h.value(), h.gradient().to_vec());
        assert_eq!(g0.len(), 3);
        // One pass at another point: the closed form, and the linearized
        // point stays where it was.
        let mut one = [0.0; 3];
        h.eval(x1, v, &mut one).unwrap();
        for (p, c) in one.iter().zip(closed_hv(x1, v)) {
            assert!((p - c).abs() < 1e-12 * (1.0 + c.abs()), "{one:?}");
        }
        assert_eq!((h.value(), h.gradient()), (y0, &g0[..]));
        let mut split = [0.0; 3];
        h.apply(v, &mut split).unwrap();
        for (p, c) in split.iter().zip(closed_hv(x0, v)) {
            assert!((p - c).abs() < 1e-12 * (1.0 + c.abs()), "{split:?}");
        }
    }
    let points = (&x0[..], &x1[..], &v[..]);
    check_hvp(
        optic_ad::Hvp::array(f_array, &x0).unwrap(),
        points,
        closed_hv,
    );
    check_hvp(
        optic_ad::Hvp::new(f_scalar, &x0).unwrap(),
        points,
        closed_hv,
    );
    // Empty points are refused by both constructors.
    assert!(matches!(
        optic_ad::Gradient::array(f_array, &[]),
        Err(Error::EmptyInput(_))
    ));
    assert!(matches!(
        optic_ad::Hvp::array(f_array, &[]),
        Err(Error::EmptyInput(_))
    ));
}

/// A re-trace that fails leaves the programs and the linearized point as
/// they were (`eval` across a guard into a region where `f` errors), for
/// an array function and a scalar one; and a cloned driver evaluates on
/// its own buffers. f(x) = Σ xᵢ³ where Σ x > 0 (H = diag(6x)); elsewhere
/// `f` returns an error.
#[test]
fn a_failed_retrace_keeps_the_linearized_point_and_clones_are_independent() {
    fn f_array(x: &TArray) -> optic_ad::Result<TScalar> {
        if x.sum() > 0.0 {
            Ok(x.map(|t| t * t * t).sum())
        } else {
            Err(Error::Unsupported("no value where Σx ≤ 0"))
        }
    }
    fn f_scalar(x: &[Tracer]) -> optic_ad::Result<Tracer> {
        let s = x[0] + x[1];
        if s > 0.0 {
            Ok(x[0] * x[0] * x[0] + x[1] * x[1] * x[1])
        } else {
            Err(Error::Unsupported("no value where Σx ≤ 0"))
        }
    }
    fn check<F: optic_ad::LeafFunction + Clone>(mut h: optic_ad::Hvp<F>) {
        h.linearize(&[1.0, 2.0]).unwrap();
        let mut out = [0.0; 2];
        let e = h.eval(&[-1.0, -2.0], &[1.0, 1.0], &mut out);
        assert!(matches!(e, Err(Error::Unsupported(_))), "{e:?}");
        // The point of the last linearize still holds.
        assert_eq!((h.value(), h.gradient()), (9.0, &[3.0, 12.0][..]));
        h.apply(&[1.0, 0.0], &mut out).unwrap();
        assert_eq!(out, [6.0, 0.0]);
        // A clone moves its own point only.
        let mut c = h.clone();
        c.linearize(&[2.0, 1.0]).unwrap();
        c.apply(&[1.0, 0.0], &mut out).unwrap();
        assert_eq!(out, [12.0, 0.0]);
        h.apply(&[1.0, 0.0], &mut out).unwrap();
        assert_eq!(out, [6.0, 0.0]);
    }
    check(optic_ad::Hvp::array(f_array, &[1.0, 2.0]).unwrap());
    check(optic_ad::Hvp::new(f_scalar, &[1.0, 2.0]).unwrap());
    let mut g = optic_ad::Gradient::array(f_array, &[1.0, 2.0]).unwrap();
    let mut c = g.clone();
    let mut grad = [0.0; 2];
    assert!(g.eval(&[-1.0, -2.0], &mut grad).is_err());
    assert_eq!(c.eval(&[1.0, 1.0], &mut grad).unwrap(), 2.0);
    assert_eq!(grad, [3.0, 3.0]);
}

/// Maps of at least `ArrayWorkspace::PARALLEL_MIN` elements run on all of
/// rayon's threads, each thread on whole segments of 2¹⁴ elements, and
/// their sums add the segments' partial sums in order: the value, gradient
/// and HVPs of Rosenbrock at n = 2 · PARALLEL_MIN + 37 (the last segment
/// short, n mod 4 = 1) have the same bits in pools of 1, 2 and 3 threads,
/// and the function's value the bits of native `Dense<f64>` code.
#[test]
fn threads_do_not_change_the_bits() {
    let n = 2 * ArrayWorkspace::PARALLEL_MIN + 37;
    let x: Vec<f64> = (0..n)
        .map(|i| 0.5 + 0.4 * ((i as f64) * 0.37).sin())
        .collect();
    let v: Vec<f64> = (0..n).map(|i| ((i as f64) * 0.11).cos()).collect();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut g = optic_ad::Gradient::array(rosenbrock, &x).unwrap();
            let mut grad = vec![0.0; n];
            g.eval(&x, &mut grad).unwrap();
            let mut h = optic_ad::Hvp::array(rosenbrock, &x).unwrap();
            let (mut hv, mut hv_one) = (vec![0.0; n], vec![0.0; n]);
            h.linearize(&x).unwrap();
            h.apply(&v, &mut hv).unwrap();
            h.eval(&x, &v, &mut hv_one).unwrap();
            // The HVP's program on a workspace of its own: how many
            // threads its maps ran on.
            let p = h.array_program().unwrap();
            let mut ws = ArrayWorkspace::new(p);
            ws.run(p, &[&x, &v]).unwrap();
            let value = array::trace(|t: &[TArray]| rosenbrock(&t[0]), &[&x])
                .unwrap()
                .eval(&[&x])
                .unwrap()[0][0];
            (
                value,
                bits(&grad),
                bits(&hv),
                bits(&hv_one),
                ws.threads_used(),
            )
        })
    };
    let one = run(1);
    assert_eq!(one.4, 1);
    for threads in [2, 3] {
        let many = run(threads);
        assert_eq!(many.4, threads);
        assert_eq!(
            one.0.to_bits(),
            many.0.to_bits(),
            "value, {threads} threads"
        );
        assert!(one.1 == many.1, "gradient, {threads} threads");
        assert!(one.2 == many.2, "hvp, {threads} threads");
        assert!(one.3 == many.3, "one-pass hvp, {threads} threads");
    }
    let native = rosenbrock(&Dense::new(x.clone())).unwrap();
    assert_eq!(one.0.to_bits(), native.to_bits());
    // And the derivatives are Rosenbrock's (closed form).
    let (g_ref, hv_ref) = rosenbrock_closed(&x, &v);
    let grad: Vec<f64> = one.1.iter().map(|b| f64::from_bits(*b)).collect();
    let hv: Vec<f64> = one.2.iter().map(|b| f64::from_bits(*b)).collect();
    assert!(rel_err(&grad, &g_ref) < 1e-13, "{}", rel_err(&grad, &g_ref));
    assert!(rel_err(&hv, &hv_ref) < 1e-13, "{}", rel_err(&hv, &hv_ref));
}

/// Recipes without matrices on PARALLEL_MIN … PARALLEL_MIN + 3000
/// elements (maps long enough to run on several threads), with a point and
/// a direction.
fn long_threaded_recipe() -> impl Strategy<Value = (Recipe, Vec<f64>, Vec<f64>)> {
    (PARALLEL_FROM..PARALLEL_FROM + 3000).prop_flat_map(|n| {
        (
            prop::collection::vec(vector_step(n), 1..5).prop_map(move |steps| Recipe { n, steps }),
            prop::collection::vec(-1.5..1.5f64, n),
            prop::collection::vec(-1.0..1.0f64, n),
        )
    })
}

const PARALLEL_FROM: usize = ArrayWorkspace::PARALLEL_MIN;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// Random programs long enough to run on several threads, and their
    /// derivatives to order 2, have the same bits on one thread and on
    /// three (rayon pools of each size).
    #[test]
    fn threads_keep_the_bits_on_random_programs((r, x, v) in long_threaded_recipe()) {
        let pools = [1, 3].map(|t| rayon::ThreadPoolBuilder::new().num_threads(t).build().unwrap());
        let mut p = program_of(&r);
        for order in 0..3 {
            if order > 0 {
                p = reverse_joint(&forward(&p).unwrap()).unwrap();
            }
            let inputs = inputs_for(&p, &[x.clone(), v.clone()]);
            let refs: Vec<&[f64]> = inputs.iter().map(Vec::as_slice).collect();
            let [one, three] = [0, 1].map(|k| pools[k].install(|| p.eval(&refs)));
            match (one, three) {
                (Ok(a), Ok(b)) => {
                    if let Err(e) = same_outputs(&a, &b) {
                        return Err(TestCaseError::fail(format!("order {order}: {e}")));
                    }
                }
                (a, b) => prop_assert_eq!(a.err(), b.err(), "order {}", order),
            }
        }
    }
}

#[cfg(feature = "serde")]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// An array program written with serde and read back prints the same
    /// and evaluates to the same bits, on random programs and their
    /// derivatives up to order 3 (`reverse_joint ∘ forward`, which holds
    /// map bodies, slices, gathers, matrix products, …).
    #[test]
    fn array_programs_read_back_from_json_with_the_same_bits(
        (rf, _rg, ins) in two_recipes_and_inputs(),
    ) {
        let mut p = program_of(&rf);
        for order in 0..4 {
            if order > 0 {
                p = reverse_joint(&forward(&p).unwrap()).unwrap();
            }
            let json = serde_json::to_string(&p).unwrap();
            let q: ArrayProgram = serde_json::from_str(&json)
                .map_err(|e| TestCaseError::fail(format!("order {order}: {e}\n{p}")))?;
            prop_assert_eq!(p.to_string(), q.to_string(), "order {}", order);
            let inputs = inputs_for(&p, &ins);
            // Also with +∞, −∞ or NaN at one place of each input (where
            // a body simplified again would differ: x − x is NaN at ∞).
            let special = |k: usize, c: f64| -> Vec<Vec<f64>> {
                let mut v = inputs.clone();
                for x in v.iter_mut().filter(|x| !x.is_empty()) {
                    let at = k % x.len();
                    x[at] = c;
                }
                v
            };
            let specials = [
                special(0, f64::INFINITY),
                special(1, f64::NEG_INFINITY),
                special(2, f64::NAN),
            ];
            for at in std::iter::once(&inputs).chain(&specials) {
                let refs: Vec<&[f64]> = at.iter().map(Vec::as_slice).collect();
                // The same bits, or the same error (a guard that fails at
                // a NaN fails in both).
                let same = match (p.eval(&refs), q.eval(&refs)) {
                    (Ok(a), Ok(b)) => same_outputs(&a, &b),
                    (Err(a), Err(b)) if a == b => Ok(()),
                    (a, b) => Err(format!("{a:?} vs {b:?}")),
                };
                if let Err(e) = same {
                    return Err(TestCaseError::fail(format!("order {order}: {e}\n{p}")));
                }
            }
        }
    }
}
