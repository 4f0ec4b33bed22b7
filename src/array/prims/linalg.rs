//! Linear algebra: products with a constant matrix (`M v`, `Mᵀ v`) and
//! the product of two traced matrices with either factor transposed.

use std::sync::Arc;

use super::{matrix_dims, only, operands, scalar_sum, vector_len};
use crate::array::ir::{
    AVar, ArrayBuilder, ArrayOp, ArrayPrim, ArrayPrimitive, Matrix, Shape, TaylorRule,
};
use crate::array::kernels::{matmul_into, matvec_into, MatMulDims};
use crate::array::{Param, ParamReader};
use crate::error::{check_len, Result};
use crate::program::{Builder, Var};

/// `M v` for a constant `rows × cols` matrix `M` (held by reference
/// count) and a vector `v` of `cols`. Its transpose is [`VecMat`].
#[derive(Clone, Debug, PartialEq)]
pub struct MatVec {
    /// The matrix.
    pub m: Arc<Matrix>,
}

impl ArrayPrimitive for MatVec {
    fn name(&self) -> &'static str {
        "matvec"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let [v] = operands(args, "matvec: operands")?;
        let n = vector_len(v, "matvec: vector")?;
        check_len("matvec: vector vs matrix columns", self.m.cols(), n)?;
        Ok(Shape::Vector(self.m.rows()))
    }

    fn key(&self, words: &mut Vec<u64>) {
        words.push(Arc::as_ptr(&self.m) as u64);
    }

    fn params(&self) -> Vec<Param> {
        matrix_params(&self.m)
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        Some(MatVec {
            m: matrix_of(params)?,
        })
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        let (r, c) = (self.m.rows(), self.m.cols());
        format!("matvec <{r}×{c} matrix> {}", args.join(", "))
    }

    fn eval(&self, args: &[&[f64]], _: &[Shape], out: &mut [f64], _: Shape, s: &mut Vec<f64>) {
        if let [v] = args {
            matvec_into(&self.m, v, false, s, out);
        }
    }

    fn pullback(&self, b: &mut ArrayBuilder, _: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        vec![Some(b.vecmat(self.m.clone(), ct))]
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        _: &[AVar],
        tangents: &[Option<AVar>],
        _: Shape,
    ) -> Option<AVar> {
        let t = only(tangents)?;
        Some(b.matvec(self.m.clone(), t))
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Linear
    }

    fn unroll(&self, b: &mut Builder, args: &[&[Var]], _: &[Shape], _: Shape) -> Vec<Var> {
        let v = args.first().copied().unwrap_or(&[]);
        (0..self.m.rows())
            .map(|i| {
                let terms: Vec<Var> = self
                    .m
                    .row(i)
                    .iter()
                    .zip(v)
                    .map(|(&c, &x)| b.scale(c, x))
                    .collect();
                scalar_sum(b, terms)
            })
            .collect()
    }
}

/// `Mᵀ v` for a constant `rows × cols` matrix `M` and a vector `v` of
/// `rows`. Its transpose is [`MatVec`].
#[derive(Clone, Debug, PartialEq)]
pub struct VecMat {
    /// The matrix.
    pub m: Arc<Matrix>,
}

impl ArrayPrimitive for VecMat {
    fn name(&self) -> &'static str {
        "vecmat"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let [v] = operands(args, "vecmat: operands")?;
        let n = vector_len(v, "vecmat: vector")?;
        check_len("vecmat: vector vs matrix rows", self.m.rows(), n)?;
        Ok(Shape::Vector(self.m.cols()))
    }

    fn key(&self, words: &mut Vec<u64>) {
        words.push(Arc::as_ptr(&self.m) as u64);
    }

    fn params(&self) -> Vec<Param> {
        matrix_params(&self.m)
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        Some(VecMat {
            m: matrix_of(params)?,
        })
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        let (r, c) = (self.m.rows(), self.m.cols());
        format!("vecmat <{r}×{c} matrix> {}", args.join(", "))
    }

    fn eval(&self, args: &[&[f64]], _: &[Shape], out: &mut [f64], _: Shape, s: &mut Vec<f64>) {
        if let [v] = args {
            matvec_into(&self.m, v, true, s, out);
        }
    }

    fn pullback(&self, b: &mut ArrayBuilder, _: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        vec![Some(b.matvec(self.m.clone(), ct))]
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        _: &[AVar],
        tangents: &[Option<AVar>],
        _: Shape,
    ) -> Option<AVar> {
        let t = only(tangents)?;
        Some(b.vecmat(self.m.clone(), t))
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Linear
    }

    fn unroll(&self, b: &mut Builder, args: &[&[Var]], _: &[Shape], _: Shape) -> Vec<Var> {
        let v = args.first().copied().unwrap_or(&[]);
        (0..self.m.cols())
            .map(|j| {
                let terms: Vec<Var> = (0..self.m.rows().min(v.len()))
                    .map(|i| b.scale(self.m.row(i)[j], v[i]))
                    .collect();
                scalar_sum(b, terms)
            })
            .collect()
    }
}

