"""blockfuse's fused attention (forward) for PyTorch, and a Hugging Face attention backend.

    out = blockfuse.ops.attention(q, k, v, causal=True)              # q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D]
    out, lse = blockfuse.ops.attention(q, k, v, return_lse=True)     # lse [B, Hq, Sq], fp32, natural log
    out = blockfuse.ops.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k)   # packed [total, H, D]

    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="blockfuse")
    model.set_attn_implementation("blockfuse")                       # or switch an existing model

The ops are blockfuse::attention / blockfuse::attention_varlen (python/csrc/attention_op.cpp): the
C++ launcher validates every argument (errors are ValueErrors naming the argument) and runs, on the
current stream, the Hopper wgmma/TMA kernel (FlashAttention-3's design; compute capability 9.0,
builds with it) or else the FlashAttention-2 style mma.sync kernel; outputs come from the caching allocator, and
the fake implementations below let them trace under torch.compile(fullgraph=True) and be captured
in CUDA graphs. Semantics (include/blockfuse/attention.h): scale default 1/sqrt(D); causal aligned
bottom-right when Sq != Sk (FlashAttention's convention; the last query sees every key, which is
what decoding against a KV cache needs); window_left/right = -1 unbounded; softcap > 0 applies
cap·tanh(s/cap) (Gemma-2); GQA/MQA by Hq % Hkv == 0; D in {64, 128, 256}; bf16/fp16. Autograd: the backward kernels (D 64
and 128) through blockfuse::attention_backward / attention_varlen_backward. dQ's additions are by
default the faster mode of the GPU: unordered fp32 reductions on Hopper (the sm90a kernel; dq's low
bits vary between calls, as with SDPA's flash backward), a fixed order elsewhere (the sm80 kernels,
where the atomics are slower); torch.use_deterministic_algorithms(True) or
set_backward_deterministic(True) asks for the same bits on every call, (False) for the atomics.

The Hugging Face backend (`hf_attention_forward`, registered as "blockfuse" when this module is
imported and transformers is installed) runs blockfuse's kernels on bf16/fp16 CUDA tensors with a
supported head dim and no dropout; in training (a gradient needed) the prefill kernels with their
backward (D 64 and 128), SDPA for the rest. Up to 16 query tokens (a decode step against the
KV cache, speculative verification) it runs the decode kernel (blockfuse.decode_attention): with no
mask (a DynamicCache: every key valid) or a 2-D mask that is per-sequence lengths (a StaticCache's
filled prefix, right padding; one host read-back per forward, so not inside torch.compile or a
capture); any other mask (left padding) takes SDPA, never the prefill kernel, which at one query
token is slower than SDPA. Above 16 query tokens: the dense kernel when there is no padding, the
varlen kernel on the unpadded tokens when a 2-D padding mask keeps one contiguous run per row (left
or right padding, as generate() builds; not inside torch.compile or CUDA-graph capture, since the
lengths are read back to the host; padding query rows get 0). Everything else (other masks, fp32,
training) falls back to PyTorch's SDPA (or, with a soft-cap, the same formula in plain torch) with
an equivalent mask: the result is always correct, only the speed differs. With transformers >= 4.53 the backend also registers the
FlashAttention mask builder under "blockfuse", so the mask it receives is None unless there is
padding (or a StaticCache's unfilled slots); older versions build a 4-D mask for any custom backend,
so there every call takes the fallback.

This module holds the ops' wrappers, the fake implementations, the reference and the backend.
"""
import importlib.util
import sys
import weakref

import torch

from ._common import FUSED_DTYPES as _DTYPES, has_op, in_graph_or_compile as _in_graph_or_compile, require_op

SUPPORTED_HEAD_DIMS = (64, 128, 256)


# The loaded library has the attention ops (a _C.so built before they existed has not).
_HAS_OP = has_op("attention")


def _require():
    if not _HAS_OP:
        require_op("attention")


# ---- the ops -----------------------------------------------------------------------------------

