#!/usr/bin/env bash
# Session 5, device call 5 (H100): batch-1 decode of the Llama-3-8B shape at its real depth (32
# layers) with StaticCache + CUDA graphs, measured two ways after run3/run4 showed generate()'s
# single timings swinging +-20 %: generate() (medians of 5) and a hand-captured decode step
# replayed back to back (GPU time), beside the decode floor (weights over copy bandwidth).
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/run5_out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=build90
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=ON -DBLOCKFUSE_BUILD_PYTHON=ON > "$O/build.log" 2>&1
timeout 200 cmake --build $B -j16 --target blockfuse_C >> "$O/build.log" 2>&1; el "build rc $?"
SO=$(find $B -maxdepth 2 -name '_C.so' | head -1)
export BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
left=$(( 570 - ($(date +%s) - T0) ))
timeout $left python3 -m blockfuse.bench model --models llama3-8b --layers 32 --prefill "" --batches 1 \
  --steps 16 --graphs --json "$O/model32_decode.json" > "$O/model32_decode.log" 2>&1
el "model rc $?"; grep "^|\|^# llama\|^# decode\|^# graph" "$O/model32_decode.log" | tail -10
