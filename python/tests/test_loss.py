"""GPU tests of blockfuse.loss.linear_cross_entropy at a language model's proportions (bf16, a
vocabulary of 32000 split over several chunks, ignored rows): loss and gradients against fp64
F.cross_entropy of the same inputs, and the memory it saves against the materialised logits."""
import pytest

from conftest import require_gpu
from tensor_utils import rel  # noqa: E402

torch, ops = require_gpu()
pytestmark = pytest.mark.gpu

from blockfuse import loss as bloss  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_matches_fp64_over_chunks(dtype):
    torch.manual_seed(0)
    n, k, v = 1000, 256, 32000
    h = torch.randn(n, k, device="cuda").to(dtype).requires_grad_()
    w = (torch.randn(v, k, device="cuda") / k ** 0.5).to(dtype).requires_grad_()
    lbl = torch.randint(0, v, (n,), device="cuda")
    lbl[::7] = -100
    loss = bloss.linear_cross_entropy(h, w, lbl, chunk_rows=300)
    loss.backward()
    h64, w64 = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    want = torch.nn.functional.cross_entropy(h64 @ w64.t(), lbl, ignore_index=-100)
    want.backward()
    assert abs(loss.item() - want.item()) < 1e-3 * want.item()
    assert rel(h.grad, h64.grad) < 2e-2 and rel(w.grad, w64.grad) < 2e-2


def test_peak_memory_is_a_chunk_not_the_logits():
    """The eager loss holds [n, V] logits in fp32 several times over; this holds one chunk."""
    torch.manual_seed(0)
    n, k, v = 4096, 512, 32000
    h = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(v, k, device="cuda") / k ** 0.5).to(torch.bfloat16).requires_grad_()
    lbl = torch.randint(0, v, (n,), device="cuda")
    logits_fp32 = n * v * 4

    def peak(fn):
        h.grad = w.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn().backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    eager = peak(lambda: torch.nn.functional.cross_entropy((h @ w.t()).float(), lbl))
    ours = peak(lambda: bloss.linear_cross_entropy(h, w, lbl, chunk_rows=512))
    assert eager > 2 * logits_fp32 and ours < logits_fp32 / 2, (eager, ours)


def test_kernel_op_opcheck_and_rows():
    """blockfuse::cross_entropy_fwd_bwd_ directly: opcheck, an ignored row (0) and a bad label (NaN)."""
    logits = torch.randn(6, 1000, device="cuda", dtype=torch.bfloat16)
    labels = torch.tensor([1, -100, 999, 5000, 0, 7], device="cuda")
    scale = torch.tensor(0.25, device="cuda")
    # opcheck compares outputs with assert_close, to which the bad label's NaN row never equals itself.
    torch.library.opcheck(torch.ops.blockfuse.cross_entropy_fwd_bwd_.default,
                          (logits.clone(), torch.where(labels == 5000, 3, labels), -100, scale))
    x = logits.clone()
    loss = torch.ops.blockfuse.cross_entropy_fwd_bwd_(x, labels, -100, scale)
    want = torch.nn.functional.cross_entropy(logits.float(), labels.clamp(0, 999), reduction="none")
    assert loss[1].item() == 0.0 and torch.isnan(loss[3]) and (x[1] == 0).all() and torch.isnan(x[3].float()).all()
    keep = torch.tensor([0, 2, 4, 5], device="cuda")
    assert rel(loss[keep], want[keep]) < 1e-5
    g = (torch.softmax(logits.float(), -1) - torch.nn.functional.one_hot(labels.clamp(0, 999), 1000)) * 0.25
    assert rel(x[keep], g[keep]) < 8e-3


def test_patched_causal_lm_on_the_gpu():
    """patch_model(loss=True) on a tiny bf16 Llama on the GPU (the kernel path): the loss and the
    gradients of the unpatched model, within bf16 rounding."""
    pytest.importorskip("transformers")
    import copy
    from hf_models import tiny_model
    from blockfuse import patch
    model = tiny_model("llama", vocab=1000).to("cuda", torch.bfloat16).train()
    ref = copy.deepcopy(model)
    patch.patch_model(model, mlp=False, norm=False, loss=True)
    ids = torch.randint(0, 1000, (2, 37), device="cuda")
    labels = ids.clone()
    labels[1, :9] = -100
    out, want = model(input_ids=ids, labels=labels), ref(input_ids=ids, labels=labels)
    assert out.logits is None and abs(out.loss.item() - want.loss.item()) < 1e-2 * want.loss.item()
    out.loss.backward()
    want.loss.backward()
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        assert rel(p.grad, q.grad) < 3e-2, n
