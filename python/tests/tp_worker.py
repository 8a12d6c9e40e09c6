"""One rank of the two-rank tensor-parallel check (test_tp_gpu.py and test_tp_cpu.py start it):

    torchrun --standalone --nproc-per-node 2 python/tests/tp_worker.py MODEL_DIR cuda|cpu

Loads the model saved in MODEL_DIR with transformers' tensor parallelism (tp_plan="auto": NCCL on
cuda, bf16; gloo on cpu, fp32) and, unsharded, in fp32 (on this rank's GPU, or the CPU); computes
the logits of the TP model, patches it (blockfuse.patch_model: MLPs, norms, attention backend) and
computes them again. Passes when every rank finds each MLP converted with this rank's share of the
intermediate size and
  cuda: the patched logits no further from the fp32 model's than the unpatched TP logits (x1.15 +
        1e-3, the single-GPU test's margin) and within 3e-2 of them (bf16 kernels);
  cpu:  both within 1e-4 of the fp32 model's (the plain-torch fallbacks: only the sharding is
        tested, not the kernels).
Exit status 0 on every rank when all ranks pass, else 1."""
import os
import sys

import torch
import torch.distributed as dist


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def full(t):
    from torch.distributed.tensor import DTensor
    return t.full_tensor() if isinstance(t, DTensor) else t


def main(model_dir, device):
    cuda = device == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    import transformers

    import blockfuse
    from blockfuse import nn as bnn

    load = transformers.AutoModelForCausalLM.from_pretrained
    # transformers >= 5.17 takes the plan in a DistributedConfig (passing tp_plan directly is
    # deprecated, to be removed in 5.18); older releases only take tp_plan.
    if hasattr(transformers, "DistributedConfig"):
        tp_args = {"distributed_config": transformers.DistributedConfig(tp_plan="auto")}
    else:
        tp_args = {"tp_plan": "auto"}
    tp = load(model_dir, dtype=torch.bfloat16 if cuda else torch.float32, **tp_args).eval()
    world, rank = dist.get_world_size(), dist.get_rank()
    m32 = load(model_dir, dtype=torch.float32).to(device).eval()
    cfg = m32.config
    ids = torch.randint(0, cfg.vocab_size, (2, 77), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        l32, lu = m32(ids).logits, full(tp(ids).logits)
    changed = blockfuse.patch_model(tp, mlp=True, norm=True, attention=True)
    with torch.no_grad():
        lp = full(tp(ids).logits)
    mlps = [m for _, m in tp.named_modules() if isinstance(m, bnn.GatedMLP)]
    e_u, e_p, d = rel(lu, l32), rel(lp, l32), rel(lp, lu)
    problems = []
    if len(mlps) != cfg.num_hidden_layers:
        problems.append(f"{len(mlps)} GatedMLPs for {cfg.num_hidden_layers} layers ({len(changed)} changes)")
    if any(m.intermediate_size * world != cfg.intermediate_size for m in mlps):
        problems.append(f"intermediate sizes {[m.intermediate_size for m in mlps]}; want {cfg.intermediate_size // world}")
    if cuda and not e_p <= 1.15 * e_u + 1e-3:
        problems.append(f"patched {e_p:.3e} vs unpatched {e_u:.3e} relative to fp32")
    if cuda and not d < 3e-2:
        problems.append(f"patched vs unpatched TP logits {d:.3e}")
    if not cuda and not (e_u < 1e-4 and e_p < 1e-4):
        problems.append(f"fp32 logits off the unsharded model's: unpatched {e_u:.3e}, patched {e_p:.3e}")
    print(f"[rank {rank}/{world}] {cfg.model_type} on {device}: logits vs fp32 unpatched {e_u:.3e} patched "
          f"{e_p:.3e}; patched vs unpatched {d:.3e}; {len(mlps)} MLPs of U/{world} = "
          f"{mlps[0].intermediate_size if mlps else '-'}" + (f"; FAILED: {'; '.join(problems)}" if problems else "; ok"),
          flush=True)
    flag = torch.tensor([1 if problems else 0], device=device)
    dist.all_reduce(flag)
    failed = bool(flag.item())
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
