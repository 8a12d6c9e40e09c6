"""CPU tests of the front of `python -m blockfuse.bench` (no torch needed: it is blocked in the
subprocesses): --help lists every subcommand and each subcommand's --help works without torch, bad
options are refused with exit status 2 before anything is imported, and a subcommand run without
torch says so and exits 2."""
import os
import subprocess
import statistics
import sys

import pytest

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SUBCOMMANDS = ("gated-up", "gated-up-fp8", "fused-mlp", "sparse-prefill", "model", "overhead", "torch-baselines",
               "memory-bound", "sdpa", "decode-attention", "attention-backward", "train-mlp", "train", "loss")
# Runs the front with `import torch` failing, as on a machine without torch.
NO_TORCH = ("import runpy, sys; sys.modules['torch'] = None; sys.argv[0] = 'blockfuse.bench'; "
            "runpy.run_module('blockfuse.bench', run_name='__main__', alter_sys=True)")


def bench(*args):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", NO_TORCH, *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_help_lists_every_subcommand_without_torch():
    r = bench("--help")
    assert r.returncode == 0, r.stderr
    for name in SUBCOMMANDS:
        assert name in r.stdout


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_subcommand_help_without_torch(name):
    r = bench(name, "--help")
    assert r.returncode == 0, r.stderr
    assert f"python -m blockfuse.bench {name}" in r.stdout


def test_every_subcommand_has_its_module():
    sys.path.insert(0, PYTHON_DIR)
    try:
        from blockfuse.bench.__main__ import MODULES
    finally:
        sys.path.remove(PYTHON_DIR)
    assert tuple(MODULES) == SUBCOMMANDS
    here = os.path.join(PYTHON_DIR, "blockfuse", "bench")
    assert all(os.path.isfile(os.path.join(here, m + ".py")) for m in MODULES.values())


@pytest.mark.parametrize("args, message", [
    (("gated-up", "--models", "8b,nope"), "unknown model(s) ['nope']"),
    (("fused-mlp", "--rows", "1,33"), "each between 1 and 32"),
    (("decode-attention", "--hkv", "8,3"), "must divide the 32 query heads"),
    (("attention-backward", "--hkv", "32,5"), "must divide the 32 query heads"),
    (("attention-backward", "--reps", "0"), "--reps must be >= 1"),
    (("attention-backward", "--batch", "0"), "--batch must be >= 1"),
    (("attention-backward", "--graph-below", "-1"), "--graph-below must be >= 0"),
    (("fused-mlp", "--shapes", "7b"), "unknown shape(s) ['7b']"),
    (("model", "--models", "llama3-8b,x"), "unknown model(s) ['x']"),
    (("model", "--contexts", "512,0"), "each prompt length must be >= 1"),
    (("train-mlp", "--impls", "compile,eager"), "eager must come first"),
    (("loss", "--impls", "blockfuse"), "eager must come first"),
    (("loss", "--vocabs", "llama3,gpt9"), "unknown vocabulary(s) ['gpt9']"),
    (("train-mlp", "--impls", "eager,nope"), "unknown implementation(s) ['nope']"),
    (("train-mlp", "--shapes", "405b"), "unknown shape(s) ['405b']"),
    (("train", "--variants", "patched,eager"), "eager must come first"),
    (("train", "--seq", "1"), "--seq >= 2"),
    (("train", "--rounds", "0"), "--rounds"),
    (("memory-bound", "--rounds", "0"), "--rounds must be >= 1"),
    (("nope",), "invalid choice"),
    ((), "required"),
])
def test_bad_options_are_refused(args, message):
    r = bench(*args)
    assert r.returncode == 2
    assert message in r.stderr


def test_model_contexts_and_attention_options():
    sys.path.insert(0, PYTHON_DIR)
    try:
        from blockfuse.bench.__main__ import _check, parser
    finally:
        sys.path.remove(PYTHON_DIR)
    p = parser()
    a = _check(p, p.parse_args(["model", "--attention", "--contexts", "512,32768"]))
    assert a.attention and a.contexts == [512, 32768]
    a = _check(p, p.parse_args(["model"]))
    assert not a.attention and a.contexts == []


def test_a_run_without_torch_says_so():
    r = bench("overhead")
    assert r.returncode == 2
    assert "torch is not installed" in r.stderr


def test_gated_up_plot_only_redraws_the_charts(tmp_path):
    """--plot-only needs no GPU: the three charts from a gated_up.json (in-process, with torch)."""
    pytest.importorskip("torch", reason="torch is not installed: the gated-up module imports it")
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    import json
    sys.path.insert(0, PYTHON_DIR)
    try:
        from blockfuse.bench.__main__ import main
        from blockfuse.bench.gated_up import PIPELINES, QUACK
    finally:
        sys.path.remove(PYTHON_DIR)
    rows = [{"model": "8b", "name": "Llama-3 8B", "M": m, "pipeline": p, "tflops": 100.0 + i, "peak_act_bytes": (i + 1) << 20}
            for m in (512, 4096) for i, p in enumerate(PIPELINES + (QUACK,))]
    src = tmp_path / "gated_up.json"
    src.write_text(json.dumps({"device": "test", "ceiling_tflops_cublas_8192": 700.0, "rows": rows}))
    out = tmp_path / "charts"
    assert main(["gated-up", "--plot-only", str(src), "--out", str(out)]) == 0
    for name in ("gated_up_tflops.png", "gated_up_tflops_fused_vs_triton.png", "gated_up_memory.png"):
        assert (out / name).stat().st_size > 1000


