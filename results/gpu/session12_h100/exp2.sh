#!/usr/bin/env bash
# Session 12 (H100, issue 14), after exp.sh: what limits the sparse fused MLP at high sparsity.
# ncu (full set) of one 90 %-sparse union-list call (Llama-3 8B and 70B, M = 1, the device-chosen
# blocks) and of one dense 8B call; the fixed cost from 90 / 95 / 99 % sparse lists. One device call:
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session12_h100/exp2.sh; tar czf $O/exp2.tgz -C /tmp/o .
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/exp2}; mkdir -p "$O"
B=${BUILD_DIR:-build-gpu}
CLI=$B/bench/blockfuse
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
CMAKE_ARGS="-DBLOCKFUSE_SM90=OFF -DBLOCKFUSE_BUILD_TESTS=OFF" BLOCKFUSE_CUDA_ARCHS=90 scripts/build "$B" > "$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
el built
timeout 120 "$CLI" bench fused-mlp --shapes llama3-8b,llama3-70b --m 1 --sparsity 90,95,99 --sparse-nb 0,16 \
  --json "$O/fmlp_fixed.json" > "$O/fmlp_fixed.log" 2>&1
el "bench rc $?"
prof() {  # NAME SKIP BENCH-ARGS...: ncu --set full of the kernel<bf16, NT = 1, NG = 4> launch after SKIP of them
  local name=$1 skip=$2; shift 2
  timeout 120 ncu --clock-control none --set full --kernel-name-base demangled -k 'regex:\(int\)1, \(int\)4>' \
    --launch-skip "$skip" --launch-count 1 -o "$O/$name" "$CLI" bench fused-mlp --m 1 --reps 2 --warmup 1 --calls 2 "$@" \
    > "$O/ncu_$name.log" 2>&1
  el "ncu $name rc $?"
  ncu -i "$O/$name.ncu-rep" --print-details all > "$O/ncu_$name.txt" 2>&1
  ncu -i "$O/$name.ncu-rep" --page source --csv --print-source sass > "$O/src_$name.csv" 2>&1
}
prof sparse90_8b 2 --shapes llama3-8b --sparsity 90 --nb 16
prof sparse90_70b 2 --shapes llama3-70b --sparsity 90 --nb 16
prof dense_8b 1 --shapes llama3-8b --sparsity 90 --nb 0
python3 - "$O" <<'PY'
import csv, json, os, sys
o = sys.argv[1]
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
for name in ("sparse90_8b", "sparse90_70b", "dense_8b"):
    try:
        rows = list(csv.reader(open(os.path.join(o, f"src_{name}.csv"))))
        hdr = next(i for i, r in enumerate(rows) if any("Sampling" in c for c in r))
        h = rows[hdr]
        col = next(i for i, c in enumerate(h) if "Sampling (All" in c)
        src = next(i for i, c in enumerate(h) if "Source" in c)
        body = [r for r in rows[hdr + 1:] if len(r) > col]
        tot = sum(num(r[col]) for r in body) or 1
        print(f"== {name}: top SASS lines by warp-stall samples (share of all {tot:.0f})")
        for r in sorted(body, key=lambda r: -num(r[col]))[:14]:
            print(f"{100 * num(r[col]) / tot:5.1f}%  {r[src][:100]}")
    except Exception as e:
        print(name, "source page unreadable:", repr(e), open(os.path.join(o, f"src_{name}.csv")).read()[:300])
print("== fixed cost: µs per call (nb)")
for r in json.load(open(os.path.join(o, "fmlp_fixed.json")))["rows"]:
    print(f"{r['shape']:11} {r['variant']:16} nb {r['neurons_per_block']:2d} {r['us']:7.1f} µs  {r['bytes_read'] / 1e6:7.1f} MB  {100 * r['frac_of_copy']:5.1f} % copy")
PY
for n in sparse90_8b sparse90_70b dense_8b; do echo "== $n"; grep -E "^ +(Duration|DRAM Throughput|Memory Throughput|L2 Hit Rate|Achieved Occupancy|Registers Per Thread|Grid Size|Waves Per SM|Warp Cycles Per Issued Instruction|Issued Warp Per Scheduler|No Eligible|Avg. Active Threads)" "$O/ncu_$n.txt" | sed 's/  */ /g' | head -14; done
