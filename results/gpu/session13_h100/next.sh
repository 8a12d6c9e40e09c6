#!/usr/bin/env bash
# The next session's device plan (written at the end of session 13, whose device time was spent).
# From the repo root, carrying the five .deps paths of scripts/deps; each step is one device call
# over the device's copy of main (this tree stays main), logs and JSON under $OUT, its table last:
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session13_h100/next.sh STEP; tar czf $O/STEP.tgz -C /tmp/o .
#   push (run at the end of session 13: push/table.txt, not landed — no consistent gain, 2.7 % faster to 3.8 % slower; issue 14): pending/fused_mlp_split_push.patch — a split unit's two CTAs push
#     their gate/up sums into each other's shared memory (one exposed cluster barrier instead of two,
#     no remote loads; src/common/cluster.cuh's start-up barrier hidden under phase 1's loads). Builds
#     main's CLI, then the patch's CLI and tests (the fused-MLP GPU tests, SplitRulesMatchTheReference
#     among them, and the sanitizer set under memcheck and racecheck), and times both binaries
#     interleaved twice at the union rows (M = 1 / 4 / 8, 75 / 90 / 95 %, split auto and always).
#     Land it where the split rows are faster and the others no slower; then gpu-check.
#   c8 needs no device step before landing: pending/add_rmsnorm_c8.patch was measured in this
#     session (exp3/table.txt). Apply it and run scripts/gpu-check --defer-python, then --python-only.
set -uo pipefail
cd "$(dirname "$0")/../../.."
P=results/gpu/session13_h100/pending
O=${OUT:-/tmp/next}; mkdir -p "$O"
B=${BUILD_DIR:-build-gpu}
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
case "${1:-}" in
  push)
    scripts/deps > /dev/null 2>&1
    cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 > "$O/build.log" 2>&1
    cmake --build "$B" --target blockfuse_cli -j16 >> "$O/build.log" 2>&1 || { tail -20 "$O/build.log"; exit 1; }
    cp "$B/bench/blockfuse" /tmp/cli_base; el "built (main)"
    git apply "$P/fused_mlp_split_push.patch" || { echo "the patch does not apply"; exit 1; }
    cmake --build "$B" -j16 >> "$O/build.log" 2>&1 || { tail -20 "$O/build.log"; exit 1; }
    cp "$B/bench/blockfuse" /tmp/cli_push; el "built (push)"
    "$B/tests/blockfuse_gpu_tests" --gtest_filter='*FusedMlp*:*Router*' > "$O/push_gpu.log" 2>&1
    el "gpu tests rc $? ($(grep -c '^\[       OK' "$O/push_gpu.log") ok, $(grep -c '^\[  FAILED' "$O/push_gpu.log") failed lines)"
    for tool in memcheck racecheck; do
      compute-sanitizer --tool $tool "$B/tests/blockfuse_gpu_tests" --gtest_filter='FusedMlpSanitizer*' > "$O/push_$tool.log" 2>&1
      el "$tool rc $? ($(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' "$O/push_$tool.log"))"
    done
    git apply -R "$P/fused_mlp_split_push.patch"
    FMP="bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,4,8 --sparsity 75,90,95 --split auto,always"
    for run in 1 2; do for side in base push; do
      timeout 200 /tmp/cli_$side $FMP --json "$O/fmlp_${side}_$run.json" > "$O/fmlp_${side}_$run.log" 2>&1
    done; el "run $run"; done
    python3 - "$O" <<'PY'
import json, os, sys
o = sys.argv[1]; t = {}
for side in ("base", "push"):
    for run in (1, 2):
        f = os.path.join(o, f"fmlp_{side}_{run}.json")
        if not os.path.exists(f): continue
        for r in json.load(open(f))["rows"]:
            t.setdefault((r["shape"], r["m"], r["variant"]), {}).setdefault(side, []).append(r["us"])
print("fused MLP, µs (two runs: min-max): main -> split push patch")
for k in sorted(t):
    a, b = t[k].get("base", []), t[k].get("push", [])
    if a and b: print(f"{k[0]:11} M={k[1]:2d} {k[2]:26} {min(a):7.1f}-{max(a):7.1f} -> {min(b):7.1f}-{max(b):7.1f}  ({min(a) / min(b):.3f}x)")
PY
    ;;
  *) sed -n '2,/^set /p' "$0" | grep '^#'; exit 2 ;;
esac
