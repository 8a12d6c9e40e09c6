"""torch baselines for the decoder-block kernels of `blockfuse bench add-rmsnorm|swiglu|decode-gemm`.

Times what a PyTorch user runs today, on the same shapes and with the same protocol as the C++
benchmarks, so the closing tables can quote blockfuse beside torch eager and torch.compile measured
on the same machine in the same session:
  decode-gemm   torch.nn.functional.linear(x, W), M = 1, 8, 16, 32 (cuBLAS through torch)
  add-rmsnorm   h = x + residual; h * rsqrt(mean(h^2) + eps) * w (Llama's RMSNorm: fp32 math),
                eager and torch.compile; FP8 dynamic: + per-row amax scale and e4m3 cast (compiled)
  swiglu        silu(gate) * up from a stacked [M, 2U] tensor, eager and torch.compile;
                FP8 dynamic as above (compiled)
Rows <= 32 (decode) are timed per call from CUDA-graph replays of 20 calls (a serving loop runs them
in a graph); larger problems with CUDA events per call, inputs rotated so L2 (50 MB) holds none.
Bytes are the minimum traffic, as in the C++ benchmarks. Needs a GPU, torch (>= 2.1 for
float8_e4m3fn). Usage: python3 bench/torch_baselines.py [--quick] [--json FILE]
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F

GRAPH_ROWS = 32
GRAPH_CALLS = 20
L2_BYTES = 50 << 20
DECODE_SHAPES = {"qkv405": (2304, 16384), "gateup405": (13312, 16384), "down405": (16384, 6656),
                 "gateup8b": (28672, 4096), "down8b": (4096, 14336)}


def sets_for(nbytes):
    return max(1, min(16, -(-3 * L2_BYTES // max(nbytes, 1))))


def time_events(fn, n_sets, warmup, reps):
    for i in range(warmup):
        fn(i % n_sets)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn(i % n_sets)
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3  # us


def time_graph(fn, warmup, reps, n_sets=1, calls=GRAPH_CALLS):
    """Per-call µs (median of reps) of a CUDA graph of `calls` calls cycling over n_sets input sets:
    no CPU overhead, for problems whose kernel is shorter than a torch call's dispatch."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            fn(i % n_sets)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fn(i % n_sets)
    for _ in range(warmup):
        g.replay()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(times)


def time_op(fn, rows, n_sets, warmup=5, reps=50):
    return time_graph(fn, warmup, reps) if rows <= GRAPH_ROWS else time_events(fn, n_sets, warmup, reps)


def copy_gbs():
    a = torch.empty(1 << 29, dtype=torch.int16, device="cuda")  # 1 GiB
    b = torch.empty_like(a)
    us = time_events(lambda i: b.copy_(a), 1, 3, 20)
    return 2 * a.numel() * 2 / (us * 1e3)


