#!/usr/bin/env bash
# Session 15, call 6 (issue 17): why add_rmsnorm at H = 4096 x 32768 rows moved 98.4 % of copy in the
# C++ bench (call1, arp_base_*.json) but 93.7 % through torch (peers/arn_large.json), where quack
# reached 98.5 %. Same kernel (v2 x 256, streaming stores) both ways; the buffers' placement differs.
#   1. timing: the C++ bench with its buffers moved (--skew-mb 0 / 3 / 7 / 64 / 160) and the torch
#      bench, H = 4096 and 16384 x 8192 / 32768 rows, bf16 out;
#   2. torch_place.py: through torch with the buffers moved by pads, out of place and in place;
#   3. ncu (DRAM bytes and throughput, L2 hit rate, duration) of one launch in each setting.
# Carries .wt/bins: cli_base.xz (main of call 1) and _C.so.xz (this session's main, built on the CPU
# machine for sm_90). From the repo root:
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session15_h100/call6.sh; tar czf $O/call6.tgz -C /tmp/o .
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/call6}; mkdir -p "$O"
X=/tmp/bins; mkdir -p $X
for f in .wt/bins/*.xz; do n=$(basename "$f" .xz); xz -dc "$f" > "$X/$n"; chmod +x "$X/$n"; done
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export BLOCKFUSE_TORCH_LIB=$X/_C.so PYTHONPATH="$PWD/python"
for s in 0 3 7 64 160; do
  timeout 60 $X/cli_base bench add-rmsnorm --hidden 4096,16384 --rows 8192,32768 --fp8 none --skew-mb $s \
    --json "$O/cpp_skew$s.json" > "$O/cpp_skew$s.log" 2>&1; el "c++ skew $s rc $?"
done
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
print("through torch (bench/memory_bound_baselines.py):")
for f in sorted(glob.glob(os.path.join(o, "torch_*.json"))):
    for r in json.load(open(f))["rows"]:
        print(f"  {os.path.basename(f)[:-5]}  {r['shape']:8} rows={r['rows']:5d}  {r['us']:8.2f} us ({100 * r['frac_copy']:5.1f} %)")
PY
echo "through torch, by placement (torch_place.py):"; cat "$O/torch_place.log"
for f in ncu_cpp ncu_torch; do echo "$f:"; grep -E '^\s+(gpu__|dram__|lts__|sm__)' "$O/$f.txt"; done
} | tee "$O/table.txt"
