"""GPU tests of blockfuse.ops.attention / attention_varlen and the Hugging Face backend "blockfuse":
the op against a float32 reference (PyTorch SDPA on upcast inputs with an explicit bottom-right mask
and GQA by repeat_interleave; the same formula in plain fp32 torch where SDPA has no equivalent:
soft-cap, rows that see no key), the LSE against torch.logsumexp, strided views, varlen, argument
errors, torch.compile(fullgraph=True), CUDA-graph capture, and tiny random Llama / Gemma-2 models
run with attn_implementation="blockfuse" against their fp32 eager twin."""
import copy
import itertools

import pytest

from conftest import require_gpu

torch, ops = require_gpu()
import blockfuse.attention as A  # noqa: E402
from tensor_utils import rel  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_tf32")]

DTYPES = (torch.bfloat16, torch.float16)
# Relative Frobenius error of out vs the fp32 formula. Besides the output rounding (2^-9 bf16,
# 2^-12 fp16) the kernel rounds P to the input dtype before P·V, as FlashAttention does.
REL_TOL = {torch.bfloat16: 1.2e-2, torch.float16: 2.5e-3}
ELEM_ATOL = {torch.bfloat16: 3e-2, torch.float16: 5e-3}  # times max|ref|, plus the relative part below
ELEM_RTOL = {torch.bfloat16: 2 ** -6, torch.float16: 2 ** -9}


def make(b, sq, sk, hq, hkv, d, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, sq, hq, d, device="cuda", generator=g).to(dtype)
    k = torch.randn(b, sk, hkv, d, device="cuda", generator=g).to(dtype)
    v = torch.randn(b, sk, hkv, d, device="cuda", generator=g).to(dtype)
    return q, k, v


def sdpa_reference(q, k, v, scale=None, causal=False, window_left=-1, window_right=-1):
    """fp32 SDPA with the bottom-right visibility mask (rows must see >= 1 key)."""
    rep = q.shape[2] // k.shape[2]
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    kf, vf = kf.repeat_interleave(rep, dim=1), vf.repeat_interleave(rep, dim=1)
    mask = A.visibility_mask(q.shape[1], k.shape[1], causal, window_left, window_right, device=q.device)
    out = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask, scale=scale)
    return out.transpose(1, 2)


def check_out(got, ref, dtype):
    assert got.dtype == dtype and got.shape == ref.shape
    got = got.float()
    assert torch.isfinite(got).all()
    rel = ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    assert rel <= REL_TOL[dtype], f"relative error {rel:.3e}"
    bound = ELEM_RTOL[dtype] * ref.abs() + ELEM_ATOL[dtype] * ref.abs().max()
    bad = (got - ref).abs() > bound
    assert not bad.any(), f"{int(bad.sum())} elements out of bounds; worst excess {((got - ref).abs() - bound).max().item():.3e}"


def check_lse(got, ref):
    assert got.dtype == torch.float32 and got.shape == ref.shape
    inf = torch.isinf(ref)
    assert torch.equal(torch.isinf(got), inf), "rows that see no key must have lse = -inf, and only those"
    assert (got[inf] < 0).all()
    torch.testing.assert_close(got[~inf], ref[~inf], atol=2e-3, rtol=1e-3)


SHAPES = [  # (B, Sq, Sk, Hq, Hkv, D)
    (1, 1, 1, 4, 4, 64),
    (2, 7, 7, 8, 2, 128),
    (1, 127, 300, 8, 1, 64),      # Sq < Sk (chunked prefill), MQA
    (2, 300, 129, 4, 4, 128),     # Sq > Sk
    (1, 1000, 1000, 16, 4, 64),   # Llama-style GQA 4
    (1, 1, 513, 32, 8, 128),      # a decode step
    (3, 33, 77, 12, 6, 64),       # GQA 2 (Gemma), odd lengths
    (1, 4097, 4097, 8, 8, 128),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", (False, True))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_fp32_sdpa(shape, causal, dtype):
    b, sq, sk, hq, hkv, d = shape
    q, k, v = make(b, sq, sk, hq, hkv, d, dtype, seed=sum(shape) + causal)
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
    ref_out, ref_lse = A.attention_reference(q, k, v, causal=causal)
    check_out(out, ref_out, dtype)
    check_lse(lse, ref_lse)
    assert lse.shape == (b, hq, sq)
    if not (causal and sq > sk):  # every row sees a key: SDPA is defined there (also checks the reference)
        check_out(out, sdpa_reference(q, k, v, causal=causal), dtype)
    assert torch.equal(ops.attention(q, k, v, causal=causal), out), "return_lse must not change out (and runs are deterministic)"


def test_rows_without_keys_are_zero():
    q, k, v = make(1, 50, 20, 4, 4, 64, torch.bfloat16, seed=3)
    out, lse = ops.attention(q, k, v, causal=True, return_lse=True)
    assert torch.equal(out[:, :30].float(), torch.zeros_like(out[:, :30].float()))
    assert torch.isinf(lse[..., :30]).all() and torch.isfinite(lse[..., 30:]).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal, left, right", [(True, 16, -1), (True, 0, 0), (False, 31, 7), (False, -1, 0),
                                                 (False, 5, -1)])
