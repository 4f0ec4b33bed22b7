#!/usr/bin/env python3
"""Closed-form Taylor coefficients for tests/taylor_closed_forms.rs.

Run from the repository root:

    python3 tests/data/taylor_closed_forms.py

It rewrites tests/data/taylor_closed_forms.txt, deterministically (same
sympy/mpmath versions, same bytes). Requires sympy (tested with 1.14) and
mpmath.

What is computed
----------------
For every test function f and each of its points x0 (exact dyadic
rationals, so that x0 and every constant of f are exact in f64), the
normalised Taylor coefficients c_k = f^(k)(x0) / k!, k = 0..30, of
t -> f(x0 + t).

Every test function is a primitive applied to inner functions of x that
have Taylor coefficients of every order: an affine image lo + (hi - lo) b(x)
of a base b, where b is a quadratic (variant "q") or a quotient of two
quadratics (variant "r"); see BASES. With a rational inner, every
coefficient of the operand's jet is non-zero, so every term of a Taylor
recurrence is exercised, not only those of x0 + t.

How (independently of any Taylor recurrence)
-------------------------------------------
* The inner functions' series are exact rational power series: a quadratic
  re-expanded at x0, and a quotient N/D = N * sum_j (-1)^j (D - D0)^j / D0^(j+1).
* A unary primitive g applied to an inner v(t) = v0 + u(t) is the
  composition  f(t) = sum_{j=0..30} g_j u(t)^j, truncated at t^30, where
  g_j = g^(j)(v0)/j! are g's own Taylor coefficients at v0, obtained from
  closed-form derivatives computed by sympy:
    - sympy differentiation (expanded at each step) for exp, exp2, exp_m1,
      sin, cos, tan, sinh, cosh, tanh, sech2, erf, erfc;
    - the quotient rule on g' = P(y) B(y)^e (P, B polynomials, e rational),
      i.e. g^(k+1) = P_k B^(e-k) with P_{k+1} = P_k' B + (e - k) P_k B',
      in sympy polynomials, for ln, log2, log10, ln_1p, sqrt, cbrt, powi,
      asin, acos, atan, asinh, acosh, atanh;
    - (ln Gamma)^(k) = psi^(k-1), psi^(k) = polygamma(k, .) (sympy's
      derivative), for ln_gamma, digamma and polygamma;
    - softplus' = s, s' = s (1 - s) with s the logistic function:
      softplus^(k) = P_k(s) with P_1 = s, P_{k+1} = P_k'(s) s (1 - s).
* Binary primitives by exact identities of analytic functions near x0:
  add, sub, mul, div, mul_add by exact rational series arithmetic;
  hypot(x, y) = sqrt(x^2 + y^2); powf(x, y) = exp(y ln x);
  atan2(y, x) = atan(y/x) + (atan2(y0, x0) - atan(y0/x0)) (the added
  constant is a multiple of pi: the same branch in a neighbourhood of x0).
* Non-smooth primitives (select, abs, signum, max, min, clamp, floor,
  ceil, rem): the points are chosen away from every kink (at least 1/10 in the
  operands' values), and the closed form is the series of the branch taken
  at x0: the selected operand, +-x, the constant +-1, the chosen operand
  of max/min, x or the bound of clamp, the constant floor/ceil value,
  x - q y for rem (q the quotient x0/y0 rounded toward zero).

Self-checks (the script stops if one fails):
* g_0..g_8 of every outer function at every point against mpmath.taylor
  (numerical differentiation in high precision);
* all 31 coefficients of every smooth row against the Cauchy integral
  c_k = (1 / 2 pi i) \\oint f(x0 + t) t^(-k-1) dt on a circle of radius
  r < R/3, by the trapezoidal rule with 128 nodes in complex mpmath
  arithmetic (a second, independent way to get the same numbers);
* the points are chosen (by a fixed-state pseudo-random generator over
  m/256, |m| <= 224) so that each operand lies in the interval its
  function declares, away from kinks, and the estimated radius of
  convergence (R = 1/rho, rho from the growth of |c_k|, k = 16..30)
  is at least 0.3.
"""

import os
import random
import sys
import time
from fractions import Fraction as Q

import mpmath as mp
import sympy as sp

K = 30  # highest order
DPS = 100  # working precision (decimal digits) of the closed forms
OUT_DIGITS = 32  # significant digits written per coefficient
MIN_RADIUS = 0.3  # required radius of convergence (in t)
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "taylor_closed_forms.txt")

