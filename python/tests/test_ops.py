"""GPU tests of blockfuse.ops: gated_up against a float32 torch reference (batch dims, strided rows,
odd sizes, both activations and dtypes), argument errors, the weight-layout ops, autograd,
torch.compile(fullgraph=True) and CUDA-graph capture."""
import pytest

from conftest import require_gpu

torch, ops = require_gpu()
pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_tf32")]

# Relative Frobenius error vs the fp32 formula: one rounding of the output is ~1.7e-3 (bf16) and
# ~2.3e-4 (fp16); the bounds leave room for the fp32 accumulation order.
REL_TOL = {torch.bfloat16: 6e-3, torch.float16: 1.2e-3}
# Elementwise: |got - ref| <= ELEM_RTOL * |ref| + ELEM_ATOL * max|ref| (a rounding is half an ulp).
ELEM_RTOL = {torch.bfloat16: 2 ** -7, torch.float16: 2 ** -10}
ELEM_ATOL = {torch.bfloat16: 2e-3, torch.float16: 3e-4}
DTYPES = (torch.bfloat16, torch.float16)
ACTS = ("silu", "gelu_tanh")


def make(m_shape, k, u, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(*m_shape, k, device="cuda", dtype=torch.float32, generator=g).to(dtype)
    w = (torch.randn(2 * u, k, device="cuda", dtype=torch.float32, generator=g) / k ** 0.5).to(dtype)
    return x, w


def check_close(got, x, w, act):
    assert got.dtype == x.dtype and got.shape == (*x.shape[:-1], w.shape[0] // 2)
    ref = ops.gated_up_reference(x, w, act, out_dtype=torch.float32)
    got = got.float()
    assert torch.isfinite(got).all()
    if ref.numel() == 0:
        return
    rel = ((got - ref).norm() / ref.norm()).item()
    assert rel <= REL_TOL[x.dtype], f"relative error {rel:.3e}"
    bound = ELEM_RTOL[x.dtype] * ref.abs() + ELEM_ATOL[x.dtype] * ref.abs().max()
    bad = (got - ref).abs() > bound
    assert not bad.any(), f"{int(bad.sum())} elements out of bounds; worst {((got - ref).abs() - bound).max().item():.3e}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("m, k, u", [(1, 64, 64), (3, 128, 200), (199, 256, 264), (1000, 512, 1024),
                                     (257, 4096, 1432), (4096, 1024, 512)])
def test_gated_up_matches_fp32_reference(m, k, u, act, dtype):
    x, w = make((m,), k, u, dtype, seed=m + k + u)
    check_close(ops.gated_up(x, w, act), x, w, act)


def test_default_activation_is_silu():
    x, w = make((17,), 128, 64, torch.bfloat16)
    assert torch.equal(ops.gated_up(x, w), ops.gated_up(x, w, "silu"))
    assert torch.equal(torch.ops.blockfuse.gated_up(x, w), ops.gated_up(x, w, "silu"))


@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 1, 7), (4, 1, 33), (2, 2, 2, 9)])
def test_leading_batch_dims(shape):
    x, w = make(shape, 256, 128, torch.bfloat16, seed=len(shape))
    out = ops.gated_up(x, w, "silu")
    assert out.shape == (*shape, 128) and out.is_contiguous()
    check_close(out, x, w, "silu")
    assert torch.equal(out.reshape(-1, 128), ops.gated_up(x.reshape(-1, 256), w, "silu"))


