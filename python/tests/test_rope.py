"""GPU tests of blockfuse.ops.rope and the patch behind patch_model(rope=True): the op against fp64
Hugging Face apply_rotary_pos_emb on Hugging Face's transposed query layout (forward, and the
gradient through autograd), shared and per-sequence tables, both dtypes, D 64/128/256, the output's
strides; opcheck; a patched tiny bf16 Llama's loss and gradients against the unpatched model's, with
the fused op seen to run (its call count), while an unpatched model in the same process never takes it."""
import copy

import pytest

from conftest import require_gpu
from tensor_utils import rel  # noqa: E402

torch, ops = require_gpu()
pytestmark = pytest.mark.gpu

from blockfuse import patch, rope as brope  # noqa: E402


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def hf_rope(x, cos, sin):
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("per_sequence", [False, True])
def test_op_matches_fp64_forward_and_gradient(dtype, d, per_sequence):
    torch.manual_seed(d)
    b, s, h = 2, 37, 3
    x = torch.randn(b, s, h, d, device="cuda").to(dtype).transpose(1, 2).requires_grad_()  # HF's q layout
    tb = b if per_sequence else 1
    ang = torch.randn(tb, s, d // 2, device="cuda")
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(dtype)
    y = ops.rope(x, cos, sin)
    want = hf_rope(x.detach().double(), cos.double(), sin.double())
    assert y.stride() == x.stride()
    assert rel(y, want) < 4e-3
    g = torch.randn_like(y)
    (gx,) = torch.autograd.grad(y, x, g, retain_graph=True)  # y's graph again below
    xd = x.detach().double().requires_grad_()
    (want_gx,) = torch.autograd.grad(hf_rope(xd, cos.double(), sin.double()), xd, g.double())
    assert rel(gx, want_gx) < 4e-3
    (gsum,) = torch.autograd.grad(y.sum(), x)  # an expanded incoming gradient
    assert rel(gsum, torch.autograd.grad(hf_rope(xd, cos.double(), sin.double()).sum(), xd)[0]) < 4e-3


def test_opcheck():
    x = torch.randn(2, 5, 4, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    c = torch.randn(1, 5, 64, device="cuda", dtype=torch.bfloat16)
    torch.library.opcheck(torch.ops.blockfuse.rope.default, (x, c, c.flip(-1).contiguous(), False))


def test_patched_llama_trains_like_the_unpatched(monkeypatch):
    pytest.importorskip("transformers")
    from hf_models import tiny_model
    # hidden 256 over 4 heads: head dim 64, one the kernel takes (the default tiny model's 16 is not)
    model = tiny_model("llama", hidden=256, vocab=1000).to("cuda", torch.bfloat16).train()
    ref = copy.deepcopy(model)
    calls = []
    original = brope._ROPE
    monkeypatch.setattr(brope, "_ROPE", lambda *a: calls.append(1) or original(*a))
    patch.patch_model(model, mlp=False, norm=False, rope=True)
    ids = torch.randint(0, 1000, (2, 29), device="cuda")
    out, want = model(input_ids=ids, labels=ids), ref(input_ids=ids, labels=ids)
    assert len(calls) == 2 * 2  # q and k of both layers
    assert abs(out.loss.item() - want.loss.item()) < 1e-2 * want.loss.item()
    out.loss.backward()
    want.loss.backward()
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        assert rel(p.grad, q.grad) < 3e-2, n
    calls.clear()
    ref(input_ids=ids)  # the unpatched model in the same process: the original function
    assert not calls
