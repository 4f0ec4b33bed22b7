//! ∂⃖ᴺ in the nested-closure encoding (K. Fischer, "∂P.jl terminology and
//! notation guide", §VII.B, Snippets 15, 17, 20; the book's chapter "Higher
//! order and the nested-closure encoding").

use std::marker::PhantomData;
use std::ops::{Add, Shl, Sub};

use typenum::{Add1, IsLess, IsLessOrEqual, Shleft, Sub1, True, Unsigned, B1, U0, U1};

use super::reverse::reverse_joint_ordered;
use crate::error::{Error, Result};
use crate::program::Program;
use crate::program::{Seed, Stage, Staged, StagedWorkspace};

use super::kind::sealed;
pub use super::kind::ProgramKind;

/// The order-`order` bundle program `P_order(x; d₁ … d_K) → (y, r₁ … r_K)`
/// with `K = 2^order − 1`, built by applying ∂⃖ `order` times, for a scalar
/// or an array program ([`ProgramKind`]).
///
/// `P₀ = p`. `P_{n+1}` is the joint program of ∂⃖P_n (see
/// [`super::reverse::reverse_joint`] and
/// [`crate::array::reverse_joint`]) with its blocks put in the order of
/// the nested-closure encoding (the book's chapter "Higher order and the
/// nested-closure encoding"): inputs `[x, d₁…d_K, r̄_K … r̄₁, ȳ]`, outputs
/// `[y, r₁…r_K, d̄_K … d̄₁, x̄]`. Closure `k` takes `d_k` and returns `r_k`,
/// and `r_k` depends only on `x` and `d₁ … d_k`.
///
/// Shapes: for `p` with `a` inputs and `b` outputs the blocks alternate:
/// `x`, the even `d_k` and the odd `r_k` have `a` entries (numbers, or
/// arrays of the shapes of `p`'s inputs), `y`, the odd `d_k` and the even
/// `r_k` have `b` (the book's chapter "Architecture"). A scalar bundle
/// records its blocks ([`Program::input_blocks`],
/// [`Program::output_blocks`]).
///
/// # Errors
///
/// [`Error::OrderTooHigh`] for an order above [`MAX_ORDER`] (the bundle
/// would have over a million closures), before anything is built;
/// [`Error::ProgramTooLarge`] when a nesting level after the first would
/// pass [`MAX_NESTED_LEN`] instructions (counting map bodies), before that
/// level is built; for an array program, its defect if it has one.
///
/// # Example
///
/// ```
/// use optic_ad::{nest, trace, Real};
///
/// let p = trace(|x| vec![x[0].sin()], &[0.3]).unwrap();
/// let p2 = nest(&p, 2).unwrap();
/// assert_eq!(p2.input_blocks().len(), 4); // x, d₁, d₂, d₃
/// ```
///
/// The same function on an array program (`array::nest` is this one):
///
/// ```
/// use optic_ad::array::{nest, trace, Array};
/// use optic_ad::Real;
///
/// // f(x) = Σ sin(xᵢ). Order 2: inputs [x, d₁, d₂, d₃], outputs
/// // [y, r₁, r₂, r₃].
/// let x = [0.1, 0.2];
/// let p = trace(|x: &[_]| Ok(x[0].map(|t| t.sin()).sum()), &[&x]).unwrap();
/// let p2 = nest(&p, 2).unwrap();
/// assert_eq!(p2.input_shapes().len(), 4);
/// // With d₁ = 1, d₂ = e₀ and d₃ = 0 the last closure returns H e₀, the
/// // Hessian's first column (−sin x₀, 0).
/// let out = p2.eval(&[&x, &[1.0], &[1.0, 0.0], &[0.0]]).unwrap();
/// assert!((out[3][0] + 0.1_f64.sin()).abs() < 1e-15 && out[3][1] == 0.0);
/// ```
pub fn nest<P: ProgramKind>(p: &P, order: usize) -> Result<P> {
    check_order(order)?;
    let mut cur: Option<P> = None;
    // The width of each input and output block of the current level.
    let (a, b) = p.io();
    let (mut in_w, mut out_w) = (vec![a], vec![b]);
    for n in 0..order {
        let src = cur.as_ref().unwrap_or(p);
        if n >= 1 {
            check_nested_size(src.nested_len(), order - n)?;
        }
        let k = (1usize << n) - 1;
        // Joint blocks: [x, d₁..d_K, ȳ, r̄₁..r̄_K] / [y, r₁..r_K, x̄, d̄₁..d̄_K],
        // taken in the order [x, d₁..d_K, r̄_K..r̄₁, ȳ] /
        // [y, r₁..r_K, d̄_K..d̄₁, x̄].
        let mut perm: Vec<usize> = (0..=k).collect();
        perm.extend((k + 2..=2 * k + 1).rev());
        perm.push(k + 1);
        let next = src.joint_ordered(&in_w, &out_w, &perm)?;
        let joint_in: Vec<usize> = in_w.iter().chain(&out_w).copied().collect();
        let joint_out: Vec<usize> = out_w.iter().chain(&in_w).copied().collect();
        in_w = perm.iter().map(|&j| joint_in[j]).collect();
        out_w = perm.iter().map(|&j| joint_out[j]).collect();
        cur = Some(next);
    }
    Ok(cur.unwrap_or_else(|| p.order_zero()))
}

