//! Rank-2 arrays: [`Mat`], a row-major matrix over any [`Array`].

use std::sync::Arc;

use super::api::Array;
use super::ir::Matrix;
use super::kernels::{matrix_len, MatMulDims};
use crate::error::check_len;
use crate::error::Result;

/// A `rows × cols` matrix whose elements, row-major, are an [`Array`]: the
/// rank-2 arrays of user code, written once and run natively
/// ([`Dense<f64>`](super::Dense)), in forward mode ([`super::Dense`] of
/// num-dual numbers), as a scalar trace and as an array trace
/// ([`super::TArray`], where each operation is one instruction on a
/// value of shape [`super::Shape::Matrix`], whatever the size).
///
/// The operations follow NumPy and JAX: `matmul` (`A @ B`), `matvec`
/// (`A @ v`), `vecmat` (`v @ A`), `outer`, `t` (the transpose), `sum_axis`
/// and `broadcast_axis` (each the other's transpose), elementwise `map`s
/// and `sum`. Their rules (pullback and pushforward) are in the book's
/// chapter "Arrays", section "Matrices".
///
/// # Errors
///
/// Operations that combine shapes check them and return
/// [`crate::Error::LengthMismatch`] (or [`crate::Error::IndexOutOfRange`]
/// for a row, an element or an axis that does not exist).
///
/// # Example
///
/// `f(A) = uᵀ A v` has the gradient `u vᵀ` (an outer product):
///
/// ```
/// use optic_ad::array::{Array, Dense, Mat, TArray};
/// use optic_ad::Gradient;
///
/// fn f<A: Array>(a: &A, u: &[f64], v: &[f64]) -> optic_ad::Result<A::Scalar> {
///     let a = Mat::new(a.clone(), u.len(), v.len())?;
///     let (u, v) = (A::constant(&u.into()), A::constant(&v.into()));
///     a.matvec(&v)?.dot(&u)
/// }
/// let (u, v) = ([1.0, 2.0], [3.0, 4.0, 5.0]);
/// let a = [0.5; 6];
/// let mut g = Gradient::array(|a: &TArray| f(a, &u, &v), &a).unwrap();
/// assert_eq!(g.eval_at(&a).unwrap().1, [3.0, 4.0, 5.0, 6.0, 8.0, 10.0]);
/// // The same function on plain vectors:
/// assert_eq!(f(&Dense(vec![0.5; 6]), &u, &v).unwrap(), 18.0);
/// // A 2 × 3 matrix needs 6 elements:
/// assert!(Mat::new(Dense(vec![0.5; 5]), 2, 3).is_err());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Mat<A> {
    data: A,
    rows: usize,
    cols: usize,
}

impl<A: Array> Mat<A> {
    /// The `rows × cols` matrix whose elements, row-major, are `data`.
    ///
    /// # Errors
    ///
    /// [`crate::Error::LengthMismatch`] if `data.len() != rows · cols`.
    pub fn new(data: A, rows: usize, cols: usize) -> Result<Mat<A>> {
        check_len("Mat::new: rows × cols", matrix_len(rows, cols)?, data.len())?;
        Ok(Mat { data, rows, cols })
    }

