"""`python -m blockfuse.bench attention-backward`: attention forward + backward (training), bf16,
B = 2 (--batch), Hq = 32: blockfuse.ops.attention with its autograd (`blockfuse`: the deterministic backward;
`blockfuse_atomic`: the same forward with the non-deterministic one, dQ by atomics or reductions) beside PyTorch SDPA's flash and cuDNN
backends and FlashAttention-4 (flash_attn.cute.interface.flash_attn_func, when importable:
../shared/peers stages it), in one process.

Per point, q, k, v [B, S, H, D] are leaf tensors (SDPA gets their [B, H, S, D] transposed views, what
a Hugging Face model hands it; blockfuse and FlashAttention-4 take [B, S, H, D]). One step is the
forward and torch.autograd.grad of (out · dout) for q, k and v: the gradients are allocated per step,
as a training step without accumulation does. Every implementation's out, dq, dk and dv are checked
against SDPA flash's first (relative error above 0.02 stops the run, exit status 1); then the median
ms of `--reps` steps (CUDA events around each), the implementations in rounds that run each once in an
order rotated every round (--order interleaved, the default, common.time_events_rounds; sequential:
each one's steps in turn, common.time_events). TFLOP/s counts 3.5x the forward's
4·B·Hq·S²·D (halved when causal), the usual forward + backward convention.

Where a point's fastest eager step measures under --graph-below µs (S = 1024 on an H200), eager steps
time the Python launch path and autograd as much as the kernels (FlashAttention-4's eager readings there
were 48-141 TFLOP/s on an H200), so every implementation is also timed as replays of a CUDA graph of
common.GRAPH_CALLS steps (`<name>_graph_tflops`, `<ours>_over_<name>_graph`), as sdpa does.
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from .common import GRAPH_CALLS, capture_graph, meta, optional_peer, ready, rel, time_events_in_order

B, HQ = 2, 32
DT = torch.bfloat16
MAX_REL = 0.02


def _fa4():
    from flash_attn.cute.interface import flash_attn_func
    return flash_attn_func


def _leaves(b, s, hkv, d, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, s, HQ, d, device="cuda", generator=g).to(DT).requires_grad_()
    k = torch.randn(b, s, hkv, d, device="cuda", generator=g).to(DT).requires_grad_()
    v = torch.randn(b, s, hkv, d, device="cuda", generator=g).to(DT).requires_grad_()
    dout = torch.randn(b, s, HQ, d, device="cuda", generator=g).to(DT)
    return q, k, v, dout


class _DqMode(torch.autograd.Function):
    """fn's forward, its backward with blockfuse's attention backward in the given mode (deterministic
    or not), whatever the device's default."""

    @staticmethod
    def forward(ctx, q, k, v, fn, bf, deterministic):
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            out = fn(*leaves)
        ctx.save_for_backward(*leaves)
        ctx.graph = (out, bf, deterministic)
        return out.detach()

    @staticmethod
    def backward(ctx, dout):
        out, bf, deterministic = ctx.graph
        bf.set_attention_backward_deterministic(deterministic)
        try:
            grads = torch.autograd.grad(out, ctx.saved_tensors, dout)
        finally:
            bf.set_attention_backward_deterministic(None)
        return (*grads, None, None, None)


def implementations(bf, fa4, causal, gqa):
    """name -> forward(q, k, v) on [B, S, H, D] leaves, returning out [B, S, Hq, D]."""
    def sdpa(backend):
        def fn(q, k, v):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      is_causal=causal, enable_gqa=gqa).transpose(1, 2)
        return fn

    impls = {"sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION), "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION)}
    if bf is not None:
        def mode(deterministic):
            def fn(q, k, v):
                return _DqMode.apply(q, k, v, lambda a, b, c: bf.attention(a, b, c, causal=causal), bf, deterministic)
            return fn
        impls["blockfuse"] = mode(True)
        impls["blockfuse_atomic"] = mode(False)
    if fa4 is not None:
        def fa(q, k, v):
            out = fa4(q, k, v, causal=causal)
            return out[0] if isinstance(out, tuple) else out
        impls["fa4"] = fa
    return impls


