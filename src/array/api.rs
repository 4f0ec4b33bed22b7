//! The user-facing array API: one trait, [`Array`], that user code is
//! generic over, implemented by plain vectors of any [`Real`] ([`Dense`])
//! and by traced arrays ([`TArray`]).

use std::sync::Arc;

use super::ir::Matrix;
use crate::drivers::check_len;
use crate::error::{Error, Result};
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
        let bound = super::ir::index_bound(&idx);
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
/// array ([`TArray`]), which records one instruction per array operation,
/// whatever the length.
///
/// The operations follow NumPy and JAX: `map` (elementwise with a scalar
/// body), `sum`, `dot`, `slice`, `gather`, `scatter_add`, `matvec`
/// (`M @ v`) and `vecmat` (`v @ M`, that is `Mᵀ v`). Scalars
/// ([`Array::Scalar`]) are [`Real`], so scalar and array code mix in one
/// function.
///
/// Map bodies take [`Array::Elem`]s. On a [`TArray`] the body is traced
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

    /// The sum of the elements (0 for an empty array).
    fn sum(&self) -> Self::Scalar;

    /// `Σᵢ self[i] b[i]`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if the lengths differ.
    fn dot(&self, b: &Self) -> Result<Self::Scalar> {
        Ok(self.map2(b, |x, y| x * y)?.sum())
    }

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
    fn fill(s: Self::Scalar, len: usize) -> Self;

    /// Constant data.
    fn constant(data: &Arc<[f64]>) -> Self;

    /// `self` followed by `b`.
    fn concat(&self, b: &Self) -> Self;

    /// The matrix product `op(A) op(B)` of the row-major matrices held
    /// flat in `self` (`A`) and `b` (`B`), with the dimensions and
    /// transpositions of `d`; the result is `m × n`, row-major. Each
    /// element is a dot product with four partial sums, the same on every
    /// implementation. [`Mat::matmul`](super::Mat::matmul) reads better.
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
}

/// `rows · cols`, or an error if it overflows.
pub(crate) fn matrix_len(rows: usize, cols: usize) -> Result<usize> {
    rows.checked_mul(cols).ok_or(Error::IndexOutOfRange {
        what: "matrix: rows (rows × cols overflows)",
        index: rows,
        len: usize::MAX / cols.max(1),
    })
}

/// The length a vector broadcast along `axis` into `rows × cols` must
/// have.
pub(crate) fn axis_len(axis: usize, rows: usize, cols: usize, what: &'static str) -> Result<usize> {
    match axis {
        0 => Ok(cols),
        1 => Ok(rows),
        _ => Err(Error::IndexOutOfRange {
            what,
            index: axis,
            len: 2,
        }),
    }
}

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

/// `Σ xᵢ` with four partial sums, in the order the array evaluator uses,
/// so that native and traced results agree bit for bit on `f64`.
pub(crate) fn sum4<T: Real>(x: &[T]) -> T {
    let mut acc = [T::cst(0.0); 4];
    let chunks = x.chunks_exact(4);
    let rem = chunks.remainder();
    for c in chunks {
        for l in 0..4 {
            acc[l] += c[l];
        }
    }
    let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for &r in rem {
        s += r;
    }
    s
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
        let mut out = vec![T::cst(0.0); len];
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
        Ok(Dense(
            (0..m.rows())
                .map(|r| {
                    let row: Vec<T> = m.row(r).iter().zip(&v.0).map(|(&a, &x)| x * a).collect();
                    sum4(&row)
                })
                .collect(),
        ))
    }

    fn vecmat(m: &Arc<Matrix>, v: &Self) -> Result<Self> {
        check_len("vecmat: vector vs matrix rows", m.rows(), v.len())?;
        let mut out = vec![T::cst(0.0); m.cols()];
        for (r, &x) in v.0.iter().enumerate() {
            for (o, &a) in out.iter_mut().zip(m.row(r)) {
                *o += x * a;
            }
        }
        Ok(Dense(out))
    }

    fn fill(s: T, len: usize) -> Self {
        Dense(vec![s; len])
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
        let mut out = vec![T::cst(0.0); m * n];
        matmul_into(&self.0, &b.0, d, &mut Vec::new(), &mut out);
        Ok(Dense(out))
    }

    fn transpose_flat(&self, rows: usize, cols: usize) -> Result<Self> {
        check_len(
            "transpose: rows × cols",
            rows.saturating_mul(cols),
            self.len(),
        )?;
        let mut out = vec![T::cst(0.0); self.len()];
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
        let mut out = vec![T::cst(0.0); n];
        sum_axis_into(&self.0, rows, cols, axis, &mut out);
        Ok(Dense(out))
    }

    fn broadcast_axis_flat(&self, axis: usize, rows: usize, cols: usize) -> Result<Self> {
        let n = axis_len(axis, rows, cols, "broadcast_axis: axis")?;
        check_len("broadcast_axis: vector vs matrix", n, self.len())?;
        let mut out = vec![T::cst(0.0); matrix_len(rows, cols)?];
        broadcast_axis_into(&self.0, cols, axis, &mut out);
        Ok(Dense(out))
    }
}

