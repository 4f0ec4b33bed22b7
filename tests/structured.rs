//! Structured points: `#[derive(Differentiable)]` structs as the drivers'
//! points, against closed forms, finite differences of the order below,
//! and the flat form of the same function (bit for bit); flatten and
//! rebuild on random shapes; bad directions.
//!
//! Tolerances: the closed forms are the same arithmetic in another order,
//! so they agree to a few ulps (1e-14 at values of order 1); central
//! differences of the gradient with step 1e-6 have truncation error of
//! order h² · |f‴| ≈ 1e-11 and rounding of order 1e-16 / h ≈ 1e-10 here,
//! allowed as 1e-8.

use crate::common;

use approx::assert_relative_eq;
use common::check;
use optic_ad::{
    d3, gradient, hessian, hvp, jacobian, jvp, leaf_names, taylor, value_and_gradient, vjp,
    Differentiable, Error, Gradient, Hvp, Leaves, Real, Rebuild, Tracer,
};
use proptest::prelude::*;
use typenum::{U3, U4};

#[derive(Clone, Debug, PartialEq, Differentiable)]
struct Params<T> {
    w: Vec<T>,
    b: T,
    #[differentiable(skip)]
    label: usize,
}

fn loss<T: Real>(p: &Params<T>) -> T {
    let s = p.w.iter().fold(p.b, |acc, &w| acc + w * w);
    s.sin() * p.b
}

/// The example: ∂/∂wᵢ = 2 wᵢ b cos s, ∂/∂b = sin s + b cos s, with
/// s = b + Σ wⱼ².
fn loss_gradient(w: &[f64], b: f64) -> (Vec<f64>, f64) {
    let s = b + w.iter().map(|w| w * w).sum::<f64>();
    (
        w.iter().map(|w| 2.0 * w * b * s.cos()).collect(),
        s.sin() + b * s.cos(),
    )
}

#[test]
fn the_gradient_of_a_struct_is_a_struct_equal_to_the_closed_form() {
    let p = Params {
        w: vec![0.5, -1.0, 2.0],
        b: 0.3,
        label: 7,
    };
    let g: Params<f64> = gradient(loss, &p).unwrap();
    let (gw, gb) = loss_gradient(&p.w, p.b);
    for (a, b) in g.w.iter().zip(&gw) {
        assert_relative_eq!(*a, *b, epsilon = 1e-14);
    }
    assert_relative_eq!(g.b, gb, epsilon = 1e-14);
    assert_eq!(g.label, 7);

    // The HVP against central differences of the closed-form gradient.
    let hv: Params<f64> = hvp(loss, &p, &g).unwrap();
    let h = 1e-6;
    let shifted = |t: f64| {
        let w: Vec<f64> = p.w.iter().zip(&g.w).map(|(w, d)| w + t * d).collect();
        loss_gradient(&w, p.b + t * g.b)
    };
    let ((wp, bp), (wm, bm)) = (shifted(h), shifted(-h));
    for i in 0..3 {
        assert_relative_eq!(hv.w[i], (wp[i] - wm[i]) / (2.0 * h), epsilon = 1e-8);
    }
    assert_relative_eq!(hv.b, (bp - bm) / (2.0 * h), epsilon = 1e-8);
    assert_eq!(hv.label, 7);
}

#[derive(Clone, Debug, PartialEq, Differentiable)]
struct Layer<T> {
    weights: [T; 2],
    bias: T,
}

