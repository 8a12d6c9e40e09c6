"""CPU tests of the compiled torch binding (python/csrc), where it is built but no GPU is present (CI
builds it): every op is registered with a CPU kernel and a fake implementation, and a CPU tensor is
refused with a ValueError naming the argument before anything runs. The layout ops run on CPU
tensors and are checked against the plain-torch layout. Skipped where the library is not built."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
from blockfuse import ops  # noqa: E402

if not ops.available():
    pytest.skip(f"the blockfuse torch library is not built: {ops.load_error()}", allow_module_level=True)

OPS = ("gated_up", "interleave_gate_up", "interleave_stacked", "deinterleave_gate_up", "deinterleave_to_stacked",
       "rmsnorm", "add_rmsnorm", "add_rmsnorm_", "rmsnorm_fp8", "add_rmsnorm_fp8", "swiglu", "swiglu_fp8",
       "decode_gemm", "decode_gemm_reserve", "attention", "attention_varlen", "fused_mlp", "fused_mlp_sparse",
       "neuron_block_router", "fused_mlp_reserve", "gated_up_fp8", "gated_up_fp8_dynamic", "cross_entropy_fwd_bwd_",
       "gated_mlp_dgated_", "rope")
NO_FAKE = ("decode_gemm_reserve", "fused_mlp_reserve")  # return host ints: nothing to trace


@pytest.mark.parametrize("name", OPS)
def test_op_is_registered_with_cpu_and_cuda_kernels(name):
    qualified = f"blockfuse::{name}"
    torch._C._dispatch_find_schema_or_throw(qualified, "")
    for key in ("CPU", "CUDA"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key), f"{qualified} has no {key} kernel"
    if name not in NO_FAKE:
        from torch._library.simple_registry import singleton
        assert singleton.find(qualified).fake_impl.kernel is not None, f"{qualified} has no fake implementation"


def bf16(*shape):
    return torch.randn(*shape).to(torch.bfloat16)


CPU_CALLS = [
    (lambda: ops.gated_up(bf16(2, 64), bf16(128, 64)), "gated_up", "x"),
    (lambda: ops.rmsnorm(bf16(2, 64), bf16(64)), "rmsnorm", "x"),
    (lambda: ops.add_rmsnorm(bf16(2, 64), bf16(2, 64), bf16(64)), "add_rmsnorm", "x"),
    (lambda: ops.add_rmsnorm_fp8(bf16(2, 64), bf16(2, 64), bf16(64)), "add_rmsnorm_fp8", "x"),
    (lambda: ops.swiglu(bf16(2, 128)), "swiglu", "gate_up"),
    (lambda: ops.swiglu_fp8(bf16(2, 128)), "swiglu_fp8", "gate_up"),
    (lambda: ops.decode_gemm(bf16(2, 64), bf16(32, 64)), "decode_gemm", "x"),
    (lambda: ops.attention(bf16(1, 8, 2, 64), bf16(1, 8, 2, 64), bf16(1, 8, 2, 64)), "attention", "q"),
    (lambda: ops.fused_mlp(bf16(2, 64), bf16(256, 64), bf16(128, 64)), "fused_mlp", "x"),
    (lambda: ops.fused_mlp_sparse(bf16(2, 64), bf16(256, 64), bf16(128, 64), torch.zeros(4, dtype=torch.int32),
                                  torch.zeros(1, dtype=torch.int32), 32), "fused_mlp_sparse", "x"),
    (lambda: ops.neuron_block_router(bf16(2, 64), bf16(4, 64), "topk", 0.5, 2), "neuron_block_router", "x"),
    (lambda: ops.gated_up_fp8(bf16(2, 64).to(torch.float8_e4m3fn), torch.ones(1), bf16(64, 64).to(torch.float8_e4m3fn),
                              torch.ones(1)), "gated_up_fp8", "x"),
    (lambda: ops.gated_up_fp8_dynamic(bf16(2, 64).to(torch.float8_e4m3fn), torch.ones(1),
                                      bf16(64, 64).to(torch.float8_e4m3fn), torch.ones(1)), "gated_up_fp8_dynamic", "x"),
    (lambda: torch.ops.blockfuse.cross_entropy_fwd_bwd_(bf16(2, 64), torch.zeros(2, dtype=torch.long)),
     "cross_entropy_fwd_bwd_", "logits"),
    (lambda: torch.ops.blockfuse.gated_mlp_dgated_(bf16(2, 64), bf16(64, 32), bf16(2, 64)), "gated_mlp_dgated_", "dy"),
    (lambda: ops.rope(bf16(1, 4, 3, 64), bf16(1, 3, 64), bf16(1, 3, 64)), "rope", "x"),
]


@pytest.mark.parametrize("call, op, arg", CPU_CALLS, ids=[c[1] for c in CPU_CALLS])
def test_cpu_tensors_are_refused_naming_the_argument(call, op, arg):
    with pytest.raises(ValueError, match=rf"blockfuse(\.|::){op}: argument '{arg}' is on cpu"):
        call()


def test_layout_ops_run_on_cpu():
    gate, up = bf16(48, 64), bf16(48, 64)
    w = ops.interleave_gate_up(gate, up)
    assert torch.equal(w[0::2], up) and torch.equal(w[1::2], gate)  # row 2j = up_j, 2j+1 = gate_j
    g2, u2 = ops.deinterleave_gate_up(w)
    assert torch.equal(g2, gate) and torch.equal(u2, up)
    stacked = torch.cat([gate, up])
    assert torch.equal(ops.interleave_stacked(stacked), w)
    assert torch.equal(ops.deinterleave_to_stacked(w), stacked)


def test_programmatic_dependent_launch_switch_returns_the_previous_setting():
    before = ops.set_programmatic_dependent_launch(False)
    try:
        assert ops.set_programmatic_dependent_launch(True) is False
        assert ops.set_programmatic_dependent_launch(True) is True
    finally:
        ops.set_programmatic_dependent_launch(before)
