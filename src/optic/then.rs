//! Sequential composition of optics (`§` in K. Fischer, "∂P.jl terminology
//! and notation guide").

use super::Optic;

/// The sequential composition `first § second` of two optics: the
/// composition of two optics is an optic in its own right.
///
/// If `first : (A, A′) → (B, B′)` and `second : (B, B′) → (C, C′)`, then
/// `Then<first, second> : (A, A′) → (C, C′)` with residual `(M₁, M₂)`:
///
/// * `left(a) = ((m₁, m₂), c)` where `(m₁, b) = first.left(a)` and
///   `(m₂, c) = second.left(b)`;
/// * `right((m₁, m₂), c′) = first.right(m₁, second.right(m₂, c′))`.
///
/// Both optics must share one error type, which the composite returns.
/// `then` is associative and [`Id`](super::Id) is its unit, up to the
/// residual (see the laws on [`Optic`]).
///
/// Source: Fischer, ∂P.jl notes, §I (the explicit composition rule `l₁₂`,
/// `r₁₂`) and Snippet 1, lines 15–24.
///
/// # Example
///
/// ```
/// use optic_ad::optic::{Index, Optic, Then};
///
/// // Fischer, ∂P.jl notes, Snippet 2: `SetIndex(2) § SetIndex(1)` on
/// // (1, (2, 3)).
/// let o = Then::new(Index::new(1), Index::new(0));
/// let tup = vec![vec![1], vec![2, 3]];
///
/// let (m, c) = o.left(tup.clone()).unwrap();
/// assert_eq!(c, 2);
/// // The residual is the pair of the two residuals: the whole, then the
/// // intermediate row.
/// assert_eq!(m, (tup.clone(), vec![2, 3]));
/// assert_eq!(o.right(m, c + 100).unwrap(), vec![vec![1], vec![102, 3]]);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Then<O1, O2> {
    first: O1,
    second: O2,
}

impl<O1, O2> Then<O1, O2> {
    /// The composite `first § second`: run `first`, then `second` on its
    /// focus. Same as [`Optic::then`].
    ///
    /// Source: Fischer, ∂P.jl notes, Snippet 1, lines 15–24.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::optic::{Index, Optic, Then};
    ///
    /// let o = Then::new(Index::new(0), Index::new(1));
    /// let v = vec![vec![1, 2], vec![3]];
    /// assert_eq!(o.modify(v, |x| x * 10).unwrap(), vec![vec![1, 20], vec![3]]);
    /// ```
    pub fn new(first: O1, second: O2) -> Self {
        Then { first, second }
    }

    /// The outer optic, which runs first in `left` and last in `right`.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::optic::{Index, Optic};
    ///
    /// let o = Index::<Vec<i32>>::new(1).then(Index::<i32>::new(0));
    /// assert_eq!(o.first().index(), 1);
    /// ```
    pub fn first(&self) -> &O1 {
        &self.first
    }

    /// The inner optic, which runs last in `left` and first in `right`.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::optic::{Index, Optic};
    ///
    /// let o = Index::<Vec<i32>>::new(1).then(Index::<i32>::new(0));
    /// assert_eq!(o.second().index(), 0);
    /// ```
    pub fn second(&self) -> &O2 {
        &self.second
    }

    /// Splits the composite back into `(first, second)`.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::optic::{Index, Optic};
    ///
    /// let o = Index::<Vec<i32>>::new(1).then(Index::<i32>::new(0));
    /// let (a, b) = o.into_parts();
    /// assert_eq!((a.index(), b.index()), (1, 0));
    /// ```
    pub fn into_parts(self) -> (O1, O2) {
        (self.first, self.second)
    }
}

impl<O1, O2> Optic for Then<O1, O2>
where
    O1: Optic,
    O2: Optic<A = O1::B, APrime = O1::BPrime, Error = O1::Error>,
{
    type A = O1::A;
    type B = O2::B;
    type BPrime = O2::BPrime;
    type APrime = O1::APrime;
    type Residual = (O1::Residual, O2::Residual);
    type Error = O1::Error;

    /// `l₁₂(a) = ((m₁, m₂), c)` where `(m₁, b) = l₁(a)`, `(m₂, c) = l₂(b)`.
    ///
    /// # Errors
    ///
    /// The first error of `first.left` or `second.left`.
    fn left(&self, a: Self::A) -> Result<(Self::Residual, Self::B), Self::Error> {
        let (m1, b) = self.first.left(a)?;
        let (m2, c) = self.second.left(b)?;
        Ok(((m1, m2), c))
    }

    /// `r₁₂((m₁, m₂), c′) = r₁(m₁, r₂(m₂, c′))`.
    ///
    /// # Errors
    ///
    /// The first error of `second.right` or `first.right`.
    fn right(&self, m: Self::Residual, c: Self::BPrime) -> Result<Self::APrime, Self::Error> {
        let (m1, m2) = m;
        let b = self.second.right(m2, c)?;
        self.first.right(m1, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optic::Id;

    #[test]
    fn residual_is_pair_of_residuals() {
        let o = Then::new(Id::<i32>::new(), Id::<i32>::new());
        assert_eq!(o.left(4).unwrap(), (((), ()), 4));
        assert_eq!(o.right(((), ()), 5).unwrap(), 5);
    }
}
