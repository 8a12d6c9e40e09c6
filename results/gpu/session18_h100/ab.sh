#!/usr/bin/env bash
# Session 18: interleaved A/B of fused-MLP CLIs carried xz'd in .wt/bins (cli_<side>.xz), two runs each.
#   run: SIDES="m0 m1 m3 m7" ARGS="--shapes ... --m ... --sparsity ..." bash results/gpu/session18_h100/ab.sh
# The first side is the baseline; the table gives µs (min of the runs), % of copy, and base/side.
set -uo pipefail
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/ab}; R=$O/raw; mkdir -p "$R"
X=/tmp/bins; mkdir -p $X
SIDES=${SIDES:?}; ARGS=${ARGS:?}; RUNS=${RUNS:-2}
for s in $SIDES; do xz -dc .wt/bins/cli_$s.xz > $X/cli_$s && chmod +x $X/cli_$s; done
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
for run in $(seq 1 $RUNS); do
  for s in $SIDES; do
    timeout 120 $X/cli_$s bench fused-mlp $ARGS --json "$R/fm_${s}_$run.json" > "$R/fm_${s}_$run.log" 2>&1
    el "$s run $run rc $?"
  done
done
python3 - "$R" $SIDES <<'PY' | tee "$O/table${TAG:-}.txt"
import glob, json, os, sys
r, sides = sys.argv[1], sys.argv[2:]
t = {}
for s in sides:
    for f in sorted(glob.glob(os.path.join(r, f"fm_{s}_*.json"))):
        for row in json.load(open(f))["rows"]:
            t.setdefault((row["shape"], row["m"], row["variant"]), {}).setdefault(s, []).append((row["us"], row["verified"], row.get("frac_of_copy", 0)))
print("fused MLP µs, min of the runs (% of copy): " + " | ".join(sides) + f"; ratios {sides[0]}/side")
for k in sorted(t, key=lambda k: (k[0], k[1], k[2])):
    v = t[k]
    if not all(s in v for s in sides): continue
    ok = all(x[1] for s in v.values() for x in s)
    mn = {s: min(v[s]) for s in sides}
    print(f"  {k[0]:10} M={k[1]:<2} {k[2]:22} " + " | ".join(f"{mn[s][0]:8.2f} ({100 * mn[s][2]:4.1f})" for s in sides)
          + "  " + " ".join(f"{mn[sides[0]][0] / mn[s][0]:5.3f}" for s in sides[1:]) + ("" if ok else "  VERIFY FAILED"))
PY
tar czf "$O/raw${TAG:-}.tgz" -C "$O" raw && rm -rf "$R"
