"""CPU tests of blockfuse.rope's Hugging Face patch (the fused op itself needs CUDA: test_rope.py):
patch_model(rope=True) hooks the rotary module and installs the dispatcher once per modeling file; a
patched model's marked tables on the CPU, and every unpatched model's tables, take the original
function (outputs bitwise equal to an unpatched copy); unpatch_rope removes the hooks; a model without
a rotary embedding is refused before anything changes; `applies` refuses what the kernel does not take."""
import copy
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
pytest.importorskip("transformers")
from blockfuse import ops  # noqa: E402

if not ops.available():
    pytest.skip(f"the blockfuse torch library is not built: {ops.load_error()}", allow_module_level=True)

from blockfuse import patch, rope as brope  # noqa: E402
from hf_models import tiny_model  # noqa: E402


def test_patch_hooks_marks_and_falls_back_on_cpu(monkeypatch):
    seen = []
    applies = brope.applies
    monkeypatch.setattr(brope, "applies", lambda *a, **k: seen.append(1) or applies(*a, **k))
    model = tiny_model("llama")
    ref = copy.deepcopy(model)
    other = copy.deepcopy(model)  # an unpatched model of the same family in the same process
    ids = torch.randint(0, 256, (2, 11))
    want = ref(input_ids=ids).logits
    changed = patch.patch_model(model, mlp=False, norm=False, rope=True)
    assert [n for n, _ in changed] == ["model.rotary_emb"]
    mod = sys.modules[type(model.model.layers[0].self_attn).__module__]
    assert hasattr(mod.apply_rotary_pos_emb, "_blockfuse_original")
    cos, sin = model.model.rotary_emb(torch.randn(2, 11, 64), torch.arange(11)[None].expand(2, -1))
    assert getattr(cos, brope._MARK, False) and getattr(sin, brope._MARK, False)
    cos2, _ = other.model.rotary_emb(torch.randn(2, 11, 64), torch.arange(11)[None].expand(2, -1))
    assert not getattr(cos2, brope._MARK, False)  # only the patched model's tables are marked
    seen.clear()
    assert torch.equal(model(input_ids=ids).logits, want)  # CPU: the original function ran
    assert len(seen) == 2  # the dispatcher saw the marked tables of both layers (and declined: CPU)
    seen.clear()
    assert torch.equal(other(input_ids=ids).logits, want)
    assert not seen  # unmarked tables go straight to the original
    # Patching again neither re-wraps the function nor hooks twice.
    fn = mod.apply_rotary_pos_emb
    assert patch.patch_model(model, mlp=False, norm=False, rope=True) == []
    assert mod.apply_rotary_pos_emb is fn
    brope.unpatch_rope(model)
    cos3, _ = model.model.rotary_emb(torch.randn(1, 3, 64), torch.arange(3)[None])
    assert not getattr(cos3, brope._MARK, False)


def test_model_without_rotary_is_refused_unchanged():
    lin = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises(ValueError, match=r"rope=True.*RotaryEmbedding"):
        patch.patch_model(lin, mlp=False, norm=False, rope=True)


def test_applies_refuses_what_the_kernel_does_not_take():
    x = torch.randn(1, 4, 3, 64, dtype=torch.bfloat16)
    c = torch.randn(1, 3, 64, dtype=torch.bfloat16)
    assert not brope.applies(x, c, c)  # CPU
    if torch.cuda.is_available():
        xc, cc = x.cuda(), c.cuda()
        assert brope.applies(xc, cc, cc)
        assert not brope.applies(xc, cc, cc, unsqueeze_dim=2)
        assert not brope.applies(xc.float(), cc.float(), cc.float())
        assert not brope.applies(xc[..., :48].contiguous(), cc[..., :48].contiguous(), cc[..., :48].contiguous())
        assert not brope.applies(xc, cc.requires_grad_(), cc)
