//! Criterion benchmarks: optic-ad against plain f64 (the ratio baseline),
//! echidna (bytecode tape, Taylor) and num-dual (forward mode), in one run.
//!
//! Run: `cargo bench -p optic-ad-bench --bench ad`, then `python3 benches/report.py` prints
//! the medians as ratios (derivative time ÷ plain f time; ours ÷ theirs).
//!
//! Every derivative benchmarked here is also cross-checked once, before
//! timing, against the peer's value.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use num_dual::{Dual3_64, Dual64, HyperDual64};
use optic_ad::array::TArray;
use optic_ad::functor::nested_derivatives;
use optic_ad::{trace, Derivatives, Gradient, Hvp, Real, Tracer, Workspace};
use typenum::U3;

mod lotka_volterra;
#[path = "../examples/minimal_surface.rs"]
#[allow(dead_code)]
mod minimal_surface;
mod rosenbrock;

use rosenbrock::rosenbrock_array;

// ---------- Extended Rosenbrock, n = 100 ----------

const N: usize = 100;

fn rosenbrock<T: Real>(x: &[T]) -> T {
    let mut s = T::cst(0.0);
    for i in 0..x.len() - 1 {
        let a = x[i + 1] - x[i] * x[i];
        let b = T::cst(1.0) - x[i];
        s += a * a * 100.0 + b * b;
    }
    s
}

fn rosenbrock_echidna<T: echidna::Scalar<Float = f64>>(x: &[T]) -> T {
    let mut s = T::from_f(0.0);
    for i in 0..x.len() - 1 {
        let a = x[i + 1] - x[i] * x[i];
        let b = T::from_f(1.0) - x[i];
        s = s + a * a * T::from_f(100.0) + b * b;
    }
    s
}

fn point(n: usize) -> (Vec<f64>, Vec<f64>) {
    let x = (0..n)
        .map(|i| 0.5 + 0.4 * ((i as f64) * 0.7).sin())
        .collect();
    let v = (0..n).map(|i| ((i as f64) * 1.3).cos()).collect();
    (x, v)
}

/// Gradient by num-dual forward mode: one `Dual64` pass per coordinate.
fn num_dual_gradient(
    f: impl Fn(&[Dual64]) -> Dual64,
    x: &[f64],
    out: &mut [f64],
    buf: &mut Vec<Dual64>,
) {
    for (i, o) in out.iter_mut().enumerate() {
        buf.clear();
        buf.extend(
            x.iter()
                .enumerate()
                .map(|(j, &xj)| Dual64::new(xj, if i == j { 1.0 } else { 0.0 })),
        );
        *o = f(buf).eps;
    }
}

/// Hessian-vector product by num-dual forward-over-forward: one
/// `HyperDual64` pass per coordinate, with ε₁ = eᵢ and ε₂ = v.
fn num_dual_hvp(
    f: impl Fn(&[HyperDual64]) -> HyperDual64,
    x: &[f64],
    v: &[f64],
    out: &mut [f64],
    buf: &mut Vec<HyperDual64>,
) {
    for (i, o) in out.iter_mut().enumerate() {
        buf.clear();
        buf.extend(
            x.iter().zip(v).enumerate().map(|(j, (&xj, &vj))| {
                HyperDual64::new(xj, if i == j { 1.0 } else { 0.0 }, vj, 0.0)
            }),
        );
        *o = f(buf).eps1eps2;
    }
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.iter()
        .zip(b)
        .all(|(p, q)| (p - q).abs() <= 1e-9 * (1.0 + q.abs()))
}

/// One problem's functions: the same generic objective instantiated at each
/// scalar type, plus echidna's recorded tape.
struct Problem<F0, FT, FD, FH> {
    name: &'static str,
    x: Vec<f64>,
    v: Vec<f64>,
    f64_f: F0,
    tracer_f: FT,
    dual_f: FD,
    hyper_f: FH,
    tape: echidna::BytecodeTape<f64>,
}

/// Registers `f64 f`, gradient and Hessian-vector product benchmarks for
/// optic-ad, echidna and num-dual, after checking that all three agree.
fn bench_gradient_hvp<F0, FT, FD, FH>(c: &mut Criterion, p: Problem<F0, FT, FD, FH>)
where
    F0: Fn(&[f64]) -> f64,
    FT: Fn(&[optic_ad::Tracer]) -> optic_ad::Tracer,
    FD: Fn(&[Dual64]) -> Dual64 + Copy,
    FH: Fn(&[HyperDual64]) -> HyperDual64 + Copy,
{
    let Problem {
        name,
        x,
        v,
        f64_f,
        tracer_f,
        dual_f,
        hyper_f,
        mut tape,
    } = p;
    let n = x.len();
    let mut g = c.benchmark_group(name);
    g.bench_function("f64 f", |b| b.iter(|| f64_f(black_box(&x))));

    // optic-ad: traced once, evaluated per iteration.
    let mut grad = Gradient::new(&tracer_f, &x).unwrap();
    let mut gout = vec![0.0; n];
    grad.eval(&x, &mut gout).unwrap();
    let mut hvp = Hvp::new(&tracer_f, &x).unwrap();
    let mut hv = vec![0.0; n];
    hvp.linearize(&x).unwrap();
    hvp.apply(&v, &mut hv).unwrap();

    // echidna: bytecode tape, recorded once.
    let mut abuf = Vec::new();
    let eg = tape.gradient_with_buf(&x, &mut abuf);
    let (mut dv, mut da) = (Vec::new(), Vec::new());
    let (_, ehv) = tape.hvp_with_buf(&x, &v, &mut dv, &mut da);
    assert!(close(&gout, &eg), "{name}: gradient disagrees with echidna");
    assert!(close(&hv, &ehv), "{name}: hvp disagrees with echidna");

    // num-dual: forward mode, one pass per coordinate.
    let mut nd = vec![0.0; n];
    let mut dbuf = Vec::new();
    num_dual_gradient(dual_f, &x, &mut nd, &mut dbuf);
    assert!(
        close(&gout, &nd),
        "{name}: gradient disagrees with num-dual"
    );
    let mut hbuf = Vec::new();
    num_dual_hvp(hyper_f, &x, &v, &mut nd, &mut hbuf);
    assert!(close(&hv, &nd), "{name}: hvp disagrees with num-dual");

    g.bench_function("gradient/optic-ad", |b| {
        b.iter(|| grad.eval(black_box(&x), &mut gout).unwrap())
    });
    g.bench_function("gradient/echidna", |b| {
        b.iter(|| tape.gradient_with_buf(black_box(&x), &mut abuf))
    });
    g.bench_function("gradient/num-dual", |b| {
        b.iter(|| num_dual_gradient(dual_f, black_box(&x), &mut nd, &mut dbuf))
    });
    g.bench_function("hvp/optic-ad (linearize + apply)", |b| {
        b.iter(|| {
            hvp.linearize(black_box(&x)).unwrap();
            hvp.apply(black_box(&v), &mut hv).unwrap();
        })
    });
    g.bench_function("hvp/optic-ad (apply at a fixed point)", |b| {
        b.iter(|| hvp.apply(black_box(&v), &mut hv).unwrap())
    });
    g.bench_function("hvp/echidna", |b| {
        b.iter(|| tape.hvp_with_buf(black_box(&x), black_box(&v), &mut dv, &mut da))
    });
    g.bench_function("hvp/num-dual", |b| {
        b.iter(|| num_dual_hvp(hyper_f, black_box(&x), black_box(&v), &mut nd, &mut hbuf))
    });
    g.finish();
}

