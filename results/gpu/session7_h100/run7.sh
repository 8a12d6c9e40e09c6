#!/usr/bin/env bash
# session 7 run7 (H100): the build gpu-check (run8, right after) reuses, then PDL limited to <= 32 rows
# (common/launch.h: pdl_rows): the C++ add_rmsnorm / swiglu benches with --pdl on and off at 1-256
# rows, and run4's decode comparison again (its files did not come back): main before the
# decode-x-late merge (.gl/oldmain, 697f7c2) vs now at M = 16 / 17 / 24 / 32. Logs in one tarball.
set -uo pipefail
O=${OUT:-/tmp/run7}; mkdir -p "$O"; L=$(mktemp -d)
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export JOBS=16
( BLOCKFUSE_CUDA_ARCHS=90 scripts/build build-gpu > "$L/build.log" 2>&1 && cmake -S . -B build-gpu -DBLOCKFUSE_BUILD_PYTHON=ON >> "$L/build.log" 2>&1 && cmake --build build-gpu -j12 --target blockfuse_C >> "$L/build.log" 2>&1; echo "build rc $?" >> "$L/build.log" ) &
( cd .gl/oldmain && ln -sfn ../../.deps .deps && cmake -S . -B build-old -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=OFF -DBLOCKFUSE_BUILD_TESTS=OFF > "$L/build_old.log" 2>&1 && cmake --build build-old -j4 --target blockfuse_cli >> "$L/build_old.log" 2>&1; echo "build-old rc $?" >> "$L/build_old.log" ) &
wait; el "builds: $(tail -1 $L/build.log), $(tail -1 $L/build_old.log)"
B=build-gpu/bench/blockfuse
timeout 60 build-gpu/tests/blockfuse_gpu_tests --gtest_filter='PdlGpu.*' > "$L/gtest_pdl.log" 2>&1; el "PdlGpu rc $?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|Failure|Expected|Which is" "$L/gtest_pdl.log" | head -12
for p in on off; do
  timeout 60 $B bench add-rmsnorm --hidden 4096,8192,16384 --rows 1,8,32,256 --fp8 all --pdl $p --json "$O/add_rmsnorm_pdl_$p.json" > "$L/add_rmsnorm_pdl_$p.log" 2>&1; el "add-rmsnorm pdl $p rc $?"
  timeout 60 $B bench swiglu --hidden 4096,14336,16384,28672 --rows 1,8,32,256 --pdl $p --json "$O/swiglu_pdl_$p.json" > "$L/swiglu_pdl_$p.log" 2>&1; el "swiglu pdl $p rc $?"
done
for t in old new; do
  C=$B; [ $t = old ] && C=.gl/oldmain/build-old/bench/blockfuse
  timeout 40 $C bench decode-gemm --m 16,17,24,32 > "$L/decode_gemm_$t.log" 2>&1; el "decode-gemm $t rc $?"
  timeout 40 $C bench gated-up --models 8b,70b --tokens 16,17,24,32 > "$L/gated_up_$t.log" 2>&1; el "gated-up $t rc $?"
done
for t in old new; do echo "== decode-gemm $t"; grep -E "^(qkv|gateup|down)" "$L/decode_gemm_$t.log" | awk '{print $1, $4, $6, $9, $12}'; done
for t in old new; do echo "== gated-up $t"; grep -E "^Llama" "$L/gated_up_$t.log" | cut -c1-120; done
python3 - "$O" <<'PY'
import json, sys, os
o = sys.argv[1]
for fam, key, mk, ok, uk in (("add_rmsnorm", "H", "rows", "fp8", "fused_us"), ("swiglu", "U", "M", "out", "us")):
    on, off = [json.load(open(os.path.join(o, f"{fam}_pdl_{p}.json")))["rows"] for p in ("on", "off")]
    offm = {(r[key], r[mk], r[ok]): r[uk] for r in off}
    print(f"{fam}: µs PDL on / off")
    for r in on:
        k = (r[key], r[mk], r[ok])
        print(f"  {key}={k[0]:>6} rows {k[1]:>4} {k[2]:12} {r[uk]:7.2f} / {offm.get(k, float('nan')):7.2f}")
PY
tar -C "$L" -czf "$O/logs.tgz" .
