//! The primitive table: for each primitive, one definition holding its name,
//! arity, value, pullback and pushforward (the architecture chapter of the
//! book, "One primitive table").
//!
//! A primitive is a unit struct implementing the crate-internal trait `Primitive` in the file of its
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
//! order (K. Fischer, "∂P.jl terminology and notation guide", §VII.B, Snippets 18–20, on
//! rrule-based primitives). Cotangent contributions are `Option<Var>`, with
//! `None` a structural zero (the `Zero` of the ChainRules design notes).
//! User-defined primitives ([`CustomRule`]) go through the same path.

#[macro_use]
mod arith;
#[macro_use]
mod exp_log;
#[macro_use]
mod hyperbolic;
pub(crate) mod jet;
#[macro_use]
mod nonsmooth;
#[macro_use]
mod power;
#[macro_use]
mod special;
pub(crate) mod special_values;
#[macro_use]
mod trig;

pub use crate::program::custom::ScalarRule;
pub use crate::program::ir::{Contribs, CustomRule, Rule};

use crate::program::{Builder, Instr, Var, MAX_ARITY};

mod bind;

/// The hooks of a number type that primitives apply to.
pub(crate) mod private {
    use super::{CustomRule, Prim};

    /// How a number type applies primitives: the crate-internal hooks that
    /// [`crate::Real`] is sealed through, and all that the table's
    /// interpreter dispatch asks of a number.
    pub trait Internal: Sized {
        /// The primal (real) part, for tracing at this point.
        fn primal(&self) -> f64;
        /// Applies a built-in primitive (`x.len() == prim.arity()`).
        fn apply_prim(prim: Prim, param: i32, x: &[Self]) -> Self;
        /// Applies a user rule (`x.len() == rule.arity()`; NaN otherwise).
        fn apply_custom(rule: &CustomRule, x: &[Self]) -> Self;
        /// Whether this number type traces loops as one instruction (the
        /// array trace's scalar), its body traced once.
        fn traces_loops() -> bool {
            false
        }
        /// `out = op(A) op(B)` by a library GEMM, for a number type that
        /// has one (`f64` with the feature `gemm`: faer's); `false` for the
        /// others, which the array tier's generic kernel serves.
        fn matmul_library(
            a: &[Self],
            b: &[Self],
            d: crate::array::matmul::MatMulDims,
            out: &mut [Self],
        ) -> bool {
            let _ = (a, b, d, out);
            false
        }
        /// Records `steps` applications of `body` to the carry `init` as
        /// one loop instruction whose pullback keeps at most `snapshots`
        /// carries besides the first (`None`: all), for a number type that
        /// traces loops (the array trace's scalar); `None` for the others,
        /// on which [`crate::fold`] runs the loop itself.
        fn fold_traced(
            steps: usize,
            init: &[Self],
            snapshots: Option<usize>,
            body: &dyn Fn(&[Self]) -> Vec<Self>,
        ) -> Option<crate::error::Result<Vec<Self>>> {
            let _ = (steps, init, snapshots, body);
            None
        }

        /// [`crate::while_loop`] traced as a loop, for a number type that
        /// traces loops; `None` for the others.
        #[allow(clippy::type_complexity)]
        fn while_traced(
            max_steps: usize,
            init: &[Self],
            snapshots: &dyn Fn(usize) -> Option<usize>,
            cond: &dyn Fn(&[Self]) -> bool,
            body: &dyn Fn(&[Self]) -> Vec<Self>,
        ) -> Option<crate::error::Result<Vec<Self>>> {
            let _ = (max_steps, init, snapshots, cond, body);
            None
        }
    }
}

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
    /// Whether the result switches between formulas on the operands'
    /// values (a branch, a kink or a jump: `select`, `max`, `clamp`,
    /// `floor`, …). The rounding-error estimate of Taylor mode keeps these
    /// decisions as the unperturbed run took them.
    const BRANCHES: bool = false;

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
        transpose_pullback(b, t, |b, ti| Self::pullback(b, x, param, y, ti))
    }

    /// The Taylor rule: from the operands' jets `x` (each of `y.len()`
    /// normalised Taylor coefficients, `xₖ = x⁽ᵏ⁾(0)/k!`), write the jet of
    /// `y`, `y[0]` included (the f64 value, bit for bit). `O(K²)` for a jet
    /// of degree `K` (the gamma family `O(K³)`), by the recurrences of
    /// [`jet`]; `s` holds intermediate jets.
    fn taylor(x: &[&[f64]], param: i32, y: &mut [f64], s: &mut jet::Scratch);

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

