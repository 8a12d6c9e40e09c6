#!/usr/bin/env bash
# Session 18, calls 10-11: the GPU check of the block-width rule, then the rule (--warps 0) against 8
# warps forced from the CLI gpu-check built (one run, 8B and 70B at M = 1 / 4 / 8).
#   call 10: bash results/gpu/session18_h100/final.sh defer   (then copy $OUT/latest.json)
#   call 11: bash results/gpu/session18_h100/final.sh python  (on the same, still warm machine)
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/final}; mkdir -p "$O"
case "${1:-}" in
  defer)
    scripts/gpu-check --defer-python > "$O/gpucheck1.log" 2>&1; echo "gpu-check rc $?"
    rm -f "$O"/bench_*.json
    timeout 90 build-gpu/bench/blockfuse bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,4,8 --sparsity 75 \
      --warps 0,8 --json "$O/rule.json" > "$O/rule.log" 2>&1; echo "rule bench rc $?"
    grep -E '^llama' "$O/rule.log" | head -40
    tail -3 "$O/gpucheck1.log" ;;
  python)
    scripts/gpu-check --python-only > "$O/gpucheck2.log" 2>&1; echo "gpu-check rc $?"; tail -3 "$O/gpucheck2.log" ;;
  *) sed -n '2,5p' "$0"; exit 2 ;;
esac
