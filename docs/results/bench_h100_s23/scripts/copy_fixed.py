# ruff: noqa
"""Session 23: the device copy's own fixed cost. torch's copy_ timed as the benchmark times it (L2 flush, GPU
sleep, lower of two medians) at source sizes from 64 MB to 1 GiB; a least-squares line time = fixed + bytes / rate.
The head-dim sweep's 32M-element case moves 256 MB (q and k read and written): the copy of 128 MB moves as much.

    python .devrun/s23/copy_fixed.py
"""
import torch

from scripts.benchlib import Timer

SIZES_MB = (64, 128, 256, 512, 1024)


def main():
    timer = Timer(30)
    xs, ts = [], []
    for mb in SIZES_MB:
        per = []
        for _ in range(3):
            src = torch.empty(mb * 2**20, dtype=torch.uint8, device="cuda").random_()
            dst = torch.empty_like(src)
            per.append(timer(lambda: dst.copy_(src)) * 1e3)
            del src, dst
        per.sort()
        t = per[1]
        xs.append(2 * mb * 2**20)
        ts.append(t)
        print(f"copy {mb:5d} MB: {t:8.2f} us  ({2 * mb * 2**20 / t / 1e3:.0f} GB/s)  sets {per[0]:.2f} {per[2]:.2f}",
              flush=True)
    n = len(xs)
    mx, mt = sum(xs) / n, sum(ts) / n
    slope = sum((x - mx) * (t - mt) for x, t in zip(xs, ts)) / sum((x - mx) ** 2 for x in xs)
    fixed = mt - slope * mx
    rate = 1 / slope / 1e3
    print(f"fit: fixed {fixed:.2f} us, rate {rate:.0f} GB/s")
    full = xs[-1] / ts[-1] / 1e3
    for x, t in zip(xs, ts):
        print(f"  {x / 2**20:6.0f} MB moved: {100 * x / t / 1e3 / full:.1f}% of the 1 GiB copy's bandwidth")


if __name__ == "__main__":
    main()
