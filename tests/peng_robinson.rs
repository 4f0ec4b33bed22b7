//! The Peng–Robinson example's checks: the derivatives of the Helmholtz
//! energy against hand-derived closed forms, num-dual and finite
//! differences; the exact critical constants against an independent
//! solution of their cubic; and the recovered critical points against the
//! table.

#[path = "../examples/peng_robinson.rs"]
#[allow(dead_code)]
mod peng_robinson;

use approx::assert_relative_eq;
use num_dual::{Dual3_64, HyperDual64};
use optic_ad::{Derivatives, Real, Tracer};
use peng_robinson::{
    a_v, a_vv, a_vvv, critical_point, newton_system, parse_fluids, run, universal_constants, Fluid,
    PengRobinson, PrError, State, CRITICAL_CONSTANTS_CSV, MAX_ITERATIONS, R, STEP_TOLERANCE,
};
use typenum::U4;

fn fluids() -> Vec<Fluid> {
    parse_fluids(CRITICAL_CONSTANTS_CSV).expect("the committed table parses")
}

/// Points around each fluid's critical point: T from 0.7 to 1.5 Tc, V from
/// 1.5 b (dense liquid) to 20 b (gas).
fn points(eos: &PengRobinson) -> Vec<(f64, f64)> {
    let mut pts = Vec::new();
    for &tr in &[0.7, 1.0, 1.5] {
        for &vb in &[1.5, 3.95, 20.0] {
            pts.push((tr * eos.tc, vb * eos.b));
        }
    }
    pts
}

/// A closed-form derivative as the sum of its repulsive and attractive
/// terms: `value` is their sum, `scale` the sum of their magnitudes, so
/// that a comparison near the critical point, where they cancel, is
/// relative to the terms and not to their (vanishing) difference.
#[derive(Debug, Clone, Copy)]
struct Closed {
    value: f64,
    scale: f64,
}

fn closed(repulsive: f64, attractive: f64) -> Closed {
    Closed {
        value: repulsive + attractive,
        scale: repulsive.abs() + attractive.abs(),
    }
}

/// The derivatives of `p = RT/(V − b) − aα/D`, `D = V² + 2bV − b²`,
/// `s = D′ = 2V + 2b`, derived by hand:
///
/// ```text
/// p_V   = −RT/(V−b)² + aα s/D²
/// p_VV  = 2RT/(V−b)³ + aα (2D − 2s²)/D³
/// p_VVV = −6RT/(V−b)⁴ + aα (6s³ − 12sD)/D⁴
/// p_VT, p_VVT: the same with RT → R and α → α′,
/// α′(T) = −κ (1 + κ(1 − √(T/Tc))) / √(T Tc).
/// ```
struct ClosedForms {
    p: Closed,
    p_v: Closed,
    p_vv: Closed,
    p_vvv: Closed,
    p_vt: Closed,
    p_vvt: Closed,
}

fn closed_forms(e: &PengRobinson, t: f64, v: f64) -> ClosedForms {
    let (a, b) = (e.a, e.b);
    let d = v * v + 2.0 * b * v - b * b;
    let s = 2.0 * v + 2.0 * b;
    let alpha = e.alpha(t);
    let alpha_t = -e.kappa * (1.0 + e.kappa * (1.0 - (t / e.tc).sqrt())) / (t * e.tc).sqrt();
    let vb = v - b;
    let g1 = s / (d * d);
    let g2 = (2.0 * d - 2.0 * s * s) / (d * d * d);
    let g3 = (6.0 * s * s * s - 12.0 * s * d) / (d * d * d * d);
    ClosedForms {
        p: closed(R * t / vb, -a * alpha / d),
        p_v: closed(-R * t / (vb * vb), a * alpha * g1),
        p_vv: closed(2.0 * R * t / vb.powi(3), a * alpha * g2),
        p_vvv: closed(-6.0 * R * t / vb.powi(4), a * alpha * g3),
        p_vt: closed(-R / (vb * vb), a * alpha_t * g1),
        p_vvt: closed(2.0 * R / vb.powi(3), a * alpha_t * g2),
    }
}

