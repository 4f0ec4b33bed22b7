//! The building blocks of the primitives' Taylor rules: recurrences on
//! truncated power series (jets).
//!
//! A jet of degree `K` is the slice `[x₀, x₁, …, x_K]` of normalised Taylor
//! coefficients of a curve `x(t) = Σ xₖ tᵏ`, so `xₖ = x⁽ᵏ⁾(0) / k!`. Every
//! kernel here costs `O(K²)` (`exp`, `sin_cos`, `sinh_cosh`, `integrate`
//! and `mul` `O(K)` where an operand is linear, `x₀ + x₁ t`: see
//! `is_linear`) and writes `y₁ … y_K`; the caller writes
//! `y₀`, the primitive's own f64 value, so a jet's constant term is the
//! primal value bit for bit.
//!
//! The recurrences are those of Griewank & Walther, *Evaluating
//! Derivatives*, 2nd ed., §13.2 (Table 13.1 and Proposition 13.1): for
//! `y′ = g · x′`, comparing the coefficients of `tᵏ⁻¹` gives
//!
//! ```text
//! k yₖ = Σ_{j=1..k} j xⱼ g_{k−j},
//! ```
//!
//! which closes for every function whose derivative `g` is a jet already
//! known to degree `k − 1` (`eˣ`: `g = y`; `sin`: `g = cos`, …). The book's
//! chapter "Taylor mode" states each rule as math.

// The recurrences read coefficient k of several jets at once and write it
// to another: the index is the power of t, as in the formulas.
#![allow(clippy::needless_range_loop)]

/// Runs `$body` with `$n` bound to the jet length: a constant in the arms
/// for the short jets of orders 1 to 4, where the compiler then unrolls the
/// recurrences' loops and drops their bounds checks, and the run-time length
/// above. The body is written once.
macro_rules! by_width {
    ($len:expr, |$n:ident| $body:block) => {
        match $len {
            2 => {
                let $n = 2usize;
                $body
            }
            3 => {
                let $n = 3usize;
                $body
            }
            4 => {
                let $n = 4usize;
                $body
            }
            5 => {
                let $n = 5usize;
                $body
            }
            len => {
                let $n = len;
                $body
            }
        }
    };
}

/// Copies the first `dst.len()` coefficients of `src` into `dst`.
#[inline(always)]
pub(crate) fn copy(dst: &mut [f64], src: &[f64]) {
    let src = &src[..dst.len()];
    for (d, s) in dst.iter_mut().zip(src) {
        *d = *s;
    }
}

/// Buffers for the rules that need intermediate jets (the companion
/// `cos` of `sin`, the `√(1 − x²)` of `asin`, …): grown to the degree once,
/// then reused, so steady-state evaluation does not allocate.
#[derive(Debug, Default, Clone)]
pub(crate) struct Scratch {
    bufs: [Vec<f64>; 4],
}

impl Scratch {
    /// `M ≤ 4` buffers of length `len`.
    #[inline]
    pub(crate) fn take<const M: usize>(&mut self, len: usize) -> [&mut [f64]; M] {
        const { assert!(M <= 4, "four scratch buffers") };
        let mut bufs = self.bufs.iter_mut();
        std::array::from_fn(|_| match bufs.next() {
            Some(v) => {
                if v.len() < len {
                    v.resize(len, 0.0);
                }
                &mut v[..len]
            }
            // Not reached: M ≤ 4 is checked at compile time.
            None => &mut [],
        })
    }
}

/// The reciprocals `1/k` for `k = 0..=171` (`1/0 = ∞` is never read).
/// The recurrences divide by `k` once per coefficient, on their critical
/// path: a multiplication by a reciprocal read from this table takes the
/// division's latency off that path (at most one ulp of difference).
static INV: [f64; 172] = {
    let mut t = [0.0; 172];
    let mut k = 1;
    while k < 172 {
        t[k] = 1.0 / k as f64;
        k += 1;
    }
    t
};

