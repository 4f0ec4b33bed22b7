//! The array IR: instructions over arrays of `f64`, with scalar
//! [`Program`]s as the body language of `map`.

use std::fmt;
use std::sync::Arc;

use rustc_hash::FxHashMap;

pub(crate) use super::shape::Shape;
use crate::error::{check_len, Error, Result};
use crate::program::{Builder, Op, Program, Var};

/// A dense, row-major matrix of constant data, shared by reference count:
/// programs hold it by pointer and never copy it into their instructions.
///
/// # Example
///
/// ```
/// use optic_ad::array::Matrix;
///
/// let m = Matrix::new(2, 3, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
/// assert_eq!((m.rows(), m.cols()), (2, 3));
/// assert_eq!(m.row(1), &[4.0, 5.0, 6.0]);
/// assert!(Matrix::new(2, 2, vec![1.0]).is_err());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    data: Arc<[f64]>,
}

impl Matrix {
    /// A `rows × cols` matrix from its entries in row-major order.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] if `data.len() != rows · cols`.
    pub fn new(rows: usize, cols: usize, data: Vec<f64>) -> Result<Matrix> {
        if rows.checked_mul(cols) != Some(data.len()) {
            return Err(Error::LengthMismatch {
                what: "Matrix::new: rows × cols entries",
                expected: rows.saturating_mul(cols),
                got: data.len(),
            });
        }
        Ok(Matrix {
            rows,
            cols,
            data: data.into(),
        })
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row `i` (`cols()` entries); empty if `i >= rows()`.
    pub fn row(&self, i: usize) -> &[f64] {
        let Some(start) = i.checked_mul(self.cols).filter(|_| i < self.rows) else {
            return &[];
        };
        &self.data[start..start + self.cols]
    }

    /// All entries, row-major.
    pub fn as_slice(&self) -> &[f64] {
        &self.data
    }
}

/// A value of an [`ArrayProgram`]: the result of the instruction at this
/// index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AVar(pub(crate) u32);

impl AVar {
    /// The index of the instruction that defines this value.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One instruction of an [`ArrayProgram`]. The shape of its value is
/// [`ArrayProgram::shape`].
///
/// The rules of each (value, pullback, pushforward) are in the book's
/// chapter "Arrays".
#[derive(Clone, Debug)]
pub enum ArrayOp {
    /// The `k`-th input.
    Input(u32),
    /// Every element equal to `c`. `−0.0` is the structural zero ("no
    /// dependence"), as in [`Builder::zero`].
    Fill(f64),
    /// Constant data (a vector, or a matrix row-major), shared by reference
    /// count.
    Const(Arc<[f64]>),
    /// Elementwise `body` over the arguments: scalar arguments are
    /// broadcast, vector arguments all have the value's length. The value is
    /// the body's output 0; its output `k > 0` is the [`ArrayOp::MapOut`]
    /// `k` instructions later.
    Map {
        /// A scalar program with one input per argument.
        body: Arc<Program>,
        /// The arguments.
        args: Vec<AVar>,
    },
    /// Output `k` of the [`ArrayOp::Map`] `k` instructions earlier.
    MapOut(u32),
    /// The sum of the elements (a scalar).
    Sum(AVar),
    /// A scalar repeated to this value's length.
    Broadcast(AVar),
    /// Elements `start .. start + len` of a vector, `len` this value's
    /// length.
    Slice {
        /// The vector.
        a: AVar,
        /// First element taken.
        start: usize,
    },
    /// Zeros of this value's length with `a` written at `start`: the
    /// transpose of [`ArrayOp::Slice`].
    Pad {
        /// The vector placed.
        a: AVar,
        /// Where its first element goes.
        start: usize,
    },
    /// `out[i] = a[idx[i]]`.
    Gather {
        /// The vector read.
        a: AVar,
        /// The indices, each below `a`'s length.
        idx: Arc<[u32]>,
        /// One more than the largest index (0 if there are none), computed
        /// once, so that copying the instruction checks it in O(1).
        bound: usize,
    },
    /// `out[idx[i]] += a[i]`, from zeros of this value's length: the
    /// transpose of [`ArrayOp::Gather`].
    ScatterAdd {
        /// The vector of contributions.
        a: AVar,
        /// Where each goes, each below this value's length.
        idx: Arc<[u32]>,
        /// One more than the largest index (0 if there are none).
        bound: usize,
    },
    /// `M v` for a constant `rows × cols` matrix and a vector of `cols`.
    MatVec {
        /// The matrix.
        m: Arc<Matrix>,
        /// The vector.
        v: AVar,
    },
    /// `Mᵀ v` for a constant `rows × cols` matrix and a vector of `rows`:
    /// the transpose of [`ArrayOp::MatVec`].
    VecMat {
        /// The matrix.
        m: Arc<Matrix>,
        /// The vector.
        v: AVar,
    },
    /// The elements of `a` in row-major order, as this value's shape (of
    /// the same number of elements). Its own transpose: the pullback
    /// reshapes back.
    Reshape(AVar),
    /// `aᵀ` for a matrix `a`.
    Transpose(AVar),
    /// `op(a) · op(b)` for matrices, where `op(x)` is `xᵀ` if the flag is
    /// set and `x` otherwise (the convention of BLAS `gemm`).
    MatMul {
        /// The left factor.
        a: AVar,
        /// The right factor.
        b: AVar,
        /// Whether the left factor is transposed.
        transpose_a: bool,
        /// Whether the right factor is transposed.
        transpose_b: bool,
    },
    /// The sums of a matrix along an axis, as in NumPy: `axis = 0` sums
    /// over the rows (one value per column), `axis = 1` over the columns
    /// (one value per row).
    SumAxis {
        /// The matrix.
        a: AVar,
        /// 0 or 1.
        axis: usize,
    },
    /// A vector repeated along a new axis into this value's matrix shape:
    /// `axis = 0` repeats a row (`cols` elements) down the rows, `axis = 1`
    /// a column (`rows` elements) across the columns. The transpose of
    /// [`ArrayOp::SumAxis`] with the same axis.
    BroadcastAxis {
        /// The vector.
        a: AVar,
        /// 0 or 1.
        axis: usize,
    },
}

impl ArrayOp {
    /// The array operands, in order.
    pub fn operands(&self) -> Vec<AVar> {
        match self {
            ArrayOp::Input(_) | ArrayOp::Fill(_) | ArrayOp::Const(_) | ArrayOp::MapOut(_) => {
                Vec::new()
            }
            ArrayOp::Map { args, .. } => args.clone(),
            ArrayOp::Sum(a) | ArrayOp::Broadcast(a) => vec![*a],
            ArrayOp::Slice { a, .. }
            | ArrayOp::Pad { a, .. }
            | ArrayOp::Gather { a, .. }
            | ArrayOp::ScatterAdd { a, .. } => vec![*a],
            ArrayOp::MatVec { v, .. } | ArrayOp::VecMat { v, .. } => vec![*v],
            ArrayOp::Reshape(a)
            | ArrayOp::Transpose(a)
            | ArrayOp::SumAxis { a, .. }
            | ArrayOp::BroadcastAxis { a, .. } => vec![*a],
            ArrayOp::MatMul { a, b, .. } => vec![*a, *b],
        }
    }

