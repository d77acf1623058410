"""Benchmark the RoPE kernels on a CUDA GPU: time, GB/s, percent of copy bandwidth, speedups.

    python scripts/bench_rope.py [--ropes a,b] [--out DIR] [--variant partial|full] [--reps N] [--tune]

For bf16 q and k (B, T, H, D) of the shapes below and a sweep of token counts at D=128, it times
every registered implementation (``rope.available()``, or ``--ropes``; ``none`` is skipped: it
launches nothing, so there is nothing to time) in eager mode, and the ``torch`` reference also
under ``torch.compile`` (the baselines of the speedup columns): forward, forward+backward
(``torch.autograd.grad`` of both outputs) and, for entries with a backward kernel of their own
(a ``rotate_transposed`` method: the Triton ones), the backward kernel alone. Bytes = q and k read
once and written once (twice that for forward+backward); the device-to-device copy bandwidth
(``dst.copy_(src)``, 1 GiB) is measured in the same run. Each timing is the lower of two medians
over repetitions, each preceded by an L2 flush (``--flush``: see ``benchlib.FLUSHES``; the CSV also has
the host time per call, to spot host-bound measurements). It also measures the bf16 error of each
entry (and of ``torch`` computing in bf16) against the float64 reference. ``--tune`` times the entries that take a
``launch_config`` over a few launch configurations. Timers and writers: ``scripts/benchlib.py``.

Writes ``bench_rope.md``, ``bench_rope.csv`` and ``bench_rope.png`` under ``--out`` (default
``outputs/bench/``) and prints the Markdown table last.

Modes (issue #13; any of them replaces the default run above; code in ``scripts/bench_rope_modes.py``),
each beside the compiled PyTorch reference and Liger-Kernel (``pip install liger-kernel``; left
out with a note when it is not importable):

    --head-dims [--elements 32M,256M] [--head-dim-list 16,24,...]   headdim_<N>.{md,csv,png}
    --layouts   interleaved layout, rotary_dim D/2 and D/4            layouts.{md,csv}
    --packed    cu_seqlens packing at 64K-256K tokens                 packed.{md,csv}
    --overhead  module call vs bare launch, tiny shapes (host us)     overhead.{md,csv}
    --all       all four (head dims at 32M, then at 256M while --budget-s lasts); summary.md

    python -m scripts.bench_rope --all --out outputs/bench/issue13
"""

from __future__ import annotations

import argparse
import importlib.metadata
import math
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import rope  # noqa: E402
from rope.numerics import ulp  # noqa: E402
from scripts.benchlib import (  # noqa: E402
    FLUSHES,
    Timer,
    copy_bandwidth,
    count_label,
    fmt,
    make_timer,
    markdown_table,
    parse_count,
    parse_device,
    require_cuda,
    rope_names,
    use_device,
    write_csv,
)

# (B, H, T, D) as the issue writes them; tensors are laid out (B, T, H, D).
SHAPES = [(4, 16, 4096, 256), (4, 8, 2048, 128), (32, 32, 4096, 128), (32, 12, 1024, 64)]
SWEEP_TOKENS = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144]
SWEEP_H, SWEEP_D = 16, 128
BASELINES = ("torch", "torch_compiled")  # the speedup columns: the reference eager and compiled


def bench_names(selected: str | None) -> list[str]:
    """The entries to time (``none`` skipped, those that cannot run here dropped with a note), then
    the baselines ``torch`` and ``torch_compiled``."""
    names = []
    for name in rope_names(selected, skip=("none",)):
        reason = rope.get(name).unavailable_reason(torch.device("cuda"))
        if reason:
            print(f"skipping {name}: {reason}", file=sys.stderr)
        elif name not in BASELINES:
            names.append(name)
    return ["torch", *names, "torch_compiled"]


