#!/usr/bin/env bash
# The next session's device plan (written at the end of session 16, whose device time was spent).
# Each step is one device call from the repo root, on a one-GPU H100 (name kind nvidia-h100-x1: session
# 16's unnamed calls came on an H200 and lost a deferred GPU check between machines).
# Steps:
#   det-ab (issue 14, first; cheap): `next_det_ab.sh` times main against main + both deterministic-mode
#     patches below (CLIs built on the CPU machine and carried). Land what gains; the atomic rows must stay level.
#   det (issue 14): `git apply results/gpu/session16_h100/pending/deterministic_w16.patch`, then
#     pending/review_mends.patch (the review's mends; it applies on top of deterministic_w16), and, if det-ab
#     showed it gains, pending/deterministic_sum_select.patch (the final sum's loads no longer wait on each
#     block's flag; an inactive block's stale slot is selected away, the same bits) (16 warps a block
#     for the fused MLP's deterministic mode at M <= 8 on sm_90; its C++ tests and the sanitizer passed on an
#     H100 in session 16, pending/deterministic_w16_gpu-check.log). Then `scripts/gpu-check --defer-python`
#     and `--python-only` within 30 s on the same machine (about 530 + 180 s held), carrying the five
#     scripts/gpu-check .deps paths in the first. Commit with latest.json.
#   arn-scale (review item, optional): `arn_dynamic_scale_helper.patch` changes the SASS of add_rmsnorm's
#     dynamic-FP8 kernels (51 of 110 differ). Time it against main before landing: two CLIs built on the CPU
#     machine (strip, xz into .wt/bins, carry), `bench add-rmsnorm --fp8 dynamic --hidden 4096,8192,16384
#     --rows 32,2048,8192,32768`, two interleaved runs of each.
set -uo pipefail
case "${1:-}" in
  *) sed -n '2,/^set /p' "$0" | grep '^#'; exit 2 ;;
esac
