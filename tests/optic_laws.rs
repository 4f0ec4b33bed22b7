//! The optic laws, checked by action (block style, `modify`) on random
//! inputs with random update functions: left identity, right identity and
//! associativity of `then`, functoriality of `Tensor`, and Fischer's point
//! that two representatives of one optic agree in action while their
//! residuals differ (K. Fischer, "∂P.jl terminology and notation guide", §I.A
//! and §III; the laws are stated on the `Optic` trait and in the book's
//! chapter "Optics").

use approx::relative_eq;
use optic_ad::optic::{Id, Index, LensError, Optic, OpticRepr, Path, Tensor};
use proptest::prelude::*;

use crate::nested_data;
use nested_data::{nested2, nested3};

/// A "scale and shift" optic on f64, from closures: view `x` as `s·x + t`.
fn scale_shift(s: f64, t: f64) -> OpticRepr<f64, f64, f64, f64, (), LensError> {
    OpticRepr::new(
        move |x: f64| Ok(((), s * x + t)),
        move |(), y: f64| Ok((y - t) / s),
    )
}

/// A random affine update on integers (wrapping, so it never panics).
fn affine(k: i32, c: i32) -> impl Fn(i32) -> i32 {
    move |b| b.wrapping_mul(k).wrapping_add(c)
}

/// A random affine update on floats.
fn affine_f(k: f64, c: f64) -> impl Fn(f64) -> f64 {
    move |b| k * b + c
}

fn coeffs() -> impl Strategy<Value = (i32, i32)> {
    (-5i32..5, -100i32..100)
}

fn coeffs_f() -> impl Strategy<Value = (f64, f64)> {
    (-4.0f64..4.0, -10.0f64..10.0)
}

fn scale() -> impl Strategy<Value = (f64, f64)> {
    (prop_oneof![-4.0f64..-0.25, 0.25f64..4.0], -10.0f64..10.0)
}