mp.mp.dps = DPS

# ---------------------------------------------------------------------------
# Truncated power series (lists of K + 1 numbers: Fractions or mpf/mpc)


def s_const(c, zero=Q(0)):
    return [c] + [zero] * K


def s_add(a, b):
    return [x + y for x, y in zip(a, b)]


def s_sub(a, b):
    return [x - y for x, y in zip(a, b)]


def s_scale(a, c):
    return [c * x for x in a]


def s_mul(a, b):
    out = []
    for k in range(K + 1):
        acc = a[0] * b[k]
        for i in range(1, k + 1):
            acc += a[i] * b[k - i]
        out.append(acc)
    return out


def s_compose(g, u):
    """sum_j g[j] u^j, truncated; u[0] must be 0."""
    assert u[0] == 0
    r = s_const(g[K], 0 * g[K])
    for j in range(K - 1, -1, -1):
        r = s_mul(r, u)
        r[0] = r[0] + g[j]
    return r


def s_recip_exact(d):
    """1/d for an exact rational series (d[0] != 0)."""
    d0 = d[0]
    g = [Q((-1) ** j) / d0 ** (j + 1) for j in range(K + 1)]
    u = [Q(0)] + d[1:]
    return s_compose(g, u)


def to_mp(a):
    return [mp.mpf(x.numerator) / x.denominator if isinstance(x, Q) else x for x in a]


def q2mp(x):
    return mp.mpf(x.numerator) / x.denominator


# ---------------------------------------------------------------------------
# Inner functions: lo + (hi - lo) * b(x), b a base (same in the Rust test)

F = Q
# name -> (numerator (c0, c1, c2), denominator (c0, c1, c2) or None)
BASES = {
    "QA": ((F(5, 16), F(1, 2), F(3, 16)), None),
    "QB": ((F(5, 8), F(-1, 2), F(-1, 8)), None),
    "QC": ((F(1, 8), F(-1, 4), F(3, 4)), None),
    "RA": ((F(5, 8), F(7, 8), F(1, 4)), (F(1), F(1, 4), F(1, 2))),
    "RB": ((F(3, 4), F(-1), F(1, 4)), (F(1), F(-1, 2), F(1, 2))),
    "RC": ((F(1, 2), F(-1, 4), F(1, 2)), (F(1), F(1, 8), F(1, 4))),
}


def quad_at(c, x0):
    """Coefficients in t of c0 + c1 (x0 + t) + c2 (x0 + t)^2."""
    return [c[0] + c[1] * x0 + c[2] * x0 * x0, c[1] + 2 * c[2] * x0, c[2]] + [Q(0)] * (K - 2)


def base_series(name, x0):
    n, d = BASES[name]
    s = quad_at(n, x0)
    if d is not None:
        s = s_mul(s, s_recip_exact(quad_at(d, x0)))
    return s


def base_value(name, x):
    """The base at a (complex) mpmath point, for the Cauchy-integral check."""
    n, d = BASES[name]
    v = q2mp(n[0]) + q2mp(n[1]) * x + q2mp(n[2]) * x * x
    if d is not None:
        v = v / (q2mp(d[0]) + q2mp(d[1]) * x + q2mp(d[2]) * x * x)
    return v


def inner_series(base, lohi, x0):
    lo, hi = lohi
    return s_add(s_const(Q(lo)), s_scale(base_series(base, x0), Q(hi) - Q(lo)))


def inner_value(base, lohi, x):
    lo, hi = lohi
    return q2mp(Q(lo)) + q2mp(Q(hi) - Q(lo)) * base_value(base, x)


# ---------------------------------------------------------------------------
# Outer functions: their Taylor coefficients g_0..g_K at an exact point a

y = sp.Symbol("y", real=True)
_cache = {}


def _by_differentiation(key, expr):
    """g^(k), k = 0..K, by sympy differentiation, as mpmath functions."""
    if key not in _cache:
        ds = [expr]
        for _ in range(K):
            ds.append(sp.expand(sp.diff(ds[-1], y)))
        _cache[key] = [sp.lambdify(y, e, modules="mpmath") for e in ds]
    return _cache[key]


