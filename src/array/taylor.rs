//! Taylor mode on array programs: jets of degree `K` pushed through an
//! [`ArrayProgram`], each array value carrying its `K + 1` Taylor
//! coefficients as `K + 1` arrays.
//!
//! The rules follow from the structure of each instruction (Griewank &
//! Walther, *Evaluating Derivatives*, 2nd ed., §13.2, for the products and
//! the elementary functions):
//!
//! * an operation of the table says which rule it follows
//!   ([`super::TaylorRule`]): a **linear** one `y = L a` (sum, broadcast,
//!   slice, pad, gather, scatter-add, the products with constant matrices,
//!   reshape, transpose, the axis sums and broadcasts) maps coefficient
//!   `k` to coefficient `k`, `yₖ = L aₖ`; a **bilinear** one (the matrix
//!   product of two traced factors) is a Cauchy product,
//!   `Cₖ = Σᵢ₌₀ᵏ op(Aᵢ) op(Bₖ₋ᵢ)`; a selection (the maximum) is linear in
//!   the values it selects, with the selection made on the constant terms;
//! * a **map** whose body is smooth (no non-smooth primitive, user rule
//!   or guard) and whose degree is at most 8 runs the program of its
//!   body's Taylor coefficients (∂⃗ applied `K` times along the operands'
//!   jets; `functor::jet_program`) as a map over the operands' coefficient
//!   arrays, which the executor runs as any map (block by block, as
//!   native code with the feature `jit`); at the elements where that
//!   program's coefficients are not finite (a derivative that does not
//!   exist in the ordinary sense, a non-finite operand), and for every
//!   other map, the scalar Taylor functor of its body
//!   ([`crate::functor::TaylorProgram`]) runs element by element, so every
//!   primitive of the table and every user rule keeps its own `O(K²)`
//!   recurrence;
//! * a **loop** ([`super::prims::Scan`]) threads the carry's jet through
//!   its body step by step: by the body's recurrences, or, with the
//!   feature `jit` and once the loop has run 2¹³ steps, by the native code
//!   of the body's derivative program (the same construction, in
//!   derivatives `j! cⱼ` so that the carried values are not rounded
//!   through `j!` at each step), the recurrences still taking any step
//!   whose values are not finite;
//! * constants and fills have only a constant term, and a guard is checked
//!   on the constant terms.
//!
//! Coefficients that are zero by structure (those above the degree an
//! instruction can reach from the inputs: a constant has degree 0, a
//! product of degrees `p` and `q` degree `p + q`) are never computed.

use std::sync::Arc;

use super::exec::{check_guards, prim_value, ArrayWorkspace};
use super::ir::{AVar, ArrayBuilder, ArrayOp, ArrayProgram, Shape, TaylorRule, MAX_ARRAY_ARITY};
use crate::error::{Error, Result};
use crate::functor::jet_program::jet_program;
use crate::functor::taylor::ScalarJets;
use crate::functor::TaylorProgram;
use crate::program::Program;

/// How an instruction's jet is computed, beyond what its [`ArrayOp`] says.
#[derive(Clone, Debug)]
enum Jet {
    /// A map: the scalar Taylor program of its body, and where the body's
    /// coefficients are an ordinary program, that program as a map.
    Map(Box<ScalarJets>, Option<Box<MapJets>>),
    /// Every other instruction: by its operation alone.
    Plain,
}

/// The most inputs (operands × coefficients) of a [`MapJets`] program:
/// they are passed to the executor from the stack.
const MAX_MAP_JET_INPUTS: usize = 32;

/// A map's jets as an array program: one map of the body's coefficient
/// program ([`jet_program`]) over the operands' coefficient arrays, and
/// the workspace it runs in.
#[derive(Clone, Debug)]
struct MapJets {
    program: ArrayProgram,
    ws: ArrayWorkspace,
    /// Per input of `program`: the operand and its coefficient.
    inputs: Vec<(AVar, usize)>,
}

