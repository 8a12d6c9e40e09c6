"""blockfuse's decode attention for PyTorch: 1..16 query tokens per sequence against a KV cache.

    out = blockfuse.ops.decode_attention(q, k_cache, v_cache, cache_seqlens, causal=True)
    out = blockfuse.ops.decode_attention(q, k_pages, v_pages, cache_seqlens, block_table=bt)   # paged
    out = blockfuse.ops.decode_attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens,
                                                      rotary_cos=cos, rotary_sin=sin, causal=True)
    cache_seqlens += q.shape[1]                                      # the caller advances the lengths

q and out are [B, Sq, Hq, D] (1 <= Sq <= 16). The cache is contiguous [B, S_max, Hkv, D] (a
StaticCache; a DynamicCache's [B, Hkv, S, D] tensors .transpose(1, 2) work without a copy: any
strides with a contiguous head dim) or paged [num_blocks, page_size, Hkv, D] with an int32
block_table [B, max_blocks] (key j of sequence b in page block_table[b, j // page_size]).
cache_seqlens is an int32 CUDA tensor [B]: L_b valid keys per sequence (0 allowed). The queries of
sequence b are its last Sq positions (query t at position L_b − Sq + t), causal / windows aligned
bottom-right as in blockfuse.ops.attention; a row that sees no key gets out = 0, lse = −inf; slots at
or past L_b are never read. decode_attention's cache_leftpad (int32 CUDA [B], FlashAttention's name)
starts sequence b's keys at slot P_b: a left-padded batch attends to slots [P_b, L_b) without a copy. decode_attention_with_kvcache first applies the rotary embedding to q
and k_new at positions L_b + t (GPT-NeoX rotate-half, or GPT-J interleaved pairs; cos/sin tables
[max_positions, R/2], R <= D), writes k_new / v_new into the cache at L_b .. L_b + Sq − 1, then
attends over the L_b + Sq keys; q itself is not modified.

The ops are blockfuse::decode_attention / blockfuse::decode_attention_with_kvcache
(python/csrc/decode_attention_op.cpp; the kernels are FlashDecoding-style: the query heads of one
KV head packed into one tile, the key range split across CTAs, a small merge kernel). cache_seqlens
and block_table are only read on the device: the ops never synchronise with the host, so they trace
under torch.compile(fullgraph=True) and capture into CUDA graphs, and a captured graph replays with
whatever lengths are in cache_seqlens at replay time. Their workspace comes from the caching
allocator per call. Inference only (no autograd formula).

This module holds the wrappers, the fake implementations and the reference (fp32 or fp64 plain
torch, any device); blockfuse.ops re-exports the public names.
"""
import torch

from ._common import has_op, require_op
from .attention import attention_reference

MAX_SEQLEN_Q = 16  # kDecodeAttentionMaxSeqlenQ: more query tokens go to blockfuse.ops.attention
MAX_SPLITS = 128

_HAS_OP = has_op("decode_attention")


def _require():
    if not _HAS_OP:
        require_op("decode_attention")


# ---- the ops -----------------------------------------------------------------------------------

def decode_attention(q, k_cache, v_cache, cache_seqlens, block_table=None, softmax_scale=None, causal=False,
                     window_left=-1, window_right=-1, softcap=0.0, num_splits=0, max_seqlen_k=0, return_lse=False,
                     cache_leftpad=None):
    """Attention of q [B, Sq, Hq, D] (1 <= Sq <= 16) against a KV cache of cache_seqlens[b] keys.

    k_cache / v_cache: [B, S_max, Hkv, D] (any strides, head dim contiguous), or with block_table
    (int32 [B, max_blocks]) pages [num_blocks, page_size, Hkv, D]. cache_seqlens: int32 CUDA [B].
    cache_leftpad: None, or int32 CUDA [B]: sequence b's keys are slots [cache_leftpad[b],
    cache_seqlens[b]) (a left-padded batch; out of [0, L_b] on the device: NaN rows).
    num_splits: 0 for the heuristic's choice, else 1..128 splits of the key range. max_seqlen_k: an
    upper bound of any L_b for the heuristic (0: the cache's capacity; a smaller one is never wrong,
    only slower for longer sequences). Returns out [B, Sq, Hq, D] (q's dtype), and with
    return_lse=True also lse [B, Hq, Sq] (fp32, natural log)."""
    _require()
    out, lse = torch.ops.blockfuse.decode_attention(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale,
                                                    causal, window_left, window_right, softcap, num_splits,
                                                    max_seqlen_k, return_lse, cache_leftpad)
    return (out, lse) if return_lse else out


