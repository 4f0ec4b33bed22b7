//! The compiled Hessian-vector product [`Hvp`], split as an optic:
//! linearize at a point, apply to many directions.

use super::{
    check_nonempty, hvp_program, in_shape, is_f64, primals, run_or_retrace, scalar,
    trace_builder_at, trace_or_host, Code, IntoTraced, LeafFunction, OnArray, OnPoint,
};

use crate::array::{trace_scalar, ArrayProgram, HvpCore, TArray, TScalar};
use crate::backend::{Executable, LANES};
use crate::differentiable::{Differentiable, Point, Tangent};
use crate::error::{check_len, Error, Result};
use crate::program::trace::{TracedBuilder, Tracer};
use crate::program::{Stage, Staged, StagedWorkspace};
use crate::real::Real;

/// A compiled Hessian-vector product, split as an optic: [`Hvp::linearize`]
/// runs the left (the primal, the gradient, and the residual the products
/// need) once at `x`; [`Hvp::apply`] runs the right for each direction `v`.
///
/// Built as ∂⃗ of the gradient program ∂⃖f (forward over reverse; the same
/// product as ∂⃖²f with `d₁ = 1`, `d₃ = 0`: see the book's chapter "Higher
/// order and the nested-closure encoding"), split by
/// [`crate::functor::split_stages`] into the stage that depends on `x` only
/// and the stage that depends on `v`.
/// Steady-state calls do not allocate. A function with loops is traced on
/// the array trace, as [`Gradient`](crate::Gradient) says; its products are ∂⃗ of the
/// reverse loop, loops again. One type for both traces, as [`Gradient`](crate::Gradient):
/// [`Hvp::new`], [`Hvp::structured`] and [`Hvp::array`].
///
/// # Example with a loop
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{fold, Hvp, Real, Result};
///
/// // c ← c·a, 1000 times: f(a) = a¹⁰⁰⁰ c₀, f″ = 1000·999·a⁹⁹⁸ c₀.
/// fn f<T: Real>(a: &[T]) -> Result<T> {
///     let [c] = fold(1000, [T::cst(2.0)], |[c]: [T; 1]| [c * a[0]])?;
///     Ok(c)
/// }
/// let mut h = Hvp::new(f, &[1.0005]).unwrap();
/// assert!(h.array_program().is_some()); // one loop instruction
/// h.linearize(&[1.0005]).unwrap();
/// let mut hv = [0.0];
/// h.apply(&[1.0], &mut hv).unwrap();
/// let want = 2.0 * 1000.0 * 999.0 * 1.0005_f64.powi(998);
/// assert_relative_eq!(hv[0], want, max_relative = 1e-12);
/// ```
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{Hvp, Real};
///
/// fn f<T: Real>(x: &[T]) -> T {
///     x[0].powi(3) + x[0] * x[1]
/// }
/// let mut h = Hvp::new(f, &[1.0, 1.0]).unwrap();
/// let mut grad = [0.0; 2];
/// let y = h.linearize_with_gradient(&[2.0, 3.0], &mut grad).unwrap();
/// assert_relative_eq!(y, 14.0);
/// assert_relative_eq!(grad[0], 15.0);
/// let mut hv = [0.0; 2];
/// h.apply(&[1.0, 0.0], &mut hv).unwrap(); // first Hessian column
/// assert_relative_eq!(hv[0], 12.0);
/// assert_relative_eq!(hv[1], 1.0);
/// ```
#[derive(Clone)]
pub struct Hvp<F> {
    f: F,
    n: usize,
    code: HvpCode,
    /// For a function with loops, its split on the scalar trace with the
    /// loops unrolled, built on the first [`Hvp::hvp_at`] at points other
    /// than `f64`.
    unrolled: Option<HvpSplit>,
    linearized: bool,
    /// Lane buffers of [`Hvp::apply_many`]: directions in, products out.
    lane_in: Vec<[f64; LANES]>,
    lane_out: Vec<[f64; LANES]>,
}

