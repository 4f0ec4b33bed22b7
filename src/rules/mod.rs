//! The primitive table: for each primitive, one definition holding its name,
//! arity, value, pullback and pushforward (the architecture chapter of the
//! book, "One primitive table").
//!
//! A primitive is a unit struct implementing [`Primitive`] in the file of its
//! family (`arith`, `power`, `exp_log`, `trig`, `hyperbolic`, `special`,
//! `nonsmooth`). The family's enum and the dispatch to each definition are
//! stamped out, from the list at the top of that file, by a private macro;
//! [`Prim`] names a primitive as its family and its variant. Tracing, the
//! builder, the passes, printing, serde and the interpreter ask [`Prim`] and
//! never enumerate primitives, so adding a primitive touches one file (the
//! book's "Adding a primitive" section).
//!
//! Pullbacks are written against the [`Builder`], so the pullback of a rule
//! is itself a program that ∂⃖ can differentiate again: rules nest to any
//! order (K. Fischer, "∂P.jl terminology and notation guide", §VII.C on
//! rrule-based primitives). Cotangent contributions are `Option<Var>`, with
//! `None` a structural zero (the `Zero` of the ChainRules design notes).
//! User-defined primitives ([`CustomRule`]) go through the same path.

mod arith;
mod exp_log;
mod hyperbolic;
mod nonsmooth;
mod power;
mod special;
pub(crate) mod special_values;
mod trig;

pub use crate::program::custom::{CustomRule, Rule, ScalarRule};
pub use arith::Arith;
pub use exp_log::ExpLog;
pub use hyperbolic::Hyperbolic;
pub use nonsmooth::NonSmooth;
pub use power::Power;
pub use special::Special;
pub use trig::Trig;

use crate::program::{Builder, Op, Var, MAX_ARITY};

/// A num-dual number type over f64 (`Dual64`, `Dual2_64`, `Dual3_64`,
/// `HyperDual64`, …), as the primitives' num-dual values see it.
pub(crate) trait DualF64:
    num_dual::DualNum<Primitive = f64> + num_dual::DualStruct<Real = f64> + Copy
{
}
impl<D> DualF64 for D where
    D: num_dual::DualNum<Primitive = f64> + num_dual::DualStruct<Real = f64> + Copy
{
}

/// Cotangent contributions of one instruction, one per operand, in operand
/// order (`None`: a structural zero).
pub type Contribs = [Option<Var>; MAX_ARITY];

/// One primitive's definition: everything the crate needs to trace,
/// simplify, print, evaluate and differentiate it.
///
/// `x` holds the operands (`Self::ARITY` of them) and `param` the
/// primitive's integer attribute (the exponent of `powi`, the order of
/// `polygamma`; 0 for the others).
pub(crate) trait Primitive {
    /// The name used when a program is printed and serialised.
    const NAME: &'static str;
    /// Number of operands.
    const ARITY: usize;

    /// The value in f64, with std's semantics where std has the function.
    fn value(x: &[f64], param: i32) -> f64;

    /// Emits the pullback: given the operands `x`, the result `y` and its
    /// cotangent `ct`, the cotangent contribution of each operand. It must be
    /// linear in `ct` and use only primitives that have rules, so that it
    /// nests to any order.
    fn pullback(b: &mut Builder, x: &[Var], param: i32, y: Var, ct: Var) -> Contribs;

    /// Emits the pushforward: the tangent of `y` from the operands' tangents
    /// `t` (`None`: a structural zero).
    ///
    /// The default transposes the pullback: a scalar-valued primitive's
    /// pullback contribution `i` with `ȳ := ṫᵢ` is `∂ᵢf · ṫᵢ`, and the
    /// tangent is their sum, so the derivative is written once.
    fn pushforward(
        b: &mut Builder,
        x: &[Var],
        param: i32,
        y: Var,
        t: &[Option<Var>],
    ) -> Option<Var> {
        let mut acc: Option<Var> = None;
        for (i, ti) in t.iter().enumerate() {
            let Some(ti) = *ti else { continue };
            if let Some(c) = Self::pullback(b, x, param, y, ti)[i] {
                acc = Some(match acc {
                    Some(a) => b.add(a, c),
                    None => c,
                });
            }
        }
        acc
    }

    /// The value on num-dual numbers, where num-dual has the function with
    /// the right semantics. `None` (the default) makes the num-dual types
    /// derive the derivative parts from this primitive's own pushforward.
    fn dual<D: DualF64>(_x: &[D], _param: i32) -> Option<D> {
        None
    }

