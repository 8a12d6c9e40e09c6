#!/usr/bin/env bash
# Session 8, call exp3 (H100, issue 17): exp2 again for the new kernels only (exp2's new build failed;
# its base columns stand, the kernels' timings reproduce to 1 % between calls, exp1 vs exp2):
#  A. 16-bit and static FP8, U = 14336 / 28672, 1-32768 rows: new (default grid) and new with the
#     one-chunk-per-thread grid at every size;
#  B. dynamic FP8 (the row kernel), U = 14336 / 16384 / 28672.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/exp3}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=build-ncu/bench/blockfuse
BLOCKFUSE_CUDA_ARCHS=90 CMAKE_ARGS="-DBLOCKFUSE_SM90=OFF -DBLOCKFUSE_BUILD_TESTS=OFF" JOBS=16 scripts/build build-ncu > "$O/build_new.log" 2>&1
rc=$?; el "new build rc $rc"; [ $rc = 0 ] || { grep -m5 error "$O/build_new.log"; exit 1; }
R=1,8,32,64,256,1024,2048,8192,32768
for u in 14336 28672; do
  timeout 90 $B bench swiglu --hidden $u --rows $R --out 16-bit,fp8-static --reps 20 --no-ceilings \
    --json "$O/A_${u}_new.json" > "$O/A_${u}_new.log" 2>&1; el "A $u new $?"
  timeout 90 $B bench swiglu --hidden $u --rows $R --out 16-bit,fp8-static --reps 20 --no-ceilings \
    --small-chunks-per-sm 1000000000 --json "$O/A_${u}_newsmall.json" > "$O/A_${u}_newsmall.log" 2>&1; el "A $u newsmall $?"
done
for u in 14336 16384 28672; do
  timeout 90 $B bench swiglu --hidden $u --rows 1,8,32,256,2048,8192 --out fp8-dynamic --reps 20 --no-ceilings \
    --json "$O/B_${u}_new.json" > "$O/B_${u}_new.log" 2>&1; el "B $u new $?"
done
python3 results/gpu/session8_h100/exp2_table.py "$O"
cd "$O" && tar czf exp3.tgz *.json *.log && rm -f *.json *.log
