//! Indexing: contiguous slices and their transpose (padding), and
//! gathers by an index list and their transpose (scatter-adds).

use std::sync::Arc;

use super::{only, operands, read_start_len, scalar_sum, start_len_params, vector_len};
use crate::array::ir::{AVar, ArrayBuilder, ArrayPrim, ArrayPrimitive, Shape, TaylorRule};
use crate::array::{Param, ParamReader};
use crate::error::{check_len, Error, Result};
use crate::program::{Builder, Var};

/// One more than the largest index (0 for none): what a gather or
/// scatter-add checks against the length it indexes.
pub(crate) fn index_bound(idx: &[u32]) -> usize {
    idx.iter().map(|&i| i as usize + 1).max().unwrap_or(0)
}

/// Elements `start .. start + len` of a vector. Its transpose is
/// [`Pad`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    /// First element taken.
    pub start: usize,
    /// Number of elements taken.
    pub len: usize,
}

impl ArrayPrimitive for Slice {
    fn name(&self) -> &'static str {
        "slice"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let [a] = operands(args, "slice: operands")?;
        let n = vector_len(a, "slice: operand")?;
        if self.start.checked_add(self.len).is_none_or(|e| e > n) {
            return Err(Error::IndexOutOfRange {
                what: "slice: end",
                index: self.start.saturating_add(self.len),
                len: n,
            });
        }
        Ok(Shape::Vector(self.len))
    }

    fn key(&self, words: &mut Vec<u64>) {
        words.push(self.start as u64);
    }

    fn params(&self) -> Vec<Param> {
        start_len_params(self.start, self.len)
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        let (start, len) = read_start_len(params)?;
        Some(Slice { start, len })
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        let end = self.start + self.len;
        format!("{}[{}..{end}]", args.join(", "), self.start)
    }

    fn eval(&self, args: &[&[f64]], _: &[Shape], out: &mut [f64], _: Shape, _: &mut Vec<f64>) {
        if let Some(src) = args
            .first()
            .and_then(|a| a.get(self.start..self.start + out.len()))
        {
            out.copy_from_slice(src);
        }
    }

    fn pullback(&self, b: &mut ArrayBuilder, args: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        args.iter()
            .map(|&a| Some(b.pad(ct, self.start, b.shape(a).len())))
            .collect()
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        _: &[AVar],
        tangents: &[Option<AVar>],
        _: Shape,
    ) -> Option<AVar> {
        only(tangents).map(|t| b.slice(t, self.start, self.len))
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Linear
    }

    fn unroll(&self, _: &mut Builder, args: &[&[Var]], _: &[Shape], _: Shape) -> Vec<Var> {
        args.first()
            .and_then(|a| a.get(self.start..self.start + self.len))
            .map(<[Var]>::to_vec)
            .unwrap_or_default()
    }

    fn simplify(&self, b: &mut ArrayBuilder, args: &[AVar], out: Shape) -> Option<AVar> {
        let &[a] = args else { return None };
        if self.start == 0 && b.shape(a) == out {
            return Some(a);
        }
        b.fill_of(a).map(|c| b.fill(c, out))
    }

    fn view(&self, _: Shape, out: Shape) -> Option<(isize, usize, usize)> {
        Some((isize::try_from(self.start).ok()?, 0, out.len()))
    }
}

/// Zeros of length `len` with a vector written at `start`. Its transpose
/// is [`Slice`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pad {
    /// Where the operand's first element goes.
    pub start: usize,
    /// The value's length.
    pub len: usize,
}

impl ArrayPrimitive for Pad {
    fn name(&self) -> &'static str {
        "pad"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let [a] = operands(args, "pad: operands")?;
        let n = vector_len(a, "pad: operand")?;
        if self.start.checked_add(n).is_none_or(|e| e > self.len) {
            return Err(Error::IndexOutOfRange {
                what: "pad: end",
                index: self.start.saturating_add(n),
                len: self.len,
            });
        }
        Ok(Shape::Vector(self.len))
    }

    fn key(&self, words: &mut Vec<u64>) {
        words.push(self.start as u64);
    }

    fn params(&self) -> Vec<Param> {
        start_len_params(self.start, self.len)
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        let (start, len) = read_start_len(params)?;
        Some(Pad { start, len })
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        format!("pad {} at {}", args.join(", "), self.start)
    }

    fn eval(&self, args: &[&[f64]], _: &[Shape], out: &mut [f64], _: Shape, _: &mut Vec<f64>) {
        out.fill(0.0);
        if let [src] = args {
            if let Some(dst) = out.get_mut(self.start..self.start + src.len()) {
                dst.copy_from_slice(src);
            }
        }
    }

    fn pullback(&self, b: &mut ArrayBuilder, args: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        args.iter()
            .map(|&a| Some(b.slice(ct, self.start, b.shape(a).len())))
            .collect()
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        _: &[AVar],
        tangents: &[Option<AVar>],
        _: Shape,
    ) -> Option<AVar> {
        only(tangents).map(|t| b.pad(t, self.start, self.len))
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Linear
    }

    fn unroll(&self, b: &mut Builder, args: &[&[Var]], _: &[Shape], _: Shape) -> Vec<Var> {
        let a = args.first().copied().unwrap_or(&[]);
        let zero = b.constant(0.0);
        (0..self.len)
            .map(|i| {
                i.checked_sub(self.start)
                    .and_then(|j| a.get(j))
                    .copied()
                    .unwrap_or(zero)
            })
            .collect()
    }

    fn simplify(&self, b: &mut ArrayBuilder, args: &[AVar], out: Shape) -> Option<AVar> {
        let &[a] = args else { return None };
        (self.start == 0 && b.shape(a) == out).then_some(a)
    }

    fn view(&self, arg: Shape, _: Shape) -> Option<(isize, usize, usize)> {
        let shift = isize::try_from(self.start).ok()?.checked_neg()?;
        Some((shift, self.start, self.start.checked_add(arg.len())?))
    }
}

