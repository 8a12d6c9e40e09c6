"""`python -m blockfuse.bench <subcommand> [options]`: the front of blockfuse's PyTorch-side benchmarks.

It parses the command line without importing torch (so `--help` works anywhere), then imports the
subcommand's module and runs it. A benchmark without a CUDA device (or, where it times blockfuse's
ops, without the compiled ops) or without torch says so and exits with status 2; one whose result is
wrong exits 1.
"""
import argparse
import importlib
import sys

from .shapes import (GATED_UP_MODELS, GATED_UP_TOKENS, HF_MODELS, LOSS_IMPLS, LOSS_VOCABS, MLP_SHAPES, TRAIN_MLP_IMPLS,
                     TRAIN_VARIANTS)

# subcommand -> module of this package (its run(args) returns the exit status)
MODULES = {
    "gated-up": "gated_up",
    "gated-up-fp8": "gated_up_fp8",
    "fused-mlp": "fused_mlp",
    "sparse-prefill": "sparse_prefill",
    "model": "model",
    "overhead": "overhead",
    "torch-baselines": "torch_baselines",
    "memory-bound": "memory_bound",
    "sdpa": "sdpa",
    "decode-attention": "decode_attention",
    "attention-backward": "attention_backward",
    "train-mlp": "train_mlp",
    "train": "train",
    "loss": "loss",
}


def _ints(s):
    return [int(v) for v in s.split(",") if v]


def _names(s):
    return [v for v in s.split(",") if v]


