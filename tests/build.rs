//! The build pipeline: the builder's sharing is exact (every instruction is
//! found again, also past the slots kept beside a value), instructions
//! read back as the operations that were pushed, the derived programs of
//! the drivers hold no instruction twice, scheduling in windows keeps
//! every result bit for bit on programs longer than a window, program size
//! grows linearly with the problem, and the rule table is bounded with an
//! error.

use crate::common;

use std::collections::HashSet;

use common::{check, rosenbrock, rosenbrock_closed, same_bits, RandomProgram};
use optic_ad::{
    trace, Builder, CustomRule, Error, Gradient, Hvp, Op, Prim, Program, Real, Registers,
    ScalarRule, Var, MAX_RULES,
};
use proptest::prelude::*;

/// An instruction as a hashable key: constants by bit pattern.
fn key(op: &Op) -> String {
    match op {
        Op::Const(c) => format!("const {:#x}", c.to_bits()),
        other => format!("{other:?}"),
    }
}

/// The instructions (inputs aside) that occur more than once.
fn duplicates(p: &Program) -> Vec<String> {
    let mut seen = HashSet::new();
    p.ops()
        .filter(|op| !matches!(op, Op::Input(_)))
        .map(|op| key(&op))
        .filter(|k| !seen.insert(k.clone()))
        .collect()
}

/// Pushes every instruction of `p` into `b`, inputs mapped to `xs`;
/// returns the value of each.
fn push_all(b: &mut Builder, p: &Program, xs: &[Var]) -> Vec<Var> {
    let mut map: Vec<Var> = Vec::with_capacity(p.len());
    for op in p.ops() {
        let v = match op {
            Op::Input(k) => xs[k as usize],
            other => b.push(other.map_operands(|o| map[o.index()])),
        };
        map.push(v);
    }
    map
}

/// A program pushed twice onto the same inputs is shared completely: the
/// second copy adds nothing, and the result holds no instruction twice.
#[test]
fn builder_shares_exactly() {
    check(
        "exact sharing",
        256,
        common::any_program(),
        |f: RandomProgram, _| {
            let p = &f.program;
            let mut b = Builder::new();
            let xs: Vec<Var> = (0..p.n_inputs()).map(|_| b.input()).collect();
            let first = push_all(&mut b, p, &xs);
            let len = b.len();
            let second = push_all(&mut b, p, &xs);
            prop_assert_eq!(&first, &second);
            prop_assert_eq!(b.len(), len);
            let outs: Vec<Var> = p.outputs().iter().map(|o| first[o.index()]).collect();
            let q = b.finish(&outs).unwrap();
            prop_assert!(duplicates(&q).is_empty(), "{:?}", duplicates(&q));
            Ok(())
        },
    );
}

/// A program built by the builder reads back as the operations that built
/// it: pushing `p.ops()` again gives `p`.
#[test]
fn ops_read_back() {
    check(
        "ops read back",
        256,
        common::any_program(),
        |f: RandomProgram, _| {
            let p = &f.program;
            let mut b = Builder::new();
            let xs: Vec<Var> = (0..p.n_inputs()).map(|_| b.input()).collect();
            let map = push_all(&mut b, p, &xs);
            for g in p.guards() {
                b.guard(map[g.a.index()], map[g.b.index()], g.ordering);
            }
            let outs: Vec<Var> = p.outputs().iter().map(|o| map[o.index()]).collect();
            let q = b.finish(&outs).unwrap();
            prop_assert_eq!(&q, p);
            for (i, op) in p.ops().enumerate() {
                prop_assert_eq!(p.op(i).map(|o| key(&o)), Some(key(&op)));
            }
            prop_assert!(p.op(p.len()).is_none());
            Ok(())
        },
    );
}

/// Many distinct operations on one value (more than the slots kept beside
/// it, so most are found through the overflow table) are each shared when
/// pushed again, in another order.
#[test]
fn sharing_past_the_slots() {
    let mut b = Builder::new();
    let x = b.input();
    let y = b.sin(x);
    let binary = [
        Prim::Add,
        Prim::Sub,
        Prim::Mul,
        Prim::Div,
        Prim::Powf,
        Prim::Hypot,
        Prim::Atan2,
    ];
    let unary = [
        Prim::Sin,
        Prim::Cos,
        Prim::Exp,
        Prim::Sqrt,
        Prim::Tanh,
        Prim::Neg,
    ];
    let mut ops: Vec<(Prim, i32, Vec<Var>)> = Vec::new();
    for &p in &binary {
        ops.push((p, 0, vec![y, x]));
        if !matches!(p, Prim::Add | Prim::Mul) {
            ops.push((p, 0, vec![x, y]));
        }
    }
    for &p in &unary {
        ops.push((p, 0, vec![y]));
    }
    for n in [-3, 2, 5] {
        ops.push((Prim::Powi, n, vec![y]));
    }
    let first: Vec<Var> = ops.iter().map(|(p, k, a)| b.apply(*p, *k, a)).collect();
    let distinct: HashSet<Var> = first.iter().copied().collect();
    assert_eq!(distinct.len(), ops.len(), "each operation is its own value");
    let len = b.len();
    let again: Vec<Var> = ops
        .iter()
        .rev()
        .map(|(p, k, a)| b.apply(*p, *k, a))
        .collect();
    assert_eq!(b.len(), len, "nothing new on the second pass");
    assert!(first.iter().eq(again.iter().rev()));
    // Commuted operands of + and · are the same operation.
    assert_eq!(b.add(x, y), first[0]);
    assert_eq!(b.mul(x, y), first[3]);
}

