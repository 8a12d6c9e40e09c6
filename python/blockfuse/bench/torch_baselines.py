"""`python -m blockfuse.bench torch-baselines`: torch's own forms of the decoder-block ops that
`blockfuse bench add-rmsnorm|swiglu|decode-gemm` (the C++ benchmark) measures, on the same shapes and
with the same protocol, so the family docs can quote blockfuse beside torch eager and torch.compile
measured on the same machine:
  decode-gemm   torch.nn.functional.linear(x, W), M = 1, 8, 16, 32 (cuBLAS through torch)
  add-rmsnorm   h = x + residual; h * rsqrt(mean(h^2) + eps) * w (Llama's RMSNorm: fp32 math),
                eager and torch.compile; FP8 dynamic: + per-row amax scale and e4m3 cast (compiled)
  swiglu        silu(gate) * up from a stacked [M, 2U] tensor, eager and torch.compile;
                FP8 dynamic as above (compiled)
Rows <= 32 (decode) are timed per call from CUDA-graph replays of 20 calls (common.time_graph: a
serving loop runs them in a graph); larger problems with CUDA events per call (common.time_events),
inputs rotated so L2 (50 MB) holds none. Bytes are the minimum traffic, as in the C++ benchmarks.
Needs a GPU and torch >= 2.1 (float8_e4m3fn); not the blockfuse ops.
"""
import json

import torch
import torch.nn.functional as F

from .common import GRAPH_CALLS, GRAPH_ROWS, copy_gbs, ready, sets_for, time_events, time_graph
from .shapes import DECODE_GEMM_SHAPES


def time_op(fn, rows, n_sets, warmup=5, reps=50):
    return time_graph(fn, warmup, reps) if rows <= GRAPH_ROWS else time_events(fn, n_sets, warmup, reps)


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


def run(args):
    """The `torch-baselines` subcommand: returns the exit status."""
    status = ready(need_ops=False)
    if status:
        return status
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
    for name, (n, k) in DECODE_GEMM_SHAPES.items():
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
