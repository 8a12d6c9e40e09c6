#!/usr/bin/env bash
# Session 8, call exp2 (H100, issue 17): swiglu with gated_act_fast and 32-bit chunk indexing (the
# working tree) against the committed kernels (.wt/base: kernels.cuh, activation.cuh of c7106cc), one
# call, the C++ bench alone:
#  (exp2 itself: the new build failed — __fdividef in a header the host compiler also reads — so its "new"
#  columns are the base kernels; "newsmall" is the base kernels with the one-chunk grid everywhere.)
#  A. 16-bit and static FP8, U = 14336 / 28672, 1-32768 rows: base, new (default grid), new with the
#     one-chunk-per-thread grid at every size (--small-chunks-per-sm 1000000000);
#  B. dynamic FP8 (the row kernel), U = 14336 / 16384 / 28672: base, new;
#  C. ncu of add_rmsnorm at 256 rows of H = 4096 (exp1 skipped every launch).
# Carry: the five .deps folders of scripts/gpu-check and .wt/base.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/exp2}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=build-ncu/bench/blockfuse
cp src/swiglu/kernels.cuh /tmp/new_k.cuh; cp src/common/activation.cuh /tmp/new_a.cuh
cp .wt/base/kernels.cuh src/swiglu/kernels.cuh; cp .wt/base/activation.cuh src/common/activation.cuh
BLOCKFUSE_CUDA_ARCHS=90 CMAKE_ARGS="-DBLOCKFUSE_SM90=OFF -DBLOCKFUSE_BUILD_TESTS=OFF" JOBS=16 scripts/build build-ncu > "$O/build_base.log" 2>&1
el "base build rc $?"; cp $B /tmp/bf_base
cp /tmp/new_k.cuh src/swiglu/kernels.cuh; cp /tmp/new_a.cuh src/common/activation.cuh
cmake --build build-ncu -j16 --target blockfuse_cli > "$O/build_new.log" 2>&1; el "new build rc $?"; cp $B /tmp/bf_new
R=1,8,32,64,256,1024,2048,8192,32768
for u in 14336 28672; do
  for v in base new; do
    timeout 90 /tmp/bf_$v bench swiglu --hidden $u --rows $R --out 16-bit,fp8-static --reps 20 --no-ceilings \
      --json "$O/A_${u}_$v.json" > "$O/A_${u}_$v.log" 2>&1; el "A $u $v $?"
  done
  timeout 90 /tmp/bf_new bench swiglu --hidden $u --rows $R --out 16-bit,fp8-static --reps 20 --no-ceilings \
    --small-chunks-per-sm 1000000000 --json "$O/A_${u}_newsmall.json" > "$O/A_${u}_newsmall.log" 2>&1; el "A $u newsmall $?"
done
for u in 14336 16384 28672; do for v in base new; do
  timeout 90 /tmp/bf_$v bench swiglu --hidden $u --rows 1,8,32,256,2048,8192 --out fp8-dynamic --reps 20 --no-ceilings \
    --json "$O/B_${u}_$v.json" > "$O/B_${u}_$v.log" 2>&1; el "B $u $v $?"
done; done
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size,launch__registers_per_thread
timeout 60 ncu --metrics $M --section WarpStateStats -k regex:add_rmsnorm --launch-skip 1 --launch-count 1 /tmp/bf_base bench add-rmsnorm \
  --hidden 4096 --rows 256 --fp8 none --graph-rows 0 --reps 3 --warmup 2 --no-ceilings > "$O/ncu_arn_256.txt" 2>&1; el "ncu arn $?"
python3 results/gpu/session8_h100/exp2_table.py "$O"
cd "$O" && tar czf exp2.tgz *.json *.log *.txt && rm -f *.json *.log *.txt