fn bench_rosenbrock(c: &mut Criterion) {
    let (x, v) = point(N);
    let (tape, _) = echidna::record(rosenbrock_echidna, &x);
    bench_gradient_hvp(
        c,
        Problem {
            name: "rosenbrock100",
            x,
            v,
            f64_f: rosenbrock::<f64>,
            tracer_f: rosenbrock::<optic_ad::Tracer>,
            dual_f: rosenbrock::<Dual64>,
            hyper_f: rosenbrock::<HyperDual64>,
            tape,
        },
    );
}

// ---------- The main job's model: logistic regression on WDBC (n = 31) ----------

#[path = "../examples/newton_cg/model.rs"]
#[allow(dead_code)]
mod model;

fn logistic_echidna<T: echidna::Scalar<Float = f64>>(theta: &[T], data: &model::Dataset) -> T {
    let d = data.n_features;
    let mut loss = T::from_f(0.0);
    for (i, &s) in data.s.iter().enumerate() {
        let mut m = theta[d];
        for (&w, &xij) in theta[..d].iter().zip(&data.x[i * d..(i + 1) * d]) {
            m = m + w * T::from_f(xij);
        }
        let z = m * T::from_f(-s);
        // softplus(z) = max(z, 0) + ln(1 + e^{−|z|})
        loss = loss + z.max(T::from_f(0.0)) + (T::from_f(1.0) + (-z.abs()).exp()).ln();
    }
    let mut reg = T::from_f(0.0);
    for &w in &theta[..d] {
        reg = reg + w * w;
    }
    loss + reg * T::from_f(0.5)
}

fn bench_logistic(c: &mut Criterion) {
    let path = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/data/wdbc.csv"
    ));
    let data = model::load_wdbc(path).unwrap();
    let n = data.n_params();
    let x: Vec<f64> = (0..n).map(|i| 0.1 * ((i as f64) * 0.9).sin()).collect();
    let v: Vec<f64> = (0..n).map(|i| ((i as f64) * 1.7).cos()).collect();
    let (tape, _) = echidna::record(|t| logistic_echidna(t, &data), &x);
    let d = &data;
    bench_gradient_hvp(
        c,
        Problem {
            name: "logistic_wdbc",
            x,
            v,
            f64_f: |t: &[f64]| model::objective(t, d),
            tracer_f: |t: &[optic_ad::Tracer]| model::objective(t, d),
            dual_f: |t: &[Dual64]| model::objective(t, d),
            hyper_f: |t: &[HyperDual64]| model::objective(t, d),
            tape,
        },
    );
}

/// The WDBC logistic loss at a structured point (`model::Logistic { w, b }`)
/// beside the same loss at the flat leaves, the compiled drivers of each:
/// what structure costs (issue "Structured points": within 1.02×).
fn bench_logistic_structured(c: &mut Criterion) {
    let path = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/data/wdbc.csv"
    ));
    let data = model::load_wdbc(path).unwrap();
    let (n, d) = (data.n_params(), data.n_features);
    let x: Vec<f64> = (0..n).map(|i| 0.1 * ((i as f64) * 0.9).sin()).collect();
    let v: Vec<f64> = (0..n).map(|i| ((i as f64) * 1.7).cos()).collect();
    let (p, pv) = (
        model::Logistic::from_leaves(d, &x).unwrap(),
        model::Logistic::from_leaves(d, &v).unwrap(),
    );
    let flat = |t: &[Tracer]| model::objective(t, &data);
    let structured = |p: &model::Logistic<Tracer>| model::loss(p, &data);

    let mut grad = Gradient::new(flat, &x).unwrap();
    let mut grad_s = Gradient::structured(structured, &p).unwrap();
    let mut hvp = Hvp::new(flat, &x).unwrap();
    let mut hvp_s = Hvp::structured(structured, &p).unwrap();
    let (mut gout, mut hv) = (vec![0.0; n], vec![0.0; n]);
    grad.eval(&x, &mut gout).unwrap();
    let (_, gs) = grad_s.eval_point(&p).unwrap();
    assert_eq!(gs, model::Logistic::from_leaves(d, &gout).unwrap());
    hvp.linearize(&x).unwrap();
    hvp.apply(&v, &mut hv).unwrap();
    hvp_s.linearize_point(&p).unwrap();
    let hs = hvp_s.apply_point(&pv).unwrap();
    assert_eq!(hs, model::Logistic::from_leaves(d, &hv).unwrap());

    let mut g = c.benchmark_group("logistic_wdbc_structured");
    g.bench_function("gradient/flat", |b| {
        b.iter(|| grad.eval(black_box(&x), &mut gout).unwrap())
    });
    g.bench_function("gradient/structured", |b| {
        b.iter(|| grad_s.eval_point(black_box(&p)).unwrap())
    });
    // Both HVP rows also return the gradient (`linearize_point` does).
    g.bench_function("hvp/flat (linearize + apply)", |b| {
        b.iter(|| {
            hvp.linearize_with_gradient(black_box(&x), &mut gout)
                .unwrap();
            hvp.apply(black_box(&v), &mut hv).unwrap();
        })
    });
    g.bench_function("hvp/structured (linearize + apply)", |b| {
        b.iter(|| {
            hvp_s.linearize_point(black_box(&p)).unwrap();
            hvp_s.apply_point(black_box(&pv)).unwrap()
        })
    });
    g.finish();
}

// ---------- Third derivative of a scalar function ----------

fn h<T: Real>(t: T) -> T {
    t.sin().exp() * (t * t + 1.0).ln() + t.tanh() / (t * t + 1.0)
}

fn h_echidna(t: echidna::Taylor<f64, 4>) -> echidna::Taylor<f64, 4> {
    let one = echidna::Taylor::constant(1.0);
    t.sin().exp() * (t * t + one).ln() + t.tanh() / (t * t + one)
}

fn bench_third(c: &mut Criterion) {
    let x = 0.7_f64;
    let mut g = c.benchmark_group("third_derivative");
    g.bench_function("f64 f", |b| b.iter(|| h(black_box(x))));

    let mut d = Derivatives::<U3, _>::new(h, x).unwrap();
    let ours = d.eval(x).unwrap();
    let nd = h(Dual3_64::new(x, 1.0, 0.0, 0.0));
    let et = h_echidna(echidna::Taylor::variable(x));
    for (k, want) in [nd.re, nd.v1, nd.v2, nd.v3].into_iter().enumerate() {
        assert!(
            (ours[k] - want).abs() <= 1e-10 * (1.0 + want.abs()),
            "order {k} disagrees with num-dual"
        );
        assert!(
            (et.derivative(k) - want).abs() <= 1e-10 * (1.0 + want.abs()),
            "echidna order {k}"
        );
    }

    g.bench_function("optic-ad (Derivatives<U3>)", |b| {
        b.iter(|| d.eval(black_box(x)).unwrap())
    });
    g.bench_function("num-dual (Dual3_64)", |b| {
        b.iter(|| h(Dual3_64::new(black_box(x), 1.0, 0.0, 0.0)))
    });
    g.bench_function("echidna (Taylor<f64, 4>)", |b| {
        b.iter(|| h_echidna(echidna::Taylor::variable(black_box(x))))
    });
    g.finish();
}

