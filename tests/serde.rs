//! Saving and loading traced programs (feature `serde`).

use optic_ad::{reverse, trace, Error, Program, Real};

fn f<T: Real>(x: &[T]) -> T {
    let y = x[0].sin() * x[1] + (x[1] * x[1] + 1.0).ln();
    if y > 0.0 {
        y.tanh()
    } else {
        y.powi(3)
    }
}

#[test]
fn round_trip_keeps_values_guards_and_derivatives() {
    let p = trace(|x| vec![f(x)], &[0.4, 1.5]).unwrap();
    let json = serde_json::to_string(&p).unwrap();
    let q: Program = serde_json::from_str(&json).unwrap();
    assert_eq!(p, q);
    for x in [[0.4, 1.5], [1.0, 2.0], [-0.3, 0.7]] {
        assert_eq!(p.eval(&x).unwrap(), q.eval(&x).unwrap());
    }
    // The guard (y > 0) survives: at a point where y < 0 both refuse.
    assert!(matches!(
        q.eval(&[-2.0, 0.1]),
        Err(Error::GuardFailed { .. })
    ));
    // Derived programs serialise too.
    let left = reverse(&q).unwrap().left_program().clone();
    let back: Program = serde_json::from_str(&serde_json::to_string(&left).unwrap()).unwrap();
    assert_eq!(
        back.eval(&[0.4, 1.5]).unwrap(),
        left.eval(&[0.4, 1.5]).unwrap()
    );
}

#[test]
fn malformed_programs_are_rejected_on_load() {
    let p = trace(|x| vec![x[0] * x[1]], &[1.0, 2.0]).unwrap();
    let json = serde_json::to_value(&p).unwrap();
    // An operand that refers forward.
    let mut bad = json.clone();
    bad["ops"][2] = serde_json::json!({"Apply": {"prim": "Mul", "param": 0, "args": [5, 1]}});
    assert!(serde_json::from_value::<Program>(bad).is_err());
    // A primitive given the wrong number of operands.
    let mut bad = json.clone();
    bad["ops"][2] = serde_json::json!({"Apply": {"prim": "Mul", "param": 0, "args": [0]}});
    assert!(serde_json::from_value::<Program>(bad).is_err());
    // A primitive that does not exist.
    let mut bad = json.clone();
    bad["ops"][2] =
        serde_json::json!({"Apply": {"prim": "Frobnicate", "param": 0, "args": [0, 1]}});
    assert!(serde_json::from_value::<Program>(bad).is_err());
    // An output past the end.
    let mut bad = json.clone();
    bad["outputs"] = serde_json::json!([99]);
    assert!(serde_json::from_value::<Program>(bad).is_err());
    // Blocks that do not add up.
    let mut bad = json.clone();
    bad["input_blocks"] = serde_json::json!([3]);
    assert!(serde_json::from_value::<Program>(bad).is_err());
    // A repeated input.
    let mut bad = json;
    bad["ops"][1] = serde_json::json!({"Input": 0});
    assert!(serde_json::from_value::<Program>(bad).is_err());
}

/// Issue 6, defect 1: a 120-byte JSON with a huge input count aborted the
/// process (`vec![false; n_inputs]` before any check). Sizes are checked
/// against the instruction count before anything is allocated.
#[test]
fn issue_6_huge_input_count_is_an_error_not_an_abort() {
    for n in ["1000000000000", "18446744073709551615"] {
        let json = format!(
            r#"{{"n_inputs":{n},"ops":[],"outputs":[],"guards":[],"input_blocks":[{n}],"output_blocks":[]}}"#
        );
        let r = serde_json::from_str::<Program>(&json);
        assert!(r.is_err(), "{n}: {r:?}");
    }
}

/// Issue 6, defect 2: block widths whose sum overflows `usize` must not
/// pass validation (in release the sum wrapped to the input count).
#[test]
fn issue_6_block_width_overflow_is_rejected() {
    let json = r#"{"n_inputs":1,"ops":[{"Input":0},{"Apply":{"prim":"Sin","param":0,"args":[0]}}],
        "outputs":[1],"guards":[],"input_blocks":[18446744073709551615,2],"output_blocks":[1]}"#;
    let r = serde_json::from_str::<Program>(json);
    assert!(r.is_err(), "{r:?}");
    // The same program with sound blocks loads and runs.
    let ok = json.replace("[18446744073709551615,2]", "[1]");
    let p: Program = serde_json::from_str(&ok).unwrap();
    assert_eq!(p.eval(&[0.5]).unwrap(), vec![0.5f64.sin()]);
}