/// The Hessian-vector program of a trace of `n` variables, split in two
/// stages, for [`Hvp`] and [`hessian`]: inputs `[x, captures] [v]`,
/// outputs `[f, ∇f] [H v]`; stage [`HvpSplit::LEFT`] knows `x` (and the
/// captures), stage [`HvpSplit::RIGHT`] `v` and the left's residual.
/// `scheduled`: each stage ordered for the interpreter.
pub(super) fn hvp_staged(t: TracedBuilder, n: usize, scheduled: bool) -> Result<Staged> {
    let total = t.inputs.len();
    let mut h = hvp_program(t, n)?;
    h.input_blocks = vec![total, n];
    h.output_blocks = vec![1 + n, n];
    let stages = [HvpSplit::LEFT, HvpSplit::RIGHT];
    if scheduled {
        Staged::split_scheduled(&h, &stages, &stages, 2)
    } else {
        Staged::split(&h, &stages, &stages, 2)
    }
}

/// The two stages of a Hessian-vector program and their buffers, rebuilt
/// together where a guard fails.
#[derive(Clone)]
pub(super) struct HvpSplit {
    /// Stage [`HvpSplit::LEFT`]: `x ↦ ([f, ∇f], m)`; stage
    /// [`HvpSplit::RIGHT`]: `(m, v) ↦ H v`.
    staged: Staged,
    ws: StagedWorkspace,
    /// The buffers of [`Hvp::eval`], which leaves `ws` (the linearized
    /// point) alone; made on its first call.
    spare: Option<StagedWorkspace>,
}

/// A compiled Hessian-vector product's programs: the split scalar
/// program, or the array programs for a function with loops.
type HvpCode = Code<HvpSplit, Box<HvpCore>>;

impl HvpSplit {
    pub(super) const LEFT: usize = 0;
    pub(super) const RIGHT: usize = 1;

    /// The split of `f` traced at `x`: from the scalar trace, or, for a
    /// function with loops, the array programs ([`trace_or_host`]).
    fn build(f: &dyn LeafFunction, x: &[f64]) -> Result<HvpCode> {
        let n = x.len();
        if let Some(af) = f.array_function() {
            let core = HvpCore::new(&trace_scalar(af, x)?, n)?;
            return Ok(Code::Hosted(Box::new(core)));
        }
        let code = trace_or_host(&mut |t| f.call_leaves(t), x, |p| {
            HvpCore::new(p, n).map(Box::new)
        })?;
        Ok(match code {
            Code::Scalar(t) => Code::Scalar(Self::from_trace(t, n)?),
            Code::Hosted(c) => Code::Hosted(c),
        })
    }

    /// The split of `f` on the scalar trace, loops unrolled: for points
    /// other than `f64`.
    fn build_unrolled(f: &dyn LeafFunction, x: &[f64]) -> Result<Self> {
        let (t, _) = trace_builder_at(scalar(|t| f.call_leaves(t)), x)?;
        Self::from_trace(t, x.len())
    }

    fn from_trace(t: TracedBuilder, n: usize) -> Result<Self> {
        let staged = hvp_staged(t, n, true)?;
        let ws = staged.workspace();
        Ok(HvpSplit {
            staged,
            ws,
            spare: None,
        })
    }

    fn left(&self) -> &Stage {
        &self.staged.stages()[Self::LEFT]
    }

    /// `f(x)` after the left has run.
    fn value(&self) -> f64 {
        self.staged.own_outputs(&self.ws, Self::LEFT)[0]
    }

    /// `∇f(x)` after the left has run.
    fn gradient(&self) -> &[f64] {
        &self.staged.own_outputs(&self.ws, Self::LEFT)[1..]
    }
}

impl<F> std::fmt::Debug for Hvp<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Hvp");
        d.field("n", &self.n);
        match &self.code {
            Code::Scalar(split) => {
                let st = split.staged.stages();
                d.field("left_len", &st[HvpSplit::LEFT].program.len())
                    .field("right_len", &st[HvpSplit::RIGHT].program.len())
                    .field("residual", &st[HvpSplit::LEFT].residual_out)
            }
            Code::Hosted(c) => d.field("array_program_len", &c.program().len()),
        };
        d.finish()
    }
}

