"""`python -m blockfuse.bench decode-attention`: one query token per sequence against a KV cache
(Hq = 32, Hkv = 8 and 1, D = 128, bf16), blockfuse's decode kernel on a contiguous cache and on paged
caches (page 16 and 64, pages shuffled) beside PyTorch SDPA's flash and cuDNN backends (q [B, Hq, 1, D],
enable_gqa=True, the cache as [B, Hkv, S, D]) and FlashAttention-4 (flash_attn.cute.interface.
flash_attn_func, when importable: ../shared/peers stages it), in one process.

Protocol (docs/BENCHMARKING.md): every implementation is verified against the SDPA flash output before
it is timed (max |diff| > 0.05 stops the run, exit status 1); times are per call from CUDA-graph
replays of 20 calls cycling over cache sets rotated so L2 holds none (one set once a cache is larger
than 3x L2); GB/s counts the K + V bytes read (B·S·Hkv·D·2 values) and frac_copy divides by a 1 GiB
device copy measured in the same run. Grid points whose caches do not fit in --max-gib are skipped.

--fused times one decode step at B = 1 both ways: decode_attention_with_kvcache (rotary of q and the
new k, cache append, attention in one op) against what a Hugging Face model runs otherwise —
apply_rotary_pos_emb, index_copy_ of k and v into the [1, Hkv, S, D] cache, then blockfuse's
decode_attention.
"""
import json
import sys

import torch
import torch.nn.functional as F

from .common import copy_gbs, meta, optional_peer, ready, sets_for, time_graph

HQ, D = 32, 128
DT = torch.bfloat16


def _fa4():
    from flash_attn.cute.interface import flash_attn_func
    return flash_attn_func


