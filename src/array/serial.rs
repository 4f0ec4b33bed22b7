//! The serialised form of array programs: each operation of the table
//! writes its parameters as a list of [`Param`](super::Param)s
//! ([`ArrayPrimitive::params`]) and reads them back
//! ([`ArrayPrimitive::from_params`]); with the `serde` feature an
//! [`ArrayProgram`] is `Serialize` and `Deserialize` through them. A
//! program read back is the program written, instruction for instruction;
//! each is checked as the [`ArrayBuilder`](super::ArrayBuilder) checks
//! what it records (operands, shapes by the operation's shape rule,
//! parameters), but nothing is simplified or shared again.

#[cfg(feature = "serde")]
use super::ir::{AVar, ArrayGuard, ArrayOp, ArrayProgram, MAX_ARRAY_ARITY};
use super::ir::{ArrayPrim, ArrayPrimitive};
#[cfg(feature = "serde")]
use super::param::floats_serde;
#[cfg(feature = "serde")]
use super::param::Param;
use super::param::PrimData;
#[cfg(feature = "serde")]
use super::shape::Shape;
#[cfg(feature = "serde")]
use crate::error::{Error, Malformation, Result};
#[cfg(feature = "serde")]
use crate::program::Program;

/// # Example
///
/// ```
/// use optic_ad::array::prims::Slice;
/// use optic_ad::array::PrimData;
///
/// let data = PrimData::of(&Slice { start: 2, len: 3 });
/// assert_eq!(data.name, "slice");
/// let back = data.decode().unwrap(); // the operation of the table
/// assert_eq!(back.downcast_ref::<Slice>(), Some(&Slice { start: 2, len: 3 }));
/// assert!(PrimData { name: "frobnicate".into(), params: vec![] }.decode().is_none());
/// ```
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

/// A body that calls a user rule: rules are code, and a program read back
/// could not call them.
#[cfg(feature = "serde")]
const USER_RULES: Error = Error::Unsupported(
    "serialising an array program whose map or loop body calls a user rule (rules are code, \
     not data)",
);

