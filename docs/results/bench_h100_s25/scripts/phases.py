# ruff: noqa
"""Session 25: the compiled seed004 step by phase, per rope: host time (GPU asleep while the host enqueues, so
perf_counter times the host alone) and GPU time (events around the phase's kernels, which run back to back after
the sleep) of the forward (to the loss) and of the backward + optimizer; shuffled rounds, medians and the median of
the paired differences against torch with a bootstrap 95% interval over rounds. Then the real step (no sleeps),
interleaved the same way, as a check that phases add up. With TORCH_LOGS=output_code the log keeps Inductor's code.

    TORCH_LOGS=output_code python .devrun/s25/phases.py --rounds 200 2> log
"""
import argparse, statistics, time, random
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
torch.backends.cuda.matmul.allow_tf32 = True
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
keys = ("fwd host", "bwd+opt host", "fwd gpu", "bwd+opt gpu", "step wall")
res = {n: {k: [] for k in keys} for n in names}
ev = lambda: torch.cuda.Event(enable_timing=True)
t_start = time.time()
for r in range(a.rounds):
    order = names[:]
    random.Random(r).shuffle(order)
    for n in order:
        fwd, rest = parts[n]
        for _ in range(a.per):
            torch.cuda.synchronize()
            torch.cuda._sleep(40_000_000)
            s1, e1, s2, e2 = ev(), ev(), ev(), ev()
            s1.record(); t0 = time.perf_counter(); loss = fwd(); t1 = time.perf_counter(); e1.record()
            torch.cuda._sleep(40_000_000)
            s2.record(); t2 = time.perf_counter(); rest(loss); t3 = time.perf_counter(); e2.record()
            e2.synchronize()
            res[n]["fwd host"].append((t1 - t0) * 1e3)
            res[n]["bwd+opt host"].append((t3 - t2) * 1e3)
            res[n]["fwd gpu"].append(s1.elapsed_time(e1))
            res[n]["bwd+opt gpu"].append(s2.elapsed_time(e2))
            # the real step right after, GPU idle at its start as in training after a sync-free loop is not: the
            # step is timed from a synchronised start, events around it
            torch.cuda.synchronize()
            s3, e3 = ev(), ev()
            s3.record(); rest(fwd()); e3.record(); e3.synchronize()
            res[n]["step wall"].append(s3.elapsed_time(e3))
    if r % 50 == 49:
        print(f"  round {r + 1}/{a.rounds}, {time.time() - t_start:.0f} s", flush=True)
print(f"ms by phase, {a.rounds} rounds x {a.per} (order shuffled each round); median, and the median of the paired "
      "differences against torch (median over steps of rope - median of torch) with a bootstrap 95% interval over rounds")
per = a.per
for n in names:
    line = f"  {n:10s}"
    for k in keys:
        v = res[n][k]
        line += f" | {k} {statistics.median(v):7.3f}"
        if n != "torch":
            t = res["torch"][k]
            def stat(idx):
                return statistics.median(v[i * per + j] for i in idx for j in range(per)) - statistics.median(
                    t[i * per + j] for i in idx for j in range(per))
            est = stat(range(a.rounds))
            rng = random.Random(0)
            b_ = sorted(stat([rng.randrange(a.rounds) for _ in range(a.rounds)]) for _ in range(400))
            line += f" ({est:+.3f} [{b_[10]:+.3f}, {b_[389]:+.3f}])"
    print(line, flush=True)
