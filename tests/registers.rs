//! The lowered `f64` evaluator (`Program::eval_f64`: register code with
//! liveness-based registers, immediates and fused products) against the
//! interpreter (`Program::eval_with`), bit for bit: on random programs and
//! points, on the derived programs the drivers run (gradients, Hessian-vector
//! products, both stages of `Hvp`), on programs with user rules and with
//! guards, and on non-finite inputs.

use crate::common;

use common::{check, point, rosenbrock, same_bits, RandomProgram};
use optic_ad::functor::forward;
use optic_ad::{nest, trace, Error, Executable, Hvp, Program, Real, Registers, Tracer, Workspace};
use proptest::prelude::*;

/// Both evaluators at `x`: the same results (`same_bits`), or the same
/// error.
fn same(p: &Program, x: &[f64], regs: &mut Registers) -> Result<(), TestCaseError> {
    let p = &Executable::new(p.clone());
    let want = p.eval(x);
    let mut got = vec![0.0; p.n_outputs()];
    let r = p.eval_f64(regs, x, &mut got);
    match (want, r) {
        (Ok(w), Ok(())) => {
            for (i, (a, b)) in w.iter().zip(&got).enumerate() {
                prop_assert!(same_bits(*a, *b), "output {}: {:e} vs {:e}", i, a, b);
            }
        }
        (Err(e), Err(f)) => prop_assert_eq!(e, f),
        (w, g) => prop_assert!(false, "interpreter {:?}, registers {:?}", w, g),
    }
    Ok(())
}

/// Random programs and every derived program the drivers build from them.
#[test]
fn registers_agree_with_the_interpreter_bit_for_bit() {
    let strategy = common::any_program().prop_flat_map(|p| {
        let n = p.n;
        (Just(p), point(n), point(n))
    });
    check(
        "eval_f64 vs eval, bit for bit",
        512,
        strategy,
        |(f, x, v): (RandomProgram, Vec<f64>, Vec<f64>), _| {
            let p = &f.program;
            let mut regs = Registers::new();
            same(p, &x, &mut regs)?;
            // One Registers reused across programs of other sizes.
            let joint = nest(p, 1).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let m = p.n_outputs();
            let mut xj = x.clone();
            xj.extend(v.iter().cycle().take(m));
            same(&joint, &xj, &mut regs)?;
            let fwd = forward(p);
            let mut xf = x.clone();
            xf.extend(&v);
            same(&fwd, &xf, &mut regs)?;
            let second = nest(p, 2).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let xs: Vec<f64> = x
                .iter()
                .chain(v.iter())
                .cycle()
                .take(second.n_inputs())
                .copied()
                .collect();
            same(&second, &xs, &mut regs)?;
            // Non-finite inputs.
            let mut bad = x.clone();
            bad[0] = f64::NAN;
            same(p, &bad, &mut regs)?;
            bad[0] = f64::INFINITY;
            same(p, &bad, &mut regs)?;
            Ok(())
        },
    );
}

/// The two stages of the Hessian-vector product of Rosenbrock, and the
/// register count: far below the program length.
#[test]
fn hvp_stages_agree_and_use_few_registers() {
    let x: Vec<f64> = (0..50).map(|i| 0.5 + 0.3 * (i as f64).sin()).collect();
    let h = Hvp::new(rosenbrock, &x).unwrap();
    let (left, right) = h.programs().unwrap();
    let mut regs = Registers::new();
    let mut out_l = vec![0.0; left.n_outputs()];
    left.eval_f64(&mut regs, &x, &mut out_l).unwrap();
    let want_l = left.eval(&x).unwrap();
    assert!(out_l.iter().zip(&want_l).all(|(a, b)| same_bits(*a, *b)));
    let rin: Vec<f64> = (0..right.n_inputs())
        .map(|i| (i as f64 * 0.37).cos())
        .collect();
    let mut out_r = vec![0.0; right.n_outputs()];
    right.eval_f64(&mut regs, &rin, &mut out_r).unwrap();
    let want_r = right.eval(&rin).unwrap();
    assert!(out_r.iter().zip(&want_r).all(|(a, b)| same_bits(*a, *b)));
    for p in [left, right] {
        let (code, n_regs) = p.register_code_size();
        assert!(code <= p.len(), "{code} instructions for {}", p.len());
        assert!(
            n_regs < p.len() / 2,
            "{n_regs} registers for {} values",
            p.len()
        );
    }
}

