"""GPU tests of training through patched models: a random tiny Llama and Gemma-2 (bf16), patched
(fused MLPs, fused norms) and unpatched copies of one model, take the same AdamW steps on the same
batches; the losses stay within bf16 noise of each other and the first step's gradients agree with
the unpatched model's as closely as the unpatched bf16 model's agree with its fp32 twin."""
import copy

import pytest

from conftest import require_gpu

torch, ops = require_gpu()
transformers = pytest.importorskip("transformers", reason="transformers is not installed")
import blockfuse  # noqa: E402
from tensor_utils import rel  # noqa: E402

pytestmark = pytest.mark.gpu


def _model(kind):
    torch.manual_seed(0)
    common = dict(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64)
    if kind == "llama":
        cfg = transformers.LlamaConfig(**common)
        cls = transformers.LlamaForCausalLM
    else:
        cfg = transformers.Gemma2Config(sliding_window=32, query_pre_attn_scalar=64, **common)
        cls = transformers.Gemma2ForCausalLM
    cfg._attn_implementation = "eager"
    model = cls(cfg).to("cuda")
    with torch.no_grad():  # norm gains away from their init so that they matter
        for n, p in model.named_parameters():
            if "norm" in n and p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def _mlp_names(grads):
    """A patched model's gradients under the unpatched model's names: GatedMLP's interleaved
    `w_gate_up` split back into gate_proj / up_proj, `down.weight` as down_proj.weight."""
    out = {}
    for n, g in grads.items():
        if n.endswith("mlp.w_gate_up"):
            gate, up = g[1::2], g[0::2]  # interleaved rows: 2j = up_j, 2j + 1 = gate_j
            out[n[:-len("w_gate_up")] + "gate_proj.weight"] = gate
            out[n[:-len("w_gate_up")] + "up_proj.weight"] = up
        elif n.endswith("mlp.down.weight"):
            out[n[:-len("down.weight")] + "down_proj.weight"] = g
        else:
            out[n] = g
    return out


def _grads(model, ids):
    model.zero_grad(set_to_none=True)
    model(ids, labels=ids).loss.backward()
    return {n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("kind", ("llama", "gemma2"))
def test_patched_model_trains_like_the_unpatched(kind):
    fp32 = _model(kind).train()
    base = copy.deepcopy(fp32).to(torch.bfloat16)
    patched = copy.deepcopy(base)
    assert blockfuse.patch_model(patched)  # in place; returns what it replaced
    patched.train()
    g = torch.Generator(device="cuda").manual_seed(1)
    batches = [torch.randint(0, 256, (2, 48), device="cuda", generator=g) for _ in range(4)]

    # First step's gradients: the patched model as close to fp32 as the unpatched bf16 model is.
    want = _grads(fp32, batches[0])
    got_base, got_patched = _grads(base, batches[0]), _mlp_names(_grads(patched, batches[0]))
    names = [n for n in want if n in got_base]
    assert set(names) <= set(got_patched), f"patched gradients missing: {sorted(set(names) - set(got_patched))}"
    assert any(n.endswith("mlp.gate_proj.weight") for n in names)
    err_base = {n: rel(got_base[n], want[n]) for n in names}
    err_patched = {n: rel(got_patched[n], want[n]) for n in names}
    mean_base, mean_patched = (sum(e.values()) / len(names) for e in (err_base, err_patched))
    assert mean_patched <= 1.5 * mean_base + 1e-3, f"gradients: patched {mean_patched:.3e} vs unpatched {mean_base:.3e}"
    worst = max(names, key=lambda n: err_patched[n] - 2 * err_base[n])
    assert err_patched[worst] <= 2 * err_base[worst] + 5e-3, \
        f"{worst}: patched {err_patched[worst]:.3e} vs unpatched {err_base[worst]:.3e}"

    losses = {}
    for name, model in (("base", base), ("patched", patched)):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses[name] = []
        for ids in batches:
            opt.zero_grad(set_to_none=True)
            loss = model(ids, labels=ids).loss
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    for lb, lp in zip(losses["base"], losses["patched"]):
        assert abs(lb - lp) <= 0.02 * abs(lb) + 1e-2, f"losses diverge: {losses}"
    assert losses["patched"][-1] < losses["patched"][0], "the patched model did not learn"
