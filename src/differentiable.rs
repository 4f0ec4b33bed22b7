//! Points of your own types: a struct of parameters goes into the drivers
//! as it is, and its gradient comes back as a value of the same type.
//!
//! Vocabulary (ChainRules' documentation, "Design notes: the many-to-many
//! relationship between differential types and primal types"; Swift's
//! `Differentiable` protocol, "Differentiable Programming Manifesto",
//! section "Differentiable data structures"):
//!
//! - the **primal** is the point, say `Params { w, b, label }`;
//! - its **structural tangent** has one field per differentiable field and
//!   the point's own shape: here it is again a `Params`, its `w` and `b`
//!   holding derivatives;
//! - a field that is data (an index, a size, a flag) has **no tangent**: it
//!   is marked `#[differentiable(skip)]` and passes through unchanged;
//! - a field the function does not read has a **zero** tangent, which
//!   costs nothing: the traced program never reads it, and its entries of
//!   the gradient are structural zeros.
//!
//! Two traits carry this:
//!
//! - [`Differentiable`] is what a *field* is: it flattens its scalar
//!   leaves in a fixed order and, with [`Rebuild`], is rebuilt from them
//!   around a template (which gives the lengths of `Vec`s and the values of
//!   skipped fields), with another scalar type if need be (`f64` leaves in,
//!   [`Tracer`](crate::Tracer) leaves for tracing). It is implemented for
//!   every [`Real`] scalar, `[T; N]`, `Vec<T>`, `GenericArray`, `Option`
//!   and tuples of up to four (and faer's `Col` and `Mat` with the feature
//!   `faer`), nested as deep as you like, and is derived for your structs
//!   by `#[derive(Differentiable)]`.
//! - [`Point`] is what a *driver's argument* is. A flat slice, an array, a
//!   `Vec` and a `GenericArray` are the trivial case: the function receives
//!   `&[T]` and the gradient is a `Vec` (the forms every driver always
//!   took, with no copy of the point added). A derived struct (and a tuple
//!   of fields) is received as itself and its gradient has its type.
//!
//! The math is unchanged by any of this: the drivers differentiate the
//! flattened function `x ↦ f(unflatten(x))` and unflatten the answer.
//!
//! # Example
//!
//! ```
//! use approx::assert_relative_eq;
//! use optic_ad::{gradient, hvp, Differentiable, Real};
//!
//! #[derive(Clone, Debug, PartialEq, Differentiable)]
//! struct Params<T> {
//!     w: Vec<T>,
//!     b: T,
//!     #[differentiable(skip)]
//!     label: usize,
//! }
//!
//! fn loss<T: Real>(p: &Params<T>) -> T {
//!     let s = p.w.iter().fold(p.b, |acc, &w| acc + w * w);
//!     s.sin() * p.b
//! }
//!
//! let p = Params { w: vec![0.5, -1.0, 2.0], b: 0.3, label: 7 };
//! let g: Params<f64> = gradient(loss, &p)?;
//! let s = 0.3 + 0.25 + 1.0 + 4.0;
//! // ∂/∂wᵢ = 2 wᵢ b cos s, ∂/∂b = sin s + b cos s.
//! assert_relative_eq!(g.w[2], 2.0 * 2.0 * 0.3 * f64::cos(s), epsilon = 1e-14);
//! assert_relative_eq!(g.b, s.sin() + 0.3 * s.cos(), epsilon = 1e-14);
//! assert_eq!(g.label, 7); // data passes through untouched
//!
//! let hv: Params<f64> = hvp(loss, &p, &g)?; // a direction of the same shape
//! assert_eq!(hv.w.len(), 3);
//! # Ok::<(), optic_ad::Error>(())
//! ```

use std::borrow::{Borrow, Cow};

use generic_array::{ArrayLength, GenericArray};

use crate::real::Real;

