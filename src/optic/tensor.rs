//! The monoidal product ⊗ of optics: two optics side by side.

use super::Optic;

/// The monoidal product `first ⊗ second` of two optics, run side by side on
/// the two components of a pair.
///
/// If `first : (A₁, A₁′) → (B₁, B₁′)` with residual M₁ and
/// `second : (A₂, A₂′) → (B₂, B₂′)` with residual M₂, then
/// `Tensor<first, second> : ((A₁, A₂), (A₁′, A₂′)) → ((B₁, B₂), (B₁′, B₂′))`
/// with residual `(M₁, M₂)`:
///
/// * `left((a₁, a₂)) = ((m₁, m₂), (b₁, b₂))`;
/// * `right((m₁, m₂), (b₁′, b₂′)) = (right₁(m₁, b₁′), right₂(m₂, b₂′))`.
///
/// Both optics must share one error type. `left` runs `first` before
/// `second`, and so does `right`; the first error wins.
///
/// The tensor of two optics is an optic in its own right, and it is
/// functorial: `Tensor(a₁, a₂).then(Tensor(b₁, b₂)) ≅ Tensor(a₁.then(b₁),
/// a₂.then(b₂))` (same action, `tests/optic_laws.rs`).
///
/// Source: K. Fischer, "∂P.jl terminology and notation guide", §I, Definition
/// 0.1 (the symmetric monoidal product of `Optic_C`, written ⊗); Riley,
/// "Categories of optics" (2018), §2.
///
/// # Example
///
/// ```
/// use optic_ad::optic::{Id, Index, LensError, Optic, Tensor};
///
/// // Focus element 1 of a vector and, beside it, a whole number.
/// let o = Tensor::new(Index::<i32>::new(1), Id::<i32, i32, LensError>::new());
/// let out = o.modify((vec![1, 2, 3], 10), |(x, y)| (x + y, y * 2)).unwrap();
/// assert_eq!(out, (vec![1, 12, 3], 20));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tensor<O1, O2> {
    first: O1,
    second: O2,
}

impl<O1, O2> Tensor<O1, O2> {
    /// The product `first ⊗ second`.
    ///
    /// Source: Fischer, ∂P.jl notes, §I, Definition 0.1.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::optic::{Index, Optic, Tensor};
    ///
    /// let o = Tensor::new(Index::<i32>::new(0), Index::<i32>::new(2));
    /// let (m, b) = o.left((vec![1, 2], vec![3, 4, 5])).unwrap();
    /// assert_eq!(b, (1, 5));
    /// assert_eq!(o.right(m, (0, 0)).unwrap(), (vec![0, 2], vec![3, 4, 0]));
    /// ```
    pub fn new(first: O1, second: O2) -> Self {
        Tensor { first, second }
    }

    /// The optic on the first component.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::optic::{Index, Tensor};
    ///
    /// let o = Tensor::new(Index::<i32>::new(0), Index::<i32>::new(2));
    /// assert_eq!(o.first().index(), 0);
    /// ```
    pub fn first(&self) -> &O1 {
        &self.first
    }

    /// The optic on the second component.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::optic::{Index, Tensor};
    ///
    /// let o = Tensor::new(Index::<i32>::new(0), Index::<i32>::new(2));
    /// assert_eq!(o.second().index(), 2);
    /// ```
    pub fn second(&self) -> &O2 {
        &self.second
    }

    /// Splits the product back into `(first, second)`.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::optic::{Index, Tensor};
    ///
    /// let (a, b) = Tensor::new(Index::<i32>::new(0), Index::<i32>::new(2)).into_parts();
    /// assert_eq!((a.index(), b.index()), (0, 2));
    /// ```
    pub fn into_parts(self) -> (O1, O2) {
        (self.first, self.second)
    }
}

impl<O1, O2> Optic for Tensor<O1, O2>
where
    O1: Optic,
    O2: Optic<Error = O1::Error>,
{
    type A = (O1::A, O2::A);
    type B = (O1::B, O2::B);
    type BPrime = (O1::BPrime, O2::BPrime);
    type APrime = (O1::APrime, O2::APrime);
    type Residual = (O1::Residual, O2::Residual);
    type Error = O1::Error;

    /// `left((a₁, a₂)) = ((m₁, m₂), (b₁, b₂))`.
    ///
    /// # Errors
    ///
    /// The first error of `first.left` or `second.left`.
    fn left(&self, a: Self::A) -> Result<(Self::Residual, Self::B), Self::Error> {
        let (a1, a2) = a;
        let (m1, b1) = self.first.left(a1)?;
        let (m2, b2) = self.second.left(a2)?;
        Ok(((m1, m2), (b1, b2)))
    }

    /// `right((m₁, m₂), (b₁′, b₂′)) = (right₁(m₁, b₁′), right₂(m₂, b₂′))`.
    ///
    /// # Errors
    ///
    /// The first error of `first.right` or `second.right`.
    fn right(&self, m: Self::Residual, b: Self::BPrime) -> Result<Self::APrime, Self::Error> {
        let (m1, m2) = m;
        let (b1, b2) = b;
        let a1 = self.first.right(m1, b1)?;
        let a2 = self.second.right(m2, b2)?;
        Ok((a1, a2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optic::Id;

    #[test]
    fn residual_is_pair_of_residuals() {
        let o = Tensor::new(Id::<i32>::new(), Id::<f64>::new());
        assert_eq!(o.left((1, 2.0)).unwrap(), (((), ()), (1, 2.0)));
        assert_eq!(o.right(((), ()), (3, 4.0)).unwrap(), (3, 4.0));
    }
}
