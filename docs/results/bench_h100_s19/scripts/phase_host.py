# ruff: noqa  (a record of what ran on the H100)
"""The compiled seed004 step's host time by phase, per rope: the forward (to the loss) and the backward, each
enqueued while the GPU sleeps, so perf_counter times the host alone; the GPU time of each phase from events.
Interleaved rounds, paired by round against rope=torch."""
import argparse, statistics, time
import torch
from omegaconf import OmegaConf
from scripts import bench_step as bs
from llm.model import build_model, compile_model
from llm.optim import build_optimizers

p = argparse.ArgumentParser()
p.add_argument("--ropes", default="none,torch,triton_v4")
p.add_argument("--rounds", type=int, default=12)
p.add_argument("--per", type=int, default=15)
a = p.parse_args()
cfg = OmegaConf.load(bs.CONF / "model" / "seed004.yaml")
B, V = bs.default_batch("seed004"), bs.default_vocab("seed004")
dev = torch.device("cuda")
parts = {}
for n in a.ropes.split(","):
    torch.manual_seed(0)
    model = build_model(cfg, bs.rope_config(n), V).to(dev)
    opt = build_optimizers(model, OmegaConf.to_container(OmegaConf.load(bs.CONF / "optim" / "adamw.yaml")), dev)
    cm = compile_model(model)
    batch = torch.randint(0, V, (B, cfg.seq_len), device=dev)
    def fwd(cm=cm, batch=batch):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return cm(batch, batch)[1]
    def rest(loss, opt=opt):
        loss.backward()
        for o in opt:
            o.step(); o.zero_grad(set_to_none=True)
    for _ in range(5):
        rest(fwd())
    torch.cuda.synchronize()
    parts[n] = (fwd, rest)
    print("built", n, flush=True)
ev = lambda: torch.cuda.Event(enable_timing=True)
res = {n: {"fwd host": [], "bwd+opt host": [], "fwd gpu": [], "bwd+opt gpu": []} for n in parts}
names = list(parts)
for r in range(a.rounds):
    for n in names[r % len(names):] + names[:r % len(names)]:
        fwd, rest = parts[n]
        acc = {k: [] for k in res[n]}
        for _ in range(a.per):
            torch.cuda.synchronize()
            torch.cuda._sleep(40_000_000)
            s, e = ev(), ev(); s.record()
            t0 = time.perf_counter(); loss = fwd(); acc["fwd host"].append((time.perf_counter() - t0) * 1e3)
            e.record(); e.synchronize(); acc["fwd gpu"].append(s.elapsed_time(e))
            torch.cuda._sleep(40_000_000)
            s, e = ev(), ev(); s.record()
            t0 = time.perf_counter(); rest(loss); acc["bwd+opt host"].append((time.perf_counter() - t0) * 1e3)
            e.record(); e.synchronize(); acc["bwd+opt gpu"].append(s.elapsed_time(e))
        for k in acc:
            res[n][k].append(statistics.median(acc[k]))
print(f"seed004 compiled: medians over {a.rounds} rounds of per-round medians ({a.per} each); paired diff vs torch [2nd lowest, 2nd highest]")
for n in names:
    line = f"  {n:10s}"
    for k, v in res[n].items():
        line += f" | {k} {statistics.median(v):7.3f}"
        if n != "torch":
            d = sorted(x - y for x, y in zip(v, res["torch"][k]))
            line += f" ({statistics.median(d):+.3f} [{d[1]:+.3f},{d[-2]:+.3f}])"
    print(line, flush=True)
