"""Triton kernels of :func:`rope.attention_with_rope`: causal attention over a KV cache whose queries are
rotated as they are loaded.

Private (the leading underscore keeps :func:`rope.registry.discover` from importing it): ``rope.fused_attention``
imports it on first use, so ``import rope`` works without triton.

Two kernels, as flash-decoding splits the work (the split count is a runtime argument: one compile per tiling,
whatever the cache length):

* :func:`attend_split_kernel`: one program per (block of query rows, batch row and key-value head, range of
  keys). A block's rows are the query heads that share the key-value head (grouped-query attention) times the
  queries, so each key and value row is read once for all of them. The program loads its queries, rotates them
  in registers by their positions' rows of the RoPE tables (with several queries of grouped-query attention,
  passing them through its own rows of the output, so that the score product reads them from shared memory), and
  runs an online softmax over its keys. With one split it writes the output; with several it writes its
  normalised partial output and log-sum-exp into one float32 buffer (every partial output, then every
  log-sum-exp: one allocation, and no views of it to make, per call).
* :func:`combine_splits_kernel`: one program per few (batch row, query, head) rows weighs the partial outputs
  by their log-sum-exps.

Why splits: a decode step has few (batch row, head) pairs; over a long cache one program each would leave
most of the GPU idle while they stream their keys. Splitting the keys gives every SM work.

A query at position p sees the keys 0 .. p (the cache holds its own key already). A position outside the
cache or the tables gives NaN rows: the host checks positions only where that is free (see the caller).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _load_rotated_queries(q_rows, row_ok, table_pos, COS, SIN, stride_cos, d, d_ok,
                          HALF: tl.constexpr, ROTARY: tl.constexpr, INTERLEAVED: tl.constexpr,
                          ROTATE: tl.constexpr):
    """The (BLOCK_M, BLOCK_D) float32 queries at ``q_rows`` (pointers to element 0 of each row), rotated by the
    table rows ``table_pos``: element d pairs with its partner (d +- R/2, or d ^ 1 interleaved) and
    y = x cos + partner sin * sign, the module's formula; elements from ``ROTARY`` on pass through."""
    mask = row_ok[:, None] & d_ok[None, :]
    x = tl.load(q_rows[:, None] + d[None, :], mask=mask, other=0.0).to(tl.float32)
    if ROTATE:
        if INTERLEAVED:
            partner = d ^ 1
            pair = d // 2
            sign = tl.where(d % 2 == 0, 1.0, -1.0)
        else:
            first = d < HALF
            partner = tl.where(first, d + HALF, d - HALF)
            pair = tl.where(first, d, d - HALF)
            sign = tl.where(first, 1.0, -1.0)
        rotated = d < ROTARY
        partner = tl.where(rotated, partner, d)
        pair = tl.where(rotated, pair, 0)
        x_partner = tl.load(q_rows[:, None] + partner[None, :], mask=mask, other=0.0).to(tl.float32)
        table = table_pos[:, None] * stride_cos + pair[None, :]
        table_mask = row_ok[:, None] & rotated[None, :]
        cos = tl.load(COS + table, mask=table_mask, other=1.0)
        sin = tl.load(SIN + table, mask=table_mask, other=0.0)
        x = x * cos + x_partner * (sin * sign[None, :])
    return x


@triton.jit
def _cast(x, dtype: tl.constexpr, ROUND_BF16: tl.constexpr):
    """``x.to(dtype)``; ``ROUND_BF16`` rounds float32 to bfloat16 to nearest even by hand first, as the GPU's
    conversion does: the interpreter's conversion truncates."""
    if ROUND_BF16:
        if dtype == tl.bfloat16:
            bits = x.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


@triton.jit
def _dot(a, b, acc, IEEE: tl.constexpr, F32: tl.constexpr):
    """``acc + a @ b`` (``acc`` None: ``a @ b``) in float32 (``IEEE``: no TF32) or in the tiles' 16-bit type with
    float32 sums; ``F32`` takes 16-bit tiles through float32 (exact products, the same sums): the interpreter's
    bfloat16 dot is wrong. (The kernels pass one flag, on under the interpreter with 16-bit inputs, as ``F32`` and
    ``ROUND_BF16``.)"""
    if F32:
        c = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    elif IEEE:
        c = tl.dot(a, b, acc, input_precision="ieee")
    else:
        c = tl.dot(a, b, acc)
    return c


@triton.jit
def _load_tile(ptrs, n_ok, d_ok, KEYS_FIRST: tl.constexpr, FULL: tl.constexpr, FULL_D: tl.constexpr):
    """A key tile (``KEYS_FIRST`` False: (BLOCK_D, BLOCK_N), K transposed) or value tile ((BLOCK_N, BLOCK_D));
    ``FULL``: every key of it exists, so only a padded head dim is masked (none where ``FULL_D``)."""
    if FULL and FULL_D:
        x = tl.load(ptrs)
    elif FULL and KEYS_FIRST:
        x = tl.load(ptrs, mask=d_ok[None, :], other=0.0)
    elif FULL:
        x = tl.load(ptrs, mask=d_ok[:, None], other=0.0)
    elif KEYS_FIRST:
        x = tl.load(ptrs, mask=n_ok[:, None] & d_ok[None, :], other=0.0)
    else:
        x = tl.load(ptrs, mask=n_ok[None, :] & d_ok[:, None], other=0.0)
    return x


