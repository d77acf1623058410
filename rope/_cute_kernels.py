"""CuTeDSL kernel of the ``cutedsl`` rotary embedding (imports ``cutlass``; nvidia-cutlass-dsl).

The function is ``triton_v4``'s: load in the input dtype, compute in float32 with the same fma
formula (``a c + b s`` as ``fma(a, c, p) + fma(b, s, -p)``, ``p = b s``), round once at the store,
so on bf16 inputs the two give the same bits wherever they round the same float32 value.

Work split: a tensor (B, T, H, D) is B*T*H rows; a thread rotates V consecutive pairs of one row
(TPR = R2 / V threads per row, RPC rows per block of threads) in each of RPT consecutive blocks of
rows of its CTA. The pairs are loaded as V-element vectors (V
chosen so a vector is at most 16 bytes and divides the row geometry), from pointers whose row
strides arrive divided by their power-of-two unit SV (multiplied back here as a compile-time
constant) so that the compiler can prove the vectors aligned, as in the Triton kernel. q's CTAs
come first, then k's: q and k in one launch. Positions outside the table give NaN rows.

Compile-time: the dtype, the row geometry (R2 rotated pairs, CW loaded cos/sin columns, PASS
copied elements), the layout, V, RPC/RPT, SV/CSV, HAS_POS, INVERSE (the transposed rotation: backward).
Runtime: pointers, sizes and strides (the tensors' in 64 bits: a q or k view of a fused qkv
projection can reach past 2**31 elements).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute


@cute.jit
def _rotate(x1, x2, c, s):
    """(x1 c + x2 s, x2 c - x1 s) in float32, each as fma(a, c, p) + fma(b, s, -p)."""
    p = x2 * s
    y1 = cute.math.fma(x1, c, p) + cute.math.fma(x2, s, -p)
    q = x1 * s
    y2 = cute.math.fma(x2, c, -q) - cute.math.fma(x1, s, -q)
    return y1, y2


@cute.kernel
def _rope_kernel(
    mQ: cute.Tensor, mK: cute.Tensor, mOQ: cute.Tensor, mOK: cute.Tensor,
    mCos: cute.Tensor, mSin: cute.Tensor, mPos: cute.Tensor,
    n_pos: cutlass.Int32, ctas_q: cutlass.Int32,
    R2: cutlass.Constexpr, CW: cutlass.Constexpr, PASS: cutlass.Constexpr, INTERLEAVED: cutlass.Constexpr,
    V: cutlass.Constexpr, VP: cutlass.Constexpr, RPC: cutlass.Constexpr, RPT: cutlass.Constexpr,
    HAS_POS: cutlass.Constexpr, INVERSE: cutlass.Constexpr,
):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    TPR = R2 // V
    # A CTA covers RPT blocks of RPC consecutive rows; each thread rotates one chunk in each block
    # (RPT > 1: more loads in flight per thread and fewer CTAs to schedule).
    for r in cutlass.range_constexpr(RPT):
        if bidx < ctas_q:
            _rotate_rows(mQ, mOQ, mCos, mSin, mPos, n_pos, bidx * RPT + r, tidx, R2, CW, PASS, INTERLEAVED, V, VP,
                         RPC, TPR, HAS_POS, INVERSE)
        else:
            _rotate_rows(mK, mOK, mCos, mSin, mPos, n_pos, (bidx - ctas_q) * RPT + r, tidx, R2, CW, PASS,
                         INTERLEAVED, V, VP, RPC, TPR, HAS_POS, INVERSE)


@cute.jit
def _rotate_rows(mX: cute.Tensor, mO: cute.Tensor, mCos: cute.Tensor, mSin: cute.Tensor, mPos: cute.Tensor,
                 n_pos: cutlass.Int32, block, tidx,
                 R2: cutlass.Constexpr, CW: cutlass.Constexpr, PASS: cutlass.Constexpr,
                 INTERLEAVED: cutlass.Constexpr, V: cutlass.Constexpr, VP: cutlass.Constexpr,
                 RPC: cutlass.Constexpr, TPR: cutlass.Constexpr,
                 HAS_POS: cutlass.Constexpr, INVERSE: cutlass.Constexpr):
    B, T, H, _ = mX.shape
    row = block * RPC + tidx // TPR
    chunk = tidx % TPR
    if row < B * T * H and tidx < RPC * TPR:
        h = row % H
        bt = row // H
        t = bt % T
        b = bt // T
        x_row = mX[b, t, h, None]   # (D,)
        o_row = mO[b, t, h, None]
        pos = t
        valid = True
        if cutlass.const_expr(HAS_POS):
            pos = mPos[b, t]
            valid = pos >= 0 and pos < n_pos
            if not valid:
                pos = 0
        # cos, sin of this thread's V pairs: columns >= CW are the zero frequencies (cos 1, sin 0).
        c = cute.make_rmem_tensor((V,), cutlass.Float32)
        s = cute.make_rmem_tensor((V,), cutlass.Float32)
        if chunk * V < CW:
            cute.autovec_copy(cute.local_tile(mCos[pos, None], (V,), (chunk,)), c)
            cute.autovec_copy(cute.local_tile(mSin[pos, None], (V,), (chunk,)), s)
        else:
            c.fill(1.0)
            s.fill(0.0)
        if cutlass.const_expr(HAS_POS):
            if not valid:
                c.fill(float("nan"))
                s.fill(float("nan"))
        if cutlass.const_expr(INTERLEAVED):
            xin = cute.make_rmem_tensor((2 * V,), mX.element_type)
            cute.autovec_copy(cute.local_tile(x_row, (2 * V,), (chunk,)), xin)
            out = cute.make_rmem_tensor((2 * V,), mO.element_type)
            for i in cutlass.range_constexpr(V):
                sn = -s[i] if cutlass.const_expr(INVERSE) else s[i]
                y1, y2 = _rotate(xin[2 * i].to(cutlass.Float32), xin[2 * i + 1].to(cutlass.Float32), c[i], sn)
                out[2 * i] = y1.to(mO.element_type)
                out[2 * i + 1] = y2.to(mO.element_type)
            cute.autovec_copy(out, cute.local_tile(o_row, (2 * V,), (chunk,)))
        else:
            x1 = cute.make_rmem_tensor((V,), mX.element_type)
            x2 = cute.make_rmem_tensor((V,), mX.element_type)
            cute.autovec_copy(cute.local_tile(x_row, (V,), (chunk,)), x1)
            cute.autovec_copy(cute.local_tile(x_row, (V,), (chunk + TPR,)), x2)
            o1 = cute.make_rmem_tensor((V,), mO.element_type)
            o2 = cute.make_rmem_tensor((V,), mO.element_type)
            for i in cutlass.range_constexpr(V):
                sn = -s[i] if cutlass.const_expr(INVERSE) else s[i]
                y1, y2 = _rotate(x1[i].to(cutlass.Float32), x2[i].to(cutlass.Float32), c[i], sn)
                o1[i] = y1.to(mO.element_type)
                o2[i] = y2.to(mO.element_type)
            cute.autovec_copy(o1, cute.local_tile(o_row, (V,), (chunk,)))
            cute.autovec_copy(o2, cute.local_tile(o_row, (V,), (chunk + TPR,)))
        if cutlass.const_expr(PASS > 0):  # rotary_dim < D: the rest of the row copied, VP elements at a time
            tail_in = cute.local_tile(x_row, (2 * R2 + PASS,), (0,))
            for j in cutlass.range_constexpr((PASS // VP + TPR - 1) // TPR):
                piece = chunk + j * TPR
                if piece < PASS // VP:
                    buf = cute.make_rmem_tensor((VP,), mX.element_type)
                    src = cute.local_tile(cute.domain_offset((2 * R2,), tail_in), (VP,), (piece,))
                    cute.autovec_copy(src, buf)
                    cute.autovec_copy(buf, cute.local_tile(cute.domain_offset((2 * R2,), o_row), (VP,), (piece,)))


def _strided(ptr, shape, strides, unit):
    """A tensor over ``ptr`` whose strides are ``strides`` (runtime) times ``unit`` (compile-time),
    the last one 1: the alignment of every row is then known to the compiler."""
    scaled = tuple(cute.assume(s * unit, divby=unit) for s in strides)
    return cute.make_tensor(ptr, cute.make_layout(shape, stride=(*scaled, 1)))


@cute.jit
def rope_launch(
    q_ptr: cute.Pointer, k_ptr: cute.Pointer, oq_ptr: cute.Pointer, ok_ptr: cute.Pointer,
    cos_ptr: cute.Pointer, sin_ptr: cute.Pointer, pos_ptr: cute.Pointer,
    B: cutlass.Int32, T: cutlass.Int32, HQ: cutlass.Int32, HK: cutlass.Int32,
    sqb: cutlass.Int64, sqt: cutlass.Int64, sqh: cutlass.Int64,
    skb: cutlass.Int64, skt: cutlass.Int64, skh: cutlass.Int64,
    soqb: cutlass.Int64, soqt: cutlass.Int64, soqh: cutlass.Int64,
    sokb: cutlass.Int64, sokt: cutlass.Int64, sokh: cutlass.Int64,
    s_cs: cutlass.Int32, n_pos: cutlass.Int32, spb: cutlass.Int32, spt: cutlass.Int32,
    D: cutlass.Constexpr, R2: cutlass.Constexpr, CW: cutlass.Constexpr, INTERLEAVED: cutlass.Constexpr,
    V: cutlass.Constexpr, VP: cutlass.Constexpr, SV: cutlass.Constexpr, CSV: cutlass.Constexpr,
    RPC: cutlass.Constexpr, RPT: cutlass.Constexpr, HAS_POS: cutlass.Constexpr, INVERSE: cutlass.Constexpr,
    stream,
):
    """Rotate q (B, T, HQ, D) and k (B, T, HK, D) into oq, ok: one launch of q's CTAs then k's."""
    mQ = _strided(q_ptr, (B, T, HQ, D), (sqb, sqt, sqh), SV)
    mK = _strided(k_ptr, (B, T, HK, D), (skb, skt, skh), SV)
    mOQ = _strided(oq_ptr, (B, T, HQ, D), (soqb, soqt, soqh), SV)
    mOK = _strided(ok_ptr, (B, T, HK, D), (sokb, sokt, sokh), SV)
    cs_stride = cute.assume(s_cs * CSV, divby=CSV)
    mCos = cute.make_tensor(cos_ptr, cute.make_layout((n_pos, R2), stride=(cs_stride, 1)))
    mSin = cute.make_tensor(sin_ptr, cute.make_layout((n_pos, R2), stride=(cs_stride, 1)))
    mPos = cute.make_tensor(pos_ptr, cute.make_layout((B, T), stride=(spb, spt)))
    tpr = R2 // V
    ctas_q = (B * T * HQ + RPC * RPT - 1) // (RPC * RPT)
    ctas_k = (B * T * HK + RPC * RPT - 1) // (RPC * RPT)
    _rope_kernel(mQ, mK, mOQ, mOK, mCos, mSin, mPos, n_pos, ctas_q, R2, CW, D - 2 * R2, INTERLEAVED, V, VP, RPC,
                 RPT, HAS_POS, INVERSE).launch(grid=(ctas_q + ctas_k, 1, 1), block=(RPC * tpr, 1, 1),
                                                       stream=stream)
