//! Loops as primitives: [`fold`] runs a body a given number of times on a
//! carry. On plain numbers and num-dual numbers it is a plain loop; on the
//! array trace, and under the compiled scalar drivers
//! ([`crate::Gradient`], [`crate::Hvp`]), it is recorded as one instruction
//! that carries the body's program
//! ([`array::prims::Scan`](crate::array::prims::Scan)), so the trace, its
//! derivatives and their build time do not grow with the number of steps.

use crate::array::Array;
use crate::differentiable::{leaves_of, rebuild_like, Carry};
use crate::error::{Error, Result};

/// `steps` applications of `body` to the carry `init`:
/// `body(body(… body(init)))`.
///
/// On `f64` and num-dual numbers this is a plain loop. On the array
/// trace ([`crate::Gradient::array`], [`crate::Hvp::array`],
/// [`crate::array::trace`], …) the body is traced once, on fresh scalars;
/// the values of the enclosing trace it reads (parameters captured by the
/// closure) become its constants, and the loop is one instruction whose
/// derivatives are loops again: the gradient keeps the `K × steps` carries
/// (or, beyond 2²⁰ values, snapshots: [`Checkpoints::Auto`]) and runs the
/// loop backwards over them, recomputing each step's inner values from its
/// carry, and second and higher derivatives
/// ([`crate::Hvp::array`], [`crate::array::nest`], Taylor mode) apply
/// the same rules to those loops. The scalar drivers [`crate::Gradient`],
/// [`crate::Hvp`], [`crate::gradient`], [`crate::value_and_gradient`],
/// [`crate::hvp`], [`crate::hessian`], [`crate::taylor`],
/// [`crate::derivative`], [`crate::d3`], [`crate::jvp`], [`crate::vjp`],
/// [`crate::jacobian`], [`crate::pullback`] and [`crate::Derivatives`]
/// (at `f64` points) take code
/// with loops there
/// too: a loop met on their first (scalar) trace sends the function to the
/// array trace, with its scalar tracers standing for the array trace's
/// scalars, so `Gradient::new(|p| loss(p, n), &p0)` builds one loop
/// instruction whatever `n` (see [`crate::Gradient`] for how, and what it
/// asks of the function). Elsewhere on the scalar trace ([`crate::Tracer`]:
/// [`crate::trace`], [`crate::derivative_with_error`], and traces nested
/// in others)
/// the loop is unrolled,
/// one copy of the body per step; so is a loop whose body compares or reads
/// values, which the drivers above then trace that way.
///
/// Shapes: the carry holds `K ≥ 1` scalars (a [`Carry`]: any
/// [`Differentiable`](crate::Differentiable) value, such as a scalar,
/// `[T; K]`, `GenericArray<T, N>`, a tuple, a `Vec` or a struct deriving
/// `Differentiable`; `init` fixes its structure).
///
/// # Errors
///
/// On the array trace: [`Error::Unsupported`] if the body compares values
/// (a guard inside a loop), reads a value (`primal`, `{:?}`) or reads an
/// array of the enclosing trace; [`Error::ForeignTracer`] for a value of
/// an unrelated trace. In the first trace of a scalar driver that takes
/// loops to the array trace, in a build with `panic = "abort"`:
/// [`Error::Unsupported`], which the function passes on with `?` (with
/// unwinding panics the driver stops that trace itself). Never on plain
/// numbers.
///
/// # Example
///
/// The logistic map `c ↦ r c (1 − c)` iterated 1000 times, and its
/// derivative in `r` through the loop, against num-dual:
///
/// ```
/// use approx::assert_relative_eq;
/// use num_dual::Dual64;
/// use optic_ad::{fold, gradient, Real, Result};
///
/// fn orbit<T: Real>(r: T, steps: usize) -> Result<T> {
///     let [c] = fold(steps, [T::cst(0.3)], |[c]: [T; 1]| [r * c * (-c + 1.0)])?;
///     Ok(c)
/// }
/// let r = 2.9;
/// // Traced once as a loop of one instruction, however many steps.
/// let g = gradient(|x| orbit(x[0], 1000), &[r]).unwrap();
/// let d = orbit(Dual64::new(r, 1.0), 1000).unwrap();
/// assert_relative_eq!(g[0], d.eps, max_relative = 1e-9);
/// ```
pub fn fold<C: Carry>(steps: usize, init: C, body: impl Fn(C) -> C) -> Result<C> {
    fold_with(steps, init, Checkpoints::Auto, body)
}

