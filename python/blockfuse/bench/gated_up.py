"""`python -m blockfuse.bench gated-up`: the gated up-projection against the unfused pipelines a
PyTorch user runs, TFLOP/s and peak activation memory.

For each model (hidden K, intermediate U) and token count M it times five ways of computing
h = act(x·W_gateᵀ) ⊙ (x·W_upᵀ), all bf16 on one GPU, and measures the peak activation memory of each:

  torch.mm                     cuBLAS GEMM into C = [M, 2U] alone (the GEMM everyone pays)
  torch.mm + eager SwiGLU      C, then act(C[:, :U]) * C[:, U:] in eager PyTorch
  torch.mm + compiled SwiGLU   C, then the same expression through torch.compile
  torch.mm + Triton SwiGLU     C, then an Unsloth-style Triton kernel writing over the up half
                               (blockfuse/bench/triton_swiglu.py: "cuBLAS + Unsloth")
  blockfuse fused              blockfuse.ops.gated_up: one kernel, only h [M, U] is written
  quack gemm_act (gated)       quack's fused GEMM + gated activation (quack.gemm_interface.gemm_act,
                               store_preact=False, its weight interleaved gate first), where quack is
                               importable (../shared/peers stages it); --quack-tuned lets it autotune

Method: CUDA events around each call, warm-up first, the median of the repetitions (at least 10; as
many as fit in --reps-time seconds, at most 100), x rotated among enough buffers to exceed 3x the L2
cache; a point's pipelines in rounds, each called once a round in a rotated order (common.time_cuda_rounds;
--order sequential: each pipeline's repetitions in turn, common.time_cuda); the cuBLAS 8192^3 bf16 rate measured in the same run as the ceiling.
TFLOP/s = 2·M·K·2U / time for every pipeline (the activation's flops are not counted).
Memory: torch.cuda.max_memory_allocated() during one call minus the memory allocated before it:
the activations the pipeline allocates (inputs and weights excluded). Every pipeline's output is
checked against an fp32 reference (first and last 128 rows) before it is timed; a wrong one stops
the run with exit status 1.

Writes DIR/gated_up.json and the charts DIR/gated_up_tflops.png (all pipelines),
DIR/gated_up_tflops_fused_vs_triton.png (blockfuse vs torch.mm + Triton) and DIR/gated_up_memory.png
(peak activation memory); --plot-only JSON redraws them from a gated_up.json.
"""
import json
import math
import os
import sys
import time

import torch

from .. import ops
from .common import optional_peer, peak_activation_bytes, ready, time_cuda, time_cuda_rounds
from .shapes import GATED_UP_MODELS

MM = "torch.mm"
EAGER = "torch.mm + eager SwiGLU"
COMPILED = "torch.mm + compiled SwiGLU"
TRITON = "torch.mm + Triton SwiGLU (Unsloth-style)"
FUSED = "blockfuse fused"
QUACK = "quack gemm_act (gated)"
PIPELINES = (MM, EAGER, COMPILED, TRITON, FUSED)  # QUACK joins them where quack is importable
STYLE = {MM: ("tab:gray", "--"), EAGER: ("tab:orange", "-"), COMPILED: ("tab:green", "-"),
         TRITON: ("tab:blue", "-"), FUSED: ("tab:red", "-"), QUACK: ("tab:purple", "-")}
SHORT = {MM: "mm", EAGER: "eager", COMPILED: "compiled", TRITON: "Triton", FUSED: "fused", QUACK: "quack"}
QUACK_ACTIVATION = {"silu": "swiglu", "gelu_tanh": "geglu"}
VERIFY_ROWS = 128
VERIFY_TOL = 2e-2  # relative Frobenius error vs fp32; bf16 pipelines land at ~2e-3..5e-3


def _eager_act(g, activation):
    if activation == "silu":
        return torch.nn.functional.silu(g)
    return torch.nn.functional.gelu(g, approximate="tanh")


def _swiglu_eager(g, u, activation):
    return _eager_act(g, activation) * u


def quack_weight(w_stacked):
    """quack's gated layout from the stacked [gate; up] weight [2U, K]: rows 2j = gate_j, 2j + 1 = up_j."""
    u = w_stacked.shape[0] // 2
    return torch.stack((w_stacked[:u], w_stacked[u:]), dim=1).reshape(w_stacked.shape)


