//! User rules whose pullbacks misuse the builder they are given (issue 6,
//! defect 5): every driver returns `Error::BadRule` naming the rule, where
//! it used to panic (index out of bounds), trip a debug assertion, or give a
//! misleading error with a NaN derivative.

use std::panic::{catch_unwind, AssertUnwindSafe};

use num_dual::Dual64;
use optic_ad::{
    derivative, gradient, hvp, Args, Builder, CustomRule, Error, Op, Real, RuleMisuse, ScalarRule,
    Tracer, Var,
};
use typenum::U2;

/// The ways a pullback can misuse its builder.
#[derive(Clone, Copy, Debug)]
enum Misuse {
    /// Returns a value of another builder.
    ForeignValue,
    /// Pushes a user-rule instruction with no such rule.
    UnknownRule,
    /// Declares an input inside the pullback.
    DeclaresInput,
}

struct Bad(Misuse);

impl ScalarRule for Bad {
    fn name(&self) -> &str {
        "bad"
    }
    fn value(&self, x: f64) -> f64 {
        x * x
    }
    fn pullback(&self, b: &mut Builder, x: Var, _y: Var, ct: Var) -> Var {
        match self.0 {
            Misuse::ForeignValue => {
                let mut other = Builder::new();
                let mut v = other.input();
                for _ in 0..100 {
                    v = other.sin(v);
                }
                v
            }
            Misuse::UnknownRule => {
                let args = Args::new(&[x]).unwrap();
                let r = b.push(Op::Custom { rule: 77, args });
                b.mul(ct, r)
            }
            Misuse::DeclaresInput => {
                let z = b.input();
                b.mul(ct, z)
            }
        }
    }
}

fn expect_bad_rule<T: std::fmt::Debug>(what: &str, r: std::thread::Result<optic_ad::Result<T>>) {
    match r {
        Ok(Err(Error::BadRule { rule, misuse })) => {
            assert_eq!(rule, "bad", "{what}");
            let _ = misuse;
        }
        Ok(other) => panic!("{what}: expected BadRule, got {other:?}"),
        Err(_) => panic!("{what}: panicked"),
    }
}

#[test]
fn issue_6_pullback_misuse_is_an_error_in_every_driver() {
    for m in [
        Misuse::ForeignValue,
        Misuse::UnknownRule,
        Misuse::DeclaresInput,
    ] {
        let rule = CustomRule::new(Bad(m));
        let f = |x: &[Tracer]| x[0].apply_rule(&rule) * x[1];
        let r = catch_unwind(AssertUnwindSafe(|| gradient(f, &[0.5, 2.0])));
        expect_bad_rule(&format!("{m:?} gradient"), r);
        let r = catch_unwind(AssertUnwindSafe(|| hvp(f, &[0.5, 2.0], &[1.0, 0.0])));
        expect_bad_rule(&format!("{m:?} hvp"), r);
        let r = catch_unwind(AssertUnwindSafe(|| {
            derivative::<U2, _, _>(|t| t.apply_rule(&rule), 0.5)
        }));
        expect_bad_rule(&format!("{m:?} derivative"), r);
        let r = catch_unwind(AssertUnwindSafe(|| optic_ad::Hvp::new(f, &[0.5, 2.0])));
        match r {
            Ok(Ok(mut h)) => {
                let mut out = [0.0; 2];
                let r = h
                    .linearize(&[0.5, 2.0])
                    .and_then(|_| h.apply(&[1.0, 0.0], &mut out));
                assert!(matches!(r, Err(Error::BadRule { .. })), "{m:?} Hvp: {r:?}");
            }
            Ok(Err(e)) => assert!(matches!(e, Error::BadRule { .. }), "{m:?} Hvp::new: {e:?}"),
            Err(_) => panic!("{m:?} Hvp::new panicked"),
        }
    }
}

/// The misuse is named in the error.
#[test]
fn issue_6_bad_rule_names_the_misuse() {
    let cases = [
        (Misuse::ForeignValue, RuleMisuse::ForeignValue),
        (Misuse::UnknownRule, RuleMisuse::UnknownRule),
        (Misuse::DeclaresInput, RuleMisuse::DeclaredInput),
    ];
    for (m, want) in cases {
        let rule = CustomRule::new(Bad(m));
        match gradient(|x| x[0].apply_rule(&rule), &[0.5]) {
            Err(Error::BadRule { misuse, .. }) => assert_eq!(misuse, want, "{m:?}"),
            other => panic!("{m:?}: {other:?}"),
        }
    }
}

/// A rule that returns the wrong number of cotangents.
#[test]
fn issue_6_wrong_cotangent_count_is_an_error() {
    struct TwoForOne;
    impl optic_ad::Rule for TwoForOne {
        fn name(&self) -> &str {
            "two_for_one"
        }
        fn arity(&self) -> usize {
            1
        }
        fn value(&self, x: &[f64]) -> f64 {
            x[0]
        }
        fn pullback(&self, _b: &mut Builder, _x: &[Var], _y: Var, ct: Var) -> Vec<Var> {
            vec![ct, ct]
        }
    }
    let rule = CustomRule::new(TwoForOne);
    let r = gradient(|x| x[0].apply_rule(&rule), &[0.5]);
    assert!(
        matches!(&r, Err(Error::BadRule { rule, misuse: RuleMisuse::WrongCount(2) }) if rule == "two_for_one"),
        "{r:?}"
    );
}

