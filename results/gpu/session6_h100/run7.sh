#!/usr/bin/env bash
# Session 6, device call 7 (H100): scripts/gpu-check of the sources with SparseGatedMLP's gathered
# prefill path, then the sparse-prefill benchmark (gathered vs the decode kernel per 32 rows vs the
# dense MLP) with gpu-check's build.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/run7_out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export JOBS=16
scripts/gpu-check > "$O/gpu-check.out" 2>&1; el "gpu-check rc $?"; tail -3 "$O/gpu-check.out"
SO=$(find build-gpu -maxdepth 2 -name '_C.so' | head -1)
export BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python"
left=$(( 590 - ($(date +%s) - T0) ))
timeout $left python3 -m blockfuse.bench sparse-prefill --shapes 8b,70b --json "$O/sparse_prefill.json" > "$O/sparse_prefill.log" 2>&1
el "sparse-prefill rc $?"; cut -c1-330 "$O/sparse_prefill.log"
