"""Session 15, call 7 (issue 17): add_rmsnorm at H = 4096 x 32768 rows (bf16 out) took 377-381 µs a call
through bench/memory_bound_baselines.py but 361-362 µs as a kernel (ncu in both processes, and the C++
bench's events): where do the other ~16 µs go? The bench's sequence (weight, inputs, the same-size copy,
then 20 back-to-back calls between events), repeated; then the kernels and the gaps between them under
torch.profiler; then in place, per-call events and a CUDA graph."""
import json
import sys

import torch

sys.path.insert(0, "bench")
from memory_bound_baselines import EPS, copy_us, load_blockfuse, time_batched  # noqa: E402
from torch_baselines import time_events, time_graph  # noqa: E402

bo = load_blockfuse()
bf = torch.bfloat16
out = {"device": torch.cuda.get_device_name(), "rows": []}


def rec(label, us, h, m):
    nb = 3 * m * h * 2 + 2 * h + 2 * m * h
    out["rows"].append({"label": label, "H": h, "rows": m, "us": us, "gbs": nb / (us * 1e3)})
    print(f"H={h:5d} rows={m:5d}  {label:58} {us:9.2f} us {nb / (us * 1e3):6.0f} GB/s", flush=True)


for h, m in ((4096, 32768), (4096, 8192)):
    nb = 3 * m * h * 2 + 2 * h + 2 * m * h
    w = torch.randn(h, dtype=bf, device="cuda")
    xs = [torch.rand(m, h, dtype=bf, device="cuda") * 2 - 1]
    rs = [torch.rand(m, h, dtype=bf, device="cuda") * 2 - 1]
    rec("same-size copy (the bench's copy_us)", copy_us(nb, m, 1), h, m)
    f = lambda i: bo.add_rmsnorm(xs[i], rs[i], w, EPS)  # noqa: E731
    for k in range(3):
        rec(f"bench sequence: 20 calls between events, try {k}", time_batched(f, 1), h, m)
    o, ro = f(0)
    print("  offsets (MiB) res, res_out, out - x:", [(t.data_ptr() - xs[0].data_ptr()) >> 20 for t in (rs[0], ro, o)])
    del o, ro
    try:
        # The kernels and the gaps between them.
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for i in range(20):
                f(0)
            torch.cuda.synchronize()
        ev = sorted([e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA],
                    key=lambda e: e.time_range.start)
        names = {}
        for e in ev:
            names.setdefault(e.name[:80], []).append(e.time_range.end - e.time_range.start)
        for n, d in names.items():
            print(f"  kernel {n}: {len(d)} launches, median {sorted(d)[len(d) // 2]:.2f} us")
        gaps = [b.time_range.start - a.time_range.end for a, b in zip(ev, ev[1:])]
        if gaps:
            print(f"  gaps between consecutive kernels: median {sorted(gaps)[len(gaps) // 2]:.2f} us, max {max(gaps):.2f} us")
            span = (ev[-1].time_range.end - ev[0].time_range.start) / max(1, len(names.get(ev[0].name[:80], [])))
            print(f"  first start to last end / launches: {span:.2f} us")
    except Exception as e:  # noqa: BLE001 — the timings below must still run
        print("  profiler failed:", repr(e))
    r2 = rs[0].clone()
    rec("in place (add_rmsnorm_), 20 calls between events", time_batched(lambda i: bo.add_rmsnorm_(xs[0], r2, w, EPS), 1), h, m)
    rec("events around each call (median of 20)", time_events(f, 1, 3, 20), h, m)
    rec("CUDA graph of 20 calls", time_graph(f, 2, 5, 1, calls=20), h, m)
    torch.cuda.empty_cache()
    rec("bench sequence after empty_cache", time_batched(f, 1), h, m)
    del xs, rs, w, r2
    torch.cuda.empty_cache()
json.dump(out, open(sys.argv[1], "w"), indent=1)
