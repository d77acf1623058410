# ruff: noqa
"""Session 33: does splitting the last programs of the flat joint launch into smaller ones (a finer tail) shorten
triton_v4's kernel at the odd halves? CUPTI kernel durations (median of 15, lower of two rounds) at 32M elements a
tensor, forward and backward kernel, after a zero flush and after a call on other inputs ('other', steady).

    python .devrun/s33/tail_probe.py LABEL D,D,... SETTING;SETTING;...   (SETTING: none | W,S)
"""
import statistics
import sys

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, ".")
import rope
import rope.triton_rope as tr

REPS = 15


def durations(prep, fn, two):
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REPS):
            prep()
            torch.cuda._sleep(4_000_000)
            fn()
        torch.cuda.synchronize()
    ks = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA and "rope" in e.name),
                key=lambda e: e.time_range.start)
    ks = ks[1::2] if two else ks
    return statistics.median(e.time_range.elapsed_us() for e in ks)


def events(prep, fn, reps=30):
    ss = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    es = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(ss, es):
        prep()
        torch.cuda._sleep(4_000_000)
        s.record(); fn(); e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(ss, es)) * 1e3


def main():
    label, dims, settings = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(";")
    lean = len(sys.argv) > 4
    flush = torch.zeros(256 * 2**20, dtype=torch.uint8, device="cuda")
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda"); dst = torch.empty_like(src)
    cp = min(events(lambda: flush.zero_(), lambda: dst.copy_(src)) for _ in range(2))
    copy_bw = 2 * 2**30 / (cp * 1e-6) / 1e9
    del src, dst
    print(f"{label}: copy {copy_bw:.0f} GB/s", flush=True)
    for dim in dims:
        D = int(dim.rstrip("p"))
        variant = "partial" if dim.endswith("p") else "full"
        B = -(-32 * 2**20 // (2048 * 16 * D))
        q, k, q2, k2 = (torch.randn(B, 2048, 16, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        nb = 4 * q.numel() * 2
        for setting in settings:
            if hasattr(tr, "TAIL"):
                tr.TAIL = None if setting == "none" else tuple(int(v) for v in setting.split(","))
            elif setting != "none":
                continue
            r = rope.build("triton_v4", head_dim=D, max_seq_len=2048, variant=variant).cuda()
            with torch.no_grad():
                res = []
                for name, fn, other in (("fwd", lambda: r(q, k), lambda: r(q2, k2)),
                                        ("bwd", lambda: r.rotate_transposed(q, k), lambda: r.rotate_transposed(q2, k2))):
                    for _ in range(3):
                        fn(); other()
                    torch.cuda.synchronize()
                    z = min(durations(lambda: flush.zero_(), fn, False) for _ in range(1 if lean else 2))
                    o = float("nan") if lean else min(durations(other, fn, True) for _ in range(2))
                    ev = min(events(lambda: flush.zero_(), fn, 20 if lean else 30) for _ in range(2))
                    res.append(f"{name} zero {z:.2f} other {o:.2f} ev_zero {ev:.2f} us ({nb / (ev * 1e-6) / 1e9 / copy_bw * 100:.2f}%)")
            grid = tr.launch_plan(q, k, r.cos, r.sin, None, variant == "partial", False, False).grid
            print(f"{label} D={dim} B={B} tail={setting} grid={grid}: " + " | ".join(res), flush=True)
        del q, k, q2, k2


if __name__ == "__main__":
    main()
