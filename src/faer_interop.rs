//! Dense vectors and matrices of the [`faer`] crate in and out of the
//! drivers (with the feature `faer`).
//!
//! Points and directions are faer columns: anything that is
//! [`AsColRef`] over `f64` with a run-time length, such as `&Col<f64>`,
//! `ColRef<f64>`, `&ColMut<f64>` or a column of a matrix (`m.col(j)`).
//! Gradients and Hessian-vector products come back as [`Col<f64>`];
//! Hessians and Jacobians as [`Mat<f64>`], ready for faer's factorisations
//! (Cholesky `llt`, `ldlt`, `lblt`, eigenvalues, SVD).
//!
//! Nothing here differentiates: every function calls the slice-based
//! driver of the same name ([`crate::gradient`], [`crate::hessian`], …) or
//! the compiled [`Hvp`], and only converts. The values are those drivers'
//! values, bit for bit (`tests/faer.rs` checks it), laid out as follows:
//!
//! | function | result | shape |
//! |---|---|---|
//! | [`gradient`] | `∇f(x)` | `n` |
//! | [`value_and_gradient`] | `(f(x), ∇f(x))` | scalar, `n` |
//! | [`hvp`], [`apply`] | `H_f(x) v` | `n` |
//! | [`hessian`], [`hessian_at`] | `H_f(x)`, entry `(i, j)` = `∂²f/∂xᵢ∂xⱼ` | `n × n` |
//! | [`jacobian`] | `J_f(x)`, row `i` = `∇fᵢ(x)` | `m × n` |
//!
//! A column that is not contiguous in memory (a row of a matrix viewed as
//! a column, say) is copied once into a buffer; a contiguous one is read
//! in place.
//!
//! The book's chapter "Dense linear algebra with faer" takes a full Newton
//! step with a Cholesky solve; `examples/dense_newton.rs` fits the main
//! job's model that way and checks the optimum against Newton-CG.
//!
//! # Example
//!
//! ```
//! use approx::assert_relative_eq;
//! use faer::{col, Col};
//! use optic_ad::{faer_interop, Real};
//!
//! // f(x) = x₀² x₁ + eˣ¹: ∇f = (2x₀x₁, x₀² + eˣ¹), H = [[2x₁, 2x₀], [2x₀, eˣ¹]].
//! fn f<T: Real>(x: &[T]) -> T {
//!     x[0] * x[0] * x[1] + x[1].exp()
//! }
//! let x: Col<f64> = col![1.5, 0.5];
//! let g = faer_interop::gradient(f, &x).unwrap();
//! let h = faer_interop::hessian(f, &x).unwrap();
//! assert_eq!((g.nrows(), h.nrows(), h.ncols()), (2, 2, 2));
//! assert_relative_eq!(g[1], 2.25 + 0.5_f64.exp());
//! assert_relative_eq!(h[(0, 1)], 3.0);
//! assert_relative_eq!(h[(1, 1)], 0.5_f64.exp());
//! // A Hessian-vector product is the matrix times the vector:
//! let hv = faer_interop::hvp(f, &x, &g).unwrap();
//! let hg = &h * &g;
//! assert_relative_eq!(hv[0], hg[0], max_relative = 1e-15);
//! assert_relative_eq!(hv[1], hg[1], max_relative = 1e-15);
//! ```

use faer::col::AsColRef;
use faer::{Col, ColRef, Mat};

use crate::drivers::IntoTraced;
use crate::error::Result;
use crate::{Hvp, Tracer};

/// The entries of `x` as a slice: in place if `x` is contiguous, else
/// copied into `buf`.
fn entries<'a>(x: ColRef<'a, f64>, buf: &'a mut Vec<f64>) -> &'a [f64] {
    match x.try_as_col_major() {
        Some(c) => c.as_slice(),
        None => {
            buf.clear();
            buf.extend(x.iter().copied());
            buf
        }
    }
}

/// A matrix from its rows (all of length `ncols`).
fn from_rows(rows: &[Vec<f64>], ncols: usize) -> Mat<f64> {
    Mat::from_fn(rows.len(), ncols, |i, j| rows[i][j])
}

