//! The Taylor functor: a program mapped to one that propagates truncated
//! power series (jets) of degree `K` (Griewank & Walther, *Evaluating
//! Derivatives*, 2nd ed., ch. 13; the book's chapter "Taylor mode").
//!
//! Where ∂⃖ applied `K` times builds a bundle of `2ᴷ − 1` closures (the
//! passes prune it, but it still grows exponentially), a jet carries the
//! `K + 1` Taylor coefficients of every value of the program along a curve
//! `x(t)`, and each primitive maps its operands' jets to its result's jet
//! by a recurrence of `O(K²)` operations: products by convolution, `exp`,
//! `ln`, `sin`/`cos`, `tanh`, `powf`, `atan` and the rest by the
//! coefficients of their differential equations. This is K. Fischer's
//! observation in the "∂P.jl terminology and notation guide", §V.C, that
//! for well-behaved primitives an order-`n` derivative needs `n² − 1`
//! rather than `2ⁿ` terms.

use crate::error::{Error, Result};
use crate::program::eval::check_guards;
use crate::program::{Builder, Op, Program, MAX_ARITY};
use crate::rules::jet::{self, Scratch};
use crate::rules::CustomRule;

/// The highest order of Taylor mode, `170`: `170!` is the largest
/// factorial that f64 holds, so the derivative `f⁽ᵏ⁾ = k! · fₖ` of any
/// function with Taylor coefficients near 1 overflows above it. The typed
/// drivers ([`crate::derivative`], [`crate::Derivatives`],
/// [`crate::taylor()`]) bound their order by it at compile time.
pub const MAX_TAYLOR_ORDER: usize = 170;

/// [`MAX_TAYLOR_ORDER`] as a type, for bounds:
/// `N: IsLessOrEqual<MaxTaylorOrder, Output = True>`.
pub type MaxTaylorOrder = typenum::U170;

/// The Taylor functor applied to a program: `P: ℝⁿ → ℝᵐ` becomes
/// `T_K P: Jₖⁿ → Jₖᵐ` on jets of degree `K`, evaluated many times without
/// allocation.
///
/// A jet of degree `K` is `K + 1` normalised Taylor coefficients
/// `[x₀, x₁, …, x_K]` of a curve `x(t) = Σ xₖ tᵏ` (`xₖ = x⁽ᵏ⁾(0)/k!`). The
/// output jets are those of `P(x(t))`. With `x(t) = x + t v`, output
/// coefficient `k` is `Dᵏf(x)[v, …, v] / k!`.
///
/// Every built-in primitive has its recurrence in the primitive table,
/// `O(K²)` (whole powers `O(K² log n)` by squaring; the gamma family
/// `O(K³)`: ψ satisfies no algebraic differential equation). A user rule uses its own [`crate::Rule::taylor`] if it has
/// one, and otherwise gets one from its pullback: the jets of its partial
/// derivatives, a program of primitives, are computed to degree `K − 1`.
/// `select` and the non-smooth primitives pass the jet of the chosen
/// argument through; guards are checked on the constant terms.
///
/// Because the input is any program, Taylor composes with the other
/// functors: `TaylorProgram::new(&reverse_program, K)` gives the jets of a
/// gradient, `∇ₓ dᵏ/dtᵏ f(x + tv)`, and over ∂⃗ it agrees with repeating ∂⃗.
/// The functor law `T(P ; Q) = T(P) ; T(Q)` holds by action
/// (`tests/taylor.rs`).
///
/// # Example
///
/// The jet of `eˣ` along `x(t) = t`: `1/k!`.
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::functor::TaylorProgram;
/// use optic_ad::{trace, Real};
///
/// let p = trace(|x| vec![x[0].exp()], &[0.0]).unwrap();
/// let mut t = TaylorProgram::new(&p, 5).unwrap();
/// let mut out = [0.0; 6];
/// t.eval(&[0.0, 1.0, 0.0, 0.0, 0.0, 0.0], &mut out).unwrap();
/// assert_relative_eq!(out[5], 1.0 / 120.0);
/// ```
#[derive(Debug, Clone)]
pub struct TaylorProgram {
    program: Program,
    degree: usize,
    /// The jets of every instruction, `degree + 1` coefficients each.
    vals: Vec<f64>,
    scratch: Scratch,
    /// Per rule of the program's table: the Taylor program of its partial
    /// derivatives at degree `degree − 1`, built on first use where the
    /// rule has no Taylor rule of its own.
    partials: Vec<Option<Box<TaylorProgram>>>,
    /// Buffers of the derived rule: the partials' inputs and outputs.
    rule_in: Vec<f64>,
    rule_out: Vec<f64>,
}

