//! num-traits' [`Float`](num_traits::Float) for the tracers, so that code
//! written against `num_traits::Float` (most generic numerical Rust: the
//! test functions of `argmin_testfunctions`, physics and statistics
//! crates) is traced and differentiated unchanged.
//!
//! [`Tracer`] and [`TScalar`] implement `Float`, `FloatConst`, `Signed`,
//! `Num`, `NumCast`, `ToPrimitive`, `FromPrimitive`, `Zero`, `One` and
//! `%`. Every method is a primitive of the table (so it has its rules) or
//! a composition of them:
//!
//! * `x % y` is the primitive [`Prim::Rem`] (std's exact remainder, with
//!   derivatives 1 and `−q`, `q` the integer quotient);
//! * `trunc(x) = sgn(x) ⌊|x|⌋`, `fract(x) = x − trunc(x)` and `round`
//!   (half away from zero, as std) from `trunc` and a comparison: exact,
//!   with the derivatives of the compositions (0, 1 and 0);
//! * the predicates (`is_nan`, `is_finite`, `classify`, `is_zero`,
//!   `is_sign_negative`, …) compare, so on a tracer they record guards as
//!   `<` does;
//! * a conversion out of the trace (`to_f64`, `to_i64`, `integer_decode`)
//!   gives the value at the trace point and records a guard that the value
//!   is still that (`x == v`): the program is then valid only where it
//!   is, and the drivers re-trace elsewhere; a derivative never flows
//!   through such a conversion silently;
//! * the constants (`nan`, `epsilon`, `PI`, …) and `from_f64`, `NumCast`
//!   are constants of the trace.
//!
//! The num-dual types do not implement `Float` (num-dual implements its
//! own `DualNum`), and Rust's orphan rule lets neither crate add it here:
//! with num-dual, run `Float` code through a tracer, or write it against
//! [`Real`].
//!
//! Where both `Real` and `Float` are in scope, a method call on a concrete
//! tracer (`t.sin()`) is ambiguous; in generic code the bound decides.
//! Write `Real::sin(t)` or import one trait.
//!
//! # Example
//!
//! Code written against num-traits only, differentiated to third order:
//!
//! ```
//! use approx::assert_relative_eq;
//! use num_traits::Float;
//!
//! fn softplus<T: Float>(x: T) -> T {
//!     (T::one() + x.exp()).ln()
//! }
//! let d = optic_ad::derivative::<optic_ad::typenum::U3, _, _>(softplus, 0.5).unwrap();
//! let s = 1.0 / (1.0 + (-0.5f64).exp()); // σ(x), the first derivative
//! assert_relative_eq!(d[1], s, max_relative = 1e-15);
//! assert_relative_eq!(d[2], s * (1.0 - s), max_relative = 1e-14);
//! assert_relative_eq!(d[3], s * (1.0 - s) * (1.0 - 2.0 * s), max_relative = 1e-13);
//! ```

use std::num::FpCategory;
use std::ops::Rem;

use num_traits::{Float, FloatConst, FromPrimitive, Num, NumCast, One, Signed, ToPrimitive, Zero};

use crate::array::TScalar;
use crate::program::Tracer;
use crate::real::Real;
use crate::rules::private::Internal;
use crate::rules::Prim;

/// The value at the trace point, with a guard that it stays that.
fn frozen<T: Real>(x: T) -> f64 {
    let v = x.primal();
    let _ = x == T::cst(v);
    v
}

/// `sgn(x) ⌊|x|⌋`: `x` rounded toward zero (std's `trunc`, signed zeros
/// included).
fn trunc<T: Real>(x: T) -> T {
    Real::signum(x) * Real::floor(Real::abs(x))
}

