"""GPU tests of the autograd formulas of rmsnorm / add_rmsnorm / swiglu (register_autograd over the
backward kernels): gradients against fp64 torch autograd of the reference formulas on small odd
shapes (both dtypes, Gemma's 1 + w, both layouts and activations), every requires_grad pattern (only
x, only the weight, a frozen weight), the residual stream's gradient alone, bitwise-reproducible
dweight, torch.compile(fullgraph=True) with gradients, activation checkpointing of a block of
blockfuse ops (both torch.utils.checkpoint modes), and torch.library.opcheck of the backward ops."""
import pytest

from conftest import require_gpu
from tensor_utils import rel  # noqa: E402

torch, ops = require_gpu()
pytestmark = pytest.mark.gpu

DTYPES = (torch.bfloat16, torch.float16)
# Relative Frobenius error against fp64: the inputs are rounded to the dtype for both sides, so the
# error is the kernels' fp32 math plus one output rounding (bf16 ~1.7e-3, fp16 ~2.3e-4).
REL_TOL = {torch.bfloat16: 8e-3, torch.float16: 2e-3}


def rnd(*shape, dtype, scale=1.0, grad=True):
    return (torch.randn(*shape, device="cuda") * scale).to(dtype).requires_grad_(grad)


def fp64_norm(h, w, eps, gemma):
    wf = w + 1.0 if gemma else w
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * wf


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gemma", [False, True])
@pytest.mark.parametrize("shape", [(1, 64), (7, 4104), (3, 5, 136), (2, 8200)])
def test_rmsnorm_grad_matches_fp64(dtype, gemma, shape):
    torch.manual_seed(0)
    x, w = rnd(*shape, dtype=dtype), rnd(shape[-1], dtype=dtype, scale=0.5)
    dy = torch.randn(*shape, device="cuda").to(dtype)
    ops.rmsnorm(x, w, 1e-6, gemma).backward(dy)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    fp64_norm(x64, w64, 1e-6, gemma).backward(dy.double())
    assert rel(x.grad, x64.grad) < REL_TOL[dtype]
    assert rel(w.grad, w64.grad) < REL_TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gemma", [False, True])
@pytest.mark.parametrize("use", ["out", "residual", "both"])
def test_add_rmsnorm_grad_matches_fp64(dtype, gemma, use):
    torch.manual_seed(1)
    x, r, w = rnd(7, 4104, dtype=dtype), rnd(7, 4104, dtype=dtype), rnd(4104, dtype=dtype, scale=0.5)
    dy, dr = torch.randn(7, 4104, device="cuda").to(dtype), torch.randn(7, 4104, device="cuda").to(dtype)
    out, res_out = ops.add_rmsnorm(x, r, w, 1e-6, gemma)
    grads = {"out": [dy, None], "residual": [None, dr], "both": [dy, dr]}[use]
    torch.autograd.backward([t for t, g in zip((out, res_out), grads) if g is not None], [g for g in grads if g is not None])
    # fp64: the norm of the rounded sum (what the forward normalises), its gradient flowing to x and r.
    h64 = (x.detach().float() + r.detach().float()).to(dtype).double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    loss = 0
    if grads[0] is not None:
        loss = loss + (fp64_norm(h64, w64, 1e-6, gemma) * dy.double()).sum()
    if grads[1] is not None:
        loss = loss + (h64 * dr.double()).sum()
    loss.backward()
    assert rel(x.grad, h64.grad) < REL_TOL[dtype] and torch.equal(x.grad, r.grad)
    if grads[0] is not None:
        assert rel(w.grad, w64.grad) < REL_TOL[dtype]
    else:
        assert torch.count_nonzero(w.grad) == 0