def test_window(causal, left, right, dtype):
    q, k, v = make(2, 200, 333, 8, 2, 128, dtype, seed=left + 3 * right)
    out, lse = ops.attention(q, k, v, causal=causal, window_left=left, window_right=right, return_lse=True)
    ref_out, ref_lse = A.attention_reference(q, k, v, causal=causal, window_left=left, window_right=right)
    check_out(out, ref_out, dtype)
    check_lse(lse, ref_lse)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", (64, 128))
@pytest.mark.parametrize("causal", (False, True))
def test_softcap_and_scale(d, causal, dtype):
    q, k, v = make(2, 129, 257, 8, 4, d, dtype, seed=d)
    q = q * 3  # large logits so the cap matters
    scale = 144 ** -0.5 if d == 128 else 0.3  # Gemma-2 style query_pre_attn_scalar
    out, lse = ops.attention(q, k, v, softmax_scale=scale, causal=causal, softcap=50.0 if d == 128 else 5.0,
                             return_lse=True)
    ref_out, ref_lse = A.attention_reference(q, k, v, scale, causal=causal, softcap=50.0 if d == 128 else 5.0)
    check_out(out, ref_out, dtype)
    check_lse(lse, ref_lse)
    plain = ops.attention(q, k, v, softmax_scale=scale, causal=causal)
    assert not torch.equal(plain, out), "the soft-cap must change the result at these logits"


def test_lse_matches_logsumexp_of_scores():
    q, k, v = make(1, 64, 96, 4, 4, 64, torch.float16, seed=11)
    _, lse = ops.attention(q, k, v, return_lse=True)
    s = torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float()) / 8.0
    torch.testing.assert_close(lse, torch.logsumexp(s, dim=-1), atol=2e-3, rtol=1e-3)


def test_strided_views_need_no_copy():
    b, s, hq, hkv, d = 2, 77, 8, 2, 128
    dtype = torch.bfloat16
    qkv = torch.randn(b, s, (hq + 2 * hkv) * d, device="cuda").to(dtype)  # a fused QKV projection
    q = qkv[..., : hq * d].view(b, s, hq, d)
    k = qkv[..., hq * d: (hq + hkv) * d].view(b, s, hkv, d)
    v = qkv[..., (hq + hkv) * d:].view(b, s, hkv, d)
    out = ops.attention(q, k, v, causal=True)
    assert out.is_contiguous()
    assert torch.equal(out, ops.attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True))
    check_out(out, A.attention_reference(q, k, v, causal=True)[0], dtype)
    # Hugging Face's [B, H, S, D] tensors, transposed (as the HF backend passes them).
    qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    got = ops.attention(qh.transpose(1, 2), kh.transpose(1, 2), vh.transpose(1, 2), causal=True)
    assert torch.equal(got, out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", (False, True))
def test_varlen(causal, dtype):
    lens_q = [0, 1, 7, 0, 129, 300, 5]
    lens_k = [3, 1, 7, 4, 200, 300, 64]
    hq, hkv, d = 8, 2, 64
    cu = lambda lens: torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device="cuda")
    cu_q, cu_k = cu(lens_q), cu(lens_k)
    q, _, _ = make(1, sum(lens_q), 1, hq, hkv, d, dtype, seed=5)
    _, k, v = make(1, 1, sum(lens_k), hq, hkv, d, dtype, seed=6)
    q, k, v = q[0], k[0], v[0]
    out, lse = ops.attention_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, return_lse=True)
    assert out.shape == q.shape and lse.shape == (hq, q.shape[0])
    for i in range(len(lens_q)):
        a, e = int(cu_q[i]), int(cu_q[i + 1])
        ka, ke = int(cu_k[i]), int(cu_k[i + 1])
        if a == e:
            continue
        ref_out, ref_lse = A.attention_reference(q[None, a:e], k[None, ka:ke], v[None, ka:ke], causal=causal)
        check_out(out[a:e][None], ref_out, dtype)
        check_lse(lse[:, a:e][None], ref_lse)


