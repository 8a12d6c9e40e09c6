"""`python -m blockfuse.bench gated-up-fp8`: the FP8 gated up-projection beside torch._scaled_mm, in
one process on one Hopper GPU.

h = silu(x·W_gateᵀ) ⊙ x·W_upᵀ from e4m3 operands. torch._scaled_mm alone (into [M, 2U], bf16,
per-tensor scales, its default accumulation) and followed by blockfuse's interleaved swiglu (bf16,
and swiglu_fp8 with a static scale for an e4m3 h); ops.gated_up_fp8 with bf16 and e4m3 h; ops.gated_up
(bf16 operands) for scale. CUDA events around each call, median of the repetitions
(common.median_ms). Every blockfuse result is checked against an fp32 reference before it is timed
(exit status 1 if wrong).
"""
import sys

import torch

from .. import ops
from .common import median_ms, rel, run_measurement
from .shapes import MLP_SHAPES

FP8 = torch.float8_e4m3fn


def measure(a):
    """The rows of the gated-up-fp8 table (sys.exit with a message if a result is wrong)."""
    if torch.cuda.get_device_capability() != (9, 0):
        sys.exit("gated-up-fp8: the FP8 kernel is sm90a (Hopper) only")
    rows_out = []
    for key in a.shapes:
        name, k, u = MLP_SHAPES[key]
        g = torch.Generator(device="cuda").manual_seed(1)
        w16 = (torch.randn(2 * u, k, device="cuda", generator=g) * k ** -0.5).bfloat16()
        sw = (w16.float().abs().amax() / 448).reshape(1)
        w8 = (w16.float() / sw).to(FP8)
        for m in a.tokens:
            x16 = torch.randn(m, k, device="cuda", generator=g).bfloat16()
            sx = (x16.float().abs().amax() / 448).reshape(1)
            x8 = (x16.float() / sx).to(FP8)
            s_out = torch.tensor([0.01], device="cuda")
            h = ops.gated_up_fp8(x8, sx, w8, sw)
            ref = ops.gated_up_fp8_reference(x8[:128], sx, w8, sw).float()
            if not rel(h[:128], ref) < 1e-2:
                sys.exit(f"gated_up_fp8 differs from the fp32 reference at {name} M={m}")

            def scaled_mm():
                return torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16)

            z = scaled_mm()
            if not rel(ops.swiglu(z, "silu", "interleaved")[:128], ref) < 2e-2:
                sys.exit(f"torch._scaled_mm + swiglu differs from the reference at {name} M={m}")
            flops = 2.0 * m * k * 2 * u
            t = {
                "scaled_mm": median_ms(scaled_mm),
                "scaled_mm+swiglu": median_ms(lambda: ops.swiglu(scaled_mm(), "silu", "interleaved")),
                "scaled_mm+swiglu_fp8": median_ms(lambda: ops.swiglu_fp8(scaled_mm(), s_out, "silu", "interleaved")),
                "fused_fp8_bf16_out": median_ms(lambda: ops.gated_up_fp8(x8, sx, w8, sw)),
                "fused_fp8_e4m3_out": median_ms(lambda: ops.gated_up_fp8(x8, sx, w8, sw, "silu", s_out)),
                "fused_bf16": median_ms(lambda: ops.gated_up(x16, w16)),
            }
            row = dict(benchmark="gated-up-fp8-python", model=name, M=m, K=k, U=u,
                       **{f"{n}_tflops": flops / (ms * 1e9) for n, ms in t.items()})
            row["fused_over_scaled_mm"] = t["scaled_mm"] / t["fused_fp8_bf16_out"]
            row["fused_over_scaled_mm_swiglu"] = t["scaled_mm+swiglu"] / t["fused_fp8_bf16_out"]
            row["fused_e4m3_over_scaled_mm_swiglu_fp8"] = t["scaled_mm+swiglu_fp8"] / t["fused_fp8_e4m3_out"]
            row["fused_fp8_over_fused_bf16"] = t["fused_bf16"] / t["fused_fp8_bf16_out"]
            rows_out.append(row)
            print(f"{name:12s} M={m:6d}  " + "  ".join(f"{n} {flops / (ms * 1e9):.0f}" for n, ms in t.items())
                  + f"  TFLOP/s; fused/_scaled_mm x{row['fused_over_scaled_mm']:.2f}", flush=True)
    return rows_out


def run(args):
    """The `gated-up-fp8` subcommand: returns the exit status."""
    return run_measurement(measure, args)
