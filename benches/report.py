#!/usr/bin/env python3
"""Print criterion medians as ratios.

Reads target/criterion/<group>/<bench>/new/estimates.json (written by
`cargo bench --bench ad`) and, if present, target/peers.json (written by
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
    sys.exit("no criterion results: run `cargo bench --bench ad` first")

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
    # ours ÷ theirs for each derivative kind
    kinds = sorted({n.split("/")[0] for n in rows if "/" in n})
    for kind in kinds:
        ours = [v for n, v in rows.items() if n.startswith(kind + "/optic-ad")]
        if not ours:
            continue
        best = min(ours)
        for n, v in sorted(rows.items()):
            if n.startswith(kind + "/") and "optic-ad" not in n:
                print(f"  {kind}: optic-ad (best) ÷ {n.split('/', 1)[1]:<20} = {best / v:6.2f}")
    for n, v in sorted(rows.items()):
        if "/" not in n and "optic-ad" in n:
            for m, w in sorted(rows.items()):
                if m != n and m != "f64 f" and "/" not in m:
                    print(f"  optic-ad ÷ {m:<30} = {v / w:6.2f}")
    for peer, res in sorted(peers.get(group, {}).items()):
        pf = res.get("f")
        for kind, ns in sorted(res.items()):
            if kind == "f":
                continue
            own = f"{ns / pf:8.1f}× its own f" if pf else ""
            print(f"  {peer:<8} {kind:<26} {fmt(ns)} {own}")