def point(bf, fa4, d, s, hkv, causal, reps, graph_below=0.0, batch=B, order="interleaved"):
    """One grid point: a row of TFLOP/s (None with an error where an implementation cannot run it), or
    None when an implementation's result is wrong. The implementations are timed after all are checked,
    in rotated rounds (order "interleaved": common.time_events_rounds) or one after another."""
    q, k, v, dout = _leaves(batch, s, hkv, d, seed=s * 7 + d + hkv)
    flops = 3.5 * 4 * batch * HQ * s * s * d * (0.5 if causal else 1.0)
    row = dict(head_dim=d, seqlen=s, heads_kv=hkv, causal=causal)
    want = None
    steps = {}
    for name, fwd in implementations(bf, fa4, causal, hkv != HQ).items():
        def step(_, fwd=fwd):
            out = fwd(q, k, v)
            return out, torch.autograd.grad(out, (q, k, v), dout)
        try:
            out, grads = step(0)
        except Exception as e:  # noqa: BLE001 — a backend without support for the shape: reported
            row[name + "_tflops"] = None
            row[name + "_error"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            continue
        got = (out, *grads)
        if want is None:
            want = got
        else:
            errs = [rel(a, b) for a, b in zip(got, want)]
            row[name + "_rel_err"] = max(errs)
            if not max(errs) <= MAX_REL:
                print(f"{name} differs from sdpa_flash (out, dq, dk, dv relative errors {errs}) at D {d} S {s} "
                      f"Hkv {hkv} causal {causal}", file=sys.stderr)
                return None
        del out, grads, got
        steps[name] = step
    names = list(steps)
    us = time_events_in_order([steps[n] for n in names], order, 1, 2, reps)
    for name, t in zip(names, us):
        row[name + "_ms"] = t * 1e-3
        row[name + "_tflops"] = flops / (t * 1e-6) / 1e12
    if steps and min(row[n + "_ms"] for n in steps) * 1e3 < graph_below:
        # Captured on fresh leaves, as the GPU test of a captured backward does: with the eager steps'
        # leaves (whose AccumulateGrad nodes `want` kept alive on the default stream; autograd warned
        # of the stream mismatch) the capture of each process's first point failed for every
        # implementation, also when retried after an eager step (H200, torch 2.11).
        del want
        gq, gk, gv = (t.detach().clone().requires_grad_() for t in (q, k, v))
        graphs = {}
        for name, fwd in implementations(bf, fa4, causal, hkv != HQ).items():
            if name not in steps:
                continue

            def gstep(fwd=fwd):
                out = fwd(gq, gk, gv)
                return out, torch.autograd.grad(out, (gq, gk, gv), dout)
            try:
                graphs[name] = capture_graph(gstep, GRAPH_CALLS)
            except Exception as e:  # noqa: BLE001 — an implementation that cannot be captured: reported
                row[name + "_graph_error"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                print(f"{name}: CUDA-graph capture failed at D {d} S {s} Hkv {hkv} causal {causal}: "
                      f"{row[name + '_graph_error']}", file=sys.stderr)
        us = time_events_in_order([lambda _, g=g: g.replay() for g in graphs.values()], order, 1, 3, reps)
        for name, t in zip(graphs, us):
            row[name + "_graph_tflops"] = flops / (t / GRAPH_CALLS * 1e-6) / 1e12
    for ours in ("blockfuse", "blockfuse_atomic"):
        for how in ("", "_graph"):
            mine = row.get(f"{ours}{how}_tflops")
            for base in ("sdpa_flash", "sdpa_cudnn", "fa4"):
                if mine and row.get(f"{base}{how}_tflops"):
                    row[f"{ours}_over_{base}{how}"] = mine / row[f"{base}{how}_tflops"]
    return row


def run(args):
    """The `attention-backward` subcommand: returns the exit status (1 when a result is wrong)."""
    status = ready(need_ops=False)
    if status:
        return status
    from .. import ops as bf
    if not bf.available():
        print(f"blockfuse's torch binding is not available ({bf.load_error()}): timing the peers only",
              file=sys.stderr)
        bf = None
    fa4 = optional_peer("FlashAttention-4", _fa4)
    rows = []
    for d in args.d:
        for s in args.s:
            for hkv in args.hkv:
                for causal in (False, True):
                    row = point(bf, fa4, d, s, hkv, causal, args.reps, args.graph_below, args.batch, args.order)
                    if row is None:
                        return 1
                    rows.append(row)
                    cells = " ".join(f"{k[:-7]} {row[k]:.0f}" for k in row
                                     if k.endswith("_tflops") and not k.endswith("_graph_tflops") and row[k])
                    graphs = " ".join(f"{k[:-13]} {row[k]:.0f}" for k in row if k.endswith("_graph_tflops") and row[k])
                    cells += f" | graph replays: {graphs}" if graphs else ""
                    print(f"D {d} S {s} Hkv {hkv} causal {int(causal)}: TFLOP/s {cells}", flush=True)
                    torch.cuda.empty_cache()
                    if args.json:  # after every point: a run cut short keeps what it measured
                        with open(args.json, "w") as fh:
                            json.dump(dict(benchmark="attention_backward", **meta(), batch=args.batch, heads_q=HQ,
                                           rows=rows), fh, indent=1)
    return 0
