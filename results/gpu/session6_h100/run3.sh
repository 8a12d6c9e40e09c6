#!/usr/bin/env bash
# Session 6, device call 3 (H100): scripts/gpu-check of the final sources (writes latest.json,
# gpu-check.log, pytest.log to $OUT), then with its build: the M = 32 diagnostic again (the decode
# kernel now asks for the largest L1 carveout) and the Python decode bench.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/run3_out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export JOBS=16
scripts/gpu-check > "$O/gpu-check.out" 2>&1; el "gpu-check rc $?"; tail -4 "$O/gpu-check.out"
SO=$(find build-gpu -maxdepth 2 -name '_C.so' | head -1)
export BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python"
left=$(( 585 - ($(date +%s) - T0) ))
timeout $(( left / 2 )) python3 results/gpu/session6_h100/diag_m32.py > "$O/diag_m32.log" 2>&1; el "diag rc $?"
left=$(( 585 - ($(date +%s) - T0) ))
timeout $left python3 -m blockfuse.bench fused-mlp --shapes 8b,70b --rows 1,4,16,32 --json "$O/fused_mlp_python.json" > "$O/fused_mlp_python.log" 2>&1
el "python bench rc $?"
grep -v "^ \|Warn\|warn" "$O/diag_m32.log" | cut -c1-250; grep "gate/up" "$O/fused_mlp_python.log" | cut -c1-200
