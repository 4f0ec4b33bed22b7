//! Readable printing of programs, in the spirit of the Knossos demo of
//! T. Ellis, S. Peyton Jones and A. Fitzgibbon, "Working notes on automatic
//! differentiation", §9.

use std::fmt;

use super::ir::Program;
use super::op::Op;

impl fmt::Display for Program {
    /// Prints one instruction per line, e.g.
    ///
    /// ```text
    /// program (x0, x1) -> (%4)
    ///   %2 = sin x0
    ///   %3 = 2
    ///   %4 = %2 * x1
    ///   return %4
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |i: usize| -> String {
            match self.code.get(i).and_then(|ins| ins.as_input()) {
                Some(k) => format!("x{k}"),
                None => format!("%{i}"),
            }
        };
        let v = |x: super::ir::Var| name(x.index());
        let ins: Vec<String> = (0..self.n_inputs).map(|k| format!("x{k}")).collect();
        let outs: Vec<String> = self.outputs.iter().map(|&o| v(o)).collect();
        writeln!(f, "program ({}) -> ({})", ins.join(", "), outs.join(", "))?;
        for (i, op) in self.ops().enumerate() {
            let rhs = match op {
                Op::Input(_) => continue,
                Op::Const(c) => format!("{c}"),
                Op::Apply { prim, param, args } => {
                    let x: Vec<String> = args.as_slice().iter().map(|&a| v(a)).collect();
                    prim.display(&x, param)
                }
                Op::Custom { rule, args } => {
                    let x: Vec<String> = args.as_slice().iter().map(|&a| v(a)).collect();
                    let nm = self.rules.get(rule as usize).map(|r| r.name().to_string());
                    format!(
                        "{} {}",
                        nm.unwrap_or_else(|| format!("rule#{rule}")),
                        x.join(", ")
                    )
                }
            };
            writeln!(f, "  %{i} = {rhs}")?;
        }
        for g in &self.guards {
            writeln!(f, "  guard {} {} {}", v(g.a), relation(g.ordering), v(g.b))?;
        }
        write!(f, "  return {}", outs.join(", "))
    }
}

/// How a guard's recorded comparison prints: `<`, `==`, `>`, or
/// `unordered with` (a NaN was involved).
pub(crate) fn relation(ordering: Option<std::cmp::Ordering>) -> &'static str {
    match ordering {
        Some(std::cmp::Ordering::Less) => "<",
        Some(std::cmp::Ordering::Equal) => "==",
        Some(std::cmp::Ordering::Greater) => ">",
        None => "unordered with",
    }
}
