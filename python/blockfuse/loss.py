"""The language-model loss without the logits: linear_cross_entropy and the CausalLM patch behind
blockfuse.patch_model(model, loss=True).

A training step's loss head computes logits = h · Wᵀ for every token over the whole vocabulary
([tokens, V]: 1 GiB in bf16 at 4096 tokens of Llama-3's 128256), Hugging Face's loss upcasts them to
fp32 (2 GiB), log_softmax keeps its fp32 output for the backward (2 GiB more) and the backward writes
fp32 and bf16 gradients of the same size: gigabytes of activation memory, most of a short model's
peak. linear_cross_entropy computes the loss and both gradients chunk by chunk in the forward (the
design of Liger's fused linear cross-entropy): per chunk of rows the logits (bf16), their log-sum-exp
and loss, the gradient softmax − onehot scaled by the reduction, then grad_h = g · W and
grad_W += gᵀ · h; the backward only scales the saved gradients by the incoming one. At most one
chunk's logits exist at a time (chunk_rows: by default 1 GiB of logits in the model's dtype on the
kernel path, 256 MiB of fp32 on the torch path, which makes several fp32 temporaries of a chunk).

The chunk's size trades memory for speed through grad_W: every chunk after the first adds its
gᵀ · h into grad_W, reading and writing the whole [V, K] weight gradient (2 GiB of traffic at
Llama-3's 128256 x 4096 in bf16) and running a GEMM of only chunk_rows rows. At 256 MiB of fp32
(523 Llama-3 rows) a 4096-token step took 8 chunks and its grad_W GEMMs 8.6 ms, where one GEMM
of 4096 rows would take an estimated 5.5 ms (H100 profile, docs/cross_entropy.md); 1 GiB of bf16 logits is 4185 rows: one chunk
at 4096 tokens, four at 16384.

On CUDA in bf16/fp16 (V % 8 == 0) each chunk's loss and gradient are one kernel,
blockfuse::cross_entropy_fwd_bwd_ (include/blockfuse/cross_entropy.h: the row's online max and sum,
then the gradient written over the logits: two reads and one write of the chunk's bf16 logits where
the torch ops make several fp32 passes); elsewhere torch ops.

Numerics: the logits are the GEMM's (fp32 accumulation, rounded to the dtype, as nn.Linear gives
them), the softmax, log-sum-exp and loss in fp32; grad_W is accumulated over the chunks in the
weight's dtype by cuBLAS's addmm (fp32 inside, one rounding per chunk), as Liger does. A label
outside [0, V) that is not ignore_index makes the loss NaN (F.cross_entropy raises a device-side
assert there); ignored rows contribute neither loss nor gradient.
"""
import types

import torch
from torch import nn

# Logits per chunk: 1 GiB in the model's dtype where the kernel makes the chunk's loss and gradient
# in place (4185 Llama-3 rows in bf16), 256 MiB of fp32 where torch ops do (their fp32 copies and
# temporaries are several times the chunk).
_CHUNK_BYTES_KERNEL = 1 << 30
_CHUNK_BYTES_TORCH = 256 << 20


