"""One geometry's rope forward and backward at 32M elements for ncu: warm-up, then one of each."""
import sys

import torch

import rope
from scripts.bench_rope_modes import batch_for

variant, D = sys.argv[1], int(sys.argv[2])
spec = sys.argv[3] if len(sys.argv) > 3 else ""
T, H = 2048, 16
B = batch_for(32 * 2**20, T, H, D)
mod = rope.build("triton_v4", D, T, variant=variant).cuda()
if spec:
    from dataclasses import replace
    kw = dict(kv.split("=") for kv in spec.split(","))
    mod.launch_config = replace(mod.launch_config, **{k: int(v) for k, v in kw.items()})
q = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
k = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
g = torch.randn_like(q), torch.randn_like(k)
for _ in range(3):
    y = mod(q, k)
    torch.autograd.backward(y, g)
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("prof")
y = mod(q, k)
torch.autograd.backward(y, g)
torch.cuda.synchronize()
torch.cuda.nvtx.range_pop()
print(variant, D, B, mod.launch_config, flush=True)
