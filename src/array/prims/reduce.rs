//! Reductions: the sum of all elements, the sums along an axis of a
//! matrix, and the prefix sum.

use super::{matrix_dims, operands, scalar_sum, vector_len};
use crate::array::ir::{AVar, ArrayBuilder, ArrayPrim, ArrayPrimitive, Shape, TaylorRule};
use crate::array::kernels::{sum4, sum_axis_into};
use crate::error::{Error, Result};
use crate::program::{Builder, Var};

/// `Σᵢ aᵢ`, a scalar, for an array `a` of any shape (the sum of a scalar
/// is itself). Its transpose is [`super::Broadcast`]: the pullback
/// repeats the cotangent to `a`'s shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sum;

impl ArrayPrimitive for Sum {
    fn name(&self) -> &'static str {
        "sum"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        operands::<1>(args, "sum: operands")?;
        Ok(Shape::Scalar)
    }

    fn key(&self, _: &mut Vec<u64>) {}

    fn print(&self, args: &[String], _: Shape) -> String {
        format!("sum {}", args.join(", "))
    }

    fn eval(&self, args: &[&[f64]], _: &[Shape], out: &mut [f64], _: Shape, _: &mut Vec<f64>) {
        if let ([a], [o]) = (args, out) {
            *o = sum4(a);
        }
    }

    fn pullback(&self, b: &mut ArrayBuilder, args: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        args.iter()
            .map(|&a| Some(b.broadcast(ct, b.shape(a))))
            .collect()
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        _: &[AVar],
        tangents: &[Option<AVar>],
        _: Shape,
    ) -> Option<AVar> {
        tangents.first().copied().flatten().map(|t| b.sum(t))
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Linear
    }

    fn unroll(&self, b: &mut Builder, args: &[&[Var]], _: &[Shape], _: Shape) -> Vec<Var> {
        let xs = args.first().copied().unwrap_or(&[]);
        vec![scalar_sum(b, xs.iter().copied())]
    }

    fn simplify(&self, b: &mut ArrayBuilder, args: &[AVar], _: Shape) -> Option<AVar> {
        let &[a] = args else { return None };
        (b.shape(a) == Shape::Scalar).then_some(a)
    }
}

/// The sums of a `rows × cols` matrix along an axis, as in NumPy:
/// `axis = 0` sums over the rows (one value per column), `axis = 1` over
/// the columns (one value per row). Its transpose is
/// [`super::BroadcastAxis`] along the same axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SumAxis {
    /// 0 or 1.
    pub axis: usize,
}

impl ArrayPrimitive for SumAxis {
    fn name(&self) -> &'static str {
        "sum_axis"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let [a] = operands(args, "sum_axis: operands")?;
        let (r, c) = matrix_dims(a, "sum_axis: operand")?;
        match self.axis {
            0 => Ok(Shape::Vector(c)),
            1 => Ok(Shape::Vector(r)),
            _ => Err(Error::IndexOutOfRange {
                what: "sum_axis: axis",
                index: self.axis,
                len: 2,
            }),
        }
    }

    fn key(&self, words: &mut Vec<u64>) {
        words.push(self.axis as u64);
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        format!("sum {} along axis {}", args.join(", "), self.axis)
    }

    fn eval(&self, args: &[&[f64]], shapes: &[Shape], out: &mut [f64], _: Shape, _: &mut Vec<f64>) {
        if let ([a], [Shape::Matrix(r, c)]) = (args, shapes) {
            sum_axis_into(a, *r, *c, self.axis, out);
        }
    }

    fn pullback(&self, b: &mut ArrayBuilder, args: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        let &[a] = args else { return Vec::new() };
        let Shape::Matrix(r, c) = b.shape(a) else {
            return vec![None];
        };
        vec![Some(b.broadcast_axis(ct, self.axis, r, c))]
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        _: &[AVar],
        tangents: &[Option<AVar>],
        _: Shape,
    ) -> Option<AVar> {
        tangents
            .first()
            .copied()
            .flatten()
            .map(|t| b.sum_axis(t, self.axis))
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Linear
    }

    fn unroll(&self, b: &mut Builder, args: &[&[Var]], shapes: &[Shape], _: Shape) -> Vec<Var> {
        let (Some(a), Some(&Shape::Matrix(r, c))) = (args.first(), shapes.first()) else {
            return Vec::new();
        };
        if self.axis == 0 {
            (0..c)
                .map(|j| scalar_sum(b, (0..r).map(|i| a[i * c + j])))
                .collect()
        } else {
            (0..r)
                .map(|i| scalar_sum(b, a[i * c..(i + 1) * c].iter().copied()))
                .collect()
        }
    }
}