impl TaylorProgram {
    /// The Taylor program of `p` at degree `degree` (jets of
    /// `degree + 1` coefficients).
    ///
    /// # Errors
    ///
    /// [`Error::OrderTooHigh`] above [`MAX_TAYLOR_ORDER`]; the errors of
    /// [`Program::validate`] if `p` is malformed.
    pub fn new(p: &Program, degree: usize) -> Result<Self> {
        if degree > MAX_TAYLOR_ORDER {
            return Err(Error::OrderTooHigh {
                order: degree,
                max: MAX_TAYLOR_ORDER,
            });
        }
        p.validate()?;
        Ok(TaylorProgram {
            program: p.clone(),
            degree,
            vals: Vec::new(),
            scratch: Scratch::default(),
            partials: vec![None; p.rules.len()],
            rule_in: Vec::new(),
            rule_out: Vec::new(),
        })
    }

    /// The degree `K`: jets hold `K + 1` coefficients.
    pub fn degree(&self) -> usize {
        self.degree
    }

    /// The program whose jets are propagated.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Propagates jets: `inputs` holds one jet per program input, each of
    /// `degree + 1` coefficients, concatenated (input `i` at
    /// `i·(K+1) .. (i+1)·(K+1)`); `outputs` receives one jet per program
    /// output, laid out the same way. No allocation once the buffers have
    /// grown (a user rule without a Taylor rule builds its partials'
    /// program on first use).
    ///
    /// Values follow IEEE 754: a NaN or ∞ coefficient propagates into every
    /// coefficient that depends on it.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] unless `inputs.len() == n_inputs·(K+1)` and
    /// `outputs.len() == n_outputs·(K+1)`; [`Error::GuardFailed`] where a
    /// recorded comparison does not hold for the constant terms;
    /// [`Error::BadRule`] for a program built with a misused rule.
    pub fn eval(&mut self, inputs: &[f64], outputs: &mut [f64]) -> Result<()> {
        let w = self.degree + 1;
        let p = &self.program;
        if outputs.len() != p.outputs.len() * w {
            return Err(Error::LengthMismatch {
                what: "Taylor program outputs (jets)",
                expected: p.outputs.len() * w,
                got: outputs.len(),
            });
        }
        self.run(inputs)?;
        for (o, v) in outputs.chunks_exact_mut(w).zip(&self.program.outputs) {
            jet::copy(o, &self.vals[v.index() * w..][..w]);
        }
        Ok(())
    }

