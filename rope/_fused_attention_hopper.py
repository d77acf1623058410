"""The Hopper kernel of :func:`rope.attention_with_rope` for chunks of several queries (Gluon).

Private, imported on first use on a Hopper GPU (``rope.fused_attention`` decides when). Same contract as
:func:`rope._fused_attention_kernels.attend_split_kernel` without splits (rows query-major, queries rotated in
registers from the module's tables, a position outside the cache or the tables gives a NaN row), for
bfloat16/float16 at head dims 64 and 128.

Why a second kernel: with several queries of grouped-query attention the loop is bound by the tensor cores and
by instruction issue, not by the memory. Triton's ``tl`` runs every warp of a program through the same loads,
products and softmax; here the work is split by warps, as FlashAttention-3 does on Hopper: one warp loads key and
value tiles by TMA into a ring of shared-memory buffers, and two warpgroups of 64 query rows each take the tiles
from it, each issuing the next tile's score product asynchronously before the current tile's softmax. The loader
warp gives its registers to the two warpgroups (``setmaxnreg``), so a warpgroup holds its scores, output and
probabilities without spilling.

A program holds 128 rows (two warpgroups) of one key-value head over all its keys, one program per SM (its shared
memory and registers): the kernel is taken where the batch and heads alone give at least half the SMs a program,
so it never splits the keys.
"""

from __future__ import annotations

import functools

import torch
from triton.compiler.errors import CompilationError
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.errors import OutOfResources

#: Query rows per consumer warpgroup: one wgmma row block of four warps. A program holds two.
BLOCK_M = gl.constexpr(64)
#: Registers per thread: the two consumer warpgroups get ``CONSUMER_REGS``, the loader warp's group 24 (the
#: least), within ``MAX_REGS`` for the program's twelve warps (the register file holds one program per SM).
CONSUMER_REGS = gl.constexpr(232)
MAX_REGS = 168


#: What a Triton whose Gluon differs from the one this kernel is written for raises when it compiles or loads it
#: (a frontend error, an API it lacks, more shared memory or registers than it grants): the caller then takes the
#: tl kernel.
COMPILE_ERRORS = (CompilationError, AttributeError, TypeError, OutOfResources)

_GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


def cache_descriptor(cache: torch.Tensor, block_n: int) -> TensorDescriptor:
    """A TMA descriptor of a (B, H_kv, L, D) cache as (B * H_kv, L, D) in (1, block_n, D) blocks: keys past L read
    as zeros, so a tile that runs past the cache never multiplies stale memory."""
    B, H_kv, L, D = cache.shape
    block = [1, block_n, D]
    return TensorDescriptor(cache, [B * H_kv, L, D], [cache.stride(1), cache.stride(2), 1], block,
                            _smem_layout(cache.dtype, block_n, D))


@functools.cache
def _smem_layout(dtype: torch.dtype, block_n: int, D: int) -> gl.NVMMASharedLayout:
    """The shared-memory layout of a (1, block_n, D) tile, worked out once (a decode loop calls this per step)."""
    return gl.NVMMASharedLayout.get_default_for([1, block_n, D], _GL_DTYPES[dtype])


@gluon.jit
def _last_keys(POS, b, rows, stride_pb, stride_pt, T, cache_len, table_len, pos_start, HAS_POS: gl.constexpr,
               G: gl.constexpr):
    """For ``rows``: their query index, whether they exist, whether their position is valid, and the last key
    each sees (its position; -1 when invalid)."""
    t = rows // G
    row_ok = t < T
    if HAS_POS:
        pos = gl.load(POS + b * stride_pb + t * stride_pt, mask=row_ok, other=-1).to(gl.int32)
    else:
        pos = gl.where(row_ok, pos_start + t, -1)
    pos_ok = row_ok & (pos >= 0) & (pos < cache_len) & (pos < table_len)
    return t, row_ok, pos_ok, gl.where(pos_ok, pos, -1)


