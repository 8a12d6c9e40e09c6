#!/usr/bin/env bash
# Session 16, call 5 (issue 14; run on an H200 with the all-launch 16-warp rule, call5_h200/, and again on an H100 with the final rule), after `scripts/gpu-check --python-only` on the same warm machine (its
# build-gpu kept): the rule (params.h: auto_block_warps: 16 warps for union lists at M <= 8 on sm_90; a union list
# splits where listed * W / 8 <= SMs) against 8 warps forced (`--warps 8`: the library before session 16),
# both in each of two runs (one process each). Writes $OUT/call5.tgz.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=/tmp/c5; mkdir -p "$O"
B=${BUILD_DIR:-build-gpu}
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
for run in 1 2; do
  timeout 150 "$B/bench/blockfuse" bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,4,8 --sparsity 50,75,90,95 \
    --warps 8,0 --json "$O/fm_$run.json" > "$O/fm_$run.log" 2>&1
  el "run $run rc $?"
done
python3 - "$O" <<'PY' | tee "$O/table.txt"
import glob, json, os, re, sys
o = sys.argv[1]
t = {}
for f in sorted(glob.glob(os.path.join(o, "fm_[12].json"))):
    for r in json.load(open(f))["rows"]:
        m = re.match(r"(.*?)(-w8)?$", r["variant"])
        side = "w8" if m.group(2) else "rule"
        t.setdefault((r["shape"], r["m"], m.group(1)), {}).setdefault(side, []).append((r["us"], r["verified"]))
print("fused MLP µs (two runs: min-max): 8 warps forced (before session 16) -> the rule; speedup of the mins; x dense = the rule's dense / the row")
for k in sorted(t, key=lambda k: (k[0], k[1], k[2])):
    v = t[k]
    if "w8" not in v or "rule" not in v:
        continue
    ok = all(x[1] for s in v.values() for x in s)
    b, e = min(x[0] for x in v["w8"]), min(x[0] for x in v["rule"])
    d = t.get((k[0], k[1], "dense"), {}).get("rule")
    xd = f"  x dense {min(x[0] for x in d) / e:5.2f}" if d else ""
    print(f"  {k[0]:10} M={k[1]:<2} {k[2]:22} " + " -> ".join(f"{min(x[0] for x in v[s]):8.2f}-{max(x[0] for x in v[s]):8.2f}" for s in ("w8", "rule"))
          + f"  {b / e:5.3f}x{xd}" + ("" if ok else "  VERIFY FAILED"))
PY
tar czf "$OUT/call5.tgz" -C "$O" .
