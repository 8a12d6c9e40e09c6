#!/usr/bin/env bash
# (Session 15 ran every step below: results/gpu/session15_h100/README.md; its next.sh is the current plan.)
# The next session's device plan (written at the end of session 14, whose device time was spent).
# From the repo root, carrying the five .deps paths of scripts/deps (plus .deps/peers/partN for the
# peers steps); each step is one device call, logs and JSON under $OUT, its table last:
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session14_h100/next.sh STEP; tar czf $O/STEP.tgz -C /tmp/o .
#   (first) scripts/gpu-check --defer-python, then --python-only within 30 s: session 14's pytest was
#     cut at 15 % (74 passed) when the budget ran out. Run it on whatever source the session lands
#     first, with pending/comments.patch applied (three comment fixes in hashed files).
#   stream257: pending/stream_from_257.patch (streaming stores from 257 rows instead of 2048) against
#     main at 257-2048 rows of H = 4096 / 8192 / 16384, every output, two interleaved runs. Session 14
#     measured 256 rows (slower with them) and 2048 (faster); the crossover between is unmeasured.
#     Move kAddRmsNormStreamingStoresRows to where the patch stops losing.
#   earlyres: pending/stream_early_res_out.patch — the streaming kernels (2048+ rows) store residual_out
#     before the reduction for the FP8 outputs too (the late store was chosen with plain stores; the
#     dynamic output is the one that misses 95 % at H <= 8192). The 78 plain kernels' PTX is unchanged
#     (checked here). Both binaries at 2048 / 8192 / 32768 rows of H = 4096 / 8192 / 16384, FP8
#     static and dynamic, two interleaved runs.
#   remap: pending/swiglu_warp_remap.patch — the interleaved staged copies coalesced within each warp
#     (lane l copies pieces l and 32 + l of its warp's 1 KB span; a __syncwarp, not a __syncthreads,
#     before the slots are read) against main's copies through L1; builds both CLIs and the patched
#     tests, runs the swiglu FP8 GPU tests and the sanitizer set (memcheck, racecheck) on the patch,
#     then both binaries at 256-8192 rows, both layouts. Land it where the interleaved rows gain
#     (U = 28672 interleaved is 87.5 % against stacked 99.7) and the stacked ones do not move.
#   smstream: pending/sm_stream.cu — one SM's DRAM streaming rate by 16-byte loads and by
#     cp.async.bulk, 1-132 SMs active (issue 14: is a short sparse list bound by a per-SM limit on
#     loads in flight that bulk copies escape?). Standalone; about a minute.
#   pp2x2: pending/pingpong_c2x2_rows.patch — issue 16: ping-pong 128x128 with a 2x2 cluster (FP8 row
#     2, bf16 row 4). Row 1 (the same tile, 2x1) pulls 1.5x row 0's L2 bytes per flop; multicasting x
#     along N as well brings it back to row 0's, with the epilogue hidden by the ping-pong. Each row
#     forced beside rows 0 and 1, beside cuBLAS(Lt), as exp1.sh did. Both instances compiled here.
#   peers-large: add_rmsnorm and swiglu from 2048 rows beside quack, Liger and torch.compile (static)
#     through torch, after session 14's streaming stores and L1 copies (issue 17's ≥ 1.00× quack
#     target; session 8's 0.94-1.01× predates them). Three calls, as results/gpu/session13_h100/
#     baselines.sh: A builds blockfuse_C (-DBLOCKFUSE_BUILD_PYTHON=ON), B carries .deps/peers/part1
#     and copies it to /tmp, C carries .deps/peers/part2 and runs `next.sh peers-large`.
set -uo pipefail
cd "$(dirname "$0")/../../.."
P=results/gpu/session14_h100/pending
O=${OUT:-/tmp/next}; mkdir -p "$O"
B=${BUILD_DIR:-build-gpu}
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
configure() {
  scripts/deps > /dev/null 2>&1
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 > "$O/build.log" 2>&1
}
build() {  # the targets given ($@), or the CLI
  cmake --build "$B" --target "${@:-blockfuse_cli}" -j16 >> "$O/build.log" 2>&1 || { tail -20 "$O/build.log"; return 1; }
}
# main's CLI as /tmp/cli_base, the patch's as /tmp/cli_$2 ($1: the pending patch; $3...: more targets
# built with the patch, left in $B for the step to run before it reverts the patch with `unpatch`).
build_ab() {
  local patch=$1 side=$2; shift 2
  configure; build || exit 1; cp "$B/bench/blockfuse" /tmp/cli_base; el "built (main)"
  git apply "$P/$patch.patch" || { echo "$patch does not apply"; exit 1; }
  build blockfuse_cli "$@" || { git apply -R "$P/$patch.patch"; exit 1; }
  cp "$B/bench/blockfuse" /tmp/cli_$side; el "built ($side)"
}
unpatch() { git apply -R "$P/$1.patch"; }
# The A/B table of JSON files $O/<prefix>_<side>[_<variant>]_<run>.json: $1 prefix, $2 side, $3 title,
# $4 the Python expression of a row's key, $5 of its % of copy.
ab_table() {
  python3 - "$O" "$1" "$2" "$3" "$4" "$5" <<'PY'
import glob, json, os, sys
o, pre, side, title, key, frac = sys.argv[1:]
t = {}
for f in glob.glob(os.path.join(o, f"{pre}_*_[12].json")):
    parts = os.path.basename(f)[:-5].split("_")
    variant = parts[2] if len(parts) == 4 else ""
    for r in json.load(open(f))["rows"]:
        t.setdefault(eval(key), {}).setdefault(parts[1], []).append((eval(frac), r.get("verified", True)))
print(title)
for k in sorted(t, key=str):
    a, b = t[k].get("base", []), t[k].get(side, [])
    if a and b:
        ok = all(v for _, v in a + b)
        print(f"{str(k):36} {min(x for x, _ in a):5.1f}-{max(x for x, _ in a):5.1f} -> {min(x for x, _ in b):5.1f}-{max(x for x, _ in b):5.1f}" + ("" if ok else "  VERIFY FAILED"))
PY
}
case "${1:-}" in
  stream257)
    build_ab stream_from_257 s257; unpatch stream_from_257
    for run in 1 2; do for side in base s257; do
      timeout 100 /tmp/cli_$side bench add-rmsnorm --hidden 4096,8192,16384 --rows 257,512,1024,1536,2048 --fp8 all \
        --json "$O/arn_${side}_$run.json" > "$O/arn_${side}_$run.log" 2>&1
    done; el "run $run"; done
    ab_table arn s257 "add_rmsnorm % of copy (two runs: min-max): main (plain stores below 2048 rows) -> streaming from 257 rows" \
      '(r["H"], r["rows"], r["fp8"])' '100 * r["fused_frac_of_copy"]'
    ;;
  earlyres)
    build_ab stream_early_res_out early; unpatch stream_early_res_out
    for run in 1 2; do for side in base early; do for f in static dynamic; do
      timeout 100 /tmp/cli_$side bench add-rmsnorm --hidden 4096,8192,16384 --rows 2048,8192,32768 --fp8 $f \
        --json "$O/arn_${side}_${f}_$run.json" > "$O/arn_${side}_${f}_$run.log" 2>&1
    done; done; el "run $run"; done
    ab_table arn early "add_rmsnorm % of copy (two runs: min-max): main (FP8 residual_out stored late) -> early" \
      '(r["H"], r["rows"], r["fp8"])' '100 * r["fused_frac_of_copy"]'
    ;;
  remap)
    build_ab swiglu_warp_remap remap blockfuse_gpu_tests
    "$B/tests/blockfuse_gpu_tests" --gtest_filter='SwigluFp8*' > "$O/remap_gpu.log" 2>&1
    el "gpu tests rc $? ($(grep -c '^\[       OK' "$O/remap_gpu.log") ok, $(grep -c '^\[  FAILED' "$O/remap_gpu.log") failed lines)"
    for tool in memcheck racecheck; do
      compute-sanitizer --tool $tool "$B/tests/blockfuse_gpu_tests" --gtest_filter='SwigluFp8Sanitizer*' > "$O/remap_$tool.log" 2>&1
      el "$tool rc $? ($(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' "$O/remap_$tool.log"))"
    done
    unpatch swiglu_warp_remap
    for run in 1 2; do for side in base remap; do for layout in interleaved stacked; do
      timeout 60 /tmp/cli_$side bench swiglu --out fp8-dynamic --layout $layout --hidden 14336,16384,28672 --rows 256,2048,8192 \
        --json "$O/sw_${side}_${layout}_$run.json" > "$O/sw_${side}_${layout}_$run.log" 2>&1
    done; done; el "run $run"; done
    ab_table sw remap "swiglu_fp8 dynamic, % of copy (two runs: min-max): main (.ca copies) -> warp remap" \
      '(variant, r["U"], r["M"])' '100 * r.get("frac_of_copy", 0.0)'
    ;;
  smstream)
    nvcc -O3 -std=c++17 -arch=sm_90a "$P/sm_stream.cu" -o /tmp/sm_stream && /tmp/sm_stream | tee "$O/sm_stream.txt"
    ;;
  pp2x2)
    git apply "$P/pingpong_c2x2_rows.patch" || { echo "the patch does not apply"; exit 1; }
    configure; build || { unpatch pingpong_c2x2_rows; exit 1; }
    el "built"
    for c in 0 1 2; do
      timeout 150 "$B/bench/blockfuse" bench gated-up-fp8 --tile-config $c --models 8b,70b --tokens 1024,4096,8192,16384 \
        --reps 10 --warmup 2 --no-ceilings --json "$O/f_c$c.json" > "$O/f_c$c.log" 2>&1; el "fp8 row $c rc $?"
    done
    for c in 0 1 4; do
      timeout 110 "$B/bench/blockfuse" bench gated-up --kernel sm90 --tile-config $c --models 8b,70b,405b --tokens 1024,4096,16384 \
        --reps 5 --warmup 2 --no-ceilings --json "$O/b_c$c.json" > "$O/b_c$c.log" 2>&1; el "bf16 row $c rc $?"
    done
    unpatch pingpong_c2x2_rows
    python3 - "$O" <<'PY'