/// A value with scalar leaves that can be differentiated with respect to:
/// a field of a point (see the [module docs](self)).
///
/// Derive it with `#[derive(Differentiable)]` on a struct generic over its
/// scalar type (one type parameter, named or tuple fields); mark fields
/// that are data with `#[differentiable(skip)]`. Skipped fields are cloned
/// from the template when the value is rebuilt, so their type must not
/// mention the scalar type.
///
/// Leaves are in field order, depth first; a `Vec`'s in index order.
///
/// The derive refuses what it cannot handle, at compile time: an enum, a
/// struct with no scalar parameter or with more than one generic
/// parameter, other bounds than `Real` or a where clause, and a field
/// whose type has no leaves of the scalar (mark such a field
/// `#[differentiable(skip)]`).
///
/// ```compile_fail
/// use optic_ad::Differentiable;
///
/// #[derive(Clone, Differentiable)]
/// enum Either<T> {
///     Left(T),
///     Right(T),
/// }
/// ```
///
/// ```compile_fail
/// use optic_ad::Differentiable;
///
/// #[derive(Clone, Differentiable)]
/// struct Tagged<T> {
///     x: T,
///     name: String, // data: needs #[differentiable(skip)]
/// }
/// ```
///
/// ```compile_fail
/// use optic_ad::Differentiable;
///
/// #[derive(Clone, Differentiable)]
/// struct Two<T, U> {
///     x: T,
///     y: U,
/// }
/// ```
///
/// The scalar parameter may be bounded by `Real` only:
///
/// ```compile_fail
/// use optic_ad::{Differentiable, Real};
///
/// #[derive(Clone, Differentiable)]
/// struct Shown<T: Real + std::fmt::Display> {
///     x: T,
/// }
/// ```
///
/// A skipped field is data: it must be `Clone` and `PartialEq` (the
/// compiled drivers trace again where it changes), and its type must not
/// mention the scalar.
pub trait Differentiable: Sized {
    /// The scalar type of the leaves.
    type Scalar: Real;
    /// The same structure with leaves of type `U` (`Params<U>` for
    /// `Params<T>`).
    type Rebind<U: Real>: Differentiable<Scalar = U> + Rebuild<Self>;
    /// Appends the leaves, in order.
    fn flatten_into(&self, leaves: &mut Vec<Self::Scalar>);
    /// The number of leaves.
    fn leaf_count(&self) -> usize;
    /// Whether `other` has the same structure (the same lengths of every
    /// `Vec`, the same `Some`/`None`), so that the leaves of one are a
    /// tangent of the other.
    fn same_shape(&self, other: &Self) -> bool;
    /// Appends one name per leaf, `path` extended by field names and
    /// indices (`w[2]`, `layer.bias[0]`).
    fn leaf_names(&self, path: &str, names: &mut Vec<String>);
    /// Whether values of this type hold data fields
    /// (`#[differentiable(skip)]`) anywhere inside.
    const HAS_DATA: bool = false;
    /// Whether `other`'s data fields equal this value's (always true for
    /// a type without data fields). The compiled drivers trace again where
    /// a point's data differ from those they were traced with.
    fn same_data(&self, other: &Self) -> bool {
        let _ = other;
        true
    }
}

/// Rebuilding a value of type `Self` from leaves, around a `Template` of
/// the same structure (perhaps with another scalar type): the inverse of
/// [`Differentiable::flatten_into`].
///
/// Implemented alongside [`Differentiable`] (and derived with it).
pub trait Rebuild<Template>: Differentiable {
    /// Takes `template`'s number of leaves from `leaves`; `None` if there
    /// are too few.
    fn rebuild(template: &Template, leaves: &mut Leaves<'_, Self::Scalar>) -> Option<Self>;
}

/// The leaves not yet consumed while a value is rebuilt.
#[derive(Debug, Clone)]
pub struct Leaves<'a, T> {
    rest: &'a [T],
}

impl<'a, T: Copy> Leaves<'a, T> {
    /// All of `leaves`, none consumed.
    pub fn new(leaves: &'a [T]) -> Self {
        Self { rest: leaves }
    }

    /// The next leaf, `None` if all are consumed.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<T> {
        let (first, rest) = self.rest.split_first()?;
        self.rest = rest;
        Some(*first)
    }

    /// The next `n` leaves, `None` if fewer remain.
    pub fn take(&mut self, n: usize) -> Option<&'a [T]> {
        if n > self.rest.len() {
            return None;
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Some(head)
    }

    /// The number of leaves not yet consumed.
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }
}

