"""blockfuse's fused decode MLP for PyTorch: the whole gated MLP of a decode step in one launch.

    y = blockfuse.ops.fused_mlp(x, w_gate_up, w_down_t)                    # x [..., K] with <= 32 rows
    ui, uc, ti, tc = blockfuse.ops.neuron_block_router(x, router, "topk", top_k=64)
    y = blockfuse.ops.fused_mlp_sparse(x, w_gate_up, w_down_t, ui, uc, block_size=32)   # union list
    y = blockfuse.ops.fused_mlp_sparse(x, w_gate_up, w_down_t, ti, tc, block_size=32)   # per token

y = down(act(x·W_gateᵀ) ⊙ (x·W_upᵀ)) for 1..32 token rows: each thread block computes the h of a few
16-neuron groups from the interleaved w_gate_up [2U, K] (row 2j = up_j, row 2j+1 = gate_j:
ops.interleave_gate_up), rounds h once to the input dtype, multiplies it by the same neurons' rows
of w_down_t [U, K] (down_proj.weight transposed and made contiguous, once) and accumulates y in
fp32; h never reaches memory (include/blockfuse/fused_mlp.h, docs/fused_mlp.md). The sparse form
reads only the listed neuron blocks (block_size 16, 32 or 64 neurons): one sorted list for the
batch (indices int32 [capacity], counts int32 [1]) or one per token (indices [M, ld], counts [M]).
The lists' contents are trusted (checking them on the device would synchronise).

neuron_block_router(x, router [U / block_size, K], mode, threshold, top_k) scores each neuron block
as sigmoid(x·router[b]) in fp32 and keeps, per token, the blocks above `threshold` ("threshold") or
the top_k highest ("topk"; ties to the lower index), on the device: it returns the sorted union
(union_indices [n_blocks], union_count [1]) and the per-token lists (token_indices [..., n_blocks],
token_counts [...]), so a decode step needs no host synchronisation and can be captured. Entries past
a list's count are unspecified (the tensors are not cleared).

deterministic=True sums the blocks' partials in a fixed order (bitwise reproducible; slower,
docs/fused_mlp.md); the default uses fp32 atomics (the last bits of y may vary between calls). The
workspaces are owned by the binding (zeroed once, grown on first need): run each shape once eagerly
or call fused_mlp_reserve(w_down_t) before capturing a CUDA graph. Forward only (no autograd).

This module holds the ops' wrappers, the references and the fake implementations.
"""
import torch

from ._common import has_op, require_op
from .gated_up import gated_up_reference

ROUTER_MODES = ("threshold", "topk")


# The loaded library has the fused-MLP ops (a _C.so built before they existed has not).
_HAS_OP = has_op("fused_mlp")


def _require():
    if not _HAS_OP:
        require_op("fused_mlp")


def fused_mlp(x, w_gate_up, w_down_t, activation="silu", deterministic=False):
    """y [..., K] = down(act(x·W_gateᵀ) ⊙ (x·W_upᵀ)) for x [..., K] with 1..32 rows, w_gate_up [2U, K]
    interleaved, w_down_t [U, K]; one launch."""
    _require()
    return torch.ops.blockfuse.fused_mlp.default(x, w_gate_up, w_down_t, activation, deterministic)


def fused_mlp_sparse(x, w_gate_up, w_down_t, indices, counts, block_size, activation="silu", deterministic=False):
    """The fused MLP over the listed neuron blocks only (h = 0 elsewhere): a 1-D `indices` is one
    sorted list for the batch (counts [1]), a 2-D one [M, ld] one list per token row (counts [M])."""
    _require()
    return torch.ops.blockfuse.fused_mlp_sparse.default(x, w_gate_up, w_down_t, indices, counts, block_size,
                                                        activation, deterministic)


def neuron_block_router(x, router, mode="threshold", threshold=0.5, top_k=0):
    """(union_indices, union_count, token_indices, token_counts), int32, computed on the device."""
    _require()
    return torch.ops.blockfuse.neuron_block_router.default(x, router, mode, threshold, top_k)


def fused_mlp_reserve(w_down_t, deterministic=False):
    """Reserves the workspaces every fused_mlp / fused_mlp_sparse / router call with up to 32 rows
    and this w_down_t needs, so such calls can then be captured. Returns the bytes reserved."""
    _require()
    return torch.ops.blockfuse.fused_mlp_reserve.default(w_down_t, deterministic)


# ---- reference (plain torch) ---------------------------------------------------------------------

def router_reference(x, router, mode="threshold", threshold=0.5, top_k=0):
    """The router's selection in fp32 plain torch: bool [..., n_blocks], True = the token keeps the
    block (NaN scores are never kept; top-k ties go to the lower index)."""
    s = torch.sigmoid(torch.nn.functional.linear(x.float(), router.float()))
    if mode == "threshold":
        return s > threshold
    if mode != "topk":
        raise ValueError(f"blockfuse.router_reference: mode '{mode}'; required: one of {ROUTER_MODES}")
    n = s.shape[-1]
    keep = torch.zeros(s.shape, dtype=torch.bool, device=s.device)
    if top_k <= 0:
        return keep
    # A stable descending sort puts equal scores in index order; NaN goes last and is never kept.
    key = torch.where(torch.isnan(s), torch.full_like(s, -float("inf")), s)
    order = torch.sort(key, dim=-1, descending=True, stable=True).indices[..., :min(top_k, n)]
    keep.scatter_(-1, order, True)
    return keep & ~torch.isnan(s)


def fused_mlp_reference(x, w_gate_up, w_down_t, activation="silu", neuron_mask=None, out_dtype=None):
    """The formula fused_mlp computes, in plain torch with fp32 math: h = act(gate)·up rounded once to
    x's dtype (zero where `neuron_mask` [..., U] is False), y = h·w_down_t in fp32, rounded once to
    out_dtype (default x.dtype)."""
    h = gated_up_reference(x, w_gate_up, activation)
    if neuron_mask is not None:
        h = h.masked_fill(~neuron_mask, 0)
    return (h.float() @ w_down_t.float()).to(out_dtype or x.dtype)


if _HAS_OP:

    @torch.library.register_fake("blockfuse::fused_mlp")
    def _fused_mlp_fake(x, w_gate_up, w_down_t, activation="silu", deterministic=False):
        torch._check(w_down_t.dim() == 2 and x.shape[-1] == w_down_t.shape[1],
                     lambda: "blockfuse.fused_mlp: argument 'w_down_t' must be [U, K] with K = x.size(-1)")
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    @torch.library.register_fake("blockfuse::fused_mlp_sparse")
    def _fused_mlp_sparse_fake(x, w_gate_up, w_down_t, indices, counts, block_size, activation="silu",
                               deterministic=False):
        torch._check(w_down_t.dim() == 2 and x.shape[-1] == w_down_t.shape[1],
                     lambda: "blockfuse.fused_mlp_sparse: argument 'w_down_t' must be [U, K] with K = x.size(-1)")
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    @torch.library.register_fake("blockfuse::neuron_block_router")
    def _router_fake(x, router, mode="threshold", threshold=0.5, top_k=0):
        n = router.shape[0]
        lead = tuple(x.shape[:-1])
        i32 = dict(dtype=torch.int32, device=x.device)
        return (torch.empty((n,), **i32), torch.empty((1,), **i32), torch.empty((*lead, n), **i32),
                torch.empty(lead, **i32))
