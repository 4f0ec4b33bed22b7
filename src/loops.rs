//! Loops as primitives: [`fold`] runs a body a given number of times on a
//! carry. On plain numbers and num-dual numbers it is a plain loop; on the
//! array trace it is recorded as one instruction that carries the body's
//! program ([`array::prims::Scan`](crate::array::prims::Scan)), so the
//! trace, its derivatives and their build time do not grow with the
//! number of steps.

use crate::error::{Error, Result};
use crate::real::Real;

/// `steps` applications of `body` to the carry `init`:
/// `body(body(… body(init)))`.
///
/// On `f64` and num-dual numbers this is a plain loop. On the array
/// trace ([`crate::array::Gradient`], [`crate::array::Hvp`],
/// [`crate::array::trace`], …) the body is traced once, on fresh scalars;
/// the values of the enclosing trace it reads (parameters captured by the
/// closure) become its constants, and the loop is one instruction whose
/// derivatives are loops again: the gradient keeps the `K × steps` carries
/// and runs the loop backwards over them, recomputing each step's inner
/// values from its carry, and second and higher derivatives
/// ([`crate::array::Hvp`], [`crate::array::nest`], Taylor mode) apply
/// the same rules to those loops. On the scalar trace ([`crate::Tracer`]:
/// [`crate::gradient`], [`crate::Gradient`], …) the loop is unrolled, one
/// copy of the body per step.
///
/// Shapes: the carry is `[T; K]` with `K ≥ 1`.
///
/// # Errors
///
/// On the array trace: [`Error::Unsupported`] if the body compares values
/// (a guard inside a loop) or reads an array of the enclosing trace;
/// [`Error::ForeignTracer`] for a value of an unrelated trace. Never on
/// plain numbers.
///
/// # Example
///
/// The logistic map `c ↦ r c (1 − c)` iterated 1000 times, and its
/// derivative in `r` through the loop, against num-dual:
///
/// ```
/// use approx::assert_relative_eq;
/// use num_dual::Dual64;
/// use optic_ad::array::{self, Array};
/// use optic_ad::{fold, Real, Result};
///
/// fn orbit<T: Real>(r: T, steps: usize) -> Result<T> {
///     let [c] = fold(steps, [T::cst(0.3)], |[c]: [T; 1]| [r * c * (-c + 1.0)])?;
///     Ok(c)
/// }
/// let r = 2.9;
/// // Traced once as a loop of one instruction, however many steps.
/// let g = array::gradient(|x| orbit(x.get(0)?, 1000), &[r]).unwrap();
/// let d = orbit(Dual64::new(r, 1.0), 1000).unwrap();
/// assert_relative_eq!(g[0], d.eps, max_relative = 1e-9);
/// ```
pub fn fold<T: Real, const K: usize>(
    steps: usize,
    init: [T; K],
    body: impl Fn([T; K]) -> [T; K],
) -> Result<[T; K]> {
    let step = |c: &[T]| -> Vec<T> {
        match <[T; K]>::try_from(c) {
            Ok(a) => body(a).to_vec(),
            Err(_) => c.to_vec(),
        }
    };
    if let Some(r) = T::fold_traced(steps, &init, &step) {
        let out = r?;
        let n = out.len();
        return <[T; K]>::try_from(out).map_err(|_| Error::LengthMismatch {
            what: "fold: carry",
            expected: K,
            got: n,
        });
    }
    let mut c = init;
    for _ in 0..steps {
        c = body(c);
    }
    Ok(c)
}
