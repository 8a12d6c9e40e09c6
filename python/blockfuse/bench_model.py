"""End-to-end benchmark of blockfuse.patch_model, and the per-call overhead of the ops.

    python -m blockfuse.bench model [--models llama3-8b,gemma2-9b] [--layers 8] [--prefill 512,2048,8192]
                                    [--batches 1,8,32] [--steps 32] [--graphs] [--json FILE]
    python -m blockfuse.bench overhead [--json FILE]

model: random-weight Hugging Face models of a real model's shape (fewer layers, to fit the time;
SDPA attention, bf16), unpatched vs patched (blockfuse.patch_model: fused MLPs and add+RMSNorms),
from one fp32 model built on the GPU with a fixed seed:
  * logits error: ‖logits − logits_fp32‖ / ‖logits_fp32‖ over 256 tokens, for each bf16 model;
  * prefill: median ms of a forward over T tokens (batch 1, no cache, logits of the last token
    only), and its peak memory beyond the weights (max_memory_allocated delta);
  * decode floor: the weights (all but the embedding table) over the measured copy bandwidth, the
    least time a batch-1 step can take whatever its kernels;
  * decode: tokens/s of `steps` greedy-fed steps (DynamicCache, eager) after a 128-token prompt,
    at each batch size; with --graphs also batch 1 through generate() with a StaticCache, which
    transformers compiles (torch.compile, CUDA graphs) itself (medians of 5: the host loop between
    replays makes single timings swing), and one StaticCache step captured in a CUDA graph by hand
    and replayed back to back (the GPU time of the kernels, without the host); --profile prints the
    kernels of a step.
overhead: µs per call, host-side (a tight loop of 2000 calls, synchronised once), of each op on a
tiny problem against torch.nn.functional.linear on one of the same size, eager, under no_grad —
the cost a decode step pays per op when the kernels themselves take ~2-5 µs.
"""
import copy
import json
import math
import statistics
import sys
import time

import torch

from . import ops
from .bench import capture_graph, copy_gbs

MODELS = {
    # name: (family, hidden, intermediate, heads, kv_heads, head_dim, vocab)
    "llama3-8b": ("llama", 4096, 14336, 32, 8, 128, 128256),
    "gemma2-9b": ("gemma2", 3584, 14336, 16, 8, 256, 256000),
}


def build_fp32(name, layers, seed=0):
    import transformers as tf
    family, hidden, inter, heads, kv, head_dim, vocab = MODELS[name]
    common = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                  max_position_embeddings=16384, tie_word_embeddings=False)
    if family == "llama":
        cfg = tf.LlamaConfig(hidden_act="silu", **common)
        cls = tf.LlamaForCausalLM
    else:
        cfg = tf.Gemma2Config(hidden_activation="gelu_pytorch_tanh", sliding_window=4096, **common)
        cls = tf.Gemma2ForCausalLM
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = cls(cfg).eval()
    with torch.no_grad():  # RMSNorm gains away from their init (1 or 0) so that they matter
        for n, p in model.named_parameters():
            if "norm" in n and p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def cuda_ms(fn, reps):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


@torch.no_grad()
def prefill(model, t, reps=3):
    ids = torch.randint(0, model.config.vocab_size, (1, t), device="cuda")
    fn = lambda: model(input_ids=ids, use_cache=False, logits_to_keep=1)  # noqa: E731
    fn()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    return cuda_ms(fn, reps), peak


