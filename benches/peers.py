#!/usr/bin/env python3
"""JAX (jit, CPU, float64) and CasADi (SX) on the problems of benches/ad.rs.

Writes target/peers.json with median times (ns) per call, which
benches/report.py prints next to the criterion results. Each derivative is
checked against its own plain-f value path (finite values, and the JAX and
CasADi results against each other) before timing.

Set-up: pip install jax jaxlib casadi numpy
Run:    python3 benches/peers.py

Timings include each framework's per-call dispatch from Python (about
microseconds); the ratio to the framework's own `f` call cancels part of it.
"""
import json
import pathlib
import statistics
import time

import numpy as np

root = pathlib.Path(__file__).resolve().parent.parent


def median_ns(fn, min_time=0.2, repeats=15):
    fn()  # warm up / compile
    # calibrate the number of calls per repeat
    n = 1
    while True:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        dt = time.perf_counter_ns() - t0
        if dt > min_time * 1e9 / repeats or n > 1 << 20:
            break
        n *= 2
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(samples)


def load_wdbc():
    rows = (root / "examples" / "data" / "wdbc.csv").read_text().strip().splitlines()[1:]
    data = np.array([[float(v) for v in r.split(",")] for r in rows])
    x, y = data[:, :30], data[:, 30]
    x = (x - x.mean(axis=0)) / x.std(axis=0)  # population std, as the main job
    s = np.where(y == 1.0, 1.0, -1.0)
    return x, s


def problems():
    n = 100
    i = np.arange(n)
    xr = 0.5 + 0.4 * np.sin(i * 0.7)
    vr = np.cos(i * 1.3)
    X, s = load_wdbc()
    j = np.arange(31)
    xl = 0.1 * np.sin(j * 0.9)
    vl = np.cos(j * 1.7)
    return (xr, vr), (X, s, xl, vl)


def run_jax():
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platforms", "cpu")
    (xr, vr), (X, s, xl, vl) = problems()
    out = {}

    def rosen(x):
        return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

    def logistic(t):
        w, b = t[:30], t[30]
        z = -s * (X @ w + b)
        return jnp.sum(jnp.logaddexp(0.0, z)) + 0.5 * jnp.dot(w, w)

    def h(t):
        return jnp.exp(jnp.sin(t)) * jnp.log(t * t + 1.0) + jnp.tanh(t) / (t * t + 1.0)

    results = {}
    for group, fun, x, v in [("rosenbrock100", rosen, xr, vr), ("logistic_wdbc", logistic, xl, vl)]:
        x, v = jnp.asarray(x), jnp.asarray(v)
        f = jax.jit(fun)
        g = jax.jit(jax.grad(fun))
        hv = jax.jit(lambda x, v, fun=fun: jax.jvp(jax.grad(fun), (x,), (v,))[1])
        assert np.all(np.isfinite(np.asarray(g(x)))) and np.all(np.isfinite(np.asarray(hv(x, v))))
        results[group] = (np.asarray(g(x)), np.asarray(hv(x, v)))
        out[group] = {
            "f": median_ns(lambda: f(x).block_until_ready()),
            "gradient": median_ns(lambda: g(x).block_until_ready()),
            "hvp": median_ns(lambda: hv(x, v).block_until_ready()),
        }
    t = jnp.asarray(0.7)
    f = jax.jit(h)
    d3 = jax.jit(jax.grad(jax.grad(jax.grad(h))))
    results["third_derivative"] = float(d3(t))
    out["third_derivative"] = {
        "f": median_ns(lambda: f(t).block_until_ready()),
        "third derivative": median_ns(lambda: d3(t).block_until_ready()),
    }
    return out, results


