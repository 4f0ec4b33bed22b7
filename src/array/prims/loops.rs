//! Loops: [`Scan`], a primitive that carries a body program and runs it a
//! given number of times, threading a carry and reading one element of
//! per-step data each time. A fold is a scan without per-step data or
//! outputs.
//!
//! The rules are those of `jax.lax.scan` (J. Bradbury et al., JAX) and of
//! the forward and reverse folds (*FFold*, *RFold*) in T. Ellis, S. Peyton
//! Jones and A. Fitzgibbon, "Working notes on automatic differentiation",
//! §8: each derivative of a scan is a scan again, so the optic functors
//! apply to it as often as the order requires.
//!
//! * **∂⃗** carries the tangent beside the carry: a scan of the body's
//!   pushforward.
//! * **∂⃖** keeps the carries as its residual (a scan whose per-step
//!   outputs are the carries it starts each step with: `carry × steps`
//!   values), and its pullback is a scan running the other way over them,
//!   whose body is the body's joint program (value and pullback): it
//!   recomputes each step's inner residual from that step's carry, so the
//!   memory is that of the carries, not of the body's intermediates.

use std::cell::RefCell;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use crate::array::ir::{
    AVar, ArrayBuilder, ArrayPrim, ArrayPrimitive, ArrayProgram, Shape, TaylorRule,
};
use crate::array::{Param, ParamReader, PrimData};
use crate::backend::{Executable, Registers};
use crate::error::{Error, Result};
use crate::functor::jet_program::{derivative_program, factorial, MAX_JET_PROGRAM_DEGREE};
use crate::functor::{forward, reverse_joint, TaylorProgram};
use crate::program::{Builder, Program, Var};

thread_local! {
    /// The registers a scan's body runs in, one set per thread.
    static REGS: RefCell<Registers> = RefCell::new(Registers::new());
}

/// Runs `f` with this thread's loop registers, or with fresh ones where
/// they are in use (a body whose user rule evaluates a loop itself).
fn with_registers<R>(f: impl FnOnce(&mut Registers) -> R) -> R {
    REGS.with(|r| match r.try_borrow_mut() {
        Ok(mut regs) => f(&mut regs),
        Err(_) => f(&mut Registers::new()),
    })
}

/// `steps` applications of a scalar `body` to a carry of `carry` values:
/// step `i` (in order `0, 1, …`, or `…, 1, 0` if `reverse`) computes
/// `(c, yᵢ) = body(c, xᵢ, p)`, where `xᵢ` is element `i` of each of the
/// `xs` per-step sequences and `p` the `consts` constants.
///
/// Operands, in order: the initial carry (a vector of `carry` values), the
/// constants (a vector of `consts` values, present only if `consts > 0`)
/// and the per-step data (a vector of `xs · steps` values, sequence `j` at
/// `j·steps .. (j+1)·steps`, present only if `xs > 0`). The body's inputs
/// are `(carry, per-step, constants)` and its outputs `(carry, per-step
/// outputs)`. The value is one vector: the final carry, then each per-step
/// output's sequence (`ys · steps` values, laid out as the data).
///
/// Its derivatives are scans again (see the module's documentation); its
/// Taylor rule carries jets through the body step by step (by its Taylor
/// recurrences, or, with the feature `jit` once the loop has run 2¹³
/// steps, by the native code of its derivative program).
/// [`crate::fold`] and [`crate::scan`] record it from user code.
///
/// # Example
///
/// `c ← c·xᵢ + p` over `x = (2, 3)` from `c = 1`, `p = 0.5`, with the
/// carry after each step as per-step output: `(1·2 + 0.5) = 2.5`, then
/// `2.5·3 + 0.5 = 8`.
///
/// ```
/// use optic_ad::array::prims::Scan;
/// use optic_ad::array::{ArrayBuilder, Shape};
/// use optic_ad::Builder;
///
/// let mut b = Builder::new();
/// let (c, x, p) = (b.input(), b.input(), b.input());
/// let cx = b.mul(c, x);
/// let next = b.add(cx, p);
/// let body = b.finish(&[next, next]).unwrap(); // (carry, per-step output)
/// let scan = Scan::new(body, 2, 1, 1, 1, false).unwrap();
///
/// let mut ab = ArrayBuilder::new();
/// let (init, consts, xs) = (
///     ab.input(Shape::Vector(1)),
///     ab.input(Shape::Vector(1)),
///     ab.input(Shape::Vector(2)),
/// );
/// let y = ab.scan(scan, &[init, consts, xs]);
/// let prog = ab.finish(&[y]).unwrap();
/// let out = prog.eval(&[&[1.0], &[0.5], &[2.0, 3.0]]).unwrap();
/// assert_eq!(out[0], vec![8.0, 2.5, 8.0]); // final carry, then the outputs
/// ```
#[derive(Clone)]
pub struct Scan {
    body: Arc<Executable>,
    steps: usize,
    carry: usize,
    xs: usize,
    consts: usize,
    reverse: bool,
    /// Binomial checkpointing of the pullback with this many snapshots
    /// (see [`Revolve`]); `None` keeps every carry.
    snapshots: Option<usize>,
    derived: Arc<Derived>,
}

/// Steps of a loop's Taylor rule that its body's recurrences run, over
/// all its evaluations, before the body's derivative program is compiled
/// to native code (feature `jit`) and run in their place: on the RK4 body
/// of the benchmarks at `K = 4`, compiling took about 5 ms and saved about
/// 0.75 µs per step after it (even at about 6500 steps). Counting this
/// evaluation's steps, so that one long loop compiles at once.
const NATIVE_JET_STEPS: usize = 1 << 13;

/// The program of `body`'s Taylor derivatives at `degree` for full jets of
/// every input (a carry's jet is full after one step;
/// `functor::jet_program::derivative_program`), compiled to native code,
/// where the body has one and the native backend compiles it (feature
/// `jit`). Not as register code: on the predator–prey loop of the
/// benchmarks (RK4, 10³ … 10⁵ steps, `K = 4` along a line) the loop's
/// jets took 2.4–3.1× the recurrences' time with the coefficient program
/// run as register code, and 0.19–0.20× natively (each step one run of a
/// program of many instructions per instruction of the body, with no
/// elements to spread its dispatch over, as a map has). At most twice the
/// instructions the recurrences run, about `(K + 1)²` per instruction of
/// the body.
fn native_derivative_program(body: &Program, degree: usize) -> Option<Executable> {
    let w = degree + 1;
    let bound = 2 * w * w * body.len() + 64;
    let program = derivative_program(body, degree, &vec![degree; body.n_inputs()], bound)?;
    let exe = Executable::new(program);
    exe.compile_whole().then_some(exe)
}

/// The scans derived from one, built once (so that repeated derivations
/// share their bodies and the builder's sharing merges them).
#[derive(Default)]
struct Derived {
    states: OnceLock<ArrayPrim>,
    pullback: OnceLock<ArrayPrim>,
    pushforward: OnceLock<ArrayPrim>,
    /// The body's Taylor programs and their jet buffers, one per degree
    /// asked (so that Taylor mode through the loop allocates nothing in
    /// steady state, and jets of two degrees taken in turn build and
    /// compile nothing again).
    jets: Mutex<LoopJets>,
}

#[derive(Default)]
struct LoopJets {
    /// Steps the recurrences have run, at any degree (saturating).
    steps: usize,
    /// One per degree asked, in the order first asked.
    by_degree: Vec<BodyJets>,
}

struct BodyJets {
    program: TaylorProgram,
    /// The body's derivative program ([`native_derivative_program`]) once
    /// decided (`None` until the recurrences have run
    /// [`NATIVE_JET_STEPS`] steps; then `Some(None)` where the body has no
    /// such program or the build no native backend), run per step in
    /// place of the recurrences; a step whose inputs or derivatives from
    /// it are not all finite takes the recurrences' instead.
    native: Option<Option<Executable>>,
    /// The body's input jets (in derivatives while the native program
    /// runs), their coefficients for the recurrences, and its output jets.
    input: Vec<f64>,
    coefficients: Vec<f64>,
    output: Vec<f64>,
}

impl fmt::Debug for Scan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scan")
            .field("steps", &self.steps)
            .field("carry", &self.carry)
            .field("xs", &self.xs)
            .field("consts", &self.consts)
            .field("ys", &self.ys())
            .field("reverse", &self.reverse)
            .field("snapshots", &self.snapshots)
            .field("body_len", &self.body.len())
            .finish()
    }
}

impl Scan {
    /// A scan of `body` (inputs `carry + xs + consts`, outputs `carry` and
    /// any number of per-step outputs).
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if the body's inputs are not `carry + xs +
    /// consts` or it has fewer than `carry` outputs, or `carry` is 0;
    /// [`Error::Unsupported`] for a body that compares values (guards: a
    /// loop's branches are not supported yet).
    pub fn new(
        body: Program,
        steps: usize,
        carry: usize,
        xs: usize,
        consts: usize,
        reverse: bool,
    ) -> Result<Scan> {
        let n_in = carry
            .checked_add(xs)
            .and_then(|n| n.checked_add(consts))
            .ok_or(Error::LengthMismatch {
                what: "scan: body inputs (carry + per-step + constants)",
                expected: usize::MAX,
                got: body.n_inputs(),
            })?;
        crate::error::check_len("scan: body inputs", n_in, body.n_inputs())?;
        if carry == 0 || body.n_outputs() < carry {
            return Err(Error::LengthMismatch {
                what: "scan: body outputs (at least the carry, at least one)",
                expected: carry.max(1),
                got: body.n_outputs(),
            });
        }
        if !body.guards().is_empty() {
            return Err(Error::Unsupported(
                "a loop body that compares values (its comparisons would become guards)",
            ));
        }
        // The per-step data and outputs, and the carries a pullback keeps,
        // must be countable.
        let per_step = (body.n_outputs() + xs).max(carry);
        if per_step.checked_mul(steps).is_none() {
            return Err(Error::AllocationFailed {
                what: "scan: per-step values",
                elements: usize::MAX,
            });
        }
        Ok(Scan {
            body: Arc::new(Executable::new(body)),
            steps,
            carry,
            xs,
            consts,
            reverse,
            snapshots: None,
            derived: Arc::default(),
        })
    }

    /// The same scan whose pullback keeps at most `snapshots` carries
    /// besides the first and recomputes the others by the binomial schedule
    /// ([`Revolve`]), or (`None`) keeps all `steps` carries. Its derived
    /// scans inherit the choice.
    pub fn with_snapshots(mut self, snapshots: Option<usize>) -> Scan {
        self.snapshots = snapshots;
        self.derived = Arc::default();
        self
    }

