#!/usr/bin/env bash
# Session 15, call 1: session 14's pending A/B experiments (results/gpu/session14_h100/pending), run
# from CLIs built on the CPU machine (nvcc 13.0, sm_90, Release) and carried in .wt/bins, so the call
# spends no device time compiling:
#   cli_base   main with pending/comments.patch (comments only)
#   cli_x      + stream_from_257 (add_rmsnorm streaming stores from 257 rows)
#              + swiglu_warp_remap (swiglu_fp8 interleaved staged copies, warp-local)
#              + pingpong_c2x2_rows (FP8 tile row 2, bf16 row 4; forced only)
#   cli_early  + stream_early_res_out (streaming kernels store residual_out early for FP8 outputs)
#   cli_pipe   + .wt/arn_pipe.patch (results/gpu/session15_h100/arn_pipe.patch): the streaming
#              add_rmsnorm kernel as a persistent loop that loads the next row before this row's
#              reduction; BF_ARN_PIPE=k blocks per SM (unset: main's kernel)
#   sm_stream  pending/sm_stream.cu (issue 14: one SM's DRAM rate by ldg vs cp.async.bulk)
# The three patches of cli_x touch three different kernel families, so each A/B below compares
# only the family its patch touches. From the repo root, carrying [".wt/bins"]:
#   O=$OUT; export OUT=/tmp/o; mkdir -p $OUT; bash results/gpu/session15_h100/call1.sh; tar czf $O/call1.tgz -C /tmp/o .
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/call1}; mkdir -p "$O"
# The CLIs travel stripped and xz-compressed (34 MB each raw: the carry limit is 64 MiB).
X=/tmp/bins; mkdir -p $X
for f in .wt/bins/*; do n=$(basename "$f" .xz); [ "$f" = "$X/$n" ] || { xz -dc "$f" > "$X/$n" 2>/dev/null || cp "$f" "$X/$n"; chmod +x "$X/$n"; }; done
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$O/gpu.txt"
ab_table() {  # as results/gpu/session14_h100/next.sh
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
    cols = [t[k].get(s, []) for s in ["base"] + side.split(",")]
    if all(cols):
        ok = all(v for c in cols for _, v in c)
        print(f"{str(k):36} " + " -> ".join(f"{min(x for x, _ in c):5.1f}-{max(x for x, _ in c):5.1f}" for c in cols) + ("" if ok else "  VERIFY FAILED"))
PY
}
# 0. pipe: add_rmsnorm at 2048-32768 rows, every output; main against the persistent kernel at
#    2 / 4 / 8 blocks per SM (capped by occupancy).
for run in 1 2; do for side in base p2 p4 p8; do
  if [ $side = base ]; then cli=$X/cli_base; unset BF_ARN_PIPE; else cli=$X/cli_pipe; export BF_ARN_PIPE=${side#p}; fi
  timeout 100 $cli bench add-rmsnorm --hidden 4096,8192,16384 --rows 2048,8192,32768 --fp8 all \
    --json "$O/arp_${side}_$run.json" > "$O/arp_${side}_$run.log" 2>&1
done; unset BF_ARN_PIPE; el "pipe run $run"; done
# 1. stream257: add_rmsnorm at 257-2048 rows, every output.
for run in 1 2; do for side in base x; do
  timeout 100 $X/cli_$side bench add-rmsnorm --hidden 4096,8192,16384 --rows 257,512,1024,1536,2048 --fp8 all \
    --json "$O/arn_${side}_$run.json" > "$O/arn_${side}_$run.log" 2>&1
done; el "stream257 run $run"; done
# 2. earlyres: add_rmsnorm FP8 at 2048-32768 rows.
for run in 1 2; do for side in base early; do for f in static dynamic; do
  timeout 100 $X/cli_$side bench add-rmsnorm --hidden 4096,8192,16384 --rows 2048,8192,32768 --fp8 $f \
    --json "$O/are_${side}_${f}_$run.json" > "$O/are_${side}_${f}_$run.log" 2>&1
done; done; el "earlyres run $run"; done
# 3. remap: swiglu_fp8 dynamic, both layouts.
for run in 1 2; do for side in base x; do for layout in interleaved stacked; do
  timeout 60 $X/cli_$side bench swiglu --out fp8-dynamic --layout $layout --hidden 14336,16384,28672 --rows 256,2048,8192 \
    --json "$O/sw_${side}_${layout}_$run.json" > "$O/sw_${side}_${layout}_$run.log" 2>&1
done; done; el "remap run $run"; done
# 4. smstream.
timeout 120 $X/sm_stream > "$O/sm_stream.txt" 2>&1; el "sm_stream rc $?"
# 5. pp2x2 (FP8 row 2 beside rows 0 and 1, at the points where row 0 trails _scaled_mm).
for c in 0 2; do
  timeout 100 $X/cli_x bench gated-up-fp8 --tile-config $c --models 8b,70b --tokens 4096,16384 \
    --reps 10 --warmup 2 --no-ceilings --json "$O/f_c$c.json" > "$O/f_c$c.log" 2>&1; el "fp8 row $c rc $?"
done
{
ab_table arp p2,p4,p8 "add_rmsnorm % of copy (two runs: min-max): main -> persistent next-row-prefetch kernel at 2 -> 4 -> 8 blocks per SM" \
  '(r["H"], r["rows"], r["fp8"])' '100 * r["fused_frac_of_copy"]'
ab_table arn x "add_rmsnorm % of copy (two runs: min-max): main (plain stores below 2048 rows) -> streaming from 257 rows" \
  '(r["H"], r["rows"], r["fp8"])' '100 * r["fused_frac_of_copy"]'
ab_table are early "add_rmsnorm FP8 % of copy (two runs: min-max): main (FP8 residual_out stored late) -> early" \
  '(r["H"], r["rows"], r["fp8"])' '100 * r["fused_frac_of_copy"]'
ab_table sw x "swiglu_fp8 dynamic, % of copy (two runs: min-max): main (.ca copies) -> warp remap" \
  '(variant, r["U"], r["M"])' '100 * r.get("frac_of_copy", 0.0)'
python3 - "$O" <<'PY'
import glob, json, os, sys
t = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "f_c*.json"))):
    for r in json.load(open(f))["rows"]:
        t.setdefault((r["model"], r["M"]), {})[r["tile_config"]] = r
print("FP8 gated-up: TFLOP/s and / torch._scaled_mm's default (a2), per forced row")
for k in sorted(t):
    print(f"  {k[0]:14} M={k[1]:6d}" + "".join(f" | r{c} {r['c_fused_fp8_tflops']:5.0f} {r['c_over_a2']:.3f}" for c, r in sorted(t[k].items()))
          + ("" if all(r["verified"] for r in t[k].values()) else "  VERIFY FAILED"))
PY
echo "sm_stream:"; cat "$O/sm_stream.txt"
} | tee "$O/table.txt"
