"""blockfuse modules: a fused gated MLP and a one-line drop-in for Hugging Face models.

    mlp = blockfuse.nn.GatedMLP.from_hf(model.model.layers[0].mlp)   # convert one MLP
    replaced = blockfuse.patch_model(model)                          # or every MLP, in place

GatedMLP computes down(act(x·W_gateᵀ) ⊙ (x·W_upᵀ)): the gate/up projection and the activation run
as one blockfuse kernel (ops.gated_up) from the interleaved weight `w_gate_up` [2U, K] (row 2j =
up_j, row 2j+1 = gate_j), then `down` is an ordinary nn.Linear (cuBLAS). On CUDA bf16/fp16 inputs
it uses the fused kernel; on anything else (CPU tensors, float32) it runs the same formula in
plain torch (ops.gated_up_reference), so a converted model still works there.

patch_model replaces, by class name (transformers is never imported here), every
LlamaMLP / MistralMLP / Qwen2MLP (SwiGLU) and Gemma2MLP (GeGLU, tanh-approximated GELU) in a
model, converting each one's weights once.
"""
import math

import torch
from torch import nn

from . import ops

# Hugging Face MLP classes with gate_proj/up_proj/down_proj and forward
#   down_proj(act_fn(gate_proj(x)) * up_proj(x))
HF_MLP_CLASSES = ("LlamaMLP", "MistralMLP", "Qwen2MLP", "Gemma2MLP")

# Hugging Face activation names (config.hidden_act / hidden_activation) -> blockfuse's.
HF_ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",  # transformers' NewGELUActivation: the same tanh formula
}


class GatedMLP(nn.Module):
    """down(act(x·W_gateᵀ) ⊙ (x·W_upᵀ)) with the gate/up projection fused with the activation.

    Args:
        hidden_size: K, the model dimension (input and output features); K % 8 == 0 for the kernel.
        intermediate_size: U, the up-projection width; U % 8 == 0 for the kernel.
        activation: "silu" (SwiGLU) or "gelu_tanh" (GeGLU).
        bias: must be False — the fused kernel has no bias on gate/up (Llama-family MLPs have none).
        dtype, device: of the parameters (bf16/fp16 on CUDA for the fused kernel).

    Parameters: `w_gate_up` [2U, K] (interleaved), `down` (nn.Linear U -> K, bias-free unless
    converted from an MLP whose down_proj has one).
    """

    def __init__(self, hidden_size, intermediate_size, activation="silu", bias=False, dtype=None,
                 device=None, down_bias=False):
        super().__init__()
        if bias:
            raise ValueError("blockfuse.nn.GatedMLP: bias=True is not supported: the fused gate/up "
                             "kernel has no bias (Llama/Mistral/Qwen2/Gemma2 MLPs have none)")
        if activation not in ops.ACTIVATIONS:
            raise ValueError(f"blockfuse.nn.GatedMLP: activation '{activation}'; required: one of {ops.ACTIVATIONS}")
        self.hidden_size = int(hidden_size)
        self.intermediate_size = int(intermediate_size)
        self.activation = activation
        self.w_gate_up = nn.Parameter(torch.empty(2 * self.intermediate_size, self.hidden_size,
                                                  dtype=dtype, device=device))
        self.down = nn.Linear(self.intermediate_size, self.hidden_size, bias=down_bias, dtype=dtype,
                              device=device)
        self.reset_parameters()

    def reset_parameters(self):
        # nn.Linear's default for each of the two [U, K] projections: U(-1/sqrt(K), 1/sqrt(K)).
        nn.init.kaiming_uniform_(self.w_gate_up, a=math.sqrt(5))
        self.down.reset_parameters()

    def _fused(self, x):
        w = self.w_gate_up
        if not (x.is_cuda and x.dtype in ops._FUSED_DTYPES and w.dtype == x.dtype):
            return False
        if not ops.available():
            raise RuntimeError(f"blockfuse.nn.GatedMLP: {ops.load_error()}")
        return True

    def gate_up(self, x):
        """h = act(x·W_gateᵀ) ⊙ (x·W_upᵀ), [..., U]."""
        if self._fused(x):
            return ops.gated_up(x, self.w_gate_up, self.activation)
        return ops.gated_up_reference(x, self.w_gate_up, self.activation)

    def forward(self, x):
        return self.down(self.gate_up(x))

    def extra_repr(self):
        return (f"hidden_size={self.hidden_size}, intermediate_size={self.intermediate_size}, "
                f"activation={self.activation!r}")

    @classmethod
    def from_hf(cls, mlp):
        """A GatedMLP computing what the Hugging Face MLP `mlp` computes, with its weights copied
        (once) into the interleaved layout, on the same device and dtype.

        Accepts any module with gate_proj/up_proj/down_proj nn.Linear's whose forward is
        down_proj(act_fn(gate_proj(x)) * up_proj(x)) — LlamaMLP, MistralMLP, Qwen2MLP, Gemma2MLP —
        and an activation that is SiLU or the tanh-approximated GELU (anything else: ValueError)."""
        for name in ("gate_proj", "up_proj", "down_proj"):
            if not isinstance(getattr(mlp, name, None), nn.Linear):
                raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: {type(mlp).__name__} has no nn.Linear "
                                 f"'{name}'; required: a gated MLP with gate_proj, up_proj, down_proj")
        gate, up, down = mlp.gate_proj, mlp.up_proj, mlp.down_proj
        if gate.bias is not None or up.bias is not None:
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: {type(mlp).__name__} has biases on "
                             "gate_proj/up_proj (config.mlp_bias=True?); the fused kernel has no bias")
        if gate.weight.shape != up.weight.shape:
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: gate_proj {tuple(gate.weight.shape)} and "
                             f"up_proj {tuple(up.weight.shape)} differ; required: the same [U, K]")
        u, k = gate.weight.shape
        if tuple(down.weight.shape) != (k, u):
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: down_proj {tuple(down.weight.shape)}; "
                             f"required: [{k}, {u}] (hidden x intermediate)")
        if k % 8 or u % 8:
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: hidden size {k} / intermediate size {u}; "
                             "required: both multiples of 8 (the kernel moves 16-byte vectors)")
        act = hf_activation(mlp)
        w = gate.weight
        new = cls(k, u, act, dtype=w.dtype, device=w.device, down_bias=down.bias is not None)
        with torch.no_grad():
            new.w_gate_up.copy_(ops.interleave_gate_up(gate.weight.detach(), up.weight.detach()))
            new.down.weight.copy_(down.weight)
            if down.bias is not None:
                new.down.bias.copy_(down.bias)
        new.train(mlp.training)
        return new


