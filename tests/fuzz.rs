//! Fuzzing of everything a user controls (issue 6): programs deserialised
//! from arbitrary JSON text and from arbitrary structured values, every
//! public driver and constructor with arbitrary lengths, orders, seeds and
//! non-finite values, and user rules whose pullbacks misuse the builder.
//!
//! The property of every target is the same: no panic (each case runs
//! under `catch_unwind`), no abort, and no runaway allocation. Results may
//! be `Ok` or `Err`; where the misuse is detectable the error is checked.
//!
//! # Reach
//!
//! Hostile input that fails the first check tests only that check, so
//! every target draws most of its cases valid by construction (programs
//! built from random recipes over the whole primitive table, with hostile
//! constants, parameters and points; array steps fitted to the current
//! shape) and the rest hostile (mutated JSON, arbitrary indices and
//! sizes). Each target counts how far its cases get and prints a line
//!
//! ```text
//! [reach <target>] <cases> cases (<per second>/s): valid <%>, driver <%>, native <%>
//! ```
//!
//! where *valid* is a case that passed validation (a program that loaded,
//! a trace that succeeded), *driver* one that ran a driver to the end
//! (`Ok`, whatever the numbers), and *native* one that ran compiled machine
//! code (feature `jit`: a scalar program past its hot-call count, or an
//! array map of 2¹⁶ elements as a block kernel). The test fails if fewer
//! than half the cases of a target are valid or reach a driver, or if the
//! native target reaches native code in fewer than half its cases.
//!
//! proptest drives it (already the crate's property-test engine; its
//! strategies compose into the structured inputs below, and failures
//! shrink). The number of cases per target is `OPTIC_FUZZ_CASES`, 256 by
//! default so that CI stays quick; the long run is
//!
//! ```text
//! OPTIC_FUZZ_CASES=100000 cargo test --release --all-features --test suite fuzz:: -- --nocapture
//! ```

use crate::common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use num_dual::{Dual3_64, Dual64};
use optic_ad::functor::{laws, TaylorProgram};
use optic_ad::{
    derivative, derivative_with_error, gradient, hessian, hvp, jacobian, jvp, nest, reverse,
    split_stages, taylor, trace, vjp, Args, Builder, CustomRule, Derivatives, Error, Gradient, Hvp,
    Nested, Op, Prim, Program, Real, ScalarRule, Tracer, Var,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use serde_json::{json, Value};
use typenum::{U2, U3, U4};

fn cases() -> u32 {
    std::env::var("OPTIC_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

/// How far the cases of one target got (see the module's "Reach").
#[derive(Default)]
struct Reach {
    valid: AtomicU64,
    driver: AtomicU64,
    native: AtomicU64,
}

impl Reach {
    fn valid(&self) {
        self.valid.fetch_add(1, Relaxed);
    }
    fn driver(&self) {
        self.driver.fetch_add(1, Relaxed);
    }
    // Only the native target (feature `jit`) counts native code.
    #[cfg_attr(not(feature = "jit"), allow(dead_code))]
    fn native(&self) {
        self.native.fetch_add(1, Relaxed);
    }
    /// The fractions of `cases` that were valid, reached a driver, reached
    /// native code.
    fn fractions(&self, cases: u64) -> [f64; 3] {
        let f = |c: &AtomicU64| c.load(Relaxed) as f64 / cases.max(1) as f64;
        [f(&self.valid), f(&self.driver), f(&self.native)]
    }
}

/// Runs `body` on `cases()` values of `strategy`; fails on the first panic.
/// Prints the reach line and checks that at least half the cases were
/// valid and reached a driver.
fn fuzz<S: Strategy>(name: &str, strategy: S, body: impl Fn(S::Value, &Reach))
where
    S::Value: std::fmt::Debug + Clone,
{
    let reach = Reach::default();
    let start = Instant::now();
    fuzz_quietly(name, strategy, |v| body(v, &reach));
    let cases = u64::from(cases());
    let [valid, driver, native] = reach.fractions(cases);
    eprintln!(
        "[reach {name}] {cases} cases ({:.0}/s): valid {:.0}%, driver {:.0}%, native {:.0}%",
        cases as f64 / start.elapsed().as_secs_f64(),
        100.0 * valid,
        100.0 * driver,
        100.0 * native
    );
    assert!(
        valid >= 0.5,
        "[reach {name}] valid in {:.0}% of cases",
        100.0 * valid
    );
    assert!(
        driver >= 0.5,
        "[reach {name}] a driver in {:.0}% of cases",
        100.0 * driver
    );
    if name == "native" && cfg!(feature = "jit") {
        assert!(
            native >= 0.5,
            "[reach {name}] native code in {:.0}% of cases",
            100.0 * native
        );
    }
}

/// [`fuzz`] without the reach line.
fn fuzz_quietly<S: Strategy>(name: &str, strategy: S, body: impl Fn(S::Value))
where
    S::Value: std::fmt::Debug + Clone,
{
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(0x0f_0f_ad),
        max_shrink_iters: 200,
        ..Config::default()
    });
    let n = std::cell::Cell::new(0u64);
    let result = runner.run(&strategy, |v| {
        n.set(n.get() + 1);
        let v2 = v.clone();
        match catch_unwind(AssertUnwindSafe(|| body(v2))) {
            Ok(()) => Ok(()),
            Err(_) => Err(TestCaseError::fail(format!("panicked on {v:?}"))),
        }
    });
    eprintln!(
        "[fuzz {name}] {} cases, no panic: {}",
        n.get(),
        result.is_ok()
    );
    if let Err(e) = result {
        panic!("[fuzz {name}] {e}");
    }
}

/// A value that is often hostile: ±0, ±∞, NaN, tiny, huge, or ordinary.
fn scalar() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => -4.0..4.0f64,
        1 => Just(0.0),
        1 => Just(-0.0),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(f64::NAN),
        1 => Just(1e-310),
        1 => Just(1e308),
        1 => any::<f64>(),
    ]
}

fn scalars(max: usize) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(scalar(), 0..=max)
}

/// A program over the whole primitive table, valid by construction: each
/// step applies a primitive (any parameter) to earlier values, or is a
/// hostile constant.
#[derive(Clone, Debug)]
struct Recipe {
    n_inputs: usize,
    steps: Vec<RecipeStep>,
    /// Outputs, each an index into the values (reduced modulo their count).
    outputs: Vec<usize>,
}

#[derive(Clone, Debug)]
enum RecipeStep {
    Const(f64),
    Apply(Prim, i32, [usize; 3]),
}

