//! The native backend (feature `jit`: programs compiled to machine code
//! with Cranelift) against the register code and the interpreter, bit for
//! bit: whole programs cut into functions of every small size (so that
//! values cross function boundaries through the register file), block
//! kernels of map bodies in every lane, guards that fail, user rules (not
//! compiled), and a program long enough for several functions at the
//! default size.

use crate::common;

use common::{check, point, rosenbrock, rosenbrock_closed, same_bits, RandomProgram};
use optic_ad::functor::forward;
use optic_ad::{nest, trace, Error, Executable, Hvp, Op, Program, Real, Registers, Tracer};
use proptest::prelude::*;

/// The elements of one block of an array map.
const B: usize = Executable::BLOCK;

fn same_all(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_bits(*x, *y))
}

/// `eval_f64` (native), the register code, the interpreter, and the
/// program compiled in functions of 1, 2, 3, 7, 50 and 97 instructions
/// (the last two longer than the 48 instructions after which a value is
/// evicted to the register file): the same results, or the same error.
fn all_agree(p: &Program, x: &[f64]) -> Result<(), TestCaseError> {
    let p = &Executable::new(p.clone());
    let (whole, _) = p.native_instructions();
    prop_assert!(whole.is_some(), "a program without user rules compiles");
    let want = p.eval(x);
    let mut regs = Registers::new();
    let mut native = vec![0.0; p.n_outputs()];
    let got = p.eval_f64(&mut regs, x, &mut native);
    let mut reference = vec![0.0; p.n_outputs()];
    let by_registers = p.eval_f64_registers(&mut Registers::new(), x, &mut reference);
    match (&want, &got, &by_registers) {
        (Ok(w), Ok(()), Ok(())) => {
            prop_assert!(
                same_all(w, &native),
                "native {native:?} vs interpreter {w:?}"
            );
            prop_assert!(same_all(w, &reference));
        }
        (Err(e), Err(f), Err(g)) => {
            prop_assert_eq!(e, f);
            prop_assert_eq!(e, g);
        }
        _ => prop_assert!(false, "{want:?} / {got:?} / {by_registers:?}"),
    }
    for chunk in [1, 2, 3, 7, 50, 97] {
        let c = p.eval_f64_native_chunked(chunk, x);
        match (&want, c) {
            (Ok(w), Some(Ok(c))) => prop_assert!(same_all(w, &c), "chunk {chunk}: {c:?} vs {w:?}"),
            (Err(e), Some(Err(f))) => prop_assert_eq!(e, &f),
            (w, c) => prop_assert!(false, "chunk {chunk}: {w:?} vs {c:?}"),
        }
    }
    Ok(())
}

/// Random programs, their ∂⃖, ∂⃗ and ∂⃖² programs, and non-finite inputs.
#[test]
fn native_programs_agree_bit_for_bit() {
    let strategy = common::any_program().prop_flat_map(|p| {
        let n = p.n;
        (Just(p), point(n), point(n))
    });
    check(
        "native vs registers vs interpreter",
        256,
        strategy,
        |(f, x, v): (RandomProgram, Vec<f64>, Vec<f64>), _| {
            let p = &f.program;
            all_agree(p, &x)?;
            let joint = nest(p, 1).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut xj = x.clone();
            xj.extend(v.iter().cycle().take(p.n_outputs()));
            all_agree(&joint, &xj)?;
            let fwd = forward(p);
            let mut xf = x.clone();
            xf.extend(&v);
            all_agree(&fwd, &xf)?;
            let second = nest(p, 2).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let xs: Vec<f64> = x
                .iter()
                .chain(v.iter())
                .cycle()
                .take(second.n_inputs())
                .copied()
                .collect();
            all_agree(&second, &xs)?;
            let mut bad = x.clone();
            bad[0] = f64::NAN;
            all_agree(p, &bad)?;
            bad[0] = f64::NEG_INFINITY;
            all_agree(p, &bad)?;
            Ok(())
        },
    );
}