def attention(q, k, v, softmax_scale=None, causal=False, window_left=-1, window_right=-1, softcap=0.0,
              return_lse=False):
    """softmax(q·kᵀ·scale [soft-cap, causal / window mask])·v for q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D].

    Returns out [B, Sq, Hq, D] (q's dtype), and with return_lse=True also lse [B, Hq, Sq] (fp32,
    natural log; -inf for a row that sees no key). Strided views are accepted (the head dim must be
    contiguous; other strides multiples of 8 elements), e.g. HF's [B, H, S, D] tensors .transpose(1, 2).

    Autograd: gradients of q, k and v flow through out (D 64 and 128); lse is returned as a
    non-differentiable tensor, so a loss that uses it (merging chunks by their LSEs, as ring attention
    does) gets no gradient through it."""
    _require()
    out, lse = torch.ops.blockfuse.attention(q, k, v, softmax_scale, causal, window_left, window_right,
                                             softcap, return_lse or _needs_grad(q, k, v))
    return (out, lse) if return_lse else out


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None,
                     causal=False, window_left=-1, window_right=-1, softcap=0.0, return_lse=False):
    """Packed variable-length attention: q [Tq, Hq, D], k/v [Tk, Hkv, D], int32 cu_seqlens_q/k
    [N + 1] (prefix sums on the device; sequence b owns rows cu[b]:cu[b+1], empty sequences allowed)
    and the maximum lengths. Returns out [Tq, Hq, D] (and lse [Hq, Tq] with return_lse=True). The
    device values of cu_seqlens are trusted (checking them would synchronise)."""
    _require()
    out, lse = torch.ops.blockfuse.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                                    max_seqlen_k, softmax_scale, causal, window_left,
                                                    window_right, softcap, return_lse or _needs_grad(q, k, v))
    return (out, lse) if return_lse else out


def _needs_grad(q, k, v):
    """Whether autograd will call the backward, which needs the forward's lse."""
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


_DETERMINISTIC_BACKWARD = [None]


def set_backward_deterministic(enabled=True):
    """How the attention backward adds dQ: True the same bits on every call (in a kernel of its own on
    sm80-class GPUs, in a fixed order on Hopper); False by fp32 atomics or reductions in any order
    (dq's low bits vary between calls, dk and dv do not); None (the default) the faster of the two on
    the device: False on compute capability 9.0 (the sm90a kernel: 1.1-1.7x faster unordered,
    docs/attention.md), True elsewhere (the sm80 kernels' atomics are 1-11 % slower). Under
    torch.use_deterministic_algorithms(True) the deterministic mode runs whatever this says."""
    _DETERMINISTIC_BACKWARD[0] = None if enabled is None else bool(enabled)


def _deterministic(device=None):
    if torch.are_deterministic_algorithms_enabled():
        return True
    if _DETERMINISTIC_BACKWARD[0] is not None:
        return _DETERMINISTIC_BACKWARD[0]
    return not (device is not None and device.type == "cuda" and torch.cuda.get_device_capability(device) == (9, 0))


_NO_LSE = ("the attention backward needs the forward's lse: call blockfuse.ops.attention / attention_varlen "
           "(which keep it when a gradient is needed), or the op with return_lse=True")


