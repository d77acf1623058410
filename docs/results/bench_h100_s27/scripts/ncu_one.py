# ruff: noqa
"""One forward call of triton_v4 (32M elements a tensor, variant full) per head dim, for Nsight Compute
(its default cache control flushes the caches before each profiled kernel: a clean L2, as --flush read)."""
import sys
import torch
import rope
for D in [int(x) for x in sys.argv[1].split(",")]:
    r = rope.build("triton_v4", D, 2048, variant="full").cuda()
    B = -(-32 * 2**20 // (2048 * 16 * D))
    q, k = (torch.randn(B, 2048, 16, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    with torch.no_grad():
        r(q, k)
        torch.cuda.synchronize()
    del q, k