/// The programs the drivers derive (gradient; both stages of the
/// Hessian-vector product) hold no instruction twice.
#[test]
fn derived_programs_share_exactly() {
    check(
        "derived programs share",
        128,
        common::scalar_program(),
        |f: RandomProgram, _| {
            let p = f.program.clone();
            let x0 = vec![0.3; p.n_inputs()];
            let run = |x: &[optic_ad::Tracer]| p.eval(x).map(|y| y[0]);
            let g = Gradient::new(run, &x0).unwrap();
            prop_assert!(duplicates(g.program().unwrap()).is_empty());
            let h = Hvp::new(run, &x0).unwrap();
            let (left, right) = h.programs().unwrap();
            prop_assert!(duplicates(left).is_empty());
            prop_assert!(duplicates(right).is_empty());
            Ok(())
        },
    );
}

/// Programs longer than a scheduling window of 8192 instructions
/// (Rosenbrock at n = 10⁴: about 90 000 traced, and stages of 170 000
/// derived instructions): scheduling keeps every result bit for bit and
/// every instruction after its operands, and the derived programs match
/// the closed forms.
#[test]
fn long_programs_schedule_in_windows() {
    let n = 10_000;
    let x: Vec<f64> = (0..n).map(|i| 0.5 + 0.4 * (i as f64 * 0.7).sin()).collect();
    let v: Vec<f64> = (0..n).map(|i| (i as f64 * 1.3).cos()).collect();
    let p = trace(|t| vec![rosenbrock(t)], &x).unwrap();
    let s = p.schedule();
    assert!(s.validate().is_ok());
    assert_eq!(s.len(), p.len());
    let (a, b) = (p.eval(&v).unwrap(), s.eval(&v).unwrap());
    assert!(same_bits(a[0], b[0]));
    let (g_want, hv_want) = rosenbrock_closed(&x, &v);
    let mut g = Gradient::new(rosenbrock, &x).unwrap();
    let mut grad = vec![0.0; n];
    g.eval(&x, &mut grad).unwrap();
    let mut h = Hvp::new(rosenbrock, &x).unwrap();
    h.linearize(&x).unwrap();
    let mut hv = vec![0.0; n];
    h.apply(&v, &mut hv).unwrap();
    for i in 0..n {
        assert!((grad[i] - g_want[i]).abs() <= 1e-12 * g_want[i].abs().max(1.0));
        assert!((hv[i] - hv_want[i]).abs() <= 1e-12 * hv_want[i].abs().max(1.0));
    }
    let (left, right) = h.programs().unwrap();
    assert!(left.validate().is_ok() && right.validate().is_ok());
}

/// Program sizes grow linearly with the problem: no pass multiplies them.
#[test]
fn derived_size_is_linear() {
    let len = |n: usize| {
        let x = vec![0.7; n];
        let h = Hvp::new(rosenbrock, &x).unwrap();
        let (l, r) = h.programs().unwrap();
        (l.len() + r.len()) as i64
    };
    let (a, b, c) = (len(500), len(1000), len(2000));
    assert_eq!(c - b, 2 * (b - a), "{a} {b} {c}");
}

/// A trivial user rule, `y = x`.
struct Same;
impl ScalarRule for Same {
    fn name(&self) -> &str {
        "same"
    }
    fn value(&self, x: f64) -> f64 {
        x
    }
    fn pullback(&self, _: &mut Builder, _: Var, _: Var, ct: Var) -> Var {
        ct
    }
}

/// A rule table holds at most `MAX_RULES` rules; one more is an error, not
/// a wrong rule.
#[test]
fn rule_table_is_bounded() {
    let mut b = Builder::new();
    let x = b.input();
    let mut y = x;
    for _ in 0..MAX_RULES {
        y = b.custom(&CustomRule::new(Same), &[y]);
    }
    let rules = b.rules().len();
    assert_eq!(rules, MAX_RULES);
    y = b.custom(&CustomRule::new(Same), &[y]);
    assert_eq!(
        b.finish(&[y]).unwrap_err(),
        Error::TooManyRules { max: MAX_RULES }
    );
    // The same rule applied many times takes one entry.
    let rule = CustomRule::new(Same);
    let mut b = Builder::new();
    let mut y = b.input();
    for _ in 0..1000 {
        y = b.custom(&rule, &[y]);
    }
    assert_eq!(b.rules().len(), 1);
    let p = b.finish(&[y]).unwrap();
    assert_eq!(p.eval(&[2.5]).unwrap(), vec![2.5]);
}