impl<F, R> Hvp<F>
where
    F: Fn(&[Tracer]) -> R,
    R: IntoTraced<Tracer>,
{
    /// Traces `f` at `x0` and builds the split Hessian-vector program.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyInput`] for an empty `x0`; as [`gradient`](fn@crate::gradient) otherwise.
    pub fn new(f: F, x0: &[f64]) -> Result<Self> {
        check_nonempty("Hvp", x0.len())?;
        let code = HvpSplit::build(&f, x0)?;
        Ok(Hvp::with_code(f, x0.len(), code))
    }
}

impl<F: Fn(&TArray) -> Result<TScalar>> Hvp<OnArray<F>> {
    /// Traces `f`, written against [`Array`](crate::array::Array) and
    /// called here on the array trace, at `x0` and builds its
    /// Hessian-vector programs on the array trace: `(x, v) ↦ (f, ∇f, H v)`
    /// as ∂⃗ of the gradient program, split in two by the instructions
    /// that depend on the direction ([`Hvp::linearize`] runs the others,
    /// once per point; [`Hvp::apply`] the rest, once per direction), and,
    /// on the first [`Hvp::eval`], a one-pass program. The same type as
    /// [`Hvp::new`]'s, re-tracing where a guard fails as it does (see
    /// [`Gradient::array`](crate::Gradient::array) for comparisons inside map bodies).
    ///
    /// Shapes: `x0`, every later point and direction have `n ≥ 1` entries.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyInput`] for an empty `x0`; an error `f` returns while
    /// tracing.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::array::Array;
    /// use optic_ad::Hvp;
    ///
    /// // f(x) = Σ xᵢ³: H = diag(6x).
    /// let mut h = Hvp::array(|x| Ok(x.map(|t| t * t * t).sum()), &[1.0, 2.0]).unwrap();
    /// h.linearize(&[1.0, 2.0]).unwrap();
    /// let mut hv = [0.0; 2];
    /// h.apply(&[1.0, 1.0], &mut hv).unwrap();
    /// assert_eq!(hv, [6.0, 12.0]);
    /// assert_eq!(h.gradient(), &[3.0, 12.0]);
    /// ```
    pub fn array(f: F, x0: &[f64]) -> Result<Self> {
        let n = x0.len();
        check_nonempty("Hvp", n)?;
        let f = OnArray(f);
        let code = HvpSplit::build(&f, x0)?;
        Ok(Hvp::with_code(f, n, code))
    }
}