/// Issue 6, defect 8: ±∞ and NaN constants did not survive JSON (written as
/// `null`). They round-trip bit for bit, NaN payloads included.
#[test]
fn issue_6_non_finite_constants_round_trip() {
    let payload_nan = f64::from_bits(0x7ff8_0000_0000_beef);
    let consts = [
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        -f64::NAN,
        payload_nan,
        -0.0,
        1e-310,
    ];
    let mut b = optic_ad::Builder::new();
    let x = b.input();
    let mut outs = vec![x];
    for &c in &consts {
        // Added to x so that each stays an instruction of its own.
        let k = b.constant(c);
        outs.push(b.add(x, k));
        outs.push(k);
    }
    let p = b.finish(&outs).unwrap();
    let json = serde_json::to_string(&p).unwrap();
    assert!(
        json.contains(r#""inf""#) && json.contains(r#""-inf""#),
        "{json}"
    );
    let q: Program = serde_json::from_str(&json).unwrap();
    let (a, c) = (p.eval(&[2.0]).unwrap(), q.eval(&[2.0]).unwrap());
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a), bits(&c));
    // A tag that is not one of ours is an error, not a silent NaN.
    let bad = json.replacen(r#""inf""#, r#""infinity""#, 1);
    assert!(serde_json::from_str::<Program>(&bad).is_err());
}

/// Constants read back bit for bit through JSON text, with serde_json's
/// exact float parser (its feature `float_roundtrip`, on for these tests).
/// Found by the fuzz test: `-2.0514672033128614` read back one unit in the
/// last place off with serde_json's default parser.
#[test]
fn constants_read_back_bit_for_bit() {
    use optic_ad::Builder;
    let mut b = Builder::new();
    let x = b.input();
    let c = b.constant(-2.0514672033128614);
    let y = b.mul(x, c);
    let p = b.finish(&[y, c]).unwrap();
    let q: Program = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
    let (a, b) = (p.eval(&[1.0]).unwrap(), q.eval(&[1.0]).unwrap());
    assert_eq!(a[1].to_bits(), b[1].to_bits(), "{} vs {}", a[1], b[1]);
    assert_eq!(p, q);
}

mod arrays {
    use std::sync::Arc;

    use optic_ad::array::{
        self, reverse_joint, AVar, Array, ArrayBuilder, ArrayPrimitive, ArrayProgram, Dense,
        Matrix, Param, Shape, TaylorRule,
    };
    use optic_ad::{Builder, Checkpoints, Program, Real, Var};
    use serde_json::json;

    fn model<A: Array>(x: &A) -> optic_ad::Result<A::Scalar> {
        let n = x.len();
        let m = Matrix::new(2, n, (0..2 * n).map(|i| i as f64 * 0.25 - 0.5).collect())?;
        let h = A::matvec(&Arc::new(m), x)?.map(|t| t.tanh());
        let s = x.slice(1, n - 1)?.map(|t| t * t).sum();
        Ok(h.sum() + s + x.get(0)?.exp())
    }

    fn program() -> ArrayProgram {
        array::trace(|x: &[array::TArray]| model(&x[0]), &[&[0.5, -0.25, 1.0]]).unwrap()
    }

    /// `p` and `q` give the same bits at `inputs` (the array tests'
    /// comparison).
    fn same_bits(p: &ArrayProgram, q: &ArrayProgram, inputs: &[Vec<f64>]) {
        let refs: Vec<&[f64]> = inputs.iter().map(Vec::as_slice).collect();
        if let Err(e) = crate::arrays::same_bits(p, q, &refs) {
            panic!("{e}");
        }
    }

    fn load(v: serde_json::Value) -> Result<ArrayProgram, String> {
        serde_json::from_value::<ArrayProgram>(v).map_err(|e| e.to_string())
    }

