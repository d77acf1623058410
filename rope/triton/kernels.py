"""The Triton kernels of the ``triton_v4`` / ``triton_v2`` entries (importing this module imports triton).

One launch rotates q and k and copies v's gradient (the fused backward), each tensor in as many programs as its
own heads need (:func:`_tensor_program`); the tilings are :mod:`rope.triton.plan`'s. Geometry (head counts, D,
the rotated pairs, the tiling's sizes) is constexpr, so masks are compile-time constants, accesses vectorise and no
program divides by a runtime value (where memory outruns instruction issue, index arithmetic sets the pace); strides
arrive divided by their power-of-two unit SV. Outputs are contiguous (B, T, H, D), or one d qkv buffer.

Arithmetic: ``LOW`` False computes in float32 and rounds once at the store; ``a c + b s`` is ``fma(a, c, p) +
fma(b, s, -p)`` with ``p = b s`` (the second fma is p's exact rounding error), so every bf16/fp16 output is within
one ulp of the exact rotation. ``LOW`` True rounds every product and sum to the input dtype (``triton_v2``).
``INVERSE`` negates sin: the backward's transposed rotation.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

#: Triton's CPU interpreter truncates float32 -> bfloat16 casts and runs no PTX: the kernels then round in
#: integer arithmetic (:func:`_rne_bf16`).
EMULATE: tl.constexpr = tl.constexpr(os.environ.get("TRITON_INTERPRET") == "1")


@triton.jit
def _rne_bf16(x):
    """float32 ``x`` rounded to the nearest bfloat16 (ties to even), still float32; NaN kept."""
    bits = x.to(tl.int32, bitcast=True)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return tl.where(x != x, x, bits.to(tl.float32, bitcast=True))


@triton.jit
def _round(x, DT: tl.constexpr):
    """float32 ``x`` rounded to ``DT`` and widened back: inline PTX on the GPU (two casts would fold to ``x``)."""
    if EMULATE:
        if DT == tl.bfloat16:
            y = _rne_bf16(x)
        else:
            y = x.to(DT).to(tl.float32)
    elif DT == tl.bfloat16:
        bits = tl.inline_asm_elementwise("{ .reg .b16 h, z; cvt.rn.bf16.f32 h, $1; mov.b16 z, 0; mov.b32 $0, {z, h}; }",
                                         "=r,f", [x], dtype=tl.int32, is_pure=True, pack=1)
        y = bits.to(tl.float32, bitcast=True)
    else:
        y = tl.inline_asm_elementwise("{ .reg .b16 h; cvt.rn.f16.f32 h, $1; cvt.f32.f16 $0, h; }", "=f,f", [x],
                                      dtype=tl.float32, is_pure=True, pack=1)
    return y


@triton.jit
def _narrow(x, DT: tl.constexpr):
    """float32 ``x`` rounded once to ``DT`` (nearest even)."""
    return _rne_bf16(x).to(DT) if EMULATE and DT == tl.bfloat16 else x.to(DT)


@triton.jit
def _rotate_pairs(x1, x2, c, s, DT: tl.constexpr, LOW: tl.constexpr, COPY: tl.constexpr = False):
    """(x1 c + x2 s, x2 c - x1 s) of float32 tiles, in the entry's arithmetic (module docstring); (x1, x2) if COPY."""
    if COPY:
        y1, y2 = x1, x2
    elif LOW:
        c = _round(c, DT)
        s = _round(s, DT)
        y1 = _round(x1 * c, DT) + _round(x2 * s, DT)
        y2 = _round(x2 * c, DT) - _round(x1 * s, DT)
    else:
        p = x2 * s
        y1 = tl.fma(x1, c, p) + tl.fma(x2, s, -p)
        q = x1 * s
        y2 = tl.fma(x2, c, -q) - tl.fma(x1, s, -q)
    return y1, y2


