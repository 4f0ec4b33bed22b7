//! Reductions: the sum of all elements, the sums along an axis of a
//! matrix, the prefix sum, and the maximum.

use super::{matrix_dims, only, operands, scalar_sum, vector_len};
use crate::array::ir::{AVar, ArrayBuilder, ArrayPrim, ArrayPrimitive, Shape, TaylorRule};
use crate::array::kernels::{sum4, sum_axis_into, SUM_START};
use crate::array::{Param, ParamReader};
use crate::error::{Error, Result};
use crate::program::{Builder, Var};
use crate::rules::Prim;

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

    fn params(&self) -> Vec<Param> {
        Vec::new()
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        ParamReader::new(params).finish().map(|()| Sum)
    }

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
        only(tangents).map(|t| b.sum(t))
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
        let n = b.shape(a).len();
        if b.shape(a) == Shape::Scalar {
            return Some(a);
        }
        // The sum of a repeated scalar is `n` times it: nothing of the
        // operand's length is stored or read, however long it is.
        if let Some(c) = b.fill_of(a) {
            // (An empty sum is +0, as `sum4` gives, whatever `c` is.)
            let s = if n == 0 { 0.0 } else { c * n as f64 };
            return Some(b.fill(s, Shape::Scalar));
        }
        let (_, &[s]) = b.op(a)?.prim::<super::Broadcast>()? else {
            return None;
        };
        if b.shape(s) != Shape::Scalar {
            return None;
        }
        if n == 0 {
            // An empty sum is +0 (`n · s` would fold to the structural −0).
            return Some(b.fill(0.0, Shape::Scalar));
        }
        Some(b.map(times_body(n as f64), &[s])[0])
    }
}

