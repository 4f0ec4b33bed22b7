//! User-defined primitives (the `rrule` of K. Fischer, "∂P.jl terminology
//! and notation guide", §VII.B, Snippets 18–20): the one-argument form
//! [`ScalarRule`], and what a [`CustomRule`] handle does with its rule
//! (value, Taylor rule, pullback checked for misuse of the builder).
//!
//! The handle itself, and the [`Rule`] trait it holds, belong to the IR
//! (`program::ir`): a program carries the rules its instructions apply.
//! What the functors derive from a rule (its pushforward programs, used on
//! num-dual numbers) is cached by the functor layer, keyed by
//! [`CustomRule::id`].

use super::ir::{Builder, Rule, Var};

/// A user-defined primitive of one argument: [`Rule`] with `arity` 1.
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{derivative, Builder, CustomRule, Real, ScalarRule, Var};
/// use optic_ad::typenum::U2;
///
/// /// y = x³ with pullback x̄ = 3x²ȳ.
/// struct Cube;
/// impl ScalarRule for Cube {
///     fn name(&self) -> &str {
///         "cube"
///     }
///     fn value(&self, x: f64) -> f64 {
///         x * x * x
///     }
///     fn pullback(&self, b: &mut Builder, x: Var, _y: Var, ct: Var) -> Var {
///         let x2 = b.mul(x, x);
///         let d = b.scale(3.0, x2);
///         b.mul(ct, d)
///     }
/// }
/// let cube = CustomRule::new(Cube);
/// let d = derivative::<U2, _, _>(|x| x.apply_rule(&cube), 2.0).unwrap();
/// assert_relative_eq!(d[1], 12.0); // 3x²
/// assert_relative_eq!(d[2], 12.0); // 6x
/// ```
pub trait ScalarRule: Send + Sync + 'static {
    /// Name used when a program is printed.
    fn name(&self) -> &str;
    /// The primal value `f(x)`.
    fn value(&self, x: f64) -> f64;
    /// Emits the pullback: given the input `x`, the output `y = f(x)` and
    /// the cotangent `ct` of `y`, return the cotangent of `x`, `f′(x)·ct`.
    /// It must be linear in `ct`.
    fn pullback(&self, b: &mut Builder, x: Var, y: Var, ct: Var) -> Var;

    /// The rule's own Taylor rule, if it has one: from the jet `x` of the
    /// argument (normalised Taylor coefficients, `x[k] = x⁽ᵏ⁾(0)/k!`, as
    /// long as `y`), write the jet of `f(x(t))` into `y` and return `true`.
    /// The default returns `false`: the rule is then derived from the
    /// pullback (see [`Rule::taylor`]).
    fn taylor(&self, x: &[f64], y: &mut [f64]) -> bool {
        let _ = (x, y);
        false
    }
}

impl<R: ScalarRule> Rule for R {
    fn name(&self) -> &str {
        ScalarRule::name(self)
    }
    fn arity(&self) -> usize {
        1
    }
    fn value(&self, x: &[f64]) -> f64 {
        ScalarRule::value(self, x[0])
    }
    fn pullback(&self, b: &mut Builder, x: &[Var], y: Var, ct: Var) -> Vec<Var> {
        vec![ScalarRule::pullback(self, b, x[0], y, ct)]
    }
    fn taylor(&self, x: &[&[f64]], y: &mut [f64]) -> bool {
        ScalarRule::taylor(self, x[0], y)
    }
}
