//! The functor laws of ∂⃖ (the book's chapter "The AD optic functor") on random
//! programs, points and cotangents, checked by action (block style, `modify`):
//!
//! * ∂⃖(id) ≅ id;
//! * ∂⃖(g ∘ f) ≅ ∂⃖g § ∂⃖f at orders 1, 2 and 3 (at order n + 1 the law is
//!   applied to the order-n bundle program `nest(f, n)`);
//! * the identity optic is a unit for composition with reverse optics;
//! * the nested encoding has 2ᴺ − 1 closures and is causal (the book's
//!   chapter "Higher order and the nested-closure encoding").
//!
//! Notation: `∂⃖g § ∂⃖f` here is the optic that runs ∂⃖f's left first and ∂⃖g's
//! right first; in Rust, `reverse(&f).then(reverse(&g))` (`Optic::then` is
//! diagrammatic). `g ∘ f` is the program `f.then(&g)`.
//!
//! Tolerance of the composition laws: both sides perform the same
//! primitive operations on the same values: the primal ops are copied
//! verbatim, and each pullback rule is emitted once per instruction. They
//! may differ only in the association of the sums that collect cotangents
//! where one value fans out across the `f`/`g` boundary (and in what the
//! builder folds across it). Each such reassociation changes a sum by at
//! most a few ulps of the sum of the magnitudes of its terms; with the
//! generator's values bounded by a few units, 1e-10 relative (absolute
//! below magnitude 1) leaves a margin of about 10⁵ over ε = 2.2e-16 while
//! any wrong term (a missing or doubled contribution) is of order 1.

use crate::common;

use common::{check, cotangent, max_err, point, program, RandomProgram, Worst};
use optic_ad::functor::MaxOrder;
use optic_ad::optic::{Id, Optic};
use optic_ad::{nest, reverse, Builder, Error, Nested, Program};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use typenum::{IsLessOrEqual, True, Unsigned, U1, U2, U3, U4};

/// Tolerance of the composition laws; see the module docs.
const TOL: f64 = 1e-10;

/// The identity program on ℝⁿ: outputs are the inputs.
fn identity_program(n: usize) -> Program {
    let mut b = Builder::new();
    let xs: Vec<_> = (0..n).map(|_| b.input()).collect();
    b.finish(&xs).expect("identity program")
}

/// A random update of the focus in block style: `ȳᵢ = cᵢ + sᵢ yᵢ`, so the
/// cotangent handed back depends on the focus, and a wrong focus shows.
fn update(c: Vec<f64>, s: Vec<f64>) -> impl Fn(Vec<f64>) -> Vec<f64> {
    move |y: Vec<f64>| {
        y.iter()
            .zip(&c)
            .zip(&s)
            .map(|((y, c), s)| c + s * y)
            .collect()
    }
}

/// Compares two optics by action at `a` with the update `ȳ = c + s·y`:
/// the focus from `left` and the result of `modify`. Returns the worst
/// error.
fn compare_action<O1, O2>(
    o1: &O1,
    o2: &O2,
    a: &[f64],
    c: &[f64],
    s: &[f64],
) -> Result<f64, TestCaseError>
where
    O1: Optic<A = Vec<f64>, B = Vec<f64>, BPrime = Vec<f64>, APrime = Vec<f64>, Error = Error>,
    O2: Optic<A = Vec<f64>, B = Vec<f64>, BPrime = Vec<f64>, APrime = Vec<f64>, Error = Error>,
{
    let (_, y1) = o1.left(a.to_vec()).map_err(fail)?;
    let (_, y2) = o2.left(a.to_vec()).map_err(fail)?;
    let x1 = o1
        .modify(a.to_vec(), update(c.to_vec(), s.to_vec()))
        .map_err(fail)?;
    let x2 = o2
        .modify(a.to_vec(), update(c.to_vec(), s.to_vec()))
        .map_err(fail)?;
    prop_assert_eq!(y1.len(), y2.len());
    prop_assert_eq!(x1.len(), x2.len());
    prop_assert_eq!(x1.len(), a.len());
    Ok(max_err(&y1, &y2).max(max_err(&x1, &x2)))
}

