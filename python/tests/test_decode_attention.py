"""GPU tests of blockfuse.ops.decode_attention / decode_attention_with_kvcache and the Hugging Face
backend's decode path: the op against the fp32 reference (contiguous, paged with shuffled pages,
HF's [B, Hkv, S, D] cache as a transposed view, MHA/GQA/MQA, Sq 1..16, causal, windows, soft-cap,
explicit splits, LSE), unfilled slots poisoned with NaN, the kvcache step's cache writes and rotary
embedding, argument errors, torch.compile(fullgraph=True), CUDA-graph capture replayed with new
lengths, and greedy generation of a small random Llama with DynamicCache and StaticCache against
the SDPA model's."""
import pytest

from conftest import require_gpu

torch, ops = require_gpu()
import blockfuse.decode_attention as D  # noqa: E402

pytestmark = pytest.mark.gpu
if not D._HAS_OP:
    pytest.skip("the loaded blockfuse library has no decode_attention op", allow_module_level=True)

DTYPES = (torch.bfloat16, torch.float16)
REL_TOL = {torch.bfloat16: 1.2e-2, torch.float16: 2.5e-3}


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def make(b, sq, s_max, hq, hkv, d, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, sq, hq, d, device="cuda", generator=g).to(dtype)
    k = torch.randn(b, s_max, hkv, d, device="cuda", generator=g).to(dtype)
    v = torch.randn(b, s_max, hkv, d, device="cuda", generator=g).to(dtype)
    return q, k, v


def lengths_for(b, s_max, sq, seed=0):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(sq, s_max + 1, (b,), generator=g)
    lens[0] = s_max
    return lens.to(torch.int32).cuda()


def poison_tail(k, v, lens):
    for i, n in enumerate(lens.tolist()):
        k[i, n:] = float("nan")
        v[i, n:] = float("nan")


def to_pages(cache, page, seed=0):
    b, s = cache.shape[:2]
    per = -(-s // page)
    n = b * per + 5
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).cuda()
    pages = torch.full((n, page, *cache.shape[2:]), float("nan"), dtype=cache.dtype, device="cuda")
    table = perm[: b * per].view(b, per).to(torch.int32).contiguous()
    padded = torch.nn.functional.pad(cache, (0, 0, 0, 0, 0, per * page - s), value=float("nan"))
    pages[table.long()] = padded.view(b, per, page, *cache.shape[2:])
    return pages, table


