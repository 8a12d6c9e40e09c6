"""CPU tests of the end-to-end benchmark's measurement helpers (blockfuse.bench.model): the decode
step it captures for graph replay is a real decode step (its logits are the full forward's)."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: these tests need it (CPU is enough)")
tf = pytest.importorskip("transformers", reason="transformers is not installed")
from blockfuse.bench import model as bm  # noqa: E402


def test_replayed_step_is_a_decode_step():
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    model = tf.LlamaForCausalLM(cfg).eval()
    torch.manual_seed(1)
    step_logits = bm.decode_replay_ms(model, prompt=16, graph=False)
    torch.manual_seed(1)  # the same prompt as the helper drew
    ids = torch.randint(0, cfg.vocab_size, (1, 16))
    with torch.no_grad():
        tok = model(ids).logits[:, -1:].argmax(-1)
        full = model(torch.cat([ids, tok], dim=1)).logits[:, -1:]
    assert step_logits.shape == (1, 1, cfg.vocab_size)
    torch.testing.assert_close(step_logits, full, rtol=1e-4, atol=1e-4)
