//! Lenses into vectors: two representatives of one optic ([`Index`] and
//! [`Path`]) with residuals of different types and sizes, and the lens laws
//! as reusable checkers.
//!
//! A **lens** here is an optic with `A′ = A` and `B′ = B`, read as
//! `get(a) = left(a).1` and `put(a, b) = right(left(a).0, b)`. A
//! well-behaved lens satisfies
//!
//! * get-put: `put(a, get(a)) = a`;
//! * put-get: `get(put(a, b)) = b`;
//! * put-put: `put(put(a, b₁), b₂) = put(a, b₂)`.
//!
//! Source: K. Fischer, "∂P.jl terminology and notation guide", §I.A, Snippets
//! 2–3; the laws are the standard well-behaved lens laws (Foster et al.,
//! "Combinators for bidirectional tree transformations", 2007), shipped as
//! checkers in the manner of `isLens` in Haskell's `lens` package.

use std::fmt;
use std::marker::PhantomData;

use super::Optic;

/// Why a lens into vectors failed: an index past the end, or a path whose
/// length does not match the nesting depth.
///
/// Source: Fischer, ∂P.jl notes, Snippet 3 (where `getindex`/`setindex` would
/// throw); here it is a value, never a panic.
///
/// # Example
///
/// ```
/// use optic_ad::optic::{Index, LensError, Optic};
///
/// let err = Index::<i32>::new(5).modify(vec![1, 2], |x| x + 1).unwrap_err();
/// assert_eq!(err, LensError::IndexOutOfRange { index: 5, len: 2 });
/// assert_eq!(err.to_string(), "index 5 is out of range for a vector of length 2");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum LensError {
    /// `index` is not below the length `len` of the vector it indexes.
    #[error("index {index} is out of range for a vector of length {len}")]
    IndexOutOfRange {
        /// The index that was asked for.
        index: usize,
        /// The length of the vector at that level.
        len: usize,
    },
    /// A path of `found` indices was applied to data nested `expected`
    /// levels deep.
    #[error("a path of {found} indices does not match nesting depth {expected}")]
    PathDepth {
        /// The nesting depth of the data ([`IndexPath::DEPTH`]).
        expected: usize,
        /// The number of indices in the path.
        found: usize,
    },
}

fn at<T>(v: &[T], index: usize) -> Result<&T, LensError> {
    v.get(index).ok_or(LensError::IndexOutOfRange {
        index,
        len: v.len(),
    })
}

fn at_mut<T>(v: &mut [T], index: usize) -> Result<&mut T, LensError> {
    let len = v.len();
    v.get_mut(index)
        .ok_or(LensError::IndexOutOfRange { index, len })
}

/// The lens onto element `index` of a `Vec<T>`: Fischer's `SetIndex`.
///
/// * `A = A′ = Vec<T>`, `B = B′ = T`, residual `Vec<T>`.
/// * `left(v) = (v, v[index])`: the residual is the whole vector (moved, not
///   copied) and the focus is a clone of the element.
/// * `right(m, new) = m` with `m[index] = new`.
///
/// Composing with [`Optic::then`] keeps every intermediate: the residual of
/// `Index::new(i).then(Index::new(j))` on a `Vec<Vec<T>>` is the pair
/// `(Vec<Vec<T>>, Vec<T>)`, the whole and the row it passed through. [`Path`]
/// represents the same optic with the whole alone as residual.
///
/// Satisfies the lens laws ([`is_lens`]).
///
/// Source: Fischer, ∂P.jl notes, §I.A, Snippet 2.
///
/// # Errors
///
/// `left` and `right` return [`LensError::IndexOutOfRange`] when `index` is
/// not below the vector's length; they never panic.
///
/// # Example
///
/// ```
/// use optic_ad::optic::{Index, Optic};
///
/// // Fischer, ∂P.jl notes, Snippet 2: `SetIndex(2) § SetIndex(1)` on
/// // (1, (2, 3)), with nested vectors and 0-based indices.
/// let o = Index::new(1).then(Index::new(0));
/// let tup = vec![vec![1], vec![2, 3]];
/// let (m, c) = o.left(tup.clone()).unwrap();
/// assert_eq!(c, 2);
/// assert_eq!(m, (tup, vec![2, 3]));
/// assert_eq!(o.right(m, c + 100).unwrap(), vec![vec![1], vec![102, 3]]);
/// ```
pub struct Index<T> {
    index: usize,
    elem: PhantomData<fn(Vec<T>) -> T>,
}

