//! The handle of a user-defined primitive (the `rrule` of K. Fischer,
//! "∂P.jl terminology and notation guide", §VII.B, Snippets 18–20).
//!
//! The handle belongs to the IR: an [`Op::Custom`](super::Op::Custom) names
//! a rule of its program's table. What the functors derive from a rule (its
//! pushforward programs, used on num-dual numbers) is cached by the functor
//! layer, keyed by [`CustomRule::id`].

use std::any::Any;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use super::ir::{Builder, Op, Var, MAX_ARITY};
use crate::error::{Error, RuleMisuse};
use crate::rules::Contribs;

/// A user-defined primitive `y = f(x₁, …, xₖ)` with `1 ≤ k ≤ 3`: its
/// value, and its pullback written against the [`Builder`].
///
/// Because the pullback is emitted as instructions (it may use any
/// primitive, other rules included), ∂⃖ can differentiate it again, so one
/// rule serves every order. Its pushforward is the pullback transposed, so
/// ∂⃗ needs nothing more. For one argument, [`ScalarRule`] is shorter.
///
/// # Example
///
/// A two-argument rule, `f(x, y) = x·eʸ`:
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{gradient, Builder, CustomRule, Real, Rule, Var};
///
/// struct XExpY;
/// impl Rule for XExpY {
///     fn name(&self) -> &str {
///         "x_exp_y"
///     }
///     fn arity(&self) -> usize {
///         2
///     }
///     fn value(&self, x: &[f64]) -> f64 {
///         x[0] * x[1].exp()
///     }
///     fn pullback(&self, b: &mut Builder, x: &[Var], y: Var, ct: Var) -> Vec<Var> {
///         let e = b.exp(x[1]);
///         vec![b.mul(ct, e), b.mul(ct, y)]
///     }
/// }
/// let rule = CustomRule::new(XExpY);
/// let g = gradient(|v| Real::apply_rule_n(&rule, &[v[0], v[1]]), &[2.0, 0.5]).unwrap();
/// assert_relative_eq!(g[0], 0.5_f64.exp());
/// assert_relative_eq!(g[1], 2.0 * 0.5_f64.exp());
/// ```
pub trait Rule: Send + Sync + 'static {
    /// Name used when a program is printed.
    fn name(&self) -> &str;
    /// Number of arguments, from 1 to 3.
    fn arity(&self) -> usize;
    /// The primal value `f(x)`; `x` has [`Rule::arity`] entries.
    fn value(&self, x: &[f64]) -> f64;
    /// Emits the pullback: given the arguments `x`, the output `y = f(x)`
    /// and the cotangent `ct` of `y`, the cotangent of each argument,
    /// `∂ᵢf(x)·ct`, in order. It must be linear in `ct`, use only values of
    /// `b` (the arguments, `y`, `ct` and what it pushes), and return one
    /// value per argument.
    fn pullback(&self, b: &mut Builder, x: &[Var], y: Var, ct: Var) -> Vec<Var>;

    /// The rule's own Taylor rule, if it has one: from the arguments' jets
    /// `x` ([`Rule::arity`] slices of normalised Taylor coefficients,
    /// `xᵢ[k] = xᵢ⁽ᵏ⁾(0)/k!`, each as long as `y`), write the jet of
    /// `f(x(t))` into `y` and return `true`. `y[0]` is then replaced by
    /// [`Rule::value`].
    ///
    /// The default returns `false`, and the Taylor functor derives a rule
    /// from the pullback: with `y′ = Σᵢ ∂ᵢf(x) xᵢ′`, the jets of the
    /// partials `∂ᵢf(x(t))` (the pullback's program with `ȳ = 1`) are
    /// computed to degree `K − 1` and the recurrence
    /// `k yₖ = Σᵢ Σ_{j=1..k} j xᵢⱼ ∂ᵢf_{k−j}` closes. That costs `O(K²)`
    /// when the pullback neither reads `y` nor applies the rule again, and
    /// `O(K³)` when it does (the partials' jet then needs the rule's to
    /// one degree less, recursively).
    fn taylor(&self, x: &[&[f64]], y: &mut [f64]) -> bool {
        let _ = (x, y);
        false
    }
}

/// A user-defined primitive of one argument: [`Rule`] with `arity` 1.
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

/// A shareable handle to a user-defined primitive ([`Rule`] or
/// [`ScalarRule`]), applied with [`crate::Real::apply_rule`] or
/// [`crate::Real::apply_rule_n`].
///
/// On forward-mode (num-dual) numbers the rule's derivative parts are
/// computed from its own pushforward (∂⃗ of its one-instruction program,
/// applied up to three times), built once and cached.
#[derive(Clone)]
pub struct CustomRule {
    inner: Arc<dyn Rule>,
    id: u64,
    /// What the functor layer derives from the rule, built once.
    derived: Arc<OnceLock<Box<dyn Any + Send + Sync>>>,
}

