#!/usr/bin/env python3
"""The tables `next.sh bench` prints from its JSON (python3 next_tables.py OUTDIR):
add_rmsnorm's staged rule against the default per point (two runs each, alternated in one process
order), gated_up_fp8's dynamic per-row e4m3 output beside the static one and the unfused pipeline,
and the fused MLP with the dynamic-groups patch against the kernel as on main."""
import json
import os
import sys


def rows(path):
    try:
        return json.load(open(path))["rows"]
    except (OSError, ValueError, KeyError) as e:
        print(f"{os.path.basename(path)}: unreadable ({e})")
        return []


def add_rmsnorm(o):
    runs = {}
    for rule in ("default", "staged"):
        for rep in (1, 2):
            for r in rows(os.path.join(o, f"arn_{rule}_{rep}.json")):
                d = runs.setdefault((r["H"], r["fp8"], r["rows"]), {})
                d.setdefault(rule, []).append((r["fused_us"], r.get("fused_frac_of_copy", 0.0), r["kernel"], r.get("verified", True)))
    if not runs:
        return
    print("add_rmsnorm, µs per run and % of copy (first run): --rule default vs --rule staged")
    print(f"{'H':>6} {'out':8} {'rows':>6} | {'default µs':>17} {'%copy':>6} | {'staged µs':>17} {'%copy':>6} | staged/default | kernels")
    ratios = []
    for k in sorted(runs):
        d, s = runs[k].get("default", []), runs[k].get("staged", [])
        if not d or not s:
            continue
        md, ms = sum(x[0] for x in d) / len(d), sum(x[0] for x in s) / len(s)
        ratios.append((k, ms / md, max(x[0] for x in s) / min(x[0] for x in d), min(x[0] for x in s) / max(x[0] for x in d)))
        bad = "" if all(x[3] for x in d + s) else "  VERIFY FAILED"
        print(f"{k[0]:>6} {k[1]:8} {k[2]:>6} | " + " ".join(f"{x[0]:8.2f}" for x in d) + f" {100 * d[0][1]:5.1f}% | "
              + " ".join(f"{x[0]:8.2f}" for x in s) + f" {100 * s[0][1]:5.1f}% | {ms / md:14.3f} | {d[0][2]} / {s[0][2]}{bad}")
    wins = [k for k, _, worst, _ in ratios if worst < 1.0]  # staged's slowest run beats default's fastest
    print(f"staged faster in both runs at {len(wins)} of {len(ratios)} points")


def fused_mlp(o):
    table = {}
    for tag in ("old", "new"):
        for r in rows(os.path.join(o, f"fmlp_{tag}.json")):
            table.setdefault((r["shape"], r["m"], r["variant"]), {})[tag] = r
    if not table:
        return
    nan = float("nan")
    print("\nfused MLP: as on main (old) vs the dynamic-groups patch (new), µs; new's % of copy, × dense, × unfused (same run)")
    print(f"{'shape':11} {'M':>2} {'variant':14} {'old µs':>8} {'new µs':>8} {'old/new':>7} {'%copy':>6} {'× dense':>7} {'× unfused':>9} nb ok")
    for (s, m, v), d in sorted(table.items()):
        a, b = d.get("old"), d.get("new")
        if not b:
            continue
        print(f"{s:11} {m:>2} {v:14} {a['us'] if a else nan:8.2f} {b['us']:8.2f} {(a['us'] / b['us']) if a else nan:7.2f} "
              f"{100 * b['frac_of_copy']:5.1f}% {b['speedup_vs_dense']:7.2f} {b['speedup_vs_unfused']:9.2f} "
              f"{b.get('neurons_per_block', '-')} {b['verified']}")


def swiglu_cluster(o):
    runs = {}
    for rule in ("default", "cluster2"):
        for rep in (1, 2):
            for r in rows(os.path.join(o, f"swd_{rule}_{rep}.json")):
                runs.setdefault((r["U"], r["M"]), {}).setdefault(rule, []).append((r["us"], r.get("frac_of_copy", 0.0), r.get("kernel", "-")))
    if not runs:
        return
    print("\nswiglu_fp8 dynamic, µs per run: --row-rule default vs cluster2 (target <= 4 µs at 1-32 rows)")
    print(f"{'U':>6} {'rows':>5} | {'default µs':>17} | {'cluster2 µs':>17} | cluster2/default | kernels")
    for k in sorted(runs):
        d, c = runs[k].get("default", []), runs[k].get("cluster2", [])
        if not d or not c:
            continue
        md, mc = sum(x[0] for x in d) / len(d), sum(x[0] for x in c) / len(c)
        print(f"{k[0]:>6} {k[1]:>5} | " + " ".join(f"{x[0]:8.2f}" for x in d) + " | " + " ".join(f"{x[0]:8.2f}" for x in c)
              + f" | {mc / md:16.3f} | {d[0][2]} / {c[0][2]}")


def gated_up_fp8(o):
    rs = rows(os.path.join(o, "fp8.json"))
    if not rs:
        return
    print("\ngated_up_fp8, TFLOP/s (2·M·K·2U / median): c bf16 out, c8 e4m3 static, c8d e4m3 dynamic per row, "
          "e = cuBLASLt FP8 + swiglu_fp8 dynamic, a = cuBLASLt FP8 alone")
    print(f"{'model':12} {'M':>6} {'a':>6} {'c':>6} {'c8':>6} {'c8d':>6} {'e':>6} {'c8d/e':>6} {'c8d/c8':>6} {'c/a':>6} ok mismatches")
    for r in rs:
        print(f"{r['model']:12} {r['M']:>6} {r['a_lt_fp8_tflops']:6.0f} {r['c_fused_fp8_tflops']:6.0f} "
              f"{r['c8_fused_fp8_e4m3out_tflops']:6.0f} {r.get('c8d_fused_fp8_dynamic_tflops', float('nan')):6.0f} "
              f"{r.get('e_lt_fp8_swiglu_fp8_dynamic_tflops', float('nan')):6.0f} {r.get('c8d_over_e', float('nan')):6.3f} "
              f"{r.get('c8d_over_c8', float('nan')):6.3f} {r['c_over_a']:6.3f} {r['verified']} {r.get('dynamic_mismatches', '-')}")


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/next"
    add_rmsnorm(out)
    swiglu_cluster(out)
    gated_up_fp8(out)
    fused_mlp(out)
