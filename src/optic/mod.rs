//! Optics: a forward map that also returns a residual, paired with a
//! backward map that consumes it.
//!
//! This layer has no differentiation in it and works on any types. Source:
//! K. Fischer, "∂P.jl terminology and notation guide", §I and Snippets 1–4;
//! the categorical definition is Riley, "Categories of optics" (2018),
//! Definition 2.0.1.

mod lens_impl;
mod repr;
mod tensor;
mod then;

pub use lens_impl::{
    is_lens, law_get_put, law_put_get, law_put_put, Index, IndexPath, LensError, Path,
};
pub use repr::OpticRepr;
pub use tensor::Tensor;
pub use then::Then;

/// An **optic** ⟨l | r⟩ : (A, A′) → (B, B′) with residual M: a forward map
/// `left : A → M ⊗ B` and a backward map `right : M ⊗ B′ → A′`.
///
/// The residual M is not determined by the optic: two representatives of
/// the same optic may carry residuals of different types and sizes
/// (K. Fischer, "∂P.jl terminology and notation guide", §I.A; see [`Index`]
/// and [`Path`]). Code outside an optic should therefore never build a
/// residual itself; it only hands back what `left` returned, which the
/// block-style ([`Optic::modify`]) and continuation-style ([`Optic::view`])
/// interfaces of Fischer's Snippet 4 enforce.
///
/// # Associated types
///
/// * [`Optic::A`]: what `left` consumes (Fischer's A).
/// * [`Optic::B`]: the focus that `left` exposes (Fischer's B).
/// * [`Optic::BPrime`]: what is handed back to `right` in place of the
///   focus (Fischer's B′: an updated field for a lens, a cotangent for the
///   reverse-mode AD optic).
/// * [`Optic::APrime`]: what `right` returns (Fischer's A′: the updated
///   whole for a lens, the input cotangent for AD).
/// * [`Optic::Residual`]: the memory M passed from `left` to `right`.
/// * [`Optic::Error`]: why `left` or `right` can fail; the vector lenses
///   [`Index`] and [`Path`] use [`LensError`], optics that cannot fail use
///   [`std::convert::Infallible`]. Composites ([`Then`], [`Tensor`]) require
///   one error type throughout.
///
/// # Laws
///
/// Write `o₁ ≅ o₂` when the two optics have the same *action* in block style,
/// `o₁.modify(a, f) == o₂.modify(a, f)` for every `a` and `f` (residuals may
/// differ, Fischer, ∂P.jl notes, §I.A and §III). With `Id` the identity optic
/// and `then` the sequential composition (Fischer's `§`):
///
/// * left identity: `Id.then(o) ≅ o`;
/// * right identity: `o.then(Id) ≅ o`;
/// * associativity: `(a.then(b)).then(c) ≅ a.then(b.then(c))`.
///
/// `tests/optic_laws.rs` checks each law with proptest.
///
/// Lenses (optics with `A′ = A` and `B′ = B`, such as [`Index`] and
/// [`Path`]) also satisfy get-put, put-get and put-put; see [`is_lens`] and
/// `tests/lens_laws.rs`.
///
/// # Example
///
/// ```
/// use optic_ad::optic::{Index, Optic};
///
/// // Fischer, ∂P.jl notes, Snippet 2: `SetIndex(2) § SetIndex(1)` on
/// // (1, (2, 3)), here as nested vectors.
/// let o = Index::new(1).then(Index::new(0));
/// let tup = vec![vec![1], vec![2, 3]];
/// let updated = o.modify(tup, |c| c + 100).unwrap();
/// assert_eq!(updated, vec![vec![1], vec![102, 3]]);
/// ```
pub trait Optic {
    /// Fischer's A: what [`Optic::left`] consumes.
    type A;
    /// Fischer's B: the focus [`Optic::left`] exposes.
    type B;
    /// Fischer's B′: what [`Optic::right`] receives in place of the focus.
    type BPrime;
    /// Fischer's A′: what [`Optic::right`] returns.
    type APrime;
    /// Fischer's M: the memory passed from `left` to `right`. It belongs to
    /// this representative, not to the optic it represents.
    type Residual;
    /// The error `left` or `right` can return.
    type Error;