impl MapJets {
    /// The map of `body`'s coefficient program of degree `degree` over the
    /// coefficients `0 … tops[k]` of each operand `args[k]` (shapes as in
    /// `p`); outputs: coefficients `0 … degree` of each body output, output
    /// after output. `None` where the body has no such program.
    fn new(
        p: &ArrayProgram,
        body: &Program,
        args: &[AVar],
        tops: &[usize],
        degree: usize,
    ) -> Option<MapJets> {
        let width = tops.iter().map(|t| t + 1).sum::<usize>();
        if width > MAX_MAP_JET_INPUTS {
            return None;
        }
        // At most twice the instructions the recurrences run, about
        // (K + 1)² per instruction of the body.
        let bound = 2 * (degree + 1) * (degree + 1) * body.len() + 64;
        let jets = jet_program(body, degree, tops, bound)?;
        let mut b = ArrayBuilder::new();
        let mut inputs = Vec::with_capacity(width);
        let mut vars = Vec::with_capacity(width);
        for (&a, &t) in args.iter().zip(tops) {
            for c in 0..=t {
                vars.push(b.input(p.shapes[a.index()]));
                inputs.push((a, c));
            }
        }
        let outs = b.map(Arc::new(jets), &vars);
        let program = b.finish(&outs).ok()?;
        let mut ws = ArrayWorkspace::new(&program);
        // One run here, on zeros, so that the workspace's buffers (and with
        // the feature `jit` the native kernel) are made when the Taylor
        // program is, not at its first evaluation.
        let zeros: Vec<Vec<f64>> = program
            .input_shapes
            .iter()
            .map(|s| vec![0.0; s.len()])
            .collect();
        let zeros: Vec<&[f64]> = zeros.iter().map(Vec::as_slice).collect();
        ws.run(&program, &zeros).ok()?;
        Some(MapJets {
            program,
            ws,
            inputs,
        })
    }
}

/// The array form of a [`TaylorProgram`]: the program, its degree, the
/// jets of every instruction and the buffers they are computed in.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct ArrayJets {
    program: ArrayProgram,
    degree: usize,
    /// The inputs' coefficients above this one are taken as zero (planned
    /// for lines, `1`, by [`LineJets`]; `degree` otherwise).
    input_top: usize,
    /// The jets of every instruction, coefficient-major.
    vals: Vec<Vec<f64>>,
    /// The highest coefficient of each instruction that can be nonzero.
    top: Vec<usize>,
    /// Per instruction: how its jet is computed.
    jets: Vec<Jet>,
    /// Per map: `(k, j)` for each output `k` of its body kept by the
    /// program, `j` the instruction holding it (`k = 0`: the map itself).
    map_outputs: Vec<Vec<(usize, usize)>>,
    body_in: Vec<f64>,
    body_out: Vec<f64>,
    /// Product terms of the Cauchy products, and the matrix kernel's
    /// scratch.
    term: Vec<f64>,
    matmul_scratch: Vec<f64>,
}

impl ArrayJets {
    /// The array Taylor program of `p` at degree `degree`; all buffers
    /// are allocated here.
    pub(crate) fn new(p: &ArrayProgram, degree: usize) -> Result<Self> {
        Self::with_input_top(p, degree, degree)
    }

    /// [`ArrayJets::new`] for inputs whose coefficients above `input_top`
    /// are zero (`1` for the lines `x + t v` of [`LineJets`]): those are
    /// never read, and the instructions that depend on the inputs only
    /// linearly keep that degree.
    fn with_input_top(p: &ArrayProgram, degree: usize, input_top: usize) -> Result<Self> {
        if let Some(e) = &p.defect {
            return Err(e.clone());
        }
        let w = degree + 1;
        let n = p.ops.len();
        let mut top = vec![0; n];
        let mut jets = vec![Jet::Plain; n];
        let mut map_outputs = vec![Vec::new(); n];
        let (mut body_in, mut body_out, mut term) = (0, 0, 0);
        for (i, op) in p.ops.iter().enumerate() {
            let deg = |a: &AVar| top[a.index()];
            top[i] = match op {
                ArrayOp::Input(_) => input_top.min(degree),
                ArrayOp::Fill(_) | ArrayOp::Const(_) => 0,
                ArrayOp::Map { body, args } => {
                    let tops: Vec<usize> = args.iter().map(deg).collect();
                    let compiled = if tops.iter().any(|&t| t > 0) {
                        MapJets::new(p, body, args, &tops, degree).map(Box::new)
                    } else {
                        None
                    };
                    jets[i] = Jet::Map(Box::new(ScalarJets::new(body, degree)?), compiled);
                    map_outputs[i].push((0, i));
                    body_in = body_in.max(args.len() * w);
                    body_out = body_out.max(body.outputs.len() * w);
                    if args.iter().any(|a| deg(a) > 0) {
                        degree
                    } else {
                        0
                    }
                }
                &ArrayOp::MapOut(k) => {
                    let m = i - k as usize;
                    map_outputs[m].push((k as usize, i));
                    top[m]
                }
                ArrayOp::Prim { prim, args } => match prim.taylor() {
                    TaylorRule::Linear => args.iter().map(deg).max().unwrap_or(0),
                    TaylorRule::LinearInLast => args.last().map_or(0, deg),
                    TaylorRule::Bilinear => {
                        term = term.max(p.shapes[i].len());
                        args.iter().map(deg).sum::<usize>().min(degree)
                    }
                    // Any coefficient may be nonzero, even of constant
                    // operands (a loop's higher coefficients are those of
                    // its operands', but its constant term is not linear).
                    TaylorRule::Nonlinear => {
                        if args.iter().any(|a| deg(a) > 0) {
                            degree
                        } else {
                            0
                        }
                    }
                },
            };
        }
        let vals = p
            .shapes
            .iter()
            .map(|s| {
                let len = w.checked_mul(s.len()).ok_or(Error::AllocationFailed {
                    what: "array Taylor program: jet",
                    elements: usize::MAX,
                })?;
                crate::error::try_filled("array Taylor program: jet", len, 0.0)
            })
            .collect::<Result<Vec<Vec<f64>>>>()?;
        Ok(ArrayJets {
            vals,
            program: p.clone(),
            degree,
            input_top: input_top.min(degree),
            top,
            jets,
            map_outputs,
            body_in: vec![0.0; body_in],
            body_out: vec![0.0; body_out],
            term: vec![0.0; term],
            matmul_scratch: Vec::new(),
        })
    }

