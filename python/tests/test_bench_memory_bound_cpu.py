"""CPU tests of the rounds of `python -m blockfuse.bench memory-bound --rounds N` (blockfuse.bench.memory_bound):
every implementation of a point is timed once a round, the order rotated each round, and one that fails is
left out."""
import pytest

pytest.importorskip("torch", reason="torch is not installed: the benchmark module imports it (CPU is enough)")
from blockfuse.bench import memory_bound as mbb  # noqa: E402


def test_rounds_rotate_the_order_and_keep_every_figure():
    order = []
    fake = {"blockfuse": 10.0, "quack": 20.0, "compile": 30.0}

    def time_one(impl, fn):
        order.append(impl)
        return fake[impl] + len(order)  # a different figure each round

    todo = [(impl, None) for impl in ("blockfuse", "quack", "compile")]
    times = mbb.timed_rounds(todo, 3, time_one)
    assert order == ["blockfuse", "quack", "compile",
                     "quack", "compile", "blockfuse",
                     "compile", "blockfuse", "quack"]
    assert times == {"blockfuse": [11.0, 16.0, 18.0], "quack": [22.0, 24.0, 29.0], "compile": [33.0, 35.0, 37.0]}


def test_one_round_keeps_the_given_order():
    order = []
    todo = [(impl, None) for impl in ("a", "b")]
    assert mbb.timed_rounds(todo, 1, lambda impl, fn: order.append(impl) or 1.0) == {"a": [1.0], "b": [1.0]}
    assert order == ["a", "b"]


def test_a_failing_implementation_is_dropped_and_not_retried():
    calls = []

    def time_one(impl, fn):
        calls.append(impl)
        return None if impl == "liger" else 5.0

    todo = [(impl, None) for impl in ("blockfuse", "liger")]
    assert mbb.timed_rounds(todo, 4, time_one) == {"blockfuse": [5.0] * 4}
    assert calls.count("liger") == 1


def test_no_implementations():
    assert mbb.timed_rounds([], 3, lambda impl, fn: 1.0) == {}