if _HAS_OP:

    @torch.library.register_fake("blockfuse::attention")
    def _attention_fake(q, k, v, softmax_scale=None, causal=False, window_left=-1, window_right=-1,
                        softcap=0.0, return_lse=False):
        torch._check(q.dim() == 4, lambda: "blockfuse::attention: argument 'q' must be [B, Sq, Hq, D]")
        torch._check(k.dim() == 4 and v.dim() == 4, lambda: "blockfuse::attention: arguments 'k', 'v' must be [B, Sk, Hkv, D]")
        torch._check(k.dtype == q.dtype and v.dtype == q.dtype,
                     lambda: f"blockfuse::attention: argument 'k'/'v' dtype {k.dtype}/{v.dtype}; required: {q.dtype}")
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        lse_shape = (q.shape[0], q.shape[2], q.shape[1]) if return_lse else (0,)
        return out, torch.empty(lse_shape, dtype=torch.float32, device=q.device)

    @torch.library.register_fake("blockfuse::attention_varlen")
    def _attention_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               softmax_scale=None, causal=False, window_left=-1, window_right=-1,
                               softcap=0.0, return_lse=False):
        torch._check(q.dim() == 3, lambda: "blockfuse::attention_varlen: argument 'q' must be [total, Hq, D]")
        torch._check(k.dim() == 3 and v.dim() == 3, lambda: "blockfuse::attention_varlen: 'k', 'v' must be [total, Hkv, D]")
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        lse_shape = (q.shape[1], q.shape[0]) if return_lse else (0,)
        return out, torch.empty(lse_shape, dtype=torch.float32, device=q.device)


    @torch.library.register_fake("blockfuse::attention_backward")
    def _attention_backward_fake(dout, q, k, v, out, lse, softmax_scale=None, causal=False, window_left=-1,
                                 window_right=-1, softcap=0.0, deterministic=True):
        return torch.empty_like(q, memory_format=torch.contiguous_format), \
            torch.empty_like(k, memory_format=torch.contiguous_format), \
            torch.empty_like(v, memory_format=torch.contiguous_format)

    @torch.library.register_fake("blockfuse::attention_varlen_backward")
    def _attention_varlen_backward_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                        max_seqlen_k, softmax_scale=None, causal=False, window_left=-1,
                                        window_right=-1, softcap=0.0, deterministic=True):
        return torch.empty_like(q, memory_format=torch.contiguous_format), \
            torch.empty_like(k, memory_format=torch.contiguous_format), \
            torch.empty_like(v, memory_format=torch.contiguous_format)

    # Autograd: the gradients of q, k, v from the backward kernels; lse is not differentiable.
    def _attention_setup(ctx, inputs, output):
        q, k, v, softmax_scale, causal, window_left, window_right, softcap, return_lse = inputs
        out, lse = output
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (softmax_scale, causal, window_left, window_right, softcap)
        ctx.has_lse = bool(return_lse)  # (an empty batch has an empty lse too: the flag, not numel)

    def _attention_backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        if not ctx.has_lse:
            raise RuntimeError(f"blockfuse::attention: {_NO_LSE}")
        dq, dk, dv = torch.ops.blockfuse.attention_backward(dout, q, k, v, out, lse, *ctx.args,
                                                            _deterministic(q.device))
        return dq, dk, dv, None, None, None, None, None, None

    def _attention_varlen_setup(ctx, inputs, output):
        q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale, causal, window_left, window_right, softcap, return_lse = inputs
        out, lse = output
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k)
        ctx.args = (max_q, max_k, softmax_scale, causal, window_left, window_right, softcap)
        ctx.has_lse = bool(return_lse)

    def _attention_varlen_backward(ctx, dout, _dlse):
        q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
        if not ctx.has_lse:
            raise RuntimeError(f"blockfuse::attention_varlen: {_NO_LSE}")
        dq, dk, dv = torch.ops.blockfuse.attention_varlen_backward(dout, q, k, v, out, lse, cu_q, cu_k, *ctx.args,
                                                                   _deterministic(q.device))
        return (dq, dk, dv) + (None,) * 10

    torch.library.register_autograd("blockfuse::attention", _attention_backward, setup_context=_attention_setup)
    torch.library.register_autograd("blockfuse::attention_varlen", _attention_varlen_backward,
                                    setup_context=_attention_varlen_setup)


# ---- reference (plain torch) ---------------------------------------------------------------------

def visibility_mask(sq, sk, causal=False, window_left=-1, window_right=-1, device=None, key_offset=None):
    """[Sq, Sk] bool: key j visible to query i under blockfuse's rules (bottom-right aligned:
    shift = Sk - Sq, or `key_offset` when given). A window of -1 is unbounded; causal sets right = 0."""
    shift = sk - sq if key_offset is None else key_offset
    i = torch.arange(sq, device=device)[:, None] + shift
    j = torch.arange(sk, device=device)[None, :]
    right = 0 if causal else window_right
    vis = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if right >= 0:
        vis &= j <= i + right
    if window_left >= 0:
        vis &= j >= i - window_left
    return vis


def attention_reference(q, k, v, softmax_scale=None, causal=False, window_left=-1, window_right=-1,
                        softcap=0.0, mask=None, dtype=torch.float32):
    """The formula the op computes, in `dtype` (fp32, or fp64) plain torch (any device), for the tests
    and the HF fallback with a soft-cap. q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D]; `mask` (optional, bool,
    broadcastable to [B, Hq, Sq, Sk]) further restricts the visible keys. Returns (out [B, Sq, Hq, D],
    lse [B, Hq, Sq]) in `dtype`; a row that sees no key gets out = 0, lse = -inf."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    qf = q.to(dtype).transpose(1, 2)
    kf = k.to(dtype).transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
    vf = v.to(dtype).transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
    s = torch.matmul(qf, kf.transpose(-1, -2)) * scale
    if softcap and softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    vis = visibility_mask(sq, sk, causal, window_left, window_right, device=q.device)
    if mask is not None:
        vis = vis & mask
    s = s.masked_fill(~vis, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))[..., None])
    p = torch.where(vis, p, torch.zeros_like(p))
    return torch.matmul(p, vf).transpose(1, 2), lse


# ---- Hugging Face backend ------------------------------------------------------------------------

# Imported here, not at the top: blockfuse.decode_attention imports attention_reference from this module.
from . import decode_attention as _decode_mod  # noqa: E402

HF_NAME = "blockfuse"
# Up to this many query tokens (a decode step, speculative verification) the backend runs the decode
# kernel, or SDPA when the decode kernel cannot express the mask; never the prefill kernel, which at
# one query token is slower than SDPA's flash backend.
DECODE_MAX_Q = _decode_mod.MAX_SEQLEN_Q


# Head dims the attention backward takes (attention_backward: 64 and 128).
BACKWARD_HEAD_DIMS = (64, 128)


def _fused_ok(query, key, value, dropout, has_backward=True):
    """Whether the blockfuse kernel can run this call (else the SDPA fallback does). A call that
    needs gradients runs it only where the path has a backward (the prefill kernels, through
    attention / attention_varlen's autograd, at head dims BACKWARD_HEAD_DIMS; not the decode kernel)."""
    needs_grad = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad)
    return (_HAS_OP and query.is_cuda and query.dtype in _DTYPES
            and key.dtype == query.dtype and value.dtype == query.dtype
            and query.shape[-1] in SUPPORTED_HEAD_DIMS and key.shape[-1] == query.shape[-1]
            and value.shape[-1] == query.shape[-1] and query.shape[1] % key.shape[1] == 0
            and not dropout
            and not (needs_grad and (not has_backward or query.shape[-1] not in BACKWARD_HEAD_DIMS)))


