//! Drivers on array programs: gradient, Hessian-vector product and third
//! directional derivative of `f : ℝⁿ → ℝ` written against [`Array`].

use super::exec::ArrayWorkspace;
use std::sync::Arc;

use super::ir::{AVar, ArrayBuilder, ArrayOp, ArrayProgram};
use super::trace::{trace, TArray, TScalar};
use super::transform::{forward, forward_with, linear_split, reverse_joint};
use crate::error::{check_len, Error, Result};

/// Traces `f` at `x` (one vector input, one scalar output).
fn trace_scalar(f: impl Fn(&TArray) -> Result<TScalar>, x: &[f64]) -> Result<ArrayProgram> {
    trace(|xs: &[TArray]| f(&xs[0]), &[x])
}

/// The gradient program `x ↦ (f(x), ∇f(x))` of a traced `f`: ∂⃖ with the
/// output cotangent fixed to 1.
fn gradient_program(p: &ArrayProgram) -> Result<ArrayProgram> {
    reverse_joint(p)?.specialize(&[None, Some(1.0)], &[0, 1])
}

/// The gradient of `f : ℝⁿ → ℝ`, written once against [`Array`](super::Array), at `x`:
/// one trace (a handful of instructions, whatever `n`), one ∂⃖, one run.
///
/// Shapes: `x` and the result have `n` entries.
///
/// # Errors
///
/// An error `f` returns; [`Error::GuardFailed`] if a comparison in a map
/// body does not hold for every element.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::array::{gradient, Array};
/// use optic_ad::Real;
///
/// // f(x) = Σ xᵢ² / 2 + sin(Σ xᵢ): ∇f = x + cos(Σ x).
/// let g = gradient(|x| {
///     let s = x.sum();
///     Ok(x.map(|t| t * t * 0.5).sum() + s.sin())
/// }, &[1.0, 2.0]).unwrap();
/// assert_relative_eq!(g[0], 1.0 + 3.0_f64.cos());
/// assert_relative_eq!(g[1], 2.0 + 3.0_f64.cos());
/// ```
pub fn gradient(f: impl Fn(&TArray) -> Result<TScalar>, x: &[f64]) -> Result<Vec<f64>> {
    let mut g = Gradient::new(f, x)?;
    let mut out = vec![0.0; x.len()];
    g.eval(x, &mut out)?;
    Ok(out)
}

/// A compiled gradient of `f : ℝⁿ → ℝ`: traced and differentiated once,
/// then evaluated at any point of the same length with no allocation.
///
/// Where a comparison recorded while tracing no longer holds at a new
/// point (a branch on a value such as `x.sum()`), the gradient re-traces
/// `f` there, once, and goes on with the new program, as the scalar
/// [`crate::Gradient`] does. A comparison inside a map body is another
/// matter: the body is traced once, at an arbitrary point (0.5), and its
/// guards must hold in every element; re-tracing cannot change that, and
/// the error is returned (write such branches with `select`).
///
/// # Example
///
/// ```
/// use optic_ad::array::{Array, Gradient};
///
/// let mut g = Gradient::new(|x| Ok(x.map(|t| t * t).sum()), &[0.0; 3]).unwrap();
/// let mut out = [0.0; 3];
/// let y = g.eval(&[1.0, 2.0, 3.0], &mut out).unwrap();
/// assert_eq!((y, out), (14.0, [2.0, 4.0, 6.0]));
/// ```
#[derive(Clone)]
pub struct Gradient<F> {
    f: F,
    core: GradientCore,
}

/// The gradient program of a traced array program and its workspace,
/// run at a point; re-tracing is the owner's ([`Gradient`], and the scalar
/// drivers for code with loops).
#[derive(Clone)]
pub(crate) struct GradientCore {
    program: ArrayProgram,
    ws: ArrayWorkspace,
    n: usize,
}