/// Gradient `∇f(x)` of a scalar function, as a column ([`crate::gradient`]).
///
/// Shapes: `x` has `n ≥ 1` entries; so has the result.
///
/// # Errors
///
/// As [`crate::gradient`]: [`crate::Error::EmptyInput`] for an empty `x`,
/// the closure's own error, and the errors of tracing.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use faer::col;
/// use optic_ad::faer_interop::gradient;
/// use optic_ad::Real;
///
/// let g = gradient(|x| x[0].sin() * x[1], &col![0.5, 2.0]).unwrap();
/// assert_relative_eq!(g[0], 2.0 * 0.5_f64.cos());
/// assert_relative_eq!(g[1], 0.5_f64.sin());
/// ```
pub fn gradient<F, R>(f: F, x: impl AsColRef<T = f64, Rows = usize>) -> Result<Col<f64>>
where
    F: FnMut(&[Tracer]) -> R,
    R: IntoTraced<Tracer>,
{
    let mut buf = Vec::new();
    let g = crate::gradient(f, entries(x.as_col_ref(), &mut buf))?;
    Ok(Col::from_fn(g.len(), |i| g[i]))
}

/// The value and the gradient, `(f(x), ∇f(x))`, from one trace
/// ([`crate::value_and_gradient`]).
///
/// Shapes: `x` has `n ≥ 1` entries; so has the gradient.
///
/// # Errors
///
/// As [`gradient`].
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use faer::col;
/// use optic_ad::faer_interop::value_and_gradient;
///
/// let (y, g) = value_and_gradient(|x| x[0] * x[1], &col![3.0, 4.0]).unwrap();
/// assert_relative_eq!(y, 12.0);
/// assert_relative_eq!(g[0], 4.0);
/// ```
pub fn value_and_gradient<F, R>(
    f: F,
    x: impl AsColRef<T = f64, Rows = usize>,
) -> Result<(f64, Col<f64>)>
where
    F: FnMut(&[Tracer]) -> R,
    R: IntoTraced<Tracer>,
{
    let mut buf = Vec::new();
    let (y, g) = crate::value_and_gradient(f, entries(x.as_col_ref(), &mut buf))?;
    Ok((y, Col::from_fn(g.len(), |i| g[i])))
}

/// Hessian-vector product `H_f(x) v` of a scalar function, forward over
/// reverse ([`crate::hvp`]).
///
/// Shapes: `x` and `v` have `n ≥ 1` entries; so has the result.
///
/// # Errors
///
/// As [`crate::hvp`]: [`crate::Error::EmptyInput`] for an empty `x`,
/// [`crate::Error::LengthMismatch`] unless `v` has as many entries as `x`,
/// the closure's own error, and the errors of tracing.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use faer::col;
/// use optic_ad::faer_interop::hvp;
///
/// // f = x₀² x₁: H = [[2x₁, 2x₀], [2x₀, 0]].
/// let hv = hvp(|x| x[0] * x[0] * x[1], &col![1.0, 2.0], &col![1.0, -1.0]).unwrap();
/// assert_relative_eq!(hv[0], 2.0);
/// assert_relative_eq!(hv[1], 2.0);
/// ```
pub fn hvp<F, R>(
    f: F,
    x: impl AsColRef<T = f64, Rows = usize>,
    v: impl AsColRef<T = f64, Rows = usize>,
) -> Result<Col<f64>>
where
    F: FnMut(&[Tracer]) -> R,
    R: IntoTraced<Tracer>,
{
    let (mut xb, mut vb) = (Vec::new(), Vec::new());
    let hv = crate::hvp(
        f,
        entries(x.as_col_ref(), &mut xb),
        entries(v.as_col_ref(), &mut vb),
    )?;
    Ok(Col::from_fn(hv.len(), |i| hv[i]))
}

/// Dense Hessian `H_f(x)` of a scalar function, `n × n`, entry `(i, j)`
/// being `∂²f/∂xᵢ∂xⱼ` ([`crate::hessian`]: row `i` is `H eᵢ`, one
/// Hessian-vector product per row).
///
/// # Errors
///
/// As [`crate::hessian`]: [`crate::Error::EmptyInput`] for an empty `x`,
/// the closure's own error, and the errors of tracing.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use faer::col;
/// use faer::linalg::solvers::Solve;
/// use faer::Side;
/// use optic_ad::faer_interop::hessian;
///
/// // f = ½xᵀAx with A = [[4, 1], [1, 3]]: H = A.
/// let f = |x: &[optic_ad::Tracer]| (x[0] * x[0] * 4.0 + x[0] * x[1] * 2.0 + x[1] * x[1] * 3.0) * 0.5;
/// let h = hessian(f, &col![0.3, -0.7]).unwrap();
/// assert_relative_eq!(h[(0, 0)], 4.0);
/// assert_relative_eq!(h[(1, 0)], 1.0);
/// // Solve H p = (1, 2) by Cholesky: p = (1, 7) / 11.
/// let p = h.llt(Side::Lower).unwrap().solve(&col![1.0, 2.0]);
/// assert_relative_eq!(p[1], 7.0 / 11.0, max_relative = 1e-15);
/// ```
pub fn hessian<F, R>(f: F, x: impl AsColRef<T = f64, Rows = usize>) -> Result<Mat<f64>>
where
    F: FnMut(&[Tracer]) -> R,
    R: IntoTraced<Tracer>,
{
    let mut buf = Vec::new();
    let xs = entries(x.as_col_ref(), &mut buf);
    let rows = crate::hessian(f, xs)?;
    Ok(from_rows(&rows, xs.len()))
}

