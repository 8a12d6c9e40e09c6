"""GPU tests of the attention backward through autograd (blockfuse.ops.attention / attention_varlen):
gradients of q, k, v against torch autograd of the fp32 reference formula (attention_reference) on
small shapes — GQA / MQA, causal, sliding window, soft-cap, Sq != Sk, varlen with an empty sequence —
bitwise determinism, torch.compile(fullgraph=True) with gradients, a forward + backward captured in a
CUDA graph and replayed, and the error when the op was called without the lse the backward needs."""
import pytest

from conftest import require_gpu

torch, ops = require_gpu()
import blockfuse.attention as A  # noqa: E402
from tensor_utils import rel  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_tf32")]

# Relative Frobenius error of each gradient vs the fp32 formula: the inputs' rounding is shared,
# the kernel rounds P and dS to the input dtype before its matrix products and each gradient once.
TOL = {torch.bfloat16: 2.5e-2, torch.float16: 6e-3}

CASES = [  # b, sq, sk, hq, hkv, d, causal, window_left, window_right, softcap
    (2, 127, 127, 4, 4, 64, False, -1, -1, 0.0),
    (2, 127, 127, 4, 4, 128, True, -1, -1, 0.0),
    (1, 1000, 1000, 8, 2, 128, True, -1, -1, 0.0),
    (2, 7, 300, 8, 1, 64, True, -1, -1, 0.0),
    (1, 300, 7, 4, 4, 128, True, -1, -1, 0.0),
    (1, 257, 257, 8, 1, 128, False, 40, 0, 0.0),
    (1, 200, 200, 4, 2, 64, True, -1, -1, 2.0),   # a cap at which tanh bends (|scale·qk| ~ 1-3)
    (1, 129, 200, 6, 2, 128, True, 50, -1, 3.0),  # GQA 3, Sq < Sk, window + soft-cap
    (1, 150, 180, 4, 4, 64, False, 20, 30, 0.0),  # a two-sided window, Sq != Sk
]


