"""`python -m blockfuse.bench fused-mlp`: the fused decode MLP beside what a PyTorch user runs, in one
process on one GPU.

y = down(silu(x·W_gateᵀ) ⊙ x·W_upᵀ) at decode sizes. torch = F.linear(gate), F.linear(up), silu·mul,
F.linear(down); blockfuse dense = ops.fused_mlp; blockfuse sparse = ops.fused_mlp_sparse over one
random list of 50 / 75 / 90 % inactive 32-neuron blocks. Also the gated up-projection alone (torch's
two F.linear + silu·mul, F.linear over the interleaved weight + ops.swiglu, ops.gated_up) and
ops.gated_up followed by F.linear (the MLP as blockfuse.nn.GatedMLP runs it). Each is captured in a
CUDA graph of 20 calls and timed by replays (common.graph_us: median per call); the weights (hundreds
of MB) exceed the L2, so every call reads them from DRAM. GB/s counts the weight rows read; % copy is
of a 1 GiB device copy measured in the same run. Every result is checked against the fp32 reference
before it is timed (exit status 1 if wrong).
"""
import sys

import torch
import torch.nn.functional as F

from .. import ops
from .common import copy_gbs, graph_us, rel, run_measurement
from .shapes import MLP_SHAPES


def measure(a):
    """The rows of the fused-mlp table (sys.exit with a message if a result is wrong)."""
    copy = copy_gbs()
    rows_out = []
    for key in a.shapes:
        name, k, u = MLP_SHAPES[key]
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
            if not rel(got, want) < 1e-2:
                sys.exit(f"fused_mlp differs from the fp32 reference ({rel(got, want):.3e}) at {name} M={m}")
            h_want = ops.gated_up_reference(x, wgu, "silu", out_dtype=torch.float32)
            if not rel(ops.gated_up(x, wgu), h_want) < 1e-2:
                sys.exit(f"gated_up differs from the fp32 reference ({rel(ops.gated_up(x, wgu), h_want):.3e}) at {name} M={m}")
            t_torch = graph_us(lambda: F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd))
            t_dense = graph_us(lambda: ops.fused_mlp(x, wgu, wdt))
            # The gated up-projection alone: torch's two GEMVs + SiLU·mul; cuBLAS's GEMV over the
            # interleaved weight + ops.swiglu; ops.gated_up (the decode kernel at these M). And the
            # MLP as GatedMLP runs it: ops.gated_up, then F.linear for the down projection.
            t_gu_torch = graph_us(lambda: F.silu(F.linear(x, wg)) * F.linear(x, wu))
            t_gu_gemv = graph_us(lambda: ops.swiglu(F.linear(x, wgu), "silu", "interleaved"))
            t_gu = graph_us(lambda: ops.gated_up(x, wgu))
            t_mlp = graph_us(lambda: F.linear(ops.gated_up(x, wgu), wd))
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
                if not rel(got, ref) < 1e-2:
                    sys.exit(f"fused_mlp_sparse differs from the reference at {name} M={m} {inactive}% inactive")
                t = graph_us(lambda: ops.fused_mlp_sparse(x, wgu, wdt, idx, cnt, 32))
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


def run(args):
    """The `fused-mlp` subcommand: returns the exit status."""
    return run_measurement(measure, args)