fn fail(e: Error) -> TestCaseError {
    TestCaseError::fail(format!("library error: {e}"))
}

/// ∂⃖(id) ≅ id: `left(x) = x` and `right(ȳ) = ȳ`, exactly.
#[test]
fn reverse_of_identity_is_identity() {
    let strategy = (1usize..=6).prop_flat_map(|n| (point(n), cotangent(n)));
    check("reverse(id) = id", 64, strategy, |(x, ybar), _| {
        let n = x.len();
        let d = reverse(&identity_program(n)).map_err(fail)?;
        let (m, y) = d.left(x.clone()).map_err(fail)?;
        prop_assert_eq!(&y, &x);
        let xbar = d.right(m, ybar.clone()).map_err(fail)?;
        prop_assert_eq!(&xbar, &ybar);
        let via_modify = d.modify(x.clone(), |_| ybar.clone()).map_err(fail)?;
        prop_assert_eq!(&via_modify, &ybar);
        // And the joint program is (x, ȳ) ↦ (x, ȳ).
        let joint = d
            .joint()
            .eval(&[x.clone(), ybar.clone()].concat())
            .map_err(fail)?;
        prop_assert_eq!(joint, [x, ybar].concat());
        Ok(())
    });
}

/// ∂⃖(f ∘ id) ≅ ∂⃖f ≅ ∂⃖(id ∘ f) on random programs (composition with the
/// identity *program*).
#[test]
fn reverse_respects_identity_programs() {
    let strategy = common::program_point_cotangent()
        .prop_flat_map(|(p, x, yb)| (Just(p.clone()), Just(x), Just(yb), cotangent(p.m)));
    check(
        "reverse(f . id) = reverse(f)",
        64,
        strategy,
        |(f, x, c, s), worst| {
            let p = &f.program;
            let df = reverse(p).map_err(fail)?;
            let left = reverse(&identity_program(f.n).then(p).map_err(fail)?).map_err(fail)?;
            let right = reverse(&p.then(&identity_program(f.m)).map_err(fail)?).map_err(fail)?;
            let e = worst.note(compare_action(&df, &left, &x, &c, &s)?);
            prop_assert!(e <= TOL, "id then f: error {e:e}");
            let e = worst.note(compare_action(&df, &right, &x, &c, &s)?);
            prop_assert!(e <= TOL, "f then id: error {e:e}");
            Ok(())
        },
    );
}

/// `Id § ∂⃖f ≅ ∂⃖f ≅ ∂⃖f § Id` with the identity *optic*.
#[test]
fn identity_optic_is_unit_for_reverse_optics() {
    let strategy = common::program_point_cotangent()
        .prop_flat_map(|(p, x, yb)| (Just(p.clone()), Just(x), Just(yb), cotangent(p.m)));
    check(
        "Id ; reverse(f) = reverse(f)",
        64,
        strategy,
        |(f, x, c, s), _| {
            let df = reverse(&f.program).map_err(fail)?;
            let id = Id::<Vec<f64>, Vec<f64>, Error>::new;
            let left = id().then(df.clone());
            let right = df.clone().then(id());
            // Same computations on both sides: exact equality.
            prop_assert_eq!(compare_action(&df, &left, &x, &c, &s)?, 0.0);
            prop_assert_eq!(compare_action(&df, &right, &x, &c, &s)?, 0.0);
            Ok(())
        },
    );
}

/// f : ℝⁿ → ℝᵐ then g : ℝᵐ → ℝᵏ, with a point, and an update `ȳ = c + s·y`.
fn composable(
) -> impl Strategy<Value = (RandomProgram, RandomProgram, Vec<f64>, Vec<f64>, Vec<f64>)> {
    (1usize..=4, 1usize..=3, 1usize..=3).prop_flat_map(|(n, m, k)| {
        (
            program(n, m, 3..=25, 2.0),
            program(m, k, 3..=25, 4.0),
            point(n),
            cotangent(k),
            cotangent(k),
        )
    })
}

