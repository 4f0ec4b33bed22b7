//! The dimensions of a matrix product, and (feature `gemm`, on by
//! default) matrix products on `f64` by a library GEMM: faer's `matmul`,
//! which blocks for the caches and runs the SIMD kernels the CPU has
//! (chosen at run time), on one thread. Every `f64` matrix product of the
//! array tier (the evaluator's `matvec`, `vecmat` and `matmul`, and
//! [`Dense<f64>`](super::Dense)'s) goes through `gemm`, so a program and
//! the same function on `Dense<f64>` still agree bit for bit.
//!
//! A leaf module (it imports only the error type), so that the number
//! types' hook ([`crate::Real`]'s sealed `matmul_library`) can call it.

#[cfg(feature = "gemm")]
use faer::linalg::matmul::matmul;
#[cfg(feature = "gemm")]
use faer::{Accum, MatMut, MatRef, Par};

use crate::error::{check_len, Error, Result};

/// `rows · cols`, or an error if it overflows.
pub(crate) fn matrix_len(rows: usize, cols: usize) -> Result<usize> {
    rows.checked_mul(cols).ok_or(Error::IndexOutOfRange {
        what: "matrix: rows (rows × cols overflows)",
        index: rows,
        len: usize::MAX / cols.max(1),
    })
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

/// `out = op(A) op(B)` (`m × n`, row-major) by faer's `matmul` on one
/// thread. `a` and `b` are row-major as stored; a transposed operand is
/// read through its strides, not copied. Operands shorter than `d` says,
/// or inner dimensions that differ, leave `out` untouched (not reached:
/// the builders check the shapes).
///
/// Products of more than 16³ multiply-adds that faer packs (all but
/// `matvec` shapes) allocate its packing buffer on each call: faer's
/// `matmul` takes no workspace. So a warm
/// [`ArrayWorkspace`](super::ArrayWorkspace) allocates on products of that
/// size, and a failed allocation there aborts (Rust's allocator) instead of
/// returning `Error::AllocationFailed`.
///
/// Each entry is a sum of `k` products in an order of faer's choosing
/// (blocked, several partial sums), so it may differ from the sequential
/// sum in the last bits: within the usual bound `k ε Σ |aᵢ bᵢ|` (Higham,
/// *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §3.1).
#[cfg(feature = "gemm")]
pub(crate) fn gemm(a: &[f64], b: &[f64], d: MatMulDims, out: &mut [f64]) {
    let (m, k, k2, n) = d.mkn();
    if k != k2 {
        return;
    }
    let (Some(a), Some(b), Some(out)) = (
        a.get(..d.a_rows * d.a_cols),
        b.get(..d.b_rows * d.b_cols),
        out.get_mut(..m * n),
    ) else {
        return;
    };
    if k == 0 {
        out.fill(0.0);
        return;
    }
    let a = MatRef::from_row_major_slice(a, d.a_rows, d.a_cols);
    let b = MatRef::from_row_major_slice(b, d.b_rows, d.b_cols);
    let a = if d.transpose_a { a.transpose() } else { a };
    let b = if d.transpose_b { b.transpose() } else { b };
    let out = MatMut::from_row_major_slice_mut(out, m, n);
    matmul(out, Accum::Replace, a, b, 1.0, Par::Seq);
}