def parser():
    p = argparse.ArgumentParser(
        prog="python -m blockfuse.bench",
        description="blockfuse's kernels measured from PyTorch, beside what a PyTorch user runs otherwise "
                    "(one GPU; each subcommand verifies before it times and can write JSON).")
    sub = p.add_subparsers(dest="command", required=True, metavar="<subcommand>")

    g = sub.add_parser("gated-up", help="TFLOP/s and peak activation memory of the gated up-projection pipelines")
    g.add_argument("--models", default=",".join(GATED_UP_MODELS), help=f"comma-separated, from: {','.join(GATED_UP_MODELS)}")
    g.add_argument("--tokens", default=",".join(map(str, GATED_UP_TOKENS)), help="token counts M, comma-separated")
    g.add_argument("--warmup", type=int, default=3)
    g.add_argument("--reps-time", type=float, default=0.3, help="seconds of repetitions per pipeline and point (10..100 reps)")
    g.add_argument("--order", choices=("interleaved", "sequential"), default="interleaved",
                   help="a point's pipelines timed in rounds, each once a round in an order rotated every round "
                        "(interleaved, the default), or each pipeline's repetitions in turn (sequential)")
    g.add_argument("--out", default="blockfuse-bench", help="folder for gated_up.json and the PNG charts")
    g.add_argument("--quick", action="store_true", help="Llama-3 8B at 512 and 4096 tokens only")
    g.add_argument("--no-plots", action="store_true", help="write the JSON only")
    g.add_argument("--quack-tuned", action="store_true",
                   help="let quack's gemm_act autotune each shape (where quack is importable; default: its untuned config)")
    g.add_argument("--plot-only", metavar="JSON", help="redraw the charts from a gated_up.json (no GPU needed)")

    q = sub.add_parser("gated-up-fp8", help="the FP8 gated up-projection vs torch._scaled_mm (+ swiglu); Hopper")
    q.add_argument("--shapes", default="8b,70b", help=f"from: {','.join(MLP_SHAPES)}")
    q.add_argument("--tokens", default="1024,4096,16384")
    q.add_argument("--json")

    f = sub.add_parser("fused-mlp", help="the fused decode MLP (dense and sparse) vs torch's three GEMMs")
    f.add_argument("--shapes", default="8b,70b", help=f"from: {','.join(MLP_SHAPES)}")
    f.add_argument("--rows", default="1,4,16,32", help="rows per call, each 1..32")
    f.add_argument("--json")

    sp = sub.add_parser("sparse-prefill", help="SparseGatedMLP's gathered prefill path vs per-32-row and dense")
    sp.add_argument("--shapes", default="8b,70b", help=f"from: {','.join(MLP_SHAPES)}")
    sp.add_argument("--tokens", default="33,64,128,512,4096")
    sp.add_argument("--json")

    m = sub.add_parser("model", help="patched vs unpatched Hugging Face model: prefill, decode, memory, logits error")
    m.add_argument("--models", default=",".join(HF_MODELS), help=f"from: {','.join(HF_MODELS)}")
    m.add_argument("--layers", type=int, default=8)
    m.add_argument("--prefill", default="512,2048,8192")
    m.add_argument("--batches", default="1,8,32")
    m.add_argument("--steps", type=int, default=32)
    m.add_argument("--graphs", action="store_true", help="also batch-1 decode with StaticCache + CUDA graphs")
    m.add_argument("--profile", action="store_true", help="print the kernels of a batch-1 decode step")
    m.add_argument("--attention", action="store_true",
                   help="patch the attention too (patch_model(attention=True): the blockfuse backend)")
    m.add_argument("--contexts", default="",
                   help="batch-1 decode after prompts of these lengths (eager DynamicCache steps, and a "
                        "StaticCache step replayed in a CUDA graph), e.g. 512,2048,8192,32768")
    m.add_argument("--json", default="bench_model.json")

    o = sub.add_parser("overhead", help="µs per call of each op on a tiny problem vs F.linear")
    o.add_argument("--json", default="bench_overhead.json")

    t = sub.add_parser("torch-baselines", help="torch eager / torch.compile / F.linear on the shapes of "
                                               "`blockfuse bench add-rmsnorm|swiglu|decode-gemm`")
    t.add_argument("--quick", action="store_true", help="fewer shapes and row counts")
    t.add_argument("--json")

    mb = sub.add_parser("memory-bound", help="add_rmsnorm and swiglu beside torch.compile, Liger and quack, one protocol")
    mb.add_argument("--ops", default="add-rmsnorm,swiglu")
    mb.add_argument("--hidden", default="4096,8192,16384", help="H for add-rmsnorm")
    mb.add_argument("--u", default="4096,14336,16384,28672", help="U for swiglu")
    mb.add_argument("--rows", default="1,8,32,256,2048,8192,32768")
    mb.add_argument("--impls", default="blockfuse,blockfuse-nopdl,compile,liger,quack")
    mb.add_argument("--outs", default="bf16,fp8s,fp8d")
    mb.add_argument("--compile-rows", default="", help="rows for torch.compile (default: --rows)")
    mb.add_argument("--rounds", type=int, default=1,
                    help="time each implementation of a point N times in rotated order; report the median")
    mb.add_argument("--json")

    s = sub.add_parser("sdpa", help="PyTorch SDPA's flash and cuDNN backends and FlashAttention-4 (when "
                                    "staged) beside ops.attention (the shapes of `blockfuse bench attention`)")
    s.add_argument("--s", default="512,1024,4096,16384", help="sequence lengths")
    s.add_argument("--d", default="128,64", help="head dims")
    s.add_argument("--hkv", default="32,8", help="KV heads (32 query heads)")
    s.add_argument("--reps", type=int, default=10)
    s.add_argument("--order", choices=("interleaved", "sequential"), default="interleaved",
                   help="a point's implementations timed in rounds, each once a round in an order rotated every "
                        "round (interleaved, the default), or each one's repetitions in turn (sequential)")
    s.add_argument("--graph-below", type=float, default=300.0, metavar="US",
                   help="also time in a CUDA graph where an eager call measures under this many µs (0: never)")
    s.add_argument("--json")

    da = sub.add_parser("decode-attention", help="decode attention against a KV cache (contiguous, paged) vs SDPA "
                                                 "flash / cuDNN and FlashAttention-4; --fused: the fused decode step")
    da.add_argument("--b", default="1,8,32,128", help="batch sizes")
    da.add_argument("--s", default="1024,8192,32768,131072", help="cache lengths")
    da.add_argument("--hkv", default="8,1", help="KV heads (32 query heads, D 128)")
    da.add_argument("--max-gib", type=float, default=40.0, help="skip points whose caches need more (GiB)")
    da.add_argument("--fused", action="store_true", help="B = 1: decode_attention_with_kvcache vs rotary + "
                                                         "index_copy_ + decode_attention")
    da.add_argument("--plot", metavar="PNG", help="a chart of the fraction of copy bandwidth")
    da.add_argument("--json")

    ab = sub.add_parser("attention-backward", help="attention forward + backward (training) TFLOP/s vs SDPA flash / "
                                                   "cuDNN and FlashAttention-4, B 2 (--batch), Hq 32, bf16")
    ab.add_argument("--d", default="128,64", help="head dims")
    ab.add_argument("--s", default="1024,4096,16384", help="sequence lengths")
    ab.add_argument("--hkv", default="32,8", help="KV heads (32 query heads)")
    ab.add_argument("--batch", type=int, default=2, help="sequences a point")
    ab.add_argument("--reps", type=int, default=10)
    ab.add_argument("--order", choices=("interleaved", "sequential"), default="interleaved",
                    help="a point's implementations timed in rounds, each once a round in an order rotated every "
                         "round (interleaved, the default), or each one's repetitions in turn (sequential)")
    ab.add_argument("--graph-below", type=float, default=1000.0, metavar="US",
                    help="also time in a CUDA graph where a point's fastest eager step measures under this many µs "
                         "(0: never)")
    ab.add_argument("--json")

    tm = sub.add_parser("train-mlp", help="gated MLP forward + backward (training) vs eager, torch.compile, "
                                          "Liger, quack: time and peak memory")
    tm.add_argument("--shapes", default="8b,70b", help=f"from: {','.join(MLP_SHAPES)}")
    tm.add_argument("--tokens", default="4096,8192,16384")
    tm.add_argument("--impls", default=",".join(TRAIN_MLP_IMPLS),
                    help="eager first: the others' speed-up and memory are relative to it")
    tm.add_argument("--reps", type=int, default=10)
    tm.add_argument("--json")

    lo = sub.add_parser("loss", help="the language-model loss head (linear + cross-entropy) forward + backward: eager, "
                                     "torch.compile, Liger, blockfuse.linear_cross_entropy (time, peak memory)")
    lo.add_argument("--vocabs", default="llama3,llama2", help="from: llama3, llama2, qwen2-7b")
    lo.add_argument("--tokens", default="4096,16384")
    lo.add_argument("--impls", default="eager,compile,liger,blockfuse", help="eager first")
    lo.add_argument("--reps", type=int, default=10)
    lo.add_argument("--json")

    tr = sub.add_parser("train", help="a training step of a Llama-3-8B-shaped model: eager, Liger, torch.compile, "
                                      "patched (step time, peak memory)")
    tr.add_argument("--layers", type=int, default=4)
    tr.add_argument("--seq", type=int, default=4096)
    tr.add_argument("--batches", default="1,2")
    tr.add_argument("--variants", default="eager,liger,compile,patched,patched-attention",
                    help="eager first; patched-attention: patch_model(attention=True), blockfuse attention with its backward")
    tr.add_argument("--reps", type=int, default=5, help="timed steps a round (their median)")
    tr.add_argument("--rounds", type=int, default=3,
                    help="rounds of the variants, alternately in order and reversed (a row: the median of its rounds)")
    tr.add_argument("--json")
    return p


