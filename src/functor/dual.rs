//! Forward mode on num-dual numbers for primitives that num-dual lacks (or
//! gets wrong at an edge) and for user rules: the derivative parts come from
//! the primitive's own rule, through ∂⃗ applied one to three times to its
//! one-instruction program.
//!
//! For `y = f(x₁, …, xₖ)` and a dual argument `x = re + δ`, the parts of
//! `y` are directional derivatives `Dʲf(re)[u₁, …, uⱼ]` along the parts of
//! `δ`, each the last output of `∂⃗ʲP` seeded with `re` and the directions
//! (Griewank & Walther, *Evaluating Derivatives*, 2nd ed., §13.1). With
//! `Dual3` parts `(v₁, v₂, v₃)`:
//!
//! * `y.v₁ = Df[v₁]`
//! * `y.v₂ = Df[v₂] + D²f[v₁, v₁]`
//! * `y.v₃ = Df[v₃] + 3 D²f[v₁, v₂] + D³f[v₁, v₁, v₁]`
//!
//! and for `HyperDual` parts `(ε₁, ε₂, ε₁ε₂)`:
//! `y.ε₁ε₂ = Df[ε₁ε₂] + D²f[ε₁, ε₂]`. A direction that is exactly zero is a
//! structural zero: its term is skipped, so an infinite derivative never
//! meets a zero direction as `∞ · 0 = NaN`.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use num_dual::{Dual2_64, Dual3_64, Dual64, HyperDual64};

use super::forward::forward;
use crate::program::{Builder, Program, Workspace, MAX_ARITY};
use crate::real::Real;
use crate::rules::private;
use crate::rules::{CustomRule, Prim};

/// `∂⃗P`, `∂⃗²P` and `∂⃗³P` of a one-instruction program `P`.
pub(crate) struct ForwardPrograms {
    arity: usize,
    programs: [Program; 3],
}

impl ForwardPrograms {
    fn build(p: Program) -> Self {
        let arity = p.n_inputs();
        let f1 = forward(&p);
        let f2 = forward(&f1);
        let f3 = forward(&f2);
        ForwardPrograms {
            arity,
            programs: [f1, f2, f3],
        }
    }

    /// `Dʲf(x)[dirs…]`, `j = dirs.len()` (1 to 3); 0 if a direction is
    /// exactly zero.
    fn directional(&self, x: &[f64], dirs: &[&[f64]]) -> f64 {
        let j = dirs.len();
        if j == 0 || j > 3 || dirs.iter().any(|d| d.iter().all(|&v| v == 0.0)) {
            return 0.0;
        }
        let n = self.arity;
        if n > MAX_ARITY || x.len() != n || dirs.iter().any(|d| d.len() != n) {
            return f64::NAN;
        }
        let p = &self.programs[j - 1];
        // Inputs [x, d₁] / [x, d₁, d₂, …] of ∂⃗ʲ: at most MAX_ARITY · 2³.
        let mut buf = [0.0; MAX_ARITY << 3];
        let inputs = &mut buf[..n << j];
        inputs[..n].copy_from_slice(x);
        for (level, d) in dirs.iter().enumerate() {
            let block = 1usize << level;
            inputs[block * n..(block + 1) * n].copy_from_slice(d);
        }
        let mut out = [0.0; 1 << 3];
        let out = &mut out[..1 << j];
        // One workspace per thread; a nested call (a user rule's value that
        // differentiates on num-dual numbers) gets a fresh one.
        let r = WORKSPACE.with(|w| match w.try_borrow_mut() {
            Ok(mut ws) => p.eval_with(&mut ws, inputs, out),
            Err(_) => p.eval_with(&mut Workspace::new(), inputs, out),
        });
        match r {
            Ok(()) => out[(1 << j) - 1],
            Err(_) => f64::NAN,
        }
    }
}

thread_local! {
    /// The evaluation buffer of [`ForwardPrograms::directional`].
    static WORKSPACE: std::cell::RefCell<Workspace<f64>> =
        std::cell::RefCell::new(Workspace::new());
}

/// The cache of forward programs of built-in primitives, by primitive and
/// parameter.
type PrimCache = Mutex<HashMap<(Prim, i32), Arc<ForwardPrograms>>>;

fn prim_cache() -> &'static PrimCache {
    static CACHE: OnceLock<PrimCache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

fn prim_programs(prim: Prim, param: i32) -> Arc<ForwardPrograms> {
    let cache = prim_cache();
    if let Some(p) = cache
        .lock()
        .ok()
        .and_then(|c| c.get(&(prim, param)).cloned())
    {
        return p;
    }
    let mut b = Builder::new();
    let x: Vec<_> = (0..prim.arity()).map(|_| b.input()).collect();
    let y = b.apply(prim, param, &x);
    let progs = Arc::new(ForwardPrograms::build(b.finish_unchecked(&[y])));
    if let Ok(mut c) = cache.lock() {
        c.insert((prim, param), Arc::clone(&progs));
    }
    progs
}

fn rule_programs(rule: &CustomRule) -> Arc<ForwardPrograms> {
    let slot = rule.derived().get_or_init(|| {
        // The cached programs hold a handle without this cache, so the
        // cache does not own itself.
        let plain = rule.detached();
        let mut b = Builder::new();
        let x: Vec<_> = (0..rule.arity()).map(|_| b.input()).collect();
        let y = b.custom(&plain, &x);
        let progs: Arc<ForwardPrograms> =
            Arc::new(ForwardPrograms::build(b.finish_unchecked(&[y])));
        Box::new(progs) as Box<dyn Any + Send + Sync>
    });
    match slot.downcast_ref::<Arc<ForwardPrograms>>() {
        Some(p) => Arc::clone(p),
        None => Arc::new(ForwardPrograms::build(Builder::new().finish_unchecked(&[]))),
    }
}