    /// Calls `f` on each operand, in order (without allocating).
    pub(crate) fn for_each_operand(&self, mut f: impl FnMut(AVar)) {
        match self {
            ArrayOp::Input(_) | ArrayOp::Fill(_) | ArrayOp::Const(_) | ArrayOp::MapOut(_) => {}
            ArrayOp::Map { args, .. } => args.iter().for_each(|&a| f(a)),
            ArrayOp::Sum(a)
            | ArrayOp::Broadcast(a)
            | ArrayOp::Slice { a, .. }
            | ArrayOp::Pad { a, .. }
            | ArrayOp::Gather { a, .. }
            | ArrayOp::ScatterAdd { a, .. }
            | ArrayOp::MatVec { v: a, .. }
            | ArrayOp::VecMat { v: a, .. }
            | ArrayOp::Reshape(a)
            | ArrayOp::Transpose(a)
            | ArrayOp::SumAxis { a, .. }
            | ArrayOp::BroadcastAxis { a, .. } => f(*a),
            ArrayOp::MatMul { a, b, .. } => {
                f(*a);
                f(*b);
            }
        }
    }
}

/// A comparison on two scalar values recorded while tracing: at the trace
/// point `a.partial_cmp(b)` was `ordering`; evaluation checks it again.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ArrayGuard {
    /// Left operand (a scalar).
    pub a: AVar,
    /// Right operand (a scalar).
    pub b: AVar,
    /// The ordering at the trace point.
    pub ordering: Option<std::cmp::Ordering>,
}

/// A program over arrays: SSA instructions ([`ArrayOp`]) whose values are
/// scalars or vectors of `f64`, with inputs and outputs of given
/// [`Shape`]s. Built by [`crate::array::trace`] or an [`ArrayBuilder`];
/// transformed by [`crate::array::reverse_joint`] and
/// [`crate::array::forward`]; run by [`ArrayProgram::eval`] and
/// [`crate::array::ArrayWorkspace`]. It prints one instruction per line,
/// with the shape of each value and map bodies as scalar programs.
///
/// # Example
///
/// ```
/// use optic_ad::array::{trace, Array};
///
/// let p = trace(|x: &[_]| Ok(x[0].map(|t| t * t).sum()), &[&[1.0, 2.0, 3.0]]).unwrap();
/// let text = p.to_string();
/// assert!(text.starts_with("array program (x0: vector[3]) -> (%2)"));
/// assert!(text.contains("%2: scalar = sum %1"));
/// ```
#[derive(Clone, Debug)]
pub struct ArrayProgram {
    pub(crate) input_shapes: Vec<Shape>,
    pub(crate) ops: Vec<ArrayOp>,
    pub(crate) shapes: Vec<Shape>,
    pub(crate) outputs: Vec<AVar>,
    pub(crate) guards: Vec<ArrayGuard>,
    pub(crate) defect: Option<Error>,
    /// Identifies the program for the workspaces planned for it (clones
    /// share it: they are the same program).
    pub(crate) id: u64,
}

impl fmt::Display for ArrayProgram {
    /// Prints one instruction per line with the shape of its value, map
    /// bodies as indented scalar programs, e.g.
    ///
    /// ```text
    /// array program (x0: vector[3]) -> (%2)
    ///   %1: vector[3] = map x0 with
    ///     program (x0) -> (%1)
    ///       %1 = x0 * x0
    ///       return %1
    ///   %2: scalar = sum %1
    ///   return %2
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |v: AVar| match self.ops.get(v.index()) {
            Some(ArrayOp::Input(k)) => format!("x{k}"),
            _ => format!("%{}", v.index()),
        };
        let ins: Vec<String> = self
            .input_shapes
            .iter()
            .enumerate()
            .map(|(k, s)| format!("x{k}: {s}"))
            .collect();
        let outs: Vec<String> = self.outputs.iter().map(|&o| name(o)).collect();
        writeln!(
            f,
            "array program ({}) -> ({})",
            ins.join(", "),
            outs.join(", ")
        )?;
        let data = |len: usize| format!("<{len} values>");
        for (i, op) in self.ops.iter().enumerate() {
            let rhs = match op {
                ArrayOp::Input(_) => continue,
                ArrayOp::Fill(c) => format!("fill {c}"),
                ArrayOp::Const(d) => format!("const {}", data(d.len())),
                ArrayOp::Map { body, args } => {
                    let a: Vec<String> = args.iter().map(|&v| name(v)).collect();
                    let body = body.to_string().replace('\n', "\n    ");
                    format!("map {} with\n    {body}", a.join(", "))
                }
                ArrayOp::MapOut(k) => format!("output {k} of %{}", i - *k as usize),
                ArrayOp::Sum(a) => format!("sum {}", name(*a)),
                ArrayOp::Broadcast(a) => format!("broadcast {}", name(*a)),
                ArrayOp::Slice { a, start } => {
                    let len = self.shapes[i].len();
                    format!("{}[{start}..{}]", name(*a), start + len)
                }
                ArrayOp::Pad { a, start } => format!("pad {} at {start}", name(*a)),
                ArrayOp::Gather { a, idx, .. } => {
                    format!("gather {} at {}", name(*a), data(idx.len()))
                }
                ArrayOp::ScatterAdd { a, idx, .. } => {
                    format!("scatter_add {} to {}", name(*a), data(idx.len()))
                }
                ArrayOp::MatVec { m, v } => {
                    format!("matvec <{}×{} matrix> {}", m.rows(), m.cols(), name(*v))
                }
                ArrayOp::VecMat { m, v } => {
                    format!("vecmat <{}×{} matrix> {}", m.rows(), m.cols(), name(*v))
                }
                ArrayOp::Reshape(a) => format!("reshape {}", name(*a)),
                ArrayOp::Transpose(a) => format!("transpose {}", name(*a)),
                ArrayOp::MatMul {
                    a,
                    b,
                    transpose_a,
                    transpose_b,
                } => {
                    let t = |x: bool| if x { "ᵀ" } else { "" };
                    format!(
                        "matmul {}{} {}{}",
                        name(*a),
                        t(*transpose_a),
                        name(*b),
                        t(*transpose_b)
                    )
                }
                ArrayOp::SumAxis { a, axis } => format!("sum {} along axis {axis}", name(*a)),
                ArrayOp::BroadcastAxis { a, axis } => {
                    format!("broadcast {} along axis {axis}", name(*a))
                }
            };
            writeln!(f, "  %{i}: {} = {rhs}", self.shapes[i])?;
        }
        for g in &self.guards {
            let rel = crate::program::fmt::relation(g.ordering);
            writeln!(f, "  guard {} {rel} {}", name(g.a), name(g.b))?;
        }
        write!(f, "  return {}", outs.join(", "))
    }
}