impl GradientCore {
    /// The gradient of the traced `p` (one vector input of `n` entries,
    /// one scalar output).
    pub(crate) fn new(p: &ArrayProgram, n: usize) -> Result<Self> {
        let program = gradient_program(p)?;
        let ws = ArrayWorkspace::new(&program);
        Ok(GradientCore { program, ws, n })
    }

    /// `f(x)`, with `∇f(x)` written to `grad`; a failed guard is returned.
    pub(crate) fn run(&mut self, x: &[f64], grad: &mut [f64]) -> Result<f64> {
        check_len("Gradient::eval: x", self.n, x.len())?;
        check_len("Gradient::eval: gradient", self.n, grad.len())?;
        self.ws
            .run_masked_into(&self.program, &[x], None, 1, grad)?;
        Ok(self.ws.output(&self.program, 0)[0])
    }

    /// The gradient program.
    pub(crate) fn program(&self) -> &ArrayProgram {
        &self.program
    }
}

impl<F> std::fmt::Debug for Gradient<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gradient")
            .field("n", &self.core.n)
            .field("program", &self.core.program)
            .finish()
    }
}

impl<F: Fn(&TArray) -> Result<TScalar>> Gradient<F> {
    /// Traces `f` at `x` and builds its gradient program.
    ///
    /// # Errors
    ///
    /// An error `f` returns while tracing.
    pub fn new(f: F, x: &[f64]) -> Result<Self> {
        let core = GradientCore::new(&trace_scalar(&f, x)?, x.len())?;
        Ok(Gradient { f, core })
    }

    /// `f(x)`, with `∇f(x)` written to `grad` (the maps that compute it
    /// write there directly, with no copy).
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if `x` or `grad` does not have the traced
    /// length (`grad` untouched); an error of re-tracing `f` where a guard
    /// no longer holds; [`Error::GuardFailed`] where a guard fails again
    /// after re-tracing (in a map body, where elements branch apart).
    /// After an error `grad` may hold part of a result: do not use it.
    pub fn eval(&mut self, x: &[f64], grad: &mut [f64]) -> Result<f64> {
        match self.core.run(x, grad) {
            Err(Error::GuardFailed { .. }) => {
                self.core = GradientCore::new(&trace_scalar(&self.f, x)?, x.len())?;
                self.core.run(x, grad)
            }
            other => other,
        }
    }

    /// The gradient program, `x ↦ (f(x), ∇f(x))`.
    pub fn program(&self) -> &ArrayProgram {
        &self.core.program
    }

    /// Test hook of the native backend (feature `jit`): how many map
    /// bodies run as compiled block kernels so far, and how many maps there
    /// are.
    #[cfg(feature = "jit")]
    #[doc(hidden)]
    pub fn native_kernels(&self) -> (usize, usize) {
        self.core.ws.native_kernels()
    }
}

/// Hessian-vector products of `f : ℝⁿ → ℝ` by forward-over-reverse on the
/// array program (∂⃗ of the gradient program), split in two stages:
/// [`Hvp::linearize`] runs every instruction that does not depend on the
/// direction, once per point; [`Hvp::apply`] runs the rest, once per
/// direction. Neither allocates.
///
/// Where a comparison recorded while tracing no longer holds at a new
/// point, [`Hvp::linearize`] and [`Hvp::eval`] re-trace `f` there, once,
/// and go on with the new programs, as the scalar [`crate::Hvp`] does (see
/// [`Gradient`] for comparisons inside map bodies).
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::array::{Array, Hvp};
///
/// // f(x) = Σ xᵢ³: H = diag(6x).
/// let mut h = Hvp::new(|x| Ok(x.map(|t| t * t * t).sum()), &[1.0, 2.0]).unwrap();
/// h.linearize(&[1.0, 2.0]).unwrap();
/// let mut hv = [0.0; 2];
/// h.apply(&[1.0, 1.0], &mut hv).unwrap();
/// assert_eq!(hv, [6.0, 12.0]);
/// assert_eq!(h.gradient(), &[3.0, 12.0]);
/// ```
#[derive(Clone)]
pub struct Hvp<F> {
    f: F,
    core: HvpCore,
}

