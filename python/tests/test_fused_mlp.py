"""GPU tests of the fused decode MLP ops (blockfuse::fused_mlp, fused_mlp_sparse, neuron_block_router,
fused_mlp_reserve) and blockfuse.nn.SparseGatedMLP: against the fp32 torch reference on fresh random
inputs (odd leading dims, both dtypes and activations), empty and full lists, per-token lists, the
deterministic mode bitwise, argument errors naming the argument, the fake implementations, CUDA-graph
capture and torch.compile."""
import pytest

from conftest import require_gpu

torch, ops = require_gpu()
from blockfuse import nn as bnn  # noqa: E402
from blockfuse import fused_mlp as F  # noqa: E402
from tensor_utils import rel, rnd  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not F._HAS_OP, reason="the loaded blockfuse library predates the fused-MLP ops")]

DTYPES = (torch.bfloat16, torch.float16)
REL_TOL = {torch.bfloat16: 6e-3, torch.float16: 1.5e-3}  # one rounding of y, fp32 accumulation order
K, U = 256, 512


def weights(dtype, k=K, u=U, seed=10):
    return rnd(2 * u, k, dtype=dtype, seed=seed, scale=k ** -0.5), rnd(u, k, dtype=dtype, seed=seed + 1, scale=u ** -0.5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("lead", [(1,), (5,), (32,), (3, 7)])
def test_dense_matches_fp32(lead, activation, dtype):
    wgu, wd = weights(dtype)
    x = rnd(*lead, K, dtype=dtype, seed=1)
    y = ops.fused_mlp(x, wgu, wd, activation)
    assert y.shape == x.shape and y.dtype == dtype
    want = ops.fused_mlp_reference(x, wgu, wd, activation, out_dtype=torch.float32)
    assert rel(y, want) < REL_TOL[dtype]


def test_deterministic_is_bitwise_and_close_to_atomic():
    wgu, wd = weights(torch.bfloat16, k=1024, u=2048)
    x = rnd(7, 1024, dtype=torch.bfloat16, seed=2)
    a = ops.fused_mlp(x, wgu, wd, deterministic=True)
    b = ops.fused_mlp(x, wgu, wd, deterministic=True)
    assert torch.equal(a, b)
    assert rel(ops.fused_mlp(x, wgu, wd), a) < REL_TOL[torch.bfloat16]


def test_models_of_different_hidden_sizes_in_one_process():
    """A deterministic call at K = 1024, then atomic calls at K = 2048 and back: the binding keeps a
    workspace per K, since the regions move with K (an atomic accumulator at K = 2048 would otherwise
    start on the K = 1024 call's deterministic partials)."""
    small, large = weights(torch.bfloat16, k=1024, u=256), weights(torch.bfloat16, k=2048, u=256)
    xs, xl = rnd(32, 1024, dtype=torch.bfloat16, seed=3), rnd(32, 2048, dtype=torch.bfloat16, seed=4)
    for _ in range(2):
        for x, (wgu, wd), det in ((xs, small, True), (xl, large, False), (xs, small, False), (xl, large, True)):
            want = ops.fused_mlp_reference(x, wgu, wd, out_dtype=torch.float32)
            assert rel(ops.fused_mlp(x, wgu, wd, deterministic=det), want) < REL_TOL[torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size", [16, 32, 64])
def test_union_list(block_size, dtype):
    wgu, wd = weights(dtype)
    x = rnd(6, K, dtype=dtype, seed=3)
    nb = U // block_size
    chosen = torch.tensor(sorted(torch.randperm(nb, generator=torch.Generator().manual_seed(4))[: nb // 3].tolist()),
                          dtype=torch.int32, device="cuda")
    idx = torch.full((nb,), -7, dtype=torch.int32, device="cuda")  # capacity nb; entries past the count are junk
    idx[: len(chosen)] = chosen
    cnt = torch.tensor([len(chosen)], dtype=torch.int32, device="cuda")
    y = ops.fused_mlp_sparse(x, wgu, wd, idx, cnt, block_size)
    mask = torch.zeros(U, dtype=torch.bool, device="cuda")
    for b in chosen.tolist():
        mask[b * block_size:(b + 1) * block_size] = True
    want = ops.fused_mlp_reference(x, wgu, wd, neuron_mask=mask.expand(6, U), out_dtype=torch.float32)
    assert rel(y, want) < REL_TOL[dtype]
    # the empty list gives y = 0; the full list is the dense MLP
    assert torch.equal(ops.fused_mlp_sparse(x, wgu, wd, idx, torch.zeros_like(cnt), block_size), torch.zeros_like(x))
    full = torch.arange(nb, dtype=torch.int32, device="cuda")
    dense = ops.fused_mlp(x, wgu, wd)
    assert rel(ops.fused_mlp_sparse(x, wgu, wd, full, torch.tensor([nb], dtype=torch.int32, device="cuda"), block_size),
               dense) < REL_TOL[dtype]


@pytest.mark.parametrize("mode", ["topk", "threshold"])
def test_router_and_per_token_lists(mode):
    dtype, bs = torch.bfloat16, 32
    wgu, wd = weights(dtype)
    nb = U // bs
    router = rnd(nb, K, dtype=dtype, seed=5, scale=K ** -0.5)
    x = rnd(2, 5, K, dtype=dtype, seed=6)
    ui, uc, ti, tc = ops.neuron_block_router(x, router, mode, threshold=0.55, top_k=5)
    assert ui.shape == (nb,) and uc.shape == (1,) and ti.shape == (2, 5, nb) and tc.shape == (2, 5)
    keep = ops.router_reference(x, router, mode, threshold=0.55, top_k=5)  # [2, 5, nb]
    for t in range(10):
        c = int(tc.view(-1)[t])
        assert ti.view(10, nb)[t, :c].tolist() == keep.view(10, nb)[t].nonzero().flatten().tolist()
    assert ui[: int(uc)].tolist() == keep.view(10, nb).any(0).nonzero().flatten().tolist()
    y_tok = ops.fused_mlp_sparse(x, wgu, wd, ti.view(10, nb), tc.view(10), bs).view(2, 5, K)
    want = ops.fused_mlp_reference(x, wgu, wd, neuron_mask=keep.repeat_interleave(bs, -1), out_dtype=torch.float32)
    assert rel(y_tok, want) < REL_TOL[dtype]
    y_uni = ops.fused_mlp_sparse(x, wgu, wd, ui, uc, bs)
    union = keep.view(10, nb).any(0).repeat_interleave(bs).expand(2, 5, U)
    assert rel(y_uni, ops.fused_mlp_reference(x, wgu, wd, neuron_mask=union, out_dtype=torch.float32)) < REL_TOL[dtype]


def test_nan_in_one_token_stays_there():
    wgu, wd = weights(torch.float16)
    x = rnd(4, K, dtype=torch.float16, seed=7)
    x[2, 5] = float("nan")
    y = ops.fused_mlp(x, wgu, wd)
    assert torch.isnan(y[2]).all() and torch.isfinite(y[[0, 1, 3]]).all()


def test_errors_name_the_argument():
    wgu, wd = weights(torch.bfloat16)
    x = rnd(3, K, dtype=torch.bfloat16, seed=8)
    i32 = dict(dtype=torch.int32, device="cuda")
    idx, cnt = torch.arange(4, **i32), torch.tensor([4], **i32)
    cases = [
        (lambda: ops.fused_mlp(rnd(33, K, dtype=torch.bfloat16), wgu, wd), "argument 'x' has M = 33"),
        (lambda: ops.fused_mlp(x.cpu(), wgu, wd), "argument 'x' is on cpu"),
        (lambda: ops.fused_mlp(x, wgu.half(), wd), "argument 'w_gate_up' has dtype Half"),
        (lambda: ops.fused_mlp(x, wgu[:-2], wd), "argument 'w_gate_up'"),
        (lambda: ops.fused_mlp(x, wgu, wd[:, :128]), "argument 'w_down_t'"),
        (lambda: ops.fused_mlp(x, wgu, wd, "relu"), "argument 'activation' is 'relu'"),
        (lambda: ops.fused_mlp_sparse(x, wgu, wd, idx.long(), cnt, 32), "argument 'indices' has dtype Long"),
        (lambda: ops.fused_mlp_sparse(x, wgu, wd, idx, cnt.expand(2), 32), "argument 'counts'"),
        (lambda: ops.fused_mlp_sparse(x, wgu, wd, idx, cnt, 48), "argument 'block_size' is 48"),
        (lambda: ops.fused_mlp_sparse(x, wgu, wd, idx.view(2, 2), cnt, 32), "argument 'indices' has sizes"),
        (lambda: ops.fused_mlp_sparse(x, wgu, wd, torch.arange(17, **i32), cnt, 32), "argument 'blocks'"),
        (lambda: ops.neuron_block_router(x, wd[:16], "best"), "argument 'mode' is 'best'"),
        (lambda: ops.neuron_block_router(x, wd[:16, :128], "topk", top_k=2), "argument 'r'"),
        (lambda: ops.neuron_block_router(x, wd[:16], "topk", top_k=17), "argument 'top_k'"),
    ]
    for fn, msg in cases:
        with pytest.raises(ValueError, match=msg):
            fn()
    assert ops.fused_mlp(x[:0], wgu, wd).shape == (0, K)


def test_opcheck():
    wgu, wd = weights(torch.bfloat16)
    x = rnd(3, K, dtype=torch.bfloat16, seed=9)
    router = rnd(U // 32, K, dtype=torch.bfloat16, seed=10)
    idx = torch.arange(4, dtype=torch.int32, device="cuda")
    cnt = torch.tensor([3], dtype=torch.int32, device="cuda")
    utils = ("test_schema", "test_faketensor", "test_aot_dispatch_static")
    B = torch.ops.blockfuse
    torch.library.opcheck(B.fused_mlp.default, (x, wgu, wd, "silu", True), test_utils=utils)
    torch.library.opcheck(B.fused_mlp_sparse.default, (x, wgu, wd, idx, cnt, 32, "silu", True), test_utils=utils)
    # The router's index tensors are specified only up to their counts (the rest is whatever the
    # allocator held), so eager vs AOT outputs may differ there: schema and fake checks only.
    torch.library.opcheck(B.neuron_block_router.default, (x, router, "topk", 0.5, 3),
                          test_utils=("test_schema", "test_faketensor"))


def sparse_module(per_token=True):
    m = bnn.SparseGatedMLP(K, U, block_size=32, mode="topk", top_k=5, per_token=per_token, dtype=torch.bfloat16,
                           device="cuda")
    with torch.no_grad():
        m.router.copy_(rnd(U // 32, K, dtype=torch.bfloat16, seed=11, scale=K ** -0.5))
    return m


@pytest.mark.parametrize("per_token", [True, False])
def test_sparse_module_matches_its_reference(per_token):
    m = sparse_module(per_token)
    x = rnd(2, 20, K, dtype=torch.bfloat16, seed=12)  # 40 rows: chunks of 32 and 8
    with torch.no_grad():
        y = m(x)
        want = torch.cat([m._reference(c) for c in x.view(-1, K).split(32)]).view_as(x)
    assert rel(y, want) < REL_TOL[torch.bfloat16]


@pytest.mark.parametrize("per_token", [True, False])
@pytest.mark.parametrize("mode", ["topk", "threshold"])
@pytest.mark.parametrize("rows", [bnn.SPARSE_PREFILL_ROWS, 301])
def test_sparse_module_prefill_path(rows, mode, per_token):
    """From SPARSE_PREFILL_ROWS rows the module gathers the kept blocks' weights for two GEMMs: the
    same output as the per-32-row formula (chunk unions included), a NaN row confined to itself."""
    m = sparse_module(per_token)
    m.mode, m.threshold = mode, 0.5
    x = rnd(rows, K, dtype=torch.bfloat16, seed=15)
    x[7, 3] = float("nan")
    with torch.no_grad():
        y = m(x)
        want = torch.cat([m._reference(c) for c in x.split(32)])
    # Row 7's scores are NaN, so it keeps nothing itself (per_token: y = 0 there); with chunk unions
    # it keeps its chunk's blocks and its y is NaN. Either way no other row sees the NaN.
    nan_rows = torch.isnan(y).any(-1)
    assert torch.equal(nan_rows, torch.isnan(want).any(-1))
    assert not torch.cat([nan_rows[:7], nan_rows[8:]]).any()
    ok = ~nan_rows
    assert rel(y[ok], want[ok]) < REL_TOL[torch.bfloat16]


def test_sparse_module_prefill_nothing_kept():
    m = sparse_module()
    m.top_k = 0
    x = rnd(200, K, dtype=torch.bfloat16, seed=16)
    with torch.no_grad():
        assert torch.equal(m(x), torch.zeros_like(x))


def test_sparse_module_cuda_graph_and_compile():
    m = sparse_module()
    ops.fused_mlp_reserve(m.w_down_t)
    x = rnd(4, K, dtype=torch.bfloat16, seed=13)
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        m(static_x)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        out = m(static_x)
    x2 = rnd(4, K, dtype=torch.bfloat16, seed=14)
    static_x.copy_(x2)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    with torch.no_grad():
        want = m._reference(x2)
        assert rel(out, want) < REL_TOL[torch.bfloat16]
        compiled = torch.compile(m, fullgraph=True)
        assert rel(compiled(x2), want) < REL_TOL[torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", [(1,), (3, 5), (32,)])
def test_gated_mlp_whole_mlp_opt_in(lead, dtype):
    """GatedMLP.use_fused_mlp: decode-sized calls through ops.fused_mlp, the result that of the
    two-kernel path within one rounding; w_down_t rebuilt when down.weight changes; longer inputs and
    calls needing gradients keep the two-kernel path."""
    torch.manual_seed(20)
    m = bnn.GatedMLP(K, U, dtype=dtype, device="cuda").use_fused_mlp()
    assert "fused_mlp=True" in repr(m)
    x = rnd(*lead, K, dtype=dtype, seed=21)
    with torch.no_grad():
        assert m._whole_mlp_applies(x)
        want = ops.fused_mlp_reference(x, m.w_gate_up, m.down.weight.t(), "silu", out_dtype=torch.float32)
        y = m(x)
        assert y.shape == x.shape and y.dtype == dtype
        assert rel(y, want) < REL_TOL[dtype]
        m.down.weight.mul_(-0.5)  # in place: the cached transpose must follow
        want = ops.fused_mlp_reference(x, m.w_gate_up, m.down.weight.t(), "silu", out_dtype=torch.float32)
        assert rel(m(x), want) < REL_TOL[dtype]
        assert not m._whole_mlp_applies(rnd(33, K, dtype=dtype, seed=22))
    assert not m._whole_mlp_applies(x), "parameters that require grad: the kernel has no backward"
    m.use_fused_mlp(False)
    assert m._w_down_t is None and "fused_mlp" not in repr(m)


def test_gated_mlp_whole_mlp_down_bias():
    torch.manual_seed(23)
    m = bnn.GatedMLP(K, U, dtype=torch.bfloat16, device="cuda", down_bias=True).use_fused_mlp()
    torch.nn.init.uniform_(m.down.bias, -1, 1)
    x = rnd(4, K, dtype=torch.bfloat16, seed=24)
    with torch.no_grad():
        want = m.down(m.gate_up(x)).float()
        assert rel(m(x), want) < 2 * REL_TOL[torch.bfloat16]
