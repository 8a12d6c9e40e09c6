"""GPU tests of blockfuse::gated_up_fp8 (the FP8 fused gated up-projection, sm90a): bf16 and e4m3
outputs against the fp32 reference of the dequantised operands on fresh random inputs, every scale
mode, odd M and leading dims, the argument errors, the fake implementation and CUDA-graph capture.
On a GPU other than Hopper the op must refuse, saying so."""
import pytest

from conftest import require_gpu
from tensor_utils import rel, rnd  # noqa: E402

torch, ops = require_gpu()
from blockfuse import gated_up_fp8 as G8  # noqa: E402
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not G8._HAS_GATED_UP_FP8, reason="the loaded library predates gated_up_fp8")]
HOPPER = torch.cuda.get_device_capability() == (9, 0)
needs_hopper = pytest.mark.skipif(not HOPPER, reason="the FP8 kernel is sm90a (Hopper) only")
K, U = 512, 384
FP8 = torch.float8_e4m3fn


def operands(lead, per_row_x, per_channel_w, seed=0):
    x = rnd(*lead, K, seed=seed).to(FP8)
    w = rnd(2 * U, K, seed=seed + 1).to(FP8)
    rows = 1
    for d in lead:
        rows *= d
    sx = (rnd(*lead, seed=seed + 2).abs() * 0.02 + 0.01) if per_row_x else torch.tensor([0.02], device="cuda")
    sw = (rnd(2 * U, seed=seed + 3).abs() * 0.004 + 0.002) if per_channel_w else torch.tensor([0.003], device="cuda")
    return x, sx.float().contiguous(), w, sw.float().contiguous()


@needs_hopper
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("per_row_x, per_channel_w", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("lead", [(1,), (77,), (3, 50)])
def test_bf16_output_matches_fp32(lead, per_row_x, per_channel_w, activation):
    x, sx, w, sw = operands(lead, per_row_x, per_channel_w)
    h = ops.gated_up_fp8(x, sx, w, sw, activation)
    assert h.dtype == torch.bfloat16 and h.shape == (*lead, U)
    want = ops.gated_up_fp8_reference(x, sx, w, sw, activation).float()
    assert rel(h, want) < 1e-2


@needs_hopper
def test_e4m3_output_matches_the_quantised_reference():
    x, sx, w, sw = operands((40,), True, True, seed=5)
    s = torch.tensor([0.01], device="cuda")
    q = ops.gated_up_fp8(x, sx, w, sw, "silu", s)
    assert q.dtype == FP8 and q.shape == (40, U)
    want = ops.gated_up_fp8_reference(x, sx, w, sw, "silu", s)
    assert rel(q.float() * 0.01, want.float() * 0.01) < 4e-2


@needs_hopper
def test_errors_name_the_argument():
    x, sx, w, sw = operands((4,), False, False)
    cases = [
        (lambda: ops.gated_up_fp8(x.to(torch.bfloat16), sx, w, sw), "argument 'x' has dtype"),
        (lambda: ops.gated_up_fp8(x, sx, w[:, :256], sw), "argument 'w' has sizes"),
        (lambda: ops.gated_up_fp8(x, sx.double(), w, sw), "argument 'x_scale'"),
        (lambda: ops.gated_up_fp8(x, sx, w, torch.ones(5, device="cuda")), "argument 'w_scale'"),
        (lambda: ops.gated_up_fp8(x, sx, w, sw, "relu"), "argument 'activation'"),
        (lambda: ops.gated_up_fp8(x, sx, w, sw, "silu", torch.ones(2, device="cuda")), "argument 'out_scale'"),
        (lambda: ops.gated_up_fp8(x.cpu(), sx, w, sw), "argument 'x' is on cpu"),
    ]
    for fn, msg in cases:
        with pytest.raises(ValueError, match=msg):
            fn()


@needs_hopper
def test_opcheck_and_graph_capture():
    x, sx, w, sw = operands((8,), True, False, seed=7)
    # test_schema compares inputs with arithmetic torch has no e4m3 kernel for: the fake check only.
    torch.library.opcheck(torch.ops.blockfuse.gated_up_fp8.default, (x, sx, w, sw, "silu", None),
                          test_utils=("test_faketensor",))
    ops.gated_up_fp8(x, sx, w, sw)  # warm-up outside the capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = ops.gated_up_fp8(x, sx, w, sw)
    sx.mul_(2.0)  # scales are read on the device: a replay sees the new value
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert rel(out, ops.gated_up_fp8_reference(x, sx, w, sw)) < 1e-2


needs_dynamic = pytest.mark.skipif(not G8._HAS_GATED_UP_FP8_DYNAMIC,
                                   reason="the loaded library predates gated_up_fp8_dynamic")


@needs_hopper
@needs_dynamic
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("lead", [(1,), (77,), (3, 50)])
def test_dynamic_output_quantises_the_bf16_h_per_row(lead, activation):
    x, sx, w, sw = operands(lead, True, True, seed=11)
    q, scales = ops.gated_up_fp8_dynamic(x, sx, w, sw, activation)
    assert q.dtype == FP8 and q.shape == (*lead, U)
    assert scales.dtype == torch.float32 and scales.shape == lead
    # Bit for bit: the row kernel's rule applied to the bf16 h the same GEMM returns.
    h = ops.gated_up_fp8(x, sx, w, sw, activation)
    q_want, s_want = ops.fp8_quantize_reference(h)
    assert torch.equal(scales, s_want)
    assert torch.equal(q.view(torch.uint8), q_want.view(torch.uint8))
    # And against the fp32 reference: one e4m3 step plus the accumulation.
    ref = ops.gated_up_fp8_reference(x, sx, w, sw, activation).float()
    assert rel(q.float() * scales.unsqueeze(-1), ref) < 4e-2
    q_ref, s_ref = ops.gated_up_fp8_reference(x, sx, w, sw, activation, "dynamic")
    assert rel(scales, s_ref) < 1e-2


@needs_hopper
@needs_dynamic
def test_dynamic_output_errors_graph_and_fake():
    x, sx, w, sw = operands((8,), True, False, seed=13)
    for fn, msg in [(lambda: ops.gated_up_fp8_dynamic(x.to(torch.bfloat16), sx, w, sw), "argument 'x' has dtype"),
                    (lambda: ops.gated_up_fp8_dynamic(x, sx, w, sw, "relu"), "argument 'activation'"),
                    (lambda: ops.gated_up_fp8_dynamic(x, sx, w[:, :256], sw), "argument 'w' has sizes")]:
        with pytest.raises(ValueError, match=msg):
            fn()
    torch.library.opcheck(torch.ops.blockfuse.gated_up_fp8_dynamic.default, (x, sx, w, sw, "silu"),
                          test_utils=("test_faketensor",))
    ops.gated_up_fp8_dynamic(x, sx, w, sw)  # warm-up outside the capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        q, scales = ops.gated_up_fp8_dynamic(x, sx, w, sw)
    sx.mul_(2.0)  # read on the device: the replay sees it
    scales.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    q_want, s_want = ops.fp8_quantize_reference(ops.gated_up_fp8(x, sx, w, sw))
    assert torch.equal(scales, s_want)
    assert torch.equal(q.view(torch.uint8), q_want.view(torch.uint8))


@pytest.mark.skipif(HOPPER, reason="checks the refusal on non-Hopper GPUs")
def test_refuses_other_gpus():
    x, sx, w, sw = operands((4,), False, False)
    with pytest.raises((ValueError, RuntimeError), match="not supported|sm90|Hopper"):
        ops.gated_up_fp8(x, sx, w, sw)