/// The split Hessian-vector programs of a traced array program, their
/// workspaces and the linearized point; re-tracing is the owner's
/// ([`Hvp`], and the scalar drivers for code with loops).
#[derive(Clone)]
pub(crate) struct HvpCore {
    program: ArrayProgram,
    ws: ArrayWorkspace,
    /// `(x, v) ↦ H(x) v` in one pass, for [`Hvp::eval`]; built on its
    /// first call.
    one_pass: Option<(ArrayProgram, ArrayWorkspace)>,
    /// The gradient program, which `one_pass` is built from.
    gradient: ArrayProgram,
    /// Instructions that depend on the direction.
    tangent: Vec<bool>,
    primal: Vec<bool>,
    n: usize,
    /// The linearized point (allocated by the first `linearize`).
    x: Vec<f64>,
    linearized: bool,
}

impl<F> std::fmt::Debug for Hvp<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hvp")
            .field("n", &self.core.n)
            .field("program", &self.core.program)
            .field("linearized", &self.core.linearized)
            .finish()
    }
}

impl HvpCore {
    /// The Hessian-vector programs of the traced `p` (one vector input of
    /// `n` entries, one scalar output); nothing linearized.
    pub(crate) fn new(p: &ArrayProgram, n: usize) -> Result<Self> {
        let parts = HvpParts::build(p)?;
        Ok(HvpCore {
            program: parts.program,
            ws: parts.ws,
            one_pass: None,
            gradient: parts.gradient,
            tangent: parts.tangent,
            primal: parts.primal,
            n,
            x: Vec::new(),
            linearized: false,
        })
    }

    /// Runs the direction-free part at `x`; a failed guard is returned
    /// (nothing linearized then).
    pub(crate) fn linearize(&mut self, x: &[f64]) -> Result<()> {
        check_len("Hvp::linearize: x", self.n, x.len())?;
        self.linearized = false;
        self.x.clear();
        self.x.extend_from_slice(x);
        let v = &self.x;
        self.ws
            .run_masked(&self.program, &[&self.x, v], Some(&self.primal))?;
        self.linearized = true;
        Ok(())
    }

    /// `H v` at the linearized point, written to `out`.
    pub(crate) fn apply(&mut self, v: &[f64], out: &mut [f64]) -> Result<()> {
        if !self.linearized {
            return Err(Error::NotLinearized);
        }
        check_len("Hvp::apply: v", self.n, v.len())?;
        check_len("Hvp::apply: out", self.n, out.len())?;
        self.ws
            .run_masked_into(&self.program, &[&self.x, v], Some(&self.tangent), 2, out)
    }

    /// `H(x) v` in one pass, building the one-pass program on first use;
    /// a failed guard is returned.
    pub(crate) fn eval(&mut self, x: &[f64], v: &[f64], out: &mut [f64]) -> Result<()> {
        check_len("Hvp::eval: x", self.n, x.len())?;
        check_len("Hvp::eval: v", self.n, v.len())?;
        check_len("Hvp::eval: out", self.n, out.len())?;
        let (p, ws) = match &mut self.one_pass {
            Some(built) => built,
            None => {
                // forward(g) with only H ẋ kept: [x, ẋ] ↦ H ẋ.
                let p = forward(&self.gradient)?.specialize(&[None, None], &[3])?;
                let ws = ArrayWorkspace::new(&p);
                self.one_pass.insert((p, ws))
            }
        };
        ws.run_masked_into(p, &[x, v], None, 0, out)
    }

    /// `f` at the linearized point.
    pub(crate) fn value(&self) -> f64 {
        self.ws
            .output(&self.program, 0)
            .first()
            .copied()
            .unwrap_or(f64::NAN)
    }

    /// `∇f` at the linearized point.
    pub(crate) fn gradient(&self) -> &[f64] {
        self.ws.output(&self.program, 1)
    }