/// `path` extended by a field name (`p.w`, or `w` at the top).
#[doc(hidden)]
pub fn field_path(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

impl<T: Real> Differentiable for T {
    type Scalar = T;
    type Rebind<U: Real> = U;
    fn flatten_into(&self, leaves: &mut Vec<T>) {
        leaves.push(*self);
    }
    fn leaf_count(&self) -> usize {
        1
    }
    fn same_shape(&self, _: &Self) -> bool {
        true
    }
    fn leaf_names(&self, path: &str, names: &mut Vec<String>) {
        names.push(path.to_string());
    }
}

impl<T: Real, U: Real> Rebuild<T> for U {
    fn rebuild(_: &T, leaves: &mut Leaves<'_, U>) -> Option<U> {
        leaves.next()
    }
}

/// The [`Differentiable`] methods of a sequence of elements `E` (a `Vec`,
/// an array): the elements' leaves in index order, named `path[i]`.
macro_rules! sequence_methods {
    () => {
        fn flatten_into(&self, leaves: &mut Vec<E::Scalar>) {
            for e in self {
                e.flatten_into(leaves);
            }
        }
        fn leaf_count(&self) -> usize {
            self.iter().map(E::leaf_count).sum()
        }
        fn same_shape(&self, other: &Self) -> bool {
            self.len() == other.len() && self.iter().zip(other).all(|(a, b)| a.same_shape(b))
        }
        fn leaf_names(&self, path: &str, names: &mut Vec<String>) {
            for (i, e) in self.iter().enumerate() {
                e.leaf_names(&format!("{path}[{i}]"), names);
            }
        }
        const HAS_DATA: bool = E::HAS_DATA;
        fn same_data(&self, other: &Self) -> bool {
            !E::HAS_DATA || self.iter().zip(other).all(|(a, b)| a.same_data(b))
        }
    };
}

impl<E: Differentiable> Differentiable for Vec<E> {
    type Scalar = E::Scalar;
    type Rebind<U: Real> = Vec<E::Rebind<U>>;
    sequence_methods!();
}

impl<E: Differentiable, F: Rebuild<E>> Rebuild<Vec<E>> for Vec<F> {
    fn rebuild(template: &Vec<E>, leaves: &mut Leaves<'_, F::Scalar>) -> Option<Self> {
        template.iter().map(|e| F::rebuild(e, leaves)).collect()
    }
}

impl<E: Differentiable, const N: usize> Differentiable for [E; N] {
    type Scalar = E::Scalar;
    type Rebind<U: Real> = [E::Rebind<U>; N];
    sequence_methods!();
}

impl<E: Differentiable, F: Rebuild<E>, const N: usize> Rebuild<[E; N]> for [F; N] {
    fn rebuild(template: &[E; N], leaves: &mut Leaves<'_, F::Scalar>) -> Option<Self> {
        let v: Option<Vec<F>> = template.iter().map(|e| F::rebuild(e, leaves)).collect();
        v?.try_into().ok()
    }
}

impl<E: Differentiable, N: ArrayLength> Differentiable for GenericArray<E, N> {
    type Scalar = E::Scalar;
    type Rebind<U: Real> = GenericArray<E::Rebind<U>, N>;
    sequence_methods!();
}

impl<E: Differentiable, F: Rebuild<E>, N: ArrayLength> Rebuild<GenericArray<E, N>>
    for GenericArray<F, N>
{
    fn rebuild(template: &GenericArray<E, N>, leaves: &mut Leaves<'_, F::Scalar>) -> Option<Self> {
        let v: Option<Vec<F>> = template.iter().map(|e| F::rebuild(e, leaves)).collect();
        GenericArray::try_from_iter(v?).ok()
    }
}

impl<E: Differentiable> Differentiable for Option<E> {
    type Scalar = E::Scalar;
    type Rebind<U: Real> = Option<E::Rebind<U>>;
    fn flatten_into(&self, leaves: &mut Vec<E::Scalar>) {
        if let Some(e) = self {
            e.flatten_into(leaves);
        }
    }
    fn leaf_count(&self) -> usize {
        self.as_ref().map_or(0, E::leaf_count)
    }
    fn same_shape(&self, other: &Self) -> bool {
        match (self, other) {
            (Some(a), Some(b)) => a.same_shape(b),
            (None, None) => true,
            _ => false,
        }
    }
    fn leaf_names(&self, path: &str, names: &mut Vec<String>) {
        if let Some(e) = self {
            e.leaf_names(path, names);
        }
    }
    const HAS_DATA: bool = E::HAS_DATA;
    fn same_data(&self, other: &Self) -> bool {
        match (self, other) {
            (Some(a), Some(b)) => a.same_data(b),
            _ => true,
        }
    }
}

impl<E: Differentiable, F: Rebuild<E>> Rebuild<Option<E>> for Option<F> {
    fn rebuild(template: &Option<E>, leaves: &mut Leaves<'_, F::Scalar>) -> Option<Self> {
        match template {
            Some(e) => Some(Some(F::rebuild(e, leaves)?)),
            None => Some(None),
        }
    }
}

macro_rules! tuple_differentiable {
    ($(($($e:ident $f:ident $i:tt),+);)*) => {$(
        impl<A: Differentiable, $($e: Differentiable<Scalar = A::Scalar>),+> Differentiable
            for (A, $($e),+)
        {
            type Scalar = A::Scalar;
            type Rebind<U: Real> = (A::Rebind<U>, $($e::Rebind<U>),+);
            fn flatten_into(&self, leaves: &mut Vec<A::Scalar>) {
                self.0.flatten_into(leaves);
                $(self.$i.flatten_into(leaves);)+
            }
            fn leaf_count(&self) -> usize {
                self.0.leaf_count() $(+ self.$i.leaf_count())+
            }
            fn same_shape(&self, other: &Self) -> bool {
                self.0.same_shape(&other.0) $(&& self.$i.same_shape(&other.$i))+
            }
            fn leaf_names(&self, path: &str, names: &mut Vec<String>) {
                self.0.leaf_names(&field_path(path, "0"), names);
                $(self.$i.leaf_names(&field_path(path, stringify!($i)), names);)+
            }
            const HAS_DATA: bool = A::HAS_DATA $(|| $e::HAS_DATA)+;
            fn same_data(&self, other: &Self) -> bool {
                self.0.same_data(&other.0) $(&& self.$i.same_data(&other.$i))+
            }
        }

        impl<A: Differentiable, $($e: Differentiable<Scalar = A::Scalar>,)+
            FA: Rebuild<A>, $($f: Rebuild<$e> + Differentiable<Scalar = FA::Scalar>),+>
            Rebuild<(A, $($e),+)> for (FA, $($f),+)
        {
            fn rebuild(
                template: &(A, $($e),+),
                leaves: &mut Leaves<'_, FA::Scalar>,
            ) -> Option<Self> {
                Some((FA::rebuild(&template.0, leaves)?, $($f::rebuild(&template.$i, leaves)?),+))
            }
        }

        impl<A: Differentiable, $($e: Differentiable<Scalar = A::Scalar>),+> Point
            for (A, $($e),+)
        {
            structured_point!();
        }
    )*};
}

/// The [`Point`] items of a structured point (a derived struct, a tuple):
/// the function receives the point's own type.
#[doc(hidden)]
#[macro_export]
macro_rules! structured_point {
    () => {
        type Scalar = <Self as $crate::Differentiable>::Scalar;
        type Arg<U: $crate::Real> = <Self as $crate::Differentiable>::Rebind<U>;
        type Owned<U: $crate::Real> = <Self as $crate::Differentiable>::Rebind<U>;
        fn leaves(&self) -> ::std::borrow::Cow<'_, [Self::Scalar]> {
            let mut v = ::std::vec::Vec::with_capacity($crate::Differentiable::leaf_count(self));
            $crate::Differentiable::flatten_into(self, &mut v);
            ::std::borrow::Cow::Owned(v)
        }
        const FLAT: bool = false;
        fn rebuild<U: $crate::Real>(
            &self,
            leaves: ::std::vec::Vec<U>,
        ) -> ::std::option::Option<Self::Owned<U>> {
            let mut rest = $crate::Leaves::new(&leaves);
            let out = <Self::Owned<U> as $crate::Rebuild<Self>>::rebuild(self, &mut rest)?;
            (rest.remaining() == 0).then_some(out)
        }
        fn with_arg<U: $crate::Real, R>(
            &self,
            leaves: &[U],
            f: impl ::std::ops::FnOnce(&Self::Arg<U>) -> R,
        ) -> ::std::option::Option<R> {
            let mut rest = $crate::Leaves::new(leaves);
            let arg = <Self::Arg<U> as $crate::Rebuild<Self>>::rebuild(self, &mut rest)?;
            (rest.remaining() == 0).then(|| f(&arg))
        }
        fn leaf_names(&self) -> ::std::vec::Vec<::std::string::String> {
            let mut names = ::std::vec::Vec::new();
            $crate::Differentiable::leaf_names(self, "", &mut names);
            names
        }
    };
}

