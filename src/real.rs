//! The scalar trait that user code is generic over.

use std::fmt::Debug;
use std::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};

use crate::rules::{private, CustomRule, Prim};

/// Declares `Real` methods, each a one-line call of its primitive.
macro_rules! elementary {
    ($($(#[$m:meta])* $name:ident => $p:ident;)*) => {$(
        $(#[$m])*
        #[inline]
        fn $name(self) -> Self {
            Self::apply_prim(Prim::$p, 0, &[self])
        }
    )*};
    ($($(#[$m:meta])* $name:ident($o:ident) => $p:ident;)*) => {$(
        $(#[$m])*
        #[inline]
        fn $name(self, $o: Self) -> Self {
            Self::apply_prim(Prim::$p, 0, &[self, $o])
        }
    )*};
}

/// A real scalar that user code is written against, once, and that runs as
/// plain `f64`, as num-dual forward-mode numbers, and as a [`Tracer`](crate::Tracer) that
/// records an SSA program (the *trace* step of the book's introduction).
///
/// Arithmetic: `+ − × ÷` and negation with `Self`, and with `f64` on the
/// right (`x * 2.0`). In generic code write constants on the right or lift
/// them with [`Real::cst`]: Rust cannot state `f64: Mul<T>` as an implied
/// bound of a trait (rust-lang/rust#20671), and the orphan rule forbids
/// `f64 * Dual64`. For the concrete types `f64` and [`Tracer`](crate::Tracer), `2.0 * x`
/// works.
///
/// Comparisons (`<`, `==`, also against `f64`) compare primal values; on a
/// [`Tracer`](crate::Tracer) they are recorded as guards of the program.
///
/// A scalar is also a [`Differentiable`](crate::Differentiable) value of
/// one leaf, and so a point and a loop's carry.
///
/// Constants also come in as `T::from(2.0)` or `2.0.into()` (`From<f64>`,
/// the same as [`Real::cst`]), and iterators of numbers add up with
/// `sum()` and multiply with `product()` (`0` and `1` when empty).
///
/// Code written against `num_traits::Float` instead also traces: the
/// tracers implement `Float` (see the book's chapter "SSA programs",
/// section "Code written against num-traits").
///
/// The trait is sealed: it is implemented for `f64`, [`Dual64`](num_dual::Dual64),
/// [`Dual2_64`](num_dual::Dual2_64), [`Dual3_64`](num_dual::Dual3_64),
/// [`HyperDual64`](num_dual::HyperDual64) and [`Tracer`](crate::Tracer). On the num-dual
/// types, a primitive uses num-dual's own function where it has one with
/// std's edge semantics; otherwise its derivative parts come from the
/// primitive's rule (∂⃗ applied to its one-instruction program).
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
    + From<f64>
    + std::iter::Sum
    + std::iter::Product
    + 'static
    + private::Internal
{
    /// A constant.
    fn cst(c: f64) -> Self;

    /// Applies a built-in primitive to `x` (`prim.arity()` values) with
    /// integer attribute `param` (0 where it has none): the one entry every
    /// method below goes through. NaN for the wrong number of values.
    #[inline]
    fn apply(prim: Prim, param: i32, x: &[Self]) -> Self {
        if x.len() == prim.arity() {
            Self::apply_prim(prim, param, x)
        } else {
            Self::cst(f64::NAN)
        }
    }

    elementary! {
        /// Sine (radians).
        sin => Sin;
        /// Cosine (radians).
        cos => Cos;
        /// Tangent (radians).
        tan => Tan;
        /// Arcsine, in `[−π/2, π/2]`; NaN outside `[−1, 1]`. Its derivative
        /// is `+∞` at `±1`.
        asin => Asin;
        /// Arccosine, in `[0, π]`; NaN outside `[−1, 1]`. Its derivative is
        /// `−∞` at `±1`.
        acos => Acos;
        /// Arctangent, in `(−π/2, π/2)`.
        atan => Atan;
        /// Hyperbolic sine.
        sinh => Sinh;
        /// Hyperbolic cosine.
        cosh => Cosh;
        /// Hyperbolic tangent.
        tanh => Tanh;
        /// Inverse hyperbolic sine.
        asinh => Asinh;
        /// Inverse hyperbolic cosine; NaN below 1.
        acosh => Acosh;
        /// Inverse hyperbolic tangent; NaN outside `[−1, 1]`.
        atanh => Atanh;
        /// `eˣ`.
        exp => Exp;
        /// `2ˣ`.
        exp2 => Exp2;
        /// `eˣ − 1`, accurate near 0 (also its derivatives).
        exp_m1 => ExpM1;
        /// Natural logarithm; NaN for negative arguments, −∞ at 0.
        ln => Ln;
        /// Base-2 logarithm.
        log2 => Log2;
        /// Base-10 logarithm.
        log10 => Log10;
        /// `ln(1 + x)`, accurate near 0 (also its derivatives).
        ln_1p => Ln1p;
        /// Square root; NaN for negative arguments. Its derivative is `+∞`
        /// at 0.
        sqrt => Sqrt;
        /// Cube root (defined for negative arguments). Its derivative is
        /// `+∞` at 0.
        cbrt => Cbrt;
        /// `|x|`. Derivative 1 at 0 (JAX's convention).
        abs => Abs;
        /// `1` for positive, `−1` for negative values (std: `+0 → 1`,
        /// `−0 → −1`, NaN for NaN); derivative 0.
        signum => Signum;
        /// `⌊x⌋`; derivative 0.
        floor => Floor;
        /// `⌈x⌉`; derivative 0.
        ceil => Ceil;
        /// The error function.
        erf => Erf;
        /// The complementary error function `1 − erf x`, accurate for large
        /// `x`.
        erfc => Erfc;
        /// `ln |Γ(x)|` (`+∞` at the poles 0, −1, −2, …).
        ln_gamma => LnGamma;
        /// The digamma function `ψ(x) = Γ′(x)/Γ(x)`.
        digamma => Digamma;
    }

    elementary! {
        /// `atan2(self, x)`: the angle of the point `(x, self)`, in
        /// `[−π, π]`, in all four quadrants and with std's signed zeros.
        atan2(x) => Atan2;
        /// `selfⁿ` with a differentiable exponent `n` (std's `powf` at 0
        /// and for negative bases, where only integer `n` give numbers).
        powf(n) => Powf;
        /// `√(self² + y²)` without overflow or underflow.
        hypot(y) => Hypot;
        /// The larger value; a NaN argument is ignored (std). At a tie each
        /// argument gets half the derivative (JAX's convention).
        max(other) => Max;
        /// The smaller value; a NaN argument is ignored (std). At a tie each
        /// argument gets half the derivative (JAX's convention).
        min(other) => Min;
    }

    /// `self` limited to `[lo, hi]`; NaN if `lo > hi` or a bound is NaN
    /// (where std panics). Derivatives follow JAX's `lax.clamp`: to `self`
    /// strictly inside, to `lo` below, to `hi` above, none at a bound.
    #[inline]
    fn clamp(self, lo: Self, hi: Self) -> Self {
        Self::apply_prim(Prim::Clamp, 0, &[self, lo, hi])
    }

    /// `self · a + b` with one rounding (std's `mul_add`).
    #[inline]
    fn mul_add(self, a: Self, b: Self) -> Self {
        Self::apply_prim(Prim::MulAdd, 0, &[self, a, b])
    }

    /// `selfⁿ` for a fixed integer `n`.
    #[inline]
    fn powi(self, n: i32) -> Self {
        Self::apply_prim(Prim::Powi, n, &[self])
    }

    /// The polygamma function `ψ⁽ⁿ⁾(self)`; `n = 0` is the digamma
    /// function.
    #[inline]
    fn polygamma(self, n: u32) -> Self {
        match i32::try_from(n) {
            Ok(n) => Self::apply_prim(Prim::Polygamma, n, &[self]),
            Err(_) => Self::cst(f64::NAN),
        }
    }

    /// The logarithm to a differentiable `base`, `ln self / ln base`.
    #[inline]
    fn log(self, base: Self) -> Self {
        self.ln() / base.ln()
    }

    /// `(sin x, cos x)`.
    #[inline]
    fn sin_cos(self) -> (Self, Self) {
        (self.sin(), self.cos())
    }

    /// `1 / x`.
    #[inline]
    fn recip(self) -> Self {
        Self::cst(1.0) / self
    }

    /// `a` where `c > 0`, else `b`, without recording a guard: the
    /// branch-free form of `if c > 0 { a } else { b }`.
    #[inline]
    fn select(c: Self, a: Self, b: Self) -> Self {
        Self::apply_prim(Prim::Select, 0, &[c, a, b])
    }

    /// Applies a user-defined primitive of one argument ([`CustomRule`]);
    /// NaN if the rule takes another number of arguments.
    ///
    /// On num-dual numbers, the rule's derivatives are obtained by applying
    /// ∂⃗ to its pullback (so there they are not an independent check of the
    /// rule).
    #[inline]
    fn apply_rule(self, rule: &CustomRule) -> Self {
        Self::apply_custom(rule, &[self])
    }

    /// Applies a user-defined primitive to its arguments `x`
    /// ([`crate::Rule::arity`] of them, at most three). On a
    /// [`Tracer`](crate::Tracer), another number of arguments, or a rule of
    /// more than three, makes the trace fail with
    /// [`crate::Error::Malformed`]; on other types another number of
    /// arguments gives NaN.
    #[inline]
    fn apply_rule_n(rule: &CustomRule, x: &[Self]) -> Self {
        Self::apply_custom(rule, x)
    }
}

impl private::Internal for f64 {
    #[inline]
    fn primal(&self) -> f64 {
        *self
    }
    #[inline(always)]
    fn apply_prim(prim: Prim, param: i32, x: &[Self]) -> Self {
        prim.value(x, param)
    }
    fn apply_custom(rule: &CustomRule, x: &[Self]) -> Self {
        rule.value(x)
    }
    #[cfg(feature = "gemm")]
    fn matmul_library(
        a: &[Self],
        b: &[Self],
        d: crate::array::matmul::MatMulDims,
        out: &mut [Self],
    ) -> bool {
        crate::array::matmul::gemm(a, b, d, out);
        true
    }
}

impl Real for f64 {
    #[inline]
    fn cst(c: f64) -> Self {
        c
    }
}

/// `From<f64>`, `Sum` and `Product` for a traced scalar type, through its
/// constants and its `+` and `·` (an empty sum is `0`, an empty product
/// `1`; a single term is itself).
macro_rules! traced_conversions {
    ($t:ty) => {
        impl From<f64> for $t {
            fn from(c: f64) -> Self {
                <$t as $crate::Real>::cst(c)
            }
        }
        impl std::iter::Sum for $t {
            fn sum<I: Iterator<Item = Self>>(mut it: I) -> Self {
                match it.next() {
                    Some(first) => it.fold(first, |a, b| a + b),
                    None => <$t as $crate::Real>::cst(0.0),
                }
            }
        }
        impl std::iter::Product for $t {
            fn product<I: Iterator<Item = Self>>(mut it: I) -> Self {
                match it.next() {
                    Some(first) => it.fold(first, |a, b| a * b),
                    None => <$t as $crate::Real>::cst(1.0),
                }
            }
        }
    };
}
pub(crate) use traced_conversions;