impl<T> Index<T> {
    /// The lens onto element `index` (0-based) of a `Vec<T>`.
    ///
    /// Source: Fischer, ∂P.jl notes, Snippet 2 (`SetIndex(idx)`).
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::optic::{Index, Optic};
    ///
    /// assert_eq!(Index::new(2).modify(vec![1, 2, 3], |x| -x).unwrap(), vec![1, 2, -3]);
    /// ```
    pub fn new(index: usize) -> Self {
        Index {
            index,
            elem: PhantomData,
        }
    }

    /// The index this lens focuses.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::optic::Index;
    ///
    /// assert_eq!(Index::<f64>::new(4).index(), 4);
    /// ```
    pub fn index(&self) -> usize {
        self.index
    }
}

impl<T> Clone for Index<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Index<T> {}

impl<T> PartialEq for Index<T> {
    fn eq(&self, other: &Self) -> bool {
        self.index == other.index
    }
}

impl<T> Eq for Index<T> {}

impl<T> fmt::Debug for Index<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Index").field(&self.index).finish()
    }
}

impl<T: Clone> Optic for Index<T> {
    type A = Vec<T>;
    type B = T;
    type BPrime = T;
    type APrime = Vec<T>;
    type Residual = Vec<T>;
    type Error = LensError;

    /// `left(v) = (v, v[index])`.
    ///
    /// # Errors
    ///
    /// [`LensError::IndexOutOfRange`] if `index >= v.len()`.
    fn left(&self, a: Vec<T>) -> Result<(Vec<T>, T), LensError> {
        let b = at(&a, self.index)?.clone();
        Ok((a, b))
    }

    /// `right(m, new) = m` with `m[index] = new`.
    ///
    /// # Errors
    ///
    /// [`LensError::IndexOutOfRange`] if `index >= m.len()` (only possible
    /// for a residual that did not come from this lens's `left`).
    fn right(&self, mut m: Vec<T>, b: T) -> Result<Vec<T>, LensError> {
        *at_mut(&mut m, self.index)? = b;
        Ok(m)
    }
}

/// A **nested vector** type that holds values of type `F` exactly
/// [`IndexPath::DEPTH`] levels down, reached by a path of that many indices.
///
/// Implemented for `Vec<F>` (depth 1), `Vec<Vec<F>>` (depth 2) and
/// `Vec<Vec<Vec<F>>>` (depth 3), with `F: Clone`. The focus type `F` is a
/// parameter rather than an associated type because one value holds several:
/// a `Vec<Vec<i32>>` is `IndexPath<Vec<i32>>` at depth 1 and `IndexPath<i32>` at
/// depth 2.
///
/// Laws (for a path of valid indices, `DEPTH` long):
/// `set_path(x, p, get_path(x, p)) = x` and
/// `get_path(set_path(x, p, f), p) = f`.
///
/// Source: Fischer, ∂P.jl notes, Snippet 3 (`path_getindex`, `path_setindex`).
///
/// # Example
///
/// ```
/// use optic_ad::optic::IndexPath;
///
/// let x = vec![vec![1], vec![2, 3]];
/// assert_eq!(IndexPath::<i32>::get_path(&x, &[1, 0]).unwrap(), 2);
/// assert_eq!(IndexPath::<Vec<i32>>::get_path(&x, &[1]).unwrap(), vec![2, 3]);
/// let y = x.set_path(&[1, 0], 102).unwrap();
/// assert_eq!(y, vec![vec![1], vec![102, 3]]);
/// ```
pub trait IndexPath<F>: Sized {
    /// How many indices reach an `F`.
    const DEPTH: usize;

