"""CPU tests of blockfuse.decode_attention's torch-only parts (no GPU, no compiled extension needed):
the reference (fp64 against the prefill reference, paged equal to contiguous, the kvcache step's
cache writes and rotary embedding against transformers' apply_rotary_pos_emb), the shape checks of
the fake implementations on meta tensors, the op's argument errors where the library is loaded, and
the Hugging Face backend's decode routing with the reference in place of the kernel: which calls
take the decode kernel (no mask, StaticCache lengths, right and left padding), which take SDPA (holes,
a right-padded chunk keeping some of its queries; under compile these rows turn NaN instead), that no call of <= 16 queries reaches the prefill kernel, and greedy generation with a
DynamicCache and a StaticCache equal to eager attention's."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
import blockfuse.attention as A  # noqa: E402
import blockfuse.decode_attention as D  # noqa: E402


def rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def paged(cache, lengths, page, seed=0):
    """cache [B, S, H, D] copied into shuffled pages [num_blocks, page, H, D] + a block_table."""
    b, s = cache.shape[:2]
    per = -(-s // page)
    perm = torch.randperm(b * per + 3, generator=torch.Generator().manual_seed(seed))
    pages = torch.full((b * per + 3, page, *cache.shape[2:]), float("nan"), dtype=cache.dtype)
    table = perm[: b * per].view(b, per).to(torch.int32)
    for i in range(b):
        for j in range(per):
            rows = cache[i, j * page:(j + 1) * page]
            pages[table[i, j], : rows.shape[0]] = rows
    return pages, table


# ---- the reference ---------------------------------------------------------------------------------

@pytest.mark.parametrize("sq, hq, hkv, causal, left, softcap", [
    (1, 8, 2, True, -1, 0.0), (4, 8, 8, True, -1, 0.0), (16, 4, 1, True, 5, 0.0), (3, 6, 3, False, -1, 30.0),
    (7, 8, 2, True, 2, 0.0),
])
def test_reference_equals_prefill_reference_per_sequence(sq, hq, hkv, causal, left, softcap):
    b, s_max, d = 3, 37, 64
    q, k, v = rand(b, sq, hq, d, seed=1), rand(b, s_max, hkv, d, seed=2), rand(b, s_max, hkv, d, seed=3)
    lengths = torch.tensor([37, 20, sq + 1], dtype=torch.int32)
    k[1, 20:] = float("nan")  # slots past the length are never read
    v[1, 20:] = float("nan")
    out, lse = D.decode_attention_reference(q, k, v, lengths, None, None, causal, left, -1, softcap,
                                            dtype=torch.float64)
    for i, n in enumerate(lengths.tolist()):
        want, want_lse = A.attention_reference(q[i:i + 1].double(), k[i:i + 1, :n].double(), v[i:i + 1, :n].double(),
                                               None, causal, left, -1, softcap)
        torch.testing.assert_close(out[i:i + 1], want.double(), atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(lse[i:i + 1], want_lse.double(), atol=1e-6, rtol=1e-6)


def test_reference_empty_and_invalid_lengths():
    q, k, v = rand(3, 2, 4, 64), rand(3, 8, 2, 64, seed=1), rand(3, 8, 2, 64, seed=2)
    out, lse = D.decode_attention_reference(q, k, v, torch.tensor([0, 9, -1], dtype=torch.int32), causal=True)
    assert torch.equal(out[0], torch.zeros_like(out[0])) and torch.isinf(lse[0]).all() and (lse[0] < 0).all()
    assert torch.isnan(out[1:]).all() and torch.isnan(lse[1:]).all()  # past the capacity / negative


@pytest.mark.parametrize("page", (1, 4, 16))
def test_paged_reference_equals_contiguous(page):
    b, s_max = 3, 29
    q, k, v = rand(b, 2, 8, 64), rand(b, s_max, 2, 64, seed=1), rand(b, s_max, 2, 64, seed=2)
    lengths = torch.tensor([29, 5, 17], dtype=torch.int32)
    kp, table = paged(k, lengths, page, seed=4)
    vp, _ = paged(v, lengths, page, seed=4)
    want = D.decode_attention_reference(q, k, v, lengths, causal=True)
    got = D.decode_attention_reference(q, kp, vp, lengths, table, causal=True)
    torch.testing.assert_close(got[0], want[0]) and torch.testing.assert_close(got[1], want[1])


def test_rotary_reference_matches_transformers():
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    b, s, h, d, positions = 2, 3, 4, 64, 50
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    freqs = torch.arange(positions).float()[:, None] * inv[None]
    cos, sin = freqs.cos(), freqs.sin()  # [P, D/2]
    pos = torch.tensor([[7, 8, 9], [30, 31, 32]])
    x = rand(b, s, h, d)
    got = D.rotary_reference(x, cos, sin, pos)
    emb = torch.cat([freqs, freqs], -1)[pos]  # HF's [B, S, D] cos/sin
    want, _ = apply_rotary_pos_emb(x.transpose(1, 2), x.transpose(1, 2), emb.cos(), emb.sin())
    torch.testing.assert_close(got, want.transpose(1, 2), atol=1e-5, rtol=1e-5)
    assert transformers is not None


@pytest.mark.parametrize("paged_cache", (False, True))
@pytest.mark.parametrize("interleaved", (False, True))
def test_kvcache_reference_writes_the_cache(paged_cache, interleaved):
    b, sq, hq, hkv, d, s_max = 2, 3, 8, 2, 64, 24
    q, kn, vn = rand(b, sq, hq, d), rand(b, sq, hkv, d, seed=1), rand(b, sq, hkv, d, seed=2)
    k, v = rand(b, s_max, hkv, d, seed=3), rand(b, s_max, hkv, d, seed=4)
    lengths = torch.tensor([5, 0], dtype=torch.int32)
    cos, sin = rand(64, 16, seed=5), rand(64, 16, seed=6)  # R = 32 < D
    pos = lengths.long()[:, None] + torch.arange(sq)
    kc, vc = k.clone(), v.clone()
    table = None
    if paged_cache:
        kc, table = paged(k, lengths, 8, seed=7)
        vc, _ = paged(v, lengths, 8, seed=7)
    out, _ = D.decode_attention_with_kvcache_reference(q, kc, vc, kn, vn, lengths, table, cos, sin, interleaved,
                                                      causal=True)
    k_rot = D.rotary_reference(kn, cos, sin, pos, interleaved)
    assert torch.equal(k_rot[..., 32:], kn[..., 32:])  # dims past R are not rotated
    want_k, want_v = k.clone(), v.clone()
    for i in range(b):
        n = int(lengths[i])
        want_k[i, n:n + sq], want_v[i, n:n + sq] = k_rot[i], vn[i]
    if paged_cache:
        want_k, _ = paged(want_k, lengths, 8, seed=7)
        want_v, _ = paged(want_v, lengths, 8, seed=7)
    torch.testing.assert_close(kc, want_k, equal_nan=True) and torch.testing.assert_close(vc, want_v, equal_nan=True)
    want = D.decode_attention_reference(D.rotary_reference(q, cos, sin, pos, interleaved), want_k, want_v,
                                        lengths + sq, table, causal=True)[0]
    torch.testing.assert_close(out, want)


# ---- the fakes' shape checks (meta tensors) ----------------------------------------------------------

def meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_output_shapes():
    q, k = meta(3, 4, 32, 128), meta(3, 100, 8, 128)
    lens = meta(3, dtype=torch.int32)
    assert D.decode_output_shapes("decode_attention", q, k, k, lens) == ((3, 4, 32, 128), (0,))
    assert D.decode_output_shapes("decode_attention", q, k, k, lens, return_lse=True)[1] == (3, 32, 4)
    pages, table = meta(50, 16, 8, 128), meta(3, 7, dtype=torch.int32)
    assert D.decode_output_shapes("decode_attention", q, pages, pages, lens, table)[0] == (3, 4, 32, 128)


@pytest.mark.parametrize("case, needle", [
    ("sq17", "Sq = 17"), ("gqa", "divisor"), ("batch", "batch"), ("lens_dtype", "cache_seqlens"),
    ("table_batch", "block_table"), ("head_dim", "head dim"), ("v_shape", "v_cache"), ("dtype", "dtype"),
])
def test_output_shape_errors(case, needle):
    q, k, lens, table = meta(2, 1, 32, 128), meta(2, 64, 8, 128), meta(2, dtype=torch.int32), None
    v = k
    if case == "sq17":
        q = meta(2, 17, 32, 128)
    elif case == "gqa":
        k = v = meta(2, 64, 5, 128)
    elif case == "batch":
        k = v = meta(3, 64, 8, 128)
    elif case == "lens_dtype":
        lens = meta(2, dtype=torch.int64)
    elif case == "table_batch":
        table = meta(3, 4, dtype=torch.int32)
    elif case == "head_dim":
        k = v = meta(2, 64, 8, 64)
    elif case == "v_shape":
        v = meta(2, 63, 8, 128)
    elif case == "dtype":
        k = v = meta(2, 64, 8, 128, dtype=torch.float16)
    with pytest.raises(RuntimeError, match=needle):
        D.decode_output_shapes("decode_attention", q, k, v, lens, table)


needs_op = pytest.mark.skipif(not D._HAS_OP, reason="the blockfuse library with the decode ops is not loaded")


@needs_op
def test_op_schemas_mark_the_written_caches():
    schema = str(torch.ops.blockfuse.decode_attention_with_kvcache.default._schema)
    assert "Tensor(a!) k_cache" in schema and "Tensor(b!) v_cache" in schema
    assert "!" not in str(torch.ops.blockfuse.decode_attention.default._schema)


@needs_op
def test_op_refuses_cpu_tensors_naming_the_argument():
    q, k = torch.zeros(1, 1, 8, 64, dtype=torch.bfloat16), torch.zeros(1, 4, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="argument 'q' is on cpu"):
        D.decode_attention(q, k, k, torch.zeros(1, dtype=torch.int32))
    with pytest.raises(ValueError, match="argument 'q' is on cpu"):
        D.decode_attention_with_kvcache(q, k, k, k[:, :1], k[:, :1], torch.zeros(1, dtype=torch.int32))


@needs_op
def test_fake_runs_under_fake_tensor_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q, k = torch.empty(2, 3, 8, 64, dtype=torch.float16), torch.empty(2, 40, 2, 64, dtype=torch.float16)
        lens = torch.empty(2, dtype=torch.int32)
        out, lse = D.decode_attention(q, k, k, lens, return_lse=True)
        assert out.shape == q.shape and lse.shape == (2, 8, 3) and lse.dtype == torch.float32
        out = D.decode_attention_with_kvcache(q, k, k, k[:, :3], k[:, :3], lens)
        assert out.shape == q.shape
        out = D.decode_attention(q, k, k, lens, cache_leftpad=lens)
        assert out.shape == q.shape
        with pytest.raises(RuntimeError, match="argument 'cache_leftpad'"):
            D.decode_attention(q, k, k, lens, cache_leftpad=torch.empty(3, dtype=torch.int32))


# ---- the Hugging Face backend's decode routing ---------------------------------------------------------

def _decode_reference(calls):
    def kernel(q, k, v, lengths, max_k, scale, causal, window_left, window_right, softcap, cache_leftpad=None):
        assert lengths.dtype == torch.int32 and int(lengths.max()) <= max_k <= k.shape[1]
        if cache_leftpad is not None:
            assert cache_leftpad.dtype == torch.int32 and cache_leftpad.shape == lengths.shape
        calls.append((q.shape[1], k.shape[1], lengths.tolist(), max_k,
                      None if cache_leftpad is None else cache_leftpad.tolist()))
        return D.decode_attention_reference(q, k, v, lengths, None, scale, causal, window_left, window_right,
                                            softcap, cache_leftpad=cache_leftpad)[0].to(q.dtype)
    return kernel


@pytest.fixture
def routed(monkeypatch):
    """The backend with the reference as the decode kernel and the prefill kernels forbidden."""
    calls = []

    def prefill(*a, **kw):
        raise AssertionError("a call with <= 16 queries reached the prefill kernel")

    monkeypatch.setattr(A, "_fused_ok", lambda *a: True)
    monkeypatch.setattr(A._decode_mod, "_HAS_OP", True)
    monkeypatch.setattr(A, "_decode", _decode_reference(calls))
    monkeypatch.setattr(A, "_fused", prefill)
    monkeypatch.setattr(A, "_fused_varlen", prefill)
    A._MASK_LENGTHS[0] = None
    return calls


@pytest.mark.parametrize("sq", (1, 3, 16))
@pytest.mark.parametrize("mask_kind, decodes", [
    ("none", True), ("static", True), ("right_pad_decode", True), ("left_pad", True),
    ("hole", False), ("right_pad_partial", False),
])
def test_decode_routing_equals_the_fallback(sq, mask_kind, decodes, routed):
    b, hq, hkv, d, sk = 4, 8, 2, 64, 40
    length = sk if mask_kind == "none" else 31
    q, k, v = rand(b, hq, sq, d, seed=1), rand(b, hkv, sk, d, seed=2), rand(b, hkv, sk, d, seed=3)
    mask = None if mask_kind == "none" else torch.ones(b, length, dtype=torch.long)
    keep_q = torch.ones(b, sq, dtype=torch.bool)
    if mask_kind == "right_pad_decode":  # rows shorter than L keep none of the query positions
        mask[1, length - sq - 4:] = 0
        mask[2, length - sq:] = 0
        keep_q[1:3] = False
    elif mask_kind == "right_pad_partial":  # row 1 keeps some query positions but not all L: not lengths
        mask[1, length - 1:] = 0
        keep_q[1, -1] = False
    elif mask_kind == "left_pad":  # (and the StaticCache slots past L unfilled, as every masked kind)
        mask[1, :5] = 0
        mask[3, :length - sq] = 0  # only the queries' own slots kept
    elif mask_kind == "hole":
        mask[2, 3:6] = 0
    if mask is not None:
        k[:, :, length:] = 1e3  # StaticCache slots past L: never read by either path
        v[:, :, length:] = 1e3
    module = type("M", (), {"is_causal": True})()
    got, _ = A.hf_attention_forward(module, q, k, v, mask, scaling=d ** -0.5)
    want = A._fallback(q, k, v, mask, d ** -0.5, 0.0, True, -1, 0.0)
    decodes = decodes or (mask_kind == "right_pad_partial" and sq == 1)  # then its one query is padding
    assert bool(routed) == decodes
    if decodes:
        assert routed[0][3] == length
        assert (routed[0][4] is not None) == (mask_kind == "left_pad")
    for row in range(b):
        torch.testing.assert_close(got[row, keep_q[row]], want[row, keep_q[row]], atol=1e-5, rtol=1e-5)


def test_mask_analysis_is_read_once_per_mask(routed, monkeypatch):
    reads = []
    mask = torch.ones(2, 10, dtype=torch.long)
    q, k = rand(2, 4, 1, 64), rand(2, 2, 12, 64, seed=1)
    orig_sum = torch.Tensor.sum

    def counting_sum(self, *a, **kw):
        reads.append(1)
        return orig_sum(self, *a, **kw)

    monkeypatch.setattr(torch.Tensor, "sum", counting_sum)
    module = type("M", (), {"is_causal": True})()
    for _ in range(3):  # three layers, one mask
        A.hf_attention_forward(module, q, k, k, mask, scaling=0.125)
    assert len(reads) == 1 and len(routed) == 3


transformers = pytest.importorskip("transformers", reason="transformers is not installed")


def _varlen_reference(calls):
    """The varlen prefill kernel's seam with the reference in its place; records (max_q, max_k)."""
    def kernel(q, k, v, cu_q, cu_k, max_q, max_k, *a):
        calls.append((max_q, max_k))
        cq, ck = cu_q.tolist(), cu_k.tolist()
        out = torch.empty_like(q)
        for i in range(len(cq) - 1):
            out[cq[i]:cq[i + 1]] = A.attention_reference(q[None, cq[i]:cq[i + 1]], k[None, ck[i]:ck[i + 1]],
                                                         v[None, ck[i]:ck[i + 1]], *a)[0][0].to(q.dtype)
        return out
    return kernel


