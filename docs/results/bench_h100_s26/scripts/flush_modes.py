# ruff: noqa
"""Session 26: one machine, three ways to start a timed call with the inputs out of L2.

zero:   the benchmark's flush (256 MB zeroed, as triton.testing.do_bench does), then the call: the call also pays
        for writing back the flush's dirty lines.
read:   256 MB read, then the call: the L2 starts clean, and the call's own dirty lines left in L2 at its end are
        not charged to it.
steady: K calls back to back, alternating two input sets (each larger than the L2), after a read flush; time / K:
        each call pays the previous call's leftover dirty lines, as in a stream of such calls (bias: one call's
        leftover / K).

A device copy of the same bytes, triton_v4's forward (module call) and backward kernel (rotate_transposed), and
Liger's forward, variant full, B x 2048 x 16 x D at >= 32M elements a tensor; % of the 1 GiB copy measured the
same way.

    python .devrun/s26/flush_modes.py [D,D,...]
"""
import statistics
import sys

import torch

import rope
from scripts.benchlib import Timer
from scripts import liger_adapter

K = 10
ONE_LAUNCH = '--one-launch' in sys.argv


def steady(fns, reps=15):
    best = []
    for _ in range(2):
        flush = torch.zeros(256 * 2**20, dtype=torch.uint8, device="cuda")
        times = []
        for _ in range(reps):
            flush.view(torch.int64).amax()
            torch.cuda._sleep(4_000_000)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for i in range(K):
                fns[i % 2]()
            e.record()
            times.append((s, e))
        torch.cuda.synchronize()
        best.append(statistics.median(s.elapsed_time(e) for s, e in times) / K)
    return min(best)


TIMERS = {"zero": Timer(15, "zero"), "read": Timer(15, "read"), "tsteady": Timer(15, "steady")}


class OtherBefore(Timer):
    """steady with the untimed call on the other input set."""

    def __init__(self, other):
        super().__init__(15, "steady")
        self.other = other

    def _flush(self, fn):
        self.other()


def three(fns):
    for f in fns:
        f()
    torch.cuda.synchronize()
    return {"zero": TIMERS["zero"](fns[0]), "read": TIMERS["read"](fns[0]), "steady": steady(fns),
            "tsteady": TIMERS["tsteady"](fns[0]), "tsteady_other": OtherBefore(fns[1])(fns[0])}


def main():
    dims = [int(x) for x in sys.argv[1].split(",")] if len(sys.argv) > 1 and sys.argv[1][0].isdigit() else [18, 30, 38, 46, 50, 54, 56, 64, 114, 128, 206]
    src = torch.empty(2**29, dtype=torch.bfloat16, device="cuda").normal_()
    dsts = [torch.empty_like(src) for _ in range(2)]
    srcs = [src, src.clone()]
    cp = three([lambda i=i: dsts[i].copy_(srcs[i]) for i in range(2)])
    bw = {m: 4 * src.numel() / (t * 1e-3) / 1e9 for m, t in cp.items()}
    del src, srcs, dsts
    print("1 GiB copy GB/s: " + "  ".join(f"{m} {v:.0f}" for m, v in bw.items()), flush=True)
    print("per D: time us and % of that mode's 1 GiB copy, zero / read / steady (K=10 stream) / Timer steady / steady, other inputs before")
    for D in dims:
        r = rope.build("triton_v4", D, 2048, variant="full").cuda()
        B = -(-32 * 2**20 // (2048 * 16 * D))
        sets = [[torch.randn(B, 2048, 16, D, device="cuda", dtype=torch.bfloat16) for _ in range(2)] for _ in range(2)]
        nbytes = 4 * sets[0][0].numel() * 2
        outs = [[torch.empty_like(t) for t in s] for s in sets]
        rows = {}
        rows["copy"] = three([lambda s=s, o=o: (o[0].copy_(s[0]), o[1].copy_(s[1])) for s, o in zip(sets, outs)])
        if ONE_LAUNCH:  # one copy launch moving the same bytes as q and k together
            big = [torch.empty(2 * s[0].numel(), device="cuda", dtype=torch.bfloat16).normal_() for s in sets]
            bigo = [torch.empty_like(b) for b in big]
            rows["copy1"] = three([lambda b=b, o=o: o.copy_(b) for b, o in zip(big, bigo)])
            del big, bigo
        with torch.no_grad():
            rows["fwd"] = three([lambda s=s: r(s[0], s[1]) for s in sets])
            rows["bwd"] = three([lambda s=s: r.rotate_transposed(s[0], s[1]) for s in sets])
        if liger_adapter.liger_rope() is not None:
            lg = liger_adapter.LigerNative(r)
            rows["liger_fwd"] = three([lambda s=s: lg.forward(s[0], s[1]) for s in sets])
        cells = []
        for name, t in rows.items():
            cells.append(name + " " + "/".join(f"{t[m] * 1e3:.1f}" for m in t) + " us "
                         + "/".join(f"{100 * nbytes / (t[m] * 1e-3) / 1e9 / bw[m]:.1f}" for m in t) + "%")
        print(f"D={D} B={B}: " + " | ".join(cells), flush=True)
        del sets, outs


if __name__ == "__main__":
    main()
