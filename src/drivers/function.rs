//! What a driver differentiates: the function kinds ([`LeafFunction`]:
//! scalar code, array code, code on a structured point), the sealed
//! [`IntoTraced`] for its results, and the moves between a point and its
//! flat leaves.

use std::borrow::Cow;

use crate::array::{TArray, TScalar};
use crate::differentiable::{Differentiable, Point};
use crate::error::{check_len, Error, Result};
use crate::program::trace::Tracer;
use crate::real::Real;

pub(super) fn check_nonempty(what: &'static str, n: usize) -> Result<()> {
    if n == 0 {
        Err(Error::EmptyInput(what))
    } else {
        Ok(())
    }
}

/// `f` on structured points as a closure of the flat leaves: the tracers
/// are put back into the point's shape (for a flat point, the slice
/// itself) before `f` sees them.
pub(super) fn on_leaves<'a, P, O, R>(
    point: &'a P,
    f: impl FnOnce(&P::Arg<Tracer>) -> R + 'a,
) -> impl FnOnce(&[Tracer]) -> Result<O> + 'a
where
    P: Point + ?Sized,
    R: IntoTraced<O>,
{
    move |t| {
        point
            .with_arg(t, f)
            .ok_or(Error::StructureMismatch { what: "point" })?
            .into_traced()
    }
}

/// [`on_leaves`] for a function the driver may call more than once (to
/// trace code with loops again on the array trace: [`trace_or_host`]).
pub(super) fn on_leaves_mut<'a, P, O, R>(
    point: &'a P,
    mut f: impl FnMut(&P::Arg<Tracer>) -> R + 'a,
) -> impl FnMut(&[Tracer]) -> Result<O> + 'a
where
    P: Point + ?Sized,
    R: IntoTraced<O>,
{
    move |t| {
        point
            .with_arg(t, &mut f)
            .ok_or(Error::StructureMismatch { what: "point" })?
            .into_traced()
    }
}

/// A value of the point's shape from its leaves (a gradient, a
/// Hessian-vector product).
pub(super) fn in_shape<P: Point + ?Sized, T: Real>(
    point: &P,
    leaves: Vec<T>,
) -> Result<P::Owned<T>> {
    point
        .rebuild(leaves)
        .ok_or(Error::StructureMismatch { what: "point" })
}

/// The leaves of a direction (or any second point) after checking that it
/// has the point's structure: its number of leaves (a flat point's length,
/// [`Error::LengthMismatch`]) and, for structured points, its leaves'
/// names ([`Error::StructureMismatch`]).
pub(super) fn direction_leaves<'a, P, Q>(
    what: &'static str,
    point: &P,
    shape: &mut PointShape,
    d: &'a Q,
) -> Result<Cow<'a, [P::Scalar]>>
where
    P: Point + ?Sized,
    Q: Point<Scalar = P::Scalar> + ?Sized,
{
    let leaves = d.leaves();
    check_len(what, shape.len, leaves.len())?;
    if !(P::FLAT && Q::FLAT)
        && *shape.names.get_or_insert_with(|| point.leaf_names()) != d.leaf_names()
    {
        return Err(Error::StructureMismatch { what });
    }
    Ok(leaves)
}

/// What [`direction_leaves`] compares directions with: the point's number
/// of leaves, and its leaf names once one direction needed them (computed
/// once per call of a driver, however many directions it takes).
pub(super) struct PointShape {
    pub(super) len: usize,
    pub(super) names: Option<Vec<String>>,
}

impl PointShape {
    pub(super) fn new(len: usize) -> Self {
        PointShape { len, names: None }
    }
}

