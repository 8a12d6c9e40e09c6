#!/usr/bin/env bash
# Branch swiglu3: swiglu_fp8's dynamic row kernel staged in shared memory, compiled for 3 blocks per SM
# (--row-rule four3) beside the current `four` (2 blocks per SM: 44 registers and the carveout), in one
# call on the H100: the swiglu GPU tests (every rule), then the two rules at U = 14336 / 16384 and
# ncu's occupancy and DRAM figures at U = 16384 x 8192 rows. About 3 minutes.
# Device tool: run(command="OUT=$OUT results/gpu/memory_bound_h100/swiglu3/run.sh", timeout_s=300,
#   carry=[the .deps include folders of scripts/gpu-check's header])
set -uo pipefail
cd "$(dirname "$0")/../../../.."
O=${OUT:-/tmp/swiglu3_out}
mkdir -p "$O"
B=build-dev
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 > "$O/build.log" 2>&1
timeout 200 cmake --build $B -j16 --target blockfuse_cli blockfuse_gpu_tests blockfuse_cpu_tests >> "$O/build.log" 2>&1
echo "build rc $?"
$B/tests/blockfuse_cpu_tests --gtest_filter='SwigluRowConfig*' > "$O/cpu_tests.log" 2>&1; echo "cpu tests rc $?"
timeout 90 $B/tests/blockfuse_gpu_tests --gtest_filter='*EveryRowRule*:*SharedStagedRowKernel*' > "$O/gtest.log" 2>&1
echo "gpu tests rc $? ($(grep -c '^\[  FAILED' "$O/gtest.log") failed lines)"
for r in four four3; do
  timeout 30 $B/bench/blockfuse bench swiglu --hidden 14336,16384 --rows 256,1024,2048,8192 --out fp8-dynamic \
    --row-rule $r --reps 20 --warmup 3 --json "$O/swiglu_rule_$r.json" > "$O/swiglu_rule_$r.log" 2>&1
  echo "bench $r rc $?"
done
M=dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem
for r in four four3; do
  timeout 25 ncu --metrics $M -k regex:swiglu_fp8_rowwise --launch-skip 2 --launch-count 1 $B/bench/blockfuse bench swiglu \
    --hidden 16384 --rows 8192 --out fp8-dynamic --row-rule $r --reps 2 --warmup 1 > "$O/ncu_$r.txt" 2>&1
done
(cd "$O" && tar czf /tmp/swiglu3.tgz . && find . -maxdepth 1 -type f -delete && mv /tmp/swiglu3.tgz .)