CASES = [  # (B, Sq, S_max, Hq, Hkv, D, causal, window_left, softcap)
    (1, 1, 1, 8, 8, 64, True, -1, 0.0),
    (3, 1, 1000, 32, 8, 128, True, -1, 0.0),
    (2, 4, 777, 32, 1, 128, True, -1, 0.0),      # MQA, speculative 4 tokens
    (5, 16, 300, 16, 4, 256, True, -1, 0.0),
    (2, 7, 4099, 8, 2, 64, True, 100, 0.0),       # sliding window
    (2, 3, 513, 8, 2, 128, False, -1, 30.0),      # soft-cap, not causal
    (1, 1, 33000, 32, 8, 128, True, -1, 0.0),     # long: many splits
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("layout", ("contiguous", "hf_view", "paged16", "paged64"))
def test_against_reference(case, dtype, layout):
    b, sq, s_max, hq, hkv, d, causal, left, softcap = case
    q, k, v = make(b, sq, s_max, hq, hkv, d, dtype)
    lens = lengths_for(b, s_max, sq)
    want, want_lse = D.decode_attention_reference(q, k, v, lens, None, None, causal, left, -1, softcap)
    poison_tail(k, v, lens)
    table = None
    if layout == "hf_view":  # a DynamicCache's [B, Hkv, S, D] tensor, passed as a transposed view
        k, v = k.transpose(1, 2).contiguous().transpose(1, 2), v.transpose(1, 2).contiguous().transpose(1, 2)
    elif layout.startswith("paged"):
        page = int(layout[5:])
        k, table = to_pages(k, page)
        v, _ = to_pages(v, page)
    out, lse = ops.decode_attention(q, k, v, lens, block_table=table, causal=causal, window_left=left, softcap=softcap,
                                    return_lse=True)
    assert out.shape == q.shape and out.dtype == dtype and torch.isfinite(out).all()
    assert rel(out, want) <= REL_TOL[dtype]
    torch.testing.assert_close(lse, want_lse, atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize("layout", ("contiguous", "paged16"))
def test_left_padding(layout):
    """cache_leftpad: each sequence's keys start at its pad (NaN before it, never read); a pad equal
    to the length leaves no key (out 0, lse -inf); a pad past the length gives NaN rows."""
    q, k, v = make(4, 3, 3000, 32, 8, 128, torch.bfloat16, seed=2)
    lens = torch.tensor([3000, 1000, 70, 9], dtype=torch.int32, device="cuda")
    pads = torch.tensor([0, 999, 64, 9], dtype=torch.int32, device="cuda")
    want, want_lse = D.decode_attention_reference(q, k, v, lens, causal=True, window_left=500, cache_leftpad=pads)
    poison_tail(k, v, lens)
    for i, p in enumerate(pads.tolist()):
        k[i, :p] = float("nan")
        v[i, :p] = float("nan")
    table = None
    if layout == "paged16":
        k, table = to_pages(k, 16)
        v, _ = to_pages(v, 16)
    out, lse = ops.decode_attention(q, k, v, lens, block_table=table, causal=True, window_left=500,
                                    cache_leftpad=pads, return_lse=True)
    assert torch.isfinite(out).all() and (out[3] == 0).all() and torch.isneginf(lse[3]).all()
    assert rel(out, want) <= REL_TOL[torch.bfloat16]
    torch.testing.assert_close(lse, want_lse, atol=2e-3, rtol=1e-3)
    bad = ops.decode_attention(q, k, v, lens, block_table=table, cache_leftpad=pads + 2)  # 1001 > 1000, 11 > 9
    assert bad[1].isnan().all() and bad[3].isnan().all() and torch.isfinite(bad[[0, 2]]).all()


@pytest.mark.parametrize("splits", (1, 3, 128))
def test_explicit_splits_and_zero_length(splits):
    q, k, v = make(4, 2, 2000, 32, 8, 128, torch.bfloat16, seed=1)
    lens = torch.tensor([2000, 0, 1, 1999], dtype=torch.int32, device="cuda")
    want, _ = D.decode_attention_reference(q, k, v, lens, causal=True)
    out = ops.decode_attention(q, k, v, lens, causal=True, num_splits=splits)
    assert torch.equal(out[1], torch.zeros_like(out[1]))  # no keys: 0
    assert rel(out, want) <= REL_TOL[torch.bfloat16]
    again = ops.decode_attention(q, k, v, lens, causal=True, num_splits=splits)
    assert torch.equal(out, again)  # deterministic for a fixed split count


@pytest.mark.parametrize("paged", (False, True))
@pytest.mark.parametrize("interleaved", (False, True))
@pytest.mark.parametrize("sq", (1, 5))
def test_with_kvcache(paged, interleaved, sq):
    b, hq, hkv, d, s_max = 3, 32, 8, 128, 600
    dtype = torch.bfloat16
    q, k, v = make(b, sq, s_max, hq, hkv, d, dtype, seed=2)
    g = torch.Generator(device="cuda").manual_seed(3)
    kn = torch.randn(b, sq, hkv, d, device="cuda", generator=g).to(dtype)
    vn = torch.randn(b, sq, hkv, d, device="cuda", generator=g).to(dtype)
    lens = torch.tensor([0, 100, s_max - sq], dtype=torch.int32, device="cuda")
    pos = torch.arange(4096, device="cuda").float()[:, None]
    inv = 1.0 / (10000 ** (torch.arange(0, 64, 2, device="cuda").float() / 64))  # R = 64 < D
    cos, sin = (pos * inv).cos(), (pos * inv).sin()
    table = None
    kc, vc = k.clone(), v.clone()
    if paged:
        kc, table = to_pages(k, 16)
        vc, _ = to_pages(v, 16)
    kr, vr = kc.clone(), vc.clone()
    want, _ = D.decode_attention_with_kvcache_reference(q, kr, vr, kn, vn, lens, table, cos, sin, interleaved,
                                                        causal=True)
    q0 = q.clone()
    out = ops.decode_attention_with_kvcache(q, kc, vc, kn, vn, lens, block_table=table, rotary_cos=cos,
                                            rotary_sin=sin, rotary_interleaved=interleaved, causal=True)
    assert torch.equal(q, q0)  # q is not modified
    torch.testing.assert_close(kc, kr, equal_nan=True, atol=2e-2, rtol=1e-2)
    assert torch.equal(torch.isnan(kc), torch.isnan(kr)) and torch.equal(vc.nan_to_num(), vr.nan_to_num())
    assert rel(out, want) <= REL_TOL[dtype]


def test_argument_errors():
    q, k, v = make(2, 1, 64, 8, 2, 128, torch.bfloat16)
    lens = torch.full((2,), 64, dtype=torch.int32, device="cuda")
    with pytest.raises(TypeError, match="cache_seqlens"):
        ops.decode_attention(q, k, v, lens.long())
    with pytest.raises(ValueError, match="cache_seqlens"):
        ops.decode_attention(q, k, v, lens.cpu())
    with pytest.raises(ValueError, match="cache_seqlens"):
        ops.decode_attention(q, k, v, lens[:1])
    with pytest.raises(ValueError, match="num_splits"):
        ops.decode_attention(q, k, v, lens, num_splits=129)
    with pytest.raises(ValueError):
        ops.decode_attention(torch.cat([q] * 17, 1), k, v, lens)  # Sq = 17
    with pytest.raises(ValueError, match="softmax_scale"):
        ops.decode_attention(q, k, v, lens, softmax_scale=0.0)


def test_torch_compile_fullgraph():
    q, k, v = make(2, 1, 256, 32, 8, 128, torch.bfloat16)
    lens = torch.tensor([256, 77], dtype=torch.int32, device="cuda")
    kn, vn = k[:, :1].clone(), v[:, :1].clone()

    def step(q, k, v, kn, vn, lens):
        a = ops.decode_attention(q, k, v, lens, causal=True)
        b = ops.decode_attention_with_kvcache(q, k, v, kn, vn, lens - 1, causal=True)
        return a + b

    kc, vc = k.clone(), v.clone()
    want = step(q, kc, vc, kn, vn, lens)
    kc2, vc2 = k.clone(), v.clone()
    got = torch.compile(step, fullgraph=True)(q, kc2, vc2, kn, vn, lens)
    torch.testing.assert_close(got, want)
    assert torch.equal(kc2, kc) and torch.equal(vc2, vc)  # the cache write happened under compile too


def test_cuda_graph_replay_with_new_lengths():
    q, k, v = make(3, 1, 4096, 32, 8, 128, torch.bfloat16)
    lens = torch.tensor([10, 4096, 1], dtype=torch.int32, device="cuda")
    ops.decode_attention(q, k, v, lens, causal=True)  # warm the allocator
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = ops.decode_attention(q, k, v, lens, causal=True, max_seqlen_k=4096)
    for new in ([4096, 5, 300], [1, 1, 1], [2048, 4095, 17]):
        lens.copy_(torch.tensor(new, dtype=torch.int32))
        g.replay()
        want, _ = D.decode_attention_reference(q, k, v, lens, causal=True)
        assert rel(out, want) <= REL_TOL[torch.bfloat16]


# ---- the Hugging Face backend ----------------------------------------------------------------------

transformers = pytest.importorskip("transformers", reason="transformers is not installed")


def _llama(impl):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                                   num_attention_heads=8, num_key_value_heads=2, attn_implementation=impl)
    return transformers.LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()


@pytest.mark.parametrize("cache", ("dynamic", "static", "static-compiled", "left-padded"))
@pytest.mark.parametrize("prompt", (9, 40))
def test_hf_generate_matches_sdpa(cache, prompt, monkeypatch):
    """Greedy generation through the decode kernel: every step's logits are as close to the fp32
    eager model's (teacher-forced on the generated tokens) as the bf16 SDPA model's are. Token
    equality is not asserted: a random model has near-ties that bf16 rounding breaks either way.
    "static" runs eagerly; "static-compiled" lets generate compile the decode step (transformers does
    for a StaticCache on CUDA), where the seams below run only while tracing; "left-padded" has a
    shorter second prompt, left-padded as generate expects (the decode kernel's cache_leftpad)."""
    import blockfuse.attention as A
    calls, fallback = [], []
    real, real_fallback = A._decode, A._fallback

    def spy(*a):
        calls.append(a[0].shape[1])
        return real(*a)

    def fallback_spy(query, *a):
        fallback.append(query.shape[2])
        return real_fallback(query, *a)

    monkeypatch.setattr(A, "_decode", spy)
    monkeypatch.setattr(A, "_fallback", fallback_spy)
    ids = torch.randint(0, 256, (2, prompt), generator=torch.Generator().manual_seed(1)).cuda()
    mask = torch.ones_like(ids)
    if cache == "left-padded":
        mask[1, :prompt // 3] = 0
    m = _llama("blockfuse")
    kw = {}
    if cache.startswith("static"):
        kw["past_key_values"] = transformers.StaticCache(config=m.config, max_cache_len=128)
        kw["disable_compile"] = cache == "static"
    with torch.no_grad():
        g = m.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False,
                       return_dict_in_generate=True, output_logits=True, **kw)
        seq = g.sequences
        step = torch.stack(g.logits, dim=1).float()
        full = torch.cat([mask, torch.ones_like(seq[:, prompt:])], dim=1)
        pos = (full.cumsum(-1) - 1).clamp(min=0)
        want = _llama("eager").float()(seq, attention_mask=full, position_ids=pos).logits[:, prompt - 1:-1].float()
        base = _llama("sdpa")(seq, attention_mask=full, position_ids=pos).logits[:, prompt - 1:-1].float()
    assert rel(step, want) <= 1.15 * rel(base, want) + 1e-3
    assert 1 not in fallback  # no one-token step took SDPA
    if cache == "static-compiled":
        assert 1 in calls  # traced through the decode kernel
    else:
        assert calls.count(1) == 11 * 2  # every one-token step of both layers ran the decode kernel