def _by_quotient_rule(key, p, b, e):
    """g^(k+1) = P_k(y) B(y)^(e - k) for g' = p B^e; returns [(P_k, e_k)]."""
    if key not in _cache:
        P = sp.Poly(p, y, domain="QQ")
        B = sp.Poly(b, y, domain="QQ")
        dB = B.diff(y)
        out = []
        ek = sp.Rational(e)
        for _ in range(K):
            out.append((P, ek))
            P = P.diff(y) * B + P * dB * ek
            ek = ek - 1
        _cache[key] = (out, B)
    return _cache[key]


def _pow(base, e):
    if e.q == 1:
        return base ** int(e.p)
    assert base > 0
    return mp.power(base, mp.mpf(e.p) / e.q)


def _fact(k):
    return mp.factorial(k)


def outer_coeffs(outer, a):
    """[g^(k)(a)/k! for k in 0..K] of the outer function `outer`."""
    am = q2mp(a)
    kind = outer[0]
    if kind == "diff":
        _, key, expr = outer
        fs = _by_differentiation(key, expr)
        return [fs[k](am) / _fact(k) for k in range(K + 1)]
    if kind == "alg":
        _, key, value, p, b, e, scale = outer
        ders, B = _by_quotient_rule(key, p, b, e)
        Ba = q2mp(Q(str(B.eval(sp.Rational(a.numerator, a.denominator)))))
        g = [value(am)]
        for k, (P, ek) in enumerate(ders):
            Pa = P.eval(sp.Rational(a.numerator, a.denominator))
            g.append(scale * q2mp(Q(str(Pa))) * _pow(Ba, ek) / _fact(k + 1))
        return g
    if kind == "gamma":
        # ln_gamma (n = -1), digamma (n = 0), polygamma(n): the k-th
        # derivative is polygamma(n + k, .) for n + k >= 0 (sympy).
        _, n = outer
        expr = sp.loggamma(y) if n < 0 else sp.polygamma(n, y)
        key = ("gamma", n)
        if key not in _cache:
            ds = [expr]
            for _ in range(K):
                ds.append(sp.diff(ds[-1], y))
            _cache[key] = ds
        ds = _cache[key]
        g = []
        for k, d in enumerate(ds):
            if k == 0 and n < 0:
                v = mp.log(abs(mp.gamma(am)))  # ln |Gamma(a)|
            else:
                assert d.func == sp.polygamma, d
                v = mp.polygamma(int(d.args[0]), am)
            g.append(v / _fact(k))
        return g
    if kind == "softplus":
        key = "softplus"
        if key not in _cache:
            s = sp.Symbol("s")
            Ps = [None, sp.Poly(s, s)]
            for _ in range(K - 1):
                Ps.append(Ps[-1].diff(s) * sp.Poly(s * (1 - s), s))
            _cache[key] = Ps
        Ps = _cache[key]
        sig = 1 / (1 + mp.exp(-am))
        g = [mp.log(1 + mp.exp(am))]
        for k in range(1, K + 1):
            g.append(Ps[k].eval(sig) / _fact(k))
        return g
    raise ValueError(kind)


