#!/usr/bin/env bash
# Session 4, device call 4 (H100): the sm90a attention kernel's persistent grid over stage 3 (causal, window, soft-cap,
# D = 64; kAuto picks it): the attention GPU tests (every kAuto case on sm80 and sm90), the
# sanitizer set, `blockfuse bench attention --kernel both`, and SDPA flash / cuDNN beside
# blockfuse's torch op (now sm90) in one process.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/run4_out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=build90
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=ON \
  -DBLOCKFUSE_BUILD_PYTHON=ON "-DCMAKE_CUDA_FLAGS=-Xptxas=-warn-spills,-warn-lmem-usage" > "$O/build.log" 2>&1
timeout 280 cmake --build $B -j16 --target blockfuse_gpu_tests blockfuse_cpu_tests blockfuse_cli blockfuse_C >> "$O/build.log" 2>&1
el "build rc $?"; grep -i "error" "$O/build.log" | head -8
$B/tests/blockfuse_cpu_tests --gtest_filter='*Attention*' > "$O/cpu.log" 2>&1; el "cpu tests rc $?"
timeout 150 $B/tests/blockfuse_gpu_tests --gtest_filter='*Attention*' > "$O/gtest_attention.log" 2>&1
el "attention gpu tests rc $?"; grep -E "^\[  FAILED|PASSED|tests ran" "$O/gtest_attention.log" | head -20
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 1 $B/tests/blockfuse_gpu_tests \
  --gtest_filter='*AttentionSanitizer*' > "$O/sanitizer.log" 2>&1; el "memcheck rc $?"
timeout 120 $B/bench/blockfuse bench attention --d 128,64 --causal 0,1 --s 1024,4096,16384 --hkv 32,8 --reps 10 \
  --json "$O/attn_both.json" > "$O/attn_both.log" 2>&1; el "attn bench rc $?"; grep -E "^(128|64) " "$O/attn_both.log"
SO=$(find $B -maxdepth 2 -name '_C.so' | head -1)
left=$(( 570 - ($(date +%s) - T0) ))
BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python" timeout $left python3 bench/attention/sdpa_baseline.py \
  --s 1024,4096,16384 --d 128,64 --hkv 32,8 --json "$O/sdpa_vs_blockfuse.json" > "$O/sdpa.log" 2>&1
el "sdpa rc $?"; tail -30 "$O/sdpa.log"
(cd "$O" && tar czf /tmp/run4.tgz . && find . -maxdepth 1 -type f -delete && mv /tmp/run4.tgz .)