def run_jax_scaling(sizes=(10_000, 100_000, 1_000_000, 10_000_000)):
    """Rosenbrock at n = 10⁴ … 10⁷ (bench group arrays_rosenbrock), or at
    the given sizes: JAX's program is a handful of array operations at any
    n, as the array tier's. CasADi's SX graph has one node per element and
    is not run at these n."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platforms", "cpu")

    def rosen(x):
        return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

    f = jax.jit(rosen)
    g = jax.jit(jax.grad(rosen))
    hv = jax.jit(lambda x, v: jax.jvp(jax.grad(rosen), (x,), (v,))[1])
    # Taylor mode along x + t v to order 4 (row "taylor order 4" of
    # arrays_rosenbrock): jet's series terms are the derivatives
    # dᵏ/dtᵏ f(x + t v), k = 1 … 4.
    from jax.experimental.jet import jet

    def taylor4(x, v):
        z = jnp.zeros_like(v)
        y, ys = jet(rosen, (x,), ((v, z, z, z),))
        return jnp.stack([y] + list(ys))

    d4 = jax.jit(taylor4)
    out = {}
    for n in sizes:
        i = np.arange(n)
        x = jnp.asarray(0.5 + 0.4 * np.sin(i * 0.7))
        v = jnp.asarray(np.cos(i * 1.3))
        # Closed forms (Nocedal & Wright, eq. 2.23, chained), as a check.
        xn, vn = np.asarray(x), np.asarray(v)
        t = xn[1:] - xn[:-1] ** 2
        gref = np.zeros(n)
        gref[:-1] += -400.0 * xn[:-1] * t - 2.0 * (1.0 - xn[:-1])
        gref[1:] += 200.0 * t
        assert np.allclose(np.asarray(g(x)), gref, rtol=1e-12, atol=1e-9)
        assert np.all(np.isfinite(np.asarray(hv(x, v))))
        # vᵀ H v two ways: the HVP and the second Taylor derivative.
        vhv = float(np.dot(vn, np.asarray(hv(x, v))))
        assert abs(float(d4(x, v)[2]) - vhv) <= 1e-9 * max(1.0, abs(vhv))
        repeats = 15 if n <= 1_000_000 else 5
        out[f"arrays_rosenbrock n={n}"] = {
            "f": median_ns(lambda: f(x).block_until_ready(), repeats=repeats),
            "gradient": median_ns(lambda: g(x).block_until_ready(), repeats=repeats),
            "hvp": median_ns(lambda: hv(x, v).block_until_ready(), repeats=repeats),
            "taylor order 4": median_ns(lambda: d4(x, v).block_until_ready(), repeats=repeats),
        }
    return out


def run_jax_loops():
    """Lotka-Volterra by RK4 through lax.scan (bench group
    loops_lotka_volterra, problem of benches/lotka_volterra.rs), N = 10^3 ...
    10^5 steps, gradient and HVP (jvp of grad), with and without
    jax.checkpoint on the step. The value is checked against a plain Python
    loop, and the two variants' derivatives against each other. For one XLA
    thread run with
    XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platforms", "cpu")
    p0 = jnp.asarray([0.55, 0.028, 0.84, 0.026, 33.0, 6.0])
    v = jnp.asarray([0.01, -0.002, 0.03, 0.001, -0.5, 0.25])

    def make_loss(steps, remat):
        h = 10.0 / steps

        def loss(p):
            def rhs(x, y):
                return p[0] * x - p[1] * x * y, p[3] * x * y - p[2] * y

            def step(c, _):
                x, y = c
                k1x, k1y = rhs(x, y)
                k2x, k2y = rhs(x + k1x * (h / 2), y + k1y * (h / 2))
                k3x, k3y = rhs(x + k2x * (h / 2), y + k2y * (h / 2))
                k4x, k4y = rhs(x + k3x * h, y + k3y * h)
                return (
                    x + (k1x + 2 * k2x + 2 * k3x + k4x) * (h / 6),
                    y + (k1y + 2 * k2y + 2 * k3y + k4y) * (h / 6),
                ), None

            body = jax.checkpoint(step) if remat else step
            (x, y), _ = jax.lax.scan(body, (p[4], p[5]), None, length=steps)
            return (x - 1.0) ** 2 + (y - 1.0) ** 2

        return loss

    def plain(p, steps):
        h = 10.0 / steps
        x, y = p[4], p[5]

        def rhs(x, y):
            return p[0] * x - p[1] * x * y, p[3] * x * y - p[2] * y

        for _ in range(steps):
            k1x, k1y = rhs(x, y)
            k2x, k2y = rhs(x + k1x * (h / 2), y + k1y * (h / 2))
            k3x, k3y = rhs(x + k2x * (h / 2), y + k2y * (h / 2))
            k4x, k4y = rhs(x + k3x * h, y + k3y * h)
            x, y = (x + (k1x + 2 * k2x + 2 * k3x + k4x) * (h / 6),
                    y + (k1y + 2 * k2y + 2 * k3y + k4y) * (h / 6))
        return (x - 1.0) ** 2 + (y - 1.0) ** 2

    out = {}
    for n in (1_000, 10_000, 100_000):
        times = {}
        derivs = []
        for remat in (False, True):
            loss = make_loss(n, remat)
            f = jax.jit(loss)
            g = jax.jit(jax.grad(loss))
            hv = jax.jit(lambda p, v, loss=loss: jax.jvp(jax.grad(loss), (p,), (v,))[1])
            if n <= 10_000:
                want = plain([float(t) for t in p0], n)
                assert abs(float(f(p0)) - want) <= 1e-12 * abs(want)
            derivs.append((np.asarray(g(p0)), np.asarray(hv(p0, v))))
            tag = " (checkpoint)" if remat else ""
            repeats = 15 if n <= 10_000 else 5
            if not remat:
                times["f"] = median_ns(lambda: f(p0).block_until_ready(), repeats=repeats)
            times["gradient" + tag] = median_ns(lambda: g(p0).block_until_ready(), repeats=repeats)
            times["hvp" + tag] = median_ns(lambda: hv(p0, v).block_until_ready(), repeats=repeats)
        for a, b in zip(derivs[0], derivs[1]):
            assert np.allclose(a, b, rtol=1e-10, atol=1e-12)
        print(f"loops n={n}: gradient {derivs[0][0]}, hvp {derivs[0][1]}")
        out[f"loops_lotka_volterra n={n}"] = times
    return out