/// Random programs of arithmetic and `sqrt` only (the generator's `add`,
/// `sub`, `mul`, `neg` in the forms that never squash by `tanh`, `div` by
/// `1 + v²`, and `sqrt` of `1 + v²`): map bodies the native backend
/// compiles.
fn arithmetic_program() -> impl Strategy<Value = RandomProgram> {
    let step = (
        0usize..6,
        any::<proptest::sample::Index>(),
        any::<proptest::sample::Index>(),
        -2.0f64..2.0,
    )
        .prop_map(|(pick, a, b, constant)| {
            let (kind, variant) = [(0, 1), (1, 1), (2, 1), (4, 1), (3, 0), (9, 0)][pick];
            common::Step {
                kind,
                variant,
                a,
                b,
                c: b,
                k: 1,
                constant,
            }
        });
    (1usize..=4, 1usize..=3).prop_flat_map(move |(n, m)| {
        (
            prop::collection::vec(step.clone(), 3..=25),
            prop::collection::vec(any::<proptest::sample::Index>(), m - 1),
        )
            .prop_map(move |(steps, outs)| RandomProgram {
                program: common::build(n, m, 2.0, &steps, &outs),
                n,
                m,
                steps,
            })
    })
}

/// Random programs as map bodies: the native block kernel against the
/// register code over one block of 32 lanes, each lane its own point,
/// bit for bit; a guard that fails in any lane fails both. Half the bodies
/// come from [`arithmetic_program`]; the others call the transcendental
/// primitives, which a kernel runs in loops of their own between its
/// vector loops. Every body without user rules must compile, and at least
/// a quarter of all bodies must have calls.
#[test]
fn native_block_kernels_agree_bit_for_bit() {
    let compiled = std::cell::Cell::new(0u32);
    let with_calls = std::cell::Cell::new(0u32);
    let strategy = prop_oneof![common::any_program(), arithmetic_program()].prop_flat_map(|p| {
        let n = p.n;
        (Just(p), prop::collection::vec(point(n), B))
    });
    check(
        "block kernel vs register code",
        256,
        strategy,
        |(f, lanes): (RandomProgram, Vec<Vec<f64>>), _| {
            let p = &Executable::new(f.program.clone());
            let (_, block) = p.native_instructions();
            if block.is_none() {
                let custom = p.ops().any(|op| matches!(op, Op::Custom { .. }));
                prop_assert!(custom, "a body without user rules not compiled");
                return Ok(());
            }
            compiled.set(compiled.get() + 1);
            let calls = p.ops().any(|op| match op {
                Op::Apply { prim, .. } => !matches!(
                    prim.name(),
                    "add" | "sub" | "mul" | "div" | "neg" | "sqrt" | "abs" | "select"
                ),
                _ => false,
            });
            if calls {
                with_calls.set(with_calls.get() + 1);
            }
            let mut lanes = lanes;
            // Non-finite inputs in two lanes.
            lanes[5][0] = f64::NAN;
            lanes[9][0] = f64::INFINITY;
            let inputs: Vec<[f64; B]> = (0..p.n_inputs())
                .map(|k| std::array::from_fn(|l| lanes[l][k]))
                .collect();
            let mut native = vec![[0.0; B]; p.n_outputs()];
            let mut reference = vec![[0.0; B]; p.n_outputs()];
            let a = p.eval_f64_one_block(true, &inputs, &mut native);
            let b = p.eval_f64_one_block(false, &inputs, &mut reference);
            match (a, b) {
                (Some(Ok(())), Some(Ok(()))) => {
                    for (k, (n, r)) in native.iter().zip(&reference).enumerate() {
                        prop_assert!(same_all(n, r), "output {k}: {n:?} vs {r:?}");
                    }
                    // Each lane is the program at that lane's point.
                    for (l, x) in lanes.iter().enumerate() {
                        let want = p.eval(x).map_err(|e| TestCaseError::fail(e.to_string()))?;
                        for (k, w) in want.iter().enumerate() {
                            prop_assert!(same_bits(*w, native[k][l]), "lane {l}, output {k}");
                        }
                    }
                }
                (Some(Err(e)), Some(Err(g))) => prop_assert_eq!(e, g),
                (a, b) => prop_assert!(false, "native {a:?}, registers {b:?}"),
            }
            Ok(())
        },
    );
    eprintln!(
        "{} of 256 bodies compiled, {} of them with calls",
        compiled.get(),
        with_calls.get()
    );
    assert!(
        with_calls.get() >= 64,
        "{} of 256 bodies compiled with calls",
        with_calls.get()
    );
}