@triton.jit
def _attend_tile(q, k_head, v_head, k_offs, v_offs, stride_kn, stride_vn, start, keys, hi, last_key, d_ok, qk_scale,
                 m_i, l_i, acc, FULL: tl.constexpr, FULL_D: tl.constexpr, IEEE: tl.constexpr, DOT_F32: tl.constexpr):
    """One key tile of the online softmax, the keys ``start + keys``: the scores against ``q``, the row maxima
    ``m_i`` (log2 units), ``l_i`` and ``acc`` rescaled to the new maxima and the tile's ``p @ v`` added; returns the
    new ``(m_i, l_i, acc)``. ``FULL``: every row sees every key of the tile, so no key needs masking and the scores
    stay finite; otherwise keys from ``hi`` on, or past a row's ``last_key``, score -inf.

    Why one function for both loops of :func:`attend_split_kernel`: the update is the same rule in both, and Triton
    inlines the call, so each loop compiles to what it was written out (the operations in the same order)."""
    if FULL:
        n_ok = keys  # not read: every key of the tile exists
    else:
        n = start + keys
        n_ok = n < hi
    at = tl.cast(start, tl.int64)
    k = _load_tile(k_head + at * stride_kn + k_offs, n_ok, d_ok, False, FULL, FULL_D)
    s = _dot(q, k, None, IEEE, DOT_F32)
    if FULL:
        # finite: every row sees every key of the tile; the scale (> 0) goes on the row maxima, and on the
        # scores inside the exponent, one multiply-add each
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s * qk_scale - m_new[:, None])
    else:
        s = tl.where(n_ok[None, :] & (n[None, :] <= last_key[:, None]), s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet stays at 0
        alpha = tl.math.exp2(m_i - m_use)
        p = tl.math.exp2(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    v = _load_tile(v_head + at * stride_vn + v_offs, n_ok, d_ok, True, FULL, FULL_D)
    acc = _dot(_cast(p, v_head.dtype.element_ty, DOT_F32), v, acc * alpha[:, None], IEEE, DOT_F32)
    return m_new, l_i, acc


@triton.jit(do_not_specialize=["pos_start"])
def attend_split_kernel(
    Q, K, V, COS, SIN, POS, OUT, PART,
    stride_qb, stride_qt, stride_qh,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_ot, stride_oh,
    stride_pb, stride_pt, stride_cos,
    T, H_KV, cache_len, table_len, pos_start, keys_per_split, qk_scale, n_splits,
    G: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, HALF: tl.constexpr, ROTARY: tl.constexpr,
    INTERLEAVED: tl.constexpr, ROTATE: tl.constexpr, HAS_POS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MANY_QUERIES: tl.constexpr, SPLIT: tl.constexpr,
    IEEE: tl.constexpr, DOT_F32: tl.constexpr,
):
    """Grid (query row blocks, B * H_KV, n_splits); ``SPLIT``: n_splits > 1 (partial results, combined after);
    ``MANY_QUERIES``: T > 1, the rows' positions differ.
    Rows are ordered query-major (row r: query r // G, head kv_head * G + r % G), so a block's rows have
    neighbouring positions and the causal bound cuts its keys."""
    block = tl.program_id(0)
    bh = tl.program_id(1)
    split = tl.program_id(2)
    b = (bh // H_KV).to(tl.int64)
    kv_head = (bh % H_KV).to(tl.int64)

    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    t = (rows // G).to(tl.int64)
    head = kv_head * G + (rows % G)
    row_ok = t < T
    if HAS_POS:
        pos = tl.load(POS + b * stride_pb + t * stride_pt, mask=row_ok, other=-1).to(tl.int64)
    else:
        pos = tl.where(row_ok, pos_start + t, -1)
    pos_ok = row_ok & (pos >= 0) & (pos < cache_len) & (pos < table_len)
    last_key = tl.where(pos_ok, pos, -1).to(tl.int32)  # the last key each row sees (-1: none; below L: 32 bits)
    table_pos = tl.where(pos_ok, pos, 0)

    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    q_rows = Q + b * stride_qb + t * stride_qt + head * stride_qh
    q = _load_rotated_queries(q_rows, row_ok, table_pos, COS, SIN, stride_cos, d, d_ok, HALF, ROTARY, INTERLEAVED,
                              ROTATE)
    q = _cast(q, K.dtype.element_ty, DOT_F32)  # rounded as the module rounds its rotated output
    if MANY_QUERIES and G > 1:
        # A computed operand of the score product is reloaded from shared memory into registers for every key
        # tile; a loaded one is read by the product from shared memory directly. So where the products bound the
        # loop (several query heads share each key tile) the block's rotated queries go through its own rows of
        # OUT (written again at the end; splits write the same values) and come back; with one query head a key
        # tile, the cache read bounds the loop and that round trip would only delay it.
        staged = OUT + b * stride_ob + t * stride_ot + head * stride_oh
        tl.store(staged[:, None] + d[None, :], q, mask=row_ok[:, None] & d_ok[None, :])
        tl.debug_barrier()  # every thread's rows are written before any thread reads the block back
        q = tl.load(staged[:, None] + d[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0)

    lo = split * keys_per_split
    hi = tl.minimum(lo + keys_per_split, tl.max(last_key, axis=0) + 1)
    keys = tl.arange(0, BLOCK_N)
    # the key-value head's rows, and a tile's offsets from its first key (K transposed: (BLOCK_D, BLOCK_N))
    k_head = K + b * stride_kb + kv_head * stride_kh
    v_head = V + b * stride_vb + kv_head * stride_vh
    k_offs = keys[None, :] * stride_kn + d[:, None]
    v_offs = keys[:, None] * stride_vn + d[None, :]
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    bulk_hi = lo
    if MANY_QUERIES:
        # Key tiles every row of the block sees whole (below the first key that a row with a position does not
        # see) need neither the causal mask nor the key bound: a loop of their own. A decode step's rows share one
        # position, so only its last tile is cut; there one loop holds fewer registers.
        seen_by_all = tl.min(tl.where(pos_ok, last_key, 2147483646), axis=0) + 1
        bulk_hi = lo + tl.maximum(tl.minimum(hi, seen_by_all) - lo, 0) // BLOCK_N * BLOCK_N
        for start in range(lo, bulk_hi, BLOCK_N):
            m_i, l_i, acc = _attend_tile(q, k_head, v_head, k_offs, v_offs, stride_kn, stride_vn, start, keys, hi,
                                         last_key, d_ok, qk_scale, m_i, l_i, acc, True, BLOCK_D == D, IEEE, DOT_F32)
    for start in range(bulk_hi, hi, BLOCK_N):  # tiles the causal diagonal or the split's end may cut
        m_i, l_i, acc = _attend_tile(q, k_head, v_head, k_offs, v_offs, stride_kn, stride_vn, start, keys, hi,
                                     last_key, d_ok, qk_scale, m_i, l_i, acc, False, BLOCK_D == D, IEEE, DOT_F32)

    store_mask = row_ok[:, None] & d_ok[None, :]
    if not SPLIT:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        out = tl.where(pos_ok[:, None], out, float("nan"))
        o_rows = OUT + b * stride_ob + t * stride_ot + head * stride_oh
        tl.store(o_rows[:, None] + d[None, :], _cast(out, OUT.dtype.element_ty, DOT_F32), mask=store_mask)
    else:
        seen = (l_i > 0) & pos_ok  # a row without a valid position saw no key (the bulk loop ran it anyway)
        out = acc / tl.where(seen, l_i, 1.0)[:, None]
        lse = tl.where(seen, m_i + tl.math.log2(tl.where(seen, l_i, 1.0)), float("-inf"))
        part = ((b * T + t) * (H_KV * G) + head) * n_splits + split
        tl.store(PART + part[:, None] * D + d[None, :], out, mask=store_mask)
        n_parts = (tl.num_programs(1) // H_KV).to(tl.int64) * T * (H_KV * G) * n_splits  # B T H n_splits
        tl.store(PART + n_parts * D + part, lse, mask=row_ok)


@triton.jit
def combine_splits_kernel(
    PART, OUT,
    stride_ob, stride_ot, stride_oh,
    T, H, n_splits, n_rows,
    D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, ROWS: tl.constexpr, ROUND_BF16: tl.constexpr,
):
    """Grid (cdiv(n_rows, ROWS),), n_rows = B * T * H: ``ROWS`` (batch row, query, head) rows each. A row's partial
    outputs weighted by exp2 of their log-sum-exps less the largest: a split that saw no key weighs 0; a row that
    saw none (a position outside the cache or the tables) comes out NaN."""
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_ok = row < n_rows
    h = row % H
    t = (row // H) % T
    b = row // (H * T)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    split_ok = row_ok[:, None] & (s < n_splits)[None, :]
    d_ok = d < D
    lse = tl.load(PART + n_rows * n_splits * D + row[:, None] * n_splits + s[None, :], mask=split_ok,
                  other=float("-inf"))  # after the B T H n_splits partial outputs
    parts = (row[:, None] * n_splits + s[None, :]) * D
    part = tl.load(PART + parts[:, :, None] + d[None, None, :], mask=split_ok[:, :, None] & d_ok[None, None, :],
                   other=0.0)
    weight = tl.where(split_ok, tl.math.exp2(lse - tl.max(lse, axis=1)[:, None]), 0.0)
    out = tl.sum(part * weight[:, :, None], axis=1) / tl.sum(weight, axis=1)[:, None]
    o_rows = OUT + b * stride_ob + t * stride_ot + h * stride_oh
    tl.store(o_rows[:, None] + d[None, :], _cast(out, OUT.dtype.element_ty, ROUND_BF16),
             mask=row_ok[:, None] & d_ok[None, :])
