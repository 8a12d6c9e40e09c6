"""What the PyTorch-side benchmarks share: timing (CUDA events, CUDA-graph replays, host loops), the
copy-bandwidth ceiling, peak-memory and error measures, and the readiness check.

Protocols (each benchmark's docstring says which it uses):
  time_cuda     CUDA events around each call, warm-up first, the median of 10..100 repetitions (as
                many as fit in reps_time seconds), inputs rotated among the given buffers;
  time_cuda_rounds  time_cuda for several functions compared with each other: rounds that call each
                once, in an order rotated every round (rotated_order), so none runs on a GPU the
                others have heated;
  time_events   CUDA events around each of `reps` calls over n_sets rotated input sets, median (µs);
  time_events_rounds  time_events for several functions in rotated rounds (rotated_order);
                time_events_in_order picks it or time_events by --order;
  time_graph    a CUDA graph of `calls` calls replayed `reps` times, median per call (µs): no CPU
                overhead, for kernels shorter than a torch call's dispatch;
  time_batched  `calls` back-to-back calls between two events, median of `batches` (µs);
  cuda_ms       one call between events, synchronised after each, median (ms);
  host_us       a tight loop of calls synchronised once, best of three (host µs per call).
"""
import json
import math
import statistics
import sys
import time

import torch

GRAPH_ROWS = 32            # up to this many rows, decode-sized problems are timed from graph replays
GRAPH_CALLS = 20
L2_BYTES = 50 << 20        # rotate inputs over >= 3x this, so L2 holds none of them (H100: 50 MB)


def ready(need_ops=True):
    """0 when a CUDA device (and, with need_ops, the compiled blockfuse ops) is there; otherwise prints
    why to stderr and returns 2, the exit status of a benchmark that measured nothing."""
    if not torch.cuda.is_available():
        print("no CUDA device found: nothing was measured", file=sys.stderr)
        return 2
    if need_ops:
        from .. import ops
        if not ops.available():
            print(f"blockfuse extension not available: {ops.load_error()}", file=sys.stderr)
            return 2
    return 0


def time_cuda(fn, xs, warmup, reps_time, min_reps=10, max_reps=100):
    """Median milliseconds of fn(x) over rotating inputs, CUDA events around each call; also returns
    the number of repetitions."""
    for i in range(warmup):
        fn(xs[i % len(xs)])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn(xs[0])
    torch.cuda.synchronize()
    est = max(time.perf_counter() - t0, 1e-6)
    reps = int(min(max_reps, max(min_reps, reps_time / est)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn(xs[i % len(xs)])
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)), reps


def rotated_order(n, r):
    """The order of n functions in round r of time_cuda_rounds: (r + j) % n for slot j, so over n
    rounds each takes every slot once."""
    return [(r + j) % n for j in range(n)]


def _event_rounds(fns, reps, arg):
    """`reps` rounds calling every fns[j](arg(r)) once in rotated_order, CUDA events around each call:
    [median ms of each fn]."""
    n = len(fns)
    ev = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
          for _ in range(n)]
    for r in range(reps):
        for j in rotated_order(n, r):
            ev[j][r][0].record()
            fns[j](arg(r))
            ev[j][r][1].record()
    torch.cuda.synchronize()
    return [statistics.median(s.elapsed_time(e) for s, e in ev[j]) for j in range(n)]


def time_cuda_rounds(fns, xs, warmup, reps_time, min_reps=10, max_reps=100):
    """time_cuda for fns compared with each other: warm-up rounds, then 10..100 rounds (as many as
    fit in reps_time seconds a function), each calling every fn once on the round's input, in
    rotated_order; CUDA events around each call. Returns ([median ms of each fn], rounds)."""
    n = len(fns)
    for i in range(warmup):
        for j in rotated_order(n, i):
            fns[j](xs[i % len(xs)])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for fn in fns:
        fn(xs[0])
    torch.cuda.synchronize()
    est = max(time.perf_counter() - t0, 1e-6)
    reps = int(min(max_reps, max(min_reps, n * reps_time / est)))
    return _event_rounds(fns, reps, lambda r: xs[r % len(xs)]), reps


def median_ms(fn, reps_time=0.2):
    """Median milliseconds of fn() (time_cuda: CUDA events, warm-up, 10..100 repetitions)."""
    return time_cuda(lambda _: fn(), [None], 3, reps_time)[0]


def time_events(fn, n_sets, warmup, reps):
    """Median µs of fn(i) with i cycling over n_sets input sets, CUDA events around each call."""
    for i in range(warmup):
        fn(i % n_sets)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn(i % n_sets)
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3


def time_events_rounds(fns, n_sets, warmup, reps):
    """time_events for fns compared with each other: `warmup` rounds, then `reps` rounds calling every
    fn(i) once in rotated_order, CUDA events around each call; [median µs of each fn]."""
    n = len(fns)
    for r in range(warmup):
        for j in rotated_order(n, r):
            fns[j](r % n_sets)
    return [ms * 1e3 for ms in _event_rounds(fns, reps, lambda r: r % n_sets)]


