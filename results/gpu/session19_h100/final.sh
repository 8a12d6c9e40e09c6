#!/usr/bin/env bash
# Session 19's closing measurements of the landed code (H100), one CLI built on the CPU machine from
# the commit it names (.wt/bins/cli.xz, carried). PART picks what a device call runs (one call is
# limited to 600 s):
#   PART=a: fused MLP (issue 14) Llama-3 8B / 70B, M = 1 / 4 / 8 / 16, dense and 50 / 75 / 90 / 95 %
#           sparse and per-token lists, two runs; FP8 gated-up (issue 16) at its default grid, three
#           runs; bf16 gated-up run 1.
#   PART=b: bf16 gated-up (issue 16) runs 2 and 3: the heuristic beside cuBLAS's GEMM alone over the
#           six distinct shapes (Mistral 7B is Llama-3 8B's) x 512-65536 tokens.
# Writes JSON (raw.tgz) and tables (table_*.txt) under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/final}; R=$O/raw; mkdir -p "$R"
mkdir -p /tmp/bins; xz -dc .wt/bins/cli.xz > /tmp/bins/cli && chmod +x /tmp/bins/cli; CLI=/tmp/bins/cli
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
bf16() {  # run number
  timeout 280 $CLI bench gated-up --models 8b,70b,405b,gemma27b,qwen2-7b,qwen2-72b --reps 10 --warmup 3 --no-ceilings \
    --json "$R/bf16_$1.json" > "$R/bf16_$1.log" 2>&1; el "bf16 run $1 rc $?"
}
case "${PART:?PART=a or b}" in
  a)
    for run in 1 2; do
      timeout 150 $CLI bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,4,8,16 --sparsity 50,75,90,95 \
        --json "$R/fmlp_$run.json" > "$R/fmlp_$run.log" 2>&1; el "fused-mlp run $run rc $?"
    done
    for run in 1 2 3; do
      timeout 120 $CLI bench gated-up-fp8 --reps 20 --no-ceilings --json "$R/fp8_$run.json" > "$R/fp8_$run.log" 2>&1
      el "fp8 run $run rc $?"
    done
    bf16 1 ;;
  b) bf16 2; bf16 3 ;;
esac
tar czf "$O/raw_$PART.tgz" -C "$O" raw && rm -rf "$R"
