# ruff: noqa
"""Session 27: triton_v4's forward kernel duration (CUPTI, torch.profiler) against size, per geometry and launch
setting, after the benchmark's zero flush and after a call on other inputs (steady); a least-squares line
duration = fixed + bytes / rate per row. Median of 15 calls each; B x 2048 x 16 x D at about 8M-64M elements.

    python .devrun/s27/fit.py
"""
import statistics
import sys

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, ".")
from scripts.bench_rope_modes import build_entry

REPS = 15
CONFIGS = [(54, "triton_v4"), (54, "triton_v4@block=4"), (54, "triton_v4@apart"), (54, "triton_v4@split"),
           (54, "triton_v4@regs=40"), (56, "triton_v4"), (114, "triton_v4"), (114, "triton_v4@elements"),
           (114, "triton_v4@apart"), (128, "triton_v4"), (48, "triton_v4"), (206, "triton_v4"), (208, "triton_v4")]
SIZES = [8, 16, 32, 64]  # M elements a tensor


def durations(prep, fn, two):
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REPS):
            prep()
            fn()
        torch.cuda.synchronize()
    ks = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA and "rope" in e.name),
                key=lambda e: e.time_range.start)
    ks = ks[1::2] if two else ks
    return statistics.median(e.time_range.elapsed_us() for e in ks), len(ks)


def main():
    only = sys.argv[1].split(",") if len(sys.argv) > 1 else None
    flush = torch.zeros(256 * 2**20, dtype=torch.uint8, device="cuda")
    print("D spec mode: duration us at " + ", ".join(f"{s}M" for s in SIZES) + " | fixed us | rate GB/s", flush=True)
    for D, spec in CONFIGS:
        if only and str(D) not in only:
            continue
        r = build_entry(spec, D, 2048, "cuda", variant="full")
        res = {"zero": [], "other": []}
        nb = []
        for S in SIZES:
            B = max(1, round(S * 2**20 / (2048 * 16 * D)))
            q, k, q2, k2 = (torch.randn(B, 2048, 16, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
            nb.append(4 * q.numel() * 2)
            with torch.no_grad():
                fn, other = (lambda: r(q, k)), (lambda: r(q2, k2))
                for _ in range(3):
                    fn(); other()
                res["zero"].append(durations(lambda: (flush.zero_(), torch.cuda._sleep(4_000_000)), fn, False)[0])
                res["other"].append(durations(lambda: (other(), torch.cuda._sleep(4_000_000)), fn, True)[0])
            del q, k, q2, k2
        for mode, ts in res.items():
            n = len(ts)
            mx, my = sum(nb) / n, sum(ts) / n
            slope = sum((x - mx) * (y - my) for x, y in zip(nb, ts)) / sum((x - mx) ** 2 for x in nb)
            fixed = my - slope * mx
            print(f"D={D} {spec} {mode}: " + ", ".join(f"{t:.2f}" for t in ts) + f" | {fixed:.2f} | "
                  f"{1e-3 / slope:.0f}  (bytes {', '.join(f'{b / 1e6:.0f}' for b in nb)} MB)", flush=True)


if __name__ == "__main__":
    main()