def _llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2)
    return transformers.LlamaForCausalLM(cfg).eval()


def _set_impl(model, name):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:
        model.config._attn_implementation = name


@pytest.mark.parametrize("cache", ("dynamic", "static"))
def test_hf_generate_decode_steps_take_the_decode_kernel(cache, monkeypatch):
    """Greedy generation with the reference as the decode kernel equals eager attention's, and every
    one-token step (a DynamicCache's full length, a StaticCache's filled prefix) ran the decode path."""
    try:
        from transformers.masking_utils import AttentionMaskInterface  # noqa: F401
    except ImportError:
        pytest.skip("transformers < 4.53: a custom backend receives 4-D masks")
    A.register_hf_backend()
    calls = []
    monkeypatch.setattr(A, "_fused_ok", lambda *a: True)
    monkeypatch.setattr(A._decode_mod, "_HAS_OP", True)
    monkeypatch.setattr(A, "_decode", _decode_reference(calls))
    monkeypatch.setattr(A, "_fused", lambda q, k, v, *a: A.attention_reference(q, k, v, *a)[0].to(q.dtype))
    varlen = []
    monkeypatch.setattr(A, "_fused_varlen", _varlen_reference(varlen))
    m = _llama()
    # A 12-token prompt: the prefill runs the decode kernel too (longer prompts: the test below).
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(5))
    gen = {}
    for impl in ("eager", "blockfuse"):
        _set_impl(m, impl)
        A._MASK_LENGTHS[0] = None
        kw = {}
        if cache == "static":
            kw["past_key_values"] = transformers.StaticCache(config=m.config, max_cache_len=40)
        with torch.no_grad():
            gen[impl] = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False, **kw)
    assert torch.equal(gen["blockfuse"], gen["eager"])
    steps = [c for c in calls if c[0] == 1]
    assert len(steps) == 5 * 2 and len(calls) == 6 * 2  # the prefill and 5 one-token steps x 2 layers
    if cache == "static":  # no mask (all ones is dropped by generate): the lengths come from position_ids
        assert all(c[1] == 40 for c in steps)  # the full-capacity cache, read up to the lengths
        assert sorted({c[2][0] for c in steps}) == list(range(13, 18))
    assert all(c[0] > 1 for c in varlen)