// ---------- Taylor mode: orders 1 … 50 ----------

/// sin(x)·eˣ.
fn sin_exp<T: Real>(t: T) -> T {
    t.sin() * t.exp()
}

/// e^{sin x} / (1 + x²).
fn exp_sin_ratio<T: Real>(t: T) -> T {
    t.sin().exp() / (t * t + 1.0)
}

fn sin_exp_echidna<const K: usize>(t: echidna::Taylor<f64, K>) -> echidna::Taylor<f64, K> {
    t.sin() * t.exp()
}

fn exp_sin_ratio_echidna<const K: usize>(t: echidna::Taylor<f64, K>) -> echidna::Taylor<f64, K> {
    let one = echidna::Taylor::constant(1.0);
    t.sin().exp() / (t * t + one)
}

/// For each order: our compiled `Derivatives<Uk>` and echidna's
/// `Taylor<f64, k + 1>`, cross-checked once, then timed.
macro_rules! order_benches {
    ($g:ident, $f:ident, $fe:ident, $x:expr, $( ($U:ident, $K1:literal) ),* $(,)?) => { $( {
        let x: f64 = $x;
        let mut d = Derivatives::<typenum::$U, _>::new($f::<Tracer>, x).unwrap();
        let ours = d.eval(x).unwrap();
        let theirs = $fe::<$K1>(echidna::Taylor::variable(x));
        let scale = ours.iter().fold(1.0_f64, |m, v| m.max(v.abs()));
        for k in 0..$K1 {
            assert!(
                (ours[k] - theirs.derivative(k)).abs() <= 1e-9 * scale,
                "order {k} of {}: {} vs echidna {}",
                stringify!($f),
                ours[k],
                theirs.derivative(k)
            );
        }
        let k = $K1 - 1;
        $g.bench_function(format!("order {k:02}/optic-ad"), |b| {
            b.iter(|| d.eval(black_box(x)).unwrap())
        });
        $g.bench_function(format!("order {k:02}/echidna"), |b| {
            b.iter(|| $fe::<$K1>(echidna::Taylor::variable(black_box(x))))
        });
    } )* };
}

macro_rules! all_orders {
    ($g:ident, $f:ident, $fe:ident, $x:expr) => {
        order_benches!(
            $g,
            $f,
            $fe,
            $x,
            (U1, 2),
            (U2, 3),
            (U3, 4),
            (U4, 5),
            (U5, 6),
            (U6, 7),
            (U7, 8),
            (U8, 9),
            (U9, 10),
            (U10, 11),
            (U11, 12),
            (U12, 13),
            (U13, 14),
            (U14, 15),
            (U15, 16),
            (U16, 17),
            (U24, 25),
            (U32, 33),
            (U50, 51),
        )
    };
}

/// The nested ∂⃖ᵏ construction of `[f, …, f⁽ᵏ⁾]` (the path `derivative`
/// took before Taylor mode), timed at `k ≤ 8` for comparison; prints the
/// program sizes.
fn nested_orders(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    f: fn(Tracer) -> Tracer,
    x: f64,
) {
    let p = trace(|t| vec![f(t[0])], &[x]).unwrap();
    for k in 1..=8 {
        let q = nested_derivatives(&p, k).unwrap().schedule();
        eprintln!(
            "[taylor sizes] traced program {} instructions; nested ∂⃖ order {k}: {} instructions",
            p.len(),
            q.len()
        );
        let mut ws = Workspace::new();
        let mut out = vec![0.0; k + 1];
        g.bench_function(format!("order {k:02}/nested reverse"), |b| {
            b.iter(|| q.eval_with(&mut ws, &[black_box(x)], &mut out).unwrap())
        });
    }
}

fn bench_taylor_orders(c: &mut Criterion) {
    let x = 0.7;
    let mut g = c.benchmark_group("taylor_orders_sin_exp");
    g.bench_function("f64 f", |b| b.iter(|| sin_exp(black_box(x))));
    all_orders!(g, sin_exp, sin_exp_echidna, 0.7);
    nested_orders(&mut g, sin_exp::<Tracer>, x);
    g.finish();
    let mut g = c.benchmark_group("taylor_orders_exp_sin_ratio");
    g.bench_function("f64 f", |b| b.iter(|| exp_sin_ratio(black_box(x))));
    all_orders!(g, exp_sin_ratio, exp_sin_ratio_echidna, 0.7);
    nested_orders(&mut g, exp_sin_ratio::<Tracer>, x);
    g.finish();
}

/// Building: `Derivatives::<U50>::new` (trace + Taylor program) beside the
/// nested ∂⃖⁸ program.
fn bench_taylor_build(c: &mut Criterion) {
    let x = 0.7;
    let mut g = c.benchmark_group("taylor_build");
    g.bench_function("sin_exp/optic-ad Derivatives<U50>::new", |b| {
        b.iter(|| Derivatives::<typenum::U50, _>::new(sin_exp::<Tracer>, black_box(x)).unwrap())
    });
    g.bench_function("exp_sin_ratio/optic-ad Derivatives<U50>::new", |b| {
        b.iter(|| {
            Derivatives::<typenum::U50, _>::new(exp_sin_ratio::<Tracer>, black_box(x)).unwrap()
        })
    });
    for (name, f) in [
        ("sin_exp", sin_exp::<Tracer> as fn(Tracer) -> Tracer),
        ("exp_sin_ratio", exp_sin_ratio::<Tracer>),
    ] {
        g.bench_function(
            format!("{name}/nested reverse order 8 (trace + build)"),
            |b| {
                b.iter(|| {
                    let p = trace(|t| vec![f(t[0])], &[black_box(x)]).unwrap();
                    nested_derivatives(&p, 8).unwrap().schedule()
                })
            },
        );
    }
    g.finish();
}

/// f‴ of sin(x)·eˣ: Taylor mode beside num-dual, echidna and the closed
/// form `2eˣ(cos x − sin x)`.
fn bench_third_sin_exp(c: &mut Criterion) {
    let x = 0.7_f64;
    let closed = |x: f64| 2.0 * x.exp() * (x.cos() - x.sin());
    let mut g = c.benchmark_group("third_derivative_sin_exp");
    g.bench_function("f64 f", |b| b.iter(|| sin_exp(black_box(x))));
    let mut d = Derivatives::<U3, _>::new(sin_exp::<Tracer>, x).unwrap();
    let want = closed(x);
    assert!((d.eval(x).unwrap()[3] - want).abs() <= 1e-14 * want.abs());
    let nd = sin_exp(Dual3_64::new(x, 1.0, 0.0, 0.0));
    assert!((nd.v3 - want).abs() <= 1e-14 * want.abs());
    let et = sin_exp_echidna::<4>(echidna::Taylor::variable(x));
    assert!((et.derivative(3) - want).abs() <= 1e-14 * want.abs());
    g.bench_function("closed form f‴", |b| b.iter(|| closed(black_box(x))));
    g.bench_function("optic-ad (Derivatives<U3>)", |b| {
        b.iter(|| d.eval(black_box(x)).unwrap())
    });
    g.bench_function("num-dual (Dual3_64)", |b| {
        b.iter(|| sin_exp(Dual3_64::new(black_box(x), 1.0, 0.0, 0.0)))
    });
    g.bench_function("echidna (Taylor<f64, 4>)", |b| {
        b.iter(|| sin_exp_echidna::<4>(echidna::Taylor::variable(black_box(x))))
    });
    g.finish();
}

