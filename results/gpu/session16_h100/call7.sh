#!/usr/bin/env bash
# Session 16, call 7 (issue 14): the GPU check of the deterministic-mode rule (params.h: auto_block_warps
# takes 16 warps for the deterministic mode at M <= 8 on sm_90), without the torch binding (the session's
# device time did not cover --defer-python + --python-only again; the binding is unchanged since the
# last full check, d33ccaaa), then one run of the fused MLP with the rule against 8 warps forced.
# From the repo root, carrying the five scripts/gpu-check .deps paths. Writes $OUT/latest.json,
# $OUT/gpu-check.log and $OUT/call7.tgz.
set -uo pipefail
cd "$(dirname "$0")/../../.."
scripts/gpu-check --no-python > /dev/null 2>&1
grep "\[gpu-check\]" "$OUT/gpu-check.log" | tail -2
rm -f "$OUT"/bench_*.json "$OUT"/blockfuse_*.json
O=/tmp/c7; mkdir -p "$O"
timeout 100 build-gpu/bench/blockfuse bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,4,8 --sparsity 90 --warps 8,0 \
  --json "$O/fm.json" > "$O/fm.log" 2>&1
echo "bench rc $?"
python3 - "$O" <<'PY' | tee "$O/table.txt"
import json, os, re, sys
o = sys.argv[1]
t = {}
for r in json.load(open(os.path.join(o, "fm.json")))["rows"]:
    m = re.match(r"(.*?)(-w8)?$", r["variant"])
    t.setdefault((r["shape"], r["m"], m.group(1)), {})["w8" if m.group(2) else "rule"] = (r["us"], r["verified"])
print("fused MLP µs, one run: 8 warps forced -> the rule")
for k in sorted(t, key=str):
    v = t[k]
    if "w8" in v and "rule" in v:
        print(f"  {k[0]:10} M={k[1]:<2} {k[2]:22} {v['w8'][0]:9.2f} -> {v['rule'][0]:9.2f}  {v['w8'][0] / v['rule'][0]:5.3f}x"
              + ("" if v["w8"][1] and v["rule"][1] else "  VERIFY FAILED"))
PY
tar czf "$OUT/call7.tgz" -C "$O" .
