"""CPU tests of scripts/tile-table's emitted C++ tables: kSm90Measured (rows 0-2 only) and
kSm90StreamKPoints, the points alone where the stream-K row's median ratio beats the best other row's
by at least --stream-k-margin (relative). Synthetic bench JSON in a temporary folder; no torch, no GPU."""
import importlib.machinery
import importlib.util
import json
import os
import re

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "tile-table")


def load_script():
    loader = importlib.machinery.SourceFileLoader("tile_table", SCRIPT)
    spec = importlib.util.spec_from_loader("tile_table", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


tt = load_script()

# (M, {row: ratio}) for one model (K = 8192, U = 28672); the baseline takes 1 ms, so fused ms = 1 / ratio.
POINTS = [
    (1024, {0: 1.00, 1: 0.90, 2: 0.80, 3: 1.03}),    # stream-K 3 % ahead: taken
    (2048, {0: 1.00, 1: 0.90, 2: 0.80, 3: 1.01}),    # 1 % ahead: under the default 2 % margin
    (4096, {0: 0.95, 1: 0.97, 2: 0.80, 3: 0.985}),   # ahead of row 1 (the best other) by 1.5 %
    (8192, {0: 1.00, 1: 0.90, 2: 0.80, 3: 0.99}),    # behind
]


def write_grid(folder, runs=3):
    for run in range(runs):
        for row in range(4):
            rows = []
            for m, ratios in POINTS:
                rows.append({"model": "Test 70B", "M": m, "K": 8192, "U": 28672, "tile_config": row,
                             "heuristic_tile_config": 0, "verified": True, "a_cublas_ms": 1.0,
                             "c_fused_ms": 1.0 / ratios[row], "a_cublas_tflops": 700.0,
                             "c_fused_tflops": 700.0 * ratios[row]})
            with open(os.path.join(folder, f"r{run}_c{row}.json"), "w") as f:
                json.dump({"benchmark": "bench gated-up", "rows": rows}, f)


def tables(out):
    """name -> {M: row} from the emitted C++."""
    found = {}
    for name, body in re.findall(r"std::array<Sm90MeasuredPoint, \d+> (\w+)\{\{\n(.*?)\n\}\};", out, re.S):
        found[name] = {int(m): int(r) for m, r in re.findall(r"\{\d+, \d+, (\d+), (\d+)\}", body)}
    return found


def test_margin_rule_unit():
    med = {0: 1.00, 1: 0.90, 3: 1.019}
    assert tt.with_workspace_pick(med, {0, 1, 2}, {3}, 0.02) == (0, 0)
    assert tt.with_workspace_pick(med, {0, 1, 2}, {3}, 0.01) == (3, 0)
    # Only the rows the no-workspace table may hold count as "the best other row".
    assert tt.with_workspace_pick({0: 1.00, 1: 1.10, 3: 1.05}, {0}, {3}, 0.02) == (3, 0)
    # No stream-K row measured: the best other row.
    assert tt.with_workspace_pick({0: 1.0, 1: 1.1}, None, {3}, 0.02) == (1, 1)


@pytest.mark.parametrize("margin,expect", [(None, {1024: 3}),
                                           ("0.005", {1024: 3, 2048: 3, 4096: 3}),
                                           ("0.05", {})])
def test_emitted_tables(tmp_path, capsys, margin, expect):
    write_grid(str(tmp_path))
    argv = ["--emit-cpp", "--table-rows", "0,1,2", str(tmp_path)]
    if margin is not None:
        argv += ["--stream-k-margin", margin]
    assert tt.main(argv) == 0
    t = tables(capsys.readouterr().out)
    assert t["kSm90Measured"] == {1024: 0, 2048: 0, 4096: 1, 8192: 0}  # never the stream-K row
    assert t["kSm90StreamKPoints"] == expect                            # the stream-K points past the margin
    assert set(t["kSm90StreamKPoints"].values()) <= {3}


def test_committed_grid_keeps_ksm90measured(capsys):
    """The session-11 grid regenerates kSm90Measured exactly as heuristic_sm90.cpp holds it, and, with
    session 17's runs of rows 0 and 3 (--stream-k-dirs), the with-workspace table as committed beside it."""
    root = os.path.join(os.path.dirname(SCRIPT), "..")
    grid = os.path.join(root, "results", "gpu", "session11_h100", "grid")
    more = [os.path.join(root, "results", "gpu", "session17_h100", c, "streamk") for c in ("call2", "call5")]
    src = os.path.join(root, "src", "gated_up", "heuristic_sm90.cpp")
    if not os.path.isdir(grid) or not all(os.path.isdir(d) for d in more):
        pytest.skip("results/gpu/session11_h100/grid or session17_h100/call{2,5}/streamk is not in this checkout")
    assert tt.main(["--emit-cpp", "--table-rows", "0,1,2", grid, "--stream-k-dirs"] + more) == 0
    out = capsys.readouterr().out
    committed = open(src).read()
    for name in ("kSm90Measured", "kSm90StreamKPoints"):
        pat = r"constexpr std::array<Sm90MeasuredPoint, \d+> " + name + r"\{\{\n.*?\n\}\};"
        assert re.search(pat, out, re.S).group(0) == re.search(pat, committed, re.S).group(0), name


def test_stream_k_dirs_count_only_where_they_measured_both_rows(tmp_path, capsys):
    """--stream-k-dirs: extra runs of rows 0 and 3 move the stream-K comparison against the point's
    kSm90Measured row where they measured both, and change nothing else."""
    grid, more = tmp_path / "grid", tmp_path / "more"
    grid.mkdir()
    more.mkdir()
    write_grid(str(grid))
    # Three runs of rows 0 and 3 only: at 1024 row 3 now behind row 0 (the six-run median drops under
    # the margin); at 4096 (kSm90Measured: row 1, not measured here) row 3 far ahead does not count.
    for run in range(3):
        for row in (0, 3):
            rows = [{"model": "Test 70B", "M": m, "K": 8192, "U": 28672, "tile_config": row, "verified": True,
                     "a_cublas_ms": 1.0, "c_fused_ms": 1.0 / r, "a_cublas_tflops": 700.0, "c_fused_tflops": 700.0 * r}
                    for m, r in ((1024, {0: 1.00, 3: 0.97}[row]), (4096, {0: 0.90, 3: 1.20}[row]))]
            with open(os.path.join(str(more), f"s{run}_c{row}.json"), "w") as f:
                json.dump({"benchmark": "bench gated-up", "rows": rows}, f)
    assert tt.main(["--emit-cpp", "--table-rows", "0,1,2", str(grid), "--stream-k-dirs", str(more)]) == 0
    t = tables(capsys.readouterr().out)
    assert t["kSm90Measured"] == {1024: 0, 2048: 0, 4096: 1, 8192: 0}
    assert t["kSm90StreamKPoints"] == {}