def minimal_surface_problem(n):
    """The example minimal_surface's grid (MINPACK-2's minimal-surface area
    with Scherk's surface as boundary values) and the bench point: padded
    (n+2) x (n+2) boundary grid B[j, i] at (i h, j h), zeros inside, and
    the unknowns v[(j-1) n + (i-1)] = MINPACK-2's start + 0.1 sin(0.7 k),
    as bench_arrays_minimal_surface in benches/ad.rs."""
    h = 1.0 / (n + 1)
    m = n + 2
    a = 2.0
    c = np.arange(m) * h
    X, Y = np.meshgrid(c, c)  # X[j, i] = i h, Y[j, i] = j h
    B = np.log(np.cos(a * (Y - 0.5)) / np.cos(a * (X - 0.5))) / a
    B[1:-1, 1:-1] = 0.0
    alpha = (np.arange(1, n + 1) * h)[:, None]  # j h, by rows
    beta = (np.arange(1, n + 1) * h)[None, :]  # i h, by columns
    vertical = alpha * B[n + 1, 1:-1][None, :] + (1.0 - alpha) * B[0, 1:-1][None, :]
    horizontal = beta * B[1:-1, n + 1][:, None] + (1.0 - beta) * B[1:-1, 0][:, None]
    start = (0.5 * (vertical + horizontal)).ravel()
    k = np.arange(n * n)
    x = start + 0.1 * np.sin(k * 0.7)
    v = np.cos(k * 1.3)
    return h, B, x, v


def minimal_surface_gradient(n, h, B, x):
    """MINPACK-2's hand-derived gradient (numpy, no AD): the check of JAX's."""
    G = B.copy()
    G[1:-1, 1:-1] = x.reshape(n, n)
    g = np.zeros_like(G)
    m = n + 2
    for lower in (True, False):
        if lower:  # (i, j), (i+1, j), (i, j+1) for 0 <= i, j <= n
            c = G[: m - 1, : m - 1]
            px, py = G[: m - 1, 1:], G[1:, : m - 1]
            sc, sx, sy = (slice(0, m - 1), slice(0, m - 1)), (slice(0, m - 1), slice(1, m)), (slice(1, m), slice(0, m - 1))
        else:  # (i, j), (i-1, j), (i, j-1) for 1 <= i, j <= n+1
            c = G[1:, 1:]
            px, py = G[1:, : m - 1], G[: m - 1, 1:]
            sc, sx, sy = (slice(1, m), slice(1, m)), (slice(1, m), slice(0, m - 1)), (slice(0, m - 1), slice(1, m))
        ax, ay = (px - c) / h, (py - c) / h
        root = np.sqrt(1.0 + ax * ax + ay * ay)
        gx, gy = 0.5 * h * ax / root, 0.5 * h * ay / root
        g[sx] += gx
        g[sy] += gy
        g[sc] -= gx + gy
    return g[1:-1, 1:-1].ravel()