def _inputs(b, sq, sk, hq, hkv, d, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda *s: torch.randn(*s, device="cuda", generator=g).to(dtype)  # noqa: E731
    return mk(b, sq, hq, d), mk(b, sk, hkv, d), mk(b, sk, hkv, d), mk(b, sq, hq, d)


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
@pytest.mark.parametrize("case", CASES)
@pytest.mark.usefixtures("ordered_attention_backward")
def test_gradients_match_autograd_of_the_reference(case, dtype):
    b, sq, sk, hq, hkv, d, causal, left, right, softcap = case
    q, k, v, dout = _inputs(b, sq, sk, hq, hkv, d, dtype)
    kw = dict(causal=causal, window_left=left, window_right=right, softcap=softcap)
    ref = [t.detach().float().requires_grad_() for t in (q, k, v)]
    A.attention_reference(*ref, **kw)[0].backward(dout.float())
    got = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = ops.attention(*got, **kw)
    out.backward(dout)
    for name, g, r in zip("qkv", got, ref):
        assert g.grad.dtype == dtype and g.grad.shape == g.shape
        assert torch.isfinite(g.grad).all(), f"d{name} not finite"
        assert rel(g.grad, r.grad) <= TOL[dtype], f"d{name}: {rel(g.grad, r.grad):.3e}"
    first = [g.grad.clone() for g in got]
    for g in got:
        g.grad = None
    ops.attention(*got, **kw).backward(dout)
    assert all(torch.equal(a, g.grad) for a, g in zip(first, got)), "two backward calls differ"


def test_varlen_gradients_with_an_empty_sequence():
    lens_q, lens_k = [100, 0, 1, 70], [130, 5, 1, 70]
    hq, hkv, d, dtype = 8, 2, 128, torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(3)
    mk = lambda n, h: torch.randn(n, h, d, device="cuda", generator=g).to(dtype)  # noqa: E731
    q, k, v, dout = mk(sum(lens_q), hq), mk(sum(lens_k), hkv), mk(sum(lens_k), hkv), mk(sum(lens_q), hq)
    cu = lambda ls: torch.tensor([0] + list(torch.tensor(ls).cumsum(0)), dtype=torch.int32, device="cuda")  # noqa: E731
    got = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    ops.attention_varlen(*got, cu(lens_q), cu(lens_k), max(lens_q), max(lens_k), causal=True).backward(dout)
    ref = [t.detach().float().requires_grad_() for t in (q, k, v)]
    outs, qo, ko = [], 0, 0
    for lq, lk in zip(lens_q, lens_k):
        if lq:
            o = A.attention_reference(ref[0][None, qo:qo + lq], ref[1][None, ko:ko + lk], ref[2][None, ko:ko + lk],
                                      causal=True)[0][0]
            outs.append((o * dout[qo:qo + lq].float()).sum())
        qo, ko = qo + lq, ko + lk
    torch.stack(outs).sum().backward()
    for name, a, r in zip("qkv", got, ref):
        assert rel(a.grad, r.grad) <= TOL[dtype], f"d{name}: {rel(a.grad, r.grad):.3e}"
    # Sequence 1 has no query: its five keys (packed rows 130..134) get no gradient.
    assert torch.equal(got[1].grad[130:135], torch.zeros_like(got[1].grad[130:135]))
    assert torch.equal(got[2].grad[130:135], torch.zeros_like(got[2].grad[130:135]))


def test_varlen_padding_rows_and_calls_without_keys_or_queries():
    """Rows past cu_seqlens[N] (padding in a static-shape batch) get zero gradients and a zero forward
    output, never the allocator's leftovers; a call without keys (max_seqlen_k = 0) gives dq = 0 and
    a batched call without queries dk = dv = 0."""
    hq, hkv, d, dtype = 4, 2, 64, torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(4)
    mk = lambda n, h: torch.randn(n, h, d, device="cuda", generator=g).to(dtype)  # noqa: E731
    cu_q = torch.tensor([0, 30, 50], dtype=torch.int32, device="cuda")  # 50 of 64 rows used
    cu_k = torch.tensor([0, 40, 70], dtype=torch.int32, device="cuda")  # 70 of 80 rows used
    q, k, v = (t.requires_grad_() for t in (mk(64, hq), mk(80, hkv), mk(80, hkv)))
    out = ops.attention_varlen(q, k, v, cu_q, cu_k, 30, 40, causal=True)
    assert torch.equal(out[50:], torch.zeros_like(out[50:]))
    out.backward(mk(64, hq))
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all() and torch.isfinite(v.grad).all()
    assert torch.equal(q.grad[50:], torch.zeros_like(q.grad[50:]))
    assert torch.equal(k.grad[70:], torch.zeros_like(k.grad[70:])) and torch.equal(v.grad[70:], torch.zeros_like(v.grad[70:]))
    # No keys at all: every query row sees nothing.
    q0 = mk(10, hq).requires_grad_()
    k0, v0 = (mk(0, hkv).requires_grad_() for _ in range(2))
    cu0 = torch.tensor([0, 10], dtype=torch.int32, device="cuda")
    z = torch.zeros(2, dtype=torch.int32, device="cuda")
    ops.attention_varlen(q0, k0, v0, cu0, z, 10, 0).backward(mk(10, hq))
    assert torch.equal(q0.grad, torch.zeros_like(q0.grad))
    # A batch without query rows: nothing launched, dk = dv = 0.
    qb = torch.randn(2, 0, hq, d, device="cuda").to(dtype).requires_grad_()
    kb, vb = (torch.randn(2, 33, hkv, d, device="cuda").to(dtype).requires_grad_() for _ in range(2))
    ops.attention(qb, kb, vb).sum().backward()
    assert torch.equal(kb.grad, torch.zeros_like(kb.grad)) and torch.equal(vb.grad, torch.zeros_like(vb.grad))
    # The same packed: no query row in any sequence.
    qp = mk(0, hq).requires_grad_()
    kp, vp = (mk(9, hkv).requires_grad_() for _ in range(2))
    cu_q0 = torch.zeros(3, dtype=torch.int32, device="cuda")
    cu_k0 = torch.tensor([0, 4, 9], dtype=torch.int32, device="cuda")
    ops.attention_varlen(qp, kp, vp, cu_q0, cu_k0, 0, 5).sum().backward()
    assert qp.grad.shape == (0, hq, d)
    assert torch.equal(kp.grad, torch.zeros_like(kp.grad)) and torch.equal(vp.grad, torch.zeros_like(vp.grad))


@pytest.mark.parametrize("varlen", (False, True))
def test_non_deterministic_backward(varlen):
    """set_attention_backward_deterministic(False): dQ by atomics, within bf16 noise of the
    deterministic dq, dk and dv the same bits; torch.use_deterministic_algorithms(True) overrides it;
    the default (None) is the unordered mode on compute capability 9.0 and the ordered one elsewhere."""
    q, k, v, dout = _inputs(2, 300, 333, 8, 2, 128, torch.bfloat16, seed=6)
    cu_q = torch.tensor([0, 300, 600], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 333, 666], dtype=torch.int32, device="cuda")

    def grads():
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        if varlen:
            out = ops.attention_varlen(*(t.flatten(0, 1) for t in leaves), cu_q, cu_k, 300, 333, causal=True)
            out.backward(dout.flatten(0, 1))
        else:
            ops.attention(*leaves, causal=True).backward(dout)
        return [t.grad for t in leaves]

    try:
        ops.set_attention_backward_deterministic(True)
        det = grads()
        det_again = grads()
        ops.set_attention_backward_deterministic(False)
        atom = grads()
        torch.use_deterministic_algorithms(True, warn_only=True)  # (no cuBLAS workspace setting needed)
        forced = grads()
    finally:
        torch.use_deterministic_algorithms(False)
        ops.set_attention_backward_deterministic(None)
    default = grads()
    assert rel(atom[0], det[0]) < 1e-2
    # dk and dv: the same dK/dV kernel computes them in both modes (sm80, or the sm90a one on Hopper).
    assert torch.equal(atom[1], det[1]) and torch.equal(atom[2], det[2])
    for a, b in zip(forced, det):
        assert torch.equal(a, b)
    for a, b in zip(det_again, det):
        assert torch.equal(a, b)
    assert rel(default[0], det[0]) < 1e-2
    if torch.cuda.get_device_capability() != (9, 0):  # the default is the ordered mode: the same bits
        assert torch.equal(default[0], det[0])


