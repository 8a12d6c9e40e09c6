#!/usr/bin/env bash
# Session 17, call 1 (issue 14): the fused MLP's deterministic-mode patches of session 16, timed against
# main in one machine. Three CLIs built on the CPU machine (cmake --build --target blockfuse_cli, strip,
# xz) and carried as .wt/bins/cli_{main,w16,det}.xz:
#   main  main at cb7d586
#   w16   + pending/deterministic_w16.patch + pending/review_mends.patch (16 warps a block for the
#         deterministic mode at M <= 8 on sm_90; the mends change no kernel)
#   det   + pending/deterministic_sum_select.patch (the final sum's loads no longer wait on each block's flag)
# Two interleaved runs of each, one process each. The atomic rows run the same kernels and must stay level.
#   run: O=$OUT; bash results/gpu/session17_h100/call1_det_ab.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/det}; mkdir -p "$O/raw"
X=/tmp/bins; mkdir -p $X
SIDES="main w16 det"
for s in $SIDES; do xz -dc .wt/bins/cli_$s.xz > $X/cli_$s && chmod +x $X/cli_$s; done
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$O/raw/gpu.txt"
for run in 1 2; do
  for s in $SIDES; do
    timeout 150 $X/cli_$s bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,4,8,16,32 --sparsity 50,90 \
      --json "$O/raw/fm_${s}_$run.json" > "$O/raw/fm_${s}_$run.log" 2>&1
    el "$s run $run rc $?"
  done
done
python3 - "$O/raw" <<'PY' | tee "$O/table.txt"
import glob, json, os, sys
o = sys.argv[1]
sides = ["main", "w16", "det"]
t = {}
for f in sorted(glob.glob(os.path.join(o, "fm_*_[12].json"))):
    side = os.path.basename(f).split("_")[1]
    for r in json.load(open(f))["rows"]:
        t.setdefault((r["shape"], r["m"], r["variant"]), {}).setdefault(side, []).append((r["us"], r["verified"]))
print("fused MLP µs, min of two runs (max in brackets): main | + 16-warp deterministic | + select; ratios main/side")
for k in sorted(t, key=str):
    v = t[k]
    if not all(s in v for s in sides):
        continue
    ok = all(x[1] for s in v.values() for x in s)
    mn = {s: min(x[0] for x in v[s]) for s in sides}
    mx = {s: max(x[0] for x in v[s]) for s in sides}
    print(f"  {k[0]:10} M={k[1]:<2} {k[2]:24} " + " | ".join(f"{mn[s]:9.2f} ({mx[s]:9.2f})" for s in sides)
          + f"   {mn['main'] / mn['w16']:5.3f}x {mn['main'] / mn['det']:5.3f}x" + ("" if ok else "  VERIFY FAILED"))
PY
tar czf "$O/raw.tgz" -C "$O" raw && rm -rf "$O/raw"
