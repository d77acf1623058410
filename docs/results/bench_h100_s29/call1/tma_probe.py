# ruff: noqa
"""Probe: odd rotated halves (half layout, variant full, D = 2 mod 4) with the partner windows read by TMA.

A tensor descriptor over the token rows (B*T, H*D) reads a (BR, CW) tile at columns c*CW (own), c*CW + R2 (the up
partners) and c*CW - R2 (the down partners); partners never cross a token row, and columns outside the row are
zero-filled by the hardware, so every window is one aligned-in-registers tile, whatever the element offset.
"""
import os
import sys
import math
import time

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from rope._triton_kernels import _rotate_pairs


@triton.jit
def tma_rope(qd, kd, oqd, okd, q_ptr, k_ptr, oq_ptr, ok_ptr, cos_ptr, sin_ptr, NTOK, T, TW, L,
             D: tl.constexpr, R2: tl.constexpr, P: tl.constexpr, CW: tl.constexpr, NC: tl.constexpr,
             BR: tl.constexpr, SHIFT: tl.constexpr, INVERSE: tl.constexpr, OWN_TMA: tl.constexpr, STORE_TMA: tl.constexpr):
    pid = tl.program_id(0)
    tok0 = (pid // NC) * BR
    col0 = (pid % NC) * CW
    cols = col0 + tl.arange(0, CW)
    toks = tok0 + tl.arange(0, BR)
    pos = toks % T
    d = cols % D
    first = d < R2
    tcol = (cols // 8 * 8) % P + cols % 8
    c = tl.load(cos_ptr + (pos * TW)[:, None] + tcol[None, :], eviction_policy="evict_last")
    s = tl.load(sin_ptr + (pos * TW)[:, None] + tcol[None, :], eviction_policy="evict_last")
    if INVERSE:
        s = -s
    m = (toks < NTOK)[:, None] & (cols < L)[None, :]
    at = (toks * L)[:, None] + cols[None, :]
    if OWN_TMA:
        qo = qd.load([tok0, col0])
        ko = kd.load([tok0, col0])
    else:
        qo = tl.load(q_ptr + at, mask=m)
        ko = tl.load(k_ptr + at, mask=m)
    qp = tl.where(first[None, :], qd.load([tok0, col0 + SHIFT]), qd.load([tok0, col0 - SHIFT])).to(tl.float32)
    kp = tl.where(first[None, :], kd.load([tok0, col0 + SHIFT]), kd.load([tok0, col0 - SHIFT])).to(tl.float32)
    DT: tl.constexpr = oq_ptr.dtype.element_ty
    yq, _ = _rotate_pairs(qo.to(tl.float32), qp, c, s, DT, False, False)
    yk, _ = _rotate_pairs(ko.to(tl.float32), kp, c, s, DT, False, False)
    if STORE_TMA:
        oqd.store([tok0, col0], yq.to(DT))
        okd.store([tok0, col0], yk.to(DT))
    else:
        tl.store(oq_ptr + at, yq.to(DT), mask=m)
        tl.store(ok_ptr + at, yk.to(DT), mask=m)


def tables(mod, D):
    """Split element tables of period P = 2D (D = 2 mod 4), width P + 8."""
    r2 = D // 2
    P = 2 * D
    width = P + 8
    d = torch.arange(width, device=mod.cos.device) % D
    pair = d % r2
    second = d >= r2
    ce = mod.cos[:, pair].float().contiguous()
    se = torch.where(second, -mod.sin[:, pair], mod.sin[:, pair]).float().contiguous()
    return ce, se, P, width


def launch(q, k, ce, se, P, TW, D, CW, BR, inverse=False, own_tma=True, store_tma=True, warps=4, oq=None, ok=None):
    B, T, H, _ = q.shape
    L = H * D
    ntok = B * T
    oq = torch.empty_like(q) if oq is None else oq
    ok = torch.empty_like(k) if ok is None else ok
    descs = [TensorDescriptor(t.view(ntok, L), [ntok, L], [L, 1], [BR, CW]) for t in (q, k, oq, ok)]
    NC = triton.cdiv(L, CW)
    grid = (triton.cdiv(ntok, BR) * NC,)
    tma_rope[grid](*descs, q, k, oq, ok, ce, se, ntok, T, TW, L, D=D, R2=D // 2, P=P, CW=CW, NC=NC, BR=BR, SHIFT=int(os.environ.get('SHIFT', D // 2)),
                   INVERSE=inverse, OWN_TMA=own_tma, STORE_TMA=store_tma, num_warps=warps)
    return oq, ok


def crash_test():
    import rope
    D, CW, BR = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    T, H, B = 64, 16, 2
    mod = rope.build("triton_v4", head_dim=D, max_seq_len=T, variant="full").cuda()
    q = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    ce, se, P, TW = tables(mod, D)
    rq, rk = mod(q, k)
    for own, st in ((1, 1), (0, 0)):
        oq, ok = launch(q, k, ce, se, P, TW, D, CW, BR, False, bool(own), bool(st))
        torch.cuda.synchronize()
        print("crash_test", D, CW, BR, own, st, os.environ.get("SHIFT"), torch.equal(oq, rq), torch.equal(ok, rk), flush=True)


def main():
    import rope
    from scripts.benchlib import Timer, copy_bandwidth
    dims = [int(x) for x in sys.argv[1].split(",")]
    configs = [tuple(int(v) for v in c.split("x")) for c in sys.argv[2].split(",")]  # CWxBRxOWNxSTORExWARPS
    dev = "cuda"
    timer = Timer(20, "zero")
    copy_bw = copy_bandwidth(timer)
    print(f"copy {copy_bw:.0f} GB/s", flush=True)
    H, T = 16, 2048
    for D in dims:
        B = max(1, round(32 * 2**20 / (T * H * D)))
        mod = rope.build("triton_v4", head_dim=D, max_seq_len=T, variant="full").to(dev)
        q = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
        nbytes = 2 * (q.numel() + k.numel()) * 2
        ref_q, ref_k = mod(q, k)
        ce, se, P, TW = tables(mod, D)
        line = [f"D={D} B={B}"]
        t = timer(lambda: mod(q, k))
        line.append(f"shipped fwd {100 * nbytes / (t * 1e-3) / 1e9 / copy_bw:.1f}")
        t = timer(lambda: mod.rotate_transposed(q, k))
        line.append(f"bwd {100 * nbytes / (t * 1e-3) / 1e9 / copy_bw:.1f}")
        for CW, BR, own, st, w in configs:
            oq, ok = launch(q, k, ce, se, P, TW, D, CW, BR, False, bool(own), bool(st), w)
            ok_f = torch.equal(oq, ref_q) and torch.equal(ok, ref_k)
            bq, bk = mod.rotate_transposed(q, k)
            oq2, ok2 = launch(q, k, ce, se, P, TW, D, CW, BR, True, bool(own), bool(st), w)
            ok_b = torch.equal(oq2, bq) and torch.equal(ok2, bk)
            tf = timer(lambda: launch(q, k, ce, se, P, TW, D, CW, BR, False, bool(own), bool(st), w, oq, ok))
            tb = timer(lambda: launch(q, k, ce, se, P, TW, D, CW, BR, True, bool(own), bool(st), w, oq, ok))
            line.append(f"| {CW}x{BR} own{'T' if own else 'L'} st{'T' if st else 'L'} w{w}: "
                        f"fwd {100 * nbytes / (tf * 1e-3) / 1e9 / copy_bw:.1f}{'' if ok_f else ' WRONG'} "
                        f"bwd {100 * nbytes / (tb * 1e-3) / 1e9 / copy_bw:.1f}{'' if ok_b else ' WRONG'}")
        print("  ".join(line), flush=True)
        del q, k, ref_q, ref_k
        torch.cuda.empty_cache()


def cpu_check():
    """Interpreter: bit-identity with the shipped module at small shapes."""
    import rope
    for D in (18, 54, 22):
        B, T, H = 2, 5, 4
        mod = rope.build("triton_v4", head_dim=D, max_seq_len=16, variant="full")
        q = torch.randn(B, T, H, D, dtype=torch.bfloat16)
        k = torch.randn(B, T, H, D, dtype=torch.bfloat16)
        rq, rk = mod(q, k)
        ce, se, P, TW = tables(mod, D)
        for CW, BR in ((32, 2), (64, 4)):
            for own, st in ((1, 1), (0, 0)):
                oq, ok = launch(q, k, ce, se, P, TW, D, CW, BR, False, bool(own), bool(st))
                print(D, CW, BR, own, st, torch.equal(oq, rq), torch.equal(ok, rk),
                      (oq.float() - rq.float()).abs().max().item())


if __name__ == "__main__":
    if sys.argv[1] == "crash":
        crash_test()
    elif sys.argv[1] == "cpu":
        cpu_check()
    else:
        main()
