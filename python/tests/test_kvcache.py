"""The KV-cache arithmetic (blockfuse.kvcache) against numbers computed by hand. CPU, torch-free."""
import json

import pytest

from blockfuse import kvcache as kv

MIB = 1 << 20


def test_llama3_8b_chunk512_bf16_by_hand():
    cfg = kv.MODELS["llama3-8b"]
    # gate|up [512, 2*14336] + h [512, 14336], 2 bytes: 3*512*14336*2
    assert kv.mlp_activation_bytes(cfg, 512, "bf16") == 44_040_192 == 42 * MIB
    assert kv.mlp_activation_bytes(cfg, 512, "bf16", fused=True) == 14_680_064 == 14 * MIB
    assert kv.saved_bytes_per_chunk(cfg, 512, "bf16") == 29_360_128 == 28 * MIB
    # 2 (K and V) * 32 layers * 8 kv heads * 128 * 2 bytes
    assert kv.kv_bytes_per_token(cfg, "bf16") == 131_072
    assert kv.extra_kv_tokens(cfg, 512, "bf16") == 224
    assert kv.extra_kv_tokens(cfg, 256, "bf16") == 112


@pytest.mark.parametrize("key, chunk, saved, kv_per_token, tokens", [
    # 2*C*U*2 bytes; 2*L*kvh*hd*2 bytes; floor of the ratio
    ("llama3-70b", 512, 58_720_256, 327_680, 179),    # 179.2
    ("llama3-405b", 512, 109_051_904, 516_096, 211),  # 211.3
    ("gemma2-27b", 512, 75_497_472, 376_832, 200),    # 200.35
    ("gemma2-27b", 256, 37_748_736, 376_832, 100),    # 100.17
    ("mistral-7b", 512, 29_360_128, 131_072, 224),
    ("qwen2.5-72b", 512, 60_555_264, 327_680, 184),   # 184.8
    ("qwen2.5-72b", 256, 30_277_632, 327_680, 92),    # 92.4
])
def test_models_by_hand(key, chunk, saved, kv_per_token, tokens):
    cfg = kv.MODELS[key]
    assert kv.saved_bytes_per_chunk(cfg, chunk) == saved
    assert kv.kv_bytes_per_token(cfg) == kv_per_token
    assert kv.extra_kv_tokens(cfg, chunk) == tokens


def test_dtypes():
    cfg = kv.MODELS["llama3-8b"]
    # fp8 KV cache halves the bytes per token: twice the tokens
    assert kv.kv_bytes_per_token(cfg, "fp8") == 65_536
    assert kv.extra_kv_tokens(cfg, 512, "bf16", "fp8") == 448
    # fp32 activations double the saving, fp32 KV doubles the cost
    assert kv.extra_kv_tokens(cfg, 512, "fp32") == 224
    assert kv.extra_kv_tokens(cfg, 512, "fp16") == 224
    with pytest.raises(ValueError, match="dtype 'int4'"):
        kv.kv_bytes_per_token(cfg, "int4")


def test_footnote3_ratio():
    # (5D + U) / (5D + 3U): Llama-3 8B 34816/63488; Gemma-2 27B 59904/133632
    assert kv.layer_activation_ratio(kv.MODELS["llama3-8b"]) == pytest.approx(34816 / 63488)
    assert kv.layer_activation_ratio(kv.MODELS["gemma2-27b"]) == pytest.approx(59904 / 133632)
    # Gemma-2's up factor of 8 gives the largest relative saving of the six
    ratios = {k: kv.layer_activation_ratio(c) for k, c in kv.MODELS.items()}
    assert min(ratios, key=ratios.get) == "gemma2-27b"
    assert all(1 / 3 < r < 0.64 for r in ratios.values())  # the footnote's bounds for U > 2D


def test_published_configs():
    # Spot checks of the configs (heads * head_dim == hidden for all six but Gemma-2 27B).
    for key, cfg in kv.MODELS.items():
        assert cfg.intermediate % 8 == 0 and cfg.hidden % 8 == 0
        if key != "gemma2-27b":
            assert cfg.heads * cfg.head_dim == cfg.hidden
    g = kv.MODELS["gemma2-27b"]
    assert (g.layers, g.hidden, g.intermediate, g.heads, g.kv_heads, g.head_dim) == (46, 4608, 36864, 32, 16, 128)
    assert g.intermediate == 8 * g.hidden


def test_analyse_rows_and_errors():
    rows = kv.analyse(chunks=(256, 512))
    assert len(rows) == 2 * len(kv.MODELS)
    r = next(r for r in rows if r["model"] == "llama3-405b" and r["chunk"] == 256)
    assert r["saved_bytes"] == r["unfused_mlp_bytes"] - r["fused_mlp_bytes"] == 54_525_952
    assert r["extra_kv_tokens"] == 105  # 54525952 / 516096 = 105.6
    with pytest.raises(ValueError, match="model 'gpt2'"):
        kv.analyse(["gpt2"])
    with pytest.raises(ValueError, match="chunk size 0"):
        kv.analyse(chunks=(0,))


def test_cli_table_and_json(tmp_path, capsys):
    out = tmp_path / "kv.json"
    assert kv.main(["--models", "llama3-8b,gemma2-27b", "--chunks", "512", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| Llama-3 8B | 3.50 | 512 | 42.0 | 14.0 | 28.0 | 128 | 224 |" in text
    data = json.loads(out.read_text())
    assert [r["extra_kv_tokens"] for r in data["rows"]] == [224, 200]


def test_cli_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed: the chart needs it")
    png = tmp_path / "kv.png"
    assert kv.main(["--plot", str(png)]) == 0
    assert png.stat().st_size > 1000
