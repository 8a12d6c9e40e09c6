#!/usr/bin/env bash
# For the next session (issue 16, written in session 18, not run: its device time was spent). The
# issue asks what ncu shows where its targets are missed: ncu --set full of the fused kernel and of
# cuBLAS(Lt)'s at the worst points, bf16 Llama-3 70B x 16384 and 8B x 1024 tokens and FP8 8B x 16384.
# The CLI: the tree's build (BUILD, default build-gpu, as scripts/gpu-check leaves it) or a CLI carried
# xz'd as .wt/bins/cli.xz.
#   run: bash results/gpu/session18_h100/ncu16.sh   (writes under $OUT)
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/ncu16}; mkdir -p "$O"
CLI=${BUILD:-build-gpu}/bench/blockfuse
if [ -f .wt/bins/cli.xz ]; then mkdir -p /tmp/bins; xz -dc .wt/bins/cli.xz > /tmp/bins/cli && chmod +x /tmp/bins/cli; CLI=/tmp/bins/cli; fi
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
# Every GEMM-like kernel of one short run (the fused CUTLASS kernel is device_kernel<...>; cuBLAS's
# Hopper GEMMs are nvjet_* or sm90_xmma_*); the first launches are the verification's, the later
# ones the timed variants', so take several and read them by name.
prof() {  # name, bench args...
  local n=$1; shift
  timeout 200 ncu --clock-control none --set full --kernel-name-base demangled \
    -k 'regex:device_kernel|nvjet|xmma|gemm|cutlass' --launch-count 8 -o "/tmp/$n" \
    $CLI bench "$@" --reps 1 --warmup 1 --no-ceilings > "/tmp/$n.log" 2>&1
  el "$n rc $?"; cp "/tmp/$n.log" "$O/"
  ncu -i "/tmp/$n.ncu-rep" --print-details all > "/tmp/${n}_details.txt" 2>&1
  gzip -9c "/tmp/${n}_details.txt" > "$O/${n}_details.txt.gz"
  ncu -i "/tmp/$n.ncu-rep" --csv --page raw --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active \
    > "$O/${n}_summary.csv" 2>&1
  grep -E '^  [a-z_]+.*\(|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|No Eligible' \
    "/tmp/${n}_details.txt" | head -60
}
prof bf16_70b_16384 gated-up --models 70b --tokens 16384
prof bf16_8b_1024 gated-up --models 8b --tokens 1024
prof fp8_8b_16384 gated-up-fp8 --models 8b --tokens 16384