/// Checks ∂⃖(g ∘ F) ≅ ∂⃖g § ∂⃖F at the point `a`: program composition
/// (`F.then(g)`) against optic composition (`Then`).
fn law(
    big_f: &Program,
    g: &Program,
    a: &[f64],
    c: &[f64],
    s: &[f64],
    worst: &Worst,
) -> Result<(), TestCaseError> {
    let gf = big_f.then(g).map_err(fail)?;
    let whole = reverse(&gf).map_err(fail)?;
    let parts = reverse(big_f)
        .map_err(fail)?
        .then(reverse(g).map_err(fail)?);
    let e = worst.note(compare_action(&whole, &parts, a, c, s)?);
    prop_assert!(
        e <= TOL,
        "reverse(g . F) vs reverse(F) ; reverse(g): error {e:e}"
    );
    Ok(())
}

/// Order 1: ∂⃖(g ∘ f) ≅ ∂⃖g § ∂⃖f.
#[test]
fn functor_law_order_1() {
    check(
        "functor law, order 1",
        512,
        composable(),
        |(f, g, x, c, s), worst| law(&f.program, &g.program, &x, &c, &s, worst),
    );
}

/// The order-`order` bundle `F = nest(f, order)`, a random `g` on its
/// outputs, a point `(x, d₁, …)` of `F`, and an update.
#[allow(clippy::type_complexity)]
fn composable_at_order(
    order: usize,
    len: std::ops::RangeInclusive<usize>,
) -> impl Strategy<
    Value = (
        RandomProgram,
        Program,
        RandomProgram,
        Vec<f64>,
        Vec<f64>,
        Vec<f64>,
    ),
> {
    (1usize..=4, 1usize..=3, 1usize..=3).prop_flat_map(move |(n, m, k)| {
        let width = (1usize << (order - 1)) * (n + m);
        program(n, m, len.clone(), 2.0)
            .prop_map(move |f| {
                let big_f = nest(&f.program, order).expect("nest");
                (f, big_f)
            })
            .prop_flat_map(move |(f, big_f)| {
                (
                    Just(f),
                    Just(big_f),
                    program(width, k, 3..=25, 8.0),
                    point(width),
                    cotangent(k),
                    cotangent(k),
                )
            })
    })
}

/// Block widths of the order-`order` bundle of f : ℝⁿ → ℝᵐ (the book's chapter
/// "Higher order and the nested-closure encoding"): inputs `[x, d₁ … d_K]`,
/// outputs `[y, r₁ … r_K]`, where `d_k` has the width of the output of the
/// order-(j) bundle that closure `k` pairs with.
fn bundle_blocks(n: usize, m: usize, order: usize) -> (Vec<usize>, Vec<usize>) {
    let (mut ins, mut outs) = (vec![n], vec![m]);
    for _ in 0..order {
        // [x, d…] / [y, r…] becomes [x, d…, r̄ reversed, ȳ] / [y, r…, d̄ reversed, x̄].
        let new_ins: Vec<usize> = ins
            .iter()
            .copied()
            .chain(outs.iter().skip(1).rev().copied())
            .chain(std::iter::once(outs[0]))
            .collect();
        let new_outs: Vec<usize> = outs
            .iter()
            .copied()
            .chain(ins.iter().skip(1).rev().copied())
            .chain(std::iter::once(ins[0]))
            .collect();
        ins = new_ins;
        outs = new_outs;
    }
    (ins, outs)
}

fn check_bundle_shape(
    f: &RandomProgram,
    big_f: &Program,
    order: usize,
) -> Result<(), TestCaseError> {
    let width = (1usize << (order - 1)) * (f.n + f.m);
    prop_assert_eq!(big_f.n_inputs(), width);
    prop_assert_eq!(big_f.n_outputs(), width);
    let (ins, outs) = bundle_blocks(f.n, f.m, order);
    prop_assert_eq!(big_f.input_blocks(), &ins[..]);
    prop_assert_eq!(big_f.output_blocks(), &outs[..]);
    prop_assert_eq!(ins.len(), 1usize << order);
    Ok(())
}

