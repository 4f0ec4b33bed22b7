//! Building a `map`, the primitive that carries a scalar body program,
//! and the operations on whole programs that go through the builder
//! (inlining, composition, partial evaluation).

use std::sync::Arc;

use super::ir::{AVar, ArrayBuilder, ArrayOp, ArrayProgram, Shape};
use super::prims::Broadcast;
use crate::error::{check_len, Error, Result};
use crate::program::ir::Instr;
use crate::program::{Builder, Op, Program, Var};

/// A scalar program with `n` inputs and one output, `prim` of them.
fn prim_body(prim: crate::Prim, n: usize) -> Program {
    let mut b = Builder::new();
    let x: Vec<Var> = (0..n).map(|_| b.input()).collect();
    let y = b.apply(prim, 0, &x);
    b.finish_unchecked(&[y])
}

thread_local! {
    static ADD_BODY: Arc<Program> = Arc::new(prim_body(crate::Prim::Add, 2));
}

/// The shared body `(a, b) ↦ a + b`.
pub(crate) fn add_body() -> Arc<Program> {
    ADD_BODY.with(Arc::clone)
}

impl ArrayBuilder {
    /// Elementwise `body` (a scalar program with one input per argument)
    /// over `args`; returns one value per body output. Scalar arguments are
    /// broadcast; vector arguments must share one length.
    pub fn map(&mut self, body: Arc<Program>, args: &[AVar]) -> Vec<AVar> {
        let n_out = body.n_outputs();
        if body.n_inputs() != args.len() {
            self.poison(Error::LengthMismatch {
                what: "map: body inputs vs arguments",
                expected: body.n_inputs(),
                got: args.len(),
            });
            let z = self.zero(Shape::Scalar);
            return vec![z; n_out];
        }
        // The shape of the result.
        let mut shape = Shape::Scalar;
        for &a in args {
            let s = self.shape(a);
            match (shape, s) {
                (_, Shape::Scalar) => {}
                (Shape::Scalar, v) => shape = v,
                (v, w) if v == w => {}
                (v, w) => {
                    self.poison(Error::ShapeMismatch {
                        what: "map: arguments",
                        expected: v,
                        got: w,
                    });
                    let z = self.zero(v);
                    return vec![z; n_out];
                }
            }
        }
        // Plan each body input: a constant, the same as an earlier
        // argument, or a new argument of the map.
        enum Plan {
            Const(f64),
            Arg(usize),
        }
        let mut new_args: Vec<AVar> = Vec::with_capacity(args.len());
        let mut plans = Vec::with_capacity(args.len());
        for &a in args {
            let mut a = a;
            if let Some((_, &[s])) = self.op(a).and_then(ArrayOp::prim::<Broadcast>) {
                a = s;
            }
            if let Some(c) = self.fill_of(a) {
                plans.push(Plan::Const(c));
            } else if let Some(j) = new_args.iter().position(|&x| x == a) {
                plans.push(Plan::Arg(j));
            } else {
                plans.push(Plan::Arg(new_args.len()));
                new_args.push(a);
            }
        }
        let changed = new_args.len() != args.len()
            || plans.iter().any(|p| matches!(p, Plan::Const(_)))
            || new_args.iter().zip(args).any(|(a, b)| a != b);
        let body = if changed {
            let mut sb = Builder::with_capacity(body.len() + args.len());
            let ins: Vec<Var> = (0..new_args.len()).map(|_| sb.input()).collect();
            let inputs: Vec<Var> = plans
                .iter()
                .map(|p| match *p {
                    Plan::Const(c) => sb.constant(c),
                    Plan::Arg(j) => ins[j],
                })
                .collect();
            // Constants fold into the body; without them the body is
            // copied, not simplified again (which could change its bits).
            let m = if plans.iter().any(|p| matches!(p, Plan::Const(_))) {
                body.inline_into(&mut sb, &inputs)
            } else {
                body.copy_into(&mut sb, &inputs)
            };
            let outs: Vec<Var> = body.outputs().iter().map(|o| m[o.index()]).collect();
            Arc::new(sb.finish_unchecked(&outs).dce())
        } else {
            body
        };
        // Drop arguments the body no longer reads.
        let (body, new_args) = drop_unused_inputs(body, new_args);
        // Outputs that are constants or arguments need no map.
        let mut result = vec![AVar(0); n_out];
        let mut real: Vec<usize> = Vec::new();
        // (Not where the body has guards: they must still be checked.)
        let guarded = !body.guards().is_empty();
        for (k, o) in body.outputs().iter().enumerate() {
            match body.op(o.index()) {
                _ if guarded => real.push(k),
                Some(Op::Const(c)) => result[k] = self.fill(c, shape),
                Some(Op::Input(j)) => {
                    let a = new_args[j as usize];
                    result[k] = if self.shape(a) == shape {
                        a
                    } else {
                        self.broadcast(a, shape)
                    };
                }
                _ => real.push(k),
            }
        }
        // An output equal to an earlier one is computed and stored once.
        let mut same_as: Vec<(usize, usize)> = Vec::new();
        let mut kept: Vec<usize> = Vec::with_capacity(real.len());
        for &k in &real {
            let o = body.outputs();
            match kept.iter().find(|&&j| o[j] == o[k]) {
                Some(&j) => same_as.push((k, j)),
                None => kept.push(k),
            }
        }
        let real = kept;
        if real.is_empty() {
            return result;
        }
        let body = if real.len() == n_out {
            body
        } else {
            let mut p = (*body).clone();
            p.outputs = real.iter().map(|&k| body.outputs()[k]).collect();
            p.output_blocks = vec![real.len()];
            Arc::new(p.dce())
        };
        // A map all of whose arguments are scalars is a scalar; broadcast
        // it if the arguments it lost (constants) made the shape.
        let mut map_shape = Shape::Scalar;
        for &a in &new_args {
            if self.shape(a) != Shape::Scalar {
                map_shape = self.shape(a);
            }
        }
        let first = self.push_map(body, new_args, map_shape);
        for (j, &k) in real.iter().enumerate() {
            let v = AVar(first.0 + j as u32);
            result[k] = if map_shape == shape {
                v
            } else {
                self.broadcast(v, shape)
            };
        }
        for (k, j) in same_as {
            result[k] = result[j];
        }
        result
    }