    /// The value at `path` (cloned).
    ///
    /// # Errors
    ///
    /// [`LensError::PathDepth`] if `path.len() != DEPTH`;
    /// [`LensError::IndexOutOfRange`] if an index is past the end of its
    /// level.
    fn get_path(&self, path: &[usize]) -> Result<F, LensError>;

    /// `self` with the value at `path` replaced by `focus`, updated in
    /// place; no intermediate level is copied.
    ///
    /// # Errors
    ///
    /// As for [`IndexPath::get_path`].
    fn set_path(self, path: &[usize], focus: F) -> Result<Self, LensError>;
}

fn check_depth(expected: usize, path: &[usize]) -> Result<(), LensError> {
    if path.len() == expected {
        Ok(())
    } else {
        Err(LensError::PathDepth {
            expected,
            found: path.len(),
        })
    }
}

impl<F: Clone> IndexPath<F> for Vec<F> {
    const DEPTH: usize = 1;

    fn get_path(&self, path: &[usize]) -> Result<F, LensError> {
        check_depth(1, path)?;
        Ok(at(self, path[0])?.clone())
    }

    fn set_path(mut self, path: &[usize], focus: F) -> Result<Self, LensError> {
        check_depth(1, path)?;
        *at_mut(&mut self, path[0])? = focus;
        Ok(self)
    }
}

impl<F: Clone> IndexPath<F> for Vec<Vec<F>> {
    const DEPTH: usize = 2;

    fn get_path(&self, path: &[usize]) -> Result<F, LensError> {
        check_depth(2, path)?;
        Ok(at(at(self, path[0])?, path[1])?.clone())
    }

    fn set_path(mut self, path: &[usize], focus: F) -> Result<Self, LensError> {
        check_depth(2, path)?;
        *at_mut(at_mut(&mut self, path[0])?, path[1])? = focus;
        Ok(self)
    }
}

impl<F: Clone> IndexPath<F> for Vec<Vec<Vec<F>>> {
    const DEPTH: usize = 3;

    fn get_path(&self, path: &[usize]) -> Result<F, LensError> {
        check_depth(3, path)?;
        Ok(at(at(at(self, path[0])?, path[1])?, path[2])?.clone())
    }

    fn set_path(mut self, path: &[usize], focus: F) -> Result<Self, LensError> {
        check_depth(3, path)?;
        *at_mut(at_mut(at_mut(&mut self, path[0])?, path[1])?, path[2])? = focus;
        Ok(self)
    }
}

