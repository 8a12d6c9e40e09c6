#!/usr/bin/env bash
# Session 4, device call 1 (H100), over the `integrate` tree (main + tp, decode-mlp, swiglu3, fp8dedupe,
# attn90, review-mends): first GPU run of the sm90a attention kernel (tests under timeout, then sm80 vs
# sm90 bench), swiglu3's rule `four3` vs `four`, and the batch-1 graphs decode with decode-mlp's path.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/run1_out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=build90
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=ON \
  -DBLOCKFUSE_BUILD_PYTHON=ON "-DCMAKE_CUDA_FLAGS=-Xptxas=-warn-spills,-warn-lmem-usage" > "$O/build.log" 2>&1
timeout 260 cmake --build $B -j16 --target blockfuse_gpu_tests blockfuse_cpu_tests blockfuse_cli blockfuse_C >> "$O/build.log" 2>&1
el "build rc $?"; grep -i "spill\|lmem\|error" "$O/build.log" | grep -v "0 bytes spill" | head -8
$B/tests/blockfuse_cpu_tests --gtest_filter='AttentionLayoutSm90*:AttentionArgs*:SwigluRowConfig*' > "$O/cpu.log" 2>&1; el "cpu tests rc $?"
export BLOCKFUSE_TEST_SM90=1
timeout 45 $B/tests/blockfuse_gpu_tests --gtest_filter='AttentionGpuSm90Small*' > "$O/sm90_small.log" 2>&1; rc=$?
el "sm90 small rc $rc"; grep -E "^\[  (FAILED|     OK|  PASSED)" "$O/sm90_small.log" | head -12
if [ $rc = 0 ]; then
  timeout 90 $B/tests/blockfuse_gpu_tests --gtest_filter='*Sm90*' > "$O/sm90_all.log" 2>&1; el "sm90 all rc $?"
  grep -E "^\[  FAILED|PASSED" "$O/sm90_all.log" | head -8
  for k in sm90 sm80; do
    timeout 60 $B/bench/blockfuse bench attention --d 128 --causal 0 --s 1024,4096,16384 --hkv 32,8 --kernel $k \
      --reps 10 --json "$O/attn_$k.json" > "$O/attn_$k.log" 2>&1; el "attn bench $k rc $?"; tail -8 "$O/attn_$k.log"
  done
elif [ $rc = 124 ]; then
  timeout 20 $B/tests/blockfuse_gpu_tests --gtest_filter='AttentionGpuSm90Small*/0' > "$O/sm90_case0.log" 2>&1; el "case0 rc $?"
fi
timeout 60 $B/tests/blockfuse_gpu_tests --gtest_filter='*EveryRowRule*:*SharedStagedRowKernel*' > "$O/swiglu_gtest.log" 2>&1
el "swiglu gtests rc $?"
for r in four four3; do
  timeout 30 $B/bench/blockfuse bench swiglu --hidden 14336,16384 --rows 256,1024,2048,8192 --out fp8-dynamic \
    --row-rule $r --reps 20 --warmup 3 --json "$O/swiglu_rule_$r.json" > "$O/swiglu_rule_$r.log" 2>&1; el "swiglu $r rc $?"
done
SO=$(find $B -maxdepth 2 -name '_C.so' | head -1)
left=$(( 560 - ($(date +%s) - T0) ))
if [ $left -gt 60 ]; then
  BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python" timeout $left python3 -m blockfuse.bench model --models llama3-8b \
    --layers 8 --prefill "" --batches "" --steps 16 --graphs --json "$O/model_graphs.json" > "$O/model.log" 2>&1
  el "model rc $?"; grep "^|" "$O/model.log" | tail -3
fi
(cd "$O" && tar czf /tmp/run1.tgz . && find . -maxdepth 1 -type f -delete && mv /tmp/run1.tgz .)
