#!/usr/bin/env bash
# One device call (H100): two new kernel shapes beside the current ones, in the same binary through the
# process-wide switches — add_rmsnorm's one-block register path as a persistent grid loading each
# block's next row early (bench --next-row on|off) and swiglu_fp8's dynamic row kernel with 4 chunks
# per thread kept packed in registers (--row-rule four-regs), and for decode-sized calls add_rmsnorm's
# weight loaded into registers with the row (--weight-preload on) — plus ncu's DRAM counters, and the
# add_rmsnorm baselines (torch.compile static) of bench/memory_bound_baselines.py. PARTS picks steps.
# From the repo root: OUT=/some/dir results/gpu/memory_bound_h100/next_row/run.sh; everything under $OUT
# ends in $OUT/next_row.tgz beside steps.log (the device tool returns only a few files per call).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
O=${OUT:-/tmp/next_row_out}
mkdir -p "$O"
T0=$(date +%s)
step() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$O/steps.log"; }
left() { echo $(( ${BUDGET:-560} - ($(date +%s) - T0) )); }
B=build-dev
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_BUILD_PYTHON=ON > "$O/build.log" 2>&1
timeout 230 cmake --build $B -j16 --target blockfuse_cli blockfuse_gpu_tests blockfuse_C >> "$O/build.log" 2>&1
rc=$?; step "build rc $rc"
[ $rc -eq 0 ] || { tail -40 "$O/build.log"; exit 1; }
CLI=$B/bench/blockfuse
PARTS=${PARTS:-tests swiglu next preload ncu baselines}
want() { [[ " $PARTS " == *" $1 "* ]]; }
want tests && timeout 90 $B/tests/blockfuse_gpu_tests \
  --gtest_filter='*NextRow*:*WeightPreload*:*EveryRowRule*:*SharedStagedRowKernel*:*BothShapeRulesAndExchanges*' \
  > "$O/gtest.log" 2>&1
want tests && step "gpu tests rc $? ($(grep -c '^\[  FAILED' "$O/gtest.log") failed lines); $(tail -2 "$O/gtest.log" | tr '\n' ' ')"
want swiglu && for r in two four four-regs; do
  timeout 40 $CLI bench swiglu --hidden 14336,16384,28672 --rows 1,32,256,1024,2048,8192 --out fp8-dynamic --row-rule $r \
    --reps 20 --warmup 3 --json "$O/swiglu_rule_$r.json" > "$O/swiglu_rule_$r.log" 2>&1
  step "swiglu rule $r rc $?"
done
want next && for n in off on; do
  timeout 60 $CLI bench add-rmsnorm --hidden 4096,8192,16384 --rows 2048,8192,32768 --fp8 none --next-row $n \
    --reps 20 --warmup 3 --json "$O/add_rmsnorm_next_$n.json" > "$O/add_rmsnorm_next_$n.log" 2>&1
  step "add-rmsnorm next-row $n rc $?"
done
want preload && for c in "--clusters on --weight-preload off" "--clusters off --weight-preload off" "--clusters off --weight-preload on"; do
  tag=$(echo $c | tr -d '-' | tr ' ' '_')
  timeout 40 $CLI bench add-rmsnorm --hidden 4096,8192,16384 --rows 1,8,32,256 --fp8 all $c \
    --reps 30 --warmup 5 --json "$O/add_rmsnorm_small_$tag.json" > "$O/add_rmsnorm_small_$tag.log" 2>&1
  step "add-rmsnorm small rows $c rc $?"
done
if want ncu && command -v ncu > /dev/null; then
  M=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__grid_size
  for n in on; do
    timeout 25 ncu --metrics $M -k regex:add_rmsnorm_regs --launch-skip 2 --launch-count 1 $CLI bench add-rmsnorm \
      --hidden 16384 --rows 2048 --fp8 none --next-row $n --reps 2 --warmup 1 > "$O/ncu_add_rmsnorm_16384_2048_$n.txt" 2>&1
    step "ncu add-rmsnorm $n rc $?"
  done
  for r in four four-regs; do
    timeout 25 ncu --metrics $M -k regex:swiglu_fp8_rowwise --launch-skip 2 --launch-count 1 $CLI bench swiglu \
      --hidden 16384 --rows 8192 --out fp8-dynamic --row-rule $r --reps 2 --warmup 1 > "$O/ncu_swiglu_16384_8192_$r.txt" 2>&1
    step "ncu swiglu $r rc $?"
  done
  timeout 25 ncu --metrics $M -k regex:swiglu_elementwise --launch-skip 2 --launch-count 1 $CLI bench swiglu \
    --hidden 16384 --rows 8192 --out fp8-static --reps 2 --warmup 1 > "$O/ncu_swiglu_16384_8192_static.txt" 2>&1
  step "ncu swiglu static rc $?"
fi
export PYTHONPATH=$PWD/python BLOCKFUSE_TORCH_LIB=$PWD/$B/_C.so TORCHINDUCTOR_COMPILE_THREADS=1
t=$(( $(left) - 15 )); want baselines && [ $t -gt 20 ] && timeout $t python3 bench/memory_bound_baselines.py --ops add-rmsnorm \
  --hidden 16384,4096,8192 --rows 2048,8192,32768,1,32 --outs bf16 --impls blockfuse,compile --compile-rows 1,32,2048,8192,32768 \
  --json "$O/baselines_add_rmsnorm.json" > "$O/baselines_add_rmsnorm.log" 2>&1
step "baselines add-rmsnorm rc $?"
step "done"
(cd "$O" && tar czf /tmp/next_row.tgz --exclude=steps.log . ; \
  find . -maxdepth 1 -type f ! -name steps.log -delete; mv /tmp/next_row.tgz .)
tail -30 "$O/steps.log"