impl Recipe {
    /// Runs the steps from `vals` (the inputs), `push` making each step's
    /// value from its operands; returns every value. Operand `i` of a step
    /// is the value `i` places back (modulo the count so far).
    fn walk<V: Copy>(
        &self,
        mut vals: Vec<V>,
        mut push: impl FnMut(&RecipeStep, &[V]) -> V,
    ) -> Vec<V> {
        for st in &self.steps {
            let args: Vec<V> = match *st {
                RecipeStep::Const(_) => Vec::new(),
                RecipeStep::Apply(prim, _, ops) => ops[..prim.arity()]
                    .iter()
                    .map(|&i| vals[vals.len() - 1 - i % vals.len()])
                    .collect(),
            };
            let v = push(st, &args);
            vals.push(v);
        }
        vals
    }

    /// The recipe as a program of `n_inputs` inputs.
    fn build(&self) -> Program {
        let mut b = Builder::new();
        let inputs: Vec<Var> = (0..self.n_inputs).map(|_| b.input()).collect();
        let vals = self.walk(inputs, |st, args| match *st {
            RecipeStep::Const(c) => b.constant(c),
            RecipeStep::Apply(prim, param, _) => b.apply(prim, param, args),
        });
        let outs: Vec<Var> = self.outputs.iter().map(|&i| vals[i % vals.len()]).collect();
        b.finish(&outs).expect("recipes are valid by construction")
    }

    /// The last value of the recipe as a function of `x` (any length; a
    /// constant ½ stands in for an empty `x`), on any scalar.
    fn eval<T: Real>(&self, x: &[T]) -> T {
        let inputs = if x.is_empty() {
            vec![T::cst(0.5)]
        } else {
            x.to_vec()
        };
        let vals = self.walk(inputs, |st, args| match *st {
            RecipeStep::Const(c) => T::cst(c),
            RecipeStep::Apply(prim, param, _) => T::apply(prim, param, args),
        });
        *vals.last().expect("nonempty")
    }
}

/// A parameter: small (the exponents and orders that matter) or any.
fn param() -> impl Strategy<Value = i32> {
    prop_oneof![6 => -4i32..6, 1 => any::<i32>()]
}

fn recipe() -> impl Strategy<Value = Recipe> {
    let prims: Vec<Prim> = Prim::all().collect();
    let step = prop_oneof![
        1 => scalar().prop_map(RecipeStep::Const),
        6 => (prop::sample::select(prims), param(), [0usize..6, 0usize..6, 0usize..6])
            .prop_map(|(p, k, ops)| RecipeStep::Apply(p, k, ops)),
    ];
    (
        1usize..5,
        prop::collection::vec(step, 1..24),
        prop::collection::vec(any::<usize>(), 1..4),
    )
        .prop_map(|(n_inputs, steps, outputs)| Recipe {
            n_inputs,
            steps,
            outputs,
        })
}

/// Exercises a program that loaded: evaluation, transforms, printing.
/// Counts the case as reaching a driver where ∂⃖'s joint program ran.
fn exercise(p: &Program, reach: &Reach) {
    let _ = p.validate();
    let _ = format!("{p}");
    if p.n_inputs() > 64 || p.len() > 4096 {
        return;
    }
    let x: Vec<f64> = (0..p.n_inputs()).map(|i| 0.3 + i as f64).collect();
    let _ = p.eval(&x);
    let _ = p.eval(&x[..x.len().saturating_sub(1)]);
    let _ = p.schedule().eval(&x);
    if let Ok(r) = reverse(p) {
        let joint = r
            .joint()
            .eval(&[x.clone(), vec![1.0; p.n_outputs()]].concat());
        if joint.is_ok() {
            reach.driver();
        }
    }
    if let Ok(mut t) = TaylorProgram::new(p, 4) {
        let jets: Vec<f64> = x.iter().flat_map(|&a| [a, 1.0, 0.0, 0.0, 0.0]).collect();
        let mut out = vec![0.0; 5 * p.n_outputs()];
        let mut err = out.clone();
        let _ = t.eval_with_error(&jets, &mut out, &mut err);
        // Error estimates of the wrong length.
        let short = err.len().min(1);
        let _ = t.eval_with_error(&jets, &mut out, &mut err[short..]);
    }
    let _ = optic_ad::functor::forward(p).eval(&[x.clone(), x.clone()].concat());
    if p.len() < 256 {
        let _ = nest(p, 2).map(|q| q.len());
    }
    let _ = p.specialize(&vec![None; p.n_inputs()], &[0]);
    let _ = p.permute_blocks(&[0], &[0]);
    let _ = p.dce();
    let _ = split_stages(p, &[0], &[0], 1);
    let json = serde_json::to_string(p).expect("a loaded program serialises");
    let q: Program = serde_json::from_str(&json).expect("and loads again");
    let bits = |v: Vec<f64>| v.into_iter().map(f64::to_bits).collect::<Vec<_>>();
    if let (Ok(a), Ok(b)) = (p.eval(&x), q.eval(&x)) {
        assert_eq!(bits(a), bits(b), "round trip changed values");
    }
}

/// Replaces the number that starts at or after byte `at` of `s` by `tok`.
fn replace_number(s: &mut String, at: usize, tok: &str) {
    if let Some(off) = s[at..].find(|c: char| c.is_ascii_digit()) {
        let start = at + off;
        let end = s[start..]
            .find(|c: char| !c.is_ascii_digit())
            .map_or(s.len(), |e| start + e);
        s.replace_range(start..end, tok);
    }
}

/// The JSON of a fixed valid program, the base of the mutations.
fn valid_program_json() -> String {
    let p = trace(
        |x| {
            let y = x[0].sin() * x[1] + x[1].hypot(x[0]).ln_1p();
            vec![y, x[0].powi(3).max(x[1]), x[1].polygamma(1)]
        },
        &[0.4, 1.5],
    )
    .unwrap();
    serde_json::to_string(&p).unwrap()
}

