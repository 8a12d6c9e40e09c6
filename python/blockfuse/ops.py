"""blockfuse's operators for PyTorch: every kernel of the decoder block, as torch.library ops.

    h = blockfuse.ops.gated_up(x, w, activation="silu")           # act(x·W_gateᵀ) ⊙ (x·W_upᵀ), one kernel
    out, residual = blockfuse.ops.add_rmsnorm(x, residual, weight, eps, gemma=False)
    out = blockfuse.ops.rmsnorm(x, weight, eps)
    h = blockfuse.ops.swiglu(gate_up, "silu", "stacked")          # act(gate) ⊙ up of a [.., 2U] GEMM output
    y = blockfuse.ops.decode_gemm(x, w)                           # x·wᵀ for 1..32 rows (split-K GEMV)
    q, row_scales = blockfuse.ops.add_rmsnorm_fp8(x, residual, weight, None, eps)[::2]  # FP8 e4m3 out

Every op is a torch.library operator (schemas and CUDA kernels in C++, python/csrc; the fake
implementations here), so it traces under torch.compile(fullgraph=True) without a graph break;
outputs come from the caching allocator and the work goes on the current stream, so every op can be
captured in a CUDA graph. The wrappers below call the registered op directly: all argument checks
are in C++ (no Python on the hot path), and every argument error is a ValueError whose message
names the op and the argument (blockfuse::Error's message, unchanged). gated_up has a backward (in
C++); the other ops are inference-only (no autograd formula: a backward through them raises).

gated_up: `w` is the *interleaved* weight, row 2j = up_j, row 2j+1 = gate_j — build it once with
`interleave_gate_up(gate_proj.weight, up_proj.weight)` (or `interleave_stacked` from a fused
[gate; up] checkpoint tensor). Requirements: CUDA tensors on one device, both bf16 or both fp16,
compute capability >= 8.0; x's last dim contiguous and its leading dims flattenable into rows with
one row stride; K % 8 == 0, U % 8 == 0, row strides % 8 == 0, 16-byte aligned data. Numerics: fp32
accumulation, activation and product in fp32, one rounding to the output dtype.

add_rmsnorm (the residual stream): `residual_out = x + residual` (rounded to the dtype) and
`out = residual_out · rsqrt(mean(residual_out²) + eps) · w` (`· (1 + w)` with gemma=True), in one
pass. The functional form returns the new residual stream (a fresh tensor) rather than writing over
the old one: torch.compile and CUDA graphs take it as is, and callers still holding the old stream
(e.g. Hugging Face's output_hidden_states) see it unchanged; the kernel writes residual_out either
way, so this costs an allocation, no traffic. `add_rmsnorm_` updates `residual` in place
(schema `Tensor(a!) residual`; torch.compile functionalises it).

FP8 (e4m3, dequantised value = float(q) · scale): `scale` a float32 CUDA tensor of one element is
the static per-tensor scale (read on the device, so a captured graph replays with a changed value)
and the returned row_scales is empty; `scale=None` is the dynamic mode: row_scales [...] (x's
leading dims) = amax_row / 448, written by the kernel.

decode_gemm: its split-K workspace is allocated, zeroed and cached in C++ (one per device, grown on
first need, never freed). A capture cannot allocate, so run each shape once eagerly, or call
`decode_gemm_reserve(w)`, before capturing it. One stream at a time per device.
"""
import math

import torch

from . import _lib

ACTIVATIONS = ("silu", "gelu_tanh")
LAYOUTS = ("stacked", "interleaved")
_FUSED_DTYPES = (torch.bfloat16, torch.float16)
FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0

_lib.load()


def available():
    """True when the compiled ops are loaded (they still need a CUDA device to run)."""
    return _lib.loaded_from is not None


def load_error():
    """Why the compiled ops are not available (str), or None."""
    return _lib.error


def _resolve(name):
    """The registered op's default overload (called directly: no overload resolution per call), or a
    stand-in raising why the library is not loaded."""
    if _lib.error is None:
        return getattr(torch.ops.blockfuse, name).default

    def missing(*args, **kwargs):
        raise RuntimeError(_lib.error)
    return missing