/// The pressure, generic, for num-dual: `RT/(V − b) − aα(T)/D`.
fn pressure<T: Real>(e: &PengRobinson, t: T, v: T) -> T {
    let b = e.b;
    t * R / (v - b) - e.alpha(t) * e.a / (v * v + v * (2.0 * b) - b * b)
}

/// `got` equals `want` to `tol` relative to the size of its terms.
fn assert_close(got: f64, want: Closed, tol: f64, what: &str) {
    assert!(
        (got - want.value).abs() <= tol * want.scale,
        "{what}: {got:e} vs {:e} (terms of size {:e})",
        want.value,
        want.scale
    );
}

/// Check (1): every derivative of A that Newton uses, from nested reverse
/// passes, against the hand-derived closed forms, at nine points for each
/// fluid. `A_V = −p`, `A_VV = −p_V`, `A_VVV = −p_VV`, and the Jacobian
/// `[[A_VVT, A_VVV], [A_VVVT, A_VVVV]] = −[[p_VT, p_VV], [p_VVT, p_VVV]]`.
/// Each is a few dozen roundings of terms of the size `scale`: 1e-14 of
/// the scale is a strict bound (the largest error seen is 5e-16).
#[test]
fn nested_reverse_derivatives_match_closed_forms() {
    for fluid in fluids() {
        let e = PengRobinson::new(&fluid);
        for (t, v) in points(&e) {
            let c = closed_forms(&e, t, v);
            let at = format!("{} at T = {t}, V = {v:e}", fluid.name);
            assert_close(
                -a_v(&e, &State { t, v }).unwrap(),
                c.p,
                1e-14,
                &format!("p, {at}"),
            );
            assert_close(
                -a_vv(&e, &State { t, v }).unwrap(),
                c.p_v,
                1e-14,
                &format!("p_V, {at}"),
            );
            assert_close(
                -a_vvv(&e, &State { t, v }).unwrap(),
                c.p_vv,
                1e-14,
                &format!("p_VV, {at}"),
            );
            let (f, j) = newton_system(&e, t, v).unwrap();
            assert_close(-f[0], c.p_v, 1e-14, &format!("F₀, {at}"));
            assert_close(-f[1], c.p_vv, 1e-14, &format!("F₁, {at}"));
            assert_close(-j[0][0], c.p_vt, 1e-14, &format!("A_VVT, {at}"));
            assert_close(-j[0][1], c.p_vv, 1e-14, &format!("A_VVV, {at}"));
            assert_close(-j[1][0], c.p_vvt, 1e-14, &format!("A_VVVT, {at}"));
            assert_close(-j[1][1], c.p_vvv, 1e-14, &format!("A_VVVV, {at}"));
        }
    }
}

/// The closed forms themselves against num-dual, which shares no code
/// with them or with the tracer: `Dual3_64` in V gives `p_V`, `p_VV`,
/// `p_VVV`; `HyperDual64` with ε₁ along V and ε₂ along T gives `p_VT`;
/// and `p_VVT` is a central difference in T of `Dual3_64`'s `p_VV` (step
/// 1e-4 T: truncation about 1e-9 of the terms).
#[test]
fn closed_forms_match_num_dual() {
    for fluid in fluids() {
        let e = PengRobinson::new(&fluid);
        for (t, v) in points(&e) {
            let c = closed_forms(&e, t, v);
            let at = format!("{} at T = {t}, V = {v:e}", fluid.name);
            let d3 = |t: f64| pressure(&e, Dual3_64::from_re(t), Dual3_64::new(v, 1.0, 0.0, 0.0));
            let d = d3(t);
            assert_close(d.re, c.p, 1e-14, &format!("p, {at}"));
            assert_close(d.v1, c.p_v, 1e-14, &format!("p_V, {at}"));
            assert_close(d.v2, c.p_vv, 1e-14, &format!("p_VV, {at}"));
            assert_close(d.v3, c.p_vvv, 1e-14, &format!("p_VVV, {at}"));
            let h = pressure(
                &e,
                HyperDual64::new(t, 0.0, 1.0, 0.0),
                HyperDual64::new(v, 1.0, 0.0, 0.0),
            );
            assert_close(h.eps1eps2, c.p_vt, 1e-14, &format!("p_VT, {at}"));
            let dt = 1e-4 * t;
            let fd = (d3(t + dt).v2 - d3(t - dt).v2) / (2.0 * dt);
            assert_close(fd, c.p_vvt, 1e-8, &format!("p_VVT, {at}"));
        }
    }
}