def _chunk_rows(rows, vocab, element_size, kernel):
    budget, size = (_CHUNK_BYTES_KERNEL, element_size) if kernel else (_CHUNK_BYTES_TORCH, 4)
    return max(1, min(rows, budget // (size * max(vocab, 1))))


def _kernel(hidden, vocab):
    """blockfuse::cross_entropy_fwd_bwd_ where it runs (CUDA, bf16/fp16, V % 8 == 0, the op in the
    loaded library), else None: the chunk's loss and gradient then come from torch ops."""
    if not hidden.is_cuda or hidden.dtype not in (torch.bfloat16, torch.float16) or vocab % 8 != 0 or vocab < 8:
        return None
    try:
        from ._common import has_op
    except Exception:  # noqa: BLE001 — no compiled library: the torch path
        return None
    return torch.ops.blockfuse.cross_entropy_fwd_bwd_ if has_op("cross_entropy_fwd_bwd_") else None


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, labels, ignore_index, denom, chunk_rows):
        n, vocab = hidden.shape[0], weight.shape[0]
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.empty_like(weight) if need_w else None  # the first chunk writes it, the others add
        loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        inv = 1.0 / denom.to(torch.float32) if torch.is_tensor(denom) else 1.0 / float(denom)
        kernel = _kernel(hidden, vocab)
        if kernel is not None:
            inv_t = (inv if torch.is_tensor(inv) else torch.tensor(inv)).to(device=hidden.device, dtype=torch.float32)
        for s in range(0, n, chunk_rows):
            e = min(n, s + chunk_rows)
            h = hidden[s:e]
            lbl = labels[s:e]
            if kernel is not None:
                # One kernel: the rows' loss, and softmax − onehot times the scale over the logits.
                logits = h @ weight.t()
                loss = loss + kernel(logits, lbl, ignore_index, inv_t if (need_h or need_w) else None).sum()
                if need_h:
                    torch.mm(logits, weight, out=grad_h[s:e])
                if need_w:
                    torch.mm(logits.t(), h, out=grad_w) if s == 0 else grad_w.addmm_(logits.t(), h)
                continue
            x = (h @ weight.t()).float()  # [c, V]: the GEMM's logits, as nn.Linear rounds them
            valid = lbl != ignore_index
            bad = valid & ((lbl < 0) | (lbl >= vocab))
            safe = torch.where(valid & ~bad, lbl, torch.zeros_like(lbl))
            lse = torch.logsumexp(x, dim=-1)
            row = lse - x.gather(1, safe[:, None]).squeeze(1)
            row = torch.where(valid, row, torch.zeros_like(row))
            row = torch.where(bad, torch.full_like(row, float("nan")), row)
            loss = loss + row.sum()
            if need_h or need_w:
                # softmax − onehot, times the reduction's scale, in place over the fp32 logits.
                # Ignored rows get 0, a row with a bad label NaN (as its loss).
                hit = valid & ~bad
                x.sub_(lse[:, None]).exp_()
                x.scatter_add_(1, safe[:, None], -hit.to(x.dtype)[:, None])
                scale = valid.to(x.dtype) * inv
                x.mul_(torch.where(bad, torch.full_like(scale, float("nan")), scale)[:, None])
                g = x.to(hidden.dtype)
                del x
                if need_h:
                    torch.mm(g, weight, out=grad_h[s:e])
                if need_w:
                    torch.mm(g.t(), h, out=grad_w) if s == 0 else grad_w.addmm_(g.t(), h)
        ctx.save_for_backward(grad_h, grad_w)
        return loss * inv

    @staticmethod
    def backward(ctx, grad_out):
        grad_h, grad_w = ctx.saved_tensors
        if getattr(ctx, "handed_over", False):
            raise RuntimeError("blockfuse.linear_cross_entropy: a second backward through the same loss "
                               "(retain_graph) after a first with gradient 1, which handed its weight gradient "
                               "to autograd as it was; pass the first backward a gradient tensor other than 1, or "
                               "compute the loss again")
        dh = grad_h * grad_out.to(grad_h.dtype) if grad_h is not None else None
        if grad_w is not None and _is_one(grad_out):
            # loss.backward(): the forward's weight gradient as it is (Liger's shortcut); autograd may
            # make it the weight's .grad, so a second backward could see it changed: refused above.
            ctx.handed_over = True
            return dh, grad_w, None, None, None, None
        dw = grad_w * grad_out.to(grad_w.dtype) if grad_w is not None else None
        return dh, dw, None, None, None, None


def _is_one(grad_out):
    """Whether the loss's incoming gradient is exactly 1 (what loss.backward() passes), so the saved
    gradients need no scaling: the multiply by a 0-d device tensor is a strided pass over grad_W ([V, K]:
    1 GiB in bf16 at Llama-3's 128256 x 4096; about 1.4 ms of the step on an H100: docs/cross_entropy.md).
    One host read; never inside torch.compile or a CUDA-graph capture, where the scaling stays."""
    if grad_out.numel() != 1:
        return False
    try:
        from ._common import in_graph_or_compile
    except Exception:  # noqa: BLE001 — no compiled library: scale as usual
        return False
    if in_graph_or_compile():
        return False
    return bool(grad_out.detach().reshape(()).item() == 1.0)


def linear_cross_entropy(hidden, weight, labels, ignore_index=-100, reduction="mean", num_items_in_batch=None,
                         chunk_rows=None):
    """cross_entropy(hidden · weightᵀ, labels) without materialising the logits of every row.

    hidden [..., K], weight [V, K] (an nn.Linear's, no bias), labels [...] (int64; ignore_index rows
    are skipped). reduction "mean" (over the rows not ignored, or num_items_in_batch when given: Hugging
    Face's gradient-accumulation convention) or "sum". Returns a 0-d fp32 tensor; hidden and weight
    get gradients (either may be frozen). chunk_rows: rows per chunk (default: 1 GiB of logits in the
    dtype on the kernel path, 256 MiB of fp32 on the torch path; fewer rows: less memory, slower).
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"blockfuse.linear_cross_entropy: reduction {reduction!r}; required: 'mean' or 'sum'")
    if weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"blockfuse.linear_cross_entropy: hidden {tuple(hidden.shape)} and weight "
                         f"{tuple(weight.shape)}; required: hidden [..., K] and weight [V, K]")
    if labels.shape != hidden.shape[:-1]:
        raise ValueError(f"blockfuse.linear_cross_entropy: labels {tuple(labels.shape)}; required: "
                         f"{tuple(hidden.shape[:-1])} (hidden's leading dimensions)")
    if labels.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"blockfuse.linear_cross_entropy: labels of dtype {labels.dtype}; required: int64 or int32")
    if hidden.dtype != weight.dtype:
        raise ValueError(f"blockfuse.linear_cross_entropy: hidden is {hidden.dtype}, weight {weight.dtype}; "
                         "required: the same dtype")
    h2 = hidden.reshape(-1, hidden.shape[-1])
    lbl = labels.reshape(-1).to(torch.int64)
    if reduction == "sum":
        denom = 1.0
    elif num_items_in_batch is not None:
        denom = num_items_in_batch
    else:  # the rows not ignored, on the device (no host read-back); at least 1, as a sum over none is 0
        denom = (lbl != ignore_index).sum().clamp_min(1)
    if chunk_rows is not None:
        rows = chunk_rows
    else:
        rows = _chunk_rows(h2.shape[0], weight.shape[0], h2.element_size(), _kernel(h2, weight.shape[0]) is not None)
    if rows < 1:
        raise ValueError(f"blockfuse.linear_cross_entropy: chunk_rows = {rows}; required: >= 1")
    return _LinearCrossEntropy.apply(h2, weight, lbl, ignore_index, denom, rows)


# ---- the CausalLM patch ------------------------------------------------------------------------

def loss_head_spec(model):
    """Why `model`'s loss head cannot take linear_cross_entropy (a string), or None when it can: a
    Hugging Face *ForCausalLM whose `lm_head` is an nn.Linear without bias, whose base model is
    `model.model`, and whose logits are not soft-capped (Gemma-2's final_logit_softcapping)."""
    name = type(model).__name__
    if not name.endswith("ForCausalLM"):
        return f"{name} is not a *ForCausalLM model"
    head = getattr(model, "lm_head", None)
    if type(head) is not nn.Linear or head.bias is not None:
        return f"{name}.lm_head is {type(head).__name__}{'' if head is None or head.bias is None else ' with a bias'}; " \
               "required: an nn.Linear without bias"
    if not isinstance(getattr(model, "model", None), nn.Module):
        return f"{name} has no base model at .model"
    cap = getattr(getattr(model, "config", None), "final_logit_softcapping", None)
    if cap:
        return f"{name} soft-caps its logits (final_logit_softcapping = {cap}), which linear_cross_entropy does not"
    if "_blockfuse_loss" in model.__dict__:
        return f"{name}'s loss is patched already"
    return None


def _loss_forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                  inputs_embeds=None, labels=None, use_cache=None, logits_to_keep=0, **kwargs):
    """The CausalLM forward with the loss from linear_cross_entropy when labels are given and a
    gradient is recorded (then `logits` is None: they are never materialised); the original forward
    otherwise."""
    original = self._blockfuse_loss
    if labels is None or not torch.is_grad_enabled():
        return original(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                        past_key_values=past_key_values, inputs_embeds=inputs_embeds, labels=labels,
                        use_cache=use_cache, logits_to_keep=logits_to_keep, **kwargs)
    from transformers.modeling_outputs import CausalLMOutputWithPast
    shift_labels = kwargs.pop("shift_labels", None)
    num_items = kwargs.get("num_items_in_batch")
    out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                     past_key_values=past_key_values, inputs_embeds=inputs_embeds, use_cache=use_cache, **kwargs)
    hidden = out[0] if isinstance(out, tuple) else out.last_hidden_state
    if shift_labels is None:  # Hugging Face's ForCausalLMLoss: token t predicts label t + 1
        shift_labels = nn.functional.pad(labels, (0, 1), value=-100)[..., 1:]
    loss = linear_cross_entropy(hidden, self.lm_head.weight, shift_labels.to(hidden.device), ignore_index=-100,
                                num_items_in_batch=num_items)
    return CausalLMOutputWithPast(loss=loss, logits=None,
                                  past_key_values=getattr(out, "past_key_values", None),
                                  hidden_states=getattr(out, "hidden_states", None),
                                  attentions=getattr(out, "attentions", None))


