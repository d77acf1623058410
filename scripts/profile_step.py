"""Where a training step spends its time, per RoPE implementation: host, GPU kernels, GPU idle (GPU).

Why it exists: in session 6 the compiled seed004 step was 14% slower with ``rope=triton_v4`` than with
``rope=none`` while the kernel moved no more bytes than the compiled reference; this profile showed the
step host-bound (the custom ops' Python dispatch and Triton launcher, 0.2-0.3 ms of host time a call),
which led to the ``triton_op`` path (docs/kernels.md, session 7). It builds the model as
``scripts/bench_step.py`` does (conf/model and conf/rope presets, fused AdamW, bf16 autocast,
``torch.compile`` as training does), builds every rope's model first, times their steps with CUDA events
and the host time of each in rounds whose order rotates, then profiles a few steps of each, alternating, in
one ``torch.profiler`` session, and prints, per rope:

* wall (with a bootstrap interval against ``rope=none``) / host / GPU-kernel-sum / GPU-busy / GPU-idle ms
  per step;
* per phase (forward, backward, optimizer): host ms and the GPU time of the kernels launched in it;
* host us per call of the compiled wrappers and of any ``ropelab`` op left in the graph;
* the kernels whose time differs most from the first rope, and each rope's top kernels;
* the largest GPU idle gaps, keyed by (kernel before, kernel after): a host-bound stretch shows up as
  many gaps between the same kernels.

    python -m scripts.profile_step --model seed004 --ropes none,torch,triton_v4
    python -m scripts.profile_step --mode reduce-overhead      # CUDA graphs: host launch cost hidden
    python -m scripts.profile_step --device cpu --tiny --no-compile   # a dry run without a GPU
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ropes", default="none,torch,triton_v4", help="comma-separated; the first is the baseline")
    p.add_argument("--model", default="seed004", help="a conf/model preset")
    p.add_argument("--batch", type=int, default=24)
    p.add_argument("--vocab", type=int, default=100277)
    p.add_argument("--optim", default="adamw", help="a conf/optim preset")
    p.add_argument("--mode", default=None, help="torch.compile mode (default: none, like training)")
    p.add_argument("--no-compile", action="store_true", help="eager")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=40, help="timed steps a rope, over --rounds")
    p.add_argument("--rounds", type=int, default=10,
                   help="the timed steps in R rounds, the ropes' order rotating each round (a d-wall interval needs 2)")
    p.add_argument("--prof-steps", type=int, default=5)
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="B=2, T=64, vocab 1024, 2+3 steps (a dry run)")
    p.add_argument("--trace", default=None, help="directory: also write a chrome trace per rope")
    a = p.parse_args(argv)
    if not (CONF / "model" / f"{a.model}.yaml").is_file():
        p.error(f"--model: no preset conf/model/{a.model}.yaml")
    if not (CONF / "optim" / f"{a.optim}.yaml").is_file():
        p.error(f"--optim: no preset conf/optim/{a.optim}.yaml")
    if a.tiny:
        a.batch, a.vocab, a.warmup, a.iters, a.rounds, a.prof_steps = 2, 1024, 2, 4, 2, 2
    if min(a.warmup, a.iters, a.prof_steps, a.rounds) < 1:
        p.error("--warmup, --iters, --rounds and --prof-steps must be at least 1")
    if a.rounds > a.iters:
        p.error(f"--rounds must be at most --iters ({a.iters}), got {a.rounds}")
    return a


def make_model(name: str, model_cfg, vocab: int, device):
    import torch

    from llm.model import build_model
    from scripts.bench_step import rope_config

    torch.manual_seed(0)
    return build_model(model_cfg, rope_config(name), vocab).to(device)


# -- one rope: build, compile, time, profile -----------------------------------------------------------
def short(name: str, n: int = 64) -> str:
    s = re.sub(r"_\d+$", "", name)  # inductor's kernel numbering
    s = re.sub(r"\(.*$", "", s)
    s = re.sub(r"^void ", "", s)
    return s if len(s) <= n else s[: n - 3] + "..."


STEP_START = "<step start: sync, guards, first launches>"


def gpu_timeline(dev: list) -> tuple[float, dict]:
    """Busy time (union of the device events' intervals, us) and the idle gaps between them, keyed by
    (event before, event after). Called on one step's events (:func:`summarize` adds the gap from the step's
    start to its first kernel)."""
    busy = 0.0
    gaps = defaultdict(lambda: [0.0, 0])
    if not dev:
        return busy, gaps
    iv = sorted(dev, key=lambda e: e.time_range.start)
    cur_s, cur_e, prev = iv[0].time_range.start, iv[0].time_range.end, iv[0]
    for e in iv[1:]:
        s, en = e.time_range.start, e.time_range.end
        if s > cur_e:
            busy += cur_e - cur_s
            key = (short(prev.name, 40), short(e.name, 40))
            gaps[key][0] += s - cur_e
            gaps[key][1] += 1
            cur_s, cur_e = s, en
        elif en > cur_e:
            cur_e = en
        if en >= prev.time_range.end:
            prev = e
    busy += cur_e - cur_s
    return busy, gaps


def launch_times(cpu: list, dev: list) -> dict[int, float]:
    """Device event (by ``id()``) -> the start of the host call that launched it: the CUDA runtime or driver
    call (``cudaLaunchKernel``, ``cuLaunchKernel``, ``cudaMemsetAsync``, ...) with the same correlation id.

    Why this way: torch 2.11's ``FunctionEvent`` has no ``linked_correlation_id`` (profile_step read it and
    attributed no kernel to any phase on the H100, session 25), and the correlation ids of the runtime calls
    share their numbers with other CPU events (a ``record_function`` range among them), so an id alone is not
    a link; the id of a runtime call is."""
    runtime = {e.id: e.time_range.start for e in cpu if e.name.startswith("cu")}
    return {id(e): runtime[e.id] for e in dev if e.id in runtime}


def phase_stats(cpu: list, dev: list, P: int) -> tuple[dict, dict]:
    """Per phase_* range: [host us, GPU kernel us] per step, and the GPU idle us per step between the first
    and last kernel launched in it."""
    # phases: host time of each phase_* range (main thread; the backward's launches come from the autograd
    # thread but inside phase_bwd's wall-clock window), and the GPU time of the kernels launched inside
    # each window (kernel -> the runtime call that launched it, :func:`launch_times`)
    phases = defaultdict(lambda: [0.0, 0.0])
    windows = []
    for e in cpu:
        if e.name in ("phase_fwd", "phase_bwd", "phase_opt"):
            phases[e.name][0] += e.cpu_time_total / P
            windows.append((e.time_range.start, e.time_range.end, e.name))
    launched = launch_times(cpu, dev)
    per_phase = defaultdict(list)
    for e in dev:
        t = launched.get(id(e))
        ph = next((n for a, b, n in windows if t is not None and a <= t <= b), "phase_unattributed")
        phases[ph][1] += (e.time_range.end - e.time_range.start) / P
        per_phase[ph].append(e)
    spans = {}  # per phase: GPU idle inside the phase's kernels (sum over steps of span - busy), per step
    for ph, evs in per_phase.items():
        if ph == "phase_unattributed":
            continue
        idle = 0.0
        for a, b, n in windows:
            if n != ph:
                continue
            mine = [e for e in evs if a <= launched[id(e)] <= b]
            if mine:
                bz, _ = gpu_timeline(mine)
                idle += max(e.time_range.end for e in mine) - min(e.time_range.start for e in mine) - bz
        spans[ph] = idle / P
    return dict(phases), spans


def build_step(name: str, model_cfg, device, args: argparse.Namespace) -> tuple[Callable[[], None], float]:
    """One training step of the model with RoPE ``name`` as a callable (phases marked for the profiler), after
    its warm-up; and the seconds of its first step (the compile, under ``torch.compile``)."""
    import torch
    from omegaconf import OmegaConf
    from torch.profiler import record_function

    from llm.model import compile_model
    from llm.optim import build_optimizers

    model = make_model(name, model_cfg, args.vocab, device)
    optim_cfg = OmegaConf.to_container(OmegaConf.load(CONF / "optim" / f"{args.optim}.yaml"))
    optimizers = build_optimizers(model, optim_cfg, device)
    step_model = model if args.no_compile else compile_model(model, mode=args.mode)
    batch = torch.randint(0, args.vocab, (args.batch, model_cfg.seq_len), device=device)

    def step() -> None:
        with record_function("phase_fwd"):
            with torch.autocast(device.type, dtype=torch.bfloat16):
                _, loss = step_model(batch, batch)
        with record_function("phase_bwd"):
            loss.backward()
        with record_function("phase_opt"):
            for opt in optimizers:
                opt.step()
                opt.zero_grad(set_to_none=True)

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    step()
    sync()
    first_s = time.perf_counter() - t0
    for _ in range(args.warmup - 1):
        step()
    sync()
    return step, first_s


def time_rounds(steps: dict[str, Callable[[], None]], args: argparse.Namespace, cuda: bool) -> dict[str, dict]:
    """Each rope's step timed in ``args.rounds`` rounds of ``iters / rounds`` steps, the ropes' order rotating
    each round, every model alive: name -> {"walls", "hosts"}, ms by round.

    Why: timed one rope after another, a rope's steps read 0.5-2 ms slower the later it came in the process,
    whichever rope it was (docs/kernels.md, session 25: the first of three read fastest in both orders), so
    the d-wall column compared places in the run, not ropes. Rotating rounds give every rope the same
    places and pair them by round (``scripts/bench_step.py --rounds`` times steps the same way)."""
    import torch

    from scripts.benchlib import round_order

    per_round = max(1, args.iters // args.rounds)
    out = {n: {"walls": [], "hosts": []} for n in steps}
    order = list(steps)
    for r in range(args.rounds):
        for name in round_order(order, r):
            step = steps[name]
            step()  # untimed: whatever the previous rope left (its graph first in Dynamo's cache) is paid here
            if cuda:
                torch.cuda.synchronize()
            walls, hosts = [], []
            for _ in range(per_round):
                if cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                h0 = time.perf_counter()
                step()
                hosts.append((time.perf_counter() - h0) * 1e3)
                if cuda:
                    end.record()
                    end.synchronize()
                    walls.append(start.elapsed_time(end))
                else:
                    walls.append(hosts[-1])
            out[name]["walls"].append(walls)
            out[name]["hosts"].append(hosts)
    return out


def profile_rounds(steps: dict[str, Callable[[], None]], args: argparse.Namespace, cuda: bool) -> tuple[list, dict]:
    """``args.prof_steps`` steps of every rope under one ``torch.profiler`` session, the ropes alternating step
    by step, each step (and the synchronisation after it) inside a ``prof_step <rope>`` range: the events, and
    each rope's step windows (start, end; us on the profiler's clock).

    Why one session, alternating: the profiler's own host cost need not be the same in a later session of
    the process as in the first, and ropes profiled one after another would carry whatever it is unevenly."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    from scripts.benchlib import round_order

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    order = list(steps)
    with profile(activities=acts) as prof:
        for i in range(args.prof_steps):
            for name in round_order(order, i):
                with record_function(f"prof_step {name}"):
                    steps[name]()
                    if cuda:
                        torch.cuda.synchronize()
    if args.trace:
        Path(args.trace).mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(Path(args.trace) / "trace.json"))
    events = list(prof.events())
    windows: dict[str, list[tuple[float, float]]] = {n: [] for n in steps}
    for e in events:
        if e.device_type == DeviceType.CPU and e.name.startswith("prof_step "):
            windows[e.name[len("prof_step "):]].append((e.time_range.start, e.time_range.end))
    return events, windows