/// On num-dual numbers, whose arithmetic has no error channel, a bad rule
/// gives NaN derivative parts (the value is the rule's own), never a panic.
#[test]
fn issue_6_bad_rule_on_num_dual_is_nan_not_a_panic() {
    for m in [
        Misuse::ForeignValue,
        Misuse::UnknownRule,
        Misuse::DeclaresInput,
    ] {
        let rule = CustomRule::new(Bad(m));
        let y = catch_unwind(AssertUnwindSafe(|| Dual64::new(0.5, 1.0).apply_rule(&rule)));
        let y = y.unwrap_or_else(|_| panic!("{m:?}: panicked"));
        assert_eq!(y.re, 0.25, "{m:?}");
        assert!(y.eps.is_nan(), "{m:?}: {y:?}");
    }
}

/// A sound rule next to the checks still works at every order.
#[test]
fn sound_rule_is_unaffected() {
    struct Square;
    impl ScalarRule for Square {
        fn name(&self) -> &str {
            "square"
        }
        fn value(&self, x: f64) -> f64 {
            x * x
        }
        fn pullback(&self, b: &mut Builder, x: Var, _y: Var, ct: Var) -> Var {
            let t = b.scale(2.0, x);
            b.mul(ct, t)
        }
    }
    let rule = CustomRule::new(Square);
    let d = derivative::<U2, _, _>(|t| t.apply_rule(&rule), 3.0).unwrap();
    assert_eq!(d.as_slice(), &[9.0, 6.0, 2.0]);
}

/// A pullback that shares instructions with the builder (a product of an
/// operand and a new constant, filed under the operand) and then returns
/// the wrong number of cotangents.
struct SharesThenMiscounts;

impl optic_ad::Rule for SharesThenMiscounts {
    fn name(&self) -> &str {
        "bad"
    }
    fn arity(&self) -> usize {
        1
    }
    fn value(&self, x: &[f64]) -> f64 {
        2.0 * x[0]
    }
    fn pullback(&self, b: &mut Builder, x: &[Var], _y: Var, ct: Var) -> Vec<Var> {
        let k = b.constant(12345.678);
        let _ = b.mul(x[0], k);
        let _ = b.mul(ct, k);
        Vec::new()
    }
}

/// Regression: rolling back a misbehaving pullback clears the sharing
/// slots of what it pushed under the operand they were filed under. The
/// product `x · k` was filed under `x` (its latest operand that is not a
/// constant) but cleared under `k` (its latest operand), so the next
/// instruction shared under `x` (the pullback of `sin x`, `cos x`, which
/// the reverse sweep emits after the rule's) read a slot past the end of
/// the rolled-back builder.
#[test]
fn rolled_back_pullbacks_leave_no_stale_sharing() {
    let rule = CustomRule::new(SharesThenMiscounts);
    let f = |x: &[Tracer]| x[0].sin() + x[0].apply_rule(&rule);
    let r = catch_unwind(AssertUnwindSafe(|| gradient(f, &[0.5])));
    expect_bad_rule("gradient", r);
    let r = catch_unwind(AssertUnwindSafe(|| hvp(f, &[0.5], &[1.0])));
    expect_bad_rule("hvp", r);
}

/// A rule of four arguments (rules take one to three).
struct Four;

impl optic_ad::Rule for Four {
    fn name(&self) -> &str {
        "four"
    }
    fn arity(&self) -> usize {
        4
    }
    fn value(&self, x: &[f64]) -> f64 {
        x.iter().sum()
    }
    fn pullback(&self, _b: &mut Builder, _x: &[Var], _y: Var, ct: Var) -> Vec<Var> {
        vec![ct; 4]
    }
}

/// Regression (hardening round two, defect 2): applying a rule of arity 4
/// on tracers panicked (index out of bounds while computing the trace's
/// values); the trace now fails with `Error::Malformed` (an instruction
/// holds at most three operands), and every driver returns an error.
#[test]
fn rules_of_four_arguments_are_refused() {
    let rule = CustomRule::new(Four);
    let f = |x: &[Tracer]| Real::apply_rule_n(&rule, &[x[0], x[1], x[2], x[3]]);
    let x = [1.0, 2.0, 3.0, 4.0];
    let r = catch_unwind(AssertUnwindSafe(|| optic_ad::trace(|x| vec![f(x)], &x)));
    assert!(matches!(r, Ok(Err(Error::Malformed(_)))), "{r:?}");
    let r = catch_unwind(AssertUnwindSafe(|| gradient(f, &x)));
    assert!(matches!(r, Ok(Err(Error::Malformed(_)))), "{r:?}");
    let r = catch_unwind(AssertUnwindSafe(|| hvp(f, &x, &x)));
    assert!(matches!(r, Ok(Err(_))), "{r:?}");
}
