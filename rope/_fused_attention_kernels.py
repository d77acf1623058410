"""Triton kernels of :func:`rope.attention_with_rope`: causal attention over a KV cache whose queries are
rotated as they are loaded.

Private (the leading underscore keeps :func:`rope.registry.discover` from importing it): ``rope.fused_attention``
imports it on first use, so ``import rope`` works without triton.

Two kernels, as flash-decoding splits the work (the split count is a runtime argument: one compile per tiling,
whatever the cache length):

* :func:`attend_split_kernel`: one program per (block of query rows, batch row and key-value head, range of
  keys). A block's rows are the query heads that share the key-value head (grouped-query attention) times the
  queries, so each key and value row is read once for all of them. The program loads its queries, rotates them
  in registers by their positions' rows of the RoPE tables, and runs an online softmax over its keys (the tiles
  every row sees whole without masks, then the rest). With one split it writes the output; with several it
  writes its normalised partial output and log-sum-exp, and (inline combine, a decode step's few rows) counts
  itself in: the last program of the row block to arrive combines the block's partial results.
* :func:`combine_splits_kernel`: one program per (batch row, query, head) weighs the partial outputs by their
  log-sum-exps (the second launch, for blocks of many rows).

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
def _dot(a, b, IEEE: tl.constexpr, F32: tl.constexpr):
    """``tl.dot`` in float32 (``IEEE``: no TF32) or in the tiles' 16-bit type with float32 sums; ``F32`` takes
    16-bit tiles through float32 (exact products, the same sums): the interpreter's bfloat16 dot is wrong.
    (The kernels pass one flag, on under the interpreter with 16-bit inputs, as ``F32`` and ``ROUND_BF16``.)"""
    if F32:
        c = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    elif IEEE:
        c = tl.dot(a, b, input_precision="ieee")
    else:
        c = tl.dot(a, b)
    return c


@triton.jit
def _attend_tile(q, k_ptrs, v_ptrs, m_i, l_i, acc, n, key_ok, last_key, qk_scale, MASKED: tl.constexpr,
                 IEEE: tl.constexpr, DOT_F32: tl.constexpr, d_ok):
    """One key tile of the online softmax: ``MASKED`` tiles hold keys past the split's end or past a row's
    position (their loads and scores masked); the others are wholly visible to every row, and load and score
    without a mask (most of a long cache)."""
    if MASKED:
        k = tl.load(k_ptrs, mask=key_ok[None, :] & d_ok[:, None], other=0.0)
        s = _dot(q, k, IEEE, DOT_F32)
        s = tl.where(key_ok[None, :] & (n[None, :] <= last_key[:, None]), s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet stays at 0
        v = tl.load(v_ptrs, mask=key_ok[:, None] & d_ok[None, :], other=0.0)
    else:
        k = tl.load(k_ptrs, mask=d_ok[:, None], other=0.0)
        s = _dot(q, k, IEEE, DOT_F32) * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = m_new
        v = tl.load(v_ptrs, mask=d_ok[None, :], other=0.0)
    alpha = tl.math.exp2(m_i - m_use)
    p = tl.math.exp2(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + _dot(_cast(p, v.dtype, DOT_F32), v, IEEE, DOT_F32)
    return m_new, l_i, acc


@triton.jit
def _combine_row(PART, LSE, row, n_splits, s, s_ok, d, d_ok, D: tl.constexpr, EVICT: tl.constexpr):
    """The output row ``row`` (its index among (batch row, query, head)) from its splits' partial outputs, weighed
    by exp2 of their log-sum-exps less the largest: a split that saw no key weighs 0; a row that saw none (a
    position outside the cache or the tables) comes out NaN. ``EVICT``: read past the L1 (the partial results of
    other programs, written after this program started)."""
    if EVICT:
        lse = tl.load(LSE + row * n_splits + s, mask=s_ok, other=float("-inf"), cache_modifier=".cg")
        part = tl.load(PART + (row * n_splits + s)[:, None] * D + d[None, :],
                       mask=s_ok[:, None] & d_ok[None, :], other=0.0, cache_modifier=".cg")
    else:
        lse = tl.load(LSE + row * n_splits + s, mask=s_ok, other=float("-inf"))
        part = tl.load(PART + (row * n_splits + s)[:, None] * D + d[None, :],
                       mask=s_ok[:, None] & d_ok[None, :], other=0.0)
    weight = tl.math.exp2(lse - tl.max(lse, axis=0))
    weight = tl.where(s_ok, weight, 0.0)
    return tl.sum(part * weight[:, None], axis=0) / tl.sum(weight, axis=0)


@triton.jit(do_not_specialize=["pos_start"])
def attend_split_kernel(
    Q, K, V, COS, SIN, POS, OUT, PART, LSE, CNT,
    stride_qb, stride_qt, stride_qh,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_ot, stride_oh,
    stride_pb, stride_pt, stride_cos,
    T, H_KV, cache_len, table_len, pos_start, keys_per_split, qk_scale, n_splits,
    G: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, HALF: tl.constexpr, ROTARY: tl.constexpr,
    INTERLEAVED: tl.constexpr, ROTATE: tl.constexpr, HAS_POS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, INLINE: tl.constexpr, BLOCK_S: tl.constexpr,
    IEEE: tl.constexpr, DOT_F32: tl.constexpr,
):
    """Grid (query row blocks, B * H_KV, n_splits); ``SPLIT``: n_splits > 1 (partial results, combined after);
    ``INLINE``: the last of a row block's split programs to finish combines them (``CNT``: one arrival counter per
    row block, zero before and after; ``BLOCK_S``: n_splits to a power of two).
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

    lo = split * keys_per_split
    hi = tl.minimum(lo + keys_per_split, tl.max(last_key, axis=0) + 1)
    # the tiles every row of the block sees whole (up to the lowest position among its rows; none when a row is
    # out of range, so that it still sees no key), then the rest, masked
    seen_by_all = tl.min(tl.where(row_ok, last_key, 2147483647), axis=0) + 1
    bulk_end = lo + tl.maximum(tl.minimum(hi, seen_by_all) - lo, 0) // BLOCK_N * BLOCK_N
    keys = tl.arange(0, BLOCK_N)
    # pointers to the split's first key tile (K transposed: (BLOCK_D, BLOCK_N)), moved one tile per step
    k_ptrs = K + b * stride_kb + kv_head * stride_kh + lo.to(tl.int64) * stride_kn + (keys[None, :] * stride_kn
                                                                                      + d[:, None])
    v_ptrs = V + b * stride_vb + kv_head * stride_vh + lo.to(tl.int64) * stride_vn + (keys[:, None] * stride_vn
                                                                                      + d[None, :])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start in range(lo, bulk_end, BLOCK_N):
        m_i, l_i, acc = _attend_tile(q, k_ptrs, v_ptrs, m_i, l_i, acc, start + keys, keys < BLOCK_N, last_key,
                                     qk_scale, False, IEEE, DOT_F32, d_ok)
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    for start in range(bulk_end, hi, BLOCK_N):
        n = start + keys
        m_i, l_i, acc = _attend_tile(q, k_ptrs, v_ptrs, m_i, l_i, acc, n, n < hi, last_key, qk_scale, True, IEEE,
                                     DOT_F32, d_ok)
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn

    store_mask = row_ok[:, None] & d_ok[None, :]
    if not SPLIT:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        out = tl.where(pos_ok[:, None], out, float("nan"))
        o_rows = OUT + b * stride_ob + t * stride_ot + head * stride_oh
        tl.store(o_rows[:, None] + d[None, :], _cast(out, OUT.dtype.element_ty, DOT_F32), mask=store_mask)
    else:
        seen = l_i > 0
        out = acc / tl.where(seen, l_i, 1.0)[:, None]
        lse = tl.where(seen, m_i + tl.math.log2(tl.where(seen, l_i, 1.0)), float("-inf"))
        part = ((b * T + t) * (H_KV * G) + head) * n_splits + split
        tl.store(PART + part[:, None] * D + d[None, :], out, mask=store_mask)
        tl.store(LSE + part, lse, mask=row_ok)
        if INLINE:
            # every thread's partial results written before the count (release); the last to arrive reads the
            # others' after it (acquire), past the L1
            tl.debug_barrier()
            counter = CNT + bh * tl.num_programs(0) + block
            arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
            if arrived == n_splits - 1:
                tl.debug_barrier()
                s = tl.arange(0, BLOCK_S)
                s_ok = s < n_splits
                for i in range(0, tl.minimum(BLOCK_M, T * G - block * BLOCK_M)):
                    r = block * BLOCK_M + i
                    t_r = (r // G).to(tl.int64)
                    head_r = kv_head * G + r % G
                    out_r = _combine_row(PART, LSE, (b * T + t_r) * (H_KV * G) + head_r, n_splits, s, s_ok, d, d_ok,
                                         D, True)
                    tl.store(OUT + b * stride_ob + t_r * stride_ot + head_r * stride_oh + d,
                             _cast(out_r, OUT.dtype.element_ty, DOT_F32), mask=d_ok)
                tl.atomic_xchg(counter, 0)  # zero again for the next launch


@triton.jit
def combine_splits_kernel(
    PART, LSE, OUT,
    stride_ob, stride_ot, stride_oh,
    T, H, n_splits,
    D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, ROUND_BF16: tl.constexpr,
):
    """Grid (B * T * H,): one (batch row, query, head) each, combined by :func:`_combine_row`."""
    row = tl.program_id(0).to(tl.int64)
    h = row % H
    t = (row // H) % T
    b = row // (H * T)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    out = _combine_row(PART, LSE, row, n_splits, s, s < n_splits, d, d_ok, D, False)
    tl.store(OUT + b * stride_ob + t * stride_ot + h * stride_oh + d, _cast(out, OUT.dtype.element_ty, ROUND_BF16),
             mask=d_ok)
