"""Is the backward's deficit at R2 = 2 mod 8 the kernel (INVERSE) or the tensors it is timed on?

Times the forward and the backward kernel of ``triton_v4`` on the same two pairs of tensors (32M elements
each) with ``triton.testing.do_bench`` (median, best of 3). Session 12, call 8.
"""

import torch
import triton

import rope

torch.manual_seed(0)
for D in (20, 36, 48):
    B = -(-32 * 2**20 // (2048 * 16 * D))
    m = rope.build("triton_v4", D, 2048).cuda()
    ts = [torch.randn(B, 2048, 16, D, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    nbytes = 2 * 2 * ts[0].numel() * 2

    res = {}
    for name, (a, b) in (("qk", (ts[0], ts[1])), ("gqgk", (ts[2], ts[3]))):
        for inv in (False, True):
            if inv:
                def fn(a=a, b=b, m=m):
                    return m.rotate_transposed(a, b)
            else:
                def fn(a=a, b=b, m=m):
                    return m.rotate(a, b, None)
            fn()
            torch.cuda.synchronize()
            ms = min(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") for _ in range(3))
            res[f"{name} {'bwd' if inv else 'fwd'}"] = f"{100 * nbytes / (ms * 1e-3) / 3.0e12:.1f}"
    print(f"D={D} B={B}", res, flush=True)
