//! Regression tests for the defects of the second hardening round, each
//! failing (or aborting the process) before its fix:
//!
//! * a huge `polygamma` order computed `n!` by `n` multiplications per
//!   shift step (about a minute for `n = 2³¹ − 1`);
//! * array lengths that cannot be allocated aborted the process (a sum of
//!   a fill of 2⁴⁰ elements, which needs no memory at all; a `Dense`
//!   broadcast to `usize::MAX` elements; Taylor jets allocated up front);
//! * a `Tracer::cst` made before any trace, used in a trace, was reported as
//!   perturbation confusion (`ForeignTracer { trace: 0 }`);
//! * at a singular point a jet gave NaN where the limit is `±∞` (`eˣ` at
//!   710, `1/x` at 0), and `clamp` with `lo > hi` gave a NaN value with
//!   zero derivatives;
//! * a value `−0.0` came out `+0.0` where Taylor mode multiplied it (the
//!   constant term of a product of jets was summed from `+0`) and where
//!   the array tier summed it (sums started from `+0`, and the hosted
//!   trace reads a loop's result through a sum): a `fold` whose carry
//!   starts at `−0.0`, followed by `atan2(z, −1)`, took the other branch
//!   (`+π` for `−π`).

use optic_ad::array::{self, Array, Dense, TArray, TScalar};
use optic_ad::{
    derivative, fold, gradient, Directional, Error, Gradient, Hvp, Real, Result, Tracer,
};
use typenum::{U1, U4};

/// `ψ⁽ⁿ⁾(2)` for `n = 2³¹ − 1` and its derivative `ψ⁽ⁿ⁺¹⁾(2)`: `n!`
/// overflows, so the value is `+∞` (sign `(−1)ⁿ⁺¹`, `n` odd). Before the fix
/// the jet's factorial took 2³¹ multiplications per shift step (about a
/// minute). The derivative's limit is `−∞`, but the jet gives NaN (an
/// infinite `n!` times a coefficient of `(x + k)^−(n+1)` that underflowed
/// to 0): the NaN-at-a-singularity defect that is still open, so only
/// "not finite" is asserted for it.
#[test]
fn huge_polygamma_orders_are_cheap() {
    let n = i32::MAX as u32;
    let d = derivative::<U1, _, _>(|x| x.polygamma(n), 2.0).unwrap();
    assert_eq!(d[0], f64::INFINITY, "{d:?}");
    assert!(!d[1].is_finite(), "{d:?}");
}

/// A sum of a fill of 2⁴⁰ elements is 2⁴⁰ times the scalar: no buffer of
/// that length is made (before: an 8.8 TB allocation and an abort).
#[test]
fn sums_of_huge_fills_need_no_memory() {
    let n = 1usize << 40;
    let f = |a: &TArray| Ok(TArray::fill(a.sum(), n)?.sum());
    let g = crate::common::array_gradient(f, &[1.0, 2.0]).unwrap();
    assert_eq!(g, vec![n as f64, n as f64]);
    let p = array::trace(|x: &[TArray]| f(&x[0]), &[&[1.0, 2.0]]).unwrap();
    assert_eq!(p.eval(&[&[1.0, 2.0]]).unwrap()[0][0], 3.0 * n as f64);
}

