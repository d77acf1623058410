# ruff: noqa: B023  (the timed lambdas run at once, inside the loop that binds their variables)
"""Session 9 (#13, #16): streaming (evict-first) q/k loads against the default, for triton_v4 and cutedsl,
at the head-dim sweep's 32M-element shapes and the bench's large shapes
% of the 1 GiB copy.
fwd and bwd timed in both orders. Usage: python .devrun/exp_stream.py triton_v4[,cutedsl] [dims]"""
import os
import sys

sys.path.insert(0, os.getcwd())
from dataclasses import replace

import torch

import rope
from scripts.benchlib import Timer, copy_bandwidth

names = sys.argv[1].split(",")
dims = [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [20, 36, 48, 64, 80, 128, 256]
timer = Timer(30)
bw = copy_bandwidth(timer)
print(f"copy {bw:.0f} GB/s", flush=True)
E = 32 * 2**20
shapes = [(-(-E // (2048 * 16 * D)), 16, 2048, D) for D in dims] + [(4, 16, 4096, 256), (32, 32, 4096, 128)]
for B, H, T, D in shapes:
    q = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn_like(q)
    nbytes = 2 * 2 * q.numel() * 2
    pct = lambda ms: 100 * nbytes / ms / 1e6 / bw
    line = []
    for name in names:
        mod = rope.build(name, D, T).cuda()
        base = mod.launch_config
        cfgs = [("default", base), ("stream", replace(base, streaming=True))]
        if name == "cutedsl":
            cfgs += [("512", replace(base, threads=512)), ("512+stream", replace(base, threads=512, streaming=True))]
        for tag, cfg in cfgs:
            mod.launch_config = cfg
            f = lambda: mod(q, k)
            b = lambda: mod.rotate_transposed(q, k)
            tf, tb = timer(f), timer(b)
            tb2, tf2 = timer(b), timer(f)
            line.append(f"{name}/{tag} {pct(min(tf, tf2)):.1f}/{pct(min(tb, tb2)):.1f}")
    print(f"{B}x{H}x{T}x{D}: " + "  ".join(line), flush=True)
