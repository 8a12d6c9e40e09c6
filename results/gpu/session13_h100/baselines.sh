#!/usr/bin/env bash
# Session 13 (H100, issue 17): the decode-sized points this session changed, beside the peers in one
# process through torch (bench/memory_bound_baselines.py): add_rmsnorm at H = 8192 / 16384 and
# swiglu_fp8 (dynamic) at U = 14336 / 16384 / 28672, 1 / 8 / 32 rows, CUDA graphs of 20 calls.
# Three back-to-back device calls on one machine:
#   A (bare, carrying the five .deps paths): cmake -DBLOCKFUSE_BUILD_PYTHON=ON, build blockfuse_C
#   B (carrying .deps/peers/part1): bash ../shared/peers/install 1 (inline: cp ... /tmp)
#   C (carrying .deps/peers/part2): this script (install 2 inline: ../shared is not on the device)
set -uo pipefail
O=${OUT:-/tmp/baselines}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
sp=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['platlib'])")
( cat /tmp/cu13.tar.xz.00 .deps/peers/part2/cu13.tar.xz.01 | tar -xJ -C "$sp" && python3 -m pip install -q --no-deps .deps/peers/part2/*.whl && python3 -c "import quack.rmsnorm, liger_kernel; print('peers installed')" ) > "$O/install.log" 2>&1; el "install rc $?"; tail -1 "$O/install.log"
SO=$(find build-gpu -maxdepth 2 -name '_C.so' | head -1); echo "library: $SO"
export BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python"
B="python3 bench/memory_bound_baselines.py --rows 1,8,32"
timeout 200 $B --ops add-rmsnorm --hidden 8192,16384 --outs bf16 --impls blockfuse,compile,liger,quack --json "$O/add_rmsnorm_bf16.json" > "$O/add_rmsnorm_bf16.log" 2>&1; el "add-rmsnorm bf16 rc $?"
timeout 150 $B --ops add-rmsnorm --hidden 16384 --outs fp8s,fp8d --impls blockfuse,compile --json "$O/add_rmsnorm_fp8.json" > "$O/add_rmsnorm_fp8.log" 2>&1; el "add-rmsnorm fp8 rc $?"
timeout 150 $B --ops swiglu --u 14336,16384,28672 --outs fp8d --impls blockfuse,compile --json "$O/swiglu_fp8.json" > "$O/swiglu_fp8.log" 2>&1; el "swiglu fp8 rc $?"
python3 - "$O" <<'PY'
import json, os, sys
o = sys.argv[1]
for f in ("add_rmsnorm_bf16.json", "add_rmsnorm_fp8.json", "swiglu_fp8.json"):
    p = os.path.join(o, f)
    if not os.path.exists(p): print(f, "missing"); continue
    d = json.load(open(p))
    rows = d["rows"] if isinstance(d, dict) else d
    t = {}
    for r in rows:
        k = (r.get("op"), str(r.get("shape")), r.get("out"), r.get("rows"))
        t.setdefault(k, {})[r.get("impl")] = r.get("us")
    print(f)
    for k in sorted(t, key=str):
        print("  ", k, "  ".join(f"{i} {u:.2f}" for i, u in sorted(t[k].items()) if u is not None))
PY
