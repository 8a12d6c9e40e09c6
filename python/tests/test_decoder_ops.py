"""GPU tests of the decoder-block ops: rmsnorm / add_rmsnorm(_) / their FP8 forms, swiglu / swiglu_fp8
(both layouts, static and dynamic scales) and decode_gemm, each against a float32 torch reference on
fresh random inputs (odd sizes, both dtypes, FP8 de-scaled), every argument error (ValueError naming
the argument), the fake implementations (torch.library.opcheck), torch.compile(fullgraph=True) and
CUDA-graph capture."""
import pytest

from conftest import require_gpu
from tensor_utils import rel, rnd  # noqa: E402

torch, ops = require_gpu()
pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_tf32")]

DTYPES = (torch.bfloat16, torch.float16)
# Relative Frobenius error vs fp32: one output rounding is ~1.7e-3 (bf16), ~2.3e-4 (fp16).
REL_TOL = {torch.bfloat16: 5e-3, torch.float16: 1e-3}
# e4m3 has a 3-bit mantissa: one rounding is at most 2^-4 relative; ~2.5e-2 in Frobenius norm.
FP8_REL_TOL = 4e-2


def poisoned_like(t):
    return torch.full_like(t, float("nan"))


# ---- rmsnorm / add_rmsnorm -----------------------------------------------------------------------

