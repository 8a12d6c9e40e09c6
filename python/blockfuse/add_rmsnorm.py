"""blockfuse's residual add + RMSNorm for PyTorch (and RMSNorm alone), with FP8 e4m3 outputs.

    out, residual = blockfuse.ops.add_rmsnorm(x, residual, weight, eps, gemma=False)
    out = blockfuse.ops.rmsnorm(x, weight, eps)
    q, row_scales = blockfuse.ops.add_rmsnorm_fp8(x, residual, weight, None, eps)[::2]  # FP8 e4m3 out

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
leading dims) = amax_row / 448, written by the kernel. Inference only (no autograd formula).

This module holds the ops' wrappers, their references and their fake implementations.
"""
import torch

from ._common import FP8_DTYPE, LOADED, resolve, row_scales

_RMSNORM = resolve("rmsnorm")
_ADD_RMSNORM = resolve("add_rmsnorm")
_ADD_RMSNORM_ = resolve("add_rmsnorm_")
_RMSNORM_FP8 = resolve("rmsnorm_fp8")
_ADD_RMSNORM_FP8 = resolve("add_rmsnorm_fp8")


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


# ---- reference (plain torch) ---------------------------------------------------------------------

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


# ---- fake (meta) implementations: shapes and dtypes for torch.compile / FakeTensor -----------------

if LOADED:

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
        return x.new_empty(x.shape, dtype=FP8_DTYPE), row_scales(x, scale)

    @torch.library.register_fake("blockfuse::add_rmsnorm_fp8")
    def _add_rmsnorm_fp8_fake(x, residual, weight, scale=None, eps=1e-6, gemma=False):
        return (x.new_empty(x.shape, dtype=FP8_DTYPE), torch.empty_like(x, memory_format=torch.contiguous_format),
                row_scales(x, scale))
