"""blockfuse modules: a fused gated MLP and a one-line drop-in for Hugging Face models.

    mlp = blockfuse.nn.GatedMLP.from_hf(model.model.layers[0].mlp)   # convert one MLP
    patched = blockfuse.patch_model(model)                           # or the whole model, in place

GatedMLP computes down(act(x·W_gateᵀ) ⊙ (x·W_upᵀ)): the gate/up projection and the activation run
as one blockfuse kernel (ops.gated_up) from the interleaved weight `w_gate_up` [2U, K] (row 2j =
up_j, row 2j+1 = gate_j; up to 32 rows that op runs its decode kernel), then `down` is an ordinary
nn.Linear (cuBLAS). On CUDA
bf16/fp16 inputs it uses these kernels; on anything else (CPU tensors, float32) it runs the same
formula in plain torch (ops.gated_up_reference), so a converted model still works there.

patch_model (python/blockfuse/patch.py) replaces, by class name (transformers is never imported
here), every gated MLP of a Llama / Mistral / Qwen2 / Qwen3 / Phi-3 (SwiGLU) or Gemma-2 / Gemma-3
(GeGLU, tanh-approximated GELU) model by a GatedMLP, converting each one's weights once, and fuses
the decoder layers' residual adds and RMSNorms into add_rmsnorm calls.
"""
import math

import torch
from torch import nn

from . import ops
from ._common import FUSED_DTYPES as _FUSED_DTYPES, activation as _activation
from .fused_mlp import _HAS_OP as _HAS_FUSED_MLP_OP
from .gated_up import _GATED_MLP, _GATED_UP, _HAS_GATED_MLP

# Hugging Face MLP classes with gate_proj/up_proj/down_proj and forward
#   down_proj(act_fn(gate_proj(x)) * up_proj(x))
#   down_proj(act_fn(gate_proj(x)) * up_proj(x)), or Phi-3's stacked gate_up_proj [gate; up]:
#   gate, up = gate_up_proj(x).chunk(2, -1); down_proj(up * activation_fn(gate))
HF_MLP_CLASSES = ("LlamaMLP", "MistralMLP", "Qwen2MLP", "Qwen3MLP", "Gemma2MLP", "Gemma3MLP", "Phi3MLP")