def run_jax_minimal_surface():
    """The minimal-surface area on N x N grids (bench group
    arrays_minimal_surface), N = 100, 300, 1000: f, gradient, HVP, and the
    time of the first HVP call (tracing and XLA compilation)."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platforms", "cpu")
    out = {}
    for n in (100, 300, 1000):
        h, B, x, v = minimal_surface_problem(n)
        Bj = jnp.asarray(B)

        def area(u, n=n, h=h, Bj=Bj):
            G = Bj.at[1:-1, 1:-1].set(u.reshape(n, n))
            dx = (G[:, 1:] - G[:, :-1]) / h  # (m, m-1): G[j, i+1] - G[j, i]
            dy = (G[1:, :] - G[:-1, :]) / h  # (m-1, m): G[j+1, i] - G[j, i]
            lower = jnp.sqrt(1.0 + dx[:-1, :] ** 2 + dy[:, :-1] ** 2)
            upper = jnp.sqrt(1.0 + dx[1:, :] ** 2 + dy[:, 1:] ** 2)
            return 0.5 * h * h * (jnp.sum(lower) + jnp.sum(upper))

        xj, vj = jnp.asarray(x), jnp.asarray(v)
        f = jax.jit(area)
        g = jax.jit(jax.grad(area))
        hv = jax.jit(lambda x, v, area=area: jax.jvp(jax.grad(area), (x,), (v,))[1])
        t0 = time.perf_counter_ns()
        hv(xj, vj).block_until_ready()
        compile_ns = time.perf_counter_ns() - t0
        gref = minimal_surface_gradient(n, h, B, x)
        assert np.allclose(np.asarray(g(xj)), gref, rtol=1e-10, atol=1e-14 * np.abs(gref).max())
        assert np.all(np.isfinite(np.asarray(hv(xj, vj))))
        repeats = 15 if n < 1000 else 7
        out[f"arrays_minimal_surface N={n}"] = {
            "f": median_ns(lambda: f(xj).block_until_ready(), repeats=repeats),
            "gradient": median_ns(lambda: g(xj).block_until_ready(), repeats=repeats),
            "hvp": median_ns(lambda: hv(xj, vj).block_until_ready(), repeats=repeats),
            "first hvp call (trace + compile)": compile_ns,
        }
    return out


def run_jax_mlp():
    """A network with one hidden layer of 16 tanh units on WDBC (bench group
    arrays_mlp_wdbc): the same parameters, layout and point as the Rust
    bench; the gradient is checked against central differences."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platforms", "cpu")
    X, s = load_wdbc()
    Xt = np.hstack([X, np.ones((X.shape[0], 1))])
    hidden, d1 = 16, Xt.shape[1]
    n = hidden * d1 + hidden + 1
    j = np.arange(n)
    theta = 0.1 * np.sin(j * 0.9)
    v = np.cos(j * 1.7)
    Xj, neg_s = jnp.asarray(Xt), jnp.asarray(-s)

    def loss(t):
        w1 = t[: hidden * d1].reshape(hidden, d1)
        w2, b2 = t[hidden * d1 : hidden * d1 + hidden], t[-1]
        z = jnp.tanh(Xj @ w1.T) @ w2 + b2
        return jnp.sum(jnp.logaddexp(0.0, neg_s * z)) + 0.005 * jnp.dot(t, t)

    tj, vj = jnp.asarray(theta), jnp.asarray(v)
    f = jax.jit(loss)
    g = jax.jit(jax.grad(loss))
    hv = jax.jit(lambda x, v: jax.jvp(jax.grad(loss), (x,), (v,))[1])
    gj = np.asarray(g(tj))
    for k in (0, 100, n - 1):
        e = np.zeros(n)
        e[k] = 1e-6
        fd = (float(f(tj + e)) - float(f(tj - e))) / 2e-6
        assert abs(fd - gj[k]) < 1e-6 * (1.0 + abs(gj[k])), (k, fd, gj[k])
    assert np.all(np.isfinite(np.asarray(hv(tj, vj))))
    return {
        "arrays_mlp_wdbc": {
            "f": median_ns(lambda: f(tj).block_until_ready()),
            "gradient": median_ns(lambda: g(tj).block_until_ready()),
            "hvp": median_ns(lambda: hv(tj, vj).block_until_ready()),
        }
    }