impl sealed::Sealed for Program {}

/// The stages of a scalar bundle and the buffers they run in; a closure's
/// residual stays in the buffers.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct ScalarStages {
    staged: Staged,
    ws: StagedWorkspace,
}

impl ProgramKind for Program {
    type Block<'a> = &'a [f64];
    type Values = Vec<f64>;
    type Stages = ScalarStages;
    type Derived = Program;
    type Jets = super::taylor::ScalarJets;

    fn forward_kind(&self) -> Program {
        super::forward::forward_program(self)
    }

    fn reverse_joint_kind(&self) -> Program {
        super::reverse::reverse_joint_program(self)
    }

    fn taylor_jets(&self, degree: usize) -> Result<super::taylor::ScalarJets> {
        super::taylor::ScalarJets::new(self, degree)
    }

    fn jets_degree(jets: &super::taylor::ScalarJets) -> usize {
        jets.degree()
    }

    fn jets_program(jets: &super::taylor::ScalarJets) -> &Program {
        jets.program()
    }

    fn io(&self) -> (usize, usize) {
        (self.n_inputs, self.outputs.len())
    }

    fn nested_len(&self) -> usize {
        self.len()
    }

    fn joint_ordered(&self, in_w: &[usize], out_w: &[usize], perm: &[usize]) -> Result<Self> {
        Ok(reverse_joint_ordered(self, in_w, out_w, perm, perm))
    }

    fn order_zero(&self) -> Self {
        self.flatten_blocks()
    }

    fn plan(bundle: Self, _: (usize, usize), order: usize) -> Result<ScalarStages> {
        let k = (1usize << order) - 1;
        let stage_ids: Vec<usize> = (0..=k).collect();
        let staged = Staged::split(&bundle, &stage_ids, &stage_ids, k + 1)?;
        let ws = staged.workspace();
        Ok(ScalarStages { staged, ws })
    }

    fn run_stage(s: &mut ScalarStages, k: usize, given: &[f64]) -> Result<Vec<f64>> {
        s.staged.run_with(k, &mut s.ws, given)?;
        Ok(s.staged.own_outputs(&s.ws, k).to_vec())
    }
}

/// A straight-line program for the `k`-th derivative of a scalar function
/// of one variable: `P_k` with seeds `d_{2^j} = 1` (`j < k`) and every other
/// `d_i = 0`, keeping only its last output (the book's chapter "Higher
/// order and the nested-closure encoding": at order 3, `e₁ = e₂ = e₄ = 1`
/// and the last closure returns `f‴`).
///
/// # Errors
///
/// [`Error::NotUnivariate`] unless `p` has one input and one output.
pub(crate) fn derivative_program(p: &Program, k: usize) -> Result<Program> {
    if p.n_inputs != 1 || p.outputs.len() != 1 {
        return Err(Error::NotUnivariate {
            what: "derivative",
            inputs: p.n_inputs,
            outputs: p.outputs.len(),
        });
    }
    if k == 0 {
        return Ok(p.flatten_blocks());
    }
    let pk = nest(p, k)?;
    let closures = (1usize << k) - 1;
    // Inputs [x, d₁ … d_K]: the seeds d_{2^j} are 1, the others structural
    // zeros.
    let mut fixed = vec![Seed::Free];
    fixed.extend((1..=closures).map(|i| {
        if i.is_power_of_two() {
            Seed::Value(1.0)
        } else {
            Seed::Zero
        }
    }));
    // Outputs [y, r₁ … r_K]: keep r_K.
    pk.specialize_seeds(&fixed, &[closures])
}