    /// Algebraic simplification when the builder pushes this primitive:
    /// `Some(v)` when it reduces to an existing or simpler value. Only
    /// rewrites that are exact in IEEE 754 (or that produce structural
    /// zeros) belong here.
    fn simplify(_b: &mut Builder, _x: &[Var], _param: i32) -> Option<Var> {
        None
    }

    /// The printed right-hand side, given the printed operands.
    fn display(x: &[String], _param: i32) -> String {
        format!("{} {}", Self::NAME, x.join(", "))
    }
}

/// Stamps out a family enum and its dispatch from the list of its
/// primitives (each a unit struct implementing [`Primitive`] in the same
/// file).
macro_rules! family {
    ($(#[$meta:meta])* $Family:ident { $($(#[$vmeta:meta])* $P:ident),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[non_exhaustive]
        pub enum $Family {
            $($(#[$vmeta])* $P,)+
        }

        impl $Family {
            /// Every primitive of the family.
            pub(crate) const ALL: &'static [$Family] = &[$($Family::$P),+];

            #[inline]
            pub(crate) fn name(self) -> &'static str {
                match self { $($Family::$P => <$P as Primitive>::NAME,)+ }
            }
            #[inline]
            pub(crate) fn arity(self) -> usize {
                match self { $($Family::$P => <$P as Primitive>::ARITY,)+ }
            }
            #[inline(always)]
            pub(crate) fn value(self, x: &[f64], param: i32) -> f64 {
                match self { $($Family::$P => <$P as Primitive>::value(x, param),)+ }
            }
            pub(crate) fn pullback(
                self, b: &mut Builder, x: &[Var], param: i32, y: Var, ct: Var,
            ) -> Contribs {
                match self { $($Family::$P => <$P as Primitive>::pullback(b, x, param, y, ct),)+ }
            }
            pub(crate) fn pushforward(
                self, b: &mut Builder, x: &[Var], param: i32, y: Var, t: &[Option<Var>],
            ) -> Option<Var> {
                match self { $($Family::$P => <$P as Primitive>::pushforward(b, x, param, y, t),)+ }
            }
            #[inline]
            pub(crate) fn dual<D: DualF64>(self, x: &[D], param: i32) -> Option<D> {
                match self { $($Family::$P => <$P as Primitive>::dual(x, param),)+ }
            }
            pub(crate) fn simplify(self, b: &mut Builder, x: &[Var], param: i32) -> Option<Var> {
                match self { $($Family::$P => <$P as Primitive>::simplify(b, x, param),)+ }
            }
            pub(crate) fn display(self, x: &[String], param: i32) -> String {
                match self { $($Family::$P => <$P as Primitive>::display(x, param),)+ }
            }
        }
    };
}
pub(crate) use family;

/// A built-in primitive: its family and its variant. Each one is defined
/// once, in its family's file; [`Prim`] only dispatches.
///
/// Units: angles are in radians.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Prim {
    /// `+ − × ÷`, negation, fused multiply-add.
    Arith(Arith),
    /// Powers and roots.
    Power(Power),
    /// Exponentials and logarithms.
    ExpLog(ExpLog),
    /// Circular functions and their inverses.
    Trig(Trig),
    /// Hyperbolic functions and their inverses.
    Hyperbolic(Hyperbolic),
    /// Error and gamma-family functions.
    Special(Special),
    /// Selection and the non-smooth functions (`abs`, `max`, `floor`, …).
    NonSmooth(NonSmooth),
}

/// Dispatches a method to the family.
macro_rules! by_family {
    ($self:expr, $f:ident => $e:expr) => {
        match $self {
            Prim::Arith($f) => $e,
            Prim::Power($f) => $e,
            Prim::ExpLog($f) => $e,
            Prim::Trig($f) => $e,
            Prim::Hyperbolic($f) => $e,
            Prim::Special($f) => $e,
            Prim::NonSmooth($f) => $e,
        }
    };
}

impl Prim {
    /// The printed name.
    #[inline]
    pub fn name(self) -> &'static str {
        by_family!(self, f => f.name())
    }

    /// Number of operands.
    #[inline]
    pub fn arity(self) -> usize {
        by_family!(self, f => f.arity())
    }

    /// A dense ordinal, for passes that group instructions by primitive.
    pub(crate) fn ordinal(self) -> usize {
        let (family, index) = match self {
            Prim::Arith(f) => (0, f as usize),
            Prim::Power(f) => (1, f as usize),
            Prim::ExpLog(f) => (2, f as usize),
            Prim::Trig(f) => (3, f as usize),
            Prim::Hyperbolic(f) => (4, f as usize),
            Prim::Special(f) => (5, f as usize),
            Prim::NonSmooth(f) => (6, f as usize),
        };
        family * 32 + index
    }

    /// Upper bound of [`Prim::ordinal`].
    pub(crate) const ORDINALS: usize = 7 * 32;

    /// The f64 value on `x` (`x.len() == self.arity()`).
    #[inline(always)]
    pub(crate) fn value(self, x: &[f64], param: i32) -> f64 {
        by_family!(self, f => f.value(x, param))
    }

    /// Pullback contributions (see [`Primitive::pullback`]).
    pub(crate) fn pullback(
        self,
        b: &mut Builder,
        x: &[Var],
        param: i32,
        y: Var,
        ct: Var,
    ) -> Contribs {
        by_family!(self, f => f.pullback(b, x, param, y, ct))
    }

    /// Pushforward (see [`Primitive::pushforward`]).
    pub(crate) fn pushforward(
        self,
        b: &mut Builder,
        x: &[Var],
        param: i32,
        y: Var,
        t: &[Option<Var>],
    ) -> Option<Var> {
        by_family!(self, f => f.pushforward(b, x, param, y, t))
    }

    /// The num-dual value, where num-dual has the function.
    #[inline]
    pub(crate) fn dual<D: DualF64>(self, x: &[D], param: i32) -> Option<D> {
        by_family!(self, f => f.dual(x, param))
    }

    /// Algebraic simplification (see [`Primitive::simplify`]).
    pub(crate) fn simplify(self, b: &mut Builder, x: &[Var], param: i32) -> Option<Var> {
        by_family!(self, f => f.simplify(b, x, param))
    }

    /// The printed right-hand side.
    pub(crate) fn display(self, x: &[String], param: i32) -> String {
        by_family!(self, f => f.display(x, param))
    }

    /// Every built-in primitive.
    pub fn all() -> impl Iterator<Item = Prim> {
        let a = Arith::ALL.iter().map(|&f| Prim::Arith(f));
        let p = Power::ALL.iter().map(|&f| Prim::Power(f));
        let e = ExpLog::ALL.iter().map(|&f| Prim::ExpLog(f));
        let t = Trig::ALL.iter().map(|&f| Prim::Trig(f));
        let h = Hyperbolic::ALL.iter().map(|&f| Prim::Hyperbolic(f));
        let s = Special::ALL.iter().map(|&f| Prim::Special(f));
        let n = NonSmooth::ALL.iter().map(|&f| Prim::NonSmooth(f));
        a.chain(p).chain(e).chain(t).chain(h).chain(s).chain(n)
    }
}

