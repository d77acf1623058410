# ruff: noqa
"""Session 27: where does the flat tiling's 1-1.5 us per call go? Event time against CUPTI's kernel duration.

For triton_v4's forward (module call, no grad) and a one-launch device copy of the same bytes, variant full,
B x 2048 x 16 x D at >= 32M elements a tensor, four ways to prepare each timed call:
  zs: zero 256 MB, 2 ms GPU sleep, start event, call, end event   (the benchmark's default)
  zn: zero 256 MB, start event, call, end event                   (no idle GPU before the call)
  ss: the same call untimed, 2 ms sleep, start, call, end           (Timer steady)
  sn: the same call untimed, start, call, end
Event time = median over 15 calls, lower of two passes. Kernel time = CUPTI's duration of the call's kernels
(torch.profiler), median over 15 calls in a third pass, with every kernel name and count listed.

    python .devrun/s27/decompose.py [D,D,...]
"""
import statistics
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import rope

REPS = 15


def prep(mode, fn, flush):
    if mode[0] == "z":
        flush.zero_()
    else:
        fn()
    if mode[1] == "s":
        torch.cuda._sleep(4_000_000)


def event_time(mode, fn, flush):
    best = []
    for _ in range(2):
        ev = []
        for _ in range(REPS):
            prep(mode, fn, flush)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            ev.append((s, e))
        torch.cuda.synchronize()
        best.append(statistics.median(s.elapsed_time(e) for s, e in ev) * 1e3)
    return min(best)


def kernel_time(mode, fn, flush):
    """CUPTI durations (us) of the timed calls' GPU activities: prep's activities are told apart by marking the
    timed call with a record_function range and taking the device activities launched inside it."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(REPS):
            prep(mode, fn, flush)
            with torch.profiler.record_function("TIMED"):
                fn()
        torch.cuda.synchronize()
    timed = [e for e in prof.events() if e.name == "TIMED"]
    per_call = []
    names = defaultdict(int)
    for t in timed:
        dev = []
        stack = list(t.cpu_children) + [t]
        seen = set()
        while stack:
            x = stack.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            stack.extend(x.cpu_children)
            for k in x.kernels:
                dev.append(k)
        for k in dev:
            names[k.name[:60]] += 1
        per_call.append(sum(k.duration for k in dev))
    return statistics.median(per_call) if per_call else float("nan"), dict(names)


def main():
    dims = [int(x) for x in sys.argv[1].split(",")] if len(sys.argv) > 1 else [18, 38, 48, 54, 56, 64, 114, 128, 206, 208]
    flush = torch.zeros(256 * 2**20, dtype=torch.uint8, device="cuda")
    src = torch.empty(2**29, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    big = lambda: dst.copy_(src)
    big()
    gb = {m: 4 * src.numel() / (event_time(m, big, flush) * 1e-6) / 1e9 for m in ("zs", "zn", "ss", "sn")}
    del src, dst
    print("1 GiB copy GB/s: " + "  ".join(f"{m} {v:.0f}" for m, v in gb.items()), flush=True)
    print("D fn mode: event us | kernel us | event - kernel | % of 1 GiB copy (event) | kernels")
    for D in dims:
        r = rope.build("triton_v4", D, 2048, variant="full").cuda()
        B = -(-32 * 2**20 // (2048 * 16 * D))
        q, k = (torch.randn(B, 2048, 16, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        nbytes = 4 * q.numel() * 2
        b1 = torch.empty(2 * q.numel(), device="cuda", dtype=torch.bfloat16).normal_()
        b1o = torch.empty_like(b1)
        fns = {"copy1": lambda: b1o.copy_(b1), "fwd": lambda: r(q, k)}
        with torch.no_grad():
            for name, fn in fns.items():
                for _ in range(3):
                    fn()
                for mode in ("zs", "zn", "ss", "sn"):
                    ev = event_time(mode, fn, flush)
                    kt, names = kernel_time(mode, fn, flush)
                    pct = 100 * nbytes / (ev * 1e-6) / 1e9 / gb[mode]
                    print(f"D={D} B={B} {name} {mode}: {ev:.2f} | {kt:.2f} | {ev - kt:.2f} | {pct:.1f}% | {names}",
                          flush=True)
        del q, k, b1, b1o


if __name__ == "__main__":
    main()