def time_events_in_order(fns, order, n_sets, warmup, reps):
    """[median µs of each of fns]: time_events_rounds when order is "interleaved" (the benches'
    default, --order), else time_events of each in turn ("sequential")."""
    if order == "interleaved":
        return time_events_rounds(fns, n_sets, warmup, reps)
    return [time_events(fn, n_sets, warmup, reps) for fn in fns]


def capture_graph(fn, calls=1):
    """A CUDA graph of `calls` calls of fn(), captured after three warm-up calls on a side stream (the
    allocations and one-time setup a capture must not see, as torch.cuda.graphs asks)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return g


def graph_us(fn, calls=GRAPH_CALLS):
    """Median µs per call of `calls` calls of fn() captured in one CUDA graph (median_ms of the replays)."""
    g = capture_graph(fn, calls)
    return median_ms(g.replay) * 1e3 / calls


def time_graph(fn, warmup, reps, n_sets=1, calls=GRAPH_CALLS):
    """Per-call µs (median of reps) of a CUDA graph of `calls` calls cycling over n_sets input sets:
    no CPU overhead, for problems whose kernel is shorter than a torch call's dispatch."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            fn(i % n_sets)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fn(i % n_sets)
    for _ in range(warmup):
        g.replay()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(times)


def time_batched(fn, n_sets, calls=20, batches=3):
    """Per-call µs of `calls` back-to-back calls between two events (inputs cycling over n_sets), the
    median of `batches`: the CPU queues ahead of the GPU, so its per-call overhead stays hidden while it
    is shorter than the kernel."""
    for i in range(3):
        fn(i % n_sets)
    times = []
    for _ in range(batches):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for i in range(calls):
            fn(i % n_sets)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return sorted(times)[len(times) // 2]


def cuda_ms(fn, reps):
    """Median ms of fn() over reps calls, each between two events and synchronised (after one
    warm-up call): for calls long enough that the host's gaps do not matter (a model's prefill)."""
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


def host_us(fn, n=2000):
    """Host µs per call of fn(): 50 warm-up calls, then the best of three loops of n calls, each
    synchronised once at its end."""
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


def sets_for(nbytes):
    """How many input sets of nbytes to rotate over so that L2 holds none (3x L2, 1..16 sets)."""
    return max(1, min(16, -(-3 * L2_BYTES // max(nbytes, 1))))


def copy_gbs():
    """The device's copy bandwidth in GB/s, the ceiling the memory-bound benchmarks divide by: bytes
    read + written by a 1 GiB device-to-device copy, median time (time_cuda)."""
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * n / (time_cuda(lambda _: dst.copy_(src), [None], 3, 0.2)[0] * 1e6)


def peak_activation_bytes(fn, x, grads=()):
    """Peak bytes allocated during one call fn(x) beyond what was allocated before it. The .grad of
    each tensor in `grads` is dropped first, so that a training step's gradients (which fn allocates
    afresh) count in its peak rather than in the baseline."""
    for t in grads:
        t.grad = None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn(x)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak


class VersusEager:
    """The speed-up and memory columns of the training benchmarks: each point's "eager" row (the
    first) sets the baseline, every row's cells are printed against it."""

    def __init__(self):
        self.ms = self.peak = None

    def cells(self, name, ms, peak, ms_digits=2):
        """"ms | speed-up | MiB | memory ratio" for implementation `name` (its time, peak bytes)."""
        if name == "eager":
            self.ms, self.peak = ms, peak
        speed = f"{self.ms / ms:.2f}x" if self.ms else "-"
        mem = f"{peak / self.peak:.2f}x" if self.peak else "-"
        return f"{ms:.{ms_digits}f} ms | {speed} | {peak / 2**20:.0f} MiB | {mem}"


def optional_peer(label, load):
    """load() for a peer implementation that may be missing (quack, Liger, FlashAttention-4:
    ../shared/peers stages them), or None with the reason printed to stderr: the rest of a benchmark
    still runs."""
    try:
        return load()
    except Exception as e:  # noqa: BLE001 — reported, not raised
        print(f"{label} not available: {e!r}", file=sys.stderr)
        return None


def rel(a, b):
    """Relative Frobenius error ‖a − b‖ / ‖b‖, in fp32."""
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def meta():
    """The run's device, versions and time, for the JSON a benchmark writes."""
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        import transformers
        out["transformers"] = transformers.__version__
    except ImportError:
        pass
    return out


def run_measurement(measure, args):
    """A subcommand's run: the GPU check, then measure(args)'s rows, written to --json with meta().
    Returns the exit status."""
    status = ready()
    if status:
        return status
    rows = measure(args)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(**meta(), rows=rows), fh, indent=1)
    return 0