/// `op(a) · op(b)` for matrices, where `op(x)` is `xᵀ` if the flag is set
/// and `x` otherwise (the convention of BLAS `gemm`). Bilinear: the
/// pullback is two more products (`Ā = C̄ op(B)ᵀ`, `B̄ = op(A)ᵀ C̄`, each
/// transposed back where the factor was), the pushforward
/// `Ċ = op(Ȧ) op(B) + op(A) op(Ḃ)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatMul {
    /// Whether the left factor is transposed.
    pub transpose_a: bool,
    /// Whether the right factor is transposed.
    pub transpose_b: bool,
}

impl MatMul {
    /// The dimensions of the product of operands of shapes `a` and `b`.
    fn dims(&self, a: Shape, b: Shape) -> Option<MatMulDims> {
        match (a, b) {
            (Shape::Matrix(a_rows, a_cols), Shape::Matrix(b_rows, b_cols)) => Some(MatMulDims {
                a_rows,
                a_cols,
                b_rows,
                b_cols,
                transpose_a: self.transpose_a,
                transpose_b: self.transpose_b,
            }),
            _ => None,
        }
    }
}

impl ArrayPrimitive for MatMul {
    fn name(&self) -> &'static str {
        "matmul"
    }

    fn shape(&self, args: &[Shape]) -> Result<Shape> {
        let [a, b] = operands(args, "matmul: operands")?;
        let da = matrix_dims(a, "matmul: left factor")?;
        let db = matrix_dims(b, "matmul: right factor")?;
        let (m, k) = if self.transpose_a { (da.1, da.0) } else { da };
        let (k2, n) = if self.transpose_b { (db.1, db.0) } else { db };
        check_len(
            "matmul: columns of the left factor vs rows of the right",
            k,
            k2,
        )?;
        Ok(Shape::Matrix(m, n))
    }

    fn key(&self, words: &mut Vec<u64>) {
        words.push(u64::from(self.transpose_a) | (u64::from(self.transpose_b) << 1));
    }

    fn params(&self) -> Vec<Param> {
        vec![Param::Flag(self.transpose_a), Param::Flag(self.transpose_b)]
    }

    fn from_params(params: &[Param]) -> Option<Self> {
        let mut r = ParamReader::new(params);
        let (transpose_a, transpose_b) = (r.flag()?, r.flag()?);
        r.finish()?;
        Some(MatMul {
            transpose_a,
            transpose_b,
        })
    }

    fn print(&self, args: &[String], _: Shape) -> String {
        let t = |x: bool| if x { "ᵀ" } else { "" };
        match args {
            [a, b] => format!(
                "matmul {a}{} {b}{}",
                t(self.transpose_a),
                t(self.transpose_b)
            ),
            _ => format!("matmul {}", args.join(", ")),
        }
    }

    fn eval(
        &self,
        args: &[&[f64]],
        shapes: &[Shape],
        out: &mut [f64],
        _: Shape,
        scratch: &mut Vec<f64>,
    ) {
        if let ([a, b], [sa, sb]) = (args, shapes) {
            if let Some(d) = self.dims(*sa, *sb) {
                matmul_into(a, b, d, scratch, out);
            }
        }
    }

    fn pullback(&self, b: &mut ArrayBuilder, args: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
        let &[x, y] = args else { return Vec::new() };
        let (ta, tb) = (self.transpose_a, self.transpose_b);
        // C = op(X) op(Y): X̄ and Ȳ as products of C̄ and the other
        // factor, transposed as each case needs.
        let xbar = if ta {
            b.matmul(y, ct, tb, true)
        } else {
            b.matmul(ct, y, false, !tb)
        };
        let ybar = if tb {
            b.matmul(ct, x, true, ta)
        } else {
            b.matmul(x, ct, !ta, false)
        };
        vec![Some(xbar), Some(ybar)]
    }

    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        args: &[AVar],
        tangents: &[Option<AVar>],
        _: Shape,
    ) -> Option<AVar> {
        let (&[x, y], &[tx, ty]) = (args, tangents) else {
            return None;
        };
        let (ta, tb) = (self.transpose_a, self.transpose_b);
        // Ċ = op(Ẋ) op(Y) + op(X) op(Ẏ), the terms present.
        let dx = tx.map(|tx| b.matmul(tx, y, ta, tb));
        let dy = ty.map(|ty| b.matmul(x, ty, ta, tb));
        match (dx, dy) {
            (Some(u), Some(w)) => Some(b.add(u, w)),
            (u, w) => u.or(w),
        }
    }

    fn taylor(&self) -> TaylorRule {
        TaylorRule::Bilinear
    }

    fn unroll(&self, b: &mut Builder, args: &[&[Var]], shapes: &[Shape], out: Shape) -> Vec<Var> {
        let (&[x, y], &[sa, sb], Shape::Matrix(m, n)) = (args, shapes, out) else {
            return Vec::new();
        };
        let (Shape::Matrix(_, a_cols), Shape::Matrix(_, b_cols)) = (sa, sb) else {
            return Vec::new();
        };
        let k = if self.transpose_a {
            sa.len() / a_cols.max(1)
        } else {
            a_cols
        };
        let at = |i: usize, l: usize| {
            if self.transpose_a {
                x[l * a_cols + i]
            } else {
                x[i * a_cols + l]
            }
        };
        let bt = |l: usize, j: usize| {
            if self.transpose_b {
                y[j * b_cols + l]
            } else {
                y[l * b_cols + j]
            }
        };
        let mut out = Vec::with_capacity(m * n);
        for i in 0..m {
            for j in 0..n {
                let terms: Vec<Var> = (0..k).map(|l| b.mul(at(i, l), bt(l, j))).collect();
                out.push(scalar_sum(b, terms));
            }
        }
        out
    }

    fn simplify(&self, b: &mut ArrayBuilder, args: &[AVar], _: Shape) -> Option<AVar> {
        // A factor that is itself a transpose is folded into the flag.
        let &[x, y] = args else { return None };
        let (ta, tb) = (self.transpose_a, self.transpose_b);
        if let Some((_, &[inner])) = b.op(x).and_then(ArrayOp::prim::<super::Transpose>) {
            return Some(b.matmul(inner, y, !ta, tb));
        }
        if let Some((_, &[inner])) = b.op(y).and_then(ArrayOp::prim::<super::Transpose>) {
            return Some(b.matmul(x, inner, ta, !tb));
        }
        None
    }
}

