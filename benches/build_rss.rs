//! Peak memory of building the compiled drivers, per instruction: traces
//! the scalar Rosenbrock loop at one size and builds `Gradient` or `Hvp`,
//! then prints the build time and the growth of the process's peak
//! resident set (`VmHWM` in `/proc/self/status`, Linux) per instruction of
//! the built programs. One size per process, so each peak is its own.
//!
//! `array-hvp` instead builds `Hvp::array` on Rosenbrock written with the
//! array API, runs three linearize + apply rounds and prints the process's
//! whole peak resident set (the issue's "peak RSS at n = 10⁶"), with the
//! part that was there before the build (binary, the caller's `x`, `v`).
//!
//! `loop-gradient`, `loop-gradient-stored` and `loop-hvp` build
//! `Gradient::array` (with `fold`'s default checkpointing, or keeping every
//! carry) or `Hvp::array` on the Lotka–Volterra RK4 loss of `n` steps (one
//! loop instruction, `benches/lotka_volterra.rs`), evaluate three times and
//! print the process's whole peak resident set.
//!
//! `scalar-loop-gradient`, `scalar-loop-gradient-stored` and
//! `scalar-loop-hvp` do the same through the scalar drivers `Gradient` and
//! `Hvp` on the loss written over `Real` (the user code of the loops issue),
//! which trace it on the array trace.
//!
//! ```text
//! cargo run --release -p optic-ad-bench --example build_rss -- loop-gradient 1000000
//! cargo run --release -p optic-ad-bench --example build_rss -- scalar-loop-gradient 1000000
//! cargo run --release -p optic-ad-bench --example build_rss -- hvp 1000000
//! cargo run --release -p optic-ad-bench --example build_rss -- gradient 100000
//! cargo run --release -p optic-ad-bench --example build_rss -- array-hvp 1000000
//! ```

use std::time::Instant;

use optic_ad::array;
use optic_ad::{Gradient, Hvp, Real};

#[allow(dead_code)]
mod lotka_volterra;
mod rosenbrock;

use rosenbrock::rosenbrock_array;

fn rosenbrock<T: Real>(x: &[T]) -> T {
    let mut s = T::cst(0.0);
    for i in 0..x.len() - 1 {
        let a = x[i + 1] - x[i] * x[i];
        let b = T::cst(1.0) - x[i];
        s += a * a * 100.0 + b * b;
    }
    s
}

/// `Hvp::array` at size `n`: three linearize + apply rounds, then the
/// process's peak resident set.
fn array_hvp(x: &[f64]) {
    let v: Vec<f64> = (0..x.len()).map(|i| ((i as f64) * 1.3).cos()).collect();
    let mut hv = vec![0.0; x.len()];
    let before = status_kb("VmHWM:");
    let t = Instant::now();
    let mut h = optic_ad::Hvp::array(rosenbrock_array, x).unwrap();
    let built = t.elapsed();
    for _ in 0..3 {
        h.linearize(x).unwrap();
        h.apply(&v, &mut hv).unwrap();
    }
    print!(
        "array-hvp n={}: {} array instructions built in {:.1} µs",
        x.len(),
        h.array_program().map_or(0, |p| p.len()),
        built.as_secs_f64() * 1e6
    );
    match (before, status_kb("VmHWM:")) {
        (Some(b), Some(a)) => println!(
            "; peak RSS after 3 linearize + apply {:.1} MB ({:.1} MB before building)",
            a as f64 / 1024.0,
            b as f64 / 1024.0
        ),
        _ => println!("; peak RSS unavailable (no /proc/self/status)"),
    }
}

