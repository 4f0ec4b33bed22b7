//! User-defined primitives: a value plus a pullback (seed 000, Snippets
//! 18–20, `rrule`).

use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::program::{Builder, Program, Var};

/// A user-defined scalar primitive `y = f(x)`: its value, and its pullback
/// written against the [`Builder`] (the seed's `rrule`, seed 000 Snippet 18;
/// seed 002 on ChainRules).
///
/// Because the pullback is emitted as instructions (it may use any
/// primitive, other custom rules included), ∂⃖ can differentiate it again, so
/// one rule serves every order (Snippets 19–20).
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{derivative, Builder, CustomRule, Real, ScalarRule, Var};
/// use typenum::U2;
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
/// let d = derivative::<U2, _>(|x| x.apply_rule(&cube), 2.0).unwrap();
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
}

/// A shareable handle to a [`ScalarRule`], applied with
/// [`crate::Real::apply_rule`].
///
/// On forward-mode (num-dual) numbers the derivatives of the rule up to
/// third order are needed; they are computed once, by applying ∂⃖ to the
/// rule's own one-instruction program, and cached in the handle.
#[derive(Clone)]
pub struct CustomRule {
    inner: Arc<dyn ScalarRule>,
    derivative_programs: Arc<OnceLock<Vec<Program>>>,
}

impl CustomRule {
    /// Wraps a rule.
    pub fn new<R: ScalarRule>(rule: R) -> Self {
        CustomRule {
            inner: Arc::new(rule),
            derivative_programs: Arc::new(OnceLock::new()),
        }
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The primal value `f(x)`.
    pub fn value(&self, x: f64) -> f64 {
        self.inner.value(x)
    }

    /// Emits the pullback (see [`ScalarRule::pullback`]).
    pub fn pullback(&self, b: &mut Builder, x: Var, y: Var, ct: Var) -> Var {
        self.inner.pullback(b, x, y, ct)
    }

    /// Whether two handles share one rule.
    pub fn same(&self, other: &CustomRule) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// `[f, f′, f″, f‴]` at `x`, filled up to `order` (at most 3; the rest
    /// are 0), from one evaluation of a cached program. NaN for the
    /// derivatives if that program could not be built.
    pub(crate) fn derivatives_at(&self, x: f64, order: usize) -> [f64; 4] {
        let progs = self.derivative_programs.get_or_init(|| {
            // The cached programs hold a handle to the same rule with an
            // empty cache of its own, so the cache does not own itself (no
            // reference cycle).
            let plain = CustomRule {
                inner: Arc::clone(&self.inner),
                derivative_programs: Arc::new(OnceLock::new()),
            };
            let mut b = Builder::new();
            let xv = b.input();
            let y = b.custom(&plain, xv);
            let p = b.finish_unchecked(&[y]);
            // Program k − 1 gives [f, f′, …, f⁽ᵏ⁾] in one evaluation.
            (1..=3)
                .map(|k| crate::functor::nested::derivatives_program(&p, k))
                .collect::<Result<Vec<_>, _>>()
                .unwrap_or_default()
        });
        let mut out = [0.0; 4];
        let order = order.min(3);
        if order == 0 {
            out[0] = self.value(x);
            return out;
        }
        match progs.get(order - 1).map(|p| p.eval(&[x])) {
            Some(Ok(v)) => out[..v.len()].copy_from_slice(&v),
            _ => {
                out[0] = self.value(x);
                out[1..=order].fill(f64::NAN);
            }
        }
        out
    }
}

impl fmt::Debug for CustomRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CustomRule({})", self.name())
    }
}

impl PartialEq for CustomRule {
    fn eq(&self, other: &Self) -> bool {
        self.same(other)
    }
}
