//! The array IR: instructions over arrays of `f64`, with scalar
//! [`Program`]s as the body language of `map`.

use std::fmt;
use std::sync::Arc;

use rustc_hash::FxHashMap;

pub(crate) use super::shape::Shape;
use crate::error::{Error, Result};
use crate::program::{Builder, Program, Var};

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
/// The program's structure (inputs, constants, and `map`, which carries a
/// scalar body program) is written here; every other operation is an
/// [`ArrayOp::Prim`] of the primitive table ([`ArrayPrimitive`]), one
/// definition per operation. The rules of each are in the book's chapter
/// "Arrays".
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
    /// An operation of the primitive table applied to `args`.
    Prim {
        /// The operation, with its parameters.
        prim: ArrayPrim,
        /// The operands, at most [`MAX_ARRAY_ARITY`].
        args: Operands,
    },
}

/// The operands of an [`ArrayOp::Prim`]: a slice of values
/// (`Deref<Target = [AVar]>`), held inline up to three, so that building
/// and renaming instructions allocates nothing for them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Operands(OperandsRepr);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum OperandsRepr {
    Inline(u8, [AVar; 3]),
    Heap(Box<[AVar]>),
}

impl Operands {
    /// The operands as a slice.
    pub fn as_slice(&self) -> &[AVar] {
        match &self.0 {
            OperandsRepr::Inline(n, a) => &a[..usize::from(*n)],
            OperandsRepr::Heap(b) => b,
        }
    }
}

impl std::ops::Deref for Operands {
    type Target = [AVar];

    fn deref(&self) -> &[AVar] {
        self.as_slice()
    }
}

impl From<&[AVar]> for Operands {
    fn from(args: &[AVar]) -> Operands {
        match args.len() {
            n @ 0..=3 => {
                let mut a = [AVar(0); 3];
                a[..n].copy_from_slice(args);
                Operands(OperandsRepr::Inline(n as u8, a))
            }
            _ => Operands(OperandsRepr::Heap(args.into())),
        }
    }
}

impl<'a> IntoIterator for &'a Operands {
    type Item = &'a AVar;
    type IntoIter = std::slice::Iter<'a, AVar>;

    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl FromIterator<AVar> for Operands {
    fn from_iter<I: IntoIterator<Item = AVar>>(iter: I) -> Operands {
        let mut a = [AVar(0); 3];
        let mut n = 0;
        let mut rest: Vec<AVar> = Vec::new();
        for v in iter {
            if n < 3 && rest.is_empty() {
                a[n] = v;
                n += 1;
            } else {
                if rest.is_empty() {
                    rest.extend_from_slice(&a[..n]);
                }
                rest.push(v);
            }
        }
        if rest.is_empty() {
            Operands(OperandsRepr::Inline(n as u8, a))
        } else {
            Operands(OperandsRepr::Heap(rest.into()))
        }
    }
}

impl ArrayOp {
    /// The array operands, in order.
    pub fn operands(&self) -> Vec<AVar> {
        let mut v = Vec::new();
        self.for_each_operand(|a| v.push(a));
        v
    }

    /// Calls `f` on each operand, in order (without allocating).
    pub(crate) fn for_each_operand(&self, mut f: impl FnMut(AVar)) {
        match self {
            ArrayOp::Input(_) | ArrayOp::Fill(_) | ArrayOp::Const(_) | ArrayOp::MapOut(_) => {}
            ArrayOp::Map { args, .. } => args.iter().for_each(|&a| f(a)),
            ArrayOp::Prim { args, .. } => args.iter().for_each(|&a| f(a)),
        }
    }