    #[test]
    fn an_array_program_and_its_gradient_read_back_with_the_same_bits() {
        let p = program();
        let joint = reverse_joint(&p).unwrap();
        for q in [&p, &joint] {
            let back: ArrayProgram =
                serde_json::from_str(&serde_json::to_string(q).unwrap()).unwrap();
            assert_eq!(q.to_string(), back.to_string());
            let inputs: Vec<Vec<f64>> = q
                .input_shapes()
                .iter()
                .map(|s| (0..s.len()).map(|i| 0.3 - 0.2 * i as f64).collect())
                .collect();
            same_bits(q, &back, &inputs);
        }
        // The gradient read back against the function on plain numbers'
        // num-dual derivative.
        let back: ArrayProgram =
            serde_json::from_str(&serde_json::to_string(&joint).unwrap()).unwrap();
        let x = [0.5, -0.25, 1.0];
        let g = back.eval(&[&x, &[1.0]]).unwrap();
        for (j, &gj) in g[1].iter().enumerate() {
            let xd: Vec<num_dual::Dual64> = (0..3)
                .map(|i| num_dual::Dual64::new(x[i], f64::from(u8::from(i == j))))
                .collect();
            let d = model(&Dense::new(xd)).unwrap().eps;
            approx::assert_relative_eq!(gj, d, max_relative = 1e-14);
        }
    }

    /// A loop with a checkpointed pullback and its HVP program (scans, the
    /// binomial schedule and its tangent form) read back with the same
    /// bits.
    #[test]
    fn loops_and_checkpointed_pullbacks_read_back() {
        let p = array::trace(
            |x: &[array::TArray]| {
                let r = x[0].get(0)?;
                let [c] = optic_ad::fold_with(50, [r * 0.1], Checkpoints::Binomial(3), |[c]| {
                    [r * c * (-c + 1.0)]
                })?;
                Ok(c)
            },
            &[&[2.9]],
        )
        .unwrap();
        let hvp = reverse_joint(&array::forward(&reverse_joint(&p).unwrap()).unwrap()).unwrap();
        let text = serde_json::to_string(&hvp).unwrap();
        assert!(text.contains("\"revolve\""), "{hvp}");
        let back: ArrayProgram = serde_json::from_str(&text).unwrap();
        assert_eq!(hvp.to_string(), back.to_string());
        let inputs: Vec<Vec<f64>> = hvp
            .input_shapes()
            .iter()
            .enumerate()
            .map(|(k, s)| vec![[2.9, 1.0, 0.5, 1.0][k % 4]; s.len()])
            .collect();
        same_bits(&hvp, &back, &inputs);
    }

    #[test]
    fn malformed_array_programs_are_errors_on_load() {
        let good = serde_json::to_value(program()).unwrap();
        assert!(load(good.clone()).is_ok());
        let ops = good["ops"].as_array().unwrap().clone();
        let at = |name: &str| {
            ops.iter()
                .position(|o| o["prim"]["op"]["name"] == json!(name))
                .unwrap_or_else(|| panic!("no {name} in {ops:?}"))
        };
        let with_op = |i: usize, op: serde_json::Value| {
            let mut bad = good.clone();
            bad["ops"][i] = op;
            load(bad)
        };
        // An operation not in the table.
        let s = at("slice");
        let mut op = ops[s].clone();
        op["prim"]["op"]["name"] = json!("frobnicate");
        let e = with_op(s, op).unwrap_err();
        assert!(e.contains("not in the primitive table"), "{e}");
        // Parameters the operation does not take.
        let mut op = ops[s].clone();
        op["prim"]["op"]["params"] = json!([{"flag": true}]);
        let e = with_op(s, op).unwrap_err();
        assert!(e.contains("parameters"), "{e}");
        // A slice past its operand's end: the builder's shape rule.
        let mut op = ops[s].clone();
        op["prim"]["op"]["params"] = json!([{"int": 2}, {"int": 5}]);
        assert!(with_op(s, op).unwrap_err().contains("slice"));
        // A constant matrix whose entries do not fill it.
        let m = at("matvec");
        let mut op = ops[m].clone();
        op["prim"]["op"]["params"][2]["floats"] = json!([1.0, 2.0]);
        assert!(with_op(m, op).is_err());
        // An operand that refers forward.
        let mut op = ops[s].clone();
        op["prim"]["args"] = json!([ops.len() + 3]);
        assert!(with_op(s, op).unwrap_err().contains("later"));
        // Inputs out of order, outputs past the end, a stray map output.
        assert!(with_op(0, json!({"input": 1})).is_err());
        let mut bad = good.clone();
        bad["outputs"] = json!([999]);
        assert!(load(bad).is_err());
        assert!(with_op(s, json!({"map_out": 1})).is_err());
        // A fill whose number is not one.
        let with_fill = |value: serde_json::Value| {
            let mut v = good.clone();
            v["ops"]
                .as_array_mut()
                .unwrap()
                .push(json!({"fill": {"value": value, "shape": "Scalar"}}));
            load(v)
        };
        assert!(with_fill(json!(1.5)).is_ok());
        assert!(with_fill(json!("many")).is_err());
    }

