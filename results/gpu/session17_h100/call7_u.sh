#!/usr/bin/env bash
# Session 17, call 7 (issue 14): phase 1's chunks in flight at NT = 2 (M = 9-16), U = 4 (main) against
# 6 and 8 (ptxas sm_90: 128 registers, no spill at 6, 8 bytes at 8), after call 6's ncu showed dense
# 8B at M = 16 waiting on phase 1's loads (DRAM 57 %). Not run in session 17 (its device time was
# spent); for the next session. CLIs built on the CPU machine (cmake --build <dir> --target
# blockfuse_cli, strip, xz into .wt/bins, carry .wt/bins): cli_head (main), cli_u6
# (pending/phase1_u6_nt2.patch), cli_u8 (the same line with 8). Two interleaved runs each.
#   run: bash results/gpu/session17_h100/call7_u.sh   (writes under $OUT)
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/c7}; R=$O/raw; mkdir -p "$R"
X=/tmp/bins; mkdir -p $X
SIDES="head u6 u8"
for s in $SIDES; do xz -dc .wt/bins/cli_$s.xz > $X/cli_$s && chmod +x $X/cli_$s; done
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
for run in 1 2; do
  for s in $SIDES; do
    timeout 45 $X/cli_$s bench fused-mlp --shapes llama3-8b,llama3-70b --m 12,16 --sparsity 50 \
      --json "$R/fm_${s}_$run.json" > "$R/fm_${s}_$run.log" 2>&1
    el "$s run $run rc $?"
  done
done
python3 - "$R" <<'PY' | tee "$O/table.txt"
import glob, json, os, sys
r = sys.argv[1]
sides = ["head", "u6", "u8"]
t = {}
for f in sorted(glob.glob(os.path.join(r, "fm_*_[12].json"))):
    side = os.path.basename(f).split("_")[1]
    for row in json.load(open(f))["rows"]:
        t.setdefault((row["shape"], row["m"], row["variant"]), {}).setdefault(side, []).append((row["us"], row["verified"], row.get("frac_of_copy", 0)))
print("fused MLP µs, min of two runs (% of copy): U = 4 (main) | U = 6 | U = 8 at NT = 2; ratios main/side")
for k in sorted(t, key=str):
    v = t[k]
    if not all(s in v for s in sides): continue
    ok = all(x[1] for s in v.values() for x in s)
    mn = {s: min(v[s]) for s in sides}
    print(f"  {k[0]:10} M={k[1]:<2} {k[2]:22} " + " | ".join(f"{mn[s][0]:8.2f} ({100 * mn[s][2]:4.1f} %)" for s in sides)
          + f"   {mn['head'][0] / mn['u6'][0]:5.3f}x {mn['head'][0] / mn['u8'][0]:5.3f}x" + ("" if ok else "  VERIFY FAILED"))
PY
tar czf "$O/raw.tgz" -C "$O" raw && rm -rf "$R"