/// Identifiers of rule handles, unique in the process.
static NEXT_RULE: AtomicU64 = AtomicU64::new(1);

impl CustomRule {
    /// Wraps a rule.
    pub fn new<R: Rule>(rule: R) -> Self {
        CustomRule {
            inner: Arc::new(rule),
            id: NEXT_RULE.fetch_add(1, Ordering::Relaxed),
            derived: Arc::new(OnceLock::new()),
        }
    }

    /// The slot for what the functor layer derives from this rule.
    pub(crate) fn derived(&self) -> &OnceLock<Box<dyn Any + Send + Sync>> {
        &self.derived
    }

    /// The same rule with an empty slot of its own, for programs stored in
    /// that slot (so the slot does not own itself).
    pub(crate) fn detached(&self) -> CustomRule {
        CustomRule {
            inner: Arc::clone(&self.inner),
            id: self.id,
            derived: Arc::new(OnceLock::new()),
        }
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Number of arguments.
    pub fn arity(&self) -> usize {
        self.inner.arity()
    }

    /// A process-wide identifier of this handle (shared by its clones).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The primal value `f(x)`; NaN if `x` does not have
    /// [`CustomRule::arity`] entries.
    pub fn value(&self, x: &[f64]) -> f64 {
        if x.len() == self.arity() {
            self.inner.value(x)
        } else {
            f64::NAN
        }
    }

    /// The rule's own Taylor rule (see [`Rule::taylor`]); `false` where
    /// it has none or the shapes do not fit (`x.len()` is not the arity or
    /// a jet is shorter than `y`).
    pub fn taylor(&self, x: &[&[f64]], y: &mut [f64]) -> bool {
        if x.len() != self.arity() || x.iter().any(|j| j.len() < y.len()) || y.is_empty() {
            return false;
        }
        self.inner.taylor(x, y)
    }

    /// Emits the pullback (see [`Rule::pullback`]).
    pub fn pullback(&self, b: &mut Builder, x: &[Var], y: Var, ct: Var) -> Vec<Var> {
        self.inner.pullback(b, x, y, ct)
    }

    /// The pullback as contributions per operand; what the rule returns
    /// beyond its arity is ignored, and what it does not return counts as a
    /// structural zero.
    pub(crate) fn pullback_contribs(
        &self,
        b: &mut Builder,
        x: &[Var],
        y: Var,
        ct: Var,
    ) -> Contribs {
        let (inputs, start) = (b.n_inputs(), b.len());
        let g = self.inner.pullback(b, x, y, ct);
        if let Some(misuse) = misuse(b, inputs, start, x.len(), &g) {
            b.rollback(start, inputs);
            b.poison(Error::BadRule {
                rule: self.name().to_string(),
                misuse,
            });
            return [None; MAX_ARITY];
        }
        let mut out = [None; MAX_ARITY];
        for (slot, v) in out.iter_mut().zip(g) {
            *slot = Some(v);
        }
        out
    }

    /// Whether two handles share one rule.
    pub fn same(&self, other: &CustomRule) -> bool {
        self.id == other.id
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

/// How a pullback that started with `inputs` inputs and `start`
/// instructions in `b`, and returned `g` for `arity` arguments, misused the
/// builder, if it did. (A value of another builder whose index also exists
/// in `b` cannot be told apart.)
fn misuse(b: &Builder, inputs: usize, start: usize, arity: usize, g: &[Var]) -> Option<RuleMisuse> {
    if b.n_inputs() != inputs {
        return Some(RuleMisuse::DeclaredInput);
    }
    if g.len() != arity {
        return Some(RuleMisuse::WrongCount(g.len()));
    }
    if g.iter().any(|v| v.index() >= b.len()) {
        return Some(RuleMisuse::ForeignValue);
    }
    for (i, op) in b.ops().enumerate().skip(start) {
        if op.operands().iter().any(|o| o.index() >= i) {
            return Some(RuleMisuse::Malformed);
        }
        if let Op::Custom { rule, args } = op {
            match b.rules().get(rule as usize) {
                Some(r) if r.arity() == args.len() => {}
                _ => return Some(RuleMisuse::UnknownRule),
            }
        }
        if let Op::Apply { prim, args, .. } = op {
            if prim.arity() != args.len() {
                return Some(RuleMisuse::Malformed);
            }
        }
    }
    None
}
