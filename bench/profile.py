"""Where one training step spends its time, per RoPE implementation: host, GPU kernels, GPU idle, per phase.

    python -m bench.profile --model seed004 --impls none,torch,triton_v4            # compiled, as training
    python -m bench.profile --model gpt2_small --mode eager
    python -m bench.profile --smoke                                                 # CPU, tiny, seconds

Every implementation's step is built as ``bench.step`` builds it and warmed up; their steps are timed in rounds
whose order rotates (wall time by CUDA events, host time until ``step()`` returns), then a few steps of each,
alternating, are profiled in one ``torch.profiler`` session. Per implementation it prints the wall time (with a
bootstrap interval against the first implementation), the host time, the sum of its GPU kernels, the GPU's busy
and idle time, each phase's host time and the GPU time of the kernels it launched, its top kernels, the kernels
whose time differs most from the first implementation's, and the largest GPU idle gaps. Reading it: a wall
difference that matches the kernel difference is GPU work; one that matches the idle difference is the GPU
waiting for the host. The per-step numbers are appended to ``bench/results/profile.csv`` (one row per part).
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections import defaultdict
from collections.abc import Callable

import torch

from bench import harness
from bench import step as bench_step
from llm.cli import OneLineParser

NAME = "profile"
COLUMNS = (*harness.ENV_COLUMNS, "model", "shape", "implementation", "mode", "part", "time_us")
PHASES = ("forward", "backward", "optimizer")


def short(name: str, n: int = 60) -> str:
    """A kernel's name without Inductor's numbering, its arguments and ``void``."""
    s = re.sub(r"^void ", "", re.sub(r"\(.*$", "", re.sub(r"_\d+$", "", name)))
    return s if len(s) <= n else s[: n - 3] + "..."


def busy_and_gaps(events: list) -> tuple[float, dict]:
    """Busy time (the union of the device events' intervals, us) and the idle gaps between them, keyed by (event
    before, event after): [us, count]."""
    gaps: dict = defaultdict(lambda: [0.0, 0])
    if not events:
        return 0.0, gaps
    ordered = sorted(events, key=lambda e: e.time_range.start)
    busy, (start, end), prev = 0.0, (ordered[0].time_range.start, ordered[0].time_range.end), ordered[0]
    for e in ordered[1:]:
        if e.time_range.start > end:
            busy += end - start
            gap = gaps[(short(prev.name, 40), short(e.name, 40))]
            gap[0] += e.time_range.start - end
            gap[1] += 1
            start, end = e.time_range.start, e.time_range.end
        end = max(end, e.time_range.end)
        if e.time_range.end >= prev.time_range.end:
            prev = e
    return busy + end - start, gaps


def time_rounds(steps: dict[str, Callable[[], None]], args: argparse.Namespace) -> dict[str, dict]:
    """name -> {"walls", "hosts"}: ms per step by round, the implementations' order rotating each round (a step timed
    later in a process reads slower, whichever implementation it is: rotating gives each the same places)."""
    cuda = args.device.type == "cuda"
    out = {n: {"walls": [], "hosts": []} for n in steps}
    for r in range(args.rounds):
        for name in bench_step.rotated(list(steps), r):
            steps[name]()  # untimed: what the previous implementation left behind is paid here
            harness.synchronize(args.device)
            walls, hosts = [], []
            for _ in range(args.steps):
                if cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                t0 = time.perf_counter()
                steps[name]()
                hosts.append((time.perf_counter() - t0) * 1e3)
                if cuda:
                    end.record()
                    end.synchronize()
                walls.append(start.elapsed_time(end) if cuda else hosts[-1])
            out[name]["walls"].append(walls)
            out[name]["hosts"].append(hosts)
    return out


def profile_steps(steps: dict[str, Callable[[], None]], args: argparse.Namespace) -> tuple[list, dict]:
    """``args.profiled`` steps of every implementation in one profiler session, alternating, each inside a
    ``step <name>`` range: the events and each implementation's step windows (us on the profiler's clock)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for i in range(args.profiled):
            for name in bench_step.rotated(list(steps), i):
                with record_function(f"step {name}"):
                    steps[name]()
                    harness.synchronize(args.device)
    events = list(prof.events())
    windows: dict[str, list[tuple[float, float]]] = {n: [] for n in steps}
    for e in events:
        if e.device_type == DeviceType.CPU and e.name.startswith("step ") and e.name[5:] in windows:
            windows[e.name[5:]].append((e.time_range.start, e.time_range.end))
    return events, windows


