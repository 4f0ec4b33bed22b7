//! Layout: repeating a scalar or a vector, joining scalars and vectors
//! into one vector, reshaping and transposing.

use super::{matrix_dims, only, operands, read_shape, vector_len};
use crate::array::ir::{AVar, ArrayBuilder, ArrayOp, ArrayPrim, ArrayPrimitive, Shape, TaylorRule};
use crate::array::kernels::{axis_len, broadcast_axis_into, transpose_into};
use crate::array::{Param, ParamReader};
use crate::error::{Error, Result};
use crate::program::{Builder, Var};

/// A scalar repeated to `shape` (an operand of that shape already is
/// itself). Its transpose is [`super::Sum`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Broadcast {
    /// The value's shape.
    pub shape: Shape,
}

impl ArrayPrimitive for Broadcast {
    fn name(&self) -> &'static str {
        "broadcast"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let [a] = operands(args, "broadcast: operands")?;
        if a != Shape::Scalar && a != self.shape {
            return Err(Error::ShapeMismatch {
                what: "broadcast: operand",
                expected: Shape::Scalar,
                got: a,
            });
        }
        Ok(self.shape)
    }

    // The shape is part of every key.
    fn key(&self, _: &mut Vec<u64>) {}

    fn params(&self) -> Vec<Param> {
        vec![Param::Shape(self.shape)]
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        Some(Broadcast {
            shape: read_shape(params)?,
        })
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        format!("broadcast {}", args.join(", "))
    }

    /// An operand of the value's own shape is the value (the builder
    /// never records that case; a program read from a file may hold it).
    fn eval(&self, args: &[&[f64]], _: &[Shape], out: &mut [f64], _: Shape, _: &mut Vec<f64>) {
        match args {
            [a] if a.len() == out.len() && a.len() != 1 => out.copy_from_slice(a),
            [a] => out.fill(a.first().copied().unwrap_or(0.0)),
            _ => {}
        }
    }

    fn pullback(&self, b: &mut ArrayBuilder, args: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        match args {
            [a] if b.shape(*a) == self.shape => vec![Some(ct)],
            _ => vec![Some(b.sum(ct))],
        }
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        _: &[AVar],
        tangents: &[Option<AVar>],
        out: Shape,
    ) -> Option<AVar> {
        only(tangents).map(|t| b.broadcast(t, out))
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Linear
    }

    fn unroll(&self, _: &mut Builder, args: &[&[Var]], _: &[Shape], out: Shape) -> Vec<Var> {
        match args.first() {
            Some(&&[a]) => vec![a; out.len()],
            Some(a) => a.to_vec(),
            None => Vec::new(),
        }
    }

    fn simplify(&self, b: &mut ArrayBuilder, args: &[AVar], out: Shape) -> Option<AVar> {
        let &[a] = args else { return None };
        if b.shape(a) == out {
            return Some(a);
        }
        b.fill_of(a).map(|c| b.fill(c, out))
    }
}

/// A vector repeated along a new axis into a `rows × cols` matrix:
/// `axis = 0` repeats a row (`cols` elements) down the rows, `axis = 1` a
/// column (`rows` elements) across the columns. Its transpose is
/// [`super::SumAxis`] along the same axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BroadcastAxis {
    /// 0 or 1.
    pub axis: usize,
    /// Rows of the value.
    pub rows: usize,
    /// Columns of the value.
    pub cols: usize,
}

