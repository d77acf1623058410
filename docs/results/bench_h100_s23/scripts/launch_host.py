# ruff: noqa
"""Session 23: the host cost of the rotation's launch in a compiled graph, torch against triton_v4, with q and k as
views of one qkv projection (what the model passes: Inductor hands the user kernel two reinterpret_tensor views) and
as separate tensors. Each compiled function rotates 12 (q, k) pairs (seed004's shape, 24 x 512 x 8 x 48) through
``rotate_qkv`` with grad (the training forward); the GPU sleeps while the host enqueues, so perf_counter times the
host alone. Rounds in shuffled order; per case the median host us per launch, and the paired median difference
against torch on views with a bootstrap 95% interval over rounds."""
import random, statistics, time
import torch
import rope
from llm.model import export_to_compile_workers

torch._inductor.config.static_launch_user_defined_triton_kernels = True
export_to_compile_workers({"static_launch_user_defined_triton_kernels": True})
B, T, H, D, L = 24, 512, 8, 48, 12
dev = "cuda"
mods = {n: rope.build(n, D, T).to(dev) for n in ("torch", "triton_v4")}


def views_fn(r):
    def f(qkvs):
        return [r.rotate_qkv(x, H, H)[:2] for x in qkvs]
    return torch.compile(f)


def apart_fn(r):
    def f(qs, ks):
        return [r(q, k) for q, k in zip(qs, ks)]
    return torch.compile(f)


qkvs = [torch.randn(B, T, 3 * H * D, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(L)]
qs = [torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(L)]
ks = [torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(L)]
cases = {}
for n, r in mods.items():
    fv, fa = views_fn(r), apart_fn(r)
    cases[f"{n} views"] = lambda fv=fv: fv(qkvs)
    cases[f"{n} apart"] = lambda fa=fa: fa(qs, ks)
for c in cases.values():
    for _ in range(3):
        c()
torch.cuda.synchronize()
names = list(cases)
res = {n: [] for n in names}
R = 400
for r in range(R):
    order = names[:]
    random.Random(r).shuffle(order)
    for n in order:
        torch.cuda.synchronize()
        torch.cuda._sleep(20_000_000)
        t0 = time.perf_counter()
        out = cases[n]()
        res[n].append((time.perf_counter() - t0) * 1e6 / L)
        del out
base = res["torch views"]
print(f"host us per launch (compiled function of {L} rotations, with grad), {R} rounds")
for n in names:
    v = res[n]
    d = [a - b for a, b in zip(v, base)]
    rng = random.Random(0)
    bs = sorted(statistics.median(d[rng.randrange(R)] for _ in range(R)) for _ in range(500))
    print(f"  {n:16s} {statistics.median(v):7.2f}   vs torch views {statistics.median(d):+6.2f} [{bs[12]:+.2f}, {bs[487]:+.2f}]")
