"""Triton kernels of the ``triton_v4`` / ``triton_v2`` rotary embeddings (imports triton).

One kernel serves both entries, both directions and both tensors:

* ``LOW`` (constexpr) selects the arithmetic. False: load in the input dtype, compute in float32,
  round once at the store (``triton_v4``; also ``triton_v2`` on float32 inputs, so the two agree
  bit for bit there). True: every product and sum is rounded to the input dtype, the bf16/fp16 math
  of the lower-precision ``triton_v2``.
* ``INVERSE`` (constexpr) negates ``sin``: the transposed rotation, i.e. the backward pass
  ``dx1 = dy1 c - dy2 s``, ``dx2 = dy1 s + dy2 c``.
* Rows. A tensor (B, T, H, D) is seen as B*T*H rows of D elements (a row = one head of one
  token, found through the tensor's own strides); a program rotates BR consecutive rows. The
  programs of q come first, then those of k, so q and k are rotated in one launch. Consecutive rows
  share a token, so the cos/sin rows a program gathers are mostly L1/L2 hits.
* Row geometry. A row is R2 rotated pairs then PASS copied elements (``rotary_dim`` < D), all
  constexpr: the pairs are one BR x HP tile (HP = R2 rounded up to a power of two, the padding
  masked), and since the masks are compile-time constants the loads vectorise for every head
  size. (With D/2 a runtime argument, a D/2 not a multiple of 16 lost the vector loads: 44% of copy
  bandwidth at D=48. Cutting a row into power-of-two chunks instead was slower still: 20-50%.)
* Chunks (``CHUNKED``). Where R2 is not a power of two the row tile wastes lanes (D=40: 20 of 32
  busy; 57% of copy bandwidth on the H200). There a program's tile is NCH chunks of V consecutive
  pairs (V the largest power of two dividing R2, capped), taken across (row, chunk) pairs so every
  lane works; each load is one V-element vector (85% at D=40). Rows with a copied tail keep the
  row tiling. Both tilings compute every element identically (bit-identical results).
* Flat (``FLAT``). Where rows would pad a copied tail (``rotary_dim`` < D) or load an odd rotated half
  2 bytes at a time, a program takes a token's heads as blocks of VB contiguous elements and rotates
  each element against its partner, with cos and the signed sin from per-element tables
  (:func:`_rotate_flat`): every q/k load and store is a full vector (H100: 78 -> 96% of copy bandwidth at
  D = 48, rotary_dim 24), a partner run misaligned to the block included (two aligned vectors shifted in
  registers, :func:`_window`; variant=full at D = 18: 60 -> 93%; or, ``WORDS``, as int32 words, each element a
  shift or mask of its word, :func:`_word_partners`). Bit-identical to the other tilings.
* Layouts. ``INTERLEAVED`` pairs (2i, 2i + 1): the rotated part is loaded as one contiguous
  BR x 2HP tile and split into its even and odd elements (``tl.split``), then joined back for the
  store; the half layout pairs (i, i + R2) with two BR x HP tiles.
* cos/sin. A program loads the table columns [0, CW) and takes cos 1, sin 0 for the rest. With
  variant=partial the pairs [R2/2, R2) have frequency 0 (the table holds cos 1, sin 0 there), so
  CW = R2/2 skips loading them, unless R2/2 is not a multiple of 4: then its mask would cut the
  float32 loads below 16 bytes, and CW = R2 loads the (exact) table values instead. The table's row
  stride, like the tensors' (SV), arrives divided by its power-of-two unit CSV: a stride of 12, 20
  or 24 floats (D = 24, 40, 48) otherwise left every cos/sin load scalar.
* Index arithmetic. Row indices are divided by H and T with host-computed magic numbers (a multiply
  and a shift, :func:`_udiv`) and, unless an operand's storage reaches 2**30 elements (``WIDE``),
  the offsets are computed in 32 bits. At V = 2 (D = 20, 28, 36, ...: rotated halves of 2 mod 4
  pairs) a chunk holds 4 elements, and the per-chunk division sequences and 64-bit multiplies were
  more instructions than the rotation (sm_90 code, ``scripts/kernel_vectors.py``: 28.5 machine
  instructions per element at D = 36 against 15 at D = 48; 21.5 against 12.5 now).
* Positions outside the table (only possible with ``positions``, unchecked on the host on a GPU
  to spare a synchronisation) give NaN rows rather than another row's rotation.

The float32 path evaluates ``a*c + b*s`` as ``fma(a, c, p) + fma(b, s, -p)`` with ``p = b*s``:
the second fma is the exact rounding error of ``p``, so the result is within one float32
rounding of the exact value plus ~2^-48 |x|. A plain ``a*c + b*s`` is only accurate to
~2^-24 |x|, which is more than one bf16 ulp of the result whenever the two products nearly
cancel (about 6 elements in a million), and the precise kernel promises one ulp everywhere.
Joint flat programs at odd halves compute the same bits with the signs moved into the fma's operands
(``fma(a, c, p) - fma(-b, s, p)``, :func:`_rotate_pairs`' FOLD), which Triton 3.6 compiles to fewer
instructions.
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
def _negate(x, FOLD: tl.constexpr):
    """``-x``. Triton writes ``-x`` as ``0 - x``, a subtraction of its own (it differs from a negation at
    x = +0), so every use costs an instruction. FOLD: written as ``x * -1.0``, which the compiler turns into a
    sign flip that the multiply or fma using ``x`` absorbs for free."""
    if FOLD:
        return x * -1.0
    else:
        return -x


@triton.jit
def _rotate_pairs(x1, x2, c, s, DT: tl.constexpr, LOW: tl.constexpr, EMULATE: tl.constexpr,
                  FOLD: tl.constexpr = False):
    """(y1, y2) = (x1 c + x2 s, x2 c - x1 s) of float32 tiles, rounded as the entry's arithmetic says.

    The float32 path adds each product's exact rounding error back (module docstring). FOLD computes the same
    values with the signs placed where the fma absorbs them: ``e = fma(x2, s, -p)``, the error of
    ``p = x2 s``, is ``-fma(-x2, s, p)`` exactly, and y2's ``-q`` is ``(-x1) s``. Triton 3.6's code for
    ``-p`` is a second multiply per element, and the backward's ``-s`` an add: written this way, the flat
    kernel at D = 54 compiles to 24 fewer instructions forward and 56 fewer backward (sm_90, static count;
    48 registers backward instead of 54). Only joint flat programs at odd halves take it (``_rope_program``'s
    FOLD): over the 51 odd halves from D = 54 on, the head-dim sweeps on two H100s read a mean 0.17 points
    of copy bandwidth higher forward and 0.07 backward than without (docs/kernels.md, session 33). Elsewhere
    it changed the compiler's schedule for the worse: about 5 points slower at R2 = 4 mod 8 (D = 24, 40,
    56, ...), up to 0.8 at R2 = 2 mod 8, and up to 1.5 at the odd halves of programs apart (D = 38, 42).
    """
    if LOW:
        c = _round(c, DT, EMULATE)
        s = _round(s, DT, EMULATE)
        y1 = _round(x1 * c, DT, EMULATE) + _round(x2 * s, DT, EMULATE)
        y2 = _round(x2 * c, DT, EMULATE) - _round(x1 * s, DT, EMULATE)
    elif FOLD:
        p = x2 * s
        y1 = tl.fma(x1, c, p) - tl.fma(_negate(x2, True), s, p)
        nq = _negate(x1, True) * s
        y2 = tl.fma(x2, c, nq) - tl.fma(x1, s, nq)
    else:
        p = x2 * s
        y1 = tl.fma(x1, c, p) + tl.fma(x2, s, -p)
        q = x1 * s
        y2 = tl.fma(x2, c, -q) - tl.fma(x1, s, -q)
    return y1, y2


@triton.jit
def _cos_sin(cos_ptr, sin_ptr, trow, col, cm, valid, HAS_POS: tl.constexpr, INVERSE: tl.constexpr,
             FOLD: tl.constexpr = False):
    """float32 cos, sin of pairs ``col`` at table rows ``trow``, loaded where ``cm``.

    Pairs the mask leaves out (variant=partial's zero frequencies from CW on, and the padding) get
    cos 1, sin 0 without a load. Rows whose position is outside the table get NaN. INVERSE negates sin
    (:func:`_negate`, FOLD as there).
    """
    c = tl.load(cos_ptr + trow + col, mask=cm, other=1.0, eviction_policy="evict_last").to(tl.float32)
    s = tl.load(sin_ptr + trow + col, mask=cm, other=0.0, eviction_policy="evict_last").to(tl.float32)
    if HAS_POS:
        c = tl.where(valid[:, None], c, float("nan"))
        s = tl.where(valid[:, None], s, float("nan"))
    if INVERSE:
        s = _negate(s, FOLD)
    return c, s


@triton.jit
def _load_x(ptr, mask, STREAM: tl.constexpr):
    """A load of q/k elements; ``STREAM``: with L2 evict-first priority. Each element is read once, and
    a streaming priority leaves the L2 to what is read again: the cos/sin rows, which every batch
    element and every head of a token reads (loaded with evict-last)."""
    if STREAM:
        return tl.load(ptr, mask=mask, eviction_policy="evict_first")
    else:
        return tl.load(ptr, mask=mask)


@triton.jit
def _udiv(n, m, s):
    """``n // d`` for int32 ``0 <= n < 2**31``, from the divisor's magic pair ``(m, s)`` (see
    ``rope.triton_rope.magic_divisor``: the multiplier is ``2**31 + m``): a 32 x 32 -> 64-bit multiply,
    two shifts and an add, ``(((n m) >> 31) + n) >> s``.

    Why: a division by a runtime divisor is a ~20-instruction sequence on the GPU; the chunk tiling
    divides every chunk's index by H and T, and at V = 2 (D = 20, 36, 52, ...) that integer work
    outweighed the arithmetic of the rotation itself. ``m`` travels below 2**31 because Inductor
    cannot pass a larger Python int to a user Triton kernel (torch 2.11: AttributeError ``xreplace``).
    Scalars are widened with ``tl.cast``, not ``.to``: Inductor's mutation analysis (torch 2.11)
    compiles the kernel with its int arguments as constants, which have no ``.to``, and on failure
    assumes every input mutated, cloning them (+4-8% on the compiled step, H100 session 8).
    """
    hi = ((n.to(tl.uint64) * tl.cast(m, tl.uint64)) >> 31).to(tl.uint32)
    return ((hi + n.to(tl.uint32)) >> tl.cast(s, tl.uint32)).to(tl.int32)


@triton.jit
def _row_starts(r, T, mT, pT, H, mH, pH, sxb, sxt, sxh, sob, sot, soh, SV: tl.constexpr, WIDE: tl.constexpr):
    """Rows ``r`` of the B*T*H rows: their batch and token indices and the element offsets of their
    input and output rows (columns of one). ``(mT, pT)``, ``(mH, pH)``: the magic pairs of T and H
    (:func:`_udiv`). ``WIDE``: the offsets need 64 bits; otherwise (every offset of every tensor
    below 2**31, checked on the host) the index arithmetic stays in 32 bits, half the instructions.

    Row strides arrive divided by SV (constexpr): the offsets are then known multiples of SV, so
    rows of D = 24, 40, 56, ... elements still get vector loads (Triton only infers divisibility by
    16 from a runtime stride).
    """
    bt = _udiv(r, mH, pH)
    b = _udiv(bt, mT, pT)
    h = r - bt * H
    t = bt - b * T
    if WIDE:
        h = h.to(tl.int64)
        t = t.to(tl.int64)
        b = b.to(tl.int64)
    return b, t, ((b * sxb + t * sxt + h * sxh) * SV)[:, None], ((b * sob + t * sot + h * soh) * SV)[:, None]


@triton.jit
def _row_positions(pos_ptr, b, t, spb, spt, NPOS, rm, HAS_POS: tl.constexpr):
    """The rows' positions (their token index, or read from ``positions``) and whether they lie in the
    table (out of it: clamped to row 0 here, NaN in :func:`_cos_sin`). The range test is made on the
    positions as stored (int64 ones included) before they are narrowed to ``t``'s type."""
    if HAS_POS:
        raw = tl.load(pos_ptr + b * spb + t * spt, mask=rm, other=0)
        valid = (raw >= 0) & (raw < NPOS)
        pos = tl.where(valid, raw, 0).to(t.dtype)
    else:
        pos = t
        valid = rm
    return pos, valid


