"""Benchmark the RoPE kernels on a CUDA GPU: time, GB/s, percent of copy bandwidth, speedups.

    python scripts/bench_rope.py [--out DIR] [--variant partial|full] [--reps N] [--tune]

For bf16 q and k (B, T, H, D) of the shapes below and a sweep of token counts at D=128, it times
``triton_v4``, ``triton_v2``, the ``torch`` reference in eager mode and under ``torch.compile``:
forward, forward+backward (``torch.autograd.grad`` of both outputs) and, for the Triton entries,
the backward kernel alone. Bytes = q and k read once and written once (twice that for
forward+backward); the device-to-device copy bandwidth (``dst.copy_(src)``, 1 GiB) is measured
in the same run. Each timing is the lower of two medians over repetitions, each preceded by an
L2 flush (the CSV also has the host time per call, to spot host-bound measurements). It
also measures the bf16 error of the two Triton entries against the float64 reference.

Writes ``bench_rope.md``, ``bench_rope.csv`` and ``bench_rope.png`` under ``--out`` (default
``outputs/bench/``) and prints the Markdown table last.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import rope  # noqa: E402
from rope import triton_rope  # noqa: E402

# (B, H, T, D) as the issue writes them; tensors are laid out (B, T, H, D).
SHAPES = [(4, 16, 4096, 256), (4, 8, 2048, 128), (32, 32, 4096, 128), (32, 12, 1024, 64)]
SWEEP_TOKENS = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144]
SWEEP_H, SWEEP_D = 16, 128
IMPLS = ("triton_v4", "triton_v2", "torch", "torch_compiled")


class Timer:
    """GPU time (ms) of ``fn``: the lower of two medians over ``reps`` calls, each after an L2 flush.

    A GPU sleep before each start event lets the host queue the call ahead of the GPU, so the time
    is the kernels' and not Python's launch overhead; ``last_host_ms`` keeps the median host time
    of one call (enqueueing only), to tell a host-bound measurement apart. Two passes, keeping the
    lower median, damp a pass disturbed by the host (a few forward+backward medians of single
    passes came out 3-10x too high on the H100 while the kernels alone were not).
    """

    def __init__(self, reps: int) -> None:
        self.reps = reps
        self.flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
        self.last_host_ms = math.nan

    def _pass(self, fn, reps: int) -> tuple[float, float]:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        host = []
        for s, e in zip(starts, ends, strict=True):
            self.flush.zero_()
            torch.cuda._sleep(4_000_000)  # ~2 ms of GPU idle: the host queues the timed work meanwhile
            s.record()
            t0 = time.perf_counter()
            fn()
            host.append((time.perf_counter() - t0) * 1e3)
            e.record()
        torch.cuda.synchronize()
        gpu = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))
        return gpu, statistics.median(host)

    def __call__(self, fn, reps: int | None = None) -> float:
        reps = reps or self.reps
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        (g1, h1), (g2, h2) = self._pass(fn, reps), self._pass(fn, reps)
        self.last_host_ms = min(h1, h2)
        return min(g1, g2)


def copy_bandwidth(timer: Timer, nbytes: int = 2**30) -> float:
    """Device-to-device copy bandwidth of an ``nbytes`` tensor in GB/s (bytes read + bytes written)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = timer(lambda: dst.copy_(src), reps=30)
    return 2 * nbytes / (ms * 1e-3) / 1e9


def build_impls(D: int, max_seq_len: int, variant: str, dynamic: bool) -> dict:
    """impl name -> (module, callable); the compiled reference gets its own torch.compile wrapper."""
    out = {}
    for impl in IMPLS:
        mod = rope.build("torch" if impl == "torch_compiled" else impl, D, max_seq_len, variant=variant).cuda()
        out[impl] = (mod, torch.compile(mod, dynamic=dynamic) if impl == "torch_compiled" else mod)
    return out


def warm(impls: dict, B, H, T, D) -> None:
    """One forward and one forward+backward of every entry: compiles kernels and graphs."""
    q = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
    for _mod, fn in impls.values():  # the same calls as bench_shape times, so the same graphs
        fn(q, k)
        torch.autograd.grad(fn(qg, kg), (qg, kg), (q, k))
    torch.cuda.synchronize()


def bench_shape(timer, impls: dict, B, H, T, D, variant, copy_bw) -> list[dict]:
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
        if impl.startswith("triton"):
            op = triton_rope.rope_bwd
            bwd = timer(lambda: op(gq, gk, mod.cos, mod.sin, None, variant == "partial", mod.low_precision))  # noqa: B023
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


