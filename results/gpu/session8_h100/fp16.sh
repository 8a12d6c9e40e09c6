#!/usr/bin/env bash
# Session 8 (H100, issue 17 asks for bf16 and fp16): the C++ bench alone on the final kernels (source
# 89957d97), fp16 inputs — add_rmsnorm (every output) and swiglu (every output) at 1-32 rows (CUDA graph
# of 20 calls) and 2048 / 8192 rows, beside the bf16 runs of the same binary.
# Carry: the five .deps folders of scripts/gpu-check.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/fp16}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
B=build-ncu/bench/blockfuse
BLOCKFUSE_CUDA_ARCHS=90 CMAKE_ARGS="-DBLOCKFUSE_SM90=OFF -DBLOCKFUSE_BUILD_TESTS=OFF" JOBS=16 scripts/build build-ncu > "$O/build.log" 2>&1
rc=$?; el "build rc $rc"; [ $rc = 0 ] || exit 1
for dt in fp16 bf16; do
  timeout 90 $B bench add-rmsnorm --dtype $dt --hidden 4096,8192,16384 --rows 1,8,32,2048,8192 --fp8 all --reps 20 \
    --json "$O/arn_$dt.json" > "$O/arn_$dt.log" 2>&1; el "add-rmsnorm $dt rc $?"
  timeout 90 $B bench swiglu --dtype $dt --hidden 14336,16384,28672 --rows 1,8,32,2048,8192 --out 16-bit,fp8-static,fp8-dynamic \
    --reps 20 --json "$O/sw_$dt.json" > "$O/sw_$dt.log" 2>&1; el "swiglu $dt rc $?"
done
python3 - "$O" <<'PY'
import json, os, sys
o = sys.argv[1]
def rows(n):
    try: return json.load(open(os.path.join(o, n)))["rows"]
    except Exception as e: print(n, e); return []
for op, key_h, key_m, key_out, us, frac in (("arn", "H", "rows", "fp8", "fused_us", "fused_frac_of_copy"), ("sw", "U", "M", "out", "us", "frac_of_copy")):
    t = {}
    for dt in ("fp16", "bf16"):
        for r in rows(f"{op}_{dt}.json"):
            t.setdefault((r[key_h], r[key_out], r[key_m]), {})[dt] = (r[us], r.get(frac, 0))
    print(f"{op}: H/U out rows | fp16 us (% copy) | bf16 us (% copy)")
    for k in sorted(t):
        v = t[k]
        print(f"  {k[0]:>6} {k[1]:12} {k[2]:>5} | " + " | ".join(f"{v[d][0]:9.2f} ({100 * v[d][1]:5.1f})" if d in v else " " * 17 for d in ("fp16", "bf16")))
PY
cd "$O" && tar czf fp16.tgz *.json *.log && rm -f *.json *.log