def summarize(name: str, events: list, windows: list[tuple[float, float]], timing: dict, first_s: float,
              P: int) -> dict:
    """One rope's row of the report from its timed rounds and its events of the shared profile: the CPU events
    and the device events (kernels, copies; not the ranges that ``record_function`` projects onto the GPU
    timeline, which span whole phases and are no GPU work) that start inside its step windows."""
    from torch.autograd import DeviceType

    def mine(e) -> bool:
        return any(a <= e.time_range.start <= b for a, b in windows)

    cpu = [e for e in events if e.device_type == DeviceType.CPU and mine(e)]
    dev = [e for e in events if e.device_type != DeviceType.CPU and not getattr(e, "is_user_annotation", False)
           and mine(e)]
    kern = defaultdict(lambda: [0.0, 0])  # short name -> [us total, count]
    if dev:
        for e in dev:
            k = kern[short(e.name)]
            k[0] += e.time_range.end - e.time_range.start
            k[1] += 1
    else:  # CPU dry run: the ops' self time stands in for kernels
        for e in cpu:
            if e.name.startswith(("phase_", "prof_step")):
                continue
            k = kern[short(e.name)]
            k[0] += e.self_cpu_time_total
            k[1] += 1
    kern = {n: (t / P, c / P) for n, (t, c) in kern.items()}
    busy, gaps = 0.0, defaultdict(lambda: [0.0, 0])
    for a, b in windows:  # step by step: the gaps between two of its steps span other ropes' steps
        evs = [e for e in dev if a <= e.time_range.start <= b]
        if not evs:
            continue
        w_busy, w_gaps = gpu_timeline(evs)
        busy += w_busy
        for key, (t, c) in w_gaps.items():
            gaps[key][0] += t
            gaps[key][1] += c
        first = min(evs, key=lambda e: e.time_range.start)
        gaps[(STEP_START, short(first.name, 40))][0] += first.time_range.start - a
        gaps[(STEP_START, short(first.name, 40))][1] += 1
    phases, spans = phase_stats(cpu, dev, P)
    ops = defaultdict(lambda: [0.0, 0])
    for e in cpu:
        if "ropelab" in e.name or e.name in ("CompiledFunction", "CompiledFunctionBackward"):
            ops[e.name][0] += e.cpu_time_total
            ops[e.name][1] += 1
    walls = [t for rnd in timing["walls"] for t in rnd]
    hosts = [t for rnd in timing["hosts"] for t in rnd]
    return {
        "name": name, "first_s": first_s, "wall": statistics.median(walls), "host": statistics.median(hosts),
        "wall_rounds": timing["walls"],
        "kern_sum": sum(t for t, _ in kern.values()) / 1e3, "n_kern": sum(c for _, c in kern.values()),
        "busy": busy / P / 1e3, "kern": kern, "gaps": {k: (v[0] / P, v[1] / P) for k, v in gaps.items()},
        "phases": phases, "phase_idle": spans, "ops": {k: (v[0] / v[1], v[1] / P) for k, v in ops.items()},
    }


