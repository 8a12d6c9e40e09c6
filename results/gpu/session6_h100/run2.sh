#!/usr/bin/env bash
# Session 6, device call 2 (H100): the torch binding after the fused-MLP workspace keying and the
# bench helpers (pytest of the touched files), and the M = 32 diagnostic (diag_m32.py).
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/run2_out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=build90
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=ON -DBLOCKFUSE_BUILD_PYTHON=ON > "$O/build.log" 2>&1
timeout 300 cmake --build $B -j16 --target blockfuse_C >> "$O/build.log" 2>&1; el "build rc $?"
SO=$(find $B -maxdepth 2 -name '_C.so' | head -1)
export BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python"
timeout 150 python3 -m pytest python/tests/test_fused_mlp.py python/tests/test_ops.py python/tests/test_modules.py -q -p no:cacheprovider > "$O/pytest.log" 2>&1
el "pytest rc $?"; tail -3 "$O/pytest.log"
timeout 200 python3 results/gpu/session6_h100/diag_m32.py > "$O/diag_m32.log" 2>&1
el "diag rc $?"; cat "$O/diag_m32.log" | cut -c1-260