/// Buffers that cannot be allocated are errors, not aborts: the executor's
/// (a prefix sum of 2⁴⁰ elements must store them), `Dense`'s (before: a panic,
/// "capacity overflow") and the Taylor program's (before: 27 GB allocated
/// up front, an abort).
#[test]
fn unallocatable_arrays_are_errors() {
    let n = 1usize << 40;
    // A prefix sum of 2⁴⁰ elements must store them.
    let f = |a: &TArray| Ok(TArray::fill(a.sum(), n)?.cumsum().sum());
    let r = crate::common::array_gradient(f, &[1.0, 2.0]);
    assert!(matches!(r, Err(Error::AllocationFailed { .. })), "{r:?}");
    let r = Dense::new(vec![1.0]).broadcast_axis_flat(0, usize::MAX, 1);
    assert!(matches!(r, Err(Error::AllocationFailed { .. })), "{r:?}");
    // A fill of 2⁶⁰ elements (before: an abort, `Array::fill` was
    // infallible).
    let r = <Dense<f64> as Array>::fill(1.0, 1 << 60);
    assert!(
        matches!(r, Err(Error::AllocationFailed { .. })),
        "{:?}",
        r.map(|d| d.len())
    );
    // Jets of (K + 1)·n values for n = 2⁴⁰, as the Taylor program would
    // allocate them up front (the trace itself never reads the data).
    let r = optic_ad::functor::TaylorProgram::new(
        &array::trace(
            |x: &[TArray]| Ok(TArray::fill(x[0].sum(), n)?.cumsum().sum()),
            &[&[1.0]],
        )
        .unwrap(),
        170,
    );
    assert!(
        matches!(r, Err(Error::AllocationFailed { .. })),
        "{:?}",
        r.err()
    );
}

/// A tracer made with no trace active belongs to no trace: using it says so
/// (before: "escaped tracer or perturbation confusion", trace 0).
#[test]
fn tracers_made_outside_any_trace_are_named() {
    let c = Tracer::cst(1.0);
    let r = gradient(|x: &[Tracer]| x[0] * c, &[2.0]);
    assert!(matches!(r, Err(Error::TracerWithoutTrace)), "{r:?}");
    let msg = Error::TracerWithoutTrace.to_string();
    assert!(msg.contains("no trace was active"), "{msg}");
}

/// Where the constant term of a jet is infinite, the later coefficients
/// are the limit `±∞`, not NaN (before: `eˣ` at 710 gave `[∞, ∞, NaN, …]`,
/// `1/x` at `+0` gave `[∞, −∞, NaN, …]`). The NaN came from `0 · ∞` for a
/// coefficient of the input jet that is exactly zero (`x₂` of `x + t`).
/// `1/x` at `+0`: `f⁽ᵏ⁾(x) = (−1)ᵏ k! / xᵏ⁺¹ → (−1)ᵏ ∞` as `x → 0⁺`.
#[test]
fn jets_at_singular_points_are_infinite_not_nan() {
    let d = derivative::<U4, _, _>(|x| x.exp(), 710.0).unwrap();
    assert!(d.iter().all(|&v| v == f64::INFINITY), "{d:?}");
    let d = derivative::<U4, _, _>(|x| x.recip(), 0.0).unwrap();
    let inf = f64::INFINITY;
    assert_eq!(d.as_slice(), &[inf, -inf, inf, -inf, inf]);
    let d = derivative::<U4, _, _>(|x| x.sinh(), 711.0).unwrap();
    assert!(d.iter().all(|&v| v == f64::INFINITY), "{d:?}");
    // `x⁻²` at +0 by the real-power recurrence: `f⁽ᵏ⁾ = (−1)ᵏ (k + 1)! / xᵏ⁺²`.
    let d = derivative::<U4, _, _>(|x| x.powi(-2), 0.0).unwrap();
    assert_eq!(d.as_slice(), &[inf, -inf, inf, -inf, inf]);
    // A NaN operand still gives NaN.
    let d = derivative::<U4, _, _>(|x| (x * Tracer::cst(f64::NAN)).exp(), 1.0).unwrap();
    assert!(d.iter().all(|v| v.is_nan()), "{d:?}");
}

