"""CPU tests of the training benchmarks' shared table cells (blockfuse.bench.common.VersusEager): the
eager row sets the baseline, later rows are printed against it, and a row before any eager row has
no ratios."""
import pytest

pytest.importorskip("torch", reason="torch is not installed")
from blockfuse.bench.common import VersusEager  # noqa: E402


def test_rows_against_the_eager_row():
    vs = VersusEager()
    assert vs.cells("compile", 5.0, 2 << 20) == "5.00 ms | - | 2 MiB | -"
    assert vs.cells("eager", 6.0, 4 << 20) == "6.00 ms | 1.00x | 4 MiB | 1.00x"
    assert vs.cells("blockfuse", 5.0, 3 << 20, ms_digits=1) == "5.0 ms | 1.20x | 3 MiB | 0.75x"