def test_gated_up_quack_pipeline_gets_the_gate_first_layout():
    """The quack pipeline hands gemm_act the weight quack expects (rows 2j = gate_j, 2j + 1 = up_j,
    as B = W.t()) and its activation's name: a stand-in gemm_act with quack's documented semantics
    must then give act(x·W_gateᵀ) ⊙ (x·W_upᵀ)."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    import torch.nn.functional as F
    sys.path.insert(0, PYTHON_DIR)
    try:
        from blockfuse.bench.gated_up import QUACK, make_pipelines
    finally:
        sys.path.remove(PYTHON_DIR)
    acts = {"swiglu": F.silu, "geglu": lambda g: F.gelu(g, approximate="tanh")}
    calls = []

    def gemm_act(a, b, activation, store_preact, tuned):
        calls.append((activation, store_preact, tuned))
        c = a @ b
        return None, acts[activation](c[:, 0::2]) * c[:, 1::2]

    torch.manual_seed(0)
    k, u, m = 48, 40, 7
    w_stacked = torch.randn(2 * u, k, dtype=torch.float64)
    x = torch.randn(m, k, dtype=torch.float64)
    for activation, act in (("silu", F.silu), ("gelu_tanh", lambda g: F.gelu(g, approximate="tanh"))):
        pipes = make_pipelines(w_stacked, None, u, activation, None, None, gemm_act, quack_tuned=True)
        want = act(x @ w_stacked[:u].t()) * (x @ w_stacked[u:].t())
        torch.testing.assert_close(pipes[QUACK](x), want)
    assert calls == [("swiglu", False, True), ("geglu", False, True)]
    assert QUACK not in make_pipelines(w_stacked, None, u, "silu", None, None)


def test_train_mlp_implementations_on_cpu():
    """The train-mlp implementations that need no GPU (eager) and the skip of a missing peer: the
    step's gradients are autograd's."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    sys.path.insert(0, PYTHON_DIR)
    try:
        from blockfuse.bench import train_mlp as tm
    finally:
        sys.path.remove(PYTHON_DIR)
    g = torch.Generator().manual_seed(0)
    wg, wu = torch.randn(24, 16, generator=g).requires_grad_(), torch.randn(24, 16, generator=g).requires_grad_()
    wd = torch.randn(16, 24, generator=g).requires_grad_()
    x, dy = torch.randn(5, 16, generator=g).requires_grad_(), torch.randn(5, 16, generator=g)
    fn, params = tm.build("eager", wg, wu, wd)
    y = tm.step(fn, x, dy, params)
    gate, up = x @ wg.t(), x @ wu.t()
    torch.testing.assert_close(y, (torch.nn.functional.silu(gate) * up) @ wd.t())
    assert x.grad is not None and all(p.grad is not None for p in params)
    try:
        import quack  # noqa: F401
    except Exception:  # noqa: BLE001
        assert isinstance(tm.build("quack", wg, wu, wd), str)


def test_train_rounds_alternate_the_order():
    """bench train times its variants in rounds, reversed every other round: with a drift that makes
    each later timing slower, equal variants get equal medians (one after another, the last would be
    the slowest)."""
    torch = pytest.importorskip("torch", reason="torch is not installed")  # noqa: F841 (train imports it)
    sys.path.insert(0, PYTHON_DIR)
    try:
        from blockfuse.bench import train
    finally:
        sys.path.remove(PYTHON_DIR)
    calls = []

    def time_one(name):  # every variant takes 10 ms, plus 1 ms for each timing before it
        calls.append(name)
        return 10.0 + len(calls) - 1
    times = train.timed_rounds(["eager", "patched", "patched-attention"], 4, time_one)
    assert calls == ["eager", "patched", "patched-attention", "patched-attention", "patched", "eager"] * 2
    assert {n: len(t) for n, t in times.items()} == {"eager": 4, "patched": 4, "patched-attention": 4}
    assert len({statistics.median(t) for t in times.values()}) == 1, times


def test_rounds_rotate_every_function_through_every_slot():
    """time_cuda_rounds' order (common.rotated_order): over n rounds each of n functions runs once in
    every slot, so none always runs first or right after the same neighbour."""
    pytest.importorskip("torch", reason="torch is not installed")
    sys.path.insert(0, PYTHON_DIR)
    try:
        from blockfuse.bench.common import rotated_order
    finally:
        sys.path.remove(PYTHON_DIR)
    for n in (1, 2, 3, 6):
        rounds = [rotated_order(n, r) for r in range(n)]
        assert all(sorted(order) == list(range(n)) for order in rounds)
        for slot in range(n):
            assert sorted(order[slot] for order in rounds) == list(range(n))
    assert rotated_order(3, 1) == [1, 2, 0]


@pytest.mark.parametrize("command", ["gated-up", "sdpa", "attention-backward"])
def test_order_option(command):
    """bench gated-up, sdpa and attention-backward take --order interleaved|sequential and refuse anything else (exit 2)."""
    r = bench(command, "--order", "random")
    assert r.returncode == 2 and "--order" in r.stderr and "interleaved" in r.stderr, r.stderr
    assert "--order" in bench(command, "-h").stdout