/// One program with outputs `[f, f′, …, f⁽ᴺ⁾]`: the derivative programs of
/// every order inlined into one builder, so CSE shares what the orders have
/// in common (Fischer, ∂P.jl notes, §V.C: sharing across orders).
pub(crate) fn derivatives_program(p: &Program, order: usize) -> Result<Program> {
    // Before anything is built: orders 0..=order would all be.
    check_order(order)?;
    let mut b = crate::program::Builder::new();
    let x = b.input();
    let mut outs = Vec::with_capacity(order + 1);
    for k in 0..=order {
        let dk = derivative_program(p, k)?;
        let map = dk.copy_into(&mut b, &[x]);
        outs.push(map[dk.outputs()[0].index()]);
    }
    Ok(b.finish_unchecked(&outs).into_dce())
}

/// The program `x ↦ [f(x), f′(x), …, f⁽ᴺ⁾(x)]` of a scalar function of one
/// variable (`p` has one input and one output) by the nested-closure
/// encoding: the last closure of ∂⃖ᵏf for `k = 1 … N`, with seeds
/// `d_{2^j} = 1` and all others structural zeros (the book's chapter
/// "Higher order and the nested-closure encoding"). The orders share one
/// builder, so common work is computed once. Structural zeros come out as
/// `+0.0`.
///
/// The encoding is stated in full in the book's chapter "Architecture".
/// This construction is kept as the independent check of Taylor mode
/// ([`crate::derivative`] and [`crate::Derivatives`] use
/// [`super::TaylorProgram`]): its size grows like `2ᴺ` before the passes
/// prune it, so orders up to about 8 are practical.
///
/// # Errors
///
/// [`Error::NotUnivariate`] unless `p` has one input and one output;
/// [`Error::OrderTooHigh`] above [`MAX_ORDER`];
/// [`Error::ProgramTooLarge`] where a nesting level would pass
/// [`MAX_NESTED_LEN`].
///
/// # Example
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::functor::nested_derivatives;
/// use optic_ad::{trace, Real};
///
/// let p = trace(|x| vec![x[0].sin()], &[0.0]).unwrap();
/// let d = nested_derivatives(&p, 3).unwrap();
/// let v = d.eval(&[0.5_f64]).unwrap();
/// assert_relative_eq!(v[3], -0.5_f64.cos());
/// ```
pub fn nested_derivatives(p: &Program, order: usize) -> Result<Program> {
    Ok(derivatives_program(p, order)?.positive_zero_outputs())
}

/// The highest order of the nested-closure encoding, `20`: ∂⃖²⁰ has
/// 2²⁰ − 1 closures. The typed drivers and [`Nested`] bound their order by
/// it at compile time; [`nest`] checks it at run time.
pub const MAX_ORDER: usize = 20;

/// [`MAX_ORDER`] as a type, for bounds: `N: IsLessOrEqual<MaxOrder, Output = True>`.
pub type MaxOrder = typenum::U20;

/// The most instructions a nesting level of [`nest`] may be expected to
/// build: 2²² (about 4 million, a few hundred MB while building). The
/// first application of ∂⃖ is linear in the program and is never refused;
/// each further level at least doubles what it is given (the closure count
/// doubles), so before level `n + 1` of an order-`N` bundle the program of
/// `len` instructions is refused when `len · 2^(N − n + 1)` exceeds this.
pub const MAX_NESTED_LEN: usize = 1 << 22;

/// [`Error::ProgramTooLarge`] where the remaining `levels` of nesting of a
/// program of `len` instructions would pass [`MAX_NESTED_LEN`].
pub(crate) fn check_nested_size(len: usize, levels: usize) -> Result<()> {
    let factor = 1usize.checked_shl(levels as u32 + 1).unwrap_or(usize::MAX);
    let estimate = len.saturating_mul(factor);
    if estimate > MAX_NESTED_LEN {
        Err(Error::ProgramTooLarge {
            estimate,
            max: MAX_NESTED_LEN,
        })
    } else {
        Ok(())
    }
}

/// [`Error::OrderTooHigh`] above [`MAX_ORDER`].
pub(crate) fn check_order(order: usize) -> Result<()> {
    if order > MAX_ORDER {
        Err(Error::OrderTooHigh {
            order,
            max: MAX_ORDER,
        })
    } else {
        Ok(())
    }
}

/// The number of closures of an order-`N` bundle, `2ᴺ − 1`, as a type.
pub type Closures<N> = Sub1<Shleft<U1, N>>;