    pub(crate) fn degree(&self) -> usize {
        self.degree
    }

    /// See [`TaylorProgram::compiled_maps`].
    fn compiled_maps(&self) -> (usize, usize) {
        self.jets.iter().fold((0, 0), |(c, m), j| match j {
            Jet::Map(_, compiled) => (c + usize::from(compiled.is_some()), m + 1),
            Jet::Plain => (c, m),
        })
    }

    pub(crate) fn program(&self) -> &ArrayProgram {
        &self.program
    }

    /// The array `TaylorProgram::eval`.
    pub(crate) fn eval(&mut self, inputs: &[&[f64]]) -> Result<()> {
        let w = self.degree + 1;
        let p = &self.program;
        crate::error::check_len(
            "array Taylor program: inputs",
            p.input_shapes.len(),
            inputs.len(),
        )?;
        for (x, s) in inputs.iter().zip(&p.input_shapes) {
            crate::error::check_len(
                "array Taylor program: input jet, (K + 1)·len",
                w * s.len(),
                x.len(),
            )?;
        }
        // Planned for lines and given a curve: planned again for it (the
        // Taylor program of a `Directional`, evaluated on its own).
        let above_top = |x: &&[f64], s: &Shape| {
            x[(self.input_top + 1) * s.len()..]
                .iter()
                .any(|&c| c != 0.0)
        };
        if self.input_top < self.degree
            && inputs
                .iter()
                .zip(&p.input_shapes)
                .any(|(x, s)| above_top(x, s))
        {
            *self = ArrayJets::new(&self.program, self.degree)?;
        }
        self.run(inputs)
    }

    /// Runs the instructions on input jets already checked, whose
    /// coefficients above the planned top are zero.
    fn run(&mut self, inputs: &[&[f64]]) -> Result<()> {
        for i in 0..self.program.ops.len() {
            self.step(i, inputs)?;
        }
        check_guards(&self.program, |v| &self.vals[v.index()])
    }

    pub(crate) fn output(&self, k: usize) -> &[f64] {
        self.program
            .outputs
            .get(k)
            .map_or(&[], |v| &self.vals[v.index()])
    }

