//! `OpticRepr`: a type-erased representative of an optic, as a pair of boxed
//! closures.

use std::fmt;
use std::rc::Rc;

use super::Optic;

/// The boxed forward map `l : A → M ⊗ B` of an [`OpticRepr`].
type LeftFn<A, B, M, E> = Box<dyn Fn(A) -> Result<(M, B), E>>;
/// The boxed backward map `r : M ⊗ B′ → A′` of an [`OpticRepr`].
type RightFn<BPrime, APrime, M, E> = Box<dyn Fn(M, BPrime) -> Result<APrime, E>>;

/// A type-erased representative ⟨l | r⟩ : (A, A′) → (B, B′) with residual M,
/// held as two boxed closures.
///
/// Any pair of closures `l : A → Result<(M, B), E>` and
/// `r : (M, B′) → Result<A′, E>` is an optic ([`OpticRepr::new`]), and any
/// optic can be erased into one ([`OpticRepr::from_optic`]) without changing
/// its action or its residual. Erasing hides the concrete type of the
/// representative, not its residual type `M`, which stays in the signature.
///
/// Type parameters, in the order of Fischer's notation: `A`, `B`, `BPrime`
/// (B′), `APrime` (A′), `M` (the residual), `E` (the error).
///
/// Source: K. Fischer, "∂P.jl terminology and notation guide", Snippet 1, lines
/// 3–13 (`OpticRepr`, its `left` and `right`, and the constructor from any
/// `AbstractOptic`).
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::optic::{Optic, OpticRepr};
/// use std::convert::Infallible;
///
/// // A "scale and shift" optic: view x as 2x + 1, and map a new view back.
/// let o: OpticRepr<f64, f64, f64, f64, (), Infallible> = OpticRepr::new(
///     |x: f64| Ok(((), 2.0 * x + 1.0)),
///     |(), y: f64| Ok((y - 1.0) / 2.0),
/// );
/// // Adding 4 to the view adds 2 to the value.
/// assert_relative_eq!(o.modify(3.0, |y| y + 4.0).unwrap(), 5.0);
/// ```
pub struct OpticRepr<A, B, BPrime, APrime, M, E> {
    l: LeftFn<A, B, M, E>,
    r: RightFn<BPrime, APrime, M, E>,
}

impl<A, B, BPrime, APrime, M, E> OpticRepr<A, B, BPrime, APrime, M, E> {
    /// The representative ⟨l | r⟩ with forward map `l` and backward map `r`.
    ///
    /// The closures are boxed, so they must be `'static` (own what they
    /// capture).
    ///
    /// Source: Fischer, ∂P.jl notes, Snippet 1, lines 3–6 and Snippet 2.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::optic::{Optic, OpticRepr};
    /// use std::convert::Infallible;
    ///
    /// // Fischer, ∂P.jl notes, Snippet 2: `SetIndex`, written as a pair of
    /// // closures.
    /// let set_index = |i: usize| -> OpticRepr<Vec<i32>, i32, i32, Vec<i32>, Vec<i32>, Infallible> {
    ///     OpticRepr::new(
    ///         move |obj: Vec<i32>| {
    ///             let b = obj[i];
    ///             Ok((obj, b))
    ///         },
    ///         move |mut obj: Vec<i32>, update| {
    ///             obj[i] = update;
    ///             Ok(obj)
    ///         },
    ///     )
    /// };
    /// assert_eq!(set_index(1).modify(vec![1, 2, 3], |c| c + 100).unwrap(), vec![1, 102, 3]);
    /// ```
    pub fn new<L, R>(l: L, r: R) -> Self
    where
        L: Fn(A) -> Result<(M, B), E> + 'static,
        R: Fn(M, BPrime) -> Result<APrime, E> + 'static,
    {
        OpticRepr {
            l: Box::new(l),
            r: Box::new(r),
        }
    }

    /// Erases any optic into an [`OpticRepr`] with the same action and the
    /// same residual: `left` and `right` forward to the optic's own.
    ///
    /// Takes ownership of `o`; the two closures share it.
    ///
    /// Source: Fischer, ∂P.jl notes, Snippet 1, lines 8–10
    /// (`OpticRepr(o::AbstractOptic)`)
    /// and §III (erasing before or after composing gives two representatives
    /// of the same optic).
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::optic::{Index, Optic, OpticRepr};
    ///
    /// let o = OpticRepr::from_optic(Index::new(1).then(Index::new(0)));
    /// let tup = vec![vec![1], vec![2, 3]];
    /// let (m, c) = o.left(tup.clone()).unwrap();
    /// assert_eq!(c, 2);
    /// // The residual is still the composite's pair of residuals.
    /// assert_eq!(m, (tup, vec![2, 3]));
    /// assert_eq!(o.right(m, c + 100).unwrap(), vec![vec![1], vec![102, 3]]);
    /// ```
    pub fn from_optic<O>(o: O) -> Self
    where
        O: Optic<A = A, B = B, BPrime = BPrime, APrime = APrime, Residual = M, Error = E> + 'static,
    {
        let o = Rc::new(o);
        let o2 = Rc::clone(&o);
        OpticRepr {
            l: Box::new(move |a| o.left(a)),
            r: Box::new(move |m, b| o2.right(m, b)),
        }
    }
}

impl<A, B, BPrime, APrime, M, E> Optic for OpticRepr<A, B, BPrime, APrime, M, E> {
    type A = A;
    type B = B;
    type BPrime = BPrime;
    type APrime = APrime;
    type Residual = M;
    type Error = E;

    /// Calls the boxed forward map.
    ///
    /// # Errors
    ///
    /// Whatever the closure returns.
    fn left(&self, a: A) -> Result<(M, B), E> {
        (self.l)(a)
    }

    /// Calls the boxed backward map.
    ///
    /// # Errors
    ///
    /// Whatever the closure returns.
    fn right(&self, m: M, b: BPrime) -> Result<APrime, E> {
        (self.r)(m, b)
    }
}

impl<A, B, BPrime, APrime, M, E> fmt::Debug for OpticRepr<A, B, BPrime, APrime, M, E> {
    /// Prints the types the representative maps between, not the closures:
    /// `OpticRepr { a: "…", b: "…", residual: "…", .. }`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpticRepr")
            .field("a", &std::any::type_name::<A>())
            .field("b", &std::any::type_name::<B>())
            .field("residual", &std::any::type_name::<M>())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optic::Id;
    use std::convert::Infallible;

    #[test]
    fn debug_names_types_not_closures() {
        let o: OpticRepr<i32, i32, i32, i32, (), Infallible> =
            OpticRepr::from_optic(Id::<i32>::new());
        let s = format!("{o:?}");
        assert!(s.starts_with("OpticRepr {"), "{s}");
        assert!(s.contains("i32"), "{s}");
        assert!(s.ends_with(".. }"), "{s}");
    }
}
