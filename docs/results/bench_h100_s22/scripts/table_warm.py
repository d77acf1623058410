# ruff: noqa
"""Session 22: is part of the odd halves' fixed cost the element table's read from DRAM? The forward (module call,
no grad) timed as the benchmark times it (L2 flushed by zeroing 256 MB before each call) and again with the kernel's
tables read once after the flush (so they sit in L2 when the timed call starts); three sizes, median of 3 input sets;
then the fixed cost of a least-squares line per head dim, both ways.

    python .devrun/s22/table_warm.py
"""
import statistics
import time

import torch

import rope
from rope import triton_rope as tr
from scripts.benchlib import Timer, copy_bandwidth

DS = (54, 56, 114, 116, 206, 208)
SIZES_M = (16, 32, 64)


class WarmTimer(Timer):
    """The benchmark's timer, with ``touch`` run after each flush and before the start event."""

    def __init__(self, reps, touch):
        super().__init__(reps)
        self.touch = touch

    def _pass(self, fn, reps):
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for s, e in zip(starts, ends):
            self.flush.zero_()
            self.touch()
            torch.cuda._sleep(4_000_000)
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)), 0.0


def fit(xs, ys):
    n = len(xs); mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx


def main():
    timer = Timer(20)
    bw = copy_bandwidth(timer)
    print(f"copy bandwidth {bw:.0f} GB/s", flush=True)
    for D in DS:
        r = rope.build("triton_v4", D, 2048, variant="full").cuda()
        xs, cold, warm, cells = [], [], [], []
        for m in SIZES_M:
            B = -(-m * 2**20 // (2048 * 16 * D))
            nbytes = 4 * B * 2048 * 16 * D * 2
            tc, tw = [], []
            for _ in range(3):
                q = torch.randn(B, 2048, 16, D, device="cuda", dtype=torch.bfloat16)
                k = torch.randn_like(q)
                with torch.no_grad():
                    r(q, k)
                plan = tr.launch_plan(q, k, r.cos, r.sin, None, r._partial_shortcut, False, False,
                                      config=r.launch_config)
                tables = plan.tables if plan.tables is not None else (r.cos, r.sin)
                touch = lambda: (tables[0].sum(), tables[1].sum())
                with torch.no_grad():
                    tc.append(timer(lambda: r(q, k)))
                    tw.append(WarmTimer(20, touch)(lambda: r(q, k)))
                del q, k
            c, w = statistics.median(tc) * 1e3, statistics.median(tw) * 1e3
            xs.append(nbytes); cold.append(c); warm.append(w)
            cells.append(f"{m}M {100 * nbytes / (c * 1e-6) / 1e9 / bw:.1f}->{100 * nbytes / (w * 1e-6) / 1e9 / bw:.1f}")
        tb = sum(t.numel() * t.element_size() for t in {id(t): t for t in tables}.values()) / 2**20
        print(f"D={D} tables {tb:.2f} MB: " + "  ".join(cells)
              + f" | fixed cold {fit(xs, cold):.2f} us, tables in L2 {fit(xs, warm):.2f} us", flush=True)


if __name__ == "__main__":
    main()