// ---------- The evaluators: interpreter against lowered register code ----------

/// ns per instruction of the two `f64` evaluators on the same programs:
/// the gradient program of Rosenbrock and the right stage of its
/// Hessian-vector product, at n = 10³, 10⁴, 10⁵, beside plain f. Each
/// program is checked first: both evaluators give the same bits.
fn bench_evaluators(c: &mut Criterion) {
    let mut g = c.benchmark_group("evaluators");
    for n in [1_000usize, 10_000, 100_000] {
        let (x, v) = point(n);
        g.bench_function(format!("n={n}/f64 f"), |b| {
            b.iter(|| rosenbrock::<f64>(black_box(&x)))
        });
        let grad = Gradient::new(rosenbrock, &x).unwrap();
        let p = grad.program().unwrap();
        // Hvp::apply (one direction) against apply_many (four at once).
        let mut h4 = Hvp::new(rosenbrock, &x).unwrap();
        h4.linearize(&x).unwrap();
        let vs: Vec<f64> = (0..4 * n).map(|i| ((i as f64) * 0.37).cos()).collect();
        let mut many = vec![0.0; 4 * n];
        h4.apply_many(&vs, &mut many).unwrap();
        let mut one = vec![0.0; n];
        for j in 0..4 {
            h4.apply(&vs[j * n..(j + 1) * n], &mut one).unwrap();
            assert!(one
                .iter()
                .zip(&many[j * n..])
                .all(|(a, b)| a.to_bits() == b.to_bits()));
        }
        g.bench_function(format!("n={n}/hvp apply, 1 direction"), |b| {
            b.iter(|| h4.apply(black_box(&vs[..n]), &mut one).unwrap())
        });
        g.bench_function(format!("n={n}/hvp apply_many, 4 directions"), |b| {
            b.iter(|| h4.apply_many(black_box(&vs), &mut many).unwrap())
        });
        // The "HVP ÷ f": the left stage at a new point, then one
        // direction.
        g.bench_function(format!("n={n}/hvp linearize + apply"), |b| {
            b.iter(|| {
                h4.linearize(black_box(&x)).unwrap();
                h4.apply(black_box(&vs[..n]), &mut one).unwrap()
            })
        });
        let hvp = Hvp::new(rosenbrock, &x).unwrap();
        let (left, right) = hvp.programs().unwrap();
        let left_out = left.eval(&x).unwrap();
        let mut rin: Vec<f64> = left_out[1 + n..].to_vec();
        rin.extend_from_slice(&v);
        for (name, prog, input) in [("gradient", p, &x), ("hvp right", right, &rin)] {
            let want = prog.eval(input).unwrap();
            let mut regs = optic_ad::Registers::new();
            let mut got = vec![0.0; prog.n_outputs()];
            prog.eval_f64(&mut regs, input, &mut got).unwrap();
            assert!(want
                .iter()
                .zip(&got)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
            let (code, n_regs) = prog.register_code_size();
            eprintln!(
                "evaluators n={n} {name}: {} instructions, {code} register instructions, {n_regs} registers",
                prog.len()
            );
            let mut ws = Workspace::new();
            let mut out = vec![0.0; prog.n_outputs()];
            g.bench_function(format!("n={n}/{name}/interpreter"), |b| {
                b.iter(|| prog.eval_with(&mut ws, black_box(input), &mut out).unwrap())
            });
            g.bench_function(format!("n={n}/{name}/lowered"), |b| {
                b.iter(|| {
                    prog.eval_f64_registers(&mut regs, black_box(input), &mut got)
                        .unwrap()
                })
            });
            #[cfg(feature = "jit")]
            {
                // Compiled now, even above the 2¹⁵-instruction limit of
                // `eval_f64` (to show why the limit is there); from here on
                // eval_f64 runs the native code. Checked bit for bit first.
                let t = std::time::Instant::now();
                let compiled = prog.native_instructions().0.unwrap();
                eprintln!(
                    "evaluators n={n} {name}: native code for {compiled} instructions compiled in {:.1} ms",
                    t.elapsed().as_secs_f64() * 1e3
                );
                prog.eval_f64(&mut regs, input, &mut got).unwrap();
                assert!(want
                    .iter()
                    .zip(&got)
                    .all(|(a, b)| a.to_bits() == b.to_bits()));
                g.bench_function(format!("n={n}/{name}/native"), |b| {
                    b.iter(|| {
                        prog.eval_f64(&mut regs, black_box(input), &mut got)
                            .unwrap()
                    })
                });
                // Compiling takes about a second per 10⁵ instructions: timed
                // at the smallest n only.
                if n == 1_000 {
                    g.bench_function(format!("n={n}/{name}/compile native"), |b| {
                        b.iter(|| prog.eval_f64_native_chunked(4096, black_box(input)))
                    });
                }
            }
        }
    }
    g.finish();
}

// ---------- Dense Hessians: columns in lanes, spread over the cores ----------

/// `hessian` of Rosenbrock at n = 200 and 1000 (trace, build and n / 4
/// passes of the right stage on all cores); run once more with
/// `RAYON_NUM_THREADS=1` for the one-core time.
fn bench_hessian(c: &mut Criterion) {
    let mut g = c.benchmark_group("hessian");
    g.sample_size(10);
    for n in [200usize, 1000] {
        let (x, _) = point(n);
        g.bench_function(format!("n={n}/f64 f"), |b| {
            b.iter(|| rosenbrock::<f64>(black_box(&x)))
        });
        g.bench_function(format!("n={n}/optic-ad hessian"), |b| {
            b.iter(|| optic_ad::hessian(rosenbrock, black_box(&x)).unwrap())
        });
    }
    g.finish();
}

// ---------- The array tier: Rosenbrock at scale, WDBC as arrays ----------

/// Rosenbrock written with the array API at n = 10⁴ … 10⁷: gradient and
/// HVP against the plain `f64` loop, and the cost of building.
fn bench_arrays_rosenbrock(c: &mut Criterion) {
    let mut g = c.benchmark_group("arrays_rosenbrock");
    g.sample_size(10);
    for n in [10_000usize, 100_000, 1_000_000, 10_000_000] {
        let (x, v) = point(n);
        let mut grad = optic_ad::Gradient::array(rosenbrock_array, &x).unwrap();
        let mut out = vec![0.0; n];
        grad.eval(&x, &mut out).unwrap();
        let mut h = optic_ad::Hvp::array(rosenbrock_array, &x).unwrap();
        h.linearize(&x).unwrap();
        let mut hv = vec![0.0; n];
        h.apply(&v, &mut hv).unwrap();
        // The one-pass product agrees with linearize + apply.
        let mut hv_one = vec![0.0; hv.len()];
        h.eval(&x, &v, &mut hv_one).unwrap();
        assert!(close(&hv_one, &hv));
        // Cross-check against the scalar trace once, at the smallest n.
        if n == 10_000 {
            let g_ref = optic_ad::gradient(rosenbrock, &x).unwrap();
            let hv_ref = optic_ad::hvp(rosenbrock, &x, &v).unwrap();
            assert!(close(&out, &g_ref) && close(&hv, &hv_ref));
        }
        g.bench_function(format!("n={n}/f64 f"), |b| {
            b.iter(|| rosenbrock::<f64>(black_box(&x)))
        });
        g.bench_function(format!("n={n}/gradient"), |b| {
            b.iter(|| grad.eval(black_box(&x), &mut out).unwrap())
        });
        g.bench_function(format!("n={n}/hvp (linearize + apply)"), |b| {
            b.iter(|| {
                h.linearize(black_box(&x)).unwrap();
                h.apply(black_box(&v), &mut hv).unwrap()
            })
        });
        g.bench_function(format!("n={n}/hvp (apply)"), |b| {
            b.iter(|| h.apply(black_box(&v), &mut hv).unwrap())
        });
        g.bench_function(format!("n={n}/hvp (one pass)"), |b| {
            b.iter(|| h.eval(black_box(&x), black_box(&v), &mut hv).unwrap())
        });
        g.bench_function(format!("n={n}/build Hvp"), |b| {
            b.iter(|| optic_ad::Hvp::array(rosenbrock_array, black_box(&x)).unwrap())
        });
        // Taylor mode: dᵏ/dtᵏ f(x + t v), k ≤ 4, whose second entry is
        // vᵀ H v (checked against the HVP above).
        if n <= 1_000_000 {
            let mut d = optic_ad::Directional::array(rosenbrock_array, &x, 4).unwrap();
            let mut dk = [0.0; 5];
            d.eval(&x, &v, &mut dk).unwrap();
            let vhv: f64 = v.iter().zip(&hv).map(|(a, b)| a * b).sum();
            assert!((dk[2] - vhv).abs() <= 1e-10 * vhv.abs().max(1.0));
            g.bench_function(format!("n={n}/taylor order 4 (Directional)"), |b| {
                b.iter(|| d.eval(black_box(&x), black_box(&v), &mut dk).unwrap())
            });
        }
    }
    g.finish();
}

/// The main job's model with the array API (one matvec, one map, one sum):
/// gradient and HVP at the point of `logistic_wdbc`, building, and the
/// whole Newton-CG fit in process.
fn bench_arrays_logistic(c: &mut Criterion) {
    use optic_ad::array;
    let path = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/data/wdbc.csv"
    ));
    let data = model::load_wdbc(path).unwrap();
    let design = data.design();
    let n = data.n_params();
    let x: Vec<f64> = (0..n).map(|i| 0.1 * ((i as f64) * 0.9).sin()).collect();
    let v: Vec<f64> = (0..n).map(|i| ((i as f64) * 1.7).cos()).collect();
    let f = |t: &array::TArray| model::objective_array(t, &design);
    let mut grad = optic_ad::Gradient::array(f, &x).unwrap();
    let mut out = vec![0.0; n];
    grad.eval(&x, &mut out).unwrap();
    let mut h = optic_ad::Hvp::array(f, &x).unwrap();
    h.linearize(&x).unwrap();
    let mut hv = vec![0.0; n];
    h.apply(&v, &mut hv).unwrap();
    // The one-pass product agrees with linearize + apply.
    let mut hv_one = vec![0.0; hv.len()];
    h.eval(&x, &v, &mut hv_one).unwrap();
    assert!(close(&hv_one, &hv));
    let g_ref = optic_ad::gradient(|t| model::objective(t, &data), &x).unwrap();
    let hv_ref = optic_ad::hvp(|t| model::objective(t, &data), &x, &v).unwrap();
    assert!(close(&out, &g_ref) && close(&hv, &hv_ref));
    let mut g = c.benchmark_group("arrays_logistic_wdbc");
    g.bench_function("f64 f", |b| {
        b.iter(|| model::objective::<f64>(black_box(&x), &data))
    });
    g.bench_function("gradient", |b| {
        b.iter(|| grad.eval(black_box(&x), &mut out).unwrap())
    });
    g.bench_function("hvp (linearize + apply)", |b| {
        b.iter(|| {
            h.linearize(black_box(&x)).unwrap();
            h.apply(black_box(&v), &mut hv).unwrap()
        })
    });
    g.bench_function("hvp (apply)", |b| {
        b.iter(|| h.apply(black_box(&v), &mut hv).unwrap())
    });
    g.bench_function("hvp (one pass)", |b| {
        b.iter(|| h.eval(black_box(&x), black_box(&v), &mut hv).unwrap())
    });
    g.bench_function("build Hvp", |b| {
        b.iter(|| optic_ad::Hvp::array(f, black_box(&x)).unwrap())
    });
    g.bench_function("Newton-CG fit", |b| {
        b.iter(|| model::newton_cg(&data, &model::NewtonOptions::default(), |_| {}).unwrap())
    });
    g.finish();
}

