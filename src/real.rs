//! The scalar trait that user code is generic over.

use std::fmt::Debug;
use std::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};

use num_dual::{Dual2_64, Dual3_64, Dual64, HyperDual64};

use crate::program::trace::Tracer;
use crate::rules::CustomRule;

pub(crate) mod private {
    /// Crate-internal hooks; the trait is sealed through it.
    pub trait Internal: Sized {
        /// The primal (real) part, for tracing at this point.
        fn primal(&self) -> f64;
        /// Converts a captured tracer of an enclosing trace, if this type
        /// can carry one.
        fn from_tracer(t: crate::program::trace::Tracer) -> Option<Self>;
    }
}

/// A real scalar that user code is written against, once, and that runs as
/// plain `f64`, as num-dual forward-mode numbers, and as a [`Tracer`] that
/// records an SSA program (DESIGN.md §2, layer 2).
///
/// Arithmetic: `+ − × ÷` and negation with `Self`, and with `f64` on the
/// right (`x * 2.0`). In generic code write constants on the right or lift
/// them with [`Real::cst`]: Rust cannot state `f64: Mul<T>` as an implied
/// bound of a trait (rust-lang/rust#20671), and the orphan rule forbids
/// `f64 * Dual64`. For the concrete types `f64` and [`Tracer`], `2.0 * x`
/// works.
///
/// Comparisons (`<`, `==`, also against `f64`) compare primal values; on a
/// [`Tracer`] they are recorded as guards of the program.
///
/// The trait is sealed: it is implemented for `f64`, [`Dual64`],
/// [`Dual2_64`], [`Dual3_64`], [`HyperDual64`] and [`Tracer`].
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use num_dual::Dual64;
/// use optic_ad::Real;
///
/// fn f<T: Real>(x: &[T]) -> T {
///     (x[0] * x[1]).sin() + x[0].powi(2) * 0.5
/// }
/// let v = f(&[1.0_f64, 2.0]);
/// // The same code in forward mode: ∂f/∂x₀ = x₁ cos(x₀x₁) + x₀.
/// let d = f(&[Dual64::new(1.0, 1.0), Dual64::new(2.0, 0.0)]);
/// assert_relative_eq!(d.re, v);
/// assert_relative_eq!(d.eps, 2.0 * 2.0_f64.cos() + 1.0);
/// ```
pub trait Real:
    Copy
    + Debug
    + PartialEq
    + PartialOrd
    + PartialEq<f64>
    + PartialOrd<f64>
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + Add<f64, Output = Self>
    + Sub<f64, Output = Self>
    + Mul<f64, Output = Self>
    + Div<f64, Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + DivAssign
    + 'static
    + private::Internal
{
    /// A constant.
    fn cst(c: f64) -> Self;
    /// Sine (radians).
    fn sin(self) -> Self;
    /// Cosine (radians).
    fn cos(self) -> Self;
    /// `eˣ`.
    fn exp(self) -> Self;
    /// Natural logarithm; NaN for negative arguments, −∞ at 0.
    fn ln(self) -> Self;
    /// Square root; NaN for negative arguments.
    fn sqrt(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// `xⁿ` for a fixed integer `n`.
    fn powi(self, n: i32) -> Self;
    /// `a` where `c > 0`, else `b`, without recording a guard: the
    /// branch-free form of `if c > 0 { a } else { b }`.
    fn select(c: Self, a: Self, b: Self) -> Self;
    /// Applies a user-defined primitive ([`CustomRule`]).
    ///
    /// On num-dual numbers, the rule's derivatives are obtained by applying
    /// ∂⃖ to its pullback (so there they are not an independent check of the
    /// rule).
    fn apply_rule(self, rule: &CustomRule) -> Self;

    /// `1 / x`.
    fn recip(self) -> Self {
        Self::cst(1.0) / self
    }
    /// `|x|`, written with a comparison (so it records a guard on tracers).
    fn abs(self) -> Self {
        if self < 0.0 {
            -self
        } else {
            self
        }
    }
    /// `tan x = sin x / cos x` (radians).
    fn tan(self) -> Self {
        self.sin() / self.cos()
    }
}

impl private::Internal for f64 {
    fn primal(&self) -> f64 {
        *self
    }
    fn from_tracer(_t: Tracer) -> Option<Self> {
        None
    }
}

impl Real for f64 {
    #[inline]
    fn cst(c: f64) -> Self {
        c
    }
    #[inline]
    fn sin(self) -> Self {
        f64::sin(self)
    }
    #[inline]
    fn cos(self) -> Self {
        f64::cos(self)
    }
    #[inline]
    fn exp(self) -> Self {
        f64::exp(self)
    }
    #[inline]
    fn ln(self) -> Self {
        f64::ln(self)
    }
    #[inline]
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
    #[inline]
    fn tanh(self) -> Self {
        f64::tanh(self)
    }
    #[inline]
    fn powi(self, n: i32) -> Self {
        f64::powi(self, n)
    }
    #[inline]
    fn select(c: Self, a: Self, b: Self) -> Self {
        if c > 0.0 {
            a
        } else {
            b
        }
    }
    fn apply_rule(self, rule: &CustomRule) -> Self {
        rule.value(self)
    }
}

/// Implements `Real` for a num-dual type; `$chain` applies the chain rule
/// given the rule's derivatives `[f, f′, f″, f‴]` at the real part.
macro_rules! impl_real_dual {
    ($t:ty, $order:expr, |$x:ident, $d:ident| $chain:expr) => {
        impl private::Internal for $t {
            fn primal(&self) -> f64 {
                self.re
            }
            fn from_tracer(_t: Tracer) -> Option<Self> {
                None
            }
        }

        impl Real for $t {
            #[inline]
            fn cst(c: f64) -> Self {
                <$t>::from(c)
            }
            #[inline]
            fn sin(self) -> Self {
                num_dual::DualNum::sin(&self)
            }
            #[inline]
            fn cos(self) -> Self {
                num_dual::DualNum::cos(&self)
            }
            #[inline]
            fn exp(self) -> Self {
                num_dual::DualNum::exp(&self)
            }
            #[inline]
            fn ln(self) -> Self {
                num_dual::DualNum::ln(&self)
            }
            #[inline]
            fn sqrt(self) -> Self {
                num_dual::DualNum::sqrt(&self)
            }
            #[inline]
            fn tanh(self) -> Self {
                num_dual::DualNum::tanh(&self)
            }
            #[inline]
            fn powi(self, n: i32) -> Self {
                num_dual::DualNum::powi(&self, n)
            }
            #[inline]
            fn select(c: Self, a: Self, b: Self) -> Self {
                if c.re > 0.0 {
                    a
                } else {
                    b
                }
            }
            fn apply_rule(self, rule: &CustomRule) -> Self {
                let $d = rule.derivatives_at(self.re, $order);
                let $x = self;
                $chain
            }
        }
    };
}

// Chain rule (Faà di Bruno) for y = f(x), written on num-dual's public
// fields: with x = re + v₁ε + …, y's coefficients follow from f⁽ᵏ⁾(re).
impl_real_dual!(Dual64, 1, |x, d| Dual64::new(d[0], x.eps * d[1]));
impl_real_dual!(Dual2_64, 2, |x, d| Dual2_64::new(
    d[0],
    x.v1 * d[1],
    x.v2 * d[1] + x.v1 * x.v1 * d[2]
));
impl_real_dual!(Dual3_64, 3, |x, d| Dual3_64::new(
    d[0],
    x.v1 * d[1],
    x.v2 * d[1] + x.v1 * x.v1 * d[2],
    x.v3 * d[1] + 3.0 * x.v1 * x.v2 * d[2] + x.v1 * x.v1 * x.v1 * d[3]
));
impl_real_dual!(HyperDual64, 2, |x, d| HyperDual64::new(
    d[0],
    x.eps1 * d[1],
    x.eps2 * d[1],
    x.eps1eps2 * d[1] + x.eps1 * x.eps2 * d[2]
));