    /// Runs instruction `i`.
    fn step(&mut self, i: usize, inputs: &[&[f64]]) -> Result<()> {
        let ArrayJets {
            program: p,
            degree,
            vals,
            top,
            jets,
            map_outputs,
            body_in,
            body_out,
            term,
            matmul_scratch,
            input_top: _,
        } = self;
        let w = *degree + 1;
        let len = |v: AVar| p.shapes[v.index()].len();
        let (done, rest) = vals.split_at_mut(i);
        if rest.is_empty() {
            return Ok(());
        }
        let n = p.shapes[i].len();
        // Coefficient `k` of operand `a`.
        let coef = |a: AVar, k: usize| -> &[f64] {
            let l = len(a);
            &done[a.index()][k * l..(k + 1) * l]
        };
        match (&p.ops[i], &mut jets[i]) {
            // Coefficients above the inputs' top are zero, and stay so.
            (ArrayOp::Input(k), _) => {
                let m = (top[i] + 1) * n;
                rest[0][..m].copy_from_slice(&inputs[*k as usize][..m]);
            }
            (ArrayOp::Fill(c), _) => rest[0][..n].fill(*c),
            (ArrayOp::Const(d), _) => rest[0][..n].copy_from_slice(d),
            (ArrayOp::MapOut(_), _) => {}
            (ArrayOp::Map { args, .. }, Jet::Map(body, compiled)) => {
                let kept = top[i] + 1;
                let (n_in, n_out) = (args.len() * w, body.program().outputs.len() * w);
                let (body_in, body_out) = (&mut body_in[..n_in], &mut body_out[..n_out]);
                let outs = &map_outputs[i];
                // Element `e` by the recurrences of the body's Taylor program.
                let mut by_recurrences = |e: usize, rest: &mut [Vec<f64>]| -> Result<()> {
                    for (jet, &a) in body_in.chunks_exact_mut(w).zip(args) {
                        let (l, src) = (len(a), &done[a.index()]);
                        let at = if p.shapes[a.index()] == Shape::Scalar {
                            0
                        } else {
                            e
                        };
                        for (k, c) in jet.iter_mut().enumerate() {
                            *c = src[k * l + at];
                        }
                    }
                    body.eval(body_in, body_out)?;
                    for &(k, j) in outs {
                        let jet = &body_out[k * w..k * w + kept];
                        for (c, &v) in jet.iter().enumerate() {
                            rest[j - i][c * n + e] = v;
                        }
                    }
                    Ok(())
                };
                let Some(mj) = compiled else {
                    for e in 0..n {
                        by_recurrences(e, rest)?;
                    }
                    return Ok(());
                };
                // The coefficient program as a map over the operands'
                // coefficient arrays, read in place.
                let mut ins: [&[f64]; MAX_MAP_JET_INPUTS] = [&[]; MAX_MAP_JET_INPUTS];
                for (slot, &(a, c)) in ins.iter_mut().zip(&mj.inputs) {
                    *slot = coef(a, c);
                }
                let m = mj.inputs.len().min(MAX_MAP_JET_INPUTS);
                mj.ws.run(&mj.program, &ins[..m])?;
                for &(k, j) in outs {
                    for c in 0..kept {
                        let src = mj.ws.output(&mj.program, k * w + c);
                        let dst = &mut rest[j - i][c * n..(c + 1) * n];
                        match *src {
                            [v] if n != 1 => dst.fill(v),
                            _ if src.len() == n => dst.copy_from_slice(src),
                            _ => return Err(Error::WorkspaceMismatch),
                        }
                    }
                }
                // Where a coefficient is not finite (no ordinary
                // derivative there, or a non-finite operand), the
                // recurrences decide, as for maps without a program.
                let finite = |rest: &[Vec<f64>]| {
                    outs.iter()
                        .all(|&(_, j)| rest[j - i][..kept * n].iter().all(|v| v.is_finite()))
                };
                if !finite(rest) {
                    for e in 0..n {
                        let at_e = outs
                            .iter()
                            .all(|&(_, j)| (0..kept).all(|c| rest[j - i][c * n + e].is_finite()));
                        if !at_e {
                            by_recurrences(e, rest)?;
                        }
                    }
                }
            }
            (ArrayOp::Map { .. }, _) => return Err(Error::WorkspaceMismatch),
            (ArrayOp::Prim { prim, args }, _) => {
                let out = &mut rest[0];
                let shape = p.shapes[i];
                match (prim.taylor(), args.as_slice()) {
                    // Coefficient k of the value is the operation on
                    // coefficient k of the operands.
                    (TaylorRule::Linear, _) => {
                        for k in 0..=top[i] {
                            let dst = &mut out[k * n..(k + 1) * n];
                            prim_value(
                                p,
                                prim,
                                args,
                                |_, a| coef(a, k),
                                shape,
                                matmul_scratch,
                                dst,
                            );
                        }
                    }
                    // Cₖ = Σⱼ Aⱼ ⊙ Bₖ₋ⱼ, terms of structurally zero
                    // coefficients left out.
                    (TaylorRule::Bilinear, &[a, b]) => {
                        // `a` may be `b` (A·A): operands are read by position.
                        let (ta, tb) = (top[a.index()], top[b.index()]);
                        for k in 0..=top[i] {
                            let dst = &mut out[k * n..(k + 1) * n];
                            dst.fill(0.0);
                            for j in k.saturating_sub(tb)..=k.min(ta) {
                                let t = &mut term[..n];
                                let pair =
                                    |pos: usize, v: AVar| coef(v, if pos == 0 { j } else { k - j });
                                prim_value(p, prim, args, pair, shape, matmul_scratch, t);
                                for (o, &x) in dst.iter_mut().zip(t.iter()) {
                                    *o += x;
                                }
                            }
                        }
                    }
                    // Linear in the last operand, the others at their
                    // constant terms.
                    (TaylorRule::LinearInLast, _) => {
                        let last = args.len().saturating_sub(1);
                        for k in 0..=top[i] {
                            let dst = &mut out[k * n..(k + 1) * n];
                            let at = |pos: usize, a: AVar| coef(a, if pos == last { k } else { 0 });
                            prim_value(p, prim, args, at, shape, matmul_scratch, dst);
                        }
                    }
                    // The operation's own rule, on whole jets (zeros above
                    // each operand's top coefficient).
                    (TaylorRule::Nonlinear, _) => {
                        let mut jets: [&[f64]; MAX_ARRAY_ARITY] = [&[]; MAX_ARRAY_ARITY];
                        let mut shapes = [Shape::Scalar; MAX_ARRAY_ARITY];
                        for (k, &a) in args.iter().enumerate().take(MAX_ARRAY_ARITY) {
                            jets[k] = &done[a.index()];
                            shapes[k] = p.shapes[a.index()];
                        }
                        let m = args.len().min(MAX_ARRAY_ARITY);
                        prim.jet(&jets[..m], &shapes[..m], *degree, out, shape)?;
                    }
                    // A bilinear operation has two operands.
                    (TaylorRule::Bilinear, _) => return Err(Error::WorkspaceMismatch),
                }
            }
        }
        Ok(())
    }
}