/// The prefix sums of a vector, `outᵢ = Σ_{j ≤ i} aⱼ` (NumPy's `cumsum`),
/// or with `reverse` the suffix sums `outᵢ = Σ_{j ≥ i} aⱼ`. Linear; its
/// transpose is the sum in the other direction, so the pullback of a
/// prefix sum is the reversed prefix sum of the cotangent, and the
/// pushforward is the prefix sum of the tangent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cumsum {
    /// Sum from the end instead of the start.
    pub reverse: bool,
}

impl ArrayPrimitive for Cumsum {
    fn name(&self) -> &'static str {
        "cumsum"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let [a] = operands(args, "cumsum: operands")?;
        vector_len(a, "cumsum: operand").map(Shape::Vector)
    }

    fn key(&self, words: &mut Vec<u64>) {
        words.push(u64::from(self.reverse));
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        let dir = if self.reverse { " reversed" } else { "" };
        format!("cumsum {}{dir}", args.join(", "))
    }

    fn eval(&self, args: &[&[f64]], _: &[Shape], out: &mut [f64], _: Shape, _: &mut Vec<f64>) {
        let [a] = args else { return };
        let mut acc = 0.0;
        if self.reverse {
            for (o, &x) in out.iter_mut().zip(a.iter()).rev() {
                acc += x;
                *o = acc;
            }
        } else {
            for (o, &x) in out.iter_mut().zip(a.iter()) {
                acc += x;
                *o = acc;
            }
        }
    }

    fn pullback(&self, b: &mut ArrayBuilder, _: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        vec![Some(b.cumsum(ct, !self.reverse))]
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        _: &[AVar],
        tangents: &[Option<AVar>],
        _: Shape,
    ) -> Option<AVar> {
        tangents
            .first()
            .copied()
            .flatten()
            .map(|t| b.cumsum(t, self.reverse))
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Linear
    }

    fn unroll(&self, b: &mut Builder, args: &[&[Var]], _: &[Shape], _: Shape) -> Vec<Var> {
        let Some(a) = args.first() else {
            return Vec::new();
        };
        let mut out = vec![Var(0); a.len()];
        let mut acc: Option<Var> = None;
        let order: Vec<usize> = if self.reverse {
            (0..a.len()).rev().collect()
        } else {
            (0..a.len()).collect()
        };
        for i in order {
            let s = match acc {
                Some(s) => b.add(s, a[i]),
                None => a[i],
            };
            acc = Some(s);
            out[i] = s;
        }
        out
    }

    fn simplify(&self, b: &mut ArrayBuilder, args: &[AVar], _: Shape) -> Option<AVar> {
        // One element: its own prefix sum.
        let &[a] = args else { return None };
        (b.shape(a).len() <= 1).then_some(a)
    }
}

impl ArrayBuilder {
    /// The sum of the elements of `a`, a scalar ([`Sum`]).
    pub fn sum(&mut self, a: AVar) -> AVar {
        self.apply(Sum, &[a])
    }

    /// The sums of matrix `a` along `axis` (0: one per column, 1: one per
    /// row) ([`SumAxis`]).
    pub fn sum_axis(&mut self, a: AVar, axis: usize) -> AVar {
        self.apply(SumAxis { axis }, &[a])
    }

    /// The prefix sums of vector `a`, or its suffix sums if `reverse`
    /// ([`Cumsum`]).
    pub fn cumsum(&mut self, a: AVar, reverse: bool) -> AVar {
        self.apply(Cumsum { reverse }, &[a])
    }
}

pub(super) fn examples(n: usize, all: &mut Vec<(ArrayPrim, Vec<Shape>)>) {
    all.push((ArrayPrim::new(Sum), vec![Shape::Vector(n)]));
    all.push((ArrayPrim::new(Sum), vec![Shape::Matrix(2, n)]));
    for axis in 0..2 {
        all.push((ArrayPrim::new(SumAxis { axis }), vec![Shape::Matrix(2, n)]));
    }
    for reverse in [false, true] {
        all.push((ArrayPrim::new(Cumsum { reverse }), vec![Shape::Vector(n)]));
    }
}
