# ruff: noqa
"""Does the benchmark's backward deficit follow the tensors rather than the code? (session 21, call 3)

With sin negated in the table (LaunchConfig.signs) the backward launch runs the forward's kernel, yet the benchmark
read it ~1 point under the forward at D = 54 (call 2). Here the forward and the backward (rotate_transposed) are timed
on each of several input pairs, allocated as scripts/bench_rope_modes.py allocates q, k, gq, gk (then two more
pairs), with the benchmark's timer: % of the 1 GiB copy, forward/backward, per pair.
"""
import sys

import torch

import rope
from rope.triton_rope import LaunchConfig
from scripts.bench_rope_modes import batch_for
from scripts.benchlib import Timer, copy_bandwidth

T, H = 2048, 16
timer = Timer(20)
copy_bw = copy_bandwidth(timer)
print(f"copy {copy_bw:.0f} GB/s", flush=True)
for spec in sys.argv[1:]:
    variant, D = spec.split(":")[0], int(spec.split(":")[1])
    B = batch_for(32 * 2**20, T, H, D)
    mods = {"default": rope.build("triton_v4", D, T, variant=variant).cuda()}
    m2 = rope.build("triton_v4", D, T, variant=variant).cuda()
    m2.launch_config = LaunchConfig(signs=1)
    mods["signs"] = m2
    t = [torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(8)]
    pairs = {"q,k": (t[0], t[1]), "gq,gk": (t[2], t[3]), "p3": (t[4], t[5]), "p4": (t[6], t[7]), "k,q": (t[1], t[0]),
             "q,gk": (t[0], t[3])}
    nbytes = 4 * t[0].numel() * t[0].element_size()
    for mname, mod in mods.items():
        out = []
        for name, (a, b) in pairs.items():
            f = timer(lambda: mod(a, b))  # noqa: B023
            g = timer(lambda: mod.rotate_transposed(a, b))  # noqa: B023
            out.append(f"{name} {100 * nbytes / (f * 1e-3) / 1e9 / copy_bw:.1f}/{100 * nbytes / (g * 1e-3) / 1e9 / copy_bw:.1f}")
        print(f"{variant} D={D} B={B} {mname}: " + "  ".join(out), flush=True)
    del t, pairs, mods, m2