/// The scalar body `t ↦ c · t`.
fn times_body(c: f64) -> std::sync::Arc<crate::program::Program> {
    let mut b = Builder::new();
    let t = b.input();
    let y = b.scale(c, t);
    std::sync::Arc::new(b.finish_unchecked(&[y]))
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

    fn params(&self) -> Vec<Param> {
        vec![Param::Int(self.axis as u64)]
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        let mut r = ParamReader::new(params);
        let axis = r.usize().filter(|&a| a < 2)?;
        r.finish()?;
        Some(SumAxis { axis })
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
        only(tangents).map(|t| b.sum_axis(t, self.axis))
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

    fn params(&self) -> Vec<Param> {
        vec![Param::Flag(self.reverse)]
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        let mut r = ParamReader::new(params);
        let reverse = r.flag()?;
        r.finish()?;
        Some(Cumsum { reverse })
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        let dir = if self.reverse { " reversed" } else { "" };
        format!("cumsum {}{dir}", args.join(", "))
    }

    fn eval(&self, args: &[&[f64]], _: &[Shape], out: &mut [f64], _: Shape, _: &mut Vec<f64>) {
        let [a] = args else { return };
        let mut acc = SUM_START;
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
        only(tangents).map(|t| b.cumsum(t, self.reverse))
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

/// The positions of the maximum of `x` (a vector or matrix) and how many
/// there are: `(m, count)` with `xᵢ = m` at `count` positions. NaN
/// elements are ignored, as by `f64::max`; all NaN gives `count = 0`.
fn argmax_set(x: &[f64]) -> (f64, usize) {
    let m = x.iter().copied().fold(f64::NAN, f64::max);
    (m, x.iter().filter(|&&v| v == m).count())
}

/// The mean of `t` over the positions where `x` is largest: the maximum of
/// `x` is `MaxAt` on `(x, x)` ([`ArrayBuilder::max`]). With JAX's
/// convention at ties (`jax.lax.reduce_max`'s JVP), ties share the
/// derivative equally: the tangent of `max x` is the mean of `ẋ` over the
/// positions of the maximum, and its pullback [`SpreadAtMax`] gives each of
/// them `ȳ / count`. The positions are piecewise constant in `x`, so `x`
/// itself gets no derivative through them ([`TaylorRule::LinearInLast`]).
///
/// NaN elements of `x` are ignored, as by `f64::max`; if all are NaN the
/// value is NaN. `x` must not be empty (NumPy's `max` of an empty array is
/// an error too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxAt;

impl ArrayPrimitive for MaxAt {
    fn name(&self) -> &'static str {
        "max_at"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let [x, t] = operands(args, "max: operands")?;
        nonempty(x, "max: operand")?;
        if t != x {
            return Err(Error::ShapeMismatch {
                what: "max: values selected vs operand",
                expected: x,
                got: t,
            });
        }
        Ok(Shape::Scalar)
    }

    fn key(&self, _: &mut Vec<u64>) {}

    fn params(&self) -> Vec<Param> {
        Vec::new()
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        ParamReader::new(params).finish().map(|()| MaxAt)
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        match args {
            [x, t] if x == t => format!("max {x}"),
            [x, t] => format!("{t} at max {x}"),
            _ => format!("max_at {}", args.join(", ")),
        }
    }

    fn eval(&self, args: &[&[f64]], _: &[Shape], out: &mut [f64], _: Shape, _: &mut Vec<f64>) {
        let ([x, t], [o]) = (args, out) else { return };
        let (m, count) = argmax_set(x);
        // The first selected value plus the mean offset of the others, so
        // that the mean of equal values (the maximum itself) is exact.
        let mut first = None;
        // (From −0, so that one selected value is itself, sign of zero
        // and all.)
        let mut offset = SUM_START;
        for (&xi, &ti) in x.iter().zip(t.iter()) {
            if xi == m {
                match first {
                    None => first = Some(ti),
                    // (−(f − tᵢ), not tᵢ − f: −0 where tᵢ = f.)
                    Some(f) => offset += -(f - ti),
                }
            }
        }
        *o = match first {
            Some(f) => f + offset / count as f64,
            None => f64::NAN,
        };
    }

    fn pullback(&self, b: &mut ArrayBuilder, args: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        let &[x, _] = args else { return Vec::new() };
        vec![None, Some(b.apply(SpreadAtMax, &[x, ct]))]
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        args: &[AVar],
        tangents: &[Option<AVar>],
        _: Shape,
    ) -> Option<AVar> {
        let (&[x, _], &[_, t]) = (args, tangents) else {
            return None;
        };
        t.map(|t| b.apply(MaxAt, &[x, t]))
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::LinearInLast
    }

    fn unroll(&self, b: &mut Builder, args: &[&[Var]], _: &[Shape], _: Shape) -> Vec<Var> {
        let &[x, t] = args else { return Vec::new() };
        let (ind, count) = max_indicators(b, x);
        let terms: Vec<Var> = ind
            .iter()
            .zip(t.iter())
            .map(|(&i, &ti)| b.mul(i, ti))
            .collect();
        let total = scalar_sum(b, terms);
        vec![b.div(total, count)]
    }
}

/// `s / count` at each position where `x` is largest (of `count`), zero
/// elsewhere: the transpose of [`MaxAt`] in its selected values, so the
/// pullback of `max x`. Linear in `s`; `x` only selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpreadAtMax;

impl ArrayPrimitive for SpreadAtMax {
    fn name(&self) -> &'static str {
        "spread_at_max"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let [x, s] = operands(args, "spread_at_max: operands")?;
        nonempty(x, "spread_at_max: operand")?;
        if s != Shape::Scalar {
            return Err(Error::ShapeMismatch {
                what: "spread_at_max: value spread",
                expected: Shape::Scalar,
                got: s,
            });
        }
        Ok(x)
    }

    fn key(&self, _: &mut Vec<u64>) {}

    fn params(&self) -> Vec<Param> {
        Vec::new()
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        ParamReader::new(params).finish().map(|()| SpreadAtMax)
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        match args {
            [x, s] => format!("spread {s} at max {x}"),
            _ => format!("spread_at_max {}", args.join(", ")),
        }
    }

    fn eval(&self, args: &[&[f64]], _: &[Shape], out: &mut [f64], _: Shape, _: &mut Vec<f64>) {
        let [x, s] = args else { return };
        let (m, count) = argmax_set(x);
        let share = s.first().copied().unwrap_or(0.0) / count as f64;
        for (o, &xi) in out.iter_mut().zip(x.iter()) {
            *o = if xi == m { share } else { 0.0 };
        }
    }

    fn pullback(&self, b: &mut ArrayBuilder, args: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        let &[x, _] = args else { return Vec::new() };
        vec![None, Some(b.apply(MaxAt, &[x, ct]))]
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        args: &[AVar],
        tangents: &[Option<AVar>],
        _: Shape,
    ) -> Option<AVar> {
        let (&[x, _], &[_, s]) = (args, tangents) else {
            return None;
        };
        s.map(|s| b.apply(SpreadAtMax, &[x, s]))
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::LinearInLast
    }

    fn unroll(&self, b: &mut Builder, args: &[&[Var]], _: &[Shape], _: Shape) -> Vec<Var> {
        let &[x, &[s]] = args else { return Vec::new() };
        let (ind, count) = max_indicators(b, x);
        let share = b.div(s, count);
        ind.iter().map(|&i| b.mul(i, share)).collect()
    }
}

/// In scalar instructions, the indicators `[xᵢ = max x]` and their sum:
/// `select(m − xᵢ, 0, 1)`, as `m − xᵢ` is positive off the maximum and
/// zero on it.
fn max_indicators(b: &mut Builder, x: &[Var]) -> (Vec<Var>, Var) {
    let (zero, one) = (b.constant(0.0), b.constant(1.0));
    let m = x
        .iter()
        .copied()
        .reduce(|a, v| b.apply(Prim::Max, 0, &[a, v]))
        .unwrap_or(zero);
    let ind: Vec<Var> = x
        .iter()
        .map(|&xi| {
            let d = b.sub(m, xi);
            b.select(d, zero, one)
        })
        .collect();
    let count = scalar_sum(b, ind.iter().copied());
    (ind, count)
}

/// A vector or matrix with at least one element.
fn nonempty(s: Shape, what: &'static str) -> Result<()> {
    match s {
        Shape::Scalar => Err(Error::ShapeMismatch {
            what,
            expected: Shape::Vector(1),
            got: s,
        }),
        _ if s.is_empty() => Err(Error::LengthMismatch {
            what,
            expected: 1,
            got: 0,
        }),
        _ => Ok(()),
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

    /// The largest element of `a` (a vector or matrix, not empty), a
    /// scalar: [`MaxAt`] on `(a, a)`, with JAX's convention at ties.
    pub fn max(&mut self, a: AVar) -> AVar {
        self.apply(MaxAt, &[a, a])
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
    let v = Shape::Vector(n);
    all.push((ArrayPrim::new(MaxAt), vec![v, v]));
    all.push((ArrayPrim::new(MaxAt), vec![Shape::Matrix(2, n); 2]));
    all.push((ArrayPrim::new(SpreadAtMax), vec![v, Shape::Scalar]));
}
