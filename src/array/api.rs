//! The user-facing array API: one trait, [`Array`], that user code is
//! generic over, implemented by plain vectors of any [`Real`] ([`Dense`])
//! and by traced arrays ([`TArray`](super::TArray)).

use std::sync::Arc;

use super::ir::Matrix;
use super::kernels::{
    axis_len, broadcast_axis_into, matmul_into, matrix_len, matvec_dims, sum4, sum_axis_into,
    transpose_into, MatMulDims, SUM_START,
};
use crate::error::{check_len, Error, Result};
use crate::real::Real;

/// Indices into a vector, shared by reference count (for
/// [`Array::gather`] and [`Array::scatter_add`]).
///
/// # Example
///
/// ```
/// use optic_ad::array::Indices;
///
/// let idx = Indices::new(&[2, 0, 2]);
/// assert_eq!(idx.len(), 3);
/// assert_eq!(idx.as_slice(), &[2, 0, 2]);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Indices {
    pub(crate) idx: Arc<[u32]>,
    /// One more than the largest index (0 for none), found once here, so
    /// that tracing a gather or scatter-add checks its indices in O(1).
    pub(crate) bound: usize,
}

impl Indices {
    /// Indices from `usize`s. An index above `u32::MAX` becomes
    /// `u32::MAX`, which every use reports as out of range.
    pub fn new(idx: &[usize]) -> Indices {
        let idx: Arc<[u32]> = idx
            .iter()
            .map(|&i| u32::try_from(i).unwrap_or(u32::MAX))
            .collect();
        let bound = super::prims::index_bound(&idx);
        Indices { idx, bound }
    }

    /// Number of indices.
    pub fn len(&self) -> usize {
        self.idx.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.idx.is_empty()
    }

    /// The indices.
    pub fn as_slice(&self) -> &[u32] {
        &self.idx
    }

    /// The first index at or above `len`, if any (O(1) when there is none).
    pub(crate) fn first_outside(&self, len: usize) -> Option<usize> {
        if self.bound <= len {
            return None;
        }
        self.idx.iter().map(|&i| i as usize).find(|&i| i >= len)
    }
}

/// A one-dimensional array that user code is written against, once, and
/// that runs as plain vectors of any [`Real`] ([`Dense<f64>`] natively,
/// [`Dense<Dual64>`](num_dual::Dual64) in forward mode,
/// [`Dense<Tracer>`](crate::Tracer) as a scalar trace) and as a traced
/// array ([`TArray`](super::TArray)), which records one instruction per array operation,
/// whatever the length.
///
/// The operations follow NumPy and JAX: `map` (elementwise with a scalar
/// body), `sum`, `dot`, `slice`, `gather`, `scatter_add`, `matvec`
/// (`M @ v`) and `vecmat` (`v @ M`, that is `Mᵀ v`). Scalars
/// ([`Array::Scalar`]) are [`Real`], so scalar and array code mix in one
/// function.
///
/// Map bodies take [`Array::Elem`]s. On a [`TArray`](super::TArray) the body is traced
/// once as a scalar program; a comparison inside it becomes a guard that
/// every element must keep (evaluation returns
/// [`Error::GuardFailed`] where one does not), so write branches in bodies
/// with [`Real::select`], `max`, `min` or `abs`, which are branch-free.
///
/// # Errors
///
/// Operations that combine arrays check their shapes and return
/// [`Error::ShapeMismatch`], [`Error::LengthMismatch`] or
/// [`Error::IndexOutOfRange`].
///
/// # Example
///
/// The Rosenbrock function, `Σᵢ 100 (xᵢ₊₁ − xᵢ²)² + (1 − xᵢ)²`:
///
/// ```
/// use optic_ad::array::{Array, Dense};
/// use optic_ad::Real;
///
/// fn rosenbrock<A: Array>(x: &A) -> optic_ad::Result<A::Scalar> {
///     let n = x.len();
///     let (a, b) = (x.slice(0, n - 1)?, x.slice(1, n - 1)?);
///     let terms = a.map2(&b, |a, b| {
///         let t = b - a * a;
///         let u = -a + 1.0;
///         t * t * 100.0 + u * u
///     })?;
///     Ok(terms.sum())
/// }
/// let f = rosenbrock(&Dense::new(vec![1.0, 1.0, 1.0])).unwrap();
/// assert_eq!(f, 0.0);
/// let f = rosenbrock(&Dense::new(vec![0.0_f64, 0.0])).unwrap();
/// assert_eq!(f, 1.0);
/// ```
pub trait Array: Clone + std::fmt::Debug + Sized {
    /// A scalar in this array's world (the result of `sum`).
    type Scalar: Real;
    /// An element inside a map body.
    type Elem: Real;