# The outer functions: sympy closed form / derivative data, and an mpmath
# function (complex argument) for the Cauchy-integral check.
LN2, LN10 = mp.log(2), mp.log(10)
ONE = sp.Integer(1)
OUTER = {
    "exp": (("diff", "exp", sp.exp(y)), mp.exp),
    "exp2": (("diff", "exp2", 2**y), lambda z: mp.power(2, z)),
    "exp_m1": (("diff", "exp_m1", sp.exp(y) - 1), mp.expm1),
    "sin": (("diff", "sin", sp.sin(y)), mp.sin),
    "cos": (("diff", "cos", sp.cos(y)), mp.cos),
    "tan": (("diff", "tan", sp.tan(y)), mp.tan),
    "sinh": (("diff", "sinh", sp.sinh(y)), mp.sinh),
    "cosh": (("diff", "cosh", sp.cosh(y)), mp.cosh),
    "tanh": (("diff", "tanh", sp.tanh(y)), mp.tanh),
    "sech2": (("diff", "sech2", sp.sech(y) ** 2), lambda z: mp.sech(z) ** 2),
    "erf": (("diff", "erf", sp.erf(y)), mp.erf),
    "erfc": (("diff", "erfc", sp.erfc(y)), mp.erfc),
    "ln": (("alg", "ln", mp.log, ONE, y, -1, 1), mp.log),
    "log2": (("alg", "ln", lambda v: mp.log(v) / LN2, ONE, y, -1, 1 / LN2), lambda z: mp.log(z) / LN2),
    "log10": (("alg", "ln", lambda v: mp.log(v) / LN10, ONE, y, -1, 1 / LN10), lambda z: mp.log(z) / LN10),
    "ln_1p": (("alg", "ln_1p", mp.log1p, ONE, 1 + y, -1, 1), mp.log1p),
    "sqrt": (("alg", "sqrt", mp.sqrt, sp.Rational(1, 2), y, sp.Rational(-1, 2), 1), mp.sqrt),
    "asin": (("alg", "asin", mp.asin, ONE, 1 - y**2, sp.Rational(-1, 2), 1), mp.asin),
    "acos": (("alg", "acos", mp.acos, -ONE, 1 - y**2, sp.Rational(-1, 2), 1), mp.acos),
    "atan": (("alg", "atan", mp.atan, ONE, 1 + y**2, -1, 1), mp.atan),
    "asinh": (("alg", "asinh", mp.asinh, ONE, 1 + y**2, sp.Rational(-1, 2), 1), mp.asinh),
    "acosh": (("alg", "acosh", mp.acosh, ONE, y**2 - 1, sp.Rational(-1, 2), 1), mp.acosh),
    "atanh": (("alg", "atanh", mp.atanh, ONE, 1 - y**2, -1, 1), mp.atanh),
    "ln_gamma": (("gamma", -1), mp.loggamma),
    "digamma": (("gamma", 0), mp.digamma),
    "polygamma_0": (("gamma", 0), lambda z: mp.polygamma(0, z)),
    "polygamma_1": (("gamma", 1), lambda z: mp.polygamma(1, z)),
    "polygamma_2": (("gamma", 2), lambda z: mp.polygamma(2, z)),
    "softplus": (("softplus",), lambda z: mp.log(1 + mp.exp(z))),
}
for n in (3, -2, 7):
    tag = f"powi_{n}" if n >= 0 else f"powi_m{-n}"
    OUTER[tag] = (
        ("alg", tag, (lambda n: lambda v: v**n)(n), sp.Integer(n), y, n - 1, 1),
        (lambda n: lambda z: z**n)(n),
    )


def outer_for(name, a):
    """(closed-form data, complex mpmath function) of `name` at the point a
    (the branch of cbrt depends on the sign of a)."""
    if name == "cbrt":
        if a > 0:
            return ("alg", "cbrt+", mp.cbrt, sp.Rational(1, 3), y, sp.Rational(-2, 3), 1), mp.cbrt
        return (
            ("alg", "cbrt-", lambda v: -mp.cbrt(-v), sp.Rational(1, 3), -y, sp.Rational(-2, 3), 1),
            lambda z: -mp.cbrt(-z),
        )
    if name == "ln_gamma":
        # ln |Gamma| = log(sign * Gamma) near a, with sign = sign Gamma(a):
        # analytic near a (mpmath's complex loggamma has a cut on the
        # negative axis).
        sign = 1 if mp.gamma(q2mp(a)) > 0 else -1
        return OUTER[name][0], lambda z: mp.log(sign * mp.gamma(z))
    return OUTER[name]


# ---------------------------------------------------------------------------
# The test functions


def frac_dist(v):
    """Distance of v to the nearest integer."""
    return abs(v - round(v))


M = Q(1, 10)  # minimum distance to a kink, in the operands' values


class Case:
    """A test function.

    id: "<fun>.<variant>" (variant q: quadratic bases, r: rational bases);
    prim: the primitive's name (`Prim::name`) it is there to check;
    operands: [(base, (lo, hi))], operand i is lo + (hi - lo) * base(x);
    combine: how the series of f follows from the operands' series;
    preds: one predicate per point, on the operands' values at x0.
    """

    def __init__(self, id_, prim, operands, combine, preds, smooth=True, mpf=None):
        self.id = id_
        self.prim = prim
        self.operands = operands
        self.combine = combine
        self.preds = preds
        self.smooth = smooth
        self.mpf = mpf  # complex mpmath function of the operands' values
        self.outer = None  # the outer function's name, for unary cases


def in_range(vals, ops):
    return all(Q(lo) <= v <= Q(hi) for v, (_, (lo, hi)) in zip(vals, ops))


