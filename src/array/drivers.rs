//! Drivers on array programs: gradient, Hessian-vector product and third
//! directional derivative of `f : ℝⁿ → ℝ` written against [`Array`].

use super::exec::ArrayWorkspace;
use super::fuse::fuse_chains;
use std::sync::Arc;

use super::ir::{AVar, ArrayBuilder, ArrayOp, ArrayProgram};
use super::trace::{trace, TArray, TScalar};
use super::transform::{forward_with, linear_split};
use crate::error::{check_len, Error, Result};
use crate::functor::{forward, reverse_joint};

/// Traces `f` at `x` (one vector input, one scalar output): the array
/// drivers' trace, also for [`crate::Gradient::array`] and
/// [`crate::Hvp::array`].
pub(crate) fn trace_scalar(
    f: impl Fn(&TArray) -> Result<TScalar>,
    x: &[f64],
) -> Result<ArrayProgram> {
    trace(|xs: &[TArray]| f(&xs[0]), &[x])
}

/// The gradient program `x ↦ (f(x), ∇f(x))` of a traced `f`: ∂⃖ with the
/// output cotangent fixed to 1.
fn gradient_program(p: &ArrayProgram) -> Result<ArrayProgram> {
    reverse_joint(p)?.specialize(&[None, Some(1.0)], &[0, 1])
}

/// The gradient program of a traced array program and its workspace,
/// run at a point; re-tracing is the owner's ([`crate::Gradient`], for
/// array functions and for scalar code with loops).
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
        let program = fuse_chains(&gradient_program(p)?, None)?;
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

    /// How many map bodies run as compiled block kernels so far, and how
    /// many maps there are.
    pub(crate) fn native_kernels(&self) -> (usize, usize) {
        self.ws.native_kernels()
    }
}

/// A program `(x, d) ↦ …` split in two stages by what depends on its
/// second input `d` (a direction, a cotangent): the first stage runs at
/// `x` alone and keeps what the second reads; the second runs for each `d`
/// at that `x`. The array tier's staging, shared by [`HvpCore`] and
/// [`PullbackCore`].
#[derive(Clone, Debug)]
pub(crate) struct TwoStage {
    program: ArrayProgram,
    ws: ArrayWorkspace,
    /// Instructions that depend on `d`.
    late: Vec<bool>,
    early: Vec<bool>,
}

