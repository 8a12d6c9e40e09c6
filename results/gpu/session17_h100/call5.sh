#!/usr/bin/env bash
# Session 17, call 5 (issue 16): the landed heuristic with a workspace (stream-K at its five points)
# against row 0 forced, beside cuBLAS, three interleaved runs, on the CLI of 2508e57 built on the CPU
# machine (.wt/bins/cli_head.xz). Controls: 70B x 8192 and Gemma-2 27B x 16384, where it keeps row 0.
#   run: bash results/gpu/session17_h100/call5.sh   (writes under $OUT)
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/c5}; R=$O/raw; mkdir -p "$R"
X=/tmp/bins; mkdir -p $X; xz -dc .wt/bins/cli_head.xz > $X/cli && chmod +x $X/cli
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$R/gpu.txt"
for run in 1 2 3; do
  for c in -1 0; do
    timeout 100 $X/cli bench gated-up --kernel sm90 --tile-config $c --models 405b --tokens 256,2048,16384 \
      --reps 20 --no-ceilings --json "$R/a_c${c}_$run.json" > "$R/a_c${c}_$run.log" 2>&1
    el "405b c$c run $run rc $?"
    timeout 100 $X/cli bench gated-up --kernel sm90 --tile-config $c --models 70b,gemma27b --tokens 8192,16384 \
      --reps 20 --no-ceilings --json "$R/b_c${c}_$run.json" > "$R/b_c${c}_$run.log" 2>&1
    el "70b,gemma27b c$c run $run rc $?"
  done
done
python3 - "$R" <<'PY' | tee "$O/table.txt"
import glob, json, os, statistics, sys
r = sys.argv[1]
g = {}
for f in sorted(glob.glob(os.path.join(r, "*_c*_*.json"))):
    c = int(os.path.basename(f).split("_c")[1].split("_")[0])
    for row in json.load(open(f))["rows"]:
        if "c_fused_ms" not in row: continue
        ran = row["tile_config"] if row.get("tile_config_forced") else row.get("workspace_tile_config", row["tile_config"])
        g.setdefault((row["model"], int(row["M"])), {}).setdefault(c, []).append(
            (row["a_cublas_ms"] / row["c_fused_ms"], row["c_fused_tflops"], row.get("verified", True), ran))
print("bf16 gated_up: the heuristic with a workspace (-1) against row 0 forced; x cuBLAS per run (TFLOP/s median), row run; heur/row0 of the medians")
for k in sorted(g):
    v = g[k]
    if -1 in v and 0 in v:
        a, b = statistics.median(x[0] for x in v[-1]), statistics.median(x[0] for x in v[0])
        ok = all(x[2] for s in v.values() for x in s)
        fmt = lambda s: " ".join(f"{x[0]:.3f}" for x in v[s]) + f" ({statistics.median(x[1] for x in v[s]):.0f}) row {sorted(set(x[3] for x in v[s]))}"
        print(f"  {k[0]:14} M={k[1]:<6} heuristic {fmt(-1)} | row0 {fmt(0)} | {a / b:6.3f}" + ("" if ok else "  VERIFY FAILED"))
PY
tar czf "$O/raw.tgz" -C "$O" raw && rm -rf "$R"
