#!/usr/bin/env bash
# Session 13, issue 17: swiglu_fp8's cluster row kernel with the per-warp push exchange
# (src/common/cluster.cuh) and the opt-in 8-CTA rule, against main's pull exchange, on one machine.
# Builds the working tree, runs the swiglu CPU/GPU tests and the sanitizer set, keeps its CLI, then
# reverts the change (exp1_change.patch: main's sources), rebuilds the CLI, and times both binaries interleaved
# (base, new, base, new) at the decode-sized dynamic-FP8 points. Run from the repo root, carrying
# the .deps paths, as
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session13_h100/exp1.sh; tar czf $O/exp1.tgz -C /tmp/o .
set -uo pipefail
O=${OUT:-/tmp/exp1}; mkdir -p "$O"
B=build-gpu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
BLOCKFUSE_CUDA_ARCHS=90 scripts/build "$B" >> "$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
el "built (new)"
cp "$B/bench/blockfuse" /tmp/cli_new
"$B/tests/blockfuse_cpu_tests" --gtest_filter='Swiglu*' > "$O/cpu.log" 2>&1; el "cpu tests rc $? ($(grep -c '^\[       OK' "$O/cpu.log") ok)"
"$B/tests/blockfuse_gpu_tests" --gtest_filter='*Swiglu*' > "$O/gpu.log" 2>&1; el "gpu tests rc $? ($(grep -c '^\[       OK' "$O/gpu.log") ok, $(grep -c '^\[  FAILED' "$O/gpu.log") failed lines)"
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool "$B/tests/blockfuse_gpu_tests" --gtest_filter='SwigluFp8Sanitizer*' > "$O/$tool.log" 2>&1
  el "$tool rc $? ($(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' "$O/$tool.log"))"
done
P=results/gpu/session13_h100/exp1_change.patch  # git diff of the tracked files changed (the new header stays)
git apply -R "$P" && cmake --build "$B" --target blockfuse_cli -j16 >> "$O/build.log" 2>&1 && cp "$B/bench/blockfuse" /tmp/cli_base; git apply "$P"
el "built (base)"
SW="bench swiglu --out fp8-dynamic --hidden 14336,16384,28672 --rows 1,8,32,256"
for run in 1 2; do
  for rule in default cluster2 cluster4; do
    /tmp/cli_base $SW --row-rule $rule --json "$O/base_${rule}_$run.json" > "$O/base_${rule}_$run.log" 2>&1
  done
  for rule in default cluster2 cluster4 cluster8; do
    /tmp/cli_new $SW --row-rule $rule --json "$O/new_${rule}_$run.json" > "$O/new_${rule}_$run.log" 2>&1
  done
  el "run $run"
done
python3 - "$O" <<'PY'
import json, os, sys, glob
o = sys.argv[1]; t = {}
for f in glob.glob(os.path.join(o, "*_*_[12].json")):
    side, rule, run = os.path.basename(f)[:-5].split("_")
    for r in json.load(open(f))["rows"]:
        t.setdefault((r["U"], r["M"]), {}).setdefault(f"{side}/{rule}", []).append(r["us"])
cols = ("base/default", "new/default", "base/cluster2", "new/cluster2", "base/cluster4", "new/cluster4", "new/cluster8")
print("swiglu_fp8 dynamic, bf16 in, µs (two runs: min-max); base = main's pull exchange, new = push")
print(f"{'U':>6} {'M':>4} " + " ".join(f"{c:>15}" for c in cols))
for k in sorted(t):
    print(f"{k[0]:6d} {k[1]:4d} " + " ".join(f"{min(t[k][c]):6.2f}-{max(t[k][c]):6.2f}" if c in t[k] else f"{'-':>15}" for c in cols))
PY
