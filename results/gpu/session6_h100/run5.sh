#!/usr/bin/env bash
# Session 6, device call 5 (H100): the decode kernel with L2 policies (W evict-first, x evict-last):
# diag2 again (vs run4), the C++ gated-up bench at 1-32 tokens and decode-gemm bench (vs run1 and
# docs/decoder-kernels.md), the decode GPU tests.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/run5_out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=build90
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=ON -DBLOCKFUSE_BUILD_PYTHON=ON > "$O/build.log" 2>&1
timeout 330 cmake --build $B -j16 --target blockfuse_C blockfuse_cli blockfuse_gpu_tests >> "$O/build.log" 2>&1; el "build rc $?"
SO=$(find $B -maxdepth 2 -name '_C.so' | head -1)
export BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python"
timeout 60 $B/tests/blockfuse_gpu_tests --gtest_filter='*GatedUpDecode*:*DecodeGemm*' > "$O/gtest.log" 2>&1
el "gtest rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$O/gtest.log" | head
timeout 120 python3 results/gpu/session6_h100/diag2_m32.py > "$O/diag2_m32.log" 2>&1; el "diag2 rc $?"
timeout 100 $B/bench/blockfuse bench gated-up --models 8b,70b --tokens 1,4,16,32 --json "$O/bench_gated_up_decode.json" > "$O/bench_gated_up_decode.log" 2>&1; el "gated-up rc $?"
timeout 100 $B/bench/blockfuse bench decode-gemm --json "$O/bench_decode_gemm.json" > "$O/bench_decode_gemm.log" 2>&1; el "decode-gemm rc $?"
grep -v "arn" "$O/diag2_m32.log" | cut -c1-110
grep -vE "^\[|verif" "$O/bench_gated_up_decode.log" | tail -9 | cut -c1-200
grep -vE "^\[|verif" "$O/bench_decode_gemm.log" | tail -22 | cut -c1-200
