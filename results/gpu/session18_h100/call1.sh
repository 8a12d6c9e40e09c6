#!/usr/bin/env bash
# Session 18, call 1 (issue 14): session 17's call 7 (phase 1 at NT = 2 with U = 4 / 6 / 8 chunks a
# lane in flight, M = 12 and 16; CLIs cli_head = main 1a16b48, cli_u6 = + pending/phase1_u6_nt2.patch,
# cli_u8 = the same line with 8, built on the CPU machine and carried xz'd in .wt/bins), then one run of
# main's CLI with --warps 8,16 (is 16 warps still right for the deterministic first grid now that its
# sum is a second launch?).
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/s18c1}; mkdir -p "$O"
OUT=$O bash results/gpu/session17_h100/call7_u.sh
mkdir -p "$O/w"
timeout 150 /tmp/bins/cli_head bench fused-mlp --shapes llama3-8b,llama3-70b --m 1,4,8 --sparsity 75,90 \
  --warps 8,16 --json "$O/w/warps.json" > "$O/w/warps.log" 2>&1; echo "warps rc $?"
python3 - "$O/w/warps.json" <<'PY' | tee "$O/warps_table.txt"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
t = {}
for r in rows:
    v = r["variant"]; w = "auto"
    for s in ("-w8", "-w16"):
        if v.endswith(s): v, w = v[: -len(s)], s[2:]
    t.setdefault((r["shape"], r["m"], v), {})[w] = (r["us"], r["verified"])
print("fused MLP µs, one run: the library's rule | 8 warps | 16 warps")
for k in sorted(t, key=str):
    v = t[k]
    print(f"  {k[0]:10} M={k[1]:<2} {k[2]:26} " + " | ".join(f"{v[w][0]:8.2f}{'' if v[w][1] else ' !'}" if w in v else "       -" for w in ("auto", "8", "16")))
PY
tar czf "$O/w.tgz" -C "$O" w && rm -rf "$O/w"
