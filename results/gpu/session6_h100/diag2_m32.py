"""Session 6 diagnostic 2: which predecessor slows ops.gated_up's decode kernel at M = 32 (run2/run3:
108 µs after cuBLAS's split-K down projection, 88 µs after itself or after decode_gemm; the L1
carveout hint did not change it). Each pair (predecessor, gated_up) in a CUDA graph of 20 pairs;
the profiler gives gated_up's kernel time in each."""
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from blockfuse import ops
from blockfuse.bench import capture_graph

k, u = 4096, 14336
g = torch.Generator(device="cuda").manual_seed(0)
wg = (torch.randn(u, k, device="cuda", generator=g) * k ** -0.5).bfloat16()
wu = (torch.randn(u, k, device="cuda", generator=g) * k ** -0.5).bfloat16()
wd = (torch.randn(k, u, device="cuda", generator=g) * u ** -0.5).bfloat16()
wgu = ops.interleave_gate_up(wg, wu)
a = torch.randn(512, 512, device="cuda").bfloat16()
big = torch.randn(64 << 20, device="cuda").bfloat16()


def kernel_us(pred, m):
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    h = ops.gated_up(x, wgu)

    def pair():
        pred(h, x)
        ops.gated_up(x, wgu)
    gr = capture_graph(pair, 20)
    gr.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            gr.replay()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        if e.device_time_total > 0 and e.count:
            out[e.key[:60]] = e.device_time_total / e.count
    ours = [v for n, v in out.items() if "decode_gemm_kernel" in n]
    return ours[0] if ours else float("nan"), out


PREDS = {
    "nothing (gated_up twice)": lambda h, x: ops.gated_up(x, wgu),
    "F.linear(h, wd) [split-K]": lambda h, x: F.linear(h, wd),
    "F.linear(h[:16], wd)": lambda h, x: F.linear(h[:16], wd),
    "torch.mm 512^2 bf16": lambda h, x: torch.mm(a, a),
    "elementwise on 128 MB": lambda h, x: big.mul_(1.0),
    "decode_gemm(h, wd)": lambda h, x: ops.decode_gemm(h, wd),
    "F.linear(x, wg) [gate GEMV]": lambda h, x: F.linear(x, wg),
}
for m in (16, 32):
    for name, pred in PREDS.items():
        t, all_k = kernel_us(pred, m)
        others = ", ".join(f"{n.split('(')[0][-40:]} {v:.1f}" for n, v in all_k.items() if "decode_gemm_kernel" not in n)
        print(f"M={m:2d} after {name:28s}: gated_up kernel {t:6.1f} us   [{others}]", flush=True)
