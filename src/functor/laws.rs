//! The functor laws of ∂⃖, ∂⃗ and the Taylor functor (stated in the book's chapter "The AD optic
//! functor") as reusable checkers, one named function per law, in the manner of
//! the lens-law checkers in [`crate::optic`].
//!
//! Two optics are compared *by action* (block style, K. Fischer, "∂P.jl
//! terminology and notation guide", §I.A and §III): the same forward value and
//! the same `modify` result for a given point and output cotangent. Residuals
//! may differ between representatives and are never compared. Values are
//! compared with [`approx::relative_eq!`] at the given relative tolerance (and
//! the same number as an absolute floor near zero), because the two sides
//! associate cotangent sums differently.

use approx::relative_eq;

use super::forward::forward;
use super::reverse::{reverse, ReverseOptic};
use super::taylor::TaylorProgram;
use crate::error::{check_len, Result};
use crate::optic::{Id, Optic};
use crate::program::Program;

fn same(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            (x.is_nan() && y.is_nan()) || relative_eq!(*x, *y, epsilon = tol, max_relative = tol)
        })
}

/// An optic on vectors of `f64` that fails with this crate's error: the
/// shape of [`ReverseOptic`] and of its compositions.
trait VecOptic:
    Optic<A = Vec<f64>, B = Vec<f64>, BPrime = Vec<f64>, APrime = Vec<f64>, Error = crate::Error>
{
}

impl<O> VecOptic for O where
    O: Optic<
        A = Vec<f64>,
        B = Vec<f64>,
        BPrime = Vec<f64>,
        APrime = Vec<f64>,
        Error = crate::Error,
    >
{
}

/// Whether two optics on `Vec<f64>` have the same action at `x` with
/// output cotangent `ybar`: equal forward values and equal `modify` results.
fn same_action(
    o1: &impl VecOptic,
    o2: &impl VecOptic,
    x: &[f64],
    ybar: &[f64],
    tol: f64,
) -> Result<bool> {
    let (_, y1) = o1.left(x.to_vec())?;
    let (_, y2) = o2.left(x.to_vec())?;
    let a1 = o1.modify(x.to_vec(), |_| ybar.to_vec())?;
    let a2 = o2.modify(x.to_vec(), |_| ybar.to_vec())?;
    Ok(same(&y1, &y2, tol) && same(&a1, &a2, tol))
}

/// Composition law `∂⃖(g ∘ f) ≅ ∂⃖f § ∂⃖g` (Fischer, ∂P.jl notes, §III: an
/// optic functor preserves composition), checked by action at `x` with output
/// cotangent `ybar`.
///
/// Shapes: `f : ℝⁿ → ℝᵐ`, `g : ℝᵐ → ℝᵏ`, `x` has `n` entries, `ybar` has
/// `k`.
///
/// # Errors
///
/// [`crate::Error::LengthMismatch`] if the shapes do not fit; evaluation
/// errors of the programs.
///
/// # Example
///
/// ```
/// use optic_ad::functor::laws::composition_law;
/// use optic_ad::{trace, Real};
///
/// let f = trace(|x| vec![x[0] * x[1], x[0].sin()], &[1.0, 2.0]).unwrap();
/// let g = trace(|y| vec![y[0].exp() + y[1] * y[0]], &[1.0, 1.0]).unwrap();
/// assert!(composition_law(&f, &g, &[0.3, -0.7], &[1.5], 1e-12).unwrap());
/// ```
pub fn composition_law(
    f: &Program,
    g: &Program,
    x: &[f64],
    ybar: &[f64],
    tol: f64,
) -> Result<bool> {
    let whole = reverse(&f.then(g)?)?;
    let parts = reverse(f)?.then(reverse(g)?);
    same_action(&whole, &parts, x, ybar, tol)
}

/// Identity laws `Id § ∂⃖f ≅ ∂⃖f ≅ ∂⃖f § Id` (Fischer, ∂P.jl notes, §I),
/// checked by action at `x` with output cotangent `ybar`.
///
/// # Errors
///
/// As [`composition_law`].
///
/// # Example
///
/// ```
/// use optic_ad::functor::laws::identity_laws;
/// use optic_ad::{trace, Real};
///
/// let f = trace(|x| vec![x[0].tanh() * x[1]], &[1.0, 2.0]).unwrap();
/// assert!(identity_laws(&f, &[0.4, 0.9], &[2.0], 0.0).unwrap());
/// ```
pub fn identity_laws(f: &Program, x: &[f64], ybar: &[f64], tol: f64) -> Result<bool> {
    let df = reverse(f)?;
    let left = Id::<Vec<f64>, Vec<f64>, crate::Error>::new().then(df.clone());
    let right = df
        .clone()
        .then(Id::<Vec<f64>, Vec<f64>, crate::Error>::new());
    Ok(same_action(&left, &df, x, ybar, tol)? && same_action(&right, &df, x, ybar, tol)?)
}