/// Stamps out [`Prim`] and its dispatch from the families' lists, which
/// the `*_list` macros of the family files hand on one to the next (each
/// appends its own and calls the next; the last, `table!`, receives them
/// all). Every dispatch is one flat `match` over the primitives.
macro_rules! table {
    ([$( $fam:ident { $( $(#[$vmeta:meta])* $P:ident ),* $(,)? } )*]) => {
        /// A built-in primitive. Each one is defined once, in the file of
        /// its family under `rules/` (arithmetic, powers, exponentials and
        /// logarithms, circular, hyperbolic, special, non-smooth); this
        /// enum only names it.
        ///
        /// Units: angles are in radians.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[non_exhaustive]
        pub enum Prim {
            $( $( $(#[$vmeta])* $P, )* )*
        }

        impl Prim {
            /// Every built-in primitive, in table order.
            const ALL: &'static [Prim] = &[$( $( Prim::$P, )* )*];

            /// The printed (and serialised) name.
            #[inline]
            pub fn name(self) -> &'static str {
                match self { $( $( Prim::$P => <$fam::$P as Primitive>::NAME, )* )* }
            }

            /// Number of operands.
            #[inline]
            pub fn arity(self) -> usize {
                match self { $( $( Prim::$P => <$fam::$P as Primitive>::ARITY, )* )* }
            }

            /// Whether the result switches between formulas on the
            /// operands' values (see `Primitive::BRANCHES`).
            #[inline]
            pub(crate) fn branches(self) -> bool {
                match self { $( $( Prim::$P => <$fam::$P as Primitive>::BRANCHES, )* )* }
            }

            /// The f64 value on `x` (at least `self.arity()` values; the
            /// rest are ignored).
            #[inline(always)]
            pub(crate) fn value(self, x: &[f64], param: i32) -> f64 {
                match self { $( $( Prim::$P => <$fam::$P as Primitive>::value(x, param), )* )* }
            }

            /// The f64 value as a C function of three operands and the
            /// parameter (operands past the arity are ignored): what
            /// native code calls for this primitive, so that it computes
            /// exactly what [`Prim::value`] computes.
            #[cfg(feature = "jit")]
            pub(crate) fn native_value(self) -> extern "C" fn(f64, f64, f64, i32) -> f64 {
                match self { $( $( Prim::$P => {
                    extern "C" fn value(a: f64, b: f64, c: f64, param: i32) -> f64 {
                        <$fam::$P as Primitive>::value(&[a, b, c], param)
                    }
                    value
                } )* )* }
            }

            /// Evaluates one instruction of the compact evaluation form
            /// ([`crate::program::eval`]): one flat `match` on its opcode
            /// over every primitive, an input and a constant, so the
            /// interpreter pays one indirect jump per instruction. Each
            /// primitive's arm reads exactly its `ARITY` operands and, for
            /// f64, inlines the primitive's value. User rules go to `other`.
            #[inline(always)]
            pub(crate) fn eval_instr<T: private::Internal + Copy>(
                ins: &crate::program::ir::Instr,
                inputs: &[T],
                vals: &[T],
                cst: impl FnOnce(f64) -> T,
                other: impl FnOnce() -> T,
            ) -> T {
                // Operand `i` of an instruction (a constant-folded choice).
                let slot = |i: usize| ins.args[i].index();
                match ins.code {
                    opcode::INPUT => inputs[ins.args[0].index()],
                    opcode::CONST => cst(ins.const_bits()),
                    $( $( opcode::$P => {
                        const N: usize = <$fam::$P as Primitive>::ARITY;
                        let x: [T; N] = std::array::from_fn(|i| vals[slot(i)]);
                        // The parameter is in the slot past the operands
                        // (primitives with three operands have none).
                        let param = if N < 3 { ins.args[2].0 as i32 } else { 0 };
                        T::apply_prim(Prim::$P, param, &x)
                    } )* )*
                    _ => other(),
                }
            }

            /// Pullback contributions (see `Primitive::pullback`).
            pub(crate) fn pullback(
                self, b: &mut Builder, x: &[Var], param: i32, y: Var, ct: Var,
            ) -> Contribs {
                match self {
                    $( $( Prim::$P => <$fam::$P as Primitive>::pullback(b, x, param, y, ct), )* )*
                }
            }

            /// Pushforward (see `Primitive::pushforward`).
            pub(crate) fn pushforward(
                self, b: &mut Builder, x: &[Var], param: i32, y: Var, t: &[Option<Var>],
            ) -> Option<Var> {
                match self {
                    $( $( Prim::$P => <$fam::$P as Primitive>::pushforward(b, x, param, y, t), )* )*
                }
            }

            /// The Taylor rule (see `Primitive::taylor`).
            #[inline]
            pub(crate) fn taylor(
                self, x: &[&[f64]], param: i32, y: &mut [f64], s: &mut jet::Scratch,
            ) {
                match self {
                    $( $( Prim::$P => <$fam::$P as Primitive>::taylor(x, param, y, s), )* )*
                }
            }

            /// The num-dual value, where num-dual has the function.
            #[inline]
            pub(crate) fn dual<D: DualF64>(self, x: &[D], param: i32) -> Option<D> {
                match self { $( $( Prim::$P => <$fam::$P as Primitive>::dual(x, param), )* )* }
            }

            /// Algebraic simplification (see `Primitive::simplify`).
            pub(crate) fn simplify(self, b: &mut Builder, x: &[Var], param: i32) -> Option<Var> {
                match self {
                    $( $( Prim::$P => <$fam::$P as Primitive>::simplify(b, x, param), )* )*
                }
            }

            /// The printed right-hand side.
            pub(crate) fn display(self, x: &[String], param: i32) -> String {
                match self { $( $( Prim::$P => <$fam::$P as Primitive>::display(x, param), )* )* }
            }
        }
    };
}

arith_list! { [] power_list exp_log_list trig_list hyperbolic_list special_list nonsmooth_list table }

/// The opcodes of the compact evaluation form: an input, a constant and a
/// user rule, then the primitives in table order (one dense range, so the
/// interpreter's dispatch is one jump table).
#[allow(non_upper_case_globals)]
pub(crate) mod opcode {
    use super::Prim;

    macro_rules! codes {
        ([$( $fam:ident { $( $(#[$vmeta:meta])* $P:ident ),* $(,)? } )*]) => {
            $( $( pub(crate) const $P: u8 = FIRST_PRIM + Prim::$P as u8; )* )*
        };
    }
    arith_list! { [] power_list exp_log_list trig_list hyperbolic_list special_list nonsmooth_list codes }

    pub(crate) use crate::program::ir::opcode::{CONST, FIRST_PRIM, INPUT};

    const _: () = assert!(
        Prim::ALL.len() + FIRST_PRIM as usize <= 256,
        "opcodes must fit in a byte"
    );

    /// A primitive's opcode.
    #[inline]
    pub(crate) fn of(prim: Prim) -> u8 {
        FIRST_PRIM + prim as u8
    }

    /// The primitive an opcode stands for (`None` for an input, a constant
    /// or a user rule).
    #[inline(always)]
    pub(crate) fn prim(code: u8) -> Option<Prim> {
        Prim::ALL
            .get(code.checked_sub(FIRST_PRIM)? as usize)
            .copied()
    }
}

impl Prim {
    /// The primitive an opcode of the stored instruction form stands for.
    #[inline(always)]
    pub(crate) fn of_opcode(code: u8) -> Option<Prim> {
        opcode::prim(code)
    }

    /// Every built-in primitive.
    pub fn all() -> impl Iterator<Item = Prim> {
        Prim::ALL.iter().copied()
    }
}

impl std::fmt::Display for Prim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The pushforward of a scalar-valued operation from its pullback: the
/// pullback's contribution `i` with `ȳ := ṫᵢ` is `∂ᵢf · ṫᵢ`, and the tangent
/// of the result is their sum (structural zeros skipped), so a derivative
/// is written once and serves both directions.
fn transpose_pullback(
    b: &mut Builder,
    tangents: &[Option<Var>],
    mut pullback: impl FnMut(&mut Builder, Var) -> Contribs,
) -> Option<Var> {
    let mut acc: Option<Var> = None;
    for (i, ti) in tangents.iter().enumerate() {
        let Some(ti) = *ti else { continue };
        if let Some(c) = pullback(b, ti)[i] {
            acc = Some(match acc {
                Some(a) => b.add(a, c),
                None => c,
            });
        }
    }
    acc
}

/// The pullback of one instruction: given its (already rebuilt)
/// instruction, its result `y` and the cotangent `ct` of `y`, emit and
/// return the cotangent contribution for each operand, in operand order.
/// A user rule is looked up in `rules`, the table of the program the
/// instruction comes from.
pub(crate) fn pullback(
    b: &mut Builder,
    ins: &Instr,
    y: Var,
    ct: Var,
    rules: &[CustomRule],
) -> Contribs {
    if let Some(prim) = ins.prim() {
        prim.pullback(b, ins.operands(), ins.param(), y, ct)
    } else if ins.is_custom() {
        match rules.get(ins.rule as usize) {
            Some(r) => r.pullback_contribs(b, ins.operands(), y, ct),
            None => [None; MAX_ARITY],
        }
    } else {
        [None; MAX_ARITY]
    }
}

/// The pushforward of one instruction: given its (already rebuilt)
/// instruction, its result `y` and the tangents of its operands (`None`: a
/// structural zero), emit and return the tangent of `y`. A user rule is
/// looked up in `rules`, the table of the program the instruction comes
/// from.
pub(crate) fn pushforward(
    b: &mut Builder,
    ins: &Instr,
    y: Var,
    tangents: &[Option<Var>],
    rules: &[CustomRule],
) -> Option<Var> {
    if let Some(prim) = ins.prim() {
        prim.pushforward(b, ins.operands(), ins.param(), y, tangents)
    } else if ins.is_custom() {
        let r = rules.get(ins.rule as usize)?;
        // Transposition of the pullback, as for built-in primitives.
        transpose_pullback(b, tangents, |b, ti| {
            r.pullback_contribs(b, ins.operands(), y, ti)
        })
    } else {
        None
    }
}
