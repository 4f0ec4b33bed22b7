//! The lens laws (get-put, put-get, put-put) for `Index`, `Path` and their
//! compositions, on random nested vectors and random valid paths, using the
//! crate's own checkers (`law_get_put`, `law_put_get`, `law_put_put`,
//! `is_lens`). Source: K. Fischer, "∂P.jl terminology and notation guide",
//! §I.A; the laws are stated in the book's chapter "Optics".

use optic_ad::optic::{
    is_lens, law_get_put, law_put_get, law_put_put, Index, LensError, Optic, OpticRepr, Path,
};
use proptest::prelude::*;

use crate::nested_data;
use nested_data::{nested2, nested3};

/// Checks each named law separately, so a failure names the law.
fn check<O, A, B>(o: &O, a: A, b1: B, b2: B) -> Result<(), TestCaseError>
where
    O: Optic<A = A, B = B, BPrime = B, APrime = A, Error = LensError>,
    A: Clone + PartialEq,
    B: Clone + PartialEq,
{
    prop_assert_eq!(law_get_put(o, a.clone()), Ok(true), "get-put");
    prop_assert_eq!(law_put_get(o, a.clone(), b1.clone()), Ok(true), "put-get");
    prop_assert_eq!(
        law_put_put(o, a.clone(), b1.clone(), b2.clone()),
        Ok(true),
        "put-put"
    );
    prop_assert_eq!(is_lens(o, a, b1, b2), Ok(true), "is_lens");
    Ok(())
}

fn flat() -> impl Strategy<Value = (Vec<i32>, usize)> {
    prop::collection::vec(any::<i32>(), 1..8).prop_flat_map(|x| {
        let n = x.len();
        (Just(x), 0..n)
    })
}

proptest! {
    #[test]
    fn index_is_a_lens((x, i) in flat(), b1 in any::<i32>(), b2 in any::<i32>()) {
        check(&Index::new(i), x, b1, b2)?;
    }

    #[test]
    fn path_is_a_lens((x, i) in flat(), b1 in any::<i32>(), b2 in any::<i32>()) {
        check(&Path::new(i), x, b1, b2)?;
    }

    #[test]
    fn row_lenses((x, i, _j) in nested2(any::<i32>()),
                  r1 in prop::collection::vec(any::<i32>(), 0..5),
                  r2 in prop::collection::vec(any::<i32>(), 0..5)) {
        // Focus a whole row: B = Vec<i32>.
        check(&Index::new(i), x.clone(), r1.clone(), r2.clone())?;
        check(&Path::new(i), x, r1, r2)?;
    }

    #[test]
    fn composites_are_lenses((x, i, j) in nested2(any::<i32>()), b1 in any::<i32>(), b2 in any::<i32>()) {
        check(&Index::new(i).then(Index::new(j)), x.clone(), b1, b2)?;
        check(&Path::new(i).then_path(Path::new(j)), x.clone(), b1, b2)?;
        // Mixed, where the types fit.
        check(&Index::new(i).then(Path::new(j)), x.clone(), b1, b2)?;
        check(&Path::new(i).then(Index::new(j)), x.clone(), b1, b2)?;
        check(&Path::new(i).then(Path::new(j)), x.clone(), b1, b2)?;
        // Erased.
        check(&OpticRepr::from_optic(Index::new(i).then(Path::new(j))), x, b1, b2)?;
    }

    #[test]
    fn depth_three_composites_are_lenses((x, [i, j, k]) in nested3(any::<i32>()),
                                         b1 in any::<i32>(), b2 in any::<i32>()) {
        check(&Index::new(i).then(Index::new(j)).then(Index::new(k)), x.clone(), b1, b2)?;
        check(
            &Path::new(i).then_path(Path::new(j)).then_path(Path::new(k)),
            x.clone(), b1, b2,
        )?;
        check(&Index::new(i).then(Path::new(j).then_path(Path::new(k))), x.clone(), b1, b2)?;
        check(&Path::new(i).then_path(Path::new(j)).then(Index::new(k)), x, b1, b2)?;
    }

    #[test]
    fn laws_report_errors_for_bad_indices(x in prop::collection::vec(any::<i32>(), 0..5),
                                          extra in 0usize..5, b in any::<i32>()) {
        let i = x.len() + extra;
        let err = Err(LensError::IndexOutOfRange { index: i, len: x.len() });
        prop_assert_eq!(law_get_put(&Index::new(i), x.clone()), err);
        prop_assert_eq!(law_put_get(&Path::new(i), x.clone(), b), err);
        prop_assert_eq!(law_put_put(&Index::new(i), x, b, b), err);
    }
}

/// A closure optic that is not a lawful lens: the checkers notice.
#[test]
fn checkers_detect_an_unlawful_optic() {
    // `put` ignores the new value and writes 0 at the focus.
    let bad: OpticRepr<Vec<i32>, i32, i32, Vec<i32>, Vec<i32>, LensError> = OpticRepr::new(
        |v: Vec<i32>| {
            let b = v
                .first()
                .copied()
                .ok_or(LensError::IndexOutOfRange { index: 0, len: 0 })?;
            Ok((v, b))
        },
        |mut v: Vec<i32>, _b: i32| {
            if let Some(x) = v.first_mut() {
                *x = 0;
            }
            Ok(v)
        },
    );
    assert_eq!(law_get_put(&bad, vec![5, 6]), Ok(false));
    assert_eq!(law_put_get(&bad, vec![5, 6], 7), Ok(false));
    // put-put still holds: both sides write 0.
    assert_eq!(law_put_put(&bad, vec![5, 6], 7, 8), Ok(true));
    assert_eq!(is_lens(&bad, vec![5, 6], 7, 8), Ok(false));
}