/// A rule index that no table can hold is reported as a missing rule.
#[test]
fn huge_rule_index_is_a_missing_rule() {
    let mut b = Builder::new();
    let x = b.input();
    let args = optic_ad::Args::new(&[x]).unwrap();
    let y = b.push(Op::Custom {
        rule: u32::MAX,
        args,
    });
    assert_eq!(b.finish(&[y]).unwrap_err(), Error::MissingRule(MAX_RULES));
}

/// Logistic regression on `rows` synthetic rows of `k` features: the mean
/// log-loss of σ(xᵢ · w) against labels yᵢ, with the data as constants.
fn logistic_loss<T: Real>(w: &[T], rows: usize) -> T {
    let k = w.len();
    let mut loss = T::cst(0.0);
    for i in 0..rows {
        let mut z = T::cst(0.0);
        for (j, wj) in w.iter().enumerate() {
            z += *wj * logistic_x(i, j, k);
        }
        let y = if i % 3 == 0 { 1.0 } else { 0.0 };
        // log(1 + e^z) − y z
        loss += (z.exp() + 1.0).ln() - z * y;
    }
    loss / rows as f64
}

fn logistic_x(i: usize, j: usize, k: usize) -> f64 {
    ((i * k + j) as f64 * 0.37).sin()
}

/// The scheduler sinks an instruction to its readers when they all come
/// much later: in this gradient each product `xᵢⱼ · r̄ᵢ` is ready beside
/// row `i` but summed into the chain of `w̄ⱼ` that runs after the last row.
/// Computed beside the rows, every product would live to the end and take a
/// register of its own (rows × features of them); sunk, the register count
/// stays near the number of rows. The gradient and Hessian-vector product
/// match their closed forms, ∇ = Σ (σ(zᵢ) − yᵢ) xᵢ / rows and
/// H v = Σ σ(zᵢ)(1 − σ(zᵢ)) (xᵢ · v) xᵢ / rows, and the register code
/// agrees with the interpreter bit for bit.
#[test]
fn late_readers_pull_their_operands_down() {
    let (rows, k) = (569, 30);
    let f = |w: &[optic_ad::Tracer]| logistic_loss(w, rows);
    let w: Vec<f64> = (0..k).map(|j| 0.3 * (j as f64 * 1.1).cos()).collect();
    let v: Vec<f64> = (0..k).map(|j| (j as f64 * 0.7).sin() + 0.5).collect();
    let mut g_want = vec![0.0; k];
    let mut hv_want = vec![0.0; k];
    for i in 0..rows {
        let x: Vec<f64> = (0..k).map(|j| logistic_x(i, j, k)).collect();
        let z: f64 = x.iter().zip(&w).map(|(a, b)| a * b).sum();
        let s = 1.0 / (1.0 + (-z).exp());
        let y = if i % 3 == 0 { 1.0 } else { 0.0 };
        let xv: f64 = x.iter().zip(&v).map(|(a, b)| a * b).sum();
        for j in 0..k {
            g_want[j] += (s - y) * x[j] / rows as f64;
            hv_want[j] += s * (1.0 - s) * xv * x[j] / rows as f64;
        }
    }
    let g = Gradient::new(f, &w).unwrap();
    let p = g.program().unwrap();
    let (_, registers) = p.register_code_size();
    // Sunk: 4703 registers; left beside the rows: 17 122.
    assert!(
        registers < rows * k / 2,
        "{registers} registers for {rows} rows of {k} features"
    );
    let mut regs = Registers::new();
    let mut out = vec![0.0; k + 1]; // [f, ∇f]
    p.eval_f64(&mut regs, &w, &mut out).unwrap();
    let slow = p.eval(&w).unwrap();
    for j in 0..=k {
        assert!(same_bits(out[j], slow[j]));
    }
    for j in 0..k {
        let got = out[1 + j];
        assert!((got - g_want[j]).abs() <= 1e-13, "{got} {}", g_want[j]);
    }
    let mut h = Hvp::new(f, &w).unwrap();
    h.linearize(&w).unwrap();
    let mut hv = vec![0.0; k];
    h.apply(&v, &mut hv).unwrap();
    for j in 0..k {
        assert!(
            (hv[j] - hv_want[j]).abs() <= 1e-13,
            "{} {}",
            hv[j],
            hv_want[j]
        );
    }
}
