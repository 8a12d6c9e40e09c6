"""`python -m blockfuse.bench train-mlp`: forward + backward of the gated MLP
y = down(silu(x·W_gateᵀ) ⊙ (x·W_upᵀ)), gradients of x and of every weight, bf16, in one process:

  eager      F.linear (gate) and F.linear (up), SiLU·mul, F.linear (down): a Hugging Face LlamaMLP
  compile    the same function through torch.compile (static shapes)
  liger      Liger's fused SiLU·mul (LigerSiLUMulFunction) between the three F.linear calls
  quack      quack's mlp_func(x, W1, W2, activation="swiglu", tuned=False), W1 = [gate; up] interleaved
             gate first; and with recompute=True (keeps only x)
  blockfuse  blockfuse.ops.gated_mlp, what blockfuse.nn.GatedMLP runs in training: torch's GEMM,
             blockfuse's swiglu and torch's GEMM, keeping x and the pre-activation (not h);
             blockfuse-recompute: gated_up(recompute=True), the fused forward keeping only x, and
             F.linear (down)

Per point: the median ms of one forward + backward (x and the weights leaf tensors with
requires_grad; their .grad cleared before every step, so each step allocates its gradients, as a
training step without accumulation does), and the peak memory the step allocates beyond what was
allocated before it (inputs, weights: what every implementation holds anyway). Every implementation's
y and dx are checked against eager's first (relative error > 0.02: exit status 1). Implementations
that are not importable (Liger, quack: ../shared/peers stages them) are reported and skipped.
"""
import json
import sys

import torch
import torch.nn.functional as F

from .common import VersusEager, cuda_ms, meta, peak_activation_bytes, ready, rel
from .shapes import MLP_SHAPES
TOLERANCE = 0.02


def _eager(x, wg, wu, wd):
    return F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)


def build(name, wg, wu, wd):
    """(forward function of x, list of its leaf weights) for implementation `name`, or a string saying
    why it is unavailable."""
    if name == "eager":
        return (lambda x: _eager(x, wg, wu, wd)), [wg, wu, wd]
    if name == "compile":
        fn = torch.compile(_eager, dynamic=False)
        return (lambda x: fn(x, wg, wu, wd)), [wg, wu, wd]
    if name == "liger":
        try:
            from liger_kernel.ops.swiglu import LigerSiLUMulFunction
        except Exception as e:  # noqa: BLE001 — reported, the rest still runs
            return f"Liger not importable: {e!r}"
        return (lambda x: F.linear(LigerSiLUMulFunction.apply(F.linear(x, wg), F.linear(x, wu)), wd)), [wg, wu, wd]
    if name in ("quack", "quack-recompute"):
        try:
            from quack.mlp import mlp_func
        except Exception as e:  # noqa: BLE001
            return f"quack not importable: {e!r}"
        # quack's gated layout: rows 2j = gate_j, 2j + 1 = up_j.
        w1 = torch.stack((wg.detach(), wu.detach()), dim=1).reshape(-1, wg.shape[1]).requires_grad_()
        w2 = wd.detach().clone().requires_grad_()
        recompute = name == "quack-recompute"
        return (lambda x: mlp_func(x, w1, w2, activation="swiglu", tuned=False, recompute=recompute)), [w1, w2]
    if name in ("blockfuse", "blockfuse-recompute"):
        from .. import ops
        if not ops.available():
            return f"blockfuse ops not available: {ops.load_error()}"
        w = ops.interleave_gate_up(wg.detach(), wu.detach()).requires_grad_()
        w2 = wd.detach().clone().requires_grad_()
        if name == "blockfuse":
            return (lambda x: ops.gated_mlp(x, w, w2, "silu")), [w, w2]
        return (lambda x: F.linear(ops.gated_up(x, w, "silu", recompute=True), w2)), [w, w2]
    raise ValueError(f"train-mlp: unknown implementation '{name}'")


def step(fn, x, dy, params):
    """One forward + backward with fresh gradients."""
    x.grad = None
    for p in params:
        p.grad = None
    y = fn(x)
    y.backward(dy)
    return y


def measure(args):
    rows, status = [], 0
    for shape in args.shapes:
        label, k, u = MLP_SHAPES[shape]
        gen = torch.Generator(device="cuda").manual_seed(0)
        wg = (torch.randn(u, k, device="cuda", generator=gen) / k ** 0.5).to(torch.bfloat16).requires_grad_()
        wu = (torch.randn(u, k, device="cuda", generator=gen) / k ** 0.5).to(torch.bfloat16).requires_grad_()
        wd = (torch.randn(k, u, device="cuda", generator=gen) / u ** 0.5).to(torch.bfloat16).requires_grad_()
        for m in args.tokens:
            x = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16).requires_grad_()
            dy = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
            ref_y = step(lambda t: _eager(t, wg, wu, wd), x, dy, [wg, wu, wd]).detach()
            ref_dx = x.grad.detach().clone()
            vs = VersusEager()
            for name in args.impls:
                built = build(name, wg, wu, wd)
                row = {"shape": shape, "model": label, "K": k, "U": u, "tokens": m, "impl": name}
                if isinstance(built, str):
                    row["skipped"] = built
                    print(f"# {label} M={m} {name}: {built}", file=sys.stderr, flush=True)
                    rows.append(row)
                    continue
                fn, params = built
                y = step(fn, x, dy, params)
                err_y, err_dx = rel(y, ref_y), rel(x.grad, ref_dx)
                row.update(err_y=err_y, err_dx=err_dx)
                if err_y > TOLERANCE or err_dx > TOLERANCE:
                    print(f"| {label} | {m} | {name} | WRONG: y err {err_y:.3g}, dx err {err_dx:.3g} |", flush=True)
                    status = 1
                    rows.append(row)
                    continue
                ms = cuda_ms(lambda: step(fn, x, dy, params), args.reps)
                peak = peak_activation_bytes(lambda _: step(fn, x, dy, params), None, grads=(x, *params))
                row.update(ms=ms, peak_bytes=peak)
                print(f"| {label} | {m} | {name} | {vs.cells(name, ms, peak)} |", flush=True)
                rows.append(row)
                torch._dynamo.reset()
            x = dy = ref_y = ref_dx = None  # freed before the next point's tensors
            torch.cuda.empty_cache()
    return rows, status


def run(a):
    """The `train-mlp` subcommand: returns the exit status."""
    status = ready(need_ops=False)
    if status:
        return status
    print(f"# {meta()}")
    print("| model | tokens | implementation | forward + backward | speed-up over eager | peak beyond inputs "
          "and weights | memory vs eager |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    rows, status = measure(a)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(dict(**meta(), benchmark="train-mlp", rows=rows), fh, indent=1)
    return status
