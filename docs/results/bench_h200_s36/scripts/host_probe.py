"""Where the module call's extra host time with positions and grad goes (issue #13, point 4).

Session 35's slow host read call - launch at 10.9 and 11.2 us for (B, T) positions with grad, where
the same cases without positions read 2.3-3.4 us. This times the pieces of the call in paired
loops (``benchlib.paired_host_loops``: adjacent loops, the order alternating), each with positions
against the same piece without them, and prints a cProfile listing of both calls.

    python docs/results/bench_h200_s36/scripts/host_probe.py [--stub]

``--stub``: the kernel launch replaced by a no-op (``LaunchPlan.run``), for a CPU check of the script.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys

import torch

sys.path.insert(0, ".")
import rope  # noqa: E402
from rope import triton_rope  # noqa: E402
from scripts.benchlib import paired_host_loops, synchronize  # noqa: E402


class _Empty(torch.autograd.Function):
    """An autograd Function of q, k, cos, sin, positions that saves the last three, as ``_RopeFunction``."""

    @staticmethod
    def forward(ctx, q, k, cos, sin, positions):
        ctx.save_for_backward(cos, sin, positions)
        return torch.empty_like(q), torch.empty_like(k)

    @staticmethod
    def backward(ctx, gq, gk):
        return gq, gk, None, None, None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stub", action="store_true")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--no-profile", action="store_true")
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if args.stub:
        triton_rope.LaunchPlan.run = lambda self, *a, **k: None
    print(f"device {torch.cuda.get_device_name() if dev == 'cuda' else 'cpu'}, torch {torch.__version__}")
    for shape in ((1, 128, 8, 64), (1, 1, 32, 128), (64, 1, 32, 128), (8, 16, 8, 64)):
        probe_shape(*shape, dev, args)


def probe_shape(B: int, T: int, H: int, D: int, dev: str, args: argparse.Namespace) -> None:
    """The paired pieces at one shape (and, at 1x1x32x128, the cProfile listings)."""
    mod = rope.build("triton_v4", D, 2048, variant="partial").to(dev)
    cos, sin = mod.cos, mod.sin
    q = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    pos = ((torch.arange(T, device=dev) + 7) % 2048).expand(B, T).contiguous()
    pos32 = pos.int()
    pos1 = pos[0].clone()  # (T,)
    fn = triton_rope._RopeFunction
    part = mod._partial_shortcut

    def ap_(p):
        return lambda: triton_rope._apply(fn, q, k, cos, sin, p, part, False, False, False,
                                          triton_rope.DEFAULT_LAUNCH, False)

    def launch_(p):
        return lambda: triton_rope.launch(q, k, cos, sin, p, part, False, False)

    pieces = {
        "module call, grad": (lambda: mod(q, k, positions=pos), lambda: mod(q, k), True),
        "module call, grad, int32 positions": (lambda: mod(q, k, positions=pos32), lambda: mod(q, k), True),
        "module call, grad, (T,) positions": (lambda: mod(q, k, positions=pos1), lambda: mod(q, k), True),
        "module call, no grad": (lambda: mod(q, k, positions=pos), lambda: mod(q, k), False),
        "forward(), grad": (lambda: mod.forward(q, k, positions=pos), lambda: mod.forward(q, k), True),
        "validate + rotate, grad": (lambda: (mod._validate(q, k, pos), mod.rotate(q, k, pos)),
                                    lambda: (mod._validate(q, k, None), mod.rotate(q, k, None)), True),
        "rotate, grad": (lambda: mod.rotate(q, k, pos), lambda: mod.rotate(q, k, None), True),
        "_apply(_RopeFunction), grad": (ap_(pos), ap_(None), True),
        "launch(), no grad": (launch_(pos), launch_(None), False),
        "launch(), grad mode on (no Function)": (launch_(pos), launch_(None), True),
        "empty Function saving positions": (lambda: _Empty.apply(q, k, cos, sin, pos),
                                            lambda: _Empty.apply(q, k, cos, sin, None), True),
        "_validate": (lambda: mod._validate(q, k, pos), lambda: mod._validate(q, k, None), True),
        "plan lookup": (lambda: triton_rope.launch_plan(q, k, cos, sin, pos, part, False, False),
                        lambda: triton_rope.launch_plan(q, k, cos, sin, None, part, False, False), True),
    }
    print(f"\n== {B}x{T}x{H}x{D} bf16: host us per call, with positions / without / paired difference [q1, q3]")
    for name, (fa, fb, grad) in pieces.items():
        with torch.set_grad_enabled(grad):
            r = paired_host_loops(fa, fb, args.calls, args.repeats, dev)
        print(f"  {name:40s} {r['a_us']:7.1f} {r['b_us']:7.1f} {r['diff_us']:+6.1f} "
              f"[{r['diff_q1_us']:+.1f}, {r['diff_q3_us']:+.1f}]")
    if (B, T, H, D) == (1, 1, 32, 128) and not args.no_profile:
        for label, f in (("with positions", lambda: mod(q, k, positions=pos)), ("without", lambda: mod(q, k))):
            for _ in range(200):
                f()
            synchronize(dev)
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(5000):
                f()
            prof.disable()
            synchronize(dev)
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
            print(f"\n-- cProfile, module call with grad, {label}, 5000 calls (tottime) --")
            print("\n".join(s.getvalue().splitlines()[:40]))


if __name__ == "__main__":
    main()