/// Arbitrary text, valid JSON with characters replaced or spliced in, and
/// (most cases) the JSON of a random valid program.
#[test]
fn fuzz_program_from_json_text() {
    let base = valid_program_json();
    let len = base.len();
    let text = prop_oneof![
        10 => recipe().prop_map(|r| serde_json::to_string(&r.build()).unwrap()),
        1 => "[ -~]{0,200}".prop_map(|s| s),
        1 => (0..len, "[-0-9eE.:\\[\\]{}\",a-z]{1,24}").prop_map(move |(at, ins)| {
            let mut s = valid_program_json();
            let at = (0..=at).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
            s.insert_str(at, &ins);
            s
        }),
        1 => (0..len, 1usize..12).prop_map(move |(at, n)| {
            let mut s = valid_program_json();
            let at = (0..=at).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
            let end = (at + n).min(s.len());
            let end = (end..=s.len())
                .find(|&i| s.is_char_boundary(i))
                .unwrap_or(s.len());
            s.replace_range(at..end, "");
            s
        }),
        1 => (
            0..len,
            prop::sample::select(vec![
                "18446744073709551615",
                "1000000000000",
                "-1",
                "1e400",
                "\"nan:0x7ff8000000000001\"",
                "\"inf\"",
                "null",
                "4294967295",
                "[]",
                "{}",
            ])
        )
            .prop_map(move |(at, tok)| {
                let mut s = valid_program_json();
                replace_number(&mut s, at, tok);
                s
            }),
    ];
    fuzz("json text", text, |s, reach| {
        if let Ok(p) = serde_json::from_str::<Program>(&s) {
            reach.valid();
            exercise(&p, reach);
        }
    });
}

fn op_value() -> impl Strategy<Value = Value> {
    let index = prop_oneof![3 => 0u64..8, 1 => any::<u64>(), 1 => Just(u32::MAX as u64)];
    let names: Vec<&'static str> = Prim::all()
        .map(|p| {
            let s: &'static str = Box::leak(format!("{p:?}").into_boxed_str());
            s
        })
        .chain(["Nope", ""])
        .collect();
    prop_oneof![
        index.clone().prop_map(|k| json!({ "Input": k })),
        scalar().prop_map(|c| {
            if c.is_finite() {
                json!({ "Const": c })
            } else {
                json!({ "Const": if c.is_nan() { "nan:0x7ff8000000000000".to_string() } else if c > 0.0 { "inf".into() } else { "-inf".into() } })
            }
        }),
        (
            prop::sample::select(names),
            any::<i32>(),
            prop::collection::vec(index.clone(), 0..5)
        )
            .prop_map(|(p, param, args)| json!({ "Apply": { "prim": p, "param": param, "args": args } })),
        (index.clone(), prop::collection::vec(index, 0..5))
            .prop_map(|(rule, args)| json!({ "Custom": { "rule": rule, "args": args } })),
    ]
}

/// One field of a valid program's value replaced by a hostile one: an
/// operand, an output, the input count, a primitive's name or parameter.
fn mutate(mut v: Value, which: usize, hostile: u64) -> Value {
    let n_ops = v["ops"].as_array().map_or(0, Vec::len).max(1);
    let at = which / 5 % n_ops;
    match which % 5 {
        0 => {
            if let Some(args) = v["ops"][at]["Apply"]["args"].as_array_mut() {
                if let Some(a) = args.first_mut() {
                    *a = json!(hostile);
                }
            }
        }
        1 => {
            if let Some(o) = v["outputs"].as_array_mut().and_then(|o| o.first_mut()) {
                *o = json!(hostile);
            }
        }
        2 => v["n_inputs"] = json!(hostile),
        3 => {
            if v["ops"][at]["Apply"].is_object() {
                v["ops"][at]["Apply"]["prim"] =
                    json!(["Nope", "Sin", "Select", "Add"][(hostile % 4) as usize]);
            }
        }
        _ => {
            if v["ops"][at]["Apply"].is_object() {
                v["ops"][at]["Apply"]["param"] = json!(hostile as i64);
            }
        }
    }
    v
}

/// Arbitrary structured values of the program's shape, and (most cases)
/// the values of random valid programs, some with one field mutated.
#[test]
fn fuzz_program_from_structured_values() {
    let size = prop_oneof![4 => 0u64..8, 1 => any::<u64>()];
    let idx = prop_oneof![4 => 0u64..10, 1 => any::<u64>()];
    let guard = (
        idx.clone(),
        idx.clone(),
        prop::sample::select(vec![json!(-1), json!(0), json!(1), json!(null), json!(2)]),
    )
        .prop_map(|(a, b, o)| json!({ "a": a, "b": b, "ordering": o }));
    let value = (
        size.clone(),
        prop::collection::vec(op_value(), 0..12),
        prop::collection::vec(idx.clone(), 0..4),
        prop::collection::vec(guard, 0..3),
        prop::collection::vec(size.clone(), 0..3),
        prop::collection::vec(size, 0..3),
    )
        .prop_map(|(n, ops, outputs, guards, ib, ob)| {
            json!({
                "n_inputs": n, "ops": ops, "outputs": outputs, "guards": guards,
                "input_blocks": ib, "output_blocks": ob,
            })
        });
    let hostile = prop_oneof![3 => 0u64..12, 1 => any::<u64>(), 1 => Just(u64::from(u32::MAX))];
    let value = prop_oneof![
        6 => recipe().prop_map(|r| serde_json::to_value(r.build()).unwrap()),
        2 => (recipe(), any::<usize>(), hostile)
            .prop_map(|(r, which, h)| mutate(serde_json::to_value(r.build()).unwrap(), which, h)),
        1 => value,
    ];
    fuzz("structured values", value, |v, reach| {
        if let Ok(p) = serde_json::from_value::<Program>(v) {
            reach.valid();
            exercise(&p, reach);
        }
    });
}

