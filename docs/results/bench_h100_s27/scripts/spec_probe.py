# ruff: noqa
"""Session 27: triton_v4's forward kernel duration (CUPTI, median of 15, lower of two rounds) at 32M elements a
tensor, per head dim and launch setting (bench_rope's NAME@SPEC), after zero, read, and a call on other inputs.

    python .devrun/s27/spec_probe.py D:SPEC,D:SPEC,...     (SPEC: triton_v4@tile=2048+warps=8, ...)
"""
import statistics
import sys

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, ".")
from scripts.bench_rope_modes import build_entry

REPS = 15


def durations(prep, fn, two):
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REPS):
            prep()
            torch.cuda._sleep(4_000_000)
            fn()
        torch.cuda.synchronize()
    ks = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA and "rope" in e.name),
                key=lambda e: e.time_range.start)
    ks = ks[1::2] if two else ks
    return statistics.median(e.time_range.elapsed_us() for e in ks)


def main():
    flush = torch.zeros(256 * 2**20, dtype=torch.uint8, device="cuda")
    for item in sys.argv[1].split(","):
        D, spec = item.split(":")
        D = int(D)
        try:
            r = build_entry(spec, D, 2048, "cuda", variant="full")
        except Exception as exc:
            print(f"D={D} {spec}: {exc}")
            continue
        B = -(-32 * 2**20 // (2048 * 16 * D))
        q, k, q2, k2 = (torch.randn(B, 2048, 16, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        nb = 4 * q.numel() * 2
        with torch.no_grad():
            fn, other = (lambda: r(q, k)), (lambda: r(q2, k2))
            try:
                for _ in range(3):
                    fn(); other()
                torch.cuda.synchronize()
            except Exception as exc:
                print(f"D={D} {spec}: {str(exc)[:200]}")
                continue
            preps = {"zero": (lambda: flush.zero_(), False), "read": (lambda: flush.view(torch.int64).amax(), False),
                     "other": (other, True)}
            res = {n: [] for n in preps}
            for _ in range(2):
                for n, (p, two) in preps.items():
                    res[n].append(durations(p, fn, two))
            # us per 268.4 MB (2 x 2 x 32M bf16 elements) so geometries of slightly different sizes compare
            print(f"D={D} {spec} B={B}: " + " | ".join(
                f"{n} {min(v):.2f} us = {min(v) * 268.435456e6 / nb:.2f} norm" for n, v in res.items()), flush=True)
        del q, k, q2, k2


if __name__ == "__main__":
    main()
