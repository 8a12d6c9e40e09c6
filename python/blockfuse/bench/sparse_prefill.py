"""`python -m blockfuse.bench sparse-prefill`: SparseGatedMLP at prefill sizes.

SparseGatedMLP's prefill path (_gathered: the kept blocks' weights gathered once, two GEMMs) against
the decode kernel once per 32 rows (ops.fused_mlp_sparse on each 32-row chunk) and the dense MLP
(ops.gated_up + F.linear, GatedMLP's path), one list of 32-neuron blocks for all rows, 50 / 75 / 90 %
inactive; CUDA events, median (common.median_ms; a host sync inside the gathered path: prefill, not
graphed). The gathered result is checked against the fp32 reference first (exit status 1 if wrong).
"""
import sys

import torch
import torch.nn.functional as F

from .. import ops
from .common import median_ms, rel, run_measurement
from .shapes import MLP_SHAPES


def measure(a):
    """The rows of the sparse-prefill table (sys.exit with a message if a result is wrong)."""
    from ..nn import SparseGatedMLP
    rows_out = []
    for key in a.shapes:
        name, k, u = MLP_SHAPES[key]
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
            t_dense = median_ms(lambda: F.linear(ops.gated_up(x, wgu), wd))
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
                if not rel(got, ref) < 1e-2:
                    sys.exit(f"the gathered sparse MLP differs from the reference at {name} M={rows} {inactive}%")
                with torch.no_grad():
                    t_g = median_ms(lambda: m._gathered(x, keep))
                    t_c = median_ms(lambda: [ops.fused_mlp_sparse(c, wgu, wdt, idx, cnt, 32) for c in x.split(32)])
                row[f"gathered{inactive}_ms"], row[f"chunked{inactive}_ms"] = t_g, t_c
                row[f"gathered{inactive}_over_dense"] = t_dense / t_g
                row[f"gathered{inactive}_over_chunked"] = t_c / t_g
            rows_out.append(row)
            print(f"{name:12s} M={rows:5d}  dense {t_dense:.3f} ms  " + "  ".join(
                f"{p}%: gathered {row[f'gathered{p}_ms']:.3f} (x{row[f'gathered{p}_over_dense']:.2f} dense, "
                f"x{row[f'gathered{p}_over_chunked']:.2f} chunked {row[f'chunked{p}_ms']:.3f})" for p in (50, 75, 90)),
                flush=True)
    return rows_out


def run(args):
    """The `sparse-prefill` subcommand: returns the exit status."""
    return run_measurement(measure, args)
