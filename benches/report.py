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