def unary(fun, prim, variant, lohi, preds=None, smooth=True):
    base = "QA" if variant == "q" else "RA"

    def combine(ser, x0):
        (s,) = ser
        v0 = s[0]
        data, _ = outer_for(fun, v0)
        g = outer_coeffs(data, v0)
        return s_compose(g, to_mp([Q(0)] + s[1:]))

    def mpfun(vals, v0s):
        _, f = outer_for(fun, v0s[0])
        return f(vals[0])

    preds = preds or [lambda v: True, lambda v: True]
    c = Case(f"{fun}.{variant}", prim, [(base, lohi)], combine, preds, smooth, mpfun)
    c.outer = fun
    return c


def branch(fun, prim, variant, operands, pick, preds):
    """A non-smooth primitive: the series of the branch `pick` chooses
    from the operands' values (an exact rational series)."""
    bases = (["QA", "QB", "QC"] if variant == "q" else ["RA", "RB", "RC"])
    ops = [(bases[i], lohi) for i, lohi in enumerate(operands)]

    def combine(ser, x0):
        vals = [s[0] for s in ser]
        return pick(vals, ser)

    return Case(f"{fun}.{variant}", prim, ops, combine, preds, smooth=False)


def nary(fun, prim, variant, operands, combine, mpfun, preds=None):
    bases = (["QA", "QB", "QC"] if variant == "q" else ["RA", "RB", "RC"])
    ops = [(bases[i], lohi) for i, lohi in enumerate(operands)]
    preds = preds or [lambda v: True, lambda v: True]
    return Case(f"{fun}.{variant}", prim, ops, combine, preds, True, mpfun)


def c_atan2(ser, x0):
    ys, xs = ser  # atan2(y, x)
    y0, x0v = ys[0], xs[0]
    ratio = s_mul(ys, s_recip_exact(xs))  # exact
    a = ratio[0]
    data, _ = OUTER["atan"]
    g = outer_coeffs(data, a)
    r = s_compose(g, to_mp([Q(0)] + ratio[1:]))
    r[0] = mp.atan2(q2mp(y0), q2mp(x0v))
    return r


def m_atan2(vals, v0s):
    yv, xv = vals
    y0, x0v = (q2mp(v) for v in v0s)
    # atan2(y, x) - atan2(y0, x0) = atan((y x0 - x y0) / (x x0 + y y0)),
    # analytic near x0 (the denominator is near x0^2 + y0^2 > 0).
    return mp.atan2(y0, x0v) + mp.atan((yv * x0v - xv * y0) / (xv * x0v + yv * y0))


def c_hypot(ser, x0):
    xs, ys = ser
    ssq = s_add(s_mul(xs, xs), s_mul(ys, ys))
    data, _ = OUTER["sqrt"]
    g = outer_coeffs(data, ssq[0])
    return s_compose(g, to_mp([Q(0)] + ssq[1:]))


def c_powf(ser, x0):
    xs, ys = ser
    data, _ = OUTER["ln"]
    lx = s_compose(outer_coeffs(data, xs[0]), to_mp([Q(0)] + xs[1:]))
    z = s_mul(to_mp(ys), lx)
    e0 = z[0]
    g = [mp.exp(e0) / _fact(j) for j in range(K + 1)]  # exp at e0
    return s_compose(g, [mp.mpf(0)] + z[1:])


def exact(f):
    def combine(ser, x0):
        return to_mp(f(*ser))

    return combine


def positive(i, m=M):
    return lambda v: v[i] > m


def negative(i, m=M):
    return lambda v: v[i] < -m