    /// Number of elements.
    fn len(&self) -> usize;

    /// Whether there are no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `out[i] = f(self[i])`.
    fn map(&self, f: impl Fn(Self::Elem) -> Self::Elem) -> Self;

    /// `out[i] = f(self[i], b[i])`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if the lengths differ.
    fn map2(&self, b: &Self, f: impl Fn(Self::Elem, Self::Elem) -> Self::Elem) -> Result<Self>;

    /// `out[i] = f(self[i], b[i], c[i])`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if the lengths differ.
    fn map3(
        &self,
        b: &Self,
        c: &Self,
        f: impl Fn(Self::Elem, Self::Elem, Self::Elem) -> Self::Elem,
    ) -> Result<Self>;

    /// `out[i] = f(&[self[i], others[0][i], others[1][i], …])`: a map over
    /// any number of arrays of one length (for one to three, [`Array::map`],
    /// [`Array::map2`] and [`Array::map3`] read better). `f` receives
    /// `1 + others.len()` elements, in that order.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if the lengths differ.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::array::{Array, Dense};
    ///
    /// let (a, b, c, d) = (Dense(vec![1.0, 2.0]), Dense(vec![3.0, 4.0]), Dense(vec![5.0, 6.0]), Dense(vec![7.0, 8.0]));
    /// let s = a.map_n(&[&b, &c, &d], |x| x[0] * x[1] + x[2] * x[3]).unwrap();
    /// assert_eq!(s.0, vec![38.0, 56.0]);
    /// ```
    fn map_n(&self, others: &[&Self], f: impl Fn(&[Self::Elem]) -> Self::Elem) -> Result<Self>;

    /// `out[i] = f(self[i], s)`: a scalar parameter broadcast to every
    /// element (the way to use a [`Array::Scalar`] inside a body).
    fn map_with(&self, s: Self::Scalar, f: impl Fn(Self::Elem, Self::Elem) -> Self::Elem) -> Self;

    /// The sum of the elements: `+0` for an empty array, the element itself
    /// (`−0` included) for one element.
    fn sum(&self) -> Self::Scalar;

    /// `Σᵢ self[i] b[i]`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if the lengths differ.
    fn dot(&self, b: &Self) -> Result<Self::Scalar> {
        Ok(self.map2(b, |x, y| x * y)?.sum())
    }

    /// The prefix sums `outᵢ = Σ_{j ≤ i} selfⱼ` (NumPy's `cumsum`), of
    /// the same length. Linear: its pullback is the prefix sum of the
    /// cotangent taken from the end.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::array::{Array, Dense};
    /// use optic_ad::Gradient;
    ///
    /// assert_eq!(Dense::new(vec![1.0, 2.0, 3.0]).cumsum().as_slice(), &[1.0, 3.0, 6.0]);
    /// // d/dxⱼ Σᵢ (cumsum x)ᵢ = n − j.
    /// let x = [0.5, 0.1, 0.2];
    /// let mut g = Gradient::array(|x| Ok(x.cumsum().sum()), &x).unwrap();
    /// assert_eq!(g.eval_at(&x).unwrap().1, vec![3.0, 2.0, 1.0]);
    /// ```
    fn cumsum(&self) -> Self;

    /// The largest element, a scalar (`jnp.max`). At a tie the derivative
    /// is shared equally among the tied elements (JAX's convention: the
    /// tangent is the mean of their tangents). NaN elements are ignored,
    /// as by `f64::max`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] for an empty array.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::array::Array;
    /// use optic_ad::Gradient;
    ///
    /// // Two elements tie for the maximum: each gets half the gradient.
    /// let x = [0.5, 2.0, -1.0, 2.0];
    /// let mut g = Gradient::array(|x| x.max(), &x).unwrap();
    /// assert_eq!(g.eval_at(&x).unwrap().1, vec![0.0, 0.5, 0.0, 0.5]);
    /// ```
    fn max(&self) -> Result<Self::Scalar>;

