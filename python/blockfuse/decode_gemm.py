"""blockfuse's decode GEMM for PyTorch: y = x·wᵀ for 1..32 rows (split-K GEMV).

    y = blockfuse.ops.decode_gemm(x, w)
    blockfuse.ops.decode_gemm_reserve(w)      # before capturing a CUDA graph

Every SM streams a slice of w (split-K), fp32 accumulation, deterministic reduction. Its split-K
workspace is allocated, zeroed and cached in C++ (one per device, grown on first need, never freed).
A capture cannot allocate, so run each shape once eagerly, or call `decode_gemm_reserve(w)`, before
capturing it. One stream at a time per device. Inference only (no autograd formula).

This module holds the op's wrappers, the reference and the fake implementation.
"""
import torch

from ._common import LOADED, resolve, with_last

_DECODE_GEMM = resolve("decode_gemm")
_DECODE_GEMM_RESERVE = resolve("decode_gemm_reserve")


def decode_gemm(x, w):
    """y[..., N] = x·wᵀ for x [..., K] with 1..32 rows in all and w [N, K] (bf16/fp16, K % 8 == 0):
    every SM streams a slice of w (split-K), fp32 accumulation, deterministic reduction."""
    return _DECODE_GEMM(x, w)


def decode_gemm_reserve(w):
    """Allocates and zeroes, once, the split-K workspace every decode_gemm(x, w) with up to 32 rows
    needs on w's device, so those calls can be captured in a CUDA graph. Returns the bytes reserved."""
    return _DECODE_GEMM_RESERVE(w)


# ---- reference (plain torch) ---------------------------------------------------------------------

def decode_gemm_reference(x, w, out_dtype=None):
    """x·wᵀ in fp32 plain torch (any device), rounded once to out_dtype (default x.dtype)."""
    return torch.nn.functional.linear(x.float(), w.float()).to(out_dtype or x.dtype)


# ---- fake (meta) implementation: shape and dtype for torch.compile / FakeTensor ---------------------

if LOADED:

    @torch.library.register_fake("blockfuse::decode_gemm")
    def _decode_gemm_fake(x, w):
        torch._check(x.shape[-1] == w.shape[1],
                     lambda: f"blockfuse.decode_gemm: argument 'w' has K = {w.shape[1]}; required: x.size(-1) = {x.shape[-1]}")
        return x.new_empty(with_last(x, w.shape[0]))
