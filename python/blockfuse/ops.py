"""blockfuse's operators for PyTorch: every kernel of the decoder block, as torch.library ops.

    h = blockfuse.ops.gated_up(x, w, activation="silu")           # act(x·W_gateᵀ) ⊙ (x·W_upᵀ), one kernel
    y = blockfuse.ops.gated_mlp(x, w, w_down)                     # gated_up, then h·w_downᵀ (training: keeps z only)
    out, residual = blockfuse.ops.add_rmsnorm(x, residual, weight, eps, gemma=False)
    out = blockfuse.ops.rmsnorm(x, weight, eps)
    h = blockfuse.ops.swiglu(gate_up, "silu", "stacked")          # act(gate) ⊙ up of a [.., 2U] GEMM output
    y = blockfuse.ops.decode_gemm(x, w)                           # x·wᵀ for 1..32 rows (split-K GEMV)
    q, row_scales = blockfuse.ops.add_rmsnorm_fp8(x, residual, weight, None, eps)[::2]  # FP8 e4m3 out
    out = blockfuse.ops.attention(q, k, v, causal=True)           # FlashAttention-style forward
    out = blockfuse.ops.decode_attention(q, k_cache, v_cache, cache_seqlens)   # 1..16 queries vs a KV cache
    y = blockfuse.ops.fused_mlp(x, w_gate_up, w_down_t)           # the whole decode MLP, one launch
    q_embed = blockfuse.ops.rope(q, cos, sin)                     # HF's rotary embedding, one pass

Every op is a torch.library operator (schemas and CUDA kernels in C++, python/csrc; the fake
implementations in the family modules), so it traces under torch.compile(fullgraph=True) without a
graph break; outputs come from the caching allocator and the work goes on the current stream, so
every op can be captured in a CUDA graph. The wrappers call the registered op directly: all argument
checks are in C++ (no Python on the hot path), and every argument error is a ValueError whose message
names the op and the argument (blockfuse::Error's message, unchanged). gated_up and gated_mlp have a
backward (in C++); rmsnorm, add_rmsnorm, swiglu, rope, attention and attention_varlen have one through their
backward kernels (registered with torch.library.register_autograd); the other ops are inference-only
(a backward through them raises).

This module is the public namespace: it re-exports each family's op wrappers and references from
the module that holds them with its fake implementations —

    blockfuse.gated_up      gated_up, gated_mlp, interleave_gate_up / interleave_stacked / deinterleave_*,
                            gated_up_reference, gated_up_backward
    blockfuse.gated_up_fp8  gated_up_fp8, gated_up_fp8_dynamic, gated_up_fp8_reference
    blockfuse.attention     attention, attention_varlen (and the Hugging Face backend)
    blockfuse.decode_attention  decode_attention, decode_attention_with_kvcache and their references
    blockfuse.fused_mlp     fused_mlp, fused_mlp_sparse, neuron_block_router, fused_mlp_reserve,
                            fused_mlp_reference, router_reference
    blockfuse.add_rmsnorm   rmsnorm, add_rmsnorm, add_rmsnorm_, rmsnorm_fp8, add_rmsnorm_fp8, the backward
                            ops rmsnorm_backward / add_rmsnorm_backward and references
    blockfuse.swiglu        swiglu, swiglu_fp8, swiglu_backward and references
    blockfuse.decode_gemm   decode_gemm, decode_gemm_reserve, decode_gemm_reference
    blockfuse.rope          rope (and the Hugging Face patch behind patch_model(rope=True))

— and what they share (blockfuse._common): the activations, the FP8 e4m3 rule (fp8_quantize_reference,
fp8_dequantize), available() / load_error() and set_programmatic_dependent_launch.
"""
from ._common import (ACTIVATIONS, FP8_DTYPE, FP8_MAX, LAYOUTS, activation_and_grad, available,
                      fp8_dequantize, fp8_quantize_reference, load_error, set_programmatic_dependent_launch)
from .add_rmsnorm import (add_rmsnorm, add_rmsnorm_, add_rmsnorm_backward, add_rmsnorm_fp8, add_rmsnorm_reference,
                          rmsnorm, rmsnorm_backward, rmsnorm_backward_reference, rmsnorm_fp8, rmsnorm_reference)
from .attention import attention, attention_varlen
from .attention import set_backward_deterministic as set_attention_backward_deterministic
from .decode_attention import (decode_attention, decode_attention_reference, decode_attention_with_kvcache,
                               decode_attention_with_kvcache_reference)
from .decode_gemm import decode_gemm, decode_gemm_reference, decode_gemm_reserve
from .fused_mlp import (ROUTER_MODES, fused_mlp, fused_mlp_reference, fused_mlp_reserve,
                        fused_mlp_sparse, neuron_block_router, router_reference)
from .gated_up import (deinterleave_gate_up, deinterleave_to_stacked, gated_mlp, gated_up, gated_up_backward,
                       gated_up_reference, interleave_gate_up, interleave_stacked)
from .gated_up_fp8 import gated_up_fp8, gated_up_fp8_dynamic, gated_up_fp8_reference
from .loss import linear_cross_entropy
from .rope import rope
from .swiglu import swiglu, swiglu_backward, swiglu_backward_reference, swiglu_fp8, swiglu_reference

__all__ = [
    "ACTIVATIONS", "FP8_DTYPE", "FP8_MAX", "LAYOUTS", "activation_and_grad", "available", "fp8_dequantize",
    "fp8_quantize_reference", "load_error", "set_programmatic_dependent_launch", "add_rmsnorm",
    "add_rmsnorm_", "add_rmsnorm_backward", "add_rmsnorm_fp8", "add_rmsnorm_reference", "rmsnorm", "rmsnorm_backward",
    "rmsnorm_backward_reference", "rmsnorm_fp8", "rmsnorm_reference",
    "attention", "attention_varlen", "set_attention_backward_deterministic", "decode_attention", "decode_attention_with_kvcache",
    "decode_attention_reference", "decode_attention_with_kvcache_reference", "decode_gemm", "decode_gemm_reference", "decode_gemm_reserve",
    "ROUTER_MODES", "fused_mlp", "fused_mlp_reference", "fused_mlp_reserve", "fused_mlp_sparse",
    "neuron_block_router", "router_reference", "deinterleave_gate_up", "deinterleave_to_stacked", "gated_mlp", "gated_up",
    "gated_up_backward", "gated_up_reference", "interleave_gate_up", "interleave_stacked", "gated_up_fp8",
    "gated_up_fp8_dynamic", "gated_up_fp8_reference", "swiglu", "swiglu_backward",
    "swiglu_backward_reference", "swiglu_fp8", "swiglu_reference", "linear_cross_entropy", "rope",
]