def make_pipelines(w_stacked, w_inter, u, activation, triton_mod, compiled_fn, quack_gemm_act=None, quack_tuned=False):
    wt = w_stacked.t()  # [K, 2U] view: cuBLAS runs the transposed operand directly

    def mm(x):
        return torch.mm(x, wt)

    def eager(x):
        c = torch.mm(x, wt)
        return _swiglu_eager(c[:, :u], c[:, u:], activation)

    def compiled(x):
        c = torch.mm(x, wt)
        return compiled_fn(c[:, :u], c[:, u:], activation)

    def triton_(x):
        c = torch.mm(x, wt)
        return triton_mod.swiglu_fg(c[:, :u], c[:, u:], activation=activation)  # over the up half

    def fused(x):
        return ops.gated_up(x, w_inter, activation)

    pipes = {MM: mm, EAGER: eager, COMPILED: compiled, TRITON: triton_, FUSED: fused}
    if quack_gemm_act is not None:
        wqt = quack_weight(w_stacked).t()  # (K, 2U), as quack takes B
        qact = QUACK_ACTIVATION[activation]

        def quack(x):
            return quack_gemm_act(x, wqt, activation=qact, store_preact=False, tuned=quack_tuned)[1]

        pipes[QUACK] = quack
    return pipes


def _load_quack():
    from quack.gemm_interface import gemm_act
    return gemm_act


def cublas_ceiling(dtype):
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    ms, _ = time_cuda(lambda _: torch.mm(a, b), [None], warmup=3, reps_time=0.5)
    return 2 * n ** 3 / (ms * 1e-3) / 1e12


def verify(name, h, x, w_inter, activation, m):
    rows = list(range(min(m, VERIFY_ROWS))) + list(range(max(VERIFY_ROWS, m - VERIFY_ROWS), m))
    idx = torch.tensor(rows, device=x.device)
    ref = ops.gated_up_reference(x.index_select(0, idx), w_inter, activation, out_dtype=torch.float32)
    got = h.index_select(0, idx).float()
    err = ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    ok = math.isfinite(err) and err <= VERIFY_TOL
    return ok, err


def run(args):
    """The `gated-up` subcommand: returns the exit status."""
    if args.plot_only:
        with open(args.plot_only) as f:
            result = json.load(f)
        os.makedirs(args.out, exist_ok=True)
        for path in plot(result, args.out):
            print(f"wrote {path}")
        return 0
    status = ready()
    if status:
        return status
    from . import triton_swiglu as triton_mod
    dtype = torch.bfloat16
    for attr in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, attr):
            setattr(torch._dynamo.config, attr, 64)
    compiled_fn = torch.compile(_swiglu_eager, dynamic=True)
    quack_gemm_act = optional_peer("quack", _load_quack)
    pipelines = PIPELINES + ((QUACK,) if quack_gemm_act is not None else ())

    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    torch.manual_seed(0)
    ceiling = cublas_ceiling(dtype)
    print(f"device: {props.name}; torch {torch.__version__}; triton {getattr(sys.modules.get('triton'), '__version__', '?')}; "
          f"cuBLAS 8192^3 bf16 ceiling this run: {ceiling:.0f} TFLOP/s", flush=True)

    rows, failed = [], []
    mib = float(1 << 20)
    hdr = ("| model | M | " + " | ".join(pipelines) + " | fused % ceiling | fused / Triton | fused / compiled "
           + ("| fused / quack " if QUACK in pipelines else "")
           + "| act MiB: " + " / ".join(SHORT[p] for p in pipelines) + " |")
    print(hdr)
    print("|" + " --- |" * (hdr.count("|") - 1), flush=True)
    for key in args.models:
        name, k, u, activation = GATED_UP_MODELS[key]
        w_stacked = (torch.randn(2 * u, k, device="cuda", dtype=torch.float32) / math.sqrt(k)).to(dtype)
        w_inter = ops.interleave_stacked(w_stacked)  # [gate; up] -> row 2j = up_j, 2j+1 = gate_j
        pipes = make_pipelines(w_stacked, w_inter, u, activation, triton_mod, compiled_fn, quack_gemm_act,
                               args.quack_tuned)
        for m in args.tokens:
            need = 4 * m * u * 2 * 2 + 3 * m * k * 2  # eager's peak twice over, plus inputs
            free, _ = torch.cuda.mem_get_info()
            if need > 0.8 * free:
                print(f"| {name} | {m} | skipped: needs ~{need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free |", flush=True)
                continue
            n_buf = max(1, min(64, math.ceil(3 * l2 / (m * k * 2))))
            xs = [torch.randn(m, k, device="cuda", dtype=dtype) for _ in range(n_buf)]
            flops = 2 * m * k * 2 * u
            point = {}
            for pname in pipelines:
                fn = pipes[pname]
                h = fn(xs[0])  # first call: compiles / autotunes where it applies
                if pname != MM:
                    ok, err = verify(pname, h, xs[0], w_inter, activation, m)
                    if not ok:
                        failed.append((name, m, pname, err))
                        print(f"FAILED verification: {name} M={m} {pname}: relative error {err:.3e} > {VERIFY_TOL}", flush=True)
                        break
                else:
                    err = None
                del h
                point[pname] = {"peak_act_bytes": peak_activation_bytes(fn, xs[0]), "rel_err": err}
            if failed:
                break
            if args.order == "interleaved":
                times, reps = time_cuda_rounds([pipes[p] for p in pipelines], xs, warmup=args.warmup,
                                               reps_time=args.reps_time)
                timed = {p: (ms, reps) for p, ms in zip(pipelines, times)}
            else:
                timed = {p: time_cuda(pipes[p], xs, warmup=args.warmup, reps_time=args.reps_time) for p in pipelines}
            for pname in pipelines:
                ms, reps = timed[pname]
                mem, err = point[pname]["peak_act_bytes"], point[pname]["rel_err"]
                point[pname].update(ms=ms, tflops=flops / (ms * 1e-3) / 1e12, reps=reps)
                rows.append({"model": key, "name": name, "K": k, "U": u, "M": m, "activation": activation,
                             "pipeline": pname, "median_ms": ms, "tflops": point[pname]["tflops"],
                             "peak_act_bytes": mem, "reps": reps, "rel_err_vs_fp32": err})
            if failed:
                break
            t = {p: point[p]["tflops"] for p in pipelines}
            print(f"| {name} | {m} | " + " | ".join(f"{t[p]:.0f}" for p in pipelines) +
                  f" | {100 * t[FUSED] / ceiling:.0f}% | {t[FUSED] / t[TRITON]:.2f} | {t[FUSED] / t[COMPILED]:.2f} | " +
                  (f"{t[FUSED] / t[QUACK]:.2f} | " if QUACK in t else "") +
                  " / ".join(f"{point[p]['peak_act_bytes'] / mib:.0f}" for p in pipelines) + " |", flush=True)
            del xs
        del w_stacked, w_inter, pipes
        torch.cuda.empty_cache()
        if failed:
            break

    os.makedirs(args.out, exist_ok=True)
    result = {
        "benchmark": "gated-up (python)", "device": props.name, "torch": torch.__version__,
        "triton": getattr(sys.modules.get("triton"), "__version__", None), "dtype": "bf16",
        "ceiling_tflops_cublas_8192": ceiling, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "method": "CUDA events per call, median; x rotated over >= 3x L2; memory = max_memory_allocated delta over one call",
        "order": args.order, "pipelines": list(pipelines), "quack_tuned": args.quack_tuned if quack_gemm_act else None,
        "rows": rows, "failed": [{"model": f[0], "M": f[1], "pipeline": f[2], "rel_err": f[3]} for f in failed],
    }
    path = os.path.join(args.out, "gated_up.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {path}")
    if rows and not args.no_plots:
        for p in plot(result, args.out):
            print(f"wrote {p}")
    return 1 if failed else 0


