"""End-to-end GPU test: a small random-initialised LlamaForCausalLM (bf16), patched with
blockfuse.patch_model vs unpatched — logits and greedy generations over a few hundred tokens.

Two bf16 models part ways at near-ties of the logits, so exact token equality is reported, not
required. What is required is judged against the same model in fp32: the patched model's logits,
in a full forward pass and at every step of greedy decoding with the KV cache (one-row MLP calls),
must be no further from fp32 than the unpatched bf16 model's are on its own generation."""
import copy

import pytest

from conftest import require_gpu

torch, ops = require_gpu()
transformers = pytest.importorskip("transformers", reason="transformers is not installed: the Llama test needs it")
import blockfuse  # noqa: E402
from tensor_utils import rel  # noqa: E402

pytestmark = pytest.mark.gpu

PROMPT, NEW = 64, 256


@pytest.fixture(scope="module")
def models():
    cfg = transformers.LlamaConfig(
        vocab_size=1024, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024, hidden_act="silu",
        initializer_range=0.08,  # livelier than 0.02: fewer exact ties among random-model logits
        tie_word_embeddings=False)
    torch.manual_seed(0)
    ref = transformers.LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
    ref32 = copy.deepcopy(ref).float()
    patched = copy.deepcopy(ref)
    replaced = blockfuse.patch_model(patched)
    return ref, ref32, patched, replaced


@torch.no_grad()
def greedy(model, prompt, n):
    """Greedy decoding with the KV cache; returns (tokens [1, n], per-step logits [n, vocab])."""
    out = model(input_ids=prompt, use_cache=True)
    toks, logits = [], []
    for i in range(n):
        step = out.logits[:, -1].float()
        tok = step.argmax(-1, keepdim=True)
        toks.append(tok)
        logits.append(step[0])
        if i + 1 < n:
            out = model(input_ids=tok, past_key_values=out.past_key_values, use_cache=True)
    return torch.cat(toks, 1), torch.stack(logits)


def test_patch_replaces_every_mlp(models):
    ref, _, patched, replaced = models
    n = ref.config.num_hidden_layers
    assert [name for name, _ in replaced] == [x for i in range(n) for x in (f"model.layers.{i}", f"model.layers.{i}.mlp")]
    assert all(type(m).__name__ in ("LlamaMLP", "LlamaDecoderLayer") for _, m in replaced)
    assert all(isinstance(layer.mlp, blockfuse.nn.GatedMLP) for layer in patched.model.layers)
    assert all(type(layer.mlp).__name__ == "LlamaMLP" for layer in ref.model.layers)


def test_logits_patched_vs_unpatched(models):
    ref, ref32, patched, _ = models
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, ref.config.vocab_size, (2, 320), device="cuda", generator=g)
    with torch.no_grad():
        l_ref, l_32, l_p = ref(ids).logits, ref32(ids).logits, patched(ids).logits
    e_p, e_ref = rel(l_p, l_32), rel(l_ref, l_32)
    assert e_p <= 1.25 * e_ref + 2e-3, f"patched {e_p:.3e} vs unpatched {e_ref:.3e} (relative to fp32)"
    assert rel(l_p, l_ref) < 5e-2
    agree = (l_p.argmax(-1) == l_32.argmax(-1)).float().mean().item()
    agree_ref = (l_ref.argmax(-1) == l_32.argmax(-1)).float().mean().item()
    print(f"prefill logits vs fp32: patched rel {e_p:.3e}, unpatched rel {e_ref:.3e}; patched vs unpatched "
          f"rel {rel(l_p, l_ref):.3e} max {(l_p.float() - l_ref.float()).abs().max().item():.4f}; "
          f"argmax agreement with fp32 {agree:.3f} vs {agree_ref:.3f}")
    assert agree >= agree_ref - 0.03, f"argmax agreement with fp32: patched {agree:.3f}, unpatched {agree_ref:.3f}"


def test_greedy_generation_patched_vs_unpatched(models):
    ref, ref32, patched, _ = models
    g = torch.Generator(device="cuda").manual_seed(2)
    prompt = torch.randint(0, ref.config.vocab_size, (1, PROMPT), device="cuda", generator=g)
    toks_p, steps_p = greedy(patched, prompt, NEW)
    toks_u, steps_u = greedy(ref, prompt, NEW)
    same = (toks_p == toks_u)[0]
    first_diff = int((~same).nonzero()[0]) if not bool(same.all()) else NEW
    assert toks_p.shape == (1, NEW) and bool(((toks_p >= 0) & (toks_p < ref.config.vocab_size)).all())

    def decode_error(toks, steps):
        """How far a model's decode-time logits (KV cache, one token a step) are from the fp32
        model's, teacher-forced on the same tokens: (relative error, max abs difference)."""
        seq = torch.cat((prompt, toks), 1)
        with torch.no_grad():
            l32 = ref32(seq).logits[0, PROMPT - 1:-1].float()  # the logits that chose toks[0..NEW-1]
        return rel(steps, l32), (steps - l32).abs().max().item()

    rel_p, max_p = decode_error(toks_p, steps_p)
    rel_u, max_u = decode_error(toks_u, steps_u)
    msg = (f"decode logits vs fp32 over {NEW} greedy steps: patched rel {rel_p:.3e} max {max_p:.4f}, "
           f"unpatched rel {rel_u:.3e} max {max_u:.4f}; {first_diff}/{NEW} tokens identical")
    print(msg)
    # The fused MLP must keep decoding (M = 1 rows, KV cache) within Hugging Face's own bf16 noise.
    assert rel_p <= 1.25 * rel_u + 2e-3, msg
    assert max_p <= 2 * max_u + 0.02, msg


def test_hf_generate_runs_patched(models):
    _, _, patched, _ = models
    prompt = torch.randint(0, patched.config.vocab_size, (2, 16), device="cuda")
    out = patched.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=24,
                           do_sample=False, pad_token_id=0)
    assert out.shape[0] == 2 and 16 < out.shape[1] <= 40
    assert torch.equal(out[:, :16], prompt)
