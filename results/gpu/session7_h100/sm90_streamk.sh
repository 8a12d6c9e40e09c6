#!/usr/bin/env bash
# For the next session (branch sm90-streamk, written in session 7, compiled for sm_90a but never run
# on a GPU): one H100 call, about 9 minutes. gpu-check of the branch (its GPU tests run tile row 3,
# stream-K, on every shape of EveryKernelAndTileConfig and the sanitizer set, and
# GatedUpGpu.Sm90StreamKWorkspace), then with its build row 0 (persistent) against row 3 (stream-K)
# beside cuBLAS over the issue-16 grid. Keep row 3 opt-in unless it wins somewhere reproducibly;
# then give the heuristic a stream-K rule from a second run and have gated_up's callers (torch op,
# GatedMLP) pass the workspace.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/sk_out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export JOBS=16
scripts/gpu-check > "$O/gpu-check.out" 2>&1; el "gpu-check rc $?"; tail -2 "$O/gpu-check.out"
for c in 0 3; do
  timeout 60 build-gpu/bench/blockfuse bench gated-up --kernel sm90 --tile-config $c --models 8b,70b,405b \
    --tokens 512,1024,4096,16384 --reps 20 --json "$O/gated_up_tile$c.json" > "$O/gated_up_tile$c.log" 2>&1
  el "tile $c rc $?"; grep -E "^Llama" "$O/gated_up_tile$c.log" | cut -c1-110
done
