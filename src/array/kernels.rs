//! The numeric kernels of the array tier: sums, dot products, matrix
//! products, transposes and axis reductions, generic over [`Real`] so that
//! the evaluator (on `f64`) and [`Dense`](super::Dense) compute the same
//! sums in the same order, bit for bit. Matrix products on `f64` with the
//! feature `gemm` (the default) are the library GEMM of [`super::matmul`],
//! for the evaluator and `Dense<f64>` alike; `Dense` on other scalars
//! (num-dual numbers) then sums them in another order.

pub(crate) use super::matmul::{matrix_len, MatMulDims};
use crate::error::{Error, Result};
use crate::real::Real;

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

/// Elements per segment of a long sum ([`sum4`]) and of a map's loop: the
/// evaluator keeps a partial sum per segment and adds them in segment
/// order, so that a sum has the same bits on one thread or many.
pub(crate) const SEGMENT: usize = 1 << 14;

/// The additive identity of IEEE 754: `−0 + x = x` for every `x`, `+0`
/// included, where `+0 + (−0) = +0`. Sums start from it, so that a sum of
/// one term is that term, sign of zero and all (the sign decides, for
/// example, the branch of `atan2`).
pub(crate) const SUM_START: f64 = -0.0;

/// `Σ xᵢ` in the order the array evaluator uses, so that native and traced
/// results agree bit for bit on `f64`: each segment of [`SEGMENT`]
/// elements with four partial sums ([`sum4_segment`]), the segments' sums
/// added in order. An empty sum is `+0`; a sum of one term is that term.
pub(crate) fn sum4<T: Real>(x: &[T]) -> T {
    let mut segments = x.chunks(SEGMENT);
    let mut s = segments.next().map_or(T::cst(0.0), sum4_segment);
    for seg in segments {
        s += sum4_segment(seg);
    }
    s
}

/// `Σ xᵢ` with four partial sums (element `i` to sum `i mod 4`), added as
/// `(s₀ + s₁) + (s₂ + s₃)`, then the last `len mod 4` elements one by one.
fn sum4_segment<T: Real>(x: &[T]) -> T {
    let mut acc = [T::cst(SUM_START); 4];
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

/// `Σᵢ aᵢ bᵢ` with four partial sums, as [`sum4`] of the products within
/// one segment, but never split into segments (the
/// evaluator's dot product on `f64`). Empty, it is `+0`.
pub(crate) fn dot4<T: Real>(a: &[T], b: &[T]) -> T {
    if a.is_empty() || b.is_empty() {
        return T::cst(0.0);
    }
    let mut acc = [T::cst(SUM_START); 4];
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

/// `out = op(A) op(B)` (`m × n`, row-major). On `f64` with the feature
/// `gemm` (the default) this is faer's GEMM ([`super::matmul`]). Otherwise each element
/// is the dot product of a row of `op(A)` and a column of `op(B)` with
/// four partial sums ([`dot4`]), whatever the flags; operands whose rows
/// (of `op(A)`) or columns (of `op(B)`) are not contiguous are transposed
/// into `scratch` first.
pub(crate) fn matmul_into<T: Real>(
    a: &[T],
    b: &[T],
    d: MatMulDims,
    scratch: &mut Vec<T>,
    out: &mut [T],
) {
    if T::matmul_library(a, b, d, out) {
        return;
    }
    let (m, k, _, n) = d.mkn();
    if n == 1 && k > 0 {
        // A matrix times a vector (`b` is `k × 1` or `1 × k`, contiguous
        // either way): `M x` four rows at a time, `Mᵀ x` four rows per
        // pass over `out`, neither transposing `M`.
        if d.transpose_a {
            rows_axpy(&a[..d.a_rows * d.a_cols], d.a_cols, &b[..k], out);
        } else {
            rows_dot(&a[..m * k], k, &b[..k], &mut out[..m]);
        }
        return;
    }
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
/// (the same bits). The kernel of each row of a matrix product on scalars
/// other than `f64`, and on `f64` without the feature `gemm`.
pub(crate) fn rows_dot<T: Real>(data: &[T], cols: usize, x: &[T], out: &mut [T]) {
    if cols == 0 {
        out.fill(T::cst(0.0));
        return;
    }
    let head = cols - cols % 4;
    let mut quads = out.chunks_exact_mut(4);
    let mut blocks = data.chunks_exact(4 * cols);
    for (o, block) in (&mut quads).zip(&mut blocks) {
        let mut acc = [[T::cst(SUM_START); 4]; 4];
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

/// `out = Mᵀ x` for the row-major `x.len() × cols` matrix `data`:
/// `out[j] = (((0 + x₀ M₀ⱼ) + x₁ M₁ⱼ) + …)`, the rows added in order, four
/// rows per pass over `out` (the same sums as one row per pass, with a
/// quarter of the loads and stores of `out`).
fn rows_axpy<T: Real>(data: &[T], cols: usize, x: &[T], out: &mut [T]) {
    let out = &mut out[..cols];
    out.fill(T::cst(0.0));
    if cols == 0 {
        return;
    }
    let rows = x.len();
    let mut quads = data.chunks_exact(4 * cols);
    for (block, xs) in (&mut quads).zip(x.chunks_exact(4)) {
        let (a, rest) = block.split_at(cols);
        let (b, rest) = rest.split_at(cols);
        let (c, e) = rest.split_at(cols);
        for j in 0..cols {
            out[j] = (((out[j] + xs[0] * a[j]) + xs[1] * b[j]) + xs[2] * c[j]) + xs[3] * e[j];
        }
    }
    for (row, &xr) in quads
        .remainder()
        .chunks_exact(cols)
        .zip(&x[rows - rows % 4..])
    {
        for (o, &mij) in out.iter_mut().zip(row) {
            *o += xr * mij;
        }
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
        out.fill(T::cst(if rows == 0 { 0.0 } else { SUM_START }));
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

/// The dimensions of `M x` (`transpose: false`) or `Mᵀ x` (`true`) as a
/// matrix product with the vector as a one-column matrix.
pub(crate) fn matvec_dims(m: &super::ir::Matrix, transpose: bool) -> MatMulDims {
    let len = if transpose { m.rows() } else { m.cols() };
    MatMulDims {
        a_rows: m.rows(),
        a_cols: m.cols(),
        b_rows: len,
        b_cols: 1,
        transpose_a: transpose,
        transpose_b: false,
    }
}

/// `out = M x` (`transpose: false`) or `Mᵀ x` (`true`) by
/// [`matmul_into`], the vector as a one-column matrix: the same sums as
/// [`Dense`](super::Dense)'s `matvec` and `vecmat` on `f64`.
pub(crate) fn matvec_into(
    m: &super::ir::Matrix,
    x: &[f64],
    transpose: bool,
    scratch: &mut Vec<f64>,
    out: &mut [f64],
) {
    matmul_into(m.as_slice(), x, matvec_dims(m, transpose), scratch, out);
}
