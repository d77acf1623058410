# ruff: noqa
"""Session 26: does the benchmark's L2 flush (zeroing 256 MB, as triton.testing.do_bench does) charge the timed call
with writing back the flush's dirty lines? A device copy (dst.copy_(src)) of several sizes and triton_v4's forward at
32M timed after each flush: zero (the default), read (the buffer read, L2 left clean), zero+read.

    python .devrun/s26/flush_probe.py
"""
import torch

import rope
from scripts.benchlib import Timer


class ZeroRead(Timer):
    def _flush(self):
        self.flush.zero_()
        self.flush.view(torch.int64).amax()


def main():
    timers = {"zero": Timer(30, "zero"), "read": Timer(30, "read"), "zero+read": ZeroRead(30, "read")}
    print("copy dst.copy_(src): GB/s (read + written) per flush")
    for mb in (32, 64, 128, 256, 1024):
        n = mb * 2**20
        src = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
        dst = torch.empty_like(src)
        cells = []
        for name, t in timers.items():
            ms = t(lambda: dst.copy_(src))
            cells.append(f"{name} {ms * 1e3:8.1f} us {2 * n / (ms * 1e-3) / 1e9:6.0f} GB/s")
        print(f"{mb:5d} MB: " + " | ".join(cells), flush=True)
        del src, dst
    print("triton_v4 forward, full, B x 2048 x 16 x D at >= 32M elements (module call, no grad)")
    for D in (54, 56, 128, 206):
        r = rope.build("triton_v4", D, 2048, variant="full").cuda()
        B = -(-32 * 2**20 // (2048 * 16 * D))
        q = torch.randn(B, 2048, 16, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn_like(q)
        nbytes = 4 * q.numel() * 2
        cells = []
        with torch.no_grad():
            for name, t in timers.items():
                ms = t(lambda: r(q, k))
                cells.append(f"{name} {ms * 1e3:6.1f} us {nbytes / (ms * 1e-3) / 1e9:5.0f} GB/s")
        print(f"D={D} B={B}: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