# ---- errors name the argument (nothing launched) -------------------------------------------------

def _qkv(**over):
    q, k, v = make(1, 16, 16, 4, 2, 64, torch.bfloat16)
    return dict(q=q, k=k, v=v) | over


@pytest.mark.parametrize("change, exc, arg", [
    (lambda a: dict(a, q=torch.randn(1, 16, 4, 96, device="cuda").bfloat16(),
                    k=torch.randn(1, 16, 2, 96, device="cuda").bfloat16(),
                    v=torch.randn(1, 16, 2, 96, device="cuda").bfloat16()), ValueError, "q"),   # head dim 96
    (lambda a: dict(a, k=torch.randn(1, 16, 3, 64, device="cuda").bfloat16(),
                    v=torch.randn(1, 16, 3, 64, device="cuda").bfloat16()), ValueError, "k"),   # Hq % Hkv != 0
    (lambda a: dict(a, q=a["q"].float()), TypeError, "q"),                                     # fp32
    (lambda a: dict(a, k=a["k"].half()), ValueError, "k"),                                     # dtype mismatch
    (lambda a: dict(a, v=a["v"][:, :8]), ValueError, "v"),                                     # Sk mismatch
    (lambda a: dict(a, q=a["q"].transpose(-1, -2).contiguous().transpose(-1, -2)), ValueError, "q"),  # D not contiguous
    (lambda a: dict(a, q=a["q"][0]), ValueError, "q"),                                         # 3-D
    (lambda a: dict(a, causal=True, window_right=3), ValueError, "window_right"),
    (lambda a: dict(a, window_left=-2), ValueError, "window_left"),
    (lambda a: dict(a, softcap=-1.0), ValueError, "softcap"),
    (lambda a: dict(a, softmax_scale=-0.5), ValueError, "softmax_scale"),
    (lambda a: dict(a, q=a["q"].cpu(), k=a["k"].cpu(), v=a["v"].cpu()), ValueError, "q"),     # CPU tensors
])
def test_errors_name_the_argument(change, exc, arg):
    kw = change(_qkv())
    with pytest.raises(exc, match=f"argument '{arg}'"):
        ops.attention(**kw)


def test_varlen_errors_name_the_argument():
    q, k, v = (t[0] for t in make(1, 16, 16, 4, 2, 64, torch.bfloat16))
    cu = torch.tensor([0, 9, 16], dtype=torch.int32, device="cuda")
    with pytest.raises(TypeError, match="argument 'cu_seqlens_q'"):
        ops.attention_varlen(q, k, v, cu.long(), cu, 9, 9)
    with pytest.raises(ValueError, match="argument 'cu_seqlens_k'"):
        ops.attention_varlen(q, k, v, cu, cu[:2], 9, 9)
    with pytest.raises(ValueError, match="argument 'max_seqlen_q'"):
        ops.attention_varlen(q, k, v, cu, cu, 17, 9)
    with pytest.raises(ValueError, match="argument 'q'"):
        ops.attention_varlen(q[None], k, v, cu, cu, 9, 9)


# ---- torch.compile and CUDA graphs ---------------------------------------------------------------

def test_torch_compile_fullgraph():
    q, k, v = make(2, 100, 150, 8, 2, 128, torch.bfloat16, seed=21)

    def f(q, k, v):
        out, lse = torch.ops.blockfuse.attention(q * 1.0, k, v, None, True, -1, -1, 0.0, True)
        return out.float() * 2, lse + 1

    torch._dynamo.reset()
    got = torch.compile(f, fullgraph=True)(q, k, v)
    want = f(q, k, v)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    cf = torch.compile(lambda q, k, v: ops.attention(q, k, v, causal=True, window_left=8), fullgraph=True)
    assert torch.equal(cf(q, k, v), ops.attention(q, k, v, causal=True, window_left=8))


def test_cuda_graph_capture_and_replay():
    q, k, v = make(2, 64, 200, 8, 4, 64, torch.float16, seed=31)
    ops.attention(q, k, v, causal=True)  # warm up (lazy init) outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, lse = ops.attention(q, k, v, causal=True, return_lse=True)
    q2, k2, v2 = make(2, 64, 200, 8, 4, 64, torch.float16, seed=32)
    q.copy_(q2), k.copy_(k2), v.copy_(v2)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    want, want_lse = ops.attention(q2, k2, v2, causal=True, return_lse=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)