static NEXT_PROGRAM_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A fresh program identifier.
pub(crate) fn fresh_id() -> u64 {
    NEXT_PROGRAM_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl ArrayProgram {
    /// The shapes of the inputs, in order.
    pub fn input_shapes(&self) -> &[Shape] {
        &self.input_shapes
    }

    /// The shapes of the outputs, in order.
    pub fn output_shapes(&self) -> Vec<Shape> {
        self.outputs.iter().map(|o| self.shape(*o)).collect()
    }

    /// The instructions.
    pub fn ops(&self) -> &[ArrayOp] {
        &self.ops
    }

    /// The output values.
    pub fn outputs(&self) -> &[AVar] {
        &self.outputs
    }

    /// The guards.
    pub fn guards(&self) -> &[ArrayGuard] {
        &self.guards
    }

    /// The shape of value `v`.
    pub fn shape(&self, v: AVar) -> Shape {
        self.shapes.get(v.index()).copied().unwrap_or(Shape::Scalar)
    }

    /// Number of instructions. It does not grow with the data: a map over
    /// a million elements is one instruction.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether there are no instructions.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The total number of instructions in the map bodies (each counted
    /// once per map).
    pub fn body_len(&self) -> usize {
        self.ops
            .iter()
            .map(|op| match op {
                ArrayOp::Map { body, .. } => body.len(),
                _ => 0,
            })
            .sum()
    }

    /// Copies `self` into `b`, input `k` becoming `inputs[k]`; returns the
    /// value map. Guards are copied.
    pub(crate) fn inline_into(&self, b: &mut ArrayBuilder, inputs: &[AVar]) -> Vec<AVar> {
        self.inline_with(b, inputs, |b, _, body, args| b.map(body.clone(), args))
    }

    /// [`ArrayProgram::inline_into`] with each map emitted by
    /// `emit(builder, index, body, mapped arguments)`, which returns one
    /// value per body output.
    pub(crate) fn inline_with(
        &self,
        b: &mut ArrayBuilder,
        inputs: &[AVar],
        mut emit: impl FnMut(&mut ArrayBuilder, usize, &Arc<Program>, &[AVar]) -> Vec<AVar>,
    ) -> Vec<AVar> {
        if let Some(e) = &self.defect {
            b.poison(e.clone());
        }
        let mut map: Vec<AVar> = Vec::with_capacity(self.ops.len());
        let mut i = 0;
        while i < self.ops.len() {
            let m = |v: &AVar| map[v.index()];
            match &self.ops[i] {
                ArrayOp::Input(k) => map.push(inputs[*k as usize]),
                ArrayOp::Map { body, args } => {
                    let args: Vec<AVar> = args.iter().map(m).collect();
                    let outs = emit(b, i, body, &args);
                    let n_out = body.n_outputs().max(1);
                    for k in 0..n_out {
                        map.push(outs.get(k).copied().unwrap_or(AVar(0)));
                    }
                    i += n_out;
                    continue;
                }
                op => {
                    let shape = self.shapes[i];
                    let v = b.copy_op(op, shape, &map);
                    map.push(v);
                }
            }
            i += 1;
        }
        for g in &self.guards {
            b.guard(map[g.a.index()], map[g.b.index()], g.ordering);
        }
        map
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

/// CSE key of an instruction other than a map (maps are keyed by body
/// pointer and arguments).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Fill(u64, Shape),
    Sum(AVar),
    Broadcast(AVar, usize),
    Slice(AVar, usize, usize),
    Pad(AVar, usize, usize),
    Gather(AVar, usize),
    ScatterAdd(AVar, usize, usize),
    MatVec(AVar, usize),
    VecMat(AVar, usize),
    Reshape(AVar, Shape),
    Transpose(AVar),
    MatMul(AVar, AVar, bool, bool),
    SumAxis(AVar, usize),
    BroadcastAxis(AVar, usize, Shape),
    Map(usize, Vec<AVar>),
}

/// Builds an [`ArrayProgram`] one instruction at a time, simplifying as it
/// goes:
///
/// * constants (`Fill`) and broadcast scalars passed to a map fold into its
///   body, and repeated arguments are merged, so the body sees each
///   distinct value once;
/// * a map output that is a constant or an argument of the body becomes
///   that constant or argument;
/// * linear operations of structural zeros are structural zeros;
/// * identical instructions are shared (CSE).
///
/// Shape errors poison the builder: [`ArrayBuilder::finish`] returns the
/// first one.
#[derive(Debug, Default)]
pub struct ArrayBuilder {
    input_shapes: Vec<Shape>,
    ops: Vec<ArrayOp>,
    shapes: Vec<Shape>,
    guards: Vec<ArrayGuard>,
    cse: FxHashMap<Key, AVar>,
    error: Option<Error>,
}

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
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// The shape of `v`.
    pub fn shape(&self, v: AVar) -> Shape {
        self.shapes.get(v.index()).copied().unwrap_or(Shape::Scalar)
    }

    /// Number of instructions so far.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether there are no instructions yet.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub(crate) fn ops(&self) -> &[ArrayOp] {
        &self.ops
    }

    /// Records the first error; later instructions are still accepted so
    /// that callers need not check every step.
    pub(crate) fn poison(&mut self, e: Error) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }

    fn push(&mut self, op: ArrayOp, shape: Shape) -> AVar {
        let v = AVar(self.ops.len() as u32);
        self.ops.push(op);
        self.shapes.push(shape);
        v
    }

    fn push_cse(&mut self, key: Key, op: ArrayOp, shape: Shape) -> AVar {
        if let Some(&v) = self.cse.get(&key) {
            return v;
        }
        let v = self.push(op, shape);
        self.cse.insert(key, v);
        v
    }

    /// A new input of the given shape.
    pub fn input(&mut self, shape: Shape) -> AVar {
        let k = self.input_shapes.len() as u32;
        self.input_shapes.push(shape);
        self.push(ArrayOp::Input(k), shape)
    }

    /// Every element `c`.
    pub fn fill(&mut self, c: f64, shape: Shape) -> AVar {
        self.push_cse(Key::Fill(c.to_bits(), shape), ArrayOp::Fill(c), shape)
    }

    /// The structural zero of a shape.
    pub fn zero(&mut self, shape: Shape) -> AVar {
        self.fill(crate::program::ir::STRUCTURAL_ZERO, shape)
    }

    /// The constant `c` if `v` is a `Fill`.
    pub(crate) fn fill_of(&self, v: AVar) -> Option<f64> {
        match self.ops.get(v.index()) {
            Some(ArrayOp::Fill(c)) => Some(*c),
            _ => None,
        }
    }

    /// Whether `v` is a structural zero.
    pub fn is_zero(&self, v: AVar) -> bool {
        self.fill_of(v)
            .is_some_and(|c| c.to_bits() == crate::program::ir::STRUCTURAL_ZERO.to_bits())
    }

    /// Constant data (a vector).
    pub fn constant(&mut self, data: Arc<[f64]>) -> AVar {
        let n = data.len();
        self.push(ArrayOp::Const(data), Shape::Vector(n))
    }

    /// Constant data of a given shape (row-major for a matrix).
    pub fn constant_shaped(&mut self, data: Arc<[f64]>, shape: Shape) -> AVar {
        if data.len() != shape.len() {
            self.poison(Error::LengthMismatch {
                what: "constant: data vs shape",
                expected: shape.len(),
                got: data.len(),
            });
            return self.zero(shape);
        }
        self.push(ArrayOp::Const(data), shape)
    }

    /// Records a guard on two scalars.
    pub fn guard(&mut self, a: AVar, b: AVar, ordering: Option<std::cmp::Ordering>) {
        if self.shape(a) != Shape::Scalar || self.shape(b) != Shape::Scalar {
            self.poison(Error::ShapeMismatch {
                what: "guard operand",
                expected: Shape::Scalar,
                got: self.shape(a),
            });
            return;
        }
        self.guards.push(ArrayGuard { a, b, ordering });
    }

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
            if let Some(ArrayOp::Broadcast(s)) = self.ops.get(a.index()) {
                a = *s;
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
            let m = body.inline_into(&mut sb, &inputs);
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
        let key = Key::Map(Arc::as_ptr(&body) as usize, new_args.clone());
        let first = if let Some(&v) = self.cse.get(&key) {
            v
        } else {
            let n = body.n_outputs();
            let v = self.push(
                ArrayOp::Map {
                    body: body.clone(),
                    args: new_args,
                },
                map_shape,
            );
            for k in 1..n {
                self.push(ArrayOp::MapOut(k as u32), map_shape);
            }
            self.cse.insert(key, v);
            v
        };
        for (j, &k) in real.iter().enumerate() {
            let v = AVar(first.0 + j as u32);
            result[k] = if map_shape == shape {
                v
            } else {
                self.broadcast(v, shape)
            };
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

    /// The sum of the elements of `a`, a scalar.
    pub fn sum(&mut self, a: AVar) -> AVar {
        if self.shape(a) == Shape::Scalar {
            return a;
        }
        if self.is_zero(a) {
            return self.zero(Shape::Scalar);
        }
        self.push_cse(Key::Sum(a), ArrayOp::Sum(a), Shape::Scalar)
    }

    /// A scalar repeated to `shape`.
    pub fn broadcast(&mut self, s: AVar, shape: Shape) -> AVar {
        if self.shape(s) == shape {
            return s;
        }
        if self.shape(s) != Shape::Scalar {
            self.poison(Error::ShapeMismatch {
                what: "broadcast: operand",
                expected: Shape::Scalar,
                got: self.shape(s),
            });
            return self.zero(shape);
        }
        if let Some(c) = self.fill_of(s) {
            return self.fill(c, shape);
        }
        self.push_cse(Key::Broadcast(s, shape.len()), ArrayOp::Broadcast(s), shape)
    }

    fn vector_len(&mut self, a: AVar, what: &'static str) -> Option<usize> {
        match self.shape(a) {
            Shape::Vector(n) => Some(n),
            s => {
                self.poison(Error::ShapeMismatch {
                    what,
                    expected: Shape::Vector(0),
                    got: s,
                });
                None
            }
        }
    }

    fn matrix_dims(&mut self, a: AVar, what: &'static str) -> Option<(usize, usize)> {
        match self.shape(a) {
            Shape::Matrix(r, c) => Some((r, c)),
            s => {
                self.poison(Error::ShapeMismatch {
                    what,
                    expected: Shape::Matrix(0, 0),
                    got: s,
                });
                None
            }
        }
    }

    /// The elements of `a`, row-major, as `shape` (of the same number of
    /// elements): a vector as a matrix, a matrix as a vector, or a matrix
    /// as another matrix.
    pub fn reshape(&mut self, a: AVar, shape: Shape) -> AVar {
        if self.shape(a) == shape {
            return a;
        }
        if self.shape(a).len() != shape.len() {
            self.poison(Error::LengthMismatch {
                what: "reshape: elements",
                expected: shape.len(),
                got: self.shape(a).len(),
            });
            return self.zero(shape);
        }
        if let Some(c) = self.fill_of(a) {
            return self.fill(c, shape);
        }
        match self.ops.get(a.index()) {
            Some(&ArrayOp::Reshape(x)) => return self.reshape(x, shape),
            // Constant data of the new shape: the same shared buffer.
            Some(ArrayOp::Const(d)) => {
                let d = d.clone();
                return self.constant_shaped(d, shape);
            }
            _ => {}
        }
        self.push_cse(Key::Reshape(a, shape), ArrayOp::Reshape(a), shape)
    }

    /// `aᵀ` for a matrix `a`.
    pub fn transpose(&mut self, a: AVar) -> AVar {
        let Some((r, c)) = self.matrix_dims(a, "transpose: operand") else {
            return self.zero(Shape::Scalar);
        };
        let out = Shape::Matrix(c, r);
        if let Some(c) = self.fill_of(a) {
            return self.fill(c, out);
        }
        if let Some(&ArrayOp::Transpose(x)) = self.ops.get(a.index()) {
            return x;
        }
        // A row or a column: the same elements in the same order.
        if r <= 1 || c <= 1 {
            return self.reshape(a, out);
        }
        self.push_cse(Key::Transpose(a), ArrayOp::Transpose(a), out)
    }

    /// `op(a) · op(b)` for matrices, `op(x) = xᵀ` where the flag is set.
    /// A factor that is itself a transpose is folded into the flag.
    pub fn matmul(&mut self, a: AVar, b: AVar, transpose_a: bool, transpose_b: bool) -> AVar {
        let (Some(da), Some(db)) = (
            self.matrix_dims(a, "matmul: left factor"),
            self.matrix_dims(b, "matmul: right factor"),
        ) else {
            return self.zero(Shape::Scalar);
        };
        let (m, k) = if transpose_a { (da.1, da.0) } else { da };
        let (k2, n) = if transpose_b { (db.1, db.0) } else { db };
        let out = Shape::Matrix(m, n);
        if k != k2 {
            self.poison(Error::LengthMismatch {
                what: "matmul: columns of the left factor vs rows of the right",
                expected: k,
                got: k2,
            });
            return self.zero(out);
        }
        if self.is_zero(a) || self.is_zero(b) {
            return self.zero(out);
        }
        if let Some(&ArrayOp::Transpose(x)) = self.ops.get(a.index()) {
            return self.matmul(x, b, !transpose_a, transpose_b);
        }
        if let Some(&ArrayOp::Transpose(x)) = self.ops.get(b.index()) {
            return self.matmul(a, x, transpose_a, !transpose_b);
        }
        self.push_cse(
            Key::MatMul(a, b, transpose_a, transpose_b),
            ArrayOp::MatMul {
                a,
                b,
                transpose_a,
                transpose_b,
            },
            out,
        )
    }

    /// The sums of matrix `a` along `axis` (0: one per column, 1: one per
    /// row).
    pub fn sum_axis(&mut self, a: AVar, axis: usize) -> AVar {
        let Some((r, c)) = self.matrix_dims(a, "sum_axis: operand") else {
            return self.zero(Shape::Scalar);
        };
        let out = match axis {
            0 => Shape::Vector(c),
            1 => Shape::Vector(r),
            _ => {
                self.poison(Error::IndexOutOfRange {
                    what: "sum_axis: axis",
                    index: axis,
                    len: 2,
                });
                return self.zero(Shape::Scalar);
            }
        };
        if self.is_zero(a) {
            return self.zero(out);
        }
        self.push_cse(Key::SumAxis(a, axis), ArrayOp::SumAxis { a, axis }, out)
    }

    /// Vector `v` repeated along `axis` into a `rows × cols` matrix
    /// (axis 0: `v` is a row of `cols` elements; axis 1: a column of
    /// `rows`).
    pub fn broadcast_axis(&mut self, v: AVar, axis: usize, rows: usize, cols: usize) -> AVar {
        let out = Shape::Matrix(rows, cols);
        let Some(n) = self.vector_len(v, "broadcast_axis: operand") else {
            return self.zero(out);
        };
        let need = match axis {
            0 => cols,
            1 => rows,
            _ => {
                self.poison(Error::IndexOutOfRange {
                    what: "broadcast_axis: axis",
                    index: axis,
                    len: 2,
                });
                return self.zero(out);
            }
        };
        if n != need {
            self.poison(Error::LengthMismatch {
                what: "broadcast_axis: vector vs matrix",
                expected: need,
                got: n,
            });
            return self.zero(out);
        }
        if let Some(c) = self.fill_of(v) {
            return self.fill(c, out);
        }
        self.push_cse(
            Key::BroadcastAxis(v, axis, out),
            ArrayOp::BroadcastAxis { a: v, axis },
            out,
        )
    }

    /// Elements `start .. start + len` of vector `a`.
    pub fn slice(&mut self, a: AVar, start: usize, len: usize) -> AVar {
        let out = Shape::Vector(len);
        let Some(n) = self.vector_len(a, "slice: operand") else {
            return self.zero(out);
        };
        if start.checked_add(len).is_none_or(|e| e > n) {
            self.poison(Error::IndexOutOfRange {
                what: "slice: end",
                index: start.saturating_add(len),
                len: n,
            });
            return self.zero(out);
        }
        if start == 0 && len == n {
            return a;
        }
        if let Some(c) = self.fill_of(a) {
            return self.fill(c, out);
        }
        self.push_cse(Key::Slice(a, start, len), ArrayOp::Slice { a, start }, out)
    }

    /// Zeros of length `len` with vector `a` at `start`.
    pub fn pad(&mut self, a: AVar, start: usize, len: usize) -> AVar {
        let out = Shape::Vector(len);
        let Some(n) = self.vector_len(a, "pad: operand") else {
            return self.zero(out);
        };
        if start.checked_add(n).is_none_or(|e| e > len) {
            self.poison(Error::IndexOutOfRange {
                what: "pad: end",
                index: start.saturating_add(n),
                len,
            });
            return self.zero(out);
        }
        if start == 0 && n == len {
            return a;
        }
        if self.is_zero(a) {
            return self.zero(out);
        }
        self.push_cse(Key::Pad(a, start, len), ArrayOp::Pad { a, start }, out)
    }

    /// `out[i] = a[idx[i]]`.
    pub fn gather(&mut self, a: AVar, idx: Arc<[u32]>) -> AVar {
        let bound = index_bound(&idx);
        self.gather_bounded(a, idx, bound)
    }

    /// [`ArrayBuilder::gather`] with the indices' bound already known.
    pub(crate) fn gather_bounded(&mut self, a: AVar, idx: Arc<[u32]>, bound: usize) -> AVar {
        let out = Shape::Vector(idx.len());
        let Some(n) = self.vector_len(a, "gather: operand") else {
            return self.zero(out);
        };
        if bound > n {
            self.poison(Error::IndexOutOfRange {
                what: "gather: index",
                index: bound - 1,
                len: n,
            });
            return self.zero(out);
        }
        if let Some(c) = self.fill_of(a) {
            return self.fill(c, out);
        }
        let key = Key::Gather(a, idx.as_ptr() as usize);
        self.push_cse(key, ArrayOp::Gather { a, idx, bound }, out)
    }

    /// `out[idx[i]] += a[i]` into zeros of length `len`.
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
        let out = Shape::Vector(len);
        let Some(n) = self.vector_len(a, "scatter_add: operand") else {
            return self.zero(out);
        };
        if n != idx.len() {
            self.poison(Error::LengthMismatch {
                what: "scatter_add: indices vs values",
                expected: n,
                got: idx.len(),
            });
            return self.zero(out);
        }
        if bound > len {
            self.poison(Error::IndexOutOfRange {
                what: "scatter_add: index",
                index: bound - 1,
                len,
            });
            return self.zero(out);
        }
        if self.is_zero(a) {
            return self.zero(out);
        }
        let key = Key::ScatterAdd(a, idx.as_ptr() as usize, len);
        self.push_cse(key, ArrayOp::ScatterAdd { a, idx, bound }, out)
    }

    /// `M v`.
    pub fn matvec(&mut self, m: Arc<Matrix>, v: AVar) -> AVar {
        let out = Shape::Vector(m.rows());
        let Some(n) = self.vector_len(v, "matvec: vector") else {
            return self.zero(out);
        };
        if n != m.cols() {
            self.poison(Error::LengthMismatch {
                what: "matvec: vector vs matrix columns",
                expected: m.cols(),
                got: n,
            });
            return self.zero(out);
        }
        if self.is_zero(v) {
            return self.zero(out);
        }
        let key = Key::MatVec(v, Arc::as_ptr(&m) as usize);
        self.push_cse(key, ArrayOp::MatVec { m, v }, out)
    }

    /// `Mᵀ v`.
    pub fn vecmat(&mut self, m: Arc<Matrix>, v: AVar) -> AVar {
        let out = Shape::Vector(m.cols());
        let Some(n) = self.vector_len(v, "vecmat: vector") else {
            return self.zero(out);
        };
        if n != m.rows() {
            self.poison(Error::LengthMismatch {
                what: "vecmat: vector vs matrix rows",
                expected: m.rows(),
                got: n,
            });
            return self.zero(out);
        }
        if self.is_zero(v) {
            return self.zero(out);
        }
        let key = Key::VecMat(v, Arc::as_ptr(&m) as usize);
        self.push_cse(key, ArrayOp::VecMat { m, v }, out)
    }

    /// Copies a non-map, non-input instruction with operands renamed
    /// through `map`, through the simplifying constructors.
    pub(crate) fn copy_op(&mut self, op: &ArrayOp, shape: Shape, map: &[AVar]) -> AVar {
        let m = |v: &AVar| map[v.index()];
        match op {
            ArrayOp::Input(_) | ArrayOp::Map { .. } | ArrayOp::MapOut(_) => {
                // Handled by the caller (inline_into); unreachable for
                // well-formed programs.
                self.poison(Error::Malformed(crate::error::Malformation::Blocks));
                self.zero(shape)
            }
            ArrayOp::Fill(c) => self.fill(*c, shape),
            ArrayOp::Const(d) => self.constant_shaped(d.clone(), shape),
            ArrayOp::Sum(a) => self.sum(m(a)),
            ArrayOp::Broadcast(a) => self.broadcast(m(a), shape),
            ArrayOp::Slice { a, start } => self.slice(m(a), *start, shape.len()),
            ArrayOp::Pad { a, start } => self.pad(m(a), *start, shape.len()),
            ArrayOp::Gather { a, idx, bound } => self.gather_bounded(m(a), idx.clone(), *bound),
            ArrayOp::ScatterAdd { a, idx, bound } => {
                self.scatter_add_bounded(m(a), idx.clone(), shape.len(), *bound)
            }
            ArrayOp::MatVec { m: mat, v } => self.matvec(mat.clone(), m(v)),
            ArrayOp::VecMat { m: mat, v } => self.vecmat(mat.clone(), m(v)),
            ArrayOp::Reshape(a) => self.reshape(m(a), shape),
            ArrayOp::Transpose(a) => self.transpose(m(a)),
            ArrayOp::MatMul {
                a,
                b,
                transpose_a,
                transpose_b,
            } => self.matmul(m(a), m(b), *transpose_a, *transpose_b),
            ArrayOp::SumAxis { a, axis } => self.sum_axis(m(a), *axis),
            ArrayOp::BroadcastAxis { a, axis } => match shape {
                Shape::Matrix(r, c) => self.broadcast_axis(m(a), *axis, r, c),
                _ => {
                    self.poison(Error::Malformed(crate::error::Malformation::Blocks));
                    self.zero(shape)
                }
            },
        }
    }

    /// The program with these outputs, dead instructions removed.
    ///
    /// # Errors
    ///
    /// The first shape or index error recorded while building.
    pub fn finish(mut self, outputs: &[AVar]) -> Result<ArrayProgram> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        // A structural zero leaves the program as +0.0.
        let outputs: Vec<AVar> = outputs
            .iter()
            .map(|&o| {
                if self.is_zero(o) {
                    let s = self.shape(o);
                    self.fill(0.0, s)
                } else {
                    o
                }
            })
            .collect();
        Ok(ArrayProgram {
            input_shapes: self.input_shapes,
            ops: self.ops,
            shapes: self.shapes,
            outputs,
            guards: self.guards,
            defect: None,
            id: 0,
        }
        .dce()
        .fuse_maps()
        .with_fresh_id())
    }
}