/// Order 2: the law applied to the order-1 bundle `F = nest(f, 1)`:
/// (x, d₁) ↦ (y, r₁), with n + m inputs and m + n outputs.
#[test]
fn functor_law_order_2() {
    check(
        "functor law, order 2",
        256,
        composable_at_order(1, 3..=25),
        |(f, big_f, g, a, c, s), worst| {
            check_bundle_shape(&f, &big_f, 1)?;
            law(&big_f, &g.program, &a, &c, &s, worst)
        },
    );
}

/// Order 3: the law applied to the order-2 bundle `F = nest(f, 2)`, with
/// 2(n + m) inputs and outputs.
#[test]
fn functor_law_order_3() {
    check(
        "functor law, order 3",
        128,
        composable_at_order(2, 3..=18),
        |(f, big_f, g, a, c, s), worst| {
            check_bundle_shape(&f, &big_f, 2)?;
            law(&big_f, &g.program, &a, &c, &s, worst)
        },
    );
}

/// The bundle's closure count is 2ᴺ − 1 and the staged optic has 2ᴺ stages
/// (the primal and one per closure), for N = 1 … 4.
#[test]
fn nested_closure_counts() {
    fn counts<N: Unsigned + IsLessOrEqual<MaxOrder, Output = True>>(p: &Program) {
        let order = N::to_usize();
        assert_eq!(Nested::<N>::closures(), (1 << order) - 1, "order {order}");
        let nested = Nested::<N>::new(p).unwrap();
        assert_eq!(nested.stages().len(), 1 << order, "order {order}");
        assert_eq!(nest(p, order).unwrap().input_blocks().len(), 1 << order);
    }
    check(
        "closure counts",
        16,
        (1usize..=3, 1usize..=2).prop_flat_map(|(n, m)| program(n, m, 3..=10, 2.0)),
        |f, _| {
            counts::<U1>(&f.program);
            counts::<U2>(&f.program);
            counts::<U3>(&f.program);
            counts::<U4>(&f.program);
            Ok(())
        },
    );
}

/// Start offsets of blocks of the given widths.
fn offsets(widths: &[usize]) -> Vec<usize> {
    widths
        .iter()
        .scan(0, |acc, &w| {
            let s = *acc;
            *acc += w;
            Some(s)
        })
        .collect()
}

/// Causality of the order-`order` bundle: perturbing `d_j` changes neither
/// `y` nor any `r_k` with `k < j` (bit for bit: those outputs do not read
/// `d_j`). Returns how many (j, k) pairs were checked.
fn check_causal(
    p: &Program,
    order: usize,
    inputs: &[f64],
    delta: &[f64],
) -> Result<usize, TestCaseError> {
    let bundle = nest(p, order).map_err(fail)?;
    let k_max = (1usize << order) - 1;
    prop_assert_eq!(bundle.input_blocks().len(), k_max + 1);
    prop_assert_eq!(bundle.output_blocks().len(), k_max + 1);
    let in_off = offsets(bundle.input_blocks());
    let out_off = offsets(bundle.output_blocks());
    let inputs = &inputs[..bundle.n_inputs()];
    let base = bundle.eval(inputs).map_err(fail)?;
    let mut checked = 0;
    for j in 1..=k_max {
        let mut moved = inputs.to_vec();
        for i in 0..bundle.input_blocks()[j] {
            moved[in_off[j] + i] += delta[(in_off[j] + i) % delta.len()];
        }
        let out = bundle.eval(&moved).map_err(fail)?;
        let blocks = out_off.iter().zip(bundle.output_blocks());
        for (k, (&start, &width)) in blocks.enumerate().take(j) {
            let r = start..start + width;
            prop_assert_eq!(
                &out[r.clone()],
                &base[r],
                "order {}: output block {} changed when input block {} moved",
                order,
                k,
                j
            );
            checked += 1;
        }
    }
    Ok(checked)
}

