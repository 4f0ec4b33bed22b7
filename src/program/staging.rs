//! Staging: cutting a program into causal stages, the left and right (and,
//! at higher order, the nested closures) of an optic. Generic program
//! staging, in the manner of partial evaluation: the values crossing a
//! stage boundary are the residuals (K. Fischer, "∂P.jl terminology and
//! notation guide", §I).

use super::ir::{Guard, Instr};
use super::passes::Scheduler;
use super::{Program, Var};
use crate::backend::{Executable, LaneRegisters, Registers, LANES};
use crate::error::{Error, Result};
use crate::real::Real;

/// One stage of a staged program: a program whose inputs are
/// `[residual in…, this stage's own inputs…]` and whose outputs are
/// `[this stage's own outputs…, residual out…]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    /// The stage's program, with its compiled forms for `f64`.
    pub program: Executable,
    /// Number of residual values it receives from the stages before it.
    pub residual_in: usize,
    /// Number of its own inputs.
    pub own_inputs: usize,
    /// Number of its own outputs.
    pub own_outputs: usize,
    /// Number of residual values it hands to the stages after it.
    pub residual_out: usize,
}

/// Splits a program into causal stages.
///
/// Input block `i` becomes available at stage `input_stage[i]`; output block
/// `j` must be ready by stage `output_stage[j]`. Each instruction runs in the
/// first stage where all its operands are available. The values a stage
/// passes on are exactly those later stages use: they are the residuals of
/// the optic (K. Fischer, "∂P.jl terminology and notation guide", §I).
/// Constants are re-created where they are used,
/// never passed on.
///
/// # Errors
///
/// [`Error::LengthMismatch`] unless there is one stage per input block
/// and one per output block; [`Error::IndexOutOfRange`] for a stage not
/// below `n_stages`;
/// [`Error::NotCausal`] if an output depends on an input of a later stage.
///
/// # Example
///
/// Splitting the joint program of ∂⃖ sin into left and right: the residual
/// is `cos x`, computed on the left (the capture of Snippet 15 of Fischer's
/// notes).
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::functor::reverse_joint;
/// use optic_ad::split_stages;
/// use optic_ad::{trace, Error, Real};
///
/// let p = trace(|x| vec![x[0].sin()], &[0.3]).unwrap();
/// let j = reverse_joint(&p); // [x, ȳ] -> [y, x̄]
/// let st = split_stages(&j, &[0, 1], &[0, 1], 2).unwrap();
/// assert_eq!(st[0].residual_out, 1);
/// let left = st[0].program.eval(&[0.3]).unwrap(); // [y, cos x]
/// assert_relative_eq!(left[1], 0.3_f64.cos());
/// let right = st[1].program.eval(&[left[1], 2.0]).unwrap(); // [x̄]
/// assert_relative_eq!(right[0], 2.0 * 0.3_f64.cos());
/// // x̄ cannot be ready before ȳ arrives.
/// assert!(matches!(split_stages(&j, &[0, 1], &[0, 0], 2), Err(Error::NotCausal { .. })));
/// ```
pub fn split_stages(
    p: &Program,
    input_stage: &[usize],
    output_stage: &[usize],
    n_stages: usize,
) -> Result<Vec<Stage>> {
    split(p, input_stage, output_stage, n_stages, false)
}

