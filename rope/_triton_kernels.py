"""Triton kernels of the ``triton_v4`` / ``triton_v2`` rotary embeddings (imports triton).

One kernel serves both entries, both directions and both tensors:

* ``LOW`` (constexpr) selects the arithmetic. False: load in the input dtype, compute in float32,
  round once at the store (``triton_v4``; also ``triton_v2`` on float32 inputs, so the two agree
  bit for bit there). True: every product and sum is rounded to the input dtype, the bf16/fp16 math
  of the lower-precision ``triton_v2``.
* ``INVERSE`` (constexpr) negates ``sin``: the transposed rotation, i.e. the backward pass
  ``dx1 = dy1 c - dy2 s``, ``dx2 = dy1 s + dy2 c``.
* The 1-D grid enumerates (sequence, token block, head block), head blocks fastest; the head blocks
  run over the heads of q first, then over those of k, so q and k are rotated in one launch and
  the programs that share a token block (and so its cos/sin rows) run side by side.

The float32 path evaluates ``a*c + b*s`` as ``fma(a, c, p) + fma(b, s, -p)`` with ``p = b*s``:
the second fma is the exact rounding error of ``p``, so the result is within one float32
rounding of the exact value plus ~2^-48 |x|. A plain ``a*c + b*s`` is only accurate to
~2^-24 |x|, which is more than one bf16 ulp of the result whenever the two products nearly
cancel (about 6 elements in a million), and the precise kernel promises one ulp everywhere.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _rne_bf16(x):
    """``x`` (float32) rounded to the nearest bfloat16, ties to even, still as float32 (NaN kept).

    For the Triton interpreter, whose float32 -> bfloat16 cast truncates.
    """
    bits = x.to(tl.int32, bitcast=True)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return tl.where(x != x, x, bits.to(tl.float32, bitcast=True))


@triton.jit
def _round(x, DT: tl.constexpr, EMULATE: tl.constexpr):
    """float32 ``x`` rounded to the dtype ``DT`` (nearest even) and widened back to float32.

    On the GPU the round trip is one inline-PTX block: written as two casts, the compiler may fold
    ``extf(truncf(x))`` back to ``x`` and the rounding of the input-dtype arithmetic is lost.
    """
    if EMULATE:
        if DT == tl.bfloat16:
            return _rne_bf16(x)
        else:
            return x.to(DT).to(tl.float32)
    elif DT == tl.bfloat16:
        bits = tl.inline_asm_elementwise(
            "{ .reg .b16 h, z; cvt.rn.bf16.f32 h, $1; mov.b16 z, 0; mov.b32 $0, {z, h}; }",
            "=r,f",
            [x],
            dtype=tl.int32,
            is_pure=True,
            pack=1,
        )
        return bits.to(tl.float32, bitcast=True)
    else:
        return tl.inline_asm_elementwise(
            "{ .reg .b16 h; cvt.rn.f16.f32 h, $1; cvt.f32.f16 $0, h; }",
            "=f,f",
            [x],
            dtype=tl.float32,
            is_pure=True,
            pack=1,
        )


@triton.jit
def _narrow(x, DT: tl.constexpr, EMULATE: tl.constexpr):
    """float32 ``x`` rounded once to the dtype ``DT`` (nearest even)."""
    if EMULATE:
        if DT == tl.bfloat16:
            return _rne_bf16(x).to(DT)
        else:
            return x.to(DT)
    else:
        return x.to(DT)


@triton.jit
def _rotate_tile(
    x_ptr,
    o_ptr,
    sxb,
    sxt,
    sxh,
    sxd,
    sob,
    sot,
    soh,
    sod,
    H,
    h0,
    b,
    t,
    tmask,
    c,
    s,
    HALF,
    NROT,
    BH: tl.constexpr,
    RP: tl.constexpr,
    PP: tl.constexpr,
    HAS_PASS: tl.constexpr,
    LOW: tl.constexpr,
    EMULATE: tl.constexpr,
):
    """Rotate heads [h0, h0 + BH) of tokens t (BT,) of sequence b of one tensor; c, s: (BT, 1, RP) float32."""
    DT: tl.constexpr = o_ptr.dtype.element_ty
    hs = h0 + tl.arange(0, BH)
    hm = (hs < H)[None, :, None]
    tm = tmask[:, None, None]
    hs3 = hs[None, :, None]
    t3 = t[:, None, None]
    x_row = b * sxb + t3 * sxt + hs3 * sxh
    o_row = b * sob + t3 * sot + hs3 * soh

    cr = tl.arange(0, RP)[None, None, :]
    rmask = tm & hm & (cr < NROT)
    # Issue every load of the tile before the first use.
    x1 = tl.load(x_ptr + x_row + cr * sxd, mask=rmask, eviction_policy="evict_first")
    x2 = tl.load(x_ptr + x_row + (HALF + cr) * sxd, mask=rmask, eviction_policy="evict_first")
    if HAS_PASS:
        # Columns [NROT, HALF) of each half have frequency 0 (cos 1, sin 0): a plain copy.
        cp = tl.arange(0, PP)[None, None, :]
        pmask = tm & hm & (cp < HALF - NROT)
        p1 = tl.load(x_ptr + x_row + (NROT + cp) * sxd, mask=pmask, eviction_policy="evict_first")
        p2 = tl.load(x_ptr + x_row + (HALF + NROT + cp) * sxd, mask=pmask, eviction_policy="evict_first")
        tl.store(o_ptr + o_row + (NROT + cp) * sod, p1, mask=pmask)
        tl.store(o_ptr + o_row + (HALF + NROT + cp) * sod, p2, mask=pmask)

    x1 = x1.to(tl.float32)
    x2 = x2.to(tl.float32)
    if LOW:
        # Input-dtype arithmetic: c, s were rounded to DT by the caller; round every product and sum.
        y1 = _round(x1 * c, DT, EMULATE) + _round(x2 * s, DT, EMULATE)
        y2 = _round(x2 * c, DT, EMULATE) - _round(x1 * s, DT, EMULATE)
    else:
        # y1 = x1 c + x2 s and y2 = x2 c - x1 s, each with the product x s compensated exactly.
        p = x2 * s
        y1 = tl.fma(x1, c, p) + tl.fma(x2, s, -p)
        q = x1 * s
        y2 = tl.fma(x2, c, -q) - tl.fma(x1, s, -q)
    tl.store(o_ptr + o_row + cr * sod, _narrow(y1, DT, EMULATE), mask=rmask)
    tl.store(o_ptr + o_row + (HALF + cr) * sod, _narrow(y2, DT, EMULATE), mask=rmask)


# Sizes and counts do not change the generated code's vector widths: keep them out of the
# specialisation key so new shapes reuse the compiled kernel (strides, HALF and NROT stay in it).
@triton.jit(do_not_specialize=["spb", "spt", "NTB", "T", "HQ", "HK", "NHB_Q", "NHB"])
def rope_kernel(
    q_ptr,
    k_ptr,
    oq_ptr,
    ok_ptr,
    cos_ptr,
    sin_ptr,
    pos_ptr,
    sqb,
    sqt,
    sqh,
    sqd,
    skb,
    skt,
    skh,
    skd,
    soqb,
    soqt,
    soqh,
    soqd,
    sokb,
    sokt,
    sokh,
    sokd,
    spb,
    spt,
    s_cs,
    NTB,
    T,
    HQ,
    HK,
    NHB_Q,
    NHB,
    HALF,
    NROT,
    BT: tl.constexpr,
    BHQ: tl.constexpr,
    BHK: tl.constexpr,
    RP: tl.constexpr,
    PP: tl.constexpr,
    HAS_PASS: tl.constexpr,
    HAS_POS: tl.constexpr,
    LOW: tl.constexpr,
    INVERSE: tl.constexpr,
    EMULATE: tl.constexpr,
):
    # pid -> (sequence b, token block tb, head block hb), head blocks fastest; scalar int32 math,
    # then int64 for the offsets (b * stride_b passes 2**31 on large batches).
    pid = tl.program_id(0)
    hb = pid % NHB
    rest = pid // NHB
    tb = rest % NTB
    b = (rest // NTB).to(tl.int64)
    t32 = tb * BT + tl.arange(0, BT)
    tmask = t32 < T
    t = t32.to(tl.int64)
    if HAS_POS:
        pos = tl.load(pos_ptr + b * spb + t * spt, mask=tmask, other=0).to(tl.int64)
    else:
        pos = t

    # One cos/sin row per token, shared by every head of the program.
    cr = tl.arange(0, RP)[None, :]
    cmask = tmask[:, None] & (cr < NROT)
    c = tl.load(cos_ptr + pos[:, None] * s_cs + cr, mask=cmask, other=1.0, eviction_policy="evict_last")
    s = tl.load(sin_ptr + pos[:, None] * s_cs + cr, mask=cmask, other=0.0, eviction_policy="evict_last")
    c = c.to(tl.float32)  # a no-op for the float32 tables (kept if a module cast its buffers)
    s = s.to(tl.float32)
    if INVERSE:
        s = -s
    if LOW:
        DT: tl.constexpr = oq_ptr.dtype.element_ty
        c = _round(c, DT, EMULATE)
        s = _round(s, DT, EMULATE)
    c = c[:, None, :]
    s = s[:, None, :]

    if hb < NHB_Q:
        _rotate_tile(
            q_ptr, oq_ptr, sqb, sqt, sqh, sqd, soqb, soqt, soqh, soqd, HQ, hb * BHQ,
            b, t, tmask, c, s, HALF, NROT, BHQ, RP, PP, HAS_PASS, LOW, EMULATE,
        )  # fmt: skip
    else:
        _rotate_tile(
            k_ptr, ok_ptr, skb, skt, skh, skd, sokb, sokt, sokh, sokd, HK, (hb - NHB_Q) * BHK,
            b, t, tmask, c, s, HALF, NROT, BHK, RP, PP, HAS_PASS, LOW, EMULATE,
        )  # fmt: skip