/// The lens onto the value at a path of indices in a nested vector `T`,
/// whose focus has type `F`: Fischer's `FastSetIndex`.
///
/// * `A = A′ = T`, `B = B′ = F`, residual `T`.
/// * `left(x) = (x, x[p₀][p₁]…)`: the residual is the original object alone
///   (moved, not copied), with no intermediate levels.
/// * `right(x, new)` writes `new` at the path, in place.
///
/// [`Path::then_path`] concatenates paths, so composing never grows the
/// residual. `Path::new(i).then_path(Path::new(j))` is the same optic as
/// `Index::new(i).then(Index::new(j))` (same action), but its residual is
/// `Vec<Vec<T>>` where the `Index` composite's is `(Vec<Vec<T>>, Vec<T>)`:
/// the residual belongs to the representative, not to the optic (Fischer,
/// ∂P.jl notes, §I.A). The types keep the two apart.
///
/// Paths are built only by [`Path::new`] and [`Path::then_path`], so the
/// path's length always equals the nesting depth of `F` in `T`. It is an
/// [`Optic`] when `T: IndexPath<F>`, i.e. for depths 1 to 3.
///
/// Satisfies the lens laws ([`is_lens`]).
///
/// Source: Fischer, ∂P.jl notes, §I.A, Snippet 3, and §III (representatives of
/// one optic need not be identical).
///
/// # Errors
///
/// `left` and `right` return [`LensError::IndexOutOfRange`] when an index
/// is past the end of its level; they never panic.
///
/// # Example
///
/// ```
/// use optic_ad::optic::{Index, Optic, Path};
///
/// let tup = vec![vec![1], vec![2, 3]];
/// let of = Path::new(1).then_path(Path::new(0));
/// let o = Index::new(1).then(Index::new(0));
///
/// // Same action ...
/// assert_eq!(of.modify(tup.clone(), |c| c + 100).unwrap(), vec![vec![1], vec![102, 3]]);
/// assert_eq!(o.modify(tup.clone(), |c| c + 100).unwrap(), vec![vec![1], vec![102, 3]]);
///
/// // ... but a smaller residual: one copy of the object, no intermediates.
/// let (m, c) = of.left(tup.clone()).unwrap();
/// assert_eq!((m.clone(), c), (tup.clone(), 2));
/// let (mo, _) = o.left(tup.clone()).unwrap();
/// assert_eq!(mo, (tup, vec![2, 3]));
/// assert_eq!(of.right(m, c + 100).unwrap(), vec![vec![1], vec![102, 3]]);
/// ```
///
/// Handing one representative's residual to the other does not compile
/// (in Fischer's Julia it is a run-time `MethodError`):
///
/// ```compile_fail,E0308
/// use optic_ad::optic::{Index, Optic, Path};
///
/// let tup = vec![vec![1], vec![2, 3]];
/// let of = Path::new(1).then_path(Path::new(0));
/// let o = Index::new(1).then(Index::new(0));
/// let _ = of.left(tup.clone()); // of's residual is Vec<Vec<i32>>
/// let (m, c) = o.left(tup).unwrap();
/// let _ = of.right(m, c + 100); // m is (Vec<Vec<i32>>, Vec<i32>): E0308
/// ```
pub struct Path<T, F> {
    path: Vec<usize>,
    types: PhantomData<fn(T) -> F>,
}

impl<F> Path<Vec<F>, F> {
    /// The one-step path to element `index` (0-based) of a `Vec<F>`.
    ///
    /// Source: Fischer, ∂P.jl notes, Snippet 3, line 4
    /// (`FastSetIndex(i::Int)`).
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::optic::{Optic, Path};
    ///
    /// assert_eq!(Path::new(0).modify(vec![1, 2], |x| x + 1).unwrap(), vec![2, 2]);
    /// ```
    pub fn new(index: usize) -> Self {
        Path {
            path: vec![index],
            types: PhantomData,
        }
    }
}

impl<T, F> Path<T, F> {
    /// Composes two paths by concatenating them: the path to a `G` inside
    /// the `F` this path focuses. The result is the sequential composition
    /// `self § other` as a single `Path`, whose residual is still one `T`.
    ///
    /// Source: Fischer, ∂P.jl notes, Snippet 3, lines 23–24
    /// (`a::FastSetIndex § b::FastSetIndex = FastSetIndex((a.path..., b.path...))`).
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::optic::{Optic, Path};
    ///
    /// let p = Path::new(1).then_path(Path::new(0));
    /// assert_eq!(p.path(), &[1, 0]);
    /// assert_eq!(p.modify(vec![vec![1], vec![2, 3]], |c| c + 100).unwrap(), vec![vec![1], vec![102, 3]]);
    /// ```
    pub fn then_path<G>(self, other: Path<F, G>) -> Path<T, G> {
        let mut path = self.path;
        path.extend(other.path);
        Path {
            path,
            types: PhantomData,
        }
    }

    /// The indices, outermost first.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::optic::Path;
    ///
    /// let p: Path<Vec<Vec<f64>>, f64> = Path::new(2).then_path(Path::new(5));
    /// assert_eq!(p.path(), &[2, 5]);
    /// ```
    pub fn path(&self) -> &[usize] {
        &self.path
    }
}

