#!/usr/bin/env bash
# Session 15, call 6 (issue 17): why add_rmsnorm at H = 4096 x 32768 rows moved 98.4 % of copy in the
# C++ bench (call1, arp_base_*.json) but 93.7 % through torch (peers/arn_large.json), where quack
# reached 98.5 %. Same kernel (v2 x 256, streaming stores) both ways; the buffers' placement differs.
#   1. timing: the C++ bench with its buffers moved (--skew-mb 0 / 3 / 7 / 64 / 160) and the torch
#      bench, H = 4096 and 16384 x 8192 / 32768 rows, bf16 out;
#   1b. the C++ bench at H = 4096 with --rule wide (v1 x 512) beside the default (v2 x 256);
#   2. torch_place.py: through torch with the buffers moved by pads, out of place and in place;
#   3. ncu (DRAM bytes and throughput, L2 hit rate, duration) of one launch in each setting.
# Carries .wt/bins (cli_base.xz: main of call 1, built on the CPU machine) and the CUTLASS headers
# etc. of scripts/deps, to build _C.so of this session's main here. From the repo root:
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session15_h100/call6.sh; tar czf $O/call6.tgz -C /tmp/o .
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/call6}; mkdir -p "$O"
X=/tmp/bins; mkdir -p $X
for f in .wt/bins/*.xz; do n=$(basename "$f" .xz); xz -dc "$f" > "$X/$n"; chmod +x "$X/$n"; done
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
if [ ! -f $X/_C.so ]; then  # build the torch binding here (about 2 minutes on 16 cores)
  scripts/deps > /dev/null 2>&1
  cmake -S . -B build-c6 -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE=$(command -v python3) > "$O/build.log" 2>&1 && cmake --build build-c6 --target blockfuse_C -j16 >> "$O/build.log" 2>&1 \
    || { tail -30 "$O/build.log"; exit 1; }
  cp "$(find build-c6 -maxdepth 2 -name '_C.so' | head -1)" $X/_C.so; el "built _C.so"
fi
export BLOCKFUSE_TORCH_LIB=$X/_C.so PYTHONPATH="$PWD/python"
for s in 0 3 7 64 160; do
  timeout 60 $X/cli_base bench add-rmsnorm --hidden 4096,16384 --rows 8192,32768 --fp8 none --skew-mb $s \
    --json "$O/cpp_skew$s.json" > "$O/cpp_skew$s.log" 2>&1; el "c++ skew $s rc $?"
done
# H = 4096 with the wide rule (v1 x 512) against the default (v2 x 256), two interleaved runs each.
for run in 1 2; do for rule in default wide; do
  timeout 60 $X/cli_base bench add-rmsnorm --hidden 4096 --rows 1024,2048,8192,32768 --fp8 all --rule $rule \
    --json "$O/rule_${rule}_$run.json" > "$O/rule_${rule}_$run.log" 2>&1
done; el "rule run $run"; done
for run in 1 2; do
  timeout 90 python3 bench/memory_bound_baselines.py --ops add-rmsnorm --hidden 4096,16384 --rows 8192,32768 --outs bf16 \
    --impls blockfuse --json "$O/torch_$run.json" > "$O/torch_$run.log" 2>&1; el "torch run $run rc $?"
done
timeout 150 python3 results/gpu/session15_h100/torch_place.py "$O/torch_place.json" > "$O/torch_place.log" 2>&1; el "torch placement rc $?"
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active
NCU="ncu --clock-control none -k regex:add_rmsnorm --launch-skip 4 --launch-count 1 --metrics $M"
timeout 90 $NCU $X/cli_base bench add-rmsnorm --hidden 4096 --rows 32768 --fp8 none --reps 3 --warmup 2 --no-ceilings > "$O/ncu_cpp.txt" 2>&1; el "ncu c++ rc $?"
timeout 120 $NCU python3 bench/memory_bound_baselines.py --ops add-rmsnorm --hidden 4096 --rows 32768 --outs bf16 --impls blockfuse > "$O/ncu_torch.txt" 2>&1; el "ncu torch rc $?"
{
python3 - "$O" <<'PY'
import glob, json, os, sys
o = sys.argv[1]
print("add_rmsnorm bf16 out, µs (% of copy): the C++ bench by --skew-mb, with the buffer offsets it got (MB below x: res / res_out / out)")
for f in sorted(glob.glob(os.path.join(o, "cpp_skew*.json")), key=lambda f: int(f.split("skew")[1][:-5])):
    for r in json.load(open(f))["rows"]:
        print(f"  skew {os.path.basename(f)[8:-5]:>3}  H={r['H']:5d} rows={r['rows']:5d}  {r['fused_us']:8.2f} us ({100 * r['fused_frac_of_copy']:5.1f} %)  "
              f"offsets {-r['res_minus_x'] >> 20} / {-r['ro_minus_x'] >> 20} / {-r['out_minus_x'] >> 20}" + ("" if r["verified"] else "  VERIFY FAILED"))
print("H = 4096, % of copy (two runs: min-max), rule default (v2 x 256) -> wide (v1 x 512):")
t = {}
for f in glob.glob(os.path.join(o, "rule_*_[12].json")):
    side = os.path.basename(f).split("_")[1]
    for r in json.load(open(f))["rows"]:
        t.setdefault((r["rows"], r["fp8"]), {}).setdefault(side, []).append((100 * r["fused_frac_of_copy"], r["verified"]))
for k in sorted(t):
    a, b = t[k].get("default", []), t[k].get("wide", [])
    if a and b:
        print(f"  rows={k[0]:5d} {k[1]:8} {min(x for x, _ in a):5.1f}-{max(x for x, _ in a):5.1f} -> {min(x for x, _ in b):5.1f}-{max(x for x, _ in b):5.1f}"
              + ("" if all(v for _, v in a + b) else "  VERIFY FAILED"))
print("through torch (bench/memory_bound_baselines.py):")
for f in sorted(glob.glob(os.path.join(o, "torch_*.json"))):
    for r in json.load(open(f))["rows"]:
        print(f"  {os.path.basename(f)[:-5]}  {r['shape']:8} rows={r['rows']:5d}  {r['us']:8.2f} us ({100 * r['frac_copy']:5.1f} %)")
PY
echo "through torch, by placement (torch_place.py):"; cat "$O/torch_place.log"
for f in ncu_cpp ncu_torch; do echo "$f:"; grep -E '^\s+(gpu__|dram__|lts__|sm__)' "$O/$f.txt"; done
} | tee "$O/table.txt"
