#!/usr/bin/env python3
"""Print criterion medians as ratios.

Reads target/criterion/<group>/<bench>/new/estimates.json (written by
`cargo bench -p optic-ad-bench --bench ad`) and, if present, target/peers.json (written by
`python3 benches/peers.py`). For each group it prints every benchmark's
median, its ratio to the group's plain-f64 `f` time, and optic-ad's median
divided by each peer's for the same derivative.
"""
import json
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parent.parent
crit = root / "target" / "criterion"
if not crit.is_dir():
    sys.exit("no criterion results: run `cargo bench -p optic-ad-bench --bench ad` first")

groups = {}
for est in crit.glob("*/**/new/estimates.json"):
    bench_dir = est.parent.parent
    meta = json.loads((est.parent / "benchmark.json").read_text())
    median_ns = json.loads(est.read_text())["median"]["point_estimate"]
    groups.setdefault(meta["group_id"], {})[meta["function_id"] or meta["title"]] = median_ns

peers = {}
peer_file = root / "target" / "peers.json"
if peer_file.exists():
    peers = json.loads(peer_file.read_text())


def fmt(ns):
    return f"{ns / 1000:9.3f} µs" if ns >= 1000 else f"{ns:9.1f} ns"


for group in sorted(groups):
    rows = groups[group]
    base = rows.get("f64 f")
    print(f"\n## {group}  (median; ratio = time ÷ plain f64 f)")
    for name in sorted(rows):
        ratio = f"{rows[name] / base:8.1f}×" if base else ""
        print(f"  {name:<44} {fmt(rows[name])} {ratio}")
    # ours ÷ theirs for each derivative kind, like for like: the peers'
    # hvp recomputes the forward pass on every call, so ours is the
    # "linearize + apply" variant where there is one.
    kinds = sorted({n.split("/")[0] for n in rows if "/" in n})
    for kind in kinds:
        ours = {n: v for n, v in rows.items() if n.startswith(kind + "/optic-ad")}
        if not ours:
            continue
        full = [v for n, v in ours.items() if "linearize" in n]
        mine = full[0] if full else min(ours.values())
        for n, v in sorted(rows.items()):
            if n.startswith(kind + "/") and "optic-ad" not in n:
                print(f"  {kind}: optic-ad ÷ {n.split('/', 1)[1]:<20} = {mine / v:6.2f}")
    for n, v in sorted(rows.items()):
        if "/" not in n and "optic-ad" in n:
            for m, w in sorted(rows.items()):
                if m != n and m != "f64 f" and "/" not in m:
                    print(f"  optic-ad ÷ {m:<30} = {v / w:6.2f}")
    ours_by_kind = {
        "gradient": rows.get("gradient/optic-ad"),
        "hvp": rows.get("hvp/optic-ad (linearize + apply)"),
        "third derivative": next((v for n, v in rows.items() if n.startswith("optic-ad")), None),
    }
    for peer, res in sorted(peers.get(group, {}).items()):
        pf = res.get("f")
        for kind, ns in sorted(res.items()):
            if kind == "f":
                continue
            own = f"{ns / pf:8.1f}× its own f" if pf else ""
            mine = ours_by_kind.get(kind)
            vs = f"   optic-ad ÷ {peer} = {mine / ns:5.2f}" if mine else ""
            print(f"  {peer:<8} {kind:<26} {fmt(ns)} {own}{vs}")


def fit_quadratic(ks, ts):
    """Least squares t = a + b k + c k², by the normal equations; returns
    (a, b, c, R²)."""
    n = len(ks)
    s = [sum(k ** p for k in ks) for p in range(5)]
    r = [sum(t * k ** p for k, t in zip(ks, ts)) for p in range(3)]
    m = [[s[0], s[1], s[2]], [s[1], s[2], s[3]], [s[2], s[3], s[4]]]
    # Gaussian elimination on the 3×3 system.
    a = [row[:] + [r[i]] for i, row in enumerate(m)]
    for i in range(3):
        p = max(range(i, 3), key=lambda j: abs(a[j][i]))
        a[i], a[p] = a[p], a[i]
        for j in range(i + 1, 3):
            f = a[j][i] / a[i][i]
            a[j] = [x - f * y for x, y in zip(a[j], a[i])]
    c = [0.0] * 3
    for i in reversed(range(3)):
        c[i] = (a[i][3] - sum(a[i][j] * c[j] for j in range(i + 1, 3))) / a[i][i]
    mean = sum(ts) / n
    ss_tot = sum((t - mean) ** 2 for t in ts)
    ss_res = sum((t - (c[0] + c[1] * k + c[2] * k * k)) ** 2 for k, t in zip(ks, ts))
    return c[0], c[1], c[2], 1.0 - ss_res / ss_tot if ss_tot else 1.0


# Taylor mode: eval time per order as a multiple of order 1, beside echidna
# and nested ∂⃖, and the fit of the times to a + b k + c k².
for group in sorted(g for g in groups if g.startswith("taylor_orders")):
    rows = groups[group]
    ours = {}
    for name, ns in rows.items():
        if name.startswith("order "):
            k = int(name.split()[1].split("/")[0])
            ours.setdefault(k, {})[name.split("/", 1)[1]] = ns
    base = ours.get(1, {}).get("optic-ad")
    if not base:
        continue
    print(f"\n## {group}: Taylor mode by order (median; × order 1 = time ÷ optic-ad at order 1)")
    print(f"  {'k':>3} {'optic-ad':>12} {'× order 1':>10} {'echidna':>12} {'ours÷echidna':>13} {'nested ∂⃖':>12}")
    for k in sorted(ours):
        r = ours[k]
        o, e, n = r.get("optic-ad"), r.get("echidna"), r.get("nested reverse")
        print(
            f"  {k:>3} {fmt(o) if o else '':>12} {o / base if o else 0:>9.1f}× "
            f"{fmt(e) if e else '':>12} {o / e if o and e else 0:>12.2f} {fmt(n) if n else '':>12}"
        )
    ks = [k for k in sorted(ours) if "optic-ad" in ours[k]]
    ts = [ours[k]["optic-ad"] for k in ks]
    a, b, c, r2 = fit_quadratic(ks, ts)
    print(f"  fit: t(k) = {a:.1f} + {b:.2f} k + {c:.3f} k² ns, R² = {r2:.4f}")
    worst = max(abs(t - (a + b * k + c * k * k)) / t for k, t in zip(ks, ts))
    print(f"  largest relative residual of the fit: {worst:.1%}")
    if len(ks) >= 2:
        import math
        k1, k2 = ks[-2], ks[-1]
        slope = math.log(ours[k2]["optic-ad"] / ours[k1]["optic-ad"]) / math.log(k2 / k1)
        print(f"  log-log slope between k = {k1} and k = {k2}: {slope:.2f}")