    /// The operation of the table if this is one of type `P`, with its
    /// operands.
    pub fn prim<P: ArrayPrimitive>(&self) -> Option<(&P, &[AVar])> {
        match self {
            ArrayOp::Prim { prim, args } => prim.downcast_ref::<P>().map(|p| (p, args.as_slice())),
            _ => None,
        }
    }
}

/// The most operands an [`ArrayOp::Prim`] takes: the executor passes them
/// to [`ArrayPrimitive::eval`] from the stack.
pub const MAX_ARRAY_ARITY: usize = 8;

/// How an array primitive propagates Taylor coefficients (jets), the rule
/// [`crate::functor::TaylorProgram`] applies. Most operations of the table
/// are linear, bilinear, or linear once a selection is made (a maximum);
/// an operation that is none of these (a loop, whose body is any program)
/// propagates jets itself ([`TaylorRule::Nonlinear`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaylorRule {
    /// Linear in its operands jointly: coefficient `k` of the value is the
    /// operation applied to coefficient `k` of each operand. A value whose
    /// operands are all structural zeros is a structural zero.
    Linear,
    /// Bilinear in its two operands, `c = a ⊙ b`: `cₖ = Σⱼ aⱼ ⊙ bₖ₋ⱼ` (the
    /// Cauchy product of the jets; Griewank & Walther, "Evaluating
    /// Derivatives", 2nd ed., §13.2). A value with a structurally zero
    /// operand is a structural zero.
    Bilinear,
    /// Linear in its last operand, the others only selecting which linear
    /// map applies (as the positions of a maximum do): their derivative is
    /// zero wherever the selection does not change, so they enter through
    /// their constant terms, `yₖ = op(a₀, …, lastₖ)`. A value whose last
    /// operand is a structural zero is a structural zero.
    LinearInLast,
    /// Any other: the operation propagates jets itself, in
    /// [`ArrayPrimitive::jet`]. Structural zeros of its operands do not
    /// make its value one.
    Nonlinear,
}

/// One array operation: the definition of a primitive of the array tier,
/// in one place: its shape rule, value, pullback, pushforward, Taylor
/// rule, CSE key, printing and its meaning in scalar arithmetic. The
/// derivative rules have no default, so an operation without one does not
/// compile. The crate's operations are in the family files of
/// `src/array/prims/` (reductions, layout, indexing, linear algebra); a
/// user may define more (the book's section "Adding an array operation").
///
/// The value's shape comes from [`ArrayPrimitive::shape`]; every other
/// method may assume the operands have the shapes that rule accepted.
///
/// # Example
///
/// An operation of the crate's table applied through the builder, and its
/// pullback through [`crate::array::reverse_joint`]:
///
/// ```
/// use optic_ad::array::prims::Cumsum;
/// use optic_ad::array::{reverse_joint, ArrayBuilder, ArrayPrimitive, Shape};
///
/// assert_eq!(Cumsum { reverse: false }.shape(&[Shape::Vector(3)]).unwrap(), Shape::Vector(3));
/// let mut b = ArrayBuilder::new();
/// let x = b.input(Shape::Vector(3));
/// let c = b.apply(Cumsum { reverse: false }, &[x]);
/// let y = b.sum(c);
/// let p = b.finish(&[y]).unwrap();
/// // Σᵢ Σ_{j≤i} xⱼ: the gradient is (3, 2, 1).
/// let g = reverse_joint(&p).unwrap().eval(&[&[0.5, 0.1, 0.2], &[1.0]]).unwrap();
/// assert_eq!(g[1], vec![3.0, 2.0, 1.0]);
/// ```
pub trait ArrayPrimitive: std::any::Any + fmt::Debug + Send + Sync {
    /// The name, as printed.
    fn name(&self) -> &'static str;

    /// The shape of the value for operands of these shapes.
    ///
    /// # Errors
    ///
    /// [`Error::ShapeMismatch`], [`Error::LengthMismatch`] or
    /// [`Error::IndexOutOfRange`] for operands the operation does not
    /// take (the builder records it and [`ArrayBuilder::finish`] returns
    /// it).
    fn shape(&self, args: &[Shape]) -> Result<Shape>;