/// Whether a body among `params` (at any depth) calls a user rule.
#[cfg(feature = "serde")]
fn holds_user_rules(params: &[Param]) -> bool {
    params.iter().any(|p| match p {
        Param::Program(body) => !body.custom_rules().is_empty(),
        Param::Prim(d) => holds_user_rules(&d.params),
        _ => false,
    })
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
                ArrayOp::Map { body, args } => {
                    if !body.custom_rules().is_empty() {
                        return Err(USER_RULES);
                    }
                    OpData::Map {
                        body: (**body).clone(),
                        args: ids(args),
                    }
                }
                ArrayOp::MapOut(k) => OpData::MapOut(*k),
                ArrayOp::Prim { prim, args } => {
                    // An operation the table does not hold (a user's)
                    // could not be read back: refused here, not later.
                    if !super::prims::in_table(prim) {
                        return Err(Error::Unsupported(
                            "serialising an array operation that is not in the crate's \
                             primitive table",
                        ));
                    }
                    let data = PrimData::of(&**prim);
                    if holds_user_rules(&data.params) {
                        return Err(USER_RULES);
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

    /// The program as written, each instruction checked as the builder
    /// checks it (operands earlier, shapes by the operation's shape rule,
    /// parameters by its `from_params`), but neither simplified nor shared
    /// again: the program read back is the program written.
    fn rebuild(self) -> Result<ArrayProgram> {
        let malformed = |m| Error::Malformed(m);
        let n = self.ops.len();
        let mut ops: Vec<ArrayOp> = Vec::with_capacity(n);
        let mut shapes: Vec<Shape> = Vec::with_capacity(n);
        let mut inputs = 0;
        // The last map: its instruction and its number of outputs.
        let mut last_map: Option<(usize, usize)> = None;
        for (i, op) in self.ops.into_iter().enumerate() {
            // Whether this instruction must be an output of the last map.
            let pending = last_map.is_some_and(|(j, n_out)| i < j + n_out);
            let operands = |args: &[u32]| -> Result<Vec<AVar>> {
                args.iter()
                    .map(|&a| {
                        ((a as usize) < i)
                            .then_some(AVar(a))
                            .ok_or(malformed(Malformation::LaterValue { instruction: i }))
                    })
                    .collect()
            };
            let (op, shape) = match op {
                OpData::Input(k) => match self.inputs.get(k as usize) {
                    Some(&s) if k as usize == inputs => {
                        inputs += 1;
                        (ArrayOp::Input(k), s)
                    }
                    _ => {
                        return Err(malformed(Malformation::BadInput {
                            instruction: i,
                            input: k as usize,
                        }))
                    }
                },
                OpData::Fill { value, shape } => (ArrayOp::Fill(value), shape),
                OpData::Const { data, shape } => {
                    if data.len() != shape.len() {
                        return Err(malformed(Malformation::Parameters { instruction: i }));
                    }
                    (ArrayOp::Const(data.into()), shape)
                }
                OpData::Map { body, args } => {
                    let n_out = body.n_outputs();
                    if n_out == 0 || body.n_inputs() != args.len() {
                        return Err(malformed(Malformation::Parameters { instruction: i }));
                    }
                    let args = operands(&args)?;
                    // The builder folds fills into the body; one kept as
                    // an argument would be folded by the transforms of the
                    // program read back, and their values would differ
                    // from its own at ±∞ and NaN.
                    if args
                        .iter()
                        .any(|a| matches!(ops[a.index()], ArrayOp::Fill(_)))
                    {
                        return Err(malformed(Malformation::Parameters { instruction: i }));
                    }
                    // Scalars broadcast; the vectors and matrices agree.
                    let mut shape = Shape::Scalar;
                    for a in &args {
                        match (shape, shapes[a.index()]) {
                            (_, Shape::Scalar) => {}
                            (Shape::Scalar, s) => shape = s,
                            (s, t) if s == t => {}
                            (s, t) => {
                                return Err(Error::ShapeMismatch {
                                    what: "map: arguments",
                                    expected: s,
                                    got: t,
                                })
                            }
                        }
                    }
                    last_map = Some((i, n_out));
                    let body = std::sync::Arc::new(body);
                    (ArrayOp::Map { body, args }, shape)
                }
                OpData::MapOut(k) => match last_map {
                    Some((j, n_out)) if k >= 1 && i - j == k as usize && (k as usize) < n_out => {
                        (ArrayOp::MapOut(k), shapes[j])
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
                    let arg_shapes: Vec<Shape> = args.iter().map(|a| shapes[a.index()]).collect();
                    let shape = prim.shape(&arg_shapes)?;
                    let args = args.as_slice().into();
                    (ArrayOp::Prim { prim, args }, shape)
                }
            };
            // A map's outputs follow it without a gap, and nothing else
            // comes between.
            if pending != matches!(op, ArrayOp::MapOut(_)) {
                return Err(malformed(Malformation::Parameters { instruction: i }));
            }
            ops.push(op);
            shapes.push(shape);
        }
        if let Some((j, n_out)) = last_map {
            if j + n_out > n {
                return Err(malformed(Malformation::Parameters { instruction: n }));
            }
        }
        if inputs != self.inputs.len() {
            return Err(malformed(Malformation::MissingInput));
        }
        let value = |a: u32| {
            ((a as usize) < n)
                .then_some(AVar(a))
                .ok_or(malformed(Malformation::DanglingReference))
        };
        let mut guards = Vec::with_capacity(self.guards.len());
        for g in &self.guards {
            let (a, b) = (value(g.a)?, value(g.b)?);
            for v in [a, b] {
                if shapes[v.index()] != Shape::Scalar {
                    return Err(Error::ShapeMismatch {
                        what: "guard operand",
                        expected: Shape::Scalar,
                        got: shapes[v.index()],
                    });
                }
            }
            guards.push(ArrayGuard {
                a,
                b,
                ordering: g.ordering,
            });
        }
        let outputs = self
            .outputs
            .iter()
            .map(|&o| value(o))
            .collect::<Result<Vec<AVar>>>()?;
        Ok(ArrayProgram {
            input_shapes: self.inputs,
            ops,
            shapes,
            outputs,
            guards,
            defect: None,
            id: 0,
        }
        .with_fresh_id())
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

/// Reads a program instruction by instruction, checking each as the
/// [`ArrayBuilder`](super::ArrayBuilder) checks what it records:
/// operands (earlier values), shapes (the operation's shape rule) and
/// parameters (a malformed program is the deserializer's custom error
/// with the [`Error`]'s message). Nothing is simplified or shared again:
/// the result is the program written, printing the same and giving the
/// same bits. A well-formed file may still ask for
/// much work (a loop of 2⁶⁰ steps): check the sizes of programs taken
/// from others before running them.
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for ArrayProgram {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        ArrayProgramData::deserialize(d)?
            .rebuild()
            .map_err(serde::de::Error::custom)
    }
}
