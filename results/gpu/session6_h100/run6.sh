#!/usr/bin/env bash
# Session 6, device call 6 (H100): scripts/gpu-check of the final sources (the decode kernel back to
# its run1 form after the carveout and L2-policy experiments of run3 and run5).
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/run6_out}; mkdir -p "$O"
export JOBS=16
scripts/gpu-check > "$O/gpu-check.out" 2>&1; echo "gpu-check rc $?"; tail -4 "$O/gpu-check.out"
