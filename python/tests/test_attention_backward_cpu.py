"""CPU tests of the attention backward's registration: on meta tensors, a forward + backward through
blockfuse.ops.attention / attention_varlen gives gradients of q, k, v's shapes (the fakes and the
autograd formula), and lse is not differentiable."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
import blockfuse.attention as A  # noqa: E402

pytestmark = pytest.mark.skipif(not A._HAS_OP, reason="blockfuse's ops are not loaded (no _C.so)")


def test_meta_forward_backward_shapes():
    q = torch.empty(2, 9, 8, 64, device="meta", dtype=torch.bfloat16, requires_grad=True)
    k = torch.empty(2, 11, 2, 64, device="meta", dtype=torch.bfloat16, requires_grad=True)
    v = torch.empty(2, 11, 2, 64, device="meta", dtype=torch.bfloat16, requires_grad=True)
    out, lse = A.attention(q, k, v, causal=True, return_lse=True)
    assert out.shape == q.shape and lse.shape == (2, 8, 9) and not lse.requires_grad
    out.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape


def test_meta_varlen_forward_backward_shapes():
    q = torch.empty(20, 8, 128, device="meta", dtype=torch.float16, requires_grad=True)
    k = torch.empty(30, 4, 128, device="meta", dtype=torch.float16, requires_grad=True)
    v = torch.empty(30, 4, 128, device="meta", dtype=torch.float16)
    cu = torch.empty(3, device="meta", dtype=torch.int32)
    A.attention_varlen(q, k, v, cu, cu, 10, 15).sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad is None


def test_backward_determinism_switch():
    """set_backward_deterministic picks the mode the autograd formula passes; None (the default) the
    faster one of the device (unordered on compute capability 9.0 only); torch's deterministic
    setting keeps the deterministic mode whatever it says."""
    meta = torch.device("meta")
    assert A._DETERMINISTIC_BACKWARD[0] is None
    assert A._deterministic(meta) and A._deterministic()  # not a Hopper GPU: the ordered mode
    try:
        A.set_backward_deterministic(False)
        assert not A._deterministic(meta)
        torch.use_deterministic_algorithms(True, warn_only=True)
        assert A._deterministic(meta)
        torch.use_deterministic_algorithms(False)
        A.set_backward_deterministic(True)
        assert A._deterministic(meta)
    finally:
        torch.use_deterministic_algorithms(False)
        A.set_backward_deterministic(None)
    assert A._DETERMINISTIC_BACKWARD[0] is None


def test_backward_op_takes_the_mode_on_meta():
    q = torch.empty(1, 9, 4, 64, device="meta", dtype=torch.bfloat16)
    k = torch.empty(1, 9, 2, 64, device="meta", dtype=torch.bfloat16)
    lse = torch.empty(1, 4, 9, device="meta", dtype=torch.float32)
    dq, dk, dv = torch.ops.blockfuse.attention_backward(q, q, k, k, q, lse, None, True, -1, -1, 0.0, False)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == k.shape