    /// The words that, with the operation's type, its operands and the
    /// value's shape, identify the value (common subexpressions are
    /// shared): every parameter, a shared buffer by its address.
    fn key(&self, words: &mut Vec<u64>);

    /// The right-hand side of the instruction as printed, given the
    /// operands' names.
    fn print(&self, args: &[String], out: Shape) -> String;

    /// The parameters, as the serialised form of a program holds them
    /// (see [`Param`](super::Param)); [`ArrayPrimitive::from_params`]
    /// reads them back.
    fn params(&self) -> Vec<super::Param>;

    /// The operation with the parameters [`ArrayPrimitive::params`] wrote,
    /// or `None` for parameters it does not take (checked as its
    /// constructors check them).
    fn from_params(params: &[super::Param]) -> Option<Self>
    where
        Self: Sized;

    /// Writes the value into `out` (of `out_shape.len()` elements).
    /// `args[k]` holds operand `k` (of shape `shapes[k]`); `scratch` is a
    /// buffer the caller keeps between runs.
    fn eval(
        &self,
        args: &[&[f64]],
        shapes: &[Shape],
        out: &mut [f64],
        out_shape: Shape,
        scratch: &mut Vec<f64>,
    );

    /// The pullback: given the operands (`args`, in `b`) and the value's
    /// cotangent `ct`, one cotangent contribution per operand (`None`
    /// where there is none).
    fn pullback(&self, b: &mut ArrayBuilder, args: &[AVar], ct: AVar) -> Vec<Option<AVar>>;

    /// ∂⃖ of the operation as an optic ⟨left | right⟩ with a residual, for
    /// an operation whose pullback is cheaper from something its value
    /// computes on the way (a loop's carries): emits the value and that
    /// residual, `Some((value, residual))`. [`crate::array::reverse_joint`]
    /// then calls [`ArrayPrimitive::right`] with the residual instead of
    /// [`ArrayPrimitive::pullback`]. The default, `None`, keeps nothing:
    /// the pullback recomputes what it needs from the operands.
    fn left(&self, b: &mut ArrayBuilder, args: &[AVar]) -> Option<(AVar, AVar)> {
        let _ = (b, args);
        None
    }

    /// The pullback from the residual that [`ArrayPrimitive::left`] kept.
    /// Only called for an operation whose `left` returned one; the default
    /// is the pullback.
    fn right(
        &self,
        b: &mut ArrayBuilder,
        args: &[AVar],
        residual: AVar,
        ct: AVar,
    ) -> Vec<Option<AVar>> {
        let _ = residual;
        self.pullback(b, args, ct)
    }

    /// The pushforward: given the operands (`args`, in `b`) and their
    /// tangents (`None` for a structural zero), the value's tangent
    /// (`None` if it is a structural zero). `out` is the value's shape.
    fn pushforward(
        &self,
        b: &mut ArrayBuilder,
        args: &[AVar],
        tangents: &[Option<AVar>],
        out: Shape,
    ) -> Option<AVar>;

    /// The value and its tangent together, `Some((value, tangent))`, for
    /// an operation whose pushforward computes the value on the way (a
    /// loop carries the tangent beside the carry): [`crate::array::forward`]
    /// then emits this instead of the value and
    /// [`ArrayPrimitive::pushforward`], so the value is computed once. The
    /// default, `None`, keeps them apart.
    fn jvp(
        &self,
        b: &mut ArrayBuilder,
        args: &[AVar],
        tangents: &[Option<AVar>],
        out: Shape,
    ) -> Option<(AVar, AVar)> {
        let _ = (b, args, tangents, out);
        None
    }

    /// How Taylor coefficients pass through it.
    fn taylor(&self) -> TaylorRule;