/// Taylor mode gives the pure V-derivatives by another route (one jet of
/// degree 4 in V, T held fixed): they agree with the nested reverse passes.
#[test]
fn taylor_mode_agrees_with_nested_reverse_in_v() {
    for fluid in fluids() {
        let e = PengRobinson::new(&fluid);
        for (t, v) in points(&e) {
            let c = closed_forms(&e, t, v);
            let mut jet =
                Derivatives::<U4, _>::new(|v: Tracer| e.helmholtz(Tracer::cst(t), v), v).unwrap();
            let d = jet.eval(v).unwrap(); // [A, A_V, A_VV, A_VVV, A_VVVV]
            let (_, j) = newton_system(&e, t, v).unwrap();
            let at = format!("{} at T = {t}, V = {v:e}", fluid.name);
            let tol = |c: Closed| 1e-14 * c.scale;
            assert!(
                (d[1] - a_v(&e, &State { t, v }).unwrap()).abs() <= tol(c.p),
                "A_V, {at}"
            );
            assert!(
                (d[2] - a_vv(&e, &State { t, v }).unwrap()).abs() <= tol(c.p_v),
                "A_VV, {at}"
            );
            assert!((d[3] - j[0][1]).abs() <= tol(c.p_vv), "A_VVV, {at}");
            assert!((d[4] - j[1][1]).abs() <= tol(c.p_vvv), "A_VVVV, {at}");
        }
    }
}

/// The finite-difference check of the order below: the T-column of the
/// Jacobian (`A_VVT`, `A_VVVT`) against central differences in T of the
/// nested-reverse `A_VV` and `A_VVV`.
#[test]
fn jacobian_t_column_matches_finite_differences() {
    for fluid in fluids() {
        let e = PengRobinson::new(&fluid);
        for (t, v) in points(&e) {
            let c = closed_forms(&e, t, v);
            let (_, j) = newton_system(&e, t, v).unwrap();
            let h = 1e-4 * t;
            let fd_vv = (a_vv(&e, &State { t: t + h, v }).unwrap()
                - a_vv(&e, &State { t: t - h, v }).unwrap())
                / (2.0 * h);
            let fd_vvv = (a_vvv(&e, &State { t: t + h, v }).unwrap()
                - a_vvv(&e, &State { t: t - h, v }).unwrap())
                / (2.0 * h);
            assert!(
                (j[0][0] - fd_vv).abs() <= 1e-8 * c.p_vt.scale,
                "{} A_VVT",
                fluid.name
            );
            assert!(
                (j[1][0] - fd_vvv).abs() <= 1e-8 * c.p_vvt.scale,
                "{} A_VVVT",
                fluid.name
            );
        }
    }
}

