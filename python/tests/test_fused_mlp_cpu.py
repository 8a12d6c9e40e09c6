"""CPU tests of the fused decode MLP's torch-only parts (no GPU, no compiled extension): the router's
selection rule (ops.router_reference), the masked reference formula, and blockfuse.nn.SparseGatedMLP's
plain-torch path (chunking, union vs per-token lists, from_hf)."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
from blockfuse import nn as bnn  # noqa: E402
from blockfuse import ops  # noqa: E402


def rand(*shape, seed=0, scale=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale).float()


def mlp_fp64(x, w_gate_up, w_down_t, neuron_mask=None):
    """The MLP in float64, written out: h = silu(gate)·up (masked), y = h·w_down_t."""
    z = x.double() @ w_gate_up.double().t()
    up, gate = z[..., 0::2], z[..., 1::2]
    h = gate * torch.sigmoid(gate) * up
    if neuron_mask is not None:
        h = h * neuron_mask
    return h @ w_down_t.double()


def test_router_reference_topk_ties_and_nan():
    x = torch.ones(2, 8)
    r = torch.zeros(6, 8)
    r[4] = 1.0  # block 4 scores highest for both tokens; the rest tie at sigmoid(0)
    keep = ops.router_reference(x, r, "topk", top_k=3)
    assert keep.tolist() == [[True, True, False, False, True, False]] * 2  # ties go to the lower index
    r[1] = float("nan")
    keep = ops.router_reference(x, r, "topk", top_k=3)
    assert keep.tolist() == [[True, False, True, False, True, False]] * 2  # NaN is never kept
    assert not ops.router_reference(x, r, "threshold", threshold=0.5)[:, 1].any()
    assert ops.router_reference(x, r, "threshold", threshold=0.5).tolist() == [[False] * 4 + [True, False]] * 2
    with pytest.raises(ValueError, match="mode 'best'"):
        ops.router_reference(x, r, "best")


def test_masked_reference_matches_fp64():
    x, wgu, wd = rand(5, 64, seed=1), rand(256, 64, seed=2, scale=0.1), rand(128, 64, seed=3, scale=0.1)
    mask = rand(5, 128, seed=4) > 0
    got = ops.fused_mlp_reference(x, wgu, wd, "silu", neuron_mask=mask, out_dtype=torch.float64)
    torch.testing.assert_close(got, mlp_fp64(x, wgu, wd, mask), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("per_token", [True, False])
def test_sparse_module_selects_what_the_router_says(per_token):
    m = bnn.SparseGatedMLP(64, 256, block_size=32, mode="topk", top_k=3, per_token=per_token)
    with torch.no_grad():
        m.router.copy_(rand(8, 64, seed=5))
    x = rand(4, 64, seed=6)
    keep = torch.sigmoid(x.double() @ m.router.double().t()).topk(3, dim=-1).indices
    blocks = torch.zeros(4, 8, dtype=torch.bool).scatter_(1, keep, True)
    if not per_token:
        blocks = blocks.any(0, keepdim=True).expand(4, 8)
    want = mlp_fp64(x, m.w_gate_up, m.w_down_t, blocks.repeat_interleave(32, dim=1))
    with torch.no_grad():
        got = m(x)
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(got.double(), mlp_fp64(x, m.w_gate_up, m.w_down_t), rtol=1e-3, atol=1e-4)


def test_sparse_module_all_none_and_chunks():
    m = bnn.SparseGatedMLP(64, 128, block_size=16, mode="topk", top_k=8)  # every block: the dense MLP
    x = rand(2, 35, 64, seed=7)  # 70 rows: three chunks of <= 32
    with torch.no_grad():
        y = m(x)
        assert y.shape == x.shape
        torch.testing.assert_close(y.double(), mlp_fp64(x, m.w_gate_up, m.w_down_t), rtol=1e-4, atol=1e-5)
        m.mode, m.threshold = "threshold", 1.0  # sigmoid never exceeds 1: nothing is kept
        assert torch.equal(m(x), torch.zeros_like(x))
        assert m(x[:0]).shape == (0, 35, 64)


@pytest.mark.parametrize("per_token", [True, False])
def test_prefill_keep_is_the_chunked_selection(per_token):
    """The prefill path's selection (_keep): the router's per row, or with per_token=False the union
    over each chunk of 32 rows (the last chunk short), as the decode path chunks them."""
    m = bnn.SparseGatedMLP(64, 256, block_size=32, mode="topk", top_k=2, per_token=per_token)
    with torch.no_grad():
        m.router.copy_(rand(8, 64, seed=21))
    x = rand(70, 64, seed=22)
    keep = m._keep(x)
    own = ops.router_reference(x, m.router, "topk", top_k=2)
    if per_token:
        assert torch.equal(keep, own)
    else:
        for c0 in range(0, 70, 32):
            union = own[c0:c0 + 32].any(0)
            assert torch.equal(keep[c0:c0 + 32], union.expand(min(32, 70 - c0), -1))
        assert not torch.equal(keep, own)  # the unions do widen the selection here


def test_sparse_module_errors():
    with pytest.raises(ValueError, match="block_size 48"):
        bnn.SparseGatedMLP(64, 96, block_size=48)
    with pytest.raises(ValueError, match="block_size 64 for intermediate size 96"):
        bnn.SparseGatedMLP(64, 96, block_size=64)
    with pytest.raises(ValueError, match="top_k 9"):
        bnn.SparseGatedMLP(64, 128, block_size=16, top_k=9)
    with pytest.raises(ValueError, match="mode 'best'"):
        bnn.SparseGatedMLP(64, 128, mode="best")


def test_sparse_from_hf_llama():
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    from transformers.models.llama.modeling_llama import LlamaConfig, LlamaMLP
    torch.manual_seed(0)
    hf = LlamaMLP(LlamaConfig(hidden_size=64, intermediate_size=128, hidden_act="silu")).eval()
    router = rand(4, 64, seed=8)
    m = bnn.SparseGatedMLP.from_hf(hf, router, block_size=32, top_k=4)  # all 4 blocks: equals the HF MLP
    x = rand(3, 64, seed=9)
    with torch.no_grad():
        torch.testing.assert_close(m(x), hf(x), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"router has shape \(3, 64\)"):
        bnn.SparseGatedMLP.from_hf(hf, router[:3], block_size=32)


def test_gated_mlp_whole_mlp_opt_in_on_cpu_keeps_the_torch_path():
    """use_fused_mlp on CPU tensors: the kernel does not apply, the plain-torch result is unchanged."""
    torch.manual_seed(30)
    m = bnn.GatedMLP(64, 128)
    x = rand(3, 64, seed=31)
    with torch.no_grad():
        want = m(x)
        m.use_fused_mlp()
        assert not m._whole_mlp_applies(x)
        assert torch.equal(m(x), want)
        assert "fused_mlp=True" in repr(m)
        m.use_fused_mlp(False)
        assert "fused_mlp" not in repr(m)