@triton.jit
def _table_rows(pos_ptr, b, t, spb, n_pos, mask):
    """Each token's table row (its index, or ``pos_ptr[b spb + t]``) and whether it lies in the table (one outside
    gives NaN rows in :func:`_cos_sin`, never another row's rotation)."""
    if pos_ptr is None:
        row, valid = t, mask
    else:
        raw = tl.load(pos_ptr + b * spb + t, mask=mask, other=0)
        valid = (raw >= 0) & (raw < n_pos)
        row = tl.where(valid, raw, 0).to(tl.int32)
    return row, valid


@triton.jit
def _cos_sin(cos_ptr, sin_ptr, at, mask, valid, pos_ptr, INVERSE: tl.constexpr):
    """float32 cos and sin at table offsets ``at``: 1 and 0 where ``mask`` leaves them out (variant=partial's zero
    frequencies, padding), NaN at rows outside the table; sin negated if INVERSE."""
    c = tl.load(cos_ptr + at, mask=mask, other=1.0, eviction_policy="evict_last")
    s = tl.load(sin_ptr + at, mask=mask, other=0.0, eviction_policy="evict_last")
    if pos_ptr is not None:
        c = tl.where(valid[:, None], c, float("nan"))
        s = tl.where(valid[:, None], s, float("nan"))
    if INVERSE:
        s = -s
    return c, s


