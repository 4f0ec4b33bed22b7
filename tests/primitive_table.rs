//! The primitive table's conformance battery: every built-in primitive, as
//! listed by `Prim::all()`, is checked here without being named, so a new
//! primitive is covered the moment it is added to its family's list (the
//! book's "Adding a primitive", step 4).
//!
//! For each primitive and parameter, at a point inside its domain:
//!
//! 1. ∂⃗ and ∂⃖ agree: `jvp` along `u` equals `∇f · u` (the transpose
//!    identity ⟨ȳ, J u⟩ = ⟨Jᵀ ȳ, u⟩ with ȳ = 1, Ellis, Peyton Jones &
//!    Fitzgibbon, "Working notes on automatic differentiation", §2);
//! 2. the first derivative along `u` matches a central difference of the
//!    f64 value, and the third matches a central difference of the second
//!    (so the pullback nests: order 3 is ∂⃖ applied three times);
//! 3. the num-dual path (`Real` on `Dual3_64`, num-dual's function or our
//!    rule) gives the same first three derivatives as nested ∂⃖;
//! 4. Taylor mode (`derivative::<N>`) agrees with the nested ∂⃖ᵏ
//!    construction (`functor::nested_derivatives`) at every order k ≤ 8;
//! 5. names are unique, and (with `serde`) a one-instruction program
//!    round-trips.
//!
//! Tolerances: the directional derivatives are O(1) at the chosen points.
//! ∂⃗ vs ∂⃖ and num-dual vs ∂⃖ compute the same quantities by different
//! instruction sequences, so they agree to rounding: 1e-12 relative. The
//! central differences use h = 1e-5 on first derivatives (truncation
//! h² f‴/6 ≈ 1e-10, rounding ε|f|/h ≈ 1e-11) and h = 2e-5 on the third
//! from the second (truncation h² f⁽⁵⁾/6 ≈ 7e-11 · f⁽⁵⁾, which is up to a
//! few hundred at the points below, e.g. √x at 0.3; rounding
//! ε|f″|/h ≈ 1e-11), checked at 1e-7 relative (with an absolute floor of
//! 1e-7).

use std::collections::HashSet;

use num_dual::Dual3_64;
use optic_ad::functor::nested_derivatives;
use optic_ad::{derivative, gradient, jvp, trace, Prim, Real, Tracer};
use typenum::{U2, U8};

/// The parameters each primitive is checked with.
fn params(prim: Prim) -> Vec<i32> {
    match prim {
        Prim::Powi => vec![0, 1, 3, -2, 7],
        Prim::Polygamma => vec![0, 1, 2, 3],
        _ => vec![0],
    }
}

/// A point inside the domain, away from kinks and poles, and a direction.
/// A new primitive whose domain excludes the default adds a line here.
fn point(prim: Prim) -> (Vec<f64>, Vec<f64>) {
    let x: Vec<f64> = match prim.name() {
        "acosh" => vec![1.7],
        // Away from 0, where negative powers are steep.
        "powi" => vec![1.3],
        "select" => vec![0.4, 0.8, -1.1],
        // x strictly inside [lo, hi].
        "clamp" => vec![0.5, -0.3, 1.2],
        "powf" => vec![1.3, 0.7],
        "ln_gamma" | "digamma" | "polygamma" => vec![1.6],
        _ => [0.3, 0.7, 1.3][..prim.arity()].to_vec(),
    };
    let u = [0.9, -0.6, 0.4][..prim.arity()].to_vec();
    (x, u)
}

/// `f(x + t u)` through the primitive, for any `Real`.
fn along<T: Real>(prim: Prim, param: i32, x: &[f64], u: &[f64], t: T) -> T {
    let args: Vec<T> = x.iter().zip(u).map(|(&xi, &ui)| t * ui + xi).collect();
    T::apply(prim, param, &args)
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1.0)
}

/// The primitives whose derivative is zero everywhere it exists; checked
/// for that instead of against differences (which see their jumps).
fn is_flat(prim: Prim) -> bool {
    matches!(prim, Prim::Signum | Prim::Floor | Prim::Ceil)
}

/// `[f, f′, …, f⁽ᵏ⁾]` of `t ↦ f(x + t u)` at 0 by the nested ∂⃖ᵏ
/// construction.
fn nested(prim: Prim, param: i32, x: &[f64], u: &[f64], order: usize) -> Vec<f64> {
    let p = trace(|t| vec![along(prim, param, x, u, t[0])], &[0.0]).unwrap();
    nested_derivatives(&p, order).unwrap().eval(&[0.0]).unwrap()
}

/// Taylor mode against nested ∂⃖ᵏ (every order k ≤ 8) and num-dual's
/// `Dual3_64` (k ≤ 3), for every primitive, at its point and at two
/// pseudo-random points near it (offsets drawn from a fixed-seed
/// generator, at most 0.05 in each coordinate, which keeps every point
/// inside its domain and away from the kinks). Both are exact up to
/// rounding; the nested programs are long at order 8 (hundreds of
/// instructions whose rounding errors add up), so the bound is 1e-10
/// relative to the largest derivative of the row, and 1e-12 against Dual3.
#[test]
fn taylor_mode_agrees_with_nested_reverse_and_dual3() {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        // xorshift64*: a fixed, reproducible sequence in [−1, 1).
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    };
    let mut checked = 0;
    for prim in Prim::all() {
        for param in params(prim) {
            let (x0, u) = point(prim);
            for trial in 0..3 {
                let x: Vec<f64> = x0
                    .iter()
                    .map(|&v| if trial == 0 { v } else { v + 0.05 * next() })
                    .collect();
                let what = format!("{prim} (param {param}) at {x:?}");
                let want = nested(prim, param, &x, &u, 8);
                let got = derivative::<U8, _, _>(|t: Tracer| along(prim, param, &x, &u, t), 0.0)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let scale = want.iter().fold(1.0_f64, |m, v| m.max(v.abs()));
                for k in 0..=8 {
                    assert!(
                        (got[k] - want[k]).abs() <= 1e-10 * scale,
                        "{what}: order {k}: Taylor {} vs nested ∂⃖ {}",
                        got[k],
                        want[k]
                    );
                }
                let dual = along(prim, param, &x, &u, Dual3_64::new(0.0, 1.0, 0.0, 0.0));
                for (k, d) in [dual.re, dual.v1, dual.v2, dual.v3].into_iter().enumerate() {
                    assert!(
                        close(got[k], d, 1e-12),
                        "{what}: order {k}: Taylor {} vs Dual3 {d}",
                        got[k]
                    );
                }
                checked += 1;
            }
        }
    }
    eprintln!(
        "[primitive table] Taylor = nested ∂⃖ (order 8) = Dual3 (order 3) at {checked} points"
    );
}

