#!/usr/bin/env bash
# Session 16, call 3 (issue 14), after `scripts/gpu-check --python-only` on the same warm machine (its
# build-gpu kept): the landed rule (16 warps a block at M <= 8 unless the launch may split; params.h:
# auto_block_warps) against exp_split16.patch (16 warps for every launch at M <= 8, and a split only where
# the 2-CTA units fit one wave at one block an SM: listed groups * W/8 <= SMs). Two interleaved runs of
# each CLI, each in one process. Writes $OUT/call3.tgz (the logs, JSON, table).
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=/tmp/c3; mkdir -p "$O"
B=${BUILD_DIR:-build-gpu}
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
cp "$B/bench/blockfuse" /tmp/cli_base
git apply results/gpu/session16_h100/exp_split16.patch && cmake --build "$B" --target blockfuse_cli -j16 > "$O/build_exp.log" 2>&1
el "exp build rc $?"
cp "$B/bench/blockfuse" /tmp/cli_exp
git apply -R results/gpu/session16_h100/exp_split16.patch
A="bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,4,8 --sparsity 50,75,90,95"
for run in 1 2; do
  for side in base exp; do
    timeout 120 /tmp/cli_$side $A --json "$O/fm_${side}_$run.json" > "$O/fm_${side}_$run.log" 2>&1
    el "$side run $run rc $?"
  done
done
python3 - "$O" <<'PY' | tee "$O/table.txt"
import glob, json, os, sys
o = sys.argv[1]
t = {}
for f in sorted(glob.glob(os.path.join(o, "fm_*_[12].json"))):
    side = os.path.basename(f).split("_")[1]
    for r in json.load(open(f))["rows"]:
        t.setdefault((r["shape"], r["m"], r["variant"]), {}).setdefault(side, []).append((r["us"], r["verified"], r["neurons_per_block"]))
print("fused MLP µs (two runs: min-max): main's rule -> exp_split16 (16 warps at M <= 8 everywhere; split where listed * 2 <= SMs)")
for k in sorted(t, key=lambda k: (k[0], k[1], k[2])):
    v = t[k]
    if "base" not in v or "exp" not in v:
        continue
    ok = all(x[1] for s in v.values() for x in s)
    b, e = min(x[0] for x in v["base"]), min(x[0] for x in v["exp"])
    print(f"  {k[0]:10} M={k[1]:<2} {k[2]:22} " + " -> ".join(f"{min(x[0] for x in v[s]):8.2f}-{max(x[0] for x in v[s]):8.2f}" for s in ("base", "exp"))
          + f"  {b / e:5.3f}x" + ("" if ok else "  VERIFY FAILED"))
PY
tar czf "$OUT/call3.tgz" -C "$O" .