    /// The program `(x, v) ↦ (f, ∇f, H v)`.
    pub(crate) fn program(&self) -> &ArrayProgram {
        &self.program
    }
}

impl<F: Fn(&TArray) -> Result<TScalar>> Hvp<F> {
    /// Traces `f` at `x` and builds `(x, v) ↦ (f, ∇f, H v)`.
    ///
    /// # Errors
    ///
    /// An error `f` returns while tracing.
    pub fn new(f: F, x: &[f64]) -> Result<Self> {
        let core = HvpCore::new(&trace_scalar(&f, x)?, x.len())?;
        Ok(Hvp { f, core })
    }

    /// Re-traces `f` at `x` (a guard failed there): new programs, the
    /// one-pass program to be built again, nothing linearized.
    fn retrace(&mut self, x: &[f64]) -> Result<()> {
        self.core = HvpCore::new(&trace_scalar(&self.f, x)?, x.len())?;
        Ok(())
    }

    /// Runs the direction-free part at `x`: `f(x)`, `∇f(x)` and what
    /// [`Hvp::apply`] reuses.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if `x` does not have the traced length;
    /// an error of re-tracing `f` where a guard no longer holds;
    /// [`Error::GuardFailed`] where one fails again after re-tracing.
    pub fn linearize(&mut self, x: &[f64]) -> Result<()> {
        match self.core.linearize(x) {
            Err(Error::GuardFailed { .. }) => {
                self.retrace(x)?;
                self.core.linearize(x)
            }
            other => other,
        }
    }

    /// `H v` at the linearized point, written to `out` (the maps that
    /// compute it write there directly, with no copy).
    ///
    /// # Errors
    ///
    /// [`Error::NotLinearized`] before [`Hvp::linearize`];
    /// [`Error::LengthMismatch`] if `v` or `out` does not have length `n`
    /// (`out` untouched).
    pub fn apply(&mut self, v: &[f64], out: &mut [f64]) -> Result<()> {
        self.core.apply(v, out)
    }

    /// `H(x) v` at a new point in one pass, written to `out`: the
    /// program `(x, v) ↦ H(x) v` runs the primal and the tangent together,
    /// storing no coefficients (for the chained Rosenbrock function, one
    /// pass over `x` and `v` that adds both contributions of each term
    /// into `out`). For one direction per point this is faster than
    /// [`Hvp::linearize`] then [`Hvp::apply`]; for several directions at
    /// one point, linearize once and apply. It does not change the
    /// linearized point. The one-pass program is built on the first call
    /// (about as long as building the `Hvp`); later calls allocate nothing.
    /// Results equal `linearize` + `apply`'s to rounding (the products are
    /// associated differently).
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if `x`, `v` or `out` does not have length
    /// `n` (`out` untouched); an error of re-tracing `f` where a guard no
    /// longer holds (the linearized point is then dropped:
    /// [`Hvp::linearize`] again before [`Hvp::apply`]);
    /// [`Error::GuardFailed`] where one fails again after re-tracing.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::array::{Array, Hvp};
    ///
    /// // f(x) = Σ xᵢ³: H = diag(6x).
    /// let mut h = Hvp::new(|x| Ok(x.map(|t| t * t * t).sum()), &[1.0, 2.0]).unwrap();
    /// let mut hv = [0.0; 2];
    /// h.eval(&[1.0, 3.0], &[1.0, 1.0], &mut hv).unwrap();
    /// assert_eq!(hv, [6.0, 18.0]);
    /// ```
    pub fn eval(&mut self, x: &[f64], v: &[f64], out: &mut [f64]) -> Result<()> {
        match self.core.eval(x, v, out) {
            Err(Error::GuardFailed { .. }) => {
                self.retrace(x)?;
                self.core.eval(x, v, out)
            }
            other => other,
        }
    }

    /// `f` at the linearized point.
    pub fn value(&self) -> f64 {
        self.core.value()
    }