def _fallback_mask(attention_mask, sq, sk, causal, window_left, device):
    """A bool mask [B or 1, 1, Sq, Sk] (True = visible) equivalent to what the HF call asks for.

    2-D masks (the FlashAttention-style padding mask [B, L] that transformers >= 4.53 builds for this
    backend, L <= Sk; L < Sk only for a StaticCache, whose slots >= L are unfilled): key j is visible
    iff j < L, it is not padding, and the causal / window rule holds with query i at position
    L - Sq + i. 4-D masks (built by transformers for any other backend) already hold every rule: bool
    masks are used as is, additive float masks are turned into bool (-inf / finfo.min = hidden).
    A query row that would see no key (a left-padding row) is let see everything instead, so its
    output stays finite (it is padding; nothing reads it) and cannot spread NaN through later layers."""
    if attention_mask.dim() == 4:
        m = attention_mask if attention_mask.dtype == torch.bool else attention_mask > torch.finfo(attention_mask.dtype).min / 2
    else:
        pad = attention_mask.to(device=device, dtype=torch.bool)
        length = pad.shape[-1]
        if length < sk:
            pad = torch.cat([pad, pad.new_zeros(pad.shape[0], sk - length)], dim=-1)
        elif length > sk:
            pad = pad[:, -sk:]
            length = sk
        vis = visibility_mask(sq, sk, causal, window_left, window_left if not causal else -1, device=device,
                              key_offset=length - sq)
        m = vis[None, None] & pad[:, None, None, :]
    return m | ~m.any(dim=-1, keepdim=True)


def _fallback(query, key, value, attention_mask, scaling, dropout, causal, window_left, softcap):
    """PyTorch SDPA (or fp32 plain torch with a soft-cap) on HF's [B, H, S, D] tensors; -> [B, S, H, D]."""
    sq, sk = query.shape[2], key.shape[2]
    rep = query.shape[1] // key.shape[1]
    # Bottom-right causal at one query token hides nothing, so no mask: SDPA then picks its flash
    # backend (with a mask it cannot), as transformers' own SDPA path does for a decode step.
    if attention_mask is None and ((causal and sq > 1) or window_left >= 0):
        attention_mask = torch.ones(1, sk, dtype=torch.bool, device=query.device)
    mask = None if attention_mask is None else _fallback_mask(attention_mask, sq, sk, causal, window_left, query.device)
    if softcap:
        out, _ = attention_reference(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), scaling,
                                     softcap=softcap, mask=mask)
        return out.to(query.dtype).contiguous()
    if mask is None and rep > 1:  # SDPA's flash backend reads the shared KV heads in place
        out = torch.nn.functional.scaled_dot_product_attention(query, key, value, dropout_p=dropout, scale=scaling,
                                                               enable_gqa=True)
        return out.transpose(1, 2).contiguous()
    k = key.repeat_interleave(rep, dim=1) if rep > 1 else key
    v = value.repeat_interleave(rep, dim=1) if rep > 1 else value
    out = torch.nn.functional.scaled_dot_product_attention(query, k, v, attn_mask=mask, dropout_p=dropout,
                                                           scale=scaling)
    return out.transpose(1, 2).contiguous()