    /// Steps of [`ArrayPrimitive::jet`] by the body's derivative program
    /// `exe`, from the carry's and the constants' jets in derivatives in
    /// `input` (`fact[d] = d!`, `d ≤ K`). A step whose values are not all
    /// finite runs the body's recurrences `t` on the coefficients. The number of
    /// steps run: all `n`, with the carry's derivatives left in `input`;
    /// or, after a step whose carry is finite in coefficients but not in
    /// derivatives, that step's count, with the carry's coefficients in
    /// `input` for the recurrences to go on from.
    fn native_steps(
        &self,
        (exe, t): (&Executable, &mut TaylorProgram),
        regs: &mut Registers,
        (input, coefficients, output): (&mut [f64], &mut [f64], &mut [f64]),
        (consts, data): (&[f64], &[f64]),
        fact: &[f64],
        out: &mut [f64],
    ) -> Result<usize> {
        let (k, x, p, n) = (self.carry, self.xs, self.consts, self.steps);
        let w = fact.len();
        for s in 0..n {
            let i = self.index(s);
            for j in 0..x {
                for d in 0..w {
                    input[(k + j) * w + d] = data[d * x * n + j * n + i] * fact[d];
                }
            }
            // The same layouts as the recurrences': input after input,
            // output after output, 0 … K each.
            if input.iter().all(|v| v.is_finite())
                && exe.eval_f64(regs, input, output).is_ok()
                && output.iter().all(|v| v.is_finite())
            {
                input[..k * w].copy_from_slice(&output[..k * w]);
                self.write_step(output, w, i, Some(fact), out);
                continue;
            }
            // The recurrences on the coefficients: the carry's from its
            // derivatives, the data and the constants as given.
            for d in 0..w {
                for j in 0..k {
                    coefficients[j * w + d] = input[j * w + d] / fact[d];
                }
                for j in 0..x {
                    coefficients[(k + j) * w + d] = data[d * x * n + j * n + i];
                }
                for j in 0..p {
                    coefficients[(k + x + j) * w + d] = consts[d * p + j];
                }
            }
            t.eval(coefficients, output)?;
            self.write_step(output, w, i, None, out);
            let held =
                (0..k * w).all(|q| (output[q] * fact[q % w]).is_finite() || !output[q].is_finite());
            if !held {
                input[..k * w].copy_from_slice(&output[..k * w]);
                return Ok(s + 1);
            }
            for q in 0..k * w {
                input[q] = output[q] * fact[q % w];
            }
        }
        Ok(n)
    }

    /// Writes the per-step outputs of the step at data index `i` from the
    /// body's output jets (output after output, `w = K + 1` values each)
    /// into the loop's coefficient-major jets `out`; from derivatives,
    /// divided by `fact`, where given.
    fn write_step(
        &self,
        output: &[f64],
        w: usize,
        i: usize,
        fact: Option<&[f64]>,
        out: &mut [f64],
    ) {
        let (k, n, len) = (self.carry, self.steps, self.out_len());
        for j in 0..self.ys() {
            for d in 0..w {
                let v = output[(k + j) * w + d];
                out[d * len + k + j * n + i] = fact.map_or(v, |f| v / f[d]);
            }
        }
    }

    /// The snapshots of the pullback's checkpointing, if it checkpoints
    /// (fewer snapshots than steps; with as many, every carry is kept).
    fn checkpointed(&self) -> Option<usize> {
        self.snapshots.filter(|&s| s < self.steps.saturating_sub(1))
    }

    /// The body.
    pub fn body(&self) -> &Program {
        self.body.program()
    }

    /// The number of steps.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// The number of per-step outputs.
    pub fn ys(&self) -> usize {
        self.body.n_outputs() - self.carry
    }

    /// The value's length: the carry, then `ys · steps`.
    fn out_len(&self) -> usize {
        self.checked_out_len().unwrap_or(usize::MAX)
    }

    /// [`Scan::out_len`], `None` where it overflows.
    fn checked_out_len(&self) -> Option<usize> {
        self.ys()
            .checked_mul(self.steps)
            .and_then(|n| n.checked_add(self.carry))
    }

    /// Step `s` reads element `i` of the per-step data.
    fn index(&self, s: usize) -> usize {
        if self.reverse {
            self.steps - 1 - s
        } else {
            s
        }
    }

    /// The operands' cotangents from the value `r = (c̄₀, p̄, x̄s)` of the
    /// reversed scan (or of [`Revolve`]), one per operand of this scan.
    fn operand_cotangents(&self, b: &mut ArrayBuilder, r: AVar) -> Vec<Option<AVar>> {
        let (k, x, p, n) = (self.carry, self.xs, self.consts, self.steps);
        let (c, xp) = self.positions();
        let mut contribs = vec![Some(b.slice(r, 0, k))];
        if c.is_some() {
            contribs.push(Some(b.slice(r, k, p)));
        }
        if xp.is_some() {
            contribs.push(Some(b.slice(r, k + p, x * n)));
        }
        contribs
    }

    /// The operands' positions: constants and per-step data, if present.
    fn positions(&self) -> (Option<usize>, Option<usize>) {
        let c = (self.consts > 0).then_some(1);
        let x = (self.xs > 0).then_some(1 + usize::from(self.consts > 0));
        (c, x)
    }

    fn derived_scan(
        &self,
        slot: &OnceLock<ArrayPrim>,
        make: impl FnOnce(&Scan) -> (Program, usize, usize, usize, bool),
    ) -> ArrayPrim {
        slot.get_or_init(|| {
            let (body, carry, xs, consts, reverse) = make(self);
            let steps = self.steps;
            ArrayPrim::new(Scan {
                body: Arc::new(Executable::new(body)),
                steps,
                carry,
                xs,
                consts,
                reverse,
                snapshots: self.snapshots,
                derived: Arc::default(),
            })
        })
        .clone()
    }

    /// The scan that also emits, as per-step outputs after its own, the
    /// carry each step starts with (the residual of ∂⃖): value
    /// `(c_N, ys, states)`, whose first [`Scan::out_len`] values are this
    /// scan's.
    fn states_scan(&self) -> ArrayPrim {
        self.derived_scan(&self.derived.states, |s| {
            let body = s.body.program();
            let mut b = Builder::with_capacity(body.len());
            let ins: Vec<Var> = (0..body.n_inputs()).map(|_| b.input()).collect();
            let m = body.inline_into(&mut b, &ins);
            let mut outs: Vec<Var> = body.outputs().iter().map(|o| m[o.index()]).collect();
            outs.extend_from_slice(&ins[..s.carry]);
            (
                b.finish_unchecked(&outs).dce(),
                s.carry,
                s.xs,
                s.consts,
                s.reverse,
            )
        })
    }

    /// The pullback scan: carry `(c̄, p̄)`, per-step data `(carry at the
    /// step, xᵢ, ȳᵢ)`, constants `p`, per-step outputs `x̄ᵢ`; it runs the
    /// other way. Its body is the body's joint program (value, then
    /// pullback), so each step's inner residual is recomputed.
    fn pullback_scan(&self) -> ArrayPrim {
        self.derived_scan(&self.derived.pullback, |s| {
            let body = s.body.program();
            let (k, x, p, y) = (s.carry, s.xs, s.consts, s.ys());
            let joint = reverse_joint(body);
            let mut b = Builder::with_capacity(2 * joint.len());
            let mut input = |n: usize| -> Vec<Var> { (0..n).map(|_| b.input()).collect() };
            let (cbar, pacc, state, xi, ybar, consts) =
                (input(k), input(p), input(k), input(x), input(y), input(p));
            // The joint program's inputs: (carry, xᵢ, p, c̄, ȳᵢ).
            let mut jin = state;
            jin.extend(xi);
            jin.extend(consts);
            jin.extend(cbar);
            jin.extend(ybar);
            let m = joint.inline_into(&mut b, &jin);
            // Its outputs: (carry′, yᵢ, c̄ at the step's start, x̄ᵢ, p̄).
            let jo: Vec<Var> = joint.outputs().iter().map(|o| m[o.index()]).collect();
            let at = k + y;
            let mut outs: Vec<Var> = jo[at..at + k].to_vec();
            for (j, &acc) in pacc.iter().enumerate() {
                let pbar = jo[at + k + x + j];
                outs.push(b.add(acc, pbar));
            }
            outs.extend_from_slice(&jo[at + k..at + k + x]);
            (
                b.finish_unchecked(&outs).dce(),
                k + p,
                k + x + y,
                p,
                !s.reverse,
            )
        })
    }

    /// The pushforward scan: carry `(c, ċ)`, per-step data `(xᵢ, ẋᵢ)`,
    /// constants `(p, ṗ)`, per-step outputs `(yᵢ, ẏᵢ)`.
    fn pushforward_scan(&self) -> ArrayPrim {
        self.derived_scan(&self.derived.pushforward, |s| {
            let body = s.body.program();
            let (k, x, p, y) = (s.carry, s.xs, s.consts, s.ys());
            let f = forward(body);
            let mut b = Builder::with_capacity(f.len());
            let mut input = |n: usize| -> Vec<Var> { (0..n).map(|_| b.input()).collect() };
            let (c, cdot, xi, xdot, consts, pdot) =
                (input(k), input(k), input(x), input(x), input(p), input(p));
            // The pushforward's inputs: (c, xᵢ, p, ċ, ẋᵢ, ṗ).
            let fin: Vec<Var> = [c, xi, consts, cdot, xdot, pdot].concat();
            let m = f.inline_into(&mut b, &fin);
            // Its outputs: (c′, yᵢ, ċ′, ẏᵢ).
            let fo: Vec<Var> = f.outputs().iter().map(|o| m[o.index()]).collect();
            let n = k + y;
            let outs: Vec<Var> = [&fo[..k], &fo[n..n + k], &fo[k..n], &fo[n + k..]].concat();
            (
                b.finish_unchecked(&outs).dce(),
                2 * k,
                2 * x,
                2 * p,
                s.reverse,
            )
        })
    }
}

