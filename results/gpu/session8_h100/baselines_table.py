"""baselines.sh's summary: per op, shape, output and rows, every implementation's µs (<= 32 rows) or
% of copy (more rows), and blockfuse's ratio to the best other implementation (> 1: blockfuse faster)."""
import collections
import json
import os
import sys

o = sys.argv[1]
for n in ("add_rmsnorm_bf16", "add_rmsnorm_fp8", "swiglu_bf16", "swiglu_fp8"):
    p = os.path.join(o, n + ".json")
    if not os.path.exists(p):
        continue
    d = json.load(open(p))
    print(f"{n}: copy {d['copy_gbs']:.0f} GB/s")
    t = collections.defaultdict(dict)
    for r in d["rows"]:
        t[(r["shape"], r["rows"], r["out"])][r["impl"]] = r
    impls = sorted({i for v in t.values() for i in v})
    print("  shape     rows out   | " + " ".join(f"{i:>15}" for i in impls) + " | vs best other  (us at <= 32 rows, else % copy / % same-size copy)")
    for k, v in t.items():
        cells = []
        for i in impls:
            r = v.get(i)
            cells.append(" " * 15 if r is None else f"{r['us']:15.2f}" if k[1] <= 32 else f"{100 * r['frac_copy']:8.1f}/{100 * r['frac_same']:5.1f}")
        others = [r["us"] for i, r in v.items() if not i.startswith("blockfuse")]
        ratio = f"{min(others) / v['blockfuse']['us']:.3f}" if others and "blockfuse" in v else ""
        print(f"  {k[0]:9} {k[1]:>5} {k[2]:5} | " + " ".join(cells) + f" | {ratio}")