def cases():
    out = []
    U = []  # (fun, prim, (lo, hi), per-point predicates or None)
    for name, lohi in [
        ("exp", (-2, 2)),
        ("exp2", (-2, 2)),
        ("exp_m1", (-2, 2)),
        ("ln", (F(1, 4), 3)),
        ("log2", (F(1, 4), 3)),
        ("log10", (F(1, 4), 3)),
        ("ln_1p", (F(-5, 8), 2)),
        ("sin", (-2, 2)),
        ("cos", (-2, 2)),
        ("tan", (F(-9, 8), F(9, 8))),
        ("asin", (F(-3, 4), F(3, 4))),
        ("acos", (F(-3, 4), F(3, 4))),
        ("atan", (-2, 2)),
        ("sinh", (-2, 2)),
        ("cosh", (-2, 2)),
        ("tanh", (-2, 2)),
        ("asinh", (-2, 2)),
        ("acosh", (F(5, 4), 3)),
        ("atanh", (F(-3, 4), F(3, 4))),
        ("sech2", (-2, 2)),
        ("powi_3", (-2, 2)),
        ("powi_7", (F(-3, 2), F(3, 2))),
        ("sqrt", (F(1, 4), 3)),
        ("erf", (-2, 2)),
        ("erfc", (-1, 3)),
        ("ln_gamma", (F(1, 4), 4)),
        ("digamma", (F(1, 4), 4)),
        ("polygamma_0", (F(1, 4), 4)),
        ("polygamma_1", (F(1, 4), 4)),
        ("polygamma_2", (F(1, 4), 4)),
        ("softplus", (-3, 3)),
    ]:
        prim = name.split("_")[0] if name.startswith(("powi", "polygamma")) else name
        if name == "polygamma_0":
            prim = "digamma"  # the builder rewrites polygamma(0, .) as digamma
        U.append((name, prim, lohi, None))
    # Both signs of the operand.
    both = [positive(0, F(1, 4)), negative(0, F(1, 4))]
    U.append(("powi_m2", "powi", (-2, 2), both))
    U.append(("cbrt", "cbrt", (-3, 3), both))
    # ln |Gamma|, psi, psi' between the poles 0 and -1 (1/4 away from each).
    neg = [lambda v: Q(-3, 4) <= v[0] <= Q(-1, 4)] * 2
    for name in ("ln_gamma", "digamma", "polygamma_1"):
        U.append((name + "_neg", name.split("_")[0] if name != "ln_gamma" else name, (F(-15, 16), F(-1, 16)), neg))
    for fun, prim, lohi, preds in U:
        outer = fun[: -len("_neg")] if fun.endswith("_neg") else fun
        for variant in "qr":
            c = unary(outer, prim, variant, lohi, preds)
            c.id = f"{fun}.{variant}"
            out.append(c)

    sgn = [positive(0), negative(0)]
    for variant in "qr":
        out += [
            nary("neg", "neg", variant, [(-1, 1)], exact(lambda a: s_scale(a, Q(-1))), lambda v, _: -v[0]),
            nary("add", "add", variant, [(-1, 1), (-1, 2)], exact(s_add), lambda v, _: v[0] + v[1]),
            nary("sub", "sub", variant, [(-1, 1), (-1, 2)], exact(s_sub), lambda v, _: v[0] - v[1]),
            nary("mul", "mul", variant, [(-1, 1), (-1, 2)], exact(s_mul), lambda v, _: v[0] * v[1]),
            nary(
                "div",
                "div",
                variant,
                [(-1, 1), (F(1, 2), 2)],
                exact(lambda a, b: s_mul(a, s_recip_exact(b))),
                lambda v, _: v[0] / v[1],
            ),
            nary(
                "mul_add",
                "mul_add",
                variant,
                [(-1, 1), (-1, 2), (-2, 1)],
                exact(lambda a, b, c: s_add(s_mul(a, b), c)),
                lambda v, _: v[0] * v[1] + v[2],
            ),
            # atan2(y, x): one point with x0 > 0, one with x0 < 0 (other
            # branch of the constant), |y0| and x0^2 + y0^2 bounded away
            # from 0.
            nary(
                "atan2",
                "atan2",
                variant,
                [(-1, 1), (-1, 1)],
                c_atan2,
                m_atan2,
                [
                    lambda v: v[1] > Q(1, 4) and abs(v[0]) > Q(1, 8),
                    lambda v: v[1] < -Q(1, 4) and abs(v[0]) > Q(1, 4),
                ],
            ),
            nary(
                "powf",
                "powf",
                variant,
                [(F(1, 4), 2), (-2, 2)],
                c_powf,
                lambda v, _: mp.exp(v[1] * mp.log(v[0])),
                [lambda v: v[0] > Q(3, 8)] * 2,
            ),
            nary(
                "hypot",
                "hypot",
                variant,
                [(-1, 1), (-1, 1)],
                c_hypot,
                lambda v, _: mp.sqrt(v[0] ** 2 + v[1] ** 2),
                [lambda v: v[0] ** 2 + v[1] ** 2 > Q(1, 4)] * 2,
            ),
            # Non-smooth: the series of the branch taken at x0.
            branch("abs", "abs", variant, [(-1, 1)], lambda v, s: s[0] if v[0] > 0 else s_scale(s[0], Q(-1)), sgn),
            branch(
                "signum",
                "signum",
                variant,
                [(-1, 1)],
                lambda v, s: s_const(Q(1) if v[0] > 0 else Q(-1)),
                sgn,
            ),
            branch(
                "floor",
                "floor",
                variant,
                [(F(-5, 2), F(7, 2))],
                lambda v, s: s_const(Q(int(mp.floor(q2mp(v[0]))))),
                [lambda v: frac_dist(v[0]) > M] * 2,
            ),
            branch(
                "ceil",
                "ceil",
                variant,
                [(F(-5, 2), F(7, 2))],
                lambda v, s: s_const(Q(int(mp.ceil(q2mp(v[0]))))),
                [lambda v: frac_dist(v[0]) > M] * 2,
            ),
            branch(
                "max",
                "max",
                variant,
                [(-1, 1), (-1, 1)],
                lambda v, s: s[0] if v[0] > v[1] else s[1],
                [lambda v: v[0] > v[1] + M, lambda v: v[1] > v[0] + M],
            ),
            branch(
                "min",
                "min",
                variant,
                [(-1, 1), (-1, 1)],
                lambda v, s: s[0] if v[0] < v[1] else s[1],
                [lambda v: v[0] < v[1] - M, lambda v: v[1] < v[0] - M],
            ),
            # select(c, a, b) = a where c > 0, else b.
            branch(
                "select",
                "select",
                variant,
                [(-1, 1), (-1, 2), (-2, 1)],
                lambda v, s: s[1] if v[0] > 0 else s[2],
                [positive(0), negative(0)],
            ),
            # clamp(x, lo, hi), three points: inside, below, above.
            branch(
                "clamp",
                "clamp",
                variant,
                [(-1, 1), (-1, 0), (0, 1)],
                lambda v, s: s[1] if v[0] < v[1] else (s[2] if v[0] > v[2] else s[0]),
                [
                    lambda v: v[1] + M < v[0] < v[2] - M,
                    lambda v: v[0] < v[1] - M,
                    lambda v: v[0] > v[2] + M,
                ],
            ),
        ]
    # Cases added later come last, so that the points drawn for the ones
    # above (one random sequence for all) stay those already committed.
    for variant in "qr":
        out += [
            # x % y = x - q y with q = trunc(x0 / y0), the quotient rounded
            # toward zero, away from its jumps (x/y at least 1/10 from an
            # integer): one point with a positive quotient, one negative.
            branch(
                "rem",
                "rem",
                variant,
                [(F(-7, 2), F(7, 2)), (F(1, 2), F(3, 2))],
                lambda v, s: s_sub(s[0], s_scale(s[1], Q(int(v[0] / v[1])))),
                [
                    lambda v: v[0] / v[1] > 1 and frac_dist(v[0] / v[1]) > M,
                    lambda v: v[0] / v[1] < -1 and frac_dist(v[0] / v[1]) > M,
                ],
            ),
        ]
    return out


