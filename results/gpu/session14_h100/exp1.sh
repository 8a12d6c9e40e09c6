#!/usr/bin/env bash
# Session 14, issue 16: three candidate tile rows of the sm90a gated GEMM, forced beside the rows of
# main in one process each (the tree carries exp1_rows.patch: the rows appended to both tables).
#   FP8 rows 2 / 3 / 4: ping-pong 64x256x128 cluster 2x1, ping-pong 64x256x128 cluster 4x1,
#                       cooperative 128x256x128 cluster 2x2
#   bf16 rows 4 / 5 / 6: the same three with BK = 64
# Why: the cooperative row's epilogue is not overlapped with the next mainloop; a 64-row ping-pong
# hides it (each warpgroup owns a 64x256 tile), and a 4x1 cluster keeps the weight multicast's L2
# traffic per flop at row 0's (A 64xBK + B 256xBK / 4 per 64x256 tile). 2x2 multicasts x too.
#   STEP fp8:  build the CLI, then bench gated-up-fp8 with each FP8 row forced (8B, 70B x 1024..16384)
#   STEP bf16: bench gated-up --kernel sm90 with rows 0, 1, 4, 5, 6 forced (8B, 70B, 405B)
# From the repo root: O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session14_h100/exp1.sh STEP; tar ...
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/exp1}; mkdir -p "$O"
B=${BUILD_DIR:-build-gpu}
CLI=$B/bench/blockfuse
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
case "${1:-}" in fp8|bf16) ;; *) sed -n '2,/^set /p' "$0" | grep '^#'; exit 2 ;; esac
if [ ! -x "$CLI" ]; then
  scripts/deps > /dev/null 2>&1
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 > "$O/build.log" 2>&1
  cmake --build "$B" --target blockfuse_cli -j16 >> "$O/build.log" 2>&1 || { grep -m20 -B2 -A8 -E "error|FAILED" "$O/build.log"; exit 1; }
  grep -i "spill\|C7510" "$O/build.log" | sort | uniq -c | head -20
  el "built"
fi
case "${1:-}" in
  fp8)
    for c in 0 1 2 3 4; do
      timeout 150 "$CLI" bench gated-up-fp8 --tile-config $c --models 8b,70b --tokens 1024,4096,8192,16384 \
        --reps 10 --warmup 2 --no-ceilings --json "$O/f_c$c.json" > "$O/f_c$c.log" 2>&1
      el "fp8 row $c rc $? ($(grep -c 'VERIFY FAILED' "$O/f_c$c.log") verify failures)"
    done ;;
  bf16)
    for c in 0 1 4 5 6; do
      timeout 110 "$CLI" bench gated-up --kernel sm90 --tile-config $c --models 8b,70b,405b --tokens 1024,4096,16384 \
        --reps 5 --warmup 2 --no-ceilings --json "$O/b_c$c.json" > "$O/b_c$c.log" 2>&1
      el "bf16 row $c rc $? ($(grep -c 'VERIFY FAILED' "$O/b_c$c.log") verify failures)"
    done ;;
  *) sed -n '2,/^set /p' "$0" | grep '^#'; exit 2 ;;
esac
python3 - "$O" "$1" <<'PY'
import glob, json, os, sys
o, step = sys.argv[1], sys.argv[2]
pre = "f" if step == "fp8" else "b"
t = {}
for f in sorted(glob.glob(os.path.join(o, f"{pre}_c*.json"))):
    d = json.load(open(f))
    for r in d["rows"]:
        t.setdefault((r["model"], r["M"]), {})[r["tile_config"]] = r
if step == "fp8":
    print("FP8 gated GEMM, TFLOP/s of the fused kernel (bf16 out) per row forced; c/a = / cuBLASLt fast accum,"
          " c/a2 = / cuBLASLt default accum (torch._scaled_mm's), both measured in the row's own run")
    for k in sorted(t):
        s = f"{k[0]:12} M={k[1]:6d}"
        for c, r in sorted(t[k].items()):
            s += f" | r{c} {r['c_fused_fp8_tflops']:5.0f} {r['c_over_a']:.3f} {r['c_over_a2']:.3f}"
        print(s + ("" if all(r["verified"] for r in t[k].values()) else "  VERIFY FAILED"))
else:
    print("bf16 gated GEMM, TFLOP/s of the fused kernel per row forced; c/a = / cuBLAS GEMM alone (same run)")
    for k in sorted(t):
        s = f"{k[0]:12} M={k[1]:6d}"
        for c, r in sorted(t[k].items()):
            s += f" | r{c} {r['c_fused_tflops']:4.0f} {r['c_over_a']:.3f}"
        print(s + ("" if all(r["verified"] for r in t[k].values()) else "  VERIFY FAILED"))
PY