    /// `∇f` at the linearized point.
    pub fn gradient(&self) -> &[f64] {
        self.core.gradient()
    }

    /// The program `(x, v) ↦ (f, ∇f, H v)`.
    pub fn program(&self) -> &ArrayProgram {
        self.core.program()
    }

    /// Test hook of the native backend (feature `jit`): how many map
    /// bodies run as compiled block kernels so far, and how many maps there
    /// are, over the two-pass and the one-pass programs.
    #[cfg(feature = "jit")]
    #[doc(hidden)]
    pub fn native_kernels(&self) -> (usize, usize) {
        let (k, m) = self.core.ws.native_kernels();
        let (k1, m1) = self
            .core
            .one_pass
            .as_ref()
            .map_or((0, 0), |(_, ws)| ws.native_kernels());
        (k + k1, m + m1)
    }
}

/// The programs of an [`Hvp`] traced at one point.
struct HvpParts {
    program: ArrayProgram,
    ws: ArrayWorkspace,
    gradient: ArrayProgram,
    tangent: Vec<bool>,
    primal: Vec<bool>,
}

impl HvpParts {
    fn build(p: &ArrayProgram) -> Result<HvpParts> {
        let gradient = gradient_program(p)?;
        // forward(g): [x, ẋ] ↦ [f, ∇f, ḟ, H ẋ].
        // Values computed apart from tangents: `linearize` reads them
        // without a direction.
        let program = forward_with(&gradient, false)?.specialize(&[None, None], &[0, 1, 3])?;
        let program = hoist_residuals(&program)?;
        let n_ops = program.ops.len();
        let tangent = tangent_mask(&program);
        // Values of the first stage that the second reads, and the outputs,
        // keep their buffers.
        let mut persist = vec![false; n_ops];
        for (i, op) in program.ops.iter().enumerate() {
            if tangent[i] {
                op.for_each_operand(|o| {
                    if !tangent[o.index()] {
                        persist[o.index()] = true;
                    }
                });
            }
        }
        for o in &program.outputs {
            persist[o.index()] = true;
        }
        for g in &program.guards {
            persist[g.a.index()] = true;
            persist[g.b.index()] = true;
        }
        let ws = ArrayWorkspace::with_persist(&program, persist);
        let primal = tangent.iter().map(|t| !t).collect();
        Ok(HvpParts {
            program,
            ws,
            gradient,
            tangent,
            primal,
        })
    }
}

/// Which instructions of an `(x, v)` program depend on input 1 (`v`).
fn tangent_mask(p: &ArrayProgram) -> Vec<bool> {
    let n = p.ops.len();
    let mut tangent = vec![false; n];
    for i in 0..n {
        tangent[i] = match &p.ops[i] {
            ArrayOp::Input(k) => *k == 1,
            ArrayOp::MapOut(k) => tangent[i - *k as usize],
            op => {
                let mut t = false;
                op.for_each_operand(|o| t |= tangent[o.index()]);
                t
            }
        };
    }
    tangent
}

/// Rewrites each direction-dependent map, which is linear in its
/// direction-dependent arguments, as coefficients computed by a map of its
/// own (residuals of the first stage) and a few products, so that
/// [`Hvp::linearize`] computes the coefficients once and [`Hvp::apply`]
/// runs only the products (for the WDBC model: one coefficient
/// `σ(m)σ(−m)` per sample, and one product per direction).
fn hoist_residuals(p: &ArrayProgram) -> Result<ArrayProgram> {
    let tangent = tangent_mask(p);
    let mut b = ArrayBuilder::new();
    let xs: Vec<AVar> = p.input_shapes.iter().map(|&s| b.input(s)).collect();
    let map = p.inline_with(&mut b, &xs, |b, i, body, args| {
        let ArrayOp::Map { args: old_args, .. } = &p.ops[i] else {
            return b.map(body.clone(), args);
        };
        let early: Vec<bool> = old_args.iter().map(|a| !tangent[a.index()]).collect();
        if !tangent[i] || early.iter().all(|&e| !e) {
            return b.map(body.clone(), args);
        }
        match linear_split(body, &early) {
            Some((coef, late)) => {
                let pick = |want: bool| -> Vec<AVar> {
                    args.iter()
                        .zip(&early)
                        .filter(|(_, &e)| e == want)
                        .map(|(&a, _)| a)
                        .collect()
                };
                let coefs = b.map(Arc::new(coef), &pick(true));
                let mut late_args = pick(false);
                late_args.extend(coefs);
                b.map(Arc::new(late), &late_args)
            }
            None => b.map(body.clone(), args),
        }
    });
    let outs: Vec<AVar> = p.outputs.iter().map(|o| map[o.index()]).collect();
    b.finish(&outs)
}

