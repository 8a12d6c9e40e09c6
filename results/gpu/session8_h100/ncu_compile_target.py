"""ncu target (session 8): torch.compile(dynamic=False) of bench/memory_bound_baselines.py's add_rmsnorm
(bf16 out) or swiglu (bf16 out) at one shape, called 8 times (ncu skips the first 5 launches).
Usage: python3 ncu_compile_target.py add-rmsnorm|swiglu HIDDEN ROWS"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../bench"))
import memory_bound_baselines as mb  # noqa: E402

op, h, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
bf = torch.bfloat16
if op == "add-rmsnorm":
    x, r = torch.randn(rows, h, dtype=bf, device="cuda"), torch.randn(rows, h, dtype=bf, device="cuda")
    w = torch.randn(h, dtype=bf, device="cuda")
    f = torch.compile(mb.add_rmsnorm_bf16, dynamic=False)
    call = lambda: f(x, r, w)  # noqa: E731
else:
    gu = torch.randn(rows, 2 * h, dtype=bf, device="cuda")
    f = torch.compile(mb.swiglu_bf16, dynamic=False)
    call = lambda: f(gu)  # noqa: E731
for _ in range(8):
    call()
torch.cuda.synchronize()
