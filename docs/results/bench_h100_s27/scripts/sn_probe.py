# ruff: noqa
"""Session 27: why does the forward at D = 114 and 206 take ~10 us more when it directly follows the same call
(no sleep between)? Host time of one call with the GPU busy (a sync in the call would show as the GPU's
remaining work), torch's sync debug mode, back-to-back streams on the same and on other inputs, and CUPTI's
kernel durations of the timed call in each way of preparing it.

    python .devrun/s27/sn_probe.py [D,D,...]
"""
import statistics
import sys
import time

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import rope

REPS = 15


def timed(prep, fn, reps=REPS):
    best = []
    for _ in range(2):
        ev = []
        for _ in range(reps):
            prep()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            ev.append((s, e))
        torch.cuda.synchronize()
        best.append(statistics.median(s.elapsed_time(e) for s, e in ev) * 1e3)
    return min(best)


def cupti(prep, fn, reps=REPS):
    """Median CUPTI duration (us) of the rope kernels run by the timed calls (every other rope kernel when prep
    runs one too), and the kernel names seen."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            prep()
            fn()
        torch.cuda.synchronize()
    dev = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    dev.sort(key=lambda e: e.time_range.start)
    names = sorted({e.name[:50] for e in dev})
    rope_k = [e for e in dev if "rope" in e.name]
    gaps = []
    return rope_k, names, dev


def main():
    dims = [int(x) for x in sys.argv[1].split(",")] if len(sys.argv) > 1 else [54, 114, 128, 206]
    flush = torch.zeros(256 * 2**20, dtype=torch.uint8, device="cuda")
    for D in dims:
        r = rope.build("triton_v4", D, 2048, variant="full").cuda()
        B = -(-32 * 2**20 // (2048 * 16 * D))
        q, k, q2, k2 = (torch.randn(B, 2048, 16, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        fn = lambda: r(q, k)
        other = lambda: r(q2, k2)
        with torch.no_grad():
            for _ in range(3):
                fn(); other()
            torch.cuda.synchronize()
            # host time of one call while the GPU is busy for ~10 ms
            hosts = []
            for _ in range(5):
                torch.cuda._sleep(20_000_000)
                t0 = time.perf_counter()
                fn()
                hosts.append((time.perf_counter() - t0) * 1e6)
                torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
            try:
                fn()
                sync = "no torch sync"
            except RuntimeError as exc:
                sync = f"torch sync: {str(exc)[:120]}"
            torch.cuda.set_sync_debug_mode(0)
            torch.cuda.synchronize()
            preps = {
                "zero+sleep": lambda: (flush.zero_(), torch.cuda._sleep(4_000_000)),
                "zero": lambda: flush.zero_(),
                "same+sleep": lambda: (fn(), torch.cuda._sleep(4_000_000)),
                "same": fn,
                "other": other,
                "other+sleep": lambda: (other(), torch.cuda._sleep(4_000_000)),
                "sleep only": lambda: torch.cuda._sleep(4_000_000),
            }
            print(f"D={D} B={B}: host us of one call with the GPU busy {[round(h, 1) for h in hosts]}; {sync}",
                  flush=True)
            for name, prep in preps.items():
                ev = timed(prep, fn)
                rk, names, dev = cupti(prep, fn)
                # the timed call's kernel: the last rope kernel of each rep
                durs = [e.time_range.elapsed_us() for e in rk]
                last = durs[1::2] if name in ("same", "same+sleep", "other", "other+sleep") else durs
                # the idle gap on the GPU just before each timed kernel
                idx = {id(e): i for i, e in enumerate(dev)}
                timed_k = rk[1::2] if name in ("same", "same+sleep", "other", "other+sleep") else rk
                gaps = [e.time_range.start - dev[idx[id(e)] - 1].time_range.end for e in timed_k if idx[id(e)] > 0]
                print(f"  {name:12s} event {ev:7.2f} us | kernel {statistics.median(last):7.2f} us "
                      f"(n={len(last)}) | gap before it {statistics.median(gaps):7.2f} us | kernels {names}",
                      flush=True)
        del q, k, q2, k2


if __name__ == "__main__":
    main()
