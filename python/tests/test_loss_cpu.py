"""CPU tests of blockfuse.loss (no GPU, no compiled extension needed): linear_cross_entropy's loss and
gradients against F.cross_entropy of the materialised logits (fp64 from the same inputs), over chunk
sizes that split the rows unevenly, ignored rows, both reductions and Hugging Face's
num_items_in_batch, frozen operands, a bad label (NaN, not a silent value), argument errors; and
patch_model(loss=True) on tiny random CausalLMs: the same loss and gradients as the unpatched model,
no logits in training, the original forward in eval and without labels, refusals before anything
changes. Skipped without torch or transformers."""
import copy

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: these tests need it (CPU is enough)")
from blockfuse import loss as bloss  # noqa: E402
from tensor_utils import rel  # noqa: E402

V, K = 50, 16


def operands(dtype, rows=(3, 13), seed=0, ignored=4):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(*rows, K, generator=g).to(dtype).requires_grad_()
    w = (torch.randn(V, K, generator=g) * 0.3).to(dtype).requires_grad_()
    lbl = torch.randint(0, V, rows, generator=g)
    lbl.view(-1)[:ignored] = -100
    return h, w, lbl


def reference(h, w, lbl, reduction, num_items=None):
    h64, w64 = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    red = "sum" if reduction == "sum" or num_items is not None else "mean"
    loss = torch.nn.functional.cross_entropy((h64 @ w64.t()).reshape(-1, V), lbl.reshape(-1), ignore_index=-100,
                                             reduction=red)
    if num_items is not None:
        loss = loss / num_items
    return loss, h64, w64


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("reduction,num_items", [("mean", None), ("sum", None), ("mean", 23)])
@pytest.mark.parametrize("chunk", [None, 1, 5, 64])
def test_matches_cross_entropy_of_the_logits(dtype, tol, reduction, num_items, chunk):
    h, w, lbl = operands(dtype)
    got = bloss.linear_cross_entropy(h, w, lbl, reduction=reduction, num_items_in_batch=num_items, chunk_rows=chunk)
    got.backward(torch.tensor(1.7))
    want, h64, w64 = reference(h, w, lbl, reduction, num_items)
    (want * 1.7).backward()
    assert got.dtype == torch.float32 and got.dim() == 0
    assert abs(got.item() - want.item()) <= tol * abs(want.item())
    assert rel(h.grad, h64.grad) < tol and rel(w.grad, w64.grad) < tol
    assert h.grad.dtype == dtype and w.grad.dtype == dtype


def test_frozen_operands_and_int32_labels():
    h, w, lbl = operands(torch.float32)
    w.requires_grad_(False)
    bloss.linear_cross_entropy(h, w, lbl.to(torch.int32), chunk_rows=7).backward()
    want, h64, _ = reference(h, w, lbl, "mean")
    want.backward()
    assert w.grad is None and rel(h.grad, h64.grad) < 1e-5
    h, w, lbl = operands(torch.float32)
    h.requires_grad_(False)
    bloss.linear_cross_entropy(h, w, lbl).backward()
    assert h.grad is None and w.grad is not None


def test_every_row_ignored_is_zero():
    h, w, lbl = operands(torch.float32, ignored=39)
    loss = bloss.linear_cross_entropy(h, w, lbl)
    loss.backward()
    assert loss.item() == 0.0 and h.grad.abs().sum().item() == 0.0 and w.grad.abs().sum().item() == 0.0


def test_a_bad_label_is_nan_not_a_value():
    h, w, lbl = operands(torch.float32, ignored=0)
    lbl.view(-1)[5] = V + 3
    loss = bloss.linear_cross_entropy(h, w, lbl, chunk_rows=4)
    loss.backward()
    assert torch.isnan(loss)
    assert torch.isnan(h.grad.view(-1, K)[5]).all()
    assert torch.isfinite(h.grad.view(-1, K)[6]).all()


def test_argument_errors():
    h, w, lbl = operands(torch.float32)
    for kwargs, word in (({"reduction": "none"}, "reduction"), ({"chunk_rows": 0}, "chunk_rows")):
        with pytest.raises(ValueError, match=word):
            bloss.linear_cross_entropy(h, w, lbl, **kwargs)
    with pytest.raises(ValueError, match="labels"):
        bloss.linear_cross_entropy(h, w, lbl[:, :5])
    with pytest.raises(ValueError, match="labels"):
        bloss.linear_cross_entropy(h, w, lbl.float())
    with pytest.raises(ValueError, match="weight"):
        bloss.linear_cross_entropy(h, w[:, :8], lbl)
    with pytest.raises(ValueError, match="dtype"):
        bloss.linear_cross_entropy(h, w.detach().double(), lbl)


# ---- patch_model(loss=True) ----------------------------------------------------------------------

def _tiny(family="llama", **extra):
    pytest.importorskip("transformers", reason="transformers is not installed")
    from hf_models import tiny_model
    return tiny_model(family, **extra)