impl ArrayPrimitive for Scan {
    fn name(&self) -> &'static str {
        "scan"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let (c, x) = self.positions();
        let n_args = 1 + usize::from(c.is_some()) + usize::from(x.is_some());
        crate::error::check_len("scan: operands", n_args, args.len())?;
        let want = |s: Shape, len: usize, what: &'static str| {
            if s == Shape::Vector(len) {
                Ok(())
            } else {
                Err(Error::ShapeMismatch {
                    what,
                    expected: Shape::Vector(len),
                    got: s,
                })
            }
        };
        let too_long = |what| Error::AllocationFailed {
            what,
            elements: usize::MAX,
        };
        want(args[0], self.carry, "scan: initial carry")?;
        if let Some(c) = c {
            want(args[c], self.consts, "scan: constants")?;
        }
        if let Some(x) = x {
            let len = self.xs.checked_mul(self.steps);
            want(
                args[x],
                len.ok_or(too_long("scan: per-step data"))?,
                "scan: per-step data",
            )?;
        }
        let out = self
            .checked_out_len()
            .ok_or(too_long("scan: per-step outputs"))?;
        Ok(Shape::Vector(out))
    }

    fn key(&self, words: &mut Vec<u64>) {
        words.extend([
            Arc::as_ptr(&self.body) as usize as u64,
            self.steps as u64,
            self.carry as u64,
            self.xs as u64,
            self.consts as u64,
            u64::from(self.reverse),
            self.snapshots.map_or(u64::MAX, |s| s as u64),
        ]);
    }

    fn params(&self) -> Vec<Param> {
        vec![
            Param::Program(self.body.program().clone()),
            Param::Int(self.steps as u64),
            Param::Int(self.carry as u64),
            Param::Int(self.xs as u64),
            Param::Int(self.consts as u64),
            Param::Flag(self.reverse),
            Param::Ints(self.snapshots.map(|s| s as u64).into_iter().collect()),
        ]
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        let mut r = ParamReader::new(params);
        let body = r.program()?.clone();
        let (steps, carry, xs, consts) = (r.usize()?, r.usize()?, r.usize()?, r.usize()?);
        let reverse = r.flag()?;
        let snapshots = match r.ints()? {
            [] => None,
            &[s] => Some(usize::try_from(s).ok()?),
            _ => return None,
        };
        r.finish()?;
        body.validate().ok()?;
        let scan = Scan::new(body, steps, carry, xs, consts, reverse).ok()?;
        Some(scan.with_snapshots(snapshots))
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        let body = self.body.to_string().replace('\n', "\n    ");
        format!(
            "scan{} {} steps of {} (carry {}, per-step {}, constants {}) with\n    {body}",
            if self.reverse { " reversed" } else { "" },
            self.steps,
            args.join(", "),
            self.carry,
            self.xs,
            self.consts,
        )
    }

    fn eval(
        &self,
        args: &[&[f64]],
        _: &[Shape],
        out: &mut [f64],
        _: Shape,
        scratch: &mut Vec<f64>,
    ) {
        let (k, x, p, y, n) = (self.carry, self.xs, self.consts, self.ys(), self.steps);
        let (c, xp) = self.positions();
        let consts = c.and_then(|c| args.get(c)).copied().unwrap_or(&[]);
        let data = xp.and_then(|x| args.get(x)).copied().unwrap_or(&[]);
        let n_in = k + x + p;
        scratch.clear();
        scratch.resize(n_in + k + y, 0.0);
        let (input, output) = scratch.split_at_mut(n_in);
        input[..k].copy_from_slice(args.first().copied().unwrap_or(&[]));
        input[k + x..].copy_from_slice(consts);
        let ok = with_registers(|regs| {
            for s in 0..n {
                let i = self.index(s);
                for j in 0..x {
                    input[k + j] = data[j * n + i];
                }
                if self.body.eval_f64(regs, input, output).is_err() {
                    return false;
                }
                input[..k].copy_from_slice(&output[..k]);
                for j in 0..y {
                    out[k + j * n + i] = output[k + j];
                }
            }
            true
        });
        if ok {
            out[..k].copy_from_slice(&input[..k]);
        } else {
            // Unreachable for a body this type accepted (no guards, the
            // lengths checked); NaN rather than a stale value.
            out.fill(f64::NAN);
        }
    }

    fn pullback(&self, b: &mut ArrayBuilder, args: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        if let Some(snapshots) = self.checkpointed() {
            // The carries recomputed from snapshots: one instruction whose
            // value is the reversed scan's.
            let mut rargs = args.to_vec();
            rargs.push(ct);
            let r = b.apply(Revolve::new(self.clone(), snapshots), &rargs);
            return self.operand_cotangents(b, r);
        }
        let t = b.apply_prim(self.states_scan(), args);
        self.right(b, args, t, ct)
    }

    /// The value and the carries as residual, from one run of the loop
    /// (`None` where the pullback checkpoints: it keeps nothing then).
    fn left(&self, b: &mut ArrayBuilder, args: &[AVar]) -> Option<(AVar, AVar)> {
        self.checkpointed().is_none().then_some(())?;
        let t = b.apply_prim(self.states_scan(), args);
        Some((b.slice(t, 0, self.out_len()), t))
    }

    /// The reversed scan over the carries that [`ArrayPrimitive::left`]
    /// kept.
    fn right(
        &self,
        b: &mut ArrayBuilder,
        args: &[AVar],
        residual: AVar,
        ct: AVar,
    ) -> Vec<Option<AVar>> {
        let (k, p, y, n) = (self.carry, self.consts, self.ys(), self.steps);
        let (c, xp) = self.positions();
        let states = b.slice(residual, self.out_len(), k * n);
        let ct_carry = b.slice(ct, 0, k);
        let init = if p > 0 {
            let zeros = b.fill(0.0, Shape::Vector(p));
            b.concat(&[ct_carry, zeros])
        } else {
            ct_carry
        };
        let mut data = vec![states];
        if let Some(xp) = xp {
            data.push(args[xp]);
        }
        if y > 0 {
            data.push(b.slice(ct, k, y * n));
        }
        let data = b.concat(&data);
        let mut rargs = vec![init];
        if let Some(c) = c {
            rargs.push(args[c]);
        }
        rargs.push(data);
        let r = b.apply_prim(self.pullback_scan(), &rargs);
        self.operand_cotangents(b, r)
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        args: &[AVar],
        tangents: &[Option<AVar>],
        out: Shape,
    ) -> Option<AVar> {
        self.jvp(b, args, tangents, out).map(|(_, t)| t)
    }

    /// One scan of the body's pushforward: the tangent carried beside the
    /// carry, the value read off the same run.
    fn jvp(
        &self,
        b: &mut ArrayBuilder,
        args: &[AVar],
        tangents: &[Option<AVar>],
        _: Shape,
    ) -> Option<(AVar, AVar)> {
        if tangents.iter().all(Option::is_none) {
            return None;
        }
        let (k, y, n) = (self.carry, self.ys(), self.steps);
        let fargs: Vec<AVar> = args
            .iter()
            .zip(tangents)
            .map(|(&a, t)| {
                let t = t.unwrap_or_else(|| b.zero(b.shape(a)));
                b.concat(&[a, t])
            })
            .collect();
        // (c_N, ċ_N, ys, ẏs).
        let r = b.apply_prim(self.pushforward_scan(), &fargs);
        let (value, tangent) = (b.slice(r, 0, k), b.slice(r, k, k));
        Some(if y > 0 {
            let (ys, ydots) = (b.slice(r, 2 * k, y * n), b.slice(r, 2 * k + y * n, y * n));
            (b.concat(&[value, ys]), b.concat(&[tangent, ydots]))
        } else {
            (value, tangent)
        })
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Nonlinear
    }

    /// Jets through the body, step by step: the carry's jet is threaded,
    /// each step reads its data's jets. Each step runs the body's Taylor
    /// recurrences; with the feature `jit`, once this loop's jets have
    /// run 2¹³ steps (counting this evaluation's), the
    /// native code of the body's derivative program instead, where the
    /// body has one, with the carry's jet held in derivatives; a step
    /// whose inputs or derivatives are not all finite still runs the
    /// recurrences (as array Taylor mode does per element).
    fn jet(
        &self,
        args: &[&[f64]],
        _: &[Shape],
        degree: usize,
        out: &mut [f64],
        _: Shape,
    ) -> Result<()> {
        let (k, x, p, y, n) = (self.carry, self.xs, self.consts, self.ys(), self.steps);
        let w = degree + 1;
        let (c, xp) = self.positions();
        let init = args.first().copied().unwrap_or(&[]);
        let consts = c.and_then(|c| args.get(c)).copied().unwrap_or(&[]);
        let data = xp.and_then(|x| args.get(x)).copied().unwrap_or(&[]);
        let mut cache = self
            .derived
            .jets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The steps run so far, at any degree, count at every degree.
        let LoopJets { steps, by_degree } = &mut *cache;
        let at = match by_degree.iter().position(|j| j.program.degree() == degree) {
            Some(at) => at,
            None => {
                by_degree.push(BodyJets {
                    program: TaylorProgram::new(self.body.program(), degree)?,
                    native: None,
                    input: vec![0.0; (k + x + p) * w],
                    coefficients: vec![0.0; (k + x + p) * w],
                    output: vec![0.0; (k + y) * w],
                });
                by_degree.len() - 1
            }
        };
        let jets = &mut by_degree[at];
        if jets.native.is_none()
            && crate::backend::NATIVE
            && steps.saturating_add(n) >= NATIVE_JET_STEPS
        {
            jets.native = Some(native_derivative_program(self.body.program(), degree));
        }
        let BodyJets {
            program: t,
            native,
            input,
            coefficients,
            output,
        } = jets;
        let len = self.out_len();
        // Input-major jets of the body: (carry, xᵢ, p), in coefficients, or
        // scaled by `fact`.
        let load = |input: &mut [f64], fact: Option<&[f64]>| {
            for d in 0..w {
                let f = fact.map_or(1.0, |f| f[d]);
                for j in 0..k {
                    input[j * w + d] = init[d * k + j] * f;
                }
                for j in 0..p {
                    input[(k + x + j) * w + d] = consts[d * p + j] * f;
                }
            }
        };
        // With the program, the carry's jet in derivatives, x⁽ᵈ⁾ = d! c_d,
        // through the loop: each step's values go in and come out without
        // a rounding through d! and 1/d!; the data and the outputs are
        // converted as they are read and written. From a step whose carry
        // is finite in coefficients but not in derivatives (`d! c_d`
        // beyond the largest `f64`) on, the recurrences.
        let mut start = 0;
        if let Some(exe) = native.as_ref().and_then(Option::as_ref).filter(|_| n > 0) {
            // The program exists only for degrees up to its maximum.
            let mut fact = [1.0; MAX_JET_PROGRAM_DEGREE + 1];
            for (d, f) in fact.iter_mut().enumerate().take(w) {
                *f = factorial(d);
            }
            let fact = &fact[..w];
            load(input, Some(fact));
            let held = |scaled: f64, c: f64| scaled.is_finite() || !c.is_finite();
            let entry = (0..w).all(|d| {
                (0..k).all(|j| held(input[j * w + d], init[d * k + j]))
                    && (0..p).all(|j| held(input[(k + x + j) * w + d], consts[d * p + j]))
            });
            if entry {
                let bufs = (&mut input[..], &mut coefficients[..], &mut output[..]);
                start = with_registers(|regs| {
                    self.native_steps((exe, t), regs, bufs, (consts, data), fact, out)
                })?;
                if start == n {
                    for j in 0..k {
                        for d in 0..w {
                            out[d * len + j] = input[j * w + d] / fact[d];
                        }
                    }
                    return Ok(());
                }
                // The carry is in coefficients; the constants too.
                for d in 0..w {
                    for j in 0..p {
                        input[(k + x + j) * w + d] = consts[d * p + j];
                    }
                }
            } else {
                load(input, None);
            }
        } else {
            load(input, None);
        }
        for s in start..n {
            let i = self.index(s);
            for j in 0..x {
                for d in 0..w {
                    input[(k + j) * w + d] = data[d * x * n + j * n + i];
                }
            }
            t.eval(input, output)?;
            input[..k * w].copy_from_slice(&output[..k * w]);
            self.write_step(output, w, i, None, out);
        }
        *steps = steps.saturating_add(n - start);
        for j in 0..k {
            for d in 0..w {
                out[d * len + j] = input[j * w + d];
            }
        }
        Ok(())
    }

    fn unroll(&self, b: &mut Builder, args: &[&[Var]], _: &[Shape], _: Shape) -> Vec<Var> {
        let (k, x, y, n) = (self.carry, self.xs, self.ys(), self.steps);
        let (c, xp) = self.positions();
        let consts = c.and_then(|c| args.get(c)).copied().unwrap_or(&[]);
        let data = xp.and_then(|x| args.get(x)).copied().unwrap_or(&[]);
        let body = self.body.program();
        let mut carry: Vec<Var> = args.first().copied().unwrap_or(&[]).to_vec();
        let mut ys = vec![Var(0); y * n];
        for s in 0..n {
            let i = self.index(s);
            let mut ins = carry.clone();
            ins.extend((0..x).map(|j| data[j * n + i]));
            ins.extend_from_slice(consts);
            let m = body.inline_into(b, &ins);
            let outs: Vec<Var> = body.outputs().iter().map(|o| m[o.index()]).collect();
            carry = outs[..k].to_vec();
            for j in 0..y {
                ys[j * n + i] = outs[k + j];
            }
        }
        carry.extend(ys);
        carry
    }
}

