"""blockfuse's standalone gated activation for PyTorch: act(gate) ⊙ up of a [..., 2U] GEMM output.

    h = blockfuse.ops.swiglu(gate_up, "silu", "stacked")
    q, row_scales = blockfuse.ops.swiglu_fp8(gate_up, None)       # FP8 e4m3 out, dynamic per-row scale

`layout` "stacked" is [gate | up] columns (x·[W_gate; W_up]ᵀ), "interleaved" column 2j = up_j,
2j+1 = gate_j (x·wᵀ with gated_up's interleaved weight). FP8 scales as in add_rmsnorm: a 1-element
float32 tensor (static) or None (dynamic: amax_row / 448). Inference only (no autograd formula).

This module holds the ops' wrappers, the reference and the fake implementations.
"""
import torch

from ._common import FP8_DTYPE, LAYOUTS, LOADED, activation as _activation, resolve, row_scales, with_last

_SWIGLU = resolve("swiglu")
_SWIGLU_FP8 = resolve("swiglu_fp8")


def swiglu(gate_up, activation="silu", layout="stacked"):
    """out[..., U] = act(gate) ⊙ up from gate_up [..., 2U]: layout "stacked" ([gate | up] columns,
    e.g. x·[W_gate; W_up]ᵀ) or "interleaved" (column 2j = up_j, 2j+1 = gate_j). U % 8 == 0."""
    return _SWIGLU(gate_up, activation, layout)


def swiglu_fp8(gate_up, scale=None, activation="silu", layout="stacked"):
    """(out e4m3 [..., U], row_scales): swiglu quantised to FP8 from the fp32 product."""
    return _SWIGLU_FP8(gate_up, scale, activation, layout)


# ---- reference (plain torch) ---------------------------------------------------------------------

def swiglu_reference(gate_up, activation="silu", layout="stacked", out_dtype=None):
    """act(gate) ⊙ up in fp32 from a [..., 2U] tensor in either layout; one rounding."""
    z = gate_up.float()
    u = z.shape[-1] // 2
    if layout == "stacked":
        gate, up = z[..., :u], z[..., u:]
    elif layout == "interleaved":
        up, gate = z[..., 0::2], z[..., 1::2]
    else:
        raise ValueError(f"blockfuse: layout '{layout}'; required: one of {LAYOUTS}")
    v = _activation(gate, activation) * up
    return v if out_dtype is torch.float32 else v.to(out_dtype or gate_up.dtype)


# ---- fake (meta) implementations: shapes and dtypes for torch.compile / FakeTensor -----------------

if LOADED:

    @torch.library.register_fake("blockfuse::swiglu")
    def _swiglu_fake(gate_up, activation="silu", layout="stacked"):
        return gate_up.new_empty(with_last(gate_up, gate_up.shape[-1] // 2))

    @torch.library.register_fake("blockfuse::swiglu_fp8")
    def _swiglu_fp8_fake(gate_up, scale=None, activation="silu", layout="stacked"):
        return gate_up.new_empty(with_last(gate_up, gate_up.shape[-1] // 2), dtype=FP8_DTYPE), row_scales(gate_up, scale)
