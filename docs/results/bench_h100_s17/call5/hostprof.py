# ruff: noqa  (a record of what ran on the H100, kept as it ran)
"""Host time of the compiled seed004 step's phases, per rope, with the GPU held busy by a sleep so the host never
waits: forward call, backward, optimizer. Then cProfile of 20 forwards+backwards (tottime top 25)."""
import cProfile, io, pstats, statistics, sys, time

import torch
from omegaconf import OmegaConf

from scripts import bench_step as bs

args = bs.parse_args(["--model", "seed004"])
cfg = OmegaConf.load(bs.CONF / "model" / "seed004.yaml")
from llm.model import build_model, compile_model
from llm.optim import build_optimizers

for n in sys.argv[1].split(","):
    torch.manual_seed(0)
    model = build_model(cfg, bs.rope_config(n), bs.default_vocab("seed004")).cuda()
    opts = build_optimizers(model, OmegaConf.to_container(OmegaConf.load(bs.CONF / "optim" / "adamw.yaml")),
                            torch.device("cuda"))
    cm = compile_model(model)
    batch = torch.randint(0, bs.default_vocab("seed004"), (24, cfg.seq_len), device="cuda")

    def fwd():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return cm(batch, batch)[1]

    for _ in range(6):
        loss = fwd(); loss.backward()
        for o in opts: o.step(); o.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    tf, tb, to = [], [], []
    for _ in range(60):
        torch.cuda._sleep(60_000_000)
        t0 = time.perf_counter(); loss = fwd(); t1 = time.perf_counter(); loss.backward(); t2 = time.perf_counter()
        for o in opts: o.step(); o.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        torch.cuda.synchronize()
        tf.append(t1 - t0); tb.append(t2 - t1); to.append(t3 - t2)
    m = lambda v: statistics.median(v) * 1e6
    print(f"{n:10s} host us: fwd {m(tf):8.1f}  bwd {m(tb):8.1f}  opt {m(to):8.1f}  total {m(tf)+m(tb)+m(to):8.1f}",
          flush=True)
    pr = cProfile.Profile()
    for _ in range(20):
        torch.cuda._sleep(60_000_000)
        pr.enable(); loss = fwd(); loss.backward(); pr.disable()
        for o in opts: o.step(); o.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
    print(f"===== {n}\n{s.getvalue()}", file=sys.stderr)
    del model, cm, opts
    torch._dynamo.reset()