/// [`split_stages`], each stage's instructions in the order of
/// [`Program::schedule`] when `schedule` is set. Dead instructions are
/// dropped on the way: one pass over the program builds every stage.
pub(crate) fn split(
    p: &Program,
    input_stage: &[usize],
    output_stage: &[usize],
    n_stages: usize,
    schedule: bool,
) -> Result<Vec<Stage>> {
    if input_stage.len() != p.input_blocks.len() || output_stage.len() != p.output_blocks.len() {
        let (what, expected, got) = if input_stage.len() != p.input_blocks.len() {
            (
                "split_stages: input stages",
                p.input_blocks.len(),
                input_stage.len(),
            )
        } else {
            (
                "split_stages: output stages",
                p.output_blocks.len(),
                output_stage.len(),
            )
        };
        return Err(Error::LengthMismatch {
            what,
            expected,
            got,
        });
    }
    if let Some(&bad) = input_stage
        .iter()
        .chain(output_stage)
        .find(|&&s| s >= n_stages)
    {
        return Err(Error::IndexOutOfRange {
            what: "split_stages: stage",
            index: bad,
            len: n_stages,
        });
    }
    let scalar_stage = |blocks: &[usize], stages: &[usize]| -> Vec<u32> {
        let mut s = Vec::new();
        for (&w, &st) in blocks.iter().zip(stages) {
            s.extend(std::iter::repeat_n(st as u32, w));
        }
        s
    };
    let in_stage = scalar_stage(&p.input_blocks, input_stage);
    let out_stage = scalar_stage(&p.output_blocks, output_stage);
    let code = &p.code;
    let n = code.len();
    let live = p.live();
    // One pass in program order: the stage of each live value (the first
    // where all its operands are available; constants are re-created where
    // they are used, so they count as available at stage 0), the latest
    // stage that reads each value, and each stage's instructions.
    let mut stage = vec![0u32; n];
    let mut last_use = vec![0u32; n];
    let mut input_at = vec![0usize; p.n_inputs];
    let mut items: Vec<Vec<u32>> = vec![Vec::new(); n_stages];
    for (i, ins) in code.iter().enumerate() {
        if let Some(k) = ins.as_input() {
            stage[i] = in_stage[k as usize];
            last_use[i] = stage[i];
            input_at[k as usize] = i;
        } else if live[i] && !ins.is_const() {
            let ops = ins.operands();
            let s = ops.iter().map(|o| stage[o.index()]).max().unwrap_or(0);
            stage[i] = s;
            last_use[i] = s;
            for o in ops {
                let u = &mut last_use[o.index()];
                *u = (*u).max(s);
            }
            items[s as usize].push(i as u32);
        }
    }
    // Guards run in the stage of their later operand.
    let guard_stage: Vec<u32> = p
        .guards
        .iter()
        .map(|g| stage[g.a.index()].max(stage[g.b.index()]))
        .collect();
    for (g, &s) in p.guards.iter().zip(&guard_stage) {
        last_use[g.a.index()] = last_use[g.a.index()].max(s);
        last_use[g.b.index()] = last_use[g.b.index()].max(s);
    }
    for (j, o) in p.outputs.iter().enumerate() {
        if stage[o.index()] > out_stage[j] {
            return Err(not_causal(p, &stage, &out_stage, j));
        }
        last_use[o.index()] = last_use[o.index()].max(out_stage[j]);
    }
    // `local[i]`: the value of `i` in the stage being built, for what was
    // computed there or handed to it. Constants are re-created in each
    // stage at their first use there: their slot holds `NONE` until then,
    // and again once the stage is built.
    const NONE: u32 = u32::MAX;
    let mut local = vec![NONE; n];
    let mut made: Vec<u32> = Vec::new();
    let mut stages = Vec::with_capacity(n_stages);
    let mut carried: Vec<u32> = Vec::new();
    let mut sorter = Scheduler::default();
    for (s, items) in items.iter_mut().enumerate() {
        let s32 = s as u32;
        for &c in &made {
            local[c as usize] = NONE;
        }
        made.clear();
        let mut out: Vec<Instr> = Vec::with_capacity(items.len() + carried.len() + 16);
        let mut n_in = 0u32;
        for &i in &carried {
            local[i as usize] = out.len() as u32;
            out.push(Instr::input(n_in));
            n_in += 1;
        }
        // Own inputs in the order of the program's inputs.
        let mut own_inputs = 0;
        for (k, &at) in input_at.iter().enumerate() {
            if in_stage[k] == s32 {
                local[at] = out.len() as u32;
                out.push(Instr::input(n_in));
                n_in += 1;
                own_inputs += 1;
            }
        }
        // Every value read here was computed or received already, but for
        // constants, made at their first read.
        let mut local_of = |v: Var, out: &mut Vec<Instr>, local: &mut [u32]| -> Var {
            let l = local[v.index()];
            if l != NONE {
                return Var(l);
            }
            // A NaN would make a slip visible.
            let c = code[v.index()].as_const().unwrap_or(f64::NAN);
            out.push(Instr::constant(c));
            let l = out.len() as u32 - 1;
            local[v.index()] = l;
            made.push(v.0);
            Var(l)
        };
        if schedule {
            sorter.sort(code, items);
        }
        for &i in items.iter() {
            let i = i as usize;
            let mapped = code[i].map_operands(|o| local_of(o, &mut out, &mut local));
            local[i] = out.len() as u32;
            out.push(mapped.canonical());
        }
        // The instruction lists are not needed again.
        *items = Vec::new();
        let mut guards = Vec::new();
        for (g, &gs) in p.guards.iter().zip(&guard_stage) {
            if gs == s32 {
                let a = local_of(g.a, &mut out, &mut local);
                let b = local_of(g.b, &mut out, &mut local);
                guards.push(Guard {
                    a,
                    b,
                    ordering: g.ordering,
                });
            }
        }
        let mut outs: Vec<Var> = Vec::new();
        for (j, o) in p.outputs.iter().enumerate() {
            if out_stage[j] == s32 {
                outs.push(local_of(*o, &mut out, &mut local));
            }
        }
        let own_outputs = outs.len();
        // Values crossing the boundary after this stage.
        let next: Vec<u32> = if s + 1 < n_stages {
            (0..n)
                .filter(|&i| live[i] && !code[i].is_const() && stage[i] <= s32 && last_use[i] > s32)
                .map(|i| i as u32)
                .collect()
        } else {
            Vec::new()
        };
        for &i in &next {
            outs.push(local_of(Var(i), &mut out, &mut local));
        }
        let residual_in = carried.len();
        let residual_out = next.len();
        let program = Program::from_parts(
            n_in as usize,
            out,
            outs,
            guards,
            p.rules.clone(),
            p.defect.clone(),
            vec![residual_in, own_inputs],
            vec![own_outputs, residual_out],
        );
        stages.push(Stage {
            program: Executable::new(program),
            residual_in,
            own_inputs,
            own_outputs,
            residual_out,
        });
        carried = next;
    }
    Ok(stages)
}

