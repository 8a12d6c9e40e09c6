"""What the op families of blockfuse share: the activations and layouts, the FP8 e4m3 rule, the
lookup of a registered op, the output-shape helpers of the fake implementations, and the
library-wide programmatic-dependent-launch switch.

The family modules (gated_up, gated_up_fp8, attention, fused_mlp, add_rmsnorm, swiglu,
decode_gemm) import from here; `blockfuse.ops` re-exports the public names.
"""
import math

import torch

from . import _lib

ACTIVATIONS = ("silu", "gelu_tanh")
LAYOUTS = ("stacked", "interleaved")
FUSED_DTYPES = (torch.bfloat16, torch.float16)
FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0

_lib.load()

# Whether the compiled library is loaded: the fake implementations are registered only then.
LOADED = _lib.error is None


def available():
    """True when the compiled ops are loaded (they still need a CUDA device to run)."""
    return _lib.loaded_from is not None


def load_error():
    """Why the compiled ops are not available (str), or None."""
    return _lib.error


def resolve(name):
    """The registered op's default overload (called directly: no overload resolution per call), or a
    stand-in raising why the library is not loaded."""
    if _lib.error is None:
        return getattr(torch.ops.blockfuse, name).default

    def missing(*args, **kwargs):
        raise RuntimeError(_lib.error)
    return missing


def has_op(name):
    """Whether the loaded library registers blockfuse::<name> (a _C.so built before the op existed
    does not)."""
    return _lib.error is None and _lib.has_op(name)


def require_op(name):
    """Raises RuntimeError saying why blockfuse::<name> cannot run: the library is not loaded, or it
    was built before the op existed."""
    if _lib.error is not None:
        raise RuntimeError(_lib.error)
    raise RuntimeError(f"the blockfuse torch library ({_lib.loaded_from}) has no blockfuse::{name} op: it "
                       "was built before the op existed; rebuild it (pip install --no-build-isolation .)")


_SET_PDL = resolve("set_programmatic_dependent_launch")


def set_programmatic_dependent_launch(enabled):
    """Turns programmatic dependent launch of the memory-bound kernels (add_rmsnorm, rmsnorm, swiglu
    and their FP8 forms, at up to 32 rows; sm_90+) on or off for the process; returns the previous
    setting. On by default (BLOCKFUSE_PDL=0 in the environment turns it off): each kernel's blocks become resident
    while the kernel before it drains, and wait for it before touching memory, so results do not
    change. Takes effect for launches made after the call (a captured graph keeps what it captured)."""
    return _SET_PDL(bool(enabled))


def in_graph_or_compile():
    """Whether the current call is traced by torch.compile or captured into a CUDA graph: where a host
    read-back (`.item()`, `.tolist()`) is not allowed, so the callers take their device-only path."""
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling():
        return True
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


# ---- activations (plain torch) -------------------------------------------------------------------

def activation(g, name):
    """act(g) elementwise: "silu" or "gelu_tanh" (the tanh-approximated GELU)."""
    if name == "silu":
        return torch.nn.functional.silu(g)
    if name == "gelu_tanh":
        return torch.nn.functional.gelu(g, approximate="tanh")
    raise ValueError(f"blockfuse: activation '{name}'; required: one of {ACTIVATIONS}")


def activation_and_grad(g, activation):
    """(act(g), act'(g)) elementwise, in g's dtype (call it with fp32)."""
    if activation == "silu":
        s = torch.sigmoid(g)
        return g * s, s * (1 + g * (1 - s))
    if activation == "gelu_tanh":
        c = math.sqrt(2.0 / math.pi)
        t = torch.tanh(c * (g + 0.044715 * g * g * g))
        a = 0.5 * g * (1 + t)
        da = 0.5 * (1 + t) + 0.5 * g * (1 - t * t) * c * (1 + 3 * 0.044715 * g * g)
        return a, da
    raise ValueError(f"blockfuse: activation '{activation}'; required: one of {ACTIVATIONS}")


# ---- FP8 e4m3 (dequantised value = float(q) · scale) ----------------------------------------------

def fp8_dequantize(q, scale):
    """float32 values of e4m3 `q` with a per-tensor scale (1 element) or per-row scales [...]."""
    s = scale.float()
    if s.numel() != 1:
        s = s.unsqueeze(-1)
    return q.float() * s


def fp8_quantize_reference(v, scale=None):
    """(q e4m3, scales) as blockfuse's FP8 outputs define them, from fp32 values v [..., H]:
    static (scale given): q = sat(v · (1/scale)); dynamic: scale_r = amax_r / 448 over the row's
    finite values (1 when 0), q = sat(v · (1/scale_r))."""
    v = v.float()
    if scale is not None:
        inv = 1.0 / scale.float().reshape(())
        s = scale
    else:
        finite = torch.where(torch.isfinite(v), v.abs(), torch.zeros_like(v))
        amax = finite.amax(-1)
        # A tensor divisor: torch divides by a Python scalar as a multiply by its reciprocal on CUDA,
        # which is not amax / 448 rounded once (the kernels' rule) for every amax.
        s = torch.where(amax > 0, amax / torch.full_like(amax, FP8_MAX), torch.ones_like(amax))
        inv = (1.0 / s).unsqueeze(-1)
    q = (v * inv).clamp(-FP8_MAX, FP8_MAX)
    q = torch.where(torch.isfinite(v), q, torch.full_like(q, float("nan")))
    return q.to(FP8_DTYPE), s


# ---- output shapes for the fake (meta) implementations -------------------------------------------
# The fakes check no more than the output shape needs: the C++ kernels validate every argument when
# they run.

def with_last(x, n):
    """x's shape with the last dim replaced by n."""
    return (*x.shape[:-1], n)


def row_scales(x, scale):
    """The row_scales output of an FP8 op: empty for a static scale, one float32 per row of x else."""
    return x.new_empty((0,) if scale is not None else tuple(x.shape[:-1]), dtype=torch.float32)