@pytest.mark.usefixtures("ordered_attention_backward")
def test_expanded_output_gradient():
    """out.sum().backward() hands the backward an expanded dout (every stride 0): the same gradients
    as a dense dout of ones, batched and packed."""
    q, k, v, _ = _inputs(2, 37, 45, 4, 2, 64, torch.bfloat16, seed=5)
    cu_q = torch.tensor([0, 30, 74], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 40, 90], dtype=torch.int32, device="cuda")
    calls = (lambda a, b, c: ops.attention(a, b, c, causal=True),
             lambda a, b, c: ops.attention_varlen(a.flatten(0, 1), b.flatten(0, 1), c.flatten(0, 1), cu_q, cu_k, 44, 50))
    for call in calls:
        expanded = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        out = call(*expanded)
        out.sum().backward()
        dense = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        call(*dense).backward(torch.ones_like(out))
        for a, b in zip(expanded, dense):
            assert a.grad.abs().sum() > 0 and torch.equal(a.grad, b.grad)


@pytest.mark.parametrize("deterministic", (True, False))
def test_forward_and_backward_captured_in_a_cuda_graph(deterministic):
    """A forward + backward captured in one CUDA graph (what torch.cuda.make_graphed_callables or a
    CUDA-graphed training step does) and replayed on new inputs gives the gradients of eager calls on
    them: the same bits in the deterministic mode; in the unordered one dq within bf16 noise, dk and dv
    the same bits (the dK/dV kernel adds nothing out of order)."""
    ops.set_attention_backward_deterministic(deterministic)
    try:
        q, k, v, dout = _inputs(2, 300, 300, 8, 2, 128, torch.bfloat16, seed=7)
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        dout_in = dout.clone()

        def step():
            return torch.autograd.grad(ops.attention(*leaves, causal=True), leaves, dout_in)

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the capture (lazy initialisation)
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            grads = step()
        q2, k2, v2, dout2 = _inputs(2, 300, 300, 8, 2, 128, torch.bfloat16, seed=8)
        with torch.no_grad():
            for t, new in zip(leaves, (q2, k2, v2)):
                t.copy_(new)
        dout_in.copy_(dout2)
        for gr in grads:
            gr.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        eager = [t.detach().clone().requires_grad_() for t in (q2, k2, v2)]
        ops.attention(*eager, causal=True).backward(dout2)
        for name, got, want in zip("qkv", grads, eager):
            assert torch.isfinite(got).all(), f"d{name} not finite after the replay"
            if deterministic or name != "q":
                assert torch.equal(got, want.grad), f"d{name} differs from the eager call's"
            else:
                assert rel(got, want.grad) < 1e-2, f"dq: {rel(got, want.grad):.3e}"
    finally:
        ops.set_attention_backward_deterministic(None)