/// How the gradient of a [`fold`] on the array trace keeps the loop's
/// carries, its residual: all of them, or a few snapshots from which the
/// others are recomputed by binomial checkpointing (A. Griewank and A.
/// Walther, "Evaluating Derivatives", 2nd ed., ch. 12, the `revolve`
/// schedule: with `s` snapshots and `N` steps the reverse sweep recomputes
/// `r·N − β(s + 2, r − 1)` forward steps, the fewest possible, where
/// `β(c, r) = (c + r)!/(c! r!)` and `r` is the least with
/// `β(s + 1, r) ≥ N`).
///
/// Derivatives of a checkpointed pullback are checkpointed loops again
/// (the HVP's ∂⃗ over ∂⃖ and ∂⃖ over ∂⃖ run the binomial schedule on
/// the carry and its tangent, `2K` values per snapshot, `2^(d−1) K` at
/// derivative order `d`), so the memory of gradients, HVPs and higher
/// derivatives through the loop does not grow with the number of steps;
/// Taylor mode over a program that holds a checkpointed pullback (the
/// jets of a gradient) keeps its carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Checkpoints {
    /// All `K × N` carries while they are at most 2²⁰ values (8 MiB);
    /// beyond, binomial checkpointing with the fewest snapshots for which
    /// `r = 2` (`β(s + 1, 2) ≥ N`, about `√(2N)` snapshots): the reverse
    /// sweep then runs about two forward passes more than the stored
    /// schedule's none, in `O(K √N)` memory.
    #[default]
    Auto,
    /// Every carry: `K × N` values, no recomputation.
    All,
    /// Binomial checkpointing with at most this many carries kept besides
    /// the first (at least 1).
    Binomial(usize),
}

impl Checkpoints {
    /// The snapshots this policy keeps for a carry of `k` values over
    /// `steps` steps (besides the first carry), or `None` for all carries.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::Checkpoints;
    ///
    /// assert_eq!(Checkpoints::Auto.snapshots(2, 1000), None); // 2000 values
    /// assert_eq!(Checkpoints::Auto.snapshots(2, 1_000_000), Some(1412));
    /// assert_eq!(Checkpoints::Binomial(8).snapshots(2, 1000), Some(8));
    /// ```
    pub fn snapshots(self, k: usize, steps: usize) -> Option<usize> {
        match self {
            Checkpoints::All => None,
            Checkpoints::Binomial(s) => Some(s.max(1)),
            Checkpoints::Auto if k.saturating_mul(steps) <= 1 << 20 => None,
            Checkpoints::Auto => {
                // The least s with β(s + 1, 2) = (s + 3)(s + 2)/2 ≥ N: from
                // s ≈ √(2N), corrected by the few steps rounding leaves.
                let beta = |s: usize| (s as u128 + 3) * (s as u128 + 2) / 2;
                let n = steps as u128;
                let mut s = ((2.0 * steps as f64).sqrt() as usize).max(1);
                while s > 1 && beta(s - 1) >= n {
                    s -= 1;
                }
                while beta(s) < n {
                    s += 1;
                }
                Some(s)
            }
        }
    }
}