def rmsnorm(x, res, w, eps=1e-6):
    h = x + res
    hf = h.float()
    return h, (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def quant_dynamic(v):
    amax = v.abs().amax(-1, keepdim=True).float().clamp(min=1e-12)
    scale = amax / 448.0
    return (v.float() / scale).clamp(-448, 448).to(torch.float8_e4m3fn), scale


def rmsnorm_fp8(x, res, w, eps=1e-6):
    h, y = rmsnorm(x, res, w, eps)
    return h, quant_dynamic(y)


def swiglu(gu):
    g, u = gu.chunk(2, dim=-1)
    return F.silu(g) * u


def swiglu_fp8(gu):
    return quant_dynamic(swiglu(gu))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("torch_baselines: no CUDA device; nothing measured", file=sys.stderr)
        return 2
    dev = torch.cuda.get_device_name()
    bw = copy_gbs()
    bf = torch.bfloat16
    out = {"device": dev, "torch": torch.__version__, "copy_gbs": bw, "rows": []}
    table = []

    def record(kind, shape, m, impl, nbytes, us):
        gbs = nbytes / (us * 1e3)
        out["rows"].append({"bench": kind, "shape": shape, "M": m, "impl": impl, "bytes": nbytes, "us": us,
                            "gbs": gbs, "frac_of_copy": gbs / bw})
        table.append((kind, shape, m, impl, us, gbs, 100 * gbs / bw))

    # decode GEMM: y = x W^T through cuBLAS (F.linear)
    for name, (n, k) in DECODE_SHAPES.items():
        if args.quick and name not in ("qkv405", "down8b"):
            continue
        wb = n * k * 2
        ws = [torch.randn(n, k, dtype=bf, device="cuda") * 0.02 for _ in range(sets_for(wb))]
        for m in (1, 16) if args.quick else (1, 8, 16, 32):
            x = torch.randn(m, k, dtype=bf, device="cuda")
            y = torch.empty(m, n, dtype=bf, device="cuda")
            # Graph replays of 20 calls rotating over the weight copies (W never hits L2).
            calls = [0]

            def lin(_i, ws=ws, x=x, y=y, calls=calls):
                torch.matmul(x, ws[calls[0] % len(ws)].t(), out=y)
                calls[0] += 1
            us = time_graph(lin, 5, 50)
            record("decode-gemm", f"{name} {n}x{k}", m, "torch F.linear (cuBLAS)", wb + m * k * 2 + m * n * 2, us)
        del ws
    torch.cuda.empty_cache()

    rows_list = (1, 32, 2048, 8192) if args.quick else (1, 8, 32, 256, 2048, 8192, 32768)
    comp_norm = torch.compile(rmsnorm)
    comp_norm8 = torch.compile(rmsnorm_fp8)
    comp_sw = torch.compile(swiglu)
    comp_sw8 = torch.compile(swiglu_fp8)
    for hdim in (4096, 16384):
        w = torch.randn(hdim, dtype=bf, device="cuda")
        for m in rows_list:
            nb = 4 * m * hdim * 2 + hdim * 2  # x, residual, w read; residual_out, out written
            n_sets = 1 if m <= GRAPH_ROWS else sets_for(nb)
            xs = [torch.randn(m, hdim, dtype=bf, device="cuda") for _ in range(n_sets)]
            rs = [torch.randn(m, hdim, dtype=bf, device="cuda") for _ in range(n_sets)]
            for impl, fn in (("eager", rmsnorm), ("torch.compile", comp_norm)):
                record("add-rmsnorm", f"H={hdim}", m, impl, nb, time_op(lambda i, fn=fn: fn(xs[i], rs[i], w), m, n_sets))
            nb8 = 3 * m * hdim * 2 + hdim * 2 + m * hdim + 4 * m
            record("add-rmsnorm", f"H={hdim}", m, "torch.compile fp8-dynamic", nb8,
                   time_op(lambda i: comp_norm8(xs[i], rs[i], w), m, n_sets))
            del xs, rs
            nbs = m * 2 * hdim * 2 + m * hdim * 2
            n_sets = 1 if m <= GRAPH_ROWS else sets_for(nbs)
            gus = [torch.randn(m, 2 * hdim, dtype=bf, device="cuda") for _ in range(n_sets)]
            for impl, fn in (("eager", swiglu), ("torch.compile", comp_sw)):
                record("swiglu", f"U={hdim}", m, impl, nbs, time_op(lambda i, fn=fn: fn(gus[i]), m, n_sets))
            record("swiglu", f"U={hdim}", m, "torch.compile fp8-dynamic", m * 2 * hdim * 2 + m * hdim + 4 * m,
                   time_op(lambda i: comp_sw8(gus[i]), m, n_sets))
            del gus
            torch.cuda.empty_cache()

    print(f"\ntorch baselines — {dev}, torch {torch.__version__}; copy bandwidth {bw:.0f} GB/s; "
          f"rows <= {GRAPH_ROWS}: per call of {GRAPH_CALLS} in a CUDA graph")
    print(f"{'bench':12} {'shape':22} {'M':>6} {'impl':28} {'us':>9} {'GB/s':>6} {'%copy':>6}")
    for kind, shape, m, impl, us, gbs, pc in table:
        print(f"{kind:12} {shape:22} {m:>6} {impl:28} {us:9.2f} {gbs:6.0f} {pc:6.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