// ---------- A network with one hidden layer on WDBC (traced matrices) ----------

/// Hidden units of the network.
const HIDDEN: usize = 16;

/// `L(θ) = Σᵢ softplus(−sᵢ (w₂ · tanh(W₁ x̃ᵢ) + b₂)) + 0.005 ‖θ‖²` on the
/// WDBC design matrix `X̃ = [X 𝟙]` (569 × 31): `W₁` is `HIDDEN × 31`
/// (row-major, first in θ), then `w₂` (`HIDDEN`), then `b₂`. The hidden
/// layer of the whole batch is one product `X̃ W₁ᵀ` of a constant and a
/// traced matrix.
fn mlp<A: optic_ad::array::Array>(
    theta: &A,
    x: &optic_ad::array::Matrix,
    neg_s: &std::sync::Arc<[f64]>,
) -> optic_ad::Result<A::Scalar> {
    use optic_ad::array::Mat;
    let d1 = x.cols();
    let w1 = Mat::new(theta.slice(0, HIDDEN * d1)?, HIDDEN, d1)?;
    let w2 = theta.slice(HIDDEN * d1, HIDDEN)?;
    let b2 = theta.get(HIDDEN * d1 + HIDDEN)?;
    let hidden = Mat::constant(x)
        .matmul_t(&w1, false, true)?
        .map(|t| t.tanh());
    let loss = hidden
        .matvec(&w2)?
        .map_with(b2, |z, b| z + b)
        .map2(&A::constant(neg_s), |m, ns| model::softplus(m * ns))?
        .sum();
    Ok(loss + theta.dot(theta)? * 0.005)
}

/// [`mlp`] as a plain-Rust loop over the samples (no allocation): the `f`
/// the group's ratios divide by.
fn mlp_loop(theta: &[f64], x: &[f64], neg_s: &[f64], d1: usize) -> f64 {
    let (w1, rest) = theta.split_at(HIDDEN * d1);
    let (w2, b2) = (&rest[..HIDDEN], rest[HIDDEN]);
    let mut loss = 0.0;
    for (row, &ns) in x.chunks_exact(d1).zip(neg_s) {
        let mut z = b2;
        for (wj, &w2j) in w1.chunks_exact(d1).zip(w2) {
            let a: f64 = row.iter().zip(wj).map(|(p, q)| p * q).sum();
            z += w2j * a.tanh();
        }
        loss += model::softplus(z * ns);
    }
    loss + theta.iter().map(|t| t * t).sum::<f64>() * 0.005
}