/// One more than the largest index (0 for none): what a gather or
/// scatter-add checks against the length it indexes.
pub(crate) fn index_bound(idx: &[u32]) -> usize {
    idx.iter().map(|&i| i as usize + 1).max().unwrap_or(0)
}

/// Removes body inputs that no instruction or output reads, and the
/// matching arguments.
fn drop_unused_inputs(body: Arc<Program>, args: Vec<AVar>) -> (Arc<Program>, Vec<AVar>) {
    let mut used = vec![false; body.n_inputs()];
    let input_of = |v: Var| match body.op(v.index()) {
        Some(Op::Input(k)) => Some(k as usize),
        _ => None,
    };
    for op in body.ops() {
        for &o in op.operands() {
            if let Some(k) = input_of(o) {
                used[k] = true;
            }
        }
    }
    for &o in body.outputs() {
        if let Some(k) = input_of(o) {
            used[k] = true;
        }
    }
    for g in body.guards() {
        for v in [g.a, g.b] {
            if let Some(k) = input_of(v) {
                used[k] = true;
            }
        }
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
        .filter(|(_, &u)| u)
        .map(|(a, _)| a)
        .collect();
    match body.specialize(&fixed, &keep) {
        Ok(p) => (Arc::new(p), new_args),
        // specialize only fails on bad lengths, which these are not.
        Err(_) => (body, Vec::new()),
    }
}

impl ArrayProgram {
    /// Removes instructions no output or guard needs, and the outputs of a
    /// map that nothing reads (its body is pruned to the rest). Inputs are
    /// kept.
    pub(crate) fn dce(mut self) -> ArrayProgram {
        let n = self.ops.len();
        let mut live = vec![false; n];
        for v in &self.outputs {
            live[v.index()] = true;
        }
        for g in &self.guards {
            live[g.a.index()] = true;
            live[g.b.index()] = true;
        }
        // A map is needed if any of its outputs is.
        let mut needed = vec![false; n];
        for i in (0..n).rev() {
            if let ArrayOp::MapOut(k) = self.ops[i] {
                if live[i] {
                    needed[i - k as usize] = true;
                }
                continue;
            }
            if live[i] || needed[i] || matches!(self.ops[i], ArrayOp::Input(_)) {
                needed[i] = true;
                self.ops[i].for_each_operand(|o| live[o.index()] = true);
            }
        }
        let all_outputs_live = |i: usize, m: usize| (i..i + m).all(|j| live[j]);
        if (0..n).all(|i| match &self.ops[i] {
            ArrayOp::MapOut(_) => true,
            ArrayOp::Map { body, .. } => needed[i] && all_outputs_live(i, body.n_outputs()),
            _ => needed[i],
        }) {
            return self;
        }
        let mut map = vec![AVar(0); n];
        let mut ops = Vec::with_capacity(n);
        let mut shapes = Vec::with_capacity(n);
        for i in 0..n {
            if !needed[i] {
                continue;
            }
            match &self.ops[i] {
                ArrayOp::Map { body, args } => {
                    let m = body.n_outputs();
                    let keep: Vec<usize> = (0..m).filter(|&k| live[i + k]).collect();
                    let body = if keep.len() == m {
                        body.clone()
                    } else {
                        let mut b = (**body).clone();
                        b.outputs = keep.iter().map(|&k| body.outputs()[k]).collect();
                        b.output_blocks = vec![keep.len()];
                        Arc::new(b.dce())
                    };
                    let base = ops.len() as u32;
                    ops.push(ArrayOp::Map {
                        body,
                        args: args.iter().map(|a| map[a.index()]).collect(),
                    });
                    shapes.push(self.shapes[i]);
                    for (j, &k) in keep.iter().enumerate() {
                        map[i + k] = AVar(base + j as u32);
                        if j > 0 {
                            ops.push(ArrayOp::MapOut(j as u32));
                            shapes.push(self.shapes[i]);
                        }
                    }
                }
                ArrayOp::MapOut(_) => {}
                other => {
                    map[i] = AVar(ops.len() as u32);
                    ops.push(rename(other, &map));
                    shapes.push(self.shapes[i]);
                }
            }
        }
        self.ops = ops;
        self.shapes = shapes;
        for o in &mut self.outputs {
            *o = map[o.index()];
        }
        for g in &mut self.guards {
            g.a = map[g.a.index()];
            g.b = map[g.b.index()];
        }
        self
    }
}

impl ArrayProgram {
    /// Merges maps over the same arguments into one map with the outputs of
    /// all (horizontal fusion): one pass over the arguments instead of
    /// several, and the bodies share their common subexpressions (a
    /// function's terms and their pullback, say). The merged map takes the
    /// place of the first, where all the arguments are already defined.
    pub(crate) fn fuse_maps(self) -> ArrayProgram {
        let n = self.ops.len();
        let mut groups: FxHashMap<&[AVar], Vec<usize>> = FxHashMap::default();
        for (i, op) in self.ops.iter().enumerate() {
            if let ArrayOp::Map { args, .. } = op {
                groups.entry(args.as_slice()).or_default().push(i);
            }
        }
        if groups.values().all(|g| g.len() < 2) {
            return self;
        }
        // For each map: its group, if it is merged with others.
        let mut group_of: Vec<Option<&Vec<usize>>> = vec![None; n];
        for g in groups.values().filter(|g| g.len() > 1) {
            for &i in g {
                group_of[i] = Some(g);
            }
        }
        let mut map = vec![AVar(0); n];
        let mut ops = Vec::with_capacity(n);
        let mut shapes = Vec::with_capacity(n);
        let mut skip = vec![false; n];
        for i in 0..n {
            if skip[i] {
                continue;
            }
            match &self.ops[i] {
                ArrayOp::Map { args, .. } if group_of[i].is_some() => {
                    let group = group_of[i].map(Vec::as_slice).unwrap_or(&[]);
                    let mut sb = Builder::new();
                    let ins: Vec<Var> = (0..args.len()).map(|_| sb.input()).collect();
                    let mut outs: Vec<Var> = Vec::new();
                    let base = ops.len() as u32;
                    for &j in group {
                        let ArrayOp::Map { body, .. } = &self.ops[j] else {
                            continue;
                        };
                        let m = body.inline_into(&mut sb, &ins);
                        for (k, o) in body.outputs().iter().enumerate() {
                            map[j + k] = AVar(base + outs.len() as u32);
                            skip[j + k] = true;
                            outs.push(m[o.index()]);
                        }
                    }
                    let body = Arc::new(sb.finish_unchecked(&outs).dce());
                    let shape = self.shapes[i];
                    ops.push(ArrayOp::Map {
                        body,
                        args: args.iter().map(|a| map[a.index()]).collect(),
                    });
                    shapes.push(shape);
                    for k in 1..outs.len() {
                        ops.push(ArrayOp::MapOut(k as u32));
                        shapes.push(shape);
                    }
                }
                op => {
                    map[i] = AVar(ops.len() as u32);
                    ops.push(rename(op, &map));
                    shapes.push(self.shapes[i]);
                }
            }
        }
        ArrayProgram {
            outputs: self.outputs.iter().map(|o| map[o.index()]).collect(),
            guards: self
                .guards
                .iter()
                .map(|g| ArrayGuard {
                    a: map[g.a.index()],
                    b: map[g.b.index()],
                    ordering: g.ordering,
                })
                .collect(),
            ops,
            shapes,
            input_shapes: self.input_shapes,
            defect: self.defect,
            id: self.id,
        }
    }

    /// The same program under a new identifier.
    pub(crate) fn with_fresh_id(mut self) -> ArrayProgram {
        self.id = fresh_id();
        self
    }
}

fn rename(op: &ArrayOp, map: &[AVar]) -> ArrayOp {
    let m = |v: &AVar| map[v.index()];
    match op {
        ArrayOp::Input(k) => ArrayOp::Input(*k),
        ArrayOp::Fill(c) => ArrayOp::Fill(*c),
        ArrayOp::Const(d) => ArrayOp::Const(d.clone()),
        ArrayOp::MapOut(k) => ArrayOp::MapOut(*k),
        ArrayOp::Map { body, args } => ArrayOp::Map {
            body: body.clone(),
            args: args.iter().map(m).collect(),
        },
        ArrayOp::Sum(a) => ArrayOp::Sum(m(a)),
        ArrayOp::Broadcast(a) => ArrayOp::Broadcast(m(a)),
        ArrayOp::Slice { a, start } => ArrayOp::Slice {
            a: m(a),
            start: *start,
        },
        ArrayOp::Pad { a, start } => ArrayOp::Pad {
            a: m(a),
            start: *start,
        },
        ArrayOp::Gather { a, idx, bound } => ArrayOp::Gather {
            a: m(a),
            idx: idx.clone(),
            bound: *bound,
        },
        ArrayOp::ScatterAdd { a, idx, bound } => ArrayOp::ScatterAdd {
            a: m(a),
            idx: idx.clone(),
            bound: *bound,
        },
        ArrayOp::MatVec { m: mat, v } => ArrayOp::MatVec {
            m: mat.clone(),
            v: m(v),
        },
        ArrayOp::VecMat { m: mat, v } => ArrayOp::VecMat {
            m: mat.clone(),
            v: m(v),
        },
        ArrayOp::Reshape(a) => ArrayOp::Reshape(m(a)),
        ArrayOp::Transpose(a) => ArrayOp::Transpose(m(a)),
        ArrayOp::MatMul {
            a,
            b,
            transpose_a,
            transpose_b,
        } => ArrayOp::MatMul {
            a: m(a),
            b: m(b),
            transpose_a: *transpose_a,
            transpose_b: *transpose_b,
        },
        ArrayOp::SumAxis { a, axis } => ArrayOp::SumAxis {
            a: m(a),
            axis: *axis,
        },
        ArrayOp::BroadcastAxis { a, axis } => ArrayOp::BroadcastAxis {
            a: m(a),
            axis: *axis,
        },
    }
}
