//! The serialised form of array programs: each operation of the table
//! writes its parameters as a list of [`Param`]s
//! ([`ArrayPrimitive::params`]) and reads them back
//! ([`ArrayPrimitive::from_params`]); with the `serde` feature an
//! [`ArrayProgram`] is `Serialize` and `Deserialize` through them, and a
//! program read back is rebuilt instruction by instruction through the
//! [`ArrayBuilder`], which checks every shape, operand and parameter as
//! it does for a traced program.

use crate::program::Program;

#[cfg(feature = "serde")]
use super::ir::{AVar, ArrayBuilder, ArrayOp, ArrayProgram, MAX_ARRAY_ARITY};
use super::ir::{ArrayPrim, ArrayPrimitive};
use super::shape::Shape;
#[cfg(feature = "serde")]
use crate::error::{Error, Malformation, Result};

/// One parameter of an array operation, as its serialised form holds it
/// (see [`ArrayPrimitive::params`]). Numbers are kept to the bit: with
/// `serde`, a non-finite one is written as the tagged strings scalar
/// programs use for their constants.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Param {
    /// A count, length, axis or position.
    Int(u64),
    /// A flag.
    Flag(bool),
    /// A list of indices or small codes.
    Ints(Vec<u64>),
    /// Numbers (constant data).
    Floats(#[cfg_attr(feature = "serde", serde(with = "floats_serde"))] Vec<f64>),
    /// A shape.
    Shape(Shape),
    /// A scalar program (a loop's body).
    Program(Program),
    /// Another operation of the table, with its parameters (the steps a
    /// checkpointed pullback runs).
    Prim(PrimData),
}

/// An operation of the table in serialised form: its name
/// ([`ArrayPrimitive::name`]) and its parameters.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PrimData {
    /// The operation's name.
    pub name: String,
    /// Its parameters, in the order its [`ArrayPrimitive::from_params`]
    /// reads them.
    pub params: Vec<Param>,
}

impl PrimData {
    /// The serialised form of `prim`.
    pub fn of(prim: &dyn ArrayPrimitive) -> PrimData {
        PrimData {
            name: prim.name().to_owned(),
            params: prim.params(),
        }
    }

    /// The operation of the crate's table named `self.name`, read from
    /// the parameters; `None` for a name not in the table (an operation a
    /// user defines) or parameters it does not take.
    pub fn decode(&self) -> Option<ArrayPrim> {
        super::prims::decode(&self.name, &self.params)
    }
}

/// Reads [`Param`]s in order, for [`ArrayPrimitive::from_params`]: each
/// method takes the next parameter if it is of the asked kind, else gives
/// `None`.
///
/// # Example
///
/// ```
/// use optic_ad::array::{Param, ParamReader};
///
/// let params = [Param::Int(3), Param::Flag(true)];
/// let mut r = ParamReader::new(&params);
/// assert_eq!(r.usize(), Some(3));
/// assert_eq!(r.flag(), Some(true));
/// assert!(r.finish().is_some()); // nothing left over
/// ```
#[derive(Clone, Debug)]
pub struct ParamReader<'a> {
    rest: &'a [Param],
}

impl<'a> ParamReader<'a> {
    /// A reader of `params`.
    pub fn new(params: &'a [Param]) -> Self {
        ParamReader { rest: params }
    }

    fn next(&mut self) -> Option<&'a Param> {
        let (first, rest) = self.rest.split_first()?;
        self.rest = rest;
        Some(first)
    }

    /// The next parameter as a `usize` (an [`Param::Int`] that fits).
    pub fn usize(&mut self) -> Option<usize> {
        match self.next()? {
            Param::Int(k) => usize::try_from(*k).ok(),
            _ => None,
        }
    }

    /// The next parameter as a flag.
    pub fn flag(&mut self) -> Option<bool> {
        match self.next()? {
            Param::Flag(f) => Some(*f),
            _ => None,
        }
    }

    /// The next parameter as a list of integers.
    pub fn ints(&mut self) -> Option<&'a [u64]> {
        match self.next()? {
            Param::Ints(v) => Some(v),
            _ => None,
        }
    }

    /// The next parameter as numbers.
    pub fn floats(&mut self) -> Option<&'a [f64]> {
        match self.next()? {
            Param::Floats(v) => Some(v),
            _ => None,
        }
    }

    /// The next parameter as a shape.
    pub fn shape(&mut self) -> Option<Shape> {
        match self.next()? {
            Param::Shape(s) => Some(*s),
            _ => None,
        }
    }

    /// The next parameter as a scalar program.
    pub fn program(&mut self) -> Option<&'a Program> {
        match self.next()? {
            Param::Program(p) => Some(p),
            _ => None,
        }
    }

    /// The next parameter as an operation of the crate's table.
    pub fn prim(&mut self) -> Option<ArrayPrim> {
        match self.next()? {
            Param::Prim(d) => d.decode(),
            _ => None,
        }
    }

    /// Whether parameters remain.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// `Some(())` if every parameter was read (extra ones are an error).
    pub fn finish(&self) -> Option<()> {
        self.rest.is_empty().then_some(())
    }
}