/// Causality (the book's chapter "Higher order and the nested-closure
/// encoding"): each closure's output `r_k` depends only on `x` and `d₁ … d_k`,
/// for orders 1 … 4.
#[test]
fn nested_encoding_is_causal() {
    let strategy = (1usize..=3, 1usize..=2).prop_flat_map(|(n, m)| {
        (
            program(n, m, 3..=12, 2.0),
            cotangent(8 * (n + m)),
            prop::collection::vec(0.1f64..1.0, 7),
        )
    });
    check("causality", 48, strategy, |(f, inputs, delta), _| {
        for order in 1..=4 {
            check_causal(&f.program, order, &inputs, &delta)?;
        }
        Ok(())
    });
}

/// The staged closures of `Nested<U2>` and `Nested<U3>`, called level by
/// level, agree with the joint bundle program `nest(f, N)` evaluated in one
/// go.
#[test]
fn nested_levels_agree_with_bundle() {
    let strategy = (1usize..=3, 1usize..=2)
        .prop_flat_map(|(n, m)| (program(n, m, 3..=15, 2.0), cotangent(4 * (n + m))));
    check("levels vs bundle", 96, strategy, |(f, inputs), worst| {
        let p = &f.program;
        // Order 2.
        let bundle = nest(p, 2).map_err(fail)?;
        let inp = &inputs[..bundle.n_inputs()];
        let want = bundle.eval(inp).map_err(fail)?;
        let off = offsets(bundle.input_blocks());
        let blk = |i: usize| &inp[off[i]..off[i] + bundle.input_blocks()[i]];
        let mut nested = Nested::<U2>::new(p).map_err(fail)?;
        let (y, l0) = nested.primal(blk(0)).map_err(fail)?;
        let (r1, l1) = l0.call(blk(1)).map_err(fail)?;
        let (r2, l2) = l1.call(blk(2)).map_err(fail)?;
        let (r3, _) = l2.call(blk(3)).map_err(fail)?;
        let got = [y, r1, r2, r3].concat();
        let e = worst.note(max_err(&got, &want));
        prop_assert!(e <= 1e-12, "order 2 levels vs bundle: {e:e}");
        // Order 3.
        let bundle = nest(p, 3).map_err(fail)?;
        let inp = &inputs[..bundle.n_inputs()];
        let want = bundle.eval(inp).map_err(fail)?;
        let off = offsets(bundle.input_blocks());
        let blk = |i: usize| &inp[off[i]..off[i] + bundle.input_blocks()[i]];
        let mut nested = Nested::<U3>::new(p).map_err(fail)?;
        let (y, l) = nested.primal(blk(0)).map_err(fail)?;
        let (r1, l) = l.call(blk(1)).map_err(fail)?;
        let (r2, l) = l.call(blk(2)).map_err(fail)?;
        let (r3, l) = l.call(blk(3)).map_err(fail)?;
        let (r4, l) = l.call(blk(4)).map_err(fail)?;
        let (r5, l) = l.call(blk(5)).map_err(fail)?;
        let (r6, l) = l.call(blk(6)).map_err(fail)?;
        let (r7, _) = l.call(blk(7)).map_err(fail)?;
        let got = [y, r1, r2, r3, r4, r5, r6, r7].concat();
        let e = worst.note(max_err(&got, &want));
        prop_assert!(e <= 1e-12, "order 3 levels vs bundle: {e:e}");
        // The whole-bundle call runs the same stages: the same numbers.
        let d: Vec<&[f64]> = (1..=7).map(blk).collect();
        let (y_all, rs) = nested.call_all(blk(0), &d).map_err(fail)?;
        let all = [vec![y_all], rs].concat().concat();
        prop_assert!(all == got, "call_all vs level by level");
        let short = matches!(
            nested.call_all(blk(0), &d[..6]),
            Err(Error::LengthMismatch {
                expected: 7,
                got: 6,
                ..
            })
        );
        prop_assert!(short, "call_all with 6 closure inputs is an error");
        Ok(())
    });
}