/// A field of `/proc/self/status` in kB (`None` off Linux).
fn status_kb(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The array drivers on the loop problem of `n` steps (or, with the
/// `scalar-` prefix, the scalar drivers `Gradient` and `Hvp` on the same
/// loss written over `Real`, which trace it on the array trace): three
/// evaluations, then the process's peak resident set.
fn loop_driver(what: &str, n: usize) {
    use lotka_volterra::{loss_array_with, loss_with, P0, V};
    use optic_ad::Checkpoints;
    let scalar = what.starts_with("scalar-");
    let kind = what.trim_start_matches("scalar-");
    let c = if kind == "loop-gradient-stored" {
        Checkpoints::All
    } else {
        Checkpoints::Auto
    };
    let f = move |p: &array::TArray| loss_array_with(p, n, c);
    let fs = move |p: &[optic_ad::Tracer]| loss_with(p, n, c);
    let t = Instant::now();
    let mut out = [0.0; 6];
    let built = |t: Instant| {
        print!(
            "{what} n={n}: built in {:.1} µs",
            t.elapsed().as_secs_f64() * 1e6
        )
    };
    match (kind.starts_with("loop-gradient"), scalar) {
        (true, false) => {
            let mut g = optic_ad::Gradient::array(f, &P0).unwrap();
            built(t);
            for _ in 0..3 {
                g.eval(&P0, &mut out).unwrap();
            }
        }
        (true, true) => {
            let mut g = Gradient::new(fs, &P0).unwrap();
            built(t);
            assert!(g.array_program().is_some());
            for _ in 0..3 {
                g.eval(&P0, &mut out).unwrap();
            }
        }
        (false, false) => {
            let mut h = optic_ad::Hvp::array(f, &P0).unwrap();
            built(t);
            for _ in 0..3 {
                h.linearize(&P0).unwrap();
                h.apply(&V, &mut out).unwrap();
            }
        }
        (false, true) => {
            let mut h = Hvp::new(fs, &P0).unwrap();
            built(t);
            assert!(h.array_program().is_some());
            for _ in 0..3 {
                h.linearize(&P0).unwrap();
                h.apply(&V, &mut out).unwrap();
            }
        }
    }
    match status_kb("VmHWM:") {
        Some(a) => println!("; peak RSS after 3 evaluations {:.1} MB", a as f64 / 1024.0),
        None => println!("; peak RSS unavailable (no /proc/self/status)"),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let what = args.next().unwrap_or_else(|| "hvp".into());
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    if what.starts_with("loop-") || what.starts_with("scalar-loop-") {
        loop_driver(&what, n);
        return;
    }
    let x: Vec<f64> = (0..n)
        .map(|i| 0.5 + 0.4 * ((i as f64) * 0.7).sin())
        .collect();
    if what == "array-hvp" {
        array_hvp(&x);
        return;
    }
    let before = status_kb("VmHWM:");
    let t = Instant::now();
    let len = match what.as_str() {
        "gradient" => Gradient::new(rosenbrock, &x)
            .unwrap()
            .program()
            .unwrap()
            .len(),
        "hvp" => {
            let h = Hvp::new(rosenbrock, &x).unwrap();
            let (l, r) = h.programs().unwrap();
            l.len() + r.len()
        }
        other => {
            eprintln!(
                "unknown driver {other:?}: use gradient, hvp, array-hvp, [scalar-]loop-gradient, [scalar-]loop-gradient-stored or [scalar-]loop-hvp"
            );
            std::process::exit(2);
        }
    };
    let secs = t.elapsed().as_secs_f64();
    print!(
        "{what} n={n}: {len} instructions built in {:.1} ms, {:.1} ns per instruction",
        secs * 1e3,
        secs * 1e9 / len as f64
    );
    match (before, status_kb("VmHWM:")) {
        (Some(b), Some(a)) => println!(
            "; peak RSS {:.1} MB (+{:.1} MB while building, {:.1} bytes per instruction)",
            a as f64 / 1024.0,
            (a - b) as f64 / 1024.0,
            (a - b) as f64 * 1024.0 / len as f64
        ),
        _ => println!("; peak RSS unavailable (no /proc/self/status)"),
    }
}