/// The pullback of a [`Scan`] with binomial checkpointing (A. Griewank
/// and A. Walther, "Evaluating Derivatives", 2nd ed., ch. 12, the
/// `revolve` schedule; A. Griewank, "Achieving logarithmic growth of
/// temporal and spatial complexity in reverse automatic differentiation",
/// Optimization Methods and Software 1, 1992): the value of the reversed
/// scan over the scan's carries, with at most `snapshots` carries kept
/// besides the first and the others recomputed from the nearest one.
///
/// Operands: the scan's, then the cotangent of its value. The value:
/// `(c̄₀, p̄, x̄s)`, as the pullback scan's. Memory: `(snapshots + 1) × carry`
/// values, against `steps × carry` for the stored carries; the forward
/// steps recomputed are the fewest possible for that many snapshots,
/// `r·N − β(s + 2, r − 1)` for `N` steps, `s` snapshots,
/// `β(c, r) = (c + r)! / (c! r!)` and `r` the least with `β(s + 1, r) ≥ N`
/// ([`binomial_forward_steps`]).
///
/// Its derivatives are checkpointed loops again: with `J` the Jacobian of
/// the scan at its operands `a`, the value is `R = J^T ct`, and both its
/// pushforward `J^T ċt + (∂ₐ(J ȧ))^T ct` and its pullback (`(∂ₐ(J r̄))^T
/// ct` for `a`, `J r̄` for `ct`) are second-order adjoints, which one
/// `Revolve` of the scan's pushforward scan computes (carry `(c, ċ)`, so
/// `2 × carry` values per snapshot). Applied again, they give a `Revolve`
/// of the pushforward of that scan, and so on: at derivative order `d`
/// the snapshots hold `2^(d−1) × carry` values each, independent of the
/// number of steps, as the gradient's. ∂⃗ of it (an HVP, and ∂⃗ again: a
/// third derivative) runs the same arithmetic as ∂⃗ of the stored form
/// and gives its bits; ∂⃖ of it agrees with the stored form's to rounding.
/// Taylor mode over it, and unrolling, run the stored form it equals (the
/// scan of the carries, then the reversed scan), which for a `Revolve`
/// derived this way is the same function in other arithmetic. A scan with
/// [`Scan::with_snapshots`] emits it in its pullback.
///
/// # Example
///
/// The gradient of `c ← c·p` over 100 steps (`c₁₀₀ = c₀ p¹⁰⁰`) with two
/// snapshots, against the closed form:
///
/// ```
/// use optic_ad::array::prims::Scan;
/// use optic_ad::array::{reverse_joint, ArrayBuilder, Shape};
/// use optic_ad::Builder;
///
/// let mut b = Builder::new();
/// let (c, p) = (b.input(), b.input());
/// let next = b.mul(c, p);
/// let scan = Scan::new(b.finish(&[next]).unwrap(), 100, 1, 0, 1, false)
///     .unwrap()
///     .with_snapshots(Some(2));
/// let mut ab = ArrayBuilder::new();
/// let (c0, p) = (ab.input(Shape::Vector(1)), ab.input(Shape::Vector(1)));
/// let y = ab.scan(scan, &[c0, p]);
/// let y = ab.sum(y);
/// let prog = ab.finish(&[y]).unwrap();
/// let joint = reverse_joint(&prog).unwrap();
/// assert!(joint.to_string().contains("revolve (2 snapshots)"));
/// let out = joint.eval(&[&[1.5], &[1.01], &[1.0]]).unwrap();
/// let want = 1.5 * 100.0 * 1.01_f64.powi(99); // ∂c₁₀₀/∂p
/// assert!((out[2][0] - want).abs() <= 1e-12 * want);
/// ```
#[derive(Clone)]
pub struct Revolve {
    scan: Scan,
    snapshots: usize,
    /// The reversed scan whose steps the schedule runs, where it is not
    /// the scan's own pullback scan (see [`Revolve::tangent_revolve`]):
    /// the same function, laid out as that one.
    reverse: Option<ArrayPrim>,
    /// The instruction this one is [`Revolve::tangent_revolve`] of (a copy
    /// with caches of its own, so that no cycle of references forms): how
    /// it is written and read back, so that a file never gives the steps.
    origin: Option<Box<Revolve>>,
    derived: Arc<RevolveDerived>,
}

#[derive(Default)]
struct RevolveDerived {
    /// The stored form, `(scan operands, ct) ↦ reversed scan` (for Taylor
    /// mode and unrolling).
    expansion: OnceLock<std::result::Result<ArrayProgram, Error>>,
    /// Its Taylor programs, one per degree asked.
    jets: Mutex<Vec<TaylorProgram<ArrayProgram>>>,
    /// The checkpointed pullback of the scan's pushforward scan, with the
    /// same snapshots (see [`Revolve::second_order`]).
    tangent: OnceLock<Option<ArrayPrim>>,
}

impl fmt::Debug for Revolve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Revolve")
            .field("scan", &self.scan)
            .field("snapshots", &self.snapshots)
            .field("reverse", &self.reverse.as_ref().map(|_| "given"))
            .finish()
    }
}

impl Revolve {
    /// The pullback of `scan` with `snapshots` snapshots (at least 1).
    pub fn new(scan: Scan, snapshots: usize) -> Revolve {
        // More snapshots than steps keep nothing more.
        let snapshots = snapshots.clamp(1, scan.steps.max(1));
        Revolve {
            scan,
            snapshots,
            reverse: None,
            origin: None,
            derived: Arc::default(),
        }
    }

    /// The number of operands of the scan.
    fn scan_args(&self) -> usize {
        let (c, x) = self.scan.positions();
        1 + usize::from(c.is_some()) + usize::from(x.is_some())
    }

