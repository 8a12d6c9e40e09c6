"""blockfuse — fused CUDA kernels for the transformer decoder block, from PyTorch.

    import blockfuse
    patched = blockfuse.patch_model(model)         # fused MLPs and add+RMSNorms in a HF decoder
    h = blockfuse.ops.gated_up(x, w_interleaved)   # act(x·W_gateᵀ) ⊙ (x·W_upᵀ) in one kernel

Submodules:
  ops        every op (torch.library), re-exported from the family modules below
  gated_up, gated_up_fp8, attention, decode_attention, fused_mlp, add_rmsnorm, swiglu, decode_gemm
             one per kernel family: its op wrappers, fake implementations and reference
             (attention also holds the Hugging Face attention backend "blockfuse")
  nn         GatedMLP, SparseGatedMLP
  loss       linear_cross_entropy (the language-model loss without the logits), the CausalLM patch
  rope       rope (Hugging Face's rotary embedding in one pass) and its patch
  patch      patch_model (a Hugging Face decoder, in place)
  kvcache    the KV-cache analysis (torch-free)
  bench      the PyTorch-side benchmarks: `python -m blockfuse.bench --help`
Importing `blockfuse` itself imports nothing heavy: the submodules (and torch) load on first use,
so `blockfuse.kvcache` and `python -m blockfuse.bench --help` work without torch.
"""
import importlib

__version__ = "0.1.0"

_LAZY_MODULES = ("ops", "nn", "patch", "loss", "kvcache", "bench", "attention", "decode_attention", "gated_up", "gated_up_fp8", "fused_mlp",
                 "add_rmsnorm", "swiglu", "decode_gemm", "rope")
_LAZY_NAMES = {"patch_model": "patch", "GatedMLP": "nn", "SparseGatedMLP": "nn", "linear_cross_entropy": "loss"}


def __getattr__(name):
    if name in _LAZY_MODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'blockfuse' has no attribute '{name}'")


def __dir__():
    return sorted(list(globals()) + list(_LAZY_MODULES) + list(_LAZY_NAMES))
