#!/usr/bin/env bash
# Session 12 (H100, issue 14), after exp2.sh: split launches of the fused MLP's union lists (params.h:
# a short list's 16-neuron groups shared by 2-CTA clusters, each CTA reading half of K). One device
# call from the repo root, carrying the five .deps folders of scripts/gpu-check:
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session12_h100/exp3.sh; tar czf $O/exp3.tgz -C /tmp/o .
# Builds, runs the fused-MLP GPU tests, memcheck and racecheck of its sanitizer set, then times the
# union lists under the split rules auto / never / always (and forced 16-neuron blocks) beside dense
# in one process.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/exp3}; mkdir -p "$O"
B=${BUILD_DIR:-build-gpu}
CLI=$B/bench/blockfuse
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
BLOCKFUSE_CUDA_ARCHS=90 scripts/build "$B" > "$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
el built
"$B/tests/blockfuse_cpu_tests" --gtest_filter='FusedMlp*' > "$O/cpu_tests.log" 2>&1
el "cpu tests rc $? ($(grep -c '^\[       OK' "$O/cpu_tests.log") ok)"
"$B/tests/blockfuse_gpu_tests" --gtest_filter='*FusedMlp*:*Router*' > "$O/gpu_tests.log" 2>&1
el "gpu tests rc $? ($(grep -c '^\[       OK' "$O/gpu_tests.log") ok, $(grep -c '^\[  FAILED' "$O/gpu_tests.log") failed lines)"
grep -B2 -A12 "Failure" "$O/gpu_tests.log" | head -40
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool "$B/tests/blockfuse_gpu_tests" --gtest_filter='FusedMlpSanitizer*' > "$O/$tool.log" 2>&1
  el "$tool rc $? ($(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' "$O/$tool.log"))"
done
timeout 300 "$CLI" bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,4,8 --sparsity 50,75,90,95 --sparse-nb 0,16 \
  --split auto,never,always --json "$O/fmlp_split.json" > "$O/fmlp_split.log" 2>&1
el "bench rc $? ($(grep -c 'VERIFY FAILED' "$O/fmlp_split.log") verify failures)"
python3 - "$O" <<'PY'
import json, os, sys
o = sys.argv[1]
rows = json.load(open(os.path.join(o, "fmlp_split.json")))["rows"]
t, dense = {}, {}
for r in rows:
    if r["variant"] == "dense": dense[(r["shape"], r["m"])] = r["us"]
    if not r["variant"].startswith("sparse-"): continue
    p = r["variant"].split("-")
    col = "auto" if len(p) == 2 else ("nb16" if p[2] == "nb16" else p[3])
    t.setdefault((r["shape"], r["m"], int(p[1])), {})[col] = (r["us"], r["neurons_per_block"], r["verified"])
print("union lists, µs (x dense of the same run); auto = default rules (split where <= 1 group per SM), never, always, nb16 = forced unsplit 16")
print(f"{'shape':11} {'M':>2} {'sp':>3} {'dense':>7} | {'auto':>15} | {'never':>15} | {'always':>15} | {'nb16':>15}")
for k in sorted(t):
    d = dense.get((k[0], k[1]), 0)
    cell = lambda c: f"{t[k][c][0]:6.1f} ({d / t[k][c][0]:4.2f}x){'' if t[k][c][2] else '!'}" if c in t[k] else f"{'-':>15}"
    print(f"{k[0]:11} {k[1]:2d} {k[2]:3d} {d:7.1f} | {cell('auto')} | {cell('never')} | {cell('always')} | {cell('nb16')}")
PY