impl TwoStage {
    fn new(program: ArrayProgram) -> Result<TwoStage> {
        // Maps fuse within a stage, never across.
        let stage: Vec<u32> = tangent_mask(&program).into_iter().map(u32::from).collect();
        let program = fuse_chains(&program, Some(&stage))?;
        let late = tangent_mask(&program);
        // Values of the first stage that the second reads, and the outputs
        // and the guards' operands, keep their buffers.
        let mut persist = vec![false; program.ops.len()];
        for (i, op) in program.ops.iter().enumerate() {
            if late[i] {
                op.for_each_operand(|o| {
                    if !late[o.index()] {
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
        let early = late.iter().map(|t| !t).collect();
        Ok(TwoStage {
            program,
            ws,
            late,
            early,
        })
    }

    /// The first stage at `x`; `d` only fills the input slot (of its
    /// length, not read).
    fn run_early(&mut self, x: &[f64], d: &[f64]) -> Result<()> {
        self.ws
            .run_masked(&self.program, &[x, d], Some(&self.early))
    }

    /// The second stage for `d` at the `x` of the last first stage, output
    /// `k` written to `out`.
    fn run_late_into(&mut self, x: &[f64], d: &[f64], k: usize, out: &mut [f64]) -> Result<()> {
        self.ws
            .run_masked_into(&self.program, &[x, d], Some(&self.late), k, out)
    }

    /// Output `k` of the last run.
    fn output(&self, k: usize) -> &[f64] {
        self.ws.output(&self.program, k)
    }
}

/// The split Hessian-vector programs of a traced array program, their
/// workspaces and the linearized point; re-tracing is the owner's
/// ([`crate::Hvp`], for array functions and for scalar code with loops).
#[derive(Clone)]
pub(crate) struct HvpCore {
    /// `(x, v) ↦ (f, ∇f, H v)` in two stages.
    stages: TwoStage,
    /// `(x, v) ↦ H(x) v` in one pass, for [`crate::Hvp::eval`]; built on its
    /// first call.
    one_pass: Option<(ArrayProgram, ArrayWorkspace)>,
    /// The gradient program, which `one_pass` is built from.
    gradient: ArrayProgram,
    n: usize,
    /// The linearized point (allocated by the first `linearize`).
    x: Vec<f64>,
    linearized: bool,
}

impl HvpCore {
    /// The Hessian-vector programs of the traced `p` (one vector input of
    /// `n` entries, one scalar output); nothing linearized.
    pub(crate) fn new(p: &ArrayProgram, n: usize) -> Result<Self> {
        let gradient = gradient_program(p)?;
        // forward(g): [x, ẋ] ↦ [f, ∇f, ḟ, H ẋ].
        // Values computed apart from tangents: `linearize` reads them
        // without a direction.
        let program = forward_with(&gradient, false)?.specialize(&[None, None], &[0, 1, 3])?;
        let program = hoist_residuals(&program)?;
        Ok(HvpCore {
            stages: TwoStage::new(program)?,
            one_pass: None,
            gradient,
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
        self.stages.run_early(&self.x, &self.x)?;
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
        self.stages.run_late_into(&self.x, v, 2, out)
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
                let p = fuse_chains(&p, None)?;
                let ws = ArrayWorkspace::new(&p);
                self.one_pass.insert((p, ws))
            }
        };
        ws.run_masked_into(p, &[x, v], None, 0, out)
    }

    /// `f` at the linearized point.
    pub(crate) fn value(&self) -> f64 {
        self.stages.output(0).first().copied().unwrap_or(f64::NAN)
    }

    /// `∇f` at the linearized point.
    pub(crate) fn gradient(&self) -> &[f64] {
        self.stages.output(1)
    }

    /// The program `(x, v) ↦ (f, ∇f, H v)`.
    pub(crate) fn program(&self) -> &ArrayProgram {
        &self.stages.program
    }

    /// How many map bodies run as compiled block kernels so far, and how
    /// many maps there are, over the two-pass and the one-pass programs.
    pub(crate) fn native_kernels(&self) -> (usize, usize) {
        let (k, m) = self.stages.ws.native_kernels();
        let (k1, m1) = self
            .one_pass
            .as_ref()
            .map_or((0, 0), |(_, ws)| ws.native_kernels());
        (k + k1, m + m1)
    }
}

/// The pullback of a traced `f : ℝⁿ → ℝᵐ` (one vector input, one vector
/// output) at a point: ∂⃖f's joint program `(x, ȳ) ↦ (y, x̄)` with its
/// cotangent-free part (the primal and the residual, for a loop its
/// carries) run once at the point, and the rest for each `ȳ`
/// ([`crate::pullback`], [`crate::vjp`] and [`crate::jacobian`] on code
/// with loops).
#[derive(Clone, Debug)]
pub(crate) struct PullbackCore {
    stages: TwoStage,
    x: Vec<f64>,
    n: usize,
    m: usize,
}

impl PullbackCore {
    /// The pullback of the traced `p` at `x`: its primal and residual run.
    pub(crate) fn new(p: &ArrayProgram, x: &[f64]) -> Result<Self> {
        let m = match p.output_shapes().as_slice() {
            [s] => s.len(),
            _ => return Err(Error::Unsupported("a pullback of several output arrays")),
        };
        let mut stages = TwoStage::new(reverse_joint(p)?)?;
        stages.run_early(x, &vec![0.0; m])?;
        Ok(PullbackCore {
            stages,
            x: x.to_vec(),
            n: x.len(),
            m,
        })
    }

    /// `f(x)` (`m` values).
    pub(crate) fn value(&self) -> &[f64] {
        self.stages.output(0)
    }

    /// The joint program `(x, ȳ) ↦ (y, x̄)`.
    pub(crate) fn program(&self) -> &ArrayProgram {
        &self.stages.program
    }

    /// `x̄ = J_f(x)ᵀ ȳ`, written to `xbar`.
    pub(crate) fn apply(&mut self, ybar: &[f64], xbar: &mut [f64]) -> Result<()> {
        check_len("pullback: output cotangent", self.m, ybar.len())?;
        check_len("pullback: input cotangent", self.n, xbar.len())?;
        self.stages.run_late_into(&self.x, ybar, 1, xbar)
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
/// [`crate::Hvp::linearize`] computes the coefficients once and [`crate::Hvp::apply`]
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
                        .filter(|&(_, &e)| e == want)
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
