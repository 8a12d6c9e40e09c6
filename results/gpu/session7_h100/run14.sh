#!/usr/bin/env bash
# session 7 run14 (H100): add_rmsnorm with the weight preloaded beyond 32 rows? The C++ bench with
# every point up to 512 rows timed as CUDA-graph replays (cycling over rotated inputs above 32 rows),
# --preload-rows 32 (the default) vs 512, H = 4096 / 8192 / 16384, rows 32-512, every output.
set -uo pipefail
O=${OUT:-/tmp/run14}; mkdir -p "$O"; L=$(mktemp -d)
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export JOBS=16
BLOCKFUSE_CUDA_ARCHS=90 BLOCKFUSE_SM90=OFF CMAKE_ARGS="-DBLOCKFUSE_SM90=OFF -DBLOCKFUSE_BUILD_TESTS=OFF" scripts/build build-exp > "$L/build.log" 2>&1; el "build rc $?"
B=build-exp/bench/blockfuse
for p in 32 512; do
  timeout 90 $B bench add-rmsnorm --hidden 4096,8192,16384 --rows 32,64,128,256,512 --fp8 all --graph-rows 512 --preload-rows $p --json "$O/add_rmsnorm_preload_$p.json" > "$L/preload_$p.log" 2>&1; el "preload $p rc $?"
done
python3 - "$O" <<'PY'
import json, sys, os
o = sys.argv[1]
m = {p: {(x["H"], x["rows"], x["fp8"]): x for x in json.load(open(os.path.join(o, f"add_rmsnorm_preload_{p}.json")))["rows"]} for p in (32, 512)}
print("µs (% of same-size copy): preload <= 32 rows / <= 512 rows")
for k, a in m[32].items():
    b = m[512][k]
    print(f"  H={k[0]:>6} rows {k[1]:>4} {k[2]:8} {a['fused_us']:6.2f} ({100*a['fused_frac_of_same_size_copy']:5.1f}) / {b['fused_us']:6.2f} ({100*b['fused_frac_of_same_size_copy']:5.1f})  {a['kernel']} / {b['kernel']}")
PY
tar -C "$L" -czf "$O/logs.tgz" .
