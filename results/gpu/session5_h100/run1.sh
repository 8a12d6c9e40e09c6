#!/usr/bin/env bash
# Session 5, call 1 (H100, branch attn90-varlen at d391df7): results/gpu/attn90_branches/run.sh, then an
# ncu profile of the sm90a kernel at D = 128, S = 1024, non-causal, Hkv 32 (the ncu report and the
# SDPA log did not come back: too many files under $OUT; the figures printed are in run1/README.md).
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=$OUT results/gpu/attn90_branches/run.sh; B=build90
timeout 150 ncu --clock-control none --set full -k regex:attention_fwd_sm90 -s 3 -c 1 -o $OUT/ncu_s1024 \
  $B/bench/blockfuse bench attention --d 128 --s 1024 --causal 0 --hkv 32 --kernel sm90 --reps 2 --warmup 2 > $OUT/ncu_run.log 2>&1
ncu --import $OUT/ncu_s1024.ncu-rep --page details > $OUT/ncu_s1024.txt 2>&1
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Registers Per|Achieved Occupancy|Tensor" $OUT/ncu_s1024.txt | head -20
