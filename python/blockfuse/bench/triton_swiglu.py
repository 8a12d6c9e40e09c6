"""The Triton baseline of `python -m blockfuse.bench gated-up`: a standalone SwiGLU/GeGLU kernel in
the style of Unsloth.

The unfused pipeline it completes is "cuBLAS + Unsloth": torch.mm into C = [M, 2U] (columns
[0, U) = gate, [U, 2U) = up), then Unsloth's elementwise kernel `swiglu_fg_kernel`, modified to
write the result over the `up` half so no third buffer is allocated. This file is blockfuse's own
kernel of that kind (not Unsloth's source): one program per (row, block of columns), loads gate and
up, evaluates act(gate)·up in fp32, rounds once, stores in place (or into `out`). Strided rows are
supported, so the two halves of C are passed as views without copies.

    from blockfuse.bench.triton_swiglu import swiglu_fg
    C = torch.mm(x, w_stacked.t())                 # [M, 2U]
    h = swiglu_fg(C[:, :U], C[:, U:])              # h is C[:, U:], overwritten: no new memory

Needs triton (the package's `bench` extra); imported only when the gated-up benchmark runs.
"""
import triton
import triton.language as tl

_ACT_CODES = {"silu": 0, "gelu_tanh": 1}


@triton.jit
def _swiglu_fg_kernel(g_ptr, u_ptr, h_ptr, n_cols, ld_g, ld_u, ld_h,
                      ACT: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    g = tl.load(g_ptr + row * ld_g + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + row * ld_u + cols, mask=mask, other=0.0).to(tl.float32)
    if ACT == 0:
        f = g * tl.sigmoid(g)  # silu
    else:
        # gelu_tanh: 0.5·g·(1 + tanh(a)) = g·sigmoid(2a), a = √(2/π)(g + 0.044715 g³)
        a = 0.7978845608028654 * (g + 0.044715 * g * g * g)
        f = g * tl.sigmoid(2.0 * a)
    h = f * u
    tl.store(h_ptr + row * ld_h + cols, h.to(h_ptr.dtype.element_ty), mask=mask)


def swiglu_fg(gate, up, out=None, activation="silu", block=1024):
    """act(gate) * up for 2-D [M, U] views with contiguous rows; written into `out`, by default
    over `up` (in place, as the cuBLAS + Unsloth pipeline does). Returns the result."""
    if activation not in _ACT_CODES:
        raise ValueError(f"swiglu_fg: activation '{activation}'; required: one of {list(_ACT_CODES)}")
    if out is None:
        out = up
    for name, t in (("gate", gate), ("up", up), ("out", out)):
        if t.dim() != 2 or t.shape != gate.shape or (t.shape[1] > 1 and t.stride(1) != 1):
            raise ValueError(f"swiglu_fg: argument '{name}' has shape {tuple(t.shape)}, strides "
                             f"{t.stride()}; required: 2-D {tuple(gate.shape)} with contiguous rows")
        if not t.is_cuda or t.dtype != gate.dtype:
            raise ValueError(f"swiglu_fg: argument '{name}' must be a CUDA tensor of dtype {gate.dtype}")
    m, n = gate.shape
    if m == 0 or n == 0:
        return out
    grid = (m, triton.cdiv(n, block))
    _swiglu_fg_kernel[grid](gate, up, out, n, gate.stride(0), up.stride(0), out.stride(0),
                            ACT=_ACT_CODES[activation], BLOCK=block)
    return out
