#!/usr/bin/env bash
# Session 17, call 6 (issue 14, for the next session): ncu --set full of the fused MLP where its
# targets are missed: dense Llama-3 8B at M = 16 (65 % of copy; the 8-warp NT = 2, NG = 4 kernel) and
# the 75 %-sparse union list at M = 1 (3.13x dense against the 3.5x target; the 16-warp kernel).
# CLI of 2508e57 built on the CPU machine (.wt/bins/cli_head.xz).
#   run: bash results/gpu/session17_h100/call6_ncu.sh   (writes under $OUT)
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/c6}; mkdir -p "$O"
X=/tmp/bins; mkdir -p $X; xz -dc .wt/bins/cli_head.xz > $X/cli && chmod +x $X/cli
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
prof() {  # name, kernel regex, bench args...
  local n=$1 k=$2; shift 2
  timeout 120 ncu --clock-control none --set full --kernel-name-base demangled -k "regex:$k" --launch-skip 1 \
    --launch-count 1 -o "/tmp/$n" $X/cli bench fused-mlp --reps 2 --warmup 1 --calls 2 --no-ceilings "$@" > "/tmp/$n.log" 2>&1
  el "$n rc $?"; tail -5 "/tmp/$n.log"; cp "/tmp/$n.log" "$O/"
  ncu -i "/tmp/$n.ncu-rep" --print-details all > "/tmp/${n}_details.txt" 2>&1
  ncu -i "/tmp/$n.ncu-rep" --page source --csv --print-source sass > "/tmp/${n}_source.csv" 2>&1
  gzip -9c "/tmp/${n}_details.txt" > "$O/${n}_details.txt.gz"; gzip -9c "/tmp/${n}_source.csv" > "$O/${n}_source.csv.gz"
  grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|No Eligible|Issued Warp" "/tmp/${n}_details.txt" | head -14
}
# The second launch of the kernel: dense, atomic (its first timed call after the verifying one).
prof dense8b_m16 'fused_mlp_kernel<.*\(int\)2, \(int\)4, \(int\)8>' --shapes llama3-8b --m 16 --sparsity 50
# --nb 16 moves the dense rows to <1, 1, W>, so the second <1, 4, 16> launch is the 75 % list's first
# call (the first is the all-blocks check).
prof sparse75_8b_m1 'fused_mlp_kernel<.*\(int\)1, \(int\)4, \(int\)16>' --shapes llama3-8b --m 1 --sparsity 75 --nb 16
