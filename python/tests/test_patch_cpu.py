"""CPU tests of blockfuse.patch_model (no GPU, no compiled extension needed): which modules it
patches and what it refuses, and the fused decoder-layer forward's arithmetic — run on CPU float32
models with the kernels stood in for by their plain-torch references — against the unpatched model.
Skipped without torch or transformers."""
import copy

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: these tests need it (CPU is enough)")
pytest.importorskip("transformers", reason="transformers is not installed")
from blockfuse import nn as bnn  # noqa: E402
from blockfuse import add_rmsnorm as norm_ops  # noqa: E402
from blockfuse import ops, patch  # noqa: E402
from hf_models import FAMILIES, tiny_model  # noqa: E402
from tensor_utils import rel  # noqa: E402


@pytest.fixture
def kernels_as_references(monkeypatch):
    """Routes the fused forward's kernel calls to the plain-torch references, on any device/dtype."""
    monkeypatch.setattr(patch, "_kernels_take", lambda h: True)
    monkeypatch.setattr(norm_ops, "_RMSNORM", ops.rmsnorm_reference)
    monkeypatch.setattr(norm_ops, "_ADD_RMSNORM", lambda x, r, w, eps, gemma: ops.add_rmsnorm_reference(x, r, w, eps, gemma))


@pytest.mark.parametrize("family", FAMILIES)
def test_fused_forward_matches_the_model(family, kernels_as_references):
    model = tiny_model(family)
    ref = copy.deepcopy(model)
    ids = torch.randint(0, 256, (2, 21))
    changed = patch.patch_model(model)
    n = model.config.num_hidden_layers
    names = [name for name, _ in changed]
    assert names == [x for i in range(n) for x in (f"model.layers.{i}", f"model.layers.{i}.mlp")]
    assert all(isinstance(layer.mlp, bnn.GatedMLP) for layer in model.model.layers)
    assert all("_blockfuse_spec" in layer.__dict__ for layer in model.model.layers)
    assert model.model.layers[0]._blockfuse_spec.gemma == family.startswith("gemma")
    with torch.no_grad():
        got, want = model(ids).logits, ref(ids).logits
    assert rel(got, want) < 1e-5, family
    # incremental decoding through the cache (DynamicCache) matches too
    with torch.no_grad():
        out = model.generate(ids[:1, :8], max_new_tokens=6, do_sample=False, pad_token_id=0)
        out_ref = ref.generate(ids[:1, :8], max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(out, out_ref)


def test_fallback_without_kernels_is_the_original_forward():
    model = tiny_model("llama")
    ref = copy.deepcopy(model)
    patch.patch_model(model, mlp=False)
    ids = torch.randint(0, 256, (1, 9))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref(ids).logits)  # CPU float32: the original forward runs


def test_norm_only_and_mlp_only():
    model = tiny_model("qwen3")
    changed = patch.patch_model(model, mlp=False)
    assert [n for n, _ in changed] == ["model.layers.0", "model.layers.1"]
    changed = patch.patch_model(model, norm=False)
    assert [n for n, _ in changed] == ["model.layers.0.mlp", "model.layers.1.mlp"]
    with pytest.raises(ValueError, match="nothing in Qwen3ForCausalLM matched"):
        patch.patch_model(model)  # patched already
    patch.unpatch_layer(model.model.layers[0])
    assert "forward" not in model.model.layers[0].__dict__


def test_nothing_matched_is_an_error():
    with pytest.raises(ValueError, match="nothing in Sequential matched"):
        patch.patch_model(torch.nn.Sequential(torch.nn.Linear(8, 8)))
    with pytest.raises(ValueError, match="nothing to do"):
        patch.patch_model(torch.nn.Sequential(), mlp=False, norm=False)


def test_attention_switches_the_backend():
    model = tiny_model("llama")
    patch.patch_model(model, mlp=False, norm=False, attention=True)
    assert model.config._attn_implementation == "blockfuse"
    with pytest.raises(ValueError, match="attention=True needs a transformers model"):
        patch.patch_model(torch.nn.Sequential(torch.nn.Linear(8, 8)), attention=True)


def _assert_unchanged(model, before):
    assert [type(m).__name__ for m in model.modules()] == before
    assert not any("_blockfuse_spec" in m.__dict__ for m in model.modules())


def test_refuses_before_changing_anything():
    # an MLP the kernel cannot take (U not a multiple of 8) in the last layer: nothing changes
    model = tiny_model("llama", layers=2)
    last = model.model.layers[1].mlp
    last.gate_proj = torch.nn.Linear(64, 100, bias=False)
    last.up_proj = torch.nn.Linear(64, 100, bias=False)
    last.down_proj = torch.nn.Linear(100, 64, bias=False)
    before = [type(m).__name__ for m in model.modules()]
    with pytest.raises(ValueError, match="multiples of 8"):
        patch.patch_model(model)
    _assert_unchanged(model, before)
    # a norm that is not an RMSNorm of the expected kind
    model = tiny_model("llama")
    model.model.layers[1].post_attention_layernorm.variance_epsilon = 0.5  # still eps>0, but...
    model.model.layers[1].post_attention_layernorm.forward = lambda x: x * 2
    before = [type(m).__name__ for m in model.modules()]
    with pytest.raises(ValueError, match="does not compute"):
        patch.patch_model(model)
    _assert_unchanged(model, before)


def test_refuses_an_unknown_layer_forward():
    class LlamaDecoderLayer(torch.nn.Module):  # same name, different forward
        def forward(self, hidden_states, **kwargs):
            h = self.input_layernorm(hidden_states)
            if kwargs:
                h = h * 2
            return h

    with pytest.raises(ValueError, match="not the forward blockfuse knows"):
        patch.check_layer_forward(LlamaDecoderLayer, patch.LLAMA)


def test_phi3_stacked_gate_up():
    from transformers.models.phi3.modeling_phi3 import Phi3Config, Phi3MLP
    torch.manual_seed(0)
    mlp = Phi3MLP(Phi3Config(hidden_size=64, intermediate_size=176, hidden_act="silu")).eval()
    ours = bnn.GatedMLP.from_hf(mlp)
    w = mlp.gate_up_proj.weight
    assert torch.equal(ours.w_gate_up[1::2], w[:176]) and torch.equal(ours.w_gate_up[0::2], w[176:])
    x = torch.randn(3, 5, 64)
    with torch.no_grad():
        assert rel(ours(x), mlp(x)) < 1e-5


def test_gated_mlp_hook_check():
    """GatedMLP keeps the two-module path when its down projection carries any hook: its own forward,
    pre-forward or backward hooks, or a global module hook."""
    down = torch.nn.Linear(8, 4)
    assert not bnn._has_hooks(down)
    for register in (down.register_forward_hook, down.register_forward_pre_hook, down.register_full_backward_hook):
        handle = register(lambda *_: None)
        assert bnn._has_hooks(down)
        handle.remove()
        assert not bnn._has_hooks(down)
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *_: None)
    try:
        assert bnn._has_hooks(down)
    finally:
        handle.remove()
    assert not bnn._has_hooks(down)
