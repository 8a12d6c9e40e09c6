#!/usr/bin/env bash
# Session 5, device call 2 (H100): the end-to-end benchmark at the Llama-3-8B shape's real depth
# (32 layers): prefill 512 / 2048 / 8192, eager decode at batch 1 / 8 / 32, the decode floor
# (weights over copy bandwidth), a profiled batch-1 step, then StaticCache + CUDA graphs at batch 1.
# Peak memory: the fp32 model (32 GB) and its bf16 copies (2 x 16 GB) together, < 80 GB.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/run2_out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=build90
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=ON -DBLOCKFUSE_BUILD_PYTHON=ON > "$O/build.log" 2>&1
timeout 200 cmake --build $B -j16 --target blockfuse_C >> "$O/build.log" 2>&1; el "build rc $?"
SO=$(find $B -maxdepth 2 -name '_C.so' | head -1)
export BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
left=$(( 570 - ($(date +%s) - T0) ))
timeout $left python3 -m blockfuse.bench model --models llama3-8b --layers 32 --prefill 512,2048,8192 \
  --batches 1,8,32 --steps 16 --profile --graphs --json "$O/model32.json" > "$O/model32.log" 2>&1
el "model rc $?"; grep "^|\|^# llama\|^# decode\|^# profile" "$O/model32.log" | tail -14
