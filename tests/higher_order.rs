//! Higher-order optics of `sin` against closed forms (K. Fischer, "∂P.jl
//! terminology and notation guide", Snippet 15, Figs. 5–6; the book's chapter
//! "Higher order and the nested-closure encoding"), `derivative::<N>` against
//! closed forms and finite differences, and the closure count 2ᴺ − 1.

use approx::assert_relative_eq;
use optic_ad::{derivative, nest, trace, Nested, Program, Real};
use proptest::prelude::*;
use typenum::{U1, U2, U3, U4, U6};

fn sin_program(x: f64) -> Program {
    trace(|x| vec![x[0].sin()], &[x]).unwrap()
}

/// Order 2, level by level, against Snippet 15:
/// c₁(Δ) = Δ cos x; c₂(Δ′) = Δ′ cos x (capturing Δ‴ = Δ′Δ(−sin x));
/// c₃(Δ″) = Δ″ cos x + Δ‴.
fn check_order2(x: f64, d: f64, dp: f64, ddp: f64) {
    let p = sin_program(x);
    let mut n = Nested::<U2>::new(&p).unwrap();
    let (y, l0) = n.primal(&[x]).unwrap();
    assert_relative_eq!(y[0], x.sin(), epsilon = 1e-13, max_relative = 1e-13);
    let (r1, l1) = l0.call(&[d]).unwrap();
    assert_relative_eq!(r1[0], d * x.cos(), epsilon = 1e-13, max_relative = 1e-13);
    let (r2, l2) = l1.call(&[dp]).unwrap();
    assert_relative_eq!(r2[0], dp * x.cos(), epsilon = 1e-13, max_relative = 1e-13);
    let (r3, _) = l2.call(&[ddp]).unwrap();
    let dppp = dp * d * (-x.sin());
    assert_relative_eq!(
        r3[0],
        ddp * x.cos() + dppp,
        epsilon = 1e-13,
        max_relative = 1e-13
    );
}

/// Order 3: the seven closures of ∂⃖³ sin with inputs d₁ … d₇, derived from
/// the nested-closure encoding (the book's chapter "Higher order and the
/// nested-closure encoding") applied to the order-2 bundle above (the same
/// terms as Fischer, ∂P.jl notes, Fig. 6):
///
/// * r₁ = d₁ cos x, r₂ = d₂ cos x, r₃ = d₃ cos x − d₂d₁ sin x (order 2);
/// * r₄ = ∂r₃/∂d₃ · d₄ = d₄ cos x;
/// * r₅ = d₅ ∂r₂/∂d₂ + d₄ ∂r₃/∂d₂ = d₅ cos x − d₄d₁ sin x;
/// * r₆ = d₆ ∂r₁/∂d₁ + d₄ ∂r₃/∂d₁ = d₆ cos x − d₄d₂ sin x;
/// * r₇ = d₇ cos x − d₆d₁ sin x − d₅d₂ sin x − d₄(d₃ sin x + d₂d₁ cos x).
fn check_order3(x: f64, d: [f64; 7]) {
    let p = sin_program(x);
    let mut n = Nested::<U3>::new(&p).unwrap();
    let (s, c) = x.sin_cos();
    let expect = [
        d[0] * c,
        d[1] * c,
        d[2] * c - d[1] * d[0] * s,
        d[3] * c,
        d[4] * c - d[3] * d[0] * s,
        d[5] * c - d[3] * d[1] * s,
        d[6] * c - d[5] * d[0] * s - d[4] * d[1] * s - d[3] * (d[2] * s + d[1] * d[0] * c),
    ];
    let (y, l0) = n.primal(&[x]).unwrap();
    assert_relative_eq!(y[0], s, epsilon = 1e-13, max_relative = 1e-13);
    let (r1, l) = l0.call(&[d[0]]).unwrap();
    let (r2, l) = l.call(&[d[1]]).unwrap();
    let (r3, l) = l.call(&[d[2]]).unwrap();
    let (r4, l) = l.call(&[d[3]]).unwrap();
    let (r5, l) = l.call(&[d[4]]).unwrap();
    let (r6, l) = l.call(&[d[5]]).unwrap();
    let (r7, _) = l.call(&[d[6]]).unwrap();
    for (got, want) in [r1, r2, r3, r4, r5, r6, r7].iter().zip(expect) {
        assert_relative_eq!(got[0], want, epsilon = 1e-13, max_relative = 1e-13);
    }
}

#[test]
fn snippet_15_order_2_levels_match_closed_forms() {
    check_order2(0.7, 1.5, 0.5, 2.0);
    // Δ = 1, Δ′ = 1, Δ″ = 0: the last closure returns f″ = −sin x.
    let x = 1.3_f64;
    let p = sin_program(x);
    let mut n = Nested::<U2>::new(&p).unwrap();
    let (_, l0) = n.primal(&[x]).unwrap();
    let (_, l1) = l0.call(&[1.0]).unwrap();
    let (_, l2) = l1.call(&[1.0]).unwrap();
    let (r3, _) = l2.call(&[0.0]).unwrap();
    assert_relative_eq!(r3[0], -x.sin(), epsilon = 1e-13, max_relative = 1e-13);
}