def test_unmasked_lengths_from_positions():
    full = A._unmasked_lengths({}, 3, 1, 40, "cpu")
    assert full.tolist() == [40, 40, 40] and full.dtype == torch.int32
    pos = torch.tensor([[24]])
    assert A._unmasked_lengths({"position_ids": pos}, 3, 1, 40, "cpu").tolist() == [25, 25, 25]
    assert A._unmasked_lengths({"cache_position": torch.tensor([22, 23])}, 2, 2, 40, "cpu").tolist() == [24, 24]
    assert A._unmasked_lengths({"position_ids": torch.tensor([[99]])}, 1, 1, 8, "cpu").tolist() == [8]  # sliding
    assert A._unmasked_lengths({"position_ids": torch.zeros(3, 2, 1, dtype=torch.long)}, 2, 1, 8, "cpu").tolist() == [8, 8]


@pytest.mark.parametrize("kernels", (True, False))
def test_hf_static_cache_long_prefill_reads_only_filled_slots(kernels, monkeypatch):
    """A prompt longer than DECODE_MAX_Q against a StaticCache, which transformers hands over without a
    mask (>= 5.2x) or with a 2-D mask of the cache's length (5.1x): the prefill kernel sees only the
    filled prefix (the keys sliced to the prompt, or the varlen kernel's lengths), the SDPA fallback a
    mask built from the positions or the given one; greedy generation equals eager attention's."""
    try:
        from transformers.masking_utils import AttentionMaskInterface  # noqa: F401
    except ImportError:
        pytest.skip("transformers < 4.53: a custom backend receives 4-D masks")
    A.register_hf_backend()
    prefill = []

    def fused(q, k, v, *a):
        prefill.append((q.shape[1], k.shape[1]))
        return A.attention_reference(q, k, v, *a)[0].to(q.dtype)

    if kernels:
        monkeypatch.setattr(A, "_fused_ok", lambda *a: True)
        monkeypatch.setattr(A._decode_mod, "_HAS_OP", True)
        monkeypatch.setattr(A, "_decode", _decode_reference([]))
        monkeypatch.setattr(A, "_fused", fused)
        monkeypatch.setattr(A, "_fused_varlen", _varlen_reference(prefill))
    m = _llama()
    ids = torch.randint(0, 128, (2, 21), generator=torch.Generator().manual_seed(6))
    gen = {}
    for impl in ("eager", "blockfuse"):
        _set_impl(m, impl)
        A._MASK_LENGTHS[0] = None
        A._KEY_LENGTH[0] = None
        with torch.no_grad():
            gen[impl] = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False,
                                   past_key_values=transformers.StaticCache(config=m.config, max_cache_len=48))
    assert torch.equal(gen["blockfuse"], gen["eager"])
    if kernels:
        assert prefill and all(c == (21, 21) for c in prefill), prefill