/// Functor law on identities, `∂⃖(id) ≅ id`: the reverse optic of the
/// identity program of width `n` passes `x` forward and `ȳ` back unchanged.
///
/// # Errors
///
/// [`crate::Error::LengthMismatch`] unless `x` and `ybar` have `n` entries.
///
/// # Example
///
/// ```
/// use optic_ad::functor::laws::preserves_identity;
///
/// assert!(preserves_identity(3, &[1.0, 2.0, 3.0], &[0.5, -1.0, 4.0]).unwrap());
/// ```
pub fn preserves_identity(n: usize, x: &[f64], ybar: &[f64]) -> Result<bool> {
    // Lengths first: nothing of size `n` is built for a point that does not
    // have it.
    check_len("point", n, x.len())?;
    check_len("output cotangent", n, ybar.len())?;
    let mut b = crate::program::Builder::new();
    let xs: Vec<_> = (0..n).map(|_| b.input()).collect();
    let id: ReverseOptic = reverse(&b.finish(&xs)?)?;
    let (_, y) = id.left(x.to_vec())?;
    let back = id.modify(x.to_vec(), |_| ybar.to_vec())?;
    Ok(y == x && back == ybar)
}

/// Forward functor law `∂⃗(g ∘ f) = ∂⃗g ∘ ∂⃗f`: the pushforward of a composite
/// is the composite of the pushforwards (Fischer, ∂P.jl notes, §IV, the chain
/// rule `(g ∘ f)₊ = g₊ ∘ f₊`), checked by evaluating both programs at the point
/// `x` with tangent `xdot`.
///
/// Shapes: `f : ℝⁿ → ℝᵐ`, `g : ℝᵐ → ℝᵏ`; `x` and `xdot` have `n` entries.
///
/// # Errors
///
/// [`crate::Error::LengthMismatch`] if the shapes do not fit; evaluation
/// errors of the programs.
///
/// # Example
///
/// ```
/// use optic_ad::functor::laws::forward_composition_law;
/// use optic_ad::{trace, Real};
///
/// let f = trace(|x| vec![x[0] * x[1], x[0].sin()], &[1.0, 2.0]).unwrap();
/// let g = trace(|y| vec![y[0].exp() + y[1] * y[0]], &[1.0, 1.0]).unwrap();
/// assert!(forward_composition_law(&f, &g, &[0.3, -0.7], &[1.0, 2.0], 1e-12).unwrap());
/// ```
pub fn forward_composition_law(
    f: &Program,
    g: &Program,
    x: &[f64],
    xdot: &[f64],
    tol: f64,
) -> Result<bool> {
    check_len("point", f.n_inputs(), x.len())?;
    check_len("tangent", f.n_inputs(), xdot.len())?;
    let whole = forward(&f.then(g)?);
    let parts = forward(f).then(&forward(g))?;
    let mut inp = x.to_vec();
    inp.extend_from_slice(xdot);
    Ok(same(&whole.eval(&inp)?, &parts.eval(&inp)?, tol))
}

/// Forward functor law on identities, `∂⃗(id) = id`: the pushforward of the
/// identity program of width `n` returns `(x, ẋ)` unchanged.
///
/// # Errors
///
/// [`crate::Error::LengthMismatch`] unless `x` and `xdot` have `n` entries.
///
/// # Example
///
/// ```
/// use optic_ad::functor::laws::forward_preserves_identity;
///
/// assert!(forward_preserves_identity(2, &[1.0, 2.0], &[0.5, -1.0]).unwrap());
/// ```
pub fn forward_preserves_identity(n: usize, x: &[f64], xdot: &[f64]) -> Result<bool> {
    check_len("point", n, x.len())?;
    check_len("tangent", n, xdot.len())?;
    let mut b = crate::program::Builder::new();
    let xs: Vec<_> = (0..n).map(|_| b.input()).collect();
    let id = forward(&b.finish(&xs)?);
    let mut inp = x.to_vec();
    inp.extend_from_slice(xdot);
    Ok(id.eval(&inp)? == inp)
}