/// `clamp(x, lo, hi)` with `lo > hi` or a NaN bound (std panics) is NaN,
/// and so are its first derivatives in reverse mode and its Taylor
/// coefficients (before: NaN with zero derivatives, which reads as "flat
/// here").
#[test]
fn clamp_with_crossed_bounds_has_nan_derivatives() {
    let f = |x: &[Tracer]| x[0].clamp(x[1], x[2]);
    for point in [
        [0.5, 1.0, 0.0],
        [2.0, 1.0, 0.0],
        [-1.0, 1.0, 0.0],
        [0.5, f64::NAN, 1.0],
    ] {
        let g = gradient(f, &point).unwrap();
        assert!(g.iter().all(|v| v.is_nan()), "{point:?}: {g:?}");
        let d = derivative::<U4, _, _>(
            |x| x.clamp(Tracer::cst(point[1]), Tracer::cst(point[2])),
            point[0],
        )
        .unwrap();
        assert!(d.iter().all(|v| v.is_nan()), "{point:?}: {d:?}");
        let (y, xbar) = optic_ad::vjp(|x: &[Tracer]| vec![f(x)], &point, &[1.0]).unwrap();
        assert!(
            y[0].is_nan() && xbar.iter().all(|v| v.is_nan()),
            "{point:?}: {xbar:?}"
        );
    }
    // Ordered bounds keep JAX's derivatives.
    assert_eq!(gradient(f, &[0.5, 0.0, 1.0]).unwrap(), vec![1.0, 0.0, 0.0]);
    assert_eq!(gradient(f, &[2.0, 0.0, 1.0]).unwrap(), vec![0.0, 0.0, 1.0]);
}

/// `Builder::with_capacity` takes its size as a hint: room that cannot be
/// reserved is not an abort (before: `usize::MAX` panicked with "capacity
/// overflow", 2⁴⁰ aborted the process).
#[test]
fn builder_capacity_is_a_hint() {
    for n in [usize::MAX, 1 << 40] {
        let mut b = optic_ad::Builder::with_capacity(n);
        let x = b.input();
        let y = b.sin(x);
        let p = b.finish(&[y]).unwrap();
        assert_eq!(p.eval(&[0.5]).unwrap()[0], 0.5f64.sin());
    }
}

/// `p₀³ + atan2(z, −1)`, `z` the carry of a fold that starts at `−0.0` and
/// is multiplied by `p₀` each step: `z = −0.0`, so the value is
/// `p₀³ − π` (`atan2(−0, −1) = −π`, IEEE 754 and C99 Annex F.9.1.4).
fn signed_zero_fold<T: Real>(p: &[T]) -> Result<T> {
    let [z] = fold(3, [T::cst(-0.0)], |[c]: [T; 1]| [c * p[0]])?;
    Ok(p[0] * p[0] * p[0] + z.atan2(T::cst(-1.0)))
}

/// `atan2(p₀ p₁, −1) + p₀²`: at `p₁ = −0.0` the product is `−0.0`.
fn signed_zero_product<T: Real>(p: &[T]) -> Result<T> {
    Ok((p[0] * p[1]).atan2(T::cst(-1.0)) + p[0] * p[0])
}

/// A value's sign of zero survives the drivers: through a loop's carry
/// (the array trace), through Taylor mode's products, through array sums.
/// Each driver's value is compared with plain `f64` bit for bit, and the
/// derivatives with the closed forms (`d/dp₀` of `p₀³ − π` is `3p₀²`, the
/// second `6p₀`; `z` does not depend on `p₀`'s value, being `−0` for every
/// `p₀`, and `atan2`'s partial in its first argument at `(−0, −1)` is `−1`
/// times `∂z/∂p₀ = 0`).
#[test]
fn negative_zero_values_keep_their_sign() {
    let p = [1.5_f64];
    let want = signed_zero_fold(&p).unwrap();
    assert_eq!(want, 1.5_f64.powi(3) - std::f64::consts::PI);
    let mut g = [0.0];
    let v = Gradient::new(|x: &[_]| signed_zero_fold(x), &p)
        .unwrap()
        .eval(&p, &mut g)
        .unwrap();
    assert_eq!((v.to_bits(), g), (want.to_bits(), [6.75]));
    let mut hv = [0.0];
    Hvp::new(|x: &[_]| signed_zero_fold(x), &p)
        .unwrap()
        .eval(&p, &[1.0], &mut hv)
        .unwrap();
    assert_eq!(hv, [9.0]);
    let mut d = [0.0; 4];
    Directional::new(|x: &[_]| signed_zero_fold(x), &p, 3)
        .unwrap()
        .eval(&p, &[1.0], &mut d)
        .unwrap();
    assert_eq!(d[0].to_bits(), want.to_bits(), "{d:?}");
    assert_eq!(d[1..], [6.75, 9.0, 6.0]);

    // Scalar Taylor mode: the constant term of a product of jets.
    let q = [1.5_f64, -0.0];
    let want = signed_zero_product(&q).unwrap();
    assert_eq!(want, -std::f64::consts::PI + 2.25);
    let mut d = [0.0; 3];
    Directional::new(|x: &[_]| signed_zero_product(x), &q, 2)
        .unwrap()
        .eval(&q, &[1.0, 0.0], &mut d)
        .unwrap();
    assert_eq!(d[0].to_bits(), want.to_bits(), "{d:?}");

    // Array sums: a sum of one term is that term; an empty sum is +0
    // (`−0 · e⁰ − (+0) = −0`; an empty dot product of `−0` would give `+0`).
    let sums = |x: &[TArray]| Ok(x[0].sum() * x[1].sum().exp() - x[1].dot(&x[1])?);
    let prog = array::trace(sums, &[&[-0.0], &[]]).unwrap();
    let out = prog.eval(&[&[-0.0], &[]]).unwrap();
    assert_eq!(out[0][0].to_bits(), (-0.0_f64).to_bits(), "{out:?}");
    let prog = array::trace(|x: &[TArray]| Ok(x[0].sum()), &[&[]]).unwrap();
    assert_eq!(
        prog.eval(&[&[]]).unwrap()[0][0].to_bits(),
        0.0_f64.to_bits()
    );
}