/// Every driver and constructor with arbitrary lengths, orders, seeds and
/// non-finite values.
#[test]
fn fuzz_drivers() {
    // Deep nesting runs until the size budget refuses it (about a second):
    // rare, so that the long run stays within the hour.
    let order = prop_oneof![200 => 0usize..5, 1 => 5usize..24];
    let input = (
        recipe(),
        scalars(4),
        scalars(4),
        scalars(4),
        order,
        any::<usize>(),
    );
    fuzz("drivers", input, |(f, x, v, w, order, big), reach| {
        let g = |t: &[Tracer]| f.eval(t);
        let gv = |t: &[Tracer]| vec![f.eval(t), f.eval(t) * 2.0];
        if trace(|t| vec![f.eval(t)], &x).is_ok() {
            reach.valid();
        }
        if gradient(g, &x).is_ok() {
            reach.driver();
        }
        let _ = vjp(gv, &x, &w);
        if let Ok((_, mut back)) = optic_ad::pullback(gv, &x) {
            let _ = back.call(&w);
            let _ = back.call(&v);
            let _ = back.apply(&w, &mut vec![0.0; v.len()]);
        }
        let _ = jvp(gv, &x, &v);
        let _ = hvp(g, &x, &v);
        let _ = hessian(g, &x);
        let _ = jacobian(gv, &x);
        let x0 = x.first().copied().unwrap_or(0.3);
        let s = |t: Tracer| f.eval(&[t]);
        let _ = derivative::<U3, _, _>(s, x0);
        let _ = derivative_with_error::<U4, _>(s, x0);
        let _ = taylor::<U4, _, _>(g, &x, &v);
        if let Ok(mut d) = Derivatives::<U2, _>::new(s, x0) {
            for &p in &v {
                let _ = d.eval(p);
            }
        }
        if let Ok(mut gr) = Gradient::new(g, &x) {
            let mut out = vec![0.0; w.len()];
            let _ = gr.eval(&v, &mut out);
            let _ = gr.eval(&x, &mut vec![0.0; x.len()]);
        }
        if let Ok(mut h) = Hvp::new(g, &x) {
            let mut out = vec![0.0; w.len()];
            let _ = h.apply(&v, &mut out);
            let _ = h.linearize(&v);
            let _ = h.apply(&v, &mut out);
            let _ = h.linearize_with_gradient(&x, &mut out);
            let _ = h.eval(&x, &v, &mut out);
            let _ = (h.value(), h.gradient().len());
        }
        // The recipe iterated by a `fold` whose body reads the point (the
        // scalar drivers trace it on the array trace, or unroll it).
        // Its pullback keeps every carry, or (odd `big`) checkpoints with
        // one to four snapshots, so that its HVPs are checkpointed loops.
        let steps = big % 30;
        let ck = if big % 2 == 0 {
            optic_ad::Checkpoints::Auto
        } else {
            optic_ad::Checkpoints::Binomial(1 + big % 4)
        };
        let gl = |t: &[Tracer]| -> optic_ad::Result<Tracer> {
            let [c] = optic_ad::fold_with(steps, [f.eval(t)], ck, |[c]: [Tracer; 1]| {
                let mut y = t.to_vec();
                match y.first_mut() {
                    Some(y0) => *y0 = c,
                    None => y.push(c),
                }
                [f.eval(&y) * 0.5]
            })?;
            Ok(c)
        };
        let _ = gradient(gl, &x);
        let _ = hvp(gl, &x, &v);
        let _ = hessian(gl, &x);
        let _ = taylor::<U4, _, _>(gl, &x, &v);
        let _ = derivative::<U3, _, _>(|t: Tracer| gl(&[t]), x0);
        // Several results through the loop: jvp, vjp, jacobian, pullback.
        let glv = |t: &[Tracer]| -> optic_ad::Result<Vec<Tracer>> {
            let c = gl(t)?;
            Ok(vec![c, c * t.first().copied().unwrap_or(c)])
        };
        let _ = jvp(glv, &x, &v);
        let _ = vjp(glv, &x, &w);
        let _ = jacobian(glv, &x);
        if let Ok((_, mut back)) = optic_ad::pullback(glv, &x) {
            let _ = back.call(&w);
            let _ = back.apply(&v, &mut vec![0.0; w.len()]);
            let _ = back.call_point(&[1.0, 0.0], &v);
        }
        if let Ok(mut d) = Derivatives::<U2, _>::new(|t: Tracer| gl(&[t]), x0) {
            for &p in &v {
                let _ = d.eval(p);
                let _ = d.eval_with_error(p);
            }
        }
        if let Ok(mut gr) = Gradient::new(gl, &x) {
            let _ = gr.eval(&v, &mut vec![0.0; v.len()]);
            let _ = gr.eval_at(&v);
        }
        if let Ok(mut d) = optic_ad::Directional::new(gl, &x, 2) {
            let _ = d.eval(&v, &w, &mut [0.0; 3]);
            let _ = d.eval_at(&v, &w);
            let duals: Vec<num_dual::Dual64> = v.iter().map(|&t| t.into()).collect();
            let _ = d.eval_at(&duals, &duals);
        }
        if let Ok(mut h) = Hvp::new(gl, &x) {
            let mut out = vec![0.0; x.len()];
            let _ = h.linearize(&v);
            let _ = h.apply(&w, &mut out);
            let _ = h.apply_many(
                &[w.clone(), v.clone()].concat(),
                &mut vec![0.0; 2 * x.len()],
            );
            let _ = h.hvp_at(&x, &v);
            let _ = h.eval(&v, &w, &mut out);
            if let Ok((m, _)) = optic_ad::optic::Optic::left(&h, x.clone()) {
                let _ = optic_ad::optic::Optic::right(&h, m, w.clone());
            }
        }
        // A structured point (a scalar and a `Vec`), with directions of
        // arbitrary shape.
        if let Some((&a, rest)) = x.split_first() {
            let p = (a, rest.to_vec());
            let dv = (
                v.first().copied().unwrap_or(0.0),
                v.iter().skip(1).copied().collect::<Vec<_>>(),
            );
            let gs = |t: &(Tracer, Vec<Tracer>)| {
                let mut leaves = vec![t.0];
                leaves.extend_from_slice(&t.1);
                f.eval(&leaves)
            };
            let _ = gradient(gs, &p);
            let _ = hvp(gs, &p, &dv);
            let _ = hessian(gs, &p);
            let _ = optic_ad::d3(gs, &p, &dv, &p, &dv);
            if let Ok(mut gr) = Gradient::structured(gs, &p) {
                let _ = gr.eval_point(&dv);
                let _ = gr.eval_point(&p);
            }
            if let Ok(mut h) = Hvp::structured(gs, &p) {
                let _ = h.apply_point(&dv);
                let _ = h.linearize_point(&dv);
                let _ = h.apply_point(&p);
            }
        }
        // The same function on num-dual numbers.
        let d: Vec<Dual3_64> = x.iter().map(|&a| Dual3_64::new(a, 1.0, 0.0, 0.0)).collect();
        let _ = f.eval(&d);
        let d: Vec<Dual64> = x.iter().map(|&a| Dual64::new(a, 1.0)).collect();
        let _ = f.eval(&d);
        // Programs, orders and stages.
        if let Ok(p) = trace(|t| vec![f.eval(t)], &x) {
            let _ = nest(&p, order);
            let _ = nest(&p, big);
            if let Ok(mut n) = Nested::<U2>::new(&p) {
                if let Ok((_, l0)) = n.primal(&x) {
                    if let Ok((_, l1)) = l0.call(&w) {
                        let _ = l1.call(&v);
                    }
                }
            }
            let stages: Vec<usize> = v.iter().map(|a| (a.abs() as usize) % 3).collect();
            let _ = split_stages(&p, &stages, &stages, big % 4);
            let perm: Vec<usize> = v.iter().map(|a| (a.abs() as usize) % 3).collect();
            let _ = p.permute_blocks(&perm, &perm);
            let fixed: Vec<Option<f64>> = w.iter().map(|&a| a.is_finite().then_some(a)).collect();
            let _ = p.specialize(&fixed, &[big % 3]);
            let _ = laws::preserves_identity(big % (1 << 40), &x, &v);
            let _ = laws::forward_preserves_identity(big % (1 << 40), &x, &v);
            let _ = laws::composition_law(&p, &p, &x, &w, 1e-9);
            let _ = laws::identity_laws(&p, &x, &w, 1e-9);
        }
    });
}

