# ruff: noqa
"""Session 23: the compiled seed004 step's host time by phase, finely interleaved (GPU asleep while the host
enqueues, so perf_counter times the host alone), and a cProfile of each rope's compiled forward; with
TORCH_LOGS=output_code,guards in the environment the log keeps Inductor's code and Dynamo's guards.

    TORCH_LOGS=output_code,guards python .devrun/s23/host_fwd.py --rounds 200 2> log
"""
import argparse, cProfile, io, pstats, statistics, time, random
import torch
from omegaconf import OmegaConf
from scripts import bench_step as bs
from llm.model import build_model, compile_model
from llm.optim import build_optimizers

p = argparse.ArgumentParser()
p.add_argument("--ropes", default="none,torch,triton_v4")
p.add_argument("--rounds", type=int, default=200)
p.add_argument("--per", type=int, default=2)
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
names = list(parts)
res = {n: {"fwd": [], "bwd+opt": []} for n in names}
for r in range(a.rounds):
    order = names[:]
    random.Random(r).shuffle(order)
    for n in order:
        fwd, rest = parts[n]
        for _ in range(a.per):
            torch.cuda.synchronize()
            torch.cuda._sleep(50_000_000)
            t0 = time.perf_counter(); loss = fwd(); t1 = time.perf_counter()
            torch.cuda._sleep(50_000_000)
            t2 = time.perf_counter(); rest(loss); t3 = time.perf_counter()
            res[n]["fwd"].append((t1 - t0) * 1e3)
            res[n]["bwd+opt"].append((t3 - t2) * 1e3)
print(f"host ms by phase, {a.rounds} rounds x {a.per} (order shuffled each round); median, and the median of the "
      "paired differences against torch with a bootstrap 95% interval over rounds")
for n in names:
    line = f"  {n:10s}"
    for k in ("fwd", "bwd+opt"):
        v = res[n][k]
        line += f" | {k} {statistics.median(v):7.3f}"
        if n != "torch":
            t = res["torch"][k]
            per = a.per
            def stat(idx):
                return statistics.median(v[i * per + j] for i in idx for j in range(per)) - statistics.median(
                    t[i * per + j] for i in idx for j in range(per))
            est = stat(range(a.rounds))
            rng = random.Random(0)
            bs_ = sorted(stat([rng.randrange(a.rounds) for _ in range(a.rounds)]) for _ in range(300))
            line += f" ({est:+.3f} [{bs_[7]:+.3f}, {bs_[292]:+.3f}])"
    print(line, flush=True)
for n in names:
    fwd, rest = parts[n]
    pr = cProfile.Profile()
    for _ in range(30):
        torch.cuda.synchronize()
        torch.cuda._sleep(50_000_000)
        pr.enable(); loss = fwd(); pr.disable()
        rest(loss)
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
    print(f"==== cProfile, {n}, 30 compiled forwards (host only) ====")
    print(s.getvalue())
