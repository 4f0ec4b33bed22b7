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

use super::kind::ProgramKind;
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

/// [`Error::OrderTooHigh`] above [`MAX_TAYLOR_ORDER`].
pub(crate) fn check_taylor_order(degree: usize) -> Result<()> {
    if degree > MAX_TAYLOR_ORDER {
        return Err(Error::OrderTooHigh {
            order: degree,
            max: MAX_TAYLOR_ORDER,
        });
    }
    Ok(())
}

/// The Taylor functor applied to a program: `P: ℝⁿ → ℝᵐ` becomes
/// `T_K P: Jₖⁿ → Jₖᵐ` on jets of degree `K`, evaluated many times without
/// allocation. One type for both kinds of program ([`ProgramKind`]): a
/// scalar [`Program`] (the default, `TaylorProgram`) and an
/// [`ArrayProgram`](crate::array::ArrayProgram)
/// (`TaylorProgram<ArrayProgram>`); [`TaylorProgram::new`],
/// [`TaylorProgram::degree`] and [`TaylorProgram::program`] are the same
/// for both, evaluation takes each kind's inputs.
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
/// # Array programs
///
/// The jet of an array of `len` elements is `(K + 1)·len` values,
/// **coefficient-major**: coefficient `k` of element `e` at `k·len + e`.
/// Along the line `x(t) = x + t v`, an input's jet is `[x, v, 0, …, 0]`
/// (concatenated), and coefficient `k` of a scalar output is
/// `Dᵏf(x)[v, …, v] / k!`. Each operation follows its Taylor rule (linear,
/// bilinear by Cauchy product, or its own recurrence), and a map runs
/// the scalar jets of its body element by element; coefficients that are
/// zero by structure (above the degree an instruction can reach from the
/// inputs) are never computed. Evaluate with
/// [`eval`](TaylorProgram::<ArrayProgram>::eval) and read each output
/// with [`output`](TaylorProgram::<ArrayProgram>::output). Where
/// [`crate::nest`] builds the `2ⁿ − 1` closures of ∂⃖ⁿ, a jet carries one
/// curve through the program.
///
/// `f(x) = Σ eˣⁱ` along `v = 𝟙` at `x = 0`: every coefficient `k` is
/// `n / k!`.
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::array::{trace, Array, ArrayProgram};
/// use optic_ad::functor::TaylorProgram;
/// use optic_ad::Real;
///
/// let x = [0.0; 3];
/// let p = trace(|x: &[_]| Ok(x[0].map(|t| t.exp()).sum()), &[&x]).unwrap();
/// let mut t: TaylorProgram<ArrayProgram> = TaylorProgram::new(&p, 4).unwrap();
/// // [x, v, 0, 0, 0], coefficient-major.
/// let mut jet = vec![0.0; 5 * 3];
/// jet[3..6].fill(1.0);
/// t.eval(&[&jet]).unwrap();
/// let c = t.output(0);
/// assert_relative_eq!(c[0], 3.0);
/// assert_relative_eq!(c[4], 3.0 / 24.0, max_relative = 1e-15);
/// ```
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
pub struct TaylorProgram<P: ProgramKind = Program> {
    pub(crate) jets: P::Jets,
}

impl<P: ProgramKind> TaylorProgram<P> {
    /// The Taylor program of `p` at degree `degree` (jets of
    /// `degree + 1` coefficients): a scalar [`Program`] or an
    /// [`ArrayProgram`](crate::array::ArrayProgram).
    ///
    /// # Errors
    ///
    /// [`Error::OrderTooHigh`] above [`MAX_TAYLOR_ORDER`]; the program's
    /// own error if it is malformed ([`Program::validate`]) or, for an
    /// array program, carries a defect (a map body is validated as a
    /// program); [`Error::AllocationFailed`] where an array program's
    /// jets (`(degree + 1)·len` values per instruction) cannot be
    /// allocated (they are allocated here; a scalar program's at the first
    /// evaluation).
    pub fn new(p: &P, degree: usize) -> Result<Self> {
        check_taylor_order(degree)?;
        Ok(TaylorProgram {
            jets: p.taylor_jets(degree)?,
        })
    }

    /// The degree `K`: jets hold `K + 1` coefficients.
    pub fn degree(&self) -> usize {
        P::jets_degree(&self.jets)
    }

    /// The program whose jets are propagated.
    pub fn program(&self) -> &P {
        P::jets_program(&self.jets)
    }
}

