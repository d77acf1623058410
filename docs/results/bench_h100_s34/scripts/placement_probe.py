"""Session 34: is an odd half's deficit under --flush zero its geometry's or its tensors' placement's?

For each head dim, triton_v4 (variant full) forward (module call) and backward (rotate_transposed) timed as
bench_rope times them (benchlib.Timer, zero flush, 15 reps, two passes), on NP input sets, each placed after a pad
of a random size (all kept alive, so every set has its own addresses). The benchmark's own sets come in the same
order in every process. Prints each head dim's per-set % of the 1 GiB copy and their median/min/max.

    python docs/results/bench_h100_s34/scripts/placement_probe.py 114,182,198,206,186,202,128 8  (from the repo root)
"""
import random
import statistics
import sys

import torch

sys.path.insert(0, ".")
import rope  # noqa: E402
from scripts.bench_rope_modes import batch_for  # noqa: E402
from scripts.benchlib import Timer, copy_bandwidth  # noqa: E402

timer = Timer(15, "zero")
copy = copy_bandwidth(timer)
print(f"{torch.cuda.get_device_name()}: copy {copy:.0f} GB/s", flush=True)
T, H = 2048, 16
rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
dims = [int(x) for x in sys.argv[1].split(",")]
NP = int(sys.argv[2])


def time_set(m: torch.nn.Module, B: int, D: int) -> tuple[float, float]:
    """Forward and backward % of the copy on a fresh input set (its tensors appended to ``keep``)."""
    q, k, gq, gk = [torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    keep.extend((q, k, gq, gk))
    nbytes = 2 * (q.numel() + k.numel()) * q.element_size()
    fwd_ms = timer(lambda: m(q, k))
    bwd_ms = timer(lambda: m.rotate_transposed(gq, gk))
    return tuple(100 * nbytes / (ms * 1e-3) / 1e9 / copy for ms in (fwd_ms, bwd_ms))


for D in dims:
    B = batch_for(32 * 2**20, T, H, D)
    m = rope.build("triton_v4", D, T, variant="full").cuda()
    keep: list[torch.Tensor] = []
    fw, bw = [], []
    for _ in range(NP):
        keep.append(torch.empty(rng.randrange(0, 64) * 2**21 + rng.randrange(1, 4096) * 512, dtype=torch.uint8,
                                device="cuda"))
        f, b = time_set(m, B, D)
        fw.append(f)
        bw.append(b)
    print(f"D={D} B={B} fwd med {statistics.median(fw):.2f} [{min(fw):.2f}, {max(fw):.2f}]  bwd med "
          f"{statistics.median(bw):.2f} [{min(bw):.2f}, {max(bw):.2f}]  sets fwd " + " ".join(f"{x:.1f}" for x in fw)
          + "  bwd " + " ".join(f"{x:.1f}" for x in bw), flush=True)
    keep.clear()
    torch.cuda.empty_cache()
