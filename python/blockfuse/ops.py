"""blockfuse's operators for PyTorch: the fused gated up-projection and the weight-layout helpers.

    h = blockfuse.ops.gated_up(x, w, activation="silu")   # x [..., K], w [2U, K] -> h [..., U]

computes h = act(x·W_gateᵀ) ⊙ (x·W_upᵀ) in one CUDA kernel: the gate is applied to the GEMM's fp32
accumulators, so the [.., 2U] intermediate of the usual GEMM + SwiGLU never exists (one third of the
activation memory). `w` is the *interleaved* weight: row 2j = up_j, row 2j+1 = gate_j — build it once
with `interleave_gate_up(gate_proj.weight, up_proj.weight)`.

The ops are registered with torch.library (schemas and CUDA/CPU kernels in C++, python/csrc; the
fake implementations and the autograd formula here), so they trace under
torch.compile(fullgraph=True) without a graph break, and they allocate through the caching
allocator on the current stream, so they can be captured in CUDA graphs.

Requirements of gated_up (checked; errors name the argument): CUDA tensors on one device, both
bf16 or both fp16, compute capability >= 8.0; x's last dim contiguous and its leading dims
flattenable into rows with one row stride (any batch dims; row-strided slices are fine); K % 8 == 0,
U % 8 == 0, row strides % 8 == 0 and 16-byte aligned data (the kernel moves 16-byte vectors).
Numerics: fp32 accumulation, activation and product in fp32, one rounding to the output dtype.

Backward (for fine-tuning through a patched model) recomputes x·wᵀ with torch and applies the
activation's derivative: the forward's memory saving is kept, the backward is plain torch.
"""
import math

import torch

from . import _lib

ACTIVATIONS = ("silu", "gelu_tanh")
_FUSED_DTYPES = (torch.bfloat16, torch.float16)

_lib.load()


def available():
    """True when the compiled ops are loaded (they still need a CUDA device to run gated_up)."""
    return _lib.loaded_from is not None


def load_error():
    """Why the compiled ops are not available (str), or None."""
    return _lib.error


# ---- the ops -----------------------------------------------------------------------------------

def gated_up(x, w, activation="silu"):
    """h[..., U] = act(x·W_gateᵀ) ⊙ (x·W_upᵀ) for x [..., K] and the interleaved w [2U, K].

    activation: "silu" (SwiGLU: Llama, Mistral, Qwen) or "gelu_tanh" (GeGLU: Gemma).
    """
    if _lib.error is not None:
        raise RuntimeError(_lib.error)
    return torch.ops.blockfuse.gated_up(x, w, activation)


def interleave_gate_up(gate, up):
    """gate [U, K], up [U, K] (nn.Linear weights) -> w [2U, K] with row 2j = up_j, 2j+1 = gate_j.

    bf16/fp16 tensors go through blockfuse's C++ helper (row copies, CPU or CUDA); other dtypes
    through torch (the same rows)."""
    if _use_layout_op(gate, up):
        return torch.ops.blockfuse.interleave_gate_up(gate, up)
    _check_pair(gate, up)
    return torch.stack((up, gate), dim=1).reshape(2 * gate.shape[0], gate.shape[1])


def interleave_stacked(stacked):
    """stacked [2U, K] = [gate; up] (a fused gate_up_proj checkpoint) -> interleaved w [2U, K]."""
    if _use_layout_op(stacked):
        return torch.ops.blockfuse.interleave_stacked(stacked)
    _check_even_rows(stacked, "stacked")
    u = stacked.shape[0] // 2
    return interleave_gate_up(stacked[:u], stacked[u:])


def deinterleave_gate_up(w):
    """Interleaved w [2U, K] -> (gate [U, K], up [U, K])."""
    if _use_layout_op(w):
        return torch.ops.blockfuse.deinterleave_gate_up(w)
    _check_even_rows(w, "w")
    return w[1::2].contiguous(), w[0::2].contiguous()


def deinterleave_to_stacked(w):
    """Interleaved w [2U, K] -> stacked [2U, K] = [gate; up]."""
    if _use_layout_op(w):
        return torch.ops.blockfuse.deinterleave_to_stacked(w)
    gate, up = deinterleave_gate_up(w)
    return torch.cat((gate, up), dim=0)


def _use_layout_op(*ts):
    return _lib.error is None and all(t.dtype in _FUSED_DTYPES and t.device.type in ("cpu", "cuda") for t in ts)


def _check_pair(gate, up):
    if gate.dim() != 2 or gate.shape != up.shape:
        raise ValueError(f"blockfuse.interleave_gate_up: arguments 'gate' {tuple(gate.shape)} and 'up' "
                         f"{tuple(up.shape)}; required: two 2-D weights of the same shape [U, K]")


def _check_even_rows(w, name):
    if w.dim() != 2 or w.shape[0] % 2 != 0:
        raise ValueError(f"blockfuse: argument '{name}' has shape {tuple(w.shape)}; required: a 2-D "
                         f"[2U, K] weight (an even number of rows)")


# ---- reference and backward (plain torch) --------------------------------------------------------