impl std::fmt::Display for Prim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The pullback of one instruction: given its (already rebuilt) operation,
/// its result `y` and the cotangent `ct` of `y`, emit and return the
/// cotangent contribution for each operand, in operand order.
pub(crate) fn pullback(
    b: &mut Builder,
    op: &Op,
    y: Var,
    ct: Var,
    rules: &[CustomRule],
) -> Contribs {
    match *op {
        Op::Input(_) | Op::Const(_) => [None; MAX_ARITY],
        Op::Apply { prim, param, args } => prim.pullback(b, args.as_slice(), param, y, ct),
        Op::Custom { rule, args } => match rules.get(rule as usize) {
            Some(r) => r.pullback_contribs(b, args.as_slice(), y, ct),
            None => [None; MAX_ARITY],
        },
    }
}

/// The pushforward of one instruction: given its (already rebuilt)
/// operation, its result `y` and the tangents of its operands (`None`: a
/// structural zero), emit and return the tangent of `y`.
pub(crate) fn pushforward(
    b: &mut Builder,
    op: &Op,
    y: Var,
    tangents: &[Option<Var>],
    rules: &[CustomRule],
) -> Option<Var> {
    match *op {
        Op::Input(_) | Op::Const(_) => None,
        Op::Apply { prim, param, args } => prim.pushforward(b, args.as_slice(), param, y, tangents),
        Op::Custom { rule, args } => {
            let r = rules.get(rule as usize)?;
            // Transposition of the pullback, as for built-in primitives.
            let mut acc: Option<Var> = None;
            for (i, ti) in tangents.iter().enumerate() {
                let Some(ti) = *ti else { continue };
                if let Some(c) = r.pullback_contribs(b, args.as_slice(), y, ti)[i] {
                    acc = Some(match acc {
                        Some(a) => b.add(a, c),
                        None => c,
                    });
                }
            }
            acc
        }
    }
}
