#!/usr/bin/env bash
# Session 4, device call 6 (H100): the fixed test_tp_cpu.py (CPU ranks with the GPU hidden), then
# prefill of the patched Llama-3-8B shape (8 layers) now that attention runs the sm90a kernel.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/run6_out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
(cd python && PYTHONPATH=. timeout 120 python3 -m pytest tests/test_tp_cpu.py -q -rs > "$O/pytest_tp_cpu.log" 2>&1); el "tp_cpu rc $?"
tail -3 "$O/pytest_tp_cpu.log"
B=build90
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=ON -DBLOCKFUSE_BUILD_PYTHON=ON > "$O/build.log" 2>&1
timeout 150 cmake --build $B -j16 --target blockfuse_C >> "$O/build.log" 2>&1; el "build rc $?"
SO=$(find $B -maxdepth 2 -name '_C.so' | head -1)
left=$(( 265 - ($(date +%s) - T0) ))
BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python" timeout $left python3 -m blockfuse.bench model --models llama3-8b \
  --layers 8 --prefill 2048,8192 --batches "" --json "$O/model_prefill.json" > "$O/model.log" 2>&1
el "model rc $?"; grep "^|\|^#" "$O/model.log" | tail -4