def test_captured_call_walks_tiles_like_eager():
    """Causal D 64 at 2048 rows: eager calls walk the tiles from the stream's shared counter (128-row
    tiles), a captured call from a pair of its own; the same tiles either way, so the same bits."""
    q, k, v = make(1, 2048, 2048, 8, 2, 64, torch.bfloat16, seed=33)
    want = ops.attention(q, k, v, causal=True)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = ops.attention(q, k, v, causal=True)
    for _ in range(2):
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, want)
    check_out(want, sdpa_reference(q, k, v, causal=True), torch.bfloat16)


def test_causal_calls_on_two_streams_at_once():
    """Each stream has its own tile counter: causal calls racing on two streams stay exact."""
    shapes = [(2, 1000, 1000, 8, 2, 128, 41), (1, 1500, 1500, 8, 8, 64, 42)]
    inputs = [make(*s[:6], torch.bfloat16, seed=s[6]) for s in shapes]
    want = [ops.attention(*x, causal=True) for x in inputs]
    streams = [torch.cuda.Stream() for _ in inputs]
    torch.cuda.synchronize()
    outs = [[], []]
    for _ in range(4):
        for i, (x, st) in enumerate(zip(inputs, streams)):
            with torch.cuda.stream(st):
                outs[i].append(ops.attention(*x, causal=True))
    torch.cuda.synchronize()
    for i, x in enumerate(inputs):
        for got in outs[i]:
            assert torch.equal(got, want[i])
        check_out(want[i], sdpa_reference(*x, causal=True), torch.bfloat16)


# ---- Hugging Face backend ------------------------------------------------------------------------

transformers = None
try:
    import transformers  # noqa: F811
except ImportError:
    pass
needs_hf = pytest.mark.skipif(transformers is None or not hasattr(transformers, "AttentionInterface"),
                              reason="transformers >= 4.48 (AttentionInterface) is not installed")
try:
    from transformers.masking_utils import AttentionMaskInterface  # noqa: F401
    _HAS_MASK_INTERFACE = True
except ImportError:
    _HAS_MASK_INTERFACE = False
# Before transformers 4.53 a custom backend always receives a 4-D mask, so every call falls back.
needs_mask_interface = pytest.mark.skipif(not _HAS_MASK_INTERFACE,
                                          reason="transformers < 4.53: the fused path is never taken")


def _set_impl(model, name):
    if hasattr(model, "set_attn_implementation"):  # transformers >= 4.54
        model.set_attn_implementation(name)
    else:
        model.config._attn_implementation = name


def _dynamic_cache(cfg):
    try:
        return transformers.DynamicCache(config=cfg)
    except TypeError:
        return transformers.DynamicCache()


def _tiny(kind):
    if kind == "llama":
        cfg = transformers.LlamaConfig(
            vocab_size=512, hidden_size=512, intermediate_size=1024, num_hidden_layers=3, num_attention_heads=8,
            num_key_value_heads=2, max_position_embeddings=1024, initializer_range=0.08, tie_word_embeddings=False)
        return cfg, transformers.LlamaForCausalLM, "sdpa"  # head_dim 64
    cfg = transformers.Gemma2Config(
        vocab_size=512, hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=128, query_pre_attn_scalar=128, sliding_window=48,
        max_position_embeddings=1024, initializer_range=0.08)
    return cfg, transformers.Gemma2ForCausalLM, "eager"  # Gemma-2 has no SDPA path (soft-cap)


def _three_models(kind, seed):
    """(cfg, baseline name, fp32 eager twin, bf16 baseline, bf16 model on the blockfuse backend),
    from one random tiny model."""
    assert A.register_hf_backend()
    cfg, cls, baseline = _tiny(kind)
    torch.manual_seed(seed)
    base = cls(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
    ref32 = copy.deepcopy(base).float()
    _set_impl(ref32, "eager")
    _set_impl(base, baseline)
    fused = copy.deepcopy(base)
    _set_impl(fused, "blockfuse")
    assert fused.config._attn_implementation == "blockfuse"
    return cfg, baseline, ref32, base, fused


@pytest.fixture
def no_fallback(monkeypatch):
    """Fails the test if the HF backend takes the SDPA fallback (the fused kernel must run)."""
    def boom(*a, **kw):
        raise AssertionError("the blockfuse HF backend fell back to SDPA where the fused kernel should run")
    monkeypatch.setattr(A, "_fallback", boom)


@needs_hf
@needs_mask_interface
@pytest.mark.parametrize("kind", ("llama", "gemma2"))
def test_hf_model_logits_and_generate(kind, no_fallback):
    cfg, baseline, ref32, base, fused = _three_models(kind, 0)

    ids = torch.randint(0, cfg.vocab_size, (2, 157), device="cuda")  # > sliding_window: the window matters
    with torch.no_grad():
        want = ref32(ids).logits
        err_fused = rel(fused(ids).logits, want)
        err_base = rel(base(ids).logits, want)
    assert err_fused <= 1.15 * err_base + 1e-3, f"{kind}: blockfuse {err_fused:.3e} vs {baseline} {err_base:.3e}"

    # Greedy generation with a DynamicCache: prefill, then one-query decode steps (bottom-right causal).
    new = 24
    with torch.no_grad():
        g = fused.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False,
                           past_key_values=_dynamic_cache(cfg), return_dict_in_generate=True, output_logits=True)
        seq = g.sequences
        assert seq.shape == (2, ids.shape[1] + new)
        step_logits = torch.stack(g.logits, dim=1).float()  # [2, new, vocab]
        want = ref32(seq).logits[:, ids.shape[1] - 1: -1].float()
        base_logits = base(seq).logits[:, ids.shape[1] - 1: -1]
    err_gen, err_base = rel(step_logits, want), rel(base_logits, want)
    assert err_gen <= 1.15 * err_base + 1e-3, f"{kind} decode: blockfuse {err_gen:.3e} vs {baseline} {err_base:.3e}"