/// Check (3), the constants: an independent solution of the cubic in
/// `Ωb` (`64Ωb³ + 6Ωb² + 12Ωb − 1 = 0`, the same conditions eliminated
/// for `B` instead of `η`) by Newton in plain f64 from the printed 0.07780,
/// against the closed form; and the cubic in Z with `A = Ωa`, `B = Ωb` has
/// the triple root `Zc`.
#[test]
fn universal_constants_solve_the_critical_cubic() {
    let u = universal_constants();
    let mut ob = 0.07780_f64;
    for _ in 0..50 {
        let step = (((64.0 * ob + 6.0) * ob + 12.0) * ob - 1.0) / ((192.0 * ob + 12.0) * ob + 12.0);
        ob -= step;
        if step.abs() <= 1e-17 {
            break;
        }
    }
    assert_relative_eq!(ob, u.omega_b, max_relative = 1e-15);
    assert_relative_eq!((1.0 - ob) / 3.0, u.zc, max_relative = 1e-15);
    // η solves 3η³ + 3η² + 3η − 1 = 0 to rounding.
    let eta = u.eta;
    assert!((((3.0 * eta + 3.0) * eta + 3.0) * eta - 1.0).abs() <= 4.0 * f64::EPSILON);
    // Z³ − (1 − B) Z² + (A − 3B² − 2B) Z − (AB − B² − B³) = (Z − Zc)³.
    let (a, b, z) = (u.omega_a, u.omega_b, u.zc);
    assert_relative_eq!(1.0 - b, 3.0 * z, max_relative = 1e-15);
    assert_relative_eq!(a - 3.0 * b * b - 2.0 * b, 3.0 * z * z, max_relative = 1e-15);
    assert_relative_eq!(a * b - b * b - b * b * b, z * z * z, max_relative = 1e-14);
    // The value of Zc to 20 digits (the same closed form in 40-digit
    // arithmetic): 0.30740130869870384801.
    assert!((u.zc - 0.307_401_308_698_703_85).abs() <= 1e-15, "{}", u.zc);
    // The rounded constants of the 1976 paper are those to 4 and 5 digits.
    assert!((u.omega_a - 0.45724).abs() < 5e-6 && (u.omega_b - 0.07780).abs() < 5e-6);
}

/// Check (2) and (3): every fluid recovers the table's Tc and Pc to 1e-10
/// relative (in fact to a few ulps), its Zc is the cubic's root, and its
/// Vc is `b/η`.
#[test]
fn recovers_the_table_critical_points() {
    let u = universal_constants();
    let rows = run().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.fluid.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "methane",
            "ethane",
            "propane",
            "n-butane",
            "carbon dioxide",
            "nitrogen"
        ]
    );
    for r in &rows {
        let name = &r.fluid.name;
        assert!(
            r.tc_rel_err() <= 1e-10,
            "{name}: Tc {} vs {}",
            r.found.t,
            r.fluid.tc
        );
        assert!(
            r.pc_rel_err() <= 1e-10,
            "{name}: Pc {} vs {}",
            r.found.p,
            r.fluid.pc
        );
        // The few ulps: Tc and Pc are found to within 1e-14 (3e-15 at most).
        assert!(r.tc_rel_err().max(r.pc_rel_err()) <= 1e-14, "{name}");
        assert_relative_eq!(r.found.zc(), u.zc, max_relative = 1e-12);
        assert_relative_eq!(r.found.v, r.eos.b / u.eta, max_relative = 1e-10);
        // And Vc = Ωb R Tc / (Pc η) from the table's constants.
        let vc = u.omega_b * R * r.fluid.tc / (r.fluid.pc * u.eta);
        assert_relative_eq!(r.found.v, vc, max_relative = 1e-10);
        // The conditions hold there: p_V and p_VV vanish against their terms.
        let c = closed_forms(&r.eos, r.found.t, r.found.v);
        assert!(
            c.p_v.value.abs() <= 1e-14 * c.p_v.scale,
            "{name}: p_V = {:e}",
            c.p_v.value
        );
        assert!(
            c.p_vv.value.abs() <= 1e-14 * c.p_vv.scale,
            "{name}: p_VV = {:e}",
            c.p_vv.value
        );
        assert!(*r.found.steps.last().unwrap() < STEP_TOLERANCE);
        assert_eq!(r.found.steps.len(), r.found.iterations);
        assert!(
            r.found.iterations <= 8,
            "{name}: {} iterations",
            r.found.iterations
        );
    }
}