/// `1/k` (exact to one rounding), for `k ≤ 171`; `1/k` computed above.
#[inline(always)]
pub(crate) fn inv(k: usize) -> f64 {
    match INV.get(k) {
        Some(&r) => r,
        None => 1.0 / k as f64,
    }
}

/// Sums of at least this many terms go to four accumulators.
const SPLIT: usize = 4;

/// `Σᵢ wᵢ aᵢ b_{n−1−i}` with `0 · ∞ = 0` (`wᵢ = i + 1` with `weights`,
/// else 1): a product with an exact zero factor is left out, as the term
/// it stands for is absent (the coefficient of a jet that is exactly zero,
/// such as `x₂` of `x + t`). Without this, a jet whose constant term is
/// infinite (`eˣ` at `x = 710`, `1/x` at `0`) would turn every later
/// coefficient into NaN where the limit is `±∞`. The kernels below run
/// with it only where their plain run left a NaN (`again_if_nan!`): a
/// NaN of the operands still gives NaN.
#[inline(never)]
fn dot_rev_structural(a: &[f64], b: &[f64], weights: bool) -> f64 {
    let mut s = 0.0;
    let mut w = 0.0;
    for (ai, bi) in a.iter().zip(b.iter().rev()) {
        w += 1.0;
        if *ai != 0.0 && *bi != 0.0 {
            s += if weights { w * ai * bi } else { ai * bi };
        }
    }
    s
}

/// Runs the kernel `$k` with plain sums (`$k::<false>`), and again with
/// `0 · ∞ = 0` ([`dot_rev_structural`], `$k::<true>`) where that left a
/// NaN in its result `$y`. The plain run is as it was: a `0 · ∞` needs an
/// infinite coefficient, which in a recurrence shows in the constant term
/// or, through the later sums that read it, as a NaN in the last
/// coefficient, so only those two are looked at (two comparisons per jet;
/// a full scan measured 5% on order-3 jets).
macro_rules! again_if_nan {
    ($y:expr, $k:ident($($a:expr),*)) => {{
        $k::<false>($($a),*);
        if may_hold_nan($y) {
            $k::<true>($($a),*);
        }
    }};
}

/// Whether a jet just computed may hold a NaN from `0 · ∞`: its constant
/// term is not finite or its last coefficient is NaN, and some
/// coefficient is NaN.
#[inline(always)]
fn may_hold_nan(y: &[f64]) -> bool {
    let ends = y.first().is_some_and(|v| !v.is_finite()) || y.last().is_some_and(|v| v.is_nan());
    ends && y.iter().any(|v| v.is_nan())
}

/// `Σᵢ aᵢ b_{n−1−i}` over `n = a.len() = b.len()` terms: the reversed dot
/// product every recurrence is made of. Long sums go to four independent
/// accumulators: a single running sum would make each coefficient wait
/// `n` floating-point-add latencies, and the coefficients of a jet are
/// computed one after the other. Short ones (low orders) keep one. With
/// `S`, the sum with `0 · ∞ = 0` ([`dot_rev_structural`]).
#[inline(always)]
fn dot_rev<const S: bool>(a: &[f64], b: &[f64]) -> f64 {
    if S {
        return dot_rev_structural(a, b, false);
    }
    dot_rev_plain(a, b)
}

