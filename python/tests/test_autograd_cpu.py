"""CPU tests of the backward of rmsnorm / add_rmsnorm / swiglu (no GPU): the plain-torch backward
formulas the kernels implement (rmsnorm_backward_reference, swiglu_backward_reference) against fp64
torch autograd of the forward references, and — where the compiled library is loaded — the autograd
registration end to end on meta tensors (the ops' fake implementations): forward + backward give
gradients of the right shapes and dtypes for every requires_grad pattern, and none where none is
needed. Skipped without torch."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: these tests need it (CPU is enough)")
from blockfuse import ops  # noqa: E402
from blockfuse._common import has_op  # noqa: E402


@pytest.mark.parametrize("gemma", [False, True])
@pytest.mark.parametrize("with_dres", [False, True])
def test_norm_backward_formula_matches_autograd(gemma, with_dres):
    torch.manual_seed(0)
    x = torch.randn(2, 5, 24, dtype=torch.float64, requires_grad=True)
    res = torch.randn(2, 5, 24, dtype=torch.float64, requires_grad=True)
    w = torch.randn(24, dtype=torch.float64, requires_grad=True)
    dy, dr = torch.randn(2, 5, 24, dtype=torch.float64), torch.randn(2, 5, 24, dtype=torch.float64)
    h = x + res
    # The forward in fp64 (rmsnorm_reference computes in fp32).
    wf = w + 1.0 if gemma else w
    out = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5) * wf
    loss = (out * dy).sum() + ((h * dr).sum() if with_dres else 0)
    loss.backward()
    dh, dw = ops.rmsnorm_backward_reference(dy.double(), h.detach(), w.detach(), 1e-5, gemma,
                                            dr if with_dres else None)
    assert torch.allclose(dh.double(), x.grad, atol=1e-5) and torch.allclose(dh.double(), res.grad, atol=1e-5)
    assert torch.allclose(dw.double(), w.grad, atol=1e-4)


@pytest.mark.parametrize("act", ops.ACTIVATIONS)
@pytest.mark.parametrize("layout", ops.LAYOUTS)
def test_swiglu_backward_formula_matches_autograd(act, layout):
    torch.manual_seed(1)
    gu = torch.randn(3, 4, 32, dtype=torch.float64, requires_grad=True)
    dh = torch.randn(3, 4, 16, dtype=torch.float64)
    ops.swiglu_reference(gu, act, layout, out_dtype=torch.float32).backward(dh.float())
    got = ops.swiglu_backward_reference(dh, gu.detach().double(), act, layout)
    assert got.shape == gu.shape
    assert torch.allclose(got.double(), gu.grad, atol=1e-5)


# ---- the registration, on meta tensors (needs the compiled library) -----------------------------

needs_lib = pytest.mark.skipif(not (ops.available() and has_op("rmsnorm_backward") and has_op("swiglu_backward")),
                               reason="the compiled blockfuse library with the backward ops is not loaded")


def meta(*shape, dtype=torch.bfloat16, grad=False):
    return torch.empty(*shape, device="meta", dtype=dtype, requires_grad=grad)


@needs_lib
@pytest.mark.parametrize("pattern", ["all", "only_x", "only_weight", "frozen_weight"])
def test_rmsnorm_autograd_on_meta(pattern):
    x = meta(3, 7, 64, grad=pattern in ("all", "only_x", "frozen_weight"))
    w = meta(64, grad=pattern in ("all", "only_weight"))
    out = torch.ops.blockfuse.rmsnorm(x, w, 1e-6, False)
    assert out.requires_grad
    out.sum().backward()
    assert (x.grad is not None) == x.requires_grad and (w.grad is not None) == w.requires_grad
    if x.requires_grad:
        assert x.grad.shape == x.shape and x.grad.dtype == x.dtype
    if w.requires_grad:
        assert w.grad.shape == w.shape and w.grad.dtype == w.dtype


@needs_lib
@pytest.mark.parametrize("use", ["out", "residual", "both"])
@pytest.mark.parametrize("frozen", [False, True])
def test_add_rmsnorm_autograd_on_meta(use, frozen):
    x, r = meta(5, 128, grad=True), meta(5, 128, grad=True)
    w = meta(128, grad=not frozen)
    out, res_out = torch.ops.blockfuse.add_rmsnorm(x, r, w, 1e-6, True)
    loss = {"out": out.sum(), "residual": res_out.sum(), "both": out.sum() + res_out.float().sum()}[use]
    loss.backward()
    assert x.grad.shape == x.shape and r.grad.shape == r.shape
    assert (w.grad is not None) == (not frozen)
    if not frozen:
        assert w.grad.shape == (128,)


@needs_lib
@pytest.mark.parametrize("layout", ops.LAYOUTS)
def test_swiglu_autograd_on_meta(layout):
    gu = meta(2, 3, 48, dtype=torch.float16, grad=True)
    h = torch.ops.blockfuse.swiglu(gu, "gelu_tanh", layout)
    assert h.shape == (2, 3, 24)
    h.sum().backward()
    assert gu.grad.shape == gu.shape and gu.grad.dtype == torch.float16


@needs_lib
def test_backward_ops_fakes_on_meta():
    dy, x, w = meta(4, 16), meta(4, 16), meta(16)
    dx, dw = torch.ops.blockfuse.rmsnorm_backward(dy, x, w, 1e-6, False, True, False)
    assert dx.shape == (4, 16) and dw.shape == (0,)
    dh, dw = torch.ops.blockfuse.add_rmsnorm_backward(dy, None, x, w, 1e-6, False, False, True)
    assert dh.shape == (0,) and dw.shape == (16,)
    assert torch.ops.blockfuse.swiglu_backward(meta(4, 8), meta(4, 16), "silu", "interleaved").shape == (4, 16)


@needs_lib
def test_backward_ops_reject_cpu_tensors():
    dy = torch.zeros(2, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="argument 'dy'.*CUDA"):
        torch.ops.blockfuse.rmsnorm_backward(dy, dy, torch.zeros(16, dtype=torch.bfloat16), 1e-6, False, True, True)
    with pytest.raises(ValueError, match="argument 'gate_up'.*CUDA"):
        torch.ops.blockfuse.swiglu_backward(dy[:, :8], dy, "silu", "stacked")


@needs_lib
@pytest.mark.parametrize("pattern", ["all", "x", "w", "w_down"])
def test_gated_mlp_autograd_on_meta(pattern):
    """gated_mlp's C++ autograd on meta tensors (the fakes of gated_mlp, swiglu and the in-place
    backward ops): y and the gradients of whatever needs one, of the right shapes and dtype."""
    x = meta(2, 5, 64, dtype=torch.bfloat16, grad=pattern in ("all", "x"))
    w = meta(96, 64, dtype=torch.bfloat16, grad=pattern in ("all", "w"))
    w_down = meta(40, 48, dtype=torch.bfloat16, grad=pattern in ("all", "w_down"))
    y = ops.gated_mlp(x, w, w_down, "silu")
    assert y.shape == (2, 5, 40) and y.dtype == torch.bfloat16 and y.requires_grad
    y.sum().backward()
    for t in (x, w, w_down):
        assert (t.grad is None) == (not t.requires_grad)
        if t.grad is not None:
            assert t.grad.shape == t.shape and t.grad.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="gated_mlp: argument 'x'.*CUDA"):
        ops.gated_mlp(torch.zeros(2, 64, dtype=torch.bfloat16), torch.zeros(96, 64, dtype=torch.bfloat16),
                      torch.zeros(40, 48, dtype=torch.bfloat16))


@needs_lib
def test_swiglu_backward_with_out_fake_on_meta():
    gu = meta(4, 16)
    h = torch.ops.blockfuse.swiglu_backward_with_out_(meta(4, 8), gu, "silu", "interleaved")
    assert h.shape == (4, 8)