def _fused(q, k, v, scale, causal, window_left, window_right, softcap):
    """The kernel on [B, S, H, D] views -> out [B, Sq, Hq, D] (one seam, so the tests can check the
    backend's argument mapping on the CPU with the reference in its place)."""
    out, _ = torch.ops.blockfuse.attention(q, k, v, scale, causal, window_left, window_right, softcap,
                                           _needs_grad(q, k, v))
    return out


def _fused_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, window_left, window_right, softcap):
    """The varlen kernel on packed [T, H, D] tensors -> out [Tq, Hq, D] (a seam, as _fused)."""
    out, _ = torch.ops.blockfuse.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, window_left,
                                                  window_right, softcap, _needs_grad(q, k, v))
    return out


def _decode(q, k, v, cache_seqlens, max_seqlen_k, scale, causal, window_left, window_right, softcap,
            cache_leftpad=None):
    """The decode kernel on [B, S, H, D] views, int32 lengths [B] and left padding [B] (or None) ->
    out [B, Sq, Hq, D] (a seam, as _fused)."""
    out, _ = torch.ops.blockfuse.decode_attention(q, k, v, cache_seqlens, None, scale, causal, window_left,
                                                  window_right, softcap, 0, max_seqlen_k, False, cache_leftpad)
    return out


def _once_per_forward(slot, t, extra, compute):
    """compute(), once for the tensor t: every layer of a forward receives the same mask or position
    tensor, so what is derived from it (a host read-back, the lengths tensor) is made once per forward,
    not once per layer. `slot` is a one-entry cache keyed by t's identity, data pointer, version and
    shape and by `extra` (t may be None: then `extra` alone)."""
    key = (extra,) if t is None else (t.data_ptr(), t._version, tuple(t.shape), extra)
    hit = slot[0]
    if hit is not None and hit[0] == key and (t is None or hit[1]() is t):
        return hit[2]
    value = compute()
    slot[0] = (key, None if t is None else weakref.ref(t), value)
    return value


# The analysis of the last 2-D mask seen (_mask_lengths).
_MASK_LENGTHS = [None]


def _mask_lengths(attention_mask, sq, sk):
    """(lengths int32 [B], left padding int32 [B] or None, max_k) on the device when a 2-D mask [B, L]
    keeps one contiguous run [P_b, L_b) of key slots per row, for the decode kernel (cache_seqlens =
    L_b, cache_leftpad = P_b): left padding, right padding and a StaticCache's unfilled slots all are.
    The kernel puts the queries at L_b - Sq + t, the last kept slots: right for a row that keeps all
    its query positions L - Sq .. L - 1 (L_b = L) and for a StaticCache's filled prefix; a row that
    keeps none of them holds padding queries, whose output is never read; a row keeping some is not
    expressible (_mask_runs). None when the mask is shorter than Sq (then SDPA).

    Outside torch.compile and CUDA-graph capture: one host read-back, cached for the mask tensor, and
    a mask with a hole in a row gives None (SDPA). Inside (no read-back allowed) the runs are found on
    the device and a row with a hole gets length -1, which the kernel turns into NaN rows: loud, never
    silently wrong. transformers' padding masks have no holes, except right padding followed by
    generated tokens, which it warns about for decoder-only models, and a right-padded chunk of
    several queries that keeps only some of them."""
    length = min(attention_mask.shape[-1], sk)
    if length < sq:
        return None
    if _in_graph_or_compile():
        lengths, first = _mask_runs(_kept(attention_mask, sk), sq)
        return lengths, first, length
    # The cache is looked up before any device work: every layer of a forward passes the same mask.
    return _once_per_forward(_MASK_LENGTHS, attention_mask, (sq, sk),
                             lambda: _analyse_mask(_kept(attention_mask, sk), sq))


def _kept(attention_mask, sk):
    """The mask's last sk slots as bool (a sliding-window cache holds the last keys)."""
    return attention_mask[:, -sk:].to(dtype=torch.bool)


def _mask_runs(pad, sq):
    """(end int32 [B], first int32 [B]) of each row's kept run [first, end) in a bool mask [B, L], on
    the device; end = -1 for a row the decode kernel cannot express: kept slots that are not one run,
    or a run that keeps some but not all of the row's query positions L - Sq .. L - 1 (the kernel
    would put those queries at other positions)."""
    length = pad.shape[-1]
    n = pad.sum(-1, dtype=torch.int32)
    first = pad.to(torch.int32).argmax(-1).to(torch.int32)  # 0 for a row with nothing kept
    end = first + n
    j = torch.arange(length, device=pad.device)[None, :]
    run = (j >= first[:, None]) & (j < end[:, None])
    ok = (pad == run).all(-1) & ((end == length) | (end <= length - sq))
    return torch.where(ok, end, torch.full_like(end, -1)), first


