"""blockfuse's FP8 gated up-projection for PyTorch (Hopper, sm90a builds).

    h = blockfuse.ops.gated_up_fp8(x8, x_scale, w8, w_scale)                  # bf16 h
    h8 = blockfuse.ops.gated_up_fp8(x8, x_scale, w8, w_scale, "silu", s_out)  # e4m3 h, static scale
    q, row_scales = blockfuse.ops.gated_up_fp8_dynamic(x8, x_scale, w8, w_scale)

h = act(x·W_gateᵀ) ⊙ (x·W_upᵀ) from e4m3 operands (dequantised value = float(q) · scale), fp32
accumulation; the weight is interleaved as for gated_up. The ops exist when the library was built
with the sm90a kernels; otherwise calling them says so. Inference only (no autograd formula).

This module holds the ops' wrappers, the reference and the fake implementations.
"""
import torch

from . import _lib
from ._common import FP8_DTYPE, activation as _activation, fp8_quantize_reference, has_op, with_last

_HAS_GATED_UP_FP8 = has_op("gated_up_fp8")
_HAS_GATED_UP_FP8_DYNAMIC = has_op("gated_up_fp8_dynamic")


def gated_up_fp8(x, x_scale, w, w_scale, activation="silu", out_scale=None):
    """h[..., U] = act(x·W_gateᵀ) ⊙ (x·W_upᵀ) from e4m3 operands, on Hopper (sm90a builds).

    x float8_e4m3fn [..., K] with x_scale float32 of 1 element (per tensor) or one per row of x;
    w float8_e4m3fn [2U, K] interleaved (interleave_gate_up of the e4m3 gate/up weights viewed as
    a 2-byte dtype, or built row-wise) with w_scale of 1 or 2U elements (interleaved order).
    Dequantised operand = float(q) · scale; fp32 accumulation. out_scale None: h is bf16;
    out_scale (float32, one element): h is e4m3 with that static scale (needs U % 16 == 0)."""
    if not _HAS_GATED_UP_FP8:
        raise RuntimeError(_lib.error or f"the blockfuse torch library ({_lib.loaded_from}) has no "
                           "blockfuse::gated_up_fp8 op: rebuild it (pip install --no-build-isolation .)")
    return torch.ops.blockfuse.gated_up_fp8.default(x, x_scale, w, w_scale, activation, out_scale)


def gated_up_fp8_dynamic(x, x_scale, w, w_scale, activation="silu"):
    """(q e4m3 [..., U], row_scales float32 [...]): gated_up_fp8 with one output scale per row,
    computed on the device (blockfuse/fp8.h's dynamic rule). A row's amax spans all of its N tiles,
    so h is rounded to bf16 into a workspace by the GEMM and a row kernel quantises it: the values
    quantised are gated_up_fp8's bf16 output, and the scales are within 2^-9 of the fp32 rows'."""
    if not _HAS_GATED_UP_FP8_DYNAMIC:
        raise RuntimeError(_lib.error or f"the blockfuse torch library ({_lib.loaded_from}) has no "
                           "blockfuse::gated_up_fp8_dynamic op: rebuild it (pip install --no-build-isolation .)")
    return torch.ops.blockfuse.gated_up_fp8_dynamic.default(x, x_scale, w, w_scale, activation)


# ---- reference (plain torch) ---------------------------------------------------------------------

def gated_up_fp8_reference(x, x_scale, w, w_scale, activation="silu", out_scale=None):
    """gated_up_fp8's formula in fp32 plain torch (any device): the dequantised operands' product,
    the gate, then bf16, or e4m3 quantised with out_scale (fp8_quantize_reference's rule), or with
    out_scale="dynamic" the pair gated_up_fp8_dynamic returns (the bf16 h quantised per row)."""
    xf = x.float() * x_scale.float().reshape(*x.shape[:-1], 1) if x_scale.numel() > 1 else x.float() * x_scale.float()
    wf = w.float() * (w_scale.float().reshape(-1, 1) if w_scale.numel() > 1 else w_scale.float())
    z = xf @ wf.t()
    h = _activation(z[..., 1::2], activation) * z[..., 0::2]
    if out_scale is None:
        return h.to(torch.bfloat16)
    if isinstance(out_scale, str):
        if out_scale != "dynamic":
            raise ValueError(f"out_scale: None, a scale tensor or 'dynamic', not {out_scale!r}")
        return fp8_quantize_reference(h.to(torch.bfloat16))
    return fp8_quantize_reference(h, out_scale)[0]


# ---- fake (meta) implementations: shapes and dtypes for torch.compile / FakeTensor -----------------

if _HAS_GATED_UP_FP8:

    @torch.library.register_fake("blockfuse::gated_up_fp8")
    def _gated_up_fp8_fake(x, x_scale, w, w_scale, activation="silu", out_scale=None):
        torch._check(w.dim() == 2 and x.shape[-1] == w.shape[1],
                     lambda: "blockfuse.gated_up_fp8: argument 'w' must be [2U, K] with K = x.size(-1)")
        return x.new_empty(with_last(x, w.shape[0] // 2), dtype=torch.bfloat16 if out_scale is None else FP8_DTYPE)

if _HAS_GATED_UP_FP8_DYNAMIC:

    @torch.library.register_fake("blockfuse::gated_up_fp8_dynamic")
    def _gated_up_fp8_dynamic_fake(x, x_scale, w, w_scale, activation="silu"):
        torch._check(w.dim() == 2 and x.shape[-1] == w.shape[1],
                     lambda: "blockfuse.gated_up_fp8_dynamic: argument 'w' must be [2U, K] with K = x.size(-1)")
        return (x.new_empty(with_last(x, w.shape[0] // 2), dtype=FP8_DTYPE),
                x.new_empty(x.shape[:-1], dtype=torch.float32))
