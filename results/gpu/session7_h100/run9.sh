#!/usr/bin/env bash
# session 7 run9 (H100): two launch-shape experiments, each side by side in one call.
#  - add_rmsnorm rule `wide` (512-thread one-block shapes at every H: v1 x 512 at H = 4096, v2 x 512 at
#    8192) against the default at 2048 / 8192 / 32768 rows, H = 4096 / 8192 / 16384, every output;
#    its GPU tests (BothShapeRulesAndExchanges runs every rule).
#  - swiglu's decode-sized elementwise grid up to 512 (default) / 1024 / 2048 / 4096 chunks per SM,
#    16-bit and static FP8, U = 4096 / 14336 / 16384 / 28672 x rows 1-256.
set -uo pipefail
O=${OUT:-/tmp/run9}; mkdir -p "$O"; L=$(mktemp -d)
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export JOBS=16
BLOCKFUSE_CUDA_ARCHS=90 scripts/build build-gpu > "$L/build.log" 2>&1; el "build rc $?"
B=build-gpu/bench/blockfuse
timeout 120 build-gpu/tests/blockfuse_gpu_tests --gtest_filter='*BothShapeRulesAndExchanges*:*Swiglu*:PdlGpu.*' > "$L/gtest.log" 2>&1; el "gtest rc $?"; grep -E "^\[  (PASSED|FAILED)|tests ran" "$L/gtest.log" | head -5
timeout 10 build-gpu/tests/blockfuse_cpu_tests --gtest_filter='*Config*:PdlSwitch.*' 2>&1 | tail -1
for r in default wide; do
  timeout 90 $B bench add-rmsnorm --hidden 4096,8192,16384 --rows 2048,8192,32768 --fp8 all --rule $r --json "$O/add_rmsnorm_rule_$r.json" > "$L/add_rmsnorm_rule_$r.log" 2>&1; el "add-rmsnorm rule $r rc $?"
done
for c in 512 1024 2048 4096; do
  timeout 60 $B bench swiglu --hidden 4096,14336,16384,28672 --rows 1,8,32,64,128,256 --out 16-bit,fp8-static --small-chunks-per-sm $c --json "$O/swiglu_small_$c.json" > "$L/swiglu_small_$c.log" 2>&1; el "swiglu small $c rc $?"
done
python3 - "$O" <<'PY'
import json, sys, os
o = sys.argv[1]
rows = {r: json.load(open(os.path.join(o, f"add_rmsnorm_rule_{r}.json")))["rows"] for r in ("default", "wide")}
m = {r: {(x["H"], x["rows"], x["fp8"]): x for x in v} for r, v in rows.items()}
print("add_rmsnorm % of copy: default / wide   (kernel)")
for k, a in m["default"].items():
    b = m["wide"].get(k, {})
    print(f"  H={k[0]:>6} rows {k[1]:>6} {k[2]:8} {100*a['fused_frac_of_copy']:6.1f} / {100*b.get('fused_frac_of_copy', float('nan')):6.1f}   ({a['kernel']} / {b.get('kernel')})")
cs = (512, 1024, 2048, 4096)
sw = {c: {(x["U"], x["M"], x["out"]): x for x in json.load(open(os.path.join(o, f"swiglu_small_{c}.json")))["rows"]} for c in cs}
print("swiglu µs at small-chunks-per-sm " + " / ".join(map(str, cs)))
for k in sw[512]:
    print(f"  U={k[0]:>6} rows {k[1]:>4} {k[2]:11} " + " / ".join(f"{sw[c][k]['us']:6.2f}" if k in sw[c] else "   nan" for c in cs) + f"   ({' / '.join(sw[c][k]['kernel'] for c in cs if k in sw[c])})")
PY
tar -C "$L" -czf "$O/logs.tgz" .