# -- report -------------------------------------------------------------------------------------------
def report(rows: list[dict], cuda: bool, args: argparse.Namespace) -> None:
    from llm.report.stats import median_ratio_interval

    base = next((r for r in rows if r["name"] == "none"), rows[0])
    print("\n== per step (ms): wall = CUDA events median; host = until step() returns; kernels = profiler "
          f"(mean of {args.prof_steps} steps); idle = wall - busy")
    print(f"   (d wall % [95% CI]: the medians of all timed steps against {base['name']}'s, bootstrap over the "
          f"{args.rounds} rounds, in which the ropes' order rotated)")
    hdr = f"{'rope':14s}{'wall':>9s}{'d wall':>9s}{'d wall % [95% CI]':>24s}{'host':>9s}{'kern sum':>10s}" \
          f"{'d kern':>9s}{'busy':>9s}{'idle':>9s}{'d idle':>9s}{'#kern':>8s}{'1st step s':>11s}"
    print(hdr)
    for r in rows:
        idle = r["wall"] - r["busy"] if cuda else float("nan")
        bidle = base["wall"] - base["busy"] if cuda else float("nan")
        pct, lo, hi = median_ratio_interval(r["wall_rounds"], base["wall_rounds"])
        ci = "(base)" if r is base else f"{pct:+.2f} [{lo:+.2f}, {hi:+.2f}]" if lo is not None else f"{pct:+.2f}"
        print(f"{r['name']:14s}{r['wall']:9.3f}{r['wall'] - base['wall']:+9.3f}{ci:>24s}{r['host']:9.3f}"
              f"{r['kern_sum']:10.3f}{r['kern_sum'] - base['kern_sum']:+9.3f}{r['busy']:9.3f}{idle:9.3f}"
              f"{idle - bidle:+9.3f}{r['n_kern']:8.0f}{r['first_s']:11.1f}")
    print("\n== phases per step (ms): host time of the phase / GPU kernel time attributed to it "
          "(a phase whose host time exceeds its GPU time is host-bound)")
    print("   (gpu idle = GPU idle between the first and last kernel launched in the phase)")
    for r in rows:
        ph, idle = r["phases"], r.get("phase_idle", {})
        print(f"{r['name']:14s}" + "  ".join(
            f"{k[6:]}: host {v[0] / 1e3:6.3f} gpu {v[1] / 1e3:6.3f}"
            + (f" idle {idle[k] / 1e3:6.3f}" if k in idle else "") for k, v in sorted(ph.items())))
    for r in rows:
        if r["ops"]:
            print(f"\n== {r['name']}: host time per call (us, inclusive): compiled fwd/bwd wrappers, custom ops")
            for k, (us, n) in sorted(r["ops"].items()):
                print(f"   {k:44s} {us:8.1f} us  x {n:.0f}/step")
    keys = set().union(*(r["kern"] for r in rows))
    print(f"\n== kernels whose time differs most from {base['name']} (us/step; count/step)")
    others = [r for r in rows if r is not base]
    diffs = sorted(keys, key=lambda k: -max((abs(r["kern"].get(k, (0, 0))[0] - base["kern"].get(k, (0, 0))[0])
                                             for r in others), default=0))
    print(f"{'kernel':66s}" + "".join(f"{r['name']:>20s}" for r in rows))
    for k in diffs[: args.top + 4]:
        print(f"{k:66s}" + "".join(f"{r['kern'].get(k, (0, 0))[0]:12.1f} ({r['kern'].get(k, (0, 0))[1]:4.0f})"
                                   for r in rows))
    for r in rows:
        print(f"\n== {r['name']}: top kernels (us/step, count/step)")
        for k, (t, c) in sorted(r["kern"].items(), key=lambda kv: -kv[1][0])[: args.top]:
            print(f"   {t:10.1f} us  {c:5.0f}x  {k}")
    if cuda:
        for r in rows:
            tot = sum(v[0] for v in r["gaps"].values())
            print(f"\n== {r['name']}: GPU idle gaps, {tot / 1e3:.3f} ms/step in all (profiled steps: the profiler adds "
                  "host time, compare across ropes); largest by (kernel before -> kernel after), us/step (count/step)")
            for (a, b), (t, c) in sorted(r["gaps"].items(), key=lambda kv: -kv[1][0])[: args.top]:
                print(f"   {t:9.1f} us ({c:4.0f})  {a} -> {b}")
    print("\nReading it: d wall ~ d kern  -> the GPU does more work (find it in the kernel diff);"
          "\n            d wall ~ d idle  -> the GPU waits for the host (Python dispatch, launches);"
          "\n            check with --mode reduce-overhead (CUDA graphs remove host launch cost).")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":  # the Triton entries run on the CPU only under the interpreter, set before import
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import torch
    from omegaconf import OmegaConf

    from scripts.benchlib import parse_device, use_device

    try:
        device = parse_device(args.device)
    except argparse.ArgumentTypeError as e:
        print(f"profile_step: --device: {e}", file=sys.stderr)
        return 2
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print("profile_step: no CUDA device (use --device cpu --tiny for a dry run)", file=sys.stderr)
            return 2
        device = use_device(device, "profile_step")
        torch.backends.cuda.matmul.allow_tf32 = True
    model_cfg = OmegaConf.load(CONF / "model" / f"{args.model}.yaml")
    if args.tiny:
        model_cfg.seq_len = 64
    names = [n.strip() for n in args.ropes.split(",") if n.strip()]
    dev_name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU (dry run)"
    print(f"model={args.model} B={args.batch} T={model_cfg.seq_len} vocab={args.vocab} optim={args.optim} "
          f"compile={'off' if args.no_compile else (args.mode or 'default')} "
          f"{dev_name} | torch {torch.__version__} | warmup {args.warmup}, timed {args.iters}, "
          f"profiled {args.prof_steps}", flush=True)
    t0 = time.time()
    if not args.no_compile:  # one compiled model a rope, all alive: room in Dynamo's cache for each
        for key in ("cache_size_limit", "recompile_limit"):
            if hasattr(torch._dynamo.config, key):
                setattr(torch._dynamo.config, key, max(getattr(torch._dynamo.config, key), 8 + len(names)))
    steps, first = {}, {}
    for n in names:
        try:
            steps[n], first[n] = build_step(n, model_cfg, device, args)
            print(f"  {n:14s} built (first step {first[n]:.1f} s, {time.time() - t0:.0f} s so far)", flush=True)
        except Exception as exc:  # one failing entry must not lose the others
            print(f"  {n:14s} FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}",
                  flush=True)
    rows = []
    if steps:
        cuda = device.type == "cuda"
        timing = time_rounds(steps, args, cuda)
        print(f"  timed {args.rounds} rounds ({time.time() - t0:.0f} s so far)", flush=True)
        events, windows = profile_rounds(steps, args, cuda)
        rows = [summarize(n, events, windows[n], timing[n], first[n], args.prof_steps) for n in steps]
    if rows:
        report(rows, device.type == "cuda", args)
    print(f"\ntotal {time.time() - t0:.0f} s")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
