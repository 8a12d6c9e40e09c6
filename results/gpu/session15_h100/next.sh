#!/usr/bin/env bash
# The next session's device plan (written at the end of session 15, whose device time was spent).
# Each step is one device call from the repo root. Logs and JSON go under $OUT, with the table last:
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session15_h100/next.sh STEP; tar czf $O/STEP.tgz -C /tmp/o .
# Steps:
#   w16 (first; cheap): pending/fused_mlp_warps.patch (issue 14). Build the CLI with it on the CPU machine
#     (cmake --build <dir> --target blockfuse_cli) and carry it as .wt/bins/cli_w.xz (strip, then xz).
#     `bash results/gpu/session15_h100/call9.sh` then times the fused MLP with 8 / 16 / 32 warps a block
#     at M <= 8 (`bench fused-mlp --warps 8,16,32`; a minute or two, no build). If it gains, add a host
#     rule and land the patch in the GPU check below (its GPU and sanitizer tests come with it).
#   (then) apply pending/add_rmsnorm_wide_from_1536.patch and pending/peers_rounds.patch. Both touch hashed
#     sources. Run `scripts/gpu-check --defer-python`, then `--python-only` within 30 s, carrying the five
#     scripts/deps paths. In the python-only call also carry .deps/peers/part1 and copy its
#     cu13.tar.xz.00 to /tmp, as session 15's call 3 did.
#   peers-rounds (right after, carrying .deps/peers/part2): the peers from 2048 rows with --rounds 5
#     (issue 17's >= 1.00x quack target, timed so the allocator state does not favour either side).
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/next}; mkdir -p "$O"
B=${BUILD_DIR:-build-gpu}
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
case "${1:-}" in
  peers-rounds)
    sp=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['platlib'])")
    ( cat /tmp/cu13.tar.xz.00 .deps/peers/part2/cu13.tar.xz.01 | tar -xJ -C "$sp" && python3 -m pip install -q --no-deps .deps/peers/part2/*.whl && python3 -c "import quack.rmsnorm, liger_kernel; print('peers installed')" ) > "$O/install.log" 2>&1; el "install rc $?"
    SO=$(find "$B" -maxdepth 2 -name '_C.so' | head -1); echo "library: $SO"
    export BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python"
    M="python3 bench/memory_bound_baselines.py --rows 2048,8192,32768 --rounds 5"
    timeout 330 $M --ops add-rmsnorm --hidden 4096,8192,16384 --outs bf16 --impls blockfuse,compile,liger,quack --json "$O/arn_rounds.json" > "$O/arn_rounds.log" 2>&1; el "add-rmsnorm rc $?"
    timeout 200 $M --ops swiglu --u 14336,28672 --outs bf16,fp8d --impls blockfuse,compile,liger --json "$O/swiglu_rounds.json" > "$O/swiglu_rounds.log" 2>&1; el "swiglu rc $?"
    python3 - "$O" <<'PY' | tee "$O/table.txt"
import json, os, sys
o = sys.argv[1]
print("through torch, median of 5 rotated rounds: blockfuse % of copy, and each peer's time / blockfuse's (min-max over rounds in brackets)")
for f in ("arn_rounds.json", "swiglu_rounds.json"):
    p = os.path.join(o, f)
    if not os.path.exists(p):
        continue
    t = {}
    for r in json.load(open(p))["rows"]:
        t.setdefault((r["op"], r["shape"], r["rows"], r["out"]), {})[r["impl"]] = r
    for k in sorted(t, key=lambda k: (k[0], k[1], k[3], k[2])):
        v = t[k]
        b = v.get("blockfuse")
        if not b:
            continue
        s = f"{k[0]:12} {k[1]:8} {k[2]:6d} {k[3]:5} blockfuse {100 * b['frac_copy']:5.1f} % [{min(b['us_rounds']):.1f}-{max(b['us_rounds']):.1f} us]"
        for im in ("quack", "compile", "liger"):
            if im in v:
                s += f" | {im} {v[im]['us'] / b['us']:.3f}x [{min(v[im]['us_rounds']):.1f}-{max(v[im]['us_rounds']):.1f}]"
        print(s)
PY
    ;;
  *) sed -n '2,/^set /p' "$0" | grep '^#'; exit 2 ;;
esac