/// The order-`N` optic ∂⃖ᴺf of a program, split into its primal stage and
/// its `2ᴺ − 1` nested closures (see the book's chapter "Higher order and
/// the nested-closure encoding"), for a scalar [`Program`] (the default) or
/// an [`ArrayProgram`](crate::array::ArrayProgram)
/// ([`crate::array::Nested`] is this type for array programs).
///
/// Stage 0 maps `x` to `y`; closure `k` (stage `k`) maps `d_k` to `r_k`.
/// Each stage runs the part of the bundle program ([`nest`]) that its own
/// inputs make computable; what a later closure reads from an earlier
/// stage (the residual: the closure captures of Snippet 15 of Fischer's
/// ∂P.jl notes, made explicit) stays in the bundle's buffers, so nothing is
/// recomputed, and calls allocate only the values they return.
///
/// The order is a typenum so that the closure levels are typed: see
/// [`Level`]. Calling past the last closure does not compile:
///
/// ```compile_fail,E0599
/// use optic_ad::{trace, Nested, Real};
/// use optic_ad::typenum::U1;
///
/// let p = trace(|x| vec![x[0].sin()], &[0.3]).unwrap();
/// let mut n = Nested::<U1>::new(&p).unwrap();
/// let (_y, l0) = n.primal(&[0.3]).unwrap();
/// let (_r1, l1) = l0.call(&[1.0]).unwrap();
/// let _ = l1.call(&[1.0]); // order 1 has one closure: no second call
/// ```
///
/// Nor does an order above [`MAX_ORDER`]:
///
/// ```compile_fail,E0599
/// use optic_ad::Nested;
/// use optic_ad::typenum::U64;
///
/// let _ = Nested::<U64>::closures();
/// ```
///
/// # Example
///
/// Snippet 15 of Fischer's ∂P.jl notes, ∂⃖² sin:
///
/// ```
/// use approx::assert_relative_eq;
/// use optic_ad::{trace, Nested, Real};
/// use optic_ad::typenum::U2;
///
/// let x = 0.7_f64;
/// let p = trace(|x| vec![x[0].sin()], &[x]).unwrap();
/// let mut n = Nested::<U2>::new(&p).unwrap();
/// assert_eq!(Nested::<U2>::closures(), 3);
/// let (y, l0) = n.primal(&[x]).unwrap();
/// assert_relative_eq!(y[0], x.sin());
/// let (d, dp, ddp) = (1.5, 0.5, 2.0);
/// let (r1, l1) = l0.call(&[d]).unwrap(); // Δ cos x
/// assert_relative_eq!(r1[0], d * x.cos());
/// let (r2, l2) = l1.call(&[dp]).unwrap(); // Δ′ cos x
/// assert_relative_eq!(r2[0], dp * x.cos());
/// let (r3, _) = l2.call(&[ddp]).unwrap(); // Δ″ cos x + Δ′Δ(−sin x)
/// assert_relative_eq!(r3[0], ddp * x.cos() - dp * d * x.sin());
/// ```
#[derive(Clone, Debug)]
pub struct Nested<N, P: ProgramKind = Program> {
    stages: P::Stages,
    _order: PhantomData<N>,
}

impl<N: Unsigned + IsLessOrEqual<MaxOrder, Output = True>, P: ProgramKind> Nested<N, P> {
    /// Builds ∂⃖ᴺ of `p` ([`nest`]) and plans its stages.
    ///
    /// # Errors
    ///
    /// Those of [`nest`]; [`Error::NotCausal`] would mean a bug in the
    /// transform.
    pub fn new(p: &P) -> Result<Self> {
        let order = N::to_usize();
        let pn = nest(p, order)?;
        let stages = P::plan(pn, p.io(), order)?;
        Ok(Nested {
            stages,
            _order: PhantomData,
        })
    }