/// Dense Jacobian `J_f(x)` of `f : ℝⁿ → ℝᵐ`, `m × n`, row `i` being
/// `∇fᵢ(x)` ([`crate::jacobian`]: one vector-Jacobian product per row).
///
/// # Errors
///
/// As [`crate::jacobian`]: [`crate::Error::EmptyInput`] for an empty `x`,
/// the closure's own error, and the errors of tracing.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use faer::col;
/// use optic_ad::faer_interop::jacobian;
/// use optic_ad::Real;
///
/// // f(x) = (x₀x₁x₂, sin x₀): 2 × 3.
/// let j = jacobian(|x| vec![x[0] * x[1] * x[2], x[0].sin()], &col![1.0, 2.0, 3.0]).unwrap();
/// assert_eq!((j.nrows(), j.ncols()), (2, 3));
/// assert_relative_eq!(j[(0, 2)], 2.0);
/// assert_relative_eq!(j[(1, 0)], 1.0_f64.cos());
/// assert_eq!(j[(1, 2)], 0.0);
/// ```
pub fn jacobian<F, R>(f: F, x: impl AsColRef<T = f64, Rows = usize>) -> Result<Mat<f64>>
where
    F: FnMut(&[Tracer]) -> R,
    R: IntoTraced<Vec<Tracer>>,
{
    let mut buf = Vec::new();
    let xs = entries(x.as_col_ref(), &mut buf);
    let rows = crate::jacobian(f, xs)?;
    Ok(from_rows(&rows, xs.len()))
}

/// Moves a compiled [`Hvp`] to the point `x` ([`Hvp::linearize`]) and
/// returns `(f(x), ∇f(x))`.
///
/// Shapes: `x` has the `n` entries `h` was built with; so has the gradient.
///
/// # Errors
///
/// As [`Hvp::linearize_with_gradient`]: [`crate::Error::LengthMismatch`]
/// for a point of the wrong length, errors of re-tracing where a guard
/// fails.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use faer::col;
/// use optic_ad::{faer_interop, Hvp};
///
/// let mut h = Hvp::new(|x| x[0] * x[0] * x[1], &[1.0, 1.0]).unwrap();
/// let (y, g) = faer_interop::linearize(&mut h, &col![2.0, 3.0]).unwrap();
/// assert_relative_eq!(y, 12.0);
/// assert_relative_eq!(g[0], 12.0);
/// let hv = faer_interop::apply(&mut h, &col![0.0, 1.0]).unwrap(); // (2x₀, 0)
/// assert_relative_eq!(hv[0], 4.0);
/// ```
pub fn linearize<F, R>(
    h: &mut Hvp<F>,
    x: impl AsColRef<T = f64, Rows = usize>,
) -> Result<(f64, Col<f64>)>
where
    F: Fn(&[Tracer]) -> R,
    R: IntoTraced<Tracer>,
{
    let mut buf = Vec::new();
    let xs = entries(x.as_col_ref(), &mut buf);
    let mut g = vec![0.0; xs.len()];
    let y = h.linearize_with_gradient(xs, &mut g)?;
    Ok((y, Col::from_fn(g.len(), |i| g[i])))
}

/// `H_f(x) v` at the point of the last [`linearize`] (or
/// [`Hvp::linearize`]) of a compiled [`Hvp`] ([`Hvp::apply`]).
///
/// Shapes: `v` has the `n` entries `h` was built with; so has the result.
///
/// # Errors
///
/// As [`Hvp::apply`]: [`crate::Error::LengthMismatch`] for a direction of
/// the wrong length, [`crate::Error::NotLinearized`] before a successful
/// `linearize`.
///
/// # Example
///
/// See [`linearize`].
pub fn apply<F, R>(h: &mut Hvp<F>, v: impl AsColRef<T = f64, Rows = usize>) -> Result<Col<f64>>
where
    F: Fn(&[Tracer]) -> R,
    R: IntoTraced<Tracer>,
{
    let mut buf = Vec::new();
    let vs = entries(v.as_col_ref(), &mut buf);
    let mut hv = vec![0.0; vs.len()];
    h.apply(vs, &mut hv)?;
    Ok(Col::from_fn(hv.len(), |i| hv[i]))
}

