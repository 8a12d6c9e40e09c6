"""`python -m blockfuse.bench memory-bound`: the memory-bound ops beside their strongest baselines,
in one process, one protocol.

  add-rmsnorm  residual_out = x + residual; out = residual_out * rsqrt(mean(residual_out^2) + eps) * w
               (fp32 math, one rounding), out in the dtype, FP8 e4m3 with a static per-tensor scale,
               or FP8 with a dynamic per-row scale (amax / 448):
                 blockfuse  torch.ops.blockfuse.add_rmsnorm / add_rmsnorm_fp8 (blockfuse.ops)
                 blockfuse-nopdl  the same with programmatic dependent launch off
                            (ops.set_programmatic_dependent_launch(False) for the point)
                 compile    torch.compile(fn, dynamic=False): one compiled graph per shape
                 liger      Liger-Kernel's fused_add_rms_norm_forward (dtype out; also writes rstd)
                 quack      quack's rmsnorm_fwd(x, w, residual=...) (dtype out; CuTe DSL)
  swiglu       out = silu(gate) * up from a stacked [M, 2U] tensor (Liger: separate gate and up [M, U],
               its API), dtype out / FP8 static / FP8 dynamic:
                 blockfuse  torch.ops.blockfuse.swiglu / swiglu_fp8 (and blockfuse-nopdl, as above)
                 compile    torch.compile(fn, dynamic=False)
                 liger      Liger-Kernel's swiglu_forward (dtype out)
Protocol: rows <= 32 timed per call from CUDA-graph replays of 20 calls (as the C++ benchmarks); 256 rows
from a graph cycling over rotated input sets (a torch call's CPU dispatch is longer than these kernels);
larger problems from 20 back-to-back calls between CUDA events, inputs rotated so L2 (50 MB) holds none.
With --rounds N every implementation of a point is timed N times, in an order rotated each round, and
the median is reported (each round's figure in us_rounds): the same kernel's time through torch moves by
up to 5 % with the caching allocator's state (H100), so peers within that margin are compared over
several rounds. Bytes = the minimum traffic. frac_copy divides by a 1 GiB device copy, frac_same by a
copy of the same bytes timed the same way. An implementation that cannot be imported is reported and
left out. Writes the JSON after every point, so a run cut short keeps what it measured.
"""
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from .common import GRAPH_ROWS, copy_gbs, optional_peer, ready, sets_for, time_batched, time_graph

EPS = 1e-6
FP8 = torch.float8_e4m3fn


def time_op(fn, rows, n_sets):
    """Rows <= 32: 20 calls on one input set in a graph (the decode protocol of the C++ benchmarks);
    up to 256 rows: a graph cycling over the rotation sets; larger: batched events (kernels >= 25 µs)."""
    if rows <= GRAPH_ROWS:
        return time_graph(fn, 3, 20)
    if rows <= 256:
        return time_graph(fn, 3, 20, n_sets, calls=max(20, n_sets))
    return time_batched(fn, n_sets)