/// `outᵢ = a[idx[i]]`. Its transpose is [`ScatterAdd`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gather {
    /// The indices, each below the operand's length.
    pub idx: Arc<[u32]>,
    /// One more than the largest index (0 if there are none), computed
    /// once, so that copying the instruction checks it in O(1).
    pub bound: usize,
}

impl ArrayPrimitive for Gather {
    fn name(&self) -> &'static str {
        "gather"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let [a] = operands(args, "gather: operands")?;
        let n = vector_len(a, "gather: operand")?;
        if self.bound > n {
            return Err(Error::IndexOutOfRange {
                what: "gather: index",
                index: self.bound - 1,
                len: n,
            });
        }
        Ok(Shape::Vector(self.idx.len()))
    }

    fn key(&self, words: &mut Vec<u64>) {
        // The indices are shared: their address identifies them.
        words.push(self.idx.as_ptr() as u64);
    }

    fn params(&self) -> Vec<Param> {
        vec![Param::Ints(
            self.idx.iter().map(|&i| u64::from(i)).collect(),
        )]
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        let mut r = ParamReader::new(params);
        let idx = indices(r.ints()?)?;
        r.finish()?;
        let bound = idx.iter().map(|&i| i as usize + 1).max().unwrap_or(0);
        Some(Gather { idx, bound })
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        format!("gather {} at <{} values>", args.join(", "), self.idx.len())
    }

    fn eval(&self, args: &[&[f64]], _: &[Shape], out: &mut [f64], _: Shape, _: &mut Vec<f64>) {
        let [src] = args else { return };
        for (o, &j) in out.iter_mut().zip(self.idx.iter()) {
            *o = src.get(j as usize).copied().unwrap_or(0.0);
        }
    }

    fn pullback(&self, b: &mut ArrayBuilder, args: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        args.iter()
            .map(|&a| {
                let len = b.shape(a).len();
                Some(b.scatter_add_bounded(ct, self.idx.clone(), len, self.bound))
            })
            .collect()
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        _: &[AVar],
        tangents: &[Option<AVar>],
        _: Shape,
    ) -> Option<AVar> {
        let t = only(tangents)?;
        Some(b.gather_bounded(t, self.idx.clone(), self.bound))
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Linear
    }

    fn unroll(&self, b: &mut Builder, args: &[&[Var]], _: &[Shape], _: Shape) -> Vec<Var> {
        let a = args.first().copied().unwrap_or(&[]);
        self.idx
            .iter()
            .map(|&j| match a.get(j as usize) {
                Some(&v) => v,
                None => b.constant(0.0),
            })
            .collect()
    }

    fn simplify(&self, b: &mut ArrayBuilder, args: &[AVar], out: Shape) -> Option<AVar> {
        let &[a] = args else { return None };
        b.fill_of(a).map(|c| b.fill(c, out))
    }
}

/// `out[idx[i]] += aᵢ` from zeros of length `len`. Its transpose is
/// [`Gather`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScatterAdd {
    /// Where each element goes, each below `len`.
    pub idx: Arc<[u32]>,
    /// One more than the largest index (0 if there are none).
    pub bound: usize,
    /// The value's length.
    pub len: usize,
}