def test_row_strided_views():
    k, u = 256, 192
    big, w = make((300,), k + 64, u, torch.float16)
    x = big[:, 32:32 + k]  # row stride k + 64, 64-byte offset: a slice, no copy
    assert not x.is_contiguous()
    check_close(ops.gated_up(x, w[:, :k].contiguous(), "gelu_tanh"), x, w[:, :k].contiguous(), "gelu_tanh")
    # batched slice: sizes (2, 7, k), strides (7*(k+8), k+8, 1) flattens into rows of stride k+8
    base, _ = make((2, 7), k + 8, u, torch.bfloat16, seed=3)
    xb = base[..., :k]
    _, wk = make((1,), k, u, torch.bfloat16, seed=4)
    check_close(ops.gated_up(xb, wk, "silu"), xb, wk, "silu")
    # the weight itself may be a row-strided view
    wbig = torch.randn(2 * u, k + 16, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    xs, _ = make((65,), k, u, torch.bfloat16, seed=5)
    check_close(ops.gated_up(xs, wbig[:, :k], "silu"), xs, wbig[:, :k], "silu")


def test_empty_rows():
    x, w = make((0,), 128, 64, torch.bfloat16)
    out = ops.gated_up(x, w)
    assert out.shape == (0, 64)
    x3 = torch.empty(2, 0, 128, device="cuda", dtype=torch.bfloat16)
    assert ops.gated_up(x3, w).shape == (2, 0, 64)


def test_non_default_stream():
    x, w = make((512,), 512, 256, torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out = ops.gated_up(x, w, "silu")
    torch.cuda.current_stream().wait_stream(s)
    check_close(out, x, w, "silu")


def test_deterministic():
    x, w = make((333,), 512, 256, torch.bfloat16)
    assert torch.equal(ops.gated_up(x, w), ops.gated_up(x, w))


# ---- argument errors: each names the argument ----

def test_errors_name_the_argument():
    x, w = make((16,), 128, 64, torch.bfloat16)
    with pytest.raises(ValueError, match="argument 'w' has dtype"):
        ops.gated_up(x, w.half())
    with pytest.raises(ValueError, match="argument 'x' has dtype Float"):
        ops.gated_up(x.float(), w.float())
    with pytest.raises(ValueError, match="argument 'x' is on cpu"):
        ops.gated_up(x.cpu(), w)
    with pytest.raises(ValueError, match="argument 'w' is on cpu"):
        ops.gated_up(x, w.cpu())
    with pytest.raises(ValueError, match="activation"):
        ops.gated_up(x, w, "relu")
    with pytest.raises(ValueError, match="argument 'w' has .* rows; required: an even number"):
        ops.gated_up(x, w[:127])
    with pytest.raises(ValueError, match=r"w.size\(1\) == x.size\(-1\)"):
        ops.gated_up(x[:, :120], w)
    with pytest.raises(ValueError, match="contiguous last dimension"):
        ops.gated_up(torch.randn(128, 16, device="cuda", dtype=torch.bfloat16).t(), w)
    base = torch.randn(2, 8, 128, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="flatten into rows"):
        ops.gated_up(base[:, :5], w)
    with pytest.raises(ValueError, match="row stride"):
        ops.gated_up(torch.randn(1, 128, device="cuda", dtype=torch.bfloat16).expand(4, 128), w)


def test_errors_from_the_cpp_api():
    # K % 8, row stride % 8 and 16-byte alignment are checked by blockfuse's C++ validation.
    x, w = make((16,), 60, 64, torch.bfloat16)
    with pytest.raises(ValueError, match=r"blockfuse::gated_up: argument 'x' has cols K = 60"):
        ops.gated_up(x, w)
    big = torch.randn(16, 132, device="cuda", dtype=torch.bfloat16)
    _, w128 = make((1,), 128, 64, torch.bfloat16)
    with pytest.raises(ValueError, match=r"argument 'x' has row stride ld = 132"):
        ops.gated_up(big[:, :128], w128)
    flat = torch.randn(16 * 128 + 8, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="16-byte aligned"):
        ops.gated_up(flat[1:1 + 16 * 128].view(16, 128), w128)
    _, w_odd_u = make((1,), 128, 60, torch.bfloat16)
    with pytest.raises(ValueError, match="has cols U = 60"):
        ops.gated_up(make((4,), 128, 60, torch.bfloat16)[0], w_odd_u)


# ---- weight layout ops ----

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_layout_ops(dtype, device):
    u, k = 40, 24
    gate = torch.randn(u, k, device=device, dtype=dtype)
    up = torch.randn(u, k, device=device, dtype=dtype)
    w = torch.ops.blockfuse.interleave_gate_up(gate, up)
    assert torch.equal(w[0::2], up) and torch.equal(w[1::2], gate)
    g2, u2 = torch.ops.blockfuse.deinterleave_gate_up(w)
    assert torch.equal(g2, gate) and torch.equal(u2, up)
    stacked = torch.ops.blockfuse.deinterleave_to_stacked(w)
    assert torch.equal(stacked, torch.cat((gate, up)))
    assert torch.equal(torch.ops.blockfuse.interleave_stacked(stacked), w)
    # Python wrappers: the op for bf16/fp16, torch for other dtypes — the same rows
    assert torch.equal(ops.interleave_gate_up(gate, up), w)
    assert torch.equal(ops.interleave_gate_up(gate.float(), up.float()), w.float())
    assert torch.equal(ops.interleave_stacked(stacked.float()), w.float())
    gf, uf = ops.deinterleave_gate_up(w.float())
    assert torch.equal(gf, gate.float()) and torch.equal(uf, up.float())
    # strided inputs
    gbig = torch.randn(u, k + 8, device=device, dtype=dtype)
    assert torch.equal(torch.ops.blockfuse.interleave_gate_up(gbig[:, :k], up)[1::2], gbig[:, :k])


def test_layout_errors():
    g = torch.randn(8, 16, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="argument 'up' has sizes"):
        torch.ops.blockfuse.interleave_gate_up(g, g[:4])
    with pytest.raises(ValueError, match="argument 'up' is on cpu"):
        torch.ops.blockfuse.interleave_gate_up(g, g.cpu())
    with pytest.raises(ValueError, match="even number"):
        torch.ops.blockfuse.deinterleave_gate_up(g[:7])


def test_interleaved_weight_from_hf_layout_gives_the_hf_formula():
    k, u = 256, 128
    x, _ = make((64,), k, u, torch.bfloat16)
    gate = (torch.randn(u, k, device="cuda") / k ** 0.5).to(torch.bfloat16)
    up = (torch.randn(u, k, device="cuda") / k ** 0.5).to(torch.bfloat16)
    w = ops.interleave_gate_up(gate, up)
    ref = torch.nn.functional.silu(x.float() @ gate.float().t()) * (x.float() @ up.float().t())
    got = ops.gated_up(x, w, "silu").float()
    assert ((got - ref).norm() / ref.norm()).item() < REL_TOL[torch.bfloat16]


# ---- autograd ----

@pytest.mark.parametrize("recompute", (False, True))
@pytest.mark.parametrize("act", ACTS)
def test_backward_matches_fp32_autograd(act, recompute):
    x, w = make((2, 37), 128, 96, torch.bfloat16, seed=11)
    x.requires_grad_(True)
    w.requires_grad_(True)
    gy = torch.randn(2, 37, 96, device="cuda", dtype=torch.bfloat16)
    y = ops.gated_up(x, w, act, recompute=recompute)
    y.backward(gy)
    xr = x.detach().float().requires_grad_(True)
    wr = w.detach().float().requires_grad_(True)
    yr = ops.gated_up_reference(xr, wr, act, out_dtype=torch.float32)
    yr.backward(gy.float())
    assert ((y.float() - yr).norm() / yr.norm()).item() < REL_TOL[torch.bfloat16]
    for got, ref in ((x.grad, xr.grad), (w.grad, wr.grad)):
        assert got.dtype == torch.bfloat16 and got.shape == ref.shape
        rel = ((got.float() - ref).norm() / ref.norm()).item()
        assert rel < 2e-2, f"gradient relative error {rel:.3e}"


@pytest.mark.parametrize("recompute", (False, True))
def test_backward_twice_and_partial_grads(recompute):
    """retain_graph: a second backward through the same graph gives the first one's gradients (the
    saved pre-activation is consumed by the first and recomputed); only x, or only w, needing a
    gradient (a frozen weight, as in LoRA; a frozen input) gives that one gradient."""
    x, w = make((3, 50), 256, 128, torch.bfloat16, seed=12)
    gy = torch.randn(3, 50, 128, device="cuda", dtype=torch.bfloat16)
    xg, wg = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    y = ops.gated_up(xg, wg, "silu", recompute=recompute)
    y.backward(gy, retain_graph=True)
    first = (xg.grad.clone(), wg.grad.clone())
    xg.grad, wg.grad = None, None
    y.backward(gy)
    assert torch.equal(xg.grad, first[0]) and torch.equal(wg.grad, first[1])
    xo = x.clone().requires_grad_(True)
    ops.gated_up(xo, w, "silu", recompute=recompute).backward(gy)
    assert torch.equal(xo.grad, first[0])
    wo = w.clone().requires_grad_(True)
    ops.gated_up(x, wo, "silu", recompute=recompute).backward(gy)
    assert torch.equal(wo.grad, first[1])


def test_training_forward_equals_the_fused_kernel():
    """The saved-pre-activation forward (torch's GEMM, then swiglu) and the fused kernel agree to bf16
    rounding, and without gradients the fused kernel runs whatever recompute says."""
    x, w = make((4, 33), 256, 128, torch.bfloat16, seed=13)
    fused = ops.gated_up(x, w, "silu")
    assert torch.equal(ops.gated_up(x, w, "silu", recompute=True), fused)
    wg = w.clone().requires_grad_(True)
    train = ops.gated_up(x, wg, "silu")
    assert train.requires_grad and ((train.float() - fused.float()).norm() / fused.float().norm()).item() < 1e-2
    with torch.no_grad():  # a trainable weight in inference (generate, eval): the fused kernel
        assert torch.equal(ops.gated_up(x, wg, "silu"), fused)
    with torch.inference_mode():
        assert torch.equal(ops.gated_up(x, wg, "silu"), fused)


# ---- gated_mlp: down(gated_up(x)), keeping only the pre-activation in training ----

def make_down(n, u, dtype, seed=20):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(n, u, device="cuda", generator=g) / u ** 0.5).to(dtype)


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
@pytest.mark.parametrize("act", ACTS)
def test_gated_mlp_backward_matches_fp32_autograd(act, dtype):
    x, w = make((2, 37), 128, 96, dtype, seed=21)
    wd = make_down(136, 96, dtype)
    gy = torch.randn(2, 37, 136, device="cuda").to(dtype)
    leaves = [t.clone().requires_grad_(True) for t in (x, w, wd)]
    y = ops.gated_mlp(*leaves, act)
    y.backward(gy)
    ref = [t.detach().float().requires_grad_(True) for t in (x, w, wd)]
    yr = ops.gated_up_reference(ref[0], ref[1], act, out_dtype=torch.float32) @ ref[2].t()
    yr.backward(gy.float())
    assert y.dtype == dtype and y.shape == yr.shape
    assert ((y.float() - yr).norm() / yr.norm()).item() < 1e-2
    for name, got, want in zip(("x", "w", "w_down"), leaves, ref):
        assert got.grad.dtype == dtype and got.grad.shape == want.grad.shape
        err = ((got.grad.float() - want.grad).norm() / want.grad.norm()).item()
        assert err < 2e-2, f"d{name}: relative error {err:.3e}"


def test_gated_mlp_keeps_the_pre_activation_not_h():
    """What autograd keeps: gated_mlp saves x, the weights and z [M, 2U], never an [M, U] tensor;
    gated_up followed by the down GEMM saves h [M, U] as well."""
    m, k, u, n = 64, 128, 96, 136
    x, w = make((m,), k, u, torch.bfloat16, seed=22)
    wd = make_down(n, u, torch.bfloat16)

    def saved_shapes(f):
        shapes = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: shapes.append(tuple(t.shape)) or t, lambda t: t):
            f(x, w.clone().requires_grad_(True), wd.clone().requires_grad_(True)).sum()
        return shapes

    ours = saved_shapes(lambda a, b, c: ops.gated_mlp(a, b, c))
    assert (m, 2 * u) in ours and (m, u) not in ours, ours
    two_step = saved_shapes(lambda a, b, c: ops.gated_up(a, b) @ c.t())
    assert (m, u) in two_step, two_step