impl<T> From<Index<T>> for Path<Vec<T>, T> {
    /// The one-step path with the same index: the same optic as the
    /// [`Index`] it came from, with the same residual.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::optic::{Index, Path};
    ///
    /// let p = Path::from(Index::<i32>::new(3));
    /// assert_eq!(p.path(), &[3]);
    /// ```
    fn from(i: Index<T>) -> Self {
        Path::new(i.index())
    }
}

impl<T, F> Clone for Path<T, F> {
    fn clone(&self) -> Self {
        Path {
            path: self.path.clone(),
            types: PhantomData,
        }
    }
}

impl<T, F> PartialEq for Path<T, F> {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

impl<T, F> Eq for Path<T, F> {}

impl<T, F> fmt::Debug for Path<T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Path").field(&self.path).finish()
    }
}

impl<T: IndexPath<F>, F> Optic for Path<T, F> {
    type A = T;
    type B = F;
    type BPrime = F;
    type APrime = T;
    type Residual = T;
    type Error = LensError;

    /// `left(x) = (x, x at path)`.
    ///
    /// # Errors
    ///
    /// [`LensError::IndexOutOfRange`] if an index is past the end of its
    /// level.
    fn left(&self, a: T) -> Result<(T, F), LensError> {
        let b = a.get_path(&self.path)?;
        Ok((a, b))
    }

    /// `right(x, new) = x` with `new` written at the path.
    ///
    /// # Errors
    ///
    /// [`LensError::IndexOutOfRange`] if an index is past the end of its
    /// level (only possible for a residual that did not come from this
    /// lens's `left`).
    fn right(&self, m: T, b: F) -> Result<T, LensError> {
        m.set_path(&self.path, b)
    }
}

/// `get(a) = left(a).1`.
fn get<O, A, B>(o: &O, a: A) -> Result<B, O::Error>
where
    O: Optic<A = A, B = B, BPrime = B, APrime = A>,
{
    Ok(o.left(a)?.1)
}

/// `put(a, b) = right(left(a).0, b)`.
fn put<O, A, B>(o: &O, a: A, b: B) -> Result<A, O::Error>
where
    O: Optic<A = A, B = B, BPrime = B, APrime = A>,
{
    let (m, _) = o.left(a)?;
    o.right(m, b)
}

/// Checks the **get-put** lens law at `a`: `put(a, get(a)) = a` (putting
/// back what you got changes nothing).
///
/// For any optic with `A′ = A` and `B′ = B`, where `get(a) = left(a).1` and
/// `put(a, b) = right(left(a).0, b)`. Returns `Ok(true)` when the law holds
/// at `a`.
///
/// Source: the well-behaved lens laws (Foster et al. 2007), as `isLens` in
/// Haskell's `lens`; applied to Fischer's `SetIndex`/`FastSetIndex`.
///
/// # Errors
///
/// The optic's own error, from `left` or `right`.
///
/// # Example
///
/// ```
/// use optic_ad::optic::{law_get_put, Index, Optic};
///
/// let o = Index::new(1).then(Index::new(0));
/// assert_eq!(law_get_put(&o, vec![vec![1], vec![2, 3]]), Ok(true));
/// ```
pub fn law_get_put<O, A, B>(o: &O, a: A) -> Result<bool, O::Error>
where
    O: Optic<A = A, B = B, BPrime = B, APrime = A>,
    A: Clone + PartialEq,
{
    let (m, b) = o.left(a.clone())?;
    Ok(o.right(m, b)? == a)
}

/// Checks the **put-get** lens law at `(a, b)`: `get(put(a, b)) = b` (you
/// get back what you put).
///
/// Same setting as [`law_get_put`]. Returns `Ok(true)` when the law holds.
///
/// Source: as for [`law_get_put`].
///
/// # Errors
///
/// The optic's own error, from `left` or `right`.
///
/// # Example
///
/// ```
/// use optic_ad::optic::{law_put_get, Path};
///
/// let p = Path::new(1).then_path(Path::new(0));
/// assert_eq!(law_put_get(&p, vec![vec![1], vec![2, 3]], 7), Ok(true));
/// ```
pub fn law_put_get<O, A, B>(o: &O, a: A, b: B) -> Result<bool, O::Error>
where
    O: Optic<A = A, B = B, BPrime = B, APrime = A>,
    B: Clone + PartialEq,
{
    let a2 = put(o, a, b.clone())?;
    Ok(get(o, a2)? == b)
}

