#!/usr/bin/env bash
# The next session's device plan for the six pending patches (written in session 11, which had
# spent its device time; none has run on a GPU; pending/README.md gives each one's reasoning). Four
# device steps, each one call applying its patches to the device's copy of main (the tree here
# stays main), chained within 30 s so the build directory is reused (~23 min held in all), then
# scripts/gpu-check for whatever lands. From the repo root, the five .deps paths of scripts/deps
# carried; every step writes logs and JSON under $OUT and prints its table last. Only a few files
# come back from a call, so run each step as
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session11_h100/next.sh STEP; tar czf $O/STEP.tgz -C /tmp/o .
#   device: results/gpu/session11_h100/next.sh run    (~7 min) on main, with nothing applied here:
#     1. applies pending/fused_mlp_bench_sparse_nb.patch (bench only: `--sparse-nb` forces the
#        union lists' neurons_per_block), builds, and times the sparse rows under the heuristic (0)
#        and forced 16 / 32 / 64 blocks: does a block alone on an SM stream one fair share, and do two
#        on one SM stream twice that? (the model patch's premise; pending/README.md)
#     2. applies pending/fused_mlp_model_coresident.patch, rebuilds, runs the fused-MLP CPU and GPU
#        tests, and times the same rows again under the new model (nb 0 = its choice on the device).
#     Prints one table: per shape, M and sparsity, µs under the old model, each forced size, and the
#     new model, and which size each model chose.
#   device: results/gpu/session11_h100/next.sh loads  (~5 min, chained after run): the bench and model
#     patches plus pending/fused_mlp_down_loads.patch (the down phase keeps 16 loads per lane in
#     flight for 16- and 32-neuron blocks), its fused-MLP GPU tests and memcheck of the sanitizer
#     set, the same rows timed again (and the dense forced sizes); the table gains a `loads` column.
#   here: if the new model's column is the fastest (or within 2 % of the fastest forced size) at
#     every sparse row, `git apply` both patches (and the down-loads patch where its column wins), then scripts/gpu-check --defer-python and
#     --python-only (two chained device calls) and commit with latest.json and the run's JSON.
#   device: results/gpu/session11_h100/next.sh sched  (~7 min) on main (chain it right after `run`:
#     it reverts what `run` applied in the device's copy first):
#     applies pending/gated_up_scheduler_override.patch (issue 16: bench --swizzle / --raster for
#     the sm90a scheduler), builds, runs its CPU and GPU tests (the bytes under every order equal
#     the default's), then times FP8 at the points furthest below cuBLASLt (8B and 70B x 4096 /
#     8192 / 16384) and bf16 at the large-K ones (70B, 405B, Qwen2 72B x 4096 / 16384) under
#     swizzle {0 = today's, 1, 2, 4, 8} x raster {auto, m, n}, and prints fused / baseline per order.
#   here: where an order wins by more than the run-to-run spread (~2 %) at several points, make it
#     the launcher's choice there (sm90_choose_swizzle / the raster passed) with a CPU test, and land
#     it with the patch after scripts/gpu-check. In particular: if Qwen2 72B's `8` columns beat its
#     `0` (today: swizzle 1 at every M), land pending/gated_up_swizzle_padding.patch (it applies with
#     the override patch), which lets the launcher's swizzle pad up to 1/64 of the tiles.
#   device: results/gpu/session11_h100/next.sh mem  (~4 min): applies pending/swiglu_cluster_four.patch
#     (issue 17: the opt-in `--row-rule cluster4`, a row over 4 CTAs), builds, runs the swiglu CPU
#     tests, the GPU row-rule and cluster tests and the swiglu sanitizer set under memcheck, then
#     times swiglu's dynamic FP8 output at U = 14336 / 16384 / 28672 x 1 / 8 / 32 / 256 rows under
#     default, cluster2 and cluster4, two runs each in one process.
#   here: if cluster4 is under 4 us at 1-32 rows of U = 28672 in both runs, let kAuto take it there
#     (swiglu_fp8_auto_row_rule, its CPU test), land, gpu-check.
set -uo pipefail
cd "$(dirname "$0")/../../.."
P=results/gpu/session11_h100/pending
O=${OUT:-/tmp/next}; mkdir -p "$O"
B=${BUILD_DIR:-build-gpu}
CLI=$B/bench/blockfuse
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
FM="bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,4,16 --sparsity 50,75,90"
ALL="fused_mlp_down_loads fused_mlp_model_coresident fused_mlp_bench_sparse_nb gated_up_scheduler_override gated_up_swizzle_padding swiglu_cluster_four"
# only NAME...: the device's copy with those pending patches alone applied (a chained call finds the
# last step's patches still applied, the tree copied over them: reverse whatever is)
only() {
  for q in $ALL; do git apply -R --check "$P/$q.patch" 2>/dev/null && git apply -R "$P/$q.patch"; done
  for q in "$@"; do git apply "$P/$q.patch" || { echo "$q.patch does not apply"; exit 1; }; done
}
# build WHAT: the tree as it is now (incremental while warm); gtest BINARY FILTER LOG; memcheck FILTER LOG
build() {
  BLOCKFUSE_CUDA_ARCHS=90 scripts/build "$B" >> "$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
  el "built ($1)"
}
gtest() {
  "$B/tests/$1" --gtest_filter="$2" > "$O/$3" 2>&1
  el "$1 $2: rc $? ($(grep -c '^\[       OK' "$O/$3") ok, $(grep -c '^\[  FAILED' "$O/$3") failed lines)"
}
memcheck() {
  compute-sanitizer --tool memcheck "$B/tests/blockfuse_gpu_tests" --gtest_filter="$1" > "$O/$2" 2>&1
  el "memcheck $1: rc $? ($(grep -m1 'ERROR SUMMARY' "$O/$2"))"
}
fmlp_table() {  # the fused-MLP steps' table, from whichever of their JSON files are in $O
  python3 - "$O" <<'PY'
import json, sys, os
o = sys.argv[1]
def rows(f):
    try: return json.load(open(os.path.join(o, f)))["rows"]
    except Exception as e: print(f, "unreadable:", e); return []
t = {}
dense = {}
for r in rows("fmlp_forced.json"):
    if r["variant"] == "dense":
        dense.setdefault((r["shape"], r["m"]), []).append((r["neurons_per_block"], r["us"], r["frac_of_copy"]))
    if not r["variant"].startswith("sparse-"): continue
    parts = r["variant"].split("-")
    col = "old" if len(parts) == 2 else parts[2]
    t.setdefault((r["shape"], r["m"], parts[1]), {})[col] = (r["us"], r["neurons_per_block"])
for f, col in (("fmlp_model.json", "new"), ("fmlp_loads.json", "loads")):
    for r in rows(f):
        if r["variant"].startswith("sparse-") and r["variant"].count("-") == 1:
            t.setdefault((r["shape"], r["m"], r["variant"].split("-")[1]), {})[col] = (r["us"], r["neurons_per_block"])
        if col == "loads" and r["variant"] == "dense":
            dense.setdefault((r["shape"], r["m"]), []).append(("loads nb" + str(r["neurons_per_block"]), r["us"], r["frac_of_copy"]))
print("dense, forced neurons_per_block (the first entry is the heuristic's; 'loads' with the down-phase patch): nb us %copy")
for k in sorted(dense):
    print(f"{k[0]:12} {k[1]:3d} " + "  ".join(f"{nb}:{us:.1f} {100 * fr:.1f}%" for nb, us, fr in dense[k]))
print("sparse union lists, µs (nb): old = today's model, nbNN = forced, new = the co-resident model, loads = new + the down phase's loads")
print(f"{'shape':12} {'M':>3} {'sp':>3} | {'old':>12} {'nb16':>8} {'nb32':>8} {'nb64':>8} | {'new':>12} | new/best | {'loads':>12}")
for k in sorted(t):
    d = t[k]
    f = lambda c: f"{d[c][0]:8.1f}" if c in d else f"{'-':>8}"
    g = lambda c: f"{d[c][0]:8.1f} ({d[c][1]:2d})" if c in d else f"{'-':>12}"
    best = min((d[c][0] for c in ("nb16", "nb32", "nb64") if c in d), default=0)
    ratio = f"{d['new'][0] / best:.3f}" if best and "new" in d else "-"
    print(f"{k[0]:12} {k[1]:3d} {k[2]:>3} | {g('old')} {f('nb16')} {f('nb32')} {f('nb64')} | {g('new')} | {ratio:>8} | {g('loads')}")
PY
}

