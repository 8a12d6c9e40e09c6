#!/usr/bin/env bash
# The next session's device plan (written at the end of session 18, whose device time was spent).
# Name kind nvidia-h100-x1 on every call. One-chip machines counted their whole held time: plan on
# 1800 s; a full GPU check (--defer-python + --python-only) takes about 580 s of it.
# Steps:
#   splith (issue 14, first): pending/split_h_local_sums.patch — a split unit's CTAs sum their own K
#     slices first and read the peer's sums once (one remote load a value instead of 16; ptxas sm_90:
#     registers unchanged, the W = 32 NG = 1 kernel spills less). Build three CLIs on the CPU machine
#     (main; main + this patch; main + this and the next patch: cmake --build <dir> --target blockfuse_cli; strip; xz into
#     .wt/bins/cli_{m0,sh,so}.xz; carry .wt/bins) and run
#       SIDES="m0 sh so" RUNS=3 ARGS="--shapes llama3-8b,llama3-70b --m 1,4,8 --sparsity 75,90,95,99 --warps 0,8" \
#         bash results/gpu/session18_h100/ab.sh
#     Expected from the per-CTA timeline (trace/trace.txt): about 2 µs off the split rows (8B x 95 %
#     17.4 µs, x 99 % 13 µs). With --warps 8 the 8B x 90 % list splits (176 CTAs, two an SM): if that
#     row then beats the 16-warp unsplit one, the block-width rule for union lists of 67-132 groups
#     should take 8 warps and split (params.h: auto_block_warps, split_groups).
#   start (issue 14, in the same A/B as a third CLI, cli_so = main + both patches): pending/
#     union_start_overlap.patch — an unsplit union list's block loads its indices for all three
#     candidate block sizes before the device-side block-size model runs, so the load hides under it
#     (the start took 2.3 µs at 8B x 90 %, 0.7 µs more than a split unit's; ptxas: registers
#     unchanged in every kernel). Expected: up to 0.7 µs off the 8B 75 % and 90 % rows.
#   trace (optional): trace/trace.patch applies on main; rebuild fmlp_trace against it (the nvcc lines
#     are in trace/README) to see the h step after the patch.
#   gated_mlp (issue 14): git apply pending/gated_mlp_use_fused_mlp.patch (python only; its GPU tests run
#     in the check below), and name the opt-in in docs/fused_mlp.md's "Not done" and docs/pytorch.md.
#   check: scripts/gpu-check --defer-python, then --python-only within 30 s on the same machine;
#     commit results/gpu/latest.json with the change.
#   ncu (issue 16, before resolving it): its targets ask what ncu shows where they are missed. ncu
#     --set full of the bf16 fused kernel at its worst point against cuBLAS (Llama-3 70B x 16384 and
#     8B x 512-1024 tokens, bench gated-up --tokens ...) and of the FP8 kernel at 8B x 16384 (0.964x
#     _scaled_mm) beside cuBLASLt's kernel: ncu16.sh (written, not run; after gpu-check on the same
#     machine it profiles build-gpu's CLI).
#   table (issue 16, before the check, no device time of its own): kSm90MeasuredWithWorkspace repeats
#     kSm90Measured's 60 points to differ at one (405B x 256 -> stream-K); keep only the stream-K points
#     (exact-match lookup, then kSm90Measured) and have scripts/tile-table --emit-cpp write that form.
# Beyond: phase 1 through a per-lane cp.async ring (no registers while in flight) is the larger
#   redesign docs/fused_mlp.md names.
set -uo pipefail
case "${1:-}" in
  *) sed -n '2,/^set /p' "$0" | grep '^#'; exit 2 ;;
esac