    /// The jet of the value from the jets of the operands, for an
    /// operation whose [`ArrayPrimitive::taylor`] is
    /// [`TaylorRule::Nonlinear`] (the others are never asked): `args[k]`
    /// holds `degree + 1` coefficients of operand `k`, coefficient-major
    /// (coefficient `j` at `j·len .. (j+1)·len`), and `out` receives the
    /// value's jet in the same layout.
    ///
    /// # Errors
    ///
    /// The default returns [`Error::Unsupported`]: an operation that says
    /// it is nonlinear must give this rule.
    fn jet(
        &self,
        args: &[&[f64]],
        shapes: &[Shape],
        degree: usize,
        out: &mut [f64],
        out_shape: Shape,
    ) -> Result<()> {
        let _ = (args, shapes, degree, out, out_shape);
        Err(Error::Unsupported(
            "an array operation whose Taylor rule is Nonlinear gives no jet rule",
        ))
    }

    /// The value written in scalar arithmetic: `args[k]` are the elements
    /// of operand `k` (row-major), the result the value's elements. This
    /// is the operation's meaning element by element, independent of
    /// [`ArrayPrimitive::eval`] and the derivative rules; tests compare
    /// those against num-dual on it, and [`ArrayProgram::unroll`] builds
    /// a scalar program from it.
    fn unroll(&self, b: &mut Builder, args: &[&[Var]], shapes: &[Shape], out: Shape) -> Vec<Var>;

    /// A simpler value for these operands, found while building (an
    /// operand itself, a fill, an equivalent instruction), or `None`.
    fn simplify(&self, b: &mut ArrayBuilder, args: &[AVar], out: Shape) -> Option<AVar> {
        let _ = (b, args, out);
        None
    }

    /// For an operation of one operand that reads it in place: element `i`
    /// of the value is element `i + shift` of the operand for
    /// `lo ≤ i < hi`, and zero elsewhere, as `(shift, lo, hi)`. The
    /// executor then lets maps read the operand directly, never storing
    /// the value.
    fn view(&self, arg: Shape, out: Shape) -> Option<(isize, usize, usize)> {
        let _ = (arg, out);
        None
    }
}

/// A handle on an operation of the array primitive table, with its
/// parameters: what an [`ArrayOp::Prim`] instruction holds. Cloning shares
/// the definition.
#[derive(Clone)]
pub struct ArrayPrim(Arc<dyn ArrayPrimitive>);

impl ArrayPrim {
    /// The handle on `p`.
    pub fn new(p: impl ArrayPrimitive) -> ArrayPrim {
        ArrayPrim(Arc::new(p))
    }

    /// The definition, if it is of type `P`.
    pub fn downcast_ref<P: ArrayPrimitive>(&self) -> Option<&P> {
        let any: &dyn std::any::Any = &*self.0;
        any.downcast_ref::<P>()
    }
}