/// Value, gradient and dense Hessian at `x` from a compiled [`Hvp`]: one
/// [`Hvp::linearize`] at `x`, then `n` products [`Hvp::apply`] with the
/// unit vectors, row `i` being `H eᵢ` (the layout of [`hessian`]). For
/// iterations that need the Hessian at many points, such as Newton's
/// method: the function is traced once, when `h` is built.
///
/// Leaves `h` linearised at `x`.
///
/// Shapes: `x` has the `n` entries `h` was built with; the result is
/// `(f(x), ∇f(x), H_f(x))` with `n` and `n × n` entries.
///
/// # Errors
///
/// As [`linearize`].
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use faer::col;
/// use optic_ad::{faer_interop, Hvp, Real};
///
/// // f = x₀⁴ + x₀x₁: H = [[12x₀², 1], [1, 0]].
/// let mut h = Hvp::new(|x| x[0].powi(4) + x[0] * x[1], &[1.0, 1.0]).unwrap();
/// for x0 in [0.5, 1.0, 2.0] {
///     let (_, _, hess) = faer_interop::hessian_at(&mut h, &col![x0, -1.0]).unwrap();
///     assert_relative_eq!(hess[(0, 0)], 12.0 * x0 * x0, max_relative = 1e-15);
///     assert_eq!(hess[(0, 1)], 1.0);
///     assert_eq!(hess[(1, 1)], 0.0);
/// }
/// ```
pub fn hessian_at<F, R>(
    h: &mut Hvp<F>,
    x: impl AsColRef<T = f64, Rows = usize>,
) -> Result<(f64, Col<f64>, Mat<f64>)>
where
    F: Fn(&[Tracer]) -> R,
    R: IntoTraced<Tracer>,
{
    let (y, g) = linearize(h, x)?;
    let n = g.nrows();
    let mut hess = Mat::zeros(n, n);
    let (mut e, mut row) = (vec![0.0; n], vec![0.0; n]);
    for i in 0..n {
        e[i] = 1.0;
        h.apply(&e, &mut row)?;
        e[i] = 0.0;
        for (j, &v) in row.iter().enumerate() {
            hess[(i, j)] = v;
        }
    }
    Ok((y, g, hess))
}

// ---------- faer's columns and matrices as fields of structured points ----------

impl<T: crate::Real> crate::Differentiable for Col<T> {
    type Scalar = T;
    type Rebind<U: crate::Real> = Col<U>;
    fn flatten_into(&self, leaves: &mut Vec<T>) {
        leaves.extend((0..self.nrows()).map(|i| self[i]));
    }
    fn leaf_count(&self) -> usize {
        self.nrows()
    }
    fn same_shape(&self, other: &Self) -> bool {
        self.nrows() == other.nrows()
    }
    fn leaf_names(&self, path: &str, names: &mut Vec<String>) {
        names.extend((0..self.nrows()).map(|i| format!("{path}[{i}]")));
    }
}

impl<T: crate::Real, U: crate::Real> crate::Rebuild<Col<T>> for Col<U> {
    fn rebuild(template: &Col<T>, leaves: &mut crate::Leaves<'_, U>) -> Option<Self> {
        let v = leaves.take(template.nrows())?;
        Some(Col::from_fn(v.len(), |i| v[i]))
    }
}

impl<T: crate::Real> crate::Point for Col<T> {
    crate::structured_point!();
}

/// A matrix's leaves are its entries in faer's column-major order, named
/// `[i, j]`.
impl<T: crate::Real> crate::Differentiable for Mat<T> {
    type Scalar = T;
    type Rebind<U: crate::Real> = Mat<U>;
    fn flatten_into(&self, leaves: &mut Vec<T>) {
        for j in 0..self.ncols() {
            leaves.extend((0..self.nrows()).map(|i| self[(i, j)]));
        }
    }
    fn leaf_count(&self) -> usize {
        self.nrows() * self.ncols()
    }
    fn same_shape(&self, other: &Self) -> bool {
        (self.nrows(), self.ncols()) == (other.nrows(), other.ncols())
    }
    fn leaf_names(&self, path: &str, names: &mut Vec<String>) {
        for j in 0..self.ncols() {
            names.extend((0..self.nrows()).map(|i| format!("{path}[{i}, {j}]")));
        }
    }
}

impl<T: crate::Real, U: crate::Real> crate::Rebuild<Mat<T>> for Mat<U> {
    fn rebuild(template: &Mat<T>, leaves: &mut crate::Leaves<'_, U>) -> Option<Self> {
        let (m, n) = (template.nrows(), template.ncols());
        let v = leaves.take(m * n)?;
        Some(Mat::from_fn(m, n, |i, j| v[j * m + i]))
    }
}

impl<T: crate::Real> crate::Point for Mat<T> {
    crate::structured_point!();
}