fn bench_arrays_mlp(c: &mut Criterion) {
    use optic_ad::array::{self, Dense};
    let path = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/data/wdbc.csv"
    ));
    let data = model::load_wdbc(path).unwrap();
    let design = data.design();
    let (x, neg_s) = (&*design.x, &design.neg_s);
    let d1 = x.cols();
    let n = HIDDEN * d1 + HIDDEN + 1;
    let theta: Vec<f64> = (0..n).map(|i| 0.1 * ((i as f64) * 0.9).sin()).collect();
    let v: Vec<f64> = (0..n).map(|i| ((i as f64) * 1.7).cos()).collect();
    let f = |t: &array::TArray| mlp(t, x, neg_s);
    // The loop, native Dense and the traced program agree; gradient and
    // HVP against num-dual (one Dual64 / HyperDual64 pass per parameter).
    let f0 = mlp_loop(&theta, x.as_slice(), neg_s, d1);
    let f_dense = mlp(&Dense(theta.clone()), x, neg_s).unwrap();
    assert!(close(&[f_dense], &[f0]));
    let mut grad = optic_ad::Gradient::array(f, &theta).unwrap();
    let mut g_out = vec![0.0; n];
    grad.eval(&theta, &mut g_out).unwrap();
    let mut h = optic_ad::Hvp::array(f, &theta).unwrap();
    h.linearize(&theta).unwrap();
    let mut hv = vec![0.0; n];
    h.apply(&v, &mut hv).unwrap();
    let mut hv_one = vec![0.0; n];
    h.eval(&theta, &v, &mut hv_one).unwrap();
    let (mut g_ref, mut hv_ref) = (vec![0.0; n], vec![0.0; n]);
    num_dual_gradient(
        |t| mlp(&Dense(t.to_vec()), x, neg_s).unwrap(),
        &theta,
        &mut g_ref,
        &mut Vec::new(),
    );
    num_dual_hvp(
        |t| mlp(&Dense(t.to_vec()), x, neg_s).unwrap(),
        &theta,
        &v,
        &mut hv_ref,
        &mut Vec::new(),
    );
    assert!(close(&g_out, &g_ref) && close(&hv, &hv_ref) && close(&hv_one, &hv_ref));
    let mut g = c.benchmark_group("arrays_mlp_wdbc");
    g.bench_function("f64 f", |b| {
        b.iter(|| mlp_loop(black_box(&theta), x.as_slice(), neg_s, d1))
    });
    g.bench_function("gradient", |b| {
        b.iter(|| grad.eval(black_box(&theta), &mut g_out).unwrap())
    });
    g.bench_function("hvp (linearize + apply)", |b| {
        b.iter(|| {
            h.linearize(black_box(&theta)).unwrap();
            h.apply(black_box(&v), &mut hv).unwrap()
        })
    });
    g.bench_function("hvp (apply)", |b| {
        b.iter(|| h.apply(black_box(&v), &mut hv).unwrap())
    });
    g.bench_function("hvp (one pass)", |b| {
        b.iter(|| h.eval(black_box(&theta), black_box(&v), &mut hv).unwrap())
    });
    g.bench_function("build Hvp", |b| {
        b.iter(|| optic_ad::Hvp::array(f, black_box(&theta)).unwrap())
    });
    g.finish();
}

/// The minimal-surface example's problem as a plain-Rust loop: the padded
/// `(N + 2)²` grid holds the boundary values once; each call copies the
/// unknowns into its interior and sums MINPACK-2's `2 (N + 1)²` triangle
/// terms (lower-left `(i, j), (i+1, j), (i, j+1)` for `0 ≤ i, j ≤ N`,
/// upper-right `(i, j), (i−1, j), (i, j−1)` for `1 ≤ i, j ≤ N + 1`). No
/// allocation per call: the `f` the array tier's ratios divide by.
struct SurfaceLoop {
    n: usize,
    h: f64,
    grid: Vec<f64>,
}

impl SurfaceLoop {
    fn new(p: &minimal_surface::MinimalSurface) -> Self {
        let n = p.n();
        let m = n + 2;
        let zeros = vec![0.0; p.unknowns()];
        let mut grid = vec![0.0; m * m];
        for j in 0..m {
            for i in 0..m {
                grid[j * m + i] = p.value(&zeros, i, j).unwrap();
            }
        }
        SurfaceLoop { n, h: p.h(), grid }
    }

    fn area(&mut self, v: &[f64]) -> f64 {
        let (n, h) = (self.n, self.h);
        let m = n + 2;
        for (row, src) in v.chunks_exact(n).enumerate() {
            let start = (row + 1) * m + 1;
            self.grid[start..start + n].copy_from_slice(src);
        }
        let g = &self.grid;
        let inv_h = 1.0 / h;
        let term = |c: f64, x: f64, y: f64| {
            let (a, b) = ((x - c) * inv_h, (y - c) * inv_h);
            (1.0 + a * a + b * b).sqrt()
        };
        let mut s = 0.0;
        for j in 0..=n {
            for i in 0..=n {
                let k = j * m + i;
                s += term(g[k], g[k + 1], g[k + m]);
            }
        }
        for j in 1..=n + 1 {
            for i in 1..=n + 1 {
                let k = j * m + i;
                s += term(g[k], g[k - 1], g[k - m]);
            }
        }
        s * (0.5 * h * h)
    }
}

/// The minimal-surface area (the example `minimal_surface`, written with
/// the array API) at N = 100, 300, 1000 (10⁴ … 10⁶ unknowns): gradient and
/// HVP against the plain loop [`SurfaceLoop`], and the cost of building,
/// at a point near MINPACK-2's start. `benches/peers.py` times JAX on the
/// same grid and point.
fn bench_arrays_minimal_surface(c: &mut Criterion) {
    use minimal_surface::{area, MinimalSurface};
    use optic_ad::array;
    let mut g = c.benchmark_group("arrays_minimal_surface");
    g.sample_size(10);
    for n in [100usize, 300, 1000] {
        let p = MinimalSurface::new(n).unwrap();
        let x: Vec<f64> = p
            .start()
            .iter()
            .enumerate()
            .map(|(i, s)| s + 0.1 * (i as f64 * 0.7).sin())
            .collect();
        let v: Vec<f64> = (0..x.len()).map(|i| (i as f64 * 1.3).cos()).collect();
        let f = |t: &array::TArray| area(t, &p);
        let mut plain = SurfaceLoop::new(&p);
        let mut grad = optic_ad::Gradient::array(f, &x).unwrap();
        let mut out = vec![0.0; x.len()];
        let value = grad.eval(&x, &mut out).unwrap();
        let mut h = optic_ad::Hvp::array(f, &x).unwrap();
        h.linearize(&x).unwrap();
        let mut hv = vec![0.0; x.len()];
        h.apply(&v, &mut hv).unwrap();
        // The one-pass product agrees with linearize + apply.
        let mut hv_one = vec![0.0; hv.len()];
        h.eval(&x, &v, &mut hv_one).unwrap();
        assert!(close(&hv_one, &hv));
        // The array program's value against the plain loop, and (at the
        // smallest N) its gradient and HVP against the scalar trace of the
        // same function run on `Dense<Tracer>` (tests/minimal_surface.rs
        // checks both against num-dual and a hand-derived gradient).
        let plain_value = plain.area(&x);
        assert!((value - plain_value).abs() <= 1e-12 * plain_value.abs());
        if n == 100 {
            let scalar = |t: &[Tracer]| area(&array::Dense(t.to_vec()), &p).unwrap();
            let g_ref = optic_ad::gradient(scalar, &x).unwrap();
            let hv_ref = optic_ad::hvp(scalar, &x, &v).unwrap();
            assert!(close(&out, &g_ref) && close(&hv, &hv_ref));
        }
        g.bench_function(format!("N={n}/f64 f"), |b| {
            b.iter(|| plain.area(black_box(&x)))
        });
        g.bench_function(format!("N={n}/gradient"), |b| {
            b.iter(|| grad.eval(black_box(&x), &mut out).unwrap())
        });
        g.bench_function(format!("N={n}/hvp (linearize + apply)"), |b| {
            b.iter(|| {
                h.linearize(black_box(&x)).unwrap();
                h.apply(black_box(&v), &mut hv).unwrap()
            })
        });
        g.bench_function(format!("N={n}/hvp (apply)"), |b| {
            b.iter(|| h.apply(black_box(&v), &mut hv).unwrap())
        });
        g.bench_function(format!("N={n}/hvp (one pass)"), |b| {
            b.iter(|| h.eval(black_box(&x), black_box(&v), &mut hv).unwrap())
        });
        g.bench_function(format!("N={n}/build Hvp"), |b| {
            b.iter(|| optic_ad::Hvp::array(f, black_box(&x)).unwrap())
        });
    }
    g.finish();
}

