"""GPU tests of blockfuse.patch_model on tiny random-initialised Llama, Qwen3, Phi-3, Gemma-2 and
Gemma-3 models (bf16, from their configs): patched and unpatched logits are both judged against an
fp32 copy of the model (the patched ones no further, within a small margin), generate() with the
default DynamicCache, and generate() with a StaticCache under torch.compile(fullgraph=True)."""
import copy

import pytest

from conftest import require_gpu

torch, ops = require_gpu()
transformers = pytest.importorskip("transformers", reason="transformers is not installed")
import blockfuse  # noqa: E402
from hf_models import tiny_model  # noqa: E402
from tensor_utils import rel  # noqa: E402

pytestmark = pytest.mark.gpu

FAMILIES = ("llama", "qwen3", "phi3", "gemma2", "gemma3")


def build(family):
    m32 = tiny_model(family, hidden=256, inter=704, layers=3, vocab=512, initializer_range=0.08).cuda()
    ref = copy.deepcopy(m32).to(torch.bfloat16)
    patched = copy.deepcopy(ref)
    changed = blockfuse.patch_model(patched)
    return m32, ref, patched, changed


@pytest.mark.parametrize("family", FAMILIES)
def test_patched_logits_no_further_from_fp32(family):
    m32, ref, patched, changed = build(family)
    n = m32.config.num_hidden_layers
    assert [name for name, _ in changed] == [x for i in range(n) for x in (f"model.layers.{i}", f"model.layers.{i}.mlp")]
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, 512, (2, 77), device="cuda", generator=g)
    with torch.no_grad():
        l32, lu, lp = m32(ids).logits, ref(ids).logits, patched(ids).logits
    e_u, e_p = rel(lu, l32), rel(lp, l32)
    print(f"{family}: logits vs fp32: unpatched {e_u:.3e}, patched {e_p:.3e}")
    assert e_p <= 1.1 * e_u + 1e-3, f"{family}: patched {e_p:.3e} vs unpatched {e_u:.3e} (relative to fp32)"


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_dynamic_cache(family):
    m32, ref, patched, _ = build(family)
    prompt = torch.randint(0, 512, (2, 12), device="cuda")
    with torch.no_grad():
        out = patched.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=16, do_sample=False,
                               pad_token_id=0, output_logits=True, return_dict_in_generate=True)
        want = ref.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=1, do_sample=False,
                            pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    assert out.sequences.shape == (2, 28) and torch.equal(out.sequences[:, :12], prompt)
    assert rel(out.logits[0], want.logits[0]) < 3e-2  # the first step: the same prompt, bf16 noise apart


@pytest.mark.parametrize("family", ("llama", "gemma2"))
def test_generate_static_cache_compiled(family):
    torch._dynamo.reset()
    _, ref, patched, _ = build(family)
    prompt = torch.randint(0, 512, (1, 12), device="cuda")
    kw = dict(attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=False, pad_token_id=0,
              output_logits=True, return_dict_in_generate=True, cache_implementation="static")
    with torch.no_grad():
        eager = patched.generate(prompt, **kw)
        patched.forward = torch.compile(patched.forward, fullgraph=True)
        compiled = patched.generate(prompt, **kw)
    assert compiled.sequences.shape == (1, 20)
    assert rel(compiled.logits[0], eager.logits[0]) < 3e-2


@pytest.mark.parametrize("family", ("llama", "qwen3", "gemma2", "gemma3"))
def test_attention_backend_logits_no_further_from_fp32(family):
    """patch_model(attention=True): blockfuse's attention kernel in every layer, beside the fused
    norms and MLPs; the logits no further from the fp32 model than the unpatched bf16 model's."""
    m32 = tiny_model(family, hidden=256, inter=704, layers=3, vocab=512, initializer_range=0.08).cuda()
    ref = copy.deepcopy(m32).to(torch.bfloat16)
    patched = copy.deepcopy(ref)
    blockfuse.patch_model(patched, attention=True)
    assert patched.config._attn_implementation == "blockfuse"
    ids = torch.randint(0, 512, (2, 77), device="cuda", generator=torch.Generator(device="cuda").manual_seed(2))
    with torch.no_grad():
        l32, lu, lp = m32(ids).logits, ref(ids).logits, patched(ids).logits
        out = patched.generate(ids[:, :12], attention_mask=torch.ones_like(ids[:, :12]), max_new_tokens=8,
                               do_sample=False, pad_token_id=0)
    e_u, e_p = rel(lu, l32), rel(lp, l32)
    print(f"{family} + attention: logits vs fp32: unpatched {e_u:.3e}, patched {e_p:.3e}")
    assert e_p <= 1.15 * e_u + 1e-3, f"{family}: patched {e_p:.3e} vs unpatched {e_u:.3e} (relative to fp32)"
    assert out.shape == (2, 20)