proptest! {
    #[test]
    fn left_identity((x, i, j) in nested2(-1000i32..1000), (k, c) in coeffs(),
                     (s, t) in scale(), y in -100.0f64..100.0, (kf, cf) in coeffs_f()) {
        // Index § Index
        let o = Index::new(i).then(Index::new(j));
        let lhs = Id::<Vec<Vec<i32>>, Vec<Vec<i32>>, LensError>::new().then(o);
        prop_assert_eq!(lhs.modify(x.clone(), affine(k, c)), o.modify(x.clone(), affine(k, c)));

        // Path § Path, as one Path
        let p = Path::new(i).then_path(Path::new(j));
        let lhs = Id::new().then(p.clone());
        prop_assert_eq!(lhs.modify(x.clone(), affine(k, c)), p.modify(x.clone(), affine(k, c)));

        // An erased composite of Index and Path
        let r = OpticRepr::from_optic(Index::new(i).then(Path::new(j)));
        let lhs = Id::new().then(OpticRepr::from_optic(Index::new(i).then(Path::new(j))));
        prop_assert_eq!(lhs.modify(x.clone(), affine(k, c)), r.modify(x.clone(), affine(k, c)));

        // A closure optic on f64
        let lhs = Id::new().then(scale_shift(s, t));
        let a = lhs.modify(y, affine_f(kf, cf)).unwrap();
        let b = scale_shift(s, t).modify(y, affine_f(kf, cf)).unwrap();
        prop_assert!(relative_eq!(a, b, max_relative = 1e-12));

        // A tensor of a lens and the closure optic
        let tn = Tensor::new(Index::new(i).then(Index::new(j)), scale_shift(s, t));
        let lhs = Id::new().then(Tensor::new(Index::new(i).then(Index::new(j)), scale_shift(s, t)));
        let g = |(b1, b2): (i32, f64)| (affine(k, c)(b1), affine_f(kf, cf)(b2));
        let (a1, a2) = lhs.modify((x.clone(), y), g).unwrap();
        let (b1, b2) = tn.modify((x, y), g).unwrap();
        prop_assert_eq!(a1, b1);
        prop_assert!(relative_eq!(a2, b2, max_relative = 1e-12));
    }

    #[test]
    fn right_identity((x, i, j) in nested2(-1000i32..1000), (k, c) in coeffs(),
                      (s, t) in scale(), y in -100.0f64..100.0, (kf, cf) in coeffs_f()) {
        let o = Index::new(i).then(Index::new(j));
        let rhs = o.then(Id::<i32, i32, LensError>::new());
        prop_assert_eq!(rhs.modify(x.clone(), affine(k, c)), o.modify(x.clone(), affine(k, c)));

        let p = Path::new(i).then_path(Path::new(j));
        let rhs = p.clone().then(Id::new());
        prop_assert_eq!(rhs.modify(x.clone(), affine(k, c)), p.modify(x.clone(), affine(k, c)));

        let r = OpticRepr::from_optic(Path::new(i).then(Index::new(j)));
        let rhs = OpticRepr::from_optic(Path::new(i).then(Index::new(j))).then(Id::new());
        prop_assert_eq!(rhs.modify(x.clone(), affine(k, c)), r.modify(x.clone(), affine(k, c)));

        let rhs = scale_shift(s, t).then(Id::new());
        let a = rhs.modify(y, affine_f(kf, cf)).unwrap();
        let b = scale_shift(s, t).modify(y, affine_f(kf, cf)).unwrap();
        prop_assert!(relative_eq!(a, b, max_relative = 1e-12));

        let tn = Tensor::new(Path::new(i).then_path(Path::new(j)), scale_shift(s, t));
        let rhs = Tensor::new(Path::new(i).then_path(Path::new(j)), scale_shift(s, t)).then(Id::new());
        let g = |(b1, b2): (i32, f64)| (affine(k, c)(b1), affine_f(kf, cf)(b2));
        let (a1, a2) = rhs.modify((x.clone(), y), g).unwrap();
        let (b1, b2) = tn.modify((x, y), g).unwrap();
        prop_assert_eq!(a1, b1);
        prop_assert!(relative_eq!(a2, b2, max_relative = 1e-12));
    }

    #[test]
    fn associativity((x, [i, j, l]) in nested3(-1000i32..1000), (k, c) in coeffs()) {
        // Index, Index, Index
        let ab_c = Index::new(i).then(Index::new(j)).then(Index::new(l));
        let a_bc = Index::new(i).then(Index::new(j).then(Index::new(l)));
        prop_assert_eq!(ab_c.modify(x.clone(), affine(k, c)), a_bc.modify(x.clone(), affine(k, c)));

        // Path, Path, Path with `then` and with `then_path`
        let ab_c = Path::new(i).then(Path::new(j)).then(Path::new(l));
        let a_bc = Path::new(i).then(Path::new(j).then(Path::new(l)));
        prop_assert_eq!(ab_c.modify(x.clone(), affine(k, c)), a_bc.modify(x.clone(), affine(k, c)));
        let ab_c = Path::new(i).then_path(Path::new(j)).then_path(Path::new(l));
        let a_bc = Path::new(i).then_path(Path::new(j).then_path(Path::new(l)));
        prop_assert_eq!(ab_c.path(), a_bc.path());
        prop_assert_eq!(ab_c.modify(x.clone(), affine(k, c)), a_bc.modify(x.clone(), affine(k, c)));

        // Mixed: Index, Path, erased Index
        let ab_c = Index::new(i)
            .then(Path::new(j))
            .then(OpticRepr::from_optic(Index::new(l)));
        let a_bc = Index::new(i).then(Path::new(j).then(OpticRepr::from_optic(Index::new(l))));
        prop_assert_eq!(ab_c.modify(x.clone(), affine(k, c)), a_bc.modify(x.clone(), affine(k, c)));

        // All three agree with the single depth-3 path, too.
        let flat = Path::new(i).then_path(Path::new(j)).then_path(Path::new(l));
        prop_assert_eq!(flat.modify(x.clone(), affine(k, c)), ab_c.modify(x, affine(k, c)));
    }

    #[test]
    fn associativity_closures_and_tensor(
        (s1, t1) in scale(), (s2, t2) in scale(), (s3, t3) in scale(),
        y in -100.0f64..100.0, (kf, cf) in coeffs_f(),
        (x, i, j) in nested2(-1000i32..1000), (k, c) in coeffs(),
    ) {
        let ab_c = scale_shift(s1, t1).then(scale_shift(s2, t2)).then(scale_shift(s3, t3));
        let a_bc = scale_shift(s1, t1).then(scale_shift(s2, t2).then(scale_shift(s3, t3)));
        let a = ab_c.modify(y, affine_f(kf, cf)).unwrap();
        let b = a_bc.modify(y, affine_f(kf, cf)).unwrap();
        prop_assert!(relative_eq!(a, b, max_relative = 1e-12));

        // Tensors: (Index ⊗ ss) § (Index ⊗ ss) § (Id ⊗ ss), both groupings.
        let t_a = || Tensor::new(Index::new(i), scale_shift(s1, t1));
        let t_b = || Tensor::new(Index::new(j), scale_shift(s2, t2));
        let t_c = || Tensor::new(Id::new(), scale_shift(s3, t3));
        let g = |(b1, b2): (i32, f64)| (affine(k, c)(b1), affine_f(kf, cf)(b2));
        let (a1, a2) = t_a().then(t_b()).then(t_c()).modify((x.clone(), y), g).unwrap();
        let (b1, b2) = t_a().then(t_b().then(t_c())).modify((x, y), g).unwrap();
        prop_assert_eq!(a1, b1);
        prop_assert!(relative_eq!(a2, b2, max_relative = 1e-12));
    }

    #[test]
    fn tensor_is_functorial((x, i, j) in nested2(-1000i32..1000), (k, c) in coeffs(),
                            (s1, t1) in scale(), (s2, t2) in scale(),
                            y in -100.0f64..100.0, (kf, cf) in coeffs_f()) {
        // (a₁ ⊗ a₂) § (b₁ ⊗ b₂) ≅ (a₁ § b₁) ⊗ (a₂ § b₂)
        let lhs = Tensor::new(Index::new(i), scale_shift(s1, t1))
            .then(Tensor::new(Path::new(j), scale_shift(s2, t2)));
        let rhs = Tensor::new(
            Index::new(i).then(Path::new(j)),
            scale_shift(s1, t1).then(scale_shift(s2, t2)),
        );
        let g = |(b1, b2): (i32, f64)| (affine(k, c)(b1), affine_f(kf, cf)(b2));
        let (a1, a2) = lhs.modify((x.clone(), y), g).unwrap();
        let (b1, b2) = rhs.modify((x, y), g).unwrap();
        prop_assert_eq!(a1, b1);
        prop_assert!(relative_eq!(a2, b2, max_relative = 1e-12));
    }

    #[test]
    fn index_and_path_agree_in_action_but_not_in_residual(
        (x, i, j) in nested2(-1000i32..1000), (k, c) in coeffs(),
    ) {
        let o = Index::new(i).then(Index::new(j));
        let of = Path::new(i).then_path(Path::new(j));

        // Same optic: the same action in block style ...
        prop_assert_eq!(o.modify(x.clone(), affine(k, c)), of.modify(x.clone(), affine(k, c)));
        // ... and in continuation style.
        let (b, back) = o.view(x.clone()).unwrap();
        let (bf, backf) = of.view(x.clone()).unwrap();
        prop_assert_eq!(b, bf);
        prop_assert_eq!(back(affine(k, c)(b)), backf(affine(k, c)(bf)));

        // Different representatives: the residuals differ in type ...
        let (m, _) = o.left(x.clone()).unwrap();
        let (mf, _) = of.left(x.clone()).unwrap();
        prop_assert!(std::mem::size_of_val(&m) > std::mem::size_of_val(&mf));
        // ... and in size: Index keeps the row it passed through as well.
        let (whole, row) = m;
        prop_assert_eq!(&whole, &x);
        prop_assert_eq!(&row, &x[i]);
        prop_assert_eq!(&mf, &x);
        // Count the i32s each residual holds: Index holds x[i] twice.
        let held = |v: &Vec<Vec<i32>>| v.iter().map(Vec::len).sum::<usize>();
        prop_assert_eq!(held(&whole) + row.len(), held(&mf) + x[i].len());
        prop_assert!(held(&whole) + row.len() > held(&mf));
    }

    #[test]
    fn erasing_before_or_after_composing((x, i, j) in nested2(-1000i32..1000), (k, c) in coeffs()) {
        // Fischer, ∂P.jl notes, §III: OpticRepr(p₁ § p₂) and
        // p₁ § OpticRepr(p₂) have the same action but different residuals.
        let o1 = OpticRepr::from_optic(Path::new(i).then_path(Path::new(j)));
        let o2 = Path::new(i).then(OpticRepr::from_optic(Path::new(j)));
        prop_assert_eq!(o1.modify(x.clone(), affine(k, c)), o2.modify(x.clone(), affine(k, c)));
        let (m1, _) = o1.left(x.clone()).unwrap();
        let (m2, _) = o2.left(x.clone()).unwrap();
        prop_assert_eq!(&m1, &x);
        prop_assert_eq!(m2, (x.clone(), x[i].clone()));
    }

    #[test]
    fn out_of_range_is_an_error_not_a_panic(
        x in prop::collection::vec(prop::collection::vec(-10i32..10, 0..4), 0..4),
        i in 0usize..8, j in 0usize..8,
    ) {
        let o = Index::new(i).then(Index::new(j));
        let of = Path::new(i).then_path(Path::new(j));
        let valid = i < x.len() && j < x[i].len();
        let r = o.modify(x.clone(), |b| b + 1);
        let rf = of.modify(x.clone(), |b| b + 1);
        prop_assert_eq!(&r, &rf);
        prop_assert_eq!(r.is_ok(), valid);
        if !valid {
            let expected = if i >= x.len() {
                LensError::IndexOutOfRange { index: i, len: x.len() }
            } else {
                LensError::IndexOutOfRange { index: j, len: x[i].len() }
            };
            prop_assert_eq!(r, Err(expected));
        }
    }
}