    /// Elements `start .. start + len`.
    ///
    /// # Errors
    ///
    /// [`Error::IndexOutOfRange`] if `start + len > self.len()`.
    fn slice(&self, start: usize, len: usize) -> Result<Self>;

    /// Element `i`, as a scalar.
    ///
    /// # Errors
    ///
    /// [`Error::IndexOutOfRange`] if `i >= self.len()`.
    fn get(&self, i: usize) -> Result<Self::Scalar> {
        Ok(self.slice(i, 1)?.sum())
    }

    /// `out[k] = self[idx[k]]`.
    ///
    /// # Errors
    ///
    /// [`Error::IndexOutOfRange`] for an index `>= self.len()`.
    fn gather(&self, idx: &Indices) -> Result<Self>;

    /// `out[idx[k]] += self[k]` into `len` zeros: the transpose of
    /// [`Array::gather`].
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if `idx.len() != self.len()`;
    /// [`Error::IndexOutOfRange`] for an index `>= len`.
    fn scatter_add(&self, idx: &Indices, len: usize) -> Result<Self>;

    /// `M v` for a constant matrix (`v` has `m.cols()` elements; the result
    /// `m.rows()`).
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if `v.len() != m.cols()`.
    fn matvec(m: &Arc<Matrix>, v: &Self) -> Result<Self>;

    /// `Mᵀ v`, that is `v @ M` (`v` has `m.rows()` elements; the result
    /// `m.cols()`).
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if `v.len() != m.rows()`.
    fn vecmat(m: &Arc<Matrix>, v: &Self) -> Result<Self>;

    /// `len` copies of a scalar.
    ///
    /// # Errors
    ///
    /// [`Error::AllocationFailed`] where `len` elements cannot be allocated
    /// ([`Dense`]; a [`TArray`](super::TArray) records the fill and
    /// allocates nothing until it is evaluated, where the executor refuses
    /// it the same way, and a sum of a fill needs no memory at all).
    fn fill(s: Self::Scalar, len: usize) -> Result<Self>;

    /// Constant data.
    fn constant(data: &Arc<[f64]>) -> Self;

    /// `self` followed by `b`.
    fn concat(&self, b: &Self) -> Self;

    /// The matrix product `op(A) op(B)` of the row-major matrices held
    /// flat in `self` (`A`) and `b` (`B`), with the dimensions and
    /// transpositions of `d`; the result is `m × n`, row-major. On `f64`
    /// with the feature `gemm` (the default) this is faer's GEMM, the same
    /// kernel as the evaluator's; otherwise each element is a dot product
    /// with four partial sums. [`Mat::matmul`](super::Mat::matmul) reads
    /// better.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if a factor does not hold `rows × cols`
    /// elements or the inner dimensions differ.
    fn matmul_flat(&self, b: &Self, d: MatMulDims) -> Result<Self>;

    /// The transpose of the row-major `rows × cols` matrix held flat in
    /// `self` (`cols × rows`, row-major). [`Mat::t`](super::Mat::t) reads better.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if `self.len() != rows · cols`.
    fn transpose_flat(&self, rows: usize, cols: usize) -> Result<Self>;

    /// The sums along `axis` of the row-major `rows × cols` matrix held
    /// flat in `self`: `cols` sums over the rows for axis 0, `rows` sums
    /// over the columns for axis 1 (NumPy's `sum(axis=…)`). [`Mat::sum_axis`](super::Mat::sum_axis)
    /// reads better.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if `self.len() != rows · cols`;
    /// [`Error::IndexOutOfRange`] for an axis other than 0 or 1.
    fn sum_axis_flat(&self, rows: usize, cols: usize, axis: usize) -> Result<Self>;

