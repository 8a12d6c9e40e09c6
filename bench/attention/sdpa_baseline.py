"""PyTorch SDPA's flash (FlashAttention-2) and cuDNN backends on the shapes of `blockfuse bench
attention`, timed the same way (median of back-to-back calls, CUDA events), beside blockfuse's
torch op (blockfuse.ops.attention, when the binding is importable) in the same process: the
same-run comparison from PyTorch. blockfuse's output is checked against the flash backend's before
it is timed (max |diff| reported; a difference above 0.05 stops the run with exit status 1).
Usage: python bench/attention/sdpa_baseline.py [--json FILE] [--s 512,1024] [--d 128] [--hkv 8]"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--s", default="512,1024,4096,16384")
    ap.add_argument("--d", default="128,64")
    ap.add_argument("--hkv", default="32,8")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    B, Hq = 2, 32
    try:
        from blockfuse import ops as bf
        if not bf.available():
            raise ImportError(bf.load_error())
    except ImportError as e:
        bf = None
        print(f"blockfuse's torch binding is not importable ({e}): timing SDPA only", file=sys.stderr)
    rows = []
    for d in map(int, args.d.split(",")):
        for s in map(int, args.s.split(",")):
            for hkv in map(int, args.hkv.split(",")):
                # SDPA takes [B, H, S, D]; the transposes are views of [B, S, H, D] like blockfuse's.
                q = (torch.rand(B, s, Hq, d, device="cuda", dtype=torch.bfloat16) * 4 - 2).transpose(1, 2)
                k = (torch.rand(B, s, hkv, d, device="cuda", dtype=torch.bfloat16) * 4 - 2).transpose(1, 2)
                v = (torch.rand(B, s, hkv, d, device="cuda", dtype=torch.bfloat16) * 2 - 1).transpose(1, 2)
                for causal in (False, True):
                    flops = 4 * B * Hq * s * s * d * (0.5 if causal else 1.0)
                    row = dict(head_dim=d, seqlen=s, heads_kv=hkv, causal=causal)
                    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                        try:
                            with sdpa_kernel(backend):
                                fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hkv != Hq)
                                ms = time_ms(fn, 3, args.reps)
                            row[name + "_tflops"] = flops / (ms * 1e-3) / 1e12
                        except Exception as e:  # a backend without support for the shape
                            row[name + "_tflops"] = None
                            row[name + "_error"] = str(e).splitlines()[0][:200]
                    if bf is not None:
                        qb, kb, vb = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, S, H, D] views
                        got = bf.attention(qb, kb, vb, causal=causal)
                        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                            want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hkv != Hq)
                        diff = (got.float() - want.transpose(1, 2).float()).abs().max().item()
                        row["blockfuse_max_abs_diff_vs_flash"] = diff
                        if not diff <= 0.05:
                            sys.exit(f"blockfuse attention differs from SDPA flash by {diff} at D {d} S {s} Hkv {hkv} causal {causal}")
                        ms = time_ms(lambda: bf.attention(qb, kb, vb, causal=causal), 3, args.reps)
                        row["blockfuse_tflops"] = flops / (ms * 1e-3) / 1e12
                        for name in ("flash", "cudnn"):
                            if row.get(name + "_tflops"):
                                row[f"blockfuse_over_{name}"] = row["blockfuse_tflops"] / row[name + "_tflops"]
                    rows.append(row)
                    print(f"D {d} S {s} Hkv {hkv} causal {int(causal)}: flash {row['flash_tflops']} "
                          f"cudnn {row['cudnn_tflops']} blockfuse {row.get('blockfuse_tflops')}", flush=True)
    out = dict(benchmark="sdpa_attention", device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