def test_gated_mlp_twice_partial_and_without_gradients():
    """retain_graph: a second backward (z recomputed) gives the first one's gradients; each input
    alone needing a gradient (a frozen down projection runs the pass without h) gives that gradient;
    without a recorded gradient the op is gated_up's fused kernel and the GEMM, bit for bit."""
    x, w = make((3, 50), 256, 128, torch.bfloat16, seed=23)
    wd = make_down(200, 128, torch.bfloat16)
    gy = torch.randn(3, 50, 200, device="cuda").to(torch.bfloat16)
    leaves = [t.clone().requires_grad_(True) for t in (x, w, wd)]
    y = ops.gated_mlp(*leaves)
    y.backward(gy, retain_graph=True)
    first = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    y.backward(gy)
    for t, f in zip(leaves, first):
        assert torch.equal(t.grad, f)
    for i in range(3):
        args = [t.clone().requires_grad_(j == i) for j, t in enumerate((x, w, wd))]
        ops.gated_mlp(*args).backward(gy)
        assert torch.equal(args[i].grad, first[i]), f"input {i} alone"
        assert all(a.grad is None for j, a in enumerate(args) if j != i)
    want = ops.gated_up(x, w) @ wd.t()
    assert torch.equal(ops.gated_mlp(x, w, wd), want)
    with torch.no_grad():
        assert torch.equal(ops.gated_mlp(x, leaves[1], leaves[2]), want)


