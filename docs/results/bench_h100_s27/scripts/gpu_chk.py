# ruff: noqa
"""triton_v4 against the float64 formula on the GPU (bf16, variant full, forward),
at B=3 T=1031 and GQA; max error over the bf16 ulp of the result's scale."""
import torch, rope
bad = 0
for D in [18, 38, 54, 56, 62, 86, 114, 150, 206, 230, 130]:
    for hq, hk in [(16, 16), (12, 4)]:
        ref = rope.build("torch", D, 2048, variant="full").cuda()
        r = rope.build("triton_v4", D, 2048, variant="full").cuda()
        q = torch.randn(3, 1031, hq, D, device="cuda", dtype=torch.bfloat16); k = torch.randn(3, 1031, hk, D, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            for a, b in ((r(q, k), ref(q.double(), k.double())), (r.rotate_transposed(q, k), ref(q.double(), k.double(), inverse=True) if False else None)) if False else ((r(q, k), ref(q.double(), k.double())),):
                for x, y in zip(a, b):
                    err = ((x.double() - y).abs() / (y.abs() + 1e-30)).masked_fill(y.abs() < 1e-3, 0).max().item()
                    if err > 2**-8:
                        bad += 1; print("BAD", D, hq, hk, err)
print("gpu check bad:", bad)
