"""Prints exp1's sweeps as compact tables (µs per call; the kernel label beside it)."""
import glob
import json
import os
import sys

d = sys.argv[1]
def rows_of(pattern):
    out = {}
    for f in sorted(glob.glob(os.path.join(d, pattern))):
        key = os.path.basename(f)[:-5]
        try:
            out[key] = json.load(open(f))["rows"]
        except Exception as e:  # a run cut short
            print(f"{key}: {e}")
    return out

arn = rows_of("arn_*.json")
for h in (4096, 8192, 16384):
    print(f"add-rmsnorm H={h} bf16 (us; rule/preload-chunks)")
    for key, rows in arn.items():
        if not key.startswith(f"arn_{h}_"):
            continue
        cells = [f"{r['rows']}:{r['fused_us']:.2f}({r.get('kernel', '')})" for r in rows if r.get("fp8", "none") == "none"]
        print(f"  {key[len(f'arn_{h}_'):]:16} " + "  ".join(cells))
sw = rows_of("sw_*.json")
for u in (14336, 28672):
    print(f"swiglu U={u} 16-bit (us; small-chunks-per-sm)")
    for key, rows in sorted(sw.items(), key=lambda kv: int(kv[0].split('_')[2]) if kv[0].startswith(f"sw_{u}_") else 0):
        if not key.startswith(f"sw_{u}_"):
            continue
        cells = [f"{r['M']}:{r['us']:.2f}({r['kernel'].split(' b')[0]})" for r in rows]
        print(f"  {key[len(f'sw_{u}_'):]:8} " + "  ".join(cells))
swv = rows_of("swv_*.json")
for u in (14336, 28672):
    print(f"swiglu U={u} variants (us)")
    for key, rows in swv.items():
        if key.startswith(f"swv_{u}_"):
            print(f"  {key[len(f'swv_{u}_'):]:8} " + "  ".join(f"{r['M']}{r['out'][:3]}:{r['us']:.2f}" for r in rows))
for f in sorted(glob.glob(os.path.join(d, "ncu_*.txt"))):
    print("==", os.path.basename(f))
    for line in open(f):
        s = " ".join(line.split())
        if any(k in s for k in ("gpu__time_duration", "dram__bytes", "dram__throughput", "sm__throughput", "inst_executed",
                                "issue_active", "warps_active", "grid_size", "block_size", "registers_per", "Warp Cycles Per Issued",
                                "Achieved Occupancy", "Stall", "==PROF==", "Error", "rror")):
            print("  ", s[:150])
