# ruff: noqa
"""Session 28: host time of one call while the GPU is busy (a ~10 ms sleep queued before it), against the same
call with the GPU idle, for the module call and its parts, at 32M and 1M elements a tensor.

    python .devrun/s28/host_busy.py
"""
import cProfile
import io
import pstats
import statistics
import sys
import time

import torch

sys.path.insert(0, ".")
import rope
from rope import triton_rope
from scripts.bench_rope_modes import bare_launcher

N = 15


def host_us(fn, busy):
    out = []
    for _ in range(N):
        torch.cuda.synchronize()
        if busy:
            torch.cuda._sleep(20_000_000)
        t0 = time.perf_counter()
        res = fn()
        out.append((time.perf_counter() - t0) * 1e6)
        del res
        torch.cuda.synchronize()
    return statistics.median(out), max(out), min(out)


def main():
    torch.cuda.init()
    print(torch.__version__, torch.cuda.get_device_name(), flush=True)
    for D, elements in ((54, 32 * 2**20), (128, 32 * 2**20), (128, 2**20 // 2)):
        T, H = 2048, 16
        B = max(1, -(-elements // (T * H * D)))
        if elements < 2**21:
            B, T = 1, elements // (H * D)
        r = rope.build("triton_v4", D, 2048, variant="full").cuda()
        q, k = (torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        qg, kg = (x.detach().clone().requires_grad_(True) for x in (q, k))
        go = bare_launcher(r)(q, k)
        plan = triton_rope.launch_plan(q, k, r.cos, r.sin, None, r.variant == "partial", r.low_precision, False,
                                       interleaved=False, config=r.launch_config)
        oq, ok = torch.empty_like(q), torch.empty_like(k)
        ops = {
            "empty_like x2": lambda: (torch.empty_like(q), torch.empty_like(k)),
            "torch q.mul(2)": lambda: q.mul(2),
            "torch q.mul_(1) (no alloc)": lambda: q.mul_(1),
            "bare: alloc + triton launch": go,
            "plan.run, outputs given": lambda: plan.run(q, k, oq, ok, None, r.cos, r.sin),
            "module r(q, k) no_grad": lambda: r(q, k),
            "module r(q, k) grad": lambda: r(qg, kg),
        }
        for _ in range(3):
            for f in ops.values():
                f()
        torch.cuda.synchronize()
        print(f"\nD={D} shape {B}x{T}x{H}x{D} ({q.numel() / 2**20:.1f}M elements a tensor): host us median / max / min",
              flush=True)
        for name, f in ops.items():
            ctx = torch.no_grad() if "no_grad" in name else torch.enable_grad()
            with ctx:
                idle = host_us(f, False)
                busy = host_us(f, True)
            print(f"  {name:30s} idle {idle[0]:8.1f} / {idle[1]:8.1f} / {idle[2]:7.1f}   busy {busy[0]:8.1f} / "
                  f"{busy[1]:8.1f} / {busy[2]:7.1f}", flush=True)
        if elements > 2**24:
            prof = cProfile.Profile()
            with torch.no_grad():
                for _ in range(5):
                    torch.cuda.synchronize()
                    torch.cuda._sleep(20_000_000)
                    prof.enable()
                    r(q, k)
                    prof.disable()
                    torch.cuda.synchronize()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(8)
            print("\n".join(s.getvalue().splitlines()[:30]), flush=True)


if __name__ == "__main__":
    main()