def patch_loss(model):
    """Gives `model` (a *ForCausalLM, loss_head_spec) the forward above; ValueError if it cannot."""
    why = loss_head_spec(model)
    if why is not None:
        raise ValueError(f"blockfuse.patch_model(loss=True): {why}")
    model._blockfuse_loss = model.forward
    model.forward = types.MethodType(_loss_forward, model)


def unpatch_loss(model):
    """Undoes patch_loss (a model without it is left as it is)."""
    original = model.__dict__.pop("_blockfuse_loss", None)
    if original is not None:
        model.__dict__.pop("forward", None)


# ---- the kernel op's fake: shapes for torch.compile / FakeTensor ------------------------------------

def _register_fake():
    try:
        from ._common import LOADED, has_op
    except Exception:  # noqa: BLE001
        return
    if LOADED and has_op("cross_entropy_fwd_bwd_"):
        @torch.library.register_fake("blockfuse::cross_entropy_fwd_bwd_")
        def _cross_entropy_fwd_bwd_fake(logits, labels, ignore_index=-100, grad_scale=None):
            torch._check(logits.dim() == 2, lambda: "blockfuse.cross_entropy_fwd_bwd_: argument 'logits' must be 2-D")
            return logits.new_empty((logits.shape[0],), dtype=torch.float32)  # logits written in place


_register_fake()