/// [`dot_rev`] of plain sums.
#[inline(always)]
fn dot_rev_plain(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    if n < SPLIT {
        let mut s = 0.0;
        for (ai, bi) in a.iter().zip(b.iter().rev()) {
            s += ai * bi;
        }
        return s;
    }
    let mut acc = [0.0; 4];
    let mut i = 0;
    while i + 4 <= n {
        for (l, s) in acc.iter_mut().enumerate() {
            *s += a[i + l] * b[n - 1 - i - l];
        }
        i += 4;
    }
    let mut tail = 0.0;
    while i < n {
        tail += a[i] * b[n - 1 - i];
        i += 1;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// `Σⱼ (j + 1) aⱼ b_{n−1−j}` over `n` terms: [`dot_rev`] with the weights
/// of a derivative's coefficients (kept as floats, counted up).
#[inline(always)]
fn dot_rev_weighted<const S: bool>(a: &[f64], b: &[f64]) -> f64 {
    if S {
        return dot_rev_structural(a, b, true);
    }
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    if n < SPLIT {
        let mut s = 0.0;
        let mut w = 0.0;
        for (ai, bi) in a.iter().zip(b.iter().rev()) {
            w += 1.0;
            s += w * ai * bi;
        }
        return s;
    }
    let mut acc = [0.0; 4];
    let mut w = [1.0, 2.0, 3.0, 4.0];
    let mut i = 0;
    while i + 4 <= n {
        for l in 0..4 {
            acc[l] += w[l] * a[i + l] * b[n - 1 - i - l];
            w[l] += 4.0;
        }
        i += 4;
    }
    let mut tail = 0.0;
    let mut wt = w[0];
    while i < n {
        tail += wt * a[i] * b[n - 1 - i];
        wt += 1.0;
        i += 1;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// `(1/k) Σ_{j=1..k} j xⱼ g_{k−j}`: the `k`-th coefficient of `y` where
/// `y′ = g x′` (`g` read up to `k − 1`).
#[inline(always)]
fn chain_s<const S: bool>(x: &[f64], g: &[f64], k: usize) -> f64 {
    dot_rev_weighted::<S>(&x[1..=k], &g[..k]) * inv(k)
}

/// [`chain_s`] with plain sums, for the rules' own recurrences.
#[inline(always)]
pub(crate) fn chain(x: &[f64], g: &[f64], k: usize) -> f64 {
    chain_s::<false>(x, g, k)
}

/// `Σ_{i=0..k} aᵢ b_{k−i}`: the `k`-th coefficient of the product.
#[inline(always)]
fn conv_s<const S: bool>(a: &[f64], b: &[f64], k: usize) -> f64 {
    dot_rev::<S>(&a[..=k], &b[..=k])
}

/// [`conv_s`] with plain sums, for the rules' own recurrences.
#[inline(always)]
pub(crate) fn conv(a: &[f64], b: &[f64], k: usize) -> f64 {
    conv_s::<false>(a, b, k)
}

/// Whether the jet `x` is linear, `x₀ + x₁ t` (every coefficient past the
/// first exactly zero): the input of a univariate derivative, `x + t`, is.
/// A recurrence on a linear jet keeps one term of each sum (the others
/// have an exact zero factor, so they are absent, as
/// [`dot_rev_structural`] has it), which takes it from `O(K²)` to `O(K)`.
/// The sums it skips add only zeros, so the fast paths below give the
/// plain sums' bits (`+ 0.0` keeps their sign of zero) wherever those
/// hold no NaN; where an infinite coefficient makes a plain sum `0 · ∞`,
/// they give the `0 · ∞ = 0` sums' value, in every coefficient past the
/// constant term (the general kernels rerun those only where a NaN shows
/// at a jet's end). The constant term of a product is the `f64` product
/// `a₀ b₀` on every path, NaN at `0 · ∞` as the primal value is.
#[inline(always)]
fn is_linear(x: &[f64]) -> bool {
    x.get(2..).is_none_or(|t| t.iter().all(|&v| v == 0.0))
}

/// `a · b`, or 0 where a factor is an exact zero (the term is absent:
/// `0 · ∞ = 0`, as in [`dot_rev_structural`]).
#[inline(always)]
fn term(a: f64, b: f64) -> f64 {
    if a != 0.0 && b != 0.0 {
        a * b
    } else {
        0.0
    }
}

/// `y` with `y′ = g x′` for a linear `x`: `yₖ = x₁ g_{k−1} / k`.
#[inline(always)]
fn integrate_linear(x1: f64, g: &[f64], y: &mut [f64]) {
    for k in 1..y.len() {
        y[k] = (term(x1, g[k - 1]) + 0.0) * inv(k);
    }
}

/// The product `y = a · b` (all coefficients, `y₀` included: the `f64`
/// product `a₀ b₀`, sign of zero, NaN and all, as the primal value is).
pub(crate) fn mul(a: &[f64], b: &[f64], y: &mut [f64]) {
    let n = y.len();
    let linear = if n <= 2 {
        None
    } else if is_linear(&a[..n]) {
        Some((a, b))
    } else if is_linear(&b[..n]) {
        Some((b, a))
    } else {
        None
    };
    if let Some((l, g)) = linear {
        // Two terms per coefficient: aₖ b₀ + a_{k−1} b₁ or a₀ bₖ + a₁ b_{k−1}
        // (two nonzero terms sum to the same bits in either order).
        y[0] = l[0] * g[0];
        for k in 1..n {
            y[k] = (term(l[0], g[k]) + term(l[1], g[k - 1])) + 0.0;
        }
        return;
    }
    again_if_nan!(y, mul_s(a, b, y));
}

fn mul_s<const S: bool>(a: &[f64], b: &[f64], y: &mut [f64]) {
    by_width!(y.len(), |n| {
        let (a, b, y) = (&a[..n], &b[..n], &mut y[..n]);
        if n > 0 {
            y[0] = a[0] * b[0];
        }
        for k in 1..n {
            y[k] = conv_s::<S>(a, b, k);
        }
    })
}

/// The quotient `y = a / b`: `yₖ = (aₖ − Σ_{j=1..k} bⱼ y_{k−j}) / b₀`.
pub(crate) fn div(a: &[f64], b: &[f64], y: &mut [f64]) {
    again_if_nan!(y, div_s(a, b, y));
}

fn div_s<const S: bool>(a: &[f64], b: &[f64], y: &mut [f64]) {
    by_width!(y.len(), |n| {
        let (a, b, y) = (&a[..n], &b[..n], &mut y[..n]);
        let r = 1.0 / b[0];
        for k in 1..n {
            y[k] = (a[k] - dot_rev::<S>(&b[1..=k], &y[..k])) * r;
        }
    })
}

/// `y` with `y′ = g x′`, `y₀` given: `yₖ = chain(x, g, k)`, `g` read to
/// degree `K − 1`.
pub(crate) fn integrate(x: &[f64], g: &[f64], y: &mut [f64]) {
    if y.len() > 1 && is_linear(&x[..y.len()]) {
        return integrate_linear(x[1], g, y);
    }
    again_if_nan!(y, integrate_s(x, g, y));
}

fn integrate_s<const S: bool>(x: &[f64], g: &[f64], y: &mut [f64]) {
    by_width!(y.len(), |n| {
        let (x, g, y) = (&x[..n], &g[..n], &mut y[..n]);
        for k in 1..n {
            y[k] = chain_s::<S>(x, g, k);
        }
    })
}

/// `y` with `u y′ = x′`, `y₀` given, where `u₀ = u0` and `uᵢ = u[i]` for
/// `i ≥ 1` (`u[0]` is not read): from the coefficient of `tᵏ⁻¹`,
/// `yₖ = (xₖ − (1/k) Σ_{j=1..k−1} j yⱼ u_{k−j}) / u₀`. This is `ln`
/// (`u = x`) and every inverse function whose derivative is `1/u`.
pub(crate) fn integrate_over(x: &[f64], u: &[f64], u0: f64, y: &mut [f64]) {
    again_if_nan!(y, integrate_over_s(x, u, u0, y));
}

fn integrate_over_s<const S: bool>(x: &[f64], u: &[f64], u0: f64, y: &mut [f64]) {
    by_width!(y.len(), |n| {
        let (x, u, y) = (&x[..n], &u[..n], &mut y[..n]);
        let r = 1.0 / u0;
        for k in 1..n {
            // Σ_{j=1..k−1} j yⱼ u_{k−j} (u₀ is not read).
            let s = dot_rev_weighted::<S>(&y[1..k], &u[1..k]);
            y[k] = (x[k] - s * inv(k)) * r;
        }
    })
}

/// `eˣ` with `y₀` given: `y′ = y x′`.
pub(crate) fn exp(x: &[f64], y: &mut [f64]) {
    if is_linear(&x[..y.len()]) {
        for k in 1..y.len() {
            y[k] = (term(x[1], y[k - 1]) + 0.0) * inv(k);
        }
        return;
    }
    again_if_nan!(y, exp_s(x, y));
}

fn exp_s<const S: bool>(x: &[f64], y: &mut [f64]) {
    by_width!(y.len(), |n| {
        let (x, y) = (&x[..n], &mut y[..n]);
        for k in 1..n {
            y[k] = chain_s::<S>(x, y, k);
        }
    })
}

/// `sin x` and `cos x` (`sign = −1`) or `sinh x` and `cosh x`
/// (`sign = 1`) together, `s₀` and `c₀` given: `s′ = c x′`,
/// `c′ = sign · s x′`. Coefficient `k` of both reads the other to `k − 1`
/// only, so the two sums share one pass over `j xⱼ`.
#[inline(always)]
fn paired(x: &[f64], s: &mut [f64], c: &mut [f64], sign: f64) {
    if is_linear(&x[..s.len()]) {
        for k in 1..s.len() {
            let r = inv(k);
            s[k] = (0.0 + term(x[1], c[k - 1])) * r;
            c[k] = sign * (0.0 + term(x[1], s[k - 1])) * r;
        }
        return;
    }
    by_width!(s.len(), |n| { paired_n(x, s, c, sign, n) });
    if may_hold_nan(s) || may_hold_nan(c) {
        paired_structural(x, s, c, sign);
    }
}

/// [`paired`] for jets of length `n`.
#[inline(always)]
fn paired_n(x: &[f64], s: &mut [f64], c: &mut [f64], sign: f64, n: usize) {
    let (x, s, c) = (&x[..n], &mut s[..n], &mut c[..n]);
    for k in 1..n {
        let (mut ss, mut cc) = (0.0, 0.0);
        let mut w = 0.0;
        for j in 1..=k {
            w += 1.0;
            let t = w * x[j];
            ss += t * c[k - j];
            cc += t * s[k - j];
        }
        let r = inv(k);
        s[k] = ss * r;
        c[k] = sign * cc * r;
    }
}

/// [`paired`] with `0 · ∞ = 0` ([`dot_rev_structural`]), where the plain
/// run left a NaN.
#[cold]
#[inline(never)]
fn paired_structural(x: &[f64], s: &mut [f64], c: &mut [f64], sign: f64) {
    for k in 1..s.len() {
        let r = inv(k);
        s[k] = dot_rev_structural(&x[1..=k], &c[..k], true) * r;
        c[k] = sign * dot_rev_structural(&x[1..=k], &s[..k], true) * r;
    }
}

/// `sin x` and `cos x` together, `s₀` and `c₀` given: `s′ = c x′`,
/// `c′ = −s x′`.
pub(crate) fn sin_cos(x: &[f64], s: &mut [f64], c: &mut [f64]) {
    paired(x, s, c, -1.0);
}

/// `sinh x` and `cosh x` together, `s₀` and `c₀` given: `s′ = c x′`,
/// `c′ = s x′`.
pub(crate) fn sinh_cosh(x: &[f64], s: &mut [f64], c: &mut [f64]) {
    paired(x, s, c, 1.0);
}

/// `√u` with `y₀` given: `y² = u`, so
/// `yₖ = (uₖ − Σ_{j=1..k−1} yⱼ y_{k−j}) / (2y₀)`.
pub(crate) fn sqrt(u: &[f64], y: &mut [f64]) {
    again_if_nan!(y, sqrt_s(u, y));
}

fn sqrt_s<const S: bool>(u: &[f64], y: &mut [f64]) {
    by_width!(y.len(), |n| {
        let (u, y) = (&u[..n], &mut y[..n]);
        let r = 0.5 / y[0];
        for k in 1..n {
            y[k] = (u[k] - dot_rev::<S>(&y[1..k], &y[1..k])) * r;
        }
    })
}

/// `xʳ` for a real exponent `r`, `y₀` given and `x₀ ≠ 0`: `x y′ = r y x′`,
/// so `yₖ = Σ_{j=1..k} ((r + 1) j − k) xⱼ y_{k−j} / (k x₀)`.
pub(crate) fn pow_real(x: &[f64], r: f64, y: &mut [f64]) {
    again_if_nan!(y, pow_real_s(x, r, y));
}

fn pow_real_s<const S: bool>(x: &[f64], r: f64, y: &mut [f64]) {
    let rx = 1.0 / x[0];
    for k in 1..y.len() {
        let mut s = 0.0;
        let mut jf = 0.0;
        for (xj, yj) in x[1..=k].iter().zip(y[..k].iter().rev()) {
            jf += 1.0;
            // With S, 0 · ∞ = 0, as in `dot_rev_structural`.
            if !S || (*xj != 0.0 && *yj != 0.0) {
                s += ((r + 1.0) * jf - k as f64) * xj * yj;
            }
        }
        y[k] = s * inv(k) * rx;
    }
}

/// `xⁿ` for an integer `n ≥ 0` by repeated squaring of the jet (all
/// coefficients, `y₀` included): used where `x₀ = 0`, which `pow_real`
/// divides by. `O(K² log n)`; a jet with `x₀ = 0` is zero to degree `n − 1`
/// anyway.
pub(crate) fn pow_uint(x: &[f64], mut n: u64, y: &mut [f64], s: &mut Scratch) {
    let len = y.len();
    let [base, tmp] = s.take(len);
    base.copy_from_slice(&x[..len]);
    y.fill(0.0);
    y[0] = 1.0;
    while n > 0 {
        if n & 1 == 1 {
            mul(y, base, tmp);
            y.copy_from_slice(tmp);
        }
        n >>= 1;
        if n > 0 {
            mul(base, base, tmp);
            base.copy_from_slice(tmp);
        }
    }
}

/// `1 ± x²` style jets: `u₀ = u0` and `uₖ = sign · Σ_{i=0..k} xᵢ x_{k−i}`.
pub(crate) fn square_plus(x: &[f64], sign: f64, u0: f64, u: &mut [f64]) {
    u[0] = u0;
    for k in 1..u.len() {
        u[k] = sign * conv(x, x, k);
    }
}

/// A function `F` of `x` whose derivatives satisfy `F⁽ᵐ⁾′ = F⁽ᵐ⁺¹⁾` and
/// are known only as values, `d(m) = F⁽ᵐ⁾(x₀)` for `m = 0..=K` (the gamma
/// family, which satisfies no algebraic differential equation): the jet of
/// `F⁽ᵐ⁾(x(t))` to degree `K − m` follows from that of `F⁽ᵐ⁺¹⁾` to degree
/// `K − m − 1` by [`chain`], from `m = K` down to 0. `Σ (K − m)²` is
/// `O(K³)`: this is the one rule of the table above `O(K²)`.
pub(crate) fn from_derivatives(
    x: &[f64],
    y: &mut [f64],
    s: &mut Scratch,
    d: impl Fn(usize) -> f64,
) {
    let len = y.len();
    let [g, next] = s.take(len);
    // Level m = K: degree 0.
    g[0] = d(len - 1);
    for m in (0..len - 1).rev() {
        let deg = len - 1 - m;
        next[0] = d(m);
        for k in 1..=deg {
            next[k] = chain(x, g, k);
        }
        g[..=deg].copy_from_slice(&next[..=deg]);
    }
    y.copy_from_slice(&g[..len]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A coefficient: ordinary values, signed zeros, values whose
    /// products underflow to a signed zero and, rarely, ±∞.
    fn coef() -> impl Strategy<Value = f64> {
        prop_oneof![
            8 => -3.0f64..3.0,
            1 => prop_oneof![Just(1e-200), Just(-1e-200)],
            1 => Just(0.0),
            1 => Just(-0.0),
            1 => Just(f64::INFINITY),
            1 => Just(f64::NEG_INFINITY),
        ]
    }

    /// The documented semantics: the plain sums, or the sums with
    /// `0 · ∞ = 0` where the plain ones leave a NaN anywhere. The general
    /// kernels look only at a jet's ends (`may_hold_nan`), so for `mul`
    /// they keep a NaN that arises inside and does not reach the last
    /// coefficient (`[0, 1, 0] · [1, ∞, 2]` is `[0, NaN, ∞]` there); the
    /// fast paths give `[0, 1, ∞]`. Everywhere else the two agree, and
    /// the test compares with this reference.
    macro_rules! reference {
        ($y:expr, $k:ident($($a:expr),*)) => {{
            $k::<false>($($a),*);
            if $y.iter().any(|v: &f64| v.is_nan()) {
                $k::<true>($($a),*);
            }
        }};
    }

    fn same(a: &[f64], b: &[f64]) -> bool {
        a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
    }

    proptest! {
        /// The linear fast paths give the plain recurrences' bits (the
        /// structural ones where the plain leave a NaN) on every jet
        /// length, for finite and infinite coefficients of the other jet.
        #[test]
        fn linear_jets_take_the_short_recurrences(
            len in 2usize..24,
            x0 in coef(),
            x1 in coef(),
            g in prop::collection::vec(coef(), 24),
            y0 in coef(),
        ) {
            let mut x = vec![0.0; len];
            x[0] = x0;
            x[1] = x1;
            let g = &g[..len];
            // exp: y₀ given.
            let (mut fast, mut slow) = (vec![0.0; len], vec![0.0; len]);
            fast[0] = y0;
            slow[0] = y0;
            exp(&x, &mut fast);
            reference!(slow, exp_s(&x, &mut slow));
            prop_assert!(same(&fast, &slow), "exp {fast:?} vs {slow:?}");
            // integrate.
            fast[1..].fill(0.0);
            slow[1..].fill(0.0);
            integrate(&x, g, &mut fast);
            reference!(slow, integrate_s(&x, g, &mut slow));
            prop_assert!(same(&fast, &slow), "integrate {fast:?} vs {slow:?}");
            // mul, with the linear jet on either side.
            for (a, b) in [(&x[..], g), (g, &x[..])] {
                mul(a, b, &mut fast);
                reference!(slow, mul_s(a, b, &mut slow));
                prop_assert!(same(&fast, &slow), "mul {fast:?} vs {slow:?}");
                // The constant term is the f64 product, sign of zero and all.
                prop_assert!(same(&fast[..1], &[a[0] * b[0]]), "mul {fast:?}: a₀ b₀");
            }
            // sin/cos and sinh/cosh: s₀, c₀ given.
            for sign in [-1.0, 1.0] {
                let (mut s1, mut c1) = (vec![0.0; len], vec![0.0; len]);
                s1[0] = y0;
                c1[0] = g[0];
                let (mut s2, mut c2) = (s1.clone(), c1.clone());
                paired(&x, &mut s1, &mut c1, sign);
                paired_n(&x, &mut s2, &mut c2, sign, len);
                if s2.iter().chain(&c2).any(|v| v.is_nan()) {
                    paired_structural(&x, &mut s2, &mut c2, sign);
                }
                prop_assert!(same(&s1, &s2) && same(&c1, &c2), "paired {sign}");
            }
        }
    }
}