    /// A scalar program of one body, for the map tests.
    fn body(f: impl Fn(&[optic_ad::Tracer]) -> Vec<optic_ad::Tracer>, n: usize) -> Arc<Program> {
        Arc::new(optic_ad::trace(f, &vec![0.5; n]).unwrap())
    }

    fn round_trip(p: &ArrayProgram) -> ArrayProgram {
        serde_json::from_str(&serde_json::to_string(p).unwrap()).unwrap()
    }

    /// A map body is read back as written, not simplified again: here it
    /// holds `sin a − sin b` of one argument given twice, which is NaN,
    /// not 0, at ∞; and a body output that nothing reads keeps its input.
    #[test]
    fn map_bodies_read_back_as_written() {
        let mut b = ArrayBuilder::new();
        let (x, y) = (b.input(Shape::Vector(2)), b.input(Shape::Vector(2)));
        let f = body(|t| vec![t[0].sin() - t[1].sin(), t[2] * t[2]], 3);
        let outs = b.map(f, &[x, x, y]);
        let p = b.finish(&[outs[0]]).unwrap();
        let q = round_trip(&p);
        assert_eq!(p.to_string(), q.to_string());
        let (x0, y0) = ([1.0, f64::INFINITY], [2.0, 3.0]);
        let (a, c) = (p.eval(&[&x0, &y0]).unwrap(), q.eval(&[&x0, &y0]).unwrap());
        assert_eq!(a[0][0], 0.0);
        assert!(a[0][1].is_nan() && c[0][1].is_nan(), "{a:?} vs {c:?}");
        assert_eq!(c[0][0], 0.0);
    }

    /// Constant data of scalar shape (a reshaped one-element constant)
    /// reads back.
    #[test]
    fn scalar_constants_read_back() {
        let mut b = ArrayBuilder::new();
        let x = b.input(Shape::Vector(2));
        let c = b.constant(vec![2.5].into());
        let c = b.reshape(c, Shape::Scalar);
        let f = body(|t| vec![t[0] * t[1]], 2);
        let y = b.map(f, &[x, c])[0];
        let p = b.finish(&[y]).unwrap();
        let q = round_trip(&p);
        assert_eq!(p.to_string(), q.to_string());
        assert_eq!(q.eval(&[&[1.0, 2.0]]).unwrap()[0], vec![2.5, 5.0]);
    }

    /// A body that calls a user rule is not written (rules are code).
    #[test]
    fn bodies_with_user_rules_are_not_written() {
        struct Cube;
        impl optic_ad::ScalarRule for Cube {
            fn name(&self) -> &str {
                "cube"
            }
            fn value(&self, x: f64) -> f64 {
                x * x * x
            }
            fn pullback(&self, b: &mut Builder, x: Var, _: Var, ct: Var) -> Var {
                let three = b.constant(3.0);
                let xx = b.mul(x, x);
                let d = b.mul(three, xx);
                b.mul(ct, d)
            }
        }
        let rule = optic_ad::CustomRule::new(Cube);
        let f = body(|t| vec![t[0].apply_rule(&rule)], 1);
        let mut b = ArrayBuilder::new();
        let x = b.input(Shape::Vector(2));
        let y = b.map(f, &[x])[0];
        let p = b.finish(&[y]).unwrap();
        let e = serde_json::to_string(&p).unwrap_err().to_string();
        assert!(e.contains("user rule"), "{e}");
    }