    /// The row-major `rows × cols` matrix with `self` repeated along
    /// `axis`: as every row (axis 0, `self` has `cols` elements) or every
    /// column (axis 1, `rows` elements). The transpose of
    /// [`Array::sum_axis_flat`] on the same axis.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if `self` has the wrong length;
    /// [`Error::IndexOutOfRange`] for an axis other than 0 or 1.
    fn broadcast_axis_flat(&self, axis: usize, rows: usize, cols: usize) -> Result<Self>;

    /// The loop of [`crate::scan`] over the elements of `self`: `body` gets
    /// the carry and the element and returns the new carry and the step's
    /// output; the result is the final carry and the outputs. A plain loop
    /// on [`Dense`]; one loop instruction on a [`TArray`](super::TArray),
    /// its gradient checkpointed with `snapshots` (`None`: every carry
    /// kept). [`crate::scan`] reads better.
    ///
    /// # Errors
    ///
    /// As [`crate::scan`].
    #[doc(hidden)]
    fn scan_dyn(
        &self,
        init: &[Self::Scalar],
        snapshots: Option<usize>,
        body: &LoopBody<'_, Self::Scalar>,
    ) -> Result<(Vec<Self::Scalar>, Self)>;
}

/// A loop body as [`Array::scan_dyn`] takes it: the carry followed by the
/// step's element in, the new carry followed by the step's output out.
#[doc(hidden)]
pub type LoopBody<'a, S> = dyn Fn(&[S]) -> Vec<S> + 'a;

/// A plain vector of any [`Real`]: the [`Array`] that runs natively on
/// `f64`, in forward mode on num-dual numbers, and as a scalar trace on
/// [`crate::Tracer`]s (one instruction per element, the cross-check of the
/// array tier).
///
/// # Example
///
/// ```
/// use optic_ad::array::{Array, Dense};
///
/// let x = Dense::new(vec![1.0, 2.0, 3.0]);
/// assert_eq!(x.map(|t| t * 2.0).sum(), 12.0);
/// assert_eq!(x.slice(1, 2).unwrap().into_vec(), vec![2.0, 3.0]);
/// assert!(x.slice(2, 2).is_err());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Dense<T>(pub Vec<T>);

impl<T: Real> Dense<T> {
    /// The array holding `v`.
    pub fn new(v: Vec<T>) -> Self {
        Dense(v)
    }

    /// The elements.
    pub fn as_slice(&self) -> &[T] {
        &self.0
    }

    /// The elements, by value.
    pub fn into_vec(self) -> Vec<T> {
        self.0
    }
}

/// An array-tier vector as a field of a structured point (or a point of
/// its own): its elements are its leaves, named `[i]`; the function
/// receives a `Dense` of tracers, on which the [`Array`] API runs.
impl<T: Real> crate::Differentiable for Dense<T> {
    type Scalar = T;
    type Rebind<U: Real> = Dense<U>;
    fn flatten_into(&self, leaves: &mut Vec<T>) {
        leaves.extend_from_slice(&self.0);
    }
    fn leaf_count(&self) -> usize {
        self.0.len()
    }
    fn same_shape(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
    }
    fn leaf_names(&self, path: &str, names: &mut Vec<String>) {
        names.extend((0..self.0.len()).map(|i| format!("{path}[{i}]")));
    }
}

impl<T: Real, U: Real> crate::Rebuild<Dense<T>> for Dense<U> {
    fn rebuild(template: &Dense<T>, leaves: &mut crate::Leaves<'_, U>) -> Option<Self> {
        Some(Dense(leaves.take(template.0.len())?.to_vec()))
    }
}

impl<T: Real> crate::Point for Dense<T> {
    crate::structured_point!();
}

fn check_range(what: &'static str, start: usize, len: usize, n: usize) -> Result<()> {
    match start.checked_add(len) {
        Some(e) if e <= n => Ok(()),
        _ => Err(Error::IndexOutOfRange {
            what,
            index: start.saturating_add(len),
            len: n,
        }),
    }
}

impl<T: Real> Array for Dense<T> {
    type Scalar = T;
    type Elem = T;

    fn len(&self) -> usize {
        self.0.len()
    }

    fn map(&self, f: impl Fn(T) -> T) -> Self {
        Dense(self.0.iter().map(|&x| f(x)).collect())
    }