    /// The forward map `l : A → M ⊗ B`.
    ///
    /// # Errors
    ///
    /// Whatever the representative can fail with; see its docs.
    fn left(&self, a: Self::A) -> Result<(Self::Residual, Self::B), Self::Error>;

    /// The backward map `r : M ⊗ B′ → A′`.
    ///
    /// # Errors
    ///
    /// Whatever the representative can fail with; see its docs.
    fn right(&self, m: Self::Residual, b: Self::BPrime) -> Result<Self::APrime, Self::Error>;

    /// Block-style interface (Fischer, ∂P.jl notes, Snippet 4, lines 1–6): run
    /// `left`, apply `f` to the focus, and run `right` on the residual and the
    /// result.
    ///
    /// # Errors
    ///
    /// Those of [`Optic::left`] and [`Optic::right`].
    fn modify<F>(&self, a: Self::A, f: F) -> Result<Self::APrime, Self::Error>
    where
        F: FnOnce(Self::B) -> Self::BPrime,
    {
        let (m, b) = self.left(a)?;
        self.right(m, f(b))
    }

    /// Continuation-style interface (Fischer, ∂P.jl notes, Snippet 4, lines
    /// 8–12): return the focus together with a one-shot continuation that holds
    /// the residual and runs `right`.
    ///
    /// # Errors
    ///
    /// Those of [`Optic::left`]; the continuation returns those of
    /// [`Optic::right`].
    #[allow(clippy::type_complexity)]
    fn view(
        &self,
        a: Self::A,
    ) -> Result<
        (
            Self::B,
            Box<dyn FnOnce(Self::BPrime) -> Result<Self::APrime, Self::Error> + '_>,
        ),
        Self::Error,
    >
    where
        Self::Residual: 'static,
    {
        let (m, b) = self.left(a)?;
        Ok((b, Box::new(move |bp| self.right(m, bp))))
    }

    /// Sequential composition `self § next` (Fischer, ∂P.jl notes, Snippet 1,
    /// lines 15–24): the residual of the composite is the pair of residuals.
    fn then<O>(self, next: O) -> Then<Self, O>
    where
        Self: Sized,
        O: Optic<A = Self::B, APrime = Self::BPrime, Error = Self::Error>,
    {
        Then::new(self, next)
    }
}

/// The identity optic on `(T, T′)`: `left(a) = ((), a)`,
/// `right((), a′) = a′`. It is the unit of [`Optic::then`].
///
/// `E` is the error type it claims (it never fails), so that it composes
/// with optics of any error type; the default is
/// [`std::convert::Infallible`].
///
/// # Example
///
/// ```
/// use optic_ad::optic::{Id, Optic};
///
/// let id = Id::<i32, i32>::new();
/// assert_eq!(id.modify(3, |b| b * 2).unwrap(), 6);
/// ```
pub struct Id<T, TPrime = T, E = std::convert::Infallible>(IdMarker<T, TPrime, E>);

/// The zero-sized marker inside [`Id`]: it mentions the type parameters
/// without owning values of them, so `Id` is `Send`, `Sync` and `Copy`
/// whatever they are.
type IdMarker<T, TPrime, E> = std::marker::PhantomData<fn(T, TPrime) -> (T, TPrime, E)>;

impl<T, TPrime, E> Id<T, TPrime, E> {
    /// The identity optic.
    pub fn new() -> Self {
        Id(std::marker::PhantomData)
    }
}

impl<T, TPrime, E> Default for Id<T, TPrime, E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, TPrime, E> Clone for Id<T, TPrime, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, TPrime, E> Copy for Id<T, TPrime, E> {}

impl<T, TPrime, E> std::fmt::Debug for Id<T, TPrime, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Id")
    }
}

impl<T, TPrime, E> Optic for Id<T, TPrime, E> {
    type A = T;
    type B = T;
    type BPrime = TPrime;
    type APrime = TPrime;
    type Residual = ();
    type Error = E;

    fn left(&self, a: T) -> Result<((), T), E> {
        Ok(((), a))
    }

    fn right(&self, _m: (), b: TPrime) -> Result<TPrime, E> {
        Ok(b)
    }
}