/// What a differentiated closure may return: its traced value(s) `O`, or
/// `Result<O>`, so that an error inside it (typically from a driver called
/// inside it, on tracers) ends the outer driver with that error instead of
/// an `unwrap`.
///
/// Implemented for [`Tracer`] and `Result<Tracer>` (scalar functions),
/// and for `Vec<Tracer>` and `Result<Vec<Tracer>>` (vector functions).
/// Type inference picks the `Result` form from a `?` or an `Ok(…)` in the
/// closure; no annotation is needed.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{gradient, Error, Real, Tracer};
///
/// // g(x) = ∂/∂y (x y²) at y = x, i.e. 2x², by a gradient inside a gradient.
/// let g = gradient(
///     |x| {
///         let inner = gradient(|y| x[0] * y[0] * y[0], &[x[0]])?;
///         Ok(inner[0])
///     },
///     &[3.0],
/// )
/// .unwrap();
/// assert_relative_eq!(g[0], 12.0); // d/dx 2x² = 4x
///
/// // An inner error (here: a point of the wrong length) comes out as the
/// // outer driver's `Err`.
/// let r = gradient(
///     |x| Ok(optic_ad::hvp(|y| y[0] * y[1], &[x[0], x[0]], &[x[0]])?[0]),
///     &[3.0],
/// );
/// assert!(matches!(r, Err(Error::LengthMismatch { .. })));
/// ```
pub trait IntoTraced<O>: private::Sealed {
    /// The traced value(s), or the closure's error.
    ///
    /// # Errors
    ///
    /// The error the closure returned.
    fn into_traced(self) -> Result<O>;
}

mod private {
    pub trait Sealed {}
    impl Sealed for super::Tracer {}
    impl Sealed for crate::Result<super::Tracer> {}
    impl Sealed for Vec<super::Tracer> {}
    impl Sealed for crate::Result<Vec<super::Tracer>> {}
}

impl IntoTraced<Tracer> for Tracer {
    fn into_traced(self) -> Result<Tracer> {
        Ok(self)
    }
}

impl IntoTraced<Tracer> for Result<Tracer> {
    fn into_traced(self) -> Result<Tracer> {
        self
    }
}

impl IntoTraced<Vec<Tracer>> for Vec<Tracer> {
    fn into_traced(self) -> Result<Vec<Tracer>> {
        Ok(self)
    }
}

impl IntoTraced<Vec<Tracer>> for Result<Vec<Tracer>> {
    fn into_traced(self) -> Result<Vec<Tracer>> {
        self
    }
}

/// A scalar function of a point's leaves, as the compiled drivers
/// [`Gradient`](crate::Gradient) and [`Hvp`](crate::Hvp) hold it: a closure of `&[Tracer]` (the flat
/// forms, [`Gradient::new`](crate::Gradient::new)), or a function of a structured point with the
/// point's shape kept beside it ([`OnPoint`], [`Gradient::structured`](crate::Gradient::structured)).
/// Sealed.
pub trait LeafFunction: leaf_private::Sealed {
    /// `f` at these leaves, traced.
    ///
    /// # Errors
    ///
    /// The function's own error; [`Error::StructureMismatch`] if the
    /// leaves do not fit the point.
    fn call_leaves(&self, leaves: &[Tracer]) -> Result<Tracer>;
}

mod leaf_private {
    use crate::array::{TArray, TScalar};
    use crate::error::Result;

    /// A function written against the array trace.
    pub type ArrayFn<'a> = dyn Fn(&TArray) -> Result<TScalar> + 'a;

    pub trait Sealed {
        /// The function, where it is written against the array trace
        /// ([`super::OnArray`]): traced there directly, never on scalar
        /// tracers.
        fn array_function(&self) -> Option<&ArrayFn<'_>> {
            None
        }
    }
}

/// Where a function written against the array trace is asked for at
/// points other than `f64`.
pub(super) const ARRAY_FUNCTION_ON_TRACERS: Error = Error::Unsupported(
    "a function of the array trace (`Gradient::array`, `Hvp::array`) is evaluated at `f64` \
     points only; write it against `Array` and trace it on `Dense<Tracer>` for other scalars",
);