    fn map2(&self, b: &Self, f: impl Fn(T, T) -> T) -> Result<Self> {
        check_len("map2: second array", self.len(), b.len())?;
        Ok(Dense(
            self.0.iter().zip(&b.0).map(|(&x, &y)| f(x, y)).collect(),
        ))
    }

    fn map3(&self, b: &Self, c: &Self, f: impl Fn(T, T, T) -> T) -> Result<Self> {
        check_len("map3: second array", self.len(), b.len())?;
        check_len("map3: third array", self.len(), c.len())?;
        Ok(Dense(
            self.0
                .iter()
                .zip(&b.0)
                .zip(&c.0)
                .map(|((&x, &y), &z)| f(x, y, z))
                .collect(),
        ))
    }

    fn map_n(&self, others: &[&Self], f: impl Fn(&[T]) -> T) -> Result<Self> {
        for o in others {
            check_len("map_n: another array", self.len(), o.len())?;
        }
        // One buffer for every element's arguments.
        let mut args = Vec::with_capacity(1 + others.len());
        Ok(Dense(
            (0..self.len())
                .map(|i| {
                    args.clear();
                    args.push(self.0[i]);
                    args.extend(others.iter().map(|o| o.0[i]));
                    f(&args)
                })
                .collect(),
        ))
    }

    fn map_with(&self, s: T, f: impl Fn(T, T) -> T) -> Self {
        Dense(self.0.iter().map(|&x| f(x, s)).collect())
    }

    fn sum(&self) -> T {
        sum4(&self.0)
    }

    fn cumsum(&self) -> Self {
        let mut acc = T::cst(SUM_START);
        Dense(
            self.0
                .iter()
                .map(|&x| {
                    acc += x;
                    acc
                })
                .collect(),
        )
    }

    fn max(&self) -> Result<T> {
        check_len("max: operand (at least)", 1, self.len().min(1))?;
        // m + Σᵢ (xᵢ − m)·[xᵢ = m] / count: the value is m exactly, and
        // the tangent is the mean of the tangents at the maximum whatever
        // the scalar max's own convention at ties. Each term is written
        // −(m − xᵢ) and the sum starts from −0, so that it is −0 where the
        // terms are zero and m keeps its sign of zero.
        let (zero, one) = (T::cst(0.0), T::cst(1.0));
        let m = self.0.iter().copied().reduce(T::max).unwrap_or(zero);
        let ind: Vec<T> = self
            .0
            .iter()
            .map(|&x| T::select(m - x, zero, one))
            .collect();
        let count = ind.iter().fold(zero, |s, &i| s + i);
        let excess = self
            .0
            .iter()
            .zip(&ind)
            .fold(T::cst(SUM_START), |s, (&x, &i)| s + (-(m - x)) * i);
        Ok(m + excess / count)
    }

    fn slice(&self, start: usize, len: usize) -> Result<Self> {
        check_range("slice: end", start, len, self.len())?;
        Ok(Dense(self.0[start..start + len].to_vec()))
    }

    fn get(&self, i: usize) -> Result<T> {
        self.0.get(i).copied().ok_or(Error::IndexOutOfRange {
            what: "get: index",
            index: i,
            len: self.len(),
        })
    }

    fn gather(&self, idx: &Indices) -> Result<Self> {
        idx.idx
            .iter()
            .map(|&i| {
                self.0
                    .get(i as usize)
                    .copied()
                    .ok_or(Error::IndexOutOfRange {
                        what: "gather: index",
                        index: i as usize,
                        len: self.len(),
                    })
            })
            .collect::<Result<Vec<T>>>()
            .map(Dense)
    }

    fn scatter_add(&self, idx: &Indices, len: usize) -> Result<Self> {
        check_len("scatter_add: indices vs values", self.len(), idx.len())?;
        let mut out = crate::error::try_filled("scatter_add: result", len, T::cst(0.0))?;
        for (&x, &i) in self.0.iter().zip(idx.idx.iter()) {
            let slot = out.get_mut(i as usize).ok_or(Error::IndexOutOfRange {
                what: "scatter_add: index",
                index: i as usize,
                len,
            })?;
            *slot += x;
        }
        Ok(Dense(out))
    }

