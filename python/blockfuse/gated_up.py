"""blockfuse's gated up-projection for PyTorch: h = act(x·W_gateᵀ) ⊙ (x·W_upᵀ) in one kernel.

    h = blockfuse.ops.gated_up(x, w, activation="silu")     # w: the interleaved [2U, K] weight
    w = blockfuse.ops.interleave_gate_up(gate_proj.weight, up_proj.weight)

`w` is the *interleaved* weight, row 2j = up_j, row 2j+1 = gate_j — build it once with
`interleave_gate_up(gate_proj.weight, up_proj.weight)` (or `interleave_stacked` from a fused
[gate; up] checkpoint tensor). Requirements: CUDA tensors on one device, both bf16 or both fp16,
compute capability >= 8.0; x's last dim contiguous and its leading dims flattenable into rows with
one row stride; K % 8 == 0, U % 8 == 0, row strides % 8 == 0, 16-byte aligned data. Numerics: fp32
accumulation, activation and product in fp32, one rounding to the output dtype. The op has a
backward (in C++: the pre-activation kept by the forward, or recomputed with recompute=True, then
blockfuse's swiglu backward in place and two GEMMs; gated_up_backward is its formula in torch). Up to 32 rows it runs the decode
kernel, which streams the weight (docs/gated_up.md).

This module holds the op's wrapper, the weight-layout helpers, the reference and the fake
implementations (blockfuse::gated_up and the layout ops).
"""
import torch

from . import _lib
from ._common import FUSED_DTYPES, LOADED, activation as _activation, activation_and_grad, has_op, resolve, with_last

_GATED_UP = resolve("gated_up")


def gated_up(x, w, activation="silu", recompute=False):
    """h[..., U] = act(x·W_gateᵀ) ⊙ (x·W_upᵀ) for x [..., K] and the interleaved w [2U, K].

    activation: "silu" (SwiGLU: Llama, Mistral, Qwen, Phi-3) or "gelu_tanh" (GeGLU: Gemma).
    recompute: only when a gradient is recorded (grad mode on, x or w requiring grad). False
    (default): the forward keeps the pre-activation z = x·wᵀ [M, 2U] (computed with torch's GEMM,
    then blockfuse's swiglu) and the backward runs no extra GEMM; True: the forward is the fused
    kernel, keeps only x, and the backward recomputes z (the least memory, one more GEMM). Without
    a recorded gradient (torch.no_grad, inference_mode, no input requiring grad) the fused kernel
    runs either way."""
    return _GATED_UP(x, w, activation, recompute)


_HAS_GATED_MLP = has_op("gated_mlp")  # (a _C.so built before the op existed lacks it)
_GATED_MLP = resolve("gated_mlp") if _HAS_GATED_MLP else None


def gated_mlp(x, w, w_down, activation="silu"):
    """y[..., N] = gated_up(x, w, activation) · w_downᵀ: a gated MLP's forward (w_down: the down
    projection's nn.Linear weight [N, U], no bias) as one op, for training.

    With a recorded gradient it keeps only x and the pre-activation z = x·wᵀ [M, 2U] (torch's GEMM,
    blockfuse's swiglu, torch's GEMM), not h: the backward gets h back from the pass that turns z into
    dz (blockfuse::swiglu_backward_with_out_). That is 2U saved values a token, where gated_up followed
    by F.linear keeps 3U and eager torch 4U. Without a recorded gradient: gated_up's fused kernel and
    one GEMM. blockfuse.nn.GatedMLP's forward uses it in training."""
    if not _HAS_GATED_MLP:
        raise RuntimeError(_lib.error or "blockfuse: the loaded library has no blockfuse::gated_mlp op: rebuild it "
                                         "(pip install --no-build-isolation .)")
    return _GATED_MLP(x, w, w_down, activation)


# ---- the interleaved weight layout ---------------------------------------------------------------

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
    return _lib.error is None and all(t.dtype in FUSED_DTYPES and t.device.type in ("cpu", "cuda") for t in ts)