def _analyse_mask(pad, sq):
    """_mask_lengths' analysis of one mask outside compile and capture (one host read-back)."""
    lengths, first = _mask_runs(pad, sq)
    runs, padded = torch.stack([(lengths >= 0).all(), (first > 0).any()]).tolist()
    if not runs:
        return None
    return lengths, (first if padded else None), pad.shape[-1]


def _position_source(kwargs, sq):
    """The tensor whose last entry is the last query's position: cache_position [Sq] (transformers < 5)
    or position_ids [B or 1, Sq]; None when neither is there (or 3-D multimodal position ids)."""
    src = kwargs.get("cache_position")
    if isinstance(src, torch.Tensor) and src.dim() == 1 and src.shape[0] == sq:
        return src
    src = kwargs.get("position_ids")
    if isinstance(src, torch.Tensor) and src.dim() == 2 and src.shape[-1] == sq:
        return src
    return None


# The lengths tensor of the last forward (_unmasked_lengths) and the read-back key length
# (_unmasked_key_length).
_LENGTHS = [None]
_KEY_LENGTH = [None]


def _unmasked_lengths(kwargs, b, sq, sk, device):
    """Valid keys per sequence of an unmasked call, on the device (no read-back): a DynamicCache holds
    exactly Sk, but a StaticCache hands over all its slots and, without padding, transformers (>= 5)
    passes no mask at all; the filled prefix ends after the last query's position (_position_source;
    position ids equal the slot indices when there is no padding); clamped to Sk, so a sliding-window
    cache holding the last keys stays whole. Anything else (no positions, 3-D multimodal position ids,
    position ids of another batch): all Sk keys. Made once per forward outside torch.compile and
    CUDA-graph capture (where every layer computes it: a capture must record the computation)."""
    src = _position_source(kwargs, sq)
    if src is not None and src.dim() == 2 and src.shape[0] not in (1, b):
        src = None

    def compute():
        if src is None:
            return torch.full((b,), sk, dtype=torch.int32, device=device)
        last = src[-1:] if src.dim() == 1 else src[:, -1]
        return (last.to(device) + 1).clamp(max=sk).to(torch.int32).expand(b).contiguous()

    if _in_graph_or_compile():
        return compute()
    return _once_per_forward(_LENGTHS, src, (b, sq, sk, str(device)), compute)


def _unmasked_key_length(kwargs, sq, sk):
    """The valid keys of an unmasked call with more than DECODE_MAX_Q queries, on the host: Sk for a
    DynamicCache or no cache, the filled prefix (last query position + 1, clamped to [Sq, Sk]) for a
    StaticCache, whose unfilled slots transformers (>= 5) hands over without a mask. One read-back per
    position tensor, cached across the layers of a forward; None inside torch.compile or a CUDA-graph
    capture (the caller then masks on the device: _unmasked_mask)."""
    if sk <= sq:
        return sk
    src = _position_source(kwargs, sq)
    if src is None:
        return sk
    if _in_graph_or_compile():
        return None
    return _once_per_forward(_KEY_LENGTH, src, (sq, sk),
                             lambda: min(max(int(src.reshape(-1, sq)[:, -1].max()) + 1, sq), sk))


def _unmasked_mask(query, key, kwargs, causal, window_left):
    """A 4-D bool mask [B, 1, Sq, Sk] for an unmasked call, built on the device from the positions
    (_unmasked_lengths): the keys past each sequence's filled prefix hidden, the queries at the last Sq
    positions of the prefix, causal and window as asked. For the SDPA fallback, which would otherwise
    see every slot of a StaticCache."""
    b, sq, sk = query.shape[0], query.shape[2], key.shape[2]
    lengths = _unmasked_lengths(kwargs, b, sq, sk, query.device).long()
    j = torch.arange(sk, device=query.device)[None, None, :]
    pos = (lengths[:, None] - sq + torch.arange(sq, device=query.device)[None, :])[:, :, None]
    vis = j < lengths[:, None, None]
    if causal:
        vis = vis & (j <= pos)
    if window_left >= 0:
        vis = vis & (j >= pos - window_left)
    return vis[:, None]