case "${1:-}" in
  run)
    only fused_mlp_bench_sparse_nb
    build "bench patch"
    timeout 300 "$CLI" $FM --nb 0,16,32,64 --sparse-nb 0,16,32,64 --json "$O/fmlp_forced.json" > "$O/fmlp_forced.log" 2>&1
    el "forced sizes rc $? ($(grep -c 'VERIFY FAILED' "$O/fmlp_forced.log") verify failures)"
    git apply "$P/fused_mlp_model_coresident.patch" || { echo "model patch does not apply"; exit 1; }
    build "model patch"
    gtest blockfuse_cpu_tests 'FusedMlp*' cpu_tests.log
    gtest blockfuse_gpu_tests '*FusedMlp*:*Router*' gpu_tests.log
    timeout 200 "$CLI" $FM --json "$O/fmlp_model.json" > "$O/fmlp_model.log" 2>&1
    el "new model rc $? ($(grep -c 'VERIFY FAILED' "$O/fmlp_model.log") verify failures)"
    fmlp_table
    ;;
  loads)
    only fused_mlp_bench_sparse_nb fused_mlp_model_coresident fused_mlp_down_loads
    build "bench + model + down-loads patches"
    gtest blockfuse_gpu_tests '*FusedMlp*' loads_gpu_tests.log
    memcheck 'FusedMlpSanitizer*' loads_memcheck.log
    timeout 200 "$CLI" $FM --nb 0,16,32,64 --json "$O/fmlp_loads.json" > "$O/fmlp_loads.log" 2>&1
    el "model + down loads rc $? ($(grep -c 'VERIFY FAILED' "$O/fmlp_loads.log") verify failures)"
    fmlp_table
    ;;
  sched)
    only gated_up_scheduler_override
    build "scheduler patch"
    gtest blockfuse_cpu_tests 'HeuristicSm90*' sched_cpu.log
    gtest blockfuse_gpu_tests '*SchedulerOverride*' sched_gpu.log
    mkdir -p "$O/sched"
    for r in auto m n; do for sw in 0 1 2 4 8; do
      timeout 60 "$CLI" bench gated-up-fp8 --models 8b,70b --tokens 4096,8192,16384 --reps 10 --warmup 2 --no-ceilings \
        --swizzle $sw --raster $r --json "$O/sched/fp8_${r}_$sw.json" > "$O/sched/fp8_${r}_$sw.log" 2>&1
      timeout 60 "$CLI" bench gated-up --kernel sm90 --models 70b,405b,qwen2-72b --tokens 4096,16384 --reps 5 --warmup 2 \
        --no-ceilings --swizzle $sw --raster $r --json "$O/sched/bf16_${r}_$sw.json" > "$O/sched/bf16_${r}_$sw.log" 2>&1
      el "raster $r swizzle $sw ($(cat "$O"/sched/*_${r}_$sw.log | grep -c 'VERIFY FAILED') verify failures)"
    done; done
    python3 - "$O/sched" <<'PY'
