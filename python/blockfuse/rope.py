"""Rotary position embedding in one pass: blockfuse.ops.rope and the Hugging Face patch behind
blockfuse.patch_model(model, rope=True).

    q_embed = blockfuse.ops.rope(q, cos, sin)        # = q·cos + rotate_half(q)·sin

Hugging Face's apply_rotary_pos_emb(q, k, cos, sin) computes each of q and k as a cat (rotate_half)
and three broadcast elementwise ops over the strided [B, H, S, D] view of the projection, and autograd
runs as many again in the backward. blockfuse::rope (include/blockfuse/rope.h) reads x once and writes
the result once, in fp32 with one rounding; its gradient is the same kernel with the transposed
rotation. The op takes x in Hugging Face's layout (the [B, S, H, D] projection viewed as [B, H, S, D],
any strides with a contiguous head dim) and cos / sin [1 or B, S, D] of x's dtype, and returns a
tensor with x's strides. Head dims 64, 128, 256; bf16 / fp16; CUDA.

The patch. Hugging Face's attention modules call the module-level function apply_rotary_pos_emb of
their modeling file, so the function is what has to change, and a module-level function is shared by
every model of that family in the process. patch_rope therefore replaces it (once per modeling file)
by a dispatcher that runs the fused op only for the rotary tables a patched model made: a forward
hook on the patched model's rotary-embedding module marks its (cos, sin) output, and any other call
(an unpatched model, tables that need a gradient, shapes or devices the kernel does not take) runs
the original function. Activation checkpointing re-runs the attention with the same marked tables.
"""
import torch

from ._common import LOADED, has_op, require_op, resolve

_HAS_OP = has_op("rope")


def _rope_missing(*args, **kwargs):
    require_op("rope")


# The op, or (a library built before it existed, or none loaded) a stand-in saying why not.
_ROPE = resolve("rope") if _HAS_OP else _rope_missing
_HEAD_DIMS = (64, 128, 256)
_MARK = "_blockfuse_rope"

if LOADED and _HAS_OP:
    @torch.library.register_fake("blockfuse::rope")
    def _rope_fake(x, cos, sin, backward=False):
        torch._check(x.dim() == 4, lambda: "blockfuse::rope: argument 'x' must be [batch, heads, seqlen, head_dim]")
        return torch.empty_like(x)

    def _rope_setup(ctx, inputs, output):
        _, cos, sin, backward = inputs
        ctx.save_for_backward(cos, sin)
        ctx.backward = backward

    def _rope_grad(ctx, grad):
        cos, sin = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        # The transpose of the rotation; the tables get no gradient (the wrapper sends tables that
        # need one to the original function). An incoming gradient the kernel's views cannot take
        # (an expanded one from sum().backward()) is made dense first.
        return _ROPE(_dense(grad), cos, sin, not ctx.backward), None, None, None

    torch.library.register_autograd("blockfuse::rope", _rope_grad, setup_context=_rope_setup)


def _dense(t):
    """t when it is a dense [B, H, S, D] or a dense transposed [B, S, H, D] tensor (what the kernel's
    16-byte strided views take), else a contiguous copy."""
    return t if t.is_contiguous() or t.transpose(1, 2).is_contiguous() else t.contiguous()


def rope(x, cos, sin, backward=False):
    """x·cos + rotate_half(x)·sin (backward=True: its transpose, the gradient) for x [B, H, S, D] and
    cos, sin [1 or B, S, D] of x's dtype, in one kernel."""
    return _ROPE(x, cos, sin, backward)


