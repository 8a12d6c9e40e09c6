#!/usr/bin/env python3
"""Session 19's closing tables from final.sh's JSON (raw_a.tgz, raw_b.tgz unpacked into DIR/raw).
    python3 tables.py DIR"""
import glob, json, os, statistics, sys
r = os.path.join(sys.argv[1], "raw")
load = lambda pat: [json.load(open(f)) for f in sorted(glob.glob(os.path.join(r, pat)))]

print("== issue 14: fused MLP, H100, min µs of two runs (each the median of its reps), % of copy; "
      "x dense = dense µs / this row's µs; x unfused = cuBLAS -> swiglu -> cuBLAS graph µs / this row's")
fm = {}
for d in load("fmlp_*.json"):
    for x in d["rows"]:
        fm.setdefault((x["shape"], x["m"], x["variant"]), []).append(x)
print(f"{'shape':11} {'M':>2} {'variant':20} {'us':>8} {'%copy':>6} {'x dense':>8} {'x unfused':>9} {'union':>6} ok")
for (s, m, v), xs in sorted(fm.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] != "dense", kv[0][2])):
    b = min(xs, key=lambda x: x["us"])
    dense = min(x["us"] for x in fm[(s, m, "dense")])
    print(f"{s:11} {m:>2} {v:20} {b['us']:8.2f} {100 * b['frac_of_copy']:6.1f} {dense / b['us']:8.2f} "
          f"{min(x['unfused_us'] for x in xs) / b['us']:9.2f} {b['union_density']:6.2f} {'yes' if all(x['verified'] for x in xs) else 'NO'}")

print("\n== issue 16: bf16 gated_up (heuristic, with a workspace) / cuBLAS GEMM alone, three runs, H100")
bf = {}
for d in load("bf16_*.json"):
    for x in d["rows"]:
        bf.setdefault((x["K"], x["U"], x["model"], x["M"]), []).append(x)
allmed, below = [], 0
print(f"{'model':16} {'M':>6} {'row':>3} {'runs c/a':>22} {'median':>7} {'cuBLAS TF':>9} {'fused TF':>8}")
for (k, u, mo, m), xs in sorted(bf.items()):
    rs = [x["c_over_a"] for x in xs]
    med = statistics.median(rs)
    if m >= 512:
        allmed.append(med)
        below += sum(x < 0.97 for x in rs)
    runs = " ".join(format(x, "6.3f") for x in rs)
    print(f"{mo:16} {m:>6} {xs[0]['tile_config']:>3} {runs:>22} {med:7.3f} "
          f"{statistics.median(x['a_cublas_tflops'] for x in xs):9.0f} {statistics.median(x['c_fused_tflops'] for x in xs):8.0f}"
          + ("" if all(x["verified"] for x in xs) else "  NOT VERIFIED"))
if allmed:
    print(f"from 512 tokens: {len(allmed)} points, >= 1.00x at {sum(x >= 1 for x in allmed)}, median of the medians "
          f"{statistics.median(allmed):.3f}x, lowest {min(allmed):.3f}x, highest {max(allmed):.3f}x; single runs below 0.97x: {below}")

print("\n== issue 16: FP8 gated_up / cuBLASLt FP8 (fast accum; a2: default accum, torch._scaled_mm's), and / the bf16 "
      "fused kernel; three runs, medians")
f8 = {}
for d in load("fp8_*.json"):
    for x in d["rows"]:
        f8.setdefault((x["K"], x["model"], x["M"]), []).append(x)
print(f"{'model':12} {'M':>6} {'c/a runs':>20} {'c/a':>6} {'c/a2':>6} {'c/bf16':>7} {'dyn/(a+swiglu_fp8)':>18}")
for (k, mo, m), xs in sorted(f8.items()):
    med = lambda key: statistics.median(x[key] for x in xs)
    runs = " ".join(format(x["c_over_a"], "6.3f") for x in xs)
    print(f"{mo:12} {m:>6} {runs:>20} {med('c_over_a'):6.3f} {med('c_over_a2'):6.3f} "
          f"{med('c_over_d'):7.3f} {med('c8d_over_e'):18.3f}" + ("" if all(x["verified"] for x in xs) else "  NOT VERIFIED"))
