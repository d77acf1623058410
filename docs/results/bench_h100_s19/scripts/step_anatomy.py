# ruff: noqa: B023, B905, E501, E741  (a record of what ran on the H100, kept as it ran)
"""Where a compiled seed004 step's time goes, per rope: synced wall, host time, GPU-only time.

synced: sync, events around step(), sync (bench_step's measure).
host / gpu: a ~40 ms GPU sleep first, so the host queues the whole step while the GPU sleeps: the
events then time the GPU work alone (no host gaps) and perf_counter the host's enqueueing alone.
"""

import argparse
import statistics
import time

import torch
from omegaconf import OmegaConf

from scripts import bench_step as bs

p = argparse.ArgumentParser()
p.add_argument("--model", default="seed004")
p.add_argument("--ropes", default="none,torch,triton_v4")
p.add_argument("--rounds", type=int, default=8)
p.add_argument("--per", type=int, default=20)
p.add_argument("--mode", default="compile")
a = p.parse_args()
args = bs.parse_args(["--model", a.model, "--device", "cuda"])
cfg = OmegaConf.load(bs.CONF / "model" / f"{a.model}.yaml")
B, V = bs.default_batch(a.model), bs.default_vocab(a.model)
torch.backends.cuda.matmul.allow_tf32 = True
steps = {}
for n in a.ropes.split(","):
    steps[n], _ = bs.make_step(cfg, n, a.mode, args, B, V)
    for _ in range(5):
        steps[n]()
    torch.cuda.synchronize()
    print("built", n, flush=True)
res = {n: {"synced": [], "host": [], "gpu": []} for n in steps}
order = list(steps)
ev = lambda: torch.cuda.Event(enable_timing=True)
for r in range(a.rounds):
    for n in order[r % 3 :] + order[: r % 3]:
        f = steps[n]
        s1, h1, g1 = [], [], []
        for _ in range(a.per):
            torch.cuda.synchronize()
            s, e = ev(), ev()
            s.record()
            f()
            e.record()
            e.synchronize()
            s1.append(s.elapsed_time(e))
        for _ in range(a.per):
            torch.cuda.synchronize()
            torch.cuda._sleep(80_000_000)
            s, e = ev(), ev()
            s.record()
            t0 = time.perf_counter()
            f()
            h1.append((time.perf_counter() - t0) * 1e3)
            e.record()
            e.synchronize()
            g1.append(s.elapsed_time(e))
        res[n]["synced"].append(statistics.median(s1))
        res[n]["host"].append(statistics.median(h1))
        res[n]["gpu"].append(statistics.median(g1))
print(
    f"{a.model} {a.mode}: medians over {a.rounds} rounds of per-round medians ({a.per} steps each); paired diff vs torch [min, max over rounds]"
)
for n in steps:
    line = f"  {n:10s}"
    for k in ("synced", "host", "gpu"):
        v = statistics.median(res[n][k])
        line += f"  {k} {v:7.3f} ms"
        if n != "torch" and "torch" in res:
            d = [x - y for x, y in zip(res[n][k], res["torch"][k])]
            line += f" ({statistics.median(d):+.3f} [{min(d):+.3f},{max(d):+.3f}])"
    print(line, flush=True)
