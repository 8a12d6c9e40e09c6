#!/usr/bin/env bash
# Session 8 (H100, issue 17): where add_rmsnorm trails quack (2048-32768 rows, 0.96-0.98x in
# baselines_final), blockfuse's kernel and quack's under ncu in one call. Three back-to-back calls:
#   1. `bash results/gpu/session8_h100/ncu8.sh build`, carrying the five .deps folders of scripts/gpu-check;
#   2. `cp .deps/peers/part1/cu13.tar.xz.00 /tmp/`, carrying .deps/peers/part1;
#   3. `bash results/gpu/session8_h100/ncu8.sh`, carrying .deps/peers/part2.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/ncu8}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
if [ "${1:-}" = build ]; then
  BLOCKFUSE_CUDA_ARCHS=90 CMAKE_ARGS="-DBLOCKFUSE_SM90=OFF -DBLOCKFUSE_BUILD_TESTS=OFF" JOBS=16 scripts/build build-ncu > "$O/build.log" 2>&1
  el "build rc $?"; exit 0
fi
sp=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['platlib'])")
( cat /tmp/cu13.tar.xz.00 .deps/peers/part2/cu13.tar.xz.01 | tar -xJ -C "$sp" && python3 -m pip install -q --no-deps .deps/peers/part2/*.whl ) > "$O/install.log" 2>&1; el "peers rc $?"
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,launch__block_size,launch__shared_mem_per_block,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__cluster_size
for h in 4096 16384; do for rows in 2048 32768; do
  timeout 60 ncu --metrics $M --section WarpStateStats -k regex:add_rmsnorm --launch-skip 1 --launch-count 1 build-ncu/bench/blockfuse bench \
    add-rmsnorm --hidden $h --rows $rows --fp8 none --reps 2 --warmup 1 --no-ceilings > "$O/ncu_blockfuse_${h}_${rows}.txt" 2>&1
  el "blockfuse H=$h rows=$rows rc $?"
  timeout 90 ncu --metrics $M --section WarpStateStats -k regex:'RMSNorm|rmsnorm|Norm' --launch-skip 3 --launch-count 1 python3 -c "
import torch; from quack.rmsnorm import rmsnorm_fwd
x = torch.randn($rows, $h, dtype=torch.bfloat16, device='cuda'); r = torch.randn_like(x); w = torch.randn($h, dtype=torch.bfloat16, device='cuda')
for _ in range(6): rmsnorm_fwd(x, w, residual=r, eps=1e-6)
torch.cuda.synchronize()" > "$O/ncu_quack_${h}_${rows}.txt" 2>&1
  el "quack H=$h rows=$rows rc $?"
done; done
for f in "$O"/ncu_*.txt; do echo "== $(basename $f)"; grep -E "==PROF== Profiling|gpu__time|dram__|lts__t_sector|warps_active|inst_executed|issue_active|registers_per|grid_size|block_size|shared_mem_per|occupancy_limit|cluster_size|Warp Cycles Per Issued|rror" "$f" | sed 's/  */ /g' | cut -c1-140 | head -24; done
cd "$O" && tar czf ncu8.tgz *.txt *.log && rm -f *.txt *.log