    /// Runs every instruction and checks the guards.
    fn run(&mut self, inputs: &[f64]) -> Result<()> {
        let TaylorProgram {
            program: p,
            degree,
            vals,
            scratch,
            partials,
            rule_in,
            rule_out,
        } = self;
        let w = *degree + 1;
        if let Some(e) = &p.defect {
            return Err(e.clone());
        }
        if inputs.len() != p.n_inputs * w {
            return Err(Error::LengthMismatch {
                what: "Taylor program inputs (jets)",
                expected: p.n_inputs * w,
                got: inputs.len(),
            });
        }
        if vals.len() != p.code.len() * w {
            vals.clear();
            vals.resize(p.code.len() * w, 0.0);
        }
        for (i, op) in p.ops().enumerate() {
            // Operands precede their use: they are all in `done`.
            let (done, rest) = vals.split_at_mut(i * w);
            let y = &mut rest[..w];
            match op {
                Op::Input(k) => jet::copy(y, &inputs[k as usize * w..][..w]),
                Op::Const(c) => {
                    y.fill(0.0);
                    y[0] = c;
                }
                Op::Apply { prim, param, args } => {
                    let mut xs: [&[f64]; MAX_ARITY] = [&[]; MAX_ARITY];
                    for (s, v) in xs.iter_mut().zip(args.as_slice()) {
                        *s = &done[v.index() * w..][..w];
                    }
                    prim.taylor(&xs[..args.len()], param, y, scratch);
                }
                Op::Custom { rule, args } => {
                    let mut xs: [&[f64]; MAX_ARITY] = [&[]; MAX_ARITY];
                    for (s, v) in xs.iter_mut().zip(args.as_slice()) {
                        *s = &done[v.index() * w..][..w];
                    }
                    let xs = &xs[..args.len()];
                    let (r, slot) =
                        match (p.rules.get(rule as usize), partials.get_mut(rule as usize)) {
                            (Some(r), Some(slot)) => (r, slot),
                            _ => return Err(Error::MissingRule(rule as usize)),
                        };
                    if !r.taylor(xs, y) {
                        derived_rule_taylor(r, slot, rule_in, rule_out, xs, y)?;
                    }
                    let mut x0 = [0.0; MAX_ARITY];
                    for (a, j) in x0.iter_mut().zip(xs) {
                        *a = j[0];
                    }
                    y[0] = r.value(&x0[..xs.len()]);
                }
            }
        }
        check_guards(&p.guards, |v| vals[v.index() * w])
    }
}

/// The program `x ↦ [∂₁f(x), …, ∂ₖf(x)]` of a user rule: its pullback
/// with `ȳ = 1`.
fn partials_program(r: &CustomRule) -> Program {
    let mut b = Builder::new();
    let x: Vec<_> = (0..r.arity()).map(|_| b.input()).collect();
    let y = b.custom(r, &x);
    let one = b.constant(1.0);
    let g = r.pullback_contribs(&mut b, &x, y, one);
    let outs: Vec<_> = g[..r.arity()]
        .iter()
        .map(|c| c.unwrap_or_else(|| b.zero()))
        .collect();
    // The rule's own application is dead unless the pullback reads y; left
    // in, it would cost one more evaluation of the rule at each degree.
    b.finish_unchecked(&outs).dce()
}

/// A user rule's jet from its pullback: `y′ = Σᵢ gᵢ xᵢ′` with `gᵢ = ∂ᵢf`,
/// whose jets to degree `K − 1` come from the partials' Taylor program, so
/// `yₖ = Σᵢ chain(xᵢ, gᵢ, k)`. `y[0]` is written by the caller.
fn derived_rule_taylor(
    r: &CustomRule,
    partials: &mut Option<Box<TaylorProgram>>,
    rule_in: &mut Vec<f64>,
    rule_out: &mut Vec<f64>,
    xs: &[&[f64]],
    y: &mut [f64],
) -> Result<()> {
    let w = y.len();
    if w == 1 {
        return Ok(());
    }
    let k = xs.len();
    let sub = match partials {
        Some(s) => s,
        None => partials.insert(Box::new(TaylorProgram::new(&partials_program(r), w - 2)?)),
    };
    // Inputs of the partials: the arguments' jets truncated to K − 1.
    rule_in.clear();
    for x in xs {
        rule_in.extend_from_slice(&x[..w - 1]);
    }
    rule_out.clear();
    rule_out.resize(k * (w - 1), 0.0);
    sub.eval(rule_in, rule_out)?;
    for (n, yn) in y.iter_mut().enumerate().skip(1) {
        let mut s = 0.0;
        for (x, g) in xs.iter().zip(rule_out.chunks_exact(w - 1)) {
            s += jet::chain(x, g, n);
        }
        *yn = s;
    }
    Ok(())
}

/// Coefficient `k ≥ 1` times `k!`, with `−0.0` as `+0.0` (the value,
/// coefficient 0, is left bit for bit).
pub(crate) fn scale_by_factorials(c: &mut [f64]) {
    let mut fact = 1.0;
    for (k, v) in c.iter_mut().enumerate().skip(1) {
        fact *= k as f64;
        *v = *v * fact + 0.0;
    }
}