/// One Hessian-vector product `H(x) v` of `f : ℝⁿ → ℝ`.
///
/// # Errors
///
/// As [`Hvp::new`], [`Hvp::linearize`] and [`Hvp::apply`].
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::array::{hvp, Array};
///
/// // f(x) = (Σ xᵢ)²: H = 2·𝟙𝟙ᵀ.
/// let hv = hvp(|x| { let s = x.sum(); Ok(s * s) }, &[1.0, 2.0], &[1.0, 0.0]).unwrap();
/// assert_eq!(hv, vec![2.0, 2.0]);
/// ```
pub fn hvp(f: impl Fn(&TArray) -> Result<TScalar>, x: &[f64], v: &[f64]) -> Result<Vec<f64>> {
    let mut h = Hvp::new(f, x)?;
    h.linearize(x)?;
    let mut out = vec![0.0; x.len()];
    h.apply(v, &mut out)?;
    Ok(out)
}

/// `[f(x), Df(x)[v], D²f(x)[v, v], D³f(x)[v, v, v]]`: derivatives of
/// `t ↦ f(x + t v)` at 0 up to order 3, by ∂⃗ applied three times to the
/// array program (each application a program again).
///
/// Shapes: `x` and `v` have the same length `n`.
///
/// # Errors
///
/// [`Error::LengthMismatch`] if `v.len() != x.len()`; an error `f`
/// returns; [`Error::GuardFailed`].
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::array::{directional3, Array};
/// use optic_ad::Real;
///
/// // f(x) = Σ sin xᵢ along v = 𝟙: derivatives Σ sin, Σ cos, −Σ sin, −Σ cos.
/// let x = [0.1, 0.2];
/// let d = directional3(|x| Ok(x.map(|t| t.sin()).sum()), &x, &[1.0, 1.0]).unwrap();
/// let (s, c) = (0.1_f64.sin() + 0.2_f64.sin(), 0.1_f64.cos() + 0.2_f64.cos());
/// assert_relative_eq!(d[3], -c, max_relative = 1e-15);
/// assert_relative_eq!(d[2], -s, max_relative = 1e-15);
/// ```
pub fn directional3(
    f: impl Fn(&TArray) -> Result<TScalar>,
    x: &[f64],
    v: &[f64],
) -> Result<[f64; 4]> {
    check_len("directional3: v", x.len(), v.len())?;
    let p = trace_scalar(f, x)?;
    let f3 = forward(&forward(&forward(&p)?)?)?;
    // Inputs [x, ẋ, x′, ẋ′, x″, ẋ″, x‴, ẋ‴]: ẋ = x′ = x″ = v, the rest
    // structural zeros; outputs [y, ẏ, y′, ẏ′, y″, ẏ″, y‴, ẏ‴].
    let z = Some(-0.0);
    let fixed = [None, None, None, z, None, z, z, z];
    let q = f3.specialize(&fixed, &[0, 1, 3, 7])?;
    let out = q.eval(&[x, v, v, v])?;
    let at = |k: usize| {
        out.get(k)
            .and_then(|o| o.first())
            .copied()
            .unwrap_or(f64::NAN)
    };
    Ok([at(0), at(1), at(2), at(3)])
}