impl<P, F, R> Hvp<OnPoint<P, F>>
where
    P: Differentiable<Scalar = f64> + Point<Scalar = f64> + Clone,
    F: Fn(&P::Arg<Tracer>) -> R,
    R: IntoTraced<Tracer>,
{
    /// Traces `f`, a function of a structured point (a struct deriving
    /// [`Differentiable`]), at `p0` and builds the split Hessian-vector
    /// program: the compiled form of [`hvp`](fn@crate::hvp) on such points. Later points
    /// and directions must have `p0`'s structure; a point whose data
    /// fields differ from those last traced with is traced again.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyInput`] if `p0` has no leaves; as [`gradient`](fn@crate::gradient)
    /// otherwise.
    ///
    /// # Example
    ///
    /// ```
    /// use approx::assert_relative_eq;
    /// use optic_ad::{Differentiable, Hvp, Real};
    ///
    /// #[derive(Clone, Differentiable)]
    /// struct Point2<T> {
    ///     x: T,
    ///     y: T,
    /// }
    /// fn f<T: Real>(p: &Point2<T>) -> T {
    ///     p.x.powi(3) + p.x * p.y
    /// }
    /// let mut h = Hvp::structured(f, &Point2 { x: 1.0, y: 1.0 }).unwrap();
    /// let (y, grad) = h.linearize_point(&Point2 { x: 2.0, y: 3.0 }).unwrap();
    /// assert_relative_eq!(y, 14.0);
    /// assert_relative_eq!(grad.x, 15.0);
    /// let hv = h.apply_point(&Point2 { x: 1.0, y: 0.0 }).unwrap();
    /// assert_relative_eq!(hv.x, 12.0); // ∂²f/∂x² = 6x
    /// assert_relative_eq!(hv.y, 1.0);
    /// ```
    pub fn structured(f: F, p0: &P) -> Result<Self> {
        let n = p0.leaf_count();
        check_nonempty("Hvp", n)?;
        let f = OnPoint::new(f, p0);
        let code = HvpSplit::build(&f, &p0.leaves())?;
        Ok(Hvp::with_code(f, n, code))
    }

    /// Runs the left at `p`: `(f(p), ∇f(p))`, the gradient in `p`'s type
    /// (traced again first where `p`'s data fields differ from those last
    /// traced with). Allocates the gradient; [`Hvp::linearize`] on the
    /// flat leaves is the allocation-free path.
    ///
    /// # Errors
    ///
    /// [`Error::StructureMismatch`] unless `p` has the structure of the
    /// point the `Hvp` was built at; errors of re-tracing.
    pub fn linearize_point(&mut self, p: &P) -> Result<(f64, Tangent<P>)> {
        let (x, old) = self.f.take_leaves("Hvp: point", p)?;
        if old.is_some() {
            self.linearized = false;
            self.unrolled = None;
            match HvpSplit::build(&self.f, &x) {
                Ok(code) => self.code = code,
                Err(e) => {
                    self.f.restore(x, old);
                    return Err(e);
                }
            }
        }
        let mut grad = vec![0.0; self.n];
        let y = self.linearize_with_gradient(&x, &mut grad);
        self.f.restore(x, None);
        Ok((y?, in_shape(p, grad)?))
    }

    /// `H_f(p) v` in `v`'s type, at the point of the last linearization
    /// (a direction's data fields are not read).
    ///
    /// # Errors
    ///
    /// [`Error::StructureMismatch`] unless `v` has the point's structure;
    /// [`Error::NotLinearized`] as [`Hvp::apply`].
    pub fn apply_point(&mut self, v: &P) -> Result<Tangent<P>> {
        if !self.f.point.same_shape(v) {
            return Err(Error::StructureMismatch {
                what: "Hvp: direction",
            });
        }
        let mut x = std::mem::take(&mut self.f.leaves);
        x.clear();
        v.flatten_into(&mut x);
        let mut hv = vec![0.0; self.n];
        let r = self.apply(&x, &mut hv);
        self.f.restore(x, None);
        r?;
        in_shape(v, hv)
    }
}

impl<F: LeafFunction> Hvp<F> {
    /// The driver of `f` on `n` leaves, from its first programs; nothing
    /// linearized.
    fn with_code(f: F, n: usize, code: HvpCode) -> Self {
        Hvp {
            f,
            n,
            code,
            linearized: false,
            lane_in: Vec::new(),
            lane_out: Vec::new(),
            unrolled: None,
        }
    }

    /// Length of the residual kept between [`Hvp::linearize`] and
    /// [`Hvp::apply`] by the optic view ([`crate::optic::Optic`]): the
    /// left stage's residual; on the array trace (code with loops, and
    /// [`Hvp::array`]), the point itself (`n`), from which the right runs
    /// the left again.
    pub fn residual_len(&self) -> usize {
        match &self.code {
            Code::Scalar(split) => split.left().residual_out,
            Code::Hosted(_) => self.n,
        }
    }

    /// The left program `x ↦ (f, ∇f, m)` and right program `(m, v) ↦ Hv`;
    /// `None` where `f` was traced on the array trace (code with loops,
    /// and every [`Hvp::array`]), whose program [`Hvp::array_program`]
    /// gives.
    pub fn programs(&self) -> Option<(&Executable, &Executable)> {
        let st = self.staged()?.stages();
        Some((&st[HvpSplit::LEFT].program, &st[HvpSplit::RIGHT].program))
    }

    /// Both stages as one [`Staged`] program; `None` where `f` was traced
    /// on the array trace.
    pub fn staged(&self) -> Option<&Staged> {
        match &self.code {
            Code::Scalar(split) => Some(&split.staged),
            Code::Hosted(_) => None,
        }
    }

