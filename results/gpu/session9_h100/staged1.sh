#!/usr/bin/env bash
# Issue 17: add_rmsnorm's staged kernel (pending/add_rmsnorm_staged.patch: the opt-in rule kStaged,
# 128 threads per row, the row's x and residual copied into shared memory by cp.async). Written in
# session 9, never run (no device time left). Applies the patch to its copy of the tree, builds the
# tests and the CLI (sm_90, no sm90a GEMMs), runs the add_rmsnorm CPU and GPU tests, memcheck and
# racecheck on StagedRuleEdgeCases (`staged1.sh check`, ~4-5 min); then, in a second call within the
# 30 s the machine stays warm (`staged1.sh bench`), `bench add-rmsnorm` with --rule default and
# --rule staged alternately (the same binary: the rule is a process-wide switch), two runs each,
# every output kind, H = 4096 / 8192 / 16384 x 1…32768 rows, and prints staged / default per point.
# Carry: the five .deps paths (scripts/deps).
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/staged1}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=/tmp/build-s
if [ "${1:-}" = check ]; then
patch -p1 < results/gpu/session9_h100/pending/add_rmsnorm_staged.patch > "$O/patch.log" 2>&1 || { cat "$O/patch.log"; exit 1; }
scripts/deps > /dev/null
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=OFF > "$O/build.log" 2>&1
cmake --build $B -j"${JOBS:-16}" --target blockfuse_cpu_tests blockfuse_gpu_tests blockfuse_cli >> "$O/build.log" 2>&1
rc=$?; el "build rc $rc"; [ $rc = 0 ] || { grep -m10 -B2 -A5 error "$O/build.log"; exit 1; }
$B/tests/blockfuse_cpu_tests --gtest_filter='AddRmsNorm*' > "$O/cpu_tests.log" 2>&1; el "cpu tests rc $? $(tail -1 "$O/cpu_tests.log")"
$B/tests/blockfuse_gpu_tests --gtest_filter='*AddRmsNorm*' > "$O/gpu_tests.log" 2>&1
el "gpu tests rc $? ($(grep -c '^\[       OK' "$O/gpu_tests.log") ok, $(grep -c '^\[  FAILED' "$O/gpu_tests.log") failed lines)"
for tool in memcheck racecheck; do
  timeout 200 compute-sanitizer --tool $tool --error-exitcode 3 $B/tests/blockfuse_gpu_tests \
    --gtest_filter='*StagedRuleEdgeCases/0' > "$O/san_$tool.log" 2>&1
  el "$tool rc $? $(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' "$O/san_$tool.log")"
done
exit 0
fi
[ "${1:-}" = bench ] || { echo "usage: $0 check | bench" >&2; exit 2; }
for rep in 1 2; do for rule in default staged; do
  timeout 140 $B/bench/blockfuse bench add-rmsnorm --hidden 4096,8192,16384 --rows 1,8,32,256,2048,8192,32768 \
    --fp8 all --rule $rule --reps 20 --json "$O/arn_${rule}_$rep.json" > "$O/arn_${rule}_$rep.log" 2>&1
  el "bench $rule rep $rep rc $?"
done; done
python3 - "$O" <<'PY'
import json, os, sys
o = sys.argv[1]
runs = {}
for rule in ("default", "staged"):
    for rep in (1, 2):
        try:
            for r in json.load(open(os.path.join(o, f"arn_{rule}_{rep}.json")))["rows"]:
                d = runs.setdefault((r["H"], r["fp8"], r["rows"]), {})
                d.setdefault(rule, []).append((r["fused_us"], r.get("fused_frac_of_copy", 0), r["kernel"]))
        except Exception as e:
            print(rule, rep, "unreadable:", e)
print(f"{'H':>6} {'out':12} {'rows':>6} | {'default us':>17} {'%copy':>6} | {'staged us':>17} {'%copy':>6} | staged/default | kernels")
for k in sorted(runs):
    d, s = runs[k].get("default", []), runs[k].get("staged", [])
    if not d or not s:
        continue
    md, ms = sum(x[0] for x in d) / len(d), sum(x[0] for x in s) / len(s)
    print(f"{k[0]:>6} {k[1]:12} {k[2]:>6} | " + " ".join(f"{x[0]:8.2f}" for x in d) + f" {100 * d[0][1]:5.1f}% | "
          + " ".join(f"{x[0]:8.2f}" for x in s) + f" {100 * s[0][1]:5.1f}% | {ms / md:14.3f} | {d[0][2]} / {s[0][2]}")
PY