/// `(K + 1)·len` values: the jet `[x, v, 0, …, 0]` of the line
/// `x(t) = x + t v`, coefficient-major.
fn line_jet(x: &[f64], v: &[f64], degree: usize, jet: &mut Vec<f64>) {
    let n = x.len();
    // Coefficients 2 … K are zero and never written: set once.
    if jet.len() != (degree + 1) * n {
        jet.clear();
        jet.resize((degree + 1) * n, 0.0);
    }
    jet[..n].copy_from_slice(x);
    if degree >= 1 {
        jet[n..2 * n].copy_from_slice(v);
    }
}

impl TaylorProgram<ArrayProgram> {
    /// Propagates jets: `inputs` holds one jet per program input, each
    /// `(K + 1)·len` values, coefficient-major. Read the results with
    /// [`TaylorProgram::output`]. No allocation (the buffers, compiled
    /// maps' included, are made by [`TaylorProgram::new`]; a map body run
    /// by its recurrences makes its scalar jets at its first evaluation).
    /// Maps of at least 2¹⁶ elements (2¹⁸ with the feature `jit`) whose
    /// jets are compiled run on rayon's pool, as
    /// [`ArrayWorkspace::run`](crate::array::ArrayWorkspace::run) says:
    /// called from outside the pool, rayon's queue allocates a block every
    /// 63 hand-offs.
    ///
    /// A Taylor program made for lines (that of a [`crate::Directional`],
    /// whose inputs' coefficients above the first are zero) plans itself
    /// again, once, when given a jet with such a coefficient.
    ///
    /// Values follow IEEE 754: a NaN or ∞ coefficient propagates into every
    /// coefficient that depends on it. Coefficients that are zero by
    /// structure (above the degree an instruction can reach from the
    /// inputs: coefficient 1 of a constant) are exact zeros and are never
    /// multiplied, so the product of `x` and a constant `c` has coefficient
    /// 1 equal to `x₁ c` even where `x₀ = ∞` (no `∞ · 0 = NaN` term), as
    /// the structural zeros of derived programs.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] unless there is one jet per input, of
    /// `(K + 1)·len` values; [`Error::GuardFailed`] where a recorded
    /// comparison (in the program or in a map body, for some element) does
    /// not hold for the constant terms. After an error the outputs hold no
    /// result.
    pub fn eval(&mut self, inputs: &[&[f64]]) -> Result<()> {
        self.jets.eval(inputs)
    }