#[test]
fn figure_6_order_3_levels_match_closed_forms() {
    check_order3(0.4, [1.0, -0.5, 0.25, 2.0, 0.3, -1.2, 0.8]);
    // e₁ = e₂ = e₄ = 1, others 0: the last closure returns f‴ = −cos x.
    let x = 2.1_f64;
    let p = sin_program(x);
    let mut n = Nested::<U3>::new(&p).unwrap();
    let (_, l) = n.primal(&[x]).unwrap();
    let (_, l) = l.call(&[1.0]).unwrap();
    let (_, l) = l.call(&[1.0]).unwrap();
    let (_, l) = l.call(&[0.0]).unwrap();
    let (_, l) = l.call(&[1.0]).unwrap();
    let (_, l) = l.call(&[0.0]).unwrap();
    let (_, l) = l.call(&[0.0]).unwrap();
    let (r7, _) = l.call(&[0.0]).unwrap();
    assert_relative_eq!(r7[0], -x.cos(), epsilon = 1e-13, max_relative = 1e-13);
}

proptest! {
    #[test]
    fn order_2_and_3_levels_at_random_points(
        x in -6.0..6.0f64,
        d in proptest::array::uniform7(-3.0..3.0f64),
    ) {
        check_order2(x, d[0], d[1], d[2]);
        check_order3(x, d);
    }
}

#[test]
fn closure_count_is_two_to_the_n_minus_one() {
    // Fischer's Snippet 17 prints eight closures at third order; the
    // encoding (Snippet 20, §V.B) has 2ᴺ − 1 = 7. We implement 2ᴺ − 1.
    let p = sin_program(0.5);
    assert_eq!(Nested::<U1>::closures(), 1);
    assert_eq!(Nested::<U2>::closures(), 3);
    assert_eq!(Nested::<U3>::closures(), 7);
    assert_eq!(Nested::<U4>::closures(), 15);
    assert_eq!(Nested::<U1>::new(&p).unwrap().stages().len(), 2);
    assert_eq!(Nested::<U2>::new(&p).unwrap().stages().len(), 4);
    assert_eq!(Nested::<U3>::new(&p).unwrap().stages().len(), 8);
    assert_eq!(Nested::<U4>::new(&p).unwrap().stages().len(), 16);
    for order in 0..=5 {
        let pn = nest(&p, order).unwrap();
        assert_eq!(pn.input_blocks().len(), 1 << order);
        assert_eq!(pn.output_blocks().len(), 1 << order);
    }
}

/// f = eˣ sin x: f′ = eˣ(sin x + cos x), f″ = 2eˣ cos x,
/// f‴ = 2eˣ(cos x − sin x) (product rule, Leibniz).
#[test]
fn third_derivative_of_sin_exp_matches_closed_form() {
    for &x in &[-2.0, -0.3, 0.0, 0.7, 1.9, 3.5_f64] {
        let d = derivative::<U3, _, _>(|t| t.sin() * t.exp(), x).unwrap();
        let (s, c, e) = (x.sin(), x.cos(), x.exp());
        let want = [e * s, e * (s + c), 2.0 * e * c, 2.0 * e * (c - s)];
        for (k, (&got, w)) in d.iter().zip(want).enumerate() {
            assert_relative_eq!(got, w, epsilon = 1e-13, max_relative = 1e-13);
            let _ = k;
        }
    }
}

/// Derivatives of sin up to order 6 cycle through sin, cos, −sin, −cos.
#[test]
fn sixth_order_derivatives_of_sin() {
    let x = 0.9_f64;
    let d = derivative::<U6, _, _>(|t| t.sin(), x).unwrap();
    let cycle = [x.sin(), x.cos(), -x.sin(), -x.cos()];
    for (k, &got) in d.iter().enumerate() {
        assert_relative_eq!(got, cycle[k % 4], epsilon = 1e-12, max_relative = 1e-12);
    }
}

/// Order n against a central difference of order n − 1,
/// for n up to 4, on f(x) = tanh(x)·ln(1 + x²) + x³/(1 + x²).
///
/// With step h the central difference has truncation error h²/6·f⁽ⁿ⁺²⁾ and
/// rounding error ~ε·|f⁽ⁿ⁻¹⁾|/h; h = 1e-4 keeps both below 1e-7 here, and
/// the tolerance is 1e-6 relative.
#[test]
fn each_order_matches_finite_differences_of_the_order_below() {
    fn f<T: Real>(t: T) -> T {
        t.tanh() * (t * t + 1.0).ln() + t.powi(3) / (t * t + 1.0)
    }
    let h = 1e-4;
    for &x in &[-1.3, -0.2, 0.5, 1.7_f64] {
        let d0 = derivative::<U4, _, _>(f, x).unwrap();
        let dp = derivative::<U4, _, _>(f, x + h).unwrap();
        let dm = derivative::<U4, _, _>(f, x - h).unwrap();
        assert_relative_eq!(d0[0], f(x), max_relative = 1e-14);
        for n in 1..=4 {
            let fd = (dp[n - 1] - dm[n - 1]) / (2.0 * h);
            assert_relative_eq!(d0[n], fd, epsilon = 1e-6, max_relative = 1e-6);
        }
    }
}