impl TaylorProgram<Program> {
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
    /// [`Error::BadRule`] for a program built with a misused rule;
    /// [`Error::AllocationFailed`] where the jets (`K + 1` values per
    /// instruction, allocated at the first call) cannot be allocated.
    pub fn eval(&mut self, inputs: &[f64], outputs: &mut [f64]) -> Result<()> {
        self.jets.eval(inputs, outputs)
    }

    /// The scalar `eval` (above), and beside each output coefficient an
    /// estimate of its rounding error (absolute, in the units of the
    /// coefficient), `errors` laid out as `outputs`.
    ///
    /// Jets lose accuracy at high degree where a recurrence sums terms much
    /// larger than its result: the Cauchy product of `eˣ` and `sin x` sums
    /// terms of size `2ᵏ/k!` into a coefficient of size `2^{k/2}/k!`, so
    /// about `k/2` bits are lost at degree `k` and nothing is left near
    /// `k = 110`, while `eˣ` and `sin x` alone are right to about `10⁻¹³`
    /// at degree 170. The estimate measures this cancellation by Monte
    /// Carlo arithmetic (D. S. Parker, *Monte Carlo Arithmetic: exploiting
    /// randomness in floating-point arithmetic*, UCLA technical report
    /// CSD-970002, 1997; the idea of J. Vignes's CESTAC method): the program runs
    /// [`ERROR_SAMPLES`] more times, each result of an instruction
    /// (every coefficient of its jet) multiplied by `1 + ε r` with `r`
    /// uniform in `[−1, 1]` and `ε = 2⁻²⁶`, and the spread of the outputs,
    /// scaled from `ε` to f64's unit roundoff `u = 2⁻⁵³` and by a safety
    /// factor of 64 (measured, see `tests/taylor_closed_forms.rs`), is the
    /// estimate. The same is run again with `ε` 1024 times smaller: where
    /// the spread does not shrink with it (within a factor 16 of
    /// linearly), the first-order scaling does not hold (a cosine of an
    /// argument whose last bit is worth radians is already as wrong as it
    /// can be) and the unscaled spread is taken. Inputs and constants are exact and are not perturbed, and
    /// branching primitives (`select`, `max`, `clamp`, …) decide as the
    /// unperturbed run did. It is an estimate, not a bound. Checked against
    /// the closed forms of every primitive to degree 30
    /// (`tests/taylor_closed_forms.rs`) and against mpmath to degree 170 for
    /// eight functions (`tests/taylor_accuracy.rs`), it covers the true
    /// error of every coefficient, which reaches at most 0.37 of it.
    ///
    /// The perturbation is pseudo-random with a fixed seed: the same call
    /// gives the same estimate. It costs `2 ×` [`ERROR_SAMPLES`] more
    /// evaluations; its two buffers (one value per instruction, and the
    /// operands of a branching primitive) are allocated at the first call
    /// and reused.
    ///
    /// A coefficient that is not finite gets the estimate `+∞`; so does
    /// one whose perturbed values are not finite (a singularity within
    /// reach of the perturbation).
    ///
    /// # Errors
    ///
    /// As the scalar `eval` (above), and [`Error::LengthMismatch`] unless
    /// `errors.len() == outputs.len()`.
    ///
    /// # Example
    ///
    /// ```
    /// use optic_ad::functor::TaylorProgram;
    /// use optic_ad::{trace, Real};
    ///
    /// // eˣ sin x along x = 0.3 + t, to degree 120.
    /// let p = trace(|x| vec![x[0].exp() * x[0].sin()], &[0.3]).unwrap();
    /// let mut t = TaylorProgram::new(&p, 120).unwrap();
    /// let mut input = vec![0.0; 121];
    /// (input[0], input[1]) = (0.3, 1.0);
    /// let (mut c, mut err) = (vec![0.0; 121], vec![0.0; 121]);
    /// t.eval_with_error(&input, &mut c, &mut err).unwrap();
    /// // Degree 10 is right to about 1e-15; nothing of degree 120 is left.
    /// assert!(err[10] < 1e-13 * c[10].abs());
    /// assert!(err[120] > c[120].abs());
    /// ```
    pub fn eval_with_error(
        &mut self,
        inputs: &[f64],
        outputs: &mut [f64],
        errors: &mut [f64],
    ) -> Result<()> {
        self.jets.eval_with_error(inputs, outputs, errors)
    }
}

