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
    bad["ops"][2] = serde_json::json!({"Mul": [5, 1]});
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