impl ArrayPrimitive for BroadcastAxis {
    fn name(&self) -> &'static str {
        "broadcast_axis"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let [a] = operands(args, "broadcast_axis: operands")?;
        let n = vector_len(a, "broadcast_axis: operand")?;
        let need = axis_len(self.axis, self.rows, self.cols, "broadcast_axis: axis")?;
        crate::error::check_len("broadcast_axis: vector vs matrix", need, n)?;
        Ok(Shape::Matrix(self.rows, self.cols))
    }

    fn key(&self, words: &mut Vec<u64>) {
        words.push(self.axis as u64);
    }

    fn params(&self) -> Vec<Param> {
        vec![
            Param::Int(self.axis as u64),
            Param::Int(self.rows as u64),
            Param::Int(self.cols as u64),
        ]
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        let mut r = ParamReader::new(params);
        let (axis, rows, cols) = (r.usize()?, r.usize()?, r.usize()?);
        r.finish()?;
        (axis < 2).then_some(BroadcastAxis { axis, rows, cols })
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        format!("broadcast {} along axis {}", args.join(", "), self.axis)
    }

    fn eval(&self, args: &[&[f64]], _: &[Shape], out: &mut [f64], _: Shape, _: &mut Vec<f64>) {
        if let [a] = args {
            broadcast_axis_into(a, self.cols, self.axis, out);
        }
    }

    fn pullback(&self, b: &mut ArrayBuilder, _: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        vec![Some(b.sum_axis(ct, self.axis))]
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        _: &[AVar],
        tangents: &[Option<AVar>],
        _: Shape,
    ) -> Option<AVar> {
        only(tangents).map(|t| b.broadcast_axis(t, self.axis, self.rows, self.cols))
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Linear
    }

    fn unroll(&self, _: &mut Builder, args: &[&[Var]], _: &[Shape], _: Shape) -> Vec<Var> {
        let Some(a) = args.first() else {
            return Vec::new();
        };
        let (r, c) = (self.rows, self.cols);
        (0..r * c)
            .map(|e| if self.axis == 0 { a[e % c] } else { a[e / c] })
            .collect()
    }

    fn simplify(&self, b: &mut ArrayBuilder, args: &[AVar], out: Shape) -> Option<AVar> {
        let &[a] = args else { return None };
        b.fill_of(a).map(|c| b.fill(c, out))
    }
}

/// The elements of an array in row-major order, as `shape` (of the same
/// number of elements). Its own transpose: the pullback reshapes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reshape {
    /// The value's shape.
    pub shape: Shape,
}

impl ArrayPrimitive for Reshape {
    fn name(&self) -> &'static str {
        "reshape"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let [a] = operands(args, "reshape: operands")?;
        crate::error::check_len("reshape: elements", self.shape.len(), a.len())?;
        Ok(self.shape)
    }

    // The shape is part of every key.
    fn key(&self, _: &mut Vec<u64>) {}

    fn params(&self) -> Vec<Param> {
        vec![Param::Shape(self.shape)]
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        Some(Reshape {
            shape: read_shape(params)?,
        })
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        format!("reshape {}", args.join(", "))
    }

    fn eval(&self, args: &[&[f64]], _: &[Shape], out: &mut [f64], _: Shape, _: &mut Vec<f64>) {
        if let [a] = args {
            out.copy_from_slice(a);
        }
    }

    fn pullback(&self, b: &mut ArrayBuilder, args: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        args.iter()
            .map(|&a| Some(b.reshape(ct, b.shape(a))))
            .collect()
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        _: &[AVar],
        tangents: &[Option<AVar>],
        out: Shape,
    ) -> Option<AVar> {
        only(tangents).map(|t| b.reshape(t, out))
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Linear
    }

    fn unroll(&self, _: &mut Builder, args: &[&[Var]], _: &[Shape], _: Shape) -> Vec<Var> {
        args.first().map(|a| a.to_vec()).unwrap_or_default()
    }

    fn simplify(&self, b: &mut ArrayBuilder, args: &[AVar], out: Shape) -> Option<AVar> {
        let &[a] = args else { return None };
        if b.shape(a) == out {
            return Some(a);
        }
        if let Some(c) = b.fill_of(a) {
            return Some(b.fill(c, out));
        }
        match b.op(a) {
            Some(ArrayOp::Const(d)) => {
                // Constant data of the new shape: the same shared buffer.
                let d = d.clone();
                Some(b.constant_shaped(d, out))
            }
            Some(op) => {
                let (_, &[x]) = op.prim::<Reshape>()? else {
                    return None;
                };
                Some(b.reshape(x, out))
            }
            None => None,
        }
    }

    fn view(&self, _: Shape, out: Shape) -> Option<(isize, usize, usize)> {
        // The same elements in the same order.
        Some((0, 0, out.len()))
    }
}