def _check_pair(gate, up):
    if gate.dim() != 2 or gate.shape != up.shape:
        raise ValueError(f"blockfuse.interleave_gate_up: arguments 'gate' {tuple(gate.shape)} and 'up' "
                         f"{tuple(up.shape)}; required: two 2-D weights of the same shape [U, K]")


def _check_even_rows(w, name):
    if w.dim() != 2 or w.shape[0] % 2 != 0:
        raise ValueError(f"blockfuse: argument '{name}' has shape {tuple(w.shape)}; required: a 2-D "
                         f"[2U, K] weight (an even number of rows)")


# ---- reference and backward (plain torch) --------------------------------------------------------

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


# ---- fake (meta) implementations: shapes and dtypes for torch.compile / FakeTensor -----------------

if LOADED:

    @torch.library.register_fake("blockfuse::gated_up")
    def _gated_up_fake(x, w, activation="silu", recompute=False):
        torch._check(w.dim() == 2, lambda: f"blockfuse.gated_up: argument 'w' has {w.dim()} dims; required: [2U, K]")
        torch._check(x.shape[-1] == w.shape[1],
                     lambda: f"blockfuse.gated_up: argument 'w' has K = {w.shape[1]}; required: x.size(-1) = {x.shape[-1]}")
        return x.new_empty(with_last(x, w.shape[0] // 2))

    @torch.library.register_fake("blockfuse::interleave_gate_up")
    def _interleave_gate_up_fake(gate, up):
        return gate.new_empty((2 * gate.shape[0], gate.shape[1]))

    @torch.library.register_fake("blockfuse::interleave_stacked")
    def _interleave_stacked_fake(stacked):
        return stacked.new_empty(stacked.shape)

    @torch.library.register_fake("blockfuse::deinterleave_gate_up")
    def _deinterleave_gate_up_fake(w):
        return w.new_empty((w.shape[0] // 2, w.shape[1])), w.new_empty((w.shape[0] // 2, w.shape[1]))

    @torch.library.register_fake("blockfuse::deinterleave_to_stacked")
    def _deinterleave_to_stacked_fake(w):
        return w.new_empty(w.shape)


if LOADED and _HAS_GATED_MLP:

    @torch.library.register_fake("blockfuse::gated_mlp")
    def _gated_mlp_fake(x, w, w_down, activation="silu"):
        torch._check(w.dim() == 2, lambda: f"blockfuse.gated_mlp: argument 'w' has {w.dim()} dims; required: [2U, K]")
        torch._check(x.shape[-1] == w.shape[1],
                     lambda: f"blockfuse.gated_mlp: argument 'w' has K = {w.shape[1]}; required: x.size(-1) = {x.shape[-1]}")
        torch._check(w_down.dim() == 2, lambda: f"blockfuse.gated_mlp: argument 'w_down' has {w_down.dim()} dims; "
                                                 "required: [N, U]")
        torch._check(w_down.shape[1] * 2 == w.shape[0],
                     lambda: f"blockfuse.gated_mlp: argument 'w_down' has sizes {tuple(w_down.shape)}; "
                             f"required: [N, U] with U = {w.shape[0] // 2}")
        return x.new_empty(with_last(x, w_down.shape[0]))

if LOADED and has_op("gated_mlp_dgated_"):

    @torch.library.register_fake("blockfuse::gated_mlp_dgated_")
    def _gated_mlp_dgated_fake(dy, w_down, z, activation="silu", want_h=True):
        torch._check(dy.dim() == 2 and w_down.dim() == 2 and z.dim() == 2,
                     lambda: "blockfuse.gated_mlp_dgated_: arguments 'dy', 'w_down', 'z' must be 2-D")
        # h [M, U], or [0] without want_h; z is written (dz) in place
        return dy.new_empty((dy.shape[0], w_down.shape[1]) if want_h else (0,))
