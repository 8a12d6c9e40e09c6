"""pytest configuration for blockfuse's Python tests.

CPU tests (no marker) need neither torch nor a GPU where they say so; GPU tests carry the `gpu`
marker and skip, naming why, when torch, a CUDA device or the built extension is missing. CI runs
`python3 -m pytest python/tests -m "not gpu"`.

When the package is not installed (CI, a plain checkout), python/ is put on sys.path so the
torch-free modules (blockfuse.kvcache) import from the source tree. An installed blockfuse (the
one carrying the compiled _C.so) always wins.
"""
import importlib.util
import os
import sys

import pytest

if importlib.util.find_spec("blockfuse") is None:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs torch, a CUDA device and the built blockfuse extension")


def require_gpu():
    """Skips the calling test module unless torch, a CUDA device (cc >= 8.0) and the compiled ops
    are there; returns (torch, blockfuse.ops)."""
    torch = pytest.importorskip("torch", reason="torch is not installed: the GPU tests need it")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the GPU tests need one", allow_module_level=True)
    major, minor = torch.cuda.get_device_capability()
    if major < 8:
        pytest.skip(f"CUDA device has compute capability {major}.{minor}; blockfuse needs >= 8.0",
                    allow_module_level=True)
    from blockfuse import ops
    if not ops.available():
        pytest.skip(f"blockfuse extension not built: {ops.load_error()}", allow_module_level=True)
    return torch, ops


@pytest.fixture
def no_tf32():
    """fp32 matmuls in fp32, not TF32, for the test (its fp32 references must be fp32); restored after.
    GPU modules that compare against such references use it: pytest.mark.usefixtures("no_tf32")."""
    import torch
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


@pytest.fixture
def ordered_attention_backward():
    """The attention backward's deterministic mode for the test (on Hopper the default adds dQ
    unordered, so two backward calls may differ in dq's last bits); the default restored after. Tests
    that compare gradients bit for bit use it."""
    from blockfuse import ops
    ops.set_attention_backward_deterministic(True)
    yield
    ops.set_attention_backward_deterministic(None)
