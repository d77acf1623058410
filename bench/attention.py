"""The hybrid kernel ``rope.attention_with_rope`` against the separate path (``triton_v4`` on q, then SDPA).

    python -m bench.attention                      # the sweep below on one GPU (about 3 minutes on an H200)
    python -m bench.attention --batches 1 --cached 4096,16384 --head-dims 128
    python -m bench.attention --smoke              # CPU, tiny shapes, Triton's interpreter: seconds
    python -m bench.attention --batches 1 --queries 1 --candidates   # also launch settings other than the rule's

Per shape (head dim 64 and 128; GQA 32/8 and MHA 32/32; batch 1, 8, 32; 1k, 4k, 16k and 32k cached tokens; 1 and
64 new queries; bf16), the two paths of one attention step over a KV cache whose keys are rotated:

* ``separate``: the queries rotated by the ``triton_v4`` module at their positions, then
  ``F.scaled_dot_product_attention`` over the cache (one new query: no mask; 64 new queries after a cache: SDPA
  needs its explicit mask, the chunk's causal diagonal shifted by the cached length);
* ``fused``: ``rope.attention_with_rope`` on the un-rotated queries (rotated in registers from the module's tables).

Both in two modes: ``eager`` (a stream of calls back to back, the host launching each: what an eager decode step
pays, launches included) and ``captured`` (the call captured as a CUDA graph, PyTorch's ``torch.cuda.graph``, and
replayed with the L2 flushed and the host out of the way: the kernels' time). Columns: ``time_us``; ``pct_copy_bw``,
the K and V cache read (the bytes that must move) per second as a share of the device-to-device copy bandwidth
measured in the same run; ``speedup``, the separate path's time over the fused one's in the same mode (on the
fused rows); ``max_err``, the two paths' largest difference; ``launch``, what the fused call launched (grid, tiles,
warps, stages, keys per split, whether a second launch combines splits: ``rope.fused_attention.launch_settings``).

What explains a miss, from two roofs measured in the same run: ``mma_tflops``, a bf16 (the run's dtype) matmul's
rate, and ``read_gbps``, a read-only reduction's bandwidth. ``pct_mma_peak`` is the attention's FLOPs per second
(4 B H D per visible key and query) against the matmul's; ``roof_speedup`` (on fused rows) is the separate path's
time over the shorter of the times the cache bytes (at the higher of the read and copy bandwidths) and the FLOPs
(at the matmul rate) allow, plus ``launch_floor_us``, what one launch of a one-element kernel costs in the same mode
(measured in the same run: an eager call, or the replay of a graph holding it; a call of one kernel pays at least
that): no kernel can beat the separate path by more, so a target above it is impossible there.
``bound``: ``memory`` where the row reads the cache at 90% of copy bandwidth or more; ``compute`` where the FLOPs
roof is the higher one and the row reaches a quarter of the matmul's rate; else ``latency`` (neither roof: the
launches, dependent loads, or too few programs).

``--candidates`` times, beside the rule's own launch, a handful of other settings per shape (through
``rope.fused_attention.tuning``: more splits, a smaller key tile, other warps, row blocks; see :func:`candidates`),
one row each, named like ``fused[splits=16,bn=64]``: one run tells which rule to adopt. Rows are appended to
``bench/results/attention.csv``; a summary (the issue's targets, every shape where the fused call is slower than
0.95x the separate path, and with ``--candidates`` the best setting per shape) is printed at the end. Shapes whose
caches do not fit the free memory are skipped, saying so.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from bench import harness
from llm.cli import OneLineParser

NAME = "attention"
COLUMNS = (*harness.ENV_COLUMNS, "shape", "implementation", "mode", "time_us", "pct_copy_bw", "speedup",
           "head_dim", "heads", "batch", "cached", "queries", "dtype", "cache_mb", "copy_gbps", "max_err",
           "bound", "pct_mma_peak", "roof_speedup", "launch", "mma_tflops", "read_gbps", "launch_floor_us")
MODES = ("eager", "captured")
#: Calls of an eager stream (fewer where one call is long: about 20 ms a stream), and how many streams (the
#: fastest kept: a stream disturbed by the host reads high).
STREAM_CALLS, STREAM_MS, STREAMS = 40, 20.0, 3


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="python -m bench.attention", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--head-dims", default=None, help="comma-separated head dims, multiples of 4 (triton_v4's "
                                                     "partial variant) up to 256; default 64,128; --smoke: 16")
    p.add_argument("--heads", default=None, help="query/key-value head counts, comma-separated (default 32/8,32/32; "
                                                 "--smoke: 4/2,4/4)")
    p.add_argument("--batches", default=None, help="default 1,8,32 (--smoke: 1)")
    p.add_argument("--cached", default=None, help="cached tokens before the new ones (default 1024,4096,16384,32768; "
                                                  "--smoke: 160)")
    p.add_argument("--queries", default=None, help="new queries per step (default 1,64; --smoke: 1,4)")
    p.add_argument("--dtype", default="bfloat16", choices=tuple(harness.DTYPES),
                   help="of q and the cache: bfloat16 or bf16, float16 or fp16, float32 or fp32 (default bfloat16)")
    p.add_argument("--reps", type=int, default=10, help="timed replays per median (captured mode; default 10)")
    p.add_argument("--candidates", action="store_true",
                   help="also time other launch settings of the fused call per shape (a row each, beside the rule's)")
    harness.add_common_args(p, NAME)
    args = p.parse_args(argv)
    smoke = args.smoke

    def ints(text: str | None, default: str, name: str) -> list[int]:
        try:
            values = [int(x) for x in harness.split_list(text or default)]
        except ValueError:
            p.error(f"--{name} takes comma-separated positive integers, got {text!r}")
        if not values or min(values) < 1:
            p.error(f"--{name} takes comma-separated positive integers, got {text!r}")
        return values

    args.head_dims = ints(args.head_dims, "16" if smoke else "64,128", "head-dims")
    args.batches = ints(args.batches, "1" if smoke else "1,8,32", "batches")
    args.cached = ints(args.cached, "160" if smoke else "1024,4096,16384,32768", "cached")
    args.queries = ints(args.queries, "1,4" if smoke else "1,64", "queries")
    if max(args.queries) > 256:
        p.error(f"--queries {max(args.queries)}: attention_with_rope takes up to 256 new queries")
    heads_text, args.heads = args.heads, []
    for item in harness.split_list(heads_text or ("4/2,4/4" if smoke else "32/8,32/32")):
        h, _, kv = item.partition("/")
        if not (h.isdigit() and kv.isdigit() and int(kv) > 0 and int(h) % int(kv) == 0):
            p.error(f"--heads takes H/H_kv pairs with H_kv dividing H, got {item!r}")
        args.heads.append((int(h), int(kv)))
    if args.reps < 1:
        p.error("--reps must be positive")
    args.dtype = harness.DTYPES[args.dtype]
    return args


# -- the two paths -------------------------------------------------------------------------------------------------
class Shape:
    """One attention step: B rows, H query heads over H_kv key-value heads of size D, ``cached`` tokens in the cache
    before ``queries`` new ones (whose keys are in it too)."""

    def __init__(self, D: int, H: int, H_kv: int, B: int, cached: int, queries: int) -> None:
        self.D, self.H, self.H_kv, self.B, self.cached, self.queries = D, H, H_kv, B, cached, queries
        self.L = cached + queries

    @property
    def label(self) -> str:
        return f"D{self.D} H{self.H}/{self.H_kv} B{self.B} cached{self.cached} +{self.queries}"

    def cache_bytes(self, itemsize: int) -> int:
        return 2 * self.B * self.H_kv * self.L * self.D * itemsize


def separate(rotary, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
             mask: torch.Tensor | None) -> torch.Tensor:
    """RoPE on q by the module, then SDPA over the cache: (B, T, H, D) out, as the fused call returns it."""
    qr = rotary(q, positions=positions).transpose(1, 2)
    y = F.scaled_dot_product_attention(qr, k, v, attn_mask=mask, enable_gqa=k.shape[1] != q.shape[2])
    return y.transpose(1, 2)


def graphed(fn: Callable[[], object]) -> Callable[[], None]:
    """``fn`` captured as a CUDA graph (after warm-up calls on a side stream, PyTorch's recipe); its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def stream_us(calls: list[Callable[[], object]], device: torch.device) -> float:
    """Microseconds per call of back-to-back calls (cycling over ``calls``, each on its own inputs, so that a small
    cache is not read from the L2 every time), the host launching each: the fastest of :data:`STREAMS` streams."""
    for call in calls[:2]:
        call()
    if device.type != "cuda":  # --smoke: the interpreter, whose times mean nothing
        return harness.WallTimer(2)(calls[0])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    calls[0]()
    torch.cuda.synchronize()
    n = max(5, min(STREAM_CALLS, int(STREAM_MS * 1e-3 / (time.perf_counter() - t0))))
    best = math.inf
    for _ in range(STREAMS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for i in range(n):
            calls[i % len(calls)]()
        end.record()
        torch.cuda.synchronize()
        best = min(best, 1e3 * start.elapsed_time(end) / n)
    return best


def copies_for(nbytes: int, device: torch.device) -> int:
    """Input copies an eager stream cycles over: enough to pass three times the L2, at most 16."""
    if device.type != "cuda":
        return 1
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 2**20)
    return max(1, min(16, math.ceil(3 * l2 / max(nbytes, 1))))


def candidates(shape: Shape, rule: dict, sms: int) -> list[dict]:
    """A handful of launch settings to time beside the rule's for ``shape`` (``rope.fused_attention.tuning``
    fields), from the rule's own launch ``rule`` (``launch_settings``) on a GPU of ``sms`` SMs.

    A decode step (a few rows per key-value head) is bound by memory latency: more splits (two and four programs
    per SM, where the rule's cap of two key tiles per split stops short of them), half the key tile (more tiles in
    flight per SM), twice the warps, and more splits with half the tile. A chunk of many queries is bound by its
    matrix products: half and twice the key tile, and the row block doubled on twice the warps (or the warps
    changed where the row block is smaller than 64)."""
    bn, warps = rule["block_n"], rule["num_warps"]
    base = rule["grid"][0] * rule["grid"][1]  # programs before any split
    if shape.queries * (shape.H // shape.H_kv) <= 16:  # a decode step's row block
        more = sorted({min(128, round(k * sms / base)) for k in (2, 4)} - {rule["splits"]} - {0, 1})
        out = [*({"splits": n} for n in more), {"block_n": max(16, bn // 2)}, {"num_warps": 2 * warps}]
        if more:
            out.append({"splits": more[-1], "block_n": max(16, bn // 2)})
    else:
        out = [{"block_n": max(16, bn // 2)}, {"block_n": min(256, 2 * bn), "num_stages": 2},
               {"block_m": 128, "num_warps": 8} if rule["block_m"] == 64 else {"num_warps": 8 if warps == 4 else 4}]
    unique = []
    for c in out:
        if c not in unique and not all(rule[k] == v for k, v in c.items()):  # not the rule's launch again
            unique.append(c)
    return unique


class Roofs:
    """What the GPU can do at most, measured once per run: a matmul's TFLOP/s in the run's dtype, a read-only
    reduction's GB/s (beside the copy bandwidth), and per mode the time of one launch of a one-element kernel (the
    floor under any call: at batch 1 and a short cache, a good part of the step)."""

    def __init__(self, timer, dtype: torch.dtype, device: torch.device, copy_gbps: float) -> None:
        n = 8192 if device.type == "cuda" else 256
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        self.mma_tflops = 2 * n**3 / (timer(lambda: a @ b, reps=10) * 1e-6) / 1e12
        x = torch.ones((2**29 if device.type == "cuda" else 2**22) // 2, dtype=torch.bfloat16, device=device)
        self.read_gbps = x.numel() * 2 / (timer(lambda: x.sum(dtype=torch.float32), reps=10) * 1e-6) / 1e9
        self.copy_gbps = copy_gbps
        one = torch.zeros(1, device=device)
        self.launch_us = {"eager": stream_us([lambda: one.add_(1)], device)}
        if device.type == "cuda":
            self.launch_us["captured"] = timer(graphed(lambda: one.add_(1)), reps=10)

    def columns(self, shape: Shape, mode: str, nbytes: int, us: float, separate_us: float | None) -> dict:
        """``bound``, ``pct_mma_peak``, ``roof_speedup`` (with ``separate_us``) of a row of ``shape`` at ``us`` in
        ``mode``, and the launch floor the roof includes."""
        flops = 4 * shape.B * shape.H * shape.D * (shape.queries * shape.cached
                                                   + shape.queries * (shape.queries + 1) // 2)
        memory_us = nbytes / (max(self.read_gbps, self.copy_gbps) * 1e3)
        compute_us = flops / (self.mma_tflops * 1e6)
        pct_mma = 100 * compute_us / us
        if 100 * nbytes / (us * 1e3) / self.copy_gbps >= 90:
            bound = "memory"
        elif compute_us > memory_us and pct_mma >= 25:
            bound = "compute"
        else:
            bound = "latency"
        floor = self.launch_us[mode]
        roof = separate_us / (floor + max(memory_us, compute_us)) if separate_us is not None else None
        return {"bound": bound, "pct_mma_peak": pct_mma, "roof_speedup": roof, "mma_tflops": self.mma_tflops,
                "read_gbps": self.read_gbps, "launch_floor_us": floor}


def measure_shape(shape: Shape, args: argparse.Namespace, rotary, timer, copy_gbps: float, env: dict,
                  log: Callable[[str], None], roofs: Roofs | None = None) -> list[dict]:
    import rope
    from rope import fused_attention

    device, dtype = args.device, args.dtype
    itemsize = torch.finfo(dtype).bits // 8
    nbytes = shape.cache_bytes(itemsize)
    n = copies_for(nbytes, device)
    if device.type == "cuda" and n * nbytes * 1.2 + 2**30 > torch.cuda.mem_get_info(device)[0]:
        log(f"{shape.label}: skipped, its cache ({nbytes / 2**30:.1f} GiB) does not fit the free memory")
        return []
    B, H, H_kv, D, L, T = shape.B, shape.H, shape.H_kv, shape.D, shape.L, shape.queries
    inputs = []
    for _ in range(n):
        k = torch.empty(B, H_kv, L, D, dtype=dtype, device=device).normal_()
        v = torch.empty(B, H_kv, L, D, dtype=dtype, device=device).normal_()
        q = torch.randn(B, T, H, D, device=device).to(dtype)
        inputs.append((q, k, v))
    positions = torch.arange(shape.cached, L, device=device)
    mask = None if T == 1 else torch.ones(T, L, dtype=torch.bool, device=device).tril(diagonal=shape.cached)
    settings: dict[str, dict | None] = {"separate": None, "fused": {}}
    if args.candidates:
        sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
        rule = fused_attention.launch_settings(*inputs[0], positions, rotary)
        lines = {rule["line"]}
        for fields in candidates(shape, rule, sms):
            name = f"fused[{fused_attention.Tuning(**fields).label()}]"
            with fused_attention.tuning(**fields):
                line = fused_attention.launch_settings(*inputs[0], positions, rotary)["line"]
            if line in lines:  # e.g. more splits than the keys have tiles: a launch already timed
                log(f"{shape.label}: {name} left out, it launches {line} as another row does")
                continue
            lines.add(line)
            settings[name] = fields

    def fused(q, k, v):
        return rope.attention_with_rope(q, k, v, positions, rotary)

    def unfused(q, k, v):
        return separate(rotary, q, k, v, positions, mask)

    def tuned(fields: dict | None) -> contextlib.AbstractContextManager:
        """The candidate's settings around its calls, its eager streams and its capture (the rule's: none)."""
        return fused_attention.tuning(**fields) if fields else contextlib.nullcontext()

    launch, max_err = {}, {}
    reference = unfused(*inputs[0]).float()
    for name, fields in list(settings.items()):
        fn = unfused if fields is None else fused
        try:
            with tuned(fields):
                max_err[name] = (fn(*inputs[0]).float() - reference).abs().max().item()
                if fields is not None:
                    launch[name] = fused_attention.launch_settings(*inputs[0], positions, rotary)["line"]
        except Exception as exc:  # a candidate the GPU cannot compile (shared memory): said, and left out
            log(f"{shape.label}: {name} not launched: {str(exc).splitlines()[0][:160] if str(exc) else type(exc)}")
            del settings[name]
    del reference
    times = {}
    for mode in MODES if device.type == "cuda" else ("eager",):
        for name, fields in settings.items():
            fn = unfused if fields is None else fused
            with tuned(fields):
                if mode == "eager":
                    times[name, mode] = stream_us([lambda i=i, fn=fn: fn(*i) for i in inputs], device)
                else:
                    times[name, mode] = timer(graphed(lambda fn=fn, first=inputs[0]: fn(*first)), reps=args.reps)
    rows = []
    for (name, mode), us in times.items():
        sep_us = times["separate", mode] if name != "separate" else None
        rows.append({**env, "shape": shape.label, "implementation": name, "mode": mode, "time_us": us,
                     "pct_copy_bw": 100 * nbytes / (us * 1e-6) / (copy_gbps * 1e9),
                     "speedup": None if sep_us is None else sep_us / us,
                     "head_dim": D, "heads": f"{H}/{H_kv}", "batch": B, "cached": shape.cached, "queries": T,
                     "dtype": str(dtype)[6:], "cache_mb": nbytes / 2**20, "copy_gbps": copy_gbps,
                     "max_err": max_err[name], "launch": launch.get(name, ""),
                     **(roofs.columns(shape, mode, nbytes, us, sep_us) if roofs is not None else {})})
    fused = {m: times["fused", m] for m in MODES if ("fused", m) in times}
    log(f"{shape.label}: " + ", ".join(f"{m} {times['separate', m]:.1f} -> {us:.1f} us "
                                      f"({times['separate', m] / us:.2f}x)" for m, us in fused.items()))
    for mode in fused:
        tried = {name: us for (name, m), us in times.items() if m == mode and name.startswith("fused[")}
        if tried:
            best = min(tried, key=tried.get)
            log(f"  {mode}: best candidate {best} {tried[best]:.1f} us ({fused[mode] / tried[best]:.2f}x the rule)")
    inputs.clear()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


# -- the summary ---------------------------------------------------------------------------------------------------
def pct_copy_roof(row: dict) -> float | None:
    """The highest % of copy bandwidth a call of ``row``'s shape could show: the row's cache bytes read at the run's
    higher bandwidth (read or copy) after one launch floor; None where the run timed no launch. A call pays the
    launch inside its time, so at a small cache this roof is far below 100%."""
    floor, read_gbps = row.get("launch_floor_us"), row.get("read_gbps")
    if not floor or not read_gbps:
        return None
    nbytes = row["pct_copy_bw"] / 100 * row["copy_gbps"] * 1e3 * row["time_us"]
    best_us = floor + nbytes / (max(read_gbps, row["copy_gbps"]) * 1e3)
    return 100 * nbytes / (best_us * 1e3) / row["copy_gbps"]


def summary(rows: list[dict]) -> str:
    """The issue's targets, each met or not and where not, and every shape where the fused call loses."""
    fused = [r for r in rows if r["implementation"] == "fused"]
    lines = []

    def check(title: str, picked: list[dict], ok: Callable[[dict], bool], show: Callable[[dict], str]) -> None:
        misses = [r for r in picked if not ok(r)]
        verdict = "met" if picked and not misses else ("not measured" if not picked else f"missed at {len(misses)}")
        lines.append(f"- {title}: {verdict} ({len(picked)} shapes)")
        lines.extend(f"  - {r['shape']} {r['mode']}: {show(r)}" for r in misses)

    def explain(r: dict) -> str:
        return (f"{r['speedup']:.2f}x, {r['bound']}-bound ({r['pct_copy_bw']:.0f}% of copy bandwidth, "
                f"{r['pct_mma_peak']:.0f}% of the matmul rate); the roofs (one launch included) allow at most "
                f"{r['roof_speedup']:.2f}x")

    def share(r: dict) -> str:
        roof = pct_copy_roof(r)
        return f"{r['pct_copy_bw']:.1f}%" + (f" (one launch and the read allow at most {roof:.0f}%)" if roof else "")

    one = [r for r in fused if r["queries"] == 1]
    captured_one = [r for r in one if r["mode"] == "captured"]
    check("one query, cache read >= 80% of copy bandwidth from 16k cached", [r for r in captured_one
          if r["cached"] >= 16384], lambda r: r["pct_copy_bw"] >= 80, share)
    check("one query, cache read >= 50% of copy bandwidth at 4k cached", [r for r in captured_one
          if r["cached"] == 4096], lambda r: r["pct_copy_bw"] >= 50, share)
    check("one query, >= 1.3x the separate path at batch 1 from 4k cached (both modes)",
          [r for r in one if r["batch"] == 1 and r["cached"] >= 4096], lambda r: r["speedup"] >= 1.3, explain)
    check("64 queries, >= 3x SDPA with its mask from 4k cached", [r for r in fused if r["queries"] == 64
          and r["cached"] >= 4096], lambda r: r["speedup"] >= 3, explain)
    check("nowhere slower than 0.95x the separate path", fused, lambda r: r["speedup"] >= 0.95,
          lambda r: f"{r['speedup']:.2f}x ({r['time_us']:.1f} us, {r['pct_copy_bw']:.1f}% of copy bandwidth)")
    headers = ["shape", "mode", "separate us", "fused us", "speedup", "fused % copy bw", "% mma peak", "bound",
               "roof speedup"]
    sep = {(r["shape"], r["mode"]): r for r in rows if r["implementation"] == "separate"}
    body = [[r["shape"], r["mode"], f"{sep[r['shape'], r['mode']]['time_us']:.1f}", f"{r['time_us']:.1f}",
             f"{r['speedup']:.2f}", f"{r['pct_copy_bw']:.1f}", f"{r['pct_mma_peak']:.1f}", r["bound"],
             f"{r['roof_speedup']:.2f}"] for r in fused]
    out = ["", *harness.markdown_table(headers, body, 2), "", "Targets:", *lines]
    tried = [r for r in rows if r["implementation"].startswith("fused[")]
    if tried:
        rule = {(r["shape"], r["mode"]): r for r in fused}
        best: dict[tuple, dict] = {}
        for r in tried:
            key = (r["shape"], r["mode"])
            if key not in best or r["time_us"] < best[key]["time_us"]:
                best[key] = r
        body = [[k[0], k[1], f"{rule[k]['time_us']:.1f}", r["implementation"][6:-1], f"{r['time_us']:.1f}",
                 f"{rule[k]['time_us'] / r['time_us']:.2f}", f"{r['speedup']:.2f}", r["launch"]]
                for k, r in best.items() if k in rule]
        out += ["", "Best candidate per shape (against the rule's launch):",
                *harness.markdown_table(["shape", "mode", "rule us", "candidate", "us", "x rule", "speedup", "launch"],
                                        body, 2)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = harness.Progress()
    args.device = harness.pick_device(args.smoke, "bench.attention")
    rope_root = harness.import_rope(args.rope_path)
    import rope

    if not hasattr(rope, "attention_with_rope"):
        harness._refuse("bench.attention: the rope code imported has no attention_with_rope")
    widest = getattr(rope, "ATTENTION_MAX_HEAD_DIM", None)  # (rope code of a --rope-path may predate the limit)
    for D in args.head_dims:  # a head dim the module or the kernel cannot take: said before any measurement
        try:
            rope.check_args("triton_v4", D, max(args.cached) + max(args.queries))
        except rope.RopeArgumentError as exc:
            harness._refuse(f"--head-dims {D}: {exc}")
        if widest is not None and D > widest:
            harness._refuse(f"--head-dims {D}: attention_with_rope takes head dims up to {widest}")
    results = harness.ResultsCsv(harness.out_path(args, NAME), COLUMNS)
    env = harness.environment(args.device, rope_root, args.commit)
    timer = harness.make_timer(args.reps, args.device, flush="read")  # a decode step's L2: no other kernel's writes
    copy_gbps = harness.copy_gbps(timer, 2**29 if args.device.type == "cuda" else 2**22, args.device)
    roofs = Roofs(timer, args.dtype, args.device, copy_gbps)
    log(f"copy bandwidth {copy_gbps:.0f} GB/s, read bandwidth {roofs.read_gbps:.0f} GB/s, "
        f"{str(args.dtype)[6:]} matmul {roofs.mma_tflops:.0f} TFLOP/s, one launch "
        + ", ".join(f"{mode} {us:.1f} us" for mode, us in roofs.launch_us.items()))
    rows = []
    for D in args.head_dims:
        rotary = rope.build("triton_v4", D, max(args.cached) + max(args.queries)).to(args.device)
        for H, H_kv in args.heads:
            for B in args.batches:
                for cached in args.cached:
                    for queries in args.queries:
                        shape_rows = measure_shape(Shape(D, H, H_kv, B, cached, queries), args, rotary, timer,
                                                   copy_gbps, env, log, roofs)
                        results.append(shape_rows)
                        rows.extend(shape_rows)
    print(summary(rows) if rows else "no shape measured")
    if args.smoke:
        print("(--smoke: the CPU's interpreter at tiny shapes; the targets and roofs mean something on a GPU only)")
    log(f"{len(rows)} rows appended to {results.path}")
    return 0


if __name__ == "__main__":
    harness.run_main(main, "bench.attention")