def summarize(events: list, windows: list[tuple[float, float]], n_steps: int) -> dict:
    """One implementation's per-step numbers from the events inside its step windows: kernels by name, busy time,
    idle gaps, and per phase [host us, GPU us of the kernels launched inside it]. A kernel belongs to the phase whose
    window holds the runtime call that launched it (the CPU event named ``cu...`` with the kernel's correlation id:
    other CPU events share those numbers)."""
    from torch.autograd import DeviceType

    def inside(e) -> bool:
        return any(a <= e.time_range.start <= b for a, b in windows)

    cpu = [e for e in events if e.device_type == DeviceType.CPU and inside(e)]
    dev = [e for e in events if e.device_type != DeviceType.CPU and not getattr(e, "is_user_annotation", False)
           and inside(e)]
    kernels: dict = defaultdict(float)
    for e in dev or [e for e in cpu if not e.name.startswith(("phase ", "step "))]:  # CPU: ops stand in for kernels
        kernels[short(e.name)] += (e.time_range.end - e.time_range.start) if dev else e.self_cpu_time_total
    busy, gaps = 0.0, defaultdict(lambda: [0.0, 0])
    for a, b in windows:  # window by window: the time between two of its steps is other implementations'
        w_busy, w_gaps = busy_and_gaps([e for e in dev if a <= e.time_range.start <= b])
        busy += w_busy
        for key, (t, c) in w_gaps.items():
            gaps[key][0] += t
            gaps[key][1] += c
    phases = {p: [0.0, 0.0] for p in PHASES}
    spans = [(e.time_range.start, e.time_range.end, e.name[6:]) for e in cpu if e.name[6:] in phases
             and e.name.startswith("phase ")]
    for a, b, p in spans:
        phases[p][0] += b - a
    launched = {e.id: e.time_range.start for e in cpu if e.name.startswith("cu")}
    for e in dev:
        t = launched.get(e.id)
        p = next((p for a, b, p in spans if t is not None and a <= t <= b), None)
        if p is not None:
            phases[p][1] += e.time_range.end - e.time_range.start
    per = 1.0 / n_steps
    return {"kernels": {k: v * per for k, v in kernels.items()}, "busy": busy * per,
            "gaps": {k: (t * per, c * per) for k, (t, c) in gaps.items()},
            "phases": {p: (h * per, g * per) for p, (h, g) in phases.items()}}