    /// The program `(x, v) ↦ (f, ∇f, H v)` on the array trace: for a
    /// function of the array trace ([`Hvp::array`]), and where `f` has
    /// loops ([`crate::fold`], [`crate::while_loop`]), each loop one
    /// instruction that carries its body. `None` for other functions.
    pub fn array_program(&self) -> Option<&ArrayProgram> {
        match &self.code {
            Code::Scalar(_) => None,
            Code::Hosted(c) => Some(c.program()),
        }
    }

    /// Moves the linearisation point to `x`; returns `f(x)`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] unless `x` has `n` entries; errors of
    /// re-tracing where a guard fails.
    pub fn linearize(&mut self, x: &[f64]) -> Result<f64> {
        check_len("Hvp: x", self.n, x.len())?;
        // Until this succeeds there is no valid point: `apply` refuses.
        self.linearized = false;
        let f = &self.f;
        let y = run_or_retrace(
            &mut self.code,
            || HvpSplit::build(f, x),
            |c| match c {
                Code::Scalar(s) => {
                    s.staged.run_with(HvpSplit::LEFT, &mut s.ws, x)?;
                    Ok(s.value())
                }
                Code::Hosted(h) => {
                    h.linearize(x)?;
                    Ok(h.value())
                }
            },
        )?;
        self.linearized = true;
        Ok(y)
    }

    /// As [`Hvp::linearize`], also writing `∇f(x)` into `grad`.
    ///
    /// # Errors
    ///
    /// As [`Hvp::linearize`]; [`Error::LengthMismatch`] for `grad`.
    pub fn linearize_with_gradient(&mut self, x: &[f64], grad: &mut [f64]) -> Result<f64> {
        check_len("Hvp: grad", self.n, grad.len())?;
        let y = self.linearize(x)?;
        grad.copy_from_slice(match &self.code {
            Code::Scalar(s) => s.gradient(),
            Code::Hosted(h) => h.gradient(),
        });
        Ok(y)
    }