/// A traced branch as a map body: the lanes that take the other branch
/// fail the guard in the kernel as in the register code.
#[test]
fn kernel_guards_fail_in_any_lane() {
    let p = Executable::new(
        trace(
            |x: &[Tracer]| {
                let y = if x[0] > 1.0 { x[0] * x[0] } else { -x[0] };
                vec![y * 3.0 + x[1]]
            },
            &[2.0, 0.5],
        )
        .unwrap(),
    );
    let mut inputs = vec![[2.0; B], [1.0; B]];
    let mut y = vec![[0.0; B]];
    assert!(matches!(
        p.eval_f64_one_block(true, &inputs, &mut y),
        Some(Ok(()))
    ));
    assert!(y[0].iter().all(|&v| v == 13.0));
    inputs[0][17] = 0.5;
    let native = p.eval_f64_one_block(true, &inputs, &mut y).unwrap();
    let reference = p.eval_f64_one_block(false, &inputs, &mut y).unwrap();
    assert!(
        matches!(native, Err(Error::GuardFailed { index: 0, .. })),
        "{native:?}"
    );
    assert_eq!(native, reference);
}

use crate::rrule;

/// Programs with user rules are not compiled; `eval_f64` still gives the
/// interpreter's results through the register code.
#[test]
fn user_rules_keep_the_register_code() {
    let sp = rrule::softplus_rule();
    let p = trace(|x: &[Tracer]| vec![x[0].apply_rule(sp) * x[1]], &[0.3, 2.0]).unwrap();
    let p = Executable::new(p);
    assert_eq!(p.native_instructions(), (None, None));
    let mut out = [0.0];
    p.eval_f64(&mut Registers::new(), &[0.3, 2.0], &mut out)
        .unwrap();
    assert!(same_bits(out[0], p.eval(&[0.3, 2.0]).unwrap()[0]));
}

/// Rosenbrock at n = 2000: both stages of `Hvp` are several functions
/// long at the default size, and agree with the register code.
#[test]
fn long_programs_span_several_functions() {
    let x: Vec<f64> = (0..2000).map(|i| 0.5 + 0.3 * (i as f64).sin()).collect();
    let v: Vec<f64> = (0..2000).map(|i| (i as f64 * 0.7).cos()).collect();
    let mut h = Hvp::new(rosenbrock, &x).unwrap();
    let (left, right) = h.programs().unwrap();
    for p in [left, right] {
        let (whole, _) = p.native_instructions();
        // Functions are at most 1024 instructions long.
        assert!(whole.unwrap() > 4 * 1024, "{whole:?} instructions");
        let input: Vec<f64> = (0..p.n_inputs()).map(|i| (i as f64 * 0.37).cos()).collect();
        // Cut into functions of 97 instructions as well: values evicted
        // within a function and values crossing many cuts.
        let cut = p.eval_f64_native_chunked(97, &input).unwrap().unwrap();
        let mut native = vec![0.0; p.n_outputs()];
        let mut reference = vec![0.0; p.n_outputs()];
        p.eval_f64(&mut Registers::new(), &input, &mut native)
            .unwrap();
        p.eval_f64_registers(&mut Registers::new(), &input, &mut reference)
            .unwrap();
        assert!(same_all(&native, &reference));
        assert!(same_all(&cut, &reference));
    }
    // The driver on native code, against the closed form.
    h.linearize(&x).unwrap();
    let mut hv = vec![0.0; x.len()];
    h.apply(&v, &mut hv).unwrap();
    let (_, want) = rosenbrock_closed(&x, &v);
    for (got, want) in hv.iter().zip(&want) {
        approx::assert_relative_eq!(*got, *want, max_relative = 1e-12, epsilon = 1e-9);
    }
}

