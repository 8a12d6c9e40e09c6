#!/usr/bin/env bash
# Session 13, issue 17: the per-warp push exchange (src/common/cluster.cuh) in add_rmsnorm's cluster
# kernel too, and swiglu_fp8's kAuto taking the 8-CTA cluster at 1-32 rows; against main, on one
# machine. Builds the working tree, runs the add_rmsnorm and swiglu CPU/GPU tests and their sanitizer
# sets, keeps its CLI, reverts the change (exp2_change.patch: main's sources), rebuilds the CLI, and
# times both interleaved (base, new, base, new). Run from the repo root, carrying the .deps paths:
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session13_h100/exp2.sh; tar czf $O/exp2.tgz -C /tmp/o .
set -uo pipefail
O=${OUT:-/tmp/exp2}; mkdir -p "$O"
B=build-gpu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
BLOCKFUSE_CUDA_ARCHS=90 scripts/build "$B" >> "$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
el "built (new)"
cp "$B/bench/blockfuse" /tmp/cli_new
"$B/tests/blockfuse_cpu_tests" --gtest_filter='Swiglu*:AddRmsNorm*' > "$O/cpu.log" 2>&1; el "cpu tests rc $? ($(grep -c '^\[       OK' "$O/cpu.log") ok)"
"$B/tests/blockfuse_gpu_tests" --gtest_filter='*AddRmsNorm*:*RmsNorm*:SwigluFp8Gpu*' > "$O/gpu.log" 2>&1
el "gpu tests rc $? ($(grep -c '^\[       OK' "$O/gpu.log") ok, $(grep -c '^\[  FAILED' "$O/gpu.log") failed lines)"
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool "$B/tests/blockfuse_gpu_tests" --gtest_filter='AddRmsNormSanitizer*:SwigluFp8Sanitizer*' > "$O/$tool.log" 2>&1
  el "$tool rc $? ($(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' "$O/$tool.log"))"
done
P=results/gpu/session13_h100/exp2_change.patch
git apply -R "$P" && cmake --build "$B" --target blockfuse_cli -j16 >> "$O/build.log" 2>&1 && cp "$B/bench/blockfuse" /tmp/cli_base; git apply "$P"
el "built (base)"
ARN="bench add-rmsnorm --hidden 8192,16384,32768 --rows 1,8,32 --fp8 all"
SW="bench swiglu --out fp8-dynamic --hidden 8200,14336,16384,28672,65536 --rows 1,8,32"
for run in 1 2; do
  for side in base new; do
    /tmp/cli_$side $ARN --json "$O/arn_${side}_default_$run.json" > "$O/arn_${side}_default_$run.log" 2>&1
    /tmp/cli_$side $ARN --preload-chunks 0 --json "$O/arn_${side}_preload0_$run.json" > "$O/arn_${side}_preload0_$run.log" 2>&1
    /tmp/cli_$side $SW --json "$O/swd_${side}_default_$run.json" > "$O/swd_${side}_default_$run.log" 2>&1
  done
  /tmp/cli_new $SW --row-rule two --json "$O/swd_new_two_$run.json" > "$O/swd_new_two_$run.log" 2>&1
  /tmp/cli_new $SW --row-rule four --json "$O/swd_new_four_$run.json" > "$O/swd_new_four_$run.log" 2>&1
  el "run $run"
done
python3 - "$O" <<'PY'
import json, os, sys, glob
o = sys.argv[1]
t = {}
for f in glob.glob(os.path.join(o, "arn_*_[12].json")):
    _, side, mode, run = os.path.basename(f)[:-5].split("_")
    for r in json.load(open(f))["rows"]:
        key = (r.get("H", r.get("h")), r.get("M", r.get("rows")), r.get("fp8", r.get("out")))
        t.setdefault(key, {}).setdefault(f"{side}/{mode}", []).append((r.get("us", r.get("fused_us")), r.get("kernel", "")))
cols = ("base/default", "new/default", "base/preload0", "new/preload0")
print("add_rmsnorm, µs (two runs: min-max); base = main's pull exchange, new = push; preload0 = the cluster kernel wherever it pays")
for k in sorted(t, key=str):
    print(f"{str(k):28} " + " ".join(f"{min(x[0] for x in t[k][c]):6.2f}-{max(x[0] for x in t[k][c]):6.2f}" if c in t[k] else f"{'-':>13}" for c in cols)
          + "   " + " | ".join(t[k][c][0][1] for c in ("new/default", "new/preload0") if c in t[k]))
t = {}
for f in glob.glob(os.path.join(o, "swd_*_[12].json")):
    _, side, rule, run = os.path.basename(f)[:-5].split("_")
    for r in json.load(open(f))["rows"]:
        t.setdefault((r["U"], r["M"]), {}).setdefault(f"{side}/{rule}", []).append((r["us"], r["kernel"]))
cols = ("base/default", "new/default", "new/two", "new/four")
print("swiglu_fp8 dynamic, µs (two runs: min-max)")
for k in sorted(t):
    print(f"{k[0]:6d} {k[1]:3d} " + " ".join(f"{min(x[0] for x in t[k][c]):6.2f}-{max(x[0] for x in t[k][c]):6.2f}" if c in t[k] else f"{'-':>13}" for c in cols)
          + "   " + t[k]["new/default"][0][1])
PY