_GATED_UP = _resolve("gated_up")
_RMSNORM = _resolve("rmsnorm")
_ADD_RMSNORM = _resolve("add_rmsnorm")
_ADD_RMSNORM_ = _resolve("add_rmsnorm_")
_RMSNORM_FP8 = _resolve("rmsnorm_fp8")
_ADD_RMSNORM_FP8 = _resolve("add_rmsnorm_fp8")
_SWIGLU = _resolve("swiglu")
_SWIGLU_FP8 = _resolve("swiglu_fp8")
_DECODE_GEMM = _resolve("decode_gemm")
_DECODE_GEMM_RESERVE = _resolve("decode_gemm_reserve")
_SET_PDL = _resolve("set_programmatic_dependent_launch")


# ---- the ops -----------------------------------------------------------------------------------

def gated_up(x, w, activation="silu"):
    """h[..., U] = act(x·W_gateᵀ) ⊙ (x·W_upᵀ) for x [..., K] and the interleaved w [2U, K].

    activation: "silu" (SwiGLU: Llama, Mistral, Qwen, Phi-3) or "gelu_tanh" (GeGLU: Gemma)."""
    return _GATED_UP(x, w, activation)


def rmsnorm(x, weight, eps=1e-6, gemma=False):
    """out[..., H] = x · rsqrt(mean(x²) + eps) · weight (· (1 + weight) with gemma=True); x and
    weight [H] bf16/fp16 of one dtype, H % 8 == 0, eps > 0. fp32 math, one rounding."""
    return _RMSNORM(x, weight, eps, gemma)


def add_rmsnorm(x, residual, weight, eps=1e-6, gemma=False):
    """(out, residual_out): residual_out = x + residual (rounded), out = rmsnorm(residual_out).

    x, residual [..., H] of one shape and dtype; residual_out is a new tensor (the updated residual
    stream), the old `residual` is left as it was."""
    return _ADD_RMSNORM(x, residual, weight, eps, gemma)


def add_rmsnorm_(x, residual, weight, eps=1e-6, gemma=False):
    """out = rmsnorm(x + residual), writing x + residual over `residual` (in place)."""
    return _ADD_RMSNORM_(x, residual, weight, eps, gemma)


def rmsnorm_fp8(x, weight, scale=None, eps=1e-6, gemma=False):
    """(out e4m3 [..., H], row_scales): rmsnorm quantised to FP8 without a bf16 rounding in between.
    scale: a 1-element float32 CUDA tensor (static; row_scales empty) or None (dynamic per row)."""
    return _RMSNORM_FP8(x, weight, scale, eps, gemma)


def add_rmsnorm_fp8(x, residual, weight, scale=None, eps=1e-6, gemma=False):
    """(out e4m3, residual_out, row_scales): add_rmsnorm with the normalised output in FP8."""
    return _ADD_RMSNORM_FP8(x, residual, weight, scale, eps, gemma)


def swiglu(gate_up, activation="silu", layout="stacked"):
    """out[..., U] = act(gate) ⊙ up from gate_up [..., 2U]: layout "stacked" ([gate | up] columns,
    e.g. x·[W_gate; W_up]ᵀ) or "interleaved" (column 2j = up_j, 2j+1 = gate_j). U % 8 == 0."""
    return _SWIGLU(gate_up, activation, layout)


def swiglu_fp8(gate_up, scale=None, activation="silu", layout="stacked"):
    """(out e4m3 [..., U], row_scales): swiglu quantised to FP8 from the fp32 product."""
    return _SWIGLU_FP8(gate_up, scale, activation, layout)


def decode_gemm(x, w):
    """y[..., N] = x·wᵀ for x [..., K] with 1..32 rows in all and w [N, K] (bf16/fp16, K % 8 == 0):
    every SM streams a slice of w (split-K), fp32 accumulation, deterministic reduction."""
    return _DECODE_GEMM(x, w)


def set_programmatic_dependent_launch(enabled):
    """Turns programmatic dependent launch of the memory-bound kernels (add_rmsnorm, rmsnorm, swiglu
    and their FP8 forms, at up to 32 rows; sm_90+) on or off for the process; returns the previous
    setting. On by default (BLOCKFUSE_PDL=0 in the environment turns it off): each kernel's blocks become resident
    while the kernel before it drains, and wait for it before touching memory, so results do not
    change. Takes effect for launches made after the call (a captured graph keeps what it captured)."""
    return _SET_PDL(bool(enabled))