NORM_SHAPES = [(1, 64), (3, 5, 136), (7, 4096), (33, 5120), (2, 1, 8)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gemma", [False, True])
@pytest.mark.parametrize("shape", NORM_SHAPES)
def test_add_rmsnorm_matches_fp32(shape, gemma, dtype):
    h = shape[-1]
    x, res = rnd(*shape, dtype=dtype, seed=1), rnd(*shape, dtype=dtype, seed=2)
    w = rnd(h, dtype=dtype, seed=3, scale=0.3) + (0 if gemma else 1)
    eps = 1e-5
    res_before = res.clone()
    out, res_out = ops.add_rmsnorm(x, res, w, eps, gemma)
    want, want_res = ops.add_rmsnorm_reference(x, res, w, eps, gemma, out_dtype=torch.float32)
    assert out.dtype == dtype and out.shape == x.shape and res_out.shape == x.shape
    assert torch.equal(res, res_before)  # the functional form leaves the old stream alone
    assert torch.equal(res_out, want_res)  # x + residual rounded once: exact
    assert rel(out, want) < REL_TOL[dtype]
    # rmsnorm alone, and the in-place form
    assert rel(ops.rmsnorm(x, w, eps, gemma), ops.rmsnorm_reference(x, w, eps, gemma, torch.float32)) < REL_TOL[dtype]
    res2 = res.clone()
    out2 = ops.add_rmsnorm_(x, res2, w, eps, gemma)
    assert torch.equal(out2, out) and torch.equal(res2, res_out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("shape", [(1, 64), (5, 3, 264), (17, 4096)])
def test_add_rmsnorm_fp8_matches_fp32(shape, static, dtype):
    h = shape[-1]
    x, res = rnd(*shape, dtype=dtype, seed=4), rnd(*shape, dtype=dtype, seed=5)
    w = rnd(h, dtype=dtype, seed=6, scale=0.3)
    scale = torch.tensor([0.02], device="cuda") if static else None
    q, res_out, row_scales = ops.add_rmsnorm_fp8(x, res, w, scale, 1e-6, True)
    want, want_res = ops.add_rmsnorm_reference(x, res, w, 1e-6, True, out_dtype=torch.float32)
    assert q.dtype == ops.FP8_DTYPE and q.shape == x.shape and torch.equal(res_out, want_res)
    if static:
        assert row_scales.numel() == 0
        got = ops.fp8_dequantize(q, scale)
        want = want.clamp(-448 * 0.02, 448 * 0.02)  # saturation is part of the static format
    else:
        assert row_scales.shape == shape[:-1] and row_scales.dtype == torch.float32
        amax = want.abs().amax(-1)
        assert torch.allclose(row_scales, amax / 448, rtol=1e-5)
        got = ops.fp8_dequantize(q, row_scales)
    assert rel(got, want) < FP8_REL_TOL
    q2, s2 = ops.rmsnorm_fp8(want_res, w, scale, 1e-6, True)
    assert torch.equal(q2.view(torch.uint8), q.view(torch.uint8))


def test_norm_empty_rows():
    x = torch.empty(0, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(64, device="cuda", dtype=torch.bfloat16)
    assert ops.rmsnorm(x, w).shape == (0, 64)
    out, r = ops.add_rmsnorm(x, x, w)
    assert out.shape == r.shape == (0, 64)
    q, s = ops.rmsnorm_fp8(x, w)
    assert q.shape == (0, 64) and s.shape == (0,)


def test_norm_errors_name_the_argument():
    x = rnd(4, 64, dtype=torch.bfloat16)
    w = torch.ones(64, device="cuda", dtype=torch.bfloat16)
    cases = [
        (lambda: ops.add_rmsnorm(x.float(), x.float(), w.float()), "argument 'x' has dtype Float"),
        (lambda: ops.add_rmsnorm(x, x.half(), w), "argument 'residual' has dtype Half"),
        (lambda: ops.add_rmsnorm(x, x, w.half()), "argument 'weight' has dtype Half"),
        (lambda: ops.add_rmsnorm(x, x[:3], w), "argument 'residual' has sizes"),
        (lambda: ops.add_rmsnorm(x, x, w[:32]), "argument 'weight' has sizes"),
        (lambda: ops.add_rmsnorm(x, x.cpu(), w), "argument 'residual' is on cpu"),
        (lambda: ops.rmsnorm(x.cpu(), w.cpu()), "argument 'x' is on cpu"),
        (lambda: ops.rmsnorm(x, w.cpu()), "argument 'weight' is on cpu"),
        (lambda: ops.rmsnorm(x, w[None]), "argument 'weight' has sizes"),
        (lambda: ops.rmsnorm(x.t(), w[:4]), "argument 'x' has sizes"),
        (lambda: ops.rmsnorm(x, w, -1.0), "eps"),
        (lambda: ops.rmsnorm(rnd(4, 60, dtype=torch.bfloat16), w[:60]), "argument 'x'"),
        (lambda: ops.rmsnorm_fp8(x, w, torch.tensor([1.0, 2.0], device="cuda")), "argument 'scale'"),
        (lambda: ops.rmsnorm_fp8(x, w, torch.tensor([1.0], device="cuda", dtype=torch.float64)), "argument 'scale'"),
        (lambda: ops.add_rmsnorm_fp8(x, x, w, torch.tensor([1.0])), "argument 'scale' is on cpu"),
    ]
    for fn, msg in cases:
        with pytest.raises(ValueError, match=msg):
            fn()


# ---- swiglu ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ops.LAYOUTS)
@pytest.mark.parametrize("act", ops.ACTIVATIONS)
@pytest.mark.parametrize("shape", [(1, 128), (3, 7, 400), (129, 2 * 1432)])
def test_swiglu_matches_fp32(shape, act, layout, dtype):
    gu = rnd(*shape, dtype=dtype, seed=7, scale=2.0)
    out = ops.swiglu(gu, act, layout)
    assert out.shape == (*shape[:-1], shape[-1] // 2) and out.dtype == dtype
    assert rel(out, ops.swiglu_reference(gu, act, layout, torch.float32)) < REL_TOL[dtype]


@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("layout", ops.LAYOUTS)
def test_swiglu_fp8_matches_fp32(layout, static):
    gu = rnd(5, 3, 2 * 264, dtype=torch.bfloat16, seed=8, scale=2.0)
    scale = torch.tensor([0.01], device="cuda") if static else None
    q, row_scales = ops.swiglu_fp8(gu, scale, "silu", layout)
    want = ops.swiglu_reference(gu, "silu", layout, torch.float32)
    assert q.dtype == ops.FP8_DTYPE and q.shape == (5, 3, 264)
    if static:
        got, want = ops.fp8_dequantize(q, scale), want.clamp(-4.48, 4.48)
    else:
        assert row_scales.shape == (5, 3)
        got = ops.fp8_dequantize(q, row_scales)
    assert rel(got, want) < FP8_REL_TOL


def test_swiglu_errors_name_the_argument():
    gu = rnd(4, 128, dtype=torch.bfloat16)
    cases = [
        (lambda: ops.swiglu(gu, "relu"), "argument 'activation' is 'relu'"),
        (lambda: ops.swiglu(gu, "silu", "zigzag"), "argument 'layout' is 'zigzag'"),
        (lambda: ops.swiglu(gu.float()), "argument 'gate_up' has dtype Float"),
        (lambda: ops.swiglu(gu.cpu()), "argument 'gate_up' is on cpu"),
        (lambda: ops.swiglu(gu[:, :127]), "argument 'gate_up'"),
        (lambda: ops.swiglu(gu[:, :120]), "argument"),  # U = 60: U % 8 (C++ validation)
        (lambda: ops.swiglu_fp8(gu, torch.tensor([1.0, 1.0], device="cuda")), "argument 'scale'"),
    ]
    for fn, msg in cases:
        with pytest.raises(ValueError, match=msg):
            fn()


# ---- decode_gemm ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m, n, k", [(1, 64, 64), (3, 1000, 4096), (8, 4096, 14336), (32, 257, 520), (17, 6144, 4096)])
def test_decode_gemm_matches_fp32(m, n, k, dtype):
    x = rnd(m, k, dtype=dtype, seed=m + n)
    w = rnd(n, k, dtype=dtype, seed=k, scale=k ** -0.5)
    y = ops.decode_gemm(x, w)
    assert y.shape == (m, n) and y.dtype == dtype
    want = x.float() @ w.float().t()
    assert rel(y, want) < REL_TOL[dtype]
    assert torch.equal(y, ops.decode_gemm(x, w))  # deterministic split-K
    # leading batch dims [b, 1, K] (a decode step)
    xb = x.reshape(m, 1, k)
    assert torch.equal(ops.decode_gemm(xb, w).reshape(m, n), y)


def test_decode_gemm_errors_name_the_argument():
    x = rnd(2, 64, dtype=torch.bfloat16)
    w = rnd(32, 64, dtype=torch.bfloat16)
    cases = [
        (lambda: ops.decode_gemm(rnd(33, 64, dtype=torch.bfloat16), w), "argument 'x'"),
        (lambda: ops.decode_gemm(x, w[:, :56]), "argument 'w' has sizes"),
        (lambda: ops.decode_gemm(x, w.half()), "argument 'w' has dtype Half"),
        (lambda: ops.decode_gemm(x.cpu(), w), "argument 'x' is on cpu"),
        (lambda: ops.decode_gemm(x, w.cpu()), "argument 'w' is on cpu"),
        (lambda: ops.decode_gemm(x[:, :60], w[:, :60]), "argument"),  # K % 8 (C++ validation)
    ]
    for fn, msg in cases:
        with pytest.raises(ValueError, match=msg):
            fn()


# ---- fake implementations, torch.compile, CUDA graphs ----------------------------------------------

def _op_cases():
    x = rnd(3, 5, 64, dtype=torch.bfloat16, seed=9)
    r = rnd(3, 5, 64, dtype=torch.bfloat16, seed=10)
    w = rnd(64, dtype=torch.bfloat16, seed=11)
    s = torch.tensor([0.05], device="cuda")
    gu = rnd(4, 256, dtype=torch.bfloat16, seed=12)
    wd = rnd(96, 64, dtype=torch.bfloat16, seed=13)
    B = torch.ops.blockfuse
    return [
        (B.rmsnorm.default, (x, w, 1e-6, False)),
        (B.add_rmsnorm.default, (x, r, w, 1e-6, True)),
        (B.add_rmsnorm_.default, (x, r.clone(), w, 1e-6, False)),
        (B.rmsnorm_fp8.default, (x, w, None, 1e-6, False)),
        (B.rmsnorm_fp8.default, (x, w, s, 1e-6, False)),
        (B.add_rmsnorm_fp8.default, (x, r, w, None, 1e-6, False)),
        (B.add_rmsnorm_fp8.default, (x, r, w, s, 1e-6, True)),
        (B.swiglu.default, (gu, "silu", "stacked")),
        (B.swiglu.default, (gu, "gelu_tanh", "interleaved")),
        (B.swiglu_fp8.default, (gu, None, "silu", "stacked")),
        (B.swiglu_fp8.default, (gu, s, "silu", "interleaved")),
        (B.decode_gemm.default, (x[0], wd)),
    ]


@pytest.mark.parametrize("i", range(12))
def test_opcheck(i):
    op, args = _op_cases()[i]
    utils = ("test_schema", "test_faketensor")
    if "fp8" not in op.__name__:  # aot_dispatch compares outputs with assert_close, which has no e4m3
        utils += ("test_aot_dispatch_static",)
    torch.library.opcheck(op, args, test_utils=utils)


def _f(x, r, w, gu, wd, s):
    n, r2 = ops.add_rmsnorm(x * 2, r, w, 1e-6, False)
    q, r3, rs = ops.add_rmsnorm_fp8(n, r2, w, None, 1e-6, True)
    h = ops.swiglu(gu, "silu", "stacked")
    h8, _ = ops.swiglu_fp8(gu, s, "gelu_tanh", "interleaved")
    y = ops.decode_gemm(ops.rmsnorm(r3, w), wd)
    return n, r3, q.view(torch.uint8), rs, h, h8.view(torch.uint8), y


def _inputs(seed):
    return (rnd(4, 64, dtype=torch.bfloat16, seed=seed), rnd(4, 64, dtype=torch.bfloat16, seed=seed + 1),
            rnd(64, dtype=torch.bfloat16, seed=seed + 2), rnd(4, 256, dtype=torch.bfloat16, seed=seed + 3),
            rnd(96, 64, dtype=torch.bfloat16, seed=seed + 4), torch.tensor([0.05], device="cuda"))


def test_torch_compile_fullgraph():
    torch._dynamo.reset()
    cf = torch.compile(_f, fullgraph=True)
    args = _inputs(20)
    for got, want in zip(cf(*args), _f(*args)):
        assert torch.equal(got, want)


def test_torch_compile_inplace_form():
    torch._dynamo.reset()

    def g(x, r, w):
        out = ops.add_rmsnorm_(x, r, w, 1e-6, False)
        return out * 1

    cg = torch.compile(g, fullgraph=True)
    x, r, w = _inputs(30)[:3]
    r1, r2 = r.clone(), r.clone()
    assert torch.equal(cg(x, r1, w), g(x, r2, w))
    assert torch.equal(r1, r2)  # the mutation of the residual is kept under torch.compile


def test_cuda_graph_capture():
    static = list(_inputs(40))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):  # warm-up: decode_gemm's workspace is reserved here, outside the capture
            _f(*static)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = _f(*static)
    for seed in (41, 42):
        new = _inputs(seed)
        for t, v in zip(static, new):
            t.copy_(v)
        static[5].fill_(0.02 * (seed - 40))  # the static FP8 scale changes between replays
        graph.replay()
        torch.cuda.synchronize()
        for got, want in zip(outs, _f(*static)):
            assert torch.equal(got, want)


def test_decode_gemm_capture_needs_a_reserved_workspace():
    w = rnd(8192, 8192, dtype=torch.bfloat16, seed=50)  # a shape no other test used: split-K, new workspace
    assert ops.decode_gemm_reserve(w) > 0
    x = rnd(1, 8192, dtype=torch.bfloat16, seed=51)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = ops.decode_gemm(x, w)
    g.replay()
    torch.cuda.synchronize()
    assert rel(y, x.float() @ w.float().t()) < REL_TOL[torch.bfloat16]