@torch.no_grad()
def decode(model, batch, steps, prompt=128):
    import transformers as tf
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt), device="cuda")
    cache = tf.DynamicCache(config=model.config)
    out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    tok = out.logits[:, -1:].argmax(-1)
    for _ in range(2):  # warm-up steps (cache growth, first-call setup)
        out = model(input_ids=tok, past_key_values=cache, use_cache=True)
        tok = out.logits[:, -1:].argmax(-1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        out = model(input_ids=tok, past_key_values=cache, use_cache=True)
        tok = out.logits[:, -1:].argmax(-1)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    return batch * steps / dt, 1e3 * dt / steps


@torch.no_grad()
def decode_graphs(model, steps, prompt=128):
    """Batch-1 decode with a StaticCache through generate(), which compiles the forward itself
    (transformers' auto-compile: torch.compile fullgraph, mode="reduce-overhead", i.e. CUDA graphs)
    where it supports it. Returns (tokens/s, ms per step, compiled?)."""
    ids = torch.randint(0, model.config.vocab_size, (1, prompt), device="cuda")
    kw = dict(do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(ids), cache_implementation="static")
    graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]

    def gen(n):
        model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw)
        torch.cuda.synchronize()

    def timed(n):
        t0 = time.perf_counter()
        gen(n)
        return time.perf_counter() - t0

    gen(steps)  # compile and capture
    gen(steps)
    # The host runs generate()'s loop between replays and synchronises every step, so single timings
    # vary by +-20 % (session 5 run4: the same model 8.3 and 10.4 ms a step): medians of 5.
    t_long = statistics.median(timed(steps) for _ in range(5))
    t_short = statistics.median(timed(1) for _ in range(5))
    per = (t_long - t_short) / (steps - 1)  # the prefill and the first token cancel
    compiled = torch._dynamo.utils.counters["stats"]["unique_graphs"] > graphs_before
    return 1.0 / per, 1e3 * per, compiled


@torch.no_grad()
def decode_replay_ms(model, prompt=128, reps=30, graph=True):
    """GPU time of one batch-1 decode step (StaticCache, 128 cached tokens) captured in a CUDA graph
    by hand and replayed back to back: the kernels alone, without generate()'s host loop."""
    import transformers as tf
    dev = next(model.parameters()).device
    ids = torch.randint(0, model.config.vocab_size, (1, prompt), device=dev)
    # transformers 5.17's StaticCache counts the tokens it has written on the device and ignores
    # cache_position (5.23 writes at cache_position), so every replay takes the next slot: room for
    # all of them (the warm-up steps, one check, the timed replays).
    cache = tf.StaticCache(config=model.config, max_cache_len=prompt + reps + 16)
    out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1,
                cache_position=torch.arange(prompt, device=dev))
    tok = out.logits[:, -1:].argmax(-1)
    pos = torch.tensor([prompt], device=dev)

    def step():
        return model(input_ids=tok, past_key_values=cache, use_cache=True, cache_position=pos).logits

    if not graph:  # (the CPU tests run the step eagerly)
        return step()
    g = capture_graph(step)
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


@torch.no_grad()
def profile_decode(model, label, batch=1, prompt=128, steps=3):
    """Prints the CUDA kernels of `steps` decode steps by GPU time, and GPU vs wall time per step."""
    import transformers as tf
    from torch.profiler import ProfilerActivity, profile
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt), device="cuda")
    cache = tf.DynamicCache(config=model.config)
    out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    tok = out.logits[:, -1:].argmax(-1)
    for _ in range(2):
        out = model(input_ids=tok, past_key_values=cache, use_cache=True)
        tok = out.logits[:, -1:].argmax(-1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            out = model(input_ids=tok, past_key_values=cache, use_cache=True)
            tok = out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / steps * 1e3
    # Kernels only: the aten ops carry their kernels' device time too, so summing both counts twice.
    events = [e for e in prof.key_averages() if getattr(e, "self_device_time_total", 0) > 0
              and e.device_type == torch.autograd.DeviceType.CUDA]
    events.sort(key=lambda e: -e.self_device_time_total)
    gpu = sum(e.self_device_time_total for e in events) / steps / 1e3
    print(f"# profile {label} b={batch}: GPU {gpu:.2f} ms per step, wall {wall:.2f} ms (profiled)", flush=True)
    top = []
    for e in events[:10]:
        ms = e.self_device_time_total / steps / 1e3
        top.append({"kernel": e.key[:90], "ms_per_step": ms, "calls_per_step": e.count / steps})
        print(f"#   {ms:7.3f} ms  x{e.count / steps:5.0f}  {e.key[:90]}", flush=True)
    return {"gpu_ms_per_step": gpu, "wall_ms_per_step_profiled": wall, "top": top}


@torch.no_grad()
def decode_floor_ms(model):
    """The least time a batch-1 decode step can take: every weight but the embedding table read once
    from HBM at the device's copy bandwidth (bench.copy_gbs). Returns (ms, weight bytes, bandwidth
    in bytes/s)."""
    weight_bytes = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if "embed_tokens" not in n)
    bw = copy_gbs() * 1e9
    return 1e3 * weight_bytes / bw, weight_bytes, bw


