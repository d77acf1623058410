# ruff: noqa
"""The compiled seed004 step, triton_v4 against compiled torch, pooled over calls: each round's triton_v4 median
against the same round's torch median, in %; mean with a t interval, and the median. Three pools: sessions 19-21
(before the fused backward launch), session 22 (with it: calls 1-3), and all. Run from the repository root:
python docs/results/bench_h100_s22/scripts/pool_steps.py"""
import json
import math
import statistics

from scipy import stats

BEFORE = [
    "docs/results/bench_h100_s19/call3", "docs/results/bench_h100_s19/call7", "docs/results/bench_h100_s19/call8",
    "docs/results/bench_h100_s19/call10", "docs/results/bench_h100_s20/call6", "docs/results/bench_h100_s20/call9",
    "docs/results/bench_h100_s21/call10",
]
AFTER = ["docs/results/bench_h100_s22/call1", "docs/results/bench_h100_s22/call2", "docs/results/bench_h100_s22/call3"]


def rounds(folder):
    rows = {(r["mode"], r["rope"]): r for r in json.load(open(f"{folder}/r/step_seed004/step_bench.json"))
            if r["model"] == "seed004"}
    torch_ms = rows[("compile", "torch")]["round_medians_ms"]
    triton_ms = rows[("compile", "triton_v4")]["round_medians_ms"]
    diffs = [100 * (b / a - 1) for a, b in zip(torch_ms, triton_ms, strict=True)]
    print(f"{folder}: {len(diffs)} rounds, mean {statistics.mean(diffs):+.2f}%")
    return diffs


def summary(name, diffs):
    n, mean, sd = len(diffs), statistics.mean(diffs), statistics.stdev(diffs)
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    print(f"{name}: {n} rounds, mean {mean:+.2f}% [{mean - half:+.2f}, {mean + half:+.2f}], "
          f"median {statistics.median(diffs):+.2f}%")


before = [d for f in BEFORE for d in rounds(f)]
after = [d for f in AFTER for d in rounds(f)]
summary("sessions 19-21 (two backward launches)", before)
summary("session 22 (one backward launch)", after)
summary("all", before + after)
