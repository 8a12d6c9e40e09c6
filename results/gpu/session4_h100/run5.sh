#!/usr/bin/env bash
# Session 4, device call 5 (H100): scripts/gpu-check of the merged tree (main + the six branches +
# the sm90a attention stages 2-3, persistent grid for uniform tiles; swiglu kAuto four3), then
# the attention figures beside SDPA flash / cuDNN in one process, and the C++ bench of both kernels.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export JOBS=16
scripts/gpu-check; echo "gpu-check rc $?"
SO=$(find build-gpu -maxdepth 2 -name '_C.so' | head -1)
BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python" timeout 60 python3 bench/attention/sdpa_baseline.py \
  --s 1024,4096,16384 --d 128 --hkv 32,8 --json "$OUT/sdpa_vs_blockfuse.json" > "$OUT/sdpa.log" 2>&1
echo "sdpa rc $?"; cat "$OUT/sdpa.log" | tail -12
timeout 60 build-gpu/bench/blockfuse bench attention --d 128 --causal 0,1 --s 1024,4096,16384 --hkv 32,8 --reps 10 \
  --json "$OUT/attn_both.json" > "$OUT/attn_both.log" 2>&1; echo "attn rc $?"; grep -E "^128 " "$OUT/attn_both.log" | grep sm90
