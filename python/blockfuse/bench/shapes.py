"""The problem sizes the benchmarks take by name (torch-free: `python -m blockfuse.bench --help`
lists them without importing torch)."""

# gated-up: name -> (label, hidden K, intermediate U, activation)
GATED_UP_MODELS = {
    "8b": ("Llama-3 8B", 4096, 14336, "silu"),
    "70b": ("Llama-3 70B", 8192, 28672, "silu"),
    "405b": ("Llama-3.1 405B", 16384, 53248, "silu"),
    "gemma27b": ("Gemma-2 27B", 4608, 36864, "gelu_tanh"),
}
GATED_UP_TOKENS = (512, 1024, 2048, 4096, 8192, 16384)

# fused-mlp, gated-up-fp8, sparse-prefill: name -> (label, hidden K, intermediate U)
# The implementations `train-mlp` compares, eager first (the others are relative to it).
TRAIN_MLP_IMPLS = ("eager", "compile", "liger", "quack", "quack-recompute", "blockfuse", "blockfuse-recompute")
TRAIN_VARIANTS = ("eager", "liger", "compile", "patched", "patched-loss", "patched-all", "patched-attention",
                  "patched-compile")

MLP_SHAPES = {"8b": ("Llama-3 8B", 4096, 14336), "70b": ("Llama-3 70B", 8192, 28672)}

# model: name -> (family, hidden, intermediate, heads, kv_heads, head_dim, vocab)
HF_MODELS = {
    "llama3-8b": ("llama", 4096, 14336, 32, 8, 128, 128256),
    "gemma2-9b": ("gemma2", 3584, 14336, 16, 8, 256, 256000),
}

# torch-baselines' decode-gemm: name -> (N, K)
DECODE_GEMM_SHAPES = {"qkv405": (2304, 16384), "gateup405": (13312, 16384), "down405": (16384, 6656),
                      "gateup8b": (28672, 4096), "down8b": (4096, 14336)}

# `bench loss`: implementations, and (K, V) of the vocabularies' loss heads.
LOSS_IMPLS = ("eager", "compile", "liger", "blockfuse", "blockfuse-small-chunks")
LOSS_VOCABS = {"llama3": (4096, 128256), "llama2": (4096, 32000), "qwen2-7b": (3584, 152064)}
