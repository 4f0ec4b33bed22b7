//! The array primitive table: one definition per operation
//! ([`ArrayPrimitive`]), grouped by family as the
//! scalar table is:
//!
//! * `reduce`: `sum`, `sum_axis`, `cumsum`;
//! * `layout`: `broadcast`, `broadcast_axis`, `concat`, `reshape`,
//!   `transpose`;
//! * `index`: `slice`, `pad`, `gather`, `scatter_add`;
//! * `linalg`: `matvec`, `vecmat`, `matmul`;
//! * `loops`: `scan` (and so `fold`), which carries a body program.
//!
//! Each family file also holds the [`ArrayBuilder`](super::ArrayBuilder) methods that build its
//! operations, and a list of example instances that the tests walk
//! ([`examples`]): every operation there is checked for every rule without
//! the tests naming it. A table of names ([`ArrayPrimitive::name`]) reads
//! operations back from their parameters, for programs written with serde.

mod index;
mod layout;
mod linalg;
mod loops;
mod reduce;

// Globs, so that an operation added to a family file needs no line here.
pub use index::*;
pub use layout::*;
pub use linalg::*;
pub use loops::*;
pub use reduce::*;

use std::any::TypeId;

use super::ir::{ArrayPrim, ArrayPrimitive, Shape};
use super::{Param, ParamReader};
use crate::error::{Error, Result};
use crate::program::{Builder, Var};

/// A decoder of the table: the operation of type `P` from its parameters.
type Decoder = fn(&[Param]) -> Option<ArrayPrim>;

fn decoder<P: ArrayPrimitive>(params: &[Param]) -> Option<ArrayPrim> {
    P::from_params(params).map(ArrayPrim::new)
}

/// The crate's operations by name and type, for reading programs back
/// (a test checks every operation of [`examples`] against it).
fn table() -> [(&'static str, TypeId, Decoder); 20] {
    fn entry<P: ArrayPrimitive>(name: &'static str) -> (&'static str, TypeId, Decoder) {
        (name, TypeId::of::<P>(), decoder::<P>)
    }
    [
        entry::<Sum>("sum"),
        entry::<SumAxis>("sum_axis"),
        entry::<Cumsum>("cumsum"),
        entry::<MaxAt>("max_at"),
        entry::<SpreadAtMax>("spread_at_max"),
        entry::<Slice>("slice"),
        entry::<Pad>("pad"),
        entry::<Gather>("gather"),
        entry::<ScatterAdd>("scatter_add"),
        entry::<MatVec>("matvec"),
        entry::<VecMat>("vecmat"),
        entry::<MatMul>("matmul"),
        entry::<Broadcast>("broadcast"),
        entry::<BroadcastAxis>("broadcast_axis"),
        entry::<Reshape>("reshape"),
        entry::<Transpose>("transpose"),
        entry::<Concat>("concat"),
        entry::<Scan>("scan"),
        entry::<Revolve>("revolve"),
        entry::<Mismatches>("mismatches"),
    ]
}

/// The operation of the table named `name`, from its parameters.
pub(crate) fn decode(name: &str, params: &[Param]) -> Option<ArrayPrim> {
    let (_, _, d) = table().into_iter().find(|(n, _, _)| *n == name)?;
    d(params)
}

/// Whether `name` names an operation of the table.
#[cfg(feature = "serde")]
pub(crate) fn is_name(name: &str) -> bool {
    table().iter().any(|(n, _, _)| *n == name)
}

/// Whether `prim` is an operation of the table under its own name.
#[cfg(feature = "serde")]
pub(crate) fn in_table(prim: &ArrayPrim) -> bool {
    let any: &dyn std::any::Any = &**prim;
    let id = any.type_id();
    table()
        .iter()
        .any(|(n, t, _)| *t == id && *n == prim.name())
}

/// Instances of every operation of the table with the shapes of their
/// operands, for operands of about `n` elements (`n ≥ 2`): what the
/// table's tests walk, so that an operation added to a family's list is
/// tested for every rule without the tests naming it.
#[doc(hidden)]
pub fn examples(n: usize) -> Vec<(ArrayPrim, Vec<Shape>)> {
    let mut all = Vec::new();
    reduce::examples(n.max(2), &mut all);
    layout::examples(n.max(2), &mut all);
    index::examples(n.max(2), &mut all);
    linalg::examples(n.max(2), &mut all);
    loops::examples(n.max(2), &mut all);
    all
}

/// The tangent of the one operand of a unary operation (`None`: a
/// structural zero).
/// The parameters of an operation placed at `start` with length `len`
/// (slice, pad).
fn start_len_params(start: usize, len: usize) -> Vec<Param> {
    vec![Param::Int(start as u64), Param::Int(len as u64)]
}

/// What [`start_len_params`] wrote.
fn read_start_len(params: &[Param]) -> Option<(usize, usize)> {
    let mut r = ParamReader::new(params);
    let (start, len) = (r.usize()?, r.usize()?);
    r.finish()?;
    Some((start, len))
}

/// A shape as the only parameter (broadcast, reshape).
fn read_shape(params: &[Param]) -> Option<Shape> {
    let mut r = ParamReader::new(params);
    let shape = r.shape()?;
    r.finish()?;
    Some(shape)
}

fn only(tangents: &[Option<crate::array::ir::AVar>]) -> Option<crate::array::ir::AVar> {
    tangents.first().copied().flatten()
}

/// The operands' shapes as an array of `N`, or an error naming `what`.
fn operands<const N: usize>(args: &[Shape], what: &'static str) -> Result<[Shape; N]> {
    <[Shape; N]>::try_from(args).map_err(|_| Error::LengthMismatch {
        what,
        expected: N,
        got: args.len(),
    })
}

/// The length of a vector operand.
fn vector_len(s: Shape, what: &'static str) -> Result<usize> {
    match s {
        Shape::Vector(n) => Ok(n),
        s => Err(Error::ShapeMismatch {
            what,
            expected: Shape::Vector(0),
            got: s,
        }),
    }
}

/// The dimensions of a matrix operand.
fn matrix_dims(s: Shape, what: &'static str) -> Result<(usize, usize)> {
    match s {
        Shape::Matrix(r, c) => Ok((r, c)),
        s => Err(Error::ShapeMismatch {
            what,
            expected: Shape::Matrix(0, 0),
            got: s,
        }),
    }
}

/// `Σ xᵢ` in scalar instructions, left to right (`+0.0` for none).
fn scalar_sum(b: &mut Builder, xs: impl IntoIterator<Item = Var>) -> Var {
    let mut acc: Option<Var> = None;
    for x in xs {
        acc = Some(match acc {
            Some(a) => b.add(a, x),
            None => x,
        });
    }
    acc.unwrap_or_else(|| b.constant(0.0))
}