@triton.jit
def _rotate_rows(
    x_ptr, o_ptr, sxb, sxt, sxh, sxd, sob, sot, soh, sod,
    cos_ptr, sin_ptr, pos_ptr, spb, spt, s_cs, NPOS,
    r0, NR, T, mT, pT, H, mH, pH,
    R2: tl.constexpr, CW: tl.constexpr, PASS: tl.constexpr, INTERLEAVED: tl.constexpr,
    HP: tl.constexpr, PP: tl.constexpr, SV: tl.constexpr, CSV: tl.constexpr,
    BR: tl.constexpr, HAS_POS: tl.constexpr, LOW: tl.constexpr, INVERSE: tl.constexpr, EMULATE: tl.constexpr,
    WIDE: tl.constexpr, STREAM: tl.constexpr,
):
    """Rotate rows [r0, r0 + BR) of one tensor seen as B*T*H rows of D = 2 R2 + PASS elements.

    The R2 pairs are one BR x HP tile (HP = R2 rounded up to a power of two); R2 is a constexpr, so
    the column masks are known at compile time and the loads vectorise whatever R2 is (with R2 a
    runtime value, a D/2 that is not a multiple of 16 lost the vector loads: 44% of copy bandwidth
    at D=48). The PASS trailing elements are copied as one BR x PP tile.
    """
    DT: tl.constexpr = o_ptr.dtype.element_ty
    r = r0 + tl.arange(0, BR)
    rm = r < NR
    b, t, x_row, o_row = _row_starts(r, T, mT, pT, H, mH, pH, sxb, sxt, sxh, sob, sot, soh, SV, WIDE)
    pos, valid = _row_positions(pos_ptr, b, t, spb, spt, NPOS, rm, HAS_POS)
    pcol = tl.arange(0, HP)[None, :]
    c, s = _cos_sin(cos_ptr, sin_ptr, pos[:, None] * (s_cs * CSV), pcol, rm[:, None] & (pcol < CW), valid,
                    HAS_POS, INVERSE)
    if INTERLEAVED:
        col = tl.arange(0, 2 * HP)[None, :]
        xm = rm[:, None] & (col < 2 * R2)
        x = _load_x(x_ptr + x_row + col * sxd, xm, STREAM).to(tl.float32)
        x1, x2 = tl.split(tl.reshape(x, (BR, HP, 2)))
        y1, y2 = _rotate_pairs(x1, x2, c, s, DT, LOW, EMULATE)
        y = tl.reshape(tl.join(y1, y2), (BR, 2 * HP))
        tl.store(o_ptr + o_row + col * sod, _narrow(y, DT, EMULATE), mask=xm)
    else:
        col = tl.arange(0, HP)[None, :]
        xm = rm[:, None] & (col < R2)
        x1 = _load_x(x_ptr + x_row + col * sxd, xm, STREAM).to(tl.float32)
        x2 = _load_x(x_ptr + x_row + (R2 + col) * sxd, xm, STREAM).to(tl.float32)
        y1, y2 = _rotate_pairs(x1, x2, c, s, DT, LOW, EMULATE)
        tl.store(o_ptr + o_row + col * sod, _narrow(y1, DT, EMULATE), mask=xm)
        tl.store(o_ptr + o_row + (R2 + col) * sod, _narrow(y2, DT, EMULATE), mask=xm)
    if PASS > 0:  # rotary_dim < D: the rest is copied
        col = 2 * R2 + tl.arange(0, PP)[None, :]
        pm = rm[:, None] & (col < 2 * R2 + PASS)
        tl.store(o_ptr + o_row + col * sod, _load_x(x_ptr + x_row + col * sxd, pm, STREAM), mask=pm)