# ---------------------------------------------------------------------------
# Points, radius estimate, self-checks


def radius_estimate(c):
    """1/rho with rho = (max_{26..30} |c_k| / max_{16..20} |c_k|)^(1/10)."""
    hi = max(abs(x) for x in c[26:31])
    lo = max(abs(x) for x in c[16:21])
    if hi == 0:
        return mp.inf
    if lo == 0:
        return mp.mpf(0)
    return 1 / (hi / lo) ** (mp.mpf(1) / 10)


def operand_series(case, x0):
    return [inner_series(base, lohi, x0) for base, lohi in case.operands]


def series_of(case, x0):
    ser = operand_series(case, x0)
    return [mp.mpf(x) if not isinstance(x, mp.mpf) else x for x in to_mp(case.combine(ser, x0))]


def check_outer_low_order(case, x0):
    """g_0..g_8 of a unary outer function against mpmath.taylor."""
    fun = case.outer
    if fun is None:
        return
    v0 = operand_series(case, x0)[0][0]
    data, f = outer_for(fun, v0)
    g = outer_coeffs(data, v0)
    with mp.workdps(60):
        want = mp.taylor(lambda z: mp.re(f(z)), q2mp(v0), 8)
    for k in range(9):
        err = abs(g[k] - want[k])
        scale = max(abs(w) for w in want)
        assert err <= mp.mpf(10) ** -40 * scale, (case.id, k, g[k], want[k])


