//! [`pullback`]: the value at a point and the pullback `ȳ ↦ x̄` to apply
//! to many cotangents (the right of ∂⃖f).

use super::{check_nonempty, in_shape, on_leaves_mut, trace_or_host_at, Code, IntoTraced};

use crate::array::{ArrayProgram, PullbackCore};
use crate::differentiable::{Point, Tangent};
use crate::error::{check_len, Result};
use crate::program::trace::Tracer;
use crate::program::{Staged, StagedWorkspace};

/// The value `f(x)` and the pullback of `f` at `x`, to apply to as many
/// output cotangents `ȳ` as needed: JAX's `vjp`, which returns its
/// pullback. The [`Pullback`] is the right of the optic ∂⃖f (K. Fischer,
/// "∂P.jl terminology and notation guide", §VI, eq. 25) with the residual
/// its left computed at `x` kept: `f` is traced and its primal run once,
/// and each application runs the pullback program only. [`vjp`](fn@crate::vjp) is the
/// one-shot form.
///
/// Shapes: `x` is any [`Point`] with `n ≥ 1` leaves (a slice, or a struct
/// deriving [`Differentiable`](trait@crate::Differentiable), as for [`gradient`](fn@crate::gradient)); the value has `m`
/// entries (the number of values `f` returns); the pullback maps `m`
/// cotangents to the `n` leaves' ([`Pullback::apply`]), or to a value of
/// the point's shape ([`Pullback::call_point`]).
///
/// Loops: a function with [`crate::fold`] or [`crate::while_loop`] is
/// traced on the array trace, as [`gradient`](fn@crate::gradient) does; the pullback keeps the
/// loops' carries (their residual, or checkpoints) and each application
/// runs the reversed loops only ([`Pullback::array_program`]).
///
/// # Errors
///
/// [`Error::EmptyInput`](crate::Error::EmptyInput) for an empty `x`; as [`gradient`](fn@crate::gradient) otherwise.
///
/// # Example
///
/// The rows of the Jacobian of `f(x) = (x₀x₁, sin x₀)`, one pullback each:
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{pullback, Real};
///
/// fn f<T: Real>(x: &[T]) -> Vec<T> {
///     vec![x[0] * x[1], x[0].sin()]
/// }
/// let (y, mut back) = pullback(f, &[2.0, 3.0]).unwrap();
/// assert_relative_eq!(y[0], 6.0);
/// assert_eq!(back.call(&[1.0, 0.0]).unwrap(), vec![3.0, 2.0]);
/// let row = back.call(&[0.0, 1.0]).unwrap();
/// assert_relative_eq!(row[0], 2.0_f64.cos());
/// assert_eq!(row[1], 0.0);
/// ```
pub fn pullback<P, F, R>(f: F, point: &P) -> Result<(Vec<f64>, Pullback)>
where
    P: Point<Scalar = f64> + ?Sized,
    F: FnMut(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Vec<Tracer>>,
{
    let leaves = point.leaves();
    check_nonempty("pullback", leaves.len())?;
    pullback_flat(&mut on_leaves_mut(point, f), &leaves)
}

/// [`pullback`] on the flat leaves of the point (`f` behind a reference,
/// so that this body is compiled once, not once per closure).
fn pullback_flat(
    f: &mut dyn FnMut(&[Tracer]) -> Result<Vec<Tracer>>,
    x: &[f64],
) -> Result<(Vec<f64>, Pullback)> {
    let (p, inputs) = match trace_or_host_at(f, x, |p| PullbackCore::new(p, x))? {
        Code::Scalar(traced) => traced,
        Code::Hosted(core) => {
            let y = core.value().to_vec();
            let back = Pullback {
                n: x.len(),
                m: y.len(),
                code: PullbackCode::Hosted(Box::new(core)),
            };
            return Ok((y, back));
        }
    };
    let optic = crate::functor::reverse(&p)?;
    let staged = optic.staged().clone();
    let mut ws = staged.workspace();
    staged.run_with(0, &mut ws, &inputs)?;
    let y = staged.own_outputs(&ws, 0).to_vec();
    Ok((
        y,
        Pullback {
            n: x.len(),
            m: p.n_outputs(),
            code: PullbackCode::Scalar { staged, ws },
        },
    ))
}

/// The pullback `ȳ ↦ J_f(x)ᵀ ȳ` of a function at a point, from
/// [`pullback`]: the right of the optic ∂⃖f on the residual its left kept.
/// Applying it runs the pullback program only, with no allocation
/// ([`Pullback::apply`]).
#[derive(Clone, Debug)]
pub struct Pullback {
    n: usize,
    m: usize,
    code: PullbackCode,
}

/// The programs behind a [`Pullback`]: the staged optic of the scalar
/// trace, or, for code with loops, the array trace's joint program in two
/// stages (the loops' carries its residual).
#[derive(Clone, Debug)]
enum PullbackCode {
    Scalar { staged: Staged, ws: StagedWorkspace },
    Hosted(Box<PullbackCore>),
}

impl Pullback {
    /// The number of output cotangents it takes, `m`.
    pub fn n_outputs(&self) -> usize {
        self.m
    }

    /// The number of input cotangents it returns, `n`.
    pub fn n_inputs(&self) -> usize {
        self.n
    }

    /// Writes `x̄ = J_f(x)ᵀ ȳ` into `xbar`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) unless `ybar` has `m` entries and `xbar`
    /// `n`.
    pub fn apply(&mut self, ybar: &[f64], xbar: &mut [f64]) -> Result<()> {
        check_len("pullback: output cotangent", self.m, ybar.len())?;
        check_len("pullback: input cotangent", self.n, xbar.len())?;
        match &mut self.code {
            PullbackCode::Scalar { staged, ws } => {
                staged.run_with(1, ws, ybar)?;
                let out = staged.own_outputs(ws, 1);
                xbar.copy_from_slice(&out[..self.n]);
                Ok(())
            }
            PullbackCode::Hosted(core) => core.apply(ybar, xbar),
        }
    }

    /// For a function with loops, traced on the array trace: the joint
    /// program `(x, ȳ) ↦ (y, x̄)` (its loops one instruction each) whose
    /// `ȳ`-free part ran at the point; `None` for the scalar trace's.
    pub fn array_program(&self) -> Option<&ArrayProgram> {
        match &self.code {
            PullbackCode::Scalar { .. } => None,
            PullbackCode::Hosted(core) => Some(core.program()),
        }
    }

    /// `J_f(x)ᵀ ȳ` as a new vector.
    ///
    /// # Errors
    ///
    /// As [`Pullback::apply`].
    pub fn call(&mut self, ybar: &[f64]) -> Result<Vec<f64>> {
        let mut xbar = vec![0.0; self.n];
        self.apply(ybar, &mut xbar)?;
        Ok(xbar)
    }

    /// `J_f(x)ᵀ ȳ` in the shape of the point `like` (the point the
    /// pullback was built at, or another of its structure): a structured
    /// point's cotangent reads as its fields, its data fields copied from
    /// `like`.
    ///
    /// # Errors
    ///
    /// As [`Pullback::apply`]; [`Error::StructureMismatch`](crate::Error::StructureMismatch) if `like` does
    /// not have `n` leaves.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::{pullback, Differentiable, Real};
    ///
    /// #[derive(Clone, Debug, PartialEq, Differentiable)]
    /// struct Line<T> {
    ///     slope: T,
    ///     offset: T,
    /// }
    /// // The line at t = 1 and t = 2: J = [[1, 1], [2, 1]].
    /// let at = Line { slope: 0.5, offset: 1.0 };
    /// let (y, mut back) =
    ///     pullback(|l: &Line<_>| vec![l.slope + l.offset, l.slope * 2.0 + l.offset], &at)
    ///         .unwrap();
    /// assert_eq!(y, vec![1.5, 2.0]);
    /// let g = back.call_point(&[1.0, 1.0], &at).unwrap();
    /// assert_eq!(g, Line { slope: 3.0, offset: 2.0 });
    /// ```
    pub fn call_point<P: Point<Scalar = f64> + ?Sized>(
        &mut self,
        ybar: &[f64],
        like: &P,
    ) -> Result<Tangent<P>> {
        let xbar = self.call(ybar)?;
        in_shape(like, xbar)
    }
}