/// Numbers to the bit: each as a scalar program's constant is written.
#[cfg(feature = "serde")]
mod floats_serde {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(transparent)]
    struct Bits(#[serde(with = "crate::program::op::constant_serde")] f64);

    pub fn serialize<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|&c| Bits(c)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        Ok(Vec::<Bits>::deserialize(d)?
            .into_iter()
            .map(|b| b.0)
            .collect())
    }
}

/// One instruction in serialised form; operands are value indices.
#[cfg(feature = "serde")]
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum OpData {
    Input(u32),
    Fill {
        #[serde(with = "crate::program::op::constant_serde")]
        value: f64,
        shape: Shape,
    },
    Const {
        #[serde(with = "floats_serde")]
        data: Vec<f64>,
        shape: Shape,
    },
    Map {
        body: Program,
        args: Vec<u32>,
    },
    MapOut(u32),
    Prim {
        op: PrimData,
        args: Vec<u32>,
    },
}

#[cfg(feature = "serde")]
#[derive(serde::Serialize, serde::Deserialize)]
struct GuardData {
    a: u32,
    b: u32,
    #[serde(with = "crate::program::ir::ordering_serde")]
    ordering: Option<std::cmp::Ordering>,
}

/// The serialised form of an [`ArrayProgram`].
#[cfg(feature = "serde")]
#[derive(serde::Serialize, serde::Deserialize)]
struct ArrayProgramData {
    inputs: Vec<Shape>,
    ops: Vec<OpData>,
    outputs: Vec<u32>,
    guards: Vec<GuardData>,
}

#[cfg(feature = "serde")]
impl ArrayProgramData {
    fn of(p: &ArrayProgram) -> Result<ArrayProgramData> {
        if let Some(e) = &p.defect {
            return Err(e.clone());
        }
        let ids = |args: &[AVar]| args.iter().map(|a| a.0).collect::<Vec<u32>>();
        let mut ops = Vec::with_capacity(p.ops.len());
        for (i, op) in p.ops.iter().enumerate() {
            ops.push(match op {
                ArrayOp::Input(k) => OpData::Input(*k),
                ArrayOp::Fill(c) => OpData::Fill {
                    value: *c,
                    shape: p.shapes[i],
                },
                ArrayOp::Const(d) => OpData::Const {
                    data: d.to_vec(),
                    shape: p.shapes[i],
                },
                ArrayOp::Map { body, args } => OpData::Map {
                    body: (**body).clone(),
                    args: ids(args),
                },
                ArrayOp::MapOut(k) => OpData::MapOut(*k),
                ArrayOp::Prim { prim, args } => {
                    let data = PrimData::of(&**prim);
                    // An operation the table does not hold (a user's)
                    // could not be read back: refused here, not later.
                    if !super::prims::in_table(prim) {
                        return Err(Error::Unsupported(
                            "serialising an array operation that is not in the crate's \
                             primitive table",
                        ));
                    }
                    OpData::Prim {
                        op: data,
                        args: ids(args),
                    }
                }
            });
        }
        Ok(ArrayProgramData {
            inputs: p.input_shapes.clone(),
            ops,
            outputs: ids(&p.outputs),
            guards: p
                .guards
                .iter()
                .map(|g| GuardData {
                    a: g.a.0,
                    b: g.b.0,
                    ordering: g.ordering,
                })
                .collect(),
        })
    }