def test_unmasked_key_length_and_mask():
    A._KEY_LENGTH[0] = None
    assert A._unmasked_key_length({}, 20, 48) == 48
    assert A._unmasked_key_length({"position_ids": torch.arange(20)[None]}, 20, 48) == 20
    assert A._unmasked_key_length({"position_ids": torch.arange(20)[None] + 7}, 20, 48) == 27
    assert A._unmasked_key_length({"cache_position": torch.arange(20) + 40}, 20, 48) == 48  # clamped
    assert A._unmasked_key_length({"position_ids": torch.arange(20)[None]}, 20, 20) == 20  # no cache
    q, k = torch.zeros(2, 4, 3, 8), torch.zeros(2, 2, 10, 8)
    m = A._unmasked_mask(q, k, {"position_ids": torch.tensor([[4, 5, 6]])}, True, -1)
    assert m.shape == (2, 1, 3, 10)
    want = torch.tensor([[j <= 4 + i for j in range(10)] for i in range(3)])
    assert torch.equal(m[0, 0], want) and torch.equal(m[1, 0], want)
    m = A._unmasked_mask(q, k, {"position_ids": torch.tensor([[4, 5, 6]])}, True, 1)
    assert torch.equal(m[0, 0], want & torch.tensor([[j >= 3 + i for j in range(10)] for i in range(3)]))


