# ruff: noqa
"""Session 24: the compiled seed004 step after the traced fused-qkv forward change, triton_v4 and rope=none against compiled torch, over the two finely
interleaved calls (4 and 5: 1000 rounds of 2 steps each, on two machines). Each call's steps are divided by its
torch median (the machines' levels differ), then the medians of all steps are compared with the bootstrap over
rounds that bench_step reports (llm.report.stats.median_ratio_interval). Run from the repository root:
python docs/results/bench_h100_s24/scripts/pool_fine.py"""
import json
import statistics

from llm.report.stats import median_ratio_interval

CALLS = ["docs/results/bench_h100_s24/call4", "docs/results/bench_h100_s24/call5"]
pooled = {}
for folder in CALLS:
    rows = {r["rope"]: r for r in json.load(open(f"{folder}/r/step_fine/step_bench.json"))}
    level = statistics.median(t for rnd in rows["torch"]["round_times_ms"] for t in rnd)
    for name in ("none", "torch", "triton_v4"):
        pooled.setdefault(name, []).extend([[t / level for t in rnd] for rnd in rows[name]["round_times_ms"]])
    for name in ("none", "triton_v4"):
        est, lo, hi = median_ratio_interval(rows[name]["round_times_ms"], rows["torch"]["round_times_ms"])
        print(f"{folder}: {name} against torch {est:+.2f}% [{lo:+.2f}, {hi:+.2f}]")
for name in ("none", "triton_v4"):
    est, lo, hi = median_ratio_interval(pooled[name], pooled["torch"])
    print(f"both calls, {len(pooled[name])} rounds: {name} against torch {est:+.2f}% [{lo:+.2f}, {hi:+.2f}]")
