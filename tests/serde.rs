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