/// The scalar form of a [`TaylorProgram`]: the program, its degree and
/// the buffers its jets are computed in.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct ScalarJets {
    program: Program,
    degree: usize,
    /// The jets of every instruction, `degree + 1` coefficients each.
    vals: Vec<f64>,
    scratch: Scratch,
    /// Per rule of the program's table: the Taylor program of its partial
    /// derivatives at degree `degree − 1`, built on first use where the
    /// rule has no Taylor rule of its own.
    partials: Vec<Option<Box<ScalarJets>>>,
    /// Buffers of the derived rule: the partials' inputs and outputs.
    rule_in: Vec<f64>,
    rule_out: Vec<f64>,
    /// For `eval_with_error`: the constant term of every
    /// instruction in the unperturbed run, and the operands' jets of a
    /// branching primitive with those constant terms.
    decided: Vec<f64>,
    operands: Vec<f64>,
    /// For `eval_with_error`: the spread of the outputs
    /// under the smaller perturbation.
    small_spread: Vec<f64>,
}

impl ScalarJets {
    /// The scalar Taylor program of `p` at degree `degree`.
    pub(crate) fn new(p: &Program, degree: usize) -> Result<Self> {
        check_taylor_order(degree)?;
        p.validate()?;
        Ok(ScalarJets {
            program: p.clone(),
            degree,
            vals: Vec::new(),
            scratch: Scratch::default(),
            partials: vec![None; p.rules.len()],
            rule_in: Vec::new(),
            rule_out: Vec::new(),
            decided: Vec::new(),
            operands: Vec::new(),
            small_spread: Vec::new(),
        })
    }

    pub(crate) fn degree(&self) -> usize {
        self.degree
    }

    pub(crate) fn program(&self) -> &Program {
        &self.program
    }