// ---------- Building: tracing and deriving, per instruction ----------

/// How long the compiled drivers take to build on the scalar Rosenbrock
/// loop, at n = 10³, 10⁴, 10⁵ (and 10⁶ when `OPTIC_BENCH_BUILD_1E6` is
/// set: seconds per build and about 1.6 GB): tracing alone,
/// `Gradient::new`, `Hvp::new`, and echidna recording its bytecode tape of
/// the same function. The instruction counts are printed, for the time per
/// instruction; `build_rss.rs` beside this file (`--example build_rss`) measures peak
/// memory.
fn bench_build(c: &mut Criterion) {
    let mut g = c.benchmark_group("build");
    g.sample_size(10);
    let mut sizes = vec![1_000usize, 10_000, 100_000];
    if std::env::var_os("OPTIC_BENCH_BUILD_1E6").is_some() {
        sizes.push(1_000_000);
    }
    for n in sizes {
        let (x, _) = point(n);
        let traced = trace(|t| vec![rosenbrock(t)], &x).unwrap().len();
        let gradient = Gradient::new(rosenbrock, &x)
            .unwrap()
            .program()
            .unwrap()
            .len();
        let h = Hvp::new(rosenbrock, &x).unwrap();
        let (l, r) = h.programs().unwrap();
        eprintln!(
            "build n={n}: {traced} traced instructions, gradient program {gradient}, \
             Hvp programs {} (left {} + right {})",
            l.len() + r.len(),
            l.len(),
            r.len()
        );
        drop(h);
        g.bench_function(format!("n={n}/f64 f"), |b| {
            b.iter(|| rosenbrock::<f64>(black_box(&x)))
        });
        g.bench_function(format!("n={n}/trace"), |b| {
            b.iter(|| trace(|t| vec![rosenbrock(t)], black_box(&x)).unwrap())
        });
        g.bench_function(format!("n={n}/Gradient::new"), |b| {
            b.iter(|| Gradient::new(rosenbrock, black_box(&x)).unwrap())
        });
        g.bench_function(format!("n={n}/Hvp::new"), |b| {
            b.iter(|| Hvp::new(rosenbrock, black_box(&x)).unwrap())
        });
        g.bench_function(format!("n={n}/echidna record"), |b| {
            b.iter(|| echidna::record(rosenbrock_echidna, black_box(&x)))
        });
    }
    g.finish();
}

