# ruff: noqa
"""The odd halves' bandwidth averaged over input tensors (session 21, call 5).

Call 3 found the same kernel 1-1.5 points apart between input pairs; here every odd half from D = 54 to 254 (and
rows at D = 48, 64, 128 as controls) is timed, forward and backward (rotate_transposed), on three input pairs with
the benchmark's timer (Timer(10): the lower of two medians of 10 calls, each after an L2 flush), % of the 1 GiB copy.
Prints per D each pair's fwd/bwd and the median over the pairs.
"""
import statistics
import sys

import torch

import rope
from scripts.bench_rope_modes import batch_for
from scripts.benchlib import Timer, copy_bandwidth

T, H = 2048, 16
timer = Timer(10)
copy_bw = copy_bandwidth(timer)
print(f"copy {copy_bw:.0f} GB/s", flush=True)
dims = [int(d) for d in sys.argv[1].split(",")]
for D in dims:
    B = batch_for(32 * 2**20, T, H, D)
    mod = rope.build("triton_v4", D, T, variant="full").cuda()
    t = [torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(6)]
    nbytes = 4 * t[0].numel() * t[0].element_size()
    fw, bw = [], []
    for a, b in ((t[0], t[1]), (t[2], t[3]), (t[4], t[5])):
        fw.append(100 * nbytes / (timer(lambda: mod(a, b)) * 1e-3) / 1e9 / copy_bw)  # noqa: B023
        bw.append(100 * nbytes / (timer(lambda: mod.rotate_transposed(a, b)) * 1e-3) / 1e9 / copy_bw)  # noqa: B023
    pairs = "  ".join(f"{f:.1f}/{g:.1f}" for f, g in zip(fw, bw))
    print(f"D={D} B={B}: {pairs}  median {statistics.median(fw):.1f}/{statistics.median(bw):.1f}", flush=True)
    del t, mod
