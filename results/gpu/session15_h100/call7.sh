#!/usr/bin/env bash
# Session 15, call 7 (issue 17), with what was left of the device budget:
#   1. torch_gap.py: where the ~16 µs a call go that the torch bench measured over the kernel at
#      H = 4096 x 32768 rows (call 6); needs _C.so, built here;
#   2. the wide rule (v1 x 512) against the default (v2 x 256) at H <= 4096 from 1536 rows, every output,
#      bf16 and fp16 (call 6 measured H = 4096 bf16 only): for the next session's rule change.
# Carries .wt/bins (cli_base.xz) and the scripts/deps headers. From the repo root:
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session15_h100/call7.sh; tar czf $O/call7.tgz -C /tmp/o .
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/call7}; mkdir -p "$O"
X=/tmp/bins; mkdir -p $X
for f in .wt/bins/*.xz; do n=$(basename "$f" .xz); xz -dc "$f" > "$X/$n"; chmod +x "$X/$n"; done
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
for run in 1 2; do for rule in default wide; do for dt in bf16 fp16; do
  timeout 60 $X/cli_base bench add-rmsnorm --hidden 2048,3584,4096 --rows 1536,2048,4096,8192,32768 --fp8 all --rule $rule \
    --dtype $dt --json "$O/rule_${rule}_${dt}_$run.json" > "$O/rule_${rule}_${dt}_$run.log" 2>&1
done; done; el "rule run $run"; done
scripts/deps > /dev/null 2>&1
cmake -S . -B build-c7 -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_BUILD_PYTHON=ON \
  -DPython_EXECUTABLE=$(command -v python3) > "$O/build.log" 2>&1 && cmake --build build-c7 --target blockfuse_C -j16 >> "$O/build.log" 2>&1 \
  || { tail -30 "$O/build.log"; exit 1; }
el "built _C.so"
export BLOCKFUSE_TORCH_LIB=$PWD/$(find build-c7 -maxdepth 2 -name '_C.so' | head -1) PYTHONPATH="$PWD/python"
timeout 200 python3 results/gpu/session15_h100/torch_gap.py "$O/torch_gap.json" > "$O/torch_gap.log" 2>&1; el "torch_gap rc $?"
{
python3 - "$O" <<'PY'
import glob, json, os, sys
o = sys.argv[1]
t = {}
for f in glob.glob(os.path.join(o, "rule_*_[12].json")):
    side = os.path.basename(f).split("_")[1]
    for r in json.load(open(f))["rows"]:
        t.setdefault((r["dtype"], r["H"], r["rows"], r["fp8"]), {}).setdefault(side, []).append((100 * r["fused_frac_of_copy"], r["verified"]))
print("% of copy (two runs: min-max), rule default -> wide:")
for k in sorted(t):
    a, b = t[k].get("default", []), t[k].get("wide", [])
    if a and b:
        print(f"  {k[0]} H={k[1]:5d} rows={k[2]:5d} {k[3]:8} {min(x for x, _ in a):5.1f}-{max(x for x, _ in a):5.1f} -> {min(x for x, _ in b):5.1f}-{max(x for x, _ in b):5.1f}"
              + ("" if all(v for _, v in a + b) else "  VERIFY FAILED"))
PY
echo "torch_gap.py:"; cat "$O/torch_gap.log"
} | tee "$O/table.txt"