#[test]
fn every_primitive_conforms() {
    let mut checked = 0;
    for prim in Prim::all() {
        for param in params(prim) {
            let (x, u) = point(prim);
            let what = format!("{prim} (param {param}) at {x:?}");
            let value = f64::apply(prim, param, &x);
            assert!(value.is_finite(), "{what}: value {value}");

            // Nested ∂⃖ along u: [f, f′, f″, f‴] of t ↦ f(x + t u) at 0.
            let d = nested(prim, param, &x, &u, 3);
            assert!(close(d[0], value, 0.0), "{what}: traced value");
            if is_flat(prim) {
                assert_eq!(&d[1..], &[0.0, 0.0, 0.0], "{what}");
                checked += 1;
                continue;
            }

            // 1. ∂⃗ against ∂⃖.
            let f = |v: &[Tracer]| Tracer::apply(prim, param, v);
            let g = gradient(f, &x).unwrap_or_else(|e| panic!("{what}: {e}"));
            let (_, jv) = jvp(|v| vec![f(v)], &x, &u).unwrap();
            let gu: f64 = g.iter().zip(&u).map(|(a, b)| a * b).sum();
            assert!(
                close(jv[0], gu, 1e-12),
                "{what}: jvp {} vs ∇f·u {gu}",
                jv[0]
            );
            assert!(
                close(d[1], gu, 1e-12),
                "{what}: nested {} vs ∇f·u {gu}",
                d[1]
            );

            // 2. Differences of the order below.
            let h = 1e-5;
            let fd1 = (along(prim, param, &x, &u, h) - along(prim, param, &x, &u, -h)) / (2.0 * h);
            assert!(close(d[1], fd1, 1e-7), "{what}: f′ {} vs {fd1}", d[1]);
            let h = 2e-5;
            let d2 = |t: f64| {
                derivative::<U2, _, _>(|s: Tracer| along(prim, param, &x, &u, s), t).unwrap()[2]
            };
            let fd3 = (d2(h) - d2(-h)) / (2.0 * h);
            assert!(close(d[3], fd3, 1e-7), "{what}: f‴ {} vs {fd3}", d[3]);

            // 3. The num-dual path.
            let dual = along(prim, param, &x, &u, Dual3_64::new(0.0, 1.0, 0.0, 0.0));
            for (k, got) in [dual.v1, dual.v2, dual.v3].into_iter().enumerate() {
                assert!(
                    close(got, d[k + 1], 1e-12),
                    "{what}: Dual3 order {} {got} vs nested ∂⃖ {}",
                    k + 1,
                    d[k + 1]
                );
            }
            checked += 1;
        }
    }
    eprintln!("[primitive table] {checked} primitive/parameter pairs checked");
    assert!(checked >= Prim::all().count());
}

#[test]
fn names_are_unique() {
    let mut seen = HashSet::new();
    for prim in Prim::all() {
        assert!(
            seen.insert(prim.name()),
            "two primitives named {}",
            prim.name()
        );
        assert_eq!(format!("{prim}"), prim.name());
    }
    eprintln!("[primitive table] {} primitives", seen.len());
}

#[cfg(feature = "serde")]
#[test]
fn one_instruction_programs_round_trip() {
    use optic_ad::{Builder, Program};
    for prim in Prim::all() {
        for param in params(prim) {
            let mut b = Builder::new();
            let x: Vec<_> = (0..prim.arity()).map(|_| b.input()).collect();
            let y = b.apply(prim, param, &x);
            let p = b.finish(&[y]).unwrap();
            let json = serde_json::to_string(&p).unwrap();
            let q: Program = serde_json::from_str(&json).unwrap();
            assert_eq!(p, q, "{prim}: {json}");
            let (pt, _) = point(prim);
            assert_eq!(
                p.eval(&pt).unwrap()[0].to_bits(),
                q.eval(&pt).unwrap()[0].to_bits()
            );
        }
    }
}

/// The book's "Adding a primitive" shows a primitive's definition
/// verbatim; it must still be the source.
#[test]
fn book_excerpt_is_the_source() {
    let book = include_str!("../book/src/rules.md");
    let source = include_str!("../src/rules/power.rs");
    let start =
        book.find("   ```rust,ignore\n").expect("the excerpt block") + "   ```rust,ignore\n".len();
    let len = book[start..].find("   ```\n").expect("end of the excerpt");
    let excerpt: String = book[start..start + len]
        .lines()
        .map(|l| l.strip_prefix("   ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(excerpt.contains("impl Primitive for Cbrt"));
    assert!(
        source.contains(&excerpt),
        "the book's excerpt is no longer in src/rules/power.rs:\n{excerpt}"
    );
}