    /// The program, rebuilt through the builder (which checks shapes and
    /// operands as for a traced one).
    fn rebuild(self) -> Result<ArrayProgram> {
        let malformed = |m| Error::Malformed(m);
        let mut b = ArrayBuilder::new();
        let mut vals: Vec<AVar> = Vec::with_capacity(self.ops.len());
        let mut inputs = 0;
        // The last map: its instruction and its outputs.
        let mut last_map: Option<(usize, Vec<AVar>)> = None;
        for (i, op) in self.ops.into_iter().enumerate() {
            let operands = |args: &[u32]| -> Result<Vec<AVar>> {
                args.iter()
                    .map(|&a| {
                        vals.get(a as usize)
                            .copied()
                            .ok_or(malformed(Malformation::LaterValue { instruction: i }))
                    })
                    .collect()
            };
            let v = match op {
                OpData::Input(k) => {
                    let shape = match self.inputs.get(k as usize) {
                        Some(&s) if k as usize == inputs => s,
                        _ => {
                            return Err(malformed(Malformation::BadInput {
                                instruction: i,
                                input: k as usize,
                            }))
                        }
                    };
                    inputs += 1;
                    b.input(shape)
                }
                OpData::Fill { value, shape } => b.fill(value, shape),
                OpData::Const { data, shape } => {
                    if data.len() != shape.len() || shape == Shape::Scalar {
                        return Err(malformed(Malformation::Parameters { instruction: i }));
                    }
                    b.constant_shaped(data.into(), shape)
                }
                OpData::Map { body, args } => {
                    if body.n_outputs() == 0 {
                        return Err(malformed(Malformation::Parameters { instruction: i }));
                    }
                    let args = operands(&args)?;
                    let outs = b.map(std::sync::Arc::new(body), &args);
                    let first = outs[0];
                    last_map = Some((i, outs));
                    first
                }
                OpData::MapOut(k) => match &last_map {
                    Some((j, outs)) if i - j == k as usize && (k as usize) < outs.len() => {
                        outs[k as usize]
                    }
                    _ => return Err(malformed(Malformation::Parameters { instruction: i })),
                },
                OpData::Prim { op, args } => {
                    if args.len() > MAX_ARRAY_ARITY {
                        return Err(malformed(Malformation::Arity {
                            instruction: i,
                            expected: MAX_ARRAY_ARITY,
                            got: args.len(),
                        }));
                    }
                    let args = operands(&args)?;
                    let prim = match super::prims::decode(&op.name, &op.params) {
                        Some(p) => p,
                        None if super::prims::is_name(&op.name) => {
                            return Err(malformed(Malformation::Parameters { instruction: i }))
                        }
                        None => {
                            return Err(malformed(Malformation::UnknownOperation {
                                instruction: i,
                            }))
                        }
                    };
                    b.apply_prim(prim, &args)
                }
            };
            vals.push(v);
        }
        if inputs != self.inputs.len() {
            return Err(malformed(Malformation::MissingInput));
        }
        let value = |a: u32| {
            vals.get(a as usize)
                .copied()
                .ok_or(malformed(Malformation::DanglingReference))
        };
        for g in &self.guards {
            b.guard(value(g.a)?, value(g.b)?, g.ordering);
        }
        let outputs = self
            .outputs
            .iter()
            .map(|&o| value(o))
            .collect::<Result<Vec<AVar>>>()?;
        b.finish(&outputs)
    }
}

/// Writes the program's inputs' shapes, its instructions (each operation
/// of the table by name and [`ArrayPrimitive::params`], map and loop
/// bodies as scalar programs), outputs and guards.
///
/// # Errors
///
/// [`Error::Unsupported`] (as the serializer's custom error) for an
/// operation that is not in the crate's primitive table; the program's own
/// error if it recorded one while it was built.
#[cfg(feature = "serde")]
impl serde::Serialize for ArrayProgram {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        ArrayProgramData::of(self)
            .map_err(serde::ser::Error::custom)?
            .serialize(s)
    }
}

/// Reads a program and rebuilds it instruction by instruction through the
/// [`ArrayBuilder`]: shapes, operands and parameters are checked as for a
/// traced program (a malformed one is the deserializer's custom error
/// with the [`Error`]'s message), and the result evaluates to the same
/// bits as the program written.
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for ArrayProgram {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        ArrayProgramData::deserialize(d)?
            .rebuild()
            .map_err(serde::de::Error::custom)
    }
}
