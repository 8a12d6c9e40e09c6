"""blockfuse.patch_model: fused kernels in a Hugging Face decoder, in place, with one call.

    import blockfuse
    patched = blockfuse.patch_model(model)                # mlp=True, norm=True, attention=False

mlp=True   every gated MLP (LlamaMLP, MistralMLP, Qwen2MLP, Qwen3MLP, Gemma2MLP, Gemma3MLP, Phi3MLP)
           becomes a blockfuse.nn.GatedMLP: gate/up projection and activation in one kernel.
norm=True  every decoder layer (Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma-2, Gemma-3) gets a forward
           in which the residual add and the RMSNorm after the attention are one add_rmsnorm call
           carrying the residual stream, and every other RMSNorm of the layer is blockfuse's
           rmsnorm (Gemma's (1 + w) included):
             Llama-like:  n = rmsnorm(h, w_in); a = attn(n)
                          n, h = add_rmsnorm(a, h, w_post_attn); return h + mlp(n)
             Gemma-2/3:   n = rmsnorm(h, w_in); a = rmsnorm(attn(n), w_post_attn)
                          n, h = add_rmsnorm(a, h, w_pre_ff); return h + rmsnorm(mlp(n), w_post_ff)
           The attention and MLP submodules are called as the original forward calls them (every
           keyword argument passed through), so caches (DynamicCache, StaticCache), masks, rotary
           embeddings, sliding windows and torch.compile behave as before. In training the fused
           forward runs too (rmsnorm and add_rmsnorm have a backward), except in a Phi-3 layer whose
           residual dropouts are active; for inputs the kernels do not take (CPU, float32) the layer
           runs its original forward.
attention  attention=True: model.set_attn_implementation("blockfuse") (blockfuse.attention's backend).
loss       loss=True: a *ForCausalLM's training loss by blockfuse.loss.linear_cross_entropy (the loss and
           its gradients chunk by chunk, never the [tokens, vocabulary] logits).
rope       rope=True: the model's rotary embedding (apply_rotary_pos_emb of q and k) by blockfuse.ops.rope,
           forward and backward in one pass each (blockfuse.rope: how a module-level function is
           patched for one model only).

Everything is checked before anything changes: an MLP that cannot be converted, a decoder layer
whose forward is not the one this module knows (it reads the class's source: only the statements
of the transformers versions it was written against — 5.x — are accepted), a norm whose output is
not the formula the kernel computes (probed on a random row) raise ValueError and leave the model as
it was. A model in which nothing matched is an error too.

The residual add between two layers (layer i's `h + mlp(n)` and layer i+1's input norm) is not
fused: the layers are called by the model's own loop, which passes one tensor between them.
"""
import ast
import inspect
import textwrap
import types

import torch
from torch import nn

from . import add_rmsnorm as _norm
from . import nn as bnn
from . import ops
from ._common import FUSED_DTYPES as _FUSED_DTYPES

# Decoder-layer class name -> the shape of its forward (see the module docstring).
LLAMA, PHI3, SANDWICH = "llama", "phi3", "sandwich"
DECODER_LAYERS = {
    "LlamaDecoderLayer": LLAMA,
    "MistralDecoderLayer": LLAMA,
    "Qwen2DecoderLayer": LLAMA,
    "Qwen3DecoderLayer": LLAMA,
    "Phi3DecoderLayer": PHI3,
    "Gemma2DecoderLayer": SANDWICH,
    "Gemma3DecoderLayer": SANDWICH,
}
# The attributes of `self` each forward may use, in the order it first uses them.
_EXPECTED_ATTRS = {
    LLAMA: ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp"),
    PHI3: ("input_layernorm", "self_attn", "resid_attn_dropout", "post_attention_layernorm", "mlp",
           "resid_mlp_dropout"),
    SANDWICH: ("input_layernorm", "self_attn", "post_attention_layernorm", "pre_feedforward_layernorm", "mlp",
               "post_feedforward_layernorm"),
}
_NORMS = {
    LLAMA: ("input_layernorm", "post_attention_layernorm"),
    PHI3: ("input_layernorm", "post_attention_layernorm"),
    SANDWICH: ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
               "post_feedforward_layernorm"),
}


