#!/usr/bin/env bash
# session 7 run4 (H100): the builds the next calls reuse while the machine stays warm (build-gpu:
# library, tests, bench for sm_90; the torch binding in the same folder, as gpu-check builds it),
# then the programmatic-dependent-launch change: its GPU tests and the add_rmsnorm / swiglu suites,
# the C++ benches with --pdl on and off, and (carried in .gl/oldmain: main at 697f7c2, before the
# decode-x-late merge, built without the sm90a kernels) the decode benches at M = 17 / 24 / 32 beside
# the merged tree's.
set -uo pipefail
O=${OUT:-/tmp/run4}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export JOBS=16
( BLOCKFUSE_CUDA_ARCHS=90 scripts/build build-gpu > "$O/build.log" 2>&1 && cmake -S . -B build-gpu -DBLOCKFUSE_BUILD_PYTHON=ON >> "$O/build.log" 2>&1 && cmake --build build-gpu -j12 --target blockfuse_C >> "$O/build.log" 2>&1; echo "build rc $?" >> "$O/build.log" ) &
( cd .gl/oldmain && ln -sfn ../../.deps .deps && cmake -S . -B build-old -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=OFF -DBLOCKFUSE_BUILD_TESTS=OFF > "$O/build_old.log" 2>&1 && cmake --build build-old -j4 --target blockfuse_cli >> "$O/build_old.log" 2>&1; echo "build-old rc $?" >> "$O/build_old.log" ) &
wait; el "builds"; tail -1 "$O/build.log" "$O/build_old.log"
B=build-gpu
timeout 150 $B/tests/blockfuse_gpu_tests --gtest_filter='PdlGpu.*:*AddRmsNorm*:*Swiglu*' > "$O/gtest.log" 2>&1; el "gtest rc $?"; grep -E "PASSED|FAILED|SKIPPED" "$O/gtest.log" | tail -6
timeout 20 $B/tests/blockfuse_cpu_tests --gtest_filter='PdlSwitch.*' 2>&1 | tail -1
for p in on off; do
  timeout 100 $B/bench/blockfuse bench add-rmsnorm --hidden 4096,8192,16384 --rows 1,8,32,256,2048,8192,32768 --fp8 all --pdl $p --json "$O/add_rmsnorm_pdl_$p.json" > "$O/add_rmsnorm_pdl_$p.log" 2>&1; el "add-rmsnorm pdl $p rc $?"
  timeout 100 $B/bench/blockfuse bench swiglu --hidden 4096,14336,16384,28672 --rows 1,8,32,256,2048,8192,32768 --pdl $p --json "$O/swiglu_pdl_$p.json" > "$O/swiglu_pdl_$p.log" 2>&1; el "swiglu pdl $p rc $?"
done
OB=.gl/oldmain/build-old/bench/blockfuse
for t in old new; do
  C=$B/bench/blockfuse; [ $t = old ] && C=$OB
  timeout 40 $C bench decode-gemm --m 16,17,24,32 --json "$O/decode_gemm_$t.json" > "$O/decode_gemm_$t.log" 2>&1; el "decode-gemm $t rc $?"
  timeout 40 $C bench gated-up --models 8b,70b --tokens 16,17,24,32 --json "$O/gated_up_$t.json" > "$O/gated_up_$t.log" 2>&1; el "gated-up $t rc $?"
done
python3 - "$O" <<'PY'
import json, sys, os
o = sys.argv[1]
def load(n):
    p = os.path.join(o, n)
    return json.load(open(p))["rows"] if os.path.exists(p) else []
for fam, key in (("add_rmsnorm", "H"), ("swiglu", "U")):
    on, off = load(f"{fam}_pdl_on.json"), load(f"{fam}_pdl_off.json")
    print(f"{fam}: pdl on / off us")
    offm = {(r.get(key), r.get("M", r.get("rows")), r.get("out", r.get("fp8"))): r for r in off}
    for r in on:
        k = (r.get(key), r.get("M", r.get("rows")), r.get("out", r.get("fp8")))
        if k in offm:
            a, b = r.get("us", r.get("fused_us")), offm[k].get("us", offm[k].get("fused_us"))
            print(f"  {k}: {a} / {b}")
PY