import glob, json, os, sys
o = sys.argv[1]
for pre, key, ratio in (("f", "c_fused_fp8_tflops", "c_over_a2"), ("b", "c_fused_tflops", "c_over_a")):
    t = {}
    for f in sorted(glob.glob(os.path.join(o, f"{pre}_c*.json"))):
        for r in json.load(open(f))["rows"]:
            t.setdefault((r["model"], r["M"]), {})[r["tile_config"]] = r
    print("FP8: TFLOP/s and / torch._scaled_mm's default (a2)" if pre == "f" else "bf16: TFLOP/s and / cuBLAS")
    for k in sorted(t):
        print(f"  {k[0]:14} M={k[1]:6d}" + "".join(f" | r{c} {r[key]:5.0f} {r[ratio]:.3f}" for c, r in sorted(t[k].items()))
              + ("" if all(r["verified"] for r in t[k].values()) else "  VERIFY FAILED"))
PY
    ;;
  peers-large)
    sp=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['platlib'])")
    ( cat /tmp/cu13.tar.xz.00 .deps/peers/part2/cu13.tar.xz.01 | tar -xJ -C "$sp" && python3 -m pip install -q --no-deps .deps/peers/part2/*.whl && python3 -c "import quack.rmsnorm, liger_kernel; print('peers installed')" ) > "$O/install.log" 2>&1; el "install rc $?"
    SO=$(find "$B" -maxdepth 2 -name '_C.so' | head -1); echo "library: $SO"
    export BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python"
    M="python3 bench/memory_bound_baselines.py --rows 2048,8192,32768"
    timeout 250 $M --ops add-rmsnorm --hidden 4096,8192,16384 --outs bf16 --impls blockfuse,compile,liger,quack --json "$O/arn_large.json" > "$O/arn_large.log" 2>&1; el "add-rmsnorm rc $?"
    timeout 200 $M --ops swiglu --u 14336,28672 --outs bf16,fp8s,fp8d --impls blockfuse,compile,liger --json "$O/swiglu_large.json" > "$O/swiglu_large.log" 2>&1; el "swiglu rc $?"
    tail -40 "$O/arn_large.log" "$O/swiglu_large.log"
    ;;
  *) sed -n '2,/^set /p' "$0" | grep '^#'; exit 2 ;;
esac
