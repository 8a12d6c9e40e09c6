#!/usr/bin/env bash
# Session 9, call fmlp1 (H100, issue 14): union lists whose groups per block are chosen on the device
# from the list's count (blocks past the count return at once), and one fence + count-in per batch
# of chunks: pending/fused_mlp_dynamic_groups.patch, applied here to a copy of the tree. The
# fused-MLP GPU tests, compute-sanitizer on FusedMlpSanitizer, then the bench beside the kernel
# without the patch (src/fused_mlp as committed, rebuilt incrementally into the same build folder)
# in the same run. Never run yet: session 9 had no device time left (see pending/README.md).
# Carry: the five .deps paths (scripts/deps). Run from a clean tree: it applies and reverts the patch.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/fmlp1}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=build-f
scripts/deps > /dev/null
P=results/gpu/session9_h100/pending/fused_mlp_dynamic_groups.patch
mkdir -p /tmp/old_fmlp && cp -r src/fused_mlp/. /tmp/old_fmlp/
patch -p1 < $P > "$O/patch.log" 2>&1 || { echo "patch does not apply"; cat "$O/patch.log"; exit 1; }
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=OFF > "$O/build.log" 2>&1
cmake --build $B -j"${JOBS:-16}" --target blockfuse_gpu_tests blockfuse_cli >> "$O/build.log" 2>&1
el "build rc $?"
$B/tests/blockfuse_gpu_tests --gtest_filter='*FusedMlp*:*Router*' > "$O/tests.log" 2>&1
el "tests rc $? ($(grep -c '^\[       OK' "$O/tests.log") ok, $(grep -c '^\[  FAILED' "$O/tests.log") failed lines)"
for tool in memcheck racecheck; do
  timeout 240 compute-sanitizer --tool $tool --error-exitcode 3 $B/tests/blockfuse_gpu_tests \
    --gtest_filter='FusedMlpSanitizer.*' > "$O/san_$tool.log" 2>&1
  el "$tool rc $? $(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' "$O/san_$tool.log")"
done
ARGS="bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,4,16,32 --sparsity 50,75,90"
timeout 200 $B/bench/blockfuse $ARGS --json "$O/new.json" > "$O/new.log" 2>&1; el "bench new rc $?"
patch -p1 -R < $P >> "$O/patch.log" 2>&1 && cmp -s src/fused_mlp/fused_mlp.cu /tmp/old_fmlp/fused_mlp.cu
cmake --build $B -j"${JOBS:-16}" --target blockfuse_cli >> "$O/build.log" 2>&1; el "old build rc $?"
timeout 200 $B/bench/blockfuse $ARGS --json "$O/old.json" > "$O/old.log" 2>&1; el "bench old rc $?"
python3 - "$O" <<'PY'
import json, sys
o = sys.argv[1]
rows = {}
for tag in ("old", "new"):
    try:
        for r in json.load(open(f"{o}/{tag}.json"))["rows"]:
            rows.setdefault((r["shape"], r["m"], r["variant"]), {})[tag] = r
    except Exception as e:
        print(tag, "unreadable:", e)
print(f"{'shape':11} {'M':>2} {'variant':14} {'old us':>8} {'new us':>8} {'old/new':>7} {'new %copy':>9} {'new x dense':>11} {'x unfused':>9} ok")
for (s, m, v), d in sorted(rows.items()):
    a, b = d.get("old"), d.get("new")
    if not b: continue
    print(f"{s:11} {m:>2} {v:14} {a['us'] if a else float('nan'):8.2f} {b['us']:8.2f} "
          f"{(a['us'] / b['us']) if a else float('nan'):7.2f} {100 * b['frac_of_copy']:8.1f}% "
          f"{b['speedup_vs_dense']:11.2f} {b['speedup_vs_unfused']:9.2f} {b['verified']}")
PY
