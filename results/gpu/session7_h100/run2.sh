#!/usr/bin/env bash
# For the next session (branch decode-x-late, written in session 6, never run on a GPU): one H100
# call, about 9 minutes. scripts/gpu-check of the branch (the decode kernel with x loaded per chunk
# and U = 6 at M 17-24; SPARSE_PREFILL_ROWS = 128), then with its build the decode benches against
# session6 run1 / run5 (same commands): bench decode-gemm at M 1-32 and bench gated-up at 17 / 24 /
# 32 tokens. Merge if gpu-check is clean and M 17-24 is faster with no other point slower.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/xlate_out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export JOBS=16
scripts/gpu-check > "$O/gpu-check.out" 2>&1; el "gpu-check rc $?"; tail -2 "$O/gpu-check.out"
timeout 40 build-gpu/bench/blockfuse bench decode-gemm --m 1,8,16,17,24,32 --json "$O/bench_decode_gemm.json" > "$O/bench_decode_gemm.log" 2>&1
el "decode-gemm rc $?"
timeout 40 build-gpu/bench/blockfuse bench gated-up --models 8b,70b --tokens 17,24,32 --json "$O/bench_gated_up.json" > "$O/bench_gated_up.log" 2>&1
el "gated-up rc $?"
grep -vE "^\[|verif" "$O/bench_decode_gemm.log" | tail -32 | cut -c1-150; grep -vE "^\[|verif" "$O/bench_gated_up.log" | tail -7 | cut -c1-200