/// `aᵀ` for a matrix `a`. Its own transpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transpose;

impl ArrayPrimitive for Transpose {
    fn name(&self) -> &'static str {
        "transpose"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let [a] = operands(args, "transpose: operands")?;
        let (r, c) = matrix_dims(a, "transpose: operand")?;
        Ok(Shape::Matrix(c, r))
    }

    fn key(&self, _: &mut Vec<u64>) {}

    fn params(&self) -> Vec<Param> {
        Vec::new()
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        ParamReader::new(params).finish().map(|()| Transpose)
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        format!("transpose {}", args.join(", "))
    }

    fn eval(&self, args: &[&[f64]], shapes: &[Shape], out: &mut [f64], _: Shape, _: &mut Vec<f64>) {
        if let ([a], [Shape::Matrix(r, c)]) = (args, shapes) {
            transpose_into(a, *r, *c, out);
        }
    }

    fn pullback(&self, b: &mut ArrayBuilder, _: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        vec![Some(b.transpose(ct))]
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        _: &[AVar],
        tangents: &[Option<AVar>],
        _: Shape,
    ) -> Option<AVar> {
        only(tangents).map(|t| b.transpose(t))
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Linear
    }

    fn unroll(&self, _: &mut Builder, args: &[&[Var]], shapes: &[Shape], _: Shape) -> Vec<Var> {
        let (Some(a), Some(&Shape::Matrix(r, c))) = (args.first(), shapes.first()) else {
            return Vec::new();
        };
        // out[j][i] = a[i][j]; out is c × r.
        (0..r * c).map(|e| a[(e % r) * c + e / r]).collect()
    }

    fn simplify(&self, b: &mut ArrayBuilder, args: &[AVar], out: Shape) -> Option<AVar> {
        let &[a] = args else { return None };
        if let Some(c) = b.fill_of(a) {
            return Some(b.fill(c, out));
        }
        if let Some((_, &[x])) = b.op(a).and_then(ArrayOp::prim::<Transpose>) {
            return Some(x);
        }
        // A row or a column: the same elements in the same order.
        match b.shape(a) {
            Shape::Matrix(r, c) if r <= 1 || c <= 1 => Some(b.reshape(a, out)),
            _ => None,
        }
    }
}

/// Scalars and vectors joined end to end into one vector (NumPy's
/// `concatenate` of one-dimensional arrays, a scalar counting as one
/// element). Its transpose takes the pieces back: the pullback slices the
/// cotangent (and sums a scalar's one element).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Concat;

/// The length of a piece of a [`Concat`] (a scalar is one element).
fn piece_len(s: Shape) -> Result<usize> {
    match s {
        Shape::Scalar => Ok(1),
        Shape::Vector(n) => Ok(n),
        s => Err(Error::ShapeMismatch {
            what: "concat: operand (a scalar or a vector)",
            expected: Shape::Vector(0),
            got: s,
        }),
    }
}

