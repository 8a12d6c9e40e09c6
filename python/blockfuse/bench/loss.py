"""`python -m blockfuse.bench loss`: the language-model loss head in training, hidden [tokens, K] ->
cross_entropy(hidden · Wᵀ, labels), forward + backward (gradients of hidden and W), bf16, one process:

  eager      F.linear, then F.cross_entropy of the fp32-upcast logits (what Hugging Face's
             ForCausalLMLoss runs)
  compile    the same through torch.compile (static shapes)
  liger      Liger's LigerFusedLinearCrossEntropyLoss (chunked, Triton), when importable
  blockfuse  blockfuse.linear_cross_entropy (chunked; each chunk's loss and gradient one kernel)
  blockfuse-small-chunks  the same with 256 MiB of fp32-sized logits a chunk (the default before
             2026-11-27: less memory, grad_W accumulated over more chunks)

Per point: the median ms of forward + backward (the .grad of hidden and W cleared before every step)
and the peak memory the step allocates beyond its inputs and weights. Every implementation's loss
and hidden gradient are checked against eager's first (relative error > 0.02: exit status 1).
"""
import json
import sys

import torch
import torch.nn.functional as F

from .common import VersusEager, cuda_ms, meta, peak_activation_bytes, ready, rel
from .shapes import LOSS_VOCABS
TOLERANCE = 0.02


def _eager(h, w, labels):
    return F.cross_entropy(F.linear(h, w).float(), labels, ignore_index=-100)


def build(name):
    """The loss function of implementation `name`, or a string saying why it is unavailable."""
    if name == "eager":
        return _eager
    if name == "compile":
        return torch.compile(_eager, dynamic=False)
    if name == "liger":
        try:
            from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
        except Exception as e:  # noqa: BLE001 — reported, the rest still runs
            return f"Liger not importable: {e!r}"
        lce = LigerFusedLinearCrossEntropyLoss(ignore_index=-100)
        return lambda h, w, labels: lce(w, h, labels)
    if name in ("blockfuse", "blockfuse-small-chunks"):
        from ..loss import _chunk_rows, linear_cross_entropy
        if name == "blockfuse":
            return lambda h, w, labels: linear_cross_entropy(h, w, labels)
        # The torch path's 256 MiB of fp32 (the kernel path's default before the larger chunks).
        return lambda h, w, labels: linear_cross_entropy(h, w, labels, chunk_rows=_chunk_rows(
            h.shape[0], w.shape[0], h.element_size(), kernel=False))
    raise ValueError(f"loss: unknown implementation '{name}'")


def step(fn, h, w, labels):
    h.grad = w.grad = None
    loss = fn(h, w, labels)
    loss.backward()
    return loss


def measure(args):
    rows, status = [], 0
    for vocab_name in args.vocabs:
        k, v = LOSS_VOCABS[vocab_name]
        gen = torch.Generator(device="cuda").manual_seed(0)
        w = (torch.randn(v, k, device="cuda", generator=gen) / k ** 0.5).to(torch.bfloat16).requires_grad_()
        for m in args.tokens:
            h = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16).requires_grad_()
            labels = torch.randint(0, v, (m,), device="cuda", generator=gen)
            labels[::17] = -100
            ref = step(_eager, h, w, labels).detach()
            ref_dh = h.grad.detach().clone()
            vs = VersusEager()
            for name in args.impls:
                fn = build(name)
                row = {"vocab": vocab_name, "K": k, "V": v, "tokens": m, "impl": name}
                if isinstance(fn, str):
                    row["skipped"] = fn
                    print(f"# {vocab_name} M={m} {name}: {fn}", file=sys.stderr, flush=True)
                    rows.append(row)
                    continue
                loss = step(fn, h, w, labels)
                err, err_dh = rel(loss.detach().reshape(1), ref.reshape(1)), rel(h.grad, ref_dh)
                row.update(err_loss=err, err_dh=err_dh)
                if err > TOLERANCE or err_dh > TOLERANCE:
                    print(f"| {vocab_name} | {m} | {name} | WRONG: loss err {err:.3g}, dh err {err_dh:.3g} |", flush=True)
                    status = 1
                    rows.append(row)
                    continue
                ms = cuda_ms(lambda: step(fn, h, w, labels), args.reps)
                peak = peak_activation_bytes(lambda _: step(fn, h, w, labels), None, grads=(h, w))
                row.update(ms=ms, peak_bytes=peak)
                print(f"| {vocab_name} | {m} | {name} | {vs.cells(name, ms, peak)} |", flush=True)
                rows.append(row)
                torch._dynamo.reset()
            h = labels = ref = ref_dh = None
            torch.cuda.empty_cache()
    return rows, status


def run(a):
    """The `loss` subcommand: returns the exit status."""
    status = ready()
    if status:
        return status
    print(f"# {meta()}")
    print("| vocabulary | tokens | implementation | forward + backward | speed-up over eager | peak beyond inputs "
          "and weights | memory vs eager |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    rows, status = measure(a)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(dict(**meta(), benchmark="loss", rows=rows), fh, indent=1)
    return status