    /// Writes `H_f(x) v` into `out`, at the point of the last
    /// [`Hvp::linearize`].
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] unless `v` and `out` have `n` entries;
    /// [`Error::NotLinearized`] if no `linearize` has succeeded since the `Hvp` was
    /// built or since the last one failed.
    pub fn apply(&mut self, v: &[f64], out: &mut [f64]) -> Result<()> {
        check_len("Hvp: v", self.n, v.len())?;
        check_len("Hvp: out", self.n, out.len())?;
        if !self.linearized {
            return Err(Error::NotLinearized);
        }
        match &mut self.code {
            Code::Scalar(s) => {
                s.staged.run_with(HvpSplit::RIGHT, &mut s.ws, v)?;
                out.copy_from_slice(s.staged.own_outputs(&s.ws, HvpSplit::RIGHT));
                Ok(())
            }
            Code::Hosted(h) => h.apply(v, out),
        }
    }

    /// `H_f(x) v` at a new point in one call, written to `out`; it does not
    /// move the point of [`Hvp::linearize`]. For one direction per point
    /// this is the call to make: on the array trace (code with loops, and
    /// [`Hvp::array`]) it runs a one-pass program `(x, v) ↦ H(x) v` that
    /// computes the primal and the tangent together, storing no
    /// coefficients (built on the first call, about as long as building
    /// the `Hvp`); on the scalar trace it runs both stages in buffers of
    /// its own (made on the first call). Later calls allocate nothing.
    /// Results equal `linearize` + `apply`'s to rounding. For several
    /// directions at one point, linearize once and apply.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] unless `x`, `v` and `out` have `n`
    /// entries (`out` untouched); errors of re-tracing where a guard no
    /// longer holds (the programs and the linearized point are then kept).
    /// Where a guard fails and the re-trace succeeds, the new programs
    /// have no linearized point: [`Hvp::linearize`] again before
    /// [`Hvp::apply`] (which otherwise returns [`Error::NotLinearized`]).
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::{Hvp, Real};
    ///
    /// // f(x) = Σ xᵢ³: H = diag(6x).
    /// let mut h = Hvp::new(|x| x[0].powi(3) + x[1].powi(3), &[1.0, 2.0]).unwrap();
    /// let mut hv = [0.0; 2];
    /// h.eval(&[1.0, 3.0], &[1.0, 1.0], &mut hv).unwrap();
    /// assert_eq!(hv, [6.0, 18.0]);
    /// ```
    pub fn eval(&mut self, x: &[f64], v: &[f64], out: &mut [f64]) -> Result<()> {
        check_len("Hvp: x", self.n, x.len())?;
        check_len("Hvp: v", self.n, v.len())?;
        check_len("Hvp: out", self.n, out.len())?;
        let f = &self.f;
        let mut rebuilt = false;
        let r = run_or_retrace(
            &mut self.code,
            || {
                // Only a successful re-trace replaces the programs (and
                // drops the linearized point with their buffers).
                let built = HvpSplit::build(f, x)?;
                rebuilt = true;
                Ok(built)
            },
            |c| match c {
                Code::Scalar(s) => {
                    let ws = s.spare.get_or_insert_with(|| s.staged.workspace());
                    s.staged.run_with(HvpSplit::LEFT, ws, x)?;
                    s.staged.run_with(HvpSplit::RIGHT, ws, v)?;
                    out.copy_from_slice(s.staged.own_outputs(ws, HvpSplit::RIGHT));
                    Ok(())
                }
                Code::Hosted(h) => h.eval(x, v, out),
            },
        );
        if rebuilt {
            self.linearized = false;
        }
        r
    }

    /// `f` at the point of the last successful [`Hvp::linearize`]; NaN
    /// where there is none: before the first, after one that failed, and
    /// after a re-trace (by [`Hvp::eval`] or [`Hvp::hvp_at`]) that built
    /// new programs.
    pub fn value(&self) -> f64 {
        if !self.linearized {
            return f64::NAN;
        }
        match &self.code {
            Code::Scalar(s) => s.value(),
            Code::Hosted(h) => h.value(),
        }
    }

    /// `∇f` at the point of the last successful [`Hvp::linearize`] (`n`
    /// entries); empty where there is none (as [`Hvp::value`] says).
    pub fn gradient(&self) -> &[f64] {
        if !self.linearized {
            return &[];
        }
        match &self.code {
            Code::Scalar(s) => s.gradient(),
            Code::Hosted(h) => h.gradient(),
        }
    }

    /// Test hook of the native backend (feature `jit`): how many array map
    /// bodies run as compiled block kernels so far, and how many maps
    /// there are (zeros for a program on the scalar trace).
    #[doc(hidden)]
    pub fn native_kernels(&self) -> (usize, usize) {
        match &self.code {
            Code::Scalar(_) => (0, 0),
            Code::Hosted(h) => h.native_kernels(),
        }
    }

    /// `H_f(x) v` for several directions at once, at the point of the last
    /// [`Hvp::linearize`]: `vs` holds `k` directions of `n` entries one
    /// after the other, and product `j` is written to
    /// `out[j n .. (j + 1) n]`. The right stage runs on four directions
    /// at a time (lanes of the lowered evaluator), so decoding its
    /// instructions is paid once per four products. Each product equals
    /// [`Hvp::apply`]'s for that direction, bit for bit. Steady-state calls
    /// do not allocate.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] unless `vs.len()` is a multiple of `n`
    /// and `out.len() == vs.len()`; [`Error::NotLinearized`] as for
    /// [`Hvp::apply`].
    ///
    /// # Example
    ///
    /// ```
    /// use approx::assert_relative_eq;
    /// use optic_ad::{Hvp, Real};
    ///
    /// // H = [[6x₀, 1], [1, 0]]: all its columns in one call.
    /// let mut h = Hvp::new(|x| x[0].powi(3) + x[0] * x[1], &[1.0, 1.0]).unwrap();
    /// h.linearize(&[2.0, 3.0]).unwrap();
    /// let mut cols = [0.0; 4];
    /// h.apply_many(&[1.0, 0.0, 0.0, 1.0], &mut cols).unwrap();
    /// assert_eq!(cols, [12.0, 1.0, 1.0, 0.0]);
    /// ```
    pub fn apply_many(&mut self, vs: &[f64], out: &mut [f64]) -> Result<()> {
        let n = self.n;
        check_len("Hvp: out", vs.len(), out.len())?;
        if vs.len() % n != 0 {
            return Err(Error::LengthMismatch {
                what: "Hvp: directions (a multiple of n)",
                expected: vs.len().div_ceil(n) * n,
                got: vs.len(),
            });
        }
        if !self.linearized {
            return Err(Error::NotLinearized);
        }
        let s = match &mut self.code {
            Code::Scalar(s) => s,
            Code::Hosted(h) => {
                for (v, product) in vs.chunks(n).zip(out.chunks_mut(n)) {
                    h.apply(v, product)?;
                }
                return Ok(());
            }
        };
        for (dirs, products) in vs.chunks(LANES * n).zip(out.chunks_mut(LANES * n)) {
            self.lane_in.clear();
            self.lane_in.extend((0..n).map(|i| {
                // Lane `l` holds direction `l`; missing lanes are zeros.
                std::array::from_fn(|l| dirs.get(l * n + i).copied().unwrap_or(0.0))
            }));
            s.staged.run_lanes(
                HvpSplit::RIGHT,
                &mut s.ws,
                &self.lane_in,
                &mut self.lane_out,
            )?;
            for (l, product) in products.chunks_mut(n).enumerate() {
                for (o, v) in product.iter_mut().zip(&self.lane_out) {
                    *o = v[l];
                }
            }
        }
        Ok(())
    }

    /// `H_f(x) v` at a point and direction of any [`Real`] scalar: tracers,
    /// to use the compiled product inside another trace (so that it can be
    /// differentiated again: a third derivative), or num-dual numbers.
    /// Runs both stages; it does not move the point of
    /// [`Hvp::linearize`]. Allocates its result; [`Hvp::apply`] is the
    /// allocation-free `f64` path.
    ///
    /// As for [`Gradient::eval_at`](crate::Gradient::eval_at), `f` must not close over tracers of an
    /// enclosing trace; call [`hvp`](fn@crate::hvp) inside the trace for such closures;
    /// and where `f` has loops, a point other than `f64` is served by `f`
    /// traced again on the scalar trace with its loops unrolled, once (the
    /// programs are kept for later calls). A function of the array trace
    /// ([`Hvp::array`]) is served at `f64` points only.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] unless `x` and `v` have `n` entries;
    /// errors of re-tracing where a guard fails; [`Error::Unsupported`]
    /// for a function of the array trace at scalars other than `f64`.
    ///
    /// # Example
    ///
    /// ```
    /// use approx::assert_relative_eq;
    /// use optic_ad::{gradient, Hvp, Real, Tracer};
    ///
    /// // f = x⁴: ∇ₓ (H(x) v) = 24 x v.
    /// let mut h = Hvp::new(|x| x[0].powi(4), &[1.0]).unwrap();
    /// let g = gradient(|x| Ok(h.hvp_at(x, &[Tracer::cst(2.0)])?[0]), &[0.5]).unwrap();
    /// assert_relative_eq!(g[0], 24.0 * 0.5 * 2.0);
    /// ```
    pub fn hvp_at<T: Real>(&mut self, x: &[T], v: &[T]) -> Result<Vec<T>> {
        check_len("Hvp: x", self.n, x.len())?;
        check_len("Hvp: v", self.n, v.len())?;
        let f = &self.f;
        let n = self.n;
        if let (Code::Hosted(_), false) = (&self.code, is_f64::<T>()) {
            let xs = primals(x);
            let s = match &mut self.unrolled {
                Some(s) => s,
                None => self.unrolled.insert(HvpSplit::build_unrolled(f, &xs)?),
            };
            return run_or_retrace(
                s,
                || HvpSplit::build_unrolled(f, &xs),
                |s| {
                    let (_, m) = s.staged.run(HvpSplit::LEFT, &[], x)?;
                    Ok(s.staged.run(HvpSplit::RIGHT, &m, v)?.0)
                },
            );
        }
        let mut rebuilt = false;
        let hv = run_or_retrace(
            &mut self.code,
            || {
                let built = HvpSplit::build(f, &primals(x))?;
                rebuilt = true;
                Ok(built)
            },
            |c| match c {
                Code::Scalar(s) => {
                    let (_, m) = s.staged.run(HvpSplit::LEFT, &[], x)?;
                    Ok(s.staged.run(HvpSplit::RIGHT, &m, v)?.0)
                }
                // At `f64` points: one pass, the linearized point unmoved.
                Code::Hosted(h) if is_f64::<T>() => {
                    let mut hv = vec![0.0; n];
                    h.eval(&primals(x), &primals(v), &mut hv)?;
                    Ok(hv.into_iter().map(T::cst).collect())
                }
                Code::Hosted(_) => {
                    let s = HvpSplit::build_unrolled(f, &primals(x))?;
                    let (_, m) = s.staged.run(HvpSplit::LEFT, &[], x)?;
                    Ok(s.staged.run(HvpSplit::RIGHT, &m, v)?.0)
                }
            },
        );
        if rebuilt {
            // The rebuilt programs have fresh buffers: no linearisation.
            self.linearized = false;
        }
        hv
    }
}

