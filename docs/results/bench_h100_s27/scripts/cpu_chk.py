# ruff: noqa
"""Session 27: the gather hack (hacks/gather.diff applied) against the float64 torch reference on the CPU interpreter,
bf16, variant full, 2 x 37 tokens, (3, 3) and (4, 2) heads. Run with the hacked kernel file in place."""
import os; os.environ["TRITON_INTERPRET"] = "1"
import torch, rope
torch.manual_seed(0)
bad = 0
for D in [18, 54, 56, 114, 38, 62]:
    for hq, hk in [(3, 3), (4, 2)]:
        ref = rope.build("torch", D, 64, variant="full")
        r = rope.build("triton_v4", D, 64, variant="full")
        q = torch.randn(2, 37, hq, D, dtype=torch.bfloat16); k = torch.randn(2, 37, hk, D, dtype=torch.bfloat16)
        a = r(q, k); b = ref(q.double(), k.double())
        for x, y in zip(a, b):
            err = (x.double() - y).abs().max().item()
            tol = 2 * 2**-8 * y.abs().max().item()
            if err > tol: bad += 1; print("BAD", D, hq, hk, err)
        print(D, hq, hk, "ok", flush=True)
print("bad", bad)
