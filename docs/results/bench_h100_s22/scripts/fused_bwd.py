# ruff: noqa
"""Session 22: the fused-qkv backward in one launch (rotation + v's gradient copy, rope_copy_kernel) against the
two launches it replaces (the rotation, then copy_heads), timed alternately on the same tensors.

    python .devrun/s22/fused_bwd.py
"""
import statistics
import sys

import torch

import rope
from rope import triton_rope as tr
from scripts.benchlib import Timer, copy_bandwidth

SHAPES = [  # B, T, HQ, HK, D, variant
    (24, 512, 8, 8, 48, "partial"),  # seed004
    (32, 1024, 12, 12, 64, "partial"),  # GPT-2 small
    (8, 2048, 16, 16, 128, "full"),
    (8, 2048, 32, 8, 128, "full"),  # GQA
    (9, 2048, 16, 16, 114, "full"),  # an odd half
    (24, 2048, 16, 16, 54, "full"),
]

real_launch = tr.launch
real_geometry = tr._copy_geometry


def geometry_2048(src, dst, buffer, per_program):
    return real_geometry(src, dst, buffer, 2048)


def two_launches(*a, copy=None, **kw):
    out = real_launch(*a, **kw)
    if copy is not None:
        tr.copy_heads(copy[0], kw["out_buffer"], copy[1], traced=kw.get("traced", False))
    return out


def main():
    timer = Timer(60)
    bw = copy_bandwidth(timer)
    print(f"copy bandwidth {bw:.0f} GB/s", flush=True)
    print("shape | one launch us | one launch, 2048-element copy programs us | two launches us | one/two | "
          "one2048/two | one %copy | two %copy | equal")
    for B, T, HQ, HK, D, variant in SHAPES:
        r = rope.build("triton_v4", D, T, variant=variant).cuda()
        r2 = rope.build("triton_v4", D, T, variant=variant).cuda()  # own tables: own plans
        gq = torch.randn(B, T, HQ, D, device="cuda", dtype=torch.bfloat16)
        gk = torch.randn(B, T, HK, D, device="cuda", dtype=torch.bfloat16)
        gv = torch.randn(B, HK, T, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        args = (gq, gk, gv, r.cos, r.sin, None, r._partial_shortcut, False)
        one = lambda: tr.qkv_backward(*args)
        args2 = (gq, gk, gv, r2.cos, r2.sin, None, r2._partial_shortcut, False)
        def one2048():
            tr._copy_geometry = geometry_2048
            try:
                return tr.qkv_backward(*args2)
            finally:
                tr._copy_geometry = real_geometry
        def two():
            tr.launch = two_launches
            try:
                return tr.qkv_backward(*args)
            finally:
                tr.launch = real_launch
        same = torch.equal(one(), two()) and torch.equal(one2048(), two())
        nbytes = 2 * (gq.numel() + gk.numel() + gv.numel()) * 2
        t1, t2, t3 = [], [], []
        for _ in range(5):  # alternate, so drift hits each
            t1.append(timer(one))
            t3.append(timer(one2048))
            t2.append(timer(two))
        m1, m2, m3 = (statistics.median(t) * 1e3 for t in (t1, t2, t3))
        p1, p2 = nbytes / (m1 * 1e-6) / 1e9 / bw * 100, nbytes / (m2 * 1e-6) / 1e9 / bw * 100
        print(f"{B}x{T}x{HQ}/{HK}x{D} {variant} | {m1:.1f} | {m3:.1f} | {m2:.1f} | {m1 / m2:.3f} | {m3 / m2:.3f} | "
              f"{p1:.1f} | {p2:.1f} | {same}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