/// Checks the **put-put** lens law at `(a, b₁, b₂)`:
/// `put(put(a, b₁), b₂) = put(a, b₂)` (the second put wins).
///
/// Same setting as [`law_get_put`]. Returns `Ok(true)` when the law holds.
///
/// Source: as for [`law_get_put`].
///
/// # Errors
///
/// The optic's own error, from `left` or `right`.
///
/// # Example
///
/// ```
/// use optic_ad::optic::{law_put_put, Index};
///
/// assert_eq!(law_put_put(&Index::new(0), vec![1.0, 2.0], 3.0, 4.0), Ok(true));
/// ```
pub fn law_put_put<O, A, B>(o: &O, a: A, b1: B, b2: B) -> Result<bool, O::Error>
where
    O: Optic<A = A, B = B, BPrime = B, APrime = A>,
    A: Clone + PartialEq,
    B: Clone,
{
    let lhs = put(o, put(o, a.clone(), b1)?, b2.clone())?;
    let rhs = put(o, a, b2)?;
    Ok(lhs == rhs)
}

/// Checks all three lens laws ([`law_get_put`], [`law_put_get`],
/// [`law_put_put`]) at `(a, b₁, b₂)`; `Ok(true)` when all hold.
///
/// Source: `isLens` in Haskell's `lens`; Foster et al. 2007.
///
/// # Errors
///
/// The optic's own error, from `left` or `right`.
///
/// # Example
///
/// ```
/// use optic_ad::optic::{is_lens, Index, Optic, Path};
///
/// let tup = vec![vec![1], vec![2, 3]];
/// assert_eq!(is_lens(&Index::new(1).then(Index::new(0)), tup.clone(), 5, 6), Ok(true));
/// assert_eq!(is_lens(&Path::new(1).then_path(Path::new(1)), tup, 5, 6), Ok(true));
/// ```
pub fn is_lens<O, A, B>(o: &O, a: A, b1: B, b2: B) -> Result<bool, O::Error>
where
    O: Optic<A = A, B = B, BPrime = B, APrime = A>,
    A: Clone + PartialEq,
    B: Clone + PartialEq,
{
    Ok(law_get_put(o, a.clone())?
        && law_put_get(o, a.clone(), b1.clone())?
        && law_put_put(o, a, b1, b2)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_out_of_range_is_an_error() {
        let o = Index::<i32>::new(2);
        assert_eq!(
            o.left(vec![1, 2]),
            Err(LensError::IndexOutOfRange { index: 2, len: 2 })
        );
        assert_eq!(
            o.right(vec![], 1),
            Err(LensError::IndexOutOfRange { index: 2, len: 0 })
        );
    }

    #[test]
    fn path_depth_mismatch_is_an_error() {
        let x = vec![vec![1]];
        assert_eq!(
            IndexPath::<i32>::get_path(&x, &[0]),
            Err(LensError::PathDepth {
                expected: 2,
                found: 1
            })
        );
        assert_eq!(
            IndexPath::<i32>::set_path(x, &[0, 0, 0], 3),
            Err(LensError::PathDepth {
                expected: 2,
                found: 3
            })
        );
    }

    #[test]
    fn depth_three() {
        let x = vec![vec![vec![1, 2]], vec![vec![3], vec![4, 5]]];
        let p = Path::new(1).then_path(Path::new(1)).then_path(Path::new(0));
        assert_eq!(p.left(x.clone()).unwrap().1, 4);
        let y = p.right(x, 40).unwrap();
        assert_eq!(y, vec![vec![vec![1, 2]], vec![vec![3], vec![40, 5]]]);
    }
}