def test_gated_mlp_bad_inputs_name_the_argument():
    x, w = make((4,), 64, 32, torch.bfloat16, seed=24)
    wd = make_down(48, 32, torch.bfloat16)
    for grad in (False, True):
        wg = w.clone().requires_grad_(grad)
        with pytest.raises(ValueError, match="gated_mlp: argument 'w_down'"):
            ops.gated_mlp(x, wg, make_down(48, 40, torch.bfloat16))
        with pytest.raises(ValueError, match="gated_mlp: argument 'w_down'"):
            ops.gated_mlp(x, wg, wd.half())
        with pytest.raises(ValueError, match="gated_mlp: argument 'w'"):
            ops.gated_mlp(x, wg[:, :32], wd)
        with pytest.raises(ValueError, match="gated_mlp: argument 'x'"):
            ops.gated_mlp(x.float(), wg, wd)
    with pytest.raises(ValueError, match="gated_mlp: argument 'x'"):
        ops.gated_mlp(x.cpu(), w.cpu(), wd.cpu())


def test_opcheck():
    x, w = make((5, 3), 64, 32, torch.bfloat16)
    torch.library.opcheck(torch.ops.blockfuse.gated_up.default, (x, w, "silu"))
    torch.library.opcheck(torch.ops.blockfuse.gated_up.default, (x, w, "gelu_tanh"))
    torch.library.opcheck(torch.ops.blockfuse.gated_up.default, (x, w.clone().requires_grad_(True), "silu", False))
    torch.library.opcheck(torch.ops.blockfuse.gated_up.default, (x, w.clone().requires_grad_(True), "silu", True))
    wd = make_down(24, 32, torch.bfloat16)
    torch.library.opcheck(torch.ops.blockfuse.gated_mlp.default, (x, w, wd, "silu"))
    torch.library.opcheck(torch.ops.blockfuse.gated_mlp.default, (x, w.clone().requires_grad_(True), wd, "gelu_tanh"))
    torch.library.opcheck(torch.ops.blockfuse.gated_mlp.default, (x, w, wd.clone().requires_grad_(True), "silu"))
    g = torch.randn(16, 32, device="cuda", dtype=torch.float16)
    torch.library.opcheck(torch.ops.blockfuse.interleave_gate_up.default, (g, g + 1))
    torch.library.opcheck(torch.ops.blockfuse.deinterleave_gate_up.default, (torch.cat((g, g)),))


