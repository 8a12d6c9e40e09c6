"""blockfuse's PyTorch-side benchmarks, one module per subcommand of `python -m blockfuse.bench`:

    gated-up         gated_up.py        the gated up-projection vs torch.mm + eager / compiled / Triton SwiGLU
    gated-up-fp8     gated_up_fp8.py    the FP8 gated up-projection vs torch._scaled_mm (+ swiglu)
    fused-mlp        fused_mlp.py       the fused decode MLP (dense and sparse) vs torch's three GEMMs
    sparse-prefill   sparse_prefill.py  SparseGatedMLP's gathered prefill path vs per-32-row and dense
    model            model.py           patch_model on a Hugging Face model: prefill, decode, memory, error
    overhead         overhead.py        host µs per call of each op vs F.linear
    torch-baselines  torch_baselines.py torch eager / torch.compile / F.linear on the C++ benchmark's shapes
    memory-bound     memory_bound.py    add_rmsnorm and swiglu beside torch.compile, Liger and quack
    sdpa             sdpa.py            PyTorch SDPA's flash and cuDNN backends beside ops.attention
    decode-attention decode_attention.py  the decode kernel (contiguous, paged) vs SDPA and FA4; --fused step

The front (__main__.py) and shapes.py import no torch, so `--help` works anywhere; a subcommand's
module (and torch) is imported when it runs. common.py holds the shared timing (CUDA events, graph
replays, host loops), the copy-bandwidth ceiling and the readiness check; triton_swiglu.py the Triton
kernel of the gated-up baseline. The C++ benchmark (`blockfuse bench ...`) times the kernels
without torch.
"""