    /// A constant matrix (data shared by reference count, not copied into
    /// a traced program's instructions).
    pub fn constant(m: &Matrix) -> Mat<A> {
        let data: Arc<[f64]> = m.as_slice().into();
        Mat {
            data: A::constant(&data),
            rows: m.rows(),
            cols: m.cols(),
        }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The elements, row-major (`rows · cols` of them).
    pub fn data(&self) -> &A {
        &self.data
    }

    /// The elements, row-major, by value.
    pub fn into_data(self) -> A {
        self.data
    }

    fn dims(&self, b: &Mat<A>, transpose_a: bool, transpose_b: bool) -> MatMulDims {
        MatMulDims {
            a_rows: self.rows,
            a_cols: self.cols,
            b_rows: b.rows,
            b_cols: b.cols,
            transpose_a,
            transpose_b,
        }
    }

    /// The matrix product `self @ b` (`rows × b.cols()`).
    ///
    /// # Errors
    ///
    /// [`crate::Error::LengthMismatch`] if `self.cols() != b.rows()`.
    pub fn matmul(&self, b: &Mat<A>) -> Result<Mat<A>> {
        self.matmul_t(b, false, false)
    }

    /// `op(self) @ op(b)` with `op(x) = xᵀ` where the flag is set, without
    /// forming a transpose (BLAS `gemm`'s convention).
    ///
    /// # Errors
    ///
    /// [`crate::Error::LengthMismatch`] if the inner dimensions differ.
    pub fn matmul_t(&self, b: &Mat<A>, transpose_a: bool, transpose_b: bool) -> Result<Mat<A>> {
        let d = self.dims(b, transpose_a, transpose_b);
        let data = self.data.matmul_flat(&b.data, d)?;
        let rows = if transpose_a { self.cols } else { self.rows };
        let cols = if transpose_b { b.rows } else { b.cols };
        Ok(Mat { data, rows, cols })
    }

    /// `self @ v` (`v` has `cols` elements; the result `rows`).
    ///
    /// # Errors
    ///
    /// [`crate::Error::LengthMismatch`] if `v.len() != self.cols()`.
    pub fn matvec(&self, v: &A) -> Result<A> {
        let col = Mat::new(v.clone(), v.len(), 1)?;
        Ok(self.matmul(&col)?.data)
    }

    /// `v @ self`, that is `selfᵀ v` (`v` has `rows` elements; the result
    /// `cols`).
    ///
    /// # Errors
    ///
    /// [`crate::Error::LengthMismatch`] if `v.len() != self.rows()`.
    pub fn vecmat(&self, v: &A) -> Result<A> {
        let row = Mat::new(v.clone(), 1, v.len())?;
        Ok(row.matmul(self)?.data)
    }

    /// The outer product `u vᵀ` (`u.len() × v.len()`).
    ///
    /// # Errors
    ///
    /// [`crate::Error::IndexOutOfRange`] if the size overflows `usize`.
    pub fn outer(u: &A, v: &A) -> Result<Mat<A>> {
        let col = Mat::new(u.clone(), u.len(), 1)?;
        let row = Mat::new(v.clone(), 1, v.len())?;
        col.matmul(&row)
    }

    /// The transpose (`cols × rows`).
    pub fn t(&self) -> Mat<A> {
        match self.data.transpose_flat(self.rows, self.cols) {
            Ok(data) => Mat {
                data,
                rows: self.cols,
                cols: self.rows,
            },
            // Not reached: `new` checked the length.
            Err(_) => self.clone(),
        }
    }

    /// The sums along `axis`: one per column (`cols` of them) for axis 0,
    /// one per row (`rows`) for axis 1, as NumPy's `sum(axis=…)`.
    ///
    /// # Errors
    ///
    /// [`crate::Error::IndexOutOfRange`] for an axis other than 0 or 1.
    pub fn sum_axis(&self, axis: usize) -> Result<A> {
        self.data.sum_axis_flat(self.rows, self.cols, axis)
    }

    /// The `rows × cols` matrix with `v` repeated along `axis`: as every
    /// row for axis 0 (`v` has `cols` elements), as every column for axis
    /// 1 (`rows` elements). The transpose of [`Mat::sum_axis`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::LengthMismatch`] if `v` has the wrong length;
    /// [`crate::Error::IndexOutOfRange`] for an axis other than 0 or 1.
    pub fn broadcast_axis(v: &A, axis: usize, rows: usize, cols: usize) -> Result<Mat<A>> {
        let data = v.broadcast_axis_flat(axis, rows, cols)?;
        Ok(Mat { data, rows, cols })
    }

    /// `out[i, j] = f(self[i, j])`.
    pub fn map(&self, f: impl Fn(A::Elem) -> A::Elem) -> Mat<A> {
        Mat {
            data: self.data.map(f),
            rows: self.rows,
            cols: self.cols,
        }
    }

    /// `out[i, j] = f(self[i, j], b[i, j])`.
    ///
    /// # Errors
    ///
    /// [`crate::Error::LengthMismatch`] if the shapes differ.
    pub fn map2(&self, b: &Mat<A>, f: impl Fn(A::Elem, A::Elem) -> A::Elem) -> Result<Mat<A>> {
        check_len("Mat::map2: rows", self.rows, b.rows)?;
        check_len("Mat::map2: columns", self.cols, b.cols)?;
        Ok(Mat {
            data: self.data.map2(&b.data, f)?,
            rows: self.rows,
            cols: self.cols,
        })
    }

    /// `out[i, j] = f(self[i, j], s)`, a scalar parameter broadcast.
    pub fn map_with(&self, s: A::Scalar, f: impl Fn(A::Elem, A::Elem) -> A::Elem) -> Mat<A> {
        Mat {
            data: self.data.map_with(s, f),
            rows: self.rows,
            cols: self.cols,
        }
    }

    /// The sum of all elements.
    pub fn sum(&self) -> A::Scalar {
        self.data.sum()
    }

    /// Row `i` (`cols` elements).
    ///
    /// # Errors
    ///
    /// [`crate::Error::IndexOutOfRange`] if `i >= rows`.
    pub fn row(&self, i: usize) -> Result<A> {
        if i >= self.rows {
            return Err(crate::Error::IndexOutOfRange {
                what: "Mat::row",
                index: i,
                len: self.rows,
            });
        }
        self.data.slice(i * self.cols, self.cols)
    }

    /// Element `(i, j)`.
    ///
    /// # Errors
    ///
    /// [`crate::Error::IndexOutOfRange`] if `i >= rows` or `j >= cols`.
    pub fn get(&self, i: usize, j: usize) -> Result<A::Scalar> {
        if j >= self.cols {
            return Err(crate::Error::IndexOutOfRange {
                what: "Mat::get: column",
                index: j,
                len: self.cols,
            });
        }
        self.row(i)?.get(j)
    }
}