/// Quadratic convergence: once the step is below 1e-2 and above the
/// rounding floor, each step is at most a constant times the square of
/// the one before (the constant is about 6 for these fluids; a method
/// with an inexact Jacobian would be linear, the ratio growing without
/// bound).
#[test]
fn newton_converges_quadratically() {
    for r in run().unwrap() {
        let s = &r.found.steps;
        let mut checked = 0;
        for k in 1..s.len() {
            if s[k - 1] <= 1e-2 && s[k] >= 1e-13 {
                assert!(
                    s[k] <= 20.0 * s[k - 1] * s[k - 1],
                    "{}: steps {s:?} at {k}",
                    r.fluid.name
                );
                checked += 1;
            }
        }
        assert!(
            checked >= 2,
            "{}: only {checked} pairs in {s:?}",
            r.fluid.name
        );
    }
}

/// The 1e-10 check has teeth: with the rounded Ωa = 0.45724 and
/// Ωb = 0.07780 of the 1976 paper the same Newton method lands 2–3e-5
/// away from the table's Tc (and 7–8e-5 from its Pc).
#[test]
fn rounded_constants_miss_the_table() {
    for fluid in fluids() {
        let e = PengRobinson::with_constants(&fluid, 0.45724, 0.07780);
        let c = critical_point(&e, e.start()).unwrap();
        let err = ((c.t - fluid.tc) / fluid.tc).abs();
        assert!((1e-5..1e-4).contains(&err), "{}: {err:e}", fluid.name);
    }
}

/// Other starts that do not use the answer converge to the same point:
/// van der Waals' own critical volume 3b, a denser 2b, and a colder T.
#[test]
fn other_starts_reach_the_same_point() {
    for fluid in fluids() {
        let e = PengRobinson::new(&fluid);
        let [t0, _] = e.start();
        let reference = critical_point(&e, e.start()).unwrap();
        for start in [[t0, 3.0 * e.b], [t0, 2.0 * e.b], [0.6 * t0, 4.0 * e.b]] {
            let c = critical_point(&e, start).unwrap();
            assert_relative_eq!(c.t, reference.t, max_relative = 1e-14);
            assert_relative_eq!(c.v, reference.v, max_relative = 1e-14);
        }
    }
}

/// Bad input is a clear error: a start outside the domain, a start from
/// which Newton leaves it, and malformed tables.
#[test]
fn bad_input_is_an_error() {
    let fluid = &fluids()[0];
    let e = PengRobinson::new(fluid);
    for start in [[300.0, 0.5 * e.b], [-1.0, 4.0 * e.b], [f64::NAN, 4.0 * e.b]] {
        assert!(matches!(
            critical_point(&e, start),
            Err(PrError::BadStart { .. })
        ));
    }
    // Plain Newton has a bounded basin: from just above b it steps below
    // b, and from the dilute side (8b) it wanders without converging.
    let r = critical_point(&e, [e.start()[0], 1.0001 * e.b]);
    assert!(matches!(r, Err(PrError::LeftDomain { .. })), "{r:?}");
    let r = critical_point(&e, [e.start()[0], 8.0 * e.b]);
    assert!(matches!(r, Err(PrError::NotConverged { .. })), "{r:?}");
    let data_err = |csv: &str| match parse_fluids(csv) {
        Err(PrError::Data { line, .. }) => line,
        other => panic!("{csv:?}: {other:?}"),
    };
    assert_eq!(data_err(""), 0);
    assert_eq!(data_err("# only a comment\n"), 0);
    assert_eq!(data_err("name,Tc,Pc,omega\n"), 1);
    assert_eq!(data_err("name,Tc_K,Pc_bar,omega\n"), 0);
    assert_eq!(data_err("name,Tc_K,Pc_bar,omega\nx,1,2\n"), 2);
    assert_eq!(data_err("name,Tc_K,Pc_bar,omega\nx,1,two,0.1\n"), 2);
    assert_eq!(data_err("# c\nname,Tc_K,Pc_bar,omega\nx,-1,2,0.1\n"), 3);
    assert_eq!(data_err("name,Tc_K,Pc_bar,omega\nx,100,2,NaN\n"), 2);
    let msg = PrError::NotConverged { last_step: 0.5 }.to_string();
    assert!(msg.contains(&MAX_ITERATIONS.to_string()), "{msg}");
}