impl std::ops::Deref for ArrayPrim {
    type Target = dyn ArrayPrimitive;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for ArrayPrim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
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
/// with the shape of each value and map bodies as scalar programs. With
/// the `serde` feature it is written and read back with serde: each
/// operation of the table by name and [`ArrayPrimitive::params`]; a
/// program read back is checked instruction by instruction and is the
/// program written (the book's chapter "Arrays", "Saving array
/// programs").
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
                ArrayOp::Prim { prim, args } => {
                    let a: Vec<String> = args.iter().map(|&v| name(v)).collect();
                    prim.print(&a, self.shapes[i])
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

    /// [`ArrayProgram::inline_into`] with each map emitted by
    /// `emit(builder, index, body, mapped arguments)`, which returns one
    /// value per body output.
    pub(crate) fn inline_with(
        &self,
        b: &mut ArrayBuilder,
        inputs: &[AVar],
        emit: impl FnMut(&mut ArrayBuilder, usize, &Arc<Program>, &[AVar]) -> Vec<AVar>,
    ) -> Vec<AVar> {
        self.inline_with_prims(b, inputs, emit, |_, _, _, _, _| None)
    }

    /// [`ArrayProgram::inline_with`] where `prim(builder, index, operation,
    /// its operands, the values so far)` may emit an operation of the table
    /// itself (`Some(value)`, its operands renamed through the values so
    /// far); `None` copies it.
    pub(crate) fn inline_with_prims(
        &self,
        b: &mut ArrayBuilder,
        inputs: &[AVar],
        mut emit: impl FnMut(&mut ArrayBuilder, usize, &Arc<Program>, &[AVar]) -> Vec<AVar>,
        mut prim: impl FnMut(&mut ArrayBuilder, usize, &ArrayPrim, &[AVar], &[AVar]) -> Option<AVar>,
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
                ArrayOp::Prim { prim: p, args } => {
                    let v = match prim(b, i, p, args, &map) {
                        Some(v) => v,
                        None => b.copy_op(&self.ops[i], self.shapes[i], &self.shapes, &map),
                    };
                    map.push(v);
                }
                op => {
                    let shape = self.shapes[i];
                    let v = b.copy_op(op, shape, &self.shapes, &map);
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
}

/// CSE key of an instruction: a fill by its bits and shape, a map by its
/// body's address and arguments, an operation of the table by its type,
/// operands, parameter words and shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    Fill(u64, Shape),
    Map(usize, Vec<AVar>),
    Prim(std::any::TypeId, KeyWords, Shape),
}

/// The words of an operation's key, inline up to four (every operation of
/// the crate's table), on the heap beyond.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeyWords {
    Inline(u8, [u64; 4]),
    Heap(Box<[u64]>),
}

impl std::hash::Hash for KeyWords {
    /// Hashes the words in use only (equal keys hash equal: unused inline
    /// words are always zero).
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        match self {
            KeyWords::Inline(n, w) => {
                for x in &w[..usize::from(*n)] {
                    h.write_u64(*x);
                }
            }
            KeyWords::Heap(w) => {
                for x in w.iter() {
                    h.write_u64(*x);
                }
            }
        }
    }
}

impl KeyWords {
    fn new(words: &[u64]) -> KeyWords {
        match words.len() {
            n @ 0..=4 => {
                let mut w = [0; 4];
                w[..n].copy_from_slice(words);
                KeyWords::Inline(n as u8, w)
            }
            _ => KeyWords::Heap(words.into()),
        }
    }
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
    /// The words of the key being built (kept to reuse its allocation).
    key_words: Vec<u64>,
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

    pub(crate) fn push(&mut self, op: ArrayOp, shape: Shape) -> AVar {
        let v = AVar(self.ops.len() as u32);
        self.ops.push(op);
        self.shapes.push(shape);
        v
    }