/// [`fold`] with the residual of its gradient chosen by `checkpoints`
/// (on the array trace; elsewhere the same plain loop).
///
/// # Errors
///
/// As [`fold`].
///
/// # Example
///
/// Ten snapshots for 10⁴ steps: the same gradient as with every carry kept.
///
/// ```
/// use optic_ad::{fold_with, gradient, Checkpoints, Real, Result};
///
/// fn orbit<T: Real>(r: T, c: Checkpoints) -> Result<T> {
///     let [x] = fold_with(10_000, [T::cst(0.3)], c, |[x]: [T; 1]| [r * x * (-x + 1.0)])?;
///     Ok(x)
/// }
/// let all = gradient(|x| orbit(x[0], Checkpoints::All), &[2.9]).unwrap();
/// let ten = gradient(|x| orbit(x[0], Checkpoints::Binomial(10)), &[2.9]).unwrap();
/// assert_eq!(all, ten); // the same arithmetic on the same carries
/// ```
pub fn fold_with<C: Carry>(
    steps: usize,
    init: C,
    checkpoints: Checkpoints,
    body: impl Fn(C) -> C,
) -> Result<C> {
    refuse_traced_data::<C>()?;
    let step = |c: &[C::Scalar]| -> Vec<C::Scalar> {
        match rebuild_like(&init, c) {
            Some(a) => leaves_of(&body(a)),
            None => c.to_vec(),
        }
    };
    let values = leaves_of(&init);
    let snapshots = checkpoints.snapshots(values.len(), steps);
    if let Some(r) = <C::Scalar as crate::rules::private::Internal>::fold_traced(
        steps, &values, snapshots, &step,
    ) {
        return from_loop("fold: carry", &init, r?);
    }
    let mut c = init;
    for _ in 0..steps {
        c = body(c);
    }
    Ok(c)
}

/// A carry with data fields on a number type whose loops are traced once
/// (the array trace) is refused: the traced body could not change them.
fn refuse_traced_data<C: Carry>() -> Result<()> {
    if C::HAS_DATA && <C::Scalar as crate::rules::private::Internal>::traces_loops() {
        return Err(Error::Unsupported(
            "a loop carry with data fields (#[differentiable(skip)]) on the array trace, \
             whose loop body is traced once: keep the data outside the carry",
        ));
    }
    Ok(())
}

/// The carry of a traced loop's values, in `init`'s structure.
fn from_loop<C: Carry>(what: &'static str, init: &C, out: Vec<C::Scalar>) -> Result<C> {
    rebuild_like(init, &out).ok_or(Error::LengthMismatch {
        what,
        expected: init.leaf_count(),
        got: out.len(),
    })
}

/// A bounded loop whose trip count depends on the data: from `c = init`,
/// `c = body(c)` while `cond(&c)` holds, at most `max_steps` times (a
/// Newton solve to a tolerance, steps until a threshold). The final carry;
/// a loop that reaches `max_steps` stops there (check `cond` on the
/// result to tell).
///
/// Its derivatives are those of the path taken, as a branch's are (the
/// trip count is piecewise constant in the point; where it jumps the
/// function is not differentiable).
///
/// On `f64` and num-dual numbers this is a plain loop. On the array trace
/// the trip count `n` is read at the trace point and the loop is one
/// [`Scan`](crate::array::prims::Scan) instruction of `n` steps of the
/// body, traced once, differentiated as [`fold`] is; each comparison of
/// `cond` (and of `body`) is kept per step, and a guard checks that at
/// every step it comes out as it did at the trace point, and that `cond`
/// fails at the last carry. At a point where the trip count differs the
/// guard fails ([`Error::GuardFailed`]) and the array drivers
/// ([`crate::Gradient::array`], [`crate::Hvp::array`], …) re-trace there:
/// a derivative is never that of another trip count; [`crate::Gradient`]
/// and [`crate::Hvp`] take it to the array trace as they do [`fold`].
/// Elsewhere on the scalar trace ([`crate::Tracer`]) the loop is unrolled,
/// each evaluation of `cond` a guard.
///
/// Cost on the array trace: the comparisons' operands are stored per step
/// (two values each), and the condition's path must be the same at every
/// step where it holds (`x > a && y > b` is; `x > a || y > b` switching
/// from one to the other between steps is refused).
///
/// Shapes: the carry holds `K ≥ 1` scalars (a [`Carry`]).
///
/// # Errors
///
/// On the array trace: [`Error::Unsupported`] if a comparison of `cond`
/// or `body` comes out differently at different steps at the trace point
/// (a different branch), or for a `while_loop` inside another loop's body;
/// [`Error::EmptyInput`] for an empty carry; those of [`fold`]. Never on
/// plain numbers.
///
/// # Example
///
/// Newton's method for `√a`, `x ← (x + a/x)/2` until the residual
/// `|x² − a|` is below 10⁻¹², and its derivative in `a`, `1/(2√a)`:
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{gradient, while_loop, Real, Result};
///
/// fn sqrt<T: Real>(a: T) -> Result<T> {
///     let [x] = while_loop(100, [a], |[x]| (*x * *x - a).abs() > 1e-12, |[x]: [T; 1]| {
///         [(x + a / x) * 0.5]
///     })?;
///     Ok(x)
/// }
/// assert_relative_eq!(sqrt(2.0).unwrap(), 2f64.sqrt(), max_relative = 1e-15);
/// let g = gradient(|x| sqrt(x[0]), &[2.0]).unwrap();
/// assert_relative_eq!(g[0], 0.5 / 2f64.sqrt(), max_relative = 1e-12);
/// ```
pub fn while_loop<C: Carry>(
    max_steps: usize,
    init: C,
    cond: impl Fn(&C) -> bool,
    body: impl Fn(C) -> C,
) -> Result<C> {
    while_loop_with(max_steps, init, Checkpoints::Auto, cond, body)
}