impl ArrayBuilder {
    /// `M v` ([`MatVec`]).
    pub fn matvec(&mut self, m: Arc<Matrix>, v: AVar) -> AVar {
        self.apply(MatVec { m }, &[v])
    }

    /// `Mᵀ v` ([`VecMat`]).
    pub fn vecmat(&mut self, m: Arc<Matrix>, v: AVar) -> AVar {
        self.apply(VecMat { m }, &[v])
    }

    /// `op(a) · op(b)` for matrices, `op(x) = xᵀ` where the flag is set
    /// ([`MatMul`]). A factor that is itself a transpose is folded into
    /// the flag.
    pub fn matmul(&mut self, a: AVar, b: AVar, transpose_a: bool, transpose_b: bool) -> AVar {
        self.apply(
            MatMul {
                transpose_a,
                transpose_b,
            },
            &[a, b],
        )
    }
}

pub(super) fn examples(n: usize, all: &mut Vec<(ArrayPrim, Vec<Shape>)>) {
    let data: Vec<f64> = (0..3 * n)
        .map(|i| ((i * 5 % 7) as f64 - 3.0) / 4.0)
        .collect();
    if let Ok(m) = Matrix::new(3, n, data) {
        let m = Arc::new(m);
        all.push((
            ArrayPrim::new(MatVec { m: m.clone() }),
            vec![Shape::Vector(n)],
        ));
        all.push((ArrayPrim::new(VecMat { m }), vec![Shape::Vector(3)]));
    }
    for (transpose_a, transpose_b) in [(false, false), (true, false), (false, true), (true, true)] {
        let a = if transpose_a {
            Shape::Matrix(n, 2)
        } else {
            Shape::Matrix(2, n)
        };
        let b = if transpose_b {
            Shape::Matrix(3, n)
        } else {
            Shape::Matrix(n, 3)
        };
        all.push((
            ArrayPrim::new(MatMul {
                transpose_a,
                transpose_b,
            }),
            vec![a, b],
        ));
    }
}

/// A constant matrix as parameters: rows, columns, entries row-major.
fn matrix_params(m: &Matrix) -> Vec<Param> {
    vec![
        Param::Int(m.rows() as u64),
        Param::Int(m.cols() as u64),
        Param::Floats(m.as_slice().to_vec()),
    ]
}

/// The matrix [`matrix_params`] wrote.
fn matrix_of(params: &[Param]) -> Option<Arc<Matrix>> {
    let mut r = ParamReader::new(params);
    let (rows, cols, data) = (r.usize()?, r.usize()?, r.floats()?);
    r.finish()?;
    Matrix::new(rows, cols, data.to_vec()).ok().map(Arc::new)
}