def applies(x, cos, sin, unsqueeze_dim=1):
    """Whether the fused op takes apply_rotary_pos_emb's (x, cos, sin, unsqueeze_dim): CUDA, bf16/fp16,
    x [B, H, S, D] with D in 64/128/256 and a contiguous head dim, cos/sin [1 or B, S, D] of x's dtype
    needing no gradient, unsqueezed at dim 1 (Hugging Face's default)."""
    if not _HAS_OP or unsqueeze_dim != 1 or not isinstance(x, torch.Tensor) or x.dim() != 4:
        return False
    if not x.is_cuda or x.dtype not in (torch.bfloat16, torch.float16) or x.shape[-1] not in _HEAD_DIMS:
        return False
    if x.stride(-1) != 1:
        return False
    b, _, s, d = x.shape
    for t in (cos, sin):
        if (not isinstance(t, torch.Tensor) or t.dim() != 3 or t.dtype != x.dtype or t.device != x.device
                or t.requires_grad or t.shape[0] not in (1, b) or t.shape[1] != s or t.shape[2] != d
                or t.stride(-1) != 1):
            return False
    return cos.stride() == sin.stride()


def _dispatcher(original):
    """apply_rotary_pos_emb(q, k, cos, sin, ...) through the fused op for tables a patched model marked,
    the original function otherwise."""
    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        unsqueeze_dim = args[0] if args else kwargs.get("unsqueeze_dim", 1)
        if (len(args) <= 1 and type(unsqueeze_dim) is int and set(kwargs) <= {"unsqueeze_dim"} and getattr(cos, _MARK, False)
                and applies(q, cos, sin, unsqueeze_dim) and applies(k, cos, sin, unsqueeze_dim)):
            return _ROPE(q, cos, sin, False), _ROPE(k, cos, sin, False)
        return original(q, k, cos, sin, *args, **kwargs)
    apply_rotary_pos_emb._blockfuse_original = original
    apply_rotary_pos_emb.__doc__ = original.__doc__
    return apply_rotary_pos_emb


def _rotary_modules(model):
    """(name, module) of the model's rotary-embedding modules (Hugging Face's *RotaryEmbedding)."""
    return [(n, m) for n, m in model.named_modules() if type(m).__name__.endswith("RotaryEmbedding")]


def _modeling_modules(model):
    """The modeling files (Python modules) of the model's attention classes that define
    apply_rotary_pos_emb."""
    import sys
    found = {}
    for _, m in model.named_modules():
        if type(m).__name__.endswith("Attention"):
            mod = sys.modules.get(type(m).__module__)
            if mod is not None and callable(getattr(mod, "apply_rotary_pos_emb", None)):
                found[mod.__name__] = mod
    return list(found.values())


def _mark(module, args, output):
    if isinstance(output, tuple) and len(output) == 2:
        for t in output:
            if isinstance(t, torch.Tensor):
                setattr(t, _MARK, True)
    return output


def rope_spec(model):
    """None when patch_rope can patch `model`, else why not."""
    if not _HAS_OP:
        return "the loaded blockfuse library has no rope op (built before it existed, or not loaded)"
    if not _rotary_modules(model):
        return f"{type(model).__name__} has no *RotaryEmbedding module"
    if not _modeling_modules(model):
        return f"{type(model).__name__}'s attention modules' files define no apply_rotary_pos_emb"
    return None


def patch_rope(model):
    """Routes the model's rotary embedding through the fused op (see the module docstring); returns
    [(name, rotary module)] hooked. Raises ValueError (nothing changed) when it cannot."""
    why = rope_spec(model)
    if why is not None:
        raise ValueError(f"blockfuse.patch_model(rope=True): {why}")
    for mod in _modeling_modules(model):
        if not hasattr(mod.apply_rotary_pos_emb, "_blockfuse_original"):
            mod.apply_rotary_pos_emb = _dispatcher(mod.apply_rotary_pos_emb)
    hooked = []
    for name, m in _rotary_modules(model):
        if "_blockfuse_rope_hook" not in m.__dict__:
            m._blockfuse_rope_hook = m.register_forward_hook(_mark)
            hooked.append((name, m))
    return hooked


def unpatch_rope(model):
    """Removes patch_rope's hooks from `model`: its tables are no longer marked, so every call runs the
    original function (the dispatchers stay installed; unmarked tables pass straight through)."""
    for _, m in _rotary_modules(model):
        hook = m.__dict__.pop("_blockfuse_rope_hook", None)
        if hook is not None:
            hook.remove()