# ---- torch.compile and CUDA graphs ----

def test_torch_compile_fullgraph():
    torch._dynamo.reset()

    def f(x, w):
        return ops.gated_up(x * 2, w, "silu") + 1

    cf = torch.compile(f, fullgraph=True)
    x, w = make((3, 100), 256, 128, torch.bfloat16)
    assert torch.equal(cf(x, w), f(x, w))
    # another size through the same compiled function (recompile or dynamic shapes: no break)
    x2, _ = make((7, 9), 256, 128, torch.bfloat16, seed=2)
    assert torch.equal(cf(x2, w), f(x2, w))


def test_torch_compile_dynamic_and_layout_ops():
    torch._dynamo.reset()

    def f(x, gate, up):
        w = ops.interleave_gate_up(gate, up)
        return ops.gated_up(x, w, "gelu_tanh")

    cf = torch.compile(f, fullgraph=True, dynamic=True)
    gate = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16) / 12
    up = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16) / 12
    for m in (5, 77, 300):
        x, _ = make((m,), 128, 64, torch.bfloat16, seed=m)
        assert torch.equal(cf(x, gate, up), f(x, gate, up))


def test_cuda_graph_capture():
    x, w = make((256,), 512, 384, torch.bfloat16)
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):  # warm-up outside the capture (one-time kernel attribute setup)
            ops.gated_up(static_x, w, "silu")
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = ops.gated_up(static_x, w, "silu")
    for seed in (1, 2):
        new_x, _ = make((256,), 512, 384, torch.bfloat16, seed=seed)
        static_x.copy_(new_x)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_out, ops.gated_up(new_x, w, "silu"))
        check_close(static_out, new_x, w, "silu")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [1, 2, 9, 17, 32])