def _act_probe(act_fn):
    """(name, ran): which blockfuse activation the callable act_fn computes, found by evaluating it
    on a CPU float32 grid; name is None if it computes neither, ran is False if it could not run."""
    t = torch.linspace(-8.0, 8.0, 257, dtype=torch.float32)
    try:
        with torch.no_grad():
            y = act_fn(t)
    except Exception:  # e.g. an activation that only runs on the GPU: decide by the config name
        return None, False
    if not isinstance(y, torch.Tensor) or y.shape != t.shape:
        return None, False
    for name in ops.ACTIVATIONS:
        if torch.allclose(y.float(), ops._activation(t, name), rtol=1e-5, atol=1e-6):
            return name, True
    return None, True


def hf_activation(mlp):
    """blockfuse's name for the activation of a Hugging Face MLP: from what `mlp.act_fn` computes,
    else from its config (`hidden_activation`, Gemma's, then `hidden_act`)."""
    act_fn = getattr(mlp, "act_fn", None)
    cfg = getattr(mlp, "config", None)
    cfg_name = None
    if cfg is not None:
        cfg_name = getattr(cfg, "hidden_activation", None) or getattr(cfg, "hidden_act", None)
    ran = False
    if act_fn is not None:
        probed, ran = _act_probe(act_fn)
        if probed is not None:
            return probed
    if not ran and isinstance(cfg_name, str) and cfg_name in HF_ACTIVATIONS:
        return HF_ACTIVATIONS[cfg_name]
    raise ValueError(
        f"blockfuse.nn: {type(mlp).__name__} uses activation {type(act_fn).__name__ if act_fn is not None else None} "
        f"(config: {cfg_name!r}); required: SiLU ('silu') or the tanh-approximated GELU "
        "('gelu_pytorch_tanh'): the fused kernel computes only these")


def patch_model(model, classes=HF_MLP_CLASSES):
    """Replaces, in place, every submodule of `model` whose class name is in `classes` (by default
    LlamaMLP, MistralMLP, Qwen2MLP, Gemma2MLP) by GatedMLP.from_hf(submodule).

    Returns the list of (qualified name, original module) it replaced, in model order. The list
    keeps the original weights alive: drop it to free them. Raises ValueError (before changing
    anything) if some matching MLP cannot be converted."""
    classes = tuple(classes)
    found = [(name, m) for name, m in model.named_modules() if type(m).__name__ in classes]
    if any(name == "" for name, _ in found):
        raise ValueError("blockfuse.patch_model: the model itself is an MLP; use "
                         "blockfuse.nn.GatedMLP.from_hf(mlp) instead")
    # Skip MLPs nested inside an MLP that is replaced anyway.
    top = [(n, m) for n, m in found if not any(n.startswith(p + ".") for p, _ in found if p != n)]
    converted = [(name, m, GatedMLP.from_hf(m)) for name, m in top]
    replaced = []
    for name, old, new in converted:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, new)
        replaced.append((name, old))
    return replaced