def copy_us(nbytes, rows, n_sets):
    """A device copy of nbytes / 2 (read + written = nbytes), timed like the op."""
    n = max(4, nbytes // 4)  # int16 elements: 2 bytes each, so 2n bytes read and 2n written
    srcs = [torch.empty(n, dtype=torch.int16, device="cuda") for _ in range(n_sets)]
    dsts = [torch.empty_like(s) for s in srcs]
    return time_op(lambda i: dsts[i].copy_(srcs[i]), rows, n_sets)


# ---- the ops as a PyTorch user writes them (compiled per shape) ---------------------------------------
def norm_f32(x, res, w):
    h = x + res
    hf = h.float()
    return h, hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()


def add_rmsnorm_bf16(x, res, w):
    h, y = norm_f32(x, res, w)
    return h, y.to(x.dtype)


def add_rmsnorm_fp8s(x, res, w, inv_scale):
    h, y = norm_f32(x, res, w)
    return h, (y * inv_scale).clamp(-448.0, 448.0).to(FP8)


def quant_dyn(y):
    amax = y.abs().amax(-1, keepdim=True).clamp(min=1e-12)
    scale = amax / 448.0
    return (y / scale).clamp(-448.0, 448.0).to(FP8), scale


def add_rmsnorm_fp8d(x, res, w):
    h, y = norm_f32(x, res, w)
    q, s = quant_dyn(y)
    return h, q, s


def swiglu_f32(gu):
    g, u = gu.chunk(2, dim=-1)
    return F.silu(g.float()) * u.float()


def swiglu_bf16(gu):
    return swiglu_f32(gu).to(gu.dtype)


def swiglu_fp8s(gu, inv_scale):
    return (swiglu_f32(gu) * inv_scale).clamp(-448.0, 448.0).to(FP8)


def swiglu_fp8d(gu):
    return quant_dyn(swiglu_f32(gu))


def _liger():
    from liger_kernel.ops.fused_add_rms_norm import fused_add_rms_norm_forward
    from liger_kernel.ops.swiglu import swiglu_forward
    return fused_add_rms_norm_forward, swiglu_forward


def _quack():
    from quack.rmsnorm import rmsnorm_fwd
    return rmsnorm_fwd


def load_blockfuse():
    try:
        from .. import ops as bo
        if not bo.available():
            print(f"blockfuse ops not available: {bo.load_error()}", file=sys.stderr)
            return None
        return bo
    except Exception as e:  # noqa: BLE001
        print(f"blockfuse not importable: {e!r}", file=sys.stderr)
        return None


def timed_rounds(todo, rounds, time_one):
    """{impl: [µs of each round]} for todo = [(impl, fn)]: every implementation timed once a round by
    time_one(impl, fn), the order rotated by one each round (so none always runs first or after the
    same neighbour), in todo's order. An implementation whose timing fails once (None) is left out."""
    times = {impl: [] for impl, _ in todo}
    for r in range(rounds):
        k = r % max(1, len(todo))
        for impl, fn in todo[k:] + todo[:k]:
            if times[impl] is None:
                continue
            us = time_one(impl, fn)
            times[impl] = None if us is None else times[impl] + [us]
    return {impl: t for impl, t in times.items() if t}


def run(a):
    """The `memory-bound` subcommand: returns the exit status."""
    status = ready(need_ops=False)
    if status:
        return status
    torch._dynamo.config.cache_size_limit = 256
    ints = lambda s: [int(v) for v in s.split(",") if v]  # noqa: E731
    rows_list, impls, outs = ints(a.rows), a.impls.split(","), a.outs.split(",")
    compile_rows = set(ints(a.compile_rows) or rows_list)
    dev = torch.cuda.get_device_name()
    bw = copy_gbs()
    res = {"device": dev, "torch": torch.__version__, "copy_gbs": bw, "rows": []}
    bo = load_blockfuse() if {"blockfuse", "blockfuse-nopdl"} & set(impls) else None
    bf_impls = [i for i in ("blockfuse", "blockfuse-nopdl") if i in impls]
    liger_norm, liger_sw = (optional_peer("liger", _liger) if "liger" in impls else None) or (None, None)
    quack_norm = optional_peer("quack", _quack) if "quack" in impls else None
    if bo is not None and hasattr(bo, "set_programmatic_dependent_launch"):
        res["pdl_default"] = bo.set_programmatic_dependent_launch(True)
    elif "blockfuse-nopdl" in bf_impls:
        bf_impls.remove("blockfuse-nopdl")  # a library without the switch
    bf = torch.bfloat16
    t0 = time.time()

    def record(op, shape, m, out, impl, nbytes, us_rounds, same_us):
        us = statistics.median(us_rounds)
        gbs = nbytes / (us * 1e3)
        row = {"op": op, "shape": shape, "rows": m, "out": out, "impl": impl, "bytes": nbytes, "us": us,
               "us_rounds": us_rounds, "gbs": gbs, "frac_copy": gbs / bw, "same_size_copy_us": same_us,
               "frac_same": same_us / us}
        res["rows"].append(row)
        print(f"{op:11} {shape:8} {m:>6} {out:5} {impl:10} {us:9.2f} us {gbs:6.0f} GB/s "
              f"{100 * gbs / bw:5.1f} %copy {100 * same_us / us:5.1f} %same  [{time.time() - t0:.0f} s]", flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)

    def time_one(op, shape, m, out, impl, fn, n_sets):
        nopdl = impl == "blockfuse-nopdl"
        if nopdl:
            bo.set_programmatic_dependent_launch(False)
        try:
            return time_op(fn, m, n_sets)
        except Exception as e:  # noqa: BLE001 — one failing baseline must not end the sweep
            print(f"{op} {shape} {m} {out} {impl}: FAILED {e!r}", file=sys.stderr)
            return None
        finally:
            if nopdl:
                bo.set_programmatic_dependent_launch(True)

    # Times the point's implementations (todo: [(impl, fn)]) over a.rounds rounds and records each
    # that never failed.
    def run_point(op, shape, m, out, nbytes, n_sets, same, todo):
        times = timed_rounds(todo, a.rounds, lambda impl, fn: time_one(op, shape, m, out, impl, fn, n_sets))
        for impl, us_rounds in times.items():
            record(op, shape, m, out, impl, nbytes, us_rounds, same)

    inv_scale = torch.tensor(448.0 / 2.5, device="cuda")
    scale = torch.tensor(2.5 / 448.0, device="cuda")
    if "add-rmsnorm" in a.ops:
        for h in ints(a.hidden):
            w = torch.randn(h, dtype=bf, device="cuda")
            for m in rows_list:
                for out in outs:
                    ob = {"bf16": 2 * m * h, "fp8s": m * h, "fp8d": m * h + 4 * m}[out]
                    nb = 3 * m * h * 2 + 2 * h + ob
                    n_sets = 1 if m <= GRAPH_ROWS else sets_for(nb)
                    xs = [torch.rand(m, h, dtype=bf, device="cuda") * 2 - 1 for _ in range(n_sets)]
                    rs = [torch.rand(m, h, dtype=bf, device="cuda") * 2 - 1 for _ in range(n_sets)]
                    same = copy_us(nb, m, n_sets)
                    sh = f"H={h}"
                    todo = []
                    if bo is not None:
                        if out == "bf16":
                            f = lambda i: bo.add_rmsnorm(xs[i], rs[i], w, EPS)  # noqa: E731
                        elif out == "fp8s":
                            f = lambda i: bo.add_rmsnorm_fp8(xs[i], rs[i], w, scale, EPS)  # noqa: E731
                        else:
                            f = lambda i: bo.add_rmsnorm_fp8(xs[i], rs[i], w, None, EPS)  # noqa: E731
                        todo += [(impl, f) for impl in bf_impls]
                    if "compile" in impls and m in compile_rows:
                        if out == "bf16":
                            c = torch.compile(add_rmsnorm_bf16, dynamic=False)
                            f = lambda i, c=c: c(xs[i], rs[i], w)  # noqa: E731
                        elif out == "fp8s":
                            c = torch.compile(add_rmsnorm_fp8s, dynamic=False)
                            f = lambda i, c=c: c(xs[i], rs[i], w, inv_scale)  # noqa: E731
                        else:
                            c = torch.compile(add_rmsnorm_fp8d, dynamic=False)
                            f = lambda i, c=c: c(xs[i], rs[i], w)  # noqa: E731
                        todo.append(("compile", f))
                    if liger_norm is not None and out == "bf16":
                        todo.append(("liger", lambda i: liger_norm(xs[i], rs[i], w, EPS, 0.0, "llama")))
                    if quack_norm is not None and out == "bf16":
                        todo.append(("quack", lambda i: quack_norm(xs[i], w, residual=rs[i], eps=EPS)))
                    run_point("add-rmsnorm", sh, m, out, nb, n_sets, same, todo)
                    del xs, rs, todo
                    torch.cuda.empty_cache()
    if "swiglu" in a.ops:
        for u in ints(a.u):
            for m in rows_list:
                for out in outs:
                    ob = {"bf16": 2 * m * u, "fp8s": m * u, "fp8d": m * u + 4 * m}[out]
                    nb = 2 * m * u * 2 + ob
                    n_sets = 1 if m <= GRAPH_ROWS else sets_for(nb)
                    gus = [torch.randn(m, 2 * u, dtype=bf, device="cuda") for _ in range(n_sets)]
                    same = copy_us(nb, m, n_sets)
                    sh = f"U={u}"
                    todo = []
                    if bo is not None:
                        if out == "bf16":
                            f = lambda i: bo.swiglu(gus[i])  # noqa: E731
                        elif out == "fp8s":
                            f = lambda i: bo.swiglu_fp8(gus[i], scale)  # noqa: E731
                        else:
                            f = lambda i: bo.swiglu_fp8(gus[i], None)  # noqa: E731
                        todo += [(impl, f) for impl in bf_impls]
                    if "compile" in impls and m in compile_rows:
                        if out == "bf16":
                            c = torch.compile(swiglu_bf16, dynamic=False)
                            f = lambda i, c=c: c(gus[i])  # noqa: E731
                        elif out == "fp8s":
                            c = torch.compile(swiglu_fp8s, dynamic=False)
                            f = lambda i, c=c: c(gus[i], inv_scale)  # noqa: E731
                        else:
                            c = torch.compile(swiglu_fp8d, dynamic=False)
                            f = lambda i, c=c: c(gus[i])  # noqa: E731
                        todo.append(("compile", f))
                    if liger_sw is not None and out == "bf16":
                        gs = [g[:, :u].contiguous() for g in gus]
                        us_ = [g[:, u:].contiguous() for g in gus]
                        todo.append(("liger", lambda i: liger_sw(gs[i], us_[i])))
                    run_point("swiglu", sh, m, out, nb, n_sets, same, todo)
                    del gus, todo
                    torch.cuda.empty_cache()
    print(f"memory-bound: {dev}, torch {torch.__version__}, copy {bw:.0f} GB/s, {time.time() - t0:.0f} s")
    return 0
