#!/usr/bin/env bash
# Session 6, device call 1 (H100): gated_up's decode path (kDecode: decode_gemm's kernel with the
# gate in its epilogue; kAuto at M <= 32) and the decode workspace's fixed counter region. Builds
# the library, GPU tests, CLI and torch binding; runs the gated_up / decode_gemm GPU tests; the C++
# bench at 1 / 4 / 16 / 32 tokens on the four gated-MLP shapes (cuBLAS GEMM, + swiglu, fused); the
# Python decode bench (torch's gate/up and MLP vs ops.gated_up, F.linear + swiglu, fused_mlp); the
# new pytest cases.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/run1_out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=build90
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=ON -DBLOCKFUSE_BUILD_PYTHON=ON > "$O/build.log" 2>&1
timeout 330 cmake --build $B -j16 --target blockfuse_gpu_tests blockfuse_cli blockfuse_C >> "$O/build.log" 2>&1; el "build rc $?"
tail -5 "$O/build.log" | grep -iE "error|FAILED" && grep -E "error" "$O/build.log" | head -20
timeout 120 $B/tests/blockfuse_gpu_tests --gtest_filter='*GatedUpDecode*:*DecodeGemm*:*GatedUpGrid*:GatedUpGpu.AgreesWithCpuReference' > "$O/gtest.log" 2>&1
el "gtest rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests ran" "$O/gtest.log" | head -20
SO=$(find $B -maxdepth 2 -name '_C.so' | head -1)
export BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python"
timeout 150 python3 -m pytest python/tests/test_ops.py python/tests/test_modules.py -q -x -k "decode or graph or GatedMLP or gated_mlp" -p no:cacheprovider > "$O/pytest.log" 2>&1
el "pytest rc $?"; tail -3 "$O/pytest.log"
timeout 150 $B/bench/blockfuse bench gated-up --models 8b,70b,405b,gemma27b --tokens 1,4,16,32 --json "$O/bench_gated_up_decode.json" > "$O/bench_gated_up_decode.log" 2>&1
el "bench gated-up rc $?"
timeout 150 python3 -m blockfuse.bench fused-mlp --shapes 8b,70b --rows 1,4,16,32 --json "$O/fused_mlp_python.json" > "$O/fused_mlp_python.log" 2>&1
el "python bench rc $?"
echo "== C++ bench gated-up (a cuBLAS GEMM, b + swiglu, c fused) =="; grep -vE "^\[|verif" "$O/bench_gated_up_decode.log" | tail -20 | cut -c1-220
echo "== python fused-mlp =="; grep -E "M=|gate/up" "$O/fused_mlp_python.log"
