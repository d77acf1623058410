# ruff: noqa: B023, B905, E501, E741  (a record of what ran on the H100, kept as it ran)
"""Host time of the module call vs the bare launch, kernel mocked (CPU)."""

import os
import time

os.environ.setdefault("TRITON_INTERPRET", "1")
import torch

import rope
from rope import triton_rope


class Nop:
    def __getitem__(self, grid):
        return lambda *a, **k: None


triton_rope._kernels.rope_kernel = Nop()


def loop(f, n=3000, rep=7):
    best = []
    for _ in range(rep):
        t = time.perf_counter()
        for _ in range(n):
            f()
        best.append((time.perf_counter() - t) / n * 1e6)
    best.sort()
    return best[len(best) // 2]


mod = rope.build("triton_v4", 64, 256)
q0 = torch.randn(1, 128, 8, 64)
k0 = torch.randn(1, 128, 8, 64)
pos = torch.arange(128).expand(1, 128).contiguous()
for grad in (False, True):
    q = q0.clone().requires_grad_(grad)
    k = k0.clone().requires_grad_(grad)
    for p in (None, pos):
        bare = lambda: triton_rope.launch(q, k, mod.cos, mod.sin, p, True, False, False)
        call = lambda: mod(q, k, positions=p)
        b = loop(bare)
        c = loop(call)
        print(f"grad={grad} pos={p is not None}: bare {b:.1f} us call {c:.1f} us  diff {c - b:.1f}")


class F(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k):
        return q.new_empty(q.shape), k.new_empty(k.shape)

    @staticmethod
    def backward(ctx, a, b):
        return a, b


q = q0.clone().requires_grad_()
k = k0.clone().requires_grad_()
print(
    "Function.apply(empty outputs)",
    loop(lambda: F.apply(q, k)),
    "us; two new_empty",
    loop(lambda: (q.new_empty(q.shape), k.new_empty(k.shape))),
)
