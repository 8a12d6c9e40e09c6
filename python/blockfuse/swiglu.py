"""blockfuse's standalone gated activation for PyTorch: act(gate) ⊙ up of a [..., 2U] GEMM output.

    h = blockfuse.ops.swiglu(gate_up, "silu", "stacked")
    q, row_scales = blockfuse.ops.swiglu_fp8(gate_up, None)       # FP8 e4m3 out, dynamic per-row scale

`layout` "stacked" is [gate | up] columns (x·[W_gate; W_up]ᵀ), "interleaved" column 2j = up_j,
2j+1 = gate_j (x·wᵀ with gated_up's interleaved weight). FP8 scales as in add_rmsnorm: a 1-element
float32 tensor (static) or None (dynamic: amax_row / 448).

Autograd: swiglu has a backward (torch.library.register_autograd, below) through the swiglu_backward
op: d_gate = dh·up·act'(gate), d_up = dh·act(gate), written in gate_up's layout, fp32, one rounding;
it saves gate_up. swiglu_fp8 has none.

This module holds the ops' wrappers, the reference and the fake implementations.
"""
import torch

from ._common import (FP8_DTYPE, LAYOUTS, LOADED, activation as _activation, activation_and_grad, has_op, resolve,
                      row_scales, with_last)

_SWIGLU = resolve("swiglu")
_SWIGLU_FP8 = resolve("swiglu_fp8")
_SWIGLU_BACKWARD = resolve("swiglu_backward")


def swiglu(gate_up, activation="silu", layout="stacked"):
    """out[..., U] = act(gate) ⊙ up from gate_up [..., 2U]: layout "stacked" ([gate | up] columns,
    e.g. x·[W_gate; W_up]ᵀ) or "interleaved" (column 2j = up_j, 2j+1 = gate_j). U % 8 == 0."""
    return _SWIGLU(gate_up, activation, layout)


def swiglu_fp8(gate_up, scale=None, activation="silu", layout="stacked"):
    """(out e4m3 [..., U], row_scales): swiglu quantised to FP8 from the fp32 product."""
    return _SWIGLU_FP8(gate_up, scale, activation, layout)


def swiglu_backward(dh, gate_up, activation="silu", layout="stacked"):
    """d_gate_up [..., 2U] in gate_up's layout from dh [..., U]: d_gate = dh·up·act'(gate), d_up = dh·act(gate)."""
    return _SWIGLU_BACKWARD(dh, gate_up, activation, layout)


# ---- reference (plain torch) ---------------------------------------------------------------------

def _gate_and_up(gate_up, layout):
    """(gate, up) as fp32 views of a [..., 2U] tensor in `layout`."""
    z = gate_up.float()
    u = z.shape[-1] // 2
    if layout == "stacked":
        return z[..., :u], z[..., u:]
    if layout == "interleaved":
        return z[..., 1::2], z[..., 0::2]
    raise ValueError(f"blockfuse: layout '{layout}'; required: one of {LAYOUTS}")


def swiglu_reference(gate_up, activation="silu", layout="stacked", out_dtype=None):
    """act(gate) ⊙ up in fp32 from a [..., 2U] tensor in either layout; one rounding."""
    gate, up = _gate_and_up(gate_up, layout)
    v = _activation(gate, activation) * up
    return v if out_dtype is torch.float32 else v.to(out_dtype or gate_up.dtype)


def swiglu_backward_reference(dh, gate_up, activation="silu", layout="stacked"):
    """What swiglu_backward computes, in fp32 torch (any device): d_gate_up in gate_up's layout, fp32."""
    gate, up = _gate_and_up(gate_up, layout)
    a, da = activation_and_grad(gate, activation)
    d = dh.float()
    dg, du = d * up * da, d * a
    if layout == "stacked":
        return torch.cat((dg, du), -1)
    return torch.stack((du, dg), -1).flatten(-2)


# ---- fake (meta) implementations: shapes and dtypes for torch.compile / FakeTensor -----------------

if LOADED:

    @torch.library.register_fake("blockfuse::swiglu")
    def _swiglu_fake(gate_up, activation="silu", layout="stacked"):
        return gate_up.new_empty(with_last(gate_up, gate_up.shape[-1] // 2))

    @torch.library.register_fake("blockfuse::swiglu_fp8")
    def _swiglu_fp8_fake(gate_up, scale=None, activation="silu", layout="stacked"):
        return gate_up.new_empty(with_last(gate_up, gate_up.shape[-1] // 2), dtype=FP8_DTYPE), row_scales(gate_up, scale)

    if has_op("swiglu_backward"):

        @torch.library.register_fake("blockfuse::swiglu_backward")
        def _swiglu_backward_fake(dh, gate_up, activation="silu", layout="stacked"):
            return torch.empty_like(gate_up, memory_format=torch.contiguous_format)

    if has_op("swiglu_backward_"):

        @torch.library.register_fake("blockfuse::swiglu_backward_")
        def _swiglu_backward_inplace_fake(dh, gate_up, activation="silu", layout="stacked"):
            return None  # writes gate_up in place (gated_up's backward, over its pre-activation)

        def _swiglu_setup(ctx, inputs, output):
            gate_up, activation, layout = inputs
            ctx.save_for_backward(gate_up)
            ctx.activation, ctx.layout = activation, layout

        def _swiglu_grad(ctx, grad):
            (gate_up,) = ctx.saved_tensors
            if not ctx.needs_input_grad[0]:
                return None, None, None
            return _SWIGLU_BACKWARD(grad.contiguous(), gate_up, ctx.activation, ctx.layout), None, None

        torch.library.register_autograd("blockfuse::swiglu", _swiglu_grad, setup_context=_swiglu_setup)

    if has_op("swiglu_backward_with_out_"):

        @torch.library.register_fake("blockfuse::swiglu_backward_with_out_")
        def _swiglu_backward_with_out_fake(dh, gate_up, activation="silu", layout="stacked"):
            return torch.empty_like(dh, memory_format=torch.contiguous_format)  # h; gate_up written in place
