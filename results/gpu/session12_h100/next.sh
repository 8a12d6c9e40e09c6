#!/usr/bin/env bash
# The next session's device plan (written in session 12, which had spent its device time; nothing
# here has run on a GPU). From the repo root, carrying the five .deps paths of scripts/deps; each step
# is one device call applying its patch to the device's copy of main (the tree here stays main),
# writing logs and JSON under $OUT and printing its table last. Run each step as
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session12_h100/next.sh STEP; tar czf $O/STEP.tgz -C /tmp/o .
#   split4 (~4 min bare; issue 14): pending/fused_mlp_split_four.patch — launches of clusters of 4,
#     the device choosing 1, 2 or 4 CTAs per 16-neuron group (params.h: split_ways). Builds, runs the
#     fused-MLP CPU and GPU tests (SplitRulesMatchTheReference over the five rules, the sanitizer set
#     under memcheck and racecheck), then times the union lists under auto (clusters of 2, today),
#     never, auto4 and always4 in one process. Land it (rule kAuto4 as the default, or split_ways'
#     bound moved) where auto4 beats auto at the 90 / 95 % rows without losing elsewhere; then
#     scripts/gpu-check --defer-python and --python-only.
#   sched3 (~6 min bare, chain after split4; issue 16): ../session11_h100/pending/gated_up_scheduler_override.patch,
#     then three interleaved runs (20 reps each) of the launcher's order and the four that came out
#     best somewhere in session 12's one-run sweep (sched_table.txt), at the FP8 points furthest below
#     cuBLASLt. An order is worth a rule only where it wins in all three runs by more than their spread.
#   prefetch (~5 min bare; issue 14; written after both steps above had run): pending/fused_mlp_down_prefetch.patch —
#     a warp's first down round copied into shared memory (cp.async, 64 KB a block) before phase 1,
#     at M <= 8 for blocks of fewer than 4 groups. Times the fused-MLP rows on main first, then
#     applies the patch, rebuilds (fused_mlp.cu only), runs the fused-MLP GPU tests and the sanitizer
#     set under memcheck and racecheck, and times the same rows again on the same machine. Land it
#     where the union rows at 75-95 % are faster and dense / forced-64 rows no slower (>2 % counts).
set -uo pipefail
cd "$(dirname "$0")/../../.."
P=results/gpu/session12_h100/pending
P11=results/gpu/session11_h100/pending
O=${OUT:-/tmp/next}; mkdir -p "$O"
B=${BUILD_DIR:-build-gpu}
CLI=$B/bench/blockfuse
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
only() {  # the device's copy with exactly these patches applied (a chained call finds the last step's)
  for q in "$P/fused_mlp_split_four.patch" "$P/fused_mlp_down_prefetch.patch" "$P11/gated_up_scheduler_override.patch"; do
    git apply -R --check "$q" 2>/dev/null && git apply -R "$q"
  done
  for q in "$@"; do git apply "$q" || { echo "$q does not apply"; exit 1; }; done
}
build() { BLOCKFUSE_CUDA_ARCHS=90 scripts/build "$B" >> "$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }; el "built ($1)"; }
gtest() {
  "$B/tests/$1" --gtest_filter="$2" > "$O/$3" 2>&1
  el "$1 $2: rc $? ($(grep -c '^\[       OK' "$O/$3") ok, $(grep -c '^\[  FAILED' "$O/$3") failed lines)"
}
case "${1:-}" in
  split4)
    only "$P/fused_mlp_split_four.patch"
    build "split-four patch"
    gtest blockfuse_cpu_tests 'FusedMlp*' split4_cpu.log
    gtest blockfuse_gpu_tests '*FusedMlp*:*Router*' split4_gpu.log
    for tool in memcheck racecheck; do
      compute-sanitizer --tool $tool "$B/tests/blockfuse_gpu_tests" --gtest_filter='FusedMlpSanitizer*' > "$O/split4_$tool.log" 2>&1
      el "$tool rc $? ($(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' "$O/split4_$tool.log"))"
    done
    timeout 300 "$CLI" bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,4,8 --sparsity 75,90,95 \
      --split auto,never,auto4,always4 --json "$O/fmlp_split4.json" > "$O/fmlp_split4.log" 2>&1
    el "bench rc $? ($(grep -c 'VERIFY FAILED' "$O/fmlp_split4.log") verify failures)"
    python3 - "$O" <<'PY'