def decode_gemm_reserve(w):
    """Allocates and zeroes, once, the split-K workspace every decode_gemm(x, w) with up to 32 rows
    needs on w's device, so those calls can be captured in a CUDA graph. Returns the bytes reserved."""
    return _DECODE_GEMM_RESERVE(w)


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



def rmsnorm_reference(x, weight, eps=1e-6, gemma=False, out_dtype=None):
    """What rmsnorm computes, in fp32 torch (any device): one rounding to out_dtype (default x's)."""
    r = x.float()
    w = weight.float() + 1.0 if gemma else weight.float()
    v = r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * w
    return v if out_dtype is torch.float32 else v.to(out_dtype or x.dtype)


def add_rmsnorm_reference(x, residual, weight, eps=1e-6, gemma=False, out_dtype=None):
    """(out, residual_out) as add_rmsnorm computes them: the sum is rounded to x's dtype first and
    the norm is taken of the rounded values."""
    r = (x.float() + residual.float()).to(x.dtype)
    return rmsnorm_reference(r, weight, eps, gemma, out_dtype), r


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


def fp8_dequantize(q, scale):
    """float32 values of e4m3 `q` with a per-tensor scale (1 element) or per-row scales [...]."""
    s = scale.float()
    if s.numel() != 1:
        s = s.unsqueeze(-1)
    return q.float() * s


def fp8_quantize_reference(v, scale=None):
    """(q e4m3, scales) as blockfuse's FP8 outputs define them, from fp32 values v [..., H]:
    static (scale given): q = sat(v · (1/scale)); dynamic: scale_r = amax_r / 448 over the row's
    finite values (1 when 0), q = sat(v · (1/scale_r))."""
    v = v.float()
    if scale is not None:
        inv = 1.0 / scale.float().reshape(())
        s = scale
    else:
        finite = torch.where(torch.isfinite(v), v.abs(), torch.zeros_like(v))
        amax = finite.amax(-1)
        # A tensor divisor: torch divides by a Python scalar as a multiply by its reciprocal on CUDA,
        # which is not amax / 448 rounded once (the kernels' rule) for every amax.
        s = torch.where(amax > 0, amax / torch.full_like(amax, FP8_MAX), torch.ones_like(amax))
        inv = (1.0 / s).unsqueeze(-1)
    q = (v * inv).clamp(-FP8_MAX, FP8_MAX)
    q = torch.where(torch.isfinite(v), q, torch.full_like(q, float("nan")))
    return q.to(FP8_DTYPE), s


# ---- fake (meta) implementations: shapes and dtypes for torch.compile / FakeTensor -----------------
# No checks here beyond what the output shape needs: the C++ kernels validate every argument when
# they run.

def _with_last(x, n):
    return (*x.shape[:-1], n)


def _row_scales(x, scale):
    return x.new_empty((0,) if scale is not None else tuple(x.shape[:-1]), dtype=torch.float32)