    /// Counts and positions no buffer can hold are errors or NaN when
    /// the program runs, never a panic: a pad at 2⁶³, a checkpointed
    /// pullback of 2⁶¹ steps and 2⁶⁰ snapshots; a snapshot count the
    /// scan's pullback never makes is refused on load, and so are steps
    /// given in place of the tangent form's construction.
    #[test]
    fn absurd_sizes_are_errors_not_panics() {
        let mut b = ArrayBuilder::new();
        let x = b.input(Shape::Vector(1));
        let big = 1usize << 63;
        let padded = b.pad(x, big, big + 1);
        let f = body(|t| vec![t[0].sin()], 1);
        let m = b.map(f, &[padded])[0];
        let y = b.sum(m);
        let p = b.finish(&[y]).unwrap();
        assert!(p.eval(&[&[1.0]]).is_err());
        assert!(round_trip(&p).eval(&[&[1.0]]).is_err());

        let add = json!({"n_inputs": 1, "ops": [{"Input": 0}, {"Apply": {"prim": "Add", "param": 0, "args": [0, 0]}}],
                         "outputs": [1], "guards": [], "input_blocks": [1], "output_blocks": [1]});
        let scan = |steps: u64| json!({"name": "scan", "params": [{"program": add}, {"int": steps}, {"int": 1}, {"int": 0}, {"int": 0}, {"flag": false}, {"ints": []}]});
        let revolve = |steps: u64, snapshots: u64| {
            json!({"inputs": [{"Vector": 1}, {"Vector": 1}],
                   "ops": [{"input": 0}, {"input": 1},
                           {"prim": {"op": {"name": "revolve", "params": [{"prim": scan(steps)}, {"int": snapshots}]}, "args": [0, 1]}}],
                   "outputs": [2], "guards": []})
        };
        let q = load(revolve(1 << 61, 1 << 60)).unwrap();
        let out = q.eval(&[&[1.0], &[1.0]]).unwrap();
        assert!(out[0][0].is_nan(), "{out:?}");
        // Snapshots as `Revolve::new` makes them: 1 to the steps.
        assert!(load(revolve(2, 1)).is_ok());
        assert!(load(revolve(10, 0)).is_err());
        assert!(load(revolve(10, 11)).is_err());
        assert!(load(revolve(10, 3)).is_ok());
        // The steps of the tangent form are not taken from a file.
        let mut three = revolve(10, 3);
        three["ops"][2]["prim"]["op"]["params"]
            .as_array_mut()
            .unwrap()
            .push(json!({"prim": scan(10)}));
        assert!(load(three).is_err());
        // The tangent form is (origin, true), its origin a revolve, at
        // most 8 deep: deeper is refused before it is derived (each level
        // costs about four times the one below).
        let base = json!({"name": "revolve", "params": [{"prim": scan(10)}, {"int": 3}]});
        let tangent = |depth: usize, flag: bool| {
            let mut o = base.clone();
            for _ in 0..depth {
                o = json!({"name": "revolve", "params": [{"prim": o}, {"flag": flag}]});
            }
            let mut v = revolve(10, 3);
            v["ops"][2]["prim"]["op"] = o;
            load(v).unwrap_err()
        };
        // Decoded (then refused by the shape rule: a tangent form takes
        // the operands and their tangents).
        assert!(
            !tangent(2, true).contains("parameters"),
            "{}",
            tangent(2, true)
        );
        assert!(tangent(2, false).contains("parameters"));
        assert!(tangent(9, true).contains("parameters"));
        let mut not_revolve = revolve(10, 3);
        not_revolve["ops"][2]["prim"]["op"]["params"] = json!([{"prim": scan(10)}, {"flag": true}]);
        assert!(load(not_revolve).unwrap_err().contains("parameters"));
    }

