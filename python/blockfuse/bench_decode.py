"""Python benchmarks of the fused decode MLP and the FP8 gated up-projection, beside what a PyTorch
user runs otherwise, in one process on one GPU:

    python -m blockfuse.bench fused-mlp [--shapes 8b,70b] [--rows 1,4,16,32] [--json FILE]
    python -m blockfuse.bench gated-up-fp8 [--shapes 8b,70b] [--tokens 1024,4096,16384] [--json FILE]
    python -m blockfuse.bench sparse-prefill [--shapes 8b,70b] [--tokens 33,64,128,512,4096] [--json FILE]

fused-mlp: y = down(silu(x·W_gateᵀ) ⊙ x·W_upᵀ) at decode sizes. torch = F.linear(gate), F.linear(up),
silu·mul, F.linear(down); blockfuse dense = ops.fused_mlp; blockfuse sparse = ops.fused_mlp_sparse
over one random list of 50 / 75 / 90 % inactive 32-neuron blocks. Also the gated up-projection alone
(torch's two F.linear + silu·mul, F.linear over the interleaved weight + ops.swiglu, ops.gated_up) and
ops.gated_up followed by F.linear (the MLP as blockfuse.nn.GatedMLP runs it). Each is captured in a CUDA graph of
20 calls and timed by replays (median per call); the weights (hundreds of MB) exceed the L2, so
every call reads them from DRAM. GB/s counts the weight rows read; % copy is of a 1 GiB device copy
measured in the same run.

gated-up-fp8: h = silu(x·W_gateᵀ) ⊙ x·W_upᵀ from e4m3 operands. torch._scaled_mm alone (into
[M, 2U], bf16, per-tensor scales, its default accumulation) and followed by blockfuse's interleaved
swiglu (bf16, and swiglu_fp8 with a static scale for an e4m3 h); ops.gated_up_fp8 with bf16 and e4m3
h; ops.gated_up (bf16 operands) for scale. CUDA events around each call, median of the repetitions.
Every blockfuse result is checked against an fp32 reference before it is timed (exit status 1 if
wrong).
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F

from . import ops
from .bench import capture_graph, copy_gbs, time_cuda
from .bench_model import rel as _rel

SHAPES = {"8b": ("Llama-3 8B", 4096, 14336), "70b": ("Llama-3 70B", 8192, 28672)}
FP8 = torch.float8_e4m3fn


def _ms(fn, reps_time=0.2):
    """Median milliseconds of fn() (bench.time_cuda: CUDA events, warm-up, 10..100 repetitions)."""
    return time_cuda(lambda _: fn(), [None], 3, reps_time)[0]


def _graph_us(fn, calls=20):
    """Median µs per call of `calls` calls captured in one CUDA graph."""
    g = capture_graph(fn, calls)
    return _ms(g.replay) * 1e3 / calls


def run_fused_mlp(a):
    copy = copy_gbs()
    rows_out = []
    for key in a.shapes:
        name, k, u = SHAPES[key]
        g = torch.Generator(device="cuda").manual_seed(0)
        wg = (torch.randn(u, k, device="cuda", generator=g) * k ** -0.5).bfloat16()
        wu = (torch.randn(u, k, device="cuda", generator=g) * k ** -0.5).bfloat16()
        wd = (torch.randn(k, u, device="cuda", generator=g) * u ** -0.5).bfloat16()
        wgu, wdt = ops.interleave_gate_up(wg, wu), wd.t().contiguous()
        ops.fused_mlp_reserve(wdt)
        nb = u // 32
        for m in a.rows:
            x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
            want = ops.fused_mlp_reference(x, wgu, wdt, out_dtype=torch.float32)
            got = ops.fused_mlp(x, wgu, wdt)
            if not _rel(got, want) < 1e-2:
                sys.exit(f"fused_mlp differs from the fp32 reference ({_rel(got, want):.3e}) at {name} M={m}")
            h_want = ops.gated_up_reference(x, wgu, "silu", out_dtype=torch.float32)
            if not _rel(ops.gated_up(x, wgu), h_want) < 1e-2:
                sys.exit(f"gated_up differs from the fp32 reference ({_rel(ops.gated_up(x, wgu), h_want):.3e}) at {name} M={m}")
            t_torch = _graph_us(lambda: F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd))
            t_dense = _graph_us(lambda: ops.fused_mlp(x, wgu, wdt))
            # The gated up-projection alone: torch's two GEMVs + SiLU·mul; cuBLAS's GEMV over the
            # interleaved weight + ops.swiglu; ops.gated_up (the decode kernel at these M). And the
            # MLP as GatedMLP runs it: ops.gated_up, then F.linear for the down projection.
            t_gu_torch = _graph_us(lambda: F.silu(F.linear(x, wg)) * F.linear(x, wu))
            t_gu_gemv = _graph_us(lambda: ops.swiglu(F.linear(x, wgu), "silu", "interleaved"))
            t_gu = _graph_us(lambda: ops.gated_up(x, wgu))
            t_mlp = _graph_us(lambda: F.linear(ops.gated_up(x, wgu), wd))
            weight_bytes = 3 * u * k * 2
            row = dict(benchmark="fused-mlp-python", model=name, K=k, U=u, M=m, torch_us=t_torch, dense_us=t_dense,
                       dense_over_torch=t_torch / t_dense, dense_frac_of_copy=weight_bytes / (t_dense * 1e3) / copy,
                       copy_gbs=copy, gate_up_torch_us=t_gu_torch, gate_up_gemv_swiglu_us=t_gu_gemv, gated_up_us=t_gu,
                       gated_up_over_torch=t_gu_torch / t_gu, gated_up_over_gemv_swiglu=t_gu_gemv / t_gu,
                       gated_up_frac_of_copy=2 * u * k * 2 / (t_gu * 1e3) / copy,
                       gated_up_then_linear_us=t_mlp, gated_up_then_linear_over_torch=t_torch / t_mlp)
            for inactive in (50, 75, 90):
                active = sorted(torch.randperm(nb, generator=torch.Generator().manual_seed(inactive))[
                    : nb * (100 - inactive) // 100].tolist())
                idx = torch.tensor(active, dtype=torch.int32, device="cuda")
                cnt = torch.tensor([len(active)], dtype=torch.int32, device="cuda")
                mask = torch.zeros(u, dtype=torch.bool, device="cuda")
                for b in active:
                    mask[b * 32:(b + 1) * 32] = True
                got = ops.fused_mlp_sparse(x, wgu, wdt, idx, cnt, 32)
                ref = ops.fused_mlp_reference(x, wgu, wdt, neuron_mask=mask.expand(m, u), out_dtype=torch.float32)
                if not _rel(got, ref) < 1e-2:
                    sys.exit(f"fused_mlp_sparse differs from the reference at {name} M={m} {inactive}% inactive")
                t = _graph_us(lambda: ops.fused_mlp_sparse(x, wgu, wdt, idx, cnt, 32))
                row[f"sparse{inactive}_us"] = t
                row[f"sparse{inactive}_over_dense"] = t_dense / t
                row[f"sparse{inactive}_over_torch"] = t_torch / t
            rows_out.append(row)
            print(f"{name:12s} M={m:3d}  torch {t_torch:8.1f} us  dense {t_dense:8.1f} us (x{t_torch / t_dense:.2f}, "
                  f"{100 * row['dense_frac_of_copy']:.0f}% copy)  sparse 50/75/90: "
                  + " ".join(f"{row[f'sparse{p}_us']:.1f} us (x{row[f'sparse{p}_over_dense']:.2f} dense)" for p in (50, 75, 90)),
                  flush=True)
            print(f"{'':12s} gate/up: torch {t_gu_torch:.1f} us, GEMV+swiglu {t_gu_gemv:.1f} us, ops.gated_up {t_gu:.1f} us "
                  f"(x{t_gu_torch / t_gu:.2f} torch, {100 * row['gated_up_frac_of_copy']:.0f}% copy); "
                  f"gated_up + F.linear {t_mlp:.1f} us (x{t_torch / t_mlp:.2f} torch MLP)", flush=True)
    return rows_out


def run_sparse_prefill(a):
    """SparseGatedMLP's prefill path (_gathered: the kept blocks' weights gathered once, two GEMMs)
    against the decode kernel once per 32 rows (ops.fused_mlp_sparse, what the module ran before) and
    the dense MLP (ops.gated_up + F.linear, GatedMLP's path), one list of 32-neuron blocks for all
    rows; CUDA events, median (a host sync inside the gathered path: prefill, not graphed)."""
    from .nn import SparseGatedMLP
    rows_out = []
    for key in a.shapes:
        name, k, u = SHAPES[key]
        g = torch.Generator(device="cuda").manual_seed(2)
        m = SparseGatedMLP(k, u, block_size=32, dtype=torch.bfloat16, device="cuda")
        with torch.no_grad():
            m.w_gate_up.copy_((torch.randn(2 * u, k, device="cuda", generator=g) * k ** -0.5).bfloat16())
            m.w_down_t.copy_((torch.randn(u, k, device="cuda", generator=g) * u ** -0.5).bfloat16())
        wgu, wdt = m.w_gate_up, m.w_down_t
        wd = wdt.t().contiguous()
        nb = u // 32
        for rows in a.tokens:
            x = torch.randn(rows, k, device="cuda", generator=g).bfloat16()
            t_dense = _ms(lambda: F.linear(ops.gated_up(x, wgu), wd))
            row = dict(benchmark="sparse-prefill-python", model=name, K=k, U=u, M=rows, dense_ms=t_dense)
            for inactive in (50, 75, 90):
                active = sorted(torch.randperm(nb, generator=torch.Generator().manual_seed(inactive))[
                    : nb * (100 - inactive) // 100].tolist())
                keep = torch.zeros(rows, nb, dtype=torch.bool, device="cuda")
                keep[:, active] = True
                idx = torch.tensor(active, dtype=torch.int32, device="cuda")
                cnt = torch.tensor([len(active)], dtype=torch.int32, device="cuda")
                with torch.no_grad():
                    got = m._gathered(x, keep)
                ref = ops.fused_mlp_reference(x, wgu, wdt, neuron_mask=keep.repeat_interleave(32, -1),
                                              out_dtype=torch.float32)
                if not _rel(got, ref) < 1e-2:
                    sys.exit(f"the gathered sparse MLP differs from the reference at {name} M={rows} {inactive}%")
                with torch.no_grad():
                    t_g = _ms(lambda: m._gathered(x, keep))
                    t_c = _ms(lambda: [ops.fused_mlp_sparse(c, wgu, wdt, idx, cnt, 32) for c in x.split(32)])
                row[f"gathered{inactive}_ms"], row[f"chunked{inactive}_ms"] = t_g, t_c
                row[f"gathered{inactive}_over_dense"] = t_dense / t_g
                row[f"gathered{inactive}_over_chunked"] = t_c / t_g
            rows_out.append(row)
            print(f"{name:12s} M={rows:5d}  dense {t_dense:.3f} ms  " + "  ".join(
                f"{p}%: gathered {row[f'gathered{p}_ms']:.3f} (x{row[f'gathered{p}_over_dense']:.2f} dense, "
                f"x{row[f'gathered{p}_over_chunked']:.2f} chunked {row[f'chunked{p}_ms']:.3f})" for p in (50, 75, 90)),
                flush=True)
    return rows_out


def run_gated_up_fp8(a):
    if torch.cuda.get_device_capability() != (9, 0):
        sys.exit("gated-up-fp8: the FP8 kernel is sm90a (Hopper) only")
    rows_out = []
    for key in a.shapes:
        name, k, u = SHAPES[key]
        g = torch.Generator(device="cuda").manual_seed(1)
        w16 = (torch.randn(2 * u, k, device="cuda", generator=g) * k ** -0.5).bfloat16()
        sw = (w16.float().abs().amax() / 448).reshape(1)
        w8 = (w16.float() / sw).to(FP8)
        for m in a.tokens:
            x16 = torch.randn(m, k, device="cuda", generator=g).bfloat16()
            sx = (x16.float().abs().amax() / 448).reshape(1)
            x8 = (x16.float() / sx).to(FP8)
            s_out = torch.tensor([0.01], device="cuda")
            h = ops.gated_up_fp8(x8, sx, w8, sw)
            ref = ops.gated_up_fp8_reference(x8[:128], sx, w8, sw).float()
            if not _rel(h[:128], ref) < 1e-2:
                sys.exit(f"gated_up_fp8 differs from the fp32 reference at {name} M={m}")

            def scaled_mm():
                return torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16)

            z = scaled_mm()
            if not _rel(ops.swiglu(z, "silu", "interleaved")[:128], ref) < 2e-2:
                sys.exit(f"torch._scaled_mm + swiglu differs from the reference at {name} M={m}")
            flops = 2.0 * m * k * 2 * u
            t = {
                "scaled_mm": _ms(scaled_mm),
                "scaled_mm+swiglu": _ms(lambda: ops.swiglu(scaled_mm(), "silu", "interleaved")),
                "scaled_mm+swiglu_fp8": _ms(lambda: ops.swiglu_fp8(scaled_mm(), s_out, "silu", "interleaved")),
                "fused_fp8_bf16_out": _ms(lambda: ops.gated_up_fp8(x8, sx, w8, sw)),
                "fused_fp8_e4m3_out": _ms(lambda: ops.gated_up_fp8(x8, sx, w8, sw, "silu", s_out)),
                "fused_bf16": _ms(lambda: ops.gated_up(x16, w16)),
            }
            row = dict(benchmark="gated-up-fp8-python", model=name, M=m, K=k, U=u,
                       **{f"{n}_tflops": flops / (ms * 1e9) for n, ms in t.items()})
            row["fused_over_scaled_mm"] = t["scaled_mm"] / t["fused_fp8_bf16_out"]
            row["fused_over_scaled_mm_swiglu"] = t["scaled_mm+swiglu"] / t["fused_fp8_bf16_out"]
            row["fused_e4m3_over_scaled_mm_swiglu_fp8"] = t["scaled_mm+swiglu_fp8"] / t["fused_fp8_e4m3_out"]
            row["fused_fp8_over_fused_bf16"] = t["fused_bf16"] / t["fused_fp8_bf16_out"]
            rows_out.append(row)
            print(f"{name:12s} M={m:6d}  " + "  ".join(f"{n} {flops / (ms * 1e9):.0f}" for n, ms in t.items())
                  + f"  TFLOP/s; fused/_scaled_mm x{row['fused_over_scaled_mm']:.2f}", flush=True)
    return rows_out


def main(argv):
    p = argparse.ArgumentParser(prog="python -m blockfuse.bench", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fused-mlp", help="the fused decode MLP (dense and sparse) vs torch's three GEMMs")
    f.add_argument("--shapes", default="8b,70b")
    f.add_argument("--rows", default="1,4,16,32")
    f.add_argument("--json")
    q = sub.add_parser("gated-up-fp8", help="the FP8 gated up-projection vs torch._scaled_mm (+ swiglu)")
    q.add_argument("--shapes", default="8b,70b")
    q.add_argument("--tokens", default="1024,4096,16384")
    q.add_argument("--json")
    sp = sub.add_parser("sparse-prefill", help="SparseGatedMLP's gathered prefill path vs per-32-row and dense")
    sp.add_argument("--shapes", default="8b,70b")
    sp.add_argument("--tokens", default="33,64,128,512,4096")
    sp.add_argument("--json")
    a = p.parse_args(argv)
    a.shapes = [s for s in a.shapes.split(",") if s]
    bad = [s for s in a.shapes if s not in SHAPES]
    if bad:
        p.error(f"unknown shape(s) {bad}; choose from {list(SHAPES)}")
    if a.command == "fused-mlp":
        a.rows = [int(r) for r in a.rows.split(",") if r]
        if any(not 1 <= r <= 32 for r in a.rows):
            p.error("--rows: each between 1 and 32 (the fused MLP's decode range)")
        rows = run_fused_mlp(a)
    elif a.command == "sparse-prefill":
        a.tokens = [int(t) for t in a.tokens.split(",") if t]
        rows = run_sparse_prefill(a)
    else:
        a.tokens = [int(t) for t in a.tokens.split(",") if t]
        rows = run_gated_up_fp8(a)
    out = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0
