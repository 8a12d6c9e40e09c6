"""How many KV-cache tokens the fused gated MLP buys an inference engine.

    python -m blockfuse.kvcache                       # the six models, chunks 256 and 512, bf16
    python -m blockfuse.kvcache --chunks 512 --dtype fp16 --kv-dtype fp8 --plot kv.png --json kv.json
    python -m blockfuse.kvcache --plot results/kvcache.png   # the figure of docs/pytorch.md

Torch-free: plain arithmetic on published model configurations (matplotlib only for --plot).

Accounting (per chunk)
----------------------
An engine with chunked prefill feeds the model C tokens at a time (C = 256 or 512). Layers run one
after another and a layer's activations are freed before the next layer runs, so the activation
memory an engine must reserve is that of ONE layer for ONE chunk, whatever the number of layers.
In that layer the gated MLP (hidden D, intermediate U, activations of `b` bytes) holds:

  unfused (GEMM into [C, 2U], then SwiGLU):  gate|up [C, 2U] + h [C, U]  = 3·C·U·b bytes
  fused   (blockfuse.ops.gated_up):          h [C, U]                    = 1·C·U·b bytes
  saved per chunk                                                        = 2·C·U·b bytes

(The down-projection's output [C, D] and the attention activations are the same either way and
cancel in the difference.) The engine can hand the saved bytes to the KV cache, whose cost per
token is a key and a value in every layer:

  KV bytes per token = 2 · layers · kv_heads · head_dim · b_kv
  extra KV tokens    = floor(saved bytes per chunk / KV bytes per token)

The saving is fixed per deployment: it depends only on the chunk size and the model. The table also
gives the ratio of a whole layer's activations, fused / unfused,
(5D + U) / (5D + 3U): attention's q, k, v, o (4·C·D) plus the MLP (3·C·U + C·D unfused, C·U + C·D
fused) — the relative saving, largest for Gemma-2 27B, whose U = 8·D.

Caveats: every layer is charged a full KV cache; Gemma-2's sliding-window
layers (every other one, window 4096) hold at most 4096 tokens, so at long contexts its real gain in
tokens is larger. Tensor-parallel sharding divides both U and kv_heads per GPU alike.
"""
import argparse
import dataclasses
import json
import sys

# Bytes per element of the supported dtypes (activations and KV cache).
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    name: str
    layers: int          # num_hidden_layers
    hidden: int          # hidden_size (D, K of the gate/up GEMM)
    intermediate: int    # intermediate_size (U)
    heads: int           # num_attention_heads
    kv_heads: int        # num_key_value_heads (GQA)
    head_dim: int
    activation: str      # "silu" or "gelu_tanh"
    source: str          # the published config these numbers come from


# From each model's published config.json (Hugging Face model repository named in `source`).
MODELS = {
    "llama3-8b": ModelConfig("Llama-3 8B", 32, 4096, 14336, 32, 8, 128, "silu",
                             "meta-llama/Meta-Llama-3-8B"),
    "llama3-70b": ModelConfig("Llama-3 70B", 80, 8192, 28672, 64, 8, 128, "silu",
                              "meta-llama/Meta-Llama-3-70B"),
    "llama3-405b": ModelConfig("Llama-3.1 405B", 126, 16384, 53248, 128, 8, 128, "silu",
                               "meta-llama/Llama-3.1-405B"),
    "gemma2-27b": ModelConfig("Gemma-2 27B", 46, 4608, 36864, 32, 16, 128, "gelu_tanh",
                              "google/gemma-2-27b"),
    "mistral-7b": ModelConfig("Mistral 7B", 32, 4096, 14336, 32, 8, 128, "silu",
                              "mistralai/Mistral-7B-v0.3"),
    "qwen2.5-72b": ModelConfig("Qwen2.5 72B", 80, 8192, 29568, 64, 8, 128, "silu",
                               "Qwen/Qwen2.5-72B"),
}


def dtype_bytes(dtype):
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise ValueError(f"blockfuse.kvcache: dtype '{dtype}'; required: one of {sorted(DTYPE_BYTES)}") from None


def mlp_activation_bytes(cfg, chunk, dtype="bf16", fused=False):
    """Bytes the gate/up stage of one layer's MLP holds for a chunk: 3·C·U·b unfused, C·U·b fused."""
    return (1 if fused else 3) * chunk * cfg.intermediate * dtype_bytes(dtype)


def saved_bytes_per_chunk(cfg, chunk, dtype="bf16"):
    """Activation bytes the fused MLP saves per chunk: 2·C·U·b (one layer: layers run in turn)."""
    return mlp_activation_bytes(cfg, chunk, dtype, fused=False) - mlp_activation_bytes(cfg, chunk, dtype, fused=True)


def kv_bytes_per_token(cfg, kv_dtype="bf16"):
    """Bytes of the KV cache per token: a key and a value in every layer, 2·L·kv_heads·head_dim·b."""
    return 2 * cfg.layers * cfg.kv_heads * cfg.head_dim * dtype_bytes(kv_dtype)