@pytest.mark.parametrize("k, u", [(8192, 64), (4104, 1432), (4096, 14336)])
def test_gated_up_decode_rows(m, k, u, dtype):
    """Up to 32 rows gated_up runs the decode kernel: with 2U = 128 it splits K through the binding's
    decode workspace (shared with decode_gemm), at Llama-3 8B's 2U it does not."""
    x, w = make((m,), k, u, dtype, seed=m + k + u)
    check_close(ops.gated_up(x, w, "silu"), x, w, "silu")


def test_gated_up_decode_split_k_in_a_cuda_graph():
    """A split-K decode shape, captured after one eager call (which grows the workspace), replayed
    with new x; decode_gemm calls of another shape in the same graph share the workspace."""
    x, w = make((4,), 8192, 64, torch.bfloat16)
    wd = (torch.randn(4096, 8192, device="cuda") / 90).bfloat16()
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            ops.gated_up(static_x, w, "silu")
            ops.decode_gemm(static_x, wd)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        h = ops.gated_up(static_x, w, "silu")
        y = ops.decode_gemm(static_x, wd)
        h2 = ops.gated_up(static_x, w, "silu")
    for seed in (1, 2, 3):
        new_x, _ = make((4,), 8192, 64, torch.bfloat16, seed=seed)
        static_x.copy_(new_x)
        graph.replay()
        torch.cuda.synchronize()
        check_close(h, new_x, w, "silu")
        assert torch.equal(h, h2)
        ref = new_x.float() @ wd.float().t()
        assert ((y.float() - ref).norm() / ref.norm()).item() < 6e-3
