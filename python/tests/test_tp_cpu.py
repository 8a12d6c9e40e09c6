"""CPU tests of GatedMLP.from_hf on a tensor-parallel MLP (DTensor weights, as transformers'
tp_plan="auto" leaves them). In-process, a one-process gloo group and a 1-rank mesh: the conversion
(this rank's interleaved shard, the original rowwise down_proj kept for its all-reduce) and the
refusals. Then two gloo ranks under torchrun (tp_worker.py): a tiny Llama loaded with tp_plan="auto"
and patched gives the unsharded model's fp32 logits — the sharding, through the plain-torch
fallbacks. The kernels under tensor parallelism run on two GPUs: test_tp_gpu.py."""
import os
import subprocess
import sys


import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
pytest.importorskip("transformers", reason="transformers is not installed")
dist = pytest.importorskip("torch.distributed", reason="torch has no distributed support")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor  # noqa: E402

from blockfuse import nn as bnn  # noqa: E402
from blockfuse import ops  # noqa: E402
from hf_models import tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    if dist.is_initialized():
        pytest.skip("a process group is already initialised")
    store = tmp_path_factory.mktemp("tp") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def sharded_mlp(mesh, gate=Shard(0), up=Shard(0), down=Shard(1)):
    mlp = tiny_model("llama", hidden=64, inter=176, layers=1).model.layers[0].mlp
    for lin, placement in ((mlp.gate_proj, gate), (mlp.up_proj, up), (mlp.down_proj, down)):
        lin.weight = torch.nn.Parameter(distribute_tensor(lin.weight.detach(), mesh, [placement]), requires_grad=False)
    return mlp


def test_converts_this_ranks_shard_and_keeps_the_rowwise_down_proj(mesh):
    mlp = sharded_mlp(mesh)
    g = bnn.GatedMLP.from_hf(mlp)
    gate, up = mlp.gate_proj.weight.to_local(), mlp.up_proj.weight.to_local()
    assert g.intermediate_size == gate.shape[0] and g.hidden_size == gate.shape[1]
    assert not isinstance(g.w_gate_up, DTensor)
    assert torch.equal(g.w_gate_up, ops.interleave_gate_up(gate, up))
    assert g.down is mlp.down_proj  # its TP hooks (the all-reduce) stay in place
    assert g.activation == "silu"


@pytest.mark.parametrize("which", ["gate", "up", "down"])
def test_refuses_other_placements_naming_the_projection(mesh, which):
    kwargs = {which: Replicate()}
    with pytest.raises(ValueError, match=f"{which}_proj.weight is DTensor .*Replicate"):
        bnn.GatedMLP.from_hf(sharded_mlp(mesh, **kwargs))


def test_refuses_a_partly_sharded_mlp(mesh):
    mlp = sharded_mlp(mesh)
    mlp.up_proj.weight = torch.nn.Parameter(mlp.up_proj.weight.to_local().clone(), requires_grad=False)
    with pytest.raises(ValueError, match="up_proj.weight is a plain tensor"):
        bnn.GatedMLP.from_hf(mlp)


def test_refuses_a_tensor_parallel_stacked_gate_up(mesh):
    mlp = tiny_model("phi3", hidden=64, inter=176, layers=1).model.layers[0].mlp
    mlp.gate_up_proj.weight = torch.nn.Parameter(distribute_tensor(mlp.gate_up_proj.weight.detach(), mesh, [Shard(0)]),
                                                 requires_grad=False)
    with pytest.raises(ValueError, match="stacked gate/up projection is not supported under tensor parallelism"):
        bnn.GatedMLP.from_hf(mlp)


def test_two_rank_tensor_parallel_model_patched(tmp_path):
    pytest.importorskip("accelerate", reason="transformers' tp_plan needs accelerate")
    tiny_model("llama", hidden=128, inter=352, layers=2, vocab=256).save_pretrained(tmp_path)
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(here, ".."), here, env.get("PYTHONPATH", "")])
    # CPU ranks: on a machine with a GPU, transformers would otherwise set up NCCL for tp_plan="auto"
    # (both ranks on one GPU, which NCCL refuses).
    env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           os.path.join(here, "tp_worker.py"), str(tmp_path), "cpu"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"torchrun exit {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    assert r.stdout.count("; ok") == 2, r.stdout[-2000:]