def decode_attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens, block_table=None,
                                  rotary_cos=None, rotary_sin=None, rotary_interleaved=False, softmax_scale=None,
                                  causal=False, window_left=-1, window_right=-1, softcap=0.0, num_splits=0,
                                  max_seqlen_k=0, return_lse=False):
    """One decode step: rotary embedding of q and k_new [B, Sq, Hkv, D] at positions cache_seqlens[b] + t
    (when rotary_cos / rotary_sin [max_positions, R/2], fp32 or q's dtype, are given; GPT-NeoX
    rotate-half unless rotary_interleaved), k_new / v_new written into k_cache / v_cache (in place)
    at those positions, then decode_attention over the cache_seqlens[b] + Sq keys. cache_seqlens is
    not advanced (the caller adds Sq). Same layouts and returns as decode_attention."""
    _require()
    out, lse = torch.ops.blockfuse.decode_attention_with_kvcache(
        q, k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, rotary_cos, rotary_sin, rotary_interleaved,
        softmax_scale, causal, window_left, window_right, softcap, num_splits, max_seqlen_k, return_lse)
    return (out, lse) if return_lse else out


# ---- fake (meta) implementations: shapes and dtypes for torch.compile / FakeTensor -----------------
# They check what the output shapes rest on (ranks, Sq range, the batch of cache_seqlens / block_table,
# Hq % Hkv, matching head dims and dtypes); the C++ launcher validates every argument when it runs.

def decode_output_shapes(fn, q, k_cache, v_cache, cache_seqlens, block_table=None, return_lse=False):
    """(out shape, lse shape) of a decode op, after the checks the shapes rest on (torch._check, so
    the same code runs on real, meta and fake tensors). `fn` names the op in the messages."""
    def check(cond, msg):
        torch._check(cond, lambda: f"blockfuse::{fn}: {msg}")

    check(q.dim() == 4, f"argument 'q' has sizes {list(q.shape)}; required: [B, Sq, Hq, D]")
    check(k_cache.dim() == 4 and v_cache.dim() == 4,
          f"arguments 'k_cache', 'v_cache' have sizes {list(k_cache.shape)}, {list(v_cache.shape)}; required: "
          "[B, S_max, Hkv, D] or pages [num_blocks, page_size, Hkv, D]")
    b, sq, hq, d = q.shape
    check(1 <= sq <= MAX_SEQLEN_Q, f"argument 'q' has Sq = {sq} query tokens; required: 1..{MAX_SEQLEN_Q}")
    check(k_cache.shape == v_cache.shape,
          f"argument 'v_cache' has sizes {list(v_cache.shape)}; required: those of 'k_cache' {list(k_cache.shape)}")
    check(k_cache.shape[3] == d, f"argument 'k_cache' has head dim {k_cache.shape[3]}; required: q's ({d})")
    check(hq % k_cache.shape[2] == 0,
          f"argument 'k_cache' has {k_cache.shape[2]} heads; required: a divisor of q's {hq} heads")
    check(k_cache.dtype == q.dtype and v_cache.dtype == q.dtype,
          f"arguments 'k_cache'/'v_cache' have dtype {k_cache.dtype}/{v_cache.dtype}; required: q's ({q.dtype})")
    check(cache_seqlens.dim() == 1 and cache_seqlens.shape[0] == b and cache_seqlens.dtype == torch.int32,
          f"argument 'cache_seqlens' has sizes {list(cache_seqlens.shape)}, dtype {cache_seqlens.dtype}; "
          f"required: int32 [B], B = {b}")
    if block_table is not None:
        check(block_table.dim() == 2 and block_table.shape[0] == b and block_table.dtype == torch.int32,
              f"argument 'block_table' has sizes {list(block_table.shape)}, dtype {block_table.dtype}; "
              f"required: int32 [B, max_blocks], B = {b}")
    else:
        check(k_cache.shape[0] == b, f"argument 'k_cache' has batch {k_cache.shape[0]}; required: q's ({b}) "
              "(or pass a block_table for a paged cache)")
    return tuple(q.shape), ((b, hq, sq) if return_lse else (0,))


