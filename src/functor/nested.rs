//! ∂⃖ᴺ in the nested-closure encoding (K. Fischer, "∂P.jl terminology and
//! notation guide", §VII.B, Snippets 15, 17, 20; the book's chapter "Higher
//! order and the nested-closure encoding").

use std::marker::PhantomData;
use std::ops::{Add, Shl, Sub};

use typenum::{Add1, IsLess, IsLessOrEqual, Shleft, Sub1, True, Unsigned, B1, U0, U1};

use super::reverse::reverse_joint_ordered;
use crate::error::{Error, Result};
use crate::program::Program;
use crate::program::{Seed, Stage, Staged};

/// The order-`order` bundle program `P_order(x; d₁ … d_K) → (y, r₁ … r_K)`
/// with `K = 2^order − 1`, built by applying ∂⃖ `order` times.
///
/// `P₀ = p`. `P_{n+1}` is the joint program of ∂⃖P_n (see
/// [`super::reverse::reverse_joint`]) with its blocks put in the order of
/// the nested-closure encoding (the book's chapter "Higher order and the
/// nested-closure encoding"): inputs `[x, d₁…d_K, r̄_K … r̄₁, ȳ]`, outputs
/// `[y, r₁…r_K, d̄_K … d̄₁, x̄]`. Closure `k` takes `d_k` and returns `r_k`,
/// and `r_k` depends only on `x` and `d₁ … d_k`.
///
/// Shapes: for `p : ℝⁿ → ℝᵐ` the widths alternate: `d_k` has `m` entries
/// for odd `k` and `n` for even `k`, and `r_k` the other (the book's
/// chapter "Architecture"), as the blocks record
/// ([`Program::input_blocks`], [`Program::output_blocks`]).
///
/// # Errors
///
/// [`Error::OrderTooHigh`] for an order above [`MAX_ORDER`] (the bundle
/// would have over a million closures), before anything is built;
/// [`Error::ProgramTooLarge`] when a nesting level after the first would
/// pass [`MAX_NESTED_LEN`] instructions, before that level is built.
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
pub fn nest(p: &Program, order: usize) -> Result<Program> {
    check_order(order)?;
    let mut cur: Option<Program> = None;
    for n in 0..order {
        let src = cur.as_ref().unwrap_or(p);
        // P₀ is `p` with one input and one output block.
        let (in_w, out_w) = match &cur {
            Some(c) => (c.input_blocks.clone(), c.output_blocks.clone()),
            None => (vec![p.n_inputs], vec![p.outputs.len()]),
        };
        if n >= 1 {
            check_nested_size(src.len(), order - n)?;
        }
        let k = (1usize << n) - 1;
        // Joint blocks: [x, d₁..d_K, ȳ, r̄₁..r̄_K] / [y, r₁..r_K, x̄, d̄₁..d̄_K],
        // built directly in the order [x, d₁..d_K, r̄_K..r̄₁, ȳ] /
        // [y, r₁..r_K, d̄_K..d̄₁, x̄].
        let mut perm: Vec<usize> = (0..=k).collect();
        perm.extend((k + 2..=2 * k + 1).rev());
        perm.push(k + 1);
        cur = Some(reverse_joint_ordered(src, &in_w, &out_w, &perm, &perm));
    }
    Ok(cur.unwrap_or_else(|| p.flatten_blocks()))
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
/// the nested-closure encoding").
///
/// Stage 0 maps `x` to `y`; closure `k` (stage `k`) maps `d_k` to `r_k`.
/// Each stage is a [`Program`] that also takes the residual of the stages
/// before it and hands its own to the next: the closure captures of
/// Snippet 15 of Fischer's ∂P.jl notes, made explicit.
///
/// The order is a typenum so that the closure levels are typed: see
/// [`Level`]. Calling past the last closure does not compile:
///
/// ```compile_fail,E0599
/// use optic_ad::{trace, Nested, Real};
/// use typenum::U1;
///
/// let p = trace(|x| vec![x[0].sin()], &[0.3]).unwrap();
/// let n = Nested::<U1>::new(&p).unwrap();
/// let (_y, l0) = n.primal(&[0.3]).unwrap();
/// let (_r1, l1) = l0.call(&[1.0]).unwrap();
/// let _ = l1.call(&[1.0]); // order 1 has one closure: no second call
/// ```
///
/// Nor does an order above [`MAX_ORDER`]:
///
/// ```compile_fail,E0599
/// use optic_ad::Nested;
/// use typenum::U64;
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
/// use typenum::U2;
///
/// let x = 0.7_f64;
/// let p = trace(|x| vec![x[0].sin()], &[x]).unwrap();
/// let n = Nested::<U2>::new(&p).unwrap();
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
pub struct Nested<N> {
    staged: Staged,
    _order: PhantomData<N>,
}

impl<N: Unsigned + IsLessOrEqual<MaxOrder, Output = True>> Nested<N> {
    /// Builds ∂⃖ᴺ of `p` and splits it into stages.
    ///
    /// # Errors
    ///
    /// Those of [`nest`]; [`Error::NotCausal`] would mean a bug in the
    /// transform.
    pub fn new(p: &Program) -> Result<Self> {
        let order = N::to_usize();
        let pn = nest(p, order)?;
        let k = (1usize << order) - 1;
        let stage_ids: Vec<usize> = (0..=k).collect();
        let staged = Staged::split(&pn, &stage_ids, &stage_ids, k + 1)?;
        Ok(Nested {
            staged,
            _order: PhantomData,
        })
    }

    /// The number of nested closures, `2ᴺ − 1`.
    pub fn closures() -> usize {
        (1usize << N::to_usize()) - 1
    }

    /// The stages: index 0 is the primal, index `k` is closure `k`.
    pub fn stages(&self) -> &[Stage] {
        self.staged.stages()
    }

    /// The bundle as one [`Staged`] program (stage 0 the primal, stage `k`
    /// closure `k`), to run in a reusable [`crate::StagedWorkspace`].
    pub fn staged(&self) -> &Staged {
        &self.staged
    }

    /// The whole bundle in one call: the primal at `x`, then every closure
    /// `1 … 2ᴺ − 1` in order, closure `k` fed `d[k − 1]`. Returns `y` and
    /// the closures' outputs `[r₁, …, r_K]`. The same numbers as
    /// [`Nested::primal`] followed by each [`Level::call`], in one call.
    ///
    /// Shapes: `x` has the width of the program's input, `d` has
    /// [`Nested::closures`] entries, `d[k − 1]` the width of input block `k`
    /// of the bundle program; `r_k` has that of output block `k`.
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
    /// use typenum::U3;
    ///
    /// // f‴ of sin from the order-3 bundle: seeds d₁ = d₂ = d₄ = 1, the last
    /// // closure returns −cos x (the book's higher-order chapter).
    /// let p = trace(|x| vec![x[0].sin()], &[0.0]).unwrap();
    /// let bundle = Nested::<U3>::new(&p).unwrap();
    /// let d: Vec<Vec<f64>> = (1..=7)
    ///     .map(|k: usize| vec![if k.is_power_of_two() { 1.0 } else { 0.0 }])
    ///     .collect();
    /// let d: Vec<&[f64]> = d.iter().map(Vec::as_slice).collect();
    /// let (y, r) = bundle.call_all(&[0.5], &d).unwrap();
    /// assert_relative_eq!(y[0], 0.5_f64.sin());
    /// assert_relative_eq!(r[6][0], -(0.5_f64.cos()));
    /// ```
    pub fn call_all(&self, x: &[f64], d: &[&[f64]]) -> Result<(Vec<f64>, Vec<Vec<f64>>)> {
        let k = Self::closures();
        if d.len() != k {
            return Err(Error::LengthMismatch {
                what: "closure inputs of the bundle",
                expected: k,
                got: d.len(),
            });
        }
        let (y, mut residual) = self.staged.run(0, &[], x)?;
        let mut outs = Vec::with_capacity(k);
        for (i, di) in d.iter().enumerate() {
            let (r, next) = self.staged.run(i + 1, &residual, di)?;
            outs.push(r);
            residual = next;
        }
        Ok((y, outs))
    }

    /// Runs the primal stage at `x`, returning `y` and the first level.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] for a wrong `x` length;
    /// [`Error::GuardFailed`] where a traced branch no longer holds.
    pub fn primal(&self, x: &[f64]) -> Result<(Vec<f64>, Level<'_, N, U0>)> {
        let (y, residual) = self.staged.run(0, &[], x)?;
        Ok((
            y,
            Level {
                nested: self,
                residual,
                _level: PhantomData,
            },
        ))
    }
}

/// The state of an order-`N` bundle after `L` of its closures have been
/// called: it holds the residual the remaining closures capture.
///
/// [`Level::call`] exists only while `L < 2ᴺ − 1`.
#[derive(Debug)]
pub struct Level<'a, N, L> {
    nested: &'a Nested<N>,
    residual: Vec<f64>,
    _level: PhantomData<L>,
}

impl<'a, N, L> Level<'a, N, L>
where
    N: Unsigned,
    U1: Shl<N>,
    Shleft<U1, N>: Sub<B1>,
    Closures<N>: Unsigned,
    L: Unsigned + IsLess<Closures<N>, Output = True> + Add<B1>,
    Add1<L>: Unsigned,
{
    /// Calls closure `L + 1` with its input `d`, returning its output `r`
    /// and the next level.
    ///
    /// Shapes: `d` has the width of input block `L + 1` of the bundle
    /// program, `r` that of output block `L + 1`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] for a wrong `d` length.
    #[allow(clippy::type_complexity)]
    pub fn call(self, d: &[f64]) -> Result<(Vec<f64>, Level<'a, N, Add1<L>>)> {
        let (r, residual) = self
            .nested
            .staged
            .run(L::to_usize() + 1, &self.residual, d)?;
        Ok((
            r,
            Level {
                nested: self.nested,
                residual,
                _level: PhantomData,
            },
        ))
    }
}