# Where SDPA measured as fast as or faster than the decode kernel, so that the backend never sends a
# decode step through a slower kernel than transformers' SDPA path would use (its flash backend:
# first in torch's default priority, cuDNN last): query groups of 16 or more per KV head (MQA-like)
# over caches of at most 2048 slots at batch <= 32. Measured on the H100, GB/s of the decode kernel
# over SDPA flash's at Hq 32, Hkv 1, S 1024: 1.02 (B 1), 1.03 (B 8), 0.97 (B 32), 1.08 (B 128) with
# MQA's 16-row CTAs (0.75 / 0.78 / 0.86 / 1.09 before them); from S 8192 the decode kernel is as fast
# or faster (results/decode_attention.json, docs/attention.md#decode). Pure:
# tests/test_decode_attention_cpu.py.
SDPA_DECODE_MIN_GROUP, SDPA_DECODE_MAX_KEYS, SDPA_DECODE_MAX_BATCH = 16, 2048, 32


def decode_prefers_sdpa(batch, heads_q, heads_kv, max_k):
    """Whether an unmasked or padded decode call of this shape runs faster through SDPA than through
    the decode kernel (see SDPA_DECODE_*)."""
    return (heads_q // max(heads_kv, 1) >= SDPA_DECODE_MIN_GROUP and max_k <= SDPA_DECODE_MAX_KEYS
            and batch <= SDPA_DECODE_MAX_BATCH)


def _decode_step(query, key, value, attention_mask, scaling, causal, window_left, window_right, softcap, kwargs):
    """A call with <= DECODE_MAX_Q queries through the decode kernel: no mask (every key valid up to the
    positions, _unmasked_lengths) or a 2-D mask of one kept run per row (_mask_lengths: lengths and
    left padding). None when it cannot (the caller takes the SDPA fallback)."""
    if not _decode_mod._HAS_OP:
        return None
    b, sk = query.shape[0], key.shape[2]
    if decode_prefers_sdpa(b, query.shape[1], key.shape[1], sk):
        return None
    if attention_mask is None:
        lengths, max_k = _unmasked_lengths(kwargs, b, query.shape[2], sk, query.device), sk
    elif attention_mask.dim() == 2:
        found = _mask_lengths(attention_mask, query.shape[2], sk)
        if found is None:
            return None
        lengths, leftpad, max_k = found
        lengths = lengths.to(query.device)
        leftpad = None if leftpad is None else leftpad.to(query.device)
        return _decode(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), lengths, max_k, scaling,
                       causal, window_left, window_right, softcap, leftpad)
    else:
        return None
    return _decode(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), lengths, max_k, scaling,
                   causal, window_left, window_right, softcap)


def _fused_padded(query, key, value, attention_mask, scaling, causal, window_left, window_right, softcap):
    """A batch with a 2-D padding mask [B, L] through the varlen kernel, or None when the mask is not
    one contiguous run of kept tokens per row (then the caller falls back).

    Keys: key position j of row b is kept iff mask[b, j] (positions >= L are unfilled StaticCache
    slots, not kept). Queries sit at positions L - Sq + i (bottom-right, as in _fallback_mask); a
    query at a padding position is dropped and its output row is 0. Why this is exact: with the kept
    keys of a row one run [a, a + n), the kept queries are a suffix of that run, so the kernel's
    per-sequence bottom-right alignment (query i of n_q sees keys <= n - n_q + i, windows by index
    difference) is the same rule as on the padded positions. One host read-back (the lengths, the
    contiguity flag and the kept indices), as transformers' FlashAttention path does."""
    b, sq, sk = query.shape[0], query.shape[2], key.shape[2]
    pad = attention_mask.to(device=query.device, dtype=torch.bool)
    length = pad.shape[-1]
    if length < sk:
        pad = torch.cat([pad, pad.new_zeros(b, sk - length)], dim=-1)
    elif length > sk:
        pad, length = pad[:, -sk:], sk
    if length < sq:
        return None
    pos = torch.arange(sk, device=pad.device)
    n_k = pad.sum(-1)
    first = pad.to(torch.int32).argmax(-1)
    run = (pos >= first[:, None]) & (pos < (first + n_k)[:, None])
    keep_q = pad[:, length - sq:length]
    n_q = keep_q.sum(-1)
    contiguous, max_k, max_q = torch.stack([(run == pad).all().long(), n_k.max(), n_q.max()]).tolist()
    if not contiguous:
        return None
    out = torch.zeros(b, sq, query.shape[1], query.shape[3], dtype=query.dtype, device=query.device)
    if max_q == 0:
        return out
    kb, ks = pad.nonzero(as_tuple=True)
    qb, qs = keep_q.nonzero(as_tuple=True)
    k = key.transpose(1, 2)[kb, ks]  # [Tk, Hkv, D]
    v = value.transpose(1, 2)[kb, ks]
    q = query.transpose(1, 2)[qb, qs]  # [Tq, Hq, D]
    zero = torch.zeros(1, dtype=torch.int32, device=query.device)
    cu_k = torch.cat([zero, n_k.cumsum(0, dtype=torch.int32)])
    cu_q = torch.cat([zero, n_q.cumsum(0, dtype=torch.int32)])
    out[qb, qs] = _fused_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scaling, causal, window_left, window_right,
                                softcap)
    return out


