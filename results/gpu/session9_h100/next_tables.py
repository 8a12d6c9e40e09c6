#!/usr/bin/env python3
"""The tables `next.sh bench-mem` and `bench-mlp` print from its JSON (python3 next_tables.py OUTDIR):
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


def compare_rules(o, prefix, rules, key, us, title, head):
    """Two rules, two runs each (files PREFIX_RULE_REP.json): µs per run and the mean ratio per point,
    and at how many points the second rule's slowest run beats the first's fastest."""
    runs = {}
    for rule in rules:
        for rep in (1, 2):
            for r in rows(os.path.join(o, f"{prefix}_{rule}_{rep}.json")):
                runs.setdefault(key(r), {}).setdefault(rule, []).append(
                    (r[us], r.get("fused_frac_of_copy", r.get("frac_of_copy", 0.0)), r.get("kernel", "-"), r.get("verified", True)))
    if not runs:
        return
    a, b = rules
    print(f"\n{title}: µs per run and % of copy (first run), {a} vs {b}")
    print(f"{head} | {a + ' µs':>17} {'%copy':>6} | {b + ' µs':>17} {'%copy':>6} | {b}/{a} | kernels")
    wins = total = 0
    for k in sorted(runs):
        x, y = runs[k].get(a, []), runs[k].get(b, [])
        if not x or not y:
            continue
        total += 1
        wins += max(v[0] for v in y) < min(v[0] for v in x)
        mx, my = sum(v[0] for v in x) / len(x), sum(v[0] for v in y) / len(y)
        bad = "" if all(v[3] for v in x + y) else "  VERIFY FAILED"
        print(" ".join(f"{str(f):>6}" for f in k) + " | " + " ".join(f"{v[0]:8.2f}" for v in x) + f" {100 * x[0][1]:5.1f}% | "
              + " ".join(f"{v[0]:8.2f}" for v in y) + f" {100 * y[0][1]:5.1f}% | {my / mx:8.3f} | {x[0][2]} / {y[0][2]}{bad}")
    print(f"{b} faster in both runs at {wins} of {total} points")


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
    compare_rules(out, "arn", ("default", "staged"), lambda r: (r["H"], r["fp8"], r["rows"]), "fused_us",
                  "add_rmsnorm --rule", f"{'H':>6} {'out':>6} {'rows':>6}")
    compare_rules(out, "swd", ("default", "cluster2"), lambda r: (r["U"], r["M"]), "us",
                  "swiglu_fp8 dynamic --row-rule (target <= 4 µs at 1-32 rows)", f"{'U':>6} {'rows':>6}")
    gated_up_fp8(out)
    fused_mlp(out)
