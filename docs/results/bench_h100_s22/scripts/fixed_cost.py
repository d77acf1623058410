# ruff: noqa
"""Session 22: is the odd halves' deficit at 32M elements a fixed cost per launch or a lower rate? The forward
(module call, no grad) and the backward kernel (rotate_transposed) of triton_v4, variant full, timed at five sizes
from 8M to 128M elements a tensor (B x 2048 x 16 x D, the head-dim sweep's shape), median of 3 input sets each;
then per head dim a least-squares line time = a + bytes / rate: a is the fixed cost (us), rate the asymptotic
bandwidth (% of the copy's).

    python .devrun/s22/fixed_cost.py
"""
import statistics

import torch

import rope
from scripts.benchlib import Timer, copy_bandwidth

DS = (54, 56, 112, 114, 116, 128, 206, 208)
SIZES_M = (8, 16, 32, 64, 128)


def main():
    timer = Timer(20)
    bw = copy_bandwidth(timer)
    print(f"copy bandwidth {bw:.0f} GB/s", flush=True)
    for D in DS:
        r = rope.build("triton_v4", D, 2048, variant="full").cuda()
        xs, fw, bw_ = [], [], []
        cells = []
        for m in SIZES_M:
            B = -(-m * 2**20 // (2048 * 16 * D))
            nbytes = 4 * B * 2048 * 16 * D * 2
            tf, tb = [], []
            for _ in range(3):
                q = torch.randn(B, 2048, 16, D, device="cuda", dtype=torch.bfloat16)
                k = torch.randn_like(q)
                with torch.no_grad():
                    tf.append(timer(lambda: r(q, k)))
                tb.append(timer(lambda: r.rotate_transposed(q, k)))
                del q, k
            f, b = statistics.median(tf) * 1e3, statistics.median(tb) * 1e3
            xs.append(nbytes); fw.append(f); bw_.append(b)
            cells.append(f"{m}M {100 * nbytes / (f * 1e-6) / 1e9 / bw:.1f}/{100 * nbytes / (b * 1e-6) / 1e9 / bw:.1f}")
        out = []
        for name, ys in (("fwd", fw), ("bwd", bw_)):
            n = len(xs); mx, my = sum(xs) / n, sum(ys) / n
            slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
            a = my - slope * mx  # us
            rate = 1 / slope / 1e3  # bytes/us -> GB/s
            out.append(f"{name} fixed {a:.1f} us, rate {100 * rate / bw:.1f}%")
        print(f"D={D}: " + "  ".join(cells) + " | " + "; ".join(out), flush=True)


if __name__ == "__main__":
    main()
