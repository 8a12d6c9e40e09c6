"""CPU tests of the torch-side Python code (no GPU, no compiled extension needed): the plain-torch
formula and its backward, activation detection, GatedMLP.from_hf and patch_model on CPU float32
Hugging Face modules (GatedMLP runs the plain-torch path there). Skipped without torch."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: these tests need it (CPU is enough)")
from blockfuse import nn as bnn  # noqa: E402
from blockfuse import ops, patch  # noqa: E402
from blockfuse._common import activation  # noqa: E402
from tensor_utils import rel  # noqa: E402


@pytest.mark.parametrize("act", ops.ACTIVATIONS)
def test_activation_grad_formula_matches_autograd(act):
    g = torch.linspace(-9, 9, 1001, dtype=torch.float64, requires_grad=True)
    a, da = ops.activation_and_grad(g.detach(), act)
    ref = activation(g, act)
    ref.sum().backward()
    assert torch.allclose(a, ref.detach(), atol=1e-12)
    assert torch.allclose(da, g.grad, atol=1e-10)


@pytest.mark.parametrize("act", ops.ACTIVATIONS)
def test_backward_formula_matches_autograd(act):
    torch.manual_seed(0)
    x = torch.randn(2, 7, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(24, 16, dtype=torch.float64, requires_grad=True)
    gy = torch.randn(2, 7, 12, dtype=torch.float64)
    ops.gated_up_reference(x, w, act, out_dtype=torch.float64).backward(gy)
    dx, dw = ops.gated_up_backward(gy, x.detach(), w.detach(), act)
    assert torch.allclose(dx, x.grad, atol=1e-5) and torch.allclose(dw, w.grad, atol=1e-5)


def test_reference_uses_the_interleaved_layout():
    torch.manual_seed(1)
    x = torch.randn(5, 16)
    gate, up = torch.randn(8, 16), torch.randn(8, 16)
    w = ops.interleave_gate_up(gate, up)
    assert torch.equal(w[0::2], up) and torch.equal(w[1::2], gate)
    want = torch.nn.functional.silu(x @ gate.t()) * (x @ up.t())
    assert rel(ops.gated_up_reference(x, w, "silu"), want) < 1e-6
    g2, u2 = ops.deinterleave_gate_up(w)
    assert torch.equal(g2, gate) and torch.equal(u2, up)
    assert torch.equal(ops.deinterleave_to_stacked(w), torch.cat((gate, up)))
    assert torch.equal(ops.interleave_stacked(torch.cat((gate, up))), w)


def test_gated_mlp_module_basics():
    m = bnn.GatedMLP(32, 64, "gelu_tanh")
    assert m.w_gate_up.shape == (128, 32) and m.down.weight.shape == (32, 64)
    assert "activation='gelu_tanh'" in repr(m)
    y = m(torch.randn(3, 4, 32))
    assert y.shape == (3, 4, 32)
    with pytest.raises(ValueError, match="bias=True is not supported"):
        bnn.GatedMLP(32, 64, bias=True)
    with pytest.raises(ValueError, match="activation 'relu'"):
        bnn.GatedMLP(32, 64, "relu")


def test_activation_detection_from_callables_and_config():
    class Fake(torch.nn.Module):
        def __init__(self, act_fn=None, config=None):
            super().__init__()
            if act_fn is not None:
                self.act_fn = act_fn
            self.config = config

    class Cfg:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    assert bnn.hf_activation(Fake(torch.nn.SiLU())) == "silu"
    assert bnn.hf_activation(Fake(torch.nn.GELU(approximate="tanh"))) == "gelu_tanh"
    with pytest.raises(ValueError, match="required: SiLU"):
        bnn.hf_activation(Fake(torch.nn.GELU()))  # erf GELU: not what the kernel computes
    with pytest.raises(ValueError, match="required: SiLU"):
        bnn.hf_activation(Fake(torch.nn.ReLU(), Cfg(hidden_act="silu")))  # what act_fn computes wins
    assert bnn.hf_activation(Fake(None, Cfg(hidden_act="silu"))) == "silu"
    assert bnn.hf_activation(Fake(None, Cfg(hidden_activation="gelu_pytorch_tanh", hidden_act="gelu"))) == "gelu_tanh"
    with pytest.raises(ValueError, match="config: 'relu'"):
        bnn.hf_activation(Fake(None, Cfg(hidden_act="relu")))


def _hf_models():
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    from transformers.models.gemma2.modeling_gemma2 import Gemma2Config, Gemma2MLP
    from transformers.models.llama.modeling_llama import LlamaConfig, LlamaMLP
    from transformers.models.mistral.modeling_mistral import MistralConfig, MistralMLP
    from transformers.models.qwen2.modeling_qwen2 import Qwen2Config, Qwen2MLP
    return transformers, [
        LlamaMLP(LlamaConfig(hidden_size=64, intermediate_size=176, hidden_act="silu")),
        MistralMLP(MistralConfig(hidden_size=64, intermediate_size=176, hidden_act="silu")),
        Qwen2MLP(Qwen2Config(hidden_size=64, intermediate_size=176, hidden_act="silu")),
        Gemma2MLP(Gemma2Config(hidden_size=64, intermediate_size=512, hidden_activation="gelu_pytorch_tanh")),
    ]


def test_from_hf_on_cpu_matches_hf():
    torch.manual_seed(0)
    _, mlps = _hf_models()
    x = torch.randn(2, 9, 64)
    for mlp in mlps:
        ours = bnn.GatedMLP.from_hf(mlp)
        with torch.no_grad():
            assert rel(ours(x), mlp(x)) < 1e-5, type(mlp).__name__


def test_patch_small_llama_on_cpu():
    torch.manual_seed(0)
    transformers, _ = _hf_models()
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 128, (1, 12))
    with torch.no_grad():
        before = model(ids).logits
    replaced = patch.patch_model(model, norm=False)
    assert [n for n, _ in replaced] == ["model.layers.0.mlp", "model.layers.1.mlp"]
    assert all(type(m).__name__ == "LlamaMLP" for _, m in replaced)
    assert isinstance(model.model.layers[1].mlp, bnn.GatedMLP)
    with torch.no_grad():
        after = model(ids).logits
    assert rel(after, before) < 1e-5
    with pytest.raises(ValueError, match="the model itself is an MLP"):
        patch.patch_model(replaced[0][1])