tuple_differentiable! {
    (B FB 1);
    (B FB 1, C FC 2);
    (B FB 1, C FC 2, D FD 3);
}

/// What a loop ([`fold`](crate::fold), [`scan`](crate::scan),
/// [`while_loop`](crate::while_loop)) carries from step to step: any
/// [`Differentiable`] value, whose structure (the lengths of its `Vec`s)
/// the initial carry fixes. A carry with data fields
/// (`#[differentiable(skip)]`) runs in `fold` and `while_loop` on `f64`,
/// num-dual numbers and scalar tracers, where its data may change from
/// step to step; on the array trace, whose loop body is traced once, and
/// in `scan`, it is refused ([`Error::Unsupported`](crate::Error::Unsupported)):
/// keep data outside the carry there. A scalar, `[T; K]`, `GenericArray<T, N>`, a
/// tuple, a `Vec` or a struct deriving `Differentiable`; implemented for
/// every such type.
///
/// # Example
///
/// A pair as the carry of [`fold`](crate::fold): `(a, b) ↦ (b, a + b)`,
/// Fibonacci.
///
/// ```
/// let (a, _) = optic_ad::fold(10, (0.0, 1.0), |(a, b): (f64, f64)| (b, a + b)).unwrap();
/// assert_eq!(a, 55.0);
/// ```
pub trait Carry: Differentiable + Rebuild<Self> {}