#[derive(Clone, Debug, PartialEq, Differentiable)]
struct Pair<T>(T, #[differentiable(skip)] bool, Vec<T>);

#[derive(Clone, Debug, PartialEq, Differentiable)]
struct Model<T> {
    layers: Vec<Layer<T>>,
    scale: T,
    offset: Option<T>,
    pair: Pair<T>,
    #[differentiable(skip)]
    steps: usize,
    unused: Vec<T>,
}

fn model() -> Model<f64> {
    Model {
        layers: vec![
            Layer {
                weights: [0.3, -0.7],
                bias: 0.1,
            },
            Layer {
                weights: [1.1, 0.4],
                bias: -0.2,
            },
        ],
        scale: 0.8,
        offset: Some(0.25),
        pair: Pair(0.6, true, vec![0.2, -0.5]),
        steps: 3,
        unused: vec![4.0, 5.0],
    }
}

/// A function of every field but `unused`, read by name.
fn model_loss<T: Real>(m: &Model<T>) -> T {
    let mut acc = m.offset.unwrap_or(T::cst(0.0));
    for l in &m.layers {
        acc = (acc * l.weights[0] + l.weights[1] * m.scale + l.bias).tanh();
    }
    let p = &m.pair;
    acc * p.0 + p.2.iter().fold(T::cst(0.0), |s, &v| s + v * v).sqrt() * m.scale
}

/// The same function of the flat leaves, in the documented order: fields
/// in declaration order, depth first, skipped fields absent.
fn model_loss_flat<T: Real>(x: &[T]) -> T {
    // layers[0].weights[0..2], layers[0].bias, layers[1]…, scale, offset,
    // pair.0, pair.2[0..2], unused[0..2]
    let (l0, l1, scale, offset) = (&x[0..3], &x[3..6], x[6], x[7]);
    let (p0, p2) = (x[8], &x[9..11]);
    let mut acc = offset;
    for l in [l0, l1] {
        acc = (acc * l[0] + l[1] * scale + l[2]).tanh();
    }
    acc * p0 + p2.iter().fold(T::cst(0.0), |s, &v| s + v * v).sqrt() * scale
}

fn flat(m: &Model<f64>) -> Vec<f64> {
    let mut v = Vec::new();
    m.flatten_into(&mut v);
    v
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn leaves_are_in_declaration_order_with_their_names() {
    let m = model();
    assert_eq!(
        leaf_names(&m),
        [
            "layers[0].weights[0]",
            "layers[0].weights[1]",
            "layers[0].bias",
            "layers[1].weights[0]",
            "layers[1].weights[1]",
            "layers[1].bias",
            "scale",
            "offset",
            "pair.0",
            "pair.2[0]",
            "pair.2[1]",
            "unused[0]",
            "unused[1]",
        ]
    );
    assert_eq!(m.leaf_count(), 13);
    assert_eq!(
        flat(&m),
        [0.3, -0.7, 0.1, 1.1, 0.4, -0.2, 0.8, 0.25, 0.6, 0.2, -0.5, 4.0, 5.0]
    );
    assert_eq!(model_loss(&m), model_loss_flat(&flat(&m)));
}

#[test]
fn every_driver_on_a_nested_struct_equals_its_flat_form_bit_for_bit() {
    let m = model();
    let x = flat(&m);
    let mut d = m.clone();
    d.scale = -1.5;
    d.layers[1].weights = [0.5, 2.0];
    d.pair.2[0] = 3.0;
    let v = flat(&d);

    let g = gradient(model_loss, &m).unwrap();
    assert_eq!(
        bits(&flat(&g)),
        bits(&gradient(model_loss_flat, &x).unwrap())
    );
    // Data passes through; a field the function does not read has a zero
    // gradient (structural: `+0.0`).
    assert_eq!((g.steps, g.pair.1), (3, true));
    assert_eq!(bits(&g.unused), bits(&[0.0, 0.0]));

    let (y, g2) = value_and_gradient(model_loss, &m).unwrap();
    let (yf, g2f) = value_and_gradient(model_loss_flat, &x).unwrap();
    assert_eq!((y.to_bits(), bits(&flat(&g2))), (yf.to_bits(), bits(&g2f)));

    let hv = hvp(model_loss, &m, &d).unwrap();
    assert_eq!(
        bits(&flat(&hv)),
        bits(&hvp(model_loss_flat, &x, &v).unwrap())
    );

    let h = hessian(model_loss, &m).unwrap();
    let hf = hessian(model_loss_flat, &x).unwrap();
    assert_eq!(h.len(), 13);
    for (a, b) in h.iter().zip(&hf) {
        assert_eq!(bits(a), bits(b));
    }

    let third = d3(model_loss, &m, &d, &m, &d).unwrap();
    let third_flat = d3(model_loss_flat, &x, &v, &x, &v).unwrap();
    assert_eq!(third.to_bits(), third_flat.to_bits());

    // Taylor mode along a structured direction: the flat form's numbers,
    // bit for bit (one trace of the same leaves); entry 2 is vᵀ H v, which
    // the structured HVP gives independently.
    let jets = taylor::<U4, _, _>(model_loss, &m, &d).unwrap();
    let jets_flat = taylor::<U4, _, _>(model_loss_flat, &x, &v).unwrap();
    assert_eq!(bits(&jets), bits(&jets_flat));
    let vhv: f64 = flat(&hv).iter().zip(&v).map(|(a, b)| a * b).sum();
    assert_relative_eq!(jets[2], vhv, max_relative = 1e-12);
    let d_d_d = d3(model_loss, &m, &d, &d, &d).unwrap();
    assert_relative_eq!(jets[3], d_d_d, max_relative = 1e-12);

    let two = |m: &Model<Tracer>| vec![model_loss(m), m.scale * m.pair.0];
    let two_flat = |x: &[Tracer]| vec![model_loss_flat(x), x[6] * x[8]];
    let (y, jv) = jvp(two, &m, &d).unwrap();
    let (yf, jvf) = jvp(two_flat, &x, &v).unwrap();
    assert_eq!((bits(&y), bits(&jv)), (bits(&yf), bits(&jvf)));
    let (y, xbar) = vjp(two, &m, &[1.0, -2.0]).unwrap();
    let (yf, xbarf) = vjp(two_flat, &x, &[1.0, -2.0]).unwrap();
    assert_eq!((bits(&y), bits(&flat(&xbar))), (bits(&yf), bits(&xbarf)));
    let j = jacobian(two, &m).unwrap();
    assert_eq!(j, jacobian(two_flat, &x).unwrap());
    // The pullback at a structured point: its cotangent in the point's
    // shape, the flat form's bits and `vjp`'s.
    let (y, mut back) = optic_ad::pullback(two, &m).unwrap();
    let (yf, mut backf) = optic_ad::pullback(two_flat, &x).unwrap();
    assert_eq!(bits(&y), bits(&yf));
    let xbar_p = back.call_point(&[1.0, -2.0], &m).unwrap();
    assert_eq!(bits(&flat(&xbar_p)), bits(&xbarf));
    assert_eq!(bits(&flat(&xbar_p)), bits(&flat(&xbar)));
    assert_eq!(xbar_p.scale, xbar.scale);
    assert_eq!(backf.call(&[1.0, -2.0]).unwrap(), xbarf);
    // A point of another structure is an error, not a panic.
    assert!(matches!(
        back.call_point(&[1.0, -2.0], &[1.0, 2.0][..]),
        Err(optic_ad::Error::StructureMismatch { .. })
    ));
}

#[test]
fn a_tuple_of_fields_is_a_point() {
    let f = |(a, v): &(Tracer, Vec<Tracer>)| *a * v[0] + v[1].exp();
    let (ga, gv) = gradient(f, &(2.0, vec![3.0, 0.5])).unwrap();
    assert_eq!((ga, gv[0]), (3.0, 2.0));
    assert_relative_eq!(gv[1], 0.5_f64.exp());
}

#[test]
fn structured_points_nest_inside_a_trace() {
    // g(b) = ∂/∂w₀ loss at w = (b, 1), inside a gradient with respect to
    // b: a structured point whose leaves are tracers of the outer trace.
    let outer = gradient(
        |b: &[Tracer]| {
            let p = Params {
                w: vec![b[0], b[0] * 0.0 + 1.0],
                b: b[0],
                label: 0,
            };
            Ok(gradient(loss, &p)?.w[0])
        },
        &[0.4],
    )
    .unwrap();
    // ∂/∂w₀ = 2 w₀ b cos s with w₀ = b and s = b + b² + 1:
    // d/db (2 b² cos s) = 4 b cos s − 2 b² sin s · (1 + 2b).
    let b = 0.4_f64;
    let s = b + b * b + 1.0;
    let expected = 4.0 * b * s.cos() - 2.0 * b * b * s.sin() * (1.0 + 2.0 * b);
    assert_relative_eq!(outer[0], expected, epsilon = 1e-14);
}

#[test]
fn a_direction_of_another_shape_is_an_error() {
    let p = Params {
        w: vec![0.5, -1.0, 2.0],
        b: 0.3,
        label: 7,
    };
    let short = Params {
        w: vec![1.0, 1.0],
        b: 1.0,
        label: 7,
    };
    assert!(matches!(
        hvp(loss, &p, &short),
        Err(Error::LengthMismatch { .. })
    ));
    // The same number of leaves, arranged otherwise.
    let m = model();
    let mut other = model();
    other.layers.pop();
    other.unused.extend([1.0, 2.0, 3.0]);
    assert_eq!(other.leaf_count(), m.leaf_count());
    assert!(matches!(
        hvp(model_loss, &m, &other),
        Err(Error::StructureMismatch { .. })
    ));
    let mut none = model();
    none.offset = None;
    none.unused.push(1.0);
    assert!(matches!(
        d3(model_loss, &m, &m, &none, &m),
        Err(Error::StructureMismatch { .. })
    ));
    assert!(matches!(
        taylor::<U3, _, _>(model_loss, &m, &none),
        Err(Error::StructureMismatch { .. })
    ));
    // A flat direction for a structured point is refused, not guessed.
    assert!(matches!(
        jvp(|m: &Model<Tracer>| vec![m.scale], &m, &flat(&m)),
        Err(Error::StructureMismatch { .. })
    ));
}

/// A point of random shape: a `Vec` of layers, a `Vec` of scalars, an
/// optional scalar.
fn random_model() -> impl Strategy<Value = Model<f64>> {
    let v = || -2.0..2.0_f64;
    (
        prop::collection::vec(((v(), v()), v()), 0..4),
        v(),
        prop::option::of(v()),
        (v(), prop::collection::vec(v(), 0..4)),
        prop::collection::vec(v(), 0..4),
        any::<usize>(),
    )
        .prop_map(|(layers, scale, offset, (p0, p2), unused, steps)| Model {
            layers: layers
                .into_iter()
                .map(|((a, b), bias)| Layer {
                    weights: [a, b],
                    bias,
                })
                .collect(),
            scale,
            offset,
            pair: Pair(p0, steps % 2 == 0, p2),
            steps,
            unused,
        })
}

/// rebuild ∘ flatten = id, and the names count the leaves.
#[test]
fn flatten_then_rebuild_is_the_identity() {
    check("flatten_then_rebuild", 256, random_model(), |m, _| {
        let leaves = flat(&m);
        prop_assert_eq!(leaves.len(), m.leaf_count());
        prop_assert_eq!(leaf_names(&m).len(), leaves.len());
        let mut rest = Leaves::new(&leaves);
        let back = <Model<f64> as Rebuild<Model<f64>>>::rebuild(&m, &mut rest).unwrap();
        prop_assert_eq!(rest.remaining(), 0);
        prop_assert_eq!(&back, &m);
        prop_assert!(back.same_shape(&m));
        // Too few leaves: no value, never a panic.
        if !leaves.is_empty() {
            let mut short = Leaves::new(&leaves[1..]);
            prop_assert!(<Model<f64> as Rebuild<Model<f64>>>::rebuild(&m, &mut short).is_none());
        }
        Ok(())
    });
}

/// A random program of the leaves, read through the structure: its
/// gradient and HVP are the flat ones, rebuilt in the point's shape, bit
/// for bit.
#[test]
fn structured_gradient_equals_the_flat_gradient() {
    let strategy = random_model()
        .prop_filter("at least one leaf", |m| m.leaf_count() > 0)
        .prop_flat_map(|m| {
            let n = m.leaf_count();
            (Just(m), common::program(n, 1, 3..=25, 2.0))
        });
    check("structured_gradient", 128, strategy, |(m, r), _| {
        let p = &r.program;
        let f = |m: &Model<Tracer>| {
            let mut x = Vec::new();
            m.flatten_into(&mut x);
            p.eval(&x).unwrap()[0]
        };
        let flat_f = |x: &[Tracer]| p.eval(x).unwrap()[0];
        let x = flat(&m);
        let g = gradient(f, &m).unwrap();
        prop_assert_eq!(g.steps, m.steps);
        let gf = gradient(flat_f, &x).unwrap();
        prop_assert_eq!(bits(&flat(&g)), bits(&gf));
        let hv = hvp(f, &m, &g).unwrap();
        let hvf = hvp(flat_f, &x, &gf).unwrap();
        prop_assert_eq!(bits(&flat(&hv)), bits(&hvf));
        Ok(())
    });
}

#[test]
fn compiled_drivers_on_a_struct_equal_their_flat_forms_bit_for_bit() {
    let m = model();
    let x = flat(&m);
    let mut g = Gradient::structured(model_loss, &m).unwrap();
    let mut gf = Gradient::new(model_loss_flat, &x).unwrap();
    let mut h = Hvp::structured(model_loss, &m).unwrap();
    let mut hf = Hvp::new(model_loss_flat, &x).unwrap();
    let mut d = optic_ad::Directional::structured(model_loss, &m, 3).unwrap();
    let mut df = optic_ad::Directional::new(model_loss_flat, &x, 3).unwrap();
    let (mut grad, mut hv) = (vec![0.0; 13], vec![0.0; 13]);
    let (mut dk, mut dkf) = ([0.0; 4], [0.0; 4]);
    for k in 0..4 {
        let mut p = model();
        p.scale += 0.1 * k as f64;
        p.pair.2[1] -= 0.2 * k as f64;
        let xp = flat(&p);
        let (y, gs) = g.eval_point(&p).unwrap();
        let yf = gf.eval(&xp, &mut grad).unwrap();
        assert_eq!((y.to_bits(), bits(&flat(&gs))), (yf.to_bits(), bits(&grad)));
        assert_eq!(gs.steps, 3);

        let (y, gs) = h.linearize_point(&p).unwrap();
        let yf = hf.linearize_with_gradient(&xp, &mut grad).unwrap();
        assert_eq!((y.to_bits(), bits(&flat(&gs))), (yf.to_bits(), bits(&grad)));
        let hs = h.apply_point(&gs).unwrap();
        hf.apply(&grad, &mut hv).unwrap();
        assert_eq!(bits(&flat(&hs)), bits(&hv));

        // Along the gradient: dᵏ/dtᵏ f(p + t g), structured and flat.
        d.eval_point(&p, &gs, &mut dk).unwrap();
        df.eval(&xp, &grad, &mut dkf).unwrap();
        assert_eq!(bits(&dk), bits(&dkf));
        // Entry 1 is ∇f · g, entry 2 gᵀ H g.
        let gg: f64 = grad.iter().map(|g| g * g).sum();
        assert_relative_eq!(dk[1], gg, max_relative = 1e-12);
        let ghg: f64 = grad.iter().zip(&hv).map(|(g, h)| g * h).sum();
        assert_relative_eq!(dk[2], ghg, max_relative = 1e-12);
    }
    // Another structure is refused, by both.
    let mut other = model();
    other.unused.push(1.0);
    assert!(matches!(
        g.eval_point(&other),
        Err(Error::StructureMismatch { .. })
    ));
    assert!(matches!(
        h.linearize_point(&other),
        Err(Error::StructureMismatch { .. })
    ));
    assert!(matches!(
        h.apply_point(&other),
        Err(Error::StructureMismatch { .. })
    ));
    dk = [7.0; 4];
    for r in [
        d.eval_point(&other, &m, &mut dk),
        d.eval_point(&m, &other, &mut dk),
    ] {
        assert!(matches!(r, Err(Error::StructureMismatch { .. })), "{r:?}");
    }
    assert_eq!(dk, [7.0; 4]);
}

/// A branch on a field: the compiled structured drivers re-trace where
/// its guard fails, as the flat ones do.
#[test]
fn compiled_structured_drivers_retrace_where_a_guard_fails() {
    fn f<T: Real>(p: &Params<T>) -> T {
        if p.b > 0.0 {
            p.w[0] * p.b
        } else {
            p.w[1] * p.b * p.b
        }
    }
    let at = |b: f64| Params {
        w: vec![2.0, 3.0],
        b,
        label: 1,
    };
    let mut g = Gradient::structured(f, &at(1.0)).unwrap();
    let mut h = Hvp::structured(f, &at(1.0)).unwrap();
    // b > 0: ∂/∂b = w₀; ∂²/∂b² = 0, ∂²/∂b∂w₀ = 1.
    assert_eq!(g.eval_point(&at(0.5)).unwrap().1.b, 2.0);
    // b < 0: ∂/∂b = 2 w₁ b; ∂²/∂b² = 2 w₁, ∂²/∂b∂w₁ = 2b.
    assert_eq!(g.eval_point(&at(-0.5)).unwrap().1.b, -3.0);
    let db = Params {
        w: vec![0.0, 0.0],
        b: 1.0,
        label: 1,
    };
    h.linearize_point(&at(-0.5)).unwrap();
    let hv = h.apply_point(&db).unwrap();
    assert_eq!((hv.b, hv.w[0], hv.w[1]), (6.0, 0.0, -1.0));
    h.linearize_point(&at(0.5)).unwrap();
    let hv = h.apply_point(&db).unwrap();
    assert_eq!((hv.b, hv.w[0], hv.w[1]), (0.0, 1.0, 0.0));
}

/// The mixed point: a `Vec`, a scalar, an array-tier vector and a
/// skipped `usize`, through every driver and the compiled ones.
#[derive(Clone, Debug, PartialEq, Differentiable)]
struct Mixed<T> {
    w: Vec<T>,
    scale: T,
    signal: optic_ad::array::Dense<T>,
    #[differentiable(skip)]
    id: usize,
}

fn mixed_loss<T: Real>(m: &Mixed<T>) -> T {
    use optic_ad::array::Array;
    let s = m.signal.map(|x| (x * m.scale).sin()).sum();
    let w = m.w.iter().fold(T::cst(0.0), |a, &w| a + w * w);
    s * w + m.signal.dot(&m.signal).unwrap_or(T::cst(f64::NAN))
}

fn mixed_loss_flat<T: Real>(x: &[T]) -> T {
    let (w, scale, signal) = (&x[0..2], x[2], &x[3..6]);
    let s = signal
        .iter()
        .fold(T::cst(0.0), |a, &x| a + (x * scale).sin());
    let ww = w.iter().fold(T::cst(0.0), |a, &w| a + w * w);
    s * ww + signal.iter().fold(T::cst(0.0), |a, &x| a + x * x)
}

#[test]
fn a_point_with_an_array_tier_vector_equals_its_flat_form() {
    let m = Mixed {
        w: vec![0.4, -1.2],
        scale: 0.7,
        signal: optic_ad::array::Dense::new(vec![0.1, 0.5, -0.3]),
        id: 42,
    };
    let mut x = Vec::new();
    m.flatten_into(&mut x);
    let flat_of = |p: &Mixed<f64>| {
        let mut v = Vec::new();
        p.flatten_into(&mut v);
        v
    };
    assert_eq!(mixed_loss(&m), mixed_loss_flat(&x));
    let g = gradient(mixed_loss, &m).unwrap();
    assert_eq!(g.id, 42);
    assert_eq!(
        bits(&flat_of(&g)),
        bits(&gradient(mixed_loss_flat, &x).unwrap())
    );
    let hv = hvp(mixed_loss, &m, &g).unwrap();
    let gf = flat_of(&g);
    assert_eq!(
        bits(&flat_of(&hv)),
        bits(&hvp(mixed_loss_flat, &x, &gf).unwrap())
    );
    let h = hessian(mixed_loss, &m).unwrap();
    assert_eq!(h, hessian(mixed_loss_flat, &x).unwrap());
    let mut gc = Gradient::structured(mixed_loss, &m).unwrap();
    let (_, g2) = gc.eval_point(&m).unwrap();
    assert_eq!(bits(&flat_of(&g2)), bits(&flat_of(&g)));
    let mut hc = Hvp::structured(mixed_loss, &m).unwrap();
    hc.linearize_point(&m).unwrap();
    assert_eq!(
        bits(&flat_of(&hc.apply_point(&g).unwrap())),
        bits(&flat_of(&hv))
    );
    // Against forward mode on the flat form (num-dual), an independent
    // check of the gradient's leaf order.
    for (i, gi) in gf.iter().enumerate() {
        let xs: Vec<num_dual::Dual64> = x
            .iter()
            .enumerate()
            .map(|(j, &a)| num_dual::Dual64::new(a, if i == j { 1.0 } else { 0.0 }))
            .collect();
        assert!((mixed_loss_flat(&xs).eps - gi).abs() < 1e-13);
    }
}

/// A minibatch kept in a data field: the compiled structured drivers trace
/// again where the data change, so the answer is that of the new data.
#[test]
fn compiled_structured_drivers_retrace_where_the_data_change() {
    #[derive(Clone, Debug, PartialEq, Differentiable)]
    struct Batch<T> {
        w: T,
        #[differentiable(skip)]
        data: Vec<f64>,
    }
    // Σ (w·d)²: ∂/∂w = 2 w Σ d², ∂²/∂w² = 2 Σ d².
    fn f<T: Real>(b: &Batch<T>) -> T {
        b.data
            .iter()
            .fold(T::cst(0.0), |s, &d| s + (b.w * d) * (b.w * d))
    }
    let at = |data: Vec<f64>| Batch { w: 1.5, data };
    let mut g = Gradient::structured(f, &at(vec![1.0])).unwrap();
    let mut h = Hvp::structured(f, &at(vec![1.0])).unwrap();
    let mut d = optic_ad::Directional::structured(f, &at(vec![1.0]), 2).unwrap();
    for data in [vec![1.0], vec![10.0, 20.0], vec![3.0], vec![3.0]] {
        let sq: f64 = data.iter().map(|d| d * d).sum();
        let p = at(data);
        // Along w: (w + t)² Σ d², second derivative 2 Σ d².
        let mut dk = [0.0; 3];
        d.eval_point(
            &p,
            &Batch {
                w: 1.0,
                data: vec![],
            },
            &mut dk,
        )
        .unwrap();
        assert_eq!(dk[2], 2.0 * sq);
        let (y, grad) = g.eval_point(&p).unwrap();
        assert_relative_eq!(y, 1.5 * 1.5 * sq, max_relative = 1e-15);
        assert_relative_eq!(grad.w, 2.0 * 1.5 * sq, max_relative = 1e-15);
        assert_eq!(grad.data, p.data);
        let (_, grad) = h.linearize_point(&p).unwrap();
        assert_relative_eq!(grad.w, 2.0 * 1.5 * sq, max_relative = 1e-15);
        let hv = h.apply_point(&at(vec![])).map(|_| ());
        assert!(hv.is_ok(), "a direction's data are not read: {hv:?}");
        let hv = h
            .apply_point(&Batch {
                w: 1.0,
                data: vec![],
            })
            .unwrap();
        assert_relative_eq!(hv.w, 2.0 * sq, max_relative = 1e-15);
    }
}

/// A carry with a data field: a plain loop on `f64` (and on scalar
/// tracers) updates it; the array trace, whose body is traced once, and
/// `scan` refuse it instead of freezing it.
#[test]
fn a_loop_carry_with_data_runs_plainly_and_is_refused_where_traced_once() {
    use optic_ad::array::Array;
    use optic_ad::fold;
    #[derive(Clone, Debug, PartialEq, Differentiable)]
    struct S<T> {
        x: T,
        #[differentiable(skip)]
        k: usize,
    }
    fn f<T: Real>(a: T) -> optic_ad::Result<T> {
        let end = fold(3, S { x: a, k: 1 }, |s: S<T>| S {
            x: s.x * (s.k as f64),
            k: s.k + 1,
        })?;
        Ok(end.x)
    }
    assert_eq!(f(2.0).unwrap(), 12.0); // 2 · 1 · 2 · 3
    assert_eq!(gradient(|x| f(x[0]), &[2.0]).unwrap(), [6.0]);
    assert!(matches!(
        crate::common::array_gradient(|x| f(x.get(0)?), &[2.0]),
        Err(Error::Unsupported(_))
    ));
    let xs = optic_ad::array::Dense::new(vec![1.0, 2.0]);
    assert!(matches!(
        optic_ad::scan(&xs, S { x: 0.0, k: 0 }, |s: S<f64>, x| (s, x)),
        Err(Error::Unsupported(_))
    ));
}

/// Points held in a `Box`, an `Arc` or a `Cow` of a slice are flat points.
#[test]
fn boxed_and_shared_slices_are_flat_points() {
    let f = |x: &[Tracer]| x[0] * x[1];
    let boxed: Box<[f64]> = vec![2.0, 3.0].into_boxed_slice();
    let arc: std::sync::Arc<[f64]> = vec![2.0, 3.0].into();
    let cow: std::borrow::Cow<'_, [f64]> = std::borrow::Cow::Owned(vec![2.0, 3.0]);
    assert_eq!(gradient(f, &boxed).unwrap(), [3.0, 2.0]);
    assert_eq!(gradient(f, &arc).unwrap(), [3.0, 2.0]);
    assert_eq!(gradient(f, &cow).unwrap(), [3.0, 2.0]);
}

/// The derive's scalar may be bounded by `Real` and may have any name.
#[test]
fn the_derive_takes_a_real_bound_and_any_scalar_name() {
    #[derive(Clone, Debug, Differentiable)]
    struct Bounded<S: Real> {
        a: S,
    }
    #[allow(non_camel_case_types)]
    #[derive(Clone, Debug, Differentiable)]
    struct Odd<__OpticAdU> {
        a: __OpticAdU,
    }
    let g = gradient(|p: &Bounded<Tracer>| p.a * p.a, &Bounded { a: 3.0 }).unwrap();
    assert_eq!(g.a, 6.0);
    let g = gradient(|p: &Odd<Tracer>| p.a * p.a, &Odd { a: 3.0 }).unwrap();
    assert_eq!(g.a, 6.0);
}

/// Where tracing at new data fails, the compiled structured drivers keep
/// the point their programs were traced at: the next call with those data
/// traces again (and gives their answer or their error), never the old
/// data's program under the new data.
#[test]
fn a_failed_retrace_at_new_data_leaves_the_drivers_consistent() {
    #[derive(Clone, Debug, PartialEq, Differentiable)]
    struct Scaled<T> {
        w: T,
        #[differentiable(skip)]
        k: usize,
    }
    // k w², except that it refuses k = 7 at w < 0.
    fn f<T: Real>(p: &Scaled<T>) -> optic_ad::Result<T> {
        if p.k == 7 && p.w.primal() < 0.0 {
            return Err(Error::Unsupported("refused here"));
        }
        Ok(p.w * p.w * p.k as f64)
    }
    let at = |w: f64, k: usize| Scaled { w, k };
    let mut g = Gradient::structured(f, &at(1.0, 1)).unwrap();
    let mut h = Hvp::structured(f, &at(1.0, 1)).unwrap();
    let mut d = optic_ad::Directional::structured(f, &at(1.0, 1), 2).unwrap();
    let mut out = [0.0; 3];
    assert!(g.eval_point(&at(-1.0, 7)).is_err());
    assert!(h.linearize_point(&at(-1.0, 7)).is_err());
    assert!(d.eval_point(&at(-1.0, 7), &at(1.0, 7), &mut out).is_err());
    // k = 7 at w = 2: 7 w², gradient 14 w = 28, second derivative 14.
    let (y, grad) = g.eval_point(&at(2.0, 7)).unwrap();
    assert_eq!((y, grad.w), (28.0, 28.0));
    let (y, grad) = h.linearize_point(&at(2.0, 7)).unwrap();
    assert_eq!((y, grad.w), (28.0, 28.0));
    assert_eq!(h.apply_point(&at(1.0, 7)).unwrap().w, 14.0);
    d.eval_point(&at(2.0, 7), &at(1.0, 7), &mut out).unwrap();
    assert_eq!(out, [28.0, 28.0, 14.0]);
}