/// [`while_loop`] with the residual of its derivatives chosen by
/// `checkpoints` for the trip count it takes (on the array trace;
/// elsewhere the same plain loop), as [`fold_with`].
///
/// # Errors
///
/// As [`while_loop`].
///
/// # Example
///
/// The Newton iteration of [`while_loop`]'s example, its HVP with one
/// snapshot and with every carry kept: the same bits.
///
/// ```
/// use optic_ad::{hvp, while_loop_with, Checkpoints, Real, Result};
///
/// fn root<T: Real>(a: T, c: Checkpoints) -> Result<T> {
///     let [x] = while_loop_with(100, [a], c, |[x]| (*x * *x - a).abs() > 1e-12, |[x]: [T; 1]| {
///         [(x + a / x) * 0.5]
///     })?;
///     Ok(x * x.sin())
/// }
/// let hv = |c| hvp(|x| root(x[0], c), &[7.0], &[1.0]).unwrap();
/// assert_eq!(hv(Checkpoints::All), hv(Checkpoints::Binomial(1)));
/// ```
pub fn while_loop_with<C: Carry>(
    max_steps: usize,
    init: C,
    checkpoints: Checkpoints,
    cond: impl Fn(&C) -> bool,
    body: impl Fn(C) -> C,
) -> Result<C> {
    refuse_traced_data::<C>()?;
    let test = |c: &[C::Scalar]| rebuild_like(&init, c).is_some_and(|a| cond(&a));
    let step = |c: &[C::Scalar]| -> Vec<C::Scalar> {
        rebuild_like(&init, c).map_or_else(|| c.to_vec(), |a| leaves_of(&body(a)))
    };
    let values = leaves_of(&init);
    // The snapshots for the trip count the loop takes.
    let snapshots = |n: usize| checkpoints.snapshots(values.len(), n);
    if let Some(r) = <C::Scalar as crate::rules::private::Internal>::while_traced(
        max_steps, &values, &snapshots, &test, &step,
    ) {
        return from_loop("while_loop: carry", &init, r?);
    }
    let mut c = init;
    for _ in 0..max_steps {
        if !cond(&c) {
            break;
        }
        c = body(c);
    }
    Ok(c)
}