/// A pullback that misuses its builder in a random way.
#[derive(Clone, Debug)]
struct Misbehaving {
    kind: u8,
    index: u32,
    prim: Prim,
    arity: usize,
}

impl ScalarRule for Misbehaving {
    fn name(&self) -> &str {
        "misbehaving"
    }
    fn value(&self, x: f64) -> f64 {
        x.sin()
    }
    fn pullback(&self, b: &mut Builder, x: Var, _y: Var, ct: Var) -> Var {
        let foreign = || {
            let mut other = Builder::new();
            let mut v = other.input();
            for _ in 0..(self.index % 300) {
                v = other.exp(v);
            }
            v
        };
        match self.kind % 7 {
            0 => foreign(),
            1 => {
                let args = Args::new(&[x]).expect("one operand");
                b.push(Op::Custom {
                    rule: self.index,
                    args,
                })
            }
            2 => {
                let z = b.input();
                b.mul(ct, z)
            }
            3 => {
                // A primitive with the wrong number of operands.
                let ops = vec![x; self.arity];
                b.apply(self.prim, 0, &ops)
            }
            4 => {
                // An operand from another builder inside a pushed instruction.
                let f = foreign();
                b.mul(ct, f)
            }
            5 => {
                let c = b.cos(x);
                b.mul(ct, c)
            }
            _ => ct,
        }
    }
}

/// User rules whose pullbacks misuse the builder, through every driver.
#[test]
fn fuzz_user_rules() {
    let prims: Vec<Prim> = Prim::all().collect();
    // Most rules sound (kinds 5 and 6, or 3 with the right arity), the
    // rest misusing the builder in one of the other ways.
    let kind = prop_oneof![3 => prop::sample::select(vec![5u8, 6]), 2 => any::<u8>()];
    let rule = (kind, any::<u32>(), prop::sample::select(prims), 0usize..5).prop_map(
        |(kind, index, prim, arity)| Misbehaving {
            kind,
            index,
            prim,
            arity,
        },
    );
    let x = prop_oneof![4 => prop::collection::vec(scalar(), 1..=3), 1 => scalars(3)];
    fuzz("user rules", (rule, x), |(m, x), reach| {
        let sound = matches!(m.kind % 7, 5 | 6) || (m.kind % 7 == 3 && m.arity == m.prim.arity());
        if sound {
            reach.valid();
        }
        let r = CustomRule::new(m);
        let g = |t: &[Tracer]| {
            t.iter()
                .fold(Tracer::cst(0.0), |a, &v| a + v.apply_rule(&r))
        };
        let grad = gradient(g, &x);
        if grad.is_ok() {
            reach.driver();
        }
        let results = [
            grad.err(),
            hvp(g, &x, &x).err(),
            derivative::<U2, _, _>(|t| t.apply_rule(&r), x.first().copied().unwrap_or(0.2)).err(),
        ];
        for e in results.into_iter().flatten() {
            if !sound {
                assert!(
                    matches!(e, Error::BadRule { .. } | Error::EmptyInput(_)),
                    "a misuse reported as {e:?}"
                );
            }
        }
        let _ = Dual3_64::new(0.4, 1.0, 0.0, 0.0).apply_rule(&r);
    });
}

/// One operation of a random array function, with arbitrary (often
/// invalid) sizes, offsets and indices.
#[derive(Clone, Debug)]
enum ArrayStep {
    Map(Prim, i32),
    Map2(Prim, usize),
    /// `map_n` of the current value and values `j` steps back (lengths
    /// may differ).
    MapN(Vec<usize>),
    Slice(usize, usize),
    Gather(Vec<usize>),
    Scatter(Vec<usize>, usize),
    MatVec(usize, usize, Vec<f64>),
    VecMat(usize, usize, Vec<f64>),
    Get(usize),
    Concat,
    Compare,
    /// The current value as a `rows × cols` matrix (often the wrong
    /// size), times the value `j` steps back as a matrix of
    /// `rows2 × cols2`, with these transpositions.
    MatMul(usize, usize, usize, usize, usize, bool, bool),
    /// The current value as a matrix, transposed, summed along an axis
    /// (often not 0 or 1).
    SumAxis(usize, usize, usize),
    /// The current value broadcast along an axis into `rows × cols`.
    BroadcastAxis(usize, usize, usize),
    /// `Mat::matvec`, `Mat::vecmat`, `Mat::outer`, `row` and `get` on the
    /// current value as a `rows × cols` matrix.
    MatVecTraced(usize, usize, usize),
    /// A `fold` of this many steps (taken modulo 40) on a carry of two
    /// scalars, its body applying a unary primitive and reading the
    /// running scalar of the enclosing function (a capture).
    Fold(usize, Prim, i32),
    /// A `while_loop` of at most this many steps (modulo 40) while the
    /// first carried value is below the bound, a capture in its body.
    While(usize, f64),
}

/// The unary primitives (of the map and fold steps).
fn unary_prims() -> Vec<Prim> {
    Prim::all().filter(|p| p.arity() == 1).collect()
}

