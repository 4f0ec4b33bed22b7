//! An array program written element by element as a scalar program.

use super::ir::{ArrayOp, ArrayProgram, Shape, MAX_ARRAY_ARITY};
use crate::error::{Error, Malformation, Result};
use crate::program::{Builder, Program, Var};

impl ArrayProgram {
    /// The same function as a scalar [`Program`], one instruction per
    /// element: inputs are the elements of each input array in order
    /// (row-major), outputs the elements of each output. A map becomes its
    /// body once per element; every other operation is written by its
    /// [`super::ArrayPrimitive::unroll`], the operation's meaning in scalar
    /// arithmetic. Guards are kept.
    ///
    /// This is the bridge between the two tiers: the scalar drivers and
    /// num-dual (through [`Program::eval`]) then apply to any array
    /// program, which is how the tests check every rule of the array table
    /// against an independent source. It grows with the data, so it is
    /// meant for small arrays.
    ///
    /// # Errors
    ///
    /// The program's defect if it has one; [`Error::Malformed`] for a map
    /// output without its map; [`Error::LengthMismatch`] where an
    /// operation's `unroll` gives a wrong number of elements.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::array::{trace, Array};
    ///
    /// let p = trace(|x: &[_]| Ok(x[0].map(|t| t * t).sum()), &[&[1.0, 2.0, 3.0]]).unwrap();
    /// let s = p.unroll().unwrap();
    /// assert_eq!(s.n_inputs(), 3);
    /// assert_eq!(s.eval(&[1.0, 2.0, 3.0]).unwrap(), vec![14.0]);
    /// ```
    pub fn unroll(&self) -> Result<Program> {
        if let Some(e) = &self.defect {
            return Err(e.clone());
        }
        let mut b = Builder::new();
        let inputs: Vec<Vec<Var>> = self
            .input_shapes
            .iter()
            .map(|s| (0..s.len()).map(|_| b.input()).collect())
            .collect();
        let n = self.ops.len();
        let mut vals: Vec<Vec<Var>> = Vec::with_capacity(n);
        let mut i = 0;
        while i < n {
            let len = self.shapes[i].len();
            match &self.ops[i] {
                ArrayOp::Input(k) => vals.push(inputs[*k as usize].clone()),
                ArrayOp::Fill(c) => {
                    let v = b.constant(*c);
                    vals.push(vec![v; len]);
                }
                ArrayOp::Const(d) => vals.push(d.iter().map(|&c| b.constant(c)).collect()),
                ArrayOp::Map { body, args } => {
                    let n_out = body.n_outputs();
                    let mut outs = vec![Vec::with_capacity(len); n_out];
                    let mut xs = Vec::with_capacity(args.len());
                    for e in 0..len {
                        xs.clear();
                        for a in args {
                            let v = &vals[a.index()];
                            xs.push(if self.shapes[a.index()] == Shape::Scalar {
                                v[0]
                            } else {
                                v[e]
                            });
                        }
                        let m = body.inline_into(&mut b, &xs);
                        for (k, o) in body.outputs().iter().enumerate() {
                            outs[k].push(m[o.index()]);
                        }
                    }
                    vals.extend(outs);
                    i += n_out.max(1);
                    continue;
                }
                ArrayOp::MapOut(_) => return Err(Error::Malformed(Malformation::Blocks)),
                ArrayOp::Prim { prim, args } => {
                    let mut shapes = [Shape::Scalar; MAX_ARRAY_ARITY];
                    let a: Vec<&[Var]> = args.iter().map(|a| vals[a.index()].as_slice()).collect();
                    for (s, a) in shapes.iter_mut().zip(args) {
                        *s = self.shapes[a.index()];
                    }
                    let k = args.len().min(MAX_ARRAY_ARITY);
                    let v = prim.unroll(&mut b, &a, &shapes[..k], self.shapes[i]);
                    crate::error::check_len("ArrayPrimitive::unroll: elements", len, v.len())?;
                    vals.push(v);
                }
            }
            i += 1;
        }
        for g in &self.guards {
            b.guard(vals[g.a.index()][0], vals[g.b.index()][0], g.ordering);
        }
        let outs: Vec<Var> = self
            .outputs
            .iter()
            .flat_map(|o| vals[o.index()].iter().copied())
            .collect();
        b.finish(&outs)
    }
}
