//! The parameters of an array operation as its serialised form holds
//! them ([`ArrayPrimitive::params`](crate::array::ArrayPrimitive::params),
//! [`ArrayPrimitive::from_params`](crate::array::ArrayPrimitive::from_params)).

use super::shape::Shape;
use crate::program::Program;

/// One parameter of an array operation, as its serialised form holds it
/// (see [`ArrayPrimitive::params`](crate::array::ArrayPrimitive::params)). Numbers are kept to the bit: with
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
/// ([`ArrayPrimitive::name`](crate::array::ArrayPrimitive::name)) and its parameters.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PrimData {
    /// The operation's name.
    pub name: String,
    /// Its parameters, in the order its [`ArrayPrimitive::from_params`](crate::array::ArrayPrimitive::from_params)
    /// reads them.
    pub params: Vec<Param>,
}

/// Reads [`Param`]s in order, for [`ArrayPrimitive::from_params`](crate::array::ArrayPrimitive::from_params): each
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

    /// The next parameter as an operation with its parameters.
    pub fn prim(&mut self) -> Option<&'a PrimData> {
        match self.next()? {
            Param::Prim(d) => Some(d),
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
pub(super) mod floats_serde {
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
