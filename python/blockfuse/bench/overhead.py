"""`python -m blockfuse.bench overhead`: the host cost of a call of each op.

µs per call, host-side (a tight loop of 2000 calls, synchronised once: common.host_us), of each op on
a tiny problem against torch.nn.functional.linear on one of the same size, eager, under no_grad — the
cost a decode step pays per op when the kernels themselves take ~2-5 µs.
"""
import json

import torch

from .common import host_us, meta, ready


@torch.no_grad()
def measure():
    """{case: host µs per call}, printed as a table."""
    from .. import nn as bnn
    from .. import ops
    bf = torch.bfloat16
    x = torch.randn(1, 64, device="cuda", dtype=bf)
    w = torch.randn(64, 64, device="cuda", dtype=bf)
    w2 = torch.randn(128, 64, device="cuda", dtype=bf)
    g = torch.randn(64, device="cuda", dtype=bf)
    gu = torch.randn(1, 128, device="cuda", dtype=bf)
    mlp = bnn.GatedMLP(64, 64, dtype=bf, device="cuda")
    B = torch.ops.blockfuse
    cases = {
        "F.linear [1,64]x[64,64]": lambda: torch.nn.functional.linear(x, w),
        "torch.add [1,64]": lambda: torch.add(x, x),
        "ops.gated_up M=1 K=U=64": lambda: ops.gated_up(x, w2),
        "torch.ops.blockfuse.gated_up (packet)": lambda: B.gated_up(x, w2),
        "GatedMLP.gate_up (Parameter weight)": lambda: mlp.gate_up(x),
        "ops.rmsnorm 1x64": lambda: ops.rmsnorm(x, g),
        "ops.add_rmsnorm 1x64": lambda: ops.add_rmsnorm(x, x, g),
        "ops.swiglu 1x128": lambda: ops.swiglu(gu),
        "ops.decode_gemm [1,64]x[64,64]": lambda: ops.decode_gemm(x, w),
    }
    try:
        from transformers.models.llama.modeling_llama import LlamaRMSNorm
        hf = LlamaRMSNorm(64).to("cuda", bf)
        cases["HF LlamaRMSNorm 1x64 (replaced)"] = lambda: hf(x)
        cases["HF add + LlamaRMSNorm 1x64 (replaced)"] = lambda: hf(x + x)
    except ImportError:
        pass
    res = {k: host_us(f) for k, f in cases.items()}
    lin = res["F.linear [1,64]x[64,64]"]
    print("| call (eager, no_grad, bf16) | µs per call | vs F.linear |")
    print("| --- | --- | --- |")
    for k, v in res.items():
        print(f"| {k} | {v:.2f} | {v / lin:.2f}x |")
    return res


def run(a):
    """The `overhead` subcommand: returns the exit status."""
    status = ready()
    if status:
        return status
    result = {**meta(), "benchmark": "per-call overhead", "us_per_call": measure()}
    with open(a.json, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {a.json}")
    return 0