def test_unmasked_lengths_made_once_per_forward():
    """Every layer of a forward passes the same position tensor: the lengths are made once (the same
    tensor comes back) and made again when the positions change in place or are a new tensor."""
    pos = torch.tensor([[24]])
    first = A._unmasked_lengths({"position_ids": pos}, 2, 1, 40, "cpu")
    assert A._unmasked_lengths({"position_ids": pos}, 2, 1, 40, "cpu") is first
    pos.add_(1)  # the next step's position, written in place
    assert A._unmasked_lengths({"position_ids": pos}, 2, 1, 40, "cpu").tolist() == [26, 26]
    assert A._unmasked_lengths({"position_ids": torch.tensor([[3]])}, 2, 1, 40, "cpu").tolist() == [4, 4]


def test_mask_runs_under_compile_mark_what_the_kernel_cannot_express(monkeypatch):
    """Inside torch.compile / CUDA-graph capture the mask is analysed on the device without a read-back:
    every row's run [first, end) is passed on, and a row the kernel cannot express gets length -1 (the
    kernel's NaN rows), never a silently wrong length."""
    monkeypatch.setattr(A, "_in_graph_or_compile", lambda: True)
    sq, length = 2, 12
    mask = torch.ones(6, length, dtype=torch.long)
    mask[1, :4] = 0                 # left padding: [4, 12)
    mask[2, 9:] = 0                 # a StaticCache's filled prefix / padding queries: [0, 9)
    mask[3, 3:5] = 0                # a hole
    mask[4, length - 1:] = 0        # keeps one of its two query positions
    mask[5] = 0                     # nothing kept
    lengths, first, max_k = A._mask_lengths(mask, sq, 20)
    assert max_k == length and lengths.dtype == torch.int32 and first.dtype == torch.int32
    assert lengths.tolist() == [12, 12, 9, -1, -1, 0]
    assert first.tolist()[:3] == [0, 4, 0] and first[5] == 0
    assert A._mask_lengths(mask[:, :1], sq, 20) is None  # shorter than Sq: SDPA
    # Outside compile the same mask is refused as a whole (SDPA for the batch), one host read-back.
    monkeypatch.setattr(A, "_in_graph_or_compile", lambda: False)
    A._MASK_LENGTHS[0] = None
    assert A._mask_lengths(mask, sq, 20) is None
    A._MASK_LENGTHS[0] = None
    lengths, first, _ = A._mask_lengths(mask[:3], sq, 20)
    assert lengths.tolist() == [12, 12, 9] and first.tolist() == [0, 4, 0]
    A._MASK_LENGTHS[0] = None
    assert A._mask_lengths(mask[[0, 2]], sq, 20)[1] is None  # no left padding: no cache_leftpad