/// [`Error::NotCausal`] for output `j`, which is computed at a stage
/// after the one it is due by: the latest input block it depends on.
fn not_causal(p: &Program, stage: &[u32], out_stage: &[u32], j: usize) -> Error {
    // The latest input block each value depends on, found again here, off
    // the path of every split that succeeds.
    let mut in_block = Vec::with_capacity(p.n_inputs);
    for (b, &w) in p.input_blocks.iter().enumerate() {
        in_block.extend(std::iter::repeat_n(b as u32, w));
    }
    let mut src: Vec<u32> = vec![u32::MAX; p.code.len()];
    for (i, ins) in p.code.iter().enumerate() {
        if let Some(k) = ins.as_input() {
            src[i] = in_block[k as usize];
        } else {
            for &o in ins.operands() {
                if stage[o.index()] >= stage[i] && src[o.index()] != u32::MAX {
                    src[i] = src[o.index()];
                }
            }
        }
    }
    let mut out_block = Vec::with_capacity(out_stage.len());
    for (b, &w) in p.output_blocks.iter().enumerate() {
        out_block.extend(std::iter::repeat_n(b, w));
    }
    let b = src[p.outputs[j].index()];
    Error::NotCausal {
        output: out_block[j],
        input: if b == u32::MAX { 0 } else { b as usize },
    }
}

/// A program cut into causal stages that run in order, each receiving the
/// residual of the stage before it and handing its own to the next: the
/// `left` and `right` of an optic as programs (K. Fischer, "∂P.jl
/// terminology and notation guide", §I), and at higher order the nested
/// closures of §VII.B.
///
/// [`crate::ReverseOptic`] (two stages), [`crate::Nested`] (`2ᴺ` stages)
/// and [`crate::Hvp`] (two stages) are built on it. [`Staged::run`]
/// allocates its results and runs on any [`Real`] with the interpreter;
/// [`Staged::run_with`] runs `f64` stages with the lowered evaluator
/// ([`Executable::eval_f64`](crate::Executable::eval_f64)) in a [`StagedWorkspace`] and, in steady state,
/// does not allocate.
///
/// Shapes: stage `k` takes [`Stage::residual_in`] residual values (those
/// stage `k − 1` handed on, none for stage 0) and [`Stage::own_inputs`]
/// inputs of its own, and gives [`Stage::own_outputs`] outputs of its own
/// and [`Stage::residual_out`] residual values.
///
/// # Example
///
/// ∂⃖ sin as two stages: the left hands on `cos x`.
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::functor::reverse_joint;
/// use optic_ad::{trace, Real, Staged};
///
/// let p = trace(|x| vec![x[0].sin()], &[0.3]).unwrap();
/// let st = Staged::split(&reverse_joint(&p), &[0, 1], &[0, 1], 2).unwrap();
/// let mut ws = st.workspace();
/// st.run_with(0, &mut ws, &[0.3]).unwrap();
/// assert_relative_eq!(st.own_outputs(&ws, 0)[0], 0.3_f64.sin());
/// for ybar in [1.0, 2.0] {
///     st.run_with(1, &mut ws, &[ybar]).unwrap(); // the residual is reused
///     assert_relative_eq!(st.own_outputs(&ws, 1)[0], ybar * 0.3_f64.cos());
/// }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Staged {
    stages: Vec<Stage>,
}

