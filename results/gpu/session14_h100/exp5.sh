#!/usr/bin/env bash
# Session 14, issue 17 (exp5): the landed form of the two changes — add_rmsnorm's streaming stores from
# 2048 rows as a compile-time kernel choice (exp4's runtime flag slowed 1-32 rows), swiglu_fp8's
# interleaved copies through L1 — against the tree before them (exp5_landed.patch: the src/ and bench/
# diff of the two commits), two interleaved runs of add_rmsnorm from 1 to 8192 rows.
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session14_h100/exp5.sh; tar czf $O/exp5.tgz -C /tmp/o .
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/exp5}; mkdir -p "$O"
B=build-gpu; D=results/gpu/session14_h100
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
scripts/deps > /dev/null 2>&1
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 > "$O/build.log" 2>&1
cmake --build "$B" --target blockfuse_cli -j16 >> "$O/build.log" 2>&1 || { tail -20 "$O/build.log"; exit 1; }
cp "$B/bench/blockfuse" /tmp/cli_new; el "built (new)"
git apply -R "$D/exp5_landed.patch" || { echo "the patch does not reverse"; exit 1; }
cmake --build "$B" --target blockfuse_cli -j16 >> "$O/build.log" 2>&1 && cp "$B/bench/blockfuse" /tmp/cli_base
git apply "$D/exp5_landed.patch"; el "built (base)"
for run in 1 2; do
  for side in base new; do
    timeout 100 /tmp/cli_$side bench add-rmsnorm --hidden 4096,8192,16384 --rows 1,8,32,256,2048,8192 --fp8 all \
      --json "$O/arn_${side}_$run.json" > "$O/arn_${side}_$run.log" 2>&1
  done
  el "run $run"
done
python3 - "$O" <<'PY'
import json, os, sys, glob
o = sys.argv[1]; t = {}
for f in glob.glob(os.path.join(o, "*_[12].json")):
    fam, side, run = os.path.basename(f)[:-5].split("_")
    for r in json.load(open(f))["rows"]:
        if fam == "arn":
            m = r["rows"]; k = ("add_rmsnorm", r["H"], m, r["fp8"]); frac = r["fused_frac_of_copy"]; us = r["fused_us"]
        else:
            m = r["M"]; k = ("swiglu dyn il", r["U"], m, ""); frac = r.get("frac_of_copy", 0.0); us = r["us"]
        t.setdefault(k, {}).setdefault(side, []).append((us if m <= 32 else 100 * frac, r.get("verified", True), r["kernel"]))
print("µs at 1-32 rows, % of copy from 256 rows (two runs: min-max): before -> landed; H100")
for k in sorted(t, key=str):
    c = t[k]
    if "base" not in c or "new" not in c: continue
    ok = all(v for s in c.values() for _, v, _ in s)
    f = lambda s: f"{min(x for x,_,_ in c[s]):7.2f}-{max(x for x,_,_ in c[s]):7.2f}"
    print(f"{str(k):40} {f('base')} -> {f('new')}  {c['new'][0][2]}" + ("" if ok else "  VERIFY FAILED"))
PY
