"""`python -m blockfuse.bench sdpa`: PyTorch SDPA's flash (FlashAttention-2) and cuDNN backends on the
shapes of `blockfuse bench attention` (the C++ benchmark), timed the same way (median of back-to-back
calls, CUDA events), beside blockfuse's torch op (blockfuse.ops.attention, when the compiled ops are
there) and FlashAttention-4 (flash_attn.cute.interface.flash_attn_func, when importable:
../shared/peers stages it) in the same process: the same-run comparison from PyTorch. blockfuse's and
FlashAttention-4's outputs are checked against the flash backend's before they are timed (max |diff|
reported; a difference above 0.05 stops the run with exit status 1).

Where the fastest call of a point measures under --graph-below µs (S = 2048 and below on an H100),
back-to-back eager calls time the Python and dispatch path as much as the kernel (at D = 64, S = 1024
causal every implementation read 58-74 µs a call on an H100, twice the kernel's time), so every
implementation of that point is also timed as replays of a CUDA graph of GRAPH_CALLS calls
(`<name>_graph_tflops`, `blockfuse_over_<name>_graph`): the kernels' comparison, and what a model
served in a graph sees. A point's implementations are timed after all are checked, in rounds that
call each once in an order rotated every round (--order interleaved, the default; common.
time_events_rounds), so none runs on a GPU the others have heated; --order sequential times each
one's repetitions in turn.
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from .common import GRAPH_CALLS, capture_graph, optional_peer, ready, time_events_in_order

MAX_ABS_DIFF = 0.05


def _fa4():
    from flash_attn.cute.interface import flash_attn_func
    return flash_attn_func


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def implementations(bf, fa4, q, k, v, causal):
    """name -> fn() returning out; q, k, v are [B, H, S, D] views of [B, S, H, D] tensors (SDPA's
    layout and output); blockfuse and FlashAttention-4 take and return the [B, S, H, D] views."""
    gqa = k.shape[1] != q.shape[1]

    def sdpa(backend):
        def fn():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        return fn

    qb, kb, vb = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    impls = {"flash": sdpa(SDPBackend.FLASH_ATTENTION), "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION)}
    if bf is not None:
        impls["blockfuse"] = lambda: bf.attention(qb, kb, vb, causal=causal)
    if fa4 is not None:
        # flash_attn_func returns (out, lse) or out, by version; GQA from the shapes
        impls["fa4"] = lambda: _first(fa4(qb, kb, vb, causal=causal))
    return impls


def run(args):
    """The `sdpa` subcommand: returns the exit status (1 when blockfuse's or FlashAttention-4's output
    is wrong)."""
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
                    want = None
                    impls = implementations(bf, fa4, q, k, v, causal)
                    eager_us, ran = {}, []
                    for name, fn in impls.items():
                        try:
                            got = fn()
                        except Exception as e:  # noqa: BLE001 — a backend without support for the shape
                            if name == "blockfuse":
                                raise
                            row[name + "_tflops"] = None
                            row[name + "_error"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                            continue
                        if name == "flash":
                            want = got
                        elif want is not None and name in ("blockfuse", "fa4"):
                            diff = (got.float() - want.transpose(1, 2).float()).abs().max().item()
                            row[name + "_max_abs_diff_vs_flash"] = diff
                            if not diff <= MAX_ABS_DIFF:
                                print(f"{name} attention differs from SDPA flash by {diff} at D {d} S {s} Hkv {hkv} "
                                      f"causal {causal}", file=sys.stderr)
                                return 1
                        del got
                        ran.append(name)
                    del want
                    # Timed after every check, the implementations in rotated rounds (--order).
                    us = time_events_in_order([lambda _, fn=impls[n]: fn() for n in ran], args.order, 1, 3, args.reps)
                    for name, t in zip(ran, us):
                        eager_us[name] = t
                        row[name + "_tflops"] = flops / (t * 1e-6) / 1e12
                    # A point is short when its fastest eager call is: then every implementation is
                    # replayed, also one whose own eager call paid a slow host path (FlashAttention-4's
                    # Python dispatch read 0.3-0.75 ms a call at points whose kernels take 30-150 µs).
                    if eager_us and min(eager_us.values()) < args.graph_below:
                        graphs = {}
                        for name in eager_us:
                            try:
                                graphs[name] = capture_graph(impls[name], GRAPH_CALLS)
                            except Exception as e:  # noqa: BLE001 — a peer that cannot be captured: reported
                                row[name + "_graph_error"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                        us = time_events_in_order([lambda _, g=g: g.replay() for g in graphs.values()], args.order,
                                                  1, 3, args.reps)
                        for name, t in zip(graphs, us):
                            row[name + "_graph_tflops"] = flops / (t / GRAPH_CALLS * 1e-6) / 1e12
                    if row.get("blockfuse_tflops"):
                        for name in ("flash", "cudnn", "fa4"):
                            for how in ("", "_graph"):
                                if row.get(f"{name}{how}_tflops") and row.get(f"blockfuse{how}_tflops"):
                                    row[f"blockfuse_over_{name}{how}"] = (row[f"blockfuse{how}_tflops"] /
                                                                         row[f"{name}{how}_tflops"])
                    rows.append(row)
                    _write(args.json, rows)  # after every point: a run cut short keeps what it measured
                    print(f"D {d} S {s} Hkv {hkv} causal {int(causal)}: " + " ".join(
                        f"{n} {_fmt(row.get(n + '_tflops'))}" + (f" (graph {_fmt(row[n + '_graph_tflops'])})"
                                                                 if n + "_graph_tflops" in row else "")
                        for n in ("flash", "cudnn", "fa4", "blockfuse") if n + "_tflops" in row), flush=True)
    return 0


def _write(path, rows):
    if path:
        out = dict(benchmark="sdpa_attention", device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows)
        with open(path, "w") as f:
            json.dump(out, f, indent=2)


def _fmt(x):
    return "-" if x is None else f"{x:.1f}"
