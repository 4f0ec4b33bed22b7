"""Reference optimum for examples/ode_fit.rs (kept, run by hand).

Fits the Lotka-Volterra model to the Hudson's Bay Company pelt counts
1900-1920 (examples/data/hudson_bay_lynx_hare.csv): hare u is the prey,
lynx v the predator,

    du/dt = alpha u - beta u v,    dv/dt = -gamma v + delta u v,

integrated by the classical fourth-order Runge-Kutta method with STEPS
equal steps per year from (u0, v0) at 1900; least squares on the log
counts (42 residuals: ln u(t_k) - ln hare_k and ln v(t_k) - ln lynx_k,
k = 0..20). The same discretisation as the Rust example, so the optima
agree to the solver tolerances, not to the ODE's truncation error.

Solver: scipy.optimize.least_squares (Levenberg-Marquardt, MINPACK),
tolerances 1e-15, started from the Rust example's start, with the
Jacobian of the same RK4 map by the complex step (J. N. Lyness and C. B.
Moler, "Numerical differentiation of analytic functions", SIAM J. Numer.
Anal. 4 (1967); W. Squire and G. Trapp, SIAM Review 40 (1998)): exact to
rounding, with no differencing error, so the optimum is that of the
discretised problem to about 1e-12. Run with

    python3 -m venv /tmp/sci && /tmp/sci/bin/pip install scipy
    /tmp/sci/bin/python examples/data/lynx_hare_fit.py > examples/data/lynx_hare_fit.txt
"""

import csv
import os

import numpy as np
import scipy
from scipy.optimize import least_squares

STEPS = 50
START = [0.55, 0.028, 0.84, 0.026, 33.0, 6.0]

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "hudson_bay_lynx_hare.csv")) as f:
    rows = list(csv.DictReader(f))
lynx = np.array([float(r["lynx"]) for r in rows])
hare = np.array([float(r["hare"]) for r in rows])


def rhs(p, u, v):
    a, b, c, d = p[:4]
    return a * u - b * u * v, d * u * v - c * v


def residuals(p):
    h = 1.0 / STEPS
    u, v = p[4], p[5]
    r = [np.log(u) - np.log(hare[0]), np.log(v) - np.log(lynx[0])]
    # (Works on complex p too: the complex step below.)
    for k in range(1, len(rows)):
        for _ in range(STEPS):
            k1u, k1v = rhs(p, u, v)
            k2u, k2v = rhs(p, u + k1u * (h / 2), v + k1v * (h / 2))
            k3u, k3v = rhs(p, u + k2u * (h / 2), v + k2v * (h / 2))
            k4u, k4v = rhs(p, u + k3u * h, v + k3v * h)
            u = u + (k1u + 2 * k2u + 2 * k3u + k4u) * (h / 6)
            v = v + (k1v + 2 * k2v + 2 * k3v + k4v) * (h / 6)
        r += [np.log(u) - np.log(hare[k]), np.log(v) - np.log(lynx[k])]
    return np.array(r)


def jacobian(p):
    eps = 1e-30
    cols = []
    for j in range(len(p)):
        q = np.array(p, dtype=complex)
        q[j] += 1j * eps
        cols.append(np.imag(residuals(q)) / eps)
    return np.array(cols).T


fit = least_squares(
    residuals, START, jac=jacobian, method="lm", xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=10000
)
print(f"# scipy {scipy.__version__}, numpy {np.__version__}; status {fit.status}, "
      f"{fit.nfev} evaluations; STEPS = {STEPS}")
print(f"# first-order optimality (max |J^T r|) {float(fit.optimality):.3e}")
print(f"loss {float(2 * fit.cost)!r}")
for name, value in zip(["alpha", "beta", "gamma", "delta", "u0", "v0"], fit.x):
    print(f"{name} {float(value)!r}")
