"""Session 5 diagnostic: why batch-1 decode under StaticCache + CUDA graphs measured the patched
Llama-3-8B shape (32 layers) slower than the unpatched one (run2: 13.35 vs 10.68 ms a step).
Measures unpatched, fully patched, MLP-only and norms-only models the same way as bench_model's
decode_graphs, counts the compiled graphs, and profiles a few compiled steps of two of them."""
import copy
import sys
import time

import torch

import blockfuse
from blockfuse import bench_model as bm

layers = int(sys.argv[1]) if len(sys.argv) > 1 else 32
base = bm.build_fp32("llama3-8b", layers).to(torch.bfloat16)


def kernels(model, steps=8):
    from torch.profiler import ProfilerActivity, profile
    ids = torch.randint(0, model.config.vocab_size, (1, 128), device="cuda")
    kw = dict(do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(ids), cache_implementation="static")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        model.generate(ids, max_new_tokens=steps, min_new_tokens=steps, **kw)
        torch.cuda.synchronize()
    ev = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    ev.sort(key=lambda e: -e.self_device_time_total)
    tot = sum(e.self_device_time_total for e in ev) / 1e3
    print(f"#   kernels: {tot:.2f} ms GPU over prefill + {steps} steps, {sum(e.count for e in ev)} launches", flush=True)
    for e in ev[:14]:
        print(f"#   {e.self_device_time_total / 1e3:8.3f} ms x{e.count:5d}  {e.key[:100]}", flush=True)
    cpu = [e for e in prof.key_averages() if e.device_type != torch.autograd.DeviceType.CUDA]
    cpu.sort(key=lambda e: -e.self_cpu_time_total)
    for e in cpu[:8]:
        print(f"#   cpu {e.self_cpu_time_total / 1e3:8.3f} ms x{e.count:5d}  {e.key[:100]}", flush=True)


ORDERS = {
    "ablation": (("unpatched", None), ("patched", {}), ("mlp only", {"norm": False}), ("norms only", {"mlp": False})),
    # run4: does the order matter? patched first, then alternating
    "order": (("patched", {}), ("unpatched", None), ("patched", {}), ("unpatched", None)),
}
order = sys.argv[2] if len(sys.argv) > 2 else "ablation"
for i, (label, kw) in enumerate(ORDERS[order]):
    m = copy.deepcopy(base)
    if kw is not None:
        blockfuse.patch_model(m, **kw)
    g0 = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    t0 = time.perf_counter()
    tok_s, ms, compiled = bm.decode_graphs(m, 16)
    g1 = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    print(f"| {label} | {ms:.2f} ms/step | compiled {compiled} | {g1 - g0} graphs | {time.perf_counter() - t0:.0f} s |",
          flush=True)
    if order == "ablation" and label in ("unpatched", "patched"):
        kernels(m)
    torch._dynamo.reset()
    del m
    torch.cuda.empty_cache()
