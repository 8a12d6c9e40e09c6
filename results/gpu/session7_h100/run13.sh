#!/usr/bin/env bash
# session 7 run13 (H100; run11 = the final gpu-check, whose build-gpu/_C.so this reuses; run12 = run5
# again): the peers installed (part 2), then bench/memory_bound_baselines.py on add_rmsnorm, bf16 out:
# blockfuse (PDL on and off), torch.compile with static shapes, Liger and quack in one process.
set -uo pipefail
O=${OUT:-/tmp/run13}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
# ../shared/peers/install 2, inline (../shared is not copied to the device)
sp=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['platlib'])")
( cat /tmp/cu13.tar.xz.00 .deps/peers/part2/cu13.tar.xz.01 | tar -xJ -C "$sp" && python3 -m pip install -q --no-deps .deps/peers/part2/*.whl && python3 -c "import quack.rmsnorm, liger_kernel; print('peers installed')" ) > "$O/install.log" 2>&1; el "install rc $?"; tail -1 "$O/install.log"
SO=$(find build-gpu -maxdepth 2 -name '_C.so' | head -1); echo "library: $SO"
export BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python"
timeout 400 python3 bench/memory_bound_baselines.py --ops add-rmsnorm --outs bf16 \
  --json "$O/baselines_add_rmsnorm_bf16.json" > "$O/baselines_add_rmsnorm_bf16.log" 2>&1; el "add-rmsnorm bf16 rc $?"
python3 - "$O" <<'PY'
import json, sys, os, collections
o = sys.argv[1]
for n in ("baselines_add_rmsnorm_bf16.json", "baselines_swiglu_bf16.json", "baselines_add_rmsnorm_fp8.json"):
    p = os.path.join(o, n)
    if not os.path.exists(p): continue
    d = json.load(open(p)); print(n, "copy", round(d["copy_gbs"]))
    t = collections.defaultdict(dict)
    for r in d["rows"]:
        t[(r["shape"], r["rows"], r["out"])][r["impl"]] = r["us"] if r["rows"] <= 32 else 100 * r["frac_copy"]
    impls = sorted({i for v in t.values() for i in v})
    print("  shape rows out | " + " ".join(f"{i:>15}" for i in impls) + "   (µs at <= 32 rows, else % copy)")
    for k, v in t.items():
        print(f"  {k[0]:8} {k[1]:>6} {k[2]:5} | " + " ".join(f"{v.get(i, float('nan')):15.2f}" for i in impls))
PY