/// The array tier keeps a value's `−0.0` where plain `f64` does: a
/// concatenation (it added a `+0` padding), the maximum (it added a mean
/// offset from `+0`), the rows of a matrix–vector product on num-dual
/// (four rows at a time summed from `+0`, the last from `−0`), and an
/// empty sum of a broadcast scalar is `+0` (it folded `0 · s` to `−0`).
#[test]
fn array_operations_keep_negative_zero() {
    use num_dual::Dual64;
    use optic_ad::array::{Dense, Matrix};
    use std::sync::Arc;
    let neg = |v: f64| v == 0.0 && v.is_sign_negative();
    let cat = array::trace(|x: &[TArray]| Ok(x[0].concat(&x[1])), &[&[-0.0], &[-0.0]]).unwrap();
    let out = cat.eval(&[&[-0.0], &[-0.0]]).unwrap();
    assert!(out[0].iter().all(|&v| neg(v)), "concat: {out:?}");
    for x in [&[-0.0][..], &[-0.0, -1.0], &[-0.0, -0.0]] {
        let max = array::trace(|t: &[TArray]| t[0].max(), &[x]).unwrap();
        let out = max.eval(&[x]).unwrap();
        assert!(neg(out[0][0]), "traced max of {x:?}: {out:?}");
        assert!(
            neg(Dense::new(x.to_vec()).max().unwrap()),
            "Dense max of {x:?}"
        );
    }
    let empty = |t: &[TArray]| Ok(TArray::fill(t[0].sum(), 0)?.sum().atan2(TScalar::cst(-1.0)));
    let prog = array::trace(empty, &[&[-0.5]]).unwrap();
    assert_eq!(prog.eval(&[&[-0.5]]).unwrap()[0][0], std::f64::consts::PI);
    // Five rows: one block of four and one row on its own.
    let m = Arc::new(Matrix::new(5, 1, vec![1.0; 5]).unwrap());
    let y = Dense::<Dual64>::matvec(&m, &Dense::new(vec![Dual64::from(-0.0)])).unwrap();
    assert!(y.0.iter().all(|v| neg(v.re)), "{y:?}");
}