def activation_and_grad(g, activation):
    """(act(g), act'(g)) elementwise, in g's dtype (call it with fp32)."""
    if activation == "silu":
        s = torch.sigmoid(g)
        return g * s, s * (1 + g * (1 - s))
    if activation == "gelu_tanh":
        c = math.sqrt(2.0 / math.pi)
        t = torch.tanh(c * (g + 0.044715 * g * g * g))
        a = 0.5 * g * (1 + t)
        da = 0.5 * (1 + t) + 0.5 * g * (1 - t * t) * c * (1 + 3 * 0.044715 * g * g)
        return a, da
    raise ValueError(f"blockfuse: activation '{activation}'; required: one of {ACTIVATIONS}")


def _activation(g, activation):
    if activation == "silu":
        return torch.nn.functional.silu(g)
    if activation == "gelu_tanh":
        return torch.nn.functional.gelu(g, approximate="tanh")
    raise ValueError(f"blockfuse: activation '{activation}'; required: one of {ACTIVATIONS}")


def gated_up_reference(x, w, activation="silu", out_dtype=None):
    """The formula gated_up computes, in plain torch with fp32 math: any device, any float dtype.

    Rounds once to out_dtype (default x.dtype), like the kernel. Used by the tests and by
    GatedMLP on CPU tensors."""
    z = torch.nn.functional.linear(x.float(), w.float())  # [..., 2U]: column 2j = up_j, 2j+1 = gate_j
    up, gate = z[..., 0::2], z[..., 1::2]
    return (_activation(gate, activation) * up).to(out_dtype or x.dtype)


def gated_up_backward(grad, x, w, activation, need_x=True, need_w=True):
    """Gradients (dx, dw) of h = gated_up(x, w) given dL/dh, recomputing x·wᵀ with torch."""
    k, u = x.shape[-1], w.shape[0] // 2
    x2 = x.reshape(-1, k)
    z = torch.mm(x2, w.t()).float()
    up, gate = z[:, 0::2], z[:, 1::2]
    a, da = activation_and_grad(gate, activation)
    g2 = grad.reshape(-1, u).float()
    dz = torch.stack((g2 * a, g2 * up * da), dim=-1).reshape(-1, 2 * u).to(x.dtype)
    dx = torch.mm(dz, w).reshape(x.shape) if need_x else None
    dw = torch.mm(dz.t(), x2) if need_w else None
    return dx, dw


# ---- torch.library registrations (fake/meta kernels, autograd) -----------------------------------

if _lib.error is None:

    @torch.library.register_fake("blockfuse::gated_up")
    def _gated_up_fake(x, w, activation="silu"):
        torch._check(w.dim() == 2, lambda: f"blockfuse.gated_up: argument 'w' has {w.dim()} dims; required: [2U, K]")
        torch._check(x.dim() >= 1, lambda: "blockfuse.gated_up: argument 'x' is 0-dimensional; required: [..., K]")
        torch._check(x.shape[-1] == w.shape[1],
                     lambda: f"blockfuse.gated_up: argument 'w' has K = {w.shape[1]}; required: x.size(-1) = {x.shape[-1]}")
        torch._check(w.shape[0] % 2 == 0, lambda: "blockfuse.gated_up: argument 'w' needs an even number of rows 2U")
        torch._check(x.dtype == w.dtype, lambda: f"blockfuse.gated_up: argument 'w' has dtype {w.dtype}; required: {x.dtype}")
        return x.new_empty((*x.shape[:-1], w.shape[0] // 2))

    @torch.library.register_fake("blockfuse::interleave_gate_up")
    def _interleave_gate_up_fake(gate, up):
        torch._check(gate.dim() == 2 and gate.shape == up.shape, lambda: "blockfuse.interleave_gate_up: gate and up must be [U, K]")
        return gate.new_empty((2 * gate.shape[0], gate.shape[1]))

    @torch.library.register_fake("blockfuse::interleave_stacked")
    def _interleave_stacked_fake(stacked):
        torch._check(stacked.dim() == 2, lambda: "blockfuse.interleave_stacked: stacked must be [2U, K]")
        return stacked.new_empty(stacked.shape)

    @torch.library.register_fake("blockfuse::deinterleave_gate_up")
    def _deinterleave_gate_up_fake(w):
        torch._check(w.dim() == 2 and w.shape[0] % 2 == 0, lambda: "blockfuse.deinterleave_gate_up: w must be [2U, K]")
        return w.new_empty((w.shape[0] // 2, w.shape[1])), w.new_empty((w.shape[0] // 2, w.shape[1]))

    @torch.library.register_fake("blockfuse::deinterleave_to_stacked")
    def _deinterleave_to_stacked_fake(w):
        torch._check(w.dim() == 2, lambda: "blockfuse.deinterleave_to_stacked: w must be [2U, K]")
        return w.new_empty(w.shape)

    def _gated_up_setup_context(ctx, inputs, output):
        x, w, activation = inputs
        ctx.activation = activation
        ctx.save_for_backward(x, w)

    def _gated_up_autograd(ctx, grad):
        x, w = ctx.saved_tensors
        dx, dw = gated_up_backward(grad, x, w, ctx.activation,
                                   need_x=ctx.needs_input_grad[0], need_w=ctx.needs_input_grad[1])
        return dx, dw, None

    torch.library.register_autograd("blockfuse::gated_up", _gated_up_autograd,
                                    setup_context=_gated_up_setup_context)


# ---- attention (python/blockfuse/attention.py: fake impls and the Hugging Face backend) -----------
from .attention import attention, attention_varlen  # noqa: E402,F401