/// Loops: the Lotka–Volterra RK4 loss through `fold` (one loop
/// instruction on the array trace), gradient and HVP against the plain
/// f64 loop and num-dual through it, at N = 10³ … 10⁵ steps; building the
/// drivers, whose cost does not depend on N; and the same loss written over
/// `Real` through the scalar drivers `Gradient` and `Hvp`.
fn bench_loops(c: &mut Criterion) {
    use lotka_volterra::{loss, loss_array, P0, V};
    let mut g = c.benchmark_group("loops_lotka_volterra");
    g.sample_size(10);
    for n in [1_000usize, 10_000, 100_000] {
        let f = move |p: &TArray| loss_array(p, n);
        let mut grad = optic_ad::Gradient::array(f, &P0).unwrap();
        let mut out = vec![0.0; 6];
        grad.eval(&P0, &mut out).unwrap();
        let mut h = optic_ad::Hvp::array(f, &P0).unwrap();
        let mut hv = vec![0.0; 6];
        h.linearize(&P0).unwrap();
        h.apply(&V, &mut hv).unwrap();
        let mut hv_one = vec![0.0; 6];
        h.eval(&P0, &V, &mut hv_one).unwrap();
        // Cross-checks against num-dual through the plain loop.
        let (mut gd, mut hd, mut buf, mut hbuf) =
            (vec![0.0; 6], vec![0.0; 6], Vec::new(), Vec::new());
        num_dual_gradient(|x| loss(x, n).unwrap(), &P0, &mut gd, &mut buf);
        num_dual_hvp(|x| loss(x, n).unwrap(), &P0, &V, &mut hd, &mut hbuf);
        assert!(close(&out, &gd) && close(&hv, &hd) && close(&hv_one, &hd));
        g.bench_function(format!("n={n}/f64 f"), |b| {
            b.iter(|| loss::<f64>(black_box(&P0), n).unwrap())
        });
        g.bench_function(format!("n={n}/gradient"), |b| {
            b.iter(|| grad.eval(black_box(&P0), &mut out).unwrap())
        });
        g.bench_function(format!("n={n}/hvp (linearize + apply)"), |b| {
            b.iter(|| {
                h.linearize(black_box(&P0)).unwrap();
                h.apply(black_box(&V), &mut hv).unwrap()
            })
        });
        g.bench_function(format!("n={n}/hvp (apply)"), |b| {
            b.iter(|| h.apply(black_box(&V), &mut hv).unwrap())
        });
        g.bench_function(format!("n={n}/hvp (one pass)"), |b| {
            b.iter(|| h.eval(black_box(&P0), black_box(&V), &mut hv).unwrap())
        });
        // The same loop as a `while_loop` on a clock: the same steps, one
        // more carried value and one comparison kept per step.
        let fw = move |p: &TArray| lotka_volterra::loss_while_array(p, n);
        let mut grad_w = optic_ad::Gradient::array(fw, &P0).unwrap();
        let mut out_w = vec![0.0; 6];
        grad_w.eval(&P0, &mut out_w).unwrap();
        let mut h_w = optic_ad::Hvp::array(fw, &P0).unwrap();
        let mut hv_w = vec![0.0; 6];
        h_w.eval(&P0, &V, &mut hv_w).unwrap();
        assert!(close(&out_w, &gd) && close(&hv_w, &hd));
        g.bench_function(format!("n={n}/while_loop gradient"), |b| {
            b.iter(|| grad_w.eval(black_box(&P0), &mut out_w).unwrap())
        });
        g.bench_function(format!("n={n}/while_loop hvp (one pass)"), |b| {
            b.iter(|| h_w.eval(black_box(&P0), black_box(&V), &mut hv_w).unwrap())
        });
        // Taylor mode through the loop: dᵏ/dtᵏ loss(p + t v), k ≤ 4, the
        // jets carried through the steps; the second entry is vᵀ H v.
        let mut d = optic_ad::Directional::array(f, &P0, 4).unwrap();
        let mut dk = [0.0; 5];
        d.eval(&P0, &V, &mut dk).unwrap();
        let vhv: f64 = V.iter().zip(&hd).map(|(a, b)| a * b).sum();
        assert!((dk[2] - vhv).abs() <= 1e-9 * vhv.abs().max(1.0));
        g.bench_function(format!("n={n}/taylor order 4 (Directional)"), |b| {
            b.iter(|| d.eval(black_box(&P0), black_box(&V), &mut dk).unwrap())
        });
        g.bench_function(format!("n={n}/build Gradient"), |b| {
            b.iter(|| optic_ad::Gradient::array(f, black_box(&P0)).unwrap())
        });
        g.bench_function(format!("n={n}/build Hvp"), |b| {
            b.iter(|| optic_ad::Hvp::array(f, black_box(&P0)).unwrap())
        });
        g.bench_function(format!("n={n}/num-dual gradient"), |b| {
            b.iter(|| num_dual_gradient(|x| loss(x, n).unwrap(), black_box(&P0), &mut gd, &mut buf))
        });
        g.bench_function(format!("n={n}/num-dual hvp"), |b| {
            b.iter(|| {
                num_dual_hvp(
                    |x| loss(x, n).unwrap(),
                    black_box(&P0),
                    black_box(&V),
                    &mut hd,
                    &mut hbuf,
                )
            })
        });
        if n == 100_000 {
            // Binomial checkpointing with as few snapshots as `fold`'s
            // default takes beyond 2²⁰ carried values (r = 2).
            let s = (1..)
                .find(|&s: &usize| (s + 3) * (s + 2) / 2 >= n)
                .unwrap_or(1);
            let c = optic_ad::Checkpoints::Binomial(s);
            let fc = move |p: &TArray| lotka_volterra::loss_array_with(p, n, c);
            let mut gc = optic_ad::Gradient::array(fc, &P0).unwrap();
            let mut oc = vec![0.0; 6];
            gc.eval(&P0, &mut oc).unwrap();
            assert_eq!(oc, out);
            g.bench_function(
                format!("n={n}/gradient (checkpointed, {s} snapshots)"),
                |b| b.iter(|| gc.eval(black_box(&P0), &mut oc).unwrap()),
            );
            // Its HVP: ∂⃗ of the checkpointed pullback is a checkpointed
            // loop of the tangent body, the same bits as the stored one.
            let mut hc = optic_ad::Hvp::array(fc, &P0).unwrap();
            let mut hvc = vec![0.0; 6];
            hc.eval(&P0, &V, &mut hvc).unwrap();
            assert_eq!(hvc, hv_one);
            g.bench_function(
                format!("n={n}/hvp (one pass, checkpointed, {s} snapshots)"),
                |b| b.iter(|| hc.eval(black_box(&P0), black_box(&V), &mut hvc).unwrap()),
            );
        }
        // The loss written over `Real` through the scalar drivers (the
        // user code of the loops issue), which trace it on the array trace.
        let fs = move |p: &[Tracer]| loss(p, n);
        let mut sg = Gradient::new(fs, &P0).unwrap();
        let mut sh = Hvp::new(fs, &P0).unwrap();
        assert!(sg.array_program().is_some() && sh.array_program().is_some());
        let (mut so, mut shv) = (vec![0.0; 6], vec![0.0; 6]);
        sg.eval(&P0, &mut so).unwrap();
        sh.linearize(&P0).unwrap();
        sh.apply(&V, &mut shv).unwrap();
        assert!(close(&so, &gd) && close(&shv, &hd));
        g.bench_function(format!("n={n}/scalar Gradient gradient"), |b| {
            b.iter(|| sg.eval(black_box(&P0), &mut so).unwrap())
        });
        g.bench_function(format!("n={n}/scalar Hvp (linearize + apply)"), |b| {
            b.iter(|| {
                sh.linearize(black_box(&P0)).unwrap();
                sh.apply(black_box(&V), &mut shv).unwrap()
            })
        });
        let mut one = [0.0; 6];
        sh.eval(&P0, &V, &mut one).unwrap();
        assert!(close(&one, &hd));
        g.bench_function(format!("n={n}/scalar Hvp (one pass)"), |b| {
            b.iter(|| sh.eval(black_box(&P0), black_box(&V), &mut one).unwrap())
        });
        // The primal alone: the traced program (one loop instruction whose
        // body runs `n` times) against the plain Rust loop.
        let prog = optic_ad::array::trace(|x: &[TArray]| loss_array(&x[0], n), &[&P0]).unwrap();
        let mut pws = optic_ad::array::ArrayWorkspace::new(&prog);
        pws.run(&prog, &[&P0]).unwrap();
        assert!(close(pws.output(&prog, 0), &[loss::<f64>(&P0, n).unwrap()]));
        g.bench_function(format!("n={n}/primal program"), |b| {
            b.iter(|| pws.run(&prog, &[black_box(&P0)]).unwrap())
        });
        // The final state (ℝ⁶ → ℝ²): one pullback at P0 (the forward loop
        // keeping its carries), then each application runs the reversed
        // loop only; its rows against num-dual.
        let state = move |p: &[Tracer]| {
            lotka_volterra::final_state_with(p, n, optic_ad::Checkpoints::Auto).map(|s| s.to_vec())
        };
        let (_, mut back) = optic_ad::pullback(state, &P0).unwrap();
        assert!(back.array_program().is_some());
        let mut row = vec![0.0; 6];
        let mut row_dual = vec![0.0; 6];
        for (i, e) in [[1.0, 0.0], [0.0, 1.0]].iter().enumerate() {
            back.apply(e, &mut row).unwrap();
            num_dual_gradient(
                |x| lotka_volterra::final_state_with(x, n, optic_ad::Checkpoints::Auto).unwrap()[i],
                &P0,
                &mut row_dual,
                &mut buf,
            );
            assert!(close(&row, &row_dual));
        }
        g.bench_function(format!("n={n}/final state: pullback apply"), |b| {
            b.iter(|| back.apply(black_box(&[0.7, -1.3]), &mut row).unwrap())
        });
        g.bench_function(format!("n={n}/final state: jacobian (one shot)"), |b| {
            b.iter(|| optic_ad::jacobian(state, black_box(&P0[..])).unwrap())
        });
        g.bench_function(format!("n={n}/scalar build Gradient"), |b| {
            b.iter(|| Gradient::new(fs, black_box(&P0)).unwrap())
        });
        g.bench_function(format!("n={n}/scalar build Hvp"), |b| {
            b.iter(|| Hvp::new(fs, black_box(&P0)).unwrap())
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).warm_up_time(std::time::Duration::from_millis(500)).measurement_time(std::time::Duration::from_secs(2));
    targets = bench_build, bench_rosenbrock, bench_logistic, bench_logistic_structured, bench_third, bench_third_sin_exp, bench_taylor_orders, bench_taylor_build, bench_evaluators, bench_hessian, bench_arrays_rosenbrock, bench_arrays_logistic, bench_arrays_minimal_surface, bench_arrays_mlp, bench_loops
}
criterion_main!(benches);
