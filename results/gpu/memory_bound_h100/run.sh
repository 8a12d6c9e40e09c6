#!/usr/bin/env bash
# The device call behind results/gpu/memory_bound_h100/ (one call, H100, ~340 s): build for sm_90 with
# the torch binding, the add_rmsnorm / swiglu GPU tests, the old-vs-new kernel benchmarks (same binary,
# process-wide switches of src/add_rmsnorm/config.h and src/swiglu/config.h), the baselines of
# bench/memory_bound_baselines.py (blockfuse's torch ops, torch.compile static, Liger) and, time left,
# ncu's DRAM / L2 byte counters for add_rmsnorm at H = 16384, 2048 rows. Every step has its own
# timeout and writes under $OUT, so a step cut short still leaves the ones before it.
# From the repo root of the worktree: OUT=/some/dir [PARTS="tests swiglu add-rmsnorm baselines ncu"]
#   [GTEST_FILTER='*AddRmsNorm*:*Swiglu*'] results/gpu/memory_bound_h100/run.sh
# Everything under $OUT ends in one archive, $OUT/memory_bound.tgz (the device tool returns only a few
# files per call: the first run lost 17 of its 25), beside steps.log.
# Device tool (from /work/main): run(command="cd .wt/<name> && rm -f .deps && ln -s ../../.deps .deps &&
#   results/gpu/memory_bound_h100/run.sh", timeout_s=345, carry=[".wt/<name>", the .deps include
#   folders of COMMON.md, ".deps/liger"]) — the Liger wheel from `pip download --no-deps liger-kernel==0.8.5`.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/memory_bound_out}
mkdir -p "$O"
T0=$(date +%s)
step() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$O/steps.log"; }
left() { echo $(( ${BUDGET:-335} - ($(date +%s) - T0) )); }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader
  command -v ncu || echo "ncu: not found"
  nvcc --version | tail -1
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > "$O/device.txt" 2>&1
B=build-dev
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=OFF \
  -DBLOCKFUSE_BUILD_PYTHON=ON > "$O/build.log" 2>&1
timeout 210 cmake --build $B -j16 --target blockfuse_cli blockfuse_gpu_tests blockfuse_C >> "$O/build.log" 2>&1
rc=$?; step "build rc $rc"
[ $rc -eq 0 ] || { tail -40 "$O/build.log"; exit 1; }
CLI=$B/bench/blockfuse
PARTS=${PARTS:-tests swiglu add-rmsnorm baselines ncu}
want() { [[ " $PARTS " == *" $1 "* ]]; }

if want tests; then
  timeout ${GTEST_TIMEOUT:-120} $B/tests/blockfuse_gpu_tests --gtest_filter="${GTEST_FILTER:-*AddRmsNorm*:*Swiglu*}" \
    --gtest_output="json:$O/gtest_add_rmsnorm_swiglu.json" > "$O/gtest.log" 2>&1
  step "gpu tests rc $? ($(grep -c '^\[  FAILED' "$O/gtest.log") failed lines); $(tail -3 "$O/gtest.log" | tr '\n' ' ')"
fi

# swiglu dynamic FP8: the row kernel under each rule
want swiglu && for r in two four four-next; do
  timeout 25 $CLI bench swiglu --hidden 14336,16384,28672 --rows 1,32,2048,8192 --out fp8-dynamic --row-rule $r \
    --reps 20 --warmup 3 --json "$O/swiglu_rule_$r.json" > "$O/swiglu_rule_$r.log" 2>&1
  step "swiglu rule $r rc $?"
done
# add_rmsnorm: the first kernels (v8 shape, two exchanges) vs the current defaults (v4wide, one)
if want add-rmsnorm; then
timeout 45 $CLI bench add-rmsnorm --hidden 4096,16384 --rows 1,8,32,2048,8192,32768 --fp8 all --rule v8 --exchange two \
  --reps 20 --warmup 3 --json "$O/add_rmsnorm_v8_two.json" > "$O/add_rmsnorm_v8_two.log" 2>&1
step "add-rmsnorm v8/two rc $?"
timeout 55 $CLI bench add-rmsnorm --hidden 4096,8192,16384 --rows 1,8,32,2048,8192,32768 --fp8 all --rule v4wide --exchange one \
  --reps 20 --warmup 3 --json "$O/add_rmsnorm_v4wide_one.json" > "$O/add_rmsnorm_v4wide_one.log" 2>&1
step "add-rmsnorm v4wide/one rc $?"
# placement: 2 MiB gaps between the buffers, both shapes
for r in v8 v4wide; do
  timeout 15 $CLI bench add-rmsnorm --hidden 16384 --rows 2048,8192 --fp8 none --rule $r --skew-mb 2 \
    --reps 20 --warmup 3 --json "$O/add_rmsnorm_skew2_$r.json" > "$O/add_rmsnorm_skew2_$r.log" 2>&1
  step "add-rmsnorm skew $r rc $?"
done
fi

# baselines (the JSON is rewritten after every point)
if want baselines; then
pip install --no-deps --no-index --target /tmp/liger .deps/liger/liger_kernel-*.whl > "$O/pip.log" 2>&1
export PYTHONPATH=$PWD/python:/tmp/liger BLOCKFUSE_TORCH_LIB=$PWD/$B/_C.so TORCHINDUCTOR_COMPILE_THREADS=1
t=$(( $(left) - 45 )); [ $t -gt 10 ] && timeout $t python3 bench/memory_bound_baselines.py --ops add-rmsnorm \
  --hidden 16384,4096,8192 --rows 2048,8192,32768,1,8,32,256 --outs bf16,fp8d --compile-rows 1,32,2048,8192,32768 \
  --json "$O/baselines_add_rmsnorm.json" > "$O/baselines_add_rmsnorm.log" 2>&1
step "baselines add-rmsnorm rc $?"
t=$(( $(left) - 25 )); [ $t -gt 10 ] && timeout $t python3 bench/memory_bound_baselines.py --ops swiglu \
  --u 14336,28672,4096 --rows 2048,8192,1,32,32768 --outs bf16,fp8d,fp8s --compile-rows 1,32,2048,8192 \
  --json "$O/baselines_swiglu.json" > "$O/baselines_swiglu.log" 2>&1
step "baselines swiglu rc $?"
fi

# ncu: DRAM and L2 bytes of one add_rmsnorm call at H = 16384, 2048 rows (v4wide then v8)
if want ncu && command -v ncu > /dev/null; then
  for r in v4wide v8; do
    t=$(( $(left) - 2 )); [ $t -gt 8 ] || break
    timeout $t ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
      -k regex:add_rmsnorm_regs --launch-skip 2 --launch-count 1 $CLI bench add-rmsnorm --hidden 16384 --rows 2048 \
      --fp8 none --rule $r --reps 2 --warmup 1 > "$O/ncu_add_rmsnorm_16384_2048_$r.txt" 2>&1
    step "ncu $r rc $?"
  done
fi
step "done"
(cd "$O" && tar czf memory_bound.tgz --exclude=memory_bound.tgz --exclude=steps.log . && \
  find . -maxdepth 1 -type f ! -name memory_bound.tgz ! -name steps.log -delete)
tail -20 "$O/steps.log"
