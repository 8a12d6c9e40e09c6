#!/usr/bin/env bash
# Session 8, call exp4 (H100, issue 17): add_rmsnorm's one-block kernel storing residual_out before the
# row's reduction (the working tree) against cb3cb1cb's order (after it; .wt/base2/add_rmsnorm_sm80.cuh),
# one call, the C++ bench alone, both binaries in turn at every H x rows x output.
# Carry: the five .deps folders of scripts/gpu-check and .wt/base2.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/exp4}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=build-ncu/bench/blockfuse
cp src/add_rmsnorm/add_rmsnorm_sm80.cuh /tmp/new.cuh; cp .wt/base2/add_rmsnorm_sm80.cuh src/add_rmsnorm/add_rmsnorm_sm80.cuh
BLOCKFUSE_CUDA_ARCHS=90 CMAKE_ARGS="-DBLOCKFUSE_SM90=OFF -DBLOCKFUSE_BUILD_TESTS=OFF" JOBS=16 scripts/build build-ncu > "$O/build_base.log" 2>&1
rc=$?; el "base build rc $rc"; [ $rc = 0 ] || exit 1; cp $B /tmp/bf_base
cp /tmp/new.cuh src/add_rmsnorm/add_rmsnorm_sm80.cuh
cmake --build build-ncu -j16 --target blockfuse_cli > "$O/build_new.log" 2>&1
rc=$?; el "new build rc $rc"; [ $rc = 0 ] || { grep -m5 error "$O/build_new.log"; exit 1; }; cp $B /tmp/bf_new
for h in 4096 8192 16384; do for rep in 1 2; do for v in base new; do
  timeout 120 /tmp/bf_$v bench add-rmsnorm --hidden $h --rows 1,8,32,256,2048,8192,32768 --fp8 all --reps 20 --no-ceilings \
    --json "$O/arn_${h}_${v}_$rep.json" > "$O/arn_${h}_${v}_$rep.log" 2>&1; el "H=$h $v rep $rep rc $?"
done; done; done
python3 - "$O" <<'PY'
import json, os, sys
o = sys.argv[1]
for h in (4096, 8192, 16384):
    runs = {}
    for v in ("base", "new"):
        for rep in (1, 2):
            try:
                for r in json.load(open(os.path.join(o, f"arn_{h}_{v}_{rep}.json")))["rows"]:
                    runs.setdefault((r["rows"], r["fp8"]), {}).setdefault(v, []).append(r["fused_us"])
            except Exception as e:
                print(h, v, rep, e)
    print(f"H={h}: rows out | base us (2 runs) | new us (2 runs) | new/base (mean)")
    for k in sorted(runs, key=lambda k: (k[1], k[0])):
        b, n = runs[k].get("base", []), runs[k].get("new", [])
        if b and n:
            print(f"  {k[0]:>6} {k[1]:8} | " + " ".join(f"{x:8.2f}" for x in b) + " | " + " ".join(f"{x:8.2f}" for x in n)
                  + f" | {sum(n) / len(n) / (sum(b) / len(b)):.3f}")
PY
cd "$O" && tar czf exp4.tgz *.json *.log && rm -f *.json *.log