@triton.jit
def _rotate_chunks(
    x_ptr, o_ptr, sxb, sxt, sxh, sxd, sob, sot, soh, sod,
    cos_ptr, sin_ptr, pos_ptr, spb, spt, s_cs, NPOS,
    g0, NR, T, mT, pT, H, mH, pH,
    R2: tl.constexpr, CW: tl.constexpr, INTERLEAVED: tl.constexpr, V: tl.constexpr, M: tl.constexpr,
    NCH: tl.constexpr, SV: tl.constexpr, CSV: tl.constexpr,
    HAS_POS: tl.constexpr, LOW: tl.constexpr, INVERSE: tl.constexpr, EMULATE: tl.constexpr, WIDE: tl.constexpr,
    STREAM: tl.constexpr,
):
    """Rotate chunks [g0, g0 + NCH) of one tensor whose rows are M chunks of V pairs (R2 = M V).

    For rotated widths that are not a power of two (R2 = 12, 20, 24, 28, 40, ...) a BR x HP row
    tile pads every row to HP lanes (D=40: 20 of 32 busy). Here a program's NCH x V tile walks
    (row, chunk) pairs instead, every lane busy; a chunk is V consecutive pairs, so each of its
    loads is one vector access of V elements (half layout: x1 and x2; interleaved: 2V elements).
    The copied tail of rotary_dim < D is not touched here: :func:`_copy_chunks` programs copy it.
    """
    DT: tl.constexpr = o_ptr.dtype.element_ty
    g = g0 + tl.arange(0, NCH)
    r = g // M
    j = g - r * M
    rm = r < NR
    b, t, x_row, o_row = _row_starts(r, T, mT, pT, H, mH, pH, sxb, sxt, sxh, sob, sot, soh, SV, WIDE)
    pos, valid = _row_positions(pos_ptr, b, t, spb, spt, NPOS, rm, HAS_POS)
    col = (j * V)[:, None] + tl.arange(0, V)[None, :]  # pair index
    xm = tl.broadcast_to(rm[:, None], (NCH, V))  # every chunk of a row is whole
    if CW < R2:  # variant=partial: pairs from CW on are cos 1, sin 0 without a load
        cm = xm & (col < CW)
    else:
        cm = xm
    c, s = _cos_sin(cos_ptr, sin_ptr, (pos * (s_cs * CSV))[:, None], col, cm, valid, HAS_POS, INVERSE)
    if INTERLEAVED:
        col2 = (j * (2 * V))[:, None] + tl.arange(0, 2 * V)[None, :]
        xm2 = tl.broadcast_to(rm[:, None], (NCH, 2 * V))
        x = _load_x(x_ptr + x_row + col2 * sxd, xm2, STREAM).to(tl.float32)
        x1, x2 = tl.split(tl.reshape(x, (NCH, V, 2)))
        y1, y2 = _rotate_pairs(x1, x2, c, s, DT, LOW, EMULATE)
        y = tl.reshape(tl.join(y1, y2), (NCH, 2 * V))
        tl.store(o_ptr + o_row + col2 * sod, _narrow(y, DT, EMULATE), mask=xm2)
    else:
        x1 = _load_x(x_ptr + x_row + col * sxd, xm, STREAM).to(tl.float32)
        x2 = _load_x(x_ptr + x_row + (R2 + col) * sxd, xm, STREAM).to(tl.float32)
        y1, y2 = _rotate_pairs(x1, x2, c, s, DT, LOW, EMULATE)
        tl.store(o_ptr + o_row + col * sod, _narrow(y1, DT, EMULATE), mask=xm)
        tl.store(o_ptr + o_row + (R2 + col) * sod, _narrow(y2, DT, EMULATE), mask=xm)


@triton.jit
def _copy_chunks(
    x_ptr, o_ptr, sxb, sxt, sxh, sxd, sob, sot, soh, sod, g0, NR, T, mT, pT, H, mH, pH,
    START: tl.constexpr, VP: tl.constexpr, MP: tl.constexpr, NCP: tl.constexpr, SV: tl.constexpr,
    WIDE: tl.constexpr, STREAM: tl.constexpr,
):
    """Copy chunks [g0, g0 + NCP) of the pass-through tails (elements START .. START + MP VP of each
    row, rotary_dim < D) in chunks of VP elements: with the chunk tiling the tail is its own set of
    programs, so neither it nor the rotated part is padded to a power of two (a tail of 36 elements
    in a 64-lane tile left 44% of the lanes idle)."""
    g = g0 + tl.arange(0, NCP)
    r = g // MP
    j = g - r * MP
    rm = r < NR
    _, _, x_row, o_row = _row_starts(r, T, mT, pT, H, mH, pH, sxb, sxt, sxh, sob, sot, soh, SV, WIDE)
    col = START + (j * VP)[:, None] + tl.arange(0, VP)[None, :]
    m = tl.broadcast_to(rm[:, None], (NCP, VP))
    tl.store(o_ptr + o_row + col * sod, _load_x(x_ptr + x_row + col * sxd, m, STREAM), mask=m)


