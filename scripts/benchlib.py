"""The benchmarks' shared harness: GPU timers, copy bandwidth, the RoPE list, table writers.

``scripts/bench_rope.py`` (kernels) and ``scripts/bench_step.py`` (a training step) measure with
the same timers and write the same kinds of files, so this module holds them once. Importing it
needs no GPU (the benchmarks refuse to run without one, but still import and answer ``--help``).
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import torch


def require_cuda(script: str) -> None:
    """Exit with one line unless a CUDA GPU is present: the benchmarks time GPU kernels."""
    if not torch.cuda.is_available():
        raise SystemExit(f"{script} needs a CUDA GPU")


def parse_device(text: str | torch.device) -> torch.device:
    """``--device``'s argparse type: ``cpu`` or ``cuda[:N]`` (whether that GPU exists is :func:`use_device`'s
    check, at run time, so that ``--help`` and the parsers' tests need no GPU)."""
    try:
        device = torch.device(text)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"expected cpu or cuda[:N], got {str(text)!r}")
    return device


def use_device(device: torch.device, script: str) -> torch.device:
    """Check that ``device`` exists and make it the current CUDA device; returns it with its index.

    Why current: CUDA events, ``torch.cuda._sleep``, ``synchronize`` and ``get_device_name`` act on the current
    device, so a run of ``--device cuda:1`` that did not switch would put its timing events and its L2 flush on
    GPU 0 and time GPU 1's kernels against an idle stream. One line, before any work, for a GPU that is not here.
    """
    if device.type != "cuda":
        return device
    if not torch.cuda.is_available():
        raise SystemExit(f"{script}: --device {device}: no CUDA GPU here (--device cpu is a dry run)")
    count = torch.cuda.device_count()
    if (device.index or 0) >= count:
        raise SystemExit(f"{script}: --device {device}: this machine has {count} CUDA device(s), cuda:0 to "
                         f"cuda:{count - 1}")
    if device.index is not None:  # plain "cuda" is the current device already (set_device refuses it)
        torch.cuda.set_device(device)
    return torch.device("cuda", torch.cuda.current_device())


#: ``NAME@SPEC`` in a list of implementations: a Triton entry with parts of its ``LaunchConfig`` forced,
#: so launch configurations are timed side by side in one run. SPEC is ``+``-separated items: a tiling
#: (``rows``, ``chunks``, ``flat``: ``LaunchConfig.chunks``), the flat tiling's tables (``split``, ``paired``:
#: ``LaunchConfig.tables``), how misaligned partner runs are read (``words``, ``elements``: ``LaunchConfig.words``),
#: whether q's flat programs take k's blocks (``joint``, ``apart``: ``LaunchConfig.joint``),
#: ``tile=N``, ``warps=N``, ``regs=N`` (``LaunchConfig.maxnreg``), ``block=N`` (``LaunchConfig.block``), ``stream``.
TILINGS = {"rows": 0, "chunks": 1, "flat": 2}
TABLES = {"split": 0, "paired": 1}
PARTNERS = {"elements": 0, "words": 1}
PROGRAMS = {"apart": 0, "joint": 1}
_SPEC_INTS = {"tile": "tile", "warps": "num_warps", "regs": "maxnreg", "block": "block"}
SPEC_HELP = ("NAME@SPEC takes +-separated rows, chunks, flat, split, paired, words, elements, joint, apart, tile=N, "
             "warps=N, regs=N, block=N, stream (e.g. triton_v4@rows+tile=2048)")


def launch_overrides(name: str) -> tuple[str, dict]:
    """``"triton_v4@rows+tile=2048"`` -> ("triton_v4", {"chunks": 0, "tile": 2048}); a plain name -> (name, {}).
    The dict holds ``LaunchConfig`` fields. Raises ValueError naming the item it cannot read."""
    base, _, spec = name.partition("@")
    out: dict = {}
    for item in filter(None, spec.split("+")):
        key, eq, value = item.partition("=")
        if not eq and key in TILINGS:
            out["chunks"] = TILINGS[key]
        elif not eq and key in TABLES:
            out["tables"] = TABLES[key]
        elif not eq and key in PARTNERS:
            out["words"] = PARTNERS[key]
        elif not eq and key in PROGRAMS:
            out["joint"] = PROGRAMS[key]
        elif not eq and key == "stream":
            out["streaming"] = True
        elif eq and key in _SPEC_INTS and value.isdigit() and int(value) > 0:
            out[_SPEC_INTS[key]] = int(value)
        else:
            raise ValueError(f"{item!r} in {name}: {SPEC_HELP}")
    from rope.triton_rope import LaunchConfig

    try:  # the fields' own bounds (regs=8, say), refused here with the entry named, before any work
        LaunchConfig(**out)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    return base, out