/// Reusable buffers for running a [`Staged`] program: for each stage, the
/// registers of the lowered `f64` evaluator ([`Executable::eval_f64`](crate::Executable::eval_f64)), its
/// input row `[residual in, own inputs]` and its output row
/// `[own outputs, residual out]`.
#[derive(Clone, Debug, Default)]
pub struct StagedWorkspace {
    ws: Vec<Registers>,
    /// Registers of [`Staged::run_lanes`], one per stage, made on first use.
    lanes: Vec<LaneRegisters>,
    inputs: Vec<Vec<f64>>,
    outputs: Vec<Vec<f64>>,
}

impl Staged {
    /// Splits `p` into `n_stages` causal stages; see [`split_stages`].
    ///
    /// # Errors
    ///
    /// As [`split_stages`].
    pub fn split(
        p: &Program,
        input_stage: &[usize],
        output_stage: &[usize],
        n_stages: usize,
    ) -> Result<Staged> {
        Ok(Staged {
            stages: split_stages(p, input_stage, output_stage, n_stages)?,
        })
    }

    /// The stages, in order.
    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    /// [`Staged::split`] with each stage ordered for the interpreter
    /// ([`Program::schedule`]), in one pass.
    pub(crate) fn split_scheduled(
        p: &Program,
        input_stage: &[usize],
        output_stage: &[usize],
        n_stages: usize,
    ) -> Result<Staged> {
        Ok(Staged {
            stages: split(p, input_stage, output_stage, n_stages, true)?,
        })
    }

    /// The same stages, each ordered for the interpreter
    /// ([`Program::schedule`]).
    pub fn schedule(self) -> Staged {
        Staged {
            stages: self
                .stages
                .into_iter()
                .map(|s| Stage {
                    program: Executable::new(s.program.schedule()),
                    ..s
                })
                .collect(),
        }
    }

    fn stage(&self, k: usize) -> Result<&Stage> {
        self.stages.get(k).ok_or(Error::IndexOutOfRange {
            what: "stage",
            index: k,
            len: self.stages.len(),
        })
    }

    /// Runs stage `k` on the residual handed on by stage `k − 1` and its
    /// own inputs `own`; returns its own outputs and the residual it hands
    /// on. Any [`Real`] scalar: `f64`, or tracers to run the stage inside
    /// another trace.
    ///
    /// # Errors
    ///
    /// [`Error::IndexOutOfRange`] for a stage that does not exist;
    /// [`Error::LengthMismatch`] for inputs of the wrong lengths;
    /// [`Error::GuardFailed`] where a traced branch no longer holds.
    pub fn run<T: Real>(&self, k: usize, residual: &[T], own: &[T]) -> Result<(Vec<T>, Vec<T>)> {
        let stage = self.stage(k)?;
        check("stage residual", stage.residual_in, residual.len())?;
        check("stage input", stage.own_inputs, own.len())?;
        let mut inp = Vec::with_capacity(residual.len() + own.len());
        inp.extend_from_slice(residual);
        inp.extend_from_slice(own);
        let mut out = stage.program.eval(&inp)?;
        let res = out.split_off(stage.own_outputs);
        Ok((out, res))
    }

