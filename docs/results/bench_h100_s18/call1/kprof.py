# ruff: noqa  (a record of what ran on the H100, kept as it ran)
"""The compiled seed004 step per rope: GPU kernel time per step by kernel (torch.profiler), the sum of kernel
time, the wall per step (synced every 10), and so the GPU's idle gaps; the rope-related kernels listed."""
import statistics, sys, time

import torch
from omegaconf import OmegaConf
from torch.profiler import ProfilerActivity, profile

from scripts import bench_step as bs

cfg = OmegaConf.load(bs.CONF / "model" / "seed004.yaml")
from llm.model import build_model, compile_model
from llm.optim import build_optimizers

names = sys.argv[1].split(",")
steps = {}
for n in names:
    torch.manual_seed(0)
    model = build_model(cfg, bs.rope_config(n), bs.default_vocab("seed004")).cuda()
    opts = build_optimizers(model, OmegaConf.to_container(OmegaConf.load(bs.CONF / "optim" / "adamw.yaml")),
                            torch.device("cuda"))
    cm = compile_model(model)
    batch = torch.randint(0, bs.default_vocab("seed004"), (24, cfg.seq_len), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = cm(batch, batch)[1]
        loss.backward()
        for o in opts: o.step(); o.zero_grad(set_to_none=True)

    for _ in range(8): step()
    torch.cuda.synchronize()
    steps[n] = step
for rnd in range(3):
    for n in names:
        step = steps[n]
        walls = []
        for _ in range(6):
            torch.cuda.synchronize(); t0 = time.perf_counter()
            for _ in range(10): step()
            torch.cuda.synchronize(); walls.append((time.perf_counter() - t0) / 10 * 1e6)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10): step()
            torch.cuda.synchronize()
        ev = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
        tot = sum(e.self_device_time_total for e in ev) / 10
        print(f"round {rnd} {n:10s} wall/step {statistics.median(walls):8.1f} us  gpu kernels/step {tot:8.1f} us  "
              f"idle {statistics.median(walls) - tot:7.1f}", flush=True)
        if rnd == 0:
            ev.sort(key=lambda e: -e.self_device_time_total)
            for e in ev[:40]:
                print(f"   {e.self_device_time_total / 10:8.1f} us/step  x{e.count // 10:3d}  {e.key[:110]}")
