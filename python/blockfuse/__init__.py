"""blockfuse — fused CUDA kernels for the transformer decoder block, from PyTorch.

    import blockfuse
    patched = blockfuse.patch_model(model)         # fused MLPs and add+RMSNorms in a HF decoder
    h = blockfuse.ops.gated_up(x, w_interleaved)   # act(x·W_gateᵀ) ⊙ (x·W_upᵀ) in one kernel

Submodules: `ops` (the torch.library ops), `nn` (GatedMLP, SparseGatedMLP), `patch` (patch_model), `kvcache` (the
KV-cache analysis; torch-free), `bench` (`python -m blockfuse.bench gated-up|model`), `attention` (the
attention ops' wrappers, re-exported by `ops`, and the Hugging Face backend "blockfuse"). Importing `blockfuse` itself
imports nothing heavy: `ops`/`nn` (and torch) load on first use, so `blockfuse.kvcache` works
without torch.
"""
import importlib

__version__ = "0.1.0"

_LAZY_MODULES = ("ops", "nn", "patch", "kvcache", "bench", "attention")
_LAZY_NAMES = {"patch_model": "patch", "GatedMLP": "nn", "SparseGatedMLP": "nn", "gated_up": "ops"}


def __getattr__(name):
    if name in _LAZY_MODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'blockfuse' has no attribute '{name}'")


def __dir__():
    return sorted(list(globals()) + list(_LAZY_MODULES) + list(_LAZY_NAMES))
