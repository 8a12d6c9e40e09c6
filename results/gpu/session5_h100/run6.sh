#!/usr/bin/env bash
# Session 5, device call 6 (H100): the final tree's attention (kAuto: the sm90a kernel at every head
# dim) from PyTorch beside SDPA's flash and cuDNN backends in one process, D = 128 / 64 / 256.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/run6_out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=build90
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=ON -DBLOCKFUSE_BUILD_PYTHON=ON > "$O/build.log" 2>&1
timeout 170 cmake --build $B -j16 --target blockfuse_C >> "$O/build.log" 2>&1; el "build rc $?"
SO=$(find $B -maxdepth 2 -name '_C.so' | head -1)
left=$(( 290 - ($(date +%s) - T0) ))
BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python" timeout $left python3 bench/attention/sdpa_baseline.py \
  --s 1024,4096,16384 --d 128,64,256 --hkv 32,8 --json "$O/sdpa_vs_blockfuse.json" > "$O/sdpa.log" 2>&1
el "sdpa rc $?"; grep "^D " "$O/sdpa.log" | head -40
