#!/usr/bin/env bash
# Session 15, call 9 (issue 14; refused: the device time was spent): the fused MLP's blocks at M <= 8 with
# 16 or 32 warps instead of 8 (pending/fused_mlp_warps.patch: the kernel's warps a block as a template
# parameter W, 4 gate/up loads a lane in flight and 2 down slots (1 at W = 32) for W > 8; `bench fused-mlp --warps`
# runs each, rows named VARIANT-w16 / -w32, each verified against the unfused pipeline). Why: call 8
# (sm_stream2.cu) measured a block's DRAM rate at about 4 GB/s per warp with 4 loads a lane in flight,
# so a short list's 8-warp blocks stream their rows at ~32 GB/s each. ptxas (sm_90): W = 16 no spills;
# W = 32 spills 16-72 bytes (64 registers a thread, 1 down slot).
# Carries .wt/bins/cli_w.xz (main + the patch, built on the CPU machine, stripped). From the repo root:
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session15_h100/call9.sh; tar czf $O/call9.tgz -C /tmp/o .
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/call9}; mkdir -p "$O"
X=/tmp/bins; mkdir -p $X
xz -dc .wt/bins/cli_w.xz > $X/cli_w && chmod +x $X/cli_w
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
for run in 1 2; do
  timeout 90 $X/cli_w bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,8 --sparsity 50,75,90 --warps 8,16,32 \
    --json "$O/fm_$run.json" > "$O/fm_$run.log" 2>&1
  el "run $run rc $?"
done
python3 - "$O" <<'PY' | tee "$O/table.txt"
import glob, json, os, re, sys
o = sys.argv[1]
t = {}
for f in glob.glob(os.path.join(o, "fm_[12].json")):
    for r in json.load(open(f))["rows"]:
        m = re.match(r"(.*?)(-w(16|32))?$", r["variant"])
        w = int(m.group(3) or 8)
        t.setdefault((r["shape"], r["m"], m.group(1)), {}).setdefault(w, []).append((r["us"], r["verified"]))
print("fused MLP µs (two runs: min-max) with 8 -> 16 -> 32 warps a block at M <= 8")
for k in sorted(t, key=str):
    cols = [t[k].get(w, []) for w in (8, 16, 32)]
    if all(cols):
        ok = all(v for c in cols for _, v in c)
        print(f"  {str(k):50} " + " -> ".join(f"{min(x for x, _ in c):7.2f}-{max(x for x, _ in c):7.2f}" for c in cols) + ("" if ok else "  VERIFY FAILED"))
PY
