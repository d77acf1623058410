# ruff: noqa
"""Does where k lies relative to q change the joint flat kernel's bandwidth? (session 20, call 4)

The joint programs read q's and k's blocks of the same token together; in the benchmark q and k are separate
allocations, whose offsets may share their low address bits (the same DRAM channel or L2 slice at the same time).
Per geometry, forward and backward (rotate_transposed) % of the 1 GiB copy, with the benchmark's timer:
  apart:   q and k separate tensors (as scripts/bench_rope.py)
  shifted: k a view into a larger buffer, 4 KB + 384 B in
  fused:   q and k views of one (B, T, 3, H, D) projection, as the model passes them
"""
import sys

import torch

import rope
from scripts.bench_rope_modes import batch_for
from scripts.benchlib import Timer, copy_bandwidth

T, H = 2048, 16
timer = Timer(20)
copy_bw = copy_bandwidth(timer)
print(f"copy {copy_bw:.0f} GB/s", flush=True)
for spec in sys.argv[1:]:
    variant, D = spec.split(":")[0], int(spec.split(":")[1])
    B = batch_for(32 * 2**20, T, H, D)
    mod = rope.build("triton_v4", D, T, variant=variant).cuda()
    n = B * T * H * D
    q = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    layouts = {"apart": (q, torch.randn_like(q))}
    buf = torch.randn(n + 4096, device="cuda", dtype=torch.bfloat16)
    layouts["shifted"] = (q, buf[2240:2240 + n].view(B, T, H, D))
    qkv = torch.randn(B, T, 3, H, D, device="cuda", dtype=torch.bfloat16)
    layouts["fused"] = (qkv[:, :, 0], qkv[:, :, 1])
    out = []
    for name, (a, b) in layouts.items():
        nbytes = 4 * a.numel() * a.element_size()
        f = timer(lambda: mod(a, b))  # noqa: B023
        g = timer(lambda: mod.rotate_transposed(a, b))  # noqa: B023
        out.append(f"{name} {100 * nbytes / (f * 1e-3) / 1e9 / copy_bw:.1f}/{100 * nbytes / (g * 1e-3) / 1e9 / copy_bw:.1f}")
    print(f"{variant} D={D} B={B}: " + "  ".join(out), flush=True)