@pytest.mark.parametrize("family", ["llama", "qwen3", "mistral"])
def test_patched_loss_matches_the_model(family):
    from blockfuse import patch
    model = _tiny(family).train()
    ref = copy.deepcopy(model)
    changed = patch.patch_model(model, mlp=False, norm=False, loss=True)
    assert changed == [("", model)]
    ids = torch.randint(0, 256, (2, 21))
    labels = ids.clone()
    labels[0, :5] = -100
    out = model(input_ids=ids, labels=labels)
    want = ref(input_ids=ids, labels=labels)
    assert out.logits is None and rel(out.loss, want.loss) < 1e-5
    out.loss.backward()
    want.loss.backward()
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        assert rel(p.grad, q.grad) < 1e-4, n
    # Gradient accumulation's convention (num_items_in_batch: a sum over it, not a mean).
    out = model(input_ids=ids, labels=labels, num_items_in_batch=torch.tensor(50))
    want = ref(input_ids=ids, labels=labels, num_items_in_batch=torch.tensor(50))
    assert rel(out.loss, want.loss) < 1e-5
    # No labels, or no gradient: the original forward, logits and all.
    with torch.no_grad():
        got, mean = model(input_ids=ids, labels=labels), ref(input_ids=ids, labels=labels)
        assert got.logits is not None and rel(got.loss, mean.loss) < 1e-5
    assert model(input_ids=ids).logits.shape == (2, 21, 256)
    from blockfuse.loss import unpatch_loss
    unpatch_loss(model)
    assert "forward" not in model.__dict__ and model(input_ids=ids, labels=labels).logits is not None


def test_patch_loss_refusals_leave_the_model_unchanged():
    from blockfuse import patch
    model = _tiny("gemma2", final_logit_softcapping=30.0).train()
    with pytest.raises(ValueError, match="soft-caps"):
        patch.patch_model(model, mlp=False, norm=False, loss=True)
    assert "forward" not in model.__dict__
    with pytest.raises(ValueError, match="ForCausalLM"):
        patch.patch_model(model.model, mlp=False, norm=False, loss=True)
    model = _tiny("llama")
    patch.patch_model(model, mlp=False, norm=False, loss=True)
    with pytest.raises(ValueError, match="already"):
        patch.patch_model(model, mlp=False, norm=False, loss=True)
    with pytest.raises(ValueError, match="nothing to do"):
        patch.patch_model(model, mlp=False, norm=False)


def test_patched_loss_with_tied_embeddings():
    """lm_head sharing the embedding's weight (tie_word_embeddings): the weight's gradient is the sum
    of both uses, as in the unpatched model."""
    from blockfuse import patch
    model = _tiny("llama", tie_word_embeddings=True).train()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ref = copy.deepcopy(model)
    patch.patch_model(model, mlp=False, norm=False, loss=True)
    ids = torch.randint(0, 256, (2, 17))
    out, want = model(input_ids=ids, labels=ids), ref(input_ids=ids, labels=ids)
    assert rel(out.loss, want.loss) < 1e-5
    out.loss.backward()
    want.loss.backward()
    assert rel(model.lm_head.weight.grad, ref.lm_head.weight.grad) < 1e-4


def test_default_chunk_rows():
    """The default chunk: 1 GiB of logits in the dtype on the kernel path (one chunk at 4096 Llama-3
    tokens), 256 MiB of fp32 on the torch path; never more rows than there are, never fewer than 1."""
    assert bloss._chunk_rows(16384, 128256, 2, True) == (1 << 30) // (2 * 128256) == 4185
    assert bloss._chunk_rows(4096, 128256, 2, True) == 4096
    assert bloss._chunk_rows(16384, 128256, 2, False) == (256 << 20) // (4 * 128256) == 523
    assert bloss._chunk_rows(3, 128256, 2, False) == 3
    assert bloss._chunk_rows(100, 1 << 40, 2, True) == 1


def test_gradient_one_hands_over_the_weight_gradient_once():
    """loss.backward() (gradient 1) returns the forward's weight gradient unscaled: the same values as
    a scaled backward by 1.0 through a second loss; a second backward through the same graph after it
    is refused with an error naming the function, not answered with a gradient that may have changed."""
    torch.manual_seed(3)
    h = torch.randn(9, 16, requires_grad=True)
    w = torch.randn(40, 16, requires_grad=True)
    lbl = torch.randint(0, 40, (9,))
    bloss.linear_cross_entropy(h, w, lbl, chunk_rows=4).backward()
    g_one, h_one = w.grad.clone(), h.grad.clone()
    w.grad = h.grad = None
    bloss.linear_cross_entropy(h, w, lbl, chunk_rows=4).backward(torch.tensor(1.0) * 1.5)
    assert torch.allclose(w.grad, g_one * 1.5, rtol=1e-5, atol=1e-6)
    assert torch.allclose(h.grad, h_one * 1.5, rtol=1e-5, atol=1e-6)
    loss = bloss.linear_cross_entropy(h, w, lbl, chunk_rows=4)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="linear_cross_entropy"):
        loss.backward()