/// The array tier's maps run as kernels once hot (after 2¹⁶ elements): an
/// array gradient of Rosenbrock, evaluated 100 times at n = 1001, against
/// its closed form every time.
#[test]
fn array_maps_run_native() {
    use optic_ad::array::Array;
    fn f<A: Array>(x: &A) -> optic_ad::Result<A::Scalar> {
        let n = x.len();
        let (a, b) = (x.slice(0, n - 1)?, x.slice(1, n - 1)?);
        let t = a.map2(&b, |a, b| {
            let (u, w) = (b - a * a, -a + 1.0);
            u * u * 100.0 + w * w
        })?;
        Ok(t.sum())
    }
    let x: Vec<f64> = (0..1001).map(|i| 0.5 + 0.3 * (i as f64).sin()).collect();
    let mut grad = optic_ad::Gradient::array(f, &x).unwrap();
    let mut g = vec![0.0; x.len()];
    assert_eq!(grad.native_kernels().0, 0, "cold at first");
    for _ in 0..100 {
        grad.eval(&x, &mut g).unwrap();
        check_rosenbrock_gradient(&x, &g);
    }
    let (compiled, maps) = grad.native_kernels();
    assert!(compiled >= 1, "{compiled} of {maps} map bodies compiled");
}

fn check_rosenbrock_gradient(x: &[f64], g: &[f64]) {
    let (want, _) = rosenbrock_closed(x, &vec![0.0; x.len()]);
    for (got, want) in g.iter().zip(&want) {
        approx::assert_relative_eq!(*got, *want, max_relative = 1e-12, epsilon = 1e-12);
    }
}

/// `Derivatives<U3>` with the feature runs ∂⃗³ of the trace through
/// `eval_f64` (native once hot): against the closed form of f‴ of
/// sin(x)·eˣ, `2eˣ(cos x − sin x)`, over 2000 points (so that the last
/// thousand run native code); and through a branch whose guard fails,
/// so that it re-traces, against the closed forms of both branches.
#[test]
fn derivatives_run_native_and_retrace() {
    use optic_ad::Derivatives;
    use typenum::U3;
    let mut d = Derivatives::<U3, _>::new(|t: Tracer| t.sin() * t.exp(), 0.7).unwrap();
    for i in 0..2000 {
        let x = -3.0 + 6.0 * i as f64 / 2000.0;
        let got = d.eval(x).unwrap();
        let e = x.exp();
        let want = [
            x.sin() * e,
            e * (x.sin() + x.cos()),
            2.0 * e * x.cos(),
            2.0 * e * (x.cos() - x.sin()),
        ];
        for k in 0..4 {
            approx::assert_relative_eq!(got[k], want[k], max_relative = 1e-13, epsilon = 1e-13);
        }
    }
    // x³ for x > 0, −x² otherwise: the guard fails whenever x changes side.
    let mut b =
        Derivatives::<U3, _>::new(|t: Tracer| if t > 0.0 { t * t * t } else { -(t * t) }, 1.0)
            .unwrap();
    // Alternating sides re-traces at every call; runs of 1500 calls on one
    // side get hot (native) before the guard fails.
    for i in 0..6000 {
        let positive = if i < 3000 {
            i % 2 == 0
        } else {
            (i / 1500) % 2 == 0
        };
        let x = if positive {
            0.5 + i as f64 * 1e-4
        } else {
            -0.5 - i as f64 * 1e-4
        };
        let got = b.eval(x).unwrap();
        let want = if x > 0.0 {
            [x * x * x, 3.0 * x * x, 6.0 * x, 6.0]
        } else {
            [-(x * x), -2.0 * x, -2.0, 0.0]
        };
        for k in 0..4 {
            approx::assert_relative_eq!(got[k], want[k], max_relative = 1e-14, epsilon = 1e-14);
        }
    }
}