    /// The whole bundle in one call: the primal at `x`, then every closure
    /// `1 … 2ᴺ − 1` in order, closure `k` fed `d[k − 1]`. Returns `y` and
    /// the closures' outputs `[r₁, …, r_K]`. The same numbers as
    /// [`Nested::primal`] followed by each [`Level::call`], in one call.
    ///
    /// Shapes: `x` has the width of the program's input, `d` has
    /// `2ᴺ − 1` entries, `d[k − 1]` the width of input block `k` of the
    /// bundle program; `r_k` has that of output block `k`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] for a wrong number of closure inputs or a
    /// wrong width; the errors of evaluation.
    ///
    /// # Example
    ///
    /// ```
    /// use approx::assert_relative_eq;
    /// use optic_ad::{trace, Nested, Real};
    /// use optic_ad::typenum::U3;
    ///
    /// // f‴ of sin from the order-3 bundle: seeds d₁ = d₂ = d₄ = 1, the last
    /// // closure returns −cos x (the book's higher-order chapter).
    /// let p = trace(|x| vec![x[0].sin()], &[0.0]).unwrap();
    /// let mut bundle = Nested::<U3>::new(&p).unwrap();
    /// let d: Vec<Vec<f64>> = (1..=7)
    ///     .map(|k: usize| vec![if k.is_power_of_two() { 1.0 } else { 0.0 }])
    ///     .collect();
    /// let d: Vec<&[f64]> = d.iter().map(Vec::as_slice).collect();
    /// let (y, r) = bundle.call_all(&[0.5], &d).unwrap();
    /// assert_relative_eq!(y[0], 0.5_f64.sin());
    /// assert_relative_eq!(r[6][0], -(0.5_f64.cos()));
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn call_all(
        &mut self,
        x: P::Block<'_>,
        d: &[P::Block<'_>],
    ) -> Result<(P::Values, Vec<P::Values>)> {
        let k = (1usize << N::to_usize()) - 1;
        crate::error::check_len("closure inputs of the bundle", k, d.len())?;
        let y = P::run_stage(&mut self.stages, 0, x)?;
        let mut outs = Vec::with_capacity(k);
        for (i, &di) in d.iter().enumerate() {
            outs.push(P::run_stage(&mut self.stages, i + 1, di)?);
        }
        Ok((y, outs))
    }

    /// Runs the primal stage at `x`, returning `y` and the first level.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] for a wrong `x` length (or number of
    /// arrays); [`Error::GuardFailed`] where a traced branch no longer
    /// holds.
    #[allow(clippy::type_complexity)]
    pub fn primal(&mut self, x: P::Block<'_>) -> Result<(P::Values, Level<'_, N, U0, P>)> {
        let y = P::run_stage(&mut self.stages, 0, x)?;
        Ok((
            y,
            Level {
                nested: self,
                _level: PhantomData,
            },
        ))
    }
}

impl<N: Unsigned + IsLessOrEqual<MaxOrder, Output = True>> Nested<N> {
    /// The number of nested closures, `2ᴺ − 1`.
    pub fn closures() -> usize {
        (1usize << N::to_usize()) - 1
    }

    /// The stages: index 0 is the primal, index `k` is closure `k`.
    pub fn stages(&self) -> &[Stage] {
        self.stages.staged.stages()
    }

    /// The bundle as one [`Staged`] program (stage 0 the primal, stage `k`
    /// closure `k`), to run in a reusable [`crate::StagedWorkspace`].
    pub fn staged(&self) -> &Staged {
        &self.stages.staged
    }
}

impl<N, P: ProgramKind> Nested<N, P> {
    /// The planned stages (for the program kind's own accessors).
    pub(crate) fn planned(&self) -> &P::Stages {
        &self.stages
    }
}

/// The state of an order-`N` bundle after `L` of its closures have been
/// called: the residual the remaining closures capture lives in the
/// bundle's buffers, which the level borrows.
///
/// [`Level::call`] exists only while `L < 2ᴺ − 1`.
#[derive(Debug)]
pub struct Level<'a, N, L, P: ProgramKind = Program> {
    nested: &'a mut Nested<N, P>,
    _level: PhantomData<L>,
}

impl<'a, N, L, P> Level<'a, N, L, P>
where
    N: Unsigned,
    U1: Shl<N>,
    Shleft<U1, N>: Sub<B1>,
    Closures<N>: Unsigned,
    L: Unsigned + IsLess<Closures<N>, Output = True> + Add<B1>,
    Add1<L>: Unsigned,
    P: ProgramKind,
{
    /// Calls closure `L + 1` with its input `d`, returning its output `r`
    /// and the next level.
    ///
    /// Shapes: `d` has the width of input block `L + 1` of the bundle
    /// program, `r` that of output block `L + 1`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] for a wrong `d` length (or number of
    /// arrays).
    #[allow(clippy::type_complexity)]
    pub fn call(self, d: P::Block<'_>) -> Result<(P::Values, Level<'a, N, Add1<L>, P>)> {
        let r = P::run_stage(&mut self.nested.stages, L::to_usize() + 1, d)?;
        Ok((
            r,
            Level {
                nested: self.nested,
                _level: PhantomData,
            },
        ))
    }
}