@gluon.jit
def _rotated_queries(Q, COS, SIN, POS, b, kv_head, rows, d, stride_qb, stride_qt, stride_qh, stride_pb, stride_pt,
                     stride_cos, T, cache_len, table_len, pos_start, G: gl.constexpr, D: gl.constexpr,
                     HALF: gl.constexpr, ROTARY: gl.constexpr, INTERLEAVED: gl.constexpr, ROTATE: gl.constexpr,
                     HAS_POS: gl.constexpr):
    """The float32 queries of ``rows``, rotated by their positions' table rows: element d pairs with its partner
    (d +- R/2, or d ^ 1 interleaved) and y = x cos + partner sin * sign, the module's formula; elements from
    ``ROTARY`` on pass through. Rows past the queries, or at an invalid position, rotate by row 0 (their output
    is not written, or is NaN)."""
    t, row_ok, pos_ok, last_key = _last_keys(POS, b, rows, stride_pb, stride_pt, T, cache_len, table_len,
                                             pos_start, HAS_POS, G)
    q_rows = Q + b * stride_qb + t.to(gl.int64) * stride_qt + (kv_head * G + rows % G) * stride_qh
    mask = row_ok[:, None] & (d < D)[None, :]
    x = gl.load(q_rows[:, None] + d[None, :], mask=mask, other=0.0).to(gl.float32)
    if ROTATE:
        if INTERLEAVED:
            partner = d ^ 1
            pair = d // 2
            sign = gl.where(d % 2 == 0, 1.0, -1.0)
        else:
            first = d < HALF
            partner = gl.where(first, d + HALF, d - HALF)
            pair = gl.where(first, d, d - HALF)
            sign = gl.where(first, 1.0, -1.0)
        rotated = d < ROTARY
        partner = gl.where(rotated, partner, d)
        pair = gl.where(rotated, pair, 0)
        x_partner = gl.load(q_rows[:, None] + partner[None, :], mask=mask, other=0.0).to(gl.float32)
        table = gl.where(pos_ok, last_key, 0).to(gl.int64)[:, None] * stride_cos + pair[None, :]
        table_mask = row_ok[:, None] & rotated[None, :]
        cos = gl.load(COS + table, mask=table_mask, other=1.0)
        sin = gl.load(SIN + table, mask=table_mask, other=0.0)
        x = x * cos + x_partner * (sin * sign[None, :])
    return x


@gluon.jit
def _rotated_halves(Q, COS, SIN, POS, b, kv_head, first_row, stride_qb, stride_qt, stride_qh, stride_pb, stride_pt,
                    stride_cos, T, cache_len, table_len, pos_start, G: gl.constexpr, HALF: gl.constexpr,
                    ROWS: gl.constexpr, HAS_POS: gl.constexpr):
    """``ROWS`` queries in the half layout with every element rotated, as their two halves:
    (x1 cos + x2 sin, x2 cos - x1 sin), the module's formula."""
    TPW: gl.constexpr = HALF // 8
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW, TPW], [4, 1], [1, 0])
    rows = first_row + gl.arange(0, ROWS, gl.SliceLayout(1, layout))
    j = gl.arange(0, HALF, gl.SliceLayout(0, layout))
    t, row_ok, pos_ok, last_key = _last_keys(POS, b, rows, stride_pb, stride_pt, T, cache_len, table_len,
                                             pos_start, HAS_POS, G)
    q_rows = Q + b * stride_qb + t.to(gl.int64) * stride_qt + (kv_head * G + rows % G) * stride_qh
    mask = row_ok[:, None] & (j < HALF)[None, :]
    x1 = gl.load(q_rows[:, None] + j[None, :], mask=mask, other=0.0).to(gl.float32)
    x2 = gl.load(q_rows[:, None] + (HALF + j)[None, :], mask=mask, other=0.0).to(gl.float32)
    table = gl.where(pos_ok, last_key, 0).to(gl.int64)[:, None] * stride_cos + j[None, :]
    cos = gl.load(COS + table, mask=mask, other=1.0)
    sin = gl.load(SIN + table, mask=mask, other=0.0)
    return x1 * cos + x2 * sin, x2 * cos - x1 * sin


