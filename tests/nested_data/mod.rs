//! Random ragged nested vectors with valid paths into them, shared by the
//! optic-law and lens-law tests.

use proptest::prelude::*;

/// A ragged `Vec<Vec<T>>` with non-empty rows, plus a valid path into it.
pub fn nested2<S>(elem: S) -> impl Strategy<Value = (Vec<Vec<S::Value>>, usize, usize)>
where
    S: Strategy + Clone,
    S::Value: Clone,
{
    prop::collection::vec(prop::collection::vec(elem, 1..6), 1..6).prop_flat_map(|x| {
        let rows = x.len();
        (Just(x), 0..rows).prop_flat_map(|(x, i)| {
            let cols = x[i].len();
            (Just(x), Just(i), 0..cols)
        })
    })
}

/// Three levels of nesting.
pub type Cube<T> = Vec<Vec<Vec<T>>>;

/// A ragged `Vec<Vec<Vec<T>>>` with non-empty levels, plus a valid path.
pub fn nested3<S>(elem: S) -> impl Strategy<Value = (Cube<S::Value>, [usize; 3])>
where
    S: Strategy,
{
    let level = prop::collection::vec(
        prop::collection::vec(prop::collection::vec(elem, 1..4), 1..4),
        1..4,
    );
    (level, any::<[prop::sample::Index; 3]>()).prop_map(|(x, [r0, r1, r2])| {
        let i = r0.index(x.len());
        let j = r1.index(x[i].len());
        let k = r2.index(x[i][j].len());
        (x, [i, j, k])
    })
}