/// A loop over the elements of `xs` that threads a carry and emits one
/// output per element: `(c, yᵢ) = body(c, xᵢ)` for `i = 0, 1, …`, from
/// `c = init`; the final carry and the outputs `y` (as long as `xs`).
/// `jax.lax.scan` with one sequence in and one out.
///
/// On [`Dense`](crate::array::Dense) arrays a plain loop (of `f64`,
/// num-dual numbers or scalar tracers, which unroll it); on the array
/// trace one loop instruction, differentiated as [`fold`] is (the
/// gradient keeps the carries or checkpoints, per [`Checkpoints::Auto`];
/// the elements' cotangents are the reversed loop's per-step outputs).
///
/// Shapes: `xs` has `N` elements, the result's array `N`; the carry holds
/// `K ≥ 1` scalars (a [`Carry`]).
///
/// # Errors
///
/// [`Error::EmptyInput`] for a carry of no values (a loop with nothing to
/// carry is a `map`); on the array trace, those of [`fold`].
///
/// # Example
///
/// An exponentially weighted moving average, `c ← 0.9 c + 0.1 x`, whose
/// outputs are summed; its gradient in the data is the sum of the weights
/// each `xᵢ` gets, `0.1 Σ_{j ≥ i} 0.9^{j−i}`:
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::array::Array;
/// use optic_ad::{scan, Gradient, Real, Result};
///
/// fn ewma_sum<A: Array>(xs: &A) -> Result<A::Scalar> {
///     let zero = A::Scalar::cst(0.0);
///     let (_, ys) = scan(xs, [zero], |[c]: [A::Scalar; 1], x| {
///         let c = c * 0.9 + x * 0.1;
///         ([c], c)
///     })?;
///     Ok(ys.sum())
/// }
/// let x = [1.0, 2.0, 3.0, 4.0];
/// let (_, g) = Gradient::array(ewma_sum, &x).unwrap().eval_at(&x).unwrap();
/// for (i, gi) in g.iter().enumerate() {
///     let want: f64 = (i..4).map(|j| 0.1 * 0.9_f64.powi((j - i) as i32)).sum();
///     assert_relative_eq!(*gi, want, max_relative = 1e-14);
/// }
/// ```
pub fn scan<A: Array, C: Carry<Scalar = A::Scalar>>(
    xs: &A,
    init: C,
    body: impl Fn(C, A::Scalar) -> (C, A::Scalar),
) -> Result<(C, A)> {
    scan_with(xs, init, Checkpoints::Auto, body)
}

/// [`scan`] with the residual of its derivatives chosen by `checkpoints`
/// (on the array trace; elsewhere the same plain loop), as [`fold_with`].
///
/// # Errors
///
/// As [`scan`].
///
/// # Example
///
/// The moving average of [`scan`]'s example over 500 elements, its HVP
/// with 4 snapshots and with every carry kept: the same arithmetic on the
/// same carries, so the same bits.
///
/// ```
/// use optic_ad::array::Array;
/// use optic_ad::{scan_with, Checkpoints, Hvp, Real, Result};
///
/// fn soft_sum<A: Array>(xs: &A, c: Checkpoints) -> Result<A::Scalar> {
///     let zero = A::Scalar::cst(0.0);
///     let (_, ys) = scan_with(xs, [zero], c, |[c]: [A::Scalar; 1], x| {
///         let c = c * 0.9 + x.tanh() * 0.1;
///         ([c], c * c)
///     })?;
///     Ok(ys.sum())
/// }
/// let x: Vec<f64> = (0..500).map(|i| (i as f64 * 0.1).sin()).collect();
/// let v: Vec<f64> = (0..500).map(|i| (i as f64 * 0.7).cos()).collect();
/// let hv = |c| Hvp::array(|x| soft_sum(x, c), &x).unwrap().hvp_at(&x, &v).unwrap();
/// assert_eq!(hv(Checkpoints::All), hv(Checkpoints::Binomial(4)));
/// ```
pub fn scan_with<A: Array, C: Carry<Scalar = A::Scalar>>(
    xs: &A,
    init: C,
    checkpoints: Checkpoints,
    body: impl Fn(C, A::Scalar) -> (C, A::Scalar),
) -> Result<(C, A)> {
    if C::HAS_DATA {
        // The step is run on the carry's leaves, rebuilt around `init`.
        return Err(Error::Unsupported(
            "a scan carry with data fields (#[differentiable(skip)]): keep the data outside the carry",
        ));
    }
    let values = leaves_of(&init);
    let k = values.len();
    if k == 0 {
        return Err(Error::EmptyInput("scan: carry"));
    }
    let step = |v: &[A::Scalar]| -> Vec<A::Scalar> {
        match rebuild_like(&init, &v[..k.min(v.len())]) {
            Some(c) => {
                let (c, y) = body(c, v[v.len() - 1]);
                let mut out = leaves_of(&c);
                out.push(y);
                out
            }
            None => v.to_vec(),
        }
    };
    let snapshots = checkpoints.snapshots(k, xs.len());
    let (carry, ys) = xs.scan_dyn(&values, snapshots, &step)?;
    Ok((from_loop("scan: carry", &init, carry)?, ys))
}
