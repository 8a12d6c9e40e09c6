"""Tiny random-initialised Hugging Face decoder models of every family patch_model handles, built
from their configs (no download). Shared by the CPU and GPU tests of blockfuse.patch_model."""
import torch

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3")


def tiny_model(family, hidden=64, inter=176, layers=2, vocab=256, seed=0, **extra):
    """A CausalLM of `family` (random weights; RMSNorm gains perturbed so that w and 1 + w differ
    visibly from 1), in float32 on the CPU, eval mode."""
    import transformers as tf
    common = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  tie_word_embeddings=False)
    common.update(extra)
    if family == "llama":
        model_cls, cfg = tf.LlamaForCausalLM, tf.LlamaConfig(hidden_act="silu", **common)
    elif family == "mistral":
        model_cls, cfg = tf.MistralForCausalLM, tf.MistralConfig(hidden_act="silu", sliding_window=None, **common)
    elif family == "qwen2":
        model_cls, cfg = tf.Qwen2ForCausalLM, tf.Qwen2Config(hidden_act="silu", **common)
    elif family == "qwen3":
        model_cls, cfg = tf.Qwen3ForCausalLM, tf.Qwen3Config(hidden_act="silu", head_dim=hidden // 4, **common)
    elif family == "phi3":
        model_cls, cfg = tf.Phi3ForCausalLM, tf.Phi3Config(hidden_act="silu", pad_token_id=0, **common)
    elif family == "gemma2":
        model_cls, cfg = tf.Gemma2ForCausalLM, tf.Gemma2Config(hidden_activation="gelu_pytorch_tanh",
                                                               head_dim=hidden // 4, sliding_window=16, **common)
    elif family == "gemma3":
        model_cls, cfg = tf.Gemma3ForCausalLM, tf.Gemma3TextConfig(hidden_activation="gelu_pytorch_tanh",
                                                                   head_dim=hidden // 4, sliding_window=16, **common)
    else:
        raise ValueError(family)
    torch.manual_seed(seed)
    model = model_cls(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.add_(0.2 * torch.randn_like(p))
    return model