/// A num-dual number type whose parts follow from directional derivatives.
pub(crate) trait DualParts: Copy {
    /// The real part.
    fn real(&self) -> f64;
    /// `f(x)` with value `f0` and `d(dirs)` giving `Dʲf(re)[dirs…]`.
    fn chain(x: &[Self], f0: f64, d: &dyn Fn(&[&[f64]]) -> f64) -> Self;
}

/// One part of each argument (at most [`MAX_ARITY`]), stored inline so
/// that forward mode allocates nothing per call.
struct Parts {
    vals: [f64; MAX_ARITY],
    len: usize,
}

impl std::ops::Deref for Parts {
    type Target = [f64];
    fn deref(&self) -> &[f64] {
        &self.vals[..self.len]
    }
}

/// Collects one part of each argument.
fn parts<T>(x: &[T], f: impl Fn(&T) -> f64) -> Parts {
    let mut vals = [0.0; MAX_ARITY];
    let len = x.len().min(MAX_ARITY);
    for (v, xi) in vals.iter_mut().zip(x) {
        *v = f(xi);
    }
    Parts { vals, len }
}

impl DualParts for Dual64 {
    fn real(&self) -> f64 {
        self.re
    }
    fn chain(x: &[Self], f0: f64, d: &dyn Fn(&[&[f64]]) -> f64) -> Self {
        let e = parts(x, |v| v.eps);
        Dual64::new(f0, d(&[&e]))
    }
}

impl DualParts for Dual2_64 {
    fn real(&self) -> f64 {
        self.re
    }
    fn chain(x: &[Self], f0: f64, d: &dyn Fn(&[&[f64]]) -> f64) -> Self {
        let v1 = parts(x, |v| v.v1);
        let v2 = parts(x, |v| v.v2);
        Dual2_64::new(f0, d(&[&v1]), d(&[&v2]) + d(&[&v1, &v1]))
    }
}

impl DualParts for Dual3_64 {
    fn real(&self) -> f64 {
        self.re
    }
    fn chain(x: &[Self], f0: f64, d: &dyn Fn(&[&[f64]]) -> f64) -> Self {
        let v1 = parts(x, |v| v.v1);
        let v2 = parts(x, |v| v.v2);
        let v3 = parts(x, |v| v.v3);
        Dual3_64::new(
            f0,
            d(&[&v1]),
            d(&[&v2]) + d(&[&v1, &v1]),
            d(&[&v3]) + 3.0 * d(&[&v1, &v2]) + d(&[&v1, &v1, &v1]),
        )
    }
}

impl DualParts for HyperDual64 {
    fn real(&self) -> f64 {
        self.re
    }
    fn chain(x: &[Self], f0: f64, d: &dyn Fn(&[&[f64]]) -> f64) -> Self {
        let e1 = parts(x, |v| v.eps1);
        let e2 = parts(x, |v| v.eps2);
        let e12 = parts(x, |v| v.eps1eps2);
        HyperDual64::new(f0, d(&[&e1]), d(&[&e2]), d(&[&e12]) + d(&[&e1, &e2]))
    }
}

/// A built-in primitive on num-dual numbers, its derivative parts from its
/// rule.
pub(crate) fn chain_prim<D: DualParts>(prim: Prim, param: i32, x: &[D]) -> D {
    let re = parts(x, DualParts::real);
    if x.len() != prim.arity() {
        return D::chain(x, f64::NAN, &|_| f64::NAN);
    }
    let f0 = prim.value(&re, param);
    let progs = prim_programs(prim, param);
    D::chain(x, f0, &|dirs| progs.directional(&re, dirs))
}

/// A user rule on num-dual numbers, its derivative parts from its pullback
/// (so this is not an independent check of the rule).
pub(crate) fn chain_rule<D: DualParts>(rule: &CustomRule, x: &[D]) -> D {
    let re = parts(x, DualParts::real);
    if x.len() != rule.arity() {
        return D::chain(x, f64::NAN, &|_| f64::NAN);
    }
    let f0 = rule.value(&re);
    let progs = rule_programs(rule);
    D::chain(x, f0, &|dirs| progs.directional(&re, dirs))
}

/// Implements `Real` for a num-dual type: num-dual's own function where the
/// primitive names one, otherwise derivative parts from our rule.
macro_rules! impl_real_dual {
    ($($t:ty),*) => {$(
        impl private::Internal for $t {
            #[inline]
            fn primal(&self) -> f64 {
                self.re
            }
            #[inline]
            fn apply_prim(prim: Prim, param: i32, x: &[Self]) -> Self {
                match prim.dual(x, param) {
                    Some(y) => y,
                    None => chain_prim(prim, param, x),
                }
            }
            fn apply_custom(rule: &CustomRule, x: &[Self]) -> Self {
                chain_rule(rule, x)
            }
        }

        impl Real for $t {
            #[inline]
            fn cst(c: f64) -> Self {
                <$t>::from(c)
            }
        }
    )*};
}

impl_real_dual!(Dual64, Dual2_64, Dual3_64, HyperDual64);