fn array_step() -> impl Strategy<Value = ArrayStep> {
    let unary = unary_prims();
    let binary: Vec<Prim> = Prim::all().filter(|p| p.arity() == 2).collect();
    let idx = prop::collection::vec(prop_oneof![4 => 0usize..6, 1 => any::<usize>()], 0..6);
    prop_oneof![
        (prop::sample::select(unary.clone()), -3i32..4).prop_map(|(p, k)| ArrayStep::Map(p, k)),
        (prop::sample::select(binary), 0usize..4).prop_map(|(p, j)| ArrayStep::Map2(p, j)),
        prop::collection::vec(0usize..6, 0..5).prop_map(ArrayStep::MapN),
        (0usize..7, 0usize..7).prop_map(|(s, l)| ArrayStep::Slice(s, l)),
        idx.clone().prop_map(ArrayStep::Gather),
        (idx, 0usize..7).prop_map(|(i, n)| ArrayStep::Scatter(i, n)),
        (0usize..5, 0usize..5, scalars(25)).prop_map(|(r, c, d)| ArrayStep::MatVec(r, c, d)),
        (0usize..5, 0usize..5, scalars(25)).prop_map(|(r, c, d)| ArrayStep::VecMat(r, c, d)),
        (0usize..7).prop_map(ArrayStep::Get),
        Just(ArrayStep::Concat),
        Just(ArrayStep::Compare),
        (
            (0usize..5, 0usize..5, 0usize..4),
            (0usize..5, 0usize..5, any::<bool>(), any::<bool>())
        )
            .prop_map(|((r, c, j), (r2, c2, ta, tb))| ArrayStep::MatMul(r, c, j, r2, c2, ta, tb)),
        (0usize..5, 0usize..5, 0usize..3).prop_map(|(r, c, a)| ArrayStep::SumAxis(r, c, a)),
        (0usize..5, 0usize..5, 0usize..3).prop_map(|(r, c, a)| ArrayStep::BroadcastAxis(r, c, a)),
        (0usize..5, 0usize..5, 0usize..4).prop_map(|(r, c, i)| ArrayStep::MatVecTraced(r, c, i)),
        (any::<usize>(), prop::sample::select(unary), -3i32..4)
            .prop_map(|(n, p, k)| ArrayStep::Fold(n, p, k)),
        (any::<usize>(), -2.0f64..4.0).prop_map(|(n, b)| ArrayStep::While(n, b)),
    ]
}

/// `st` with its sizes, offsets and indices fitted to the current value's
/// length `len ≥ 1`, so that it succeeds: the valid-by-construction
/// cases of the array target.
fn fit_step(st: &ArrayStep, len: usize) -> ArrayStep {
    use ArrayStep as S;
    let idx = |i: &[usize]| i.iter().map(|&k| k % len).collect::<Vec<_>>();
    let data = |d: &[f64], n: usize| {
        (0..n)
            .map(|k| d.get(k % d.len().max(1)).copied().unwrap_or(0.5))
            .collect()
    };
    match st {
        S::Slice(a, l) => {
            let a = a % len;
            S::Slice(a, 1 + l % (len - a))
        }
        S::Gather(i) if i.is_empty() => S::Gather(vec![0]),
        S::Gather(i) => S::Gather(idx(i)),
        S::Scatter(i, n) => {
            let n = 1 + n % 6;
            S::Scatter(i.iter().map(|&k| k % n).collect(), n)
        }
        S::MatVec(r, _, d) => {
            let r = 1 + r % 4;
            S::MatVec(r, len, data(d, r * len))
        }
        S::VecMat(_, c, d) => {
            let c = 1 + c % 4;
            S::VecMat(len, c, data(d, len * c))
        }
        S::Get(i) => S::Get(i % len),
        // The current value as a 1 × len row times the value j steps back
        // taken as len × 1 only where it has that length: use the current
        // value itself (j = 0) as the column.
        S::MatMul(..) => S::MatMul(1, len, 0, len, 1, false, false),
        S::SumAxis(_, _, axis) => S::SumAxis(1, len, axis % 2),
        S::BroadcastAxis(r, _, 0) => S::BroadcastAxis(1 + r % 3, len, 0),
        S::BroadcastAxis(_, c, _) => S::BroadcastAxis(len, 1 + c % 3, 1),
        S::MatVecTraced(..) => S::MatVecTraced(1, len, 0),
        other => other.clone(),
    }
}

/// Runs the steps on any array; errors end the run early. With `fit`,
/// each step is first fitted to the current value ([`fit_step`]).
fn run_array_steps<A: optic_ad::array::Array>(
    x: &A,
    steps: &[ArrayStep],
    fit: bool,
) -> optic_ad::Result<A::Scalar> {
    use optic_ad::array::{Indices, Mat, Matrix};
    use std::sync::Arc;
    let mut vals = vec![x.clone()];
    let mut s = x.sum();
    for st in steps {
        let cur = vals.last().expect("non-empty").clone();
        let fitted;
        let st = if fit && cur.len() > 0 {
            fitted = fit_step(st, cur.len());
            &fitted
        } else {
            st
        };
        let next = match st {
            ArrayStep::Map(p, k) => cur.map(|t| <A::Elem as Real>::apply(*p, *k, &[t])),
            ArrayStep::Map2(p, j) => {
                let other = vals[vals.len() - 1 - j % vals.len()].clone();
                cur.map2(&other, |a, b| <A::Elem as Real>::apply(*p, 0, &[a, b]))?
            }
            ArrayStep::MapN(back) => {
                let others: Vec<A> = back
                    .iter()
                    .map(|j| vals[vals.len() - 1 - j % vals.len()].clone())
                    .collect();
                let refs: Vec<&A> = others.iter().collect();
                cur.map_n(&refs, |x| x.iter().fold(x[0], |s, &t| s * 0.5 + t))?
            }
            ArrayStep::Slice(a, l) => cur.slice(*a, *l)?,
            ArrayStep::Gather(i) => cur.gather(&Indices::new(i))?,
            ArrayStep::Scatter(i, n) => cur.scatter_add(&Indices::new(i), *n)?,
            ArrayStep::MatVec(r, c, d) => {
                A::matvec(&Arc::new(Matrix::new(*r, *c, d.clone())?), &cur)?
            }
            ArrayStep::VecMat(r, c, d) => {
                A::vecmat(&Arc::new(Matrix::new(*r, *c, d.clone())?), &cur)?
            }
            ArrayStep::Get(i) => {
                s += cur.get(*i)?;
                cur
            }
            ArrayStep::Concat => cur.concat(&cur),
            ArrayStep::MatMul(r, c, j, r2, c2, ta, tb) => {
                let other = vals[vals.len() - 1 - j % vals.len()].clone();
                let a = Mat::new(cur, *r, *c)?;
                let b = Mat::new(other, *r2, *c2)?;
                a.matmul_t(&b, *ta, *tb)?.into_data()
            }
            ArrayStep::SumAxis(r, c, axis) => Mat::new(cur, *r, *c)?.t().sum_axis(*axis)?,
            ArrayStep::BroadcastAxis(r, c, axis) => {
                Mat::broadcast_axis(&cur, *axis, *r, *c)?.into_data()
            }
            ArrayStep::MatVecTraced(r, c, i) => {
                let a = Mat::new(cur.clone(), *r, *c)?;
                s += a.get(*i, *i)?;
                let y = a.matvec(&a.row(*i)?)?;
                Mat::outer(&a.vecmat(&y)?, &y)?.into_data()
            }
            ArrayStep::Fold(n, p, k) => {
                let captured = s;
                // Checkpointed (one to three snapshots) for odd `n`.
                let ck = if n % 2 == 0 {
                    optic_ad::Checkpoints::All
                } else {
                    optic_ad::Checkpoints::Binomial(1 + n % 3)
                };
                let [a, b] =
                    optic_ad::fold_with(n % 40, [s, cur.sum()], ck, |[a, b]: [A::Scalar; 2]| {
                        let t = <A::Scalar as Real>::apply(*p, *k, &[a]);
                        [t * 0.5 + b * 0.25, b * 0.9 + a * captured * 0.01]
                    })?;
                s += a * b;
                cur
            }
            ArrayStep::While(n, bound) => {
                let captured = s;
                let [a, b] = optic_ad::while_loop(
                    n % 40,
                    [s, cur.sum()],
                    |[a, _]| *a < *bound,
                    |[a, b]: [A::Scalar; 2]| {
                        [
                            a * 0.9 + b.tanh() * 0.05 + 0.1,
                            b * 0.95 + a * captured * 0.01,
                        ]
                    },
                )?;
                s += a * b;
                cur
            }
            ArrayStep::Compare => {
                if cur.sum() > s {
                    s = s * 0.5;
                }
                cur.map_with(s, |a, b| a * b)
            }
        };
        vals.push(next);
    }
    Ok(vals.last().expect("non-empty").sum() + s)
}