def build_impls(names: list[str], D: int, max_seq_len: int, variant: str, dynamic: bool) -> dict:
    """impl name -> (module, callable); the compiled reference gets its own torch.compile wrapper."""
    out = {}
    for impl in names:
        mod = rope.build("torch" if impl == "torch_compiled" else impl, D, max_seq_len, variant=variant).cuda()
        out[impl] = (mod, torch.compile(mod, dynamic=dynamic) if impl == "torch_compiled" else mod)
    return out


def warm(impls: dict, B: int, H: int, T: int, D: int) -> None:
    """One forward and one forward+backward of every entry: compiles kernels and graphs."""
    q = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
    for _mod, fn in impls.values():  # the same calls as bench_shape times, so the same graphs
        fn(q, k)
        torch.autograd.grad(fn(qg, kg), (qg, kg), (q, k))
    torch.cuda.synchronize()


def bench_shape(timer: Timer, impls: dict, B: int, H: int, T: int, D: int, variant: str,
                copy_bw: float) -> list[dict]:
    """Timings of every entry on bf16 q and k of one shape (B, T, H, D), with bandwidths and speedups."""
    q = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    gq, gk = torch.randn_like(q), torch.randn_like(k)
    qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
    nbytes = 2 * (q.numel() + k.numel()) * q.element_size()
    same_copy_bw = copy_bandwidth(timer, nbytes // 2)  # a copy moving the same bytes
    rows = []
    for impl, (mod, fn) in impls.items():
        fwd = timer(lambda: fn(q, k))  # noqa: B023
        fwd_host = timer.last_host_ms
        fb = timer(lambda: torch.autograd.grad(fn(qg, kg), (qg, kg), (gq, gk)))  # noqa: B023
        fb_host = timer.last_host_ms
        bwd = math.nan
        if impl != "torch_compiled" and hasattr(mod, "rotate_transposed"):  # a backward kernel of its own
            bwd = timer(lambda: mod.rotate_transposed(gq, gk))  # noqa: B023
        rows.append(
            {
                "impl": impl,
                "shape": f"{B}x{H}x{T}x{D}",
                "tokens": B * T,
                "fwd_ms": fwd,
                "fwd_GBps": nbytes / (fwd * 1e-3) / 1e9,
                "bwd_ms": bwd,
                "bwd_GBps": nbytes / (bwd * 1e-3) / 1e9,
                "fwdbwd_ms": fb,
                "fwdbwd_GBps": 2 * nbytes / (fb * 1e-3) / 1e9,
                "fwd_host_ms": fwd_host,
                "fwdbwd_host_ms": fb_host,
            }
        )
    by = {r["impl"]: r for r in rows}
    for r in rows:
        for key in ("fwd", "bwd", "fwdbwd"):
            r[f"{key}_pct_copy"] = 100 * r[f"{key}_GBps"] / copy_bw
        r["same_size_copy_GBps"] = same_copy_bw
        r["fwd_pct_same_size_copy"] = 100 * r["fwd_GBps"] / same_copy_bw
        for base in ("torch", "torch_compiled"):
            r[f"fwd_x_{base}"] = by[base]["fwd_ms"] / r["fwd_ms"]
            r[f"fwdbwd_x_{base}"] = by[base]["fwdbwd_ms"] / r["fwdbwd_ms"]
    return rows


def measure_errors(names: list[str], variant: str, B: int = 4, H: int = 8, T: int = 2048,
                   D: int = 128) -> list[dict]:
    """bf16 error of each entry (and the bf16 torch reference) against the float64 reference."""
    q = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    gq, gk = torch.randn_like(q), torch.randn_like(k)
    ref = rope.build("torch", D, T, variant=variant, compute_dtype="float64").cuda()
    q64, k64 = q.double().requires_grad_(), k.double().requires_grad_()
    r64 = ref(q64, k64)
    g64 = torch.autograd.grad(r64, (q64, k64), (gq.double(), gk.double()))
    out = []
    entries = [(n, {}) for n in names if n != "torch_compiled"] + [("torch(bf16)", {"compute_dtype": "bfloat16"})]
    for name, opts in entries:
        mod = rope.build(name.split("(")[0], D, T, variant=variant, **opts).cuda()
        qq, kk = q.clone().requires_grad_(), k.clone().requires_grad_()
        y = mod(qq, kk)
        g = torch.autograd.grad(y, (qq, kk), (gq, gk))
        for what, got, want in (("forward", y, r64), ("backward", g, g64)):
            err = torch.cat([(a.double() - b.detach()).abs().flatten() for a, b in zip(got, want, strict=True)])
            rounded = [b.detach().to(torch.bfloat16) for b in want]
            ulps = torch.cat(
                [((a.double() - r.double()).abs() / ulp(r, torch.bfloat16)).flatten()
                 for a, r in zip(got, rounded, strict=True)]
            )
            out.append(
                {
                    "impl": name,
                    "pass": what,
                    "max_abs_err": err.max().item(),
                    "mean_abs_err": err.mean().item(),
                    "max_ulp": ulps.max().item(),
                    "frac_over_1ulp": (ulps > 1).double().mean().item(),
                    "frac_not_correctly_rounded": (ulps > 0).double().mean().item(),
                }
            )
    return out


def tune_configs(mod) -> list:
    """The launch configurations ``--tune`` times for ``mod`` (by the type of its ``launch_config``):
    tiles x warps for the Triton entries, CTA threads x rows per thread for ``cutedsl``; [] for others."""
    from rope.cutedsl import CuteLaunchConfig  # imports no cutlass: only its kernels do
    from rope.triton_rope import LaunchConfig

    cfg = getattr(mod, "launch_config", None)
    if isinstance(cfg, LaunchConfig):
        return [LaunchConfig(tile, w) for tile in (1024, 2048, 4096) for w in (4, 8, 16)]
    if isinstance(cfg, CuteLaunchConfig):
        return [CuteLaunchConfig(threads, rows) for threads in (128, 256, 512, 1024) for rows in (1, 2, 4)]
    return []


def tune(timer: Timer, names: list[str], variant: str) -> None:
    """Time forward and backward of each entry with a ``launch_config`` (the Triton ones, ``cutedsl``)
    over a few launch configurations, set on the module instance (prints only; the default first)."""
    for name in names:
        for B, H, T, D in SHAPES:
            mod = rope.build(name, D, T, variant=variant).cuda()
            configs = tune_configs(mod)
            if not configs:
                break
            q = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
            k = torch.randn_like(q)
            nbytes = 2 * 2 * q.numel() * 2
            res = []
            default = mod.launch_config
            for cfg in [default, *configs]:
                mod.launch_config = cfg
                ms = timer(lambda: mod(q, k))  # noqa: B023
                msb = timer(lambda: mod.rotate_transposed(q, k))  # noqa: B023
                res.append((ms, msb, cfg))
            print(f"tune {name} {B}x{H}x{T}x{D} (default {default}, measured first and again in the list):")
            for ms, msb, cfg in sorted(res[1:], key=lambda r: r[0] + r[1]):
                print(f"  fwd {ms:.4f} ms {nbytes / ms / 1e6:7.0f} GB/s  bwd {msb:.4f} ms "
                      f"{nbytes / msb / 1e6:7.0f} GB/s  {cfg}")
            print(f"  default, first: fwd {res[0][0]:.4f} ms  bwd {res[0][1]:.4f} ms")


def markdown(rows: list[dict], errors: list[dict], copy_bw: float, variant: str, device_name: str) -> str:
    """The report: the timing table, then the error table."""
    lines = [
        f"# RoPE benchmark ({device_name}, bf16, variant={variant})",
        "",
        f"Device-to-device copy bandwidth: **{copy_bw:.0f} GB/s**. Bytes = q and k read once and written once"
        " (x2 for forward+backward). bwd = the backward kernel alone (entries that have one). Speedups: against"
        " the torch reference eager (`xE`) and `torch.compile`d (`xC`). `%cp=` = forward against a copy moving the"
        " same bytes as the shape (small transfers do not reach the 1 GiB copy's bandwidth).",
        "",
    ]
    headers = ["shape BxHxTxD", "impl", "fwd ms", "fwd GB/s", "fwd %copy", "bwd ms", "bwd %copy", "fwd+bwd ms",
               "fwd+bwd GB/s", "fwd+bwd %copy", "fwd xE", "fwd xC", "f+b xE", "f+b xC", "fwd %cp="]
    cells = [("fwd_ms", ".4f"), ("fwd_GBps", ".0f"), ("fwd_pct_copy", ".1f"), ("bwd_ms", ".4f"),
             ("bwd_pct_copy", ".1f"), ("fwdbwd_ms", ".4f"), ("fwdbwd_GBps", ".0f"), ("fwdbwd_pct_copy", ".1f"),
             ("fwd_x_torch", ".2f"), ("fwd_x_torch_compiled", ".2f"), ("fwdbwd_x_torch", ".2f"),
             ("fwdbwd_x_torch_compiled", ".2f"), ("fwd_pct_same_size_copy", ".1f")]
    lines += markdown_table(headers, ([r["shape"], r["impl"], *(fmt(r[k], f) for k, f in cells)] for r in rows), 2)
    if errors:
        lines += [
            "",
            "bf16 error against the float64 reference (4x8x2048x128, q and k; ulp = bf16 spacing at the rounded"
            " reference):",
            "",
        ]
        headers = ["impl", "pass", "max abs err", "mean abs err", "max ulp", "frac > 1 ulp",
                   "frac not correctly rounded"]
        lines += markdown_table(headers, (
            [e["impl"], e["pass"], f"{e['max_abs_err']:.3g}", f"{e['mean_abs_err']:.3g}", f"{e['max_ulp']:.2f}",
             f"{e['frac_over_1ulp']:.2e}", f"{e['frac_not_correctly_rounded']:.2e}"] for e in errors), 2)
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path, copy_bw: float, variant: str) -> None:
    """GB/s of the token sweep, forward and forward+backward, against the copy bandwidth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, key, title in ((axes[0], "fwd_GBps", "forward"), (axes[1], "fwdbwd_GBps", "forward+backward")):
        for impl in dict.fromkeys(r["impl"] for r in rows):
            pts = sorted((r["tokens"], r[key]) for r in rows if r["impl"] == impl)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=impl)
        ax.axhline(copy_bw, color="gray", linestyle="--", label="copy bandwidth")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"tokens (B*T), H={SWEEP_H}, D={SWEEP_D}, bf16")
        ax.set_ylabel("GB/s")
        ax.set_title(f"RoPE {title} ({variant})")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def measure(timer: Timer, names: list[str], variant: str, sweep: bool, copy_bw: float,
            t0: float) -> tuple[list[dict], list[dict]]:
    """Rows of the main shapes and of the token sweep.

    Compile everything first (the compiled reference per main shape, dynamic=False; one
    dynamic-shape compile for the sweep), then let the compiler's background workers settle:
    timings taken while they ran came out host-bound.
    """
    main_impls = [build_impls(names, D, T, variant, dynamic=False) for B, H, T, D in SHAPES]
    for impls, (B, H, T, D) in zip(main_impls, SHAPES, strict=True):
        warm(impls, B, H, T, D)
    sweep_shapes = [(n // min(n, 4096), SWEEP_H, min(n, 4096), SWEEP_D) for n in SWEEP_TOKENS] if sweep else []
    sweep_impls = build_impls(names, SWEEP_D, 4096, variant, dynamic=True)
    for B, H, T, D in sweep_shapes:
        warm(sweep_impls, B, H, T, D)
    print(f"  compiled ({time.time() - t0:.0f} s)", flush=True)
    time.sleep(5)
    rows = []
    for impls, (B, H, T, D) in zip(main_impls, SHAPES, strict=True):
        rows += bench_shape(timer, impls, B, H, T, D, variant, copy_bw)
        print(f"  {B}x{H}x{T}x{D} done ({time.time() - t0:.0f} s)", flush=True)
    sweep_rows = []
    for B, H, T, D in sweep_shapes:
        sweep_rows += bench_shape(timer, sweep_impls, B, H, T, D, variant, copy_bw)
    if sweep_rows:
        print(f"  sweep done ({time.time() - t0:.0f} s)", flush=True)
    return rows, sweep_rows


MODES = ("head_dims", "layouts", "packed", "overhead")
PACKED_HEAD_DIM = 128  # D of --packed
#: --all: the time it may take before the remaining head dims (the 256M sweep last) are left out.
ALL_BUDGET_S = 300.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ropes", default=None,
                    help="comma-separated implementations (default: every registered one but none; the modes"
                         " also leave out the eager torch)")
    ap.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench")
    ap.add_argument("--variant", default="partial", choices=("partial", "full"))
    ap.add_argument("--reps", type=int, default=None,
                    help="repetitions per timing pass (default 30; 15 in the modes)")
    ap.add_argument("--flush", default="zero", choices=tuple(FLUSHES),
                    help="how the L2 is flushed before each timed call: "
                         + "; ".join(f"{k}: {v}" for k, v in FLUSHES.items()))
    ap.add_argument("--tune", action="store_true",
                    help="also time a few launch configurations of the entries that take one (Triton)")
    ap.add_argument("--no-sweep", action="store_true", help="skip the token sweep")
    modes = ap.add_argument_group("modes (issue #13): any of them replaces the default run")
    modes.add_argument("--head-dims", action="store_true", help="sweep the head dim (headdim_<N>.md/.csv/.png)")
    modes.add_argument("--layouts", action="store_true", help="interleaved layout and rotary_dim D/2, D/4")
    modes.add_argument("--packed", action="store_true", help="packed sequences through cu_seqlens")
    modes.add_argument("--overhead", action="store_true", help="host overhead of the module call at tiny shapes")
    modes.add_argument("--all", action="store_true",
                       help=f"all four modes, head dims at 32M and 256M elements, within --budget-s "
                            f"(default {ALL_BUDGET_S:g} s for --all)")
    modes.add_argument("--elements", default=None,
                       help="elements per tensor of the head-dim sweep, comma-separated (K/M/G = 2^10/2^20/2^30;"
                            " default 32M; --all: 32M,256M); also the layouts' size (the first value)")
    modes.add_argument("--head-dim-list", default=None,
                       help="comma-separated head dims, or 'every' (each one the variant takes from 16 to 256; default:"
                            " every multiple of 8 from 16 to 256, and 20, 36, 52)")
    modes.add_argument("--seq-len", type=int, default=2048, help="T of the head-dim and layout shapes")
    modes.add_argument("--heads", type=int, default=16, help="H of the head-dim, layout and packed shapes")
    modes.add_argument("--layout-dims", default="48,64,128", help="head dims of --layouts")
    modes.add_argument("--packed-tokens", default="64K,128K,256K", help="total tokens of --packed")
    modes.add_argument("--packed-max-len", type=int, default=4096, help="longest packed sequence")
    modes.add_argument("--overhead-shapes", default=None,
                       help="BxTxHxD shapes of --overhead, comma-separated (default 64x1x32x128,1x128x8x64,"
                            "1x1x32x128,8x16x8x64)")
    modes.add_argument("--overhead-calls", type=int, default=200, help="calls per host-bound loop")
    modes.add_argument("--overhead-repeats", type=int, default=7, help="loops per measurement (median)")
    modes.add_argument("--no-liger", action="store_true", help="leave Liger-Kernel out")
    modes.add_argument("--no-compiled", action="store_true", help="leave the compiled torch reference out")
    modes.add_argument("--liger-tables", default="input", choices=("input", "float32"),
                       help="dtype of Liger's cos/sin tables: the inputs' (bf16, Hugging Face's convention; the"
                            " default on CUDA) or float32 (Liger then computes in float32; forced on the CPU, whose"
                            " Triton interpreter gets bf16 arithmetic wrong)")
    modes.add_argument("--placements", type=int, default=1,
                       help="input sets each head-dim and layout configuration is timed on, the median kept (the same "
                            "kernel on other allocations of one shape runs 1-2 points of copy bandwidth apart)")
    modes.add_argument("--budget-s", type=float, default=None,
                       help="seconds after which the modes measure nothing more (what is left is listed)")
    modes.add_argument("--compile-backend", default="inductor", help="torch.compile backend (tests: eager)")
    modes.add_argument("--device", type=parse_device, default="cuda",
                       help="cuda[:N] (the GPU timed); cpu = a slow dry run of the modes (Triton entries need "
                            "TRITON_INTERPRET=1)")
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.all:
        args.head_dims = args.layouts = args.packed = args.overhead = True
        args.elements = args.elements or "32M,256M"
        if args.budget_s is None:
            args.budget_s = ALL_BUDGET_S
    args.modes = [m for m in MODES if getattr(args, m)]
    try:
        args.element_counts = [parse_count(x) for x in (args.elements or "32M").split(",") if x.strip()]
        args.packed_totals = [parse_count(x) for x in args.packed_tokens.split(",") if x.strip()]
        args.layout_dim_values = [int(x) for x in args.layout_dims.split(",") if x.strip()]
        args.overhead_shape_values = parse_shapes(args.overhead_shapes)
        from scripts.bench_rope_modes import parse_dims

        args.dims = parse_dims(args.head_dim_list, args.variant)
    except ValueError as exc:
        ap.error(str(exc))
    if args.placements < 1:
        ap.error(f"--placements must be a positive count of input sets, got {args.placements}")
    if args.reps is None:
        args.reps = 15 if args.modes else 30
    if args.modes and args.tune:
        ap.error("--tune belongs to the default run, not to the modes")
    if args.flush == "steady" and (problem := steady_flush_problem(args)):
        ap.error(problem)
    return args


#: The fewest bytes a call timed with ``--flush steady`` may move (q and k read and written): about five times the
#: 50 MB L2 of an H100 or H200, so that the untimed call before it leaves none of its inputs in the L2. On a GPU
#: with a larger L2, :func:`run_modes` asks for five times its L2 (:func:`steady_min_bytes`).
STEADY_MIN_BYTES = 256 * 2**20


def steady_min_bytes(l2_bytes: int) -> int:
    """The fewest bytes a ``--flush steady`` call may move on a GPU with ``l2_bytes`` of L2: five times that, and
    never under :data:`STEADY_MIN_BYTES` (what the arguments are checked against before any GPU is touched)."""
    return max(STEADY_MIN_BYTES, 5 * l2_bytes)


def steady_flush_problem(args: argparse.Namespace, min_bytes: int = STEADY_MIN_BYTES) -> str | None:
    """Why ``--flush steady`` cannot time this run (one line), or None: each timed call must move at least
    ``min_bytes`` (bf16 q and k, read and written: 8 bytes an element of each tensor)."""
    size = f"{min_bytes / 2**20:.0f} MB"
    if not args.modes:
        return f"--flush steady needs calls of at least {size}: the default run's token sweep has smaller ones (use" \
               " it with --head-dims, --layouts or --packed)"
    if set(args.modes) & {"head_dims", "layouts"} and 8 * min(args.element_counts) < min_bytes:
        return f"--flush steady needs --elements of at least {count_label(-(-min_bytes // 8))} a tensor (calls of" \
               f" {size}), got {count_label(min(args.element_counts))}"
    if "packed" in args.modes and 8 * min(args.packed_totals) * args.heads * PACKED_HEAD_DIM < min_bytes:
        least = -(-min_bytes // (8 * args.heads * PACKED_HEAD_DIM))
        return f"--flush steady needs --packed-tokens of at least {count_label(least)} at --heads {args.heads}" \
               f" (calls of {size}), got {count_label(min(args.packed_totals))}"
    return None


def parse_shapes(text: str | None) -> list[tuple[int, int, int, int]]:
    """``1x128x8x64,...`` -> [(1, 128, 8, 64), ...] (None: the overhead mode's default shapes)."""
    from scripts.bench_rope_modes import OVERHEAD_SHAPES

    if not text:
        return list(OVERHEAD_SHAPES)
    shapes = []
    for part in text.split(","):
        dims = tuple(int(x) for x in part.strip().lower().split("x"))
        if len(dims) != 4 or min(dims) <= 0:
            raise ValueError(f"not a BxTxHxD shape: {part!r}")
        shapes.append(dims)
    return shapes


def run_modes(args: argparse.Namespace) -> int:
    """The issue-13 modes: each writes its Markdown and CSV as soon as it is done; ``summary.md``
    (every table) is rewritten after each and printed at the end."""
    from scripts import bench_rope_modes as bm

    device = use_device(args.device, "bench_rope.py")
    if device.type == "cuda":
        if args.flush == "steady":
            l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
            if problem := steady_flush_problem(args, steady_min_bytes(l2)):
                print(f"bench_rope.py: error: {problem} (this GPU's L2: {l2 / 2**20:.0f} MB)", file=sys.stderr)
                return 2
    t0 = time.time()
    for key, value in (("cache_size_limit", 1024), ("recompile_limit", 1024), ("accumulated_cache_size_limit", 8192),
                       ("accumulated_recompile_limit", 8192)):
        if hasattr(torch._dynamo.config, key):
            setattr(torch._dynamo.config, key, value)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    timer = make_timer(args.reps, device, args.flush)
    copy_bw = copy_bandwidth(timer, 2**30 if device.type == "cuda" else 2**22, device)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (dry run)"
    names, notes = bm.impl_names(args.ropes, device, liger=not args.no_liger, compiled=not args.no_compiled)
    deadline = None if args.budget_s is None else t0 + args.budget_s
    # --all: the budget cuts only its last sweep (256M), the other modes always run whole
    bench = bm.Bench(timer, device, copy_bw, lambda m: torch.compile(m, dynamic=False, backend=args.compile_backend),
                     args.variant, deadline=None if args.all else deadline, t0=t0, placements=args.placements)
    if args.liger_tables == "float32" or device.type != "cuda":
        bench.liger_table_dtype = torch.float32
    info = {"device_name": device_name, "variant": args.variant, "copy_bw": copy_bw, "reps": args.reps,
            "placements": args.placements, "flush": args.flush,
            "liger_tables": bench.liger_dtype, "launch_rules": launch_rules(device)}
    versions = f"torch {torch.__version__}"
    for dist in ("triton", "liger-kernel"):
        try:
            versions += f", {dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            pass
    bench.log(f"{device_name}: copy bandwidth {copy_bw:.0f} GB/s ({versions}); Triton launch rules "
              f"{info['launch_rules']}; modes {', '.join(args.modes)};"
              f" implementations {', '.join(names)}" + (f"; budget {args.budget_s:g} s" if args.budget_s else ""))
    for n in notes:
        bench.log(n)
    sections = [f"# RoPE benchmark modes ({device_name}, {versions})", "",
                f"`{' '.join(['python -m scripts.bench_rope', *args.argv])}`",
                "", *(f"- {n}" for n in notes)]
    T, H = args.seq_len, args.heads

    def done(res, markdown: str) -> None:
        res.markdown = markdown
        bm.write_result(res, out)
        sections.extend(["", markdown])
        (out / "summary.md").write_text("\n".join(sections) + "\n")
        bench.log(f"wrote {out}/{res.name}.md")

    if args.overhead:
        res = bm.run_overhead(bench, names, args.overhead_shape_values, args.overhead_calls, args.overhead_repeats)
        done(res, bm.overhead_markdown(res, names, args.overhead_calls, args.overhead_repeats, info))
    counts = args.element_counts if args.head_dims else []

    def sweep(elements: int) -> None:
        def progress(res) -> None:  # the files after every head dim: a run cut off keeps them
            res.markdown = bm.headdim_markdown(res, names, elements, T, H, info)
            bm.write_result(res, out)

        # a spread of head dims first, so that a run cut short still covers the range
        res = bm.run_headdim(bench, names, bm.priority_order(args.dims), elements, T, H, progress)
        done(res, bm.headdim_markdown(res, names, elements, T, H, info))
        if res.rows:
            bm.headdim_plot(res.rows, names, out / f"{res.name}.png", elements, T, H, info)

    # --all: the budget cuts only the last sweep (256M), which runs after layouts and packed
    first, last = (counts[:-1], counts[-1:]) if args.all else (counts, [])
    for elements in first:
        sweep(elements)
    _layouts_packed(args, bench, bm, names, info, done)
    for elements in last:
        bench.deadline = deadline
        sweep(elements)
    bench.log(f"all done in {time.time() - t0:.0f} s; files in {out}")
    print((out / "summary.md").read_text())
    return 0


def _layouts_packed(args, bench, bm, names, info, done) -> None:
    T, H = args.seq_len, args.heads
    if args.layouts:
        res = bm.run_layouts(bench, names, args.layout_dim_values, args.element_counts[0], T, H)
        done(res, bm.layouts_markdown(res, names, args.element_counts[0], T, H, info))
    if args.packed:
        res = bm.run_packed(bench, names, args.packed_totals, H, PACKED_HEAD_DIM, args.packed_max_len)
        done(res, bm.packed_markdown(res, names, H, PACKED_HEAD_DIM, args.packed_max_len, info))


def launch_rules(device: torch.device) -> str:
    """Which GPU's measured launch rules the Triton entries take on ``device`` (``rope.triton_rope.GPU_PROFILES``): the
    tables and logs name it, since the same head dim can launch another tiling on another GPU."""
    from rope import triton_rope

    if device.type != "cuda":
        return triton_rope.device_profile(-1)
    return triton_rope.device_profile(device.index if device.index is not None else torch.cuda.current_device())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.modes:
        return run_modes(args)
    require_cuda("bench_rope.py")
    names = bench_names(args.ropes)
    torch._dynamo.config.cache_size_limit = 64
    t0 = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    timer = Timer(args.reps, args.flush)
    device_name = torch.cuda.get_device_name()
    copy_bw = copy_bandwidth(timer)
    print(f"{device_name}: copy bandwidth {copy_bw:.0f} GB/s  (torch {torch.__version__}); {', '.join(names)}",
          flush=True)
    if args.tune:
        tune(timer, [n for n in names if n not in BASELINES], args.variant)
    rows, sweep = measure(timer, names, args.variant, not args.no_sweep, copy_bw, t0)
    errors = measure_errors(names, args.variant)
    write_csv(args.out / "bench_rope.csv", rows + sweep)
    if sweep:
        plot(sweep, args.out / "bench_rope.png", copy_bw, args.variant)
    md = markdown(rows + sweep, errors, copy_bw, args.variant, device_name)
    (args.out / "bench_rope.md").write_text(md)
    print(f"wrote {args.out}/bench_rope.{{md,csv,png}} in {time.time() - t0:.0f} s\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