/// A `0.0` in user code is a value: `x − x` is `+0` and `x · 0.0` has the
/// sign of `x`, as in `f64` (before, both were folded to the structural
/// `−0`, which sent `atan2(·, −1)` to the `−π` branch for `x − x` and for
/// `x · 0.0` at `x > 0`). The transforms' structural zero (`−0.0`) still
/// folds products away.
#[test]
fn user_zeros_are_values() {
    fn a<T: Real>(p: &[T]) -> Result<T> {
        Ok((p[0] - p[0]).atan2(T::cst(-1.0)) + p[0] * p[0])
    }
    fn b<T: Real>(p: &[T]) -> Result<T> {
        Ok((p[0] * 0.0).atan2(T::cst(-1.0)) + p[0] * p[0])
    }
    fn c<T: Real>(p: &[T]) -> Result<T> {
        let [z] = fold(10, [p[0]], |[c]: [T; 1]| [c * 0.0])?;
        Ok(p[0] * p[0] * p[0] + z.atan2(T::cst(-1.0)))
    }
    type F = fn(&[f64]) -> Result<f64>;
    type G = fn(&[Tracer]) -> Result<Tracer>;
    type Case = (F, G, fn(f64) -> f64);
    // With the second derivative in p₀: 2 (from p₀²), and 6 p₀ (from p₀³).
    let cases: [Case; 3] = [(a, a, |_| 2.0), (b, b, |_| 2.0), (c, c, |x| 6.0 * x)];
    for (plain, traced, second) in cases {
        for x in [1.5, -1.5] {
            let p = [x];
            let want = plain(&p).unwrap();
            let mut g = [0.0];
            let v = Gradient::new(traced, &p).unwrap().eval(&p, &mut g).unwrap();
            assert_eq!(v.to_bits(), want.to_bits(), "x = {x}: {v} vs {want}");
            let mut d = [0.0; 3];
            Directional::new(traced, &p, 2)
                .unwrap()
                .eval(&p, &[1.0], &mut d)
                .unwrap();
            assert_eq!(d[0].to_bits(), want.to_bits(), "x = {x}: {d:?}");
            assert_eq!(d[2], second(x), "x = {x}: {d:?}");
        }
    }
    let mut bld = optic_ad::Builder::new();
    let x = bld.input();
    let structural = bld.zero();
    assert_eq!(bld.mul(x, structural), structural);
    let user = bld.constant(0.0);
    assert_ne!(bld.mul(x, user), user);
    assert_ne!(bld.sub(x, x), structural);
}

/// The drivers' own zeros at tracer points are structural: the seeds of
/// `jacobian` and `hessian` beside the 1, and the `t` of `taylor`'s line
/// `x + t v`. So a row of the Jacobian does not meet another row's
/// infinite partial (`∂√y₀/∂y₀ = ∞` at `y₀ = 0` would give `0 · ∞ = NaN`
/// in row 1), and `taylor`'s value at `x = −0` keeps its sign.
#[test]
fn driver_seeds_inside_traces_are_structural() {
    use optic_ad::{hessian, jacobian, taylor, typenum::U1};
    let g = gradient(
        |x| {
            let j = jacobian(|y| Ok(vec![y[0].sqrt(), y[1] * y[1]]), x)?;
            Ok(j[1][0] + j[1][1])
        },
        &[0.0, 1.5],
    )
    .unwrap();
    assert_eq!(g, vec![0.0, 2.0]);
    let g = gradient(
        |x| {
            let h = hessian(|y| y[0].sqrt() + y[1] * y[1] * y[1], x)?;
            Ok(h[1][1])
        },
        &[0.0, 1.5],
    )
    .unwrap();
    assert_eq!(g, vec![0.0, 6.0]);
    // taylor at the point −0 (a constant of the outer trace) along x₀:
    // its value atan2(−0, −1) = −π.
    let (y, g) = optic_ad::value_and_gradient(
        |x| {
            let z = [Tracer::cst(-0.0)];
            let d = taylor::<U1, _, _>(
                |y: &[Tracer]| y[0].atan2(Tracer::cst(-1.0)),
                &z[..],
                &[x[0]],
            )?;
            Ok(d[0] + d[1])
        },
        &[2.0],
    )
    .unwrap();
    // d[1] = ∂ atan2(y, −1)/∂y · v = −v at y = −0.
    assert_eq!((y, g), (-std::f64::consts::PI - 2.0, vec![-1.0]));
}