def plot(result, out_dir):
    """The three chart sets (TFLOP/s of every pipeline, blockfuse vs Triton, peak memory) from a
    result dict; returns the paths written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    models = list(dict.fromkeys(r["model"] for r in rows))
    names = {r["model"]: r["name"] for r in rows}
    title_tail = f"{result['device']}, bf16"
    paths = []

    def chart(fname, pipelines, value, ylabel, title, ceiling=None):
        fig, axes = plt.subplots(1, len(models), figsize=(4.6 * len(models), 4), squeeze=False)
        for ax, mk in zip(axes[0], models):
            for p in pipelines:
                pts = sorted((r["M"], value(r)) for r in rows if r["model"] == mk and r["pipeline"] == p)
                if pts:
                    color, ls = STYLE[p]
                    ax.plot([a for a, _ in pts], [b for _, b in pts], marker="o", ms=3, color=color, ls=ls, label=p)
            if ceiling:
                ax.axhline(ceiling, color="black", lw=0.8, ls=":", label="cuBLAS 8192³ (ceiling)")
            ax.set_xscale("log", base=2)
            ax.set_title(names[mk])
            ax.set_xlabel("tokens M")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            if value is _mib:
                ax.set_yscale("log", base=2)
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 3), fontsize=8)
        fig.suptitle(f"{title} ({title_tail})", fontsize=11)
        fig.tight_layout(rect=(0, 0.12, 1, 1))
        path = os.path.join(out_dir, fname)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)

    present = list(dict.fromkeys(r["pipeline"] for r in rows))
    chart("gated_up_tflops.png", present, lambda r: r["tflops"], "TFLOP/s (2·M·K·2U / time)",
          "Gated up-projection: TFLOP/s vs tokens", result.get("ceiling_tflops_cublas_8192"))
    chart("gated_up_tflops_fused_vs_triton.png", (TRITON, FUSED), lambda r: r["tflops"], "TFLOP/s",
          "blockfuse fused vs torch.mm + Triton SwiGLU")
    chart("gated_up_memory.png", present, _mib, "peak activation memory (MiB)",
          "Gated up-projection: peak activation memory vs tokens")
    return paths


def _mib(r):
    return r["peak_act_bytes"] / float(1 << 20)