@pytest.mark.parametrize("pattern", ["frozen_weight", "only_weight", "both"])
def test_norm_mixed_requires_grad(pattern):
    """x trainable with the gain frozen (LoRA-style), only the gain trainable (x a frozen input), and
    both: the gradients asked for, of fp64 autograd's values, and no others."""
    torch.manual_seed(2)
    x = rnd(33, 1024, dtype=torch.bfloat16, grad=pattern != "only_weight")
    w = rnd(1024, dtype=torch.bfloat16, grad=pattern != "frozen_weight")
    dy = torch.randn(33, 1024, device="cuda").to(torch.bfloat16)
    ops.rmsnorm(x, w).backward(dy)
    assert (x.grad is None) == (pattern == "only_weight")
    assert (w.grad is None) == (pattern == "frozen_weight")
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    (fp64_norm(x64, w64, 1e-6, False) * dy.double()).sum().backward()
    if x.grad is not None:
        assert rel(x.grad, x64.grad) < REL_TOL[torch.bfloat16]
    if w.grad is not None:
        assert rel(w.grad, w64.grad) < REL_TOL[torch.bfloat16]


def test_dweight_is_bitwise_reproducible():
    torch.manual_seed(3)
    x, w = rnd(2048, 4104, dtype=torch.bfloat16, grad=False), rnd(4104, dtype=torch.bfloat16, grad=False)
    dy = torch.randn(2048, 4104, device="cuda").to(torch.bfloat16)
    a = ops.rmsnorm_backward(dy, x, w)
    b = ops.rmsnorm_backward(dy, x, w)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    ref_dh, ref_dw = ops.rmsnorm_backward_reference(dy, x, w)
    assert rel(a[0], ref_dh) < REL_TOL[torch.bfloat16] and rel(a[1], ref_dw) < REL_TOL[torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", ops.ACTIVATIONS)
@pytest.mark.parametrize("layout", ops.LAYOUTS)
@pytest.mark.parametrize("shape", [(1, 16), (7, 2 * 1032), (3, 5, 48)])
def test_swiglu_grad_matches_fp64(dtype, act, layout, shape):
    torch.manual_seed(4)
    gu = rnd(*shape, dtype=dtype, scale=2.0)
    dh = torch.randn(*shape[:-1], shape[-1] // 2, device="cuda").to(dtype)
    ops.swiglu(gu, act, layout).backward(dh)
    g64 = gu.detach().double().requires_grad_()
    z = g64
    u = shape[-1] // 2
    gate, up = (z[..., :u], z[..., u:]) if layout == "stacked" else (z[..., 1::2], z[..., 0::2])
    a = torch.nn.functional.silu(gate) if act == "silu" else torch.nn.functional.gelu(gate, approximate="tanh")
    (a * up).backward(dh.double())
    assert rel(gu.grad, g64.grad) < REL_TOL[dtype]


def test_compile_fullgraph_with_gradients():
    torch.manual_seed(5)

    def block(x, r, w_norm, w_gu):
        normed, res = ops.add_rmsnorm(x, r, w_norm, 1e-6)
        h = ops.swiglu(normed @ w_gu.t(), "silu", "stacked")
        return h.float().pow(2).mean() + res.float().mean()

    x, r = rnd(9, 256, dtype=torch.bfloat16), rnd(9, 256, dtype=torch.bfloat16)
    wn, wg = rnd(256, dtype=torch.bfloat16), rnd(128, 256, dtype=torch.bfloat16, scale=0.05)
    block(x, r, wn, wg).backward()
    eager = [t.grad.clone() for t in (x, r, wn, wg)]
    for t in (x, r, wn, wg):
        t.grad = None
    torch.compile(block, fullgraph=True)(x, r, wn, wg).backward()
    for e, c in zip(eager, (x.grad, r.grad, wn.grad, wg.grad)):
        assert rel(c, e) < 1e-2


@pytest.mark.parametrize("recompute", (False, True))
def test_compile_fullgraph_gated_up_with_gradients(recompute):
    """gated_up's C++ backward traced by torch.compile (AOTAutograd): the in-place swiglu_backward_
    goes through the dispatcher, so the trace sees the mutation; gradients as eager's."""
    torch._dynamo.reset()
    torch.manual_seed(7)

    def mlp(x, w_gu, w_down):
        return (ops.gated_up(x, w_gu, "silu", recompute=recompute) @ w_down.t()).float().pow(2).mean()

    x = rnd(37, 256, dtype=torch.bfloat16)
    w_gu = rnd(256, 256, dtype=torch.bfloat16, scale=0.05)
    w_down = rnd(256, 128, dtype=torch.bfloat16, scale=0.05)
    mlp(x, w_gu, w_down).backward()
    eager = [t.grad.clone() for t in (x, w_gu, w_down)]
    for t in (x, w_gu, w_down):
        t.grad = None
    torch.compile(mlp, fullgraph=True)(x, w_gu, w_down).backward()
    for e, c in zip(eager, (x.grad, w_gu.grad, w_down.grad)):
        assert rel(c, e) < 1e-2


def test_compile_fullgraph_gated_mlp_with_gradients():
    """gated_mlp's C++ backward traced by torch.compile, with dynamic shapes (the op's sizes are
    symbolic there): the in-place swiglu_backward_with_out_ through the dispatcher; gradients as eager's."""
    torch._dynamo.reset()
    torch.manual_seed(8)

    def mlp(x, w_gu, w_down):
        return ops.gated_mlp(x, w_gu, w_down, "silu").float().pow(2).mean()

    w_gu = rnd(256, 256, dtype=torch.bfloat16, scale=0.05)
    w_down = rnd(136, 128, dtype=torch.bfloat16, scale=0.05)
    compiled = torch.compile(mlp, fullgraph=True, dynamic=True)
    for rows in (37, 64):
        x = rnd(rows, 256, dtype=torch.bfloat16)
        mlp(x, w_gu, w_down).backward()
        eager = [t.grad.clone() for t in (x, w_gu, w_down)]
        for t in (x, w_gu, w_down):
            t.grad = None
        compiled(x, w_gu, w_down).backward()
        for e, c in zip(eager, (x.grad, w_gu.grad, w_down.grad)):
            assert rel(c, e) < 1e-2
        w_gu.grad = w_down.grad = None


@pytest.mark.usefixtures("ordered_attention_backward")
@pytest.mark.parametrize("reentrant", (False, True))
def test_activation_checkpointing(reentrant):
    """A decoder-like block of blockfuse ops (add_rmsnorm, causal attention, add_rmsnorm, gated_mlp)
    under torch.utils.checkpoint: the gradients of every input and weight as without it. Non-reentrant
    recomputes the same forward, so the same bits; reentrant runs the first forward without gradients
    (gated_mlp's fused inference kernels) and recomputes it with them, so within bf16 noise."""
    from torch.utils.checkpoint import checkpoint
    torch.manual_seed(9)
    b, s, hq, hkv, d = 2, 77, 4, 2, 64
    hidden, inter = hq * d, 384

    def block(x, r, wn1, wq, wk, wv, wn2, w_gu, w_down):
        n, r = ops.add_rmsnorm(x, r, wn1, 1e-6)
        q = (n @ wq.t()).view(b, s, hq, d)
        k = (n @ wk.t()).view(b, s, hkv, d)
        v = (n @ wv.t()).view(b, s, hkv, d)
        a = ops.attention(q, k, v, causal=True).reshape(b, s, hidden)
        n, r = ops.add_rmsnorm(a, r, wn2, 1e-6)
        return r + ops.gated_mlp(n, w_gu, w_down)

    def leaves():
        g = torch.Generator(device="cuda").manual_seed(10)
        mk = lambda *shape, scale=1.0: (torch.randn(*shape, device="cuda", generator=g) * scale).to(  # noqa: E731
            torch.bfloat16).requires_grad_()
        return [mk(b, s, hidden), mk(b, s, hidden), mk(hidden), mk(hidden, hidden, scale=0.06),
                mk(hkv * d, hidden, scale=0.06), mk(hkv * d, hidden, scale=0.06), mk(hidden),
                mk(2 * inter, hidden, scale=0.06), mk(hidden, inter, scale=0.05)]

    gy = torch.randn(b, s, hidden, device="cuda").to(torch.bfloat16)
    plain = leaves()
    block(*plain).backward(gy)
    ckpt = leaves()
    checkpoint(block, *ckpt, use_reentrant=reentrant).backward(gy)
    for i, (a, c) in enumerate(zip(plain, ckpt)):
        assert c.grad is not None, f"input {i}: no gradient"
        if reentrant:
            assert rel(c.grad, a.grad) < 1e-2, f"input {i}"
        else:
            assert torch.equal(c.grad, a.grad), f"input {i}"


def test_opcheck_backward_ops():
    torch.manual_seed(6)
    dy = torch.randn(5, 64, device="cuda").to(torch.bfloat16)
    x = torch.randn(5, 64, device="cuda").to(torch.bfloat16)
    w = torch.randn(64, device="cuda").to(torch.bfloat16)
    torch.library.opcheck(torch.ops.blockfuse.rmsnorm_backward.default, (dy, x, w, 1e-6, False, True, True))
    gu = torch.randn(5, 128, device="cuda").to(torch.bfloat16)
    torch.library.opcheck(torch.ops.blockfuse.swiglu_backward_.default, (dy, gu.clone(), "silu", "interleaved"))
    torch.library.opcheck(torch.ops.blockfuse.swiglu_backward_with_out_.default, (dy, gu.clone(), "gelu_tanh", "stacked"))
    torch.library.opcheck(torch.ops.blockfuse.add_rmsnorm_backward.default, (dy, dy, x, w, 1e-6, True, True, False))
    gu = torch.randn(5, 128, device="cuda").to(torch.bfloat16)
    torch.library.opcheck(torch.ops.blockfuse.swiglu_backward.default, (dy, gu, "gelu_tanh", "interleaved"))
    # The forward ops with their autograd formulas (opcheck runs its autograd-registration test).
    torch.library.opcheck(torch.ops.blockfuse.rmsnorm.default, (x.requires_grad_(), w, 1e-6, False))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("want_h", [True, False])
@pytest.mark.parametrize("mnu", [(1, 64, 8), (129, 520, 264), (300, 256, 136)])
@pytest.mark.parametrize("path", ["unfused", "fused"])
def test_gated_mlp_dgated_matches_fp64(dtype, act, want_h, mnu, path, monkeypatch):
    """gated_mlp's backward from dy to dz (blockfuse::gated_mlp_dgated_: a GEMM and swiglu_backward,
    or with BLOCKFUSE_DGATED=fused one fused kernel on Hopper) against fp64 torch: dz written over z,
    h returned."""
    if path == "fused":
        monkeypatch.setenv("BLOCKFUSE_DGATED", "fused")
    else:
        monkeypatch.delenv("BLOCKFUSE_DGATED", raising=False)
    m, n, u = mnu
    torch.manual_seed(m + n + u)
    dy = torch.randn(m, n, device="cuda").to(dtype)
    w_down = (torch.randn(n, u, device="cuda") / n ** 0.5).to(dtype)
    z = (torch.randn(m, 2 * u, device="cuda") * 2).to(dtype)
    up, gate = z[:, 0::2].double(), z[:, 1::2].double()
    dh = dy.double() @ w_down.double()
    g = gate.clone().requires_grad_()
    a = torch.nn.functional.silu(g) if act == "silu" else torch.nn.functional.gelu(g, approximate="tanh")
    (da,) = torch.autograd.grad(a, g, torch.ones_like(a))
    a = a.detach()
    want_dz = torch.stack([dh * a, dh * up * da], dim=-1).reshape(m, 2 * u)
    h = torch.ops.blockfuse.gated_mlp_dgated_(dy, w_down, z, act, want_h)
    # dh is rounded to the dtype in the unfused path: two roundings' worth on the Frobenius norm.
    assert rel(z, want_dz) < 2 * REL_TOL[dtype]
    if want_h:
        assert h.shape == (m, u) and rel(h, a * up) < REL_TOL[dtype]
    else:
        assert h.numel() == 0


def test_gated_mlp_dgated_opcheck():
    dy = torch.randn(33, 64, device="cuda", dtype=torch.bfloat16)
    w_down = torch.randn(64, 136, device="cuda", dtype=torch.bfloat16) / 8
    z = torch.randn(33, 272, device="cuda", dtype=torch.bfloat16)
    torch.library.opcheck(torch.ops.blockfuse.gated_mlp_dgated_.default, (dy, w_down, z, "silu", True))
