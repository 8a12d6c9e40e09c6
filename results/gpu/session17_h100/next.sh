#!/usr/bin/env bash
# The next session's device plan (written at the end of session 17, whose device time was spent).
# Name kind nvidia-h100-x1 on every call (an unnamed call may come on an H200 and lose a deferred GPU
# check between machines). One-chip machines counted their whole held time in session 17: plan on
# 1800 s, a full GPU check (--defer-python + --python-only) takes about 630 s of it.
# Steps:
#   u6 (issue 14, first; cheap): `call7_u.sh` times phase 1 with U = 4 / 6 / 8 chunks a lane at NT = 2
#     (M = 9-16) on dense and sparse rows at M = 12 and 16. Build three CLIs on the CPU machine first:
#     main, main + pending/phase1_u6_nt2.patch, and the same with 8 (cmake --build <dir> --target
#     blockfuse_cli; strip; xz into .wt/bins/cli_{head,u6,u8}.xz; carry .wt/bins). About 120 s.
#     Keep U = 6 if it gains on the dense rows without losing elsewhere (ptxas: 128 registers, no spill).
#   table (issue 16): `git apply results/gpu/session17_h100/pending/streamk_table_nine_runs.patch`
#     (the with-workspace table over all nine runs: row 3 at 405B x 256 only; CPU tests pass).
#   mends: `git apply results/gpu/session17_h100/pending/review_mends17.patch` (no kernel change).
#   check: then one `scripts/gpu-check --defer-python` (carry the five .deps paths of its header) and
#     `--python-only` within 30 s on the same machine; commit results/gpu/latest.json with the change.
set -uo pipefail
case "${1:-}" in
  *) sed -n '2,/^set /p' "$0" | grep '^#'; exit 2 ;;
esac