/// The array tier with arbitrary shapes, offsets, indices, matrices and
/// non-finite values: native, traced, the drivers and the workspace.
#[test]
fn fuzz_array_api() {
    use optic_ad::array::{self, ArrayWorkspace, Dense, TArray};
    // Most cases fitted (sizes that agree, a point and a direction of one
    // length ≥ 1), the rest with the raw, often invalid, sizes.
    let input = (
        prop::collection::vec(array_step(), 0..6),
        prop::collection::vec(scalar(), 1..=5),
        prop::collection::vec(scalar(), 0..=5),
        prop_oneof![3 => Just(true), 1 => Just(false)],
    )
        .prop_map(|(steps, x, mut v, fit)| {
            if fit {
                v.resize(x.len(), 0.5);
            }
            (steps, x, v, fit)
        });
    fuzz("array api", input, |(steps, x, v, fit), reach| {
        let _ = run_array_steps(&Dense::new(x.clone()), &steps, fit);
        let f = |t: &TArray| run_array_steps(t, &steps, fit);
        if crate::common::array_gradient(f, &x).is_ok() {
            reach.driver();
        }
        let _ = crate::common::array_hvp(f, &x, &v);
        let _ = crate::arrays::directional3(f, &x, &v);
        let _ = crate::common::array_taylor::<U4>(f, &x, &v);
        if let Ok(mut d) = optic_ad::Directional::array(f, &x, 3) {
            let _ = d.eval(&x, &v, &mut [0.0; 4]);
            let _ = d.eval(&v, &x, &mut [0.0; 3]);
            let duals: Vec<num_dual::Dual64> = x.iter().map(|&t| t.into()).collect();
            let _ = d.eval_at(&duals, &duals);
        }
        if let Ok(mut h) = optic_ad::Hvp::array(f, &x) {
            let mut out = vec![0.0; v.len()];
            let _ = h.apply(&v, &mut out);
            let _ = h.linearize(&v);
            let _ = h.apply(&v, &mut out);
            let _ = h.linearize(&x);
            let _ = h.apply(&x, &mut vec![0.0; x.len()]);
            let _ = h.eval(&v, &x, &mut out);
            let _ = h.eval(&x, &v, &mut vec![0.0; x.len()]);
            let _ = h.hvp_at(&x, &v);
            let _ = (h.value(), h.gradient().len());
            if let Ok((m, _)) = optic_ad::optic::Optic::left(&h, x.clone()) {
                let _ = optic_ad::optic::Optic::right(&h, m, v.clone());
            }
            let duals: Vec<num_dual::Dual64> = x.iter().map(|&t| t.into()).collect();
            let _ = h.hvp_at(&duals, &duals);
        }
        if let Ok(mut g) = optic_ad::Gradient::array(f, &x) {
            let _ = g.eval_at(&x);
            let duals: Vec<num_dual::Dual64> = x.iter().map(|&t| t.into()).collect();
            let _ = g.eval_at(&duals);
        }
        if let Ok(p) = array::trace(|t: &[TArray]| run_array_steps(&t[0], &steps, fit), &[&x]) {
            reach.valid();
            let _ = p.eval(&[&v]);
            let _ = p.eval(&[&x, &v]);
            let mut ws = ArrayWorkspace::new(&p);
            let _ = ws.run(&p, &[&x]);
            let _ = ws.output(&p, 7);
            let _ = p.specialize(&[Some(1.0)], &[0, 3]);
            let _ = p.then(&p);
            if let Ok(j) = array::reverse_joint(&p) {
                let _ = j.eval(&[&x, &v]);
                let _ = ws.run(&j, &[&x, &v]);
            }
            for degree in [0, 3, 171] {
                if let Ok(mut t) = TaylorProgram::new(&p, degree) {
                    let _ = t.eval(&[&x]);
                    let _ = t.eval(&[&x, &v]);
                    let jet: Vec<f64> = x.iter().chain(&v).copied().collect();
                    let _ = t.eval(&[&jet]);
                    let _ = t.output(0);
                    let _ = t.output(3);
                }
            }
            for order in [0, 2, 25] {
                if let Ok(n) = array::nest(&p, order) {
                    let _ = n.eval(&[&x, &v, &x, &v]);
                }
            }
            // The typed bundle: closure inputs of the right and wrong
            // lengths and counts, and the levels one by one.
            if let Ok(mut b) = array::Nested::<U2>::new(&p) {
                let s: &[f64] = &[0.5];
                let _ = b.call_all(&[&x], &[&[s], &[&x], &[s]]);
                let _ = b.call_all(&[&v], &[&[&v], &[s, s], &[]]);
                let _ = b.call_all(&[&x], &[&[s]]);
                if let Ok((_, l0)) = b.primal(&[&x]) {
                    if let Ok((_, l1)) = l0.call(&[&v]) {
                        let _ = l1.call(&[&x]);
                    }
                }
            }
        }
    });
}

