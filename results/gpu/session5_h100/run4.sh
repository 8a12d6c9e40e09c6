#!/usr/bin/env bash
# Session 5, device call 4 (H100): diag_graphs.py in the "order" mode (patched first, then alternating) after (the batch-1 CUDA-graph decode of run2, patched
# slower than unpatched): unpatched / patched / MLP-only / norms-only, graph counts, kernel profiles,
# with inductor's perf hints, graph breaks and recompiles logged.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/run4_out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=build90
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=ON -DBLOCKFUSE_BUILD_PYTHON=ON > "$O/build.log" 2>&1
timeout 200 cmake --build $B -j16 --target blockfuse_C >> "$O/build.log" 2>&1; el "build rc $?"
SO=$(find $B -maxdepth 2 -name '_C.so' | head -1)
export BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
left=$(( 560 - ($(date +%s) - T0) ))
TORCH_LOGS="perf_hints,graph_breaks,recompiles" timeout $left python3 results/gpu/session5_h100/diag_graphs.py ${LAYERS:-32} order > "$O/diag.log" 2>&1
el "diag rc $?"; grep -E "^\||skipping cudagraph|Graph break|Recompil" "$O/diag.log" | head -30
