# ruff: noqa
"""The compiled seed004 step, triton_v4 against compiled torch, pooled over calls (sessions 20, 21): each round's
triton_v4 median against the same round's torch median, in %, every round of the listed calls; mean with a t
interval, and the median. Run from the repository root: python docs/results/bench_h100_s21/scripts/pool_steps.py"""
import json
import math
import statistics

from scipy import stats

CALLS = [
    "docs/results/bench_h100_s19/call3/r/step_seed004/step_bench.json",
    "docs/results/bench_h100_s19/call7/r/step_seed004/step_bench.json",
    "docs/results/bench_h100_s19/call8/r/step_seed004/step_bench.json",
    "docs/results/bench_h100_s19/call10/r/step_seed004/step_bench.json",
    "docs/results/bench_h100_s20/call6/r/step_seed004/step_bench.json",
    "docs/results/bench_h100_s20/call9/r/step_seed004/step_bench.json",
    "docs/results/bench_h100_s21/call10/r/step_seed004/step_bench.json",
]
pooled = []
for path in CALLS:
    rows = {(r["mode"], r["rope"]): r for r in json.load(open(path)) if r["model"] == "seed004"}
    torch_ms = rows[("compile", "torch")]["round_medians_ms"]
    triton_ms = rows[("compile", "triton_v4")]["round_medians_ms"]
    diffs = [100 * (b / a - 1) for a, b in zip(torch_ms, triton_ms, strict=True)]
    print(f"{path}: {len(diffs)} rounds, mean {statistics.mean(diffs):+.2f}%")
    pooled += diffs
n, mean, sd = len(pooled), statistics.mean(pooled), statistics.stdev(pooled)
half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
print(f"pooled: {n} rounds, mean {mean:+.2f}% [{mean - half:+.2f}, {mean + half:+.2f}], median {statistics.median(pooled):+.2f}%")