@pytest.mark.usefixtures("ordered_attention_backward")
def test_compiled_training_step():
    q, k, v, dout = _inputs(2, 130, 130, 8, 2, 64, torch.bfloat16, seed=5)

    def loss_fn(q, k, v):
        return (ops.attention(q, k, v, causal=True).float() * dout.float()).sum()

    got = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    torch.compile(loss_fn, fullgraph=True)(*got).backward()
    eager = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    loss_fn(*eager).backward()
    for a, b in zip(got, eager):
        assert torch.equal(a.grad, b.grad)


def test_backward_without_lse_says_so():
    q, k, v, _ = _inputs(1, 16, 16, 4, 4, 64, torch.bfloat16)
    q.requires_grad_()
    out, _ = torch.ops.blockfuse.attention(q, k, v, None, True, -1, -1, 0.0, False)
    with pytest.raises(RuntimeError, match="needs the forward's lse"):
        out.sum().backward()


def test_hf_backend_trains_through_the_kernel(monkeypatch):
    """A random tiny Llama in training with attn_implementation="blockfuse": the loss's gradients
    match the SDPA model's within bf16 noise, and the prefill kernel (not the fallback) ran."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    assert A.register_hf_backend()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=64)
    cfg._attn_implementation = "sdpa"
    fp32 = transformers.LlamaForCausalLM(cfg).cuda().train()
    ids = torch.randint(0, 256, (2, 80), device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))

    def grads(model):
        model.zero_grad(set_to_none=True)
        model(ids, labels=ids).loss.backward()
        return {n: p.grad.float().clone() for n, p in model.named_parameters()}

    want = grads(fp32)
    sdpa = fp32.to(torch.bfloat16)
    got_sdpa = grads(sdpa)
    calls = []
    real = A._fused

    def spy(*a):
        calls.append(a[0].shape)
        return real(*a)

    monkeypatch.setattr(A, "_fused", spy)
    if hasattr(sdpa, "set_attn_implementation"):
        sdpa.set_attn_implementation("blockfuse")
    else:
        sdpa.config._attn_implementation = "blockfuse"
    got = grads(sdpa)
    assert calls, "the blockfuse backend did not run its kernel in training"
    err = sum(rel(got[n], want[n]) for n in want) / len(want)
    err_sdpa = sum(rel(got_sdpa[n], want[n]) for n in want) / len(want)
    assert err <= 1.5 * err_sdpa + 1e-3, f"blockfuse {err:.3e} vs sdpa {err_sdpa:.3e}"