    /// The stored form as an array program: inputs the scan's operands and
    /// the cotangent, output the reversed scan's value.
    fn expansion(&self) -> Result<&ArrayProgram> {
        self.derived
            .expansion
            .get_or_init(|| {
                let s = &self.scan;
                let mut b = ArrayBuilder::new();
                let mut shapes = vec![Shape::Vector(s.carry)];
                if s.consts > 0 {
                    shapes.push(Shape::Vector(s.consts));
                }
                if s.xs > 0 {
                    shapes.push(Shape::Vector(s.xs * s.steps));
                }
                let args: Vec<AVar> = shapes.iter().map(|&sh| b.input(sh)).collect();
                let ct = b.input(Shape::Vector(s.out_len()));
                let stored = s.clone().with_snapshots(None);
                let t = b.apply_prim(stored.states_scan(), &args);
                let parts: Vec<AVar> = stored
                    .right(&mut b, &args, t, ct)
                    .into_iter()
                    .flatten()
                    .collect();
                let r = b.concat(&parts);
                b.finish(&[r])
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The reversed scan the schedule runs: the scan's pullback scan, or
    /// the one given in its place.
    fn reverse_scan(&self) -> ArrayPrim {
        self.reverse
            .clone()
            .unwrap_or_else(|| self.scan.pullback_scan())
    }

    /// [`Revolve`] of the pushforward scan `∂⃗S` of this one's scan `S`
    /// (carry `(c, ċ)`, constants `(p, ṗ)`, per-step data `(x, ẋ)`), with
    /// the same snapshots; built once. Its reverse steps are the
    /// pushforward of this one's reverse steps (a tangent carried beside
    /// the cotangent), which is the pullback of `∂⃗S`'s step by the
    /// symmetry of the second derivative, laid out as that one: so a
    /// checkpointed HVP runs the same arithmetic as the stored one (which
    /// is ∂⃗ of the stored scans), and gives the same bits.
    fn tangent_revolve(&self) -> Option<ArrayPrim> {
        self.derived
            .tangent
            .get_or_init(|| {
                let s = self.scan.pushforward_scan();
                let s = s.downcast_ref::<Scan>()?;
                let rev = self.reverse_scan();
                let rev = rev.downcast_ref::<Scan>()?;
                let reverse = self.tangent_reverse(rev)?;
                Some(ArrayPrim::new(Revolve {
                    scan: s.clone(),
                    snapshots: self.snapshots,
                    reverse: Some(reverse),
                    origin: Some(Box::new(Revolve {
                        derived: Arc::default(),
                        ..self.clone()
                    })),
                    derived: Arc::default(),
                }))
            })
            .clone()
    }

    /// The reverse steps of [`Revolve::tangent_revolve`]: the pushforward
    /// scan of `rev` (carry `((c̄, p̄), (c̄̇, p̄̇))`, per-step data `((c, x,
    /// ȳ), (ċ, ẋ, ȳ̇))`, constants `(p, ṗ)`, per-step outputs `(x̄, x̄̇)`),
    /// with its inputs and outputs in the layout of the pullback scan of
    /// `∂⃗S`, whose cotangent of `(c, ċ)` is `(c̄̇, c̄)` (and so for `p`,
    /// `x` and `y`).
    fn tangent_reverse(&self, rev: &Scan) -> Option<ArrayPrim> {
        let s = &self.scan;
        let (k, p, x, y) = (s.carry, s.consts, s.xs, s.ys());
        let f = rev.pushforward_scan();
        let body = f.downcast_ref::<Scan>()?.body();
        let mut b = Builder::with_capacity(body.len());
        let mut input = |n: usize| -> Vec<Var> { (0..n).map(|_| b.input()).collect() };
        // The inputs of ∂⃗S's pullback body: (c̄ of (c, ċ), p̄ of (p, ṗ),
        // (c, ċ), (x, ẋ), ȳ of (y, ẏ), (p, ṗ)).
        let (cbar_dot, cbar, pbar_dot, pbar) = (input(k), input(k), input(p), input(p));
        let (c, cdot, xi, xdot) = (input(k), input(k), input(x), input(x));
        let (ybar_dot, ybar, consts, pdot) = (input(y), input(y), input(p), input(p));
        // The inputs of the pushforward of `rev`'s body.
        let fin: Vec<Var> = [
            cbar, pbar, cbar_dot, pbar_dot, c, xi, ybar, cdot, xdot, ybar_dot, consts, pdot,
        ]
        .concat();
        let m = body.inline_into(&mut b, &fin);
        // Its outputs: ((c̄, p̄), (c̄̇, p̄̇), x̄, x̄̇).
        let fo: Vec<Var> = body.outputs().iter().map(|o| m[o.index()]).collect();
        let (kp, dot) = (k + p, 2 * (k + p));
        let outs: Vec<Var> = [
            &fo[kp..kp + k],
            &fo[..k],
            &fo[kp + k..dot],
            &fo[k..kp],
            &fo[dot + x..dot + 2 * x],
            &fo[dot..dot + x],
        ]
        .concat();
        Some(ArrayPrim::new(Scan {
            body: Arc::new(Executable::new(b.finish_unchecked(&outs).dce())),
            steps: s.steps,
            carry: 2 * (k + p),
            xs: 2 * (k + x + y),
            consts: 2 * p,
            reverse: !s.reverse,
            snapshots: s.snapshots,
            derived: Arc::default(),
        }))
    }

    /// The second-order adjoint of the scan `S` with the binomial schedule:
    /// with `J = ∂S(a)`, returns `(J^T u + (∂ₐ(J ȧ))^T v, J^T v)`, each laid
    /// out as this instruction's value `(c̄₀, p̄, x̄s)`, from one
    /// [`Revolve`] of `∂⃗S` at the operands `(a, ȧ)` and the cotangent
    /// `(u, v)` of its value `(S(a), J ȧ)`.
    ///
    /// Both derivatives of `R(a, ct) = J^T ct` are of this form, so they
    /// are checkpointed loops again, in `O(snapshots × 2 carry)` memory:
    /// the pushforward in the direction `(ȧ, ċt)` is `J^T ċt + (∂ₐ(J
    /// ȧ))^T ct` (the first part at `u = ċt`, `v = ct`; the second part is
    /// then `R` itself), and the cotangent of `a` for a cotangent `r̄` of `R`
    /// is `(∂ₐ(J r̄))^T ct` (the first part at `ȧ = r̄`, `u = 0`, `v = ct`),
    /// by the symmetry of the second derivative (A. Griewank and A.
    /// Walther, "Evaluating Derivatives", 2nd ed., ch. 5, second-order
    /// adjoints).
    fn second_order(
        &self,
        b: &mut ArrayBuilder,
        args: &[AVar],
        dots: &[AVar],
        u: AVar,
        v: AVar,
    ) -> Option<(AVar, AVar)> {
        let prim = self.tangent_revolve()?;
        let s = &self.scan;
        let (k, p, x, y, n) = (s.carry, s.consts, s.xs, s.ys(), s.steps);
        let mut rargs = Self::tangent_operands(b, args, dots);
        // The cotangent of ∂⃗S's value (c_N, ċ_N, ys, ẏs).
        let mut ct = vec![b.slice(u, 0, k), b.slice(v, 0, k)];
        if y > 0 {
            ct.push(b.slice(u, k, y * n));
            ct.push(b.slice(v, k, y * n));
        }
        rargs.push(b.concat(&ct));
        let r = b.apply_prim(prim, &rargs);
        // Its value: (c̄₀ of (c, ċ), p̄ of (p, ṗ), x̄s of (x, ẋ)).
        let part = |b: &mut ArrayBuilder, of_dots: usize| {
            let mut parts = vec![b.slice(r, of_dots * k, k)];
            if p > 0 {
                parts.push(b.slice(r, 2 * k + of_dots * p, p));
            }
            if x > 0 {
                parts.push(b.slice(r, 2 * (k + p) + of_dots * x * n, x * n));
            }
            if parts.len() == 1 {
                parts[0]
            } else {
                b.concat(&parts)
            }
        };
        Some((part(b, 0), part(b, 1)))
    }

    /// [`ArrayPrimitive::from_params`] at `depth` tangent forms inside
    /// another. The depth is bounded: each level derives the scans again
    /// (the work grows about fourfold per level), and the crate makes one
    /// level per derivative taken over a checkpointed pullback.
    fn read(params: &[Param], depth: usize) -> Option<Revolve> {
        const MAX_DEPTH: usize = 8;
        match params {
            [Param::Prim(o), Param::Flag(true)] if o.name == "revolve" && depth < MAX_DEPTH => {
                let t = Revolve::read(&o.params, depth + 1)?.tangent_revolve()?;
                t.downcast_ref::<Revolve>().cloned()
            }
            [Param::Prim(scan), Param::Int(snapshots)] if scan.name == "scan" => {
                let scan = Scan::from_params(&scan.params)?;
                let snapshots = usize::try_from(*snapshots).ok()?;
                // As `Revolve::new` makes it: between 1 and the steps.
                if snapshots == 0 || snapshots > scan.steps.max(1) {
                    return None;
                }
                Some(Revolve::new(scan, snapshots))
            }
            _ => None,
        }
    }

    /// The operands of the pushforward scan `∂⃗S`: each of `S`'s operands
    /// followed by its tangent.
    fn tangent_operands(b: &mut ArrayBuilder, args: &[AVar], dots: &[AVar]) -> Vec<AVar> {
        args.iter()
            .zip(dots)
            .map(|(&a, &d)| b.concat(&[a, d]))
            .collect()
    }

    /// The value `(c̄₀, p̄, x̄s)` split into the scan's operands' shapes.
    fn split_operands(&self, b: &mut ArrayBuilder, r: AVar) -> Vec<AVar> {
        self.scan
            .operand_cotangents(b, r)
            .into_iter()
            .flatten()
            .collect()
    }
}

/// One action of the binomial schedule ([`binomial_schedule`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    /// Load snapshot `from` (the carry at step `at`) into the work carry
    /// and run `count` forward steps.
    Advance {
        from: usize,
        at: usize,
        count: usize,
    },
    /// Keep the work carry as the newest snapshot.
    Push,
    /// Drop the newest snapshot.
    Pop,
    /// Run reverse step `at` on the work carry (the carry at step `at`).
    Reverse { at: usize },
}

/// `β(c, r) = (c + r)! / (c! r!)`, saturating.
fn beta(c: usize, r: usize) -> usize {
    let mut b: u128 = 1;
    for j in 1..=r as u128 {
        b = b * (c as u128 + j) / j;
        if b > usize::MAX as u128 {
            return usize::MAX;
        }
    }
    b as usize
}

/// The binomial schedule reversing `steps` steps with at most `snapshots`
/// carries kept besides the first (snapshot 0): each reversal of `l`
/// steps from snapshot `start` with `s` free snapshots advances to the
/// split `m = max(1, β(s + 1, r − 2), l − β(s, r))`, keeps that carry,
/// reverses the `l − m` steps after it with `s − 1` free snapshots, drops
/// it and reverses the first `m` with `s` (`r` the least with
/// `β(s + 1, r) ≥ l`; with no free snapshot, each step is recomputed from
/// `start`). The split is the lower end of the range of optimal ones
/// (checked against the exhaustive minimum in `tests/loops.rs`).
fn binomial_schedule(steps: usize, snapshots: usize, act: impl FnMut(Action)) {
    // The pending tasks, kept per thread between runs, so that a
    // checkpointed pullback allocates nothing in steady state.
    thread_local! {
        static TASKS: RefCell<Vec<Task>> = const { RefCell::new(Vec::new()) };
    }
    TASKS.with(|t| match t.try_borrow_mut() {
        Ok(mut tasks) => schedule_with(&mut tasks, steps, snapshots, act),
        // A body whose user rule runs a checkpointed loop itself.
        Err(_) => schedule_with(&mut Vec::new(), steps, snapshots, act),
    });
}

/// A task of [`binomial_schedule`]: reverse the `l` steps from `a`, whose
/// first carry is snapshot `start`, with `s` free snapshots; or drop the
/// last snapshot.
enum Task {
    Reverse {
        a: usize,
        l: usize,
        s: usize,
        start: usize,
    },
    Pop,
}

/// [`binomial_schedule`] with the stack of pending tasks given.
fn schedule_with(
    tasks: &mut Vec<Task>,
    steps: usize,
    snapshots: usize,
    mut act: impl FnMut(Action),
) {
    tasks.clear();
    tasks.push(Task::Reverse {
        a: 0,
        l: steps,
        s: snapshots,
        start: 0,
    });
    let mut depth = 1;
    while let Some(task) = tasks.pop() {
        let (a, l, s, start) = match task {
            Task::Pop => {
                act(Action::Pop);
                depth -= 1;
                continue;
            }
            Task::Reverse { a, l, s, start } => (a, l, s, start),
        };
        if l <= 1 || s == 0 {
            for i in (a..a + l).rev() {
                act(Action::Advance {
                    from: start,
                    at: a,
                    count: i - a,
                });
                act(Action::Reverse { at: i });
            }
            continue;
        }
        let c = s + 1;
        let mut r = 0;
        while beta(c, r) < l {
            r += 1;
        }
        let low = if r >= 2 { beta(c, r - 2) } else { 0 };
        let m = low.max(l.saturating_sub(beta(c - 1, r))).clamp(1, l - 1);
        act(Action::Advance {
            from: start,
            at: a,
            count: m,
        });
        act(Action::Push);
        tasks.push(Task::Reverse { a, l: m, s, start });
        tasks.push(Task::Pop);
        tasks.push(Task::Reverse {
            a: a + m,
            l: l - m,
            s: s - 1,
            start: depth,
        });
        depth += 1;
    }
}

/// The forward steps the binomial schedule recomputes to reverse `steps`
/// steps with `snapshots` snapshots (besides the first carry); the reverse
/// steps themselves are not counted. For tests and for choosing the
/// number of snapshots.
#[doc(hidden)]
pub fn binomial_forward_steps(steps: usize, snapshots: usize) -> usize {
    let mut n = 0;
    binomial_schedule(steps, snapshots.max(1), |a| {
        if let Action::Advance { count, .. } = a {
            n += count;
        }
    });
    n
}

impl ArrayPrimitive for Revolve {
    fn name(&self) -> &'static str {
        "revolve"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let m = self.scan_args();
        crate::error::check_len("revolve: operands", m + 1, args.len())?;
        self.scan.shape(&args[..m])?;
        if args[m] != Shape::Vector(self.scan.out_len()) {
            return Err(Error::ShapeMismatch {
                what: "revolve: cotangent of the scan's value",
                expected: Shape::Vector(self.scan.out_len()),
                got: args[m],
            });
        }
        let s = &self.scan;
        // The scan's shape rule has checked that xs · steps fits.
        s.xs.checked_mul(s.steps)
            .and_then(|n| n.checked_add(s.carry + s.consts))
            .map(Shape::Vector)
            .ok_or(Error::AllocationFailed {
                what: "revolve: cotangents",
                elements: usize::MAX,
            })
    }

    fn key(&self, words: &mut Vec<u64>) {
        self.scan.key(words);
        words.push(self.snapshots as u64);
        if let Some(r) = self.reverse.as_ref().and_then(|r| r.downcast_ref::<Scan>()) {
            r.key(words);
        }
    }

    /// The scan and the snapshots; for the tangent form (the checkpointed
    /// pullback of the pushforward scan, built for second derivatives),
    /// the instruction it is the tangent of and a flag, so that it is
    /// rebuilt by the same construction, never from steps a file gives.
    fn params(&self) -> Vec<Param> {
        let data = |p: &dyn ArrayPrimitive| PrimData {
            name: p.name().to_owned(),
            params: p.params(),
        };
        match &self.origin {
            Some(o) => vec![Param::Prim(data(&**o)), Param::Flag(true)],
            None => vec![
                Param::Prim(data(&self.scan)),
                Param::Int(self.snapshots as u64),
            ],
        }
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        Revolve::read(params, 0)
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        format!(
            "revolve ({} snapshots) {} steps of {}",
            self.snapshots,
            self.scan.steps,
            args.join(", ")
        )
    }

    fn eval(
        &self,
        args: &[&[f64]],
        _: &[Shape],
        out: &mut [f64],
        _: Shape,
        scratch: &mut Vec<f64>,
    ) {
        let s = &self.scan;
        let (k, x, p, y, n) = (s.carry, s.xs, s.consts, s.ys(), s.steps);
        let (c, xp) = s.positions();
        let m = self.scan_args();
        let init = args.first().copied().unwrap_or(&[]);
        let consts = c.and_then(|c| args.get(c)).copied().unwrap_or(&[]);
        let data = xp.and_then(|x| args.get(x)).copied().unwrap_or(&[]);
        let ct = args.get(m).copied().unwrap_or(&[]);
        let rev = self.reverse_scan();
        let Some(rev) = rev.downcast_ref::<Scan>() else {
            out.fill(f64::NAN);
            return;
        };
        // Buffers: the snapshots, the work carry, the forward body's input
        // and output, the reverse body's input and output.
        let (nf_in, nf_out) = (k + x + p, k + y);
        let (nr_in, nr_out) = (k + p + k + x + y + p, k + p + x);
        scratch.clear();
        // A count past memory (a program read from a file may hold one)
        // fails as the body's errors do: NaN.
        let len = (self.snapshots.saturating_add(1))
            .checked_mul(k)
            .and_then(|s| s.checked_add(k + nf_in + nf_out + nr_in + nr_out));
        let grown = len.map(|len| crate::error::grow_to("revolve: snapshots", scratch, len, 0.0));
        if !matches!(grown, Some(Ok(()))) {
            out.fill(f64::NAN);
            return;
        }
        let (snaps, rest) = scratch.split_at_mut((self.snapshots + 1) * k);
        let (work, rest) = rest.split_at_mut(k);
        let (f_in, rest) = rest.split_at_mut(nf_in);
        let (f_out, rest) = rest.split_at_mut(nf_out);
        let (r_in, r_out) = rest.split_at_mut(nr_in);
        snaps[..k].copy_from_slice(init);
        f_in[k + x..].copy_from_slice(consts);
        // The reverse carry (c̄, p̄) starts at (c̄_N, 0); its constants are p.
        r_in[..k].copy_from_slice(&ct[..k]);
        r_in[nr_in - p..].copy_from_slice(consts);
        let mut top = 1;
        let mut ok = true;
        with_registers(|regs| {
            binomial_schedule(n, self.snapshots, |a| {
                if !ok {
                    return;
                }
                match a {
                    Action::Advance { from, at, count } => {
                        work.copy_from_slice(&snaps[from * k..(from + 1) * k]);
                        for step in at..at + count {
                            let i = s.index(step);
                            f_in[..k].copy_from_slice(work);
                            for j in 0..x {
                                f_in[k + j] = data[j * n + i];
                            }
                            ok &= s.body.eval_f64(regs, f_in, f_out).is_ok();
                            work.copy_from_slice(&f_out[..k]);
                        }
                    }
                    Action::Push => {
                        snaps[top * k..(top + 1) * k].copy_from_slice(work);
                        top += 1;
                    }
                    Action::Pop => top -= 1,
                    Action::Reverse { at } => {
                        let i = s.index(at);
                        // Per-step data of the reverse body: (carry, xᵢ, ȳᵢ).
                        let d = k + p;
                        r_in[d..d + k].copy_from_slice(work);
                        for j in 0..x {
                            r_in[d + k + j] = data[j * n + i];
                        }
                        for j in 0..y {
                            r_in[d + k + x + j] = ct[k + j * n + i];
                        }
                        ok &= rev.body.eval_f64(regs, r_in, r_out).is_ok();
                        r_in[..k + p].copy_from_slice(&r_out[..k + p]);
                        for j in 0..x {
                            out[k + p + j * n + i] = r_out[k + p + j];
                        }
                    }
                }
            });
        });
        if ok {
            out[..k + p].copy_from_slice(&r_in[..k + p]);
        } else {
            out.fill(f64::NAN);
        }
    }

    /// The cotangents of the scan's operands `a` and of its cotangent
    /// `ct` for a cotangent `r̄` of the value `R = J^T ct`: `(∂ₐ(J r̄))^T
    /// ct` from a checkpointed loop (a second-order adjoint, see the
    /// type's documentation) and `J r̄` from the pushforward scan (which
    /// keeps nothing).
    fn pullback(&self, b: &mut ArrayBuilder, args: &[AVar], rbar: AVar) -> Vec<Option<AVar>> {
        let m = self.scan_args();
        let s = &self.scan;
        let (k, y, n) = (s.carry, s.ys(), s.steps);
        let dots = self.split_operands(b, rbar);
        let zero = b.zero(Shape::Vector(s.out_len()));
        let Some((abar, _)) = self.second_order(b, &args[..m], &dots, zero, args[m]) else {
            b.poison(Error::Unsupported("revolve: a scan without a pushforward"));
            return vec![None; args.len()];
        };
        let mut cts: Vec<Option<AVar>> =
            self.split_operands(b, abar).into_iter().map(Some).collect();
        // The same operands as the checkpointed loop's (the builder shares
        // the concatenations): (c_N, ċ_N, ys, ẏs) with (ċ_N, ẏs) = J r̄.
        let fargs = Self::tangent_operands(b, &args[..m], &dots);
        let f = b.apply_prim(s.pushforward_scan(), &fargs);
        let jr = if y > 0 {
            let (c, ys) = (b.slice(f, k, k), b.slice(f, 2 * k + y * n, y * n));
            b.concat(&[c, ys])
        } else {
            b.slice(f, k, k)
        };
        cts.push(Some(jr));
        cts
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        args: &[AVar],
        tangents: &[Option<AVar>],
        out: Shape,
    ) -> Option<AVar> {
        self.jvp(b, args, tangents, out).map(|(_, t)| t)
    }

    /// The value `J^T ct` and its tangent `J^T ċt + (∂ₐ(J ȧ))^T ct` from
    /// one checkpointed loop (a second-order adjoint, see the type's
    /// documentation).
    fn jvp(
        &self,
        b: &mut ArrayBuilder,
        args: &[AVar],
        tangents: &[Option<AVar>],
        _: Shape,
    ) -> Option<(AVar, AVar)> {
        if tangents.iter().all(Option::is_none) {
            return None;
        }
        let m = self.scan_args();
        let dots: Vec<AVar> = args
            .iter()
            .zip(tangents)
            .map(|(&a, t)| t.unwrap_or_else(|| b.zero(b.shape(a))))
            .collect();
        match self.second_order(b, &args[..m], &dots[..m], dots[m], args[m]) {
            Some((tangent, value)) => Some((value, tangent)),
            None => {
                b.poison(Error::Unsupported("revolve: a scan without a pushforward"));
                None
            }
        }
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Nonlinear
    }

    fn jet(
        &self,
        args: &[&[f64]],
        _: &[Shape],
        degree: usize,
        out: &mut [f64],
        _: Shape,
    ) -> Result<()> {
        let mut cache = self
            .derived
            .jets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = match cache.iter().position(|t| t.degree() == degree) {
            Some(at) => at,
            None => {
                cache.push(TaylorProgram::new(self.expansion()?, degree)?);
                cache.len() - 1
            }
        };
        let t = &mut cache[at];
        t.eval(args)?;
        out.copy_from_slice(t.output(0));
        Ok(())
    }

    fn unroll(&self, b: &mut Builder, args: &[&[Var]], _: &[Shape], _: Shape) -> Vec<Var> {
        match self.expansion().and_then(ArrayProgram::unroll) {
            Ok(p) => {
                let m = p.inline_into(b, &args.concat());
                p.outputs().iter().map(|o| m[o.index()]).collect()
            }
            Err(_) => Vec::new(),
        }
    }
}

/// The number of comparisons that do not come out as recorded: for
/// operands `a` and `b` of `m · n` values each (block `j` at
/// `j·n .. (j+1)·n`, one block per entry of `orderings`, `m ≥ 1`), the
/// count of `i` where `a[i]` is not `orderings[j]` to `b[i]`, a scalar.
///
/// It is computed in arithmetic, from `g = (1 − sgn((b − a) + 0))/2` (1
/// where `a > b`, else 0) and `l`, the same with `a` and `b` swapped:
/// a mismatch is `1 − g` for `>`, `1 − l` for `<` and `g + l` for `=`, so
/// the scalar program of [`ArrayPrimitive::unroll`] is the same function.
/// It agrees with `partial_cmp` wherever `a − b` is a number; a NaN
/// operand, or two equal infinities, make the count NaN.
///
/// [`crate::while_loop`] records one on the comparisons its condition
/// (and body) made at each step, kept by its loop as per-step outputs,
/// and a guard that the count is 0: at another point the program holds
/// only where every step's comparisons come out as at the trace point,
/// so a trip count that changes fails the guard ([`Error::GuardFailed`]),
/// never giving a silently wrong derivative. The count is piecewise
/// constant: every derivative of it is zero.
///
/// # Example
///
/// ```
/// use std::cmp::Ordering;
/// use optic_ad::array::prims::Mismatches;
/// use optic_ad::array::{ArrayBuilder, Shape};
///
/// let mut b = ArrayBuilder::new();
/// let (x, y) = (b.input(Shape::Vector(3)), b.input(Shape::Vector(3)));
/// let m = b.apply(Mismatches::new(vec![Ordering::Greater]), &[x, y]);
/// let p = b.finish(&[m]).unwrap();
/// // 2 > 1 and 5 > 0 as recorded, 1 > 3 not:
/// assert_eq!(p.eval(&[&[2.0, 1.0, 5.0], &[1.0, 3.0, 0.0]]).unwrap()[0], vec![1.0]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatches {
    orderings: Arc<[std::cmp::Ordering]>,
}

