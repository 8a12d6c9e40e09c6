#!/usr/bin/env bash
# Session 14, issue 17 (not landed unless it wins). Two questions, one device call:
# 1. swiglu_fp8's dynamic row kernel with the interleaved gate/up layout ran at 61-67 % of copy at
#    2048 / 8192 rows in exp2 (stacked: 89-95 % in session 11): each thread cp.async-copies its
#    chunk's two 16-byte halves, so a warp's copy instruction reads every 32-byte sector in half and
#    each sector comes from L2 twice. Two fixes against main, on top of exp2_stcs.patch:
#      ca    (exp3_ca.patch):    the same copies through L1 (cp.async.ca)
#      remap (exp3_remap.patch): thread tid copies pieces tid and nt + tid (coalesced), a barrier
#                                before the slots are read and before a set is refilled
# 2. exp2_stcs.patch (streaming stores, ahead at 2048 / 8192 rows of add_rmsnorm) at 1-256 rows.
# From the repo root, carrying the .deps paths:
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session14_h100/exp3.sh; tar czf $O/exp3.tgz -C /tmp/o .
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/exp3}; mkdir -p "$O"
B=build-gpu; D=results/gpu/session14_h100
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
scripts/deps > /dev/null 2>&1
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 > "$O/build.log" 2>&1
build_as() {  # $1 = name, then the patches
  local name=$1; shift
  for p in "$@"; do git apply "$D/$p.patch" || { echo "$p does not apply"; exit 1; }; done
  cmake --build "$B" --target blockfuse_cli -j16 >> "$O/build.log" 2>&1 || { tail -20 "$O/build.log"; exit 1; }
  cp "$B/bench/blockfuse" /tmp/cli_$name
  for p in $(printf '%s\n' "$@" | tac); do git apply -R "$D/$p.patch"; done
  el "built ($name)"
}
build_as base
build_as stcs exp2_stcs
build_as ca exp2_stcs exp3_ca
build_as remap exp2_stcs exp3_remap
for run in 1 2; do
  for side in base ca remap; do for layout in interleaved stacked; do
    timeout 60 /tmp/cli_$side bench swiglu --out fp8-dynamic --layout $layout --hidden 14336,16384,28672 --rows 256,2048,8192 \
      --json "$O/sw_${side}_${layout}_$run.json" > "$O/sw_${side}_${layout}_$run.log" 2>&1
  done; done
  for side in base stcs; do
    timeout 60 /tmp/cli_$side bench add-rmsnorm --hidden 4096,8192,16384 --rows 1,8,32,256 --fp8 all \
      --json "$O/arn_${side}_x_$run.json" > "$O/arn_${side}_x_$run.log" 2>&1
  done
  el "run $run"
done
python3 - "$O" <<'PY'
import json, os, sys, glob
o = sys.argv[1]; t = {}
for f in glob.glob(os.path.join(o, "*_[12].json")):
    fam, side, layout, run = os.path.basename(f)[:-5].split("_")
    for r in json.load(open(f))["rows"]:
        if fam == "arn":
            k = ("add_rmsnorm", r["H"], r["rows"], r["fp8"]); v = r["fused_us"] if r["rows"] <= 32 else 100 * r["fused_frac_of_copy"]
        else:
            k = ("swiglu dyn", layout, r["U"], r["M"]); v = 100 * r.get("frac_of_copy", 0.0)
        t.setdefault(k, {}).setdefault(side, []).append((v, r.get("verified", True)))
print("swiglu_fp8 dynamic, % of copy (two runs: min-max): main | ca | remap (both with streaming stores)")
for k in sorted(t, key=str):
    if k[0] != "swiglu dyn": continue
    c = t[k]; ok = all(v for s in c.values() for _, v in s)
    print(f"{str(k):40} " + " | ".join(f"{min(x for x,_ in c[s]):5.1f}-{max(x for x,_ in c[s]):5.1f}" if s in c else "   -   " for s in ("base", "ca", "remap")) + ("" if ok else "  VERIFY FAILED"))
print("add_rmsnorm, µs at 1-32 rows, % of copy at 256 (two runs: min-max): main | streaming stores")
for k in sorted(t, key=str):
    if k[0] != "add_rmsnorm": continue
    c = t[k]; ok = all(v for s in c.values() for _, v in s)
    print(f"{str(k):40} " + " | ".join(f"{min(x for x,_ in c[s]):6.2f}-{max(x for x,_ in c[s]):6.2f}" if s in c else "   -   " for s in ("base", "stcs")) + ("" if ok else "  VERIFY FAILED"))
PY