class _LayerSpec:
    """What the fused forward of one layer needs, fixed at patch time."""
    __slots__ = ("kind", "eps", "gemma", "arg_names")

    def __init__(self, kind, eps, gemma, arg_names):
        self.kind, self.eps, self.gemma, self.arg_names = kind, eps, gemma, arg_names


def _self_attr_chains(fn_node):
    """The dotted attribute chains rooted at `self` in a function body, in order of first use."""
    chains = []

    class V(ast.NodeVisitor):
        def visit_Attribute(self, node):
            parts, n = [], node
            while isinstance(n, ast.Attribute):
                parts.append(n.attr)
                n = n.value
            if isinstance(n, ast.Name) and n.id == "self":
                chain = ".".join(reversed(parts))
                if chain not in chains:
                    chains.append(chain)
                return  # the whole chain is taken; do not visit its prefixes
            self.generic_visit(node)

    for stmt in fn_node.body:
        V().visit(stmt)
    return chains


def check_layer_forward(cls, kind):
    """Raises ValueError unless cls.forward is the straight-line forward this module replaces: only
    assignments and calls, `return hidden_states` at the end, two residual additions, and exactly the
    expected submodules of self used in the expected order."""
    name = cls.__name__
    try:
        src = textwrap.dedent(inspect.getsource(cls.forward))
        fn = ast.parse(src).body[0]
    except (OSError, TypeError, SyntaxError, IndexError) as e:
        raise ValueError(f"blockfuse.patch_model: cannot read the source of {name}.forward ({e}); "
                         "use norm=False") from None
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    unknown = [type(s).__name__ for s in body if not isinstance(s, (ast.Assign, ast.Expr, ast.Return))]
    last = body[-1] if body else None
    returns_hidden = isinstance(last, ast.Return) and isinstance(last.value, ast.Name) and last.value.id == "hidden_states"
    adds = sum(1 for n in ast.walk(fn) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add)
               and isinstance(n.left, ast.Name) and n.left.id == "residual")
    chains = tuple(_self_attr_chains(fn))
    if unknown or not returns_hidden or adds != 2 or chains != _EXPECTED_ATTRS[kind]:
        raise ValueError(
            f"blockfuse.patch_model: {name}.forward is not the forward blockfuse knows (statements "
            f"{unknown or 'ok'}, returns hidden_states: {returns_hidden}, residual additions: {adds}, uses "
            f"self.{', self.'.join(chains)}; expected self.{', self.'.join(_EXPECTED_ATTRS[kind])}): this "
            "transformers version is not supported with norm=True (use norm=False)")
    params = list(inspect.signature(cls.forward).parameters.values())
    # the positional parameters after self and hidden_states, in order (for callers passing them positionally)
    return tuple(p.name for p in params[2:] if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def _norm_eps(norm):
    for attr in ("variance_epsilon", "eps"):
        v = getattr(norm, attr, None)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


@torch.no_grad()
def check_norm(norm, where, hidden, gemma):
    """eps of an RMSNorm module after checking, on a random input, that it computes
    x · rsqrt(mean(x²) + eps) · w (or · (1 + w) when gemma) with its own weight."""
    w = getattr(norm, "weight", None)
    eps = _norm_eps(norm)
    if not isinstance(w, torch.Tensor) or w.dim() != 1 or w.shape[0] != hidden or eps is None or not eps > 0:
        raise ValueError(f"blockfuse.patch_model: {where} ({type(norm).__name__}) has no 1-D weight [{hidden}] and "
                         "positive eps (variance_epsilon / eps); required: an RMSNorm")
    if hidden % 8:
        raise ValueError(f"blockfuse.patch_model: {where} has hidden size {hidden}; required: a multiple of 8")
    if w.device.type == "meta":
        raise ValueError(f"blockfuse.patch_model: {where} is on the meta device; load the weights first")
    g = torch.Generator(device=w.device).manual_seed(0)
    x = torch.randn(3, hidden, device=w.device, generator=g, dtype=torch.float32)
    got = norm(x).float()
    want = ops.rmsnorm_reference(x, w, eps, gemma, out_dtype=torch.float32)
    err = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
    if not err < 1e-2:  # a bf16 weight product or rounding: ~4e-3 at most
        raise ValueError(f"blockfuse.patch_model: {where} ({type(norm).__name__}) does not compute "
                         f"x·rsqrt(mean(x²)+eps)·{'(1+w)' if gemma else 'w'} (relative difference {err:.2e} on a "
                         "random input); required: that RMSNorm")
    return eps


def plan_layer(name, layer):
    """_LayerSpec for a supported decoder layer (checks everything), or raises ValueError."""
    kind = DECODER_LAYERS[type(layer).__name__]
    arg_names = check_layer_forward(type(layer), kind)
    gemma = type(layer).__name__.startswith("Gemma")
    norms = [getattr(layer, n, None) for n in _NORMS[kind]]
    if any(not isinstance(m, nn.Module) for m in norms):
        raise ValueError(f"blockfuse.patch_model: {name} lacks one of {_NORMS[kind]}")
    hidden = norms[0].weight.shape[0] if isinstance(getattr(norms[0], "weight", None), torch.Tensor) else -1
    eps = {check_norm(m, f"{name}.{n}", hidden, gemma) for n, m in zip(_NORMS[kind], norms)}
    if len(eps) != 1:
        raise ValueError(f"blockfuse.patch_model: the norms of {name} have different eps {sorted(eps)}")
    dtypes = {m.weight.dtype for m in norms}
    attn_params = [p for p in layer.self_attn.parameters()][:1]
    if attn_params:
        dtypes.add(attn_params[0].dtype)
    if len(dtypes) != 1:
        raise ValueError(f"blockfuse.patch_model: {name} mixes parameter dtypes {sorted(map(str, dtypes))} (norm "
                         "weights and attention); required: one dtype (the kernels take the norm weight in the "
                         "activations' dtype)")
    if kind == PHI3:
        for d in ("resid_attn_dropout", "resid_mlp_dropout"):
            if not isinstance(getattr(layer, d), (nn.Dropout, nn.Identity)):
                raise ValueError(f"blockfuse.patch_model: {name}.{d} is not a dropout")
    return _LayerSpec(kind, eps.pop(), gemma, arg_names)


def _kernels_take(h):
    """Whether blockfuse's kernels take activations h (CUDA bf16/fp16)."""
    return h.is_cuda and h.dtype in _FUSED_DTYPES


def _dropout_active(layer, spec):
    """Whether a training Phi-3 layer's residual dropouts would drop something (the fused forward
    leaves them out, so such a layer runs its original forward)."""
    if not layer.training or spec.kind != PHI3:
        return False
    return any(isinstance(getattr(layer, d), nn.Dropout) and getattr(layer, d).p > 0
               for d in ("resid_attn_dropout", "resid_mlp_dropout"))


def _fused_layer_forward(self, hidden_states, *args, **kwargs):
    """The decoder layer's forward with the norms fused (see the module docstring)."""
    spec = self._blockfuse_spec
    if args:
        kwargs.update(zip(spec.arg_names, args))
    if not _kernels_take(hidden_states) or _dropout_active(self, spec):
        return type(self).forward(self, hidden_states, **kwargs)
    eps, gemma = spec.eps, spec.gemma
    normed = _norm._RMSNORM(hidden_states, self.input_layernorm.weight, eps, gemma)
    attn = self.self_attn(hidden_states=normed, **kwargs)[0]
    if spec.kind == SANDWICH:
        attn = _norm._RMSNORM(attn, self.post_attention_layernorm.weight, eps, gemma)
        normed, residual = _norm._ADD_RMSNORM(attn, hidden_states, self.pre_feedforward_layernorm.weight, eps, gemma)
        out = _norm._RMSNORM(self.mlp(normed), self.post_feedforward_layernorm.weight, eps, gemma)
        return residual + out
    normed, residual = _norm._ADD_RMSNORM(attn, hidden_states, self.post_attention_layernorm.weight, eps, gemma)
    return residual + self.mlp(normed)


def unpatch_layer(layer):
    """Gives a layer patched with norm=True its original forward back."""
    if "_blockfuse_spec" in layer.__dict__:
        del layer.__dict__["forward"]
        del layer._blockfuse_spec


def patch_model(model, mlp=True, norm=True, attention=False, classes=bnn.HF_MLP_CLASSES, loss=False, rope=False):
    """Patches `model` in place (see the module docstring); returns [(qualified name, original
    module)] for every module changed, in model order: each replaced MLP with the original module
    (the list keeps its weights alive: drop it to free them), and each decoder layer whose norms are
    fused with the layer itself (it stays in the model; blockfuse.patch.unpatch_layer undoes it).

    attention=True switches the model's attention to blockfuse's Hugging Face backend "blockfuse"
    (blockfuse.attention: the fused kernel for unpadded prefill and KV-cache decode, SDPA with an
    equivalent mask for padded batches).

    loss=True gives a *ForCausalLM model (an nn.Linear lm_head without bias, logits not soft-capped)
    a forward whose training loss is blockfuse.loss.linear_cross_entropy: the loss and its gradients
    chunk by chunk, without the [tokens, vocabulary] logits (then the output's `logits` is None when
    labels are given under a recorded gradient; otherwise the original forward runs). The list then
    holds ("", model); blockfuse.loss.unpatch_loss undoes it.

    rope=True sends the model's rotary embedding through blockfuse.ops.rope (blockfuse.rope.patch_rope:
    the tables its *RotaryEmbedding module returns are marked, and the modeling file's
    apply_rotary_pos_emb takes the fused op for marked tables only). The list then holds each
    hooked rotary module; blockfuse.rope.unpatch_rope undoes it.

    Raises (before changing anything) ValueError for anything it cannot handle, and ValueError when
    nothing in the model matched."""
    attn_backend = None
    if attention:
        from . import attention as battn
        if not hasattr(model, "set_attn_implementation") or not battn.register_hf_backend():
            raise ValueError("blockfuse.patch_model: attention=True needs a transformers model and transformers "
                             ">= 4.48 (AttentionInterface); required: a PreTrainedModel with set_attn_implementation")
        attn_backend = battn.HF_NAME
    if not (mlp or norm or attention or loss or rope):
        raise ValueError("blockfuse.patch_model: mlp=False, norm=False, attention=False, loss=False and rope=False: "
                         "nothing to do")
    if loss:
        from . import loss as bloss
        why = bloss.loss_head_spec(model)
        if why is not None:
            raise ValueError(f"blockfuse.patch_model(loss=True): {why}")
    if rope:
        from . import rope as brope
        why = brope.rope_spec(model)
        if why is not None:
            raise ValueError(f"blockfuse.patch_model(rope=True): {why}")
    layers = []
    if norm:
        for name, m in model.named_modules():
            if type(m).__name__ in DECODER_LAYERS and "_blockfuse_spec" not in m.__dict__:
                layers.append((name, m, plan_layer(name, m)))
    mlps = bnn.convert_mlps(model, classes) if mlp else []
    if not layers and not mlps and attn_backend is None and not loss and not rope:
        kinds = (["MLPs " + ", ".join(classes)] if mlp else []) + (
            ["decoder layers " + ", ".join(DECODER_LAYERS)] if norm else [])
        raise ValueError(f"blockfuse.patch_model: nothing in {type(model).__name__} matched ({'; '.join(kinds)}), "
                         "or it was patched already")
    # Everything is checked: apply.
    changed = []
    for name, old, new in mlps:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, new)
        changed.append((name, old))
    for name, layer, spec in layers:
        layer._blockfuse_spec = spec
        layer.forward = types.MethodType(_fused_layer_forward, layer)
        changed.append((name, layer))
    if attn_backend is not None:  # every attention module of the model calls the "blockfuse" backend
        model.set_attn_implementation(attn_backend)
    if loss:
        bloss.patch_loss(model)
        changed.append(("", model))
    if rope:
        changed.extend(brope.patch_rope(model))
    order = {n: i for i, (n, _) in enumerate(model.named_modules(remove_duplicate=False))}
    changed.sort(key=lambda e: order.get(e[0], -1))
    return changed
