#!/usr/bin/env bash
# Session 6, device call 4 (H100): diag2_m32.py, which predecessor slows the decode kernel at M = 32.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/run4_out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=build90
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=ON -DBLOCKFUSE_BUILD_PYTHON=ON > "$O/build.log" 2>&1
timeout 300 cmake --build $B -j16 --target blockfuse_C >> "$O/build.log" 2>&1; el "build rc $?"
SO=$(find $B -maxdepth 2 -name '_C.so' | head -1)
export BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python"
timeout 200 python3 results/gpu/session6_h100/diag2_m32.py > "$O/diag2_m32.log" 2>&1
el "diag2 rc $?"; grep -v "arn" "$O/diag2_m32.log" | cut -c1-250