/// `1` where `a > b`, `0` where `a ≤ b`, in arithmetic (`+ 0` turns a
/// `−0` difference of two zeros into `+0`, whose sign is `+1`).
fn greater(a: f64, b: f64) -> f64 {
    (1.0 - ((b - a) + 0.0).signum()) * 0.5
}

/// One comparison's mismatch, `0` or `1` (NaN where `a − b` is NaN).
fn mismatch(a: f64, b: f64, o: std::cmp::Ordering) -> f64 {
    match o {
        std::cmp::Ordering::Greater => 1.0 - greater(a, b),
        std::cmp::Ordering::Less => 1.0 - greater(b, a),
        std::cmp::Ordering::Equal => greater(a, b) + greater(b, a),
    }
}

impl Mismatches {
    /// The count against these recorded orderings, one per block of the
    /// operands.
    pub fn new(orderings: Vec<std::cmp::Ordering>) -> Mismatches {
        Mismatches {
            orderings: orderings.into(),
        }
    }

    /// Whether `a` is to `b` as recorded, in the same arithmetic (false
    /// for a NaN difference).
    pub(crate) fn holds(a: f64, b: f64, o: std::cmp::Ordering) -> bool {
        mismatch(a, b, o) == 0.0
    }

    fn count(&self, a: &[f64], b: &[f64]) -> f64 {
        let m = self.orderings.len().max(1);
        let n = a.len() / m;
        let mut total = 0.0;
        for (j, &o) in self.orderings.iter().enumerate() {
            let block = j * n..(j + 1) * n;
            for (&x, &y) in a[block.clone()].iter().zip(&b[block]) {
                total += mismatch(x, y, o);
            }
        }
        total
    }
}