    /// Buffers sized for this program.
    pub fn workspace(&self) -> StagedWorkspace {
        StagedWorkspace {
            ws: self.stages.iter().map(|_| Registers::new()).collect(),
            lanes: Vec::new(),
            inputs: self
                .stages
                .iter()
                .map(|s| vec![0.0; s.program.n_inputs()])
                .collect(),
            outputs: self
                .stages
                .iter()
                .map(|s| vec![0.0; s.program.n_outputs()])
                .collect(),
        }
    }

    /// Runs stage `k` in `ws` on its own inputs `own` and the residual the
    /// last run of stage `k − 1` handed on; its outputs are then read with
    /// [`Staged::own_outputs`], and its residual is handed to stage
    /// `k + 1` (copied once, so later stages can run many times on it).
    ///
    /// # Errors
    ///
    /// As [`Staged::run`]; [`Error::LengthMismatch`] for a workspace of
    /// another program.
    pub fn run_with(&self, k: usize, ws: &mut StagedWorkspace, own: &[f64]) -> Result<()> {
        let stage = self.stage(k)?;
        check("stage input", stage.own_inputs, own.len())?;
        check("staged workspace", self.stages.len(), ws.ws.len())?;
        let (inputs, outputs) = (&mut ws.inputs[k], &mut ws.outputs[k]);
        check("staged workspace", stage.program.n_inputs(), inputs.len())?;
        check("staged workspace", stage.program.n_outputs(), outputs.len())?;
        inputs[stage.residual_in..].copy_from_slice(own);
        stage.program.eval_f64(&mut ws.ws[k], inputs, outputs)?;
        if let Some(next) = self.stages.get(k + 1) {
            let res = &ws.outputs[k][stage.own_outputs..];
            let dst = &mut ws.inputs[k + 1];
            if res.len() == next.residual_in && dst.len() >= res.len() {
                dst[..res.len()].copy_from_slice(res);
            }
        }
        Ok(())
    }

    /// Runs stage `k` on [`LANES`] sets of own inputs at once (lane `l` of
    /// `own[j]` is own input `j` of set `l`), all on the residual the last
    /// run of stage `k − 1` handed on, with the lowered evaluator; the
    /// outputs land in `out` the same way (own outputs, then the residual
    /// this stage hands on). Unlike [`Staged::run_with`] it hands nothing
    /// on to stage `k + 1`.
    ///
    /// # Errors
    ///
    /// As [`Staged::run_with`].
    pub(crate) fn run_lanes(
        &self,
        k: usize,
        ws: &mut StagedWorkspace,
        own: &[[f64; LANES]],
        out: &mut Vec<[f64; LANES]>,
    ) -> Result<()> {
        let stage = self.stage(k)?;
        check("stage input", stage.own_inputs, own.len())?;
        check("staged workspace", self.stages.len(), ws.ws.len())?;
        let inputs = &ws.inputs[k];
        let residual = inputs.get(..stage.residual_in).unwrap_or(&[]);
        check("stage residual", stage.residual_in, residual.len())?;
        out.clear();
        out.resize(stage.program.n_outputs(), [0.0; LANES]);
        if ws.lanes.len() != self.stages.len() {
            ws.lanes = self
                .stages
                .iter()
                .map(|_| LaneRegisters::default())
                .collect();
        }
        stage
            .program
            .eval_f64_lanes(&mut ws.lanes[k], residual, own, out)
    }

    /// The own outputs of the last [`Staged::run_with`] of stage `k` (empty
    /// for a stage that does not exist or a workspace of another program).
    pub fn own_outputs<'w>(&self, ws: &'w StagedWorkspace, k: usize) -> &'w [f64] {
        match (self.stages.get(k), ws.outputs.get(k)) {
            (Some(s), Some(o)) if o.len() >= s.own_outputs => &o[..s.own_outputs],
            _ => &[],
        }
    }

    /// The residual the last [`Staged::run_with`] of stage `k` handed on
    /// (empty for a stage that does not exist or a workspace of another
    /// program).
    pub fn residual<'w>(&self, ws: &'w StagedWorkspace, k: usize) -> &'w [f64] {
        match (self.stages.get(k), ws.outputs.get(k)) {
            (Some(s), Some(o)) if o.len() >= s.own_outputs => &o[s.own_outputs..],
            _ => &[],
        }
    }
}

fn check(what: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            what,
            expected,
            got,
        })
    }
}