#[allow(unused_imports)]
use super::trace::TArray;

/// `Σᵢ aᵢ bᵢ` with four partial sums, as [`sum4`] of the products (the
/// evaluator's dot product on `f64`).
pub(crate) fn dot4<T: Real>(a: &[T], b: &[T]) -> T {
    let mut acc = [T::cst(0.0); 4];
    let ca = a.chunks_exact(4);
    let cb = b.chunks_exact(4);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..4 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (&x, &y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// `out = aᵀ` for a row-major `rows × cols` matrix `a` (`out` is
/// `cols × rows`), in 8 × 8 tiles.
pub(crate) fn transpose_into<T: Real>(a: &[T], rows: usize, cols: usize, out: &mut [T]) {
    const TILE: usize = 8;
    for i0 in (0..rows).step_by(TILE) {
        for j0 in (0..cols).step_by(TILE) {
            for i in i0..(i0 + TILE).min(rows) {
                for j in j0..(j0 + TILE).min(cols) {
                    out[j * rows + i] = a[i * cols + j];
                }
            }
        }
    }
}

/// The dimensions of a matrix product `op(A) op(B)`: `A` is stored
/// `a_rows × a_cols`, `B` `b_rows × b_cols`, and `op(X) = Xᵀ` where the
/// flag is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatMulDims {
    /// Rows of `A` as stored.
    pub a_rows: usize,
    /// Columns of `A` as stored.
    pub a_cols: usize,
    /// Rows of `B` as stored.
    pub b_rows: usize,
    /// Columns of `B` as stored.
    pub b_cols: usize,
    /// Whether `A` is transposed.
    pub transpose_a: bool,
    /// Whether `B` is transposed.
    pub transpose_b: bool,
}

impl MatMulDims {
    /// `(m, k, k′, n)`: `op(A)` is `m × k`, `op(B)` is `k′ × n`.
    pub(crate) fn mkn(&self) -> (usize, usize, usize, usize) {
        let (m, k) = if self.transpose_a {
            (self.a_cols, self.a_rows)
        } else {
            (self.a_rows, self.a_cols)
        };
        let (k2, n) = if self.transpose_b {
            (self.b_cols, self.b_rows)
        } else {
            (self.b_rows, self.b_cols)
        };
        (m, k, k2, n)
    }

    /// Checks the element counts and the inner dimensions; returns
    /// `(m, k, n)`.
    pub(crate) fn check(&self, a_len: usize, b_len: usize) -> Result<(usize, usize, usize)> {
        check_len(
            "matmul: left factor, rows × cols",
            self.a_rows.saturating_mul(self.a_cols),
            a_len,
        )?;
        check_len(
            "matmul: right factor, rows × cols",
            self.b_rows.saturating_mul(self.b_cols),
            b_len,
        )?;
        let (m, k, k2, n) = self.mkn();
        check_len(
            "matmul: columns of the left factor vs rows of the right",
            k,
            k2,
        )?;
        matrix_len(m, n)?;
        Ok((m, k, n))
    }
}

/// `out = op(A) op(B)` (`m × n`, row-major): each element is the dot
/// product of a row of `op(A)` and a column of `op(B)` with four partial
/// sums ([`dot4`]), whatever the flags, so that every caller gets the same
/// bits. Operands whose rows (of `op(A)`) or columns (of `op(B)`) are not
/// contiguous are transposed into `scratch` first.
pub(crate) fn matmul_into<T: Real>(
    a: &[T],
    b: &[T],
    d: MatMulDims,
    scratch: &mut Vec<T>,
    out: &mut [T],
) {
    let (m, k, _, n) = d.mkn();
    let a_len = m * k;
    let need = if d.transpose_a { a_len } else { 0 } + if d.transpose_b { 0 } else { k * n };
    if scratch.len() < need {
        scratch.resize(need, T::cst(0.0));
    }
    let (sa, sb) = scratch.split_at_mut(if d.transpose_a { a_len } else { 0 });
    let rows_a: &[T] = if d.transpose_a {
        transpose_into(a, d.a_rows, d.a_cols, sa);
        sa
    } else {
        a
    };
    // Columns of op(B) as rows (n × k).
    let cols_b: &[T] = if d.transpose_b {
        b
    } else {
        transpose_into(b, d.b_rows, d.b_cols, &mut sb[..k * n]);
        &sb[..k * n]
    };
    if k == 0 {
        out.fill(T::cst(0.0));
        return;
    }
    for (row_out, ra) in out.chunks_exact_mut(n.max(1)).zip(rows_a.chunks_exact(k)) {
        rows_dot(cols_b, k, ra, row_out);
    }
}

/// `out[r] = dot4(row r, x)` for the row-major `out.len() × cols` matrix
/// `data`, four rows at a time: the four rows share the loads of `x`, and
/// their sixteen partial sums are independent (one row's four are a chain
/// of dependent additions), while each row's sums stay those of [`dot4`]
/// (the same bits). The kernel of `matvec` and of each row of a matrix
/// product.
pub(crate) fn rows_dot<T: Real>(data: &[T], cols: usize, x: &[T], out: &mut [T]) {
    if cols == 0 {
        out.fill(T::cst(0.0));
        return;
    }
    let head = cols - cols % 4;
    let mut quads = out.chunks_exact_mut(4);
    let mut blocks = data.chunks_exact(4 * cols);
    for (o, block) in (&mut quads).zip(&mut blocks) {
        let mut acc = [[T::cst(0.0); 4]; 4];
        for j in (0..head).step_by(4) {
            let xs = &x[j..j + 4];
            for (r, a) in acc.iter_mut().enumerate() {
                let row = &block[r * cols + j..r * cols + j + 4];
                for l in 0..4 {
                    a[l] += row[l] * xs[l];
                }
            }
        }
        for (r, (a, y)) in acc.iter().zip(o.iter_mut()).enumerate() {
            let mut s = (a[0] + a[1]) + (a[2] + a[3]);
            for (&b, &c) in block[r * cols + head..(r + 1) * cols]
                .iter()
                .zip(&x[head..])
            {
                s += b * c;
            }
            *y = s;
        }
    }
    for (o, row) in quads
        .into_remainder()
        .iter_mut()
        .zip(blocks.remainder().chunks_exact(cols))
    {
        *o = dot4(row, x);
    }
}

/// The sums of a row-major `rows × cols` matrix along `axis`: 0 gives one
/// per column (rows added in order from 0), 1 one per row ([`sum4`]).
pub(crate) fn sum_axis_into<T: Real>(
    a: &[T],
    rows: usize,
    cols: usize,
    axis: usize,
    out: &mut [T],
) {
    if axis == 0 {
        out.fill(T::cst(0.0));
        for row in a.chunks_exact(cols.max(1)).take(rows) {
            for (o, &x) in out.iter_mut().zip(row) {
                *o += x;
            }
        }
    } else {
        for (o, row) in out.iter_mut().zip(a.chunks_exact(cols.max(1))) {
            *o = sum4(row);
        }
        if cols == 0 {
            out.fill(T::cst(0.0));
        }
    }
}

/// Vector `v` repeated along `axis` into a row-major `rows × cols` matrix.
pub(crate) fn broadcast_axis_into<T: Real>(v: &[T], cols: usize, axis: usize, out: &mut [T]) {
    if cols == 0 {
        return;
    }
    for (i, row) in out.chunks_exact_mut(cols).enumerate() {
        if axis == 0 {
            row.copy_from_slice(&v[..cols]);
        } else {
            row.fill(v[i]);
        }
    }
}
