# ruff: noqa: B023  (the timed lambdas run at once, inside the loop that binds their variables)
"""Session 9 experiment (#13): does a persistent grid (programs loop over the chunk tiles) lift the
V = 2 head dims? Same body (_rotate_chunks), grid = SMs x W programs instead of one per tile.
Also times launch configurations (tile x warps) with the project's Timer, fwd and bwd in both orders,
and a same-size copy beside each head dim. Usage: python .devrun/exp_persist.py [dims] [--check]"""
import os
import sys

sys.path.insert(0, os.getcwd())
import torch
import triton
import triton.language as tl

import rope
from rope import triton_rope
from rope._triton_kernels import _rotate_chunks
from rope.triton_rope import LaunchConfig


@triton.jit(do_not_specialize=["spb", "spt", "NPOS", "T", "mT", "pT", "HQ", "mHQ", "pHQ", "HK", "mHK", "pHK",
                              "NRQ", "NRK", "NPQ", "NPR", "NPPQ"])
def persist_kernel(
    q_ptr, k_ptr, oq_ptr, ok_ptr, cos_ptr, sin_ptr, pos_ptr,
    sqb, sqt, sqh, sqd, skb, skt, skh, skd,
    soqb, soqt, soqh, soqd, sokb, sokt, sokh, sokd,
    spb, spt, s_cs, NPOS, ook,
    T, mT, pT, HQ, mHQ, pHQ, HK, mHK, pHK, NRQ, NRK, NPQ, NPR, NPPQ,
    R2: tl.constexpr, CW: tl.constexpr, PASS: tl.constexpr, INTERLEAVED: tl.constexpr,
    HP: tl.constexpr, PP: tl.constexpr, SV: tl.constexpr, CSV: tl.constexpr,
    BR: tl.constexpr, HAS_POS: tl.constexpr, LOW: tl.constexpr, INVERSE: tl.constexpr, EMULATE: tl.constexpr,
    CHUNKED: tl.constexpr = False, V: tl.constexpr = 1, M: tl.constexpr = 1, NCH: tl.constexpr = 1,
    VP: tl.constexpr = 1, MP: tl.constexpr = 1, NCP: tl.constexpr = 1, OUT_SHARED: tl.constexpr = False,
    WIDE: tl.constexpr = True, STREAM: tl.constexpr = False,
):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    for i in range(pid, NPR, nprog):
        if i < NPQ:
            _rotate_chunks(
                q_ptr, oq_ptr, sqb, sqt, sqh, sqd, soqb, soqt, soqh, soqd, cos_ptr, sin_ptr, pos_ptr, spb, spt,
                s_cs, NPOS, i * NCH, NRQ, T, mT, pT, HQ, mHQ, pHQ, R2, CW, INTERLEAVED, V, M, NCH, SV, CSV,
                HAS_POS, LOW, INVERSE, EMULATE, WIDE, STREAM,
            )
        else:
            _rotate_chunks(
                k_ptr, ok_ptr, skb, skt, skh, skd, sokb, sokt, sokh, sokd, cos_ptr, sin_ptr, pos_ptr, spb, spt,
                s_cs, NPOS, (i - NPQ) * NCH, NRK, T, mT, pT, HK, mHK, pHK, R2, CW, INTERLEAVED, V, M, NCH, SV, CSV,
                HAS_POS, LOW, INVERSE, EMULATE, WIDE, STREAM,
            )


class Persistent:
    """Stands in for rope_kernel: kernel[grid](...) launches persist_kernel on min(grid, programs)."""
    def __init__(self, programs):
        self.programs = programs

    def __getitem__(self, grid):
        def run(*args, **kw):
            assert kw["CHUNKED"] and not kw["PASS"]
            return persist_kernel[(min(grid[0], self.programs),)](*args, **kw)
        return run


def with_kernel(kernel, fn):
    orig = triton_rope._kernels.rope_kernel
    triton_rope._kernels.rope_kernel = kernel
    try:
        return fn()
    finally:
        triton_rope._kernels.rope_kernel = orig


def check():
    torch.manual_seed(0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    for D in (20, 36):
        mod = rope.build("triton_v4", D, 64).to(dev)
        ref = rope.build("torch", D, 64).to(dev)
        q = torch.randn(2, 64, 3, D, device=dev)
        k = torch.randn(2, 64, 1, D, device=dev)
        want = ref(q, k)
        for progs in (1, 3, 1000):
            got = with_kernel(Persistent(progs), lambda: mod(q, k))
            bwd = with_kernel(Persistent(progs), lambda: mod.rotate_transposed(*want))
            for a, b in zip(got, want, strict=False):
                assert (a - b).abs().max() < 1e-5, (D, progs)
            for a, b in zip(bwd, (q, k), strict=False):
                assert (a - b).abs().max() < 1e-5, (D, progs)
    print("persistent kernel: correct")


def main():
    from scripts.benchlib import Timer, copy_bandwidth
    given = len(sys.argv) > 1 and sys.argv[1][0].isdigit()
    dims = [int(x) for x in sys.argv[1].split(",")] if given else [20, 36, 52, 48]
    timer = Timer(30)
    bw = copy_bandwidth(timer)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"copy {bw:.0f} GB/s (1 GiB); SMs {sms}")
    E = 32 * 2**20
    for D in dims:
        T, H = 2048, 16
        B = -(-E // (T * H * D))
        q = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn_like(q)
        nbytes = 2 * 2 * q.numel() * 2
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        same = nbytes / timer(lambda: dst.copy_(src)) / 1e6
        mod = rope.build("triton_v4", D, T).cuda()
        pct = lambda ms: 100 * nbytes / ms / 1e6 / bw
        res = []
        variants = [("default", None, triton_rope.DEFAULT_LAUNCH)]
        for tile in (256, 512, 1024):
            for w in (2, 4, 8):
                variants.append((f"tile {tile} w{w}", None, LaunchConfig(tile, w)))
        for m in (4, 8, 16, 32):
            variants.append((f"persistent {m}/SM", Persistent(sms * m), triton_rope.DEFAULT_LAUNCH))
        for name, kern, cfg in variants:
            mod.launch_config = cfg
            f = lambda: mod(q, k)
            b = lambda: mod.rotate_transposed(q, k)
            try:
                if kern is None:
                    tf, tb = timer(f), timer(b)
                    tb2, tf2 = timer(b), timer(f)
                else:
                    tf, tb = with_kernel(kern, lambda: (timer(f), timer(b)))
                    tb2, tf2 = with_kernel(kern, lambda: (timer(b), timer(f)))
            except Exception as e:  # noqa: BLE001
                print(f"D={D} {name}: failed {type(e).__name__}: {str(e)[:120]}")
                continue
            res.append((name, pct(tf), pct(tb), pct(tf2), pct(tb2)))
        print(f"D={D} B={B}: same-size copy {same:.0f} GB/s = {100 * same / bw:.1f}% of the 1 GiB copy;"
              f" % of 1 GiB copy, fwd/bwd (fwd first) and fwd/bwd (bwd first):")
        for name, a, b, c, d in sorted(res, key=lambda r: -(r[1] + r[2] + r[3] + r[4])):
            print(f"  {name:18s} {a:5.1f}/{b:5.1f}   {c:5.1f}/{d:5.1f}")


if __name__ == "__main__":
    if "--check" in sys.argv:
        check()
    else:
        check()
        main()