def rope_names(selected: str | None, skip: Iterable[str] = ()) -> list[str]:
    """The RoPE implementations to measure: ``selected`` (comma-separated) or every registered one
    (``rope.available()``) but those in ``skip``, so a newly registered implementation is measured
    without editing a list. Unknown names are refused with the valid ones."""
    import rope

    if selected:
        names = [n.strip() for n in selected.split(",") if n.strip()]
        unknown = [n for n in names if n.partition("@")[0] not in rope.available()]
        if unknown:
            raise SystemExit(f"unknown RoPE implementation(s) {', '.join(unknown)}; available: "
                             f"{', '.join(rope.available())}")
        for n in names:
            try:
                launch_overrides(n)
            except ValueError as exc:
                raise SystemExit(f"unknown launch configuration: {exc}") from None
        return names
    return [n for n in rope.available() if n not in set(skip)]


#: How :class:`Timer` empties the L2 of the timed call's inputs before each timed call (``--flush``). Why three:
#: the L2 is write-back, so what a call pays depends on the dirty lines it finds there and on those it leaves
#: behind unwritten when it ends (session 26, H100: a 268 MB copy took 92.9 us after ``zero``, 87.1 after
#: ``read``; its 1 GiB copy 714 and 707 us).
FLUSHES = {
    "zero": "256 MB zeroed before each call, as triton.testing.do_bench does; the call also pays for writing back"
            " the zeros' dirty lines",
    "read": "256 MB read before each call; the call starts with a clean L2, and its own dirty lines left in L2"
            " when it ends are not charged to it",
    "steady": "the same call run untimed just before each timed one; the timed call pays its predecessor's"
              " dirty lines as a call in a stream of such calls does (only for calls moving several times the"
              " L2: smaller inputs would be found in it)",
}


class Timer:
    """GPU time (ms) of ``fn``: the lower of two medians over ``reps`` calls, each after an L2 flush.

    A GPU sleep before each start event lets the host queue the call ahead of the GPU, so the time
    is the kernels' and not Python's launch overhead; ``last_host_ms`` keeps the median host time
    of one call (enqueueing only), to tell a host-bound measurement apart. Two passes, keeping the
    lower median, damp a pass disturbed by the host (a few forward+backward medians of single
    passes came out 3-10x too high on the H100 while the kernels alone were not). ``flush``: one
    of :data:`FLUSHES`.
    """

    def __init__(self, reps: int, flush: str = "zero", device: str | torch.device = "cuda") -> None:
        if flush not in FLUSHES:
            raise ValueError(f"flush must be one of {', '.join(FLUSHES)}, got {flush!r}")
        self.reps = reps
        self.flush_mode = flush
        self.flush = torch.zeros(256 * 2**20 if flush != "steady" else 0, dtype=torch.uint8, device=device)
        self.last_host_ms = math.nan

    def _flush(self, fn: Callable[[], object]) -> None:
        """Evict the timed call's inputs from the L2 (see :data:`FLUSHES`)."""
        if self.flush_mode == "zero":
            self.flush.zero_()
        elif self.flush_mode == "read":
            self.flush.view(torch.int64).amax()  # reads every byte, writes one scalar
        else:
            fn()

    def _pass(self, fn: Callable[[], object], reps: int) -> tuple[float, float]:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        host = []
        for s, e in zip(starts, ends, strict=True):
            self._flush(fn)
            torch.cuda._sleep(4_000_000)  # ~2 ms of GPU idle: the host queues the timed work meanwhile
            s.record()
            t0 = time.perf_counter()
            fn()
            host.append((time.perf_counter() - t0) * 1e3)
            e.record()
        torch.cuda.synchronize()
        gpu = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))
        return gpu, statistics.median(host)

    def __call__(self, fn: Callable[[], object], reps: int | None = None) -> float:
        reps = reps or self.reps
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        (g1, h1), (g2, h2) = self._pass(fn, reps), self._pass(fn, reps)
        self.last_host_ms = min(h1, h2)
        return min(g1, g2)