def hf_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                         sliding_window=None, softcap=None, **kwargs):
    """A transformers attention function (AttentionInterface): query [B, Hq, Sq, D], key/value
    [B, Hkv, Sk, D] (after the KV-cache update) -> (attn_output [B, Sq, Hq, D], None).

    Causal comes from kwargs["is_causal"] or module.is_causal (default True) and is aligned
    bottom-right, so a decode step or a chunked prefill against a DynamicCache is exact; against a
    StaticCache without a mask the keys past the filled prefix (from the positions) are never seen.
    Up to DECODE_MAX_Q query tokens the decode kernel runs (or SDPA where it cannot express the mask).
    sliding_window = W means a query sees itself and the W - 1 keys before it (transformers'
    convention, the same as its FlashAttention path). attention_weights are never returned."""
    if kwargs.get("cu_seq_lens_q") is not None or kwargs.get("cu_seq_lens_k") is not None:
        # Packed sequences (FlashAttention kwargs): the boundaries are in cu_seq_lens, not in a mask;
        # treating the row as one sequence would attend across them.
        raise NotImplementedError("blockfuse HF attention: packed sequences (cu_seq_lens_q/k) are not "
                                  "supported; use attn_implementation='flash_attention_2' or unpacked batches")
    is_causal = kwargs.get("is_causal")
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    is_causal = bool(is_causal)
    window_left = int(sliding_window) - 1 if sliding_window else -1
    softcap = float(softcap) if softcap else 0.0
    window_right = 0 if is_causal else window_left
    sq, sk = query.shape[2], key.shape[2]
    if sq <= DECODE_MAX_Q:
        # A decode step: the decode kernel, else SDPA (never the prefill kernel at a few query rows).
        if _fused_ok(query, key, value, dropout, False):  # the decode kernel has no backward
            out = _decode_step(query, key, value, attention_mask, scaling, is_causal, window_left, window_right,
                               softcap, kwargs)
            if out is not None:
                return out, None
        if attention_mask is None and sk > sq:
            attention_mask = _unmasked_mask(query, key, kwargs, is_causal, window_left)
        return _fallback(query, key, value, attention_mask, scaling, dropout, is_causal, window_left, softcap), None
    if attention_mask is None and sk > sq:
        # A cache without a mask: a StaticCache's unfilled slots must not be seen.
        n = _unmasked_key_length(kwargs, sq, sk)
        if n is None:
            attention_mask = _unmasked_mask(query, key, kwargs, is_causal, window_left)
        elif n < sk:
            key, value = key[:, :, :n], value[:, :, :n]
    if attention_mask is None and _fused_ok(query, key, value, dropout):
        out = _fused(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), scaling, is_causal,
                     window_left, window_right, softcap)
        return out, None
    if (attention_mask is not None and attention_mask.dim() == 2 and _fused_ok(query, key, value, dropout)
            and not _in_graph_or_compile()):
        out = _fused_padded(query, key, value, attention_mask, scaling, is_causal, window_left, window_right,
                            softcap)
        if out is not None:
            return out, None
    return _fallback(query, key, value, attention_mask, scaling, dropout, is_causal, window_left, softcap), None


def register_hf_backend(name=HF_NAME):
    """Registers hf_attention_forward with transformers' AttentionInterface under `name` (and, on
    transformers >= 4.53, the FlashAttention mask builder: None unless there is padding). Returns True
    when registered, False when transformers (>= 4.48) is not available."""
    try:
        from transformers import AttentionInterface
    except ImportError:
        return False
    AttentionInterface.register(name, hf_attention_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask
    except ImportError:  # transformers < 4.53: models build a 4-D mask; every call takes the fallback
        return True
    AttentionMaskInterface.register(name, flash_attention_mask)
    return True


def _register_on_import():
    if "transformers" not in sys.modules and importlib.util.find_spec("transformers") is None:
        return
    try:
        register_hf_backend()
    except Exception:  # never let an incompatible transformers break `import blockfuse.ops`
        pass


_register_on_import()
