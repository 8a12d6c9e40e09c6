#!/usr/bin/env bash
# Session 18, call 2 (issue 14): where a short union list's time goes. The 8B sparse rows follow
# t ≈ 12 µs + bytes / copy bandwidth (session 12's 90 / 95 / 99 % rows). This times, for 8B at M = 1
# (dense, 50 / 75 / 90 / 95 / 99 % union lists), the per-call time in the bench's CUDA graph beside
# the kernel's own duration (ncu gpu__time_duration, clocks not locked, one launch a row) and, where
# nsys is installed, the graph's kernel timeline (the gap between consecutive calls).
#   run: bash results/gpu/session18_h100/call2.sh   (writes under $OUT; CLI .wt/bins/cli_head.xz)
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/s18c2}; mkdir -p "$O"
X=/tmp/bins; mkdir -p $X; xz -dc .wt/bins/cli_head.xz > $X/cli && chmod +x $X/cli
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
ARGS="--shapes llama3-8b --m 1 --sparsity 50,75,90,95,99"
timeout 60 $X/cli bench fused-mlp $ARGS --json "$O/bench.json" > "$O/bench.log" 2>&1; el "bench rc $?"
grep -E 'dense|sparse' "$O/bench.log" | head -20
timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --kernel-name-base demangled \
  -k 'regex:fused_mlp' --csv $X/cli bench fused-mlp $ARGS --reps 2 --warmup 1 --calls 2 --no-ceilings \
  > "$O/ncu.csv" 2> "$O/ncu.err"; el "ncu rc $?"
NSYS=$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${NSYS:-none}"
if [ -n "$NSYS" ]; then
  timeout 120 $NSYS profile --cuda-graph-trace=node -o /tmp/s18 -f true $X/cli bench fused-mlp $ARGS --reps 3 --warmup 1 \
    --no-ceilings > "$O/nsys.log" 2>&1; el "nsys rc $?"
  $NSYS stats --report cuda_gpu_trace --format csv -o /tmp/s18tr /tmp/s18.nsys-rep > /dev/null 2>&1
  ls /tmp/s18tr* ; gzip -9c /tmp/s18tr*.csv > "$O/trace.csv.gz"
fi
python3 - "$O" <<'PY' | tee "$O/table.txt"
import csv, gzip, io, json, os, sys, collections
o = sys.argv[1]
b = json.load(open(os.path.join(o, "bench.json")))["rows"]
print("bench (graph of 10 calls, per-call median µs):")
for r in b: print(f"  M={r['m']} {r['variant']:24} {r['us']:8.2f}")
try:
    lines = open(os.path.join(o, "ncu.csv")).read().splitlines()
    i = next(k for k, l in enumerate(lines) if l.startswith('"ID"'))
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[i:]))))
    d = collections.OrderedDict()
    for r in rows:
        d.setdefault(r["ID"], {"name": r["Kernel Name"][:60]})[r["Metric Name"]] = r["Metric Value"]
    print("ncu, each launch in order (duration µs, DRAM MB read):")
    for k, v in d.items():
        t = float(v.get("gpu__time_duration.sum", "nan").replace(",", "")) / 1e3
        mb = float(v.get("dram__bytes_read.sum", "nan").replace(",", ""))
        print(f"  {k:>4} {t:8.2f} {mb:10.3g} {v['name']}")
except Exception as e:
    print("ncu parse:", e)
p = os.path.join(o, "trace.csv.gz")
if os.path.exists(p):
    rows = list(csv.DictReader(io.TextIOWrapper(gzip.open(p), encoding="utf-8")))
    ks = [r for r in rows if "fused_mlp" in r.get("Name", "")]
    print(f"nsys: {len(ks)} fused_mlp kernels; start-to-start and duration of consecutive launches (µs), by grid:")
    prev = None; runs = collections.OrderedDict()
    for r in ks:
        s, d = int(r["Start (ns)"]), int(r["Duration (ns)"])
        key = (r.get("GrdX", ""), r.get("BlkX", ""), r["Name"][:50])
        if prev is not None and s - prev[0] < 100000:
            runs.setdefault(key, []).append(((s - prev[0]) / 1e3, prev[1] / 1e3))
        prev = (s, d)
    for k, v in runs.items():
        v.sort()
        m = v[len(v) // 2]
        print(f"  grid {k[0]:>6} blk {k[1]:>5} n={len(v):4} median start-to-start {m[0]:7.2f}  duration {sorted(x[1] for x in v)[len(v)//2]:7.2f}  {k[2]}")
PY
