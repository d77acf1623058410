# ruff: noqa
"""Session 24 (launch_chain_ab.py: run once with the session-23 rope package first on PYTHONPATH, once with
the current one, alternately on one machine; no cProfile): the host cost of the rotation's launch in a compiled graph, torch against triton_v4, measured in a
chain that Inductor cannot fuse across: 12 times x -> qkv = x @ W -> rotate_qkv -> x = attention(q, k, v), as the model's layers (seed004's shape,
24 x 512 x 8 x 48, with grad), so each function makes 12 matmuls and 12 rotation launches either way (launch_host.py's
12 independent rotations were fused by Inductor into one torch kernel). GPU asleep while the host enqueues; rounds
shuffled; the paired median difference per rotation with a bootstrap 95% interval over rounds. Then a cProfile of each."""
import cProfile, io, pstats, random, statistics, time
import torch
import rope
from llm.model import export_to_compile_workers

torch._inductor.config.static_launch_user_defined_triton_kernels = True
export_to_compile_workers({"static_launch_user_defined_triton_kernels": True})
B, T, H, D, L = 24, 512, 8, 48, 12
C = H * D
dev = "cuda"
x0 = torch.randn(B * T, C, device=dev, dtype=torch.bfloat16, requires_grad=True)
Ws = [torch.randn(C, 3 * C, device=dev, dtype=torch.bfloat16) * 0.05 for _ in range(L)]
fns = {}
for n in ("torch", "triton_v4"):
    r = rope.build(n, D, T).to(dev)
    def f(x, r=r):
        for W in Ws:
            q, k, v = r.rotate_qkv((x @ W).view(B, T, 3 * C), H, H)
            y = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                 v.transpose(1, 2), is_causal=True)
            x = y.transpose(1, 2).reshape(B * T, C)
        return x
    fns[n] = torch.compile(f)
    for _ in range(3):
        fns[n](x0)
torch.cuda.synchronize()
names = list(fns)
res = {n: [] for n in names}
R = 400
for rnd in range(R):
    order = names[:]
    random.Random(rnd).shuffle(order)
    for n in order:
        torch.cuda.synchronize()
        torch.cuda._sleep(20_000_000)
        t0 = time.perf_counter()
        out = fns[n](x0)
        res[n].append((time.perf_counter() - t0) * 1e6 / L)
        del out
d = [a - b for a, b in zip(res["triton_v4"], res["torch"])]
rng = random.Random(0)
bs = sorted(statistics.median(d[rng.randrange(R)] for _ in range(R)) for _ in range(500))
print(f"host us per (matmul + rotation + attention), compiled chain of {L}, with grad, {R} rounds")
for n in names:
    print(f"  {n:10s} {statistics.median(res[n]):7.2f}")
import rope as _r; print("rope package:", _r.__file__)
print(f"  triton_v4 - torch: {statistics.median(d):+.2f} [{bs[12]:+.2f}, {bs[487]:+.2f}] us per rotation")