@needs_hf
@needs_mask_interface
@pytest.mark.parametrize("kind", ("llama", "gemma2"))
def test_hf_padded_batch_runs_varlen_and_matches(kind, no_fallback, monkeypatch):
    """A padded batch (left padding in one row, right padding in another) runs the varlen kernel on
    the kept tokens, not the fallback: no worse than the bf16 baseline vs fp32 on every kept row, in
    the prefill and in left-padded greedy generation with a DynamicCache (whose decode steps take
    SDPA: the decode kernel reads per-sequence lengths, and left padding is not one)."""
    cfg, baseline, ref32, base, model = _three_models(kind, 1)
    ids = torch.randint(0, cfg.vocab_size, (3, 90), device="cuda")
    mask = torch.ones_like(ids)
    mask[1, :13] = 0  # left padding
    mask[2, 71:] = 0  # right padding
    with torch.no_grad():
        got = model(ids, attention_mask=mask).logits
        want = ref32(ids, attention_mask=mask).logits
        ref = base(ids, attention_mask=mask).logits
    assert torch.isfinite(got).all()
    for row in range(3):  # padding positions are not compared
        keep = mask[row].bool()
        e, eb = rel(got[row, keep], want[row, keep]), rel(ref[row, keep], want[row, keep])
        assert e <= 1.15 * eb + 1e-3, f"{kind} row {row}: blockfuse {e:.3e} vs {baseline} {eb:.3e}"

    left = mask[:2].clone()
    new = 12
    monkeypatch.undo()  # the left-padded decode steps may take the fallback
    with torch.no_grad():
        g = model.generate(ids[:2], attention_mask=left, max_new_tokens=new, do_sample=False,
                           past_key_values=_dynamic_cache(cfg), return_dict_in_generate=True, output_logits=True)
        seq = g.sequences
        full = torch.cat([left, left.new_ones(2, new)], dim=1)
        pos = (full.cumsum(-1) - 1).masked_fill(full == 0, 1)  # the positions generate() gives a left-padded row
        step_logits = torch.stack(g.logits, dim=1).float()
        want = ref32(seq, attention_mask=full, position_ids=pos).logits[:, ids.shape[1] - 1: -1].float()
        base_logits = base(seq, attention_mask=full, position_ids=pos).logits[:, ids.shape[1] - 1: -1]
    err_gen, err_base = rel(step_logits, want), rel(base_logits, want)
    assert err_gen <= 1.15 * err_base + 1e-3, f"{kind} decode: blockfuse {err_gen:.3e} vs {baseline} {err_base:.3e}"


@needs_hf
@needs_mask_interface
def test_hf_mask_with_a_hole_falls_back_and_matches():
    """A mask that is not one run of kept tokens per row takes the fallback, with the same accuracy."""
    cfg, baseline, ref32, base, model = _three_models("llama", 2)
    ids = torch.randint(0, cfg.vocab_size, (2, 64), device="cuda")
    mask = torch.ones_like(ids)
    mask[1, 20:30] = 0  # a hole
    with torch.no_grad():
        got = model(ids, attention_mask=mask).logits
        want = ref32(ids, attention_mask=mask).logits
        ref = base(ids, attention_mask=mask).logits
    for row in range(2):
        keep = mask[row].bool()
        e, eb = rel(got[row, keep], want[row, keep]), rel(ref[row, keep], want[row, keep])
        assert e <= 1.15 * eb + 1e-3, f"row {row}: blockfuse {e:.3e} vs {baseline} {eb:.3e}"
