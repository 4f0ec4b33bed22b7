//! Loops: [`Scan`], a primitive that carries a body program and runs it a
//! given number of times, threading a carry and reading one element of
//! per-step data each time. A fold is a scan without per-step data or
//! outputs.
//!
//! The rules are those of J. Bradbury et al.'s `jax.lax.scan` and of the
//! fold derivatives in A. Shaikhha, A. Fitzgibbon, D. Vytiniotis and S.
//! Peyton Jones, "Efficient differentiable programming in a functional
//! array-processing language" (ICFP 2019), §5: each derivative of a scan
//! is a scan again, so the optic functors apply to it as often as the
//! order requires.
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

use crate::array::ir::{AVar, ArrayBuilder, ArrayPrim, ArrayPrimitive, Shape, TaylorRule};
use crate::backend::{Executable, Registers};
use crate::error::{Error, Result};
use crate::functor::{forward, reverse_joint, TaylorProgram};
use crate::program::{Builder, Program, Var};

thread_local! {
    /// The registers a scan's body runs in (a body is scalar code and
    /// never runs a scan itself, so one set per thread serves all).
    static REGS: RefCell<Registers> = RefCell::new(Registers::new());
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
/// Taylor rule carries jets through the body's Taylor program.
#[derive(Clone)]
pub struct Scan {
    body: Arc<Executable>,
    steps: usize,
    carry: usize,
    xs: usize,
    consts: usize,
    reverse: bool,
    derived: Arc<Derived>,
}

/// The scans derived from one, built once (so that repeated derivations
/// share their bodies and the builder's sharing merges them).
#[derive(Default)]
struct Derived {
    states: OnceLock<ArrayPrim>,
    pullback: OnceLock<ArrayPrim>,
    pushforward: OnceLock<ArrayPrim>,
    /// The body's Taylor program and its jet buffers, for the last degree
    /// asked (so that Taylor mode through the loop allocates nothing in
    /// steady state).
    jets: Mutex<Option<BodyJets>>,
}

struct BodyJets {
    program: TaylorProgram,
    input: Vec<f64>,
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
        crate::error::check_len("scan: body inputs", carry + xs + consts, body.n_inputs())?;
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
        Ok(Scan {
            body: Arc::new(Executable::new(body)),
            steps,
            carry,
            xs,
            consts,
            reverse,
            derived: Arc::default(),
        })
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
        self.carry + self.ys() * self.steps
    }

    /// Step `s` reads element `i` of the per-step data.
    fn index(&self, s: usize) -> usize {
        if self.reverse {
            self.steps - 1 - s
        } else {
            s
        }
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
        want(args[0], self.carry, "scan: initial carry")?;
        if let Some(c) = c {
            want(args[c], self.consts, "scan: constants")?;
        }
        if let Some(x) = x {
            want(args[x], self.xs * self.steps, "scan: per-step data")?;
        }
        Ok(Shape::Vector(self.out_len()))
    }

    fn key(&self, words: &mut Vec<u64>) {
        words.extend([
            Arc::as_ptr(&self.body) as usize as u64,
            self.steps as u64,
            self.carry as u64,
            self.xs as u64,
            self.consts as u64,
            u64::from(self.reverse),
        ]);
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
        let ok = REGS.with(|r| {
            let mut regs = r.borrow_mut();
            for s in 0..n {
                let i = self.index(s);
                for j in 0..x {
                    input[k + j] = data[j * n + i];
                }
                if self.body.eval_f64(&mut regs, input, output).is_err() {
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
        let t = b.apply_prim(self.states_scan(), args);
        self.right(b, args, t, ct)
    }

    /// The value and the carries as residual, from one run of the loop.
    fn left(&self, b: &mut ArrayBuilder, args: &[AVar]) -> Option<(AVar, AVar)> {
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
        let (k, x, p, y, n) = (self.carry, self.xs, self.consts, self.ys(), self.steps);
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
        let mut contribs = vec![Some(b.slice(r, 0, k))];
        if c.is_some() {
            contribs.push(Some(b.slice(r, k, p)));
        }
        if xp.is_some() {
            contribs.push(Some(b.slice(r, k + p, x * n)));
        }
        contribs
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

    /// Jets through the body's Taylor program, step by step: the carry's
    /// jet is threaded, each step reads its data's jets.
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
        if cache.as_ref().is_none_or(|c| c.program.degree() != degree) {
            *cache = Some(BodyJets {
                program: TaylorProgram::new(self.body.program(), degree)?,
                input: vec![0.0; (k + x + p) * w],
                output: vec![0.0; (k + y) * w],
            });
        }
        let Some(BodyJets {
            program: t,
            input,
            output,
        }) = cache.as_mut()
        else {
            return Err(Error::WorkspaceMismatch);
        };
        // Input-major jets of the body: (carry, xᵢ, p).
        for d in 0..w {
            for j in 0..k {
                input[j * w + d] = init[d * k + j];
            }
            for j in 0..p {
                input[(k + x + j) * w + d] = consts[d * p + j];
            }
        }
        let len = self.out_len();
        for s in 0..n {
            let i = self.index(s);
            for j in 0..x {
                for d in 0..w {
                    input[(k + j) * w + d] = data[d * x * n + j * n + i];
                }
            }
            t.eval(input, output)?;
            input[..k * w].copy_from_slice(&output[..k * w]);
            for j in 0..y {
                for d in 0..w {
                    out[d * len + k + j * n + i] = output[(k + j) * w + d];
                }
            }
        }
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
}