def test_reference_left_padding_equals_the_sliced_cache():
    q, k, v = rand(3, 2, 8, 64, seed=1), rand(3, 30, 2, 64, seed=2), rand(3, 30, 2, 64, seed=3)
    lens = torch.tensor([30, 17, 5], dtype=torch.int32)
    pads = torch.tensor([0, 6, 5], dtype=torch.int32)
    out, lse = D.decode_attention_reference(q, k, v, lens, causal=True, window_left=7, cache_leftpad=pads,
                                            dtype=torch.float64)
    for i, (n, p) in enumerate(zip(lens.tolist(), pads.tolist())):
        want, wl = D.decode_attention_reference(q[i:i + 1], k[i:i + 1, p:], v[i:i + 1, p:],
                                                torch.tensor([n - p], dtype=torch.int32), causal=True,
                                                window_left=7, dtype=torch.float64)
        torch.testing.assert_close(out[i:i + 1], want)
        torch.testing.assert_close(lse[i:i + 1], wl)
    assert torch.isneginf(lse[2]).all() and (out[2] == 0).all()  # no key left: out 0, lse -inf
    bad, _ = D.decode_attention_reference(q, k, v, lens, cache_leftpad=torch.tensor([0, 18, -1], dtype=torch.int32))
    assert bad[0].isfinite().all() and bad[1:].isnan().all()