def extra_kv_tokens(cfg, chunk, dtype="bf16", kv_dtype=None):
    """Whole tokens of KV cache the saved activation memory holds."""
    return saved_bytes_per_chunk(cfg, chunk, dtype) // kv_bytes_per_token(cfg, kv_dtype or dtype)


def layer_activation_ratio(cfg):
    """Seed footnote 3: a layer's activations fused / unfused, (5D + U) / (5D + 3U)."""
    d, u = cfg.hidden, cfg.intermediate
    return (5 * d + u) / (5 * d + 3 * u)


def analyse(models=None, chunks=(256, 512), dtype="bf16", kv_dtype=None):
    """One row (dict) per model and chunk size."""
    kv_dtype = kv_dtype or dtype
    rows = []
    for key in models or list(MODELS):
        if key not in MODELS:
            raise ValueError(f"blockfuse.kvcache: model '{key}'; required: one of {list(MODELS)}")
        cfg = MODELS[key]
        for c in chunks:
            if c <= 0:
                raise ValueError(f"blockfuse.kvcache: chunk size {c}; required: > 0")
            saved = saved_bytes_per_chunk(cfg, c, dtype)
            kv = kv_bytes_per_token(cfg, kv_dtype)
            rows.append({
                "model": key, "name": cfg.name, "chunk": c, "dtype": dtype, "kv_dtype": kv_dtype,
                "up_factor": cfg.intermediate / cfg.hidden,
                "unfused_mlp_bytes": mlp_activation_bytes(cfg, c, dtype, fused=False),
                "fused_mlp_bytes": mlp_activation_bytes(cfg, c, dtype, fused=True),
                "saved_bytes": saved,
                "kv_bytes_per_token": kv,
                "extra_kv_tokens": saved // kv,
                "layer_activation_ratio": layer_activation_ratio(cfg),
            })
    return rows


def format_table(rows):
    mib = 1 << 20
    lines = ["| model | U/D | chunk | MLP act. unfused MiB | fused MiB | saved MiB | KV KiB/token | extra KV tokens | layer act. fused/unfused |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['up_factor']:.2f} | {r['chunk']} | {r['unfused_mlp_bytes'] / mib:.1f} | "
                     f"{r['fused_mlp_bytes'] / mib:.1f} | {r['saved_bytes'] / mib:.1f} | "
                     f"{r['kv_bytes_per_token'] / 1024:.0f} | {r['extra_kv_tokens']} | "
                     f"{100 * r['layer_activation_ratio']:.1f}% |")
    return "\n".join(lines)


def plot(rows, path):
    """Grouped bar chart: extra KV-cache tokens per model, one bar per chunk size."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["name"] for r in rows))
    chunks = list(dict.fromkeys(r["chunk"] for r in rows))
    width = 0.8 / len(chunks)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, c in enumerate(chunks):
        vals = [next(r["extra_kv_tokens"] for r in rows if r["name"] == n and r["chunk"] == c) for n in names]
        xs = [j + (i - (len(chunks) - 1) / 2) * width for j in range(len(names))]
        bars = ax.bar(xs, vals, width, label=f"chunk {c}")
        ax.bar_label(bars, fontsize=8)
    ax.set_xticks(range(len(names)), names, rotation=15)
    r0 = rows[0]
    ax.set_ylabel("extra KV-cache tokens")
    ax.set_title(f"KV-cache tokens freed by the fused gated MLP per chunked-prefill chunk "
                 f"(activations {r0['dtype']}, KV {r0['kv_dtype']})", fontsize=10)
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m blockfuse.kvcache", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from: {','.join(MODELS)}")
    p.add_argument("--chunks", default="256,512", help="chunk sizes in tokens (default 256,512)")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPE_BYTES), help="activation dtype")
    p.add_argument("--kv-dtype", default=None, choices=sorted(DTYPE_BYTES), help="KV-cache dtype (default: --dtype)")
    p.add_argument("--json", help="write the rows as JSON to this file")
    p.add_argument("--plot", help="write the bar chart (PNG) to this file (needs matplotlib)")
    a = p.parse_args(argv)
    try:
        rows = analyse([m for m in a.models.split(",") if m], [int(c) for c in a.chunks.split(",") if c],
                       a.dtype, a.kv_dtype)
    except ValueError as e:
        p.error(str(e))
    print(format_table(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"accounting": "saved = 2*C*U*bytes per chunk (one layer); kv/token = 2*L*kv_heads*head_dim*bytes",
                       "models": {k: dataclasses.asdict(MODELS[k]) for k in dict.fromkeys(r["model"] for r in rows)},
                       "rows": rows}, f, indent=1)
        print(f"wrote {a.json}")
    if a.plot:
        plot(rows, a.plot)
        print(f"wrote {a.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
