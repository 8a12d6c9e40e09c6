"""Tensor parallelism on two GPUs: a tiny random Llama / Gemma-2 saved to disk, loaded by
tp_worker.py under `torchrun --nproc-per-node 2` with transformers' tp_plan="auto", patched by
blockfuse.patch_model, its logits checked against the unpatched TP model and an fp32 copy (the
worker's docstring says what passes). Skips below two CUDA devices."""
import os
import subprocess
import sys

import pytest

from conftest import require_gpu

torch, ops = require_gpu()
pytest.importorskip("transformers", reason="transformers is not installed")
from hf_models import tiny_model  # noqa: E402

pytestmark = pytest.mark.gpu
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_patched_tensor_parallel_model_matches(family, tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip(f"{torch.cuda.device_count()} CUDA device(s): tensor parallelism needs two")
    # 4 query / 2 KV heads and U = 704: 2 / 1 heads and U = 352 per rank.
    tiny_model(family, hidden=256, inter=704, layers=3, vocab=512, initializer_range=0.08).save_pretrained(tmp_path)
    env = dict(os.environ)
    # NVLink multicast off: on a shared host it can take every GPU out of service.
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(HERE, ".."), HERE, env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           os.path.join(HERE, "tp_worker.py"), str(tmp_path), "cuda"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    print(r.stdout[-4000:], r.stderr[-4000:])
    assert r.returncode == 0, f"torchrun exit {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    assert r.stdout.count("; ok") == 2, r.stdout[-2000:]
