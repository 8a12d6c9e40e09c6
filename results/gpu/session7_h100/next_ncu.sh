#!/usr/bin/env bash
# For the next session (issue 17, written in session 7, not yet run): the points where blockfuse's
# add_rmsnorm trails quack in session 7's run18 — 256 rows (0.90-0.96x quack) and 32768 rows
# (0.97-0.98x) — under ncu, blockfuse's kernel and quack's in one call. Three back-to-back calls
# (each within 30 s of the last, so the machine and its build-ncu stay):
#   1. `bash results/gpu/session7_h100/next_ncu.sh build`, carrying the CUTLASS include folders
#      (.deps/cutlass/cutlass_library/source/include and .../tools/util/include) and .deps/googletest,
#      .deps/cli11/include, .deps/nlohmann/include (scripts/deps wants them all);
#   2. `cp .deps/peers/part1/cu13.tar.xz.00 /tmp/`, carrying .deps/peers/part1 (run5.sh);
#   3. `bash results/gpu/session7_h100/next_ncu.sh`, carrying .deps/peers/part2 only (64 MiB limit).
set -uo pipefail
O=${OUT:-/tmp/ncu_out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
if [ "${1:-}" = build ]; then
  BLOCKFUSE_CUDA_ARCHS=90 CMAKE_ARGS="-DBLOCKFUSE_SM90=OFF -DBLOCKFUSE_BUILD_TESTS=OFF" JOBS=16 scripts/build build-ncu > "$O/build.log" 2>&1
  el "build rc $?"; exit 0
fi
sp=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['platlib'])")
( cat /tmp/cu13.tar.xz.00 .deps/peers/part2/cu13.tar.xz.01 | tar -xJ -C "$sp" && python3 -m pip install -q --no-deps .deps/peers/part2/*.whl ) > "$O/install.log" 2>&1; el "peers rc $?"
M=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__occupancy_limit_registers,launch__grid_size,launch__block_size,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_barrier.ratio
for h in 4096 16384; do for rows in 256 32768; do
  timeout 40 ncu --metrics $M -k regex:add_rmsnorm --launch-skip 3 --launch-count 1 build-ncu/bench/blockfuse bench add-rmsnorm \
    --hidden $h --rows $rows --fp8 none --graph-rows 0 --reps 2 --warmup 1 --no-ceilings > "$O/ncu_blockfuse_${h}_${rows}.txt" 2>&1
  el "blockfuse H=$h rows=$rows rc $?"
  timeout 60 ncu --metrics $M -k regex:RMSNorm --launch-skip 3 --launch-count 1 python3 -c "
import torch; from quack.rmsnorm import rmsnorm_fwd
x = torch.randn($rows, $h, dtype=torch.bfloat16, device='cuda'); r = torch.randn_like(x); w = torch.randn($h, dtype=torch.bfloat16, device='cuda')
for _ in range(6): rmsnorm_fwd(x, w, residual=r, eps=1e-6)
torch.cuda.synchronize()" > "$O/ncu_quack_${h}_${rows}.txt" 2>&1
  el "quack H=$h rows=$rows rc $?"
done; done
for f in "$O"/ncu_*.txt; do echo "== $(basename $f)"; grep -E "dram__throughput|gpu__time_duration|warps_active|long_scoreboard|barrier|grid_size|block_size|registers_per" "$f" | sed 's/  */ /g' | head -12; done
