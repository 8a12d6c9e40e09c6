#!/usr/bin/env bash
# Issue 16's measured tile table: every sm90a tile row of the bf16 gated GEMM, forced, over the
# seven models (Mistral 7B has Llama-3 8B's MLP shape, so it is measured once, as 8B) x 128..65536
# tokens, cuBLAS beside it at every point. Written in session 9, never run (no device time left).
#   gated_up_grid.sh build                          apply pending/gated_up_bench_models.patch, build the CLI
#                                                   (sm_90a GEMMs on, tests off) into /tmp/bgrid
#   gated_up_grid.sh run RUN "CONFIGS" [MODELS] [TOKENS]
#                                                   one pass per tile row in CONFIGS into $OUT/rRUN_cN.json
# The machine goes back 30 s after a call, so chain the calls: build (~2-3 min on 16 cores), then one
# `run` per repetition (estimate: ~25 s of GEMMs per row over the whole grid at --reps 5, plus the
# fills and verification; ~3-4 min for four rows). Then, here: scripts/tile-table DIR... prints the
# per-point table (medians over the runs), the best row per point and the heuristic's loss.
# Carry: the five .deps paths (scripts/deps).
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/bgrid
O=${OUT:-/tmp/grid}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
case "${1:-}" in
  build)
    patch -p1 < results/gpu/session9_h100/pending/gated_up_bench_models.patch > "$O/patch.log" 2>&1 || { cat "$O/patch.log"; exit 1; }
    scripts/deps > /dev/null
    cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=ON \
      -DBLOCKFUSE_BUILD_TESTS=OFF > "$O/build.log" 2>&1
    cmake --build $B -j"${JOBS:-16}" --target blockfuse_cli >> "$O/build.log" 2>&1
    rc=$?; el "build rc $rc"; [ $rc = 0 ] || tail -30 "$O/build.log" ;;
  run)
    RUN=$2; CONFIGS=$3
    MODELS=${4:-8b,70b,405b,gemma27b,qwen2-7b,qwen2-72b}
    TOKENS=${5:-128,256,512,1024,2048,4096,8192,16384,32768,65536}
    for c in $CONFIGS; do
      timeout 280 $B/bench/blockfuse bench gated-up --kernel sm90 --tile-config "$c" --models "$MODELS" \
        --tokens "$TOKENS" --reps 5 --warmup 2 --no-ceilings --json "$O/r${RUN}_c${c}.json" > "$O/r${RUN}_c${c}.log" 2>&1
      el "run $RUN row $c rc $? ($(grep -c 'VERIFY FAILED' "$O/r${RUN}_c${c}.log") verify failures)"
    done
    scripts/tile-table "$O" | tail -80 ;;
  *) echo "usage: $0 build | run RUN \"CONFIGS\" [MODELS] [TOKENS]" >&2; exit 2 ;;
esac