import json, sys, os, glob
t = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    kind, r, sw = os.path.basename(f)[:-5].split("_")
    try: rows = json.load(open(f))["rows"]
    except Exception as e: print(f, "unreadable:", e); continue
    for row in rows:
        t.setdefault((kind, row["model"], row["M"]), {})[f"{r}/{sw}"] = row["c_over_a"]
cols = [f"{r}/{s}" for r in ("auto", "m", "n") for s in ("0", "1", "2", "4", "8")]
print("fused / baseline (fp8: cuBLASLt FP8 alone; bf16: cuBLAS) per raster/max-swizzle; 0 = the launcher's swizzle")
print(f"{'kind':5} {'model':15} {'M':>6} " + " ".join(f"{c:>7}" for c in cols))
for k in sorted(t):
    print(f"{k[0]:5} {k[1]:15} {k[2]:6d} " + " ".join(f"{t[k][c]:7.3f}" if c in t[k] else f"{'-':>7}" for c in cols))
PY
    ;;
  mem)
    only swiglu_cluster_four
    build "cluster-four patch"
    gtest blockfuse_cpu_tests 'Swiglu*' c4_cpu.log
    gtest blockfuse_gpu_tests '*SwigluFp8Gpu.EveryRowRule*:*SwigluFp8Gpu.ClusterRuleEdges*' c4_gpu.log
    memcheck 'SwigluFp8Sanitizer*' c4_memcheck.log
    mkdir -p "$O/c4"
    for rep in 1 2; do for rule in default cluster2 cluster4; do
      timeout 60 "$CLI" bench swiglu --out fp8-dynamic --hidden 14336,16384,28672 --rows 1,8,32,256 \
        --row-rule $rule --json "$O/c4/swd_${rule}_$rep.json" > "$O/c4/swd_${rule}_$rep.log" 2>&1
      el "swiglu fp8-dynamic $rule rep $rep rc $?"
    done; done
    python3 - "$O/c4" <<'PY'
import json, sys, os
t = {}
for rule in ("default", "cluster2", "cluster4"):
    for rep in (1, 2):
        try: rows = json.load(open(os.path.join(sys.argv[1], f"swd_{rule}_{rep}.json")))["rows"]
        except Exception as e: print(rule, rep, "unreadable:", e); continue
        for r in rows:
            t.setdefault((r["U"], r["M"]), {}).setdefault(rule, []).append(r["us"])
print("swiglu_fp8 dynamic, µs per call (two runs) — target <= 4 µs at 1-32 rows")
print(f"{'U':>6} {'rows':>5} | {'default':>15} | {'cluster2':>15} | {'cluster4':>15}")
for k in sorted(t):
    cell = lambda r: " ".join(f"{v:7.2f}" for v in t[k].get(r, [])) or "-"
    print(f"{k[0]:6d} {k[1]:5d} | {cell('default'):>15} | {cell('cluster2'):>15} | {cell('cluster4'):>15}")
PY
    ;;
  *) sed -n '2,/^set /p' "$0" | grep '^#'; exit 2 ;;
esac