impl ArrayPrimitive for Concat {
    fn name(&self) -> &'static str {
        "concat"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        if args.is_empty() {
            return Err(Error::LengthMismatch {
                what: "concat: operands (at least one)",
                expected: 1,
                got: 0,
            });
        }
        let mut n: usize = 0;
        for &a in args {
            n = n
                .checked_add(piece_len(a)?)
                .ok_or(Error::AllocationFailed {
                    what: "concat: elements",
                    elements: usize::MAX,
                })?;
        }
        Ok(Shape::Vector(n))
    }

    // The operands and the shape are part of every key.
    fn key(&self, _: &mut Vec<u64>) {}

    fn params(&self) -> Vec<Param> {
        Vec::new()
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        ParamReader::new(params).finish().map(|()| Concat)
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        format!("concat {}", args.join(", "))
    }

    fn eval(&self, args: &[&[f64]], _: &[Shape], out: &mut [f64], _: Shape, _: &mut Vec<f64>) {
        let mut at = 0;
        for a in args {
            if let Some(dst) = out.get_mut(at..at + a.len()) {
                dst.copy_from_slice(a);
            }
            at += a.len();
        }
    }

    fn pullback(&self, b: &mut ArrayBuilder, args: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        let mut at = 0;
        args.iter()
            .map(|&a| {
                let s = b.shape(a);
                let l = s.len();
                let piece = b.slice(ct, at, l);
                at += l;
                Some(if s == Shape::Scalar {
                    b.sum(piece)
                } else {
                    piece
                })
            })
            .collect()
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        args: &[AVar],
        tangents: &[Option<AVar>],
        _: Shape,
    ) -> Option<AVar> {
        if tangents.iter().all(Option::is_none) {
            return None;
        }
        let ts: Vec<AVar> = args
            .iter()
            .zip(tangents)
            .map(|(&a, t)| t.unwrap_or_else(|| b.zero(b.shape(a))))
            .collect();
        Some(b.concat(&ts))
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Linear
    }

    fn unroll(&self, _: &mut Builder, args: &[&[Var]], _: &[Shape], _: Shape) -> Vec<Var> {
        args.concat()
    }

    fn simplify(&self, b: &mut ArrayBuilder, args: &[AVar], _: Shape) -> Option<AVar> {
        // One vector is itself (a scalar alone still becomes a vector).
        match args {
            &[a] if matches!(b.shape(a), Shape::Vector(_)) => Some(a),
            _ => None,
        }
    }
}

impl ArrayBuilder {
    /// A scalar repeated to `shape` ([`Broadcast`]).
    pub fn broadcast(&mut self, s: AVar, shape: Shape) -> AVar {
        self.apply(Broadcast { shape }, &[s])
    }

    /// Vector `v` repeated along `axis` into a `rows × cols` matrix
    /// (axis 0: `v` is a row of `cols` elements; axis 1: a column of
    /// `rows`) ([`BroadcastAxis`]).
    pub fn broadcast_axis(&mut self, v: AVar, axis: usize, rows: usize, cols: usize) -> AVar {
        self.apply(BroadcastAxis { axis, rows, cols }, &[v])
    }

    /// The elements of `a`, row-major, as `shape` (of the same number of
    /// elements): a vector as a matrix, a matrix as a vector, or a matrix
    /// as another matrix ([`Reshape`]).
    pub fn reshape(&mut self, a: AVar, shape: Shape) -> AVar {
        self.apply(Reshape { shape }, &[a])
    }

    /// Scalars and vectors `parts` joined into one vector ([`Concat`]);
    /// more than [`crate::array::MAX_ARRAY_ARITY`] parts are joined in
    /// groups.
    pub fn concat(&mut self, parts: &[AVar]) -> AVar {
        let m = crate::array::ir::MAX_ARRAY_ARITY;
        if parts.len() <= m {
            return self.apply(Concat, parts);
        }
        let groups: Vec<AVar> = parts.chunks(m).map(|c| self.apply(Concat, c)).collect();
        self.concat(&groups)
    }

    /// `aᵀ` for a matrix `a` ([`Transpose`]).
    pub fn transpose(&mut self, a: AVar) -> AVar {
        self.apply(Transpose, &[a])
    }
}

pub(super) fn examples(n: usize, all: &mut Vec<(ArrayPrim, Vec<Shape>)>) {
    let shape = Shape::Vector(n);
    all.push((ArrayPrim::new(Broadcast { shape }), vec![Shape::Scalar]));
    let (rows, cols) = (3, n);
    all.push((
        ArrayPrim::new(BroadcastAxis {
            axis: 0,
            rows,
            cols,
        }),
        vec![Shape::Vector(cols)],
    ));
    all.push((
        ArrayPrim::new(BroadcastAxis {
            axis: 1,
            rows,
            cols,
        }),
        vec![Shape::Vector(rows)],
    ));
    let shape = Shape::Matrix(2, n);
    all.push((
        ArrayPrim::new(Reshape { shape }),
        vec![Shape::Vector(2 * n)],
    ));
    all.push((ArrayPrim::new(Transpose), vec![Shape::Matrix(3, n)]));
    all.push((
        ArrayPrim::new(Concat),
        vec![Shape::Vector(n), Shape::Scalar, Shape::Vector(2)],
    ));
}
