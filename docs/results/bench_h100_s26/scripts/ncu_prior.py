# ruff: noqa
"""Session 26: what happens in DRAM and L2 when triton_v4's forward (32M elements, variant full) starts after the
benchmark's zero flush, after a read flush, or after its own call (steady). For ncu with --cache-control none: each
profiled forward sits in an NVTX range "prof"; what precedes it runs outside.  python ncu_prior.py D [D ...]"""
import sys

import torch

import rope
from scripts.bench_rope_modes import batch_for

T, H = 2048, 16
buf = torch.zeros(256 * 2**20, dtype=torch.uint8, device="cuda")
src = torch.empty(2**27, dtype=torch.bfloat16, device="cuda").normal_()  # a one-launch copy of 268 MB
dst = torch.empty_like(src)
for D in [int(x) for x in sys.argv[1:]]:
    B = batch_for(32 * 2**20, T, H, D)
    mod = rope.build("triton_v4", D, T, variant="full").cuda()
    q = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn_like(q)
    with torch.no_grad():
        for _ in range(3):
            mod(q, k)
        for prior in ("zero", "read", "steady"):
            for _ in range(2):  # the second of each is the one to read (the first may carry another prior's state)
                if prior == "zero":
                    buf.zero_()
                elif prior == "read":
                    buf.view(torch.int64).amax()
                else:
                    mod(q, k)
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_push("prof")
                mod(q, k)
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_pop()
    print("D", D, "B", B, flush=True)
for prior in ("zero", "read", "steady"):
    for _ in range(2):
        if prior == "zero":
            buf.zero_()
        elif prior == "read":
            buf.view(torch.int64).amax()
        else:
            dst.copy_(src)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("prof")
        dst.copy_(src)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
print("copy", flush=True)
