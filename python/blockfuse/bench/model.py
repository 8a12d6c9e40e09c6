"""`python -m blockfuse.bench model`: end-to-end, blockfuse.patch_model on a Hugging Face model.

Random-weight Hugging Face models of a real model's shape (fewer layers, to fit the time;
SDPA attention, bf16), unpatched vs patched (blockfuse.patch_model: fused MLPs and add+RMSNorms),
from one fp32 model built on the GPU with a fixed seed:
  * logits error: ‖logits − logits_fp32‖ / ‖logits_fp32‖ over 256 tokens, for each bf16 model;
  * prefill: median ms of a forward over T tokens (batch 1, no cache, logits of the last token
    only), and its peak memory beyond the weights (max_memory_allocated delta);
  * decode floor: the weights (all but the embedding table) over the measured copy bandwidth, the
    least time a batch-1 step can take whatever its kernels;
  * decode: tokens/s of `steps` greedy-fed steps (DynamicCache, eager) after a 128-token prompt,
    at each batch size; with --contexts, batch-1 decode after prompts of each length, eager
    (DynamicCache) and as a StaticCache step replayed in a CUDA graph (long-context decode, where
    attention reads the cache: the case --attention, patch_model(attention=True), is for);
    with --graphs also batch 1 through generate() with a StaticCache, which
    transformers compiles (torch.compile, CUDA graphs) itself (medians of 5: the host loop between
    replays makes single timings swing), and one StaticCache step captured in a CUDA graph by hand
    and replayed back to back (the GPU time of the kernels, without the host); --profile prints the
    kernels of a step.
"""
import copy
import json
import statistics
import time

import torch

from .common import capture_graph, copy_gbs, cuda_ms, meta, ready, rel
from .shapes import HF_MODELS


def build_fp32(name, layers, seed=0):
    import transformers as tf
    family, hidden, inter, heads, kv, head_dim, vocab = HF_MODELS[name]
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
    # vary by +-20 % (the same model measured 8.3 and 10.4 ms a step on an H100): medians of 5.
    t_long = statistics.median(timed(steps) for _ in range(5))
    t_short = statistics.median(timed(1) for _ in range(5))
    per = (t_long - t_short) / (steps - 1)  # the prefill and the first token cancel
    compiled = torch._dynamo.utils.counters["stats"]["unique_graphs"] > graphs_before
    return 1.0 / per, 1e3 * per, compiled


@torch.no_grad()
def decode_replay_ms(model, prompt=128, reps=30, graph=True):
    """GPU time of one batch-1 decode step (StaticCache, `prompt` cached tokens) captured in a CUDA graph
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
    from HBM at the device's copy bandwidth (common.copy_gbs). Returns (ms, weight bytes, bandwidth
    in bytes/s)."""
    weight_bytes = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if "embed_tokens" not in n)
    bw = copy_gbs() * 1e9
    return 1e3 * weight_bytes / bw, weight_bytes, bw


def measure(args):
    """The rows of the model table, one per model."""
    from .. import patch
    rows = []
    for name in args.models:
        t_build = time.perf_counter()
        m32 = build_fp32(name, args.layers)
        ref = copy.deepcopy(m32).to(torch.bfloat16)
        pat = copy.deepcopy(ref)
        patch.patch_model(pat, attention=getattr(args, "attention", False))
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
        for c in getattr(args, "contexts", []):
            ctx = {"context": c}
            try:
                (tu, su), (tp, sp) = decode(ref, 1, args.steps, prompt=c), decode(pat, 1, args.steps, prompt=c)
                ctx["eager_ms_per_step"] = {"unpatched": su, "patched": sp}
                print(f"| {name} | decode b=1 context {c} eager | {su:.2f} ms | {sp:.2f} ms | {su / sp:.3f}x |",
                      flush=True)
                mu, mp = decode_replay_ms(ref, prompt=c), decode_replay_ms(pat, prompt=c)
                ctx["graph_replay_ms_per_step"] = {"unpatched": mu, "patched": mp}
                print(f"| {name} | decode b=1 context {c} graph replay | {mu:.2f} ms | {mp:.2f} ms | "
                      f"{mu / mp:.3f}x |", flush=True)
            except Exception as e:  # report, do not stop the benchmark
                ctx["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                print(f"# context {c} failed: {ctx['error']}", flush=True)
            row.setdefault("decode_contexts", []).append(ctx)
            torch.cuda.empty_cache()
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


def run(a):
    """The `model` subcommand: returns the exit status."""
    status = ready()
    if status:
        return status
    info = meta()
    print(f"# {info}")
    print("| model | case | unpatched | patched | patched / unpatched speed | memory |")
    print("| --- | --- | --- | --- | --- | --- |")
    result = {**info, "benchmark": "model", "layers": a.layers, "attention_patched": a.attention,
              "rows": measure(a)}
    with open(a.json, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {a.json}")
    return 0