def _outputs(q, out_shape, lse_shape):
    return q.new_empty(out_shape), q.new_empty(lse_shape, dtype=torch.float32)


if _HAS_OP:

    @torch.library.register_fake("blockfuse::decode_attention")
    def _decode_attention_fake(q, k_cache, v_cache, cache_seqlens, block_table=None, softmax_scale=None,
                               causal=False, window_left=-1, window_right=-1, softcap=0.0, num_splits=0,
                               max_seqlen_k=0, return_lse=False, cache_leftpad=None):
        if cache_leftpad is not None:
            torch._check(cache_leftpad.dim() == 1 and cache_leftpad.shape[0] == q.shape[0]
                         and cache_leftpad.dtype == torch.int32,
                         lambda: f"blockfuse::decode_attention: argument 'cache_leftpad' has sizes "
                                 f"{list(cache_leftpad.shape)}, dtype {cache_leftpad.dtype}; required: int32 [B], "
                                 f"B = {q.shape[0]}")
        return _outputs(q, *decode_output_shapes("decode_attention", q, k_cache, v_cache, cache_seqlens,
                                                 block_table, return_lse))

    @torch.library.register_fake("blockfuse::decode_attention_with_kvcache")
    def _decode_attention_with_kvcache_fake(q, k_cache, v_cache, k_new, v_new, cache_seqlens, block_table=None,
                                            rotary_cos=None, rotary_sin=None, rotary_interleaved=False,
                                            softmax_scale=None, causal=False, window_left=-1, window_right=-1,
                                            softcap=0.0, num_splits=0, max_seqlen_k=0, return_lse=False):
        fn = "decode_attention_with_kvcache"
        shapes = decode_output_shapes(fn, q, k_cache, v_cache, cache_seqlens, block_table, return_lse)
        want = (q.shape[0], q.shape[1], k_cache.shape[2], q.shape[3])
        torch._check(tuple(k_new.shape) == want and tuple(v_new.shape) == want,
                     lambda: f"blockfuse::{fn}: arguments 'k_new'/'v_new' have sizes {list(k_new.shape)}/"
                             f"{list(v_new.shape)}; required: [B, Sq, Hkv, D] = {list(want)}")
        return _outputs(q, *shapes)


# ---- reference (plain torch) ---------------------------------------------------------------------

