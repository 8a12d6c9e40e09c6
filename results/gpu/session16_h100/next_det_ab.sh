#!/usr/bin/env bash
# For the next session (issue 14): main against main + pending/deterministic_w16.patch +
# pending/deterministic_sum_select.patch, both sides' CLIs built on the CPU machine (cmake --build <dir>
# --target blockfuse_cli, strip, xz) and carried as .wt/bins/cli_main.xz and .wt/bins/cli_det.xz.
# The deterministic rows should gain (16 warps: 1.6-1.9x in session 16; the select: the loads of the
# final sum no longer wait on each block's flag); the atomic rows share the kernel (ptxas: two variants
# 2 registers fewer) and must stay level. Two interleaved runs of each CLI, one process each.
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session16_h100/next_det_ab.sh; tar czf $O/det.tgz -C /tmp/o .
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/det}; mkdir -p "$O"
X=/tmp/bins; mkdir -p $X
for s in main det; do xz -dc .wt/bins/cli_$s.xz > $X/cli_$s && chmod +x $X/cli_$s; done
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
for run in 1 2; do
  for s in main det; do
    timeout 200 $X/cli_$s bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,4,8,16,32 --sparsity 50,90 \
      --json "$O/fm_${s}_$run.json" > "$O/fm_${s}_$run.log" 2>&1
    el "$s run $run rc $?"
  done
done
python3 - "$O" <<'PY' | tee "$O/table.txt"
import glob, json, os, sys
o = sys.argv[1]
t = {}
for f in sorted(glob.glob(os.path.join(o, "fm_*_[12].json"))):
    side = os.path.basename(f).split("_")[1]
    for r in json.load(open(f))["rows"]:
        t.setdefault((r["shape"], r["m"], r["variant"]), {}).setdefault(side, []).append((r["us"], r["verified"]))
print("fused MLP µs (two runs: min-max): main -> main + the two deterministic-mode patches")
for k in sorted(t, key=str):
    v = t[k]
    if "main" in v and "det" in v:
        ok = all(x[1] for s in v.values() for x in s)
        b, e = min(x[0] for x in v["main"]), min(x[0] for x in v["det"])
        print(f"  {k[0]:10} M={k[1]:<2} {k[2]:22} " + " -> ".join(f"{min(x[0] for x in v[s]):9.2f}-{max(x[0] for x in v[s]):9.2f}" for s in ("main", "det"))
              + f"  {b / e:5.3f}x" + ("" if ok else "  VERIFY FAILED"))
PY