/// Whether a program read from a file asks for more work than a fuzz case
/// may take: a loop of more than 10⁵ steps (a file may ask for 2⁶⁰, which
/// is well-formed and runs that long), or a value of more than 10⁶
/// elements. These are the sizes a user checks before running a program
/// from elsewhere.
fn asks_too_much(q: &optic_ad::array::ArrayProgram) -> bool {
    use optic_ad::array::{ArrayOp, Param, PrimData};
    fn big(params: &[Param]) -> bool {
        params.iter().any(|p| match p {
            Param::Int(k) => *k > 100_000,
            Param::Prim(d) => big(&d.params),
            _ => false,
        })
    }
    let huge = |v: &optic_ad::array::AVar| q.shape(*v).len() > 1_000_000;
    q.ops().iter().any(|op| {
        let looped = match op {
            ArrayOp::Prim { prim, .. } => {
                matches!(prim.name(), "scan" | "revolve") && big(&PrimData::of(&**prim).params)
            }
            _ => false,
        };
        looped || op.operands().iter().any(huge)
    }) || q.outputs().iter().any(huge)
}

/// Array programs read from JSON: the programs of random array functions
/// (loops included) and their gradients, written and read back (the same
/// bits), or with one number of the text replaced by a hostile one
/// (counts, positions, indices, shapes and constants of any size), then
/// run.
#[test]
fn fuzz_array_program_from_json() {
    use optic_ad::array::{self, Array, ArrayProgram, TArray};
    let tokens = prop::sample::select(vec![
        "18446744073709551615",
        "9223372036854775808",
        "2305843009213693952",
        "1000000000000",
        "4294967295",
        "65536",
        "0",
        "1",
        "7",
        "-1",
        "1e400",
        "\"nan:0x7ff8000000000001\"",
        "\"inf\"",
        "null",
        "[]",
        "{}",
    ]);
    let input = (
        prop::collection::vec(array_step(), 1..6),
        prop::collection::vec(scalar(), 1..=5),
        any::<bool>(),
        prop_oneof![2 => Just(None), 1 => (any::<prop::sample::Index>(), tokens).prop_map(Some)],
    );
    fuzz("array json", input, |(steps, x, joint, mutation), reach| {
        let f = |t: &[TArray]| run_array_steps(&t[0], &steps, true);
        // Steps that fail to trace give a fixed program instead.
        let fallback = |t: &[TArray]| Ok(t[0].map(|u| u.sin() * u).sum());
        let Ok(p) = array::trace(f, &[&x]).or_else(|_| array::trace(fallback, &[&x])) else {
            return;
        };
        let p = if joint {
            array::reverse_joint(&p).unwrap_or(p)
        } else {
            p
        };
        let Ok(mut text) = serde_json::to_string(&p) else {
            return;
        };
        if let Some((at, tok)) = &mutation {
            let at = at.index(text.len());
            replace_number(&mut text, at, tok);
        }
        let Ok(q) = serde_json::from_str::<ArrayProgram>(&text) else {
            return;
        };
        reach.valid();
        if asks_too_much(&q) {
            return;
        }
        let inputs: Vec<Vec<f64>> = q
            .input_shapes()
            .iter()
            .map(|sh| (0..sh.len().min(64)).map(|i| x[i % x.len()]).collect())
            .collect();
        let refs: Vec<&[f64]> = inputs.iter().map(Vec::as_slice).collect();
        let got = q.eval(&refs);
        if got.is_ok() {
            reach.driver();
        }
        if mutation.is_none() {
            assert_eq!(q.to_string(), p.to_string());
            match (p.eval(&refs), got) {
                (Ok(a), Ok(b)) => {
                    if let Err(e) = crate::arrays::same_outputs(&a, &b) {
                        panic!("round trip changed values: {e}");
                    }
                }
                (a, b) => assert_eq!(a.is_ok(), b.is_ok(), "{a:?} vs {b:?}"),
            }
        }
        if q.len() < 200 {
            let _ = array::reverse_joint(&q).map(|j| j.len());
            let _ = array::forward(&q).map(|j| j.len());
        }
    });
}

/// Native code (feature `jit`): random valid programs over the whole table,
/// at hostile points, run past their hot-call count (so the scalar
/// program and its compiled gradient run as machine code) and compared
/// with the interpreter bit for bit (NaN as NaN); one case in eight also
/// maps a random body over 2¹⁶ elements, which runs as a compiled block
/// kernel, and takes its gradient.
#[cfg(feature = "jit")]
#[test]
fn fuzz_native() {
    use common::same_bits;
    use optic_ad::array::{Array, TArray};
    use optic_ad::{Executable, Registers};
    let input = (recipe(), prop::collection::vec(scalar(), 4), any::<u8>());
    fuzz("native", input, |(r, x, pick), reach| {
        let p = r.build();
        reach.valid();
        let x = &x[..p.n_inputs()];
        let e = Executable::new(p.clone());
        let mut regs = Registers::new();
        let mut out = vec![0.0; p.n_outputs()];
        let mut last = Ok(());
        for _ in 0..1002 {
            last = e.eval_f64(&mut regs, x, &mut out);
        }
        match (p.eval(x), last) {
            (Ok(want), Ok(())) => {
                for (w, o) in want.iter().zip(&out) {
                    assert!(same_bits(*w, *o), "native {out:?} vs interpreter {want:?}");
                }
            }
            (Err(a), Err(b)) => assert_eq!(a, b),
            (a, b) => panic!("interpreter {a:?}, native {b:?}"),
        }
        if e.native_instructions().0.is_some() {
            reach.native();
        }
        // The compiled gradient of the first output, hot.
        let first = |t: &[Tracer]| p.eval(t).map(|v| v[0]);
        if let Ok(mut g) = Gradient::new(first, x) {
            let mut grad = vec![0.0; x.len()];
            let mut ok = true;
            for _ in 0..1002 {
                ok &= g.eval(x, &mut grad).is_ok();
            }
            if ok {
                reach.driver();
            }
        }
        if pick % 8 == 0 {
            // A map of 2¹⁶ elements: the body is the program with every
            // input the element.
            let body = |t: Tracer| p.eval(&vec![t; p.n_inputs()]).map_or(t, |v| v[0]);
            let f = |a: &TArray| Ok(a.map(body).sum());
            let n = 1 << 16;
            let xs: Vec<f64> = (0..n).map(|k| x[k % x.len()] + k as f64 * 1e-6).collect();
            if let Ok(mut g) = optic_ad::Gradient::array(f, &xs) {
                let mut grad = vec![0.0; n];
                let _ = g.eval(&xs, &mut grad);
                let _ = g.eval(&xs, &mut grad);
                // Every map body compiles (recipes have no user rules);
                // a body the trace folded away leaves no map.
                let (native, maps) = g.native_kernels();
                assert!(
                    maps == 0 || native > 0,
                    "{native} of {maps} map bodies compiled"
                );
            }
        }
    });
}