impl<C: Differentiable + Rebuild<C>> Carry for C {}

/// The value of `template`'s structure with these leaves; `None` unless
/// their number is `template`'s.
pub(crate) fn rebuild_like<C: Carry>(template: &C, leaves: &[C::Scalar]) -> Option<C> {
    let mut rest = Leaves::new(leaves);
    let out = C::rebuild(template, &mut rest)?;
    (rest.remaining() == 0).then_some(out)
}

/// The leaves of `c`, in order.
pub(crate) fn leaves_of<C: Differentiable>(c: &C) -> Vec<C::Scalar> {
    let mut v = Vec::with_capacity(c.leaf_count());
    c.flatten_into(&mut v);
    v
}

/// What a driver's point may be: a flat slice of scalars (`&[T]`, an
/// array, a `Vec`, a `GenericArray`, a `Box`, `Rc`, `Arc` or `Cow` of a
/// slice), which the function receives as
/// `&[T]` and whose gradient is a `Vec<T>`; or a structured point (a
/// struct deriving [`Differentiable`], a tuple of such fields), which the
/// function receives as itself, with [`Tracer`](crate::Tracer) leaves, and
/// whose gradient has the point's type (see the [module docs](self)).
pub trait Point {
    /// The scalar type of the leaves.
    type Scalar: Real;
    /// What the function receives, with leaves of type `U`.
    type Arg<U: Real>: ?Sized;
    /// A value of the point's shape with leaves of type `U`: a gradient,
    /// a Hessian-vector product.
    type Owned<U: Real>: Borrow<Self::Arg<U>>;
    /// The leaves, in order (borrowed for a flat point).
    fn leaves(&self) -> Cow<'_, [Self::Scalar]>;
    /// Whether the point is flat (a slice, an array, a `Vec`): a second
    /// point (a direction) of it is checked by its length alone.
    const FLAT: bool;
    /// The value of this shape with these leaves; `None` if their number
    /// is not this point's.
    fn rebuild<U: Real>(&self, leaves: Vec<U>) -> Option<Self::Owned<U>>;
    /// Calls `f` on the argument of this shape with these leaves; `None`
    /// if their number is not this point's.
    fn with_arg<U: Real, R>(&self, leaves: &[U], f: impl FnOnce(&Self::Arg<U>) -> R) -> Option<R>;
    /// One name per leaf: `[3]` for a flat point, `w[2]` or `b` for a
    /// struct's fields.
    fn leaf_names(&self) -> Vec<String>;
}

