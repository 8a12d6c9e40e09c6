#!/usr/bin/env bash
# Session 13 (H100, issue 17; not landed unless it wins): add_rmsnorm's cluster kernel with 8 CTAs a
# row at H = 16384 (exp3_c8.patch; main: 4) against main, two interleaved runs, and the floor of a
# cluster launch (floor/cluster_floor.cu). Run from the repo root, carrying the .deps paths:
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session13_h100/exp3.sh; tar czf $O/exp3.tgz -C /tmp/o .
set -uo pipefail
O=${OUT:-/tmp/exp3}; mkdir -p "$O"
B=build-gpu; D=results/gpu/session13_h100
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvcc -O3 -arch=sm_90 $D/floor/cluster_floor.cu -o /tmp/cluster_floor && /tmp/cluster_floor > "$O/cluster_floor.txt" 2>&1; el "floor rc $?"
scripts/deps > /dev/null 2>&1
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 > "$O/build.log" 2>&1
cmake --build "$B" --target blockfuse_cli -j16 >> "$O/build.log" 2>&1 || { tail -20 "$O/build.log"; exit 1; }
cp "$B/bench/blockfuse" /tmp/cli_base; el "built (base)"
git apply "$D/exp3_c8.patch" && cmake --build "$B" --target blockfuse_cli -j16 >> "$O/build.log" 2>&1 && cp "$B/bench/blockfuse" /tmp/cli_c8; git apply -R "$D/exp3_c8.patch"
el "built (c8)"
ARN="bench add-rmsnorm --hidden 16384 --rows 1,8,32 --fp8 all"
for run in 1 2; do
  for side in base c8; do
    /tmp/cli_$side $ARN --json "$O/arn_${side}_default_$run.json" > "$O/arn_${side}_default_$run.log" 2>&1
    /tmp/cli_$side $ARN --preload-chunks 0 --json "$O/arn_${side}_preload0_$run.json" > "$O/arn_${side}_preload0_$run.log" 2>&1
  done
  el "run $run"
done
grep -c " NO$" "$O"/arn_*.log | grep -v ":0" || echo "every row verified"
python3 - "$O" <<'PY'
import json, os, sys, glob
o = sys.argv[1]; t = {}
for f in glob.glob(os.path.join(o, "arn_*_[12].json")):
    _, side, mode, run = os.path.basename(f)[:-5].split("_")
    for r in json.load(open(f))["rows"]:
        t.setdefault((r["H"], r["rows"], r["fp8"]), {}).setdefault(f"{side}/{mode}", []).append((r["fused_us"], r["kernel"]))
cols = ("base/default", "c8/default", "base/preload0", "c8/preload0")
print("add_rmsnorm H = 16384, µs (two runs: min-max); c8 = 8 CTAs a row; preload0 = the cluster kernel at every row count here")
for k in sorted(t, key=str):
    print(f"{str(k):26} " + " ".join(f"{min(x[0] for x in t[k][c]):6.2f}-{max(x[0] for x in t[k][c]):6.2f}" if c in t[k] else f"{'-':>13}" for c in cols)
          + "   " + " | ".join(t[k][c][0][1] for c in cols if c in t[k]))
PY
cat "$O/cluster_floor.txt"