    /// A broadcast of an operand of the value's own shape (the builder
    /// never records one; a file may) is that operand, in the value and in
    /// the gradient.
    #[test]
    fn a_broadcast_to_its_own_shape_is_the_identity() {
        let v = json!({"inputs": [{"Vector": 3}],
                       "ops": [{"input": 0}, {"prim": {"op": {"name": "broadcast", "params": [{"shape": {"Vector": 3}}]}, "args": [0]}}],
                       "outputs": [1], "guards": []});
        let q = load(v).unwrap();
        let x = [1.0, 2.0, 3.0];
        assert_eq!(q.eval(&[&x]).unwrap()[0], x.to_vec());
        assert_eq!(q.unroll().unwrap().eval(&x).unwrap(), x.to_vec());
        let g = reverse_joint(&q).unwrap();
        let out = g.eval(&[&x, &[0.5, -1.0, 2.0]]).unwrap();
        assert_eq!(out[1], vec![0.5, -1.0, 2.0]);
    }

    /// A map that reads a fill (the builder folds fills into bodies) is
    /// refused on load.
    #[test]
    fn maps_over_fills_are_refused() {
        let mut b = ArrayBuilder::new();
        let x = b.input(Shape::Vector(2));
        let f = body(|t| vec![t[0] * t[1]], 2);
        let y = b.map(f, &[x, x])[0];
        let p = b.finish(&[y]).unwrap();
        let mut v = serde_json::to_value(&p).unwrap();
        assert!(load(v.clone()).is_ok());
        let ops = v["ops"].as_array_mut().unwrap();
        let at = ops.iter().position(|o| o.get("map").is_some()).unwrap();
        ops.insert(at, json!({"fill": {"value": 0.0, "shape": "Scalar"}}));
        // Renumber: the map now reads the fill as its second argument.
        ops[at + 1]["map"]["args"] = json!([0, at]);
        v["outputs"] = json!([at + 1]);
        assert!(load(v).unwrap_err().contains("parameters"));
    }

    /// An operation a user defines is code: writing a program that holds
    /// one is an error, not a file that cannot be read back.
    #[test]
    fn operations_outside_the_table_are_not_written() {
        #[derive(Debug)]
        struct Twice;
        impl ArrayPrimitive for Twice {
            fn name(&self) -> &'static str {
                "sum" // a name of the table, to show it is the type that counts
            }
            fn shape(&self, args: &[Shape]) -> optic_ad::Result<Shape> {
                Ok(args[0])
            }
            fn key(&self, _: &mut Vec<u64>) {}
            fn print(&self, args: &[String], _: Shape) -> String {
                format!("twice {}", args.join(", "))
            }
            fn params(&self) -> Vec<Param> {
                Vec::new()
            }
            fn from_params(_: &[Param]) -> Option<Self> {
                Some(Twice)
            }
            fn eval(&self, a: &[&[f64]], _: &[Shape], out: &mut [f64], _: Shape, _: &mut Vec<f64>) {
                for (o, x) in out.iter_mut().zip(a[0]) {
                    *o = 2.0 * x;
                }
            }
            fn pullback(&self, b: &mut ArrayBuilder, _: &[AVar], ct: AVar) -> Vec<Option<AVar>> {
                vec![Some(b.apply(Twice, &[ct]))]
            }
            fn pushforward(
                &self,
                b: &mut ArrayBuilder,
                _: &[AVar],
                t: &[Option<AVar>],
                _: Shape,
            ) -> Option<AVar> {
                t[0].map(|t| b.apply(Twice, &[t]))
            }
            fn taylor(&self) -> TaylorRule {
                TaylorRule::Linear
            }
            fn unroll(&self, b: &mut Builder, a: &[&[Var]], _: &[Shape], _: Shape) -> Vec<Var> {
                a[0].iter().map(|&x| b.add(x, x)).collect()
            }
        }
        let mut b = ArrayBuilder::new();
        let x = b.input(Shape::Vector(2));
        let y = b.apply(Twice, &[x]);
        let p = b.finish(&[y]).unwrap();
        let e = serde_json::to_string(&p).unwrap_err().to_string();
        assert!(e.contains("not in the crate's primitive table"), "{e}");
    }
}