/// A random program applied along a vector, element after element, its
/// first output summed (a running sum, the recurrence of every reduction)
/// and its other outputs returned: a loop body repeated `len` times.
fn along(p: &Program, len: usize) -> impl Fn(&[Tracer]) -> Vec<Tracer> + '_ {
    move |x: &[Tracer]| {
        let (n, m) = (p.n_inputs(), p.n_outputs());
        let mut ws = Workspace::new();
        let mut y = vec![x[0]; m];
        let mut s = x[0] * 0.5;
        let mut outs = Vec::new();
        for i in 0..len {
            let args: Vec<Tracer> = (0..n).map(|j| x[(i + j) % x.len()]).collect();
            p.eval_with(&mut ws, &args, &mut y)
                .expect("the body runs on tracers");
            s += y[0];
            outs.extend_from_slice(&y[1..]);
        }
        outs.insert(0, s);
        outs
    }
}

/// Long programs (several scheduling windows): a random body repeated
/// along a vector, its gradient and its Hessian-vector product stages.
/// Their register code uses the windows' scratch registers and strided
/// runs, which the short random programs above never reach.
#[test]
fn long_loop_programs_agree() {
    // Enough elements for about 20 000 traced instructions (a body whose
    // outputs fold to constants traces to few: those are skipped).
    let strategy = common::any_program().prop_flat_map(|p| {
        let short = trace(along(&p.program, 100), &vec![0.5; 100 + p.n]).map_or(1, |q| q.len());
        let len = (100 * 20_000 / short.max(1)).clamp(100, 20_000);
        let n = len + p.n;
        (Just(p), Just(len), point(n), point(n))
    });
    check(
        "eval_f64 vs eval on long loop programs",
        24,
        strategy,
        |(f, len, x, v): (RandomProgram, usize, Vec<f64>, Vec<f64>), _| {
            let body = &f.program;
            let q = trace(along(body, len), &x).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let q = Executable::new(q);
            if q.len() < 2 * 8192 {
                return Ok(());
            }
            let mut regs = Registers::new();
            same(&q, &x, &mut regs)?;
            // The native backend compiles the decoded strided runs.
            #[cfg(feature = "jit")]
            if let (Some(got), Ok(want)) = (q.eval_f64_native_chunked(4096, &x), q.eval(&x)) {
                let got = got.map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(want.iter().zip(&got).all(|(a, b)| same_bits(*a, *b)));
            }
            let joint = nest(&*q, 1).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut xj = x.clone();
            xj.extend(v.iter().cycle().take(q.n_outputs()));
            same(&joint, &xj, &mut regs)?;
            let scalar = |t: &[Tracer]| along(body, len)(t)[0];
            let h = Hvp::new(scalar, &x).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let (left, right) = h.programs().unwrap();
            same(left, &x, &mut regs)?;
            let rin: Vec<f64> = v.iter().cycle().take(right.n_inputs()).copied().collect();
            same(right, &rin, &mut regs)?;
            Ok(())
        },
    );
}

/// A traced branch: the guard fails in both evaluators alike.
#[test]
fn guards_fail_alike() {
    let p = trace(
        |x: &[Tracer]| {
            let y = if x[0] > 1.0 { x[0] * x[0] } else { -x[0] };
            vec![y * 3.0 + x[1]]
        },
        &[2.0, 0.5],
    )
    .unwrap();
    let p = Executable::new(p);
    let mut regs = Registers::new();
    let mut out = [0.0];
    p.eval_f64(&mut regs, &[3.0, 1.0], &mut out).unwrap();
    assert_eq!(out[0], 28.0);
    let r = p.eval_f64(&mut regs, &[0.5, 1.0], &mut out);
    assert!(
        matches!(r, Err(Error::GuardFailed { index: 0, .. })),
        "{r:?}"
    );
    assert_eq!(p.eval(&[0.5, 1.0]).unwrap_err(), r.unwrap_err());
    // Wrong lengths.
    assert!(matches!(
        p.eval_f64(&mut regs, &[1.0], &mut out),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        p.eval_f64(&mut regs, &[3.0, 1.0], &mut []),
        Err(Error::LengthMismatch { .. })
    ));
}

use crate::rrule;

/// User rules of one and of several arguments (softplus and log-sum-exp
/// from the rrule example) inside a derived program.
#[test]
fn user_rules_agree() {
    let sp = rrule::softplus_rule();
    let lse = rrule::lse_rule();
    let p = trace(
        |x: &[Tracer]| {
            let s = x[0].apply_rule(sp) * x[1];
            vec![Tracer::apply_rule_n(lse, &[s, x[1]]) * x[0]]
        },
        &[0.3, 2.0],
    )
    .unwrap();
    let j = Executable::new(nest(&p, 2).unwrap());
    let mut regs = Registers::new();
    let x: Vec<f64> = (0..j.n_inputs()).map(|i| 0.2 + 0.1 * i as f64).collect();
    let want = j.eval(&x).unwrap();
    let mut got = vec![0.0; j.n_outputs()];
    j.eval_f64(&mut regs, &x, &mut got).unwrap();
    assert!(want.iter().zip(&got).all(|(a, b)| same_bits(*a, *b)));
}

