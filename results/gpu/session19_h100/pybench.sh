#!/usr/bin/env bash
# Session 19: the Python benchmarks beside torch, for the closing notes of issues 14 and 16 (H100).
# Builds the torch binding alone (archs 90), then
#   python -m blockfuse.bench fused-mlp      (torch's F.linear x3 + SiLU·mul in a CUDA graph against
#                                             ops.fused_mlp dense and sparse, and ops.gated_up + F.linear)
#   python -m blockfuse.bench gated-up-fp8   (torch._scaled_mm alone and + swiglu_fp8 against ops.gated_up_fp8)
# Writes JSON and logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/pybench}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=/tmp/build-py
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_BUILD_PYTHON=ON \
  -DBLOCKFUSE_BUILD_TESTS=OFF -DBLOCKFUSE_BUILD_BENCH=OFF > "$O/build.log" 2>&1 &&
  cmake --build $B -j16 --target blockfuse_C >> "$O/build.log" 2>&1; el "build rc $?"
SO=$(realpath "$(find $B -maxdepth 2 -name '_C.so' | head -1)")
export BLOCKFUSE_TORCH_LIB="$SO" PYTHONPATH="$PWD/python"
timeout 200 python3 -m blockfuse.bench fused-mlp --json "$O/fused_mlp_python.json" > "$O/fused_mlp_python.log" 2>&1
el "fused-mlp rc $?"
timeout 150 python3 -m blockfuse.bench gated-up-fp8 --json "$O/gated_up_fp8_python.json" > "$O/gated_up_fp8_python.log" 2>&1
el "gated-up-fp8 rc $?"
tail -30 "$O/fused_mlp_python.log"; tail -12 "$O/gated_up_fp8_python.log"
