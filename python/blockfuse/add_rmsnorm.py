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

Autograd: rmsnorm and add_rmsnorm have a backward (torch.library.register_autograd, below) through
the rmsnorm_backward / add_rmsnorm_backward ops (one kernel for dx / d_residual, a per-CTA fp32
partial dweight and a fixed-order reduction: bitwise reproducible). add_rmsnorm's backward saves
residual_out (the new residual stream, which the caller keeps anyway) and recomputes rstd from it;
x and residual get the same gradient dh. Only the gradients the inputs need are computed (a frozen
weight: no dweight; only the weight: no dx). add_rmsnorm_ (in place) and the FP8 forms have none.

This module holds the ops' wrappers, their references and their fake implementations.
"""
import torch

from ._common import FP8_DTYPE, LOADED, has_op, resolve, row_scales

_RMSNORM = resolve("rmsnorm")
_ADD_RMSNORM = resolve("add_rmsnorm")
_ADD_RMSNORM_ = resolve("add_rmsnorm_")
_RMSNORM_FP8 = resolve("rmsnorm_fp8")
_ADD_RMSNORM_FP8 = resolve("add_rmsnorm_fp8")
_RMSNORM_BACKWARD = resolve("rmsnorm_backward")
_ADD_RMSNORM_BACKWARD = resolve("add_rmsnorm_backward")


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


def rmsnorm_backward(dy, x, weight, eps=1e-6, gemma=False, need_dx=True, need_dweight=True):
    """(dx, dweight) of rmsnorm: dx = rstd·(g − x̃·mean(g·x̃)), g = dy·w_eff, x̃ = x·rstd; dweight [H] =
    Σ_rows dy·x̃. An output not needed is an empty [0] tensor."""
    return _RMSNORM_BACKWARD(dy, x, weight, eps, gemma, need_dx, need_dweight)


def add_rmsnorm_backward(dy, d_residual_out, h, weight, eps=1e-6, gemma=False, need_dh=True, need_dweight=True):
    """(dh, dweight) of add_rmsnorm from h = its residual_out: dh (the gradient of x and of residual) =
    rmsnorm's dx + d_residual_out (None: no gradient reached the residual stream)."""
    return _ADD_RMSNORM_BACKWARD(dy, d_residual_out, h, weight, eps, gemma, need_dh, need_dweight)


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


def rmsnorm_backward_reference(dy, h, weight, eps=1e-6, gemma=False, d_residual_out=None):
    """(dh, dweight) in fp32 torch (any device), the formula the backward kernel computes: rstd from h,
    g = dy·w_eff, dh = rstd·(g − h̃·mean(g·h̃)) (+ d_residual_out), dweight = Σ_rows dy·h̃ (fp32)."""
    hf, dyf = h.float(), dy.float()
    w = weight.float() + 1.0 if gemma else weight.float()
    rstd = torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
    hn = hf * rstd
    g = dyf * w
    dh = rstd * (g - hn * (g * hn).mean(-1, keepdim=True))
    if d_residual_out is not None:
        dh = dh + d_residual_out.float()
    return dh, (dyf * hn).reshape(-1, h.shape[-1]).sum(0)


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

    def _norm_backward_fake(dy, h, weight, need_dh, need_dweight):
        dh = torch.empty_like(dy, memory_format=torch.contiguous_format) if need_dh else dy.new_empty((0,))
        dw = weight.new_empty((h.shape[-1],)) if need_dweight else weight.new_empty((0,))
        return dh, dw

    if has_op("rmsnorm_backward"):

        @torch.library.register_fake("blockfuse::rmsnorm_backward")
        def _rmsnorm_backward_fake(dy, x, weight, eps=1e-6, gemma=False, need_dx=True, need_dweight=True):
            return _norm_backward_fake(dy, x, weight, need_dx, need_dweight)

        @torch.library.register_fake("blockfuse::add_rmsnorm_backward")
        def _add_rmsnorm_backward_fake(dy, d_residual_out, h, weight, eps=1e-6, gemma=False, need_dh=True,
                                       need_dweight=True):
            return _norm_backward_fake(dy, h, weight, need_dh, need_dweight)

        # ---- autograd --------------------------------------------------------------------------------
        # The incoming gradients may be any strided view (sum().backward() gives an expanded one): the
        # kernels take rows with one stride, so they are made contiguous first (a no-op when they are).

        def _rmsnorm_setup(ctx, inputs, output):
            x, weight, eps, gemma = inputs
            ctx.save_for_backward(x, weight)
            ctx.eps, ctx.gemma = eps, gemma

        def _rmsnorm_grad(ctx, grad):
            x, weight = ctx.saved_tensors
            need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
            if not (need_dx or need_dw):
                return None, None, None, None
            dx, dw = _RMSNORM_BACKWARD(grad.contiguous(), x, weight, ctx.eps, ctx.gemma, need_dx, need_dw)
            return dx if need_dx else None, dw if need_dw else None, None, None

        torch.library.register_autograd("blockfuse::rmsnorm", _rmsnorm_grad, setup_context=_rmsnorm_setup)

        def _add_rmsnorm_setup(ctx, inputs, output):
            _, _, weight, eps, gemma = inputs
            ctx.save_for_backward(output[1], weight)  # residual_out: the normed h
            ctx.eps, ctx.gemma = eps, gemma

        def _add_rmsnorm_grad(ctx, d_out, d_res):
            h, weight = ctx.saved_tensors
            need_x, need_r, need_w = ctx.needs_input_grad[:3]
            need_dh = need_x or need_r
            if d_out is None:  # only the residual stream reached the loss
                dh = d_res if need_dh else None
                dw = torch.zeros_like(weight) if need_w else None
            elif need_dh or need_w:
                dres = d_res.contiguous() if d_res is not None else None
                dh, dw = _ADD_RMSNORM_BACKWARD(d_out.contiguous(), dres, h, weight, ctx.eps, ctx.gemma, need_dh, need_w)
            else:
                dh = dw = None
            return (dh if need_x else None, dh if need_r else None, dw if need_w else None, None, None)

        torch.library.register_autograd("blockfuse::add_rmsnorm", _add_rmsnorm_grad, setup_context=_add_rmsnorm_setup)