impl ArrayPrimitive for Mismatches {
    fn name(&self) -> &'static str {
        "mismatches"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let &[a, b] = args else {
            return Err(Error::LengthMismatch {
                what: "mismatches: operands",
                expected: 2,
                got: args.len(),
            });
        };
        crate::error::check_len("mismatches: a vs b", a.len(), b.len())?;
        let m = self.orderings.len();
        if m == 0 || a.len() % m != 0 {
            return Err(Error::LengthMismatch {
                what: "mismatches: values (a multiple of the orderings, at least one)",
                expected: m.max(1) * (a.len() / m.max(1)).max(1),
                got: a.len(),
            });
        }
        Ok(Shape::Scalar)
    }

    fn key(&self, words: &mut Vec<u64>) {
        words.push(self.orderings.len() as u64);
        words.extend(self.orderings.iter().map(|&o| (o as i8 + 1) as u64));
    }

    fn params(&self) -> Vec<Param> {
        vec![Param::Ints(
            self.orderings
                .iter()
                .map(|&o| (o as i8 + 1) as u64)
                .collect(),
        )]
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        let mut r = ParamReader::new(params);
        let orderings = r
            .ints()?
            .iter()
            .map(|&o| match o {
                0 => Some(std::cmp::Ordering::Less),
                1 => Some(std::cmp::Ordering::Equal),
                2 => Some(std::cmp::Ordering::Greater),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        r.finish()?;
        Some(Mismatches::new(orderings))
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        let ords: Vec<&str> = self
            .orderings
            .iter()
            .map(|o| match o {
                std::cmp::Ordering::Less => "<",
                std::cmp::Ordering::Equal => "=",
                std::cmp::Ordering::Greater => ">",
            })
            .collect();
        format!("mismatches[{}] {}", ords.join(" "), args.join(", "))
    }

    fn eval(&self, args: &[&[f64]], _: &[Shape], out: &mut [f64], _: Shape, _: &mut Vec<f64>) {
        if let ([a, b], [o]) = (args, out) {
            *o = self.count(a, b);
        }
    }

    fn pullback(&self, _: &mut ArrayBuilder, args: &[AVar], _: AVar) -> Vec<Option<AVar>> {
        vec![None; args.len()]
    }

    fn pushforward(
        &self,
        _: &mut ArrayBuilder,
        _: &[AVar],
        _: &[Option<AVar>],
        _: Shape,
    ) -> Option<AVar> {
        None
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Nonlinear
    }

    /// The count on the constant terms; the higher coefficients are zero.
    fn jet(
        &self,
        args: &[&[f64]],
        shapes: &[Shape],
        _: usize,
        out: &mut [f64],
        _: Shape,
    ) -> Result<()> {
        let n = shapes.first().map_or(0, |s| s.len());
        out.fill(0.0);
        if let ([a, b], Some(o)) = (args, out.first_mut()) {
            *o = self.count(&a[..n], &b[..n]);
        }
        Ok(())
    }

    fn unroll(&self, b: &mut Builder, args: &[&[Var]], _: &[Shape], _: Shape) -> Vec<Var> {
        let [a, c] = args else {
            return vec![b.constant(f64::NAN)];
        };
        let m = self.orderings.len().max(1);
        let n = a.len() / m;
        let (zero, one, half) = (b.constant(0.0), b.constant(1.0), b.constant(0.5));
        let greater = |b: &mut Builder, x: Var, y: Var| {
            let d = b.sub(y, x);
            let d = b.add(d, zero);
            let s = b.apply(crate::rules::Prim::Signum, 0, &[d]);
            let t = b.sub(one, s);
            b.mul(t, half)
        };
        let mut total = zero;
        for (j, &o) in self.orderings.iter().enumerate() {
            for i in j * n..(j + 1) * n {
                let m = match o {
                    std::cmp::Ordering::Greater => {
                        let g = greater(b, a[i], c[i]);
                        b.sub(one, g)
                    }
                    std::cmp::Ordering::Less => {
                        let l = greater(b, c[i], a[i]);
                        b.sub(one, l)
                    }
                    std::cmp::Ordering::Equal => {
                        let g = greater(b, a[i], c[i]);
                        let l = greater(b, c[i], a[i]);
                        b.add(g, l)
                    }
                };
                total = b.add(total, m);
            }
        }
        vec![total]
    }
}

impl ArrayBuilder {
    /// The value of [`Scan`] `scan` on the initial carry, the constants
    /// (if it has any) and the per-step data (if it has any).
    pub fn scan(&mut self, scan: Scan, args: &[AVar]) -> AVar {
        self.apply(scan, args)
    }
}

/// `t / (1 + t²)`: smooth, bounded by 1/2, and of relative condition at
/// most 1 everywhere.
fn squash(b: &mut Builder, t: Var) -> Var {
    let sq = b.mul(t, t);
    let one = b.constant(1.0);
    let d = b.add(one, sq);
    b.div(t, d)
}

/// The scalar body of the table's examples: carry `(c₀, c₁)`, per-step
/// `x`, constant `p`, with `s(t) = t/(1 + t²)`: `c₀′ = c₀/2 + s(x) c₁/2 +
/// s(p)`, `c₁′ = c₁/2 + s(c₀)`, per-step output `c₀ s(c₁)`. Every
/// derivative up to the third is exercised, and no step multiplies two
/// magnitudes or takes a sine of one: random compositions of the table
/// reach values far from 1, where either would turn a rounding difference
/// upstream into a different value.
fn example_body() -> Program {
    let mut b = Builder::new();
    let (c0, c1, x, p) = (b.input(), b.input(), b.input(), b.input());
    let sx = squash(&mut b, x);
    let xc = b.mul(sx, c1);
    let a = b.add(c0, xc);
    let h = b.scale(0.5, a);
    let sp = squash(&mut b, p);
    let c0n = b.add(h, sp);
    let h1 = b.scale(0.5, c1);
    let s0 = squash(&mut b, c0);
    let c1n = b.add(h1, s0);
    let s1 = squash(&mut b, c1);
    let yv = b.mul(c0, s1);
    b.finish_unchecked(&[c0n, c1n, yv])
}

/// A fold body of one carry and no data: `c′ = c/2 + s(c)`.
fn example_fold_body() -> Program {
    let mut b = Builder::new();
    let c = b.input();
    let s = squash(&mut b, c);
    let h = b.scale(0.5, c);
    let y = b.add(h, s);
    b.finish_unchecked(&[y])
}

pub(super) fn examples(n: usize, all: &mut Vec<(ArrayPrim, Vec<Shape>)>) {
    for reverse in [false, true] {
        if let Ok(s) = Scan::new(example_body(), n, 2, 1, 1, reverse) {
            all.push((
                ArrayPrim::new(s),
                vec![Shape::Vector(2), Shape::Vector(1), Shape::Vector(n)],
            ));
        }
    }
    if let Ok(s) = Scan::new(example_fold_body(), n + 1, 1, 0, 0, false) {
        all.push((ArrayPrim::new(s), vec![Shape::Vector(1)]));
    }
    // The count of a while loop's per-step comparisons.
    all.push((
        ArrayPrim::new(Mismatches::new(vec![
            std::cmp::Ordering::Greater,
            std::cmp::Ordering::Less,
            std::cmp::Ordering::Equal,
        ])),
        vec![Shape::Vector(3 * n), Shape::Vector(3 * n)],
    ));
    // The checkpointed pullback, and a scan whose pullback checkpoints.
    for reverse in [false, true] {
        if let Ok(s) = Scan::new(example_body(), n + 2, 2, 1, 1, reverse) {
            let shapes = vec![
                Shape::Vector(2),
                Shape::Vector(1),
                Shape::Vector(n + 2),
                Shape::Vector(2 + n + 2),
            ];
            all.push((ArrayPrim::new(Revolve::new(s.clone(), 1)), shapes));
            all.push((
                ArrayPrim::new(s.with_snapshots(Some(1))),
                vec![Shape::Vector(2), Shape::Vector(1), Shape::Vector(n + 2)],
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The jets of `scan` at `degree` on coefficient-major operand jets,
    /// and whether a derivative program ran in place of the recurrences.
    fn jets(scan: &Scan, args: &[Vec<f64>], shapes: &[Shape], degree: usize) -> (Vec<f64>, bool) {
        let args: Vec<&[f64]> = args.iter().map(Vec::as_slice).collect();
        let shape = scan.shape(shapes).unwrap();
        let mut out = vec![0.0; (degree + 1) * shape.len()];
        scan.jet(&args, shapes, degree, &mut out, shape).unwrap();
        let native = with_jets(scan, degree, |j| {
            j.native.as_ref().is_some_and(Option::is_some)
        });
        (out, native)
    }

    /// `f` of the scan's jets at `degree`, or `false` before any.
    fn with_jets(scan: &Scan, degree: usize, f: impl FnOnce(&mut BodyJets) -> bool) -> bool {
        let mut cache = scan.derived.jets.lock().unwrap();
        let jets = cache
            .by_degree
            .iter_mut()
            .find(|j| j.program.degree() == degree);
        jets.is_some_and(f)
    }

    /// Sets the body's derivative program that the next jets at the same
    /// degree run in place of the recurrences (`None`: the recurrences),
    /// whatever the build's backend (without `jit` it runs as register
    /// code).
    fn set_program(scan: &Scan, degree: usize) -> bool {
        let body = scan.body();
        let program = derivative_program(body, degree, &vec![degree; body.n_inputs()], usize::MAX);
        let found = program.is_some();
        with_jets(scan, degree, |j| {
            j.native = Some(program.map(Executable::new));
            true
        });
        found
    }

    fn set_recurrences(scan: &Scan, degree: usize) {
        with_jets(scan, degree, |j| {
            j.native = Some(None);
            true
        });
    }

    /// The largest difference of `a` from `b`, relative to `max(|b|, 1)`.
    fn max_rel(a: &[f64], b: &[f64]) -> f64 {
        a.iter()
            .zip(b)
            .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
            .fold(0.0, f64::max)
    }

    /// Coefficient-major jets of `len` values at `degree`, from `seed`.
    fn jet(len: usize, degree: usize, seed: f64, scale: f64) -> Vec<f64> {
        (0..(degree + 1) * len)
            .map(|i| scale * (0.37 * i as f64 + seed).sin())
            .collect()
    }

    /// Jets through a scan (carry, per-step data, a constant, a per-step
    /// output; forward and reversed) from the body's derivative program
    /// against the same from its recurrences: the two differ in rounding
    /// only. A short loop runs the recurrences unless given the program.
    #[test]
    fn scan_jets_from_the_derivative_program_agree_with_the_recurrences() {
        let n = 9;
        let shapes = [Shape::Vector(2), Shape::Vector(1), Shape::Vector(n)];
        for reverse in [false, true] {
            for degree in [1, 2, 4, 8] {
                let scan = Scan::new(example_body(), n, 2, 1, 1, reverse).unwrap();
                let args = [
                    jet(2, degree, 0.1, 1.0),
                    jet(1, degree, 0.2, 1.0),
                    jet(n, degree, 0.3, 1.0),
                ];
                let (recurrences, native) = jets(&scan, &args, &shapes, degree);
                assert!(!native, "{n} steps: no program yet");
                assert!(set_program(&scan, degree));
                let (program, native) = jets(&scan, &args, &shapes, degree);
                assert!(native, "degree {degree}: no derivative program");
                assert_ne!(program, recurrences, "the same route twice");
                let e = max_rel(&program, &recurrences);
                assert!(e <= 1e-13, "degree {degree}, reverse {reverse}: {e:e}");
            }
        }
    }

    /// A loop of [`NATIVE_JET_STEPS`] steps decides on its first jets:
    /// the derivative program where the build compiles it natively. One
    /// step fewer decides on the second, the steps of both counted, also
    /// across a change of degree.
    #[test]
    fn a_long_loop_compiles_its_jets_where_the_build_can() {
        let n = NATIVE_JET_STEPS;
        let scan = Scan::new(example_fold_body(), n, 1, 0, 0, false).unwrap();
        let (_, native) = jets(&scan, &[jet(1, 4, 0.5, 1.0)], &[Shape::Vector(1)], 4);
        assert_eq!(native, crate::backend::NATIVE);
        let scan = Scan::new(example_fold_body(), n - 1, 1, 0, 0, false).unwrap();
        let (_, native) = jets(&scan, &[jet(1, 4, 0.5, 1.0)], &[Shape::Vector(1)], 4);
        assert!(!native);
        let (_, native) = jets(&scan, &[jet(1, 3, 0.5, 1.0)], &[Shape::Vector(1)], 3);
        assert_eq!(native, crate::backend::NATIVE);
    }

    /// Jets of two degrees taken in turn keep a program each: going back
    /// to a degree finds its Taylor program, and its compiled derivative
    /// program where the build has one, and gives the same jets.
    #[test]
    fn jets_of_two_degrees_in_turn_keep_their_programs() {
        let scan = Scan::new(example_fold_body(), NATIVE_JET_STEPS, 1, 0, 0, false).unwrap();
        let shapes = [Shape::Vector(1)];
        let (four, _) = jets(&scan, &[jet(1, 4, 0.5, 1.0)], &shapes, 4);
        let (three, _) = jets(&scan, &[jet(1, 3, 0.5, 1.0)], &shapes, 3);
        let decided = |j: &mut BodyJets| j.native.is_some() == crate::backend::NATIVE;
        assert!(with_jets(&scan, 4, decided), "degree 4 kept");
        assert!(with_jets(&scan, 3, decided), "degree 3 kept");
        assert_eq!(scan.derived.jets.lock().unwrap().by_degree.len(), 2);
        assert_eq!(jets(&scan, &[jet(1, 4, 0.5, 1.0)], &shapes, 4).0, four);
        assert_eq!(jets(&scan, &[jet(1, 3, 0.5, 1.0)], &shapes, 3).0, three);
        assert_eq!(scan.derived.jets.lock().unwrap().by_degree.len(), 2);
    }

    /// `c ← 2c` from coefficients `10³⁰⁰` for 26 steps at degree 4: the
    /// coefficients end at `2²⁶·10³⁰⁰ ≈ 6.7·10³⁰⁷`, finite, while the
    /// derivatives `d!·c_d` of degrees 3 and 4 overflow some steps
    /// earlier. The program runs until then, the recurrences after: the
    /// result is the coefficients', not `∞`. From coefficients whose
    /// derivatives already overflow, the recurrences run from the start.
    #[test]
    fn carries_beyond_the_derivatives_range_go_on_by_the_recurrences() {
        let mut b = Builder::new();
        let c = b.input();
        let two = b.scale(2.0, c);
        let body = b.finish(&[two]).unwrap();
        let shapes = [Shape::Vector(1)];
        for (n, c0) in [(26, 1e300), (3, 1e307)] {
            let scan = Scan::new(body.clone(), n, 1, 0, 0, false).unwrap();
            let init = vec![c0; 5];
            jets(&scan, std::slice::from_ref(&init), &shapes, 4);
            assert!(set_program(&scan, 4));
            let (out, _) = jets(&scan, &[init], &shapes, 4);
            let want = c0 * 2f64.powi(n as i32);
            assert!(want.is_finite());
            for (d, v) in out.iter().enumerate() {
                assert!(
                    (v - want).abs() <= 1e-15 * want,
                    "n = {n}, coefficient {d}: {v:e} vs {want:e}"
                );
            }
        }
    }

    /// Predator–prey by explicit Euler, `x ← x + h(αx − βxy)`, `y ← y +
    /// h(δxy − γy)`, 10⁴ steps at degree 4: the carry's jet goes through
    /// the derivative program 10⁴ times, and stays within 10⁻¹³ of the
    /// recurrences' (6·10⁻¹⁴ when written). Carried as coefficients, each
    /// step rounding them through `k!` and `1/k!`, the difference grew
    /// with the steps, to 4.4·10⁻¹³ here.
    #[test]
    fn long_loops_keep_the_derivatives_accurate() {
        let mut b = Builder::new();
        let (x, y) = (b.input(), b.input());
        let (al, be, ga, de) = (b.input(), b.input(), b.input(), b.input());
        let h = 1e-3;
        let xy = b.mul(x, y);
        let ax = b.mul(al, x);
        let bxy = b.mul(be, xy);
        let dx = b.sub(ax, bxy);
        let dxh = b.scale(h, dx);
        let xn = b.add(x, dxh);
        let dxy = b.mul(de, xy);
        let gy = b.mul(ga, y);
        let dy = b.sub(dxy, gy);
        let dyh = b.scale(h, dy);
        let yn = b.add(y, dyh);
        let body = b.finish(&[xn, yn]).unwrap();
        let n = 10_000;
        let degree = 4;
        let w = degree + 1;
        // Coefficient-major: the carry (1, 0.5) and the constants along
        // a line of slope 0.1 in every one.
        let mut init = vec![0.0; 2 * w];
        init[..2].copy_from_slice(&[1.0, 0.5]);
        init[2..4].copy_from_slice(&[0.1, 0.1]);
        let mut consts = vec![0.0; 4 * w];
        consts[..4].copy_from_slice(&[1.1, 0.4, 0.4, 0.1]);
        consts[4..8].copy_from_slice(&[0.1; 4]);
        let shapes = [Shape::Vector(2), Shape::Vector(4)];
        let args = [init, consts];
        let scan = Scan::new(body, n, 2, 0, 4, false).unwrap();
        let run = |program: bool| {
            jets(&scan, &args, &shapes, degree);
            if program {
                assert!(set_program(&scan, degree));
            } else {
                set_recurrences(&scan, degree);
            }
            jets(&scan, &args, &shapes, degree).0
        };
        let (program, recurrences) = (run(true), run(false));
        let e = max_rel(&program, &recurrences);
        assert!(e <= 1e-13, "{e:e}: {program:?} vs {recurrences:?}");
    }

    /// A step whose derivatives from the program are not finite (finite
    /// inputs) takes the recurrences': a stand-in program that returns NaN
    /// for `c ← 2c + 1` leaves the loop's jets those of the recurrences,
    /// bit for bit.
    #[test]
    fn scan_jets_fall_back_to_the_recurrences_where_the_program_is_not_finite() {
        let mut b = Builder::new();
        let c = b.input();
        let two = b.scale(2.0, c);
        let one = b.constant(1.0);
        let next = b.add(two, one);
        let scan = Scan::new(b.finish(&[next]).unwrap(), 5, 1, 0, 0, false).unwrap();
        let mut b = Builder::new();
        let (_, _) = (b.input(), b.input());
        let nan = b.constant(f64::NAN);
        let stand_in = b.finish(&[nan, nan]).unwrap();
        let init = vec![0.25, 1.0];
        let shapes = [Shape::Vector(1)];
        let (recurrences, _) = jets(&scan, std::slice::from_ref(&init), &shapes, 1);
        with_jets(&scan, 1, |j| {
            j.native = Some(Some(Executable::new(stand_in)));
            true
        });
        let (out, native) = jets(&scan, &[init], &shapes, 1);
        assert!(native);
        assert_eq!(out, recurrences);
        assert_eq!(out, [0.25 * 32.0 + 31.0, 32.0]);
    }

    /// `(c, u) ← (e^{−c²}, e^{−u²} + c′)` for one step from `c = ∞ + t`,
    /// `u = ½ + t`: the step's inputs are not finite (and the derivative
    /// program's `(−∞)·0` would give NaN), so the step takes the
    /// recurrences', which are finite (`e^{−c²}` vanishes near `c = ∞`):
    /// `c = 0` and `u` the coefficients of `e^{−(½ + t)²}`, `e^{−u²}·(1,
    /// −2u, 4u² − 2, −8u³ + 12u)/k!` at `u = ½`.
    #[test]
    fn scan_jets_fall_back_to_the_recurrences_where_not_finite() {
        let c0 = f64::INFINITY;
        let mut b = Builder::new();
        let (c, u) = (b.input(), b.input());
        let gauss = |b: &mut Builder, t: Var| {
            let sq = b.mul(t, t);
            let m = b.neg(sq);
            b.exp(m)
        };
        let cn = gauss(&mut b, c);
        let gu = gauss(&mut b, u);
        let un = b.add(gu, cn);
        let body = b.finish(&[cn, un]).unwrap();
        let scan = Scan::new(body.clone(), 1, 2, 0, 0, false).unwrap();
        // Coefficient-major: (c₀, u₀), (c₁, u₁), …
        let init = vec![c0, 0.5, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0];
        let shapes = [Shape::Vector(2)];
        jets(&scan, std::slice::from_ref(&init), &shapes, 3);
        assert!(set_program(&scan, 3));
        let (out, native) = jets(&scan, &[init], &shapes, 3);
        assert!(native);
        // The program alone is not finite at c = c₀, u = ½ along t.
        let program = derivative_program(&body, 3, &[3, 3], usize::MAX).unwrap();
        let direct = program
            .eval(&[c0, 1.0, 0.0, 0.0, 0.5, 1.0, 0.0, 0.0])
            .unwrap();
        assert!(direct.iter().any(|v| !v.is_finite()), "{direct:?}");
        let (u, e) = (0.5f64, (-0.25f64).exp());
        let want_u = [
            e,
            -2.0 * u * e,
            (4.0 * u * u - 2.0) * e / 2.0,
            (-8.0 * u * u * u + 12.0 * u) * e / 6.0,
        ];
        for k in 0..4 {
            assert_eq!(out[2 * k], 0.0, "c coefficient {k}: {out:?}");
            let got = out[2 * k + 1];
            assert!(
                (got - want_u[k]).abs() <= 1e-15 * want_u[k].abs(),
                "u coefficient {k}: {got} vs {}",
                want_u[k]
            );
        }
    }
}