    /// `a + b` elementwise (scalars broadcast).
    pub fn add(&mut self, a: AVar, b: AVar) -> AVar {
        if self.is_zero(a) && self.shape(a) == self.shape(b) {
            return b;
        }
        if self.is_zero(b) && self.shape(a) == self.shape(b) {
            return a;
        }
        self.map(add_body(), &[a, b])[0]
    }
}

impl ArrayProgram {
    /// Copies `self` into `b`, input `k` becoming `inputs[k]`; returns the
    /// value map. Guards are copied.
    pub(crate) fn inline_into(&self, b: &mut ArrayBuilder, inputs: &[AVar]) -> Vec<AVar> {
        self.inline_with(b, inputs, |b, _, body, args| b.map(body.clone(), args))
    }

    /// Sequential composition `next ∘ self`: the outputs of `self` feed
    /// the inputs of `next`.
    ///
    /// # Errors
    ///
    /// [`Error::ShapeMismatch`] if an output of `self` does not have the
    /// shape of the matching input of `next`; [`Error::LengthMismatch`] if
    /// the counts differ.
    pub fn then(&self, next: &ArrayProgram) -> Result<ArrayProgram> {
        check_len(
            "ArrayProgram::then: outputs of the first vs inputs of the second",
            next.input_shapes.len(),
            self.outputs.len(),
        )?;
        for (o, s) in self.output_shapes().into_iter().zip(&next.input_shapes) {
            if o != *s {
                return Err(Error::ShapeMismatch {
                    what: "ArrayProgram::then",
                    expected: *s,
                    got: o,
                });
            }
        }
        let mut b = ArrayBuilder::new();
        let xs: Vec<AVar> = self.input_shapes.iter().map(|&s| b.input(s)).collect();
        let m1 = self.inline_into(&mut b, &xs);
        let mid: Vec<AVar> = self.outputs.iter().map(|o| m1[o.index()]).collect();
        let m2 = next.inline_into(&mut b, &mid);
        let outs: Vec<AVar> = next.outputs.iter().map(|o| m2[o.index()]).collect();
        b.finish(&outs)
    }

    /// Partial evaluation: input `k` becomes the constant `c` (every
    /// element) where `fixed[k] == Some(c)`, the others stay inputs, in
    /// order; only the outputs listed in `keep` remain. Constants fold
    /// into map bodies; `−0.0` is a structural zero.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if `fixed` does not have one entry per
    /// input; [`Error::IndexOutOfRange`] for an output that does not exist.
    pub fn specialize(&self, fixed: &[Option<f64>], keep: &[usize]) -> Result<ArrayProgram> {
        check_len(
            "ArrayProgram::specialize: fixed inputs",
            self.input_shapes.len(),
            fixed.len(),
        )?;
        if let Some(&bad) = keep.iter().find(|&&k| k >= self.outputs.len()) {
            return Err(Error::IndexOutOfRange {
                what: "ArrayProgram::specialize: output",
                index: bad,
                len: self.outputs.len(),
            });
        }
        let mut b = ArrayBuilder::new();
        let xs: Vec<AVar> = fixed
            .iter()
            .zip(&self.input_shapes)
            .map(|(f, &s)| match f {
                Some(c) => b.fill(*c, s),
                None => b.input(s),
            })
            .collect();
        let map = self.inline_into(&mut b, &xs);
        let outs: Vec<AVar> = keep.iter().map(|&k| map[self.outputs[k].index()]).collect();
        b.finish(&outs)
    }
}

/// Removes body inputs that no instruction or output reads, and the
/// matching arguments.
fn drop_unused_inputs(body: Arc<Program>, args: Vec<AVar>) -> (Arc<Program>, Vec<AVar>) {
    let mut used = vec![false; body.n_inputs()];
    // On the stored instructions: this runs for every map built.
    let code = &body.code;
    let mut mark = |v: Var| {
        if let Some(k) = code.get(v.index()).and_then(Instr::as_input) {
            if let Some(u) = used.get_mut(k as usize) {
                *u = true;
            }
        }
    };
    for ins in code {
        for &o in ins.operands() {
            mark(o);
        }
    }
    for &o in body.outputs() {
        mark(o);
    }
    for g in body.guards() {
        mark(g.a);
        mark(g.b);
    }
    if used.iter().all(|&u| u) {
        return (body, args);
    }
    let fixed: Vec<Option<f64>> = used
        .iter()
        .map(|&u| if u { None } else { Some(0.0) })
        .collect();
    let keep: Vec<usize> = (0..body.n_outputs()).collect();
    let new_args = args
        .into_iter()
        .zip(&used)
        .filter(|&(_, &u)| u)
        .map(|(a, _)| a)
        .collect();
    match body.specialize(&fixed, &keep) {
        Ok(p) => (Arc::new(p), new_args),
        // specialize only fails on bad lengths, which these are not.
        Err(_) => (body, Vec::new()),
    }
}
