#!/usr/bin/env bash
# Session 12 (H100, issue 14): the fused MLP's down phase filling its load slots with several chunks
# of 16- and 32-neuron blocks at M <= 8 (fused_mlp_sm80.cuh). One device call from the repo root,
# carrying the five .deps folders of scripts/gpu-check:
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session12_h100/exp.sh; tar czf $O/exp.tgz -C /tmp/o .
# Builds, runs the fused-MLP GPU tests and memcheck of its sanitizer set, times the bench rows of
# session 12's first call (fmlp_forced.json: the same rows before the change) at M = 1 / 4 / 8, and
# profiles one 90 %-sparse 8B call under ncu (the union list's device-chosen 16-neuron blocks).
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/exp}; mkdir -p "$O"
B=${BUILD_DIR:-build-gpu}
CLI=$B/bench/blockfuse
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
BLOCKFUSE_CUDA_ARCHS=90 scripts/build "$B" > "$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
el built
"$B/tests/blockfuse_gpu_tests" --gtest_filter='*FusedMlp*:*Router*' > "$O/gpu_tests.log" 2>&1
el "gpu tests rc $? ($(grep -c '^\[       OK' "$O/gpu_tests.log") ok, $(grep -c '^\[  FAILED' "$O/gpu_tests.log") failed lines)"
compute-sanitizer --tool memcheck "$B/tests/blockfuse_gpu_tests" --gtest_filter='FusedMlpSanitizer*' > "$O/memcheck.log" 2>&1
el "memcheck rc $? ($(grep -m1 'ERROR SUMMARY' "$O/memcheck.log"))"
timeout 300 "$CLI" bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,4,8 --sparsity 50,75,90 --nb 0,16,32,64 \
  --sparse-nb 0,16,32,64 --json "$O/fmlp_slots.json" > "$O/fmlp_slots.log" 2>&1
el "bench rc $? ($(grep -c 'VERIFY FAILED' "$O/fmlp_slots.log") verify failures)"
timeout 60 "$CLI" bench swiglu --out fp8-dynamic --hidden 28672 --rows 1,8,9,32 --json "$O/swd_auto.json" > "$O/swd_auto.log" 2>&1
el "swiglu kAuto rc $?"
timeout 120 ncu --clock-control none --set full --kernel-name-base demangled -k 'regex:fused_mlp_kernel<.*1, 4>' \
  --launch-skip 2 --launch-count 1 -o "$O/sparse90" "$CLI" bench fused-mlp --shapes llama3-8b --m 1 --sparsity 90 --nb 16 \
  --reps 2 --warmup 1 --calls 2 > "$O/ncu.log" 2>&1
el "ncu rc $?"
ncu -i "$O/sparse90.ncu-rep" --print-details all > "$O/ncu_details.txt" 2>&1
ncu -i "$O/sparse90.ncu-rep" --page source --csv --print-source sass > "$O/ncu_source.csv" 2>&1
python3 - "$O" <<'PY'
import csv, json, os, sys
o = sys.argv[1]
try:
    rows = list(csv.reader(open(os.path.join(o, "ncu_source.csv"))))
    hdr = next(i for i, r in enumerate(rows) if any("Sampling" in c for c in r))
    h = rows[hdr]
    col = next(i for i, c in enumerate(h) if "Warp Stall Sampling (All" in c)
    src = next(i for i, c in enumerate(h) if c.strip() in ("Source", "# Source") or c.startswith("Source"))
    body = [r for r in rows[hdr + 1:] if len(r) > col]
    def num(x):
        try: return float(x.replace(",", ""))
        except ValueError: return 0.0
    tot = sum(num(r[col]) for r in body) or 1
    print("ncu: top SASS lines by warp-stall samples (share of all)")
    for r in sorted(body, key=lambda r: -num(r[col]))[:25]:
        print(f"{100 * num(r[col]) / tot:5.1f}%  {r[src][:110]}")
except Exception as e:
    print("ncu source page unreadable:", e)
def rows(f):
    try: return json.load(open(os.path.join(o, f)))["rows"]
    except Exception as e: print(f, "unreadable:", e); return []
print("fused MLP after the change, µs (nb); dense/sparse ratio = dense heuristic µs / row µs")
d = {}
for r in rows("fmlp_slots.json"):
    d.setdefault((r["shape"], r["m"]), []).append(r)
for k in sorted(d):
    print(k[0], k[1], " ".join(f"{r['variant']}:{r['neurons_per_block']}:{r['us']:.1f}" for r in d[k]))
PY
grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Grid Size|Stall|One or More|No Eligible" "$O/ncu_details.txt" | head -40
