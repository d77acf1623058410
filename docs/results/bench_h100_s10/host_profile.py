# ruff: noqa: B023, B905, E501, E741  (a record of what ran on the H100, kept as it ran)
"""cProfile of the compiled seed004 step's host side, torch vs triton_v4 (GPU kept busy by a sleep)."""

import cProfile
import io
import pstats
import sys

import torch
from omegaconf import OmegaConf

from scripts import bench_step as bs

torch.backends.cuda.matmul.allow_tf32 = True
args = bs.parse_args(["--model", "seed004"])
cfg = OmegaConf.load(bs.CONF / "model" / "seed004.yaml")
for n in sys.argv[1].split(","):
    f, _ = bs.make_step(cfg, n, "compile", args, 24, bs.default_vocab("seed004"))
    for _ in range(5):
        f()
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    for _ in range(30):
        torch.cuda._sleep(80_000_000)
        pr.enable()
        f()
        pr.disable()
        torch.cuda.synchronize()
    s = io.StringIO()
    st = pstats.Stats(pr, stream=s)
    st.sort_stats("tottime").print_stats(30)
    print(f"===== {n}")
    print("\n".join(l[:200] for l in s.getvalue().splitlines()[:60]))
    s = io.StringIO()
    st = pstats.Stats(pr, stream=s)
    st.sort_stats("cumulative").print_stats(40)
    print(f"===== {n} cumulative")
    print("\n".join(l[:200] for l in s.getvalue().splitlines()[:70]))