    pub(crate) fn push_cse(&mut self, key: Key, op: ArrayOp, shape: Shape) -> AVar {
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
    pub fn fill_of(&self, v: AVar) -> Option<f64> {
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

    /// Whether no guard has been recorded.
    pub(crate) fn guards_empty(&self) -> bool {
        self.guards.is_empty()
    }

    /// The guards recorded so far, removed from the builder.
    pub(crate) fn take_guards(&mut self) -> Vec<ArrayGuard> {
        std::mem::take(&mut self.guards)
    }

    /// The shapes of the inputs so far, in order.
    pub(crate) fn input_shapes(&self) -> &[Shape] {
        &self.input_shapes
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

    /// Pushes map `body` over `args` (shape `shape`) and its extra
    /// outputs, or finds the identical map; returns its first output.
    pub(crate) fn push_map(&mut self, body: Arc<Program>, args: Vec<AVar>, shape: Shape) -> AVar {
        let key = Key::Map(Arc::as_ptr(&body) as usize, args.clone());
        if let Some(&v) = self.cse.get(&key) {
            return v;
        }
        let n = body.n_outputs();
        let v = self.push(ArrayOp::Map { body, args }, shape);
        for k in 1..n {
            self.push(ArrayOp::MapOut(k as u32), shape);
        }
        self.cse.insert(key, v);
        v
    }

    /// Applies operation `prim` of the table to `args`: checks the
    /// operands' shapes ([`ArrayPrimitive::shape`]; an error poisons the
    /// builder and gives a scalar zero), folds structural zeros by the
    /// operation's [`TaylorRule`] (a linear operation of zeros, a bilinear
    /// one of a zero, one linear in its last operand of a zero there), tries [`ArrayPrimitive::simplify`], and shares an
    /// identical instruction.
    pub fn apply<P: ArrayPrimitive>(&mut self, prim: P, args: &[AVar]) -> AVar {
        let key = match self.resolve(&prim, args, None) {
            Ok(v) => return v,
            Err(key) => key,
        };
        // The handle is made only for a new instruction.
        self.intern(key, args, move || ArrayPrim::new(prim))
    }

    /// [`ArrayBuilder::apply`] with a handle (a copy of an instruction).
    pub fn apply_prim(&mut self, prim: ArrayPrim, args: &[AVar]) -> AVar {
        let key = match self.resolve(&*prim, args, None) {
            Ok(v) => return v,
            Err(key) => key,
        };
        self.intern(key, args, move || prim)
    }

    /// The instruction of key `key` (shape and operation in the key, the
    /// operation's handle from `handle`): the identical one if there is
    /// one (one hash for the lookup and the insertion), else a new one.
    fn intern(
        &mut self,
        key: (Key, Shape),
        args: &[AVar],
        handle: impl FnOnce() -> ArrayPrim,
    ) -> AVar {
        let (key, out) = key;
        let next = AVar(self.ops.len() as u32);
        match self.cse.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => *e.get(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(next);
                self.ops.push(ArrayOp::Prim {
                    prim: handle(),
                    args: Operands::from(args),
                });
                self.shapes.push(out);
                next
            }
        }
    }

    /// The value of `prim` on `args` if it needs no new instruction (a
    /// shape error, a structural zero, or a simplification); otherwise the
    /// key and shape to find or push it under. `known`: the value's shape
    /// when the instruction is a copy of a checked one on operands of the
    /// same shapes (the shape rule is then not asked again).
    fn resolve(
        &mut self,
        prim: &dyn ArrayPrimitive,
        args: &[AVar],
        known: Option<Shape>,
    ) -> std::result::Result<AVar, (Key, Shape)> {
        if args.len() > MAX_ARRAY_ARITY {
            self.poison(Error::LengthMismatch {
                what: "array operation: operands, at most",
                expected: MAX_ARRAY_ARITY,
                got: args.len(),
            });
            return Ok(self.zero(Shape::Scalar));
        }
        let out = match known {
            Some(s) => s,
            None => {
                let mut shapes = [Shape::Scalar; MAX_ARRAY_ARITY];
                for (s, &a) in shapes.iter_mut().zip(args) {
                    *s = self.shape(a);
                }
                match prim.shape(&shapes[..args.len()]) {
                    Ok(s) => s,
                    Err(e) => {
                        self.poison(e);
                        return Ok(self.zero(Shape::Scalar));
                    }
                }
            }
        };
        let zero = match prim.taylor() {
            TaylorRule::Linear => args.iter().all(|&a| self.is_zero(a)),
            TaylorRule::Bilinear => args.iter().any(|&a| self.is_zero(a)),
            TaylorRule::LinearInLast => args.last().is_some_and(|&a| self.is_zero(a)),
            TaylorRule::Nonlinear => false,
        };
        if zero {
            return Ok(self.zero(out));
        }
        if let Some(v) = prim.simplify(self, args, out) {
            return Ok(v);
        }
        // The key: the operation's type, then [operand count, operands,
        // parameter words], and the shape, built in a buffer the builder
        // keeps (no allocation for up to four words).
        let mut words = std::mem::take(&mut self.key_words);
        words.clear();
        words.push(args.len() as u64);
        words.extend(args.iter().map(|a| u64::from(a.0)));
        prim.key(&mut words);
        let any: &dyn std::any::Any = prim;
        let key = Key::Prim(any.type_id(), KeyWords::new(&words), out);
        self.key_words = words;
        Err((key, out))
    }

    /// The instruction that defines `v`.
    pub fn op(&self, v: AVar) -> Option<&ArrayOp> {
        self.ops.get(v.index())
    }

    /// Copies an instruction other than an input or a map with operands
    /// renamed through `map` (`src_shapes`: the shapes of the program it
    /// comes from), through the simplifying constructors.
    pub(crate) fn copy_op(
        &mut self,
        op: &ArrayOp,
        shape: Shape,
        src_shapes: &[Shape],
        map: &[AVar],
    ) -> AVar {
        match op {
            ArrayOp::Input(_) | ArrayOp::Map { .. } | ArrayOp::MapOut(_) => {
                // Handled by the caller (inline_with); unreachable for
                // well-formed programs.
                self.poison(Error::Malformed(crate::error::Malformation::Blocks));
                self.zero(shape)
            }
            ArrayOp::Fill(c) => self.fill(*c, shape),
            ArrayOp::Const(d) => self.constant_shaped(d.clone(), shape),
            ArrayOp::Prim { prim, args } if args.len() <= MAX_ARRAY_ARITY => {
                let mut renamed = [AVar(0); MAX_ARRAY_ARITY];
                let mut same_shapes = true;
                for (r, a) in renamed.iter_mut().zip(args) {
                    *r = map[a.index()];
                    same_shapes &= src_shapes.get(a.index()) == Some(&self.shape(*r));
                }
                let args = &renamed[..args.len()];
                // The copy of a checked instruction on operands of the
                // shapes it had keeps its shape.
                let known = same_shapes.then_some(shape);
                let key = match self.resolve(&**prim, args, known) {
                    Ok(v) => return v,
                    Err(key) => key,
                };
                self.intern(key, args, || prim.clone())
            }
            ArrayOp::Prim { prim, args } => {
                let args: Vec<AVar> = args.iter().map(|a| map[a.index()]).collect();
                self.apply_prim(prim.clone(), &args)
            }
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
        // Taken by value: each kept instruction moves to its new place with
        // its operands renamed in place.
        let old_ops = std::mem::take(&mut self.ops);
        for (i, op) in old_ops.into_iter().enumerate() {
            if !needed[i] {
                continue;
            }
            match op {
                ArrayOp::Map { body, args } => {
                    let m = body.n_outputs();
                    let keep: Vec<usize> = (0..m).filter(|&k| live[i + k]).collect();
                    let body = if keep.len() == m {
                        body.clone()
                    } else {
                        let mut b = (*body).clone();
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
                mut other => {
                    map[i] = AVar(ops.len() as u32);
                    if let ArrayOp::Prim { args, .. } = &mut other {
                        *args = args.iter().map(|a| map[a.index()]).collect();
                    }
                    ops.push(other);
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
                        // Copied, not simplified again: the inputs are
                        // fresh, and simplifying across the bodies (x − x
                        // → −0 between two of them) could change the bits.
                        let m = body.copy_into(&mut sb, &ins);
                        for (k, o) in body.outputs().iter().enumerate() {
                            // An output equal to an earlier one (the
                            // bodies computed the same value) is that one.
                            let y = m[o.index()];
                            let at = outs.iter().position(|&x| x == y).unwrap_or_else(|| {
                                outs.push(y);
                                outs.len() - 1
                            });
                            map[j + k] = AVar(base + at as u32);
                            skip[j + k] = true;
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
        ArrayOp::Prim { prim, args } => ArrayOp::Prim {
            prim: prim.clone(),
            args: args.iter().map(m).collect(),
        },
    }
}