/// Sanity of the reference direction of the order-1 law: ∂⃖f's action is
/// `Jᵀ ȳ` as computed by num-dual forward mode (independent), so the law
/// is not checked between two equally wrong sides.
#[test]
fn reverse_matches_forward_mode_jacobian() {
    check(
        "reverse vs num-dual J^T ybar",
        256,
        common::program_point_cotangent(),
        |(f, x, ybar), worst| {
            let df = reverse(&f.program).map_err(fail)?;
            let got = df.modify(x.clone(), |_| ybar.clone()).map_err(fail)?;
            let want = common::vjp_dual(&f.program, &x, &ybar);
            let e = worst.note(max_err(&got, &want));
            // Different floating-point operations (reverse vs forward
            // accumulation): rounding scaled by the size of the terms.
            let scale = common::scale_of(&want);
            prop_assert!(e <= 1e-10 * scale, "x̄ vs Jᵀȳ: {e:e} {got:?} {want:?}");
            Ok(())
        },
    );
}

/// The generator reaches every primitive and both one- and many-output
/// programs (a check of the test support itself).
#[test]
fn generator_covers_all_primitives() {
    use optic_ad::{Op, Prim};
    use std::cell::RefCell;
    let seen = RefCell::new([0usize; 13]);
    check("generator coverage", 200, common::any_program(), |f, _| {
        let mut s = seen.borrow_mut();
        for op in f.program.ops() {
            let i = match (op.prim(), op) {
                (Some(Prim::Add), _) => 0,
                (Some(Prim::Sub), _) => 1,
                (Some(Prim::Mul), _) => 2,
                (Some(Prim::Div), _) => 3,
                (Some(Prim::Neg), _) => 4,
                (Some(Prim::Sin), _) => 5,
                (Some(Prim::Cos), _) => 6,
                (Some(Prim::Exp), _) => 7,
                (Some(Prim::Ln), _) => 8,
                (Some(Prim::Sqrt), _) => 9,
                (Some(Prim::Tanh), _) => 10,
                (Some(Prim::Powi), Op::Apply { param, .. }) if param < 0 => 11,
                (Some(Prim::Select), _) => 12,
                _ => continue,
            };
            s[i] += 1;
        }
        Ok(())
    });
    let seen = seen.into_inner();
    eprintln!("[generator coverage] op counts (powi: negative exponents only): {seen:?}");
    assert!(seen.iter().all(|&c| c > 0), "{seen:?}");
}

/// The public law checkers of `optic_ad::functor::laws` hold on random
/// programs at orders 1 and 2 (at order 2 on `F = nest(f, 1)`), with the
/// same tolerance as the hand-written comparisons above.
#[test]
fn public_law_checkers_hold_on_random_programs() {
    use optic_ad::functor::laws::{composition_law, identity_laws, preserves_identity};
    check(
        "functor::laws, order 1",
        256,
        composable(),
        |(f, g, x, c, _), _| {
            prop_assert!(composition_law(&f.program, &g.program, &x, &c, TOL).map_err(fail)?);
            let ybar = vec![1.0; f.m];
            prop_assert!(identity_laws(&f.program, &x, &ybar, 0.0).map_err(fail)?);
            prop_assert!(preserves_identity(x.len(), &x, &x).map_err(fail)?);
            Ok(())
        },
    );
    check(
        "functor::laws, order 2",
        128,
        composable_at_order(1, 3..=15),
        |(_, big_f, g, a, c, _), _| {
            prop_assert!(composition_law(&big_f, &g.program, &a, &c, TOL).map_err(fail)?);
            Ok(())
        },
    );
}