class WallTimer:
    """:class:`Timer`'s interface on the CPU, for the benchmarks' dry runs (``--device cpu``) and tests:
    the median wall-clock time of ``reps`` calls after one warm-up call (no flush, no events)."""

    def __init__(self, reps: int) -> None:
        self.reps = reps
        self.last_host_ms = math.nan

    def __call__(self, fn: Callable[[], object], reps: int | None = None) -> float:
        fn()
        times = []
        for _ in range(reps or self.reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        self.last_host_ms = statistics.median(times)
        return self.last_host_ms


def make_timer(reps: int, device: str | torch.device, flush: str = "zero") -> Timer | WallTimer:
    """The GPU :class:`Timer` on CUDA (L2 flushed the ``flush`` way, its flush buffer on ``device``: make that the
    current device first, :func:`use_device`), the :class:`WallTimer` elsewhere."""
    return Timer(reps, flush, device) if torch.device(device).type == "cuda" else WallTimer(reps)


def synchronize(device: str | torch.device) -> None:
    """Wait for ``device``'s queued work (nothing to wait for off CUDA)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def host_loop(fn: Callable[[], object], calls: int, repeats: int, device: str | torch.device) -> dict:
    """Per-call cost of ``fn`` called ``calls`` times back to back (after a warm-up), ``repeats`` times.

    For calls too small to keep the GPU busy (tiny shapes): the GPU waits for the host, so the host
    time per call is the cost. Returns microseconds per call, the median over the repeats (``*_min``:
    the lowest): ``host_us`` (enqueueing the calls, ``time.perf_counter``), ``wall_us`` (until the
    queue has drained: a final synchronize) and ``gpu_us`` (CUDA events around the loop; NaN off CUDA).
    """
    cuda = torch.device(device).type == "cuda"
    for _ in range(min(calls, 20)):
        fn()
    synchronize(device)
    host, wall, gpu = [], [], []
    for _ in range(repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        if cuda:
            end.record()
        synchronize(device)
        t2 = time.perf_counter()
        host.append((t1 - t0) * 1e6 / calls)
        wall.append((t2 - t0) * 1e6 / calls)
        gpu.append(start.elapsed_time(end) * 1e3 / calls if cuda else math.nan)
    med = statistics.median
    return {"host_us": med(host), "host_us_min": min(host), "wall_us": med(wall), "gpu_us": med(gpu)}


def parse_count(text: str | int) -> int:
    """``32M`` -> 33554432: an int with an optional K/M/G suffix (powers of 1024)."""
    if isinstance(text, int):
        return text
    t = str(text).strip().upper()
    mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(t[-1:], 1)
    digits = t[:-1] if mult > 1 else t
    try:
        value = float(digits) * mult
    except ValueError:
        raise ValueError(f"not a count: {text!r} (an int with an optional K/M/G suffix, such as 32M)") from None
    if value <= 0 or value != int(value):
        raise ValueError(f"not a positive whole count: {text!r}")
    return int(value)


def count_label(n: int) -> str:
    """33554432 -> ``32M``: the inverse of :func:`parse_count` where exact, else the plain number."""
    for suffix, mult in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{suffix}"
    return str(n)


def round_order(names: Sequence[str], r: int) -> list[str]:
    """``names`` in the order round ``r`` of an interleaved benchmark takes them: from the (r mod n)-th on,
    wrapping, so that over n rounds each comes first once and a drift within the run falls on all alike."""
    k = r % len(names) if names else 0
    return [*names[k:], *names[:k]]


def event_times(step: Callable[[], object], warmup: int, iters: int,
                device: str | torch.device = "cuda") -> list[float]:
    """Milliseconds of each of ``iters`` back-to-back calls (CUDA events around each) after ``warmup``.

    No flush and no sleep: for steps long enough (a training step) that the host keeps ahead and the
    caches are the step's own business. On a CPU device (the scripts' dry runs): wall-clock times.
    """
    for _ in range(warmup):
        step()
    if torch.device(device).type != "cuda":
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
        return times
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def paired_host_loops(fa: Callable[[], object], fb: Callable[[], object], calls: int, repeats: int,
                      device: str | torch.device) -> dict:
    """Host microseconds per call of ``fa`` and ``fb`` timed in adjacent loops of ``calls`` calls (the order
    alternating a b, b a, ...), and the median over the ``repeats`` pairs of a's minus b's, with its
    quartiles (``diff_us``, ``diff_q1_us``, ``diff_q3_us``).

    Why: on the H100's host the same bare launch measured 63-141 us per call across the cases of one
    run (session 10), so "call minus launch" from two medians timed apart read -21 to +165 us. Loops
    timed next to each other see the same host speed, and their difference does not drift with it.
    """
    for _ in range(min(calls, 20)):
        fa()
        fb()
    synchronize(device)
    per: tuple[list[float], list[float]] = ([], [])
    for r in range(repeats):
        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
            fn = fa if i == 0 else fb
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            per[i].append((time.perf_counter() - t0) * 1e6 / calls)
            synchronize(device)
    diffs = sorted(a - b for a, b in zip(*per, strict=True))
    q1, _, q3 = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else (diffs[0],) * 3
    return {"a_us": statistics.median(per[0]), "b_us": statistics.median(per[1]),
            "diff_us": statistics.median(diffs), "diff_q1_us": q1, "diff_q3_us": q3}


def copy_bandwidth(timer: Timer, nbytes: int = 2**30, device: str | torch.device = "cuda") -> float:
    """Device-to-device copy bandwidth of an ``nbytes`` tensor in GB/s (bytes read + bytes written)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    ms = timer(lambda: dst.copy_(src), reps=30)
    return 2 * nbytes / (ms * 1e-3) / 1e9


def fmt(v: object, spec: str = ".3f") -> str:
    """``v`` formatted, or empty for NaN/None (a measurement that does not apply)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return format(v, spec)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]], numeric_from: int = 0) -> list[str]:
    """Lines of a Markdown table; columns from ``numeric_from`` on are right-aligned (numbers)."""
    align = ["---" if i < numeric_from else "---:" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def write_csv(path: Path, rows: Sequence[dict]) -> None:
    """``rows`` (dicts) as a CSV file with a header line: every key of any row, in order of appearance."""
    fields = list(dict.fromkeys(key for row in rows for key in row))  # rows of a mode may add keys
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(rows)
