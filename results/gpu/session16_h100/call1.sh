#!/usr/bin/env bash
# Session 16, call 1 (issue 14): the fused MLP's blocks at M <= 8 with 16 or 32 warps instead of 8
# (session 15's pending/fused_mlp_warps.patch, applied on main here; `bench fused-mlp --warps` rows
# VARIANT-w16 / -w32, each verified against the unfused pipeline). Two runs, each in one process.
# Carries .wt/bins/cli.xz (the tree's CLI built on the CPU machine for sm_90, stripped). From the repo root:
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session16_h100/call1.sh; tar czf $O/call1.tgz -C /tmp/o .
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/call1}; mkdir -p "$O"
X=/tmp/bins; mkdir -p $X
xz -dc .wt/bins/cli.xz > $X/cli && chmod +x $X/cli
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$O/gpu.txt"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
for run in 1 2; do
  timeout 150 $X/cli bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,4,8 --sparsity 50,75,90 --warps 8,16,32 \
    --json "$O/fm_$run.json" > "$O/fm_$run.log" 2>&1
  el "run $run rc $?"
done
python3 - "$O" <<'PY' | tee "$O/table.txt"
import glob, json, os, re, sys
o = sys.argv[1]
t = {}
for f in sorted(glob.glob(os.path.join(o, "fm_[12].json"))):
    for r in json.load(open(f))["rows"]:
        m = re.match(r"(.*?)(-w(16|32))?$", r["variant"])
        w = int(m.group(3) or 8)
        t.setdefault((r["shape"], r["m"], m.group(1)), {}).setdefault(w, []).append((r["us"], r["verified"]))
print("fused MLP µs (two runs: min-max) with 8 -> 16 -> 32 warps a block at M <= 8; x dense = the 8-warp dense median / this row's")
for k in sorted(t, key=lambda k: (k[0], k[1], k[2])):
    cols = [t[k].get(w, []) for w in (8, 16, 32)]
    if not all(cols):
        continue
    ok = all(v for c in cols for _, v in c)
    d = t.get((k[0], k[1], "dense"), {}).get(8)
    dm = sorted(x for x, _ in d)[len(d) // 2] if d else 0
    xs = " ".join(f"{dm / min(x for x, _ in c):5.2f}" for c in cols) if dm else ""
    print(f"  {k[0]:10} M={k[1]:<2} {k[2]:22} " + " -> ".join(f"{min(x for x, _ in c):7.2f}-{max(x for x, _ in c):7.2f}" for c in cols)
          + f"   x dense {xs}" + ("" if ok else "  VERIFY FAILED"))
PY