/// Taylor functor law on compositions, `T(f ; g) = T(f) ; T(g)`, by
/// action: the Taylor program of the composite and the composition of the
/// two Taylor programs (the output jets of `T(f)` fed to `T(g)`) map the
/// input jets `jets` to the same output jets. `jets` holds one jet of
/// `degree + 1` coefficients per input of `f`, concatenated.
///
/// # Errors
///
/// [`crate::Error::LengthMismatch`] unless `f`'s outputs match `g`'s inputs
/// and `jets.len() == f.n_inputs() · (degree + 1)`;
/// [`crate::Error::OrderTooHigh`] above
/// [`MAX_TAYLOR_ORDER`](super::MAX_TAYLOR_ORDER); errors of evaluation.
///
/// # Example
///
/// ```
/// use optic_ad::functor::laws::taylor_composition_law;
/// use optic_ad::{trace, Real};
///
/// let f = trace(|x| vec![x[0].sin() * x[1], x[1].exp()], &[1.0, 1.0]).unwrap();
/// let g = trace(|y| vec![y[0] / (y[1] + 1.0)], &[1.0, 1.0]).unwrap();
/// // x(t) = (0.3 + t, −0.7 + 2t − t²), degree 3.
/// let jets = [0.3, 1.0, 0.0, 0.0, -0.7, 2.0, -1.0, 0.0];
/// assert!(taylor_composition_law(&f, &g, 3, &jets, 1e-12).unwrap());
/// ```
pub fn taylor_composition_law(
    f: &Program,
    g: &Program,
    degree: usize,
    jets: &[f64],
    tol: f64,
) -> Result<bool> {
    let w = degree + 1;
    check_len("input jets", f.n_inputs() * w, jets.len())?;
    let mut whole = TaylorProgram::new(&f.then(g)?, degree)?;
    let mut tf = TaylorProgram::new(f, degree)?;
    let mut tg = TaylorProgram::new(g, degree)?;
    let mut mid = vec![0.0; f.n_outputs() * w];
    tf.eval(jets, &mut mid)?;
    let mut parts = vec![0.0; g.n_outputs() * w];
    tg.eval(&mid, &mut parts)?;
    let mut direct = vec![0.0; g.n_outputs() * w];
    whole.eval(jets, &mut direct)?;
    Ok(same(&direct, &parts, tol))
}

/// Taylor functor law on identities, `T(id) = id`: the Taylor program of
/// the identity program of width `n` returns its input jets unchanged, bit
/// for bit.
///
/// # Errors
///
/// [`crate::Error::LengthMismatch`] unless `jets.len() == n · (degree + 1)`;
/// [`crate::Error::OrderTooHigh`] above
/// [`MAX_TAYLOR_ORDER`](super::MAX_TAYLOR_ORDER).
///
/// # Example
///
/// ```
/// use optic_ad::functor::laws::taylor_preserves_identity;
///
/// assert!(taylor_preserves_identity(2, 2, &[1.0, 0.5, 0.0, 2.0, -1.0, 3.0]).unwrap());
/// ```
pub fn taylor_preserves_identity(n: usize, degree: usize, jets: &[f64]) -> Result<bool> {
    let w = degree + 1;
    check_len("input jets", n * w, jets.len())?;
    let mut b = crate::program::Builder::new();
    let xs: Vec<_> = (0..n).map(|_| b.input()).collect();
    let mut id = TaylorProgram::new(&b.finish(&xs)?, degree)?;
    let mut out = vec![0.0; n * w];
    id.eval(jets, &mut out)?;
    Ok(out
        .iter()
        .zip(jets)
        .all(|(a, b)| a.to_bits() == b.to_bits()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{trace, Real};

    /// The comparison the checkers rest on can fail: two different optics
    /// are told apart, by the forward value or by the pullback alone.
    #[test]
    fn same_action_tells_different_optics_apart() {
        let f = reverse(&trace(|x| vec![x[0].sin()], &[0.5]).unwrap()).unwrap();
        let g = reverse(&trace(|x| vec![x[0].cos()], &[0.5]).unwrap()).unwrap();
        let h =
            reverse(&trace(|x| vec![x[0].sin() + x[0] * x[0] * 1e-3], &[0.5]).unwrap()).unwrap();
        assert!(same_action(&f, &f, &[0.5], &[1.0], 0.0).unwrap());
        assert!(!same_action(&f, &g, &[0.5], &[1.0], 1e-12).unwrap());
        // h differs from f by x²·10⁻³: told apart at x = 1; at x = 0 their
        // values agree.
        assert!(!same_action(&f, &h, &[1.0], &[1.0], 1e-12).unwrap());
        let (_, yf) = f.left(vec![0.0]).unwrap();
        let (_, yh) = h.left(vec![0.0]).unwrap();
        assert_eq!(yf, yh);
    }
}
