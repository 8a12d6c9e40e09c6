"""`python -m blockfuse.bench train`: one training step (forward + backward of the language-model
loss) of a Llama-3-8B-shaped model with fewer layers, bf16, random weights and tokens, in one process:

  eager      the Hugging Face model as built (SDPA attention)
  liger      the same with Liger's kernels (liger_kernel.transformers.apply_liger_kernel_to_llama:
             RMSNorm, SwiGLU, rotary, fused linear cross-entropy), when importable
  compile    the model's forward through torch.compile
  patched    blockfuse.patch_model(model): fused gated MLPs and norms (attention through SDPA)
  patched-loss  the same with loss=True: the language-model loss by blockfuse.loss.linear_cross_entropy
             (loss and gradients chunk by chunk, never the [tokens, vocabulary] logits)
  patched-all  patched with loss=True and rope=True: the rotary embedding by blockfuse.ops.rope too
  patched-attention  patched with attention=True: blockfuse's attention and its backward (the
             "blockfuse" attention backend), the comparison the attention-backward issue asks for
  patched-compile  patch_model(model), then the forward through torch.compile: blockfuse's ops
             (each with a fake and a C++ autograd) inside the graph inductor fuses the rest of

Per variant: the median ms of a step (gradients cleared before each, so every step allocates them)
and the peak memory a step allocates beyond what was allocated before it (weights). Every variant's
first loss is checked against eager's (relative difference > 2 %: exit status 1).

The variants are timed in `--rounds` rounds, alternately in the given order and reversed, and each
row's ms is the median of its rounds' medians: timed one after another, the variant measured last ran
the same cuBLAS GEMMs 2.4 % slower on the H200 (clocks or temperature later in the run), enough to
turn a 1 % gain into a 2-7 % loss (docs/attention.md#backward-sm80). So every variant's model is
alive for the whole point (weights, no gradients between timings).
"""
import copy
import json
import statistics
import sys

import torch

from .common import VersusEager, cuda_ms, meta, peak_activation_bytes, ready
from .model import build_fp32
from .shapes import TRAIN_VARIANTS

VARIANTS = TRAIN_VARIANTS


def variant(name, base):
    """The model of variant `name` (a copy of base), or a string saying why it is unavailable."""
    if name == "eager":
        return base
    m = copy.deepcopy(base)
    if name == "liger":
        try:
            from liger_kernel.transformers import apply_liger_kernel_to_llama
        except Exception as e:  # noqa: BLE001 — reported, the rest still runs
            return f"Liger not importable: {e!r}"
        apply_liger_kernel_to_llama(model=m)
        return m
    if name == "compile":
        m.forward = torch.compile(m.forward)
        return m
    if name == "patched-compile":
        from .. import patch
        patch.patch_model(m)
        m.forward = torch.compile(m.forward)
        return m
    if name in ("patched", "patched-loss", "patched-all", "patched-attention"):
        from .. import patch
        # in place (it returns what it replaced)
        patch.patch_model(m, attention=name == "patched-attention", loss=name in ("patched-loss", "patched-all"),
                          rope=name == "patched-all")
        return m
    raise ValueError(f"train: unknown variant '{name}'")


def step(model, ids):
    for p in model.parameters():
        p.grad = None
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss


def measure(args):
    rows, status = [], 0
    m32 = build_fp32("llama3-8b", args.layers)
    base = copy.deepcopy(m32).to(torch.bfloat16).train()
    del m32
    torch.cuda.empty_cache()
    for batch in args.batches:
        ids = torch.randint(0, base.config.vocab_size, (batch, args.seq), device="cuda",
                            generator=torch.Generator(device="cuda").manual_seed(batch))
        ref_loss, point, models = None, [], {}
        # Each variant built, its first loss checked and its peak memory taken, in the given order.
        for name in args.variants:
            m = variant(name, base)
            row = {"layers": args.layers, "batch": batch, "seq": args.seq, "variant": name}
            point.append(row)
            if isinstance(m, str):
                row["skipped"] = m
                print(f"# batch {batch} {name}: {m}", file=sys.stderr, flush=True)
                continue
            m.train()
            loss = step(m, ids).item()
            if ref_loss is None:
                ref_loss = loss
            row["loss"] = loss
            if abs(loss - ref_loss) > 0.02 * abs(ref_loss):
                print(f"| {batch} x {args.seq} | {name} | WRONG: loss {loss:.4f} vs eager {ref_loss:.4f} |", flush=True)
                status = 1
            else:
                row["peak_bytes"] = peak_activation_bytes(lambda _: step(m, ids), None, grads=list(m.parameters()))
                models[name] = m
            clear_grads(m)

        # Timed in rounds, the order reversed every other round (the module docstring says why).
        def time_one(name):
            ms = cuda_ms(lambda: step(models[name], ids), args.reps)
            clear_grads(models[name])
            return ms
        times = timed_rounds([n for n in args.variants if n in models], args.rounds, time_one)
        vs = VersusEager()
        for row in point:
            name = row["variant"]
            if name in times:
                row.update(ms=statistics.median(times[name]), ms_rounds=times[name])
                print(f"| {batch} x {args.seq} | {name} | {vs.cells(name, row['ms'], row['peak_bytes'], ms_digits=1)} |",
                      flush=True)
        rows += point
        del models
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    return rows, status


def timed_rounds(names, rounds, time_one):
    """{name: [time_one(name) of each round]}, the names in order in even rounds and reversed in odd
    ones, so a drift over the run (clocks, temperature) reaches every name alike."""
    times = {n: [] for n in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            times[name].append(time_one(name))
    return times


def clear_grads(m):
    for p in m.parameters():
        p.grad = None


def run(a):
    """The `train` subcommand: returns the exit status."""
    status = ready()
    if status:
        return status
    print(f"# {meta()}; Llama-3-8B shape, {a.layers} layers")
    print("| batch x seq | variant | step (fwd + bwd) | speed-up over eager | peak beyond weights | memory vs eager |")
    print("| --- | --- | --- | --- | --- | --- |")
    rows, status = measure(a)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(dict(**meta(), benchmark="train", rows=rows), fh, indent=1)
    return status
