#!/usr/bin/env bash
# Session 8, call exp1 (H100, issue 17): the C++ bench alone (no tests, no sm90a GEMMs), then
#  1. add-rmsnorm at 64-512 rows (the rows the session-7 preload rule newly covers): shape rule x preload;
#  2. swiglu 16-bit at 8-1024 rows: the elementwise grid's small/large threshold (--small-chunks-per-sm);
#  3. ncu at 256 rows: blockfuse's add_rmsnorm (H = 4096) and swiglu (U = 14336) beside torch.compile's
#     kernels for the same op (the two points where compile is 14-18 % faster in session 7's run18).
# Carry: .deps/cutlass/cutlass_library/source/include, .../tools/util/include, .deps/googletest,
# .deps/cli11/include, .deps/nlohmann/include (scripts/deps checks for them).
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/exp1}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
BLOCKFUSE_CUDA_ARCHS=90 CMAKE_ARGS="-DBLOCKFUSE_SM90=OFF -DBLOCKFUSE_BUILD_TESTS=OFF" JOBS=16 scripts/build build-ncu > "$O/build.log" 2>&1
el "build rc $?"
B=build-ncu/bench/blockfuse
# 1. add-rmsnorm: rule x preload (0 = never preload, 1048576 = preload up to 2^20 chunks; the default
#    is kAuto with 2^18)
for h in 4096 8192 16384; do for rule in v4wide wide; do for pc in 0 1048576; do
  timeout 60 $B bench add-rmsnorm --hidden $h --rows 64,128,256,512,1024 --fp8 none --rule $rule --preload-chunks $pc \
    --graph-rows 1024 --reps 30 --no-ceilings --json "$O/arn_${h}_${rule}_${pc}.json" > "$O/arn_${h}_${rule}_${pc}.log" 2>&1
done; done; el "add-rmsnorm H=$h"; done
# 2. swiglu elementwise threshold
for u in 14336 28672; do for s in 0 256 512 1024 2048 1000000; do
  timeout 60 $B bench swiglu --hidden $u --rows 8,16,32,64,128,256,1024 --out 16-bit --small-chunks-per-sm $s \
    --reps 30 --no-ceilings --json "$O/sw_${u}_${s}.json" > "$O/sw_${u}_${s}.log" 2>&1
done; el "swiglu U=$u"; done
# 2b. two elementwise-kernel variants (variant.py, applied to this copy of the tree and rebuilt
#     incrementally): fastact (SiLU from __expf and __fdividef), then + idx32 (32-bit chunk indexing)
cp $B /tmp/bf_base
python3 results/gpu/session8_h100/variant.py fastact && cmake --build build-ncu -j16 --target blockfuse_cli > "$O/build_fast.log" 2>&1
el "fastact build rc $?"; cp $B /tmp/bf_fast
python3 results/gpu/session8_h100/variant.py idx32 && cmake --build build-ncu -j16 --target blockfuse_cli > "$O/build_fast32.log" 2>&1
el "idx32 build rc $?"; cp $B /tmp/bf_fast32
for u in 14336 28672; do for v in base fast fast32; do
  timeout 60 /tmp/bf_$v bench swiglu --hidden $u --rows 8,32,256,2048,8192 --out 16-bit,fp8-static --reps 30 \
    --no-ceilings --json "$O/swv_${u}_$v.json" > "$O/swv_${u}_$v.log" 2>&1
done; done; el "variants"
# 3. ncu at 256 rows
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size,launch__registers_per_thread
S="--section WarpStateStats --section Occupancy"
timeout 60 ncu --metrics $M $S -k regex:add_rmsnorm --launch-skip 5 --launch-count 1 /tmp/bf_base bench add-rmsnorm --hidden 4096 --rows 256 \
  --fp8 none --graph-rows 0 --reps 2 --warmup 2 --no-ceilings > "$O/ncu_bf_arn.txt" 2>&1; el "ncu bf arn $?"
for v in base fast32; do
  timeout 60 ncu --metrics $M $S -k regex:swiglu --launch-skip 5 --launch-count 1 /tmp/bf_$v bench swiglu --hidden 14336 --rows 256 \
    --out 16-bit --reps 2 --warmup 2 --no-ceilings > "$O/ncu_bf_sw_$v.txt" 2>&1; el "ncu bf sw $v $?"
done
timeout 120 ncu --metrics $M $S -k regex:triton --launch-skip 5 --launch-count 1 python3 results/gpu/session8_h100/ncu_compile_target.py \
  add-rmsnorm 4096 256 > "$O/ncu_compile_arn.txt" 2>&1; el "ncu compile arn $?"
timeout 120 ncu --metrics $M $S -k regex:triton --launch-skip 5 --launch-count 1 python3 results/gpu/session8_h100/ncu_compile_target.py \
  swiglu 14336 256 > "$O/ncu_compile_sw.txt" 2>&1; el "ncu compile sw $?"
python3 results/gpu/session8_h100/exp1_table.py "$O"
cd "$O" && tar czf exp1_logs.tgz *.log *.txt && rm -f *.log *.txt
