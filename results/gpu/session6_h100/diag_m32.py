"""Session 6 diagnostic: why F.linear(down) after ops.gated_up measured slower at M = 32 than after
torch's gate/up (run1: 8B down 68.6 vs 45.9 µs, 70B 247 vs 169 µs; equal at M = 1..16). Times, in
CUDA graphs of 20 calls (median per call), each piece alone and the pairs, and prints the kernels of
one replay of each pair with their GPU times (torch.profiler)."""
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from blockfuse import ops
from blockfuse.bench import capture_graph, time_cuda


def us(fn, calls=20):
    g = capture_graph(fn, calls)
    return time_cuda(lambda _: g.replay(), [None], 3, 0.3)[0] * 1e3 / calls


def kernels(fn, label):
    g = capture_graph(fn, 1)
    g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            g.replay()
        torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total / e.count if e.count else 0.0, e.count)
            for e in prof.key_averages() if e.device_time_total > 0]
    for name, t, n in sorted(rows, key=lambda r: -r[1]):
        print(f"    {label:28s} {t:8.1f} us x{n:<3d} {name[:110]}")


for key, k, u in (("8b", 4096, 14336), ("70b", 8192, 28672)):
    g = torch.Generator(device="cuda").manual_seed(0)
    wg = (torch.randn(u, k, device="cuda", generator=g) * k ** -0.5).bfloat16()
    wu = (torch.randn(u, k, device="cuda", generator=g) * k ** -0.5).bfloat16()
    wd = (torch.randn(k, u, device="cuda", generator=g) * u ** -0.5).bfloat16()
    wgu = ops.interleave_gate_up(wg, wu)
    for m in (16, 32):
        x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
        h_ours = ops.gated_up(x, wgu)
        h_torch = F.silu(F.linear(x, wg)) * F.linear(x, wu)
        t = {
            "gated_up": us(lambda: ops.gated_up(x, wgu)),
            "torch gate/up": us(lambda: F.silu(F.linear(x, wg)) * F.linear(x, wu)),
            "down(h_ours)": us(lambda: F.linear(h_ours, wd)),
            "down(h_torch)": us(lambda: F.linear(h_torch, wd)),
            "gated_up + down": us(lambda: F.linear(ops.gated_up(x, wgu), wd)),
            "torch MLP": us(lambda: F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)),
            "gemv+swiglu + down": us(lambda: F.linear(ops.swiglu(F.linear(x, wgu), "silu", "interleaved"), wd)),
            "decode_gemm(down)": us(lambda: ops.decode_gemm(h_ours, wd)),
            "gated_up + decode_gemm": us(lambda: ops.decode_gemm(ops.gated_up(x, wgu), wd)),
        }
        print(f"{key} M={m}: " + "  ".join(f"{n} {v:.1f}" for n, v in t.items()), flush=True)
        if m == 32:
            kernels(lambda: F.linear(ops.gated_up(x, wgu), wd), f"{key} gated_up+down")
            kernels(lambda: F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd), f"{key} torch MLP")
    del wg, wu, wd, wgu
    torch.cuda.empty_cache()
sys.stdout.flush()
