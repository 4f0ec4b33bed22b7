//! Derivative orders at and past the limit of the nested-closure encoding
//! (issue 6, defects 3 and 7). Above the limit, the typed drivers and
//! `Nested` do not compile (`compile_fail` doctests on `derivative`,
//! `Derivatives::new` and `Nested`); the untyped `nest` returns an error
//! before building anything.

use std::time::Instant;

use optic_ad::functor::MAX_ORDER;
use optic_ad::{derivative, nest, trace, Error, Nested, Real};
use typenum::{U2, U20, U3};

/// `derivative::<U21>` ran for over 300 s and 10.8 GB because orders
/// 0..=20 were built before 21 was rejected. The runtime entry rejects
/// first: this returns at once.
#[test]
fn issue_6_order_above_the_limit_is_rejected_before_building() {
    let p = trace(|x| vec![x[0].sin()], &[0.3]).unwrap();
    let t = Instant::now();
    for order in [MAX_ORDER + 1, 64, usize::MAX] {
        let r = nest(&p, order);
        assert!(
            matches!(r, Err(Error::OrderTooHigh { order: o, max: MAX_ORDER }) if o == order),
            "{order}: {r:?}"
        );
    }
    // Not a timing test: a guard against building 2²¹ closures first (which
    // took minutes); rejecting takes microseconds.
    assert!(t.elapsed().as_secs() < 5);
}

/// `Nested::<U64>::closures()` overflowed a shift; the largest order that
/// compiles gives the right count.
#[test]
fn issue_6_closure_count_at_the_limit() {
    assert_eq!(Nested::<U20>::closures(), (1 << 20) - 1);
    assert_eq!(Nested::<U3>::closures(), 7);
}

/// Orders below the limit still work.
#[test]
fn low_orders_work() {
    let d = derivative::<U2, _, _>(|x| x.sin(), 0.3).unwrap();
    assert!((d[2] + 0.3f64.sin()).abs() < 1e-15);
}

/// The fuzz run found `nest(p, k)` for k within the order limit building
/// tens of GB (an allocation of 35 GB failed). Each nesting level after the
/// first is refused before it is built when the program would pass
/// `MAX_NESTED_LEN`; this returns quickly with bounded memory.
#[test]
fn issue_6_deep_nesting_is_refused_before_it_is_built() {
    use optic_ad::functor::MAX_NESTED_LEN;
    let p = trace(|x| vec![x[0].sin().exp() / (x[0] * x[0] + 1.0)], &[0.3]).unwrap();
    for order in [14, 17, MAX_ORDER] {
        let r = nest(&p, order);
        assert!(
            matches!(
                r,
                Err(Error::ProgramTooLarge {
                    max: MAX_NESTED_LEN,
                    ..
                })
            ),
            "order {order}: {:?}",
            r.map(|q| q.len())
        );
    }
    // Orders that fit still build.
    assert!(nest(&p, 6).is_ok());
}