impl ArrayPrimitive for ScatterAdd {
    fn name(&self) -> &'static str {
        "scatter_add"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let [a] = operands(args, "scatter_add: operands")?;
        let n = vector_len(a, "scatter_add: operand")?;
        check_len("scatter_add: indices vs values", n, self.idx.len())?;
        if self.bound > self.len {
            return Err(Error::IndexOutOfRange {
                what: "scatter_add: index",
                index: self.bound - 1,
                len: self.len,
            });
        }
        Ok(Shape::Vector(self.len))
    }

    fn key(&self, words: &mut Vec<u64>) {
        words.push(self.idx.as_ptr() as u64);
    }

    fn params(&self) -> Vec<Param> {
        vec![
            Param::Ints(self.idx.iter().map(|&i| u64::from(i)).collect()),
            Param::Int(self.len as u64),
        ]
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        let mut r = ParamReader::new(params);
        let (idx, len) = (indices(r.ints()?)?, r.usize()?);
        r.finish()?;
        let bound = idx.iter().map(|&i| i as usize + 1).max().unwrap_or(0);
        Some(ScatterAdd { idx, bound, len })
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        format!(
            "scatter_add {} to <{} values>",
            args.join(", "),
            self.idx.len()
        )
    }

    fn eval(&self, args: &[&[f64]], _: &[Shape], out: &mut [f64], _: Shape, _: &mut Vec<f64>) {
        out.fill(0.0);
        let [src] = args else { return };
        for (&x, &j) in src.iter().zip(self.idx.iter()) {
            if let Some(o) = out.get_mut(j as usize) {
                *o += x;
            }
        }
    }

    fn pullback(&self, b: &mut ArrayBuilder, _: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        vec![Some(b.gather_bounded(ct, self.idx.clone(), self.bound))]
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        _: &[AVar],
        tangents: &[Option<AVar>],
        _: Shape,
    ) -> Option<AVar> {
        let t = only(tangents)?;
        Some(b.scatter_add_bounded(t, self.idx.clone(), self.len, self.bound))
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Linear
    }

    fn unroll(&self, b: &mut Builder, args: &[&[Var]], _: &[Shape], _: Shape) -> Vec<Var> {
        let a = args.first().copied().unwrap_or(&[]);
        let mut terms: Vec<Vec<Var>> = vec![Vec::new(); self.len];
        for (&x, &j) in a.iter().zip(self.idx.iter()) {
            if let Some(t) = terms.get_mut(j as usize) {
                t.push(x);
            }
        }
        terms.into_iter().map(|t| scalar_sum(b, t)).collect()
    }
}

impl ArrayBuilder {
    /// Elements `start .. start + len` of vector `a` ([`Slice`]).
    pub fn slice(&mut self, a: AVar, start: usize, len: usize) -> AVar {
        self.apply(Slice { start, len }, &[a])
    }

    /// Zeros of length `len` with vector `a` at `start` ([`Pad`]).
    pub fn pad(&mut self, a: AVar, start: usize, len: usize) -> AVar {
        self.apply(Pad { start, len }, &[a])
    }

    /// `out[i] = a[idx[i]]` ([`Gather`]).
    pub fn gather(&mut self, a: AVar, idx: Arc<[u32]>) -> AVar {
        let bound = index_bound(&idx);
        self.gather_bounded(a, idx, bound)
    }

    /// [`ArrayBuilder::gather`] with the indices' bound already known.
    pub(crate) fn gather_bounded(&mut self, a: AVar, idx: Arc<[u32]>, bound: usize) -> AVar {
        self.apply(Gather { idx, bound }, &[a])
    }

    /// `out[idx[i]] += a[i]` into zeros of length `len` ([`ScatterAdd`]).
    pub fn scatter_add(&mut self, a: AVar, idx: Arc<[u32]>, len: usize) -> AVar {
        let bound = index_bound(&idx);
        self.scatter_add_bounded(a, idx, len, bound)
    }

    /// [`ArrayBuilder::scatter_add`] with the indices' bound already known.
    pub(crate) fn scatter_add_bounded(
        &mut self,
        a: AVar,
        idx: Arc<[u32]>,
        len: usize,
        bound: usize,
    ) -> AVar {
        self.apply(ScatterAdd { idx, bound, len }, &[a])
    }
}

pub(super) fn examples(n: usize, all: &mut Vec<(ArrayPrim, Vec<Shape>)>) {
    let v = Shape::Vector(n);
    all.push((
        ArrayPrim::new(Slice {
            start: 1,
            len: n - 1,
        }),
        vec![v],
    ));
    all.push((
        ArrayPrim::new(Pad {
            start: 2,
            len: n + 3,
        }),
        vec![v],
    ));
    // Repeated and missing indices.
    let idx: Arc<[u32]> = (0..n + 2).map(|i| ((i * 7) % n) as u32).collect();
    let bound = index_bound(&idx);
    all.push((
        ArrayPrim::new(Gather {
            idx: idx.clone(),
            bound,
        }),
        vec![v],
    ));
    let len = n + 1;
    all.push((
        ArrayPrim::new(ScatterAdd { idx, bound, len }),
        vec![Shape::Vector(n + 2)],
    ));
}

/// Indices read back from their parameter, each fitting `u32`.
fn indices(v: &[u64]) -> Option<Arc<[u32]>> {
    v.iter().map(|&i| u32::try_from(i).ok()).collect()
}