/// f : ℝⁿ → ℝᵐ pushed forward `order − 1` times (so that the law below is
/// checked on order-`order` programs), a random g on its outputs, a point
/// and a tangent.
#[allow(clippy::type_complexity)]
fn forward_composable(
    order: usize,
) -> impl Strategy<Value = (Program, RandomProgram, Vec<f64>, Vec<f64>)> {
    (1usize..=3, 1usize..=2, 1usize..=2).prop_flat_map(move |(n, m, k)| {
        let scale = 1usize << (order - 1);
        program(n, m, 3..=15, 2.0)
            .prop_map(move |f| {
                let mut p = f.program;
                for _ in 1..order {
                    p = optic_ad::functor::forward(&p);
                }
                p
            })
            .prop_flat_map(move |big_f| {
                (
                    Just(big_f),
                    program(scale * m, k, 3..=15, 8.0),
                    point(scale * n),
                    cotangent(scale * n),
                )
            })
    })
}

/// ∂⃗(g ∘ f) = ∂⃗g ∘ ∂⃗f and ∂⃗(id) = id at orders 1, 2 and 3 (the laws are
/// checked for ∂⃗ as for ∂⃖, at every order the tests reach).
#[test]
fn forward_functor_laws_orders_1_to_3() {
    use optic_ad::functor::laws::{forward_composition_law, forward_preserves_identity};
    for (order, cases) in [(1, 256), (2, 128), (3, 64)] {
        check(
            &format!("forward functor law, order {order}"),
            cases,
            forward_composable(order),
            |(big_f, g, x, xdot), _| {
                prop_assert_eq!(big_f.n_inputs(), x.len());
                prop_assert!(
                    forward_composition_law(&big_f, &g.program, &x, &xdot, TOL).map_err(fail)?
                );
                prop_assert!(forward_preserves_identity(x.len(), &x, &xdot).map_err(fail)?);
                Ok(())
            },
        );
    }
}

/// ∂⃗ᵏ of a program of one variable, seeded with 1 at tangent inputs 1, 2,
/// 4 (the powers of two, as for ∂⃖ᵏ), gives f⁽ᵏ⁾ as its last output; it
/// agrees with num-dual `Dual3_64` (independent forward mode) for k ≤ 3 and
/// with the reverse mode (nested ∂⃖ᵏ, `functor::nested_derivatives`) and
/// Taylor mode (`derivative::<U3>`).
#[test]
fn forward_powers_match_dual3_and_reverse() {
    check(
        "forward^k vs Dual3_64, nested ∂⃖ᵏ and Taylor mode",
        256,
        common::univariate_program(3..=20).prop_flat_map(|f| (Just(f), -2.0..2.0f64)),
        |(f, x), worst| {
            let p = &f.program;
            let want = common::taylor3_dual3(p, x);
            let rev = optic_ad::functor::nested_derivatives(p, 3)
                .map_err(fail)?
                .eval(&[x])
                .map_err(fail)?;
            let jet =
                optic_ad::derivative::<U3, _, _>(|t| p.eval(&[t]).unwrap()[0], x).map_err(fail)?;
            let mut q = p.clone();
            for k in 1..=3usize {
                q = optic_ad::functor::forward(&q);
                let width = 1usize << k;
                let seeds: Vec<f64> = (0..width)
                    .map(|i| {
                        if i == 0 {
                            x
                        } else if i.is_power_of_two() {
                            1.0
                        } else {
                            0.0
                        }
                    })
                    .collect();
                let out = q.eval(&seeds).map_err(fail)?;
                let got = out[width - 1];
                let e = worst.note(common::err(got, want[k]));
                prop_assert!(e <= TOL, "order {k}: forward {got} vs Dual3 {}", want[k]);
                let e = worst.note(common::err(got, rev[k]));
                prop_assert!(e <= TOL, "order {k}: forward {got} vs reverse {}", rev[k]);
                let e = worst.note(common::err(got, jet[k]));
                prop_assert!(e <= TOL, "order {k}: forward {got} vs Taylor {}", jet[k]);
            }
            Ok(())
        },
    );
}