    /// The jet of output `k` after the array `eval` (above): `(K + 1)·len`
    /// values, coefficient-major (empty past the last output).
    pub fn output(&self, k: usize) -> &[f64] {
        self.jets.output(k)
    }

    /// `(compiled, maps)`: how many of the program's maps run their jets
    /// as a program of the body's Taylor coefficients (∂⃗ applied `K` times,
    /// run by the executor as a map, natively with the feature `jit`),
    /// and how many maps it has. The others, and the elements where that
    /// program's coefficients are not finite, run the body's recurrences
    /// element by element. A map's jets are compiled where its body has
    /// only smooth primitives (no `abs`, `max`, `min`, `clamp`, `select`,
    /// `signum`, `floor`, `ceil`, `rem`), no user rule and no guard, the
    /// degree is at most 8, the operands hold at most 32 coefficient
    /// arrays together (operands × coefficients), and the coefficient
    /// program has at most `2 (K + 1)² · len + 64` instructions for a body
    /// of `len` (powers `xʸ` and `atan2` of two full jets pass it only at
    /// low degrees).
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::array::{self, Array};
    /// use optic_ad::functor::TaylorProgram;
    /// use optic_ad::Real;
    ///
    /// let x = [0.3, -0.2];
    /// let p = array::trace(|x: &[_]| Ok(x[0].map(|t| t.sin() * t.exp()).sum()), &[&x]).unwrap();
    /// assert_eq!(TaylorProgram::new(&p, 4).unwrap().compiled_maps(), (1, 1));
    /// let q = array::trace(|x: &[_]| Ok(x[0].map(|t| t.abs()).sum()), &[&x]).unwrap();
    /// assert_eq!(TaylorProgram::new(&q, 4).unwrap().compiled_maps(), (0, 1));
    /// ```
    pub fn compiled_maps(&self) -> (usize, usize) {
        self.jets.compiled_maps()
    }
}

/// Directional derivatives `dᵏ/dtᵏ f(x + t v)` at `t = 0`, `k = 0 … K`, of
/// `f : ℝⁿ → ℝ` as an array program in Taylor mode: the array form of
/// [`crate::Directional`], which re-traces where a guard fails.
#[derive(Clone, Debug)]
pub(crate) struct LineJets {
    taylor: TaylorProgram<ArrayProgram>,
    jet: Vec<f64>,
    n: usize,
}

impl LineJets {
    /// The Taylor program of degree `order` of a traced program of one
    /// input of `n` entries and one scalar output.
    pub(crate) fn from_program(p: &ArrayProgram, n: usize, order: usize) -> Result<Self> {
        crate::functor::taylor::check_taylor_order(order)?;
        let taylor = TaylorProgram {
            jets: ArrayJets::with_input_top(p, order, 1)?,
        };
        // Its capacity, so that `eval` never grows it.
        let mut jet = Vec::new();
        let len = (order + 1).saturating_mul(n);
        jet.try_reserve_exact(len)
            .map_err(|_| Error::AllocationFailed {
                what: "Directional: jet",
                elements: len,
            })?;
        Ok(LineJets { taylor, jet, n })
    }

    /// The order `K`.
    pub(crate) fn order(&self) -> usize {
        self.taylor.degree()
    }

    /// `out[k] = dᵏ/dtᵏ f(x + t v)` at `t = 0`, `k = 0 … K`; errors as
    /// [`crate::Directional::eval`] (`out` untouched).
    pub(crate) fn eval(&mut self, x: &[f64], v: &[f64], out: &mut [f64]) -> Result<()> {
        crate::error::check_len("Directional::eval: x", self.n, x.len())?;
        crate::error::check_len("Directional::eval: v", self.n, v.len())?;
        crate::error::check_len("Directional::eval: out, K + 1", self.order() + 1, out.len())?;
        line_jet(x, v, self.order(), &mut self.jet);
        // A line by construction: nothing above coefficient 1 to look at.
        self.taylor.jets.run(&[&self.jet])?;
        out.copy_from_slice(self.taylor.output(0));
        crate::functor::taylor::scale_by_factorials(out);
        Ok(())
    }

    /// The Taylor program.
    pub(crate) fn program(&self) -> &TaylorProgram<ArrayProgram> {
        &self.taylor
    }
}
