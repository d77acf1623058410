# ruff: noqa
"""Session 27: outputs of triton_v4 (forward, with positions, transposed) on the CPU interpreter, saved on a first run
and compared bit for bit on a second (after swapping in a hacked kernel). Heads (4, 4) and (8, 4): blocks of 8."""
import os, sys; os.environ["TRITON_INTERPRET"] = "1"
import torch, rope
torch.manual_seed(1)
outs = []
for D in [18, 38, 54, 62, 86, 114]:
    for hq, hk in [(4, 4), (8, 4)]:
        r = rope.build("triton_v4", D, 64, variant="full")
        q = torch.randn(2, 21, hq, D, dtype=torch.bfloat16); k = torch.randn(2, 21, hk, D, dtype=torch.bfloat16)
        pos = torch.randint(0, 64, (2, 21))
        with torch.no_grad():
            outs.append([t.clone() for t in (*r(q, k), *r(q, k, positions=pos), *r.rotate_transposed(q, k))])
path = sys.argv[1]
if os.path.exists(path):
    ref = torch.load(path)
    bad = sum(int(not torch.equal(a, b)) for x, y in zip(outs, ref) for a, b in zip(x, y))
    print("compared", sum(len(x) for x in outs), "tensors; differ:", bad)
else:
    torch.save(outs, path); print("saved")