def ulp_bf16(x: torch.Tensor) -> torch.Tensor:
    _, e = torch.frexp(x.double().abs())
    return torch.where(
        x == 0, 2.0**-133, torch.clamp(torch.ldexp(torch.ones_like(e, dtype=torch.float64), e - 8), min=2.0**-133)
    )


def measure_errors(variant: str, B=4, H=8, T=2048, D=128) -> list[dict]:
    """bf16 error of each Triton entry (and the bf16 torch reference) against the float64 reference."""
    q = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    gq, gk = torch.randn_like(q), torch.randn_like(k)
    ref = rope.build("torch", D, T, variant=variant, compute_dtype="float64").cuda()
    q64, k64 = q.double().requires_grad_(), k.double().requires_grad_()
    r64 = ref(q64, k64)
    g64 = torch.autograd.grad(r64, (q64, k64), (gq.double(), gk.double()))
    out = []
    for name, opts in (("triton_v4", {}), ("triton_v2", {}), ("torch(bf16)", {"compute_dtype": "bfloat16"})):
        mod = rope.build(name.split("(")[0], D, T, variant=variant, **opts).cuda()
        qq, kk = q.clone().requires_grad_(), k.clone().requires_grad_()
        y = mod(qq, kk)
        g = torch.autograd.grad(y, (qq, kk), (gq, gk))
        for what, got, want in (("forward", y, r64), ("backward", g, g64)):
            err = torch.cat([(a.double() - b.detach()).abs().flatten() for a, b in zip(got, want, strict=True)])
            rounded = [b.detach().to(torch.bfloat16) for b in want]
            ulps = torch.cat(
                [((a.double() - r.double()).abs() / ulp_bf16(r)).flatten() for a, r in zip(got, rounded, strict=True)]
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


def tune(timer, variant: str) -> None:
    """Time triton_v4 forward and backward over a few launch configurations (prints only)."""
    configs = [{"tile": tile, "num_warps": w} for tile in (1024, 2048, 4096) for w in (4, 8, 16)]
    for B, H, T, D in SHAPES:
        q = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn_like(q)
        mod = rope.build("triton_v4", D, T, variant=variant).cuda()
        nbytes = 2 * 2 * q.numel() * 2
        res = []
        for cfg in configs:
            triton_rope._TUNE.clear()
            triton_rope._TUNE.update(cfg)
            ms = timer(lambda: mod(q, k))  # noqa: B023
            msb = timer(lambda: triton_rope.rope_bwd(q, k, mod.cos, mod.sin, None, variant == "partial", False))  # noqa: B023
            res.append((ms, msb, cfg, triton_rope.launch_config(D)))
        triton_rope._TUNE.clear()
        print(f"tune {B}x{H}x{T}x{D}:")
        for ms, msb, cfg, lc in sorted(res, key=lambda r: r[0]):
            print(
                f"  fwd {ms:.4f} ms {nbytes / ms / 1e6:7.0f} GB/s  bwd {msb:.4f} ms  {cfg}  "
                f"BR={lc['BR']} HP={lc['HP']} warps={lc['num_warps']}"
            )


def fmt(v, spec=".3f") -> str:
    return "" if isinstance(v, float) and math.isnan(v) else format(v, spec)


def markdown(rows, errors, copy_bw, variant, device_name) -> str:
    lines = [
        f"# RoPE benchmark ({device_name}, bf16, variant={variant})",
        "",
        f"Device-to-device copy bandwidth: **{copy_bw:.0f} GB/s**. Bytes = q and k read once and written once"
        " (x2 for forward+backward). bwd = the backward kernel alone (Triton entries). Speedups: against the"
        " torch reference eager (`xE`) and `torch.compile`d (`xC`). `%cp=` = forward against a copy moving the"
        " same bytes as the shape (small transfers do not reach the 1 GiB copy's bandwidth).",
        "",
        "| shape BxHxTxD | impl | fwd ms | fwd GB/s | fwd %copy | bwd ms | bwd %copy | fwd+bwd ms | fwd+bwd GB/s"
        " | fwd+bwd %copy | fwd xE | fwd xC | f+b xE | f+b xC | fwd %cp= |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape']} | {r['impl']} | {fmt(r['fwd_ms'], '.4f')} | {fmt(r['fwd_GBps'], '.0f')} | "
            f"{fmt(r['fwd_pct_copy'], '.1f')} | {fmt(r['bwd_ms'], '.4f')} | {fmt(r['bwd_pct_copy'], '.1f')} | "
            f"{fmt(r['fwdbwd_ms'], '.4f')} | {fmt(r['fwdbwd_GBps'], '.0f')} | {fmt(r['fwdbwd_pct_copy'], '.1f')} | "
            f"{fmt(r['fwd_x_torch'], '.2f')} | {fmt(r['fwd_x_torch_compiled'], '.2f')} | "
            f"{fmt(r['fwdbwd_x_torch'], '.2f')} | {fmt(r['fwdbwd_x_torch_compiled'], '.2f')} | "
            f"{fmt(r['fwd_pct_same_size_copy'], '.1f')} |"
        )
    if errors:
        lines += [
            "",
            "bf16 error against the float64 reference (4x8x2048x128, q and k; ulp = bf16 spacing at the rounded"
            " reference):",
            "",
            "| impl | pass | max abs err | mean abs err | max ulp | frac > 1 ulp | frac not correctly rounded |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for e in errors:
            lines.append(
                f"| {e['impl']} | {e['pass']} | {e['max_abs_err']:.3g} | {e['mean_abs_err']:.3g} | "
                f"{e['max_ulp']:.2f} | {e['frac_over_1ulp']:.2e} | {e['frac_not_correctly_rounded']:.2e} |"
            )
    return "\n".join(lines) + "\n"


def plot(rows, path: Path, copy_bw: float, variant: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, key, title in ((axes[0], "fwd_GBps", "forward"), (axes[1], "fwdbwd_GBps", "forward+backward")):
        for impl in IMPLS:
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench")
    ap.add_argument("--variant", default="partial", choices=("partial", "full"))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--tune", action="store_true", help="also time a few launch configurations of triton_v4")
    ap.add_argument("--no-sweep", action="store_true", help="skip the token sweep")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_rope.py needs a CUDA GPU", file=sys.stderr)
        return 1
    torch._dynamo.config.cache_size_limit = 64
    t0 = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    timer = Timer(args.reps)
    name = torch.cuda.get_device_name()
    copy_bw = copy_bandwidth(timer)
    print(f"{name}: copy bandwidth {copy_bw:.0f} GB/s  (torch {torch.__version__})", flush=True)
    if args.tune:
        tune(timer, args.variant)
    # Compile everything first (the compiled reference per main shape, dynamic=False; one
    # dynamic-shape compile for the sweep), then let the compiler's background workers settle:
    # timings taken while they ran came out host-bound.
    main_impls = [build_impls(D, T, args.variant, dynamic=False) for B, H, T, D in SHAPES]
    for impls, (B, H, T, D) in zip(main_impls, SHAPES, strict=True):
        warm(impls, B, H, T, D)
    sweep_shapes = [] if args.no_sweep else [(n // min(n, 4096), SWEEP_H, min(n, 4096), SWEEP_D) for n in SWEEP_TOKENS]
    sweep_impls = build_impls(SWEEP_D, 4096, args.variant, dynamic=True)
    for B, H, T, D in sweep_shapes:
        warm(sweep_impls, B, H, T, D)
    print(f"  compiled ({time.time() - t0:.0f} s)", flush=True)
    time.sleep(5)
    rows = []
    for impls, (B, H, T, D) in zip(main_impls, SHAPES, strict=True):
        rows += bench_shape(timer, impls, B, H, T, D, args.variant, copy_bw)
        print(f"  {B}x{H}x{T}x{D} done ({time.time() - t0:.0f} s)", flush=True)
    sweep = []
    for B, H, T, D in sweep_shapes:
        sweep += bench_shape(timer, sweep_impls, B, H, T, D, args.variant, copy_bw)
    if sweep:
        print(f"  sweep done ({time.time() - t0:.0f} s)", flush=True)
    errors = measure_errors(args.variant)
    all_rows = rows + sweep
    with open(args.out / "bench_rope.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(all_rows[0]))
        w.writeheader()
        w.writerows(all_rows)
    if sweep:
        plot(sweep, args.out / "bench_rope.png", copy_bw, args.variant)
    md = markdown(all_rows, errors, copy_bw, args.variant, name)
    (args.out / "bench_rope.md").write_text(md)
    print(f"wrote {args.out}/bench_rope.{{md,csv,png}} in {time.time() - t0:.0f} s\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