/// A tangent (a gradient, a Hessian-vector product) of a point of type
/// `P`: a `Vec` for a flat point, the point's own type for a structured
/// one.
pub type Tangent<P> = <P as Point>::Owned<<P as Point>::Scalar>;

macro_rules! flat_point {
    () => {
        type Scalar = T;
        type Arg<U: Real> = [U];
        type Owned<U: Real> = Vec<U>;
        fn leaves(&self) -> Cow<'_, [T]> {
            Cow::Borrowed(&self[..])
        }
        const FLAT: bool = true;
        fn rebuild<U: Real>(&self, leaves: Vec<U>) -> Option<Vec<U>> {
            (leaves.len() == self.len()).then_some(leaves)
        }
        fn with_arg<U: Real, R>(&self, leaves: &[U], f: impl FnOnce(&[U]) -> R) -> Option<R> {
            (leaves.len() == self.len()).then(|| f(leaves))
        }
        fn leaf_names(&self) -> Vec<String> {
            (0..self.len()).map(|i| format!("[{i}]")).collect()
        }
    };
}

impl<T: Real> Point for [T] {
    flat_point!();
}

impl<T: Real, const N: usize> Point for [T; N] {
    flat_point!();
}

impl<T: Real> Point for Vec<T> {
    flat_point!();
}

impl<T: Real, N: ArrayLength> Point for GenericArray<T, N> {
    flat_point!();
}

impl<T: Real> Point for Box<[T]> {
    flat_point!();
}

impl<T: Real> Point for std::rc::Rc<[T]> {
    flat_point!();
}

impl<T: Real> Point for std::sync::Arc<[T]> {
    flat_point!();
}

impl<T: Real> Point for Cow<'_, [T]> {
    flat_point!();
}

impl<P: Point + ?Sized> Point for &P {
    type Scalar = P::Scalar;
    type Arg<U: Real> = P::Arg<U>;
    type Owned<U: Real> = P::Owned<U>;
    fn leaves(&self) -> Cow<'_, [Self::Scalar]> {
        (**self).leaves()
    }
    const FLAT: bool = P::FLAT;
    fn rebuild<U: Real>(&self, leaves: Vec<U>) -> Option<Self::Owned<U>> {
        (**self).rebuild(leaves)
    }
    fn with_arg<U: Real, R>(&self, leaves: &[U], f: impl FnOnce(&Self::Arg<U>) -> R) -> Option<R> {
        (**self).with_arg(leaves, f)
    }
    fn leaf_names(&self) -> Vec<String> {
        (**self).leaf_names()
    }
}

/// One name per leaf of a point, in the order of the flat forms
/// ([`hessian`](crate::hessian)'s rows and columns, [`Point::leaves`]):
/// `[0]`, `[1]`, … for a flat point, `w[0]`, …, `b` for a struct.
///
/// # Example
///
/// ```
/// use optic_ad::{leaf_names, Differentiable};
///
/// #[derive(Clone, Differentiable)]
/// struct Layer<T> {
///     weights: [T; 2],
///     bias: T,
/// }
/// let l = Layer { weights: [1.0, 2.0], bias: 0.5 };
/// assert_eq!(leaf_names(&l), ["weights[0]", "weights[1]", "bias"]);
/// ```
pub fn leaf_names<P: Point + ?Sized>(point: &P) -> Vec<String> {
    point.leaf_names()
}