def cauchy_check(case, x0, c):
    """All coefficients against the Cauchy integral on |t| = r."""
    R = radius_estimate(c)
    r = min(mp.mpf(1), R / 3)
    n = 128
    ops = case.operands
    v0s = [inner_series(b, lohi, x0)[0] for b, lohi in ops]
    acc = [mp.mpc(0)] * (K + 1)
    with mp.workdps(DPS):
        for j in range(n):
            w = mp.expjpi(mp.mpf(2 * j) / n)  # e^(2 pi i j / n)
            x = q2mp(x0) + r * w
            vals = [inner_value(b, lohi, x) for b, lohi in ops]
            fx = case.mpf(vals, v0s)
            wk = mp.mpc(1)
            for k in range(K + 1):
                acc[k] += fx * wk
                wk /= w
        got = [mp.re(a) / n / r**k for k, a in enumerate(acc)]
    # The trapezoidal rule's error: aliasing ~ (r/R)^n and rounding
    # ~ 10^-DPS max|f| / r^k; compare on the scale max|f| / r^k.
    mag = sum(abs(ck) * r**k for k, ck in enumerate(c))
    for k in range(K + 1):
        if case.prim == "ln_gamma" and k == 0:
            continue  # mpmath's complex loggamma differs by i pi m only
        err = abs(got[k] - c[k])
        assert err <= mp.mpf(10) ** -45 * mag / r**k, (case.id, mp.nstr(x0, 10), k, c[k], got[k])


def choose_points(case, rng):
    pts = []
    for pred in case.preds:
        for _ in range(20000):
            x0 = Q(rng.randint(-224, 224), 256)
            if x0 in pts:
                continue
            vals = [inner_series(b, lohi, x0)[0] for b, lohi in case.operands]
            if not in_range(vals, case.operands) or not pred(vals):
                continue
            if case.smooth and radius_estimate(series_of(case, x0)) < MIN_RADIUS:
                continue
            pts.append(x0)
            break
        else:
            raise RuntimeError(f"no point for {case.id}")
    return pts


def fmt(v):
    if v == 0:
        return "0"
    return mp.nstr(v, OUT_DIGITS, min_fixed=1, max_fixed=0, strip_zeros=False)


def main():
    t_start = time.time()
    rng = random.Random(20250611)
    lines = []
    prims = set()
    worst_radius = mp.inf
    for case in cases():
        for x0 in choose_points(case, rng):
            c = series_of(case, x0)
            check_outer_low_order(case, x0)
            if case.smooth:
                cauchy_check(case, x0, c)
                worst_radius = min(worst_radius, radius_estimate(c))
            x0dec = mp.nstr(q2mp(x0), 20, min_fixed=1, max_fixed=0, strip_zeros=False)
            rat = f"{x0.numerator}/{x0.denominator}"
            lines.append(" ".join([case.id, case.prim, x0dec, rat] + [fmt(v) for v in c]))
            prims.add(case.prim)
    header = f"""\
# Closed-form Taylor coefficients for tests/taylor_closed_forms.rs.
# Generated by tests/data/taylor_closed_forms.py (sympy {sp.__version__},
# mpmath {mp.__version__}); do not edit, rerun the script instead.
#
# One line per (test function, point), whitespace-separated:
#   id prim x0 x0_exact c_0 c_1 ... c_{K}
# id        the test function, "<fun>.<variant>": the outer function applied
#           to affine images lo + (hi - lo) b(x) of quadratic bases b
#           (variant q) or quotients of quadratics (variant r); the Rust
#           test builds the same function from the id
# prim      the primitive (Prim::name) the function is there to check
# x0        the point, in decimal (exact: a multiple of 1/256)
# x0_exact  the same point as a fraction
# c_k       f^(k)(x0) / k!, the normalised Taylor coefficients of
#           t -> f(x0 + t), to {OUT_DIGITS} significant digits (0: exactly 0)
#
# The coefficients come from closed forms (sympy derivatives of the outer
# function composed with the exact series of the inner functions), checked
# against Cauchy integrals in {DPS}-digit complex arithmetic; see the
# script's docstring. Non-smooth primitives are evaluated away from their
# kinks, where the closed form is the series of the branch taken.
"""
    with open(OUT, "w") as fh:
        fh.write(header)
        fh.write("\n".join(lines) + "\n")
    dt = time.time() - t_start
    print(f"wrote {len(lines)} lines to {OUT} in {dt:.1f} s; "
          f"smallest radius estimate {mp.nstr(worst_radius, 3)}; prims: {len(prims)}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