macro_rules! num_traits_for {
    ($t:ty) => {
        impl Rem for $t {
            type Output = $t;
            /// std's `%` ([`Prim::Rem`]).
            fn rem(self, rhs: $t) -> $t {
                <$t as Real>::apply(Prim::Rem, 0, &[self, rhs])
            }
        }

        impl Zero for $t {
            fn zero() -> $t {
                <$t as Real>::cst(0.0)
            }
            /// A comparison: on a tracer, a guard.
            fn is_zero(&self) -> bool {
                *self == 0.0
            }
        }

        impl One for $t {
            fn one() -> $t {
                <$t as Real>::cst(1.0)
            }
        }

        impl Num for $t {
            type FromStrRadixErr = <f64 as Num>::FromStrRadixErr;
            fn from_str_radix(s: &str, radix: u32) -> Result<$t, Self::FromStrRadixErr> {
                <f64 as Num>::from_str_radix(s, radix).map(<$t as Real>::cst)
            }
        }

        impl ToPrimitive for $t {
            fn to_i64(&self) -> Option<i64> {
                frozen(*self).to_i64()
            }
            fn to_u64(&self) -> Option<u64> {
                frozen(*self).to_u64()
            }
            fn to_f64(&self) -> Option<f64> {
                Some(frozen(*self))
            }
            fn to_f32(&self) -> Option<f32> {
                frozen(*self).to_f32()
            }
        }

        impl NumCast for $t {
            fn from<N: ToPrimitive>(n: N) -> Option<$t> {
                n.to_f64().map(<$t as Real>::cst)
            }
        }

        impl FromPrimitive for $t {
            fn from_i64(n: i64) -> Option<$t> {
                Some(<$t as Real>::cst(n as f64))
            }
            fn from_u64(n: u64) -> Option<$t> {
                Some(<$t as Real>::cst(n as f64))
            }
            fn from_f64(n: f64) -> Option<$t> {
                Some(<$t as Real>::cst(n))
            }
        }

        impl Signed for $t {
            fn abs(&self) -> $t {
                Real::abs(*self)
            }
            fn abs_sub(&self, other: &$t) -> $t {
                Real::max(*self - *other, <$t as Real>::cst(0.0))
            }
            fn signum(&self) -> $t {
                Real::signum(*self)
            }
            fn is_positive(&self) -> bool {
                Float::is_sign_positive(*self)
            }
            fn is_negative(&self) -> bool {
                Float::is_sign_negative(*self)
            }
        }

        impl FloatConst for $t {
            fn E() -> $t {
                <$t as Real>::cst(std::f64::consts::E)
            }
            fn FRAC_1_PI() -> $t {
                <$t as Real>::cst(std::f64::consts::FRAC_1_PI)
            }
            fn FRAC_1_SQRT_2() -> $t {
                <$t as Real>::cst(std::f64::consts::FRAC_1_SQRT_2)
            }
            fn FRAC_2_PI() -> $t {
                <$t as Real>::cst(std::f64::consts::FRAC_2_PI)
            }
            fn FRAC_2_SQRT_PI() -> $t {
                <$t as Real>::cst(std::f64::consts::FRAC_2_SQRT_PI)
            }
            fn FRAC_PI_2() -> $t {
                <$t as Real>::cst(std::f64::consts::FRAC_PI_2)
            }
            fn FRAC_PI_3() -> $t {
                <$t as Real>::cst(std::f64::consts::FRAC_PI_3)
            }
            fn FRAC_PI_4() -> $t {
                <$t as Real>::cst(std::f64::consts::FRAC_PI_4)
            }
            fn FRAC_PI_6() -> $t {
                <$t as Real>::cst(std::f64::consts::FRAC_PI_6)
            }
            fn FRAC_PI_8() -> $t {
                <$t as Real>::cst(std::f64::consts::FRAC_PI_8)
            }
            fn LN_10() -> $t {
                <$t as Real>::cst(std::f64::consts::LN_10)
            }
            fn LN_2() -> $t {
                <$t as Real>::cst(std::f64::consts::LN_2)
            }
            fn LOG10_E() -> $t {
                <$t as Real>::cst(std::f64::consts::LOG10_E)
            }
            fn LOG2_E() -> $t {
                <$t as Real>::cst(std::f64::consts::LOG2_E)
            }
            fn PI() -> $t {
                <$t as Real>::cst(std::f64::consts::PI)
            }
            fn SQRT_2() -> $t {
                <$t as Real>::cst(std::f64::consts::SQRT_2)
            }
            fn TAU() -> $t {
                <$t as Real>::cst(std::f64::consts::TAU)
            }
            fn LOG10_2() -> $t {
                <$t as Real>::cst(std::f64::consts::LOG10_2)
            }
            fn LOG2_10() -> $t {
                <$t as Real>::cst(std::f64::consts::LOG2_10)
            }
        }

        impl Float for $t {
            fn nan() -> $t {
                <$t as Real>::cst(f64::NAN)
            }
            fn infinity() -> $t {
                <$t as Real>::cst(f64::INFINITY)
            }
            fn neg_infinity() -> $t {
                <$t as Real>::cst(f64::NEG_INFINITY)
            }
            fn neg_zero() -> $t {
                <$t as Real>::cst(-0.0)
            }
            fn min_value() -> $t {
                <$t as Real>::cst(f64::MIN)
            }
            fn min_positive_value() -> $t {
                <$t as Real>::cst(f64::MIN_POSITIVE)
            }
            fn epsilon() -> $t {
                <$t as Real>::cst(f64::EPSILON)
            }
            fn max_value() -> $t {
                <$t as Real>::cst(f64::MAX)
            }
            fn is_nan(self) -> bool {
                self.partial_cmp(&self).is_none()
            }
            fn is_infinite(self) -> bool {
                Real::abs(self) == f64::INFINITY
            }
            fn is_finite(self) -> bool {
                Real::abs(self) < f64::INFINITY
            }
            fn is_normal(self) -> bool {
                Float::classify(self) == FpCategory::Normal
            }
            fn is_subnormal(self) -> bool {
                Float::classify(self) == FpCategory::Subnormal
            }
            fn classify(self) -> FpCategory {
                let a = Real::abs(self);
                if Float::is_nan(self) {
                    FpCategory::Nan
                } else if a == f64::INFINITY {
                    FpCategory::Infinite
                } else if a == 0.0 {
                    FpCategory::Zero
                } else if a < f64::MIN_POSITIVE {
                    FpCategory::Subnormal
                } else {
                    FpCategory::Normal
                }
            }
            fn floor(self) -> $t {
                Real::floor(self)
            }
            fn ceil(self) -> $t {
                Real::ceil(self)
            }
            /// Half away from zero, as std.
            fn round(self) -> $t {
                let t = trunc(self);
                if Real::abs(self - t) >= 0.5 {
                    t + Real::signum(self)
                } else {
                    t
                }
            }
            fn trunc(self) -> $t {
                trunc(self)
            }
            fn fract(self) -> $t {
                self - trunc(self)
            }
            fn abs(self) -> $t {
                Real::abs(self)
            }
            fn signum(self) -> $t {
                Real::signum(self)
            }
            /// The sign of a nonzero value is that of a comparison with 0
            /// (a guard on a tracer); the sign of a zero is read at the
            /// trace point.
            fn is_sign_positive(self) -> bool {
                match self.partial_cmp(&0.0) {
                    Some(std::cmp::Ordering::Greater) => true,
                    Some(std::cmp::Ordering::Less) => false,
                    _ => self.primal().is_sign_positive(),
                }
            }
            fn is_sign_negative(self) -> bool {
                match self.partial_cmp(&0.0) {
                    Some(std::cmp::Ordering::Greater) => false,
                    Some(std::cmp::Ordering::Less) => true,
                    _ => self.primal().is_sign_negative(),
                }
            }
            fn mul_add(self, a: $t, b: $t) -> $t {
                Real::mul_add(self, a, b)
            }
            fn recip(self) -> $t {
                Real::recip(self)
            }
            fn powi(self, n: i32) -> $t {
                Real::powi(self, n)
            }
            fn powf(self, n: $t) -> $t {
                Real::powf(self, n)
            }
            fn sqrt(self) -> $t {
                Real::sqrt(self)
            }
            fn exp(self) -> $t {
                Real::exp(self)
            }
            fn exp2(self) -> $t {
                Real::exp2(self)
            }
            fn ln(self) -> $t {
                Real::ln(self)
            }
            fn log(self, base: $t) -> $t {
                Real::log(self, base)
            }
            fn log2(self) -> $t {
                Real::log2(self)
            }
            fn log10(self) -> $t {
                Real::log10(self)
            }
            fn to_degrees(self) -> $t {
                self * (180.0 / std::f64::consts::PI)
            }
            fn to_radians(self) -> $t {
                self * (std::f64::consts::PI / 180.0)
            }
            fn max(self, other: $t) -> $t {
                Real::max(self, other)
            }
            fn min(self, other: $t) -> $t {
                Real::min(self, other)
            }
            fn clamp(self, lo: $t, hi: $t) -> $t {
                Real::clamp(self, lo, hi)
            }
            fn abs_sub(self, other: $t) -> $t {
                Real::max(self - other, <$t as Real>::cst(0.0))
            }
            fn cbrt(self) -> $t {
                Real::cbrt(self)
            }
            fn hypot(self, other: $t) -> $t {
                Real::hypot(self, other)
            }
            fn sin(self) -> $t {
                Real::sin(self)
            }
            fn cos(self) -> $t {
                Real::cos(self)
            }
            fn tan(self) -> $t {
                Real::tan(self)
            }
            fn asin(self) -> $t {
                Real::asin(self)
            }
            fn acos(self) -> $t {
                Real::acos(self)
            }
            fn atan(self) -> $t {
                Real::atan(self)
            }
            fn atan2(self, other: $t) -> $t {
                Real::atan2(self, other)
            }
            fn sin_cos(self) -> ($t, $t) {
                Real::sin_cos(self)
            }
            fn exp_m1(self) -> $t {
                Real::exp_m1(self)
            }
            fn ln_1p(self) -> $t {
                Real::ln_1p(self)
            }
            fn sinh(self) -> $t {
                Real::sinh(self)
            }
            fn cosh(self) -> $t {
                Real::cosh(self)
            }
            fn tanh(self) -> $t {
                Real::tanh(self)
            }
            fn asinh(self) -> $t {
                Real::asinh(self)
            }
            fn acosh(self) -> $t {
                Real::acosh(self)
            }
            fn atanh(self) -> $t {
                Real::atanh(self)
            }
            /// Of the value at the trace point, with a guard that it stays.
            fn integer_decode(self) -> (u64, i16, i8) {
                Float::integer_decode(frozen(self))
            }
        }
    };
}

num_traits_for!(Tracer);
num_traits_for!(TScalar);