def paged_copy(k, page, seed):
    """k [B, S, Hkv, D] copied into shuffled pages + an int32 block_table."""
    b, s = k.shape[:2]
    per = -(-s // page)
    perm = torch.randperm(b * per, generator=torch.Generator().manual_seed(seed)).cuda()
    pages = torch.empty(b * per, page, *k.shape[2:], dtype=k.dtype, device="cuda")
    table = perm.view(b, per).to(torch.int32).contiguous()
    pages[table.long()] = F.pad(k, (0, 0, 0, 0, 0, per * page - s)).view(b, per, page, *k.shape[2:])
    return pages, table


def point(bf, fa4, b, s, hkv, ceiling):
    kv_bytes = 2 * b * s * hkv * D * 2
    n = sets_for(kv_bytes)
    g = torch.Generator(device="cuda").manual_seed(b * 7 + s)
    qs = [torch.randn(b, 1, HQ, D, device="cuda", generator=g).to(DT) for _ in range(n)]
    ks = [torch.randn(b, s, hkv, D, device="cuda", generator=g).to(DT) for _ in range(n)]
    vs = [torch.randn(b, s, hkv, D, device="cuda", generator=g).to(DT) for _ in range(n)]
    lens = torch.full((b,), s, dtype=torch.int32, device="cuda")
    # SDPA's layout: [B, H, S, D] (what HF's caches hold); the same memory as [B, S, H, D] here would be
    # strided, so SDPA gets its own contiguous copies (and blockfuse reads them as transposed views).
    qh = [q.transpose(1, 2).contiguous() for q in qs]
    kh = [k.transpose(1, 2).contiguous() for k in ks]
    vh = [v.transpose(1, 2).contiguous() for v in vs]
    del ks, vs
    from torch.nn.attention import SDPBackend, sdpa_kernel
    row = dict(batch=b, seqlen=s, heads_kv=hkv, kv_bytes=kv_bytes, sets=n)
    impls = {}
    for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
        def fn(i, backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qh[i], kh[i], vh[i], enable_gqa=True).transpose(1, 2)
        impls[name] = fn
    impls["blockfuse"] = lambda i: bf.decode_attention(qs[i], kh[i].transpose(1, 2), vh[i].transpose(1, 2), lens,
                                                       causal=True, max_seqlen_k=s)
    if fa4 is not None:
        def fa(i):
            out = fa4(qs[i], kh[i].transpose(1, 2), vh[i].transpose(1, 2), causal=True)
            return out[0] if isinstance(out, tuple) else out
        impls["fa4"] = fa
    want = None
    for name in ("sdpa_flash", "sdpa_cudnn", "blockfuse", "fa4"):
        if name not in impls:
            continue
        try:
            got = impls[name](0)
            if want is None:
                want = got.float()
            diff = (got.float() - want).abs().max().item()
            row[name + "_max_abs_diff"] = diff
            if not diff <= 0.05:
                print(f"{name} differs from SDPA flash by {diff} at B {b} S {s} Hkv {hkv}", file=sys.stderr)
                return None
            us = time_graph(impls[name], 3, 20, n_sets=n, calls=max(20, n))
            row[name + "_us"] = us
            row[name + "_gbs"] = kv_bytes / us * 1e-3
            row[name + "_frac_copy"] = row[name + "_gbs"] / ceiling
        except Exception as e:  # noqa: BLE001 — a backend without support for the shape
            row[name + "_error"] = str(e).splitlines()[0][:200] if str(e) else repr(e)
    for page in (16, 64):
        pk = [paged_copy(k.transpose(1, 2), page, i) for i, k in enumerate(kh)]
        pv = [paged_copy(v.transpose(1, 2), page, i) for i, v in enumerate(vh)]
        fn = lambda i: bf.decode_attention(qs[i], pk[i][0], pv[i][0], lens, block_table=pk[i][1], causal=True,
                                           max_seqlen_k=s)
        name = f"blockfuse_paged{page}"
        # the same pages order for k and v (same seed), so one table serves both
        assert torch.equal(pk[0][1], pv[0][1])
        diff = (fn(0).float() - want).abs().max().item()
        row[name + "_max_abs_diff"] = diff
        if not diff <= 0.05:
            print(f"{name} differs from SDPA flash by {diff} at B {b} S {s} Hkv {hkv}", file=sys.stderr)
            return None
        us = time_graph(fn, 3, 20, n_sets=n, calls=max(20, n))
        row[name + "_us"], row[name + "_gbs"] = us, kv_bytes / us * 1e-3
        row[name + "_frac_copy"] = row[name + "_gbs"] / ceiling
        pk = pv = fn = None  # the pages freed before the next page size
    for base in ("sdpa_flash", "sdpa_cudnn", "fa4"):
        if row.get(base + "_us"):
            row[f"blockfuse_over_{base}"] = row[base + "_us"] / row["blockfuse_us"]
    return row


def fused_point(bf, s, hkv):
    """One decode step at B = 1: the fused op vs HF's rotary + index_copy_ + decode_attention."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    g = torch.Generator(device="cuda").manual_seed(s)
    n = sets_for(2 * s * hkv * D * 2)
    kc = [torch.randn(1, hkv, s, D, device="cuda", generator=g).to(DT) for _ in range(n)]  # HF's layout
    vc = [torch.randn(1, hkv, s, D, device="cuda", generator=g).to(DT) for _ in range(n)]
    q = torch.randn(1, HQ, 1, D, device="cuda", generator=g).to(DT)
    kn = torch.randn(1, hkv, 1, D, device="cuda", generator=g).to(DT)
    vn = torch.randn(1, hkv, 1, D, device="cuda", generator=g).to(DT)
    pos = s - 1
    inv = 1.0 / (500000 ** (torch.arange(0, D, 2, device="cuda").float() / D))
    freqs = torch.arange(s, device="cuda").float()[:, None] * inv[None]
    cos_t, sin_t = freqs.cos(), freqs.sin()  # [S, D/2] fp32 tables for the fused op
    emb = torch.cat([freqs[pos:pos + 1], freqs[pos:pos + 1]], -1)[None]  # HF's [1, 1, D]
    cos, sin = emb.cos().to(DT), emb.sin().to(DT)
    cache_pos = torch.tensor([pos], device="cuda")
    lens_before = torch.tensor([pos], dtype=torch.int32, device="cuda")
    lens_after = lens_before + 1

    def separate(i):
        qr, kr = apply_rotary_pos_emb(q, kn, cos, sin)
        kc[i].index_copy_(2, cache_pos, kr)
        vc[i].index_copy_(2, cache_pos, vn)
        return bf.decode_attention(qr.transpose(1, 2), kc[i].transpose(1, 2), vc[i].transpose(1, 2), lens_after,
                                   causal=True, max_seqlen_k=s)

    def fused(i):
        return bf.decode_attention_with_kvcache(q.transpose(1, 2), kc[i].transpose(1, 2), vc[i].transpose(1, 2),
                                                kn.transpose(1, 2), vn.transpose(1, 2), lens_before, rotary_cos=cos_t,
                                                rotary_sin=sin_t, causal=True, max_seqlen_k=s)
    diff = (fused(0).float() - separate(0).float()).abs().max().item()
    row = dict(batch=1, seqlen=s, heads_kv=hkv, max_abs_diff=diff)
    if not diff <= 0.05:
        print(f"fused decode step differs from the separate calls by {diff} at S {s} Hkv {hkv}", file=sys.stderr)
        return None
    row["separate_us"] = time_graph(separate, 3, 20, n_sets=n, calls=max(20, n))
    row["fused_us"] = time_graph(fused, 3, 20, n_sets=n, calls=max(20, n))
    row["speedup"] = row["separate_us"] / row["fused_us"]
    return row


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = [k[:-10] for k in rows[0] if k.endswith("_frac_copy")] if rows else []
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), squeeze=False)
    for ax, hkv in zip(axes[0], (8, 1)):
        sub = [r for r in rows if r["heads_kv"] == hkv]
        labels = [f"B{r['batch']}\nS{r['seqlen'] // 1024}k" for r in sub]
        width = 0.8 / max(1, len(keys))
        for j, k in enumerate(keys):
            ax.bar([i + j * width for i in range(len(sub))], [r.get(k + "_frac_copy") or 0 for r in sub], width,
                   label=k)
        ax.set_xticks([i + 0.4 for i in range(len(sub))], labels, fontsize=7)
        ax.set_ylabel("K+V read / copy bandwidth")
        ax.set_title(f"decode attention, Hq {HQ}, Hkv {hkv}, D {D}, bf16")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def run(args):
    """The `decode-attention` subcommand: returns the exit status (1 when an output is wrong)."""
    status = ready()
    if status:
        return status
    from .. import ops as bf
    ceiling = copy_gbs()
    print(f"copy bandwidth {ceiling:.0f} GB/s", flush=True)
    rows, fused_rows = [], []
    if args.fused:
        for s in args.s:
            for hkv in args.hkv:
                row = fused_point(bf, s, hkv)
                if row is None:
                    return 1
                fused_rows.append(row)
                print(f"fused B 1 S {s} Hkv {hkv}: separate {row['separate_us']:.1f} us, fused {row['fused_us']:.1f} "
                      f"us ({row['speedup']:.2f}x)", flush=True)
    else:
        fa4 = optional_peer("FlashAttention-4", _fa4)
        for hkv in args.hkv:
            for b in args.b:
                for s in args.s:
                    kv_bytes = 2 * b * s * hkv * D * 2
                    if kv_bytes * 2 > args.max_gib * 2 ** 30:  # SDPA's copy + one paged copy at a time
                        continue
                    row = point(bf, fa4, b, s, hkv, ceiling)
                    if row is None:
                        return 1
                    rows.append(row)
                    cells = " ".join(f"{k[:-4]} {row[k]:.0f}" for k in row if k.endswith("_gbs"))
                    print(f"B {b} S {s} Hkv {hkv}: GB/s {cells}", flush=True)
                    torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(benchmark="decode_attention", **meta(), copy_gbs=ceiling, rows=rows, fused=fused_rows),
                      fh, indent=1)
    if args.plot and rows:
        plot(rows, args.plot)
    return 0