import json, os, sys
rows = json.load(open(os.path.join(sys.argv[1], "fmlp_split4.json")))["rows"]
t, dense = {}, {}
for r in rows:
    if r["variant"] == "dense": dense[(r["shape"], r["m"])] = r["us"]
    if not r["variant"].startswith("sparse-"): continue
    p = r["variant"].split("-")
    t.setdefault((r["shape"], r["m"], int(p[1])), {})["auto" if len(p) == 2 else p[3]] = (r["us"], r["verified"])
cols = ("auto", "never", "auto4", "always4")
print("union lists, µs (x dense of the same run); auto = clusters of 2 (today's default)")
print(f"{'shape':11} {'M':>2} {'sp':>3} {'dense':>7} | " + " | ".join(f"{c:>15}" for c in cols))
for k in sorted(t):
    d = dense.get((k[0], k[1]), 0)
    cell = lambda c: f"{t[k][c][0]:6.1f} ({d / t[k][c][0]:5.2f}x){'' if t[k][c][1] else '!'}" if c in t[k] else f"{'-':>15}"
    print(f"{k[0]:11} {k[1]:2d} {k[2]:3d} {d:7.1f} | " + " | ".join(cell(c) for c in cols))
PY
    ;;
  sched3)
    only "$P11/gated_up_scheduler_override.patch"
    build "scheduler patch"
    gtest blockfuse_gpu_tests '*SchedulerOverride*' sched3_gpu.log
    mkdir -p "$O/sched3"
    for run in 1 2 3; do for o in auto_0 n_0 m_4 n_8 auto_8; do
      timeout 60 "$CLI" bench gated-up-fp8 --models 8b,70b --tokens 4096,8192,16384 --reps 20 --warmup 3 --no-ceilings \
        --raster "${o%_*}" --swizzle "${o#*_}" --json "$O/sched3/${o}_$run.json" > "$O/sched3/${o}_$run.log" 2>&1
    done; el "run $run"; done
    python3 - "$O/sched3" <<'PY'
import json, os, sys, glob
t = {}
for f in glob.glob(os.path.join(sys.argv[1], "*.json")):
    r, sw, run = os.path.basename(f)[:-5].split("_")
    for row in json.load(open(f))["rows"]:
        t.setdefault((row["model"], row["M"]), {}).setdefault(f"{r}/{sw}", []).append(row["c_over_a"])
cols = ("auto/0", "n/0", "m/4", "n/8", "auto/8")
print("FP8 fused / cuBLASLt FP8 alone, three runs each (min-max); auto/0 = the launcher's order")
for k in sorted(t):
    print(f"{k[0]:15} {k[1]:6d} " + "  ".join(f"{c}: {min(t[k][c]):.3f}-{max(t[k][c]):.3f}" for c in cols if c in t[k]))
PY
    ;;
  prefetch)
    FMP="bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,4,8 --sparsity 50,75,90,95 --nb 0,16,32"
    only
    build "main"
    timeout 200 "$CLI" $FMP --json "$O/fmlp_main.json" > "$O/fmlp_main.log" 2>&1; el "main rows rc $?"
    only "$P/fused_mlp_down_prefetch.patch"
    build "prefetch patch"
    gtest blockfuse_gpu_tests '*FusedMlp*:*Router*' prefetch_gpu.log
    for tool in memcheck racecheck; do
      compute-sanitizer --tool $tool "$B/tests/blockfuse_gpu_tests" --gtest_filter='FusedMlpSanitizer*' > "$O/prefetch_$tool.log" 2>&1
      el "$tool rc $? ($(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' "$O/prefetch_$tool.log"))"
    done
    timeout 200 "$CLI" $FMP --json "$O/fmlp_prefetch.json" > "$O/fmlp_prefetch.log" 2>&1
    el "prefetch rows rc $? ($(grep -c 'VERIFY FAILED' "$O/fmlp_prefetch.log") verify failures)"
    python3 - "$O" <<'PY'
import json, os, sys
o = sys.argv[1]
def rows(f): return {(r["shape"], r["m"], r["variant"], r["neurons_per_block"]): r["us"] for r in json.load(open(os.path.join(o, f)))["rows"]}
a, b = rows("fmlp_main.json"), rows("fmlp_prefetch.json")
print("fused MLP, µs: main -> prefetch patch (same machine, back to back)")
for k in sorted(a):
    if k in b: print(f"{k[0]:11} M={k[1]:2d} {k[2]:22} nb {k[3]:2d}  {a[k]:8.1f} -> {b[k]:8.1f}  ({a[k] / b[k]:.3f}x)")
PY
    ;;
  *) sed -n '2,/^set /p' "$0" | grep '^#'; exit 2 ;;
esac