/// A function written against the array trace, `Fn(&TArray) ->
/// Result<TScalar>`: the `F` of a [`Gradient`](crate::Gradient) or [`Hvp`](crate::Hvp) made by
/// [`Gradient::array`](crate::Gradient::array) or [`Hvp::array`](crate::Hvp::array). Its programs are array programs
/// (one instruction per array operation), evaluated at `f64` points.
#[derive(Clone)]
pub struct OnArray<F>(pub(super) F);

impl<F> std::fmt::Debug for OnArray<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnArray")
    }
}

impl<F: Fn(&TArray) -> Result<TScalar>> leaf_private::Sealed for OnArray<F> {
    fn array_function(&self) -> Option<&leaf_private::ArrayFn<'_>> {
        Some(&self.0)
    }
}

impl<F: Fn(&TArray) -> Result<TScalar>> LeafFunction for OnArray<F> {
    /// Refused: the function takes array tracers only.
    fn call_leaves(&self, _: &[Tracer]) -> Result<Tracer> {
        Err(ARRAY_FUNCTION_ON_TRACERS)
    }
}

impl<F, R> leaf_private::Sealed for F
where
    F: Fn(&[Tracer]) -> R,
    R: IntoTraced<Tracer>,
{
}

impl<F, R> LeafFunction for F
where
    F: Fn(&[Tracer]) -> R,
    R: IntoTraced<Tracer>,
{
    fn call_leaves(&self, leaves: &[Tracer]) -> Result<Tracer> {
        self(leaves).into_traced()
    }
}

/// A function of a structured point, with the point whose shape (`Vec`
/// lengths, data fields) its traced programs were built for: the `F` of a
/// [`Gradient`](crate::Gradient) or [`Hvp`](crate::Hvp) made by `structured`.
#[derive(Clone)]
pub struct OnPoint<P, F> {
    pub(super) point: P,
    pub(super) f: F,
    /// The leaves of the latest point, kept to be reused.
    pub(super) leaves: Vec<f64>,
}

impl<P, F> std::fmt::Debug for OnPoint<P, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnPoint")
            .field("leaves", &self.leaves.len())
            .finish()
    }
}

impl<P, F> leaf_private::Sealed for OnPoint<P, F> {}

impl<P, F, R> LeafFunction for OnPoint<P, F>
where
    P: Point<Scalar = f64>,
    F: Fn(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Tracer>,
{
    fn call_leaves(&self, leaves: &[Tracer]) -> Result<Tracer> {
        on_leaves(&self.point, &self.f)(leaves)
    }
}

impl<P, F, R> OnPoint<P, F>
where
    P: Differentiable<Scalar = f64> + Point<Scalar = f64> + Clone,
    F: Fn(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Tracer>,
{
    pub(super) fn new(f: F, point: &P) -> Self {
        OnPoint {
            point: point.clone(),
            f,
            leaves: Vec::new(),
        }
    }

    /// The leaves of `p`, in the kept buffer (which the caller gives back
    /// with [`OnPoint::restore`]), after checking that `p` has the shape
    /// the programs were built for; and, where `p`'s data fields differ
    /// from those they were traced with, the point they were traced at:
    /// `p` is then kept as the new point, and the caller traces again
    /// (and gives the old point back with [`OnPoint::restore`] if that
    /// fails, so that the programs and the point stay a pair).
    pub(super) fn take_leaves(
        &mut self,
        what: &'static str,
        p: &P,
    ) -> Result<(Vec<f64>, Option<P>)> {
        if !self.point.same_shape(p) {
            return Err(Error::StructureMismatch { what });
        }
        let old = (!self.point.same_data(p)).then(|| std::mem::replace(&mut self.point, p.clone()));
        let mut x = std::mem::take(&mut self.leaves);
        x.clear();
        p.flatten_into(&mut x);
        Ok((x, old))
    }

    /// Gives back the leaf buffer, and the point the programs were traced
    /// at where tracing at a new point failed.
    pub(super) fn restore(&mut self, leaves: Vec<f64>, old: Option<P>) {
        self.leaves = leaves;
        if let Some(old) = old {
            self.point = old;
        }
    }
}
