# ruff: noqa: B023, B905, E501, E741  (a record of what ran on the H100, kept as it ran)
"""v's gradient (heads-major) into d qkv: copy_heads vs aten copy_ vs compiled copy_, % of 1 GiB copy."""

import torch
import triton

from rope import triton_rope


def bench(f):
    return triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median")


big = torch.empty(2**29, dtype=torch.bfloat16, device="cuda")
big2 = torch.empty_like(big)
cp = bench(lambda: big2.copy_(big))
bw = 2 * big.numel() * 2 / cp / 1e6
print(f"1 GiB copy: {cp:.3f} ms = {bw:.0f} GB/s")
for B, T, HQ, HK, D in (
    (24, 512, 8, 8, 48),
    (8, 2048, 16, 16, 128),
    (8, 2048, 16, 16, 48),
    (8, 2048, 32, 8, 64),
    (16, 2048, 16, 16, 20),
):
    dqkv = torch.empty(B, T, (HQ + 2 * HK) * D, dtype=torch.bfloat16, device="cuda")
    dv = dqkv[..., (HQ + HK) * D :].view(B, T, HK, D)
    gv = torch.randn(B, HK, T, D, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
    ref = gv.clone()
    triton_rope.copy_heads(gv, dqkv, dv)
    assert torch.equal(dv, ref)
    comp = torch.compile(lambda a, b: b.copy_(a))
    nbytes = 2 * gv.numel() * 2
    t_ours = bench(lambda: triton_rope.copy_heads(gv, dqkv, dv))
    t_aten = bench(lambda: dv.copy_(gv))
    t_comp = bench(lambda: comp(gv, dv))
    print(
        f"{B}x{T}x{HK}x{D} ({nbytes / 1e6:.1f} MB moved): copy_heads {t_ours * 1e3:.1f} us ({nbytes / t_ours / 1e6 / bw * 100:.1f}%)  "
        f"aten {t_aten * 1e3:.1f} us ({nbytes / t_aten / 1e6 / bw * 100:.1f}%)  compiled {t_comp * 1e3:.1f} us ({nbytes / t_comp / 1e6 / bw * 100:.1f}%)"
    )