/// The Hessian-vector product as an optic (Fischer, ∂P.jl notes, §I): `left`
/// runs the primal stage, `x ↦ (m, (f(x), ∇f(x)))`, and `right` runs the
/// product stage, `(m, v) ↦ H_f(x) v`; the residual `m` is what the products
/// need from `x`.
///
/// Types: `A = Vec<f64>` (`x`, `n` entries), `B = (f64, Vec<f64>)`,
/// `BPrime = Vec<f64>` (`v`), `APrime = Vec<f64>` (`H v`),
/// `Residual = Vec<f64>` ([`Hvp::residual_len`] entries). Through this
/// interface the programs are evaluated with fresh buffers, and a failed
/// guard is returned rather than re-traced (the optic cannot change
/// itself); use [`Hvp::linearize`] and [`Hvp::apply`] in loops.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::optic::Optic;
/// use optic_ad::{Hvp, Real};
///
/// let h = Hvp::new(|x| x[0] * x[0] * x[1], &[1.0, 1.0]).unwrap();
/// let (m, (y, g)) = h.left(vec![2.0, 3.0]).unwrap();
/// assert_relative_eq!(y, 12.0);
/// assert_relative_eq!(g[0], 12.0);
/// let hv = h.right(m, vec![0.0, 1.0]).unwrap(); // second column: (2x₀, 0)
/// assert_relative_eq!(hv[0], 4.0);
/// assert_relative_eq!(hv[1], 0.0);
/// ```
impl<F> crate::optic::Optic for Hvp<F> {
    type A = Vec<f64>;
    type B = (f64, Vec<f64>);
    type BPrime = Vec<f64>;
    type APrime = Vec<f64>;
    type Residual = Vec<f64>;
    type Error = Error;

