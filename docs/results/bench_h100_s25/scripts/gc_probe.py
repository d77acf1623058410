# ruff: noqa
"""Session 25: how much of the compiled seed004 step's host time is Python's garbage collector, and does it grow with
the compiled models alive in the process (profile_step's order effect, call 4)? Builds none, torch and triton_v4
(compiled, 5 warm-up steps each), then times rounds of steps under three GC regimes, shuffled: 'on' (CPython's
default thresholds), 'frozen' (gc.freeze() first: the objects alive then leave the collected generations) and 'off'
(gc.disable() while timing). gc.callbacks time every collection by generation."""
import argparse, gc, random, statistics, time
import torch
from omegaconf import OmegaConf
from scripts import bench_step as bs
from llm.model import build_model, compile_model
from llm.optim import build_optimizers

p = argparse.ArgumentParser()
p.add_argument("--ropes", default="none,torch,triton_v4")
p.add_argument("--rounds", type=int, default=8)
p.add_argument("--per", type=int, default=20)
a = p.parse_args()
cfg = OmegaConf.load(bs.CONF / "model" / "seed004.yaml")
B, V = bs.default_batch("seed004"), bs.default_vocab("seed004")
dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = True

gc_log = []  # (generation, seconds)
_t = {}
def cb(phase, info):
    if phase == "start":
        _t["s"] = time.perf_counter()
    else:
        gc_log.append((info["generation"], time.perf_counter() - _t.get("s", time.perf_counter())))
gc.callbacks.append(cb)

steps = {}
for n in a.ropes.split(","):
    torch.manual_seed(0)
    model = build_model(cfg, bs.rope_config(n), V).to(dev)
    opt = build_optimizers(model, OmegaConf.to_container(OmegaConf.load(bs.CONF / "optim" / "adamw.yaml")), dev)
    cm = compile_model(model)
    batch = torch.randint(0, V, (B, cfg.seq_len), device=dev)
    def step(cm=cm, batch=batch, opt=opt):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = cm(batch, batch)[1]
        loss.backward()
        for o in opt:
            o.step(); o.zero_grad(set_to_none=True)
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    steps[n] = step
    print("built", n, "gc counts", gc.get_count(), "objects tracked", len(gc.get_objects()), flush=True)

ev = lambda: torch.cuda.Event(enable_timing=True)
res = {}
names = list(steps)
for r in range(a.rounds):
    regimes = ["on", "frozen", "off"]
    random.Random(r).shuffle(regimes)
    for regime in regimes:
        if regime == "frozen":
            gc.collect(); gc.freeze()
        elif regime == "off":
            gc.collect(); gc.disable()
        else:
            gc.collect()
        order = names[:]
        random.Random(1000 + r).shuffle(order)
        for n in order:
            steps[n]()  # untimed: the step's entry first in Dynamo's cache
            torch.cuda.synchronize()
            walls, hosts = [], []
            del gc_log[:]
            for _ in range(a.per):
                s, e = ev(), ev()
                s.record(); h0 = time.perf_counter(); steps[n](); hosts.append((time.perf_counter() - h0) * 1e3)
                e.record(); e.synchronize(); walls.append(s.elapsed_time(e))
            d = res.setdefault((regime, n), {"wall": [], "host": [], "gc_ms": [], "gc_n": [0, 0, 0]})
            d["wall"].append(statistics.median(walls)); d["host"].append(statistics.median(hosts))
            d["gc_ms"].append(sum(t for _, t in gc_log) * 1e3 / a.per)
            for g, _ in gc_log:
                d["gc_n"][g] += 1
        if regime == "frozen":
            gc.unfreeze()
        elif regime == "off":
            gc.enable()
print(f"\n{a.rounds} rounds x {a.per} steps; medians over rounds of per-round medians; gc ms/step = mean time in "
      "collections per timed step; collections by generation over all rounds")
for regime in ("on", "frozen", "off"):
    for n in names:
        d = res[(regime, n)]
        print(f"  {regime:6s} {n:10s} wall {statistics.median(d['wall']):7.3f}  host {statistics.median(d['host']):7.3f}"
              f"  gc {statistics.mean(d['gc_ms']):6.3f} ms/step  collections {d['gc_n']}", flush=True)