def _cache_rows(cache, b, n, block_table):
    """The first n key rows [n, Hkv, D] of sequence b (contiguous or paged cache)."""
    if block_table is None:
        return cache[b, :n]
    page = cache.shape[1]
    pages = block_table[b, : -(-n // page)].long()
    return cache[pages].reshape(-1, *cache.shape[2:])[:n]


def decode_attention_reference(q, k_cache, v_cache, cache_seqlens, block_table=None, softmax_scale=None,
                               causal=False, window_left=-1, window_right=-1, softcap=0.0, dtype=torch.float32,
                               cache_leftpad=None):
    """The formula decode_attention computes, in `dtype` (fp32 or fp64) plain torch on any device, for
    the tests and benchmarks (it reads cache_seqlens on the host). Returns (out [B, Sq, Hq, D], lse
    [B, Hq, Sq]) in `dtype`; a row that sees no key gets out = 0 and lse = -inf; a sequence whose
    length is negative or past the capacity, or whose left padding is outside [0, length], gets NaN
    (the kernel's rule)."""
    b, sq, hq, d = q.shape
    cap = k_cache.shape[1] * (block_table.shape[1] if block_table is not None else 1)
    out = torch.zeros(b, sq, hq, d, dtype=dtype, device=q.device)
    lse = torch.full((b, hq, sq), float("-inf"), dtype=dtype, device=q.device)
    pads = [0] * b if cache_leftpad is None else cache_leftpad.tolist()
    for i, (n, pad) in enumerate(zip(cache_seqlens.tolist(), pads)):
        if n < 0 or n > cap or pad < 0 or pad > n:
            out[i], lse[i] = float("nan"), float("nan")
            continue
        # The prefill formula on this sequence's keys [pad, n): the queries are its last Sq positions
        # (bottom-right alignment on the slice is the same rule as on the slots: index differences).
        o, l = attention_reference(q[i:i + 1], _cache_rows(k_cache, i, n, block_table)[None, pad:],
                                   _cache_rows(v_cache, i, n, block_table)[None, pad:], softmax_scale, causal,
                                   window_left, window_right, softcap, dtype=dtype)
        out[i], lse[i] = o[0], l[0]
    return out, lse


def rotary_reference(x, cos, sin, positions, interleaved=False):
    """x [B, S, H, D] with the rotary embedding applied (fp32 math, returned in x's dtype) over its
    first R = 2·cos.shape[1] dims at positions [B, S] (rows of the cos/sin tables [P, R/2]):
    GPT-NeoX pairs (d, d + R/2) or, interleaved, GPT-J pairs (2i, 2i + 1)."""
    r = 2 * cos.shape[1]
    c = cos.float()[positions.long()][:, :, None, :]  # [B, S, 1, R/2]
    s = sin.float()[positions.long()][:, :, None, :]
    xf = x.float()
    rot = xf[..., :r]
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        rot = torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).flatten(-2)
    else:
        x1, x2 = rot[..., : r // 2], rot[..., r // 2:]
        rot = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
    return torch.cat([rot, xf[..., r:]], dim=-1).to(x.dtype)


def decode_attention_with_kvcache_reference(q, k_cache, v_cache, k_new, v_new, cache_seqlens, block_table=None,
                                            rotary_cos=None, rotary_sin=None, rotary_interleaved=False,
                                            softmax_scale=None, causal=False, window_left=-1, window_right=-1,
                                            softcap=0.0, dtype=torch.float32):
    """What decode_attention_with_kvcache does, in plain torch: rotates q and k_new (rounded to their
    dtype, as the kernel stores them), writes k_new / v_new into k_cache / v_cache in place (pass
    clones to keep the originals) and returns decode_attention_reference over the L_b + Sq keys."""
    b, sq = q.shape[:2]
    lens = cache_seqlens.long()
    pos = lens[:, None] + torch.arange(sq, device=lens.device)[None, :]  # [B, Sq]
    if rotary_cos is not None:
        q = rotary_reference(q, rotary_cos, rotary_sin, pos, rotary_interleaved)
        k_new = rotary_reference(k_new, rotary_cos, rotary_sin, pos, rotary_interleaved)
    for i in range(b):
        for t, p in enumerate(pos[i].tolist()):
            if block_table is None:
                k_cache[i, p], v_cache[i, p] = k_new[i, t], v_new[i, t]
            else:
                page, row = divmod(p, k_cache.shape[1])
                blk = int(block_table[i, page])
                k_cache[blk, row], v_cache[blk, row] = k_new[i, t], v_new[i, t]
    return decode_attention_reference(q, k_cache, v_cache, (lens + sq).to(torch.int32), block_table, softmax_scale,
                                      causal, window_left, window_right, softcap, dtype)
