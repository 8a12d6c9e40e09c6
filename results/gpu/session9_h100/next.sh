#!/usr/bin/env bash
# RECORD (session 11): these steps ran on an H100 with the six patches applied; five landed and the
# sixth (add_rmsnorm_staged: slower, docs/decoder-kernels.md) did not, and the patch files were removed
# (git history before session 11 has them). The script is kept as the record of the commands behind
# results/gpu/session11_h100/; `apply`, `probe`, `bench-mlp` and `table` need the patch files.
# The pending patches' device plan in as few calls as possible (written in session 10, which had no
# device time either; it replaces session 9's fmlp1.sh, staged1.sh and gated_up_grid.sh, whose steps it runs).
# Steps, in order; "here" = this machine, "device" = a device-tool call from the repo root with the
# five .deps paths of scripts/deps carried. Device calls chained within 30 s reuse build-gpu/ (the
# machine keeps ignored build outputs while warm); a later call rebuilds what it needs (~2 min).
#
#   here:   next.sh apply          apply the six pending patches to the working tree (idempotent)
#   device: next.sh probe          build (sm_90, sm90a GEMMs, tests; scripts/build), the patches' CPU
#                                  and GPU tests (~5 min)
#   device: next.sh grid 1 2       grid runs 1 and 2 (~7 min): every sm90a tile row forced over six
#                                  model shapes x 128..65536 tokens, cuBLAS beside each point
#   device: next.sh grid 3         the third run (~4 min)
#   device: next.sh grid-fp8 1 2   the FP8 kernel's two tile rows forced over Llama-3 8B / 70B x
#                                  1024..16384 tokens, cuBLASLt's FP8 GEMM beside each point, two runs
#                                  (~6 min; optional: its table is filled only where it ran)
#   device: next.sh bench-mem      add_rmsnorm --rule default vs staged (two runs each), swiglu's
#                                  dynamic FP8 --row-rule default vs cluster2 (two runs each) (~6 min)
#   device: next.sh bench-mlp      gated-up-fp8 (the dynamic per-row e4m3 output beside cuBLASLt +
#                                  swiglu_fp8), fused-mlp with the dynamic-groups patch, then without
#                                  it (the patch reversed in the device's copy, the CLI rebuilt) (~6 min)
#   here:   next.sh table DIR...   scripts/tile-table over the grid runs' JSON (copy them into
#                                  results/gpu/session10_h100/grid/ first): prints the tables and
#                                  writes the best non-stream-K rows into heuristic_sm90.cpp's
#                                  kSm90Measured (and, where FP8 runs are there, the best rows into
#                                  heuristic_fp8_sm90.cpp's kSm90Fp8Measured), citing DIR
#   device: scripts/gpu-check      the evidence for the tree as it now is (~9 min); commit its
#                                  latest.json with the patches, the table and the bench JSONs.
# Every device step writes logs and JSON under $OUT and prints a short table last.
set -uo pipefail
cd "$(dirname "$0")/../../.."
HERE=results/gpu/session9_h100
PENDING=$HERE/pending
PATCHES="fused_mlp_dynamic_groups add_rmsnorm_staged gated_up_bench_models gated_up_measured_table gated_up_fp8_dynamic swiglu_fp8_cluster_rule"
O=${OUT:-/tmp/next}; mkdir -p "$O"
B=${BUILD_DIR:-build-gpu}
CLI=$B/bench/blockfuse
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }

applied() { git apply -R --check "$PENDING/$1.patch" 2>/dev/null; }
need_applied() {
  for p in $PATCHES; do applied "$p" || { echo "next.sh: $p.patch is not applied (run 'next.sh apply' here first)"; exit 1; }; done
}
build() {  # the whole tree (tests and CLI) for sm_90 with the sm90a GEMMs; incremental when warm
  BLOCKFUSE_CUDA_ARCHS=90 scripts/build "$B" >> "$O/build.log" 2>&1
  local rc=$?; el "build rc $rc"
  [ $rc = 0 ] || { grep -m20 -B2 -A6 -E "error|FAILED" "$O/build.log"; exit 1; }
}
grid_run() {  # $1 = run number: every tile row forced, one JSON per row
  mkdir -p "$O/grid"
  for c in 0 1 2 3; do
    timeout 240 "$CLI" bench gated-up --kernel sm90 --tile-config "$c" \
      --models 8b,70b,405b,gemma27b,qwen2-7b,qwen2-72b --tokens 128,256,512,1024,2048,4096,8192,16384,32768,65536 \
      --reps 5 --warmup 2 --no-ceilings --json "$O/grid/r$1_c$c.json" > "$O/grid/r$1_c$c.log" 2>&1
    el "grid run $1 row $c rc $? ($(grep -c 'VERIFY FAILED' "$O/grid/r$1_c$c.log") verify failures)"
  done
}

grid_fp8_run() {  # $1 = run number: both FP8 tile rows forced
  mkdir -p "$O/grid"
  for c in 0 1; do
    timeout 200 "$CLI" bench gated-up-fp8 --tile-config "$c" --models 8b,70b --tokens 1024,2048,4096,8192,16384 \
      --reps 10 --warmup 2 --no-ceilings --json "$O/grid/f$1_c$c.json" > "$O/grid/f$1_c$c.log" 2>&1
    el "fp8 grid run $1 row $c rc $? ($(grep -c 'VERIFY FAILED' "$O/grid/f$1_c$c.log") verify failures)"
  done
}