/// `Hvp::apply_many` (four directions per pass, in lanes) against
/// `Hvp::apply` one direction at a time, bit for bit, for 1 to 9 directions
/// (full and partial groups of four), on random programs; and `hessian`
/// (which runs its columns the same way) against `apply` with unit vectors.
#[test]
fn apply_many_agrees_with_apply() {
    let strategy = common::scalar_program().prop_flat_map(|p| {
        let n = p.n;
        (Just(p), point(n), prop::collection::vec(point(n), 1..=9))
    });
    check(
        "apply_many vs apply, bit for bit",
        256,
        strategy,
        |(f, x, dirs): (RandomProgram, Vec<f64>, Vec<Vec<f64>>), _| {
            let p = &f.program;
            let n = x.len();
            let g = |t: &[Tracer]| p.eval(t).unwrap()[0];
            let mut h = Hvp::new(g, &x).map_err(|e| TestCaseError::fail(e.to_string()))?;
            h.linearize(&x)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let vs = dirs.concat();
            let mut many = vec![0.0; vs.len()];
            h.apply_many(&vs, &mut many)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut one = vec![0.0; n];
            for (j, v) in dirs.iter().enumerate() {
                h.apply(v, &mut one)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                for i in 0..n {
                    let (a, b) = (many[j * n + i], one[i]);
                    prop_assert!(
                        same_bits(a, b),
                        "direction {}, entry {}: {:e} vs {:e}",
                        j,
                        i,
                        a,
                        b
                    );
                }
            }
            let hess = optic_ad::hessian(g, &x).map_err(|e| TestCaseError::fail(e.to_string()))?;
            for (i, row) in hess.iter().enumerate() {
                let mut e = vec![0.0; n];
                e[i] = 1.0;
                h.apply(&e, &mut one)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                for (a, b) in row.iter().zip(&one) {
                    prop_assert!(same_bits(*a, *b), "Hessian row {}: {:e} vs {:e}", i, a, b);
                }
            }
            Ok(())
        },
    );
}

/// `apply_many`'s errors: before `linearize`, and lengths that are not a
/// multiple of `n` or do not match.
#[test]
fn apply_many_errors() {
    let mut h = Hvp::new(|x: &[Tracer]| x[0] * x[1], &[1.0, 2.0]).unwrap();
    let mut out = [0.0; 4];
    assert_eq!(
        h.apply_many(&[1.0, 0.0, 0.0, 1.0], &mut out),
        Err(Error::NotLinearized)
    );
    h.linearize(&[1.0, 2.0]).unwrap();
    assert!(matches!(
        h.apply_many(&[1.0, 0.0, 0.0], &mut out[..3]),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        h.apply_many(&[1.0, 0.0, 0.0, 1.0], &mut out[..2]),
        Err(Error::LengthMismatch { .. })
    ));
    h.apply_many(&[], &mut []).unwrap();
    h.apply_many(&[1.0, 0.0, 0.0, 1.0], &mut out).unwrap();
    assert_eq!(out, [0.0, 1.0, 1.0, 0.0]);
}

/// A dense Hessian large enough that its groups of four columns run on
/// several threads (n = 23: six groups, the last partial): every entry
/// equals `Hvp::apply` with the unit vector bit for bit, and the closed form
/// of Rosenbrock's Hessian (tridiagonal: 1200xᵢ² − 400xᵢ₊₁ + 2 [+ 200] on the
/// diagonal, −400xᵢ beside it) to rounding.
#[test]
fn hessian_columns_on_several_threads() {
    let n = 23;
    let x: Vec<f64> = (0..n).map(|i| 0.5 + 0.3 * (i as f64 * 0.7).sin()).collect();
    let h = optic_ad::hessian(rosenbrock, &x).unwrap();
    let mut hv = Hvp::new(rosenbrock, &x).unwrap();
    hv.linearize(&x).unwrap();
    let mut col = vec![0.0; n];
    for i in 0..n {
        let mut e = vec![0.0; n];
        e[i] = 1.0;
        hv.apply(&e, &mut col).unwrap();
        assert!(
            h[i].iter().zip(&col).all(|(a, b)| same_bits(*a, *b)),
            "row {i}"
        );
        for j in 0..n {
            let want = if i == j {
                let mut d = 0.0;
                if i + 1 < n {
                    d += 1200.0 * x[i] * x[i] - 400.0 * x[i + 1] + 2.0;
                }
                if i > 0 {
                    d += 200.0;
                }
                d
            } else if j == i + 1 {
                -400.0 * x[i]
            } else if i == j + 1 {
                -400.0 * x[j]
            } else {
                0.0
            };
            let scale = want.abs().max(1.0);
            assert!(
                (h[i][j] - want).abs() <= 1e-12 * scale,
                "({i},{j}): {} vs {want}",
                h[i][j]
            );
        }
    }
}