def run_casadi():
    import casadi as ca

    (xr, vr), (X, s, xl, vl) = problems()
    out = {}
    results = {}

    def rosen(x):
        n = x.shape[0]
        return ca.sum1(100.0 * (x[1:n] - x[0 : n - 1] ** 2) ** 2 + (1.0 - x[0 : n - 1]) ** 2)

    def logistic(t):
        w, b = t[0:30], t[30]
        z = -ca.DM(s) * (ca.mtimes(ca.DM(X), w) + b)
        sp = ca.fmax(z, 0.0) + ca.log(1.0 + ca.exp(-ca.fabs(z)))
        return ca.sum1(sp) + 0.5 * ca.dot(w, w)

    for group, fun, x, v in [("rosenbrock100", rosen, xr, vr), ("logistic_wdbc", logistic, xl, vl)]:
        n = x.shape[0]
        xs, vs = ca.SX.sym("x", n), ca.SX.sym("v", n)
        fx = fun(xs)
        gx = ca.gradient(fx, xs)
        F = ca.Function("f", [xs], [fx])
        G = ca.Function("g", [xs], [gx])
        H = ca.Function("hv", [xs, vs], [ca.jtimes(gx, xs, vs)])
        results[group] = (np.asarray(G(x)).ravel(), np.asarray(H(x, v)).ravel())
        out[group] = {
            "f": median_ns(lambda: F(x)),
            "gradient": median_ns(lambda: G(x)),
            "hvp": median_ns(lambda: H(x, v)),
        }
    t = ca.SX.sym("t")
    e = ca.exp(ca.sin(t)) * ca.log(t * t + 1.0) + ca.tanh(t) / (t * t + 1.0)
    d3 = ca.jacobian(ca.jacobian(ca.jacobian(e, t), t), t)
    F = ca.Function("h", [t], [e])
    D3 = ca.Function("d3", [t], [d3])
    results["third_derivative"] = float(D3(0.7))
    out["third_derivative"] = {"f": median_ns(lambda: F(0.7)), "third derivative": median_ns(lambda: D3(0.7))}
    return out, results


def main():
    merged = {}
    res = {}
    for name, runner in [("jax", run_jax), ("casadi", run_casadi)]:
        try:
            out, r = runner()
        except ImportError as e:
            print(f"{name}: not installed ({e}); pip install jax jaxlib casadi")
            continue
        res[name] = r
        for group, times in out.items():
            merged.setdefault(group, {})[name] = times
    try:
        for group, times in run_jax_scaling().items():
            merged.setdefault(group, {})["jax"] = times
        for group, times in run_jax_minimal_surface().items():
            merged.setdefault(group, {})["jax"] = times
        for group, times in run_jax_mlp().items():
            merged.setdefault(group, {})["jax"] = times
        for group, times in run_jax_loops().items():
            merged.setdefault(group, {})["jax"] = times
    except ImportError as e:
        print(f"jax: not installed ({e})")
    if len(res) == 2:
        for group in ("rosenbrock100", "logistic_wdbc"):
            for a, b in zip(res["jax"][group], res["casadi"][group]):
                assert np.allclose(a, b, rtol=1e-9, atol=1e-12), f"{group}: jax and casadi disagree"
        assert abs(res["jax"]["third_derivative"] - res["casadi"]["third_derivative"]) < 1e-9
        print("jax and casadi agree on every derivative")
    (root / "target").mkdir(exist_ok=True)
    (root / "target" / "peers.json").write_text(json.dumps(merged, indent=1))
    for group, peers in merged.items():
        for peer, times in peers.items():
            print(group, peer, {k: f"{v / 1000:.3f} µs" for k, v in times.items()})


if __name__ == "__main__":
    main()
