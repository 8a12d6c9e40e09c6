#!/usr/bin/env bash
# Session 16, call 6 (issue 17): main (e43000a's kernels) in the C++ bench — decode-sized calls (1 / 8 / 32
# rows, CUDA graphs of 20 calls) of add_rmsnorm (H = 4096 / 8192 / 16384) and swiglu (U = 14336 / 28672,
# both layouts), every output, against the issue's <= 4 µs; and add_rmsnorm at H = 4096 from 1536 rows
# (the wide shape since 653c8f2). Two runs each, one process each. Builds the CLI on the device (no tests).
# From the repo root, carrying the five scripts/gpu-check .deps paths:
#   bash results/gpu/session16_h100/call6.sh   (writes $OUT/call6.tgz)
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=/tmp/c6; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$O/gpu.txt"
BLOCKFUSE_CUDA_ARCHS=90 CMAKE_ARGS="-DBLOCKFUSE_BUILD_TESTS=OFF" JOBS=16 scripts/build build-c6 > "$O/build.log" 2>&1
el "build rc $?"
X=build-c6/bench/blockfuse
for run in 1 2; do
  timeout 120 $X bench add-rmsnorm --rows 1,8,32 --hidden 4096,8192,16384 --fp8 all --json "$O/arn_small_$run.json" > "$O/arn_small_$run.log" 2>&1
  el "arn small $run rc $?"
  for lay in stacked interleaved; do
    timeout 120 $X bench swiglu --rows 1,8,32 --hidden 14336,28672 --layout $lay --json "$O/sw_small_${lay}_$run.json" > "$O/sw_small_${lay}_$run.log" 2>&1
    el "swiglu small $lay $run rc $?"
  done
  timeout 120 $X bench add-rmsnorm --rows 1536,2048,8192,32768 --hidden 4096 --fp8 all --json "$O/arn_h4096_$run.json" > "$O/arn_h4096_$run.log" 2>&1
  el "arn h4096 $run rc $?"
done
python3 - "$O" <<'PY' | tee "$O/table.txt"
import glob, json, os, sys
o = sys.argv[1]
def load(pat):
    t = {}
    for f in sorted(glob.glob(os.path.join(o, pat))):
        for r in json.load(open(f))["rows"]:
            yield f, r
print("add_rmsnorm, 1-32 rows, µs (two runs: min-max), C++ bench in CUDA graphs; over 4 µs marked *")
t = {}
for f, r in load("arn_small_[12].json"):
    t.setdefault((r.get("H"), r.get("rows"), r.get("fp8")), []).append(r.get("fused_us", r.get("us")))
for k in sorted(t, key=str):
    v = [x for x in t[k] if x is not None]
    if v:
        print(f"  H={k[0]} rows={k[1]} {k[2]:8} {min(v):6.2f}-{max(v):6.2f}" + (" *" if min(v) > 4 else ""))
print("swiglu, 1-32 rows, µs (two runs: min-max); over 4 µs marked *")
t = {}
for f, r in load("sw_small_*_[12].json"):
    lay = "interleaved" if "interleaved" in f else "stacked"
    t.setdefault((r.get("U", r.get("u")), r.get("M"), r.get("out"), lay), []).append(r.get("fused_us", r.get("us")))
for k in sorted(t, key=str):
    v = [x for x in t[k] if x is not None]
    if v:
        print(f"  U={k[0]} rows={k[1]} {str(k[2]):12} {k[3]:11} {min(v):6.2f}-{max(v):6.2f}" + (" *" if min(v) > 4 else ""))
print("add_rmsnorm H = 4096, % of copy (two runs: min-max)")
t = {}
for f, r in load("arn_h4096_[12].json"):
    t.setdefault((r.get("rows"), r.get("fp8"), r.get("kernel")), []).append(100 * r.get("fused_frac_of_copy", 0))
for k in sorted(t, key=str):
    print(f"  rows={k[0]} {k[1]:8} {k[2]:12} {min(t[k]):5.1f}-{max(t[k]):5.1f}")
PY
tar czf "$OUT/call6.tgz" -C "$O" .