@gluon.jit
def _key_range(a, NW: gl.constexpr, HAS_POS: gl.constexpr, G: gl.constexpr, BN: gl.constexpr):
    """The program's number of key tiles: up to the last key any of its 128 rows sees. Every partition works it
    out alike, so that they agree on the tiles they pass around."""
    (Q, COS, SIN, POS, OUT, k_desc, v_desc, q_smem, k_bufs, v_bufs, k_ready, v_ready, empty,
     stride_qb, stride_qt, stride_qh, stride_ob, stride_ot, stride_oh, stride_pb, stride_pt, stride_cos,
     T, H_KV, cache_len, table_len, pos_start, qk_scale) = a
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])
    rows = gl.program_id(0) * (2 * BLOCK_M) + gl.arange(0, 2 * BLOCK_M, layout)
    b = gl.program_id(1) // H_KV
    _, _, _, last_key = _last_keys(POS, b, rows, stride_pb, stride_pt, T, cache_len, table_len, pos_start,
                                   HAS_POS, G)
    return gl.cdiv(gl.max(last_key, axis=0) + 1, BN)


@gluon.jit
def _consumer(a, WG: gl.constexpr, G: gl.constexpr, D: gl.constexpr, HALF: gl.constexpr, ROTARY: gl.constexpr,
              INTERLEAVED: gl.constexpr, ROTATE: gl.constexpr, HAS_POS: gl.constexpr, BN: gl.constexpr,
              STAGES: gl.constexpr):
    """Warpgroup ``WG`` (0 or 1): rotate its 64 query rows into shared memory, then run the online softmax over
    the key tiles the loader hands it, and write its rows' output (or partial output and log-sum-exp)."""
    (Q, COS, SIN, POS, OUT, k_desc, v_desc, q_smem, k_bufs, v_bufs, k_ready, v_ready, empty,
     stride_qb, stride_qt, stride_qh, stride_ob, stride_ot, stride_oh, stride_pb, stride_pt, stride_cos,
     T, H_KV, cache_len, table_len, pos_start, qk_scale) = a
    NW: gl.constexpr = 4
    dt: gl.constexpr = k_desc.dtype
    TPW_D: gl.constexpr = D // 8
    io_l: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_D, TPW_D], [NW, 1], [1, 0])
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, BN, 16])
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, D, 16])
    p_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)
    row_l: gl.constexpr = gl.SliceLayout(1, io_l)

    bh = gl.program_id(1)
    b = (bh // H_KV).to(gl.int64)
    kv_head = bh % H_KV
    first_row = gl.program_id(0) * (2 * BLOCK_M) + WG * BLOCK_M
    qs = q_smem.index(WG)
    d = gl.arange(0, D, gl.SliceLayout(0, io_l))
    if ROTATE and not INTERLEAVED and ROTARY == D:
        # the half layout rotating every element: each half loaded whole (contiguous, so vectorised), no partner
        # gathered element by element; as many rows at a time as four warps cover once
        ROWS: gl.constexpr = 1024 // HALF
        for c in gl.static_range(BLOCK_M // ROWS):
            x1, x2 = _rotated_halves(Q, COS, SIN, POS, b, kv_head, first_row + c * ROWS, stride_qb, stride_qt,
                                     stride_qh, stride_pb, stride_pt, stride_cos, T, cache_len, table_len,
                                     pos_start, G, HALF, ROWS, HAS_POS)
            chunk = qs.slice(c * ROWS, ROWS)
            chunk.slice(0, HALF, dim=1).store(x1.to(dt))
            chunk.slice(HALF, HALF, dim=1).store(x2.to(dt))
    else:
        # a quarter of the rows at a time: a whole block's queries, partners and table rows in float32 at once
        # would not fit in the registers
        for c in gl.static_range(4):
            rows = first_row + c * (BLOCK_M // 4) + gl.arange(0, BLOCK_M // 4, row_l)
            x = _rotated_queries(Q, COS, SIN, POS, b, kv_head, rows, d, stride_qb, stride_qt, stride_qh, stride_pb,
                                 stride_pt, stride_cos, T, cache_len, table_len, pos_start, G, D, HALF, ROTARY,
                                 INTERLEAVED, ROTATE, HAS_POS)
            qs.slice(c * (BLOCK_M // 4), BLOCK_M // 4).store(x.to(dt))
    fence_async_shared()

    n_tiles = _key_range(a, NW, HAS_POS, G, BN)
    s_rows = first_row + gl.arange(0, BLOCK_M, gl.SliceLayout(1, mma_s))
    _, _, _, s_last = _last_keys(POS, b, s_rows, stride_pb, stride_pt, T, cache_len, table_len, pos_start,
                                 HAS_POS, G)
    # key tiles every row with a valid position sees whole: no causal mask there
    seen_by_all = gl.min(gl.where(s_last >= 0, s_last, 2147483646), axis=0) + 1
    bulk = gl.minimum(seen_by_all // BN, n_tiles)
    kcol = gl.arange(0, BN, gl.SliceLayout(0, mma_s))
    zero_s = gl.zeros([BLOCK_M, BN], gl.float32, mma_s)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, mma_s))
    l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, mma_s))
    acc = gl.zeros([BLOCK_M, D], gl.float32, mma_o)
    if n_tiles > 0:
        mbarrier.wait(k_ready.index(0), 0)
        s = warpgroup_mma(qs, k_bufs.index(0).reshape([BN, D]).permute((1, 0)), zero_s, use_acc=False)
        m_i, l_i, pp, alpha = _softmax_step(s, m_i, l_i, 0, bulk, kcol, s_last, qk_scale, dt, p_l)
        for j in range(1, n_tiles):
            st = j % STAGES
            prev = (j - 1) % STAGES
            mbarrier.wait(k_ready.index(st), (j // STAGES) & 1)
            k_t = k_bufs.index(st).reshape([BN, D]).permute((1, 0))
            s = warpgroup_mma(qs, k_t, zero_s, use_acc=False, is_async=True)
            mbarrier.wait(v_ready.index(prev), ((j - 1) // STAGES) & 1)
            acc = warpgroup_mma(pp, v_bufs.index(prev).reshape([BN, D]), acc, is_async=True)
            s = warpgroup_mma_wait(1, deps=(s, ))
            m_i, l_i, p_next, alpha = _softmax_step(s, m_i, l_i, j, bulk, kcol, s_last, qk_scale, dt, p_l)
            acc = warpgroup_mma_wait(0, deps=(acc, ))
            mbarrier.arrive(empty.index(prev), count=1)
            acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, mma_o))[:, None]
            pp = p_next
        last = (n_tiles - 1) % STAGES
        mbarrier.wait(v_ready.index(last), ((n_tiles - 1) // STAGES) & 1)
        acc = warpgroup_mma(pp, v_bufs.index(last).reshape([BN, D]), acc)
        mbarrier.arrive(empty.index(last), count=1)

    rows = first_row + gl.arange(0, BLOCK_M, row_l)
    t, row_ok, pos_ok, _ = _last_keys(POS, b, rows, stride_pb, stride_pt, T, cache_len, table_len, pos_start,
                                      HAS_POS, G)
    head = kv_head * G + rows % G
    io_mask = row_ok[:, None] & (d < D)[None, :]
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, mma_o))
    ok_o = gl.convert_layout(pos_ok, gl.SliceLayout(1, mma_o))
    out = acc / gl.where(l_o > 0, l_o, 1.0)[:, None]
    out = gl.where(ok_o[:, None], out, float("nan"))
    o_rows = OUT + b * stride_ob + t.to(gl.int64) * stride_ot + head * stride_oh
    gl.store(o_rows[:, None] + d[None, :], gl.convert_layout(out.to(dt), io_l), mask=io_mask)


@gluon.jit
def _softmax_step(s, m_i, l_i, j, bulk, kcol, last_key, qk_scale, dt: gl.constexpr, p_l: gl.constexpr):
    """One key tile of the online softmax (base 2): the new row maxima and sums, the tile's probabilities as the
    value product's operand, and the factor the output so far is rescaled by. Tiles from ``bulk`` on are masked
    causally; a row that has seen no key yet keeps its maximum at 0, so that nothing becomes NaN."""
    s = s * qk_scale
    if j >= bulk:
        s = gl.where((j * s.shape[1] + kcol)[None, :] <= last_key[:, None], s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1))
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp2(m_i - m_use)
    p = gl.exp2(s - m_use[:, None])
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return m_new, l_i, gl.convert_layout(p.to(dt), p_l), alpha


@gluon.jit
def _consumer1(a, G: gl.constexpr, D: gl.constexpr, HALF: gl.constexpr, ROTARY: gl.constexpr,
               INTERLEAVED: gl.constexpr, ROTATE: gl.constexpr, HAS_POS: gl.constexpr, BN: gl.constexpr,
               STAGES: gl.constexpr):
    _consumer(a, 1, G, D, HALF, ROTARY, INTERLEAVED, ROTATE, HAS_POS, BN, STAGES)


@gluon.jit
def _loader(a, G: gl.constexpr, D: gl.constexpr, HALF: gl.constexpr, ROTARY: gl.constexpr,
            INTERLEAVED: gl.constexpr, ROTATE: gl.constexpr, HAS_POS: gl.constexpr, BN: gl.constexpr,
            STAGES: gl.constexpr):
    """One warp: the program's key and value tiles into the ring, each stage once both warpgroups released it
    (TMA zero-fills keys past the cache's end)."""
    (Q, COS, SIN, POS, OUT, k_desc, v_desc, q_smem, k_bufs, v_bufs, k_ready, v_ready, empty,
     stride_qb, stride_qt, stride_qh, stride_ob, stride_ot, stride_oh, stride_pb, stride_pt, stride_cos,
     T, H_KV, cache_len, table_len, pos_start, qk_scale) = a
    bh = gl.program_id(1)
    n_tiles = _key_range(a, 1, HAS_POS, G, BN)
    for j in range(n_tiles):
        st = j % STAGES
        mbarrier.wait(empty.index(st), ((j // STAGES) & 1) ^ 1)
        key = j * BN
        mbarrier.expect(k_ready.index(st), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [bh, key, 0], k_ready.index(st), k_bufs.index(st))
        mbarrier.expect(v_ready.index(st), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [bh, key, 0], v_ready.index(st), v_bufs.index(st))


@gluon.jit(do_not_specialize=["pos_start"])
def attend_ws_kernel(
    Q, COS, SIN, POS, OUT, k_desc, v_desc,
    stride_qb, stride_qt, stride_qh, stride_ob, stride_ot, stride_oh, stride_pb, stride_pt, stride_cos,
    T, H_KV, cache_len, table_len, pos_start, qk_scale,
    G: gl.constexpr, D: gl.constexpr, HALF: gl.constexpr, ROTARY: gl.constexpr, INTERLEAVED: gl.constexpr,
    ROTATE: gl.constexpr, HAS_POS: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr,
):
    """Grid (blocks of 128 query rows, B * H_KV); ``k_desc``/``v_desc``: TMA descriptors of the caches
    as (B * H_KV, L, D) with (1, BN, D) blocks."""
    dt: gl.constexpr = k_desc.dtype
    q_smem = gl.allocate_shared_memory(dt, [2, BLOCK_M, D], gl.NVMMASharedLayout.get_default_for([BLOCK_M, D], dt))
    k_bufs = gl.allocate_shared_memory(dt, [STAGES, 1, BN, D], k_desc.layout)
    v_bufs = gl.allocate_shared_memory(dt, [STAGES, 1, BN, D], v_desc.layout)
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # released once both warpgroups are done with the stage
    a = (Q, COS, SIN, POS, OUT, k_desc, v_desc, q_smem, k_bufs, v_bufs, k_ready, v_ready, empty,
         stride_qb, stride_qt, stride_qh, stride_ob, stride_ot, stride_oh, stride_pb, stride_pt, stride_cos,
         T, H_KV, cache_len, table_len, pos_start, qk_scale)
    gl.warp_specialize([
        (_consumer, (a, 0, G, D, HALF, ROTARY, INTERLEAVED, ROTATE, HAS_POS, BN, STAGES)),
        (_consumer1, (a, G, D, HALF, ROTARY, INTERLEAVED, ROTATE, HAS_POS, BN, STAGES)),
        (_loader, (a, G, D, HALF, ROTARY, INTERLEAVED, ROTATE, HAS_POS, BN, STAGES)),
    ], [4, 1], [CONSUMER_REGS, 24])