if _lib.error is None:

    @torch.library.register_fake("blockfuse::gated_up")
    def _gated_up_fake(x, w, activation="silu"):
        torch._check(w.dim() == 2, lambda: f"blockfuse.gated_up: argument 'w' has {w.dim()} dims; required: [2U, K]")
        torch._check(x.shape[-1] == w.shape[1],
                     lambda: f"blockfuse.gated_up: argument 'w' has K = {w.shape[1]}; required: x.size(-1) = {x.shape[-1]}")
        return x.new_empty(_with_last(x, w.shape[0] // 2))

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

    @torch.library.register_fake("blockfuse::rmsnorm")
    def _rmsnorm_fake(x, weight, eps=1e-6, gemma=False):
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    @torch.library.register_fake("blockfuse::add_rmsnorm")
    def _add_rmsnorm_fake(x, residual, weight, eps=1e-6, gemma=False):
        return (torch.empty_like(x, memory_format=torch.contiguous_format),
                torch.empty_like(x, memory_format=torch.contiguous_format))

    @torch.library.register_fake("blockfuse::add_rmsnorm_")
    def _add_rmsnorm_inplace_fake(x, residual, weight, eps=1e-6, gemma=False):
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    @torch.library.register_fake("blockfuse::rmsnorm_fp8")
    def _rmsnorm_fp8_fake(x, weight, scale=None, eps=1e-6, gemma=False):
        return x.new_empty(x.shape, dtype=FP8_DTYPE), _row_scales(x, scale)

    @torch.library.register_fake("blockfuse::add_rmsnorm_fp8")
    def _add_rmsnorm_fp8_fake(x, residual, weight, scale=None, eps=1e-6, gemma=False):
        return (x.new_empty(x.shape, dtype=FP8_DTYPE), torch.empty_like(x, memory_format=torch.contiguous_format),
                _row_scales(x, scale))

    @torch.library.register_fake("blockfuse::swiglu")
    def _swiglu_fake(gate_up, activation="silu", layout="stacked"):
        return gate_up.new_empty(_with_last(gate_up, gate_up.shape[-1] // 2))

    @torch.library.register_fake("blockfuse::swiglu_fp8")
    def _swiglu_fp8_fake(gate_up, scale=None, activation="silu", layout="stacked"):
        return gate_up.new_empty(_with_last(gate_up, gate_up.shape[-1] // 2), dtype=FP8_DTYPE), _row_scales(gate_up, scale)

    @torch.library.register_fake("blockfuse::decode_gemm")
    def _decode_gemm_fake(x, w):
        torch._check(x.shape[-1] == w.shape[1],
                     lambda: f"blockfuse.decode_gemm: argument 'w' has K = {w.shape[1]}; required: x.size(-1) = {x.shape[-1]}")
        return x.new_empty(_with_last(x, w.shape[0]))


# ---- attention (python/blockfuse/attention.py: fake impls and the Hugging Face backend) -----------
from .attention import attention, attention_varlen  # noqa: E402,F401

# ---- FP8 gated up-projection (sm90a) -----------------------------------------------------------

_HAS_GATED_UP_FP8 = _lib.error is None and _lib.has_op("gated_up_fp8")


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


_HAS_GATED_UP_FP8_DYNAMIC = _lib.error is None and _lib.has_op("gated_up_fp8_dynamic")


def gated_up_fp8_dynamic(x, x_scale, w, w_scale, activation="silu"):
    """(q e4m3 [..., U], row_scales float32 [...]): gated_up_fp8 with one output scale per row,
    computed on the device (blockfuse/fp8.h's dynamic rule). A row's amax spans all of its N tiles,
    so h is rounded to bf16 into a workspace by the GEMM and a row kernel quantises it: the values
    quantised are gated_up_fp8's bf16 output, and the scales are within 2^-9 of the fp32 rows'."""
    if not _HAS_GATED_UP_FP8_DYNAMIC:
        raise RuntimeError(_lib.error or f"the blockfuse torch library ({_lib.loaded_from}) has no "
                           "blockfuse::gated_up_fp8_dynamic op: rebuild it (pip install --no-build-isolation .)")
    return torch.ops.blockfuse.gated_up_fp8_dynamic.default(x, x_scale, w, w_scale, activation)


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


if _HAS_GATED_UP_FP8:

    @torch.library.register_fake("blockfuse::gated_up_fp8")
    def _gated_up_fp8_fake(x, x_scale, w, w_scale, activation="silu", out_scale=None):
        torch._check(w.dim() == 2 and x.shape[-1] == w.shape[1],
                     lambda: "blockfuse.gated_up_fp8: argument 'w' must be [2U, K] with K = x.size(-1)")
        return x.new_empty(_with_last(x, w.shape[0] // 2), dtype=torch.bfloat16 if out_scale is None else FP8_DTYPE)

if _HAS_GATED_UP_FP8_DYNAMIC:

    @torch.library.register_fake("blockfuse::gated_up_fp8_dynamic")
    def _gated_up_fp8_dynamic_fake(x, x_scale, w, w_scale, activation="silu"):
        torch._check(w.dim() == 2 and x.shape[-1] == w.shape[1],
                     lambda: "blockfuse.gated_up_fp8_dynamic: argument 'w' must be [2U, K] with K = x.size(-1)")
        return (x.new_empty(_with_last(x, w.shape[0] // 2), dtype=FP8_DTYPE),
                x.new_empty(x.shape[:-1], dtype=torch.float32))


# ---- the fused decode MLP (python/blockfuse/fused_mlp.py: fake impls and references) -------------
from .fused_mlp import (ROUTER_MODES, fused_mlp, fused_mlp_reference, fused_mlp_reserve,  # noqa: E402,F401
                        fused_mlp_sparse, neuron_block_router, router_reference)
