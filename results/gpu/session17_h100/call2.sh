#!/usr/bin/env bash
# Session 17, call 2. Three parts, on one H100:
#  1. issue 14: the deterministic mode's sum as a second launch (fused_mlp_sum_kernel) against HEAD a2059e9
#     (16-warp deterministic blocks + select): CLIs built on the CPU machine, .wt/bins/cli_{det,sum}.xz,
#     two interleaved runs each. Atomic rows must stay level (kernel 1 lost its in-kernel deterministic sum).
#  2. issue 16: the bf16 stream-K row (tile config 3) against row 0, forced, beside cuBLAS, three
#     interleaved runs, at the points where session 11's grid had row 3 ahead by >= 2 % (plus two controls).
#  3. the tree built here (scripts/build), the fused MLP's GPU tests and its sanitizer set.
#   run: bash results/gpu/session17_h100/call2.sh   (writes under $OUT)
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/c2}; R=$O/raw; mkdir -p "$R"
X=/tmp/bins; mkdir -p $X
for s in det sum; do xz -dc .wt/bins/cli_$s.xz > $X/cli_$s && chmod +x $X/cli_$s; done
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$R/gpu.txt"
# 3 first, in the background on the CPU (the build does not touch the GPU).
( BLOCKFUSE_CUDA_ARCHS=90 JOBS=12 scripts/build build-gpu > "$R/build.log" 2>&1; echo "build rc $?" >> "$R/build.log" ) &
BPID=$!
for run in 1 2; do
  for s in det sum; do
    timeout 120 $X/cli_$s bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,8,32 --sparsity 90 \
      --json "$R/fm_${s}_$run.json" > "$R/fm_${s}_$run.log" 2>&1
    el "fused-mlp $s run $run rc $?"
  done
done
for run in 1 2 3; do
  for c in 0 3; do
    timeout 150 $X/cli_sum bench gated-up --kernel sm90 --tile-config $c --models 405b --tokens 256,1024,4096,16384 \
      --reps 20 --no-ceilings --json "$R/gu_a_c${c}_$run.json" > "$R/gu_a_c${c}_$run.log" 2>&1
    el "gated-up 405b c$c run $run rc $?"
    timeout 150 $X/cli_sum bench gated-up --kernel sm90 --tile-config $c --models 70b,gemma27b,qwen2-7b,8b --tokens 8192,16384 \
      --reps 20 --no-ceilings --json "$R/gu_b_c${c}_$run.json" > "$R/gu_b_c${c}_$run.log" 2>&1
    el "gated-up others c$c run $run rc $?"
  done
done
wait $BPID; tail -1 "$R/build.log"; el "build done"
if [ -x build-gpu/tests/blockfuse_gpu_tests ]; then
  timeout 200 build-gpu/tests/blockfuse_gpu_tests --gtest_filter='*FusedMlp*' > "$R/gpu_tests_fmlp.log" 2>&1
  el "fused MLP GPU tests rc $?"; tail -3 "$R/gpu_tests_fmlp.log"
  grep -E "^\[  FAILED" "$R/gpu_tests_fmlp.log" | head -20
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/blockfuse_gpu_tests \
    --gtest_filter='FusedMlpSanitizer.*' > "$R/memcheck_fmlp.log" 2>&1
  el "memcheck FusedMlpSanitizer rc $?"; tail -2 "$R/memcheck_fmlp.log"
fi
python3 - "$R" <<'PY' | tee "$O/table.txt"
import glob, json, os, statistics, sys
r = sys.argv[1]
t = {}
for f in sorted(glob.glob(os.path.join(r, "fm_*_[12].json"))):
    side = os.path.basename(f).split("_")[1]
    for row in json.load(open(f))["rows"]:
        t.setdefault((row["shape"], row["m"], row["variant"]), {}).setdefault(side, []).append((row["us"], row["verified"]))
print("1. fused MLP µs, min of two runs (max): HEAD a2059e9 | + the sum as a second launch; ratio")
for k in sorted(t, key=str):
    v = t[k]
    if "det" in v and "sum" in v:
        ok = all(x[1] for s in v.values() for x in s)
        a, b = min(x[0] for x in v["det"]), min(x[0] for x in v["sum"])
        print(f"  {k[0]:10} M={k[1]:<2} {k[2]:22} {a:9.2f} ({max(x[0] for x in v['det']):9.2f}) | {b:9.2f} ({max(x[0] for x in v['sum']):9.2f})  {a / b:6.3f}x"
              + ("" if ok else "  VERIFY FAILED"))
g = {}
for f in sorted(glob.glob(os.path.join(r, "gu_*_c*_*.json"))):
    c = int(os.path.basename(f).split("_")[2][1:])
    for row in json.load(open(f))["rows"]:
        if "c_fused_ms" not in row: continue
        g.setdefault((row["model"], int(row["M"])), {}).setdefault(c, []).append((row["a_cublas_ms"] / row["c_fused_ms"], row["c_fused_tflops"], row.get("verified", True)))
print("\n2. bf16 gated_up, sm90 row 0 vs row 3 (stream-K) forced: x cuBLAS per run (TFLOP/s median); row3/row0 of the medians")
for k in sorted(g):
    v = g[k]
    if 0 in v and 3 in v:
        m0, m3 = statistics.median(x[0] for x in v[0]), statistics.median(x[0] for x in v[3])
        ok = all(x[2] for s in v.values() for x in s)
        fmt = lambda s: " ".join(f"{x[0]:.3f}" for x in v[s]) + f" ({statistics.median(x[1] for x in v[s]):.0f})"
        print(f"  {k[0]:10} M={k[1]:<6} row0 {fmt(0)} | row3 {fmt(3)} | {m3 / m0:6.3f}" + ("" if ok else "  VERIFY FAILED"))
PY
tar czf "$O/raw.tgz" -C "$O" raw && rm -rf "$R"
