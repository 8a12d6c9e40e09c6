"""Prints exp2's swiglu sweeps side by side (µs per call, % of copy) and the ncu summary."""
import glob
import json
import os
import sys

d = sys.argv[1]
def load(name):
    try:
        return {(r["M"], r["out"]): r for r in json.load(open(os.path.join(d, name)))["rows"]}
    except Exception as e:
        print(f"{name}: {e}")
        return {}

for part, us, variants in (("A", (14336, 28672), ("base", "new", "newsmall")), ("B", (14336, 16384, 28672), ("base", "new"))):
    for u in us:
        runs = {v: load(f"{part}_{u}_{v}.json") for v in variants}
        keys = sorted(set().union(*[set(r) for r in runs.values()]), key=lambda k: (k[1], k[0]))
        print(f"{part} U={u}: " + " | ".join(variants) + "  (us, %copy, kernel)")
        for k in keys:
            cells = []
            for v in variants:
                r = runs[v].get(k)
                cells.append(f"{r['us']:9.2f} {100 * r.get('frac_of_copy', 0):5.1f}% {r['kernel'].split(' b')[0]:<22}" if r else " " * 39)
            print(f"  {k[0]:>6} {k[1]:<12}" + " | ".join(cells))
for f in sorted(glob.glob(os.path.join(d, "ncu_*.txt"))):
    print("==", os.path.basename(f))
    for line in open(f):
        s = " ".join(line.split())
        if any(k in s for k in ("gpu__time", "dram__", "inst_executed", "issue_active", "warps_active", "grid_size",
                                "block_size", "registers_per", "Warp Cycles Per Issued", "==PROF== Prof", "rror")):
            print("  ", s[:150])