    fn left(&self, a: Vec<f64>) -> Result<(Vec<f64>, (f64, Vec<f64>))> {
        check_len("Hvp: x", self.n, a.len())?;
        match &self.code {
            Code::Scalar(s) => {
                let (mut y_grad, m) = s.staged.run(HvpSplit::LEFT, &[], &a)?;
                let g = y_grad.split_off(1);
                Ok((m, (y_grad[0], g)))
            }
            Code::Hosted(h) => {
                // The residual is the point: the right runs the left again.
                let mut h = h.clone();
                h.linearize(&a)?;
                let b = (h.value(), h.gradient().to_vec());
                Ok((a, b))
            }
        }
    }

    fn right(&self, m: Vec<f64>, v: Vec<f64>) -> Result<Vec<f64>> {
        check_len("Hvp: v", self.n, v.len())?;
        match &self.code {
            Code::Scalar(s) => {
                check_len("Hvp: residual", s.left().residual_out, m.len())?;
                let (hv, _) = s.staged.run(HvpSplit::RIGHT, &m, &v)?;
                Ok(hv)
            }
            Code::Hosted(h) => {
                check_len("Hvp: residual", self.n, m.len())?;
                let mut h = h.clone();
                let mut hv = vec![0.0; self.n];
                h.linearize(&m)?;
                h.apply(&v, &mut hv)?;
                Ok(hv)
            }
        }
    }
}
