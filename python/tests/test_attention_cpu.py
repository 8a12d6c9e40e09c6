"""CPU tests of blockfuse.attention's torch-only parts (no GPU, no compiled extension needed): the
fp32 reference against PyTorch SDPA, and the Hugging Face backend "blockfuse" taking its fallback on
CPU tensors — tiny random Llama and Gemma-2 models (GQA, sliding window, soft-cap, left padding,
generate() with a KV cache) against transformers' eager attention."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
import blockfuse.attention as A  # noqa: E402
import blockfuse.decode_attention as D  # noqa: E402


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).float()


@pytest.mark.parametrize("sq, sk, hq, hkv, causal, left, right", [
    (5, 5, 4, 4, True, -1, -1), (3, 11, 4, 2, True, -1, -1), (7, 9, 6, 3, False, 2, 1), (9, 9, 2, 1, True, 3, -1),
    (1, 13, 4, 1, True, -1, -1), (6, 6, 4, 2, False, -1, -1)])
def test_reference_matches_sdpa(sq, sk, hq, hkv, causal, left, right):
    q, k, v = rand(2, sq, hq, 64, seed=1), rand(2, sk, hkv, 64, seed=2), rand(2, sk, hkv, 64, seed=3)
    out, lse = A.attention_reference(q, k, v, causal=causal, window_left=left, window_right=right)
    vis = A.visibility_mask(sq, sk, causal, left, right)
    rep = hq // hkv
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(rep, 1), v.transpose(1, 2).repeat_interleave(rep, 1)
    want = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, attn_mask=vis).transpose(1, 2)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    s = (qt @ kt.transpose(-1, -2) / 8.0).masked_fill(~vis, float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(s, -1), atol=1e-5, rtol=1e-5)


def test_visibility_is_bottom_right_aligned():
    vis = A.visibility_mask(2, 5, causal=True)
    assert vis.tolist() == [[True, True, True, True, False], [True] * 5]  # the last query sees every key
    assert A.visibility_mask(3, 3, causal=True, window_left=1).tolist() == [
        [True, False, False], [True, True, False], [False, True, True]]


def test_rows_without_keys_give_zero_and_minus_inf():
    q, k, v = rand(1, 4, 2, 64), rand(1, 2, 2, 64, seed=1), rand(1, 2, 2, 64, seed=2)
    out, lse = A.attention_reference(q, k, v, causal=True)
    assert torch.equal(out[:, :2], torch.zeros_like(out[:, :2])) and torch.isinf(lse[..., :2]).all()
    assert torch.isfinite(out).all() and torch.isfinite(lse[..., 2:]).all()


# ---- Hugging Face backend, fallback path on CPU --------------------------------------------------

transformers = pytest.importorskip("transformers", reason="transformers is not installed")
if not hasattr(transformers, "AttentionInterface"):
    pytest.skip("transformers < 4.48 has no AttentionInterface", allow_module_level=True)


def _set_impl(model, name):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:
        model.config._attn_implementation = name


def _dynamic_cache(cfg):
    try:
        return transformers.DynamicCache(config=cfg)
    except TypeError:  # older transformers
        return transformers.DynamicCache()


def _model(kind):
    torch.manual_seed(0)
    if kind == "llama":
        cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2)
        return transformers.LlamaForCausalLM(cfg).eval()
    cfg = transformers.Gemma2Config(vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=64, sliding_window=5,
                                    query_pre_attn_scalar=64)
    return transformers.Gemma2ForCausalLM(cfg).eval()


def _decode_reference(calls=None):
    """A stand-in for the decode kernel (the fp32 reference; records each call)."""
    def kernel(q, k, v, lengths, max_k, scale, causal, window_left, window_right, softcap, cache_leftpad=None):
        assert q.dim() == 4 and lengths.dtype == torch.int32 and lengths.shape == (q.shape[0],)
        assert q.shape[1] <= A.DECODE_MAX_Q and int(lengths.max()) <= max_k <= k.shape[1]
        if calls is not None:
            calls.append((q.shape[1], k.shape[1], lengths.tolist(), causal, window_left, window_right, softcap,
                          None if cache_leftpad is None else cache_leftpad.tolist()))
        return D.decode_attention_reference(q, k, v, lengths, None, scale, causal, window_left, window_right,
                                            softcap, cache_leftpad=cache_leftpad)[0].to(q.dtype)
    return kernel


def _use_decode_reference(monkeypatch, calls=None):
    monkeypatch.setattr(A._decode_mod, "_HAS_OP", True)
    monkeypatch.setattr(A, "_decode", _decode_reference(calls))


def test_backend_is_registered_on_import():
    assert A.register_hf_backend()
    assert "blockfuse" in transformers.AttentionInterface._global_mapping
    try:
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError:
        return
    assert "blockfuse" in AttentionMaskInterface._global_mapping


@pytest.mark.parametrize("kind", ("llama", "gemma2"))
def test_hf_fallback_matches_eager(kind):
    """fp32 CPU: the fallback with an equivalent mask gives eager's logits (padding rows excluded)
    and the same greedy generation with the KV cache."""
    A.register_hf_backend()
    m = _model(kind)
    ids = torch.randint(0, 128, (2, 11), generator=torch.Generator().manual_seed(1))
    am = torch.ones(2, 11, dtype=torch.long)
    am[1, :3] = 0  # left padding
    outs = {}
    for impl in ("eager", "blockfuse"):
        _set_impl(m, impl)
        with torch.no_grad():
            outs[impl] = (m(ids).logits, m(ids, attention_mask=am).logits,
                          m.generate(ids, attention_mask=am, max_new_tokens=5, do_sample=False))
    torch.testing.assert_close(outs["blockfuse"][0], outs["eager"][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(outs["blockfuse"][1][0], outs["eager"][1][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(outs["blockfuse"][1][1, 3:], outs["eager"][1][1, 3:], atol=1e-5, rtol=1e-5)
    assert torch.isfinite(outs["blockfuse"][1]).all()
    assert torch.equal(outs["blockfuse"][2], outs["eager"][2])


@pytest.mark.parametrize("kind", ("llama", "gemma2"))
def test_hf_fused_path_argument_mapping(kind, monkeypatch):
    """The backend's unmasked path with the fp32 reference in place of the kernel: the transposes,
    causal alignment (prefill and one-query decode against a DynamicCache), sliding window, scale
    and soft-cap it passes must reproduce eager attention, and the fallback must not run."""
    A.register_hf_backend()
    try:
        from transformers.masking_utils import AttentionMaskInterface  # noqa: F401
    except ImportError:
        pytest.skip("transformers < 4.53: the unmasked path is never taken")
    calls = []

    def kernel(q, k, v, scale, causal, window_left, window_right, softcap):
        assert q.dim() == 4 and q.shape[2] % k.shape[2] == 0  # [B, S, H, D] views
        calls.append((q.shape[1], k.shape[1], causal, window_left, window_right, softcap))
        return A.attention_reference(q, k, v, scale, causal, window_left, window_right, softcap)[0].to(q.dtype)

    def no_fallback(*a, **kw):
        raise AssertionError("the fallback ran on an unmasked call")

    monkeypatch.setattr(A, "_fused_ok", lambda *a: True)
    monkeypatch.setattr(A, "_fused", kernel)
    decode_calls = []
    _use_decode_reference(monkeypatch, decode_calls)
    m = _model(kind)
    ids = torch.randint(0, 128, (2, 19), generator=torch.Generator().manual_seed(2))  # 19 > 16 and > sliding_window 5
    res = {}
    for impl in ("eager", "blockfuse"):
        _set_impl(m, impl)
        if impl == "blockfuse":
            monkeypatch.setattr(A, "_fallback", no_fallback)
        with torch.no_grad():
            g = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                           past_key_values=_dynamic_cache(m.config), return_dict_in_generate=True,
                           output_logits=True)
            res[impl] = (m(ids).logits, torch.stack(g.logits, 1), g.sequences)
    torch.testing.assert_close(res["blockfuse"][0], res["eager"][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(res["blockfuse"][1], res["eager"][1], atol=1e-5, rtol=1e-5)
    assert torch.equal(res["blockfuse"][2], res["eager"][2])
    assert all(sq == 19 for sq, *_ in calls) and calls  # the prefill ran the prefill kernel,
    assert decode_calls and all(c[0] == 1 for c in decode_calls)  # every decode step the decode kernel
    assert all(c[2] for c in calls) and all(c[3] for c in decode_calls)  # causal
    if kind == "gemma2":
        assert any(c[3] == 4 and c[4] == 0 for c in calls) and all(c[5] == 50.0 for c in calls)
        assert any(c[4] == 4 and c[5] == 0 for c in decode_calls) and all(c[6] == 50.0 for c in decode_calls)


def _varlen_reference(calls):
    """A stand-in for the varlen kernel: the fp32 reference per packed sequence (records each call)."""
    def kernel(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, window_left, window_right, softcap):
        assert q.dim() == 3 and cu_q.dtype == torch.int32 and cu_k.dtype == torch.int32
        cq, ck = cu_q.tolist(), cu_k.tolist()
        assert len(cq) == len(ck) and cq[-1] == q.shape[0] and ck[-1] == k.shape[0]
        assert max_q == max(b - a for a, b in zip(cq, cq[1:])) and max_k == max(b - a for a, b in zip(ck, ck[1:]))
        calls.append((cq, ck, causal, window_left, window_right, softcap))
        out = torch.full_like(q, float("nan"))  # every packed query row must be written below
        for i in range(len(cq) - 1):
            if cq[i + 1] > cq[i]:
                o, _ = A.attention_reference(q[None, cq[i]:cq[i + 1]], k[None, ck[i]:ck[i + 1]],
                                             v[None, ck[i]:ck[i + 1]], scale, causal, window_left, window_right,
                                             softcap)
                out[cq[i]:cq[i + 1]] = o[0].to(q.dtype)
        return out
    return kernel


@pytest.mark.parametrize("kind", ("llama", "gemma2"))
@pytest.mark.parametrize("side", ("left", "right"))
def test_hf_padded_batch_takes_the_varlen_path(kind, side, monkeypatch):
    """A padded batch with the fp32 reference in place of the varlen kernel: the unpadding (kept
    tokens, cu_seqlens, bottom-right alignment of the kept queries, sliding window, soft-cap) must
    reproduce eager attention on every non-padding row, in the prefill and in generate()'s one-query
    decode steps, and the fallback must not run."""
    A.register_hf_backend()
    try:
        from transformers.masking_utils import AttentionMaskInterface  # noqa: F401
    except ImportError:
        pytest.skip("transformers < 4.53: a custom backend receives 4-D masks")
    calls = []

    def no_fallback(*a, **kw):
        raise AssertionError("the fallback ran on a padded batch the varlen path handles")

    monkeypatch.setattr(A, "_fused_ok", lambda *a: True)
    monkeypatch.setattr(A, "_fused", lambda q, k, v, *a: A.attention_reference(q, k, v, *a)[0].to(q.dtype))
    monkeypatch.setattr(A, "_fused_varlen", _varlen_reference(calls))
    decode_calls = []
    _use_decode_reference(monkeypatch, decode_calls)
    fallback = A._fallback
    m = _model(kind)
    ids = torch.randint(0, 128, (3, 20), generator=torch.Generator().manual_seed(3))  # 20 > 16, > sliding_window 5
    am = torch.ones(3, 20, dtype=torch.long)
    pads = ((1, 4), (2, 17))  # rows 1 and 2 padded by 4 and 17 tokens; row 0 not at all
    for row, n in pads:
        if side == "left":
            am[row, :n] = 0
        else:
            am[row, 20 - n:] = 0
    res = {}
    for impl in ("eager", "blockfuse"):
        _set_impl(m, impl)
        if impl == "blockfuse":
            monkeypatch.setattr(A, "_fallback", no_fallback)
        with torch.no_grad():
            res[impl] = m(ids, attention_mask=am).logits
    got, want = res["blockfuse"], res["eager"]
    for row in range(3):
        keep = am[row].bool()
        torch.testing.assert_close(got[row, keep], want[row, keep], atol=1e-5, rtol=1e-5)
    assert torch.isfinite(got).all()
    assert calls and all(c[0][-1] == int(am.sum()) and c[2] for c in calls)  # only kept queries, causal
    if kind == "gemma2":
        assert any(c[3] == 4 and c[4] == 0 for c in calls) and all(c[5] == 50.0 for c in calls)

    if side == "left":  # generate() pads on the left: its decode steps take the decode kernel's left padding
        monkeypatch.setattr(A, "_fallback", fallback)
        n_varlen = len(calls)
        gen = {}
        for impl in ("eager", "blockfuse"):
            _set_impl(m, impl)
            with torch.no_grad():
                gen[impl] = m.generate(ids, attention_mask=am, max_new_tokens=5, do_sample=False,
                                       past_key_values=_dynamic_cache(m.config))
        assert torch.equal(gen["blockfuse"], gen["eager"])
        assert all(c[0][-1] > 3 for c in calls[n_varlen:])  # no one-query step went through the varlen kernel
        assert len(decode_calls) == 4 * 2 and all(c[0] == 1 for c in decode_calls)  # 4 steps x 2 layers
        if kind == "llama":  # the padded rows start at their first kept slot
            assert all(c[7] is not None and c[7][1:] == [4, 17] for c in decode_calls)


def test_hf_mask_with_a_hole_falls_back(monkeypatch):
    """A 2-D mask whose kept tokens are not one run per row cannot be unpadded into sequences: the
    backend must take the fallback (and give eager's result), not the varlen kernel."""
    A.register_hf_backend()
    try:
        from transformers.masking_utils import AttentionMaskInterface  # noqa: F401
    except ImportError:
        pytest.skip("transformers < 4.53: a custom backend receives 4-D masks")

    def no_varlen(*a, **kw):
        raise AssertionError("the varlen path ran on a mask with a hole")

    monkeypatch.setattr(A, "_fused_ok", lambda *a: True)
    monkeypatch.setattr(A, "_fused", lambda q, k, v, *a: A.attention_reference(q, k, v, *a)[0].to(q.dtype))
    monkeypatch.setattr(A, "_fused_varlen", no_varlen)
    m = _model("llama")
    ids = torch.randint(0, 128, (2, 20), generator=torch.Generator().manual_seed(4))
    am = torch.ones(2, 20, dtype=torch.long)
    am[1, 3:5] = 0  # a hole in the middle of row 1
    res = {}
    for impl in ("eager", "blockfuse"):
        _set_impl(m, impl)
        with torch.no_grad():
            res[impl] = m(ids, attention_mask=am).logits
    torch.testing.assert_close(res["blockfuse"][0], res["eager"][0], atol=1e-5, rtol=1e-5)
    keep = am[1].bool()
    torch.testing.assert_close(res["blockfuse"][1, keep], res["eager"][1, keep], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("sq, sk, length, causal, window", [
    (17, 17, 17, True, -1),  # prefill (above 16 queries: the decode kernel takes fewer)
    (20, 30, 30, True, 3),   # a chunked prefill against a cache, sliding window
    (18, 40, 33, True, -1),  # a StaticCache: slots >= length are unfilled
    (19, 19, 19, False, -1), # not causal
])
def test_padded_path_equals_the_fallback(sq, sk, length, causal, window, monkeypatch):
    """hf_attention_forward's unpadding straight against its own fallback (an equivalent dense mask)
    with the fp32 reference as the kernel: left and right padding, a row padded to nothing but its
    last token, bottom-right alignment at Sq < Sk, StaticCache-length masks, windows."""
    monkeypatch.setattr(A, "_fused_ok", lambda *a: True)
    calls = []
    monkeypatch.setattr(A, "_fused_varlen", _varlen_reference(calls))
    b, hq, hkv, d = 4, 4, 2, 64
    q = rand(b, hq, sq, d, seed=11)
    k, v = rand(b, hkv, sk, d, seed=12), rand(b, hkv, sk, d, seed=13)
    mask = torch.ones(b, length, dtype=torch.long)
    mask[1, :3] = 0             # left padding
    mask[2, length - 2:] = 0    # right padding (queries at the end are padding)
    mask[3, :length - 1] = 0    # only the last token kept
    module = type("M", (), {"is_causal": causal})()
    got, _ = A.hf_attention_forward(module, q, k, v, mask, scaling=d ** -0.5, sliding_window=window + 1 if window >= 0 else None)
    want = A._fallback(q, k, v, mask, d ** -0.5, 0.0, causal, window, 0.0)
    assert len(calls) == 1  # the varlen path ran (not the fallback)
    for row in range(b):
        keep = mask[row, length - sq:].bool()  # the kept query rows; padding query rows are not compared
        torch.testing.assert_close(got[row, keep], want[row, keep], atol=1e-5, rtol=1e-5)
        assert torch.equal(got[row, ~keep], torch.zeros_like(got[row, ~keep]))