def report(rows: dict[str, dict], args: argparse.Namespace) -> None:
    from llm.report.stats import median_ratio_interval

    names = list(rows)
    base = rows[names[0]]
    print(f"\nper step, ms: wall (CUDA events, median) against {names[0]} [95% bootstrap CI over {args.rounds} "
          "rounds]; host = until step() returns; kernels, busy: the profiled steps; idle = wall - busy")
    # a space before every column: a value wider than its column shifts the line, never runs into its neighbour
    print(f"{'implementation':16s} {'wall':>9s} {'vs base % [CI]':>26s} {'host':>9s} {'kernels':>9s} {'busy':>9s} "
          f"{'idle':>9s}")
    for name, r in rows.items():
        pct, lo, hi = median_ratio_interval(r["walls"], base["walls"])
        ci = "(base)" if r is base else f"{pct:+.2f}" + (f" [{lo:+.2f}, {hi:+.2f}]" if lo is not None else "")
        print(f"{name:16s} {r['wall']:9.3f} {ci:>26s} {r['host']:9.3f} {r['kernel_sum']:9.3f} {r['busy']:9.3f} "
              f"{r['wall'] - r['busy']:9.3f}")
    print("\nper phase, ms: host time / GPU time of the kernels it launched (host above GPU: host-bound)")
    for name, r in rows.items():
        print(f"{name:16s} " + "  ".join(f"{p}: {h / 1e3:.3f} / {g / 1e3:.3f}" for p, (h, g) in r["phases"].items()))
    keys = set().union(*(r["kernels"] for r in rows.values()))
    diff = sorted(keys, key=lambda k: -max(abs(r["kernels"].get(k, 0) - base["kernels"].get(k, 0))
                                           for r in rows.values()))
    print(f"\nkernels whose time differs most from {names[0]}'s (us per step)")
    print(f"{'kernel':62s}" + "".join(f" {n:>16s}" for n in names))
    for k in diff[: args.top]:
        print(f"{k:62s}" + "".join(f" {r['kernels'].get(k, 0.0):16.1f}" for r in rows.values()))
    for name, r in rows.items():
        print(f"\n{name}: top kernels (us per step)")
        for k, t in sorted(r["kernels"].items(), key=lambda kv: -kv[1])[: args.top]:
            print(f"  {t:10.1f}  {k}")
        if r["gaps"]:
            print(f"{name}: largest GPU idle gaps (us per step, count), by kernel before -> kernel after")
            for (a, b), (t, c) in sorted(r["gaps"].items(), key=lambda kv: -kv[1][0])[: args.top]:
                print(f"  {t:10.1f} ({c:3.0f})  {a} -> {b}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="python -m bench.profile", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="a conf/model preset (default seed004; --smoke: tiny)")
    p.add_argument("--impls", default="none,torch,triton_v4",
                   help="comma-separated registry names; the first is the baseline (default none,torch,triton_v4)")
    p.add_argument("--mode", default=None, choices=bench_step.MODES, help="default compile (--smoke: eager)")
    p.add_argument("--batch", type=int, default=None, help="default: the preset's (bench.step)")
    p.add_argument("--vocab", type=int, default=None, help="default: the preset's (bench.step)")
    p.add_argument("--optim", default="adamw", help="a conf/optim preset")
    #: each counted option's (default, --smoke default): a value given is kept, with --smoke too
    counts = {"warmup": (5, 1), "rounds": (10, 2), "steps": (4, 1), "profiled": (5, 1)}
    helps = {"warmup": "untimed steps first", "rounds": "timed rounds (the order rotating)",
             "steps": "timed steps per round and implementation", "profiled": "profiled steps per implementation"}
    for name, (default, smoke) in counts.items():
        p.add_argument(f"--{name}", type=int, default=None, help=f"{helps[name]} (default {default}; --smoke {smoke})")
    p.add_argument("--top", type=int, default=12, help="lines per listing of kernels and idle gaps (default 12)")
    harness.add_common_args(p, NAME)
    args = p.parse_args(argv)
    args.model = ("tiny" if args.smoke else "seed004") if args.model is None else args.model
    args.mode = args.mode or ("eager" if args.smoke else "compile")
    for name, (default, smoke) in counts.items():
        if getattr(args, name) is None:
            setattr(args, name, smoke if args.smoke else default)
    bench_step.check_model_options(p, args)
    if min(args.rounds, args.steps, args.profiled, args.top) < 1 or args.warmup < 0:
        p.error("--rounds, --steps, --profiled and --top must be at least 1, --warmup at least 0")
    harness.model_config(args.model, p)
    args.warm_only, args.parser = False, p
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = harness.Progress()
    args.device = harness.pick_device(args.smoke, "bench.profile")
    rope_root = harness.import_rope(args.rope_path)
    names = harness.registered(list(dict.fromkeys(harness.split_list(args.impls, "--impls"))), args.device,
                               args.parser, log)
    if not names:  # each left out with its reason above
        harness._refuse("bench.profile: nothing to measure: every implementation of --impls was left out (the lines "
                        "above say why)")
    results = harness.ResultsCsv(harness.out_path(args, NAME), COLUMNS)  # a path no rows can go to: refused now
    env = harness.environment(args.device, rope_root, args.commit)
    if args.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    if args.mode == "compile":
        bench_step.allow_compiled_models(len(names))
    steps, _, shape = bench_step.build_steps(args.model, args.mode, names, args, log,
                                             phase=lambda p: torch.profiler.record_function(f"phase {p}"))
    if not steps:
        return 1
    timing = time_rounds(steps, args)
    log(f"timed {args.rounds} rounds of {args.steps} steps")
    events, windows = profile_steps(steps, args)
    rows = {}
    for name in steps:
        r = summarize(events, windows[name], args.profiled)
        walls, hosts = ([t for rnd in timing[name][key] for t in rnd] for key in ("walls", "hosts"))
        r.update(walls=timing[name]["walls"], wall=statistics.median(walls), host=statistics.median(hosts),
                 kernel_sum=sum(r["kernels"].values()) / 1e3, busy=r["busy"] / 1e3)
        rows[name] = r
    report(rows, args)
    for name, r in rows.items():
        parts = {"wall": r["wall"] * 1e3, "host": r["host"] * 1e3, "gpu kernels": r["kernel_sum"] * 1e3,
                 "gpu busy": r["busy"] * 1e3, "gpu idle": (r["wall"] - r["busy"]) * 1e3,
                 **{f"{p} host": h for p, (h, _) in r["phases"].items()},
                 **{f"{p} gpu": g for p, (_, g) in r["phases"].items()}}
        results.append({**env, "model": args.model, "shape": shape, "implementation": name, "mode": args.mode,
                        "part": part, "time_us": us} for part, us in parts.items())
    log(f"rows appended to {results.path}")
    return 0


if __name__ == "__main__":
    harness.run_main(main, "bench.profile")