def _dtensor_cls():
    """torch.distributed.tensor.DTensor, or None where torch has no distributed support."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        return None
    return DTensor


def _shard_dim(t):
    """The dimension a DTensor of a 1-D mesh is sharded on (negative dims normalised), else None."""
    if t.device_mesh.ndim != 1 or len(t.placements) != 1:
        return None
    p = t.placements[0]
    if not p.is_shard():
        return None
    return p.dim % t.dim()


# Hugging Face activation names (config.hidden_act / hidden_activation) -> blockfuse's.
HF_ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",  # transformers' NewGELUActivation: the same tanh formula
}


def _has_hooks(module):
    """Whether calling `module` would run a hook: its own forward / backward hooks or the global ones
    (torch.nn.modules.module.register_module_forward_hook and friends)."""
    own = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    glob = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks", "_global_backward_pre_hooks")
    return (any(getattr(module, name, None) for name in own)
            or any(getattr(nn.modules.module, name, None) for name in glob))


class GatedMLP(nn.Module):
    """down(act(x·W_gateᵀ) ⊙ (x·W_upᵀ)) with the gate/up projection fused with the activation.

    Args:
        hidden_size: K, the model dimension (input and output features); K % 8 == 0 for the kernel.
        intermediate_size: U, the up-projection width; U % 8 == 0 for the kernel.
        activation: "silu" (SwiGLU) or "gelu_tanh" (GeGLU).
        bias: must be False — the fused kernel has no bias on gate/up (Llama-family MLPs have none).
        recompute: in training, keep only x and recompute the [M, 2U] pre-activation in the backward
            (less memory, one more GEMM) instead of keeping it; an attribute, so it can be switched
            on a converted model (`mlp.recompute = True`). Off (the default), training with x or
            w_gate_up needing a gradient runs ops.gated_mlp, which keeps the pre-activation and
            not h (2U values a token; gate_up + down as two modules would keep 3U), when `down` is
            a plain nn.Linear with no hook (a LoRA-wrapped or hooked down keeps the two-module
            path: ops.gated_up, then down).
        dtype, device: of the parameters (bf16/fp16 on CUDA for the fused kernel).

    Parameters: `w_gate_up` [2U, K] (interleaved), `down` (nn.Linear U -> K, bias-free unless
    converted from an MLP whose down_proj has one). Converted from a tensor-parallel MLP (from_hf),
    U is this rank's share and `down` the original rowwise-parallel down_proj.
    """

    def __init__(self, hidden_size, intermediate_size, activation="silu", bias=False, dtype=None,
                 device=None, down_bias=False, recompute=False):
        super().__init__()
        if bias:
            raise ValueError("blockfuse.nn.GatedMLP: bias=True is not supported: the fused gate/up "
                             "kernel has no bias (Llama/Mistral/Qwen2/Gemma2 MLPs have none)")
        if activation not in ops.ACTIVATIONS:
            raise ValueError(f"blockfuse.nn.GatedMLP: activation '{activation}'; required: one of {ops.ACTIVATIONS}")
        self.hidden_size = int(hidden_size)
        self.intermediate_size = int(intermediate_size)
        self.activation = activation
        self.recompute = bool(recompute)
        self.w_gate_up = nn.Parameter(torch.empty(2 * self.intermediate_size, self.hidden_size,
                                                  dtype=dtype, device=device))
        self.down = nn.Linear(self.intermediate_size, self.hidden_size, bias=down_bias, dtype=dtype,
                              device=device)
        self.reset_parameters()
        self._whole_mlp = False  # use_fused_mlp
        self._whole_mlp_deterministic = False
        self._w_down_t = None
        self._w_down_t_key = None

    def reset_parameters(self):
        # nn.Linear's default for each of the two [U, K] projections: U(-1/sqrt(K), 1/sqrt(K)).
        nn.init.kaiming_uniform_(self.w_gate_up, a=math.sqrt(5))
        self.down.reset_parameters()

    def gate_up(self, x):
        """h = act(x·W_gateᵀ) ⊙ (x·W_upᵀ), [..., U]: for CUDA bf16/fp16 inputs of the weight's dtype
        the fused kernel (ops.gated_up: its decode kernel up to 32 rows, which streams the weight
        faster than cuBLAS's GEMV + swiglu — docs/pytorch.md), the same formula in plain torch
        otherwise."""
        w = self.w_gate_up
        if x.is_cuda and x.dtype is w.dtype and x.dtype in _FUSED_DTYPES:
            return _GATED_UP(x, w, self.activation, self.recompute)  # the registered op itself: checks in C++
        return ops.gated_up_reference(x, w, self.activation)

    def use_fused_mlp(self, enabled=True, deterministic=False):
        """Opt in to the whole-MLP kernel (ops.fused_mlp: gate/up, activation and down projection in
        one launch, h never in memory) for calls of 1..32 rows; longer inputs, calls that need
        gradients, CPU tensors and shapes it does not take (U % 16 != 0, a tensor-parallel down) keep
        the two-kernel path. Not the default: dense, the whole-MLP kernel measured 1.01-1.02x the
        two-kernel path (gated_up's decode kernel + F.linear) at 1 row, 0.97-0.98x at 4 and 0.72-0.73x
        at 16 (Llama-3 8B and 70B on an H100, CUDA graphs; docs/pytorch.md#tuning); its gain is the
        sparse form (SparseGatedMLP).
        down.weight is transposed once into w_down_t [U, K] and again whenever it changes (run one
        call eagerly, or ops.fused_mlp_reserve, before capturing a CUDA graph). Returns self."""
        self._whole_mlp = bool(enabled)
        self._whole_mlp_deterministic = bool(deterministic)
        if not enabled:
            self._w_down_t = self._w_down_t_key = None
        return self

    def _whole_mlp_applies(self, x):
        w, d = self.w_gate_up, self.down.weight
        if not (self._whole_mlp and x.is_cuda and x.dtype is w.dtype and x.dtype in _FUSED_DTYPES
                and d.dtype is x.dtype and d.device == x.device and x.dim() >= 1 and x.shape[-1] == self.hidden_size
                and self.intermediate_size % 16 == 0 and self.hidden_size % 8 == 0):
            return False
        DTensor = _dtensor_cls()
        if DTensor is not None and isinstance(d, DTensor):
            return False
        if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or d.requires_grad):
            return False  # the kernel has no backward
        rows = x.numel() // self.hidden_size if self.hidden_size else 0
        return 1 <= rows <= 32 and _HAS_FUSED_MLP_OP

    def _down_t(self):
        d = self.down.weight
        key = (d.data_ptr(), d._version, d.dtype, d.device)
        if self._w_down_t is None or self._w_down_t_key != key:
            self._w_down_t = d.detach().t().contiguous()
            self._w_down_t_key = key
        return self._w_down_t

    def _trains_whole(self, x):
        # ops.gated_mlp in training: x or w_gate_up needing a gradient (with only `down` training, the
        # two-module path keeps h alone, U values a token against z's 2U), the saved pre-activation
        # mode, CUDA tensors of one fused dtype, a plain down Linear with no hook of any kind, its
        # own or global (its weight is passed as a tensor: a wrapper or hook would be skipped), and no
        # tensor parallelism (DTensor weights).
        w, down = self.w_gate_up, self.down
        d = down.weight
        if not (_HAS_GATED_MLP and torch.is_grad_enabled() and (x.requires_grad or w.requires_grad)):
            return False
        if self.recompute or not (x.is_cuda and x.dtype is w.dtype and x.dtype in _FUSED_DTYPES and d.dtype is x.dtype):
            return False
        if type(down) is not nn.Linear or _has_hooks(down):
            return False
        DTensor = _dtensor_cls()
        return DTensor is None or not (isinstance(d, DTensor) or isinstance(w, DTensor))

    def forward(self, x):
        if getattr(self, "_whole_mlp", False) and self._whole_mlp_applies(x):
            y = ops.fused_mlp(x, self.w_gate_up, self._down_t(), self.activation, self._whole_mlp_deterministic)
            return y if self.down.bias is None else y + self.down.bias
        if self._trains_whole(x):
            y = _GATED_MLP(x, self.w_gate_up, self.down.weight, self.activation)
            return y if self.down.bias is None else y + self.down.bias
        return self.down(self.gate_up(x))

    def extra_repr(self):
        return (f"hidden_size={self.hidden_size}, intermediate_size={self.intermediate_size}, "
                f"activation={self.activation!r}" + (", fused_mlp=True" if getattr(self, "_whole_mlp", False) else ""))

    @classmethod
    def from_hf(cls, mlp):
        """A GatedMLP computing what the Hugging Face MLP `mlp` computes, with its weights copied
        (once) into the interleaved layout, on the same device and dtype.

        Accepts any module with gate_proj/up_proj/down_proj nn.Linear's whose forward is
        down_proj(act_fn(gate_proj(x)) * up_proj(x)) — LlamaMLP, MistralMLP, Qwen2MLP, Qwen3MLP,
        Gemma2MLP, Gemma3MLP — or Phi-3's gate_up_proj (stacked [gate; up]) and down_proj, and an
        activation that is SiLU or the tanh-approximated GELU (anything else: ValueError)."""
        if isinstance(getattr(mlp, "gate_up_proj", None), nn.Linear):
            return cls._from_stacked(mlp)
        for name in ("gate_proj", "up_proj", "down_proj"):
            if not isinstance(getattr(mlp, name, None), nn.Linear):
                raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: {type(mlp).__name__} has no nn.Linear "
                                 f"'{name}'; required: a gated MLP with gate_proj, up_proj, down_proj")
        gate, up, down = mlp.gate_proj, mlp.up_proj, mlp.down_proj
        DTensor = _dtensor_cls()
        if DTensor is not None and any(isinstance(m.weight, DTensor) for m in (gate, up, down)):
            return cls._from_tensor_parallel(mlp, DTensor)
        if gate.bias is not None or up.bias is not None:
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: {type(mlp).__name__} has biases on "
                             "gate_proj/up_proj (config.mlp_bias=True?); the fused kernel has no bias")
        if gate.weight.shape != up.weight.shape:
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: gate_proj {tuple(gate.weight.shape)} and "
                             f"up_proj {tuple(up.weight.shape)} differ; required: the same [U, K]")
        u, k = gate.weight.shape
        if tuple(down.weight.shape) != (k, u):
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: down_proj {tuple(down.weight.shape)}; "
                             f"required: [{k}, {u}] (hidden x intermediate)")
        if k % 8 or u % 8:
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: hidden size {k} / intermediate size {u}; "
                             "required: both multiples of 8 (the kernel moves 16-byte vectors)")
        act = hf_activation(mlp)
        w = gate.weight
        new = cls(k, u, act, dtype=w.dtype, device=w.device, down_bias=down.bias is not None)
        with torch.no_grad():
            new.w_gate_up.copy_(ops.interleave_gate_up(gate.weight.detach(), up.weight.detach()))
            new.down.weight.copy_(down.weight)
            if down.bias is not None:
                new.down.bias.copy_(down.bias)
        new.train(mlp.training)
        return new

    @classmethod
    def _from_tensor_parallel(cls, mlp, DTensor):
        """An MLP sharded by transformers' tensor parallelism (`tp_plan="auto"`: gate_proj and up_proj
        colwise, Shard(0) of [U, K]; down_proj rowwise, Shard(1) of [K, U]). Both projections are cut
        into the same row ranges, so this rank's gate and up rows are the same neurons and their
        interleave is this rank's slice of the global interleaved weight (whole gate/up pairs). The
        GatedMLP keeps the rank's shard (w_gate_up [2U/tp, K]) and the original down_proj module,
        whose forward hooks all-reduce the partial products across the ranks."""
        gate, up, down = mlp.gate_proj, mlp.up_proj, mlp.down_proj
        name = type(mlp).__name__
        for what, m, want in (("gate_proj", gate, 0), ("up_proj", up, 0), ("down_proj", down, 1)):
            w = m.weight
            if not isinstance(w, DTensor) or _shard_dim(w) != want:
                got = f"DTensor {tuple(w.placements)} on a {w.device_mesh.ndim}-D mesh" if isinstance(w, DTensor) \
                    else "a plain tensor"
                raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: {name}.{what}.weight is {got}; required under "
                                 f"tensor parallelism: gate_proj/up_proj Shard(0) (colwise), down_proj Shard(1) "
                                 f"(rowwise) on one 1-D mesh")
        if gate.weight.device_mesh != up.weight.device_mesh or gate.weight.device_mesh != down.weight.device_mesh:
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: {name}: gate_proj, up_proj and down_proj are on "
                             "different device meshes")
        if gate.bias is not None or up.bias is not None:
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: {name} has biases on gate_proj/up_proj "
                             "(config.mlp_bias=True?); the fused kernel has no bias")
        g, u_ = gate.weight.to_local(), up.weight.to_local()
        if g.shape != u_.shape:
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: {name}: this rank's gate_proj shard "
                             f"{tuple(g.shape)} and up_proj shard {tuple(u_.shape)} differ")
        u_local, k = g.shape
        if tuple(down.weight.to_local().shape) != (k, u_local):
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: {name}: this rank's down_proj shard "
                             f"{tuple(down.weight.to_local().shape)}; required: [{k}, {u_local}]")
        if k % 8 or u_local % 8:
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: {name}: hidden size {k} / this rank's intermediate "
                             f"size {u_local}; required: both multiples of 8 (the kernel moves 16-byte vectors)")
        new = cls(k, u_local, hf_activation(mlp), dtype=g.dtype, device=g.device)
        with torch.no_grad():
            new.w_gate_up.copy_(ops.interleave_gate_up(g.detach(), u_.detach()))
        new.down = down  # the rowwise-parallel module: local matmul, then the all-reduce of its hooks
        new.train(mlp.training)
        return new

    @classmethod
    def _from_stacked(cls, mlp):
        """Phi-3: gate_up_proj [2U, K] = [gate; up] (its forward chunks the output in two)."""
        gu, down = mlp.gate_up_proj, getattr(mlp, "down_proj", None)
        name = type(mlp).__name__
        DTensor = _dtensor_cls()
        if DTensor is not None and isinstance(gu.weight, DTensor):
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: {name}.gate_up_proj is tensor-parallel "
                             f"({tuple(gu.weight.placements)}); a stacked gate/up projection is not supported "
                             "under tensor parallelism (separate gate_proj/up_proj are)")
        if not isinstance(down, nn.Linear):
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: {name} has no nn.Linear 'down_proj'")
        if gu.bias is not None:
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: {name} has a bias on gate_up_proj; the fused kernel has none")
        two_u, k = gu.weight.shape
        if two_u % 2 or tuple(down.weight.shape) != (k, two_u // 2):
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: {name} gate_up_proj {tuple(gu.weight.shape)}, down_proj "
                             f"{tuple(down.weight.shape)}; required: [2U, K] and [K, U]")
        u = two_u // 2
        if k % 8 or u % 8:
            raise ValueError(f"blockfuse.nn.GatedMLP.from_hf: hidden size {k} / intermediate size {u}; "
                             "required: both multiples of 8 (the kernel moves 16-byte vectors)")
        act = hf_activation(mlp)
        w = gu.weight
        new = cls(k, u, act, dtype=w.dtype, device=w.device, down_bias=down.bias is not None)
        with torch.no_grad():
            new.w_gate_up.copy_(ops.interleave_stacked(w.detach()))
            new.down.weight.copy_(down.weight)
            if down.bias is not None:
                new.down.bias.copy_(down.bias)
        new.train(mlp.training)
        return new


# Rows from which SparseGatedMLP gathers the kept blocks' weights once and runs two GEMMs instead of
# the fused decode kernel once per 32 rows (which reads every kept weight again for each chunk): at
# 128 rows the gathered path led at 50-90 % sparsity on both Llama-3 8B (1.26-1.42x) and 70B
# (2.08-2.50x); at 64 rows 8B still favoured the chunks (0.59-0.85x) (H100, docs/pytorch.md#tuning).
SPARSE_PREFILL_ROWS = 128


class SparseGatedMLP(nn.Module):
    """down(act(x·W_gateᵀ) ⊙ (x·W_upᵀ)) over the neuron blocks a router selects, for decode.

    A router scores every block of `block_size` neurons per token as sigmoid(x·router[b]) and keeps
    the top_k blocks ("topk") or those scoring above `threshold` ("threshold"); h is zero outside
    the kept blocks. On CUDA bf16/fp16 inputs this is two launches per 32 token rows: the router
    (ops.neuron_block_router, on the device, no host sync, so a decode step can be captured) and
    the fused MLP over the kept blocks (ops.fused_mlp_sparse), which reads only those blocks' rows
    of the three weights. per_token=True gives every token its own blocks; per_token=False uses the
    union over the (up to 32) rows of each chunk, as a batch-level sparse FFN does (then a token's
    output depends on what else is in its chunk). More than 32 rows run in chunks of 32; from
    SPARSE_PREFILL_ROWS rows (prefill) the router runs in torch (ops.router_reference, the same
    rule) and the kept blocks' weights are gathered once for two GEMMs (`_gathered`: one host
    sync, the same chunk semantics). On other
    inputs (CPU, float32) the same formula runs in plain torch (ops.router_reference,
    ops.fused_mlp_reference). The router's weights are the caller's (e.g. trained to predict the
    active neurons); this module does not train them. Forward only.

    Parameters: `w_gate_up` [2U, K] (interleaved), `w_down_t` [U, K] (down_proj.weight transposed),
    `router` [U / block_size, K].
    """

    def __init__(self, hidden_size, intermediate_size, block_size=32, activation="silu", mode="topk", top_k=None,
                 threshold=0.5, per_token=True, deterministic=False, dtype=None, device=None):
        super().__init__()
        k, u = int(hidden_size), int(intermediate_size)
        if block_size not in (16, 32, 64) or u % block_size:
            raise ValueError(f"blockfuse.nn.SparseGatedMLP: block_size {block_size} for intermediate size {u}; "
                             "required: 16, 32 or 64, dividing the intermediate size")
        if activation not in ops.ACTIVATIONS:
            raise ValueError(f"blockfuse.nn.SparseGatedMLP: activation '{activation}'; required: one of {ops.ACTIVATIONS}")
        if mode not in ops.ROUTER_MODES:
            raise ValueError(f"blockfuse.nn.SparseGatedMLP: mode '{mode}'; required: one of {ops.ROUTER_MODES}")
        n_blocks = u // block_size
        if top_k is None:
            top_k = max(1, n_blocks // 2)
        if mode == "topk" and not 0 <= top_k <= n_blocks:
            raise ValueError(f"blockfuse.nn.SparseGatedMLP: top_k {top_k}; required: 0 <= top_k <= {n_blocks} blocks")
        self.hidden_size, self.intermediate_size, self.block_size = k, u, int(block_size)
        self.activation, self.mode, self.top_k, self.threshold = activation, mode, int(top_k), float(threshold)
        self.per_token, self.deterministic = bool(per_token), bool(deterministic)
        self.w_gate_up = nn.Parameter(torch.empty(2 * u, k, dtype=dtype, device=device), requires_grad=False)
        self.w_down_t = nn.Parameter(torch.empty(u, k, dtype=dtype, device=device), requires_grad=False)
        self.router = nn.Parameter(torch.zeros(n_blocks, k, dtype=dtype, device=device), requires_grad=False)
        nn.init.kaiming_uniform_(self.w_gate_up, a=math.sqrt(5))
        nn.init.kaiming_uniform_(self.w_down_t, a=math.sqrt(5))

    def extra_repr(self):
        sel = f"top_k={self.top_k}" if self.mode == "topk" else f"threshold={self.threshold}"
        return (f"hidden_size={self.hidden_size}, intermediate_size={self.intermediate_size}, "
                f"block_size={self.block_size}, activation={self.activation!r}, {sel}, per_token={self.per_token}")

    def _fused_ok(self, x):
        return x.is_cuda and x.dtype is self.w_gate_up.dtype and x.dtype in _FUSED_DTYPES

    def _keep(self, x):
        """The kept blocks per row, bool [M, n_blocks] (ops.router_reference), with per_token=False
        widened to the union over each chunk of 32 rows, as the decode path chunks them."""
        keep = ops.router_reference(x, self.router, self.mode, self.threshold, self.top_k)
        if not self.per_token:
            m, nb = keep.shape
            pad = (-m) % 32
            padded = torch.cat([keep, keep.new_zeros(pad, nb)]) if pad else keep
            keep = padded.view(-1, 32, nb).any(1, keepdim=True).expand(-1, 32, nb).reshape(-1, nb)[:m]
        return keep

    def _gathered(self, x, keep):
        """h and y over the blocks any row keeps, as two GEMMs on gathered copies of their weights:
        ops.gated_up on their w_gate_up rows, h zeroed where a row does not keep a block (a select:
        an unkept block's NaN never leaks), then h times their w_down_t rows. One host sync (which
        blocks), so this is for prefill, not for a captured decode step."""
        m, k = x.shape
        nb, bs = keep.shape[1], self.block_size
        blocks = keep.any(0).nonzero().squeeze(1)
        if blocks.numel() == 0:
            return x.new_zeros(m, k)
        wgu = self.w_gate_up.view(nb, 2 * bs, k).index_select(0, blocks).reshape(-1, k)
        wdt = self.w_down_t.view(nb, bs, k).index_select(0, blocks).reshape(-1, k)
        h = ops.gated_up(x, wgu, self.activation).view(m, blocks.numel(), bs)
        h = torch.where(keep.index_select(1, blocks).unsqueeze(-1), h, h.new_zeros(()))
        return h.view(m, -1) @ wdt

    def _fused(self, x):
        ui, uc, ti, tc = ops.neuron_block_router(x, self.router, self.mode, self.threshold, self.top_k)
        idx, cnt = (ti, tc) if self.per_token else (ui, uc)
        return ops.fused_mlp_sparse(x, self.w_gate_up, self.w_down_t, idx, cnt, self.block_size, self.activation,
                                    self.deterministic)

    def _reference(self, x):
        keep = ops.router_reference(x, self.router, self.mode, self.threshold, self.top_k)
        if not self.per_token:
            keep = keep.any(0, keepdim=True).expand_as(keep)
        mask = keep.repeat_interleave(self.block_size, dim=-1)
        return ops.fused_mlp_reference(x, self.w_gate_up, self.w_down_t, self.activation, neuron_mask=mask)

    def forward(self, x):
        rows = x.reshape(-1, self.hidden_size)
        # (Not while torch.compile traces: the gathered path's host sync would break the graph.)
        if self._fused_ok(x) and rows.shape[0] >= SPARSE_PREFILL_ROWS and not torch.compiler.is_compiling():
            return self._gathered(rows, self._keep(rows)).reshape(x.shape)
        run = self._fused if self._fused_ok(x) else self._reference
        outs = [run(c) for c in rows.split(32)]
        if not outs:
            return x.new_empty(x.shape)
        return (outs[0] if len(outs) == 1 else torch.cat(outs)).reshape(x.shape)

    @classmethod
    def from_hf(cls, mlp, router, block_size=32, mode="topk", top_k=None, threshold=0.5, per_token=True,
                deterministic=False):
        """A SparseGatedMLP with the weights of the Hugging Face gated MLP `mlp` (the classes
        GatedMLP.from_hf takes; no down_proj bias) and the given router weights [U / block_size, K]."""
        dense = GatedMLP.from_hf(mlp)
        if dense.down.bias is not None:
            raise ValueError(f"blockfuse.nn.SparseGatedMLP.from_hf: {type(mlp).__name__} has a bias on down_proj; "
                             "the fused MLP kernel has none")
        w = dense.w_gate_up
        new = cls(dense.hidden_size, dense.intermediate_size, block_size, dense.activation, mode, top_k, threshold,
                  per_token, deterministic, dtype=w.dtype, device=w.device)
        want = (new.intermediate_size // block_size, new.hidden_size)
        if tuple(router.shape) != want:
            raise ValueError(f"blockfuse.nn.SparseGatedMLP.from_hf: router has shape {tuple(router.shape)}; "
                             f"required: {want} (one row per block of {block_size} neurons)")
        with torch.no_grad():
            new.w_gate_up.copy_(w)
            new.w_down_t.copy_(dense.down.weight.t())
            new.router.copy_(router)
        return new


def _act_probe(act_fn):
    """(name, ran): which blockfuse activation the callable act_fn computes, found by evaluating it
    on a CPU float32 grid; name is None if it computes neither, ran is False if it could not run."""
    t = torch.linspace(-8.0, 8.0, 257, dtype=torch.float32)
    try:
        with torch.no_grad():
            y = act_fn(t)
    except Exception:  # e.g. an activation that only runs on the GPU: decide by the config name
        return None, False
    if not isinstance(y, torch.Tensor) or y.shape != t.shape:
        return None, False
    for name in ops.ACTIVATIONS:
        if torch.allclose(y.float(), _activation(t, name), rtol=1e-5, atol=1e-6):
            return name, True
    return None, True


def hf_activation(mlp):
    """blockfuse's name for the activation of a Hugging Face MLP: from what `mlp.act_fn` (Phi-3:
    `activation_fn`) computes, else from its config (`hidden_activation`, Gemma's, then `hidden_act`)."""
    act_fn = getattr(mlp, "act_fn", None)
    if act_fn is None:
        act_fn = getattr(mlp, "activation_fn", None)
    cfg = getattr(mlp, "config", None)
    cfg_name = None
    if cfg is not None:
        cfg_name = getattr(cfg, "hidden_activation", None) or getattr(cfg, "hidden_act", None)
    ran = False
    if act_fn is not None:
        probed, ran = _act_probe(act_fn)
        if probed is not None:
            return probed
    if not ran and isinstance(cfg_name, str) and cfg_name in HF_ACTIVATIONS:
        return HF_ACTIVATIONS[cfg_name]
    raise ValueError(
        f"blockfuse.nn: {type(mlp).__name__} uses activation {type(act_fn).__name__ if act_fn is not None else None} "
        f"(config: {cfg_name!r}); required: SiLU ('silu') or the tanh-approximated GELU "
        "('gelu_pytorch_tanh'): the fused kernel computes only these")


def convert_mlps(model, classes=HF_MLP_CLASSES):
    """The GatedMLP conversions patch_model(mlp=True) would make, computed but not applied:
    [(qualified name, original module, GatedMLP)] in model order. Raises ValueError if some
    matching MLP cannot be converted."""
    classes = tuple(classes)
    found = [(name, m) for name, m in model.named_modules() if type(m).__name__ in classes]
    if any(name == "" for name, _ in found):
        raise ValueError("blockfuse.patch_model: the model itself is an MLP; use "
                         "blockfuse.nn.GatedMLP.from_hf(mlp) instead")
    # Skip MLPs nested inside an MLP that is replaced anyway.
    top = [(n, m) for n, m in found if not any(n.startswith(p + ".") for p, _ in found if p != n)]
    return [(name, m, GatedMLP.from_hf(m)) for name, m in top]