@triton.jit
def _pairs(x_ptr, o_ptr, sxb, sxt, sxh, so, cos_ptr, sin_ptr, pos_ptr, spb, n_pos, b, g0, T, H: tl.constexpr,
           D: tl.constexpr, R2: tl.constexpr, CW: tl.constexpr, V: tl.constexpr, NCH: tl.constexpr,
           INTERLEAVED: tl.constexpr, SV: tl.constexpr, LOW: tl.constexpr, INVERSE: tl.constexpr,
           WIDE: tl.constexpr, COPY: tl.constexpr):
    """Chunks [g0, g0 + NCH) of batch element ``b`` of one tensor (chunk g: pairs [(g mod M) V, ...) of head row
    g // M; M chunks a row). Table columns from CW on read as cos 1, sin 0. ``COPY``: v's gradient, copied."""
    DT: tl.constexpr = o_ptr.dtype.element_ty
    M: tl.constexpr = (R2 + V - 1) // V
    g = g0 + tl.arange(0, NCH)
    r = g // M
    t = r // H
    h = r - t * H
    rm = t < T
    pair = ((g - r * M) * V)[:, None] + tl.arange(0, V)[None, :]
    if M == 1:  # rows: the half padded to V lanes
        pm = rm[:, None] & (pair < R2)
    else:  # chunks: every chunk of a row is whole
        pm = tl.broadcast_to(rm[:, None], (NCH, V))
    if COPY:
        c, s = 1.0, 0.0
    else:
        row, valid = _table_rows(pos_ptr, b, t, spb, n_pos, rm)
        cm = pm & (pair < CW) if CW < R2 else pm
        c, s = _cos_sin(cos_ptr, sin_ptr, (row * R2)[:, None] + pair, cm, valid, pos_ptr, INVERSE)
    if WIDE:
        b = b.to(tl.int64)
        t = t.to(tl.int64)
        h = h.to(tl.int64)
    x_row = ((b * sxb + t * sxt + h * sxh) * SV)[:, None]
    o_row = ((b * T + t) * so + h * D)[:, None]
    if INTERLEAVED:  # pairs (2i, 2i + 1): one contiguous load, split into its even and odd elements
        col = ((g - r * M) * (2 * V))[:, None] + tl.arange(0, 2 * V)[None, :]
        xm = rm[:, None] & (col < 2 * R2)
        x1, x2 = tl.split(tl.reshape(tl.load(x_ptr + x_row + col, mask=xm).to(tl.float32), (NCH, V, 2)))
        y1, y2 = _rotate_pairs(x1, x2, c, s, DT, LOW, COPY)
        tl.store(o_ptr + o_row + col, _narrow(tl.reshape(tl.join(y1, y2), (NCH, 2 * V)), DT), mask=xm)
    else:  # pairs (i, i + R2)
        x1 = tl.load(x_ptr + x_row + pair, mask=pm).to(tl.float32)
        x2 = tl.load(x_ptr + x_row + R2 + pair, mask=pm).to(tl.float32)
        y1, y2 = _rotate_pairs(x1, x2, c, s, DT, LOW, COPY)
        tl.store(o_ptr + o_row + pair, _narrow(y1, DT), mask=pm)
        tl.store(o_ptr + o_row + R2 + pair, _narrow(y2, DT), mask=pm)
    for seg in tl.static_range(1, (D + 2 * R2 - 1) // (2 * R2)):  # the tail [2 R2, D): copied, 2 R2 columns a step
        if INTERLEAVED:
            _copy(x_ptr + x_row, o_ptr + o_row, seg * 2 * R2 + col, xm & (seg * 2 * R2 + col < D))
        else:
            _copy(x_ptr + x_row, o_ptr + o_row, seg * 2 * R2 + pair, pm & (seg * 2 * R2 + pair < D))
            _copy(x_ptr + x_row, o_ptr + o_row, (seg * 2 + 1) * R2 + pair, pm & ((seg * 2 + 1) * R2 + pair < D))


@triton.jit
def _copy(x_ptr, o_ptr, at, mask):
    tl.store(o_ptr + at, tl.load(x_ptr + at, mask=mask), mask=mask)


@triton.jit
def _tensor_program(T, QU: tl.constexpr, KU: tl.constexpr, PER: tl.constexpr):
    """Which tensor a program works on (0 q, 1 k, 2 v's copy), its first unit there (PER units a program; QU, KU:
    units a token of q, of k and v) and its batch element, in the grid :meth:`rope.triton.plan.Geometry.grid` makes."""
    if QU == KU:
        which = tl.program_id(1)
        first = tl.program_id(0) * PER
        b = tl.program_id(2)
    else:
        p = tl.program_id(0)
        pq = (T * QU + PER - 1) // PER
        pk = (T * KU + PER - 1) // PER
        which = tl.where(p < pq, 0, tl.where(p < pq + pk, 1, 2))
        first = (p - tl.where(which == 0, 0, tl.where(which == 1, pq, pq + pk))) * PER
        b = tl.program_id(1)
    return which, first, b


@triton.jit(do_not_specialize=["spb", "n_pos", "T"])
def rope_pairs_kernel(q_ptr, k_ptr, v_ptr, oq_ptr, ok_ptr, cos_ptr, sin_ptr, pos_ptr, sqb, sqt, sqh, skb, skt, skh,
                      svt, spb, n_pos, T, HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, R2: tl.constexpr,
                      CW: tl.constexpr, V: tl.constexpr, NCH: tl.constexpr, INTERLEAVED: tl.constexpr,
                      SV: tl.constexpr, LOW: tl.constexpr, INVERSE: tl.constexpr, WIDE: tl.constexpr):
    """The pair tilings (:func:`_pairs`) of q, k and v's copy (dense, heads-major or token-major, its token stride
    ``svt`` saying which) in each batch element (:func:`_tensor_program`); cos/sin (n_pos, R2)."""
    which, g0, b = _tensor_program(T, HQ * ((R2 + V - 1) // V), HK * ((R2 + V - 1) // V), NCH)
    soq = (HQ + 2 * HK) * D if ok_ptr is None else HQ * D  # one d qkv buffer, or q's and k's own outputs
    if which == 0:
        _pairs(q_ptr, oq_ptr, sqb, sqt, sqh, soq, cos_ptr, sin_ptr, pos_ptr, spb, n_pos, b, g0, T, HQ,
               D, R2, CW, V, NCH, INTERLEAVED, SV, LOW, INVERSE, WIDE, False)
    elif which == 1:  # k (its output) where not given: after q's heads in q's tensor
        _pairs(q_ptr + HQ * D if k_ptr is None else k_ptr, oq_ptr + HQ * D if ok_ptr is None else ok_ptr, skb, skt,
               skh, soq if ok_ptr is None else HK * D, cos_ptr, sin_ptr, pos_ptr, spb, n_pos, b, g0, T, HK, D, R2, CW,
               V, NCH, INTERLEAVED, SV, LOW, INVERSE, WIDE, False)
    elif v_ptr is not None:
        heads_major = svt * SV == D
        svb = tl.where(heads_major, HK * T * svt, T * svt)
        svh = tl.where(heads_major, T * svt, svt // HK)
        _pairs(v_ptr, oq_ptr + (HQ + HK) * D, svb, svt, svh, soq, cos_ptr, sin_ptr, pos_ptr, spb, n_pos,
               b, g0, T, HK, D, R2, CW, V, NCH, INTERLEAVED, SV, LOW, INVERSE, WIDE, True)


@triton.jit
def _pick(lo, hi, C: tl.constexpr, W: tl.constexpr, N: tl.constexpr):
    """Element ``C`` (< 2W) of each row of the (N, 2W) tile that ``lo`` and ``hi`` make side by side (W = 2, 4, 8):
    splits, each taking a bit of C (register renames)."""
    x = lo if C < W else hi
    for i in tl.static_range(3):
        if (W >> i) >= 2:
            e, o = tl.split(tl.reshape(x, (N, (W >> i) // 2, 2)))
            x = e if (C >> i) % 2 == 0 else o
    return tl.reshape(x, (N,))


@triton.jit
def _window(lo, hi, R: tl.constexpr, W: tl.constexpr, N: tl.constexpr):
    """Elements [R, R + W) of ``lo`` and ``hi`` side by side (0 <= R < W), shifted in registers: a misaligned run
    from two aligned loads (``tl.join`` interleaves, hence the order)."""
    if W == 2:
        out = tl.join(_pick(lo, hi, R, W, N), _pick(lo, hi, R + 1, W, N))
    elif W == 4:
        out = tl.join(tl.join(_pick(lo, hi, R, W, N), _pick(lo, hi, R + 2, W, N)),
                      tl.join(_pick(lo, hi, R + 1, W, N), _pick(lo, hi, R + 3, W, N)))
    else:
        out = tl.join(tl.join(tl.join(_pick(lo, hi, R, W, N), _pick(lo, hi, R + 4, W, N)),
                              tl.join(_pick(lo, hi, R + 2, W, N), _pick(lo, hi, R + 6, W, N))),
                      tl.join(tl.join(_pick(lo, hi, R + 1, W, N), _pick(lo, hi, R + 5, W, N)),
                              tl.join(_pick(lo, hi, R + 3, W, N), _pick(lo, hi, R + 7, W, N))))
    return tl.reshape(out, (N, W))


@triton.jit
def _shifted_run(x_ptr, at, own, S: tl.constexpr, need_lo, need_hi, VB: tl.constexpr, NBP: tl.constexpr):
    """Each block's run of VB elements S on (S constant, either sign): the two aligned blocks holding it, shifted in
    registers, each read only where lanes need it (``need_lo``: below VB - S mod VB); offset 0 is ``own``."""
    A: tl.constexpr = (S // VB) * VB  # floor for either sign: the first aligned block's offset
    lanes = tl.arange(0, VB)[None, :]
    lo = own if A == 0 else tl.load(x_ptr + at + A + lanes, mask=tl.broadcast_to(need_lo[:, None], (NBP, VB)))
    hi = own if A + VB == 0 else tl.load(x_ptr + at + (A + VB) + lanes,
                                         mask=tl.broadcast_to(need_hi[:, None], (NBP, VB)))
    return _window(lo, hi, S - A, VB, NBP)


@triton.jit
def _meets(a, b, LO: tl.constexpr, HI: tl.constexpr):
    """Whether the lanes [a, b) of each block meet the lanes [LO, HI)."""
    return (a < HI) & (b > LO)


@triton.jit
def _partner(x_ptr, x_row, raw, bm, d, d0, D: tl.constexpr, R2: tl.constexpr, INTERLEAVED: tl.constexpr,
             VB: tl.constexpr, NBP: tl.constexpr):
    """Each element's partner (float32): d ^ 1 (interleaved, a swap in registers), else d + R2 in the first half and
    d - R2 in the second, read again (L1) as aligned vectors, shifted where R2 is not a multiple of VB. Where VB
    divides R2 and D a block's partners are one run, read with one load: two predicated loads hold twice the
    registers, and the compiler then issues the block's own load after they return (a second memory round trip)."""
    lanes = tl.arange(0, VB)[None, :]
    if INTERLEAVED:
        even, odd = tl.split(tl.reshape(raw, (NBP, VB // 2, 2)))
        partner = tl.reshape(tl.join(odd, even), (NBP, VB))
    elif R2 % VB == 0 and D % VB == 0:
        shift = tl.where(d0 < R2, R2, -R2)
        pm = tl.broadcast_to((bm & (d0 < 2 * R2))[:, None], (NBP, VB))
        partner = tl.load(x_ptr + x_row + shift[:, None] + lanes, mask=pm)
    else:
        SU: tl.constexpr = VB - R2 % VB  # the up run's lanes from its lower aligned block: [0, SU)
        SD: tl.constexpr = VB - (-R2) % VB  # and the down run's
        up_lo = _meets(-d0, R2 - d0, 0, SU)
        up_hi = _meets(-d0, R2 - d0, SU, VB)
        dn_lo = _meets(R2 - d0, 2 * R2 - d0, 0, SD)
        dn_hi = _meets(R2 - d0, 2 * R2 - d0, SD, VB)
        if VB > (D & -D):
            up_lo |= _meets(D - d0, D + R2 - d0, 0, SU)
            up_hi |= _meets(D - d0, D + R2 - d0, SU, VB)
            dn_lo |= _meets(D + R2 - d0, D + 2 * R2 - d0, 0, SD)
            dn_hi |= _meets(D + R2 - d0, D + 2 * R2 - d0, SD, VB)
        up = _shifted_run(x_ptr, x_row, raw, R2, bm & up_lo, bm & up_hi, VB, NBP)
        down = _shifted_run(x_ptr, x_row, raw, -R2, bm & dn_lo, bm & dn_hi, VB, NBP)
        partner = tl.where(d < R2, up, down)
    return partner.to(tl.float32)


@triton.jit
def _flat(x_ptr, o_ptr, sxb, sxt, so, cos_ptr, sin_ptr, pos_ptr, spb, n_pos, b, k0, T, WB: tl.constexpr,
          D: tl.constexpr, R2: tl.constexpr, VB: tl.constexpr, NBP: tl.constexpr, INTERLEAVED: tl.constexpr,
          SV: tl.constexpr, LOW: tl.constexpr, INVERSE: tl.constexpr, WIDE: tl.constexpr, COPY: tl.constexpr):
    """Blocks [k0, k0 + NBP) of batch element ``b`` of one tensor whose tokens are WB blocks of VB elements: element
    d is ``x[d] c + x[partner] s'`` (c, signed sin s' from the element tables: rows of PW columns, P = lcm(D, 4)),
    bit for bit the pair tilings' arithmetic; the copied tail (from 2 R2 on; all where ``COPY``) passes through."""
    DT: tl.constexpr = o_ptr.dtype.element_ty
    blk = k0 + tl.arange(0, NBP)
    t = blk // WB
    bm = t < T
    w0 = (blk - t * WB) * VB  # the block's first element in its token's heads
    DU: tl.constexpr = VB if D % VB == 0 else (VB // 2 if D % (VB // 2) == 0 else 2)  # gcd(VB, D)
    d0 = (w0 // DU) % (D // DU) * DU  # w0 mod D, written so the compiler knows it a multiple of DU
    P: tl.constexpr = D if D % 4 == 0 else 2 * D
    PW: tl.constexpr = P + P % 8  # a table row (rope.triton.launch.element_tables)
    G: tl.constexpr = VB if P % VB == 0 else VB // 2
    lanes = tl.arange(0, VB)[None, :]
    col = ((w0 // G) % (P // G) * G)[:, None] + lanes  # w0 mod P: the table columns start 16-byte aligned
    if not COPY:
        row, valid = _table_rows(pos_ptr, b, t, spb, n_pos, bm)
    if WIDE:
        b = b.to(tl.int64)
        t = t.to(tl.int64)
        w0 = w0.to(tl.int64)
    x_row = ((b * sxb + t * sxt) * SV + w0)[:, None]
    o_at = ((b * T + t) * so + w0)[:, None] + lanes
    d = d0[:, None] + lanes  # the element's place in its row (from D on: in the next row)
    if VB > (D & -D):
        d = tl.where(d >= D, d - D, d)
    m = tl.broadcast_to(bm[:, None], (NBP, VB))
    raw = tl.load(x_ptr + x_row + lanes, mask=m)
    own = raw.to(tl.float32)
    if COPY:
        y = own
    else:
        partner = _partner(x_ptr, x_row, raw, bm, d, d0, D, R2, INTERLEAVED, VB, NBP)
        c, s = _cos_sin(cos_ptr, sin_ptr, (row * PW)[:, None] + col, m, valid, pos_ptr, INVERSE)
        y, _ = _rotate_pairs(own, partner, c, s, DT, LOW)
        if 2 * R2 < D:
            y = tl.where(d < 2 * R2, y, own)
    tl.store(o_ptr + o_at, _narrow(y, DT), mask=m)


@triton.jit(do_not_specialize=["spb", "n_pos", "T"])
def rope_flat_kernel(q_ptr, k_ptr, v_ptr, oq_ptr, ok_ptr, cos_ptr, sin_ptr, pos_ptr, sqb, sqt, skb, skt, svt, spb,
                     n_pos, T, HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, R2: tl.constexpr,
                     VB: tl.constexpr, NBP: tl.constexpr, INTERLEAVED: tl.constexpr, SV: tl.constexpr,
                     LOW: tl.constexpr, INVERSE: tl.constexpr, WIDE: tl.constexpr):
    """The flat tiling (:func:`_flat`) of q, k and v's copy (where ``v_ptr`` is given; dense, token stride ``svt``;
    in each batch element (:func:`_tensor_program`); ``cos``/``sin`` are element tables."""
    which, k0, b = _tensor_program(T, HQ * D // VB, HK * D // VB, NBP)
    soq = (HQ + 2 * HK) * D if ok_ptr is None else HQ * D
    if which == 0:
        _flat(q_ptr, oq_ptr, sqb, sqt, soq, cos_ptr, sin_ptr, pos_ptr, spb, n_pos, b, k0, T, HQ * D // VB,
              D, R2, VB, NBP, INTERLEAVED, SV, LOW, INVERSE, WIDE, False)
    elif which == 1:
        _flat(q_ptr + HQ * D if k_ptr is None else k_ptr, oq_ptr + HQ * D if ok_ptr is None else ok_ptr, skb, skt,
              soq if ok_ptr is None else HK * D, cos_ptr, sin_ptr, pos_ptr, spb, n_pos, b, k0, T, HK * D // VB, D, R2,
              VB, NBP, INTERLEAVED, SV, LOW, INVERSE, WIDE, False)
    elif v_ptr is not None:
        _flat(v_ptr, oq_ptr + (HQ + HK) * D, T * svt, svt, soq, cos_ptr, sin_ptr, pos_ptr, spb, n_pos, b,
              k0, T, HK * D // VB, D, R2, VB, NBP, INTERLEAVED, SV, LOW, INVERSE, WIDE, True)
