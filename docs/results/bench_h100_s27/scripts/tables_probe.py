# ruff: noqa
"""Session 27: after the zero flush the flat tiling's forward loses ~1.8 us of kernel time, the rows ~0.9-1.2
(CUPTI, fit.py). Is it the cold cos/sin tables or the zeros' dirty lines? Kernel durations (CUPTI, median of 15)
at 32M elements after: zero; zero then the kernel's tables read; read (clean L2, cold tables); read then tables;
a call on other inputs (steady: tables warm, that call's dirty lines). Two rounds each, in turn.

    python .devrun/s27/tables_probe.py [D,D,...]
"""
import statistics
import sys

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, ".")
import rope
import rope.triton_rope as tr

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
    dims = [int(x) for x in sys.argv[1].split(",")] if len(sys.argv) > 1 else [54, 56, 114, 206, 128, 48, 208]
    flush = torch.zeros(256 * 2**20, dtype=torch.uint8, device="cuda")
    for D in dims:
        r = rope.build("triton_v4", D, 2048, variant="full").cuda()
        B = -(-32 * 2**20 // (2048 * 16 * D))
        q, k, q2, k2 = (torch.randn(B, 2048, 16, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        with torch.no_grad():
            fn, other = (lambda: r(q, k)), (lambda: r(q2, k2))
            for _ in range(3):
                fn(); other()
            torch.cuda.synchronize()
            tables = [t for t in r.buffers()] + [t for _, _, v in tr._ELEMENT_TABLES._store.values() for t in v]
            tbytes = sum(t.numel() * t.element_size() for t in tables[len(list(r.buffers())):])
            read_tables = lambda: [t.sum() for t in tables]
            preps = {
                "zero": (lambda: flush.zero_(), False),
                "zero+tables": (lambda: (flush.zero_(), read_tables()), False),
                "read": (lambda: flush.view(torch.int64).amax(), False),
                "read+tables": (lambda: (flush.view(torch.int64).amax(), read_tables()), False),
                "other": (other, True),
            }
            res = {n: [] for n in preps}
            for _ in range(2):
                for n, (p, two) in preps.items():
                    res[n].append(durations(p, fn, two))
            print(f"D={D} B={B} (element tables {tbytes / 1e6:.2f} MB): " + " | ".join(
                f"{n} {min(v):.2f} ({'/'.join(f'{x:.2f}' for x in v)})" for n, v in res.items()), flush=True)
        del q, k, q2, k2


if __name__ == "__main__":
    main()