    /// The scalar `TaylorProgram::eval`.
    pub(crate) fn eval(&mut self, inputs: &[f64], outputs: &mut [f64]) -> Result<()> {
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

    /// [`TaylorProgram::eval_with_error`].
    pub(crate) fn eval_with_error(
        &mut self,
        inputs: &[f64],
        outputs: &mut [f64],
        errors: &mut [f64],
    ) -> Result<()> {
        if errors.len() != outputs.len() {
            return Err(Error::LengthMismatch {
                what: "Taylor program error estimates",
                expected: outputs.len(),
                got: errors.len(),
            });
        }
        self.eval(inputs, outputs)?;
        for (e, o) in errors.iter_mut().zip(outputs.iter()) {
            *e = if o.is_finite() { 0.0 } else { f64::INFINITY };
        }
        let w = self.degree + 1;
        let mut decided = std::mem::take(&mut self.decided);
        decided.clear();
        decided.extend(self.vals.chunks_exact(w).map(|y| y[0]));
        self.decided = decided;
        let mut small = std::mem::take(&mut self.small_spread);
        small.clear();
        small.resize(errors.len(), 0.0);
        for (pass, eps) in [PERTURBATION, PERTURBATION * SMALL_RATIO]
            .into_iter()
            .enumerate()
        {
            let spread: &mut [f64] = if pass == 0 { errors } else { &mut small };
            for sample in 0..ERROR_SAMPLES {
                let mut state =
                    PERTURBATION_SEED.wrapping_add((pass * ERROR_SAMPLES + sample) as u64);
                self.run_with(inputs, true, |y| {
                    for v in y {
                        *v *= 1.0 + eps * uniform(&mut state);
                    }
                })?;
                let outs = spread.chunks_exact_mut(w).zip(outputs.chunks_exact(w));
                for ((e, o), v) in outs.zip(&self.program.outputs) {
                    let perturbed = &self.vals[v.index() * w..][..w];
                    for ((e, o), p) in e.iter_mut().zip(o).zip(perturbed) {
                        let d = (p - o).abs();
                        // A NaN spread (a perturbed value crossed a
                        // singularity) is no accuracy at all.
                        *e = if d.is_nan() { f64::INFINITY } else { e.max(d) };
                    }
                }
            }
        }
        let scale = ERROR_SAFETY * f64::EPSILON / 2.0 / PERTURBATION;
        for (e, &s) in errors.iter_mut().zip(&small) {
            // In the first-order regime the spread shrinks with the
            // perturbation. Where it does not (a cosine of an argument
            // whose last bit is worth radians saturates), rounding alone
            // already moves the result by about that spread.
            let saturated = s > *e * SMALL_RATIO * NONLINEAR;
            *e = if saturated {
                (*e * scale).max(s)
            } else {
                *e * scale
            };
        }
        self.small_spread = small;
        Ok(())
    }

    /// Runs every instruction and checks the guards.
    fn run(&mut self, inputs: &[f64]) -> Result<()> {
        self.run_with(inputs, false, |_| {})?;
        let w = self.degree + 1;
        let vals = &self.vals;
        check_guards(&self.program.guards, |v| vals[v.index() * w])
    }

    /// Runs every instruction, calling `after` on the jet of each
    /// primitive's result (the perturbation of
    /// [`TaylorProgram::eval_with_error`]; nothing otherwise, which the
    /// compiler removes). With `decide_as_before`, a branching primitive
    /// (`select`, `max`, `clamp`, …) decides on the constant terms of the
    /// run that filled `decided`, so that a perturbation never flips a
    /// branch or breaks a tie: the estimate is of rounding, not of the
    /// jump. Guards are not checked.
    #[inline(always)]
    fn run_with(
        &mut self,
        inputs: &[f64],
        decide_as_before: bool,
        mut after: impl FnMut(&mut [f64]),
    ) -> Result<()> {
        let ScalarJets {
            program: p,
            degree,
            vals,
            scratch,
            partials,
            rule_in,
            rule_out,
            decided,
            operands,
            small_spread: _,
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
        let len = p.code.len().checked_mul(w).ok_or(Error::AllocationFailed {
            what: "Taylor program jets",
            elements: usize::MAX,
        })?;
        if vals.len() != len {
            vals.clear();
            crate::error::grow_to("Taylor program jets", vals, len, 0.0)?;
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
                Op::Apply { prim, param, args } if decide_as_before && prim.branches() => {
                    // The operands' jets with their unperturbed constant
                    // terms, on which the primitive decides.
                    operands.clear();
                    for v in args.as_slice() {
                        operands.extend_from_slice(&done[v.index() * w..][..w]);
                        let at = operands.len() - w;
                        operands[at] = decided[v.index()];
                    }
                    let mut xs: [&[f64]; MAX_ARITY] = [&[]; MAX_ARITY];
                    for (s, j) in xs.iter_mut().zip(operands.chunks_exact(w)) {
                        *s = j;
                    }
                    prim.taylor(&xs[..args.len()], param, y, scratch);
                    after(y);
                }
                Op::Apply { prim, param, args } => {
                    let mut xs: [&[f64]; MAX_ARITY] = [&[]; MAX_ARITY];
                    for (s, v) in xs.iter_mut().zip(args.as_slice()) {
                        *s = &done[v.index() * w..][..w];
                    }
                    prim.taylor(&xs[..args.len()], param, y, scratch);
                    after(y);
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
                    after(y);
                }
            }
        }
        Ok(())
    }
}

/// How many perturbed evaluations [`TaylorProgram::eval_with_error`]
/// runs: the estimate is the largest spread among them.
pub const ERROR_SAMPLES: usize = 3;

/// The relative perturbation `ε = 2⁻²⁶` of
/// [`TaylorProgram::eval_with_error`]: far above f64's rounding (so the
/// spread is the perturbation's, not noise), far below 1 (so the response
/// stays linear where the result is worth having).
const PERTURBATION: f64 = 1.0 / (1u64 << 26) as f64;

/// The second, smaller perturbation of
/// [`TaylorProgram::eval_with_error`], as a fraction of the first: where
/// the outputs' spread does not shrink with it about as much (within a
/// factor [`NONLINEAR`]), the first-order scaling to the unit roundoff
/// does not hold, and the unscaled spread is the estimate.
const SMALL_RATIO: f64 = 1.0 / 1024.0;

/// How much less than linearly the spread may shrink before it counts as
/// saturated.
const NONLINEAR: f64 = 16.0;

/// The factor on the scaled spread. The perturbation is one per result
/// of an instruction, while a rule rounds many times inside its
/// recurrence, some rules through jets of their own that are not
/// perturbed (`acosh` through `√(x² − 1)`, `powf` through `exp(e ln a)`),
/// and three samples of a sum of terms with random signs can fall below
/// its typical size. Measured on the closed-form table (every primitive,
/// order 30, `tests/taylor_closed_forms.rs`): with a factor of 8 the true
/// error reached 2.9 times the estimate (`acosh`, order 14), so 64 leaves
/// a margin of about 3. Both accuracy tests print the largest ratio of
/// true error to estimate they see.
const ERROR_SAFETY: f64 = 64.0;

/// The seed of the perturbations (any fixed value: the estimate is
/// reproducible).
const PERTURBATION_SEED: u64 = 0x5eed_7a71_0e55_0001;

/// A uniform pseudo-random number in `[−1, 1)` (SplitMix64, S. Vigna's
/// finaliser of Steele, Lea & Flood's generator): deterministic and
/// stateless apart from the counter, for the perturbations only.
#[inline(always)]
fn uniform(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    // 53 random bits as a fraction in [0, 1), mapped to [−1, 1).
    (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
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
    partials: &mut Option<Box<ScalarJets>>,
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
        None => partials.insert(Box::new(ScalarJets::new(&partials_program(r), w - 2)?)),
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