def test_decode_prefers_sdpa_rule():
    """The measured rule: MQA-like groups over short caches at small batch go to SDPA."""
    assert A.decode_prefers_sdpa(1, 32, 1, 1024) and A.decode_prefers_sdpa(32, 32, 2, 2048)
    assert not A.decode_prefers_sdpa(1, 32, 8, 1024)    # GQA 4: the decode kernel is faster
    assert not A.decode_prefers_sdpa(1, 32, 1, 8192)    # a longer cache
    assert not A.decode_prefers_sdpa(128, 32, 1, 1024)  # a larger batch
    assert not A.decode_prefers_sdpa(64, 32, 1, 1024)


@pytest.mark.parametrize("hkv, sk, b, decodes", [(1, 40, 2, False), (4, 40, 2, True), (1, 2100, 2, True),
                                                   (1, 40, 33, True)])
def test_mqa_short_cache_takes_sdpa(hkv, sk, b, decodes, routed):
    hq, d = 32, 64
    q, k, v = rand(b, hq, 1, d, seed=1), rand(b, hkv, sk, d, seed=2), rand(b, hkv, sk, d, seed=3)
    module = type("M", (), {"is_causal": True})()
    got, _ = A.hf_attention_forward(module, q, k, v, None, scaling=d ** -0.5)
    want = A._fallback(q, k, v, None, d ** -0.5, 0.0, True, -1, 0.0)
    assert bool(routed) == decodes
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
