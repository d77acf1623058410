# ruff: noqa
"""Session 25: the compiled seed004 step (torch.compile's default mode), triton_v4 and rope=none against compiled torch,
over every finely interleaved call at the current code paths: session 24's calls 4 and 5 (1000 rounds each) and this
session's calls 2 (1000 rounds) and 9 (600 rounds; its JSON also holds the cudagraphs rows, left out here), four
machines. Each call's steps are divided by its torch median (the machines' levels differ), then the medians of all
steps are compared with the bootstrap over rounds that bench_step reports (llm.report.stats.median_ratio_interval).
Run from the repository root: python docs/results/bench_h100_s25/scripts/pool_fine.py"""
import json
import statistics

from llm.report.stats import median_ratio_interval

CALLS = {"docs/results/bench_h100_s24/call4/r/step_fine": "compile",
         "docs/results/bench_h100_s24/call5/r/step_fine": "compile",
         "docs/results/bench_h100_s25/call2/r/step_fine": "compile",
         "docs/results/bench_h100_s25/call9/r/step_modes": "compile"}
pooled = {}
for folder, mode in CALLS.items():
    rows = {r["rope"]: r for r in json.load(open(f"{folder}/step_bench.json")) if r["mode"] == mode}
    level = statistics.median(t for rnd in rows["torch"]["round_times_ms"] for t in rnd)
    for name in ("none", "torch", "triton_v4"):
        pooled.setdefault(name, []).extend([[t / level for t in rnd] for rnd in rows[name]["round_times_ms"]])
    for name in ("none", "triton_v4"):
        est, lo, hi = median_ratio_interval(rows[name]["round_times_ms"], rows["torch"]["round_times_ms"])
        print(f"{folder}: {name} against torch {est:+.2f}% [{lo:+.2f}, {hi:+.2f}]")
for name in ("none", "triton_v4"):
    est, lo, hi = median_ratio_interval(pooled[name], pooled["torch"])
    print(f"all {len(CALLS)} calls, {len(pooled[name])} rounds: {name} against torch {est:+.2f}% [{lo:+.2f}, {hi:+.2f}]")
