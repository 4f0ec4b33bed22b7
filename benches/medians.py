#!/usr/bin/env python3
"""Medians over several benchmark processes, as RESULTS.md quotes them.

criterion keeps only the last run's estimates, so after each process
snapshot them:

    python3 benches/medians.py save run1.json [GROUP-PREFIX ...]

(reads target/criterion/**/new/estimates.json under the workspace root),
then print, for each benchmark, the median of the per-process medians with
[min..max], and its ratio to the group's `f64 f`:

    python3 benches/medians.py show run1.json run2.json run3.json

Given `--before b1.json b2.json b3.json` after `show …`, it adds the ratio
after ÷ before of the medians for the benchmarks both sides have.
"""
import json
import pathlib
import statistics
import sys

root = pathlib.Path(__file__).resolve().parent.parent


def save(path, prefixes):
    crit = root / "target" / "criterion"
    out = {}
    for est in crit.glob("**/new/estimates.json"):
        bench = json.loads((est.parent / "benchmark.json").read_text())
        fid = bench["full_id"]
        if prefixes and not any(fid.startswith(p) for p in prefixes):
            continue
        out[fid] = json.loads(est.read_text())["median"]["point_estimate"]
    pathlib.Path(path).write_text(json.dumps(out, indent=1))
    print(f"{len(out)} benchmarks saved to {path}")


def load(paths):
    runs = [json.loads(pathlib.Path(p).read_text()) for p in paths]
    ids = sorted(set().union(*runs))
    return {i: [r[i] for r in runs if i in r] for i in ids}


def fmt(ns):
    for unit, scale in (("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3f} {unit}"
    return f"{ns:.1f} ns"


def show(paths, before_paths):
    after = load(paths)
    before = load(before_paths) if before_paths else {}
    for fid, vals in after.items():
        med = statistics.median(vals)
        # the group's plain f: same prefix up to the benchmark name
        base_id = next(
            (k for k in (fid.split("/")[0] + "/f64 f", "/".join(fid.split("/")[:2]) + "/f64 f") if k in after),
            None,
        )
        ratio = f"{med / statistics.median(after[base_id]):7.1f}× f" if base_id else ""
        line = f"{fid:60} {fmt(med):>11} [{fmt(min(vals))}..{fmt(max(vals))}] {ratio}"
        if fid in before:
            line += f"   after÷before {med / statistics.median(before[fid]):.2f}"
        print(line)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "save":
        save(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "show":
        args = sys.argv[2:]
        if "--before" in args:
            k = args.index("--before")
            show(args[:k], args[k + 1 :])
        else:
            show(args, [])
    else:
        sys.exit(__doc__)