case "${1:-}" in
  apply)
    for p in $PATCHES; do
      if applied "$p"; then echo "$p: already applied"
      elif git apply "$PENDING/$p.patch"; then echo "$p: applied"
      else echo "$p: does not apply"; exit 1; fi
    done ;;

  probe)
    need_applied; build
    "$B/tests/blockfuse_cpu_tests" --gtest_filter='AddRmsNorm*:HeuristicSm90*:HeuristicFp8Sm90*:FusedMlp*:*TileConfig*:GatedUpFp8*:RowwiseFp8*:SwigluRowConfig*' > "$O/cpu_tests.log" 2>&1
    el "cpu tests rc $? ($(tail -1 "$O/cpu_tests.log"))"
    "$B/tests/blockfuse_gpu_tests" --gtest_filter='*FusedMlp*:*Router*:*AddRmsNorm*:*GatedUpFp8*:*SwigluFp8*' > "$O/gpu_tests.log" 2>&1
    el "gpu tests rc $? ($(grep -c '^\[       OK' "$O/gpu_tests.log") ok, $(grep -c '^\[  FAILED' "$O/gpu_tests.log") failed lines)"
    grep '^\[  FAILED' "$O/gpu_tests.log" | sort -u | head -20 ;;

  grid)
    shift; [ $# -gt 0 ] || { echo "usage: $0 grid RUN..." >&2; exit 2; }
    need_applied; [ -x "$CLI" ] || build
    for r in "$@"; do grid_run "$r"; done
    scripts/tile-table "$O/grid" | tail -25 ;;

  grid-fp8)
    shift; [ $# -gt 0 ] || { echo "usage: $0 grid-fp8 RUN..." >&2; exit 2; }
    need_applied; [ -x "$CLI" ] || build
    for r in "$@"; do grid_fp8_run "$r"; done
    scripts/tile-table "$O/grid" | tail -14 ;;

  bench-mem)  # ~6 min
    need_applied; build
    for rep in 1 2; do for rule in default staged; do
      timeout 120 "$CLI" bench add-rmsnorm --hidden 4096,8192,16384 --rows 1,8,32,256,2048,8192,32768 \
        --fp8 all --rule $rule --reps 20 --json "$O/arn_${rule}_$rep.json" > "$O/arn_${rule}_$rep.log" 2>&1
      el "add-rmsnorm $rule rep $rep rc $?"
    done; done
    for rep in 1 2; do for rule in default cluster2; do
      timeout 60 "$CLI" bench swiglu --out fp8-dynamic --hidden 14336,16384,28672 --rows 1,8,32,256,2048 \
        --row-rule $rule --json "$O/swd_${rule}_$rep.json" > "$O/swd_${rule}_$rep.log" 2>&1
      el "swiglu fp8-dynamic $rule rep $rep rc $?"
    done; done
    python3 "$HERE/next_tables.py" "$O" ;;

  bench-mlp)  # ~6 min
    need_applied; build
    timeout 150 "$CLI" bench gated-up-fp8 --models 8b,70b --tokens 1024,4096,16384 --reps 20 --json "$O/fp8.json" \
      > "$O/fp8.log" 2>&1; el "gated-up-fp8 rc $? ($(grep -c 'VERIFY FAILED' "$O/fp8.log") verify failures)"
    FM="bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,4,16,32 --sparsity 50,75,90"
    timeout 150 "$CLI" $FM --json "$O/fmlp_new.json" > "$O/fmlp_new.log" 2>&1; el "fused-mlp (patched) rc $?"
    git apply -R "$PENDING/fused_mlp_dynamic_groups.patch" && cmake --build "$B" -j"${JOBS:-16}" --target blockfuse_cli >> "$O/build.log" 2>&1
    el "fused-mlp patch reversed, CLI rebuilt: rc $?"
    timeout 150 "$CLI" $FM --json "$O/fmlp_old.json" > "$O/fmlp_old.log" 2>&1; el "fused-mlp (as on main) rc $?"
    python3 "$HERE/next_tables.py" "$O" ;;

  table)
    shift; [ $# -gt 0 ] || { echo "usage: $0 table DIR..." >&2; exit 2; }
    applied gated_up_measured_table || { echo "next.sh: apply the patches first"; exit 1; }
    scripts/tile-table "$@" || exit 1
    scripts/tile-table "$@" --emit-cpp --table-rows 0,1,2 > "$O/table.txt" || exit 1
    python3 - "$O/table.txt" "$*" <<'PY'
import sys
emit, dirs = sys.argv[1], sys.argv[2]
text = open(emit).read()
# (kind, file, the comment that starts the placeholder, the empty definition it ends with)
targets = [("bf16", "src/gated_up/heuristic_sm90.cpp", "// The measured table: empty until",
            "constexpr std::array<Sm90MeasuredPoint, 0> kSm90Measured{};", "kSm90MeasuredSms",
            "Stream-K (row 3) is left out: the heuristic cannot assume the caller's workspace."),
           ("fp8", "src/gated_up/heuristic_fp8_sm90.cpp", "// The measured table: empty until",
            "constexpr std::array<Sm90MeasuredPoint, 0> kSm90Fp8Measured{};", "kSm90Fp8MeasuredSms", "")]
for kind, path, start_text, end_text, sms_name, note in targets:
    tag = f"// Generated by scripts/tile-table ({kind})"
    if tag not in text:
        print(f"{path}: no {kind} rows in {dirs}; its table stays empty")
        continue
    body = text[text.index(tag):]
    body = body[: body.index("}};") + 3] + "\n"
    src = open(path).read()
    start = src.index(start_text)
    end = src.index(end_text, start) + len(end_text)
    head = (f"// The measured table (issue 16): each point's best tile row of the forced-row sweep in {dirs}\n"
            "// (H100, results/gpu/session9_h100/next.sh; medians over the runs of fused / baseline in one process).\n"
            + (f"// {note}\n" if note else "") + f"constexpr int {sms_name} = 132;\n")
    open(path, "w").write(src[:start] + head + body.rstrip("\n") + src[end:])
    n = sum(1 for line in body.splitlines() if line.startswith("    {"))
    print(f"{path}: {kind} table written ({n} points)")
PY
    ;;

  *) sed -n '2,/^set /p' "$0" | grep '^#'; exit 2 ;;
esac