    fn matvec(m: &Arc<Matrix>, v: &Self) -> Result<Self> {
        check_len("matvec: vector vs matrix columns", m.cols(), v.len())?;
        matrix_times(m, v, false, "matvec: result")
    }

    fn vecmat(m: &Arc<Matrix>, v: &Self) -> Result<Self> {
        check_len("vecmat: vector vs matrix rows", m.rows(), v.len())?;
        matrix_times(m, v, true, "vecmat: result")
    }

    fn fill(s: T, len: usize) -> Result<Self> {
        crate::error::try_filled("fill", len, s).map(Dense)
    }

    fn constant(data: &Arc<[f64]>) -> Self {
        Dense(data.iter().map(|&c| T::cst(c)).collect())
    }

    fn concat(&self, b: &Self) -> Self {
        let mut v = self.0.clone();
        v.extend_from_slice(&b.0);
        Dense(v)
    }

    fn matmul_flat(&self, b: &Self, d: MatMulDims) -> Result<Self> {
        let (m, _, n) = d.check(self.len(), b.len())?;
        let mut out = crate::error::try_filled("matmul: result", m * n, T::cst(0.0))?;
        matmul_into(&self.0, &b.0, d, &mut Vec::new(), &mut out);
        Ok(Dense(out))
    }

    fn transpose_flat(&self, rows: usize, cols: usize) -> Result<Self> {
        check_len(
            "transpose: rows × cols",
            rows.saturating_mul(cols),
            self.len(),
        )?;
        let mut out = crate::error::try_filled("transpose: result", self.len(), T::cst(0.0))?;
        transpose_into(&self.0, rows, cols, &mut out);
        Ok(Dense(out))
    }

    fn sum_axis_flat(&self, rows: usize, cols: usize, axis: usize) -> Result<Self> {
        check_len(
            "sum_axis: rows × cols",
            rows.saturating_mul(cols),
            self.len(),
        )?;
        let n = axis_len(axis, rows, cols, "sum_axis: axis")?;
        let mut out = crate::error::try_filled("sum_axis: result", n, T::cst(0.0))?;
        sum_axis_into(&self.0, rows, cols, axis, &mut out);
        Ok(Dense(out))
    }

    fn broadcast_axis_flat(&self, axis: usize, rows: usize, cols: usize) -> Result<Self> {
        let n = axis_len(axis, rows, cols, "broadcast_axis: axis")?;
        check_len("broadcast_axis: vector vs matrix", n, self.len())?;
        let mut out = crate::error::try_filled(
            "broadcast_axis: result",
            matrix_len(rows, cols)?,
            T::cst(0.0),
        )?;
        broadcast_axis_into(&self.0, cols, axis, &mut out);
        Ok(Dense(out))
    }

    fn scan_dyn(
        &self,
        init: &[T],
        _: Option<usize>,
        body: &dyn Fn(&[T]) -> Vec<T>,
    ) -> Result<(Vec<T>, Self)> {
        let k = init.len();
        let mut carry: Vec<T> = init.to_vec();
        let mut ys = Vec::with_capacity(self.0.len());
        for &x in &self.0 {
            carry.push(x);
            let mut out = body(&carry);
            check_len("scan: body outputs (carry, step output)", k + 1, out.len())?;
            ys.push(out[k]);
            out.truncate(k);
            carry = out;
        }
        Ok((carry, Dense(ys)))
    }
}

/// `M v` or `Mᵀ v` for a constant matrix on any scalar, by the array
/// tier's one matrix-product kernel (the library GEMM on `f64`).
fn matrix_times<T: Real>(
    m: &Matrix,
    v: &Dense<T>,
    transpose: bool,
    what: &'static str,
) -> Result<Dense<T>> {
    let d = matvec_dims(m, transpose);
    let len = if transpose { m.cols() } else { m.rows() };
    let mut out = crate::error::try_filled(what, len, T::cst(0.0))?;
    let data: Vec<T> = m.as_slice().iter().map(|&c| T::cst(c)).collect();
    matmul_into(&data, &v.0, d, &mut Vec::new(), &mut out);
    Ok(Dense(out))
}