def _eager_first(p, option, names):
    """The training benchmarks print every implementation against eager's row: it must come first."""
    if not names or names[0] != "eager":
        p.error(f"{option}: eager must come first (the others are compared with it)")


def _check(p, a):
    """Turns the comma-separated options into lists and validates them (p.error exits with status 2)."""
    def known(names, table, what):
        bad = [n for n in names if n not in table]
        if bad:
            p.error(f"{a.command}: unknown {what}(s) {bad}; choose from {list(table)}")
        return names

    if a.command == "gated-up":
        if a.quick:
            a.models, a.tokens = "8b", "512,4096"
        a.models = known(_names(a.models), GATED_UP_MODELS, "model")
        a.tokens = _ints(a.tokens)
    elif a.command in ("gated-up-fp8", "fused-mlp", "sparse-prefill"):
        a.shapes = known(_names(a.shapes), MLP_SHAPES, "shape")
        if a.command == "fused-mlp":
            a.rows = _ints(a.rows)
            if any(not 1 <= r <= 32 for r in a.rows):
                p.error("fused-mlp --rows: each between 1 and 32 (the fused MLP's decode range)")
        else:
            a.tokens = _ints(a.tokens)
    elif a.command == "model":
        a.models = known(_names(a.models), HF_MODELS, "model")
        a.prefill = _ints(a.prefill)
        a.batches = _ints(a.batches)
        a.contexts = _ints(a.contexts)
        if any(c < 1 for c in a.contexts):
            p.error("model --contexts: each prompt length must be >= 1")
    elif a.command == "train-mlp":
        a.shapes = known(_names(a.shapes), MLP_SHAPES, "shape")
        a.tokens = _ints(a.tokens)
        a.impls = known(_names(a.impls), dict.fromkeys(TRAIN_MLP_IMPLS), "implementation")
        _eager_first(p, "train-mlp --impls", a.impls)
        if a.reps < 1:
            p.error(f"train-mlp --reps must be >= 1, got {a.reps}")
    elif a.command == "loss":
        a.vocabs = known(_names(a.vocabs), LOSS_VOCABS, "vocabulary")
        a.tokens = _ints(a.tokens)
        a.impls = known(_names(a.impls), dict.fromkeys(LOSS_IMPLS), "implementation")
        _eager_first(p, "loss --impls", a.impls)
        if a.reps < 1 or any(t < 1 for t in a.tokens):
            p.error("loss: --reps and each token count must be >= 1")
    elif a.command == "train":
        a.batches = _ints(a.batches)
        a.variants = known(_names(a.variants), dict.fromkeys(TRAIN_VARIANTS), "variant")
        _eager_first(p, "train --variants", a.variants)
        if a.layers < 1 or a.seq < 2 or a.reps < 1 or a.rounds < 1 or any(b < 1 for b in a.batches):
            p.error("train: --layers, --reps, --rounds and each batch must be >= 1, --seq >= 2")
    elif a.command == "decode-attention":
        a.b, a.s, a.hkv = _ints(a.b), _ints(a.s), _ints(a.hkv)
        if any(32 % h for h in a.hkv):
            p.error("decode-attention --hkv: each must divide the 32 query heads")
    elif a.command == "attention-backward":
        a.d, a.s, a.hkv = _ints(a.d), _ints(a.s), _ints(a.hkv)
        if any(32 % h for h in a.hkv):
            p.error("attention-backward --hkv: each must divide the 32 query heads")
        if a.reps < 1:
            p.error(f"attention-backward --reps must be >= 1, got {a.reps}")
        if a.batch < 1:
            p.error(f"attention-backward --batch must be >= 1, got {a.batch}")
        if a.graph_below < 0:
            p.error(f"attention-backward --graph-below must be >= 0 (0: never), got {a.graph_below}")
    elif a.command == "memory-bound" and a.rounds < 1:
        p.error(f"memory-bound --rounds must be >= 1, got {a.rounds}")
    return a


def main(argv=None):
    p = parser()
    a = _check(p, p.parse_args(sys.argv[1:] if argv is None else list(argv)))
    try:
        module = importlib.import_module(f".{MODULES[a.command]}", __package__)
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        print(f"python -m blockfuse.bench {a.command}: torch is not installed: nothing was measured", file=sys.stderr)
        return 2
    return module.run(a)


if __name__ == "__main__":
    sys.exit(main())
