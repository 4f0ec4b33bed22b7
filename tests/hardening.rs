//! Regression tests for the defects of the second hardening round, each
//! failing (or aborting the process) before its fix:
//!
//! * a huge `polygamma` order computed `n!` by `n` multiplications per
//!   shift step (about a minute for `n = 2³¹ − 1`);
//! * array lengths that cannot be allocated aborted the process (a sum of
//!   a fill of 2⁴⁰ elements, which needs no memory at all; a `Dense`
//!   broadcast to `usize::MAX` elements; Taylor jets allocated up front);
//! * a `Tracer::cst` made before any trace, used in a trace, was reported as
//!   perturbation confusion (`ForeignTracer { trace: 0 }`).

use optic_ad::array::{self, Array, Dense, TArray};
use optic_ad::{derivative, gradient, Error, Real, Tracer};
use typenum::U1;

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
    let f = |a: &TArray| Ok(TArray::fill(a.sum(), n).sum());
    let g = array::gradient(f, &[1.0, 2.0]).unwrap();
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
    let f = |a: &TArray| Ok(TArray::fill(a.sum(), n).cumsum().sum());
    let r = array::gradient(f, &[1.0, 2.0]);
    assert!(matches!(r, Err(Error::AllocationFailed { .. })), "{r:?}");
    let r = Dense::new(vec![1.0]).broadcast_axis_flat(0, usize::MAX, 1);
    assert!(matches!(r, Err(Error::AllocationFailed { .. })), "{r:?}");
    // Jets of (K + 1)·n values for n = 2⁴⁰, as the Taylor program would
    // allocate them up front (the trace itself never reads the data).
    let r = array::TaylorProgram::new(
        &array::trace(
            |x: &[TArray]| Ok(TArray::fill(x[0].sum(), n).cumsum().sum()),
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