#[test]
fn out_of_range_examples() {
    let err = LensError::IndexOutOfRange { index: 3, len: 2 };
    assert_eq!(Index::<i32>::new(3).modify(vec![1, 2], |b| b), Err(err));
    assert_eq!(Path::new(3).modify(vec![1, 2], |b: i32| b), Err(err));
    assert_eq!(
        Index::<Vec<i32>>::new(0)
            .then(Index::new(3))
            .modify(vec![vec![1, 2]], |b| b),
        Err(err)
    );
    assert_eq!(
        Index::<i32>::new(0).modify(Vec::new(), |b| b),
        Err(LensError::IndexOutOfRange { index: 0, len: 0 })
    );
    // A residual of the wrong shape handed to `right` is an error as well.
    let o = Index::new(1).then(Index::new(1));
    assert_eq!(
        o.right((vec![vec![0]], vec![0, 0]), 5),
        Err(LensError::IndexOutOfRange { index: 1, len: 1 })
    );
    // An error inside a tensor surfaces from the component that failed.
    let t = Tensor::new(Index::<i32>::new(0), Path::new(9));
    assert_eq!(
        t.modify((vec![1], vec![1, 2]), |b: (i32, i32)| b),
        Err(LensError::IndexOutOfRange { index: 9, len: 2 })
    );
}

#[test]
fn debug_output_is_readable() {
    let o = Index::<Vec<i32>>::new(1).then(Path::new(0));
    assert_eq!(
        format!("{o:?}"),
        "Then { first: Index(1), second: Path([0]) }"
    );
    let r = OpticRepr::from_optic(o);
    assert!(format!("{r:?}").starts_with("OpticRepr {"));
}