@triton.jit
def _column(x, C: tl.constexpr, W: tl.constexpr, N: tl.constexpr):
    """Column ``C`` of the (N, W) tile ``x`` (W = 2, 4 or 8), as an (N,) tile: a tree of ``tl.split``s, each
    taking one bit of C (a split of a dimension held in one thread's registers is a renaming, no move)."""
    e, o = tl.split(tl.reshape(x, (N, W // 2, 2)))
    x = e if C % 2 == 0 else o
    if W >= 4:
        e, o = tl.split(tl.reshape(x, (N, W // 4, 2)))
        x = e if (C // 2) % 2 == 0 else o
    if W >= 8:
        e, o = tl.split(tl.reshape(x, (N, W // 8, 2)))
        x = e if (C // 4) % 2 == 0 else o
    return tl.reshape(x, (N,))


@triton.jit
def _pick(lo, hi, C: tl.constexpr, W: tl.constexpr, N: tl.constexpr):
    """Element ``C`` (< 2W) of each row of the (N, 2W) tile that ``lo`` and ``hi`` (N, W) make side by side."""
    if C < W:
        col = _column(lo, C, W, N)
    else:
        col = _column(hi, C - W, W, N)
    return col


@triton.jit
def _window(lo, hi, R: tl.constexpr, W: tl.constexpr, N: tl.constexpr):
    """The (N, W) tile of elements [R, R + W) of the rows of ``lo`` and ``hi`` side by side (0 <= R < W):
    a shift by a compile-time count done in registers, so that a run of W elements at any alignment comes
    from two aligned W-element vector loads. ``tl.join`` interleaves its operands, hence the order."""
    if W == 2:
        out = tl.join(_pick(lo, hi, R, W, N), _pick(lo, hi, R + 1, W, N))
    elif W == 4:
        out = tl.join(
            tl.join(_pick(lo, hi, R, W, N), _pick(lo, hi, R + 2, W, N)),
            tl.join(_pick(lo, hi, R + 1, W, N), _pick(lo, hi, R + 3, W, N)),
        )
    else:
        out = tl.join(
            tl.join(
                tl.join(_pick(lo, hi, R, W, N), _pick(lo, hi, R + 4, W, N)),
                tl.join(_pick(lo, hi, R + 2, W, N), _pick(lo, hi, R + 6, W, N)),
            ),
            tl.join(
                tl.join(_pick(lo, hi, R + 1, W, N), _pick(lo, hi, R + 5, W, N)),
                tl.join(_pick(lo, hi, R + 3, W, N), _pick(lo, hi, R + 7, W, N)),
            ),
        )
    return tl.reshape(out, (N, W))


@triton.jit
def _half_word(w, HIGH: tl.constexpr, DT: tl.constexpr):
    """The 16-bit element in the high (``HIGH``) or low half of the int32 words ``w``, as float32 (exact).
    A bfloat16's float32 is its bits in the high half of a word, so for bf16 this is one shift or one mask."""
    if DT == tl.bfloat16:
        bits = (w & -65536) if HIGH else (w << 16)
        val = bits.to(tl.float32, bitcast=True)
    else:
        half = (w >> 16) if HIGH else w
        val = half.to(tl.int16).to(DT, bitcast=True).to(tl.float32)
    return val


@triton.jit
def _word(lo, hi, J: tl.constexpr, W: tl.constexpr, N: tl.constexpr):
    """Word ``J`` (< 2W) of each row of the (N, 2W) int32 tile that ``lo`` and ``hi`` (N, W) make side by side."""
    if W == 1:
        word = tl.reshape(lo if J < 1 else hi, (N,))
    else:
        word = _pick(lo, hi, J, W, N)
    return word


@triton.jit
def _partner_element(ulo, uhi, dlo, dhi, first, L: tl.constexpr, RU: tl.constexpr, RD: tl.constexpr,
                     W: tl.constexpr, N: tl.constexpr, DT: tl.constexpr):
    """Lane ``L``'s partner as float32: element RU + L of the up run's words (``first``: the lane is in the
    first half) else element RD + L of the down run's. RU and RD have the same parity (RU + RD = 2W), so the
    element sits in the same half of whichever word is chosen: one select of words, then one conversion."""
    word = tl.where(_column(first, L, 2 * W, N), _word(ulo, uhi, (RU + L) // 2, W, N),
                    _word(dlo, dhi, (RD + L) // 2, W, N))
    return _half_word(word, (RU + L) % 2 == 1, DT)


@triton.jit
def _word_partners(ulo, uhi, dlo, dhi, first, RU: tl.constexpr, RD: tl.constexpr, W: tl.constexpr,
                   N: tl.constexpr, DT: tl.constexpr):
    """Each lane's partner (N, 2W), float32, from the int32 words of the up and down runs' aligned blocks
    (:func:`_partner_element`; joined in :func:`_window`'s order). Why words: moving 16-bit elements between
    registers packs and unpacks halves, and converting both runs before the select kept both live."""
    if W == 1:
        out = tl.join(_partner_element(ulo, uhi, dlo, dhi, first, 0, RU, RD, W, N, DT),
                      _partner_element(ulo, uhi, dlo, dhi, first, 1, RU, RD, W, N, DT))
    elif W == 2:
        out = tl.join(
            tl.join(_partner_element(ulo, uhi, dlo, dhi, first, 0, RU, RD, W, N, DT),
                    _partner_element(ulo, uhi, dlo, dhi, first, 2, RU, RD, W, N, DT)),
            tl.join(_partner_element(ulo, uhi, dlo, dhi, first, 1, RU, RD, W, N, DT),
                    _partner_element(ulo, uhi, dlo, dhi, first, 3, RU, RD, W, N, DT)),
        )
    else:
        out = tl.join(
            tl.join(
                tl.join(_partner_element(ulo, uhi, dlo, dhi, first, 0, RU, RD, W, N, DT),
                        _partner_element(ulo, uhi, dlo, dhi, first, 4, RU, RD, W, N, DT)),
                tl.join(_partner_element(ulo, uhi, dlo, dhi, first, 2, RU, RD, W, N, DT),
                        _partner_element(ulo, uhi, dlo, dhi, first, 6, RU, RD, W, N, DT)),
            ),
            tl.join(
                tl.join(_partner_element(ulo, uhi, dlo, dhi, first, 1, RU, RD, W, N, DT),
                        _partner_element(ulo, uhi, dlo, dhi, first, 5, RU, RD, W, N, DT)),
                tl.join(_partner_element(ulo, uhi, dlo, dhi, first, 3, RU, RD, W, N, DT),
                        _partner_element(ulo, uhi, dlo, dhi, first, 7, RU, RD, W, N, DT)),
            ),
        )
    return tl.reshape(out, (N, 2 * W))


@triton.jit
def _run_words(x_ptr, at_w, S: tl.constexpr, need_lo, need_hi, STREAM: tl.constexpr, VB: tl.constexpr,
               NBP: tl.constexpr):
    """The two aligned blocks holding each block's run of VB 16-bit elements S elements on (as
    :func:`_shifted_run`), read as VB/2 int32 words each (``at_w``: the blocks' first words; the tensor
    word-aligned, see ``WORDS``). The block at offset 0 is read again (from L1): only R2 < VB has one."""
    A: tl.constexpr = (S // VB) * VB
    W: tl.constexpr = VB // 2
    w_ptr = x_ptr.to(tl.pointer_type(tl.int32))
    lanes = tl.arange(0, W)[None, :]
    lo = _load_x(w_ptr + at_w + A // 2 + lanes, tl.broadcast_to(need_lo[:, None], (NBP, W)), STREAM)
    hi = _load_x(w_ptr + at_w + (A + VB) // 2 + lanes, tl.broadcast_to(need_hi[:, None], (NBP, W)), STREAM)
    return lo, hi


@triton.jit
def _meets(a, b, LO: tl.constexpr, HI: tl.constexpr):
    """Whether the lanes [a, b) of each block (a < b) meet the lanes [LO, HI)."""
    return (a < HI) & (b > LO)


@triton.jit
def _shifted_run(x_ptr, at, own, S: tl.constexpr, need_lo, need_hi, STREAM: tl.constexpr,
                 VB: tl.constexpr, NBP: tl.constexpr):
    """Each block's run of VB elements S elements on (S a compile-time count, either sign), from ``x_ptr + at``
    (``at``: the blocks' first elements) where ``own`` was loaded: the two aligned blocks that hold the run,
    shifted in registers (:func:`_window`). Each is read only for the blocks whose lanes need it (``need_lo``:
    lanes [0, VB - S mod VB), ``need_hi``: the rest; a needed partner lies in the same row, so these reads
    stay inside the token); the block at offset 0 is ``own``, reused."""
    A: tl.constexpr = (S // VB) * VB  # floor, for either sign: the first aligned block's offset
    lanes = tl.arange(0, VB)[None, :]
    if A == 0:
        lo = own
    else:
        lo = _load_x(x_ptr + at + A + lanes, tl.broadcast_to(need_lo[:, None], (NBP, VB)), STREAM)
    if A + VB == 0:
        hi = own
    else:
        hi = _load_x(x_ptr + at + (A + VB) + lanes, tl.broadcast_to(need_hi[:, None], (NBP, VB)), STREAM)
    return _window(lo, hi, S - A, VB, NBP)


@triton.jit
def _rotate_flat(
    x_ptr, o_ptr, sxb, sxt, sob, sot,
    cos_ptr, sin_ptr, pos_ptr, spb, spt, s_cs, NPOS,
    k0, NK, T, mT, pT, WB, mW, pW,
    D: tl.constexpr, R2: tl.constexpr, CW: tl.constexpr, INTERLEAVED: tl.constexpr, VB: tl.constexpr,
    NBP: tl.constexpr, SV: tl.constexpr, CSV: tl.constexpr,
    HAS_POS: tl.constexpr, LOW: tl.constexpr, INVERSE: tl.constexpr, EMULATE: tl.constexpr, WIDE: tl.constexpr,
    STREAM: tl.constexpr, PAIRED: tl.constexpr, WORDS: tl.constexpr,
    y_ptr, oy_ptr, syb, syt, soyb, soyt, WBY, JOINT: tl.constexpr, FOLD: tl.constexpr = False,
):
    """Blocks [k0, k0 + NBP) of one tensor whose tokens are WB blocks of VB consecutive elements (a token's
    heads contiguous: H D elements, H D = WB VB), each element rotated against its partner.

    Why: the row and chunk tilings load a rotated half with the alignment of its offset in the row, and
    at R2 = 2 mod 4 (D = 20, 28, 36, ...) or an odd R2 (variant=full) that offset cuts every access to 4 or
    2 bytes; with a copied tail (rotary_dim < D) the row tile also pads both parts to powers of two. Here
    every load and store of the tensor is a VB-element vector at the block's own alignment, whatever the row
    geometry: element d of a row is ``x[d] c + x[p] s'`` with its partner p = d +- R2 (half layout; read
    again, from L1: a vector where R2 is a multiple of VB, else two aligned vectors shifted in registers,
    :func:`_shifted_run`) or d ^ 1 (interleaved; a swap in registers),
    and the tail copied. c and s' come from element tables (``cos_ptr``/``sin_ptr`` here: column j of a
    position's row holding the cos and the signed sin of element j mod D's pair, 1 and 0 on the tail, for a
    period and the block read past it; PAIRED: one table, each column's cos and sin side by side, at
    ``cos_ptr``; see ``rope.triton_rope.element_tables``), so they load as 16-byte vectors too. Each element
    is the first output of :func:`_rotate_pairs` (for x2, with s' = -s, which is exact): the results are
    bit-identical to the other tilings.

    JOINT: the same blocks of a second tensor (k at ``y_ptr``, whose tokens are WBY <= WB blocks: the blocks
    past them are masked) are rotated too, with the same positions and table values: each table entry is
    loaded once for q's element and k's, where separate programs loaded it twice (the table is most of the
    L1 traffic here, 64 of a block's ~80 wavefronts at D = 254: docs/kernels.md, session 15).

    FOLD: the float32 rotation with its signs where the fma absorbs them (:func:`_rotate_pairs`).
    """
    DT: tl.constexpr = o_ptr.dtype.element_ty
    blk = k0 + tl.arange(0, NBP)
    bm = blk < NK
    seg = _udiv(blk, mW, pW)  # the token, over B*T
    w0 = (blk - seg * WB) * VB  # the block's first element in the token's heads
    b = _udiv(seg, mT, pT)
    t = seg - b * T
    DU: tl.constexpr = VB if D % VB == 0 else (VB // 2 if D % (VB // 2) == 0 else 2)  # gcd(VB, D)
    d0 = (w0 // DU) % (D // DU) * DU  # w0 % D, written so the compiler knows it a multiple of DU
    if WIDE:
        b = b.to(tl.int64)
        t = t.to(tl.int64)
        w0 = w0.to(tl.int64)
    x_row = ((b * sxb + t * sxt) * SV + w0)[:, None]
    x_at = x_row + tl.arange(0, VB)[None, :]
    o_at = ((b * sob + t * sot) * SV + w0)[:, None] + tl.arange(0, VB)[None, :]
    pos, valid = _row_positions(pos_ptr, b, t, spb, spt, NPOS, bm, HAS_POS)
    d = d0[:, None] + tl.arange(0, VB)[None, :]  # the element's place in its row (from D on: the next row's)
    if VB > (D & -D):  # a block may cross into the next row (of the same token)
        d = tl.where(d >= D, d - D, d)
    if not PAIRED:  # split tables of period P = lcm(D, 4) (rope.triton_rope.element_table_period), a block's
        # columns starting at w0 mod P: a multiple of G (computed here, before the loads, as the code measured in
        # session 12 was: the order changes the sm_90 schedule)
        P: tl.constexpr = D if VB == 2 or D % 4 == 0 else 2 * D
        G: tl.constexpr = VB if P % VB == 0 else VB // 2
        col = ((w0 // G) % (P // G) * G)[:, None] + tl.arange(0, VB)[None, :]
    m = tl.broadcast_to(bm[:, None], (NBP, VB))
    rot = d < 2 * R2
    wblk = blk - seg * WB  # the block's index in its token
    raw = _load_x(x_ptr + x_at, m, STREAM)
    own = raw.to(tl.float32)
    partner = _flat_partner(x_ptr, x_row, x_at, raw, own, bm, m, d, d0, rot, b, t, wblk, sxb, sxt, D, R2,
                            INTERLEAVED, VB, NBP, SV, STREAM, WORDS, DT)
    if JOINT:
        ybm = bm & (wblk < WBY)
        ym = tl.broadcast_to(ybm[:, None], (NBP, VB))
        y_row = ((b * syb + t * syt) * SV + w0)[:, None]
        y_at = y_row + tl.arange(0, VB)[None, :]
        yraw = _load_x(y_ptr + y_at, ym, STREAM)
        yown = yraw.to(tl.float32)
        ypartner = _flat_partner(y_ptr, y_row, y_at, yraw, yown, ybm, ym, d, d0, rot, b, t, wblk, syb, syt, D, R2,
                                 INTERLEAVED, VB, NBP, SV, STREAM, WORDS, DT)
    # the element tables: cos and the signed sin of each element's pair (1 and 0 on the copied tail)
    if PAIRED:  # one table, each column's cos and signed sin side by side, from float 2 d0 on (16-byte aligned:
        # d0 is a multiple of DU >= 2); loaded as two (NBP, VB) halves, each deinterleaved in registers (a single
        # (NBP, 2 VB) load took a layout of 4 floats a thread and went through shared memory to meet the blocks'
        # 8 elements a thread). Written out here, not in a helper: the call's blocks changed the sm_90 schedule.
        # Read without a mask: every block's position is a row of the table (a block past the end has t < T, an
        # invalid position row 0).
        cs_at = cos_ptr + (pos * (s_cs * CSV) + 2 * d0)[:, None] + tl.arange(0, VB)[None, :]
        c_lo, s_lo = tl.split(tl.reshape(tl.load(cs_at, eviction_policy="evict_last").to(tl.float32),
                                         (NBP, VB // 2, 2)))
        c_hi, s_hi = tl.split(tl.reshape(tl.load(cs_at + VB, eviction_policy="evict_last").to(tl.float32),
                                         (NBP, VB // 2, 2)))
        c = tl.reshape(tl.permute(tl.join(c_lo, c_hi), (0, 2, 1)), (NBP, VB))
        s = tl.reshape(tl.permute(tl.join(s_lo, s_hi), (0, 2, 1)), (NBP, VB))
        if HAS_POS:
            c = tl.where(valid[:, None], c, float("nan"))
            s = tl.where(valid[:, None], s, float("nan"))
        if INVERSE:
            s = _negate(s, FOLD)
    else:  # split tables (columns computed above)
        c, s = _cos_sin(cos_ptr, sin_ptr, (pos * (s_cs * CSV))[:, None], col, m, valid, HAS_POS, INVERSE, FOLD)
    _flat_store(o_ptr + o_at, own, partner, c, s, rot, m, D, R2, DT, LOW, EMULATE, FOLD)
    if JOINT:
        oy_at = ((b * soyb + t * soyt) * SV + w0)[:, None] + tl.arange(0, VB)[None, :]
        _flat_store(oy_ptr + oy_at, yown, ypartner, c, s, rot, ym, D, R2, DT, LOW, EMULATE, FOLD)


@triton.jit
def _flat_store(o_ptrs, own, partner, c, s, rot, m, D: tl.constexpr, R2: tl.constexpr, DT: tl.constexpr,
                LOW: tl.constexpr, EMULATE: tl.constexpr, FOLD: tl.constexpr):
    """Each element rotated against its partner (the first output of :func:`_rotate_pairs`: own c + partner s')
    and stored; a copied tail passes through."""
    y, _ = _rotate_pairs(own, partner, c, s, DT, LOW, EMULATE, FOLD)
    # Without a tail the select is a no-op, and dropping it changes only the sm_90 schedule: at R2 = 6 mod 8 that
    # ran 2-3.5 points of copy bandwidth faster on the H100, at an odd R2 2.5-5 points slower (an A/B on one
    # machine, docs/results/bench_h100_s12/call10), so odd halves keep it.
    if 2 * R2 < D or R2 % 2 == 1:
        y = tl.where(rot, y, own)
    tl.store(o_ptrs, _narrow(y, DT, EMULATE), mask=m)


@triton.jit
def _flat_partner(x_ptr, x_row, x_at, raw, own, bm, m, d, d0, rot, b, t, wblk, sxb, sxt, D: tl.constexpr,
                  R2: tl.constexpr, INTERLEAVED: tl.constexpr, VB: tl.constexpr, NBP: tl.constexpr,
                  SV: tl.constexpr, STREAM: tl.constexpr, WORDS: tl.constexpr, DT: tl.constexpr):
    """Each element's partner in float32 (:func:`_rotate_flat`): d ^ 1 interleaved (a swap in registers), else
    d +- R2, read again from L1 (a vector where R2 is a multiple of VB, else two aligned vectors shifted in
    registers or read as int32 words)."""
    if INTERLEAVED:
        ev, od = tl.split(tl.reshape(own, (NBP, VB // 2, 2)))
        partner = tl.reshape(tl.join(od, ev), (NBP, VB))
    elif R2 % VB == 0:  # the partners' runs are aligned blocks: plain vector loads
        first = d < R2
        up = _load_x(x_ptr + x_at + R2, m & first, STREAM).to(tl.float32)
        down = _load_x(x_ptr + x_at - R2, m & rot & (d >= R2), STREAM).to(tl.float32)
        partner = tl.where(first, up, down)
    else:  # misaligned by R2 % VB: aligned blocks shifted in registers (a load at the partner's own
        # alignment is 2 or 4 bytes wide: 8 or 4 load instructions a block instead of 2). Which of the four
        # a block needs, from its lanes in the first half ([-d0, R2 - d0): partner R2 on) and in the second
        # ([R2 - d0, 2 R2 - d0): R2 back), and the same D on for a block crossing into the next row.
        SU: tl.constexpr = VB - R2 % VB  # the up run's lanes from the lower aligned block: [0, SU)
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
        if WORDS and DT.primitive_bitwidth == 16:
            xw_row = ((b * sxb + t * sxt) * (SV // 2) + wblk * (VB // 2))[:, None]
            ulo, uhi = _run_words(x_ptr, xw_row, R2, bm & up_lo, bm & up_hi, STREAM, VB, NBP)
            dlo, dhi = _run_words(x_ptr, xw_row, -R2, bm & dn_lo, bm & dn_hi, STREAM, VB, NBP)
            partner = _word_partners(ulo, uhi, dlo, dhi, d < R2, R2 % VB, (-R2) % VB, VB // 2, NBP, DT)
        else:
            up = _shifted_run(x_ptr, x_row, raw, R2, bm & up_lo, bm & up_hi, STREAM, VB, NBP).to(tl.float32)
            down = _shifted_run(x_ptr, x_row, raw, -R2, bm & dn_lo, bm & dn_hi, STREAM, VB, NBP).to(tl.float32)
            partner = tl.where(d < R2, up, down)
    return partner


@triton.jit(do_not_specialize=["oo", "NR", "T", "mT", "pT", "H", "mH", "pH"])
def copy_heads_kernel(
    x_ptr, o_ptr, sxb, sxt, sxh, sxd, sob, sot, soh, sod, oo, NR, T, mT, pT, H, mH, pH,
    VP: tl.constexpr, MP: tl.constexpr, NCP: tl.constexpr, SV: tl.constexpr, WIDE: tl.constexpr,
):
    """Copy a (B, T, H, D) tensor of any strides into the rows at ``o_ptr + oo * SV`` (a slice of one
    buffer, its own strides), rows of D = MP VP elements in chunks of VP, NCP chunks a program.

    Why: the fused-qkv backward puts v's gradient beside dq and dk in d qkv. That gradient comes from
    the attention heads-major ((B, H, T, D) in memory), so the copy transposes; Inductor's copy of it
    ran at 0.9 TB/s on the H100 (22 us a layer of the seed004 step, against 12 us for the rotation of
    dq and dk together). Written through the whole buffer with an offset, like the rotation's
    OUT_SHARED, so that under torch.compile no view of d qkv is a mutated argument."""
    _copy_chunks(
        x_ptr, o_ptr + tl.cast(oo, tl.int64) * SV, sxb, sxt, sxh, sxd, sob, sot, soh, sod, tl.program_id(0) * NCP,
        NR, T, mT, pT, H, mH, pH, 0, VP, MP, NCP, SV, WIDE, False,
    )  # fmt: skip


@triton.jit
def copy_heads_kernel_static(
    x_ptr, o_ptr, sxb: tl.constexpr, sxt: tl.constexpr, sxh: tl.constexpr, sxd: tl.constexpr, sob: tl.constexpr,
    sot: tl.constexpr, soh: tl.constexpr, sod: tl.constexpr, oo: tl.constexpr, NR: tl.constexpr, T: tl.constexpr,
    mT: tl.constexpr, pT: tl.constexpr, H: tl.constexpr, mH: tl.constexpr, pH: tl.constexpr,
    VP: tl.constexpr, MP: tl.constexpr, NCP: tl.constexpr, SV: tl.constexpr, WIDE: tl.constexpr,
):
    """:func:`copy_heads_kernel` with every shape and stride a compile-time constant, for ``torch.compile``
    (see :func:`rope_kernel_static`)."""
    _copy_chunks(
        x_ptr, o_ptr + tl.cast(oo, tl.int64) * SV, sxb, sxt, sxh, sxd, sob, sot, soh, sod, tl.program_id(0) * NCP,
        NR, T, mT, pT, H, mH, pH, 0, VP, MP, NCP, SV, WIDE, False,
    )  # fmt: skip


@triton.jit
def _rope_program(
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
    WIDE: tl.constexpr = True, STREAM: tl.constexpr = False, FLAT: tl.constexpr = False, VB: tl.constexpr = 8,
    NBP: tl.constexpr = 1, PAIRED: tl.constexpr = False, WORDS: tl.constexpr = False, JOINT: tl.constexpr = False,
    KIN: tl.constexpr = 0,
):
    """Program i < NPQ rotates q's rows [i*BR, (i+1)*BR) (CHUNKED: chunks [i*NCH, (i+1)*NCH)), the
    others k's: q and k in one launch. CHUNKED with a pass-through tail: programs from NPR on copy the
    tails, q's (NPPQ programs) then k's. OUT_SHARED: k's outputs live in q's output buffer, ``ook * SV``
    elements in (the slices of one d qkv), and ``ok_ptr`` is not used, so the kernel writes through one
    tensor argument only (under torch.compile two mutated views of one buffer are cloned and copied back).
    FLAT: programs rotate NBP blocks of VB elements (:func:`_rotate_flat`); NRQ/NRK count blocks and HQ/HK
    (with their magic pairs) are the blocks of one token; JOINT (HK <= HQ): q's programs rotate k's blocks of
    the same tokens too, and there are no k programs. KIN > 0: k's rows start ``KIN * SV`` elements after q's (the
    slices of one qkv projection) and ``k_ptr`` is not used (None), so the launch hands over the projection alone."""
    i = tl.program_id(0)
    # Odd halves in a joint launch, float32 arithmetic: the rotation's signs where the fma absorbs them
    # (_rotate_pairs), in both of the launch's flat programs (the code of either changes the compiler's schedule
    # of the other). Measured faster there only: in programs apart (D = 18 ... 50) it ran up to 1.5 points slower
    # (session 33). The bf16/fp16 arithmetic (LOW) was not measured with it, so it keeps its code.
    FOLD: tl.constexpr = FLAT and JOINT and R2 % 2 == 1 and not INTERLEAVED and not LOW
    if OUT_SHARED:
        ok_ptr = oq_ptr + tl.cast(ook, tl.int64) * SV
    if KIN > 0:
        k_ptr = q_ptr + tl.cast(KIN, tl.int64) * SV
    if FLAT:
        if i < NPQ:
            _rotate_flat(
                q_ptr, oq_ptr, sqb, sqt, soqb, soqt, cos_ptr, sin_ptr, pos_ptr, spb, spt, s_cs, NPOS,
                i * NBP, NRQ, T, mT, pT, HQ, mHQ, pHQ, 2 * R2 + PASS, R2, CW, INTERLEAVED, VB, NBP, SV, CSV,
                HAS_POS, LOW, INVERSE, EMULATE, WIDE, STREAM, PAIRED, WORDS,
                k_ptr, ok_ptr, skb, skt, sokb, sokt, HK, JOINT, FOLD,
            )  # fmt: skip
        else:
            _rotate_flat(
                k_ptr, ok_ptr, skb, skt, sokb, sokt, cos_ptr, sin_ptr, pos_ptr, spb, spt, s_cs, NPOS,
                (i - NPQ) * NBP, NRK, T, mT, pT, HK, mHK, pHK, 2 * R2 + PASS, R2, CW, INTERLEAVED, VB, NBP, SV, CSV,
                HAS_POS, LOW, INVERSE, EMULATE, WIDE, STREAM, PAIRED, WORDS,
                k_ptr, ok_ptr, skb, skt, sokb, sokt, HK, False, FOLD,
            )  # fmt: skip
    elif CHUNKED and PASS > 0 and i >= NPR:  # a constexpr test first: no copy code without a tail
        if PASS > 0:
            if i - NPR < NPPQ:
                _copy_chunks(
                    q_ptr, oq_ptr, sqb, sqt, sqh, sqd, soqb, soqt, soqh, soqd, (i - NPR) * NCP, NRQ,
                    T, mT, pT, HQ, mHQ, pHQ, 2 * R2, VP, MP, NCP, SV, WIDE, STREAM,
                )  # fmt: skip
            else:
                _copy_chunks(
                    k_ptr, ok_ptr, skb, skt, skh, skd, sokb, sokt, sokh, sokd, (i - NPR - NPPQ) * NCP, NRK,
                    T, mT, pT, HK, mHK, pHK, 2 * R2, VP, MP, NCP, SV, WIDE, STREAM,
                )  # fmt: skip
    elif CHUNKED:
        if i < NPQ:
            _rotate_chunks(
                q_ptr, oq_ptr, sqb, sqt, sqh, sqd, soqb, soqt, soqh, soqd, cos_ptr, sin_ptr, pos_ptr, spb, spt,
                s_cs, NPOS, i * NCH, NRQ, T, mT, pT, HQ, mHQ, pHQ, R2, CW, INTERLEAVED, V, M, NCH, SV, CSV,
                HAS_POS, LOW, INVERSE, EMULATE, WIDE, STREAM,
            )  # fmt: skip
        else:
            _rotate_chunks(
                k_ptr, ok_ptr, skb, skt, skh, skd, sokb, sokt, sokh, sokd, cos_ptr, sin_ptr, pos_ptr, spb, spt,
                s_cs, NPOS, (i - NPQ) * NCH, NRK, T, mT, pT, HK, mHK, pHK, R2, CW, INTERLEAVED, V, M, NCH, SV, CSV,
                HAS_POS, LOW, INVERSE, EMULATE, WIDE, STREAM,
            )  # fmt: skip
    elif i < NPQ:
        _rotate_rows(
            q_ptr, oq_ptr, sqb, sqt, sqh, sqd, soqb, soqt, soqh, soqd, cos_ptr, sin_ptr, pos_ptr, spb, spt, s_cs,
            NPOS, i * BR, NRQ, T, mT, pT, HQ, mHQ, pHQ, R2, CW, PASS, INTERLEAVED, HP, PP, SV, CSV, BR,
            HAS_POS, LOW, INVERSE, EMULATE, WIDE, STREAM,
        )  # fmt: skip
    else:
        _rotate_rows(
            k_ptr, ok_ptr, skb, skt, skh, skd, sokb, sokt, sokh, sokd, cos_ptr, sin_ptr, pos_ptr, spb, spt, s_cs,
            NPOS, (i - NPQ) * BR, NRK, T, mT, pT, HK, mHK, pHK, R2, CW, PASS, INTERLEAVED, HP, PP, SV, CSV, BR,
            HAS_POS, LOW, INVERSE, EMULATE, WIDE, STREAM,
        )  # fmt: skip


# Sizes and counts do not change the generated code's vector widths: keep them out of the
# specialisation key so new shapes reuse the compiled kernel (strides stay in it; the row geometry
# R2/CW/PASS/HP/PP is constexpr).
@triton.jit(do_not_specialize=["spb", "spt", "NPOS", "T", "mT", "pT", "HQ", "mHQ", "pHQ", "HK", "mHK", "pHK",
                              "NRQ", "NRK", "NPQ", "NPR", "NPPQ"])
def rope_kernel(
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
    WIDE: tl.constexpr = True, STREAM: tl.constexpr = False, FLAT: tl.constexpr = False, VB: tl.constexpr = 8,
    NBP: tl.constexpr = 1, PAIRED: tl.constexpr = False, WORDS: tl.constexpr = False, JOINT: tl.constexpr = False,
):
    """The rotation (:func:`_rope_program`) with its shapes and strides as runtime arguments: one compiled kernel
    serves every shape of a row geometry (the eager launches)."""
    _rope_program(
        q_ptr, k_ptr, oq_ptr, ok_ptr, cos_ptr, sin_ptr, pos_ptr, sqb, sqt, sqh, sqd, skb, skt, skh, skd, soqb, soqt,
        soqh, soqd, sokb, sokt, sokh, sokd, spb, spt, s_cs, NPOS, ook, T, mT, pT, HQ, mHQ, pHQ, HK, mHK, pHK, NRQ,
        NRK, NPQ, NPR, NPPQ, R2, CW, PASS, INTERLEAVED, HP, PP, SV, CSV, BR, HAS_POS, LOW, INVERSE, EMULATE,
        CHUNKED, V, M, NCH, VP, MP, NCP, OUT_SHARED, WIDE, STREAM, FLAT, VB, NBP, PAIRED, WORDS, JOINT,
    )  # fmt: skip


@triton.jit
def rope_kernel_static(
    q_ptr, k_ptr, oq_ptr, ok_ptr, cos_ptr, sin_ptr, pos_ptr,
    sqb: tl.constexpr, sqt: tl.constexpr, sqh: tl.constexpr, sqd: tl.constexpr, skb: tl.constexpr, skt: tl.constexpr,
    skh: tl.constexpr, skd: tl.constexpr, soqb: tl.constexpr, soqt: tl.constexpr, soqh: tl.constexpr,
    soqd: tl.constexpr, sokb: tl.constexpr, sokt: tl.constexpr, sokh: tl.constexpr, sokd: tl.constexpr,
    spb: tl.constexpr, spt: tl.constexpr, s_cs: tl.constexpr, NPOS: tl.constexpr, ook: tl.constexpr, T: tl.constexpr,
    mT: tl.constexpr, pT: tl.constexpr, HQ: tl.constexpr, mHQ: tl.constexpr, pHQ: tl.constexpr, HK: tl.constexpr,
    mHK: tl.constexpr, pHK: tl.constexpr, NRQ: tl.constexpr, NRK: tl.constexpr, NPQ: tl.constexpr, NPR: tl.constexpr,
    NPPQ: tl.constexpr,
    R2: tl.constexpr, CW: tl.constexpr, PASS: tl.constexpr, INTERLEAVED: tl.constexpr,
    HP: tl.constexpr, PP: tl.constexpr, SV: tl.constexpr, CSV: tl.constexpr,
    BR: tl.constexpr, HAS_POS: tl.constexpr, LOW: tl.constexpr, INVERSE: tl.constexpr, EMULATE: tl.constexpr,
    CHUNKED: tl.constexpr = False, V: tl.constexpr = 1, M: tl.constexpr = 1, NCH: tl.constexpr = 1,
    VP: tl.constexpr = 1, MP: tl.constexpr = 1, NCP: tl.constexpr = 1, OUT_SHARED: tl.constexpr = False,
    WIDE: tl.constexpr = True, STREAM: tl.constexpr = False, FLAT: tl.constexpr = False, VB: tl.constexpr = 8,
    NBP: tl.constexpr = 1, PAIRED: tl.constexpr = False, WORDS: tl.constexpr = False, JOINT: tl.constexpr = False,
    KIN: tl.constexpr = 0,
):
    """The rotation (:func:`_rope_program`) with every shape and stride a compile-time constant: the kernel that
    ``torch.compile`` launches (static shapes), compiled per shape.

    Why: Inductor's launcher hands each runtime argument over one by one on every launch, and on the H100's host
    the compiled seed004 step waits on that host time while its forward is enqueued (docs/kernels.md, session 19);
    here the launch passes the tensors alone: the seven, or fewer where some are None (no positions, the shared
    output buffer's unused k slot, k read at KIN out of the qkv projection: the compiled forward hands over the
    projection, its two outputs and the tables, as Inductor's own fused rotation does; session 24)."""
    _rope_program(
        q_ptr, k_ptr, oq_ptr, ok_ptr, cos_ptr, sin_ptr, pos_ptr, sqb, sqt, sqh, sqd, skb, skt, skh, skd, soqb, soqt,
        soqh, soqd, sokb, sokt, sokh, sokd, spb, spt, s_cs, NPOS, ook, T, mT, pT, HQ, mHQ, pHQ, HK, mHK, pHK, NRQ,
        NRK, NPQ, NPR, NPPQ, R2, CW, PASS, INTERLEAVED, HP, PP, SV, CSV, BR, HAS_POS, LOW, INVERSE, EMULATE,
        CHUNKED, V, M, NCH, VP, MP, NCP, OUT_SHARED, WIDE, STREAM, FLAT, VB, NBP, PAIRED, WORDS, JOINT, KIN,
    )  # fmt: skip


# The fused-qkv backward's launch: the transposed rotation of dq and dk into d qkv and the copy of v's gradient
# beside them, one kernel (see :func:`rope_copy_kernel`).
@triton.jit(do_not_specialize=["spb", "spt", "NPOS", "T", "mT", "pT", "HQ", "mHQ", "pHQ", "HK", "mHK", "pHK",
                              "NRQ", "NRK", "NPQ", "NPR", "NPPQ", "NRV", "HV", "mHV", "pHV", "NPRO"])
def rope_copy_kernel(
    q_ptr, k_ptr, oq_ptr, ok_ptr, cos_ptr, sin_ptr, pos_ptr, v_ptr,
    sqb, sqt, sqh, sqd, skb, skt, skh, skd,
    soqb, soqt, soqh, soqd, sokb, sokt, sokh, sokd,
    spb, spt, s_cs, NPOS, ook,
    T, mT, pT, HQ, mHQ, pHQ, HK, mHK, pHK, NRQ, NRK, NPQ, NPR, NPPQ,
    svb, svt, svh, svd, sovb, sovt, sovh, sovd, oov, NRV, HV, mHV, pHV, NPRO,
    R2: tl.constexpr, CW: tl.constexpr, PASS: tl.constexpr, INTERLEAVED: tl.constexpr,
    HP: tl.constexpr, PP: tl.constexpr, SV: tl.constexpr, CSV: tl.constexpr,
    BR: tl.constexpr, HAS_POS: tl.constexpr, LOW: tl.constexpr, INVERSE: tl.constexpr, EMULATE: tl.constexpr,
    CHUNKED: tl.constexpr = False, V: tl.constexpr = 1, M: tl.constexpr = 1, NCH: tl.constexpr = 1,
    VP: tl.constexpr = 1, MP: tl.constexpr = 1, NCP: tl.constexpr = 1, OUT_SHARED: tl.constexpr = False,
    WIDE: tl.constexpr = True, STREAM: tl.constexpr = False, FLAT: tl.constexpr = False, VB: tl.constexpr = 8,
    NBP: tl.constexpr = 1, PAIRED: tl.constexpr = False, WORDS: tl.constexpr = False, JOINT: tl.constexpr = False,
    CVP: tl.constexpr = 1, CMP: tl.constexpr = 1, CNCP: tl.constexpr = 1, CSVV: tl.constexpr = 1,
    CWIDE: tl.constexpr = True,
):
    """:func:`rope_kernel`'s programs (the first NPRO), then programs copying v's gradient (B, T, HV, D, any
    strides, at ``v_ptr``) into its slice of the output buffer, ``oov * CSVV`` elements into ``oq_ptr`` with the
    strides ``sov*`` (as :func:`copy_heads_kernel`, CNCP chunks of CVP elements a program, CMP chunks a row).

    Why one launch: the fused-qkv backward launched the rotation and then the copy, two launches a layer; in the
    compiled seed004 step the copy ran at about half the copy bandwidth (a 19 MB kernel's start and tail) and each
    launch is host time in a step that is partly host-bound (docs/kernels.md, sessions 10 and 19)."""
    if tl.program_id(0) < NPRO:
        _rope_program(
            q_ptr, k_ptr, oq_ptr, ok_ptr, cos_ptr, sin_ptr, pos_ptr, sqb, sqt, sqh, sqd, skb, skt, skh, skd, soqb,
            soqt, soqh, soqd, sokb, sokt, sokh, sokd, spb, spt, s_cs, NPOS, ook, T, mT, pT, HQ, mHQ, pHQ, HK, mHK,
            pHK, NRQ, NRK, NPQ, NPR, NPPQ, R2, CW, PASS, INTERLEAVED, HP, PP, SV, CSV, BR, HAS_POS, LOW, INVERSE,
            EMULATE, CHUNKED, V, M, NCH, VP, MP, NCP, OUT_SHARED, WIDE, STREAM, FLAT, VB, NBP, PAIRED, WORDS, JOINT,
        )  # fmt: skip
    else:
        _copy_chunks(
            v_ptr, oq_ptr + tl.cast(oov, tl.int64) * CSVV, svb, svt, svh, svd, sovb, sovt, sovh, sovd,
            (tl.program_id(0) - NPRO) * CNCP, NRV, T, mT, pT, HV, mHV, pHV, 0, CVP, CMP, CNCP, CSVV, CWIDE, False,
        )  # fmt: skip


@triton.jit
def rope_copy_kernel_static(
    q_ptr, k_ptr, oq_ptr, ok_ptr, cos_ptr, sin_ptr, pos_ptr, v_ptr,
    sqb: tl.constexpr, sqt: tl.constexpr, sqh: tl.constexpr, sqd: tl.constexpr, skb: tl.constexpr, skt: tl.constexpr,
    skh: tl.constexpr, skd: tl.constexpr, soqb: tl.constexpr, soqt: tl.constexpr, soqh: tl.constexpr,
    soqd: tl.constexpr, sokb: tl.constexpr, sokt: tl.constexpr, sokh: tl.constexpr, sokd: tl.constexpr,
    spb: tl.constexpr, spt: tl.constexpr, s_cs: tl.constexpr, NPOS: tl.constexpr, ook: tl.constexpr, T: tl.constexpr,
    mT: tl.constexpr, pT: tl.constexpr, HQ: tl.constexpr, mHQ: tl.constexpr, pHQ: tl.constexpr, HK: tl.constexpr,
    mHK: tl.constexpr, pHK: tl.constexpr, NRQ: tl.constexpr, NRK: tl.constexpr, NPQ: tl.constexpr, NPR: tl.constexpr,
    NPPQ: tl.constexpr,
    svb: tl.constexpr, svt: tl.constexpr, svh: tl.constexpr, svd: tl.constexpr, sovb: tl.constexpr,
    sovt: tl.constexpr, sovh: tl.constexpr, sovd: tl.constexpr, oov: tl.constexpr, NRV: tl.constexpr,
    HV: tl.constexpr, mHV: tl.constexpr, pHV: tl.constexpr, NPRO: tl.constexpr,
    R2: tl.constexpr, CW: tl.constexpr, PASS: tl.constexpr, INTERLEAVED: tl.constexpr,
    HP: tl.constexpr, PP: tl.constexpr, SV: tl.constexpr, CSV: tl.constexpr,
    BR: tl.constexpr, HAS_POS: tl.constexpr, LOW: tl.constexpr, INVERSE: tl.constexpr, EMULATE: tl.constexpr,
    CHUNKED: tl.constexpr = False, V: tl.constexpr = 1, M: tl.constexpr = 1, NCH: tl.constexpr = 1,
    VP: tl.constexpr = 1, MP: tl.constexpr = 1, NCP: tl.constexpr = 1, OUT_SHARED: tl.constexpr = False,
    WIDE: tl.constexpr = True, STREAM: tl.constexpr = False, FLAT: tl.constexpr = False, VB: tl.constexpr = 8,
    NBP: tl.constexpr = 1, PAIRED: tl.constexpr = False, WORDS: tl.constexpr = False, JOINT: tl.constexpr = False,
    CVP: tl.constexpr = 1, CMP: tl.constexpr = 1, CNCP: tl.constexpr = 1, CSVV: tl.constexpr = 1,
    CWIDE: tl.constexpr = True,
):
    """:func:`rope_copy_kernel` with every shape and stride a compile-time constant, for ``torch.compile`` (see
    :func:`rope_kernel_static`)."""
    if tl.program_id(0) < NPRO:
        _rope_program(
            q_ptr, k_ptr, oq_ptr, ok_ptr, cos_ptr, sin_ptr, pos_ptr, sqb, sqt, sqh, sqd, skb, skt, skh, skd, soqb,
            soqt, soqh, soqd, sokb, sokt, sokh, sokd, spb, spt, s_cs, NPOS, ook, T, mT, pT, HQ, mHQ, pHQ, HK, mHK,
            pHK, NRQ, NRK, NPQ, NPR, NPPQ, R2, CW, PASS, INTERLEAVED, HP, PP, SV, CSV, BR, HAS_POS, LOW, INVERSE,
            EMULATE, CHUNKED, V, M, NCH, VP, MP, NCP, OUT_SHARED, WIDE, STREAM, FLAT, VB, NBP, PAIRED, WORDS, JOINT,
        )  # fmt: skip
    else:
        _copy_chunks(
            v_ptr, oq_ptr + tl.cast(oov, tl.int64) * CSVV, svb, svt, svh, svd, sovb, sovt, sovh, sovd,
            (tl.program_id(0) - NPRO) * CNCP, NRV, T, mT, pT, HV, mHV, pHV, 0, CVP, CMP, CNCP, CSVV, CWIDE, False,
        )  # fmt: skip
