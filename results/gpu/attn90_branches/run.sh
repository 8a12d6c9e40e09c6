#!/usr/bin/env bash
# The first GPU run of the branches attn90-d256 and attn90-varlen (check out attn90-varlen, which
# holds both): the attention CPU and GPU tests (D = 256 and varlen on the sm90a kernel are new), the
# sanitizer set, then sm80 vs sm90 at D = 256 and through the varlen path at D = 128, and SDPA at
# D = 256 beside blockfuse's op. About 5 minutes on an H100.
# Device tool: run(command="OUT=$OUT results/gpu/attn90_branches/run.sh", timeout_s=600,
#   carry=[the .deps include folders of scripts/gpu-check's header])
# If the tests pass and the figures are at least sm80's: add D = 256 / varlen to
# attn::auto_uses_sm90 (src/attention/params.h, CPU test in test_attention_heuristic.cpp), then
# scripts/gpu-check, then merge.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/attn90_branches_out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=build90
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=ON \
  -DBLOCKFUSE_BUILD_PYTHON=ON "-DCMAKE_CUDA_FLAGS=-Xptxas=-warn-spills,-warn-lmem-usage" > "$O/build.log" 2>&1
timeout 300 cmake --build $B -j16 --target blockfuse_gpu_tests blockfuse_cpu_tests blockfuse_cli blockfuse_C >> "$O/build.log" 2>&1
el "build rc $?"; grep -i "error\|spill" "$O/build.log" | grep -v "0 bytes spill" | head -8
$B/tests/blockfuse_cpu_tests --gtest_filter='*ttention*' > "$O/cpu.log" 2>&1; el "cpu tests rc $?"
# A pipeline bug hangs rather than fails: the new sm90 tests first, under a short timeout.
timeout 60 $B/tests/blockfuse_gpu_tests --gtest_filter='*Sm90*Varlen*:*Sm90Small*D256*' > "$O/gtest_new.log" 2>&1
el "new sm90 tests rc $?"; grep -E "^\[  FAILED|PASSED" "$O/gtest_new.log" | head -12
timeout 200 $B/tests/blockfuse_gpu_tests --gtest_filter='*ttention*' > "$O/gtest_attention.log" 2>&1
el "attention gpu tests rc $?"; grep -E "^\[  FAILED|PASSED" "$O/gtest_attention.log" | head -12
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 $B/tests/blockfuse_gpu_tests \
  --gtest_filter='*AttentionSanitizer*' > "$O/sanitizer.log" 2>&1; el "memcheck rc $?"
timeout 90 $B/bench/blockfuse bench attention --d 256 --causal 0,1 --s 1024,4096,16384 --hkv 32,8 --reps 10 \
  --json "$O/attn_d256.json" > "$O/attn_d256.log" 2>&1; el "d256 rc $?"; grep -E "^256 " "$O/attn_d256.log"
timeout 60 $B/bench/blockfuse bench attention --d 128 --causal 0,1 --s 1024,4096 --hkv 8 --reps 10 --varlen \
  --json "$O/attn_varlen.json" > "$O/attn_varlen.log" 2>&1; el "varlen rc $?"; grep -E "^128 " "$O/attn_varlen.log"
SO=$(find $B -maxdepth 2 -name '_C.so' | head -1)
BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python" timeout 90 python3 bench/attention/sdpa_baseline.py \
  --s 1024,4096,16384 --d 256 --hkv 32,8 --json "$O/sdpa_d256.json" > "$O/sdpa_d256.log" 2>&1
el "sdpa d256 rc $? (blockfuse there is kAuto: sm80 at D = 256 until the rule changes)"; tail -12 "$O/sdpa_d256.log"