def run_model(args):
    import blockfuse
    rows = []
    for name in args.models:
        t_build = time.perf_counter()
        m32 = build_fp32(name, args.layers)
        ref = copy.deepcopy(m32).to(torch.bfloat16)
        pat = copy.deepcopy(ref)
        blockfuse.patch_model(pat)
        ids = torch.randint(0, m32.config.vocab_size, (1, 256), device="cuda")
        with torch.no_grad():
            l32 = m32(ids).logits.float()
            err = {"unpatched": rel(ref(ids).logits, l32), "patched": rel(pat(ids).logits, l32)}
        del m32, l32
        torch.cuda.empty_cache()
        print(f"# {name} ({args.layers} layers): built in {time.perf_counter() - t_build:.0f} s; logits vs fp32: "
              f"unpatched {err['unpatched']:.3e}, patched {err['patched']:.3e}", flush=True)
        row = {"model": name, "layers": args.layers, "logits_rel_err": err, "prefill": [], "decode": []}
        floor, wbytes, bw = decode_floor_ms(ref)
        row["decode_floor"] = {"ms": floor, "weight_bytes": wbytes, "copy_bytes_per_s": bw}
        print(f"# decode floor (batch 1, weights read once): {wbytes / 1e9:.2f} GB at {bw / 1e12:.2f} TB/s = "
              f"{floor:.2f} ms per step", flush=True)
        for t in args.prefill:
            (mu, pu), (mp, pp) = prefill(ref, t), prefill(pat, t)
            row["prefill"].append({"tokens": t, "ms": {"unpatched": mu, "patched": mp},
                                   "peak_bytes": {"unpatched": pu, "patched": pp}})
            print(f"| {name} | prefill {t} | {mu:.1f} ms | {mp:.1f} ms | {mu / mp:.3f}x | peak {pu / 2**20:.0f} / "
                  f"{pp / 2**20:.0f} MiB ({pp / pu:.2f}x) |", flush=True)
        for b in args.batches:
            (tu, su), (tp, sp) = decode(ref, b, args.steps), decode(pat, b, args.steps)
            row["decode"].append({"batch": b, "mode": "eager", "tok_s": {"unpatched": tu, "patched": tp},
                                  "ms_per_step": {"unpatched": su, "patched": sp}})
            print(f"| {name} | decode b={b} eager | {tu:.0f} tok/s ({su:.2f} ms) | {tp:.0f} tok/s ({sp:.2f} ms) | "
                  f"{tp / tu:.3f}x |", flush=True)
        if args.graphs:
            try:
                mu, mp = decode_replay_ms(ref), decode_replay_ms(pat)
                row["decode"].append({"batch": 1, "mode": "graph replay (GPU time)", "ms_per_step":
                                      {"unpatched": mu, "patched": mp}})
                print(f"| {name} | decode b=1 graph replay (GPU time; floor {floor:.2f} ms) | {mu:.2f} ms | "
                      f"{mp:.2f} ms | {mu / mp:.3f}x |", flush=True)
            except Exception as e:  # report, do not stop the benchmark
                row["graph_replay_error"] = f"{type(e).__name__}: {str(e)[:300]}"
                print(f"# graph replay failed: {row['graph_replay_error']}", flush=True)
        if args.profile:
            row["profile"] = {label: profile_decode(m, label) for label, m in (("unpatched", ref), ("patched", pat))}
        if args.graphs:
            res = {}
            for label, m in (("unpatched", ref), ("patched", pat)):
                try:
                    res[label] = decode_graphs(m, args.steps)
                except Exception as e:  # report, do not stop the benchmark
                    res[label] = None
                    row.setdefault("graphs_error", {})[label] = f"{type(e).__name__}: {str(e)[:300]}"
                    print(f"# graphs ({label}) failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
                torch._dynamo.reset()
            if all(res.values()):
                (tu, su, cu), (tp, sp, cp) = res["unpatched"], res["patched"]
                mode = "static+compiled" if cu and cp else "static (not compiled)"
                row["decode"].append({"batch": 1, "mode": mode, "tok_s": {"unpatched": tu, "patched": tp},
                                      "ms_per_step": {"unpatched": su, "patched": sp}})
                print(f"| {name} | decode b=1 {mode} | {tu:.0f} tok/s ({su:.2f} ms) | {tp:.0f} tok/s "
                      f"({sp:.2f} ms) | {tp / tu:.3f}x |", flush=True)
        rows.append(row)
        del ref, pat
        torch.cuda.empty_cache()
    return rows


def host_us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


@torch.no_grad()
def run_overhead():
    from . import nn as bnn
    bf = torch.bfloat16
    x = torch.randn(1, 64, device="cuda", dtype=bf)
    w = torch.randn(64, 64, device="cuda", dtype=bf)
    w2 = torch.randn(128, 64, device="cuda", dtype=bf)
    g = torch.randn(64, device="cuda", dtype=bf)
    gu = torch.randn(1, 128, device="cuda", dtype=bf)
    mlp = bnn.GatedMLP(64, 64, dtype=bf, device="cuda")
    B = torch.ops.blockfuse
    cases = {
        "F.linear [1,64]x[64,64]": lambda: torch.nn.functional.linear(x, w),
        "torch.add [1,64]": lambda: torch.add(x, x),
        "ops.gated_up M=1 K=U=64": lambda: ops.gated_up(x, w2),
        "torch.ops.blockfuse.gated_up (packet)": lambda: B.gated_up(x, w2),
        "GatedMLP.gate_up (Parameter weight)": lambda: mlp.gate_up(x),
        "ops.rmsnorm 1x64": lambda: ops.rmsnorm(x, g),
        "ops.add_rmsnorm 1x64": lambda: ops.add_rmsnorm(x, x, g),
        "ops.swiglu 1x128": lambda: ops.swiglu(gu),
        "ops.decode_gemm [1,64]x[64,64]": lambda: ops.decode_gemm(x, w),
    }
    try:
        from transformers.models.llama.modeling_llama import LlamaRMSNorm
        hf = LlamaRMSNorm(64).to("cuda", bf)
        cases["HF LlamaRMSNorm 1x64 (replaced)"] = lambda: hf(x)
        cases["HF add + LlamaRMSNorm 1x64 (replaced)"] = lambda: hf(x + x)
    except ImportError:
        pass
    res = {k: host_us(f) for k, f in cases.items()}
    lin = res["F.linear [1,64]x[64,64]"]
    print("| call (eager, no_grad, bf16) | µs per call | vs F.linear |")
    print("| --- | --- | --- |")
    for k, v in res.items():
        print(f"| {k} | {v:.2f} | {v / lin:.2f}x |")
    return res


def main(argv):
    import argparse
    p = argparse.ArgumentParser(prog="python -m blockfuse.bench")
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("model", help="patched vs unpatched Hugging Face model: prefill, decode, memory, logits error")
    m.add_argument("--models", default="llama3-8b,gemma2-9b", help=f"from: {','.join(MODELS)}")
    m.add_argument("--layers", type=int, default=8)
    m.add_argument("--prefill", default="512,2048,8192")
    m.add_argument("--batches", default="1,8,32")
    m.add_argument("--steps", type=int, default=32)
    m.add_argument("--graphs", action="store_true", help="also batch-1 decode with StaticCache + CUDA graphs")
    m.add_argument("--profile", action="store_true", help="print the kernels of a batch-1 decode step")
    m.add_argument("--json", default="bench_model.json")
    o = sub.add_parser("overhead", help="µs per call of each op on a tiny problem vs F.linear")
    o.add_argument("--json", default="bench_overhead.json")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device found: nothing was measured", file=sys.stderr)
        return 2
    if not ops.available():
        print(f"blockfuse extension not available: {ops.load_error()}", file=sys.stderr)
        return 2
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        import transformers
        meta["transformers"] = transformers.__version__
    except ImportError:
        pass
    if a.command == "overhead":
        result = {**meta, "benchmark": "per-call overhead", "us_per_call": run_overhead()}
    else:
        bad = [x for x in a.models.split(",") if x not in MODELS]
        if bad:
            p.error(f"unknown model(s) {bad}; choose from {list(MODELS)}")
        a.models = [x for x in a.models.split(",") if x]
        a.prefill = [int(t) for t in a.prefill.split(",") if t]
        a.batches = [int(b) for b in a.batches.split(",") if b]
        print(f"# {meta}")
        print("| model | case | unpatched | patched | patched / unpatched speed | memory |")
        print("| --- | --- | --- | --- | --- | --- |")
        result = {**meta, "benchmark": "model", "layers": a.layers, "rows": run_model(a)}
    with open(a.json, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {a.json}")
    return 0
