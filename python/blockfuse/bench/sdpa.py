"""`python -m blockfuse.bench sdpa`: PyTorch SDPA's flash (FlashAttention-2) and cuDNN backends on the
shapes of `blockfuse bench attention` (the C++ benchmark), timed the same way (median of back-to-back
calls, CUDA events), beside blockfuse's torch op (blockfuse.ops.attention, when the compiled ops are
there) and FlashAttention-4 (flash_attn.cute.interface.flash_attn_func, when importable:
../shared/peers stages it) in the same process: the same-run comparison from PyTorch. blockfuse's and
FlashAttention-4's outputs are checked against the flash backend's before they are timed (max |diff|
reported; a difference above 0.05 stops the run with exit status 1).
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from .common import optional_peer, ready, time_events


MAX_ABS_DIFF = 0.05


def _fa4():
    from flash_attn.cute.interface import flash_attn_func
    return flash_attn_func


def time_ms(fn, reps, warmup=3):
    """Median ms of fn() over reps calls, CUDA events around each (common.time_events)."""
    return time_events(lambda _: fn(), 1, warmup, reps) * 1e-3


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def run(args):
    """The `sdpa` subcommand: returns the exit status (1 when blockfuse's output is wrong)."""
    status = ready(need_ops=False)
    if status:
        return status
    B, Hq = 2, 32
    from .. import ops as bf
    if not bf.available():
        print(f"blockfuse's torch binding is not available ({bf.load_error()}): timing SDPA only", file=sys.stderr)
        bf = None
    fa4 = optional_peer("FlashAttention-4", _fa4)
    rows = []
    for d in map(int, args.d.split(",")):
        for s in map(int, args.s.split(",")):
            for hkv in map(int, args.hkv.split(",")):
                # SDPA takes [B, H, S, D]; the transposes are views of [B, S, H, D] like blockfuse's.
                q = (torch.rand(B, s, Hq, d, device="cuda", dtype=torch.bfloat16) * 4 - 2).transpose(1, 2)
                k = (torch.rand(B, s, hkv, d, device="cuda", dtype=torch.bfloat16) * 4 - 2).transpose(1, 2)
                v = (torch.rand(B, s, hkv, d, device="cuda", dtype=torch.bfloat16) * 2 - 1).transpose(1, 2)
                for causal in (False, True):
                    flops = 4 * B * Hq * s * s * d * (0.5 if causal else 1.0)
                    row = dict(head_dim=d, seqlen=s, heads_kv=hkv, causal=causal)
                    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                        try:
                            with sdpa_kernel(backend):
                                fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hkv != Hq)
                                ms = time_ms(fn, args.reps)
                            row[name + "_tflops"] = flops / (ms * 1e-3) / 1e12
                        except Exception as e:  # a backend without support for the shape
                            row[name + "_tflops"] = None
                            row[name + "_error"] = str(e).splitlines()[0][:200]
                    qb, kb, vb = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, S, H, D] views
                    others = {}
                    if bf is not None:
                        others["blockfuse"] = lambda: bf.attention(qb, kb, vb, causal=causal)
                    if fa4 is not None:
                        # flash_attn_func returns (out, lse) or out, by version; GQA from the shapes
                        others["fa4"] = lambda: _first(fa4(qb, kb, vb, causal=causal))
                    if others:
                        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                            want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hkv != Hq)
                    for name, fn in others.items():
                        try:
                            got = fn()
                        except Exception as e:  # noqa: BLE001 — a peer without support for the shape: reported
                            if name == "blockfuse":
                                raise
                            row[name + "_tflops"] = None
                            row[name + "_error"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                            continue
                        diff = (got.float() - want.transpose(1, 2).float()).abs().max().item()
                        row[name + "_max_abs_diff_vs_flash"] = diff
                        if not diff <= MAX_ABS_DIFF:
                            print(f"{name} attention differs from SDPA flash by {diff} at D {d} S {s} Hkv {hkv} "
                                  f"causal {causal}", file=sys.stderr)
                            return 1
                        ms = time_ms(fn, args.reps)
                        row[name + "_tflops"] = flops / (ms * 1e-3) / 1e12
                    if row.get("blockfuse_tflops"):
                        for name in ("flash", "cudnn", "fa4"):
                            if row.get(name + "_tflops"):
                                row[f"blockfuse_over_{name}"] = row["blockfuse_tflops"] / row[name + "_tflops"]
                    rows.append(row)
                    print(f"D {d} S {s} Hkv {hkv} causal {int(causal)}: flash {row['flash_tflops']} "
                          f"cudnn {row['cudnn_tflops']} fa4 {row.get('fa4_tflops')} "
                          f"blockfuse {row.get('blockfuse_tflops')}", flush=True)
    out = dict(benchmark="sdpa_attention", device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0
