#!/usr/bin/env bash
# A/B of the decode kernels in one device call: builds experiments/decode_smoke.cu against two source
# trees and runs their benchmarks alternately (three rounds), so both see the same GPU state.
#   experiments/ab.sh OLD_ROOT NEW_ROOT     (each a tree with src/ and include/; e.g. git archive main)
# Prints the correctness summary of each build, then "old"/"new" rows of the exp and paged grids.
set -euo pipefail
old=${1:?old tree}; new=${2:?new tree}
build() {  # $1 tree, $2 output
  nvcc -std=c++17 -O2 -arch=sm_90 -I"$1/include" -I"$1/src" experiments/decode_smoke.cu "$1/src/attention/decode_attention.cpp" \
    "$1"/src/attention/launch_decode_d*.cu "$1/src/common/check.cpp" "$1/src/common/device.cpp" "$1/src/common/fp8.cpp" \
    $( [ -f "$1/src/attention/tensor_check.cpp" ] && echo "$1/src/attention/tensor_check.cpp" ) -o "$2"
}
build "$old" /tmp/smoke_old & build "$new" /tmp/smoke_new & wait
for b in old new; do echo "== $b correctness"; /tmp/smoke_$b | grep -E "FAIL|EXC|fails"; done
for round in 1 2 3; do
  for b in old new; do echo "== round $round $b"; /tmp/smoke_$b exp; /tmp/smoke_$b exp paged; done
done
