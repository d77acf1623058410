"""``rope.attention_with_rope``: attention over a KV cache of rotated keys, rotating the queries as it loads them.

Why: a decode step (or a chunk of a prompt after a cache) rotates a few new queries and reads a long cache of
keys. Rotating the queries in a kernel of their own costs a launch and a round trip through memory per layer;
rotating the keys inside attention would redo it for every query block. The hybrid keeps each where it is
cheapest: keys are rotated once, by the RoPE module, as they enter the cache; queries are rotated in registers
by the attention kernel from the same module's cos/sin tables, so every variant, layout (``half`` /
``interleaved``), ``rotary_dim`` and scaling (YaRN's attention factor is folded into the tables) computes what
the module computes, and the ``none`` implementation rotates nothing. The queries' arithmetic is float32 whatever
the module's ``compute_dtype`` (a torch module of bfloat16 ``compute_dtype`` rotates the keys in bfloat16, the
kernel the queries in float32, as a kernel swap would).

The kernels (:mod:`rope._fused_attention_kernels`, imported on first use) split the keys over several programs
when the batch and heads alone would leave the GPU idle (flash-decoding), and combine the partial results in a
second launch. On a Hopper GPU, chunks of grouped queries whose batch fills the GPU go to a warp-specialised
kernel instead (:mod:`rope._fused_attention_hopper`, in Gluon). :mod:`rope._fused_attention_plan` decides which
kernel takes a call and how it is cut into programs; :func:`tuning` forces those launch settings (splits, tiles,
warps, stages) for the calls inside a block, for benchmarks that look for a better rule; :func:`launch_settings`
says what a call launches. Every argument is checked before any launch; a bad one raises
:class:`RopeArgumentError` naming it. Positions given as an int or a CPU tensor are range-checked; positions in GPU
memory are not (that check would wait for the GPU, and a captured CUDA graph cannot wait): a query at a position
outside the cache or the tables comes out as a NaN row, never as a silently wrong one. The one wait:
``scaling.type=dynamic_ntk`` reads the largest position to rebuild its tables for the current length, as the
module's own call does (so such a call cannot be captured).
"""

from __future__ import annotations

import functools
import math
import numbers
import warnings

import torch
from torch import Tensor

# The launch planning lives in rope._fused_attention_plan, which never imports this module. The Tuning class and
# the tuning block are re-exported: benchmarks and tests force launch settings through rope.fused_attention.tuning.
from rope._fused_attention_plan import (
    _TUNING,
    _combine_tiling,
    _hopper_kernels,
    _next_pow2,
    _Plan,
    _splits,
    _tl_plan,
    _tuning_now,
    _visible_keys,
)
from rope._fused_attention_plan import Tuning as Tuning
from rope._fused_attention_plan import tuning as tuning
from rope._launch import launch_hooks_unset, triton_runs_on
from rope.base import POSITION_DTYPES, RotaryEmbedding, on_device_of
from rope.checks import RopeArgumentError, describe_value

#: The longest query chunk the kernel takes: decode steps and chunked prefill. A longer prompt is a
#: full-length prefill, for which SDPA over the rotated q and k is the faster path.
MAX_QUERIES = 256

#: The widest head the kernels take, the limit flash-attention kernels share: a program holds rows of a head in
#: registers, and past 256 elements its tiles spill (a float32 chunk's compile then runs for minutes).
MAX_HEAD_DIM = 256

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: CUDA's limit on a launch grid's second axis, which holds batch x key-value heads.
_MAX_GRID_Y = 65535


def attention_with_rope(q: Tensor, k_cache: Tensor, v_cache: Tensor, positions: Tensor | int,
                        rotary: RotaryEmbedding, *, scale: float | None = None) -> Tensor:
    """Causal attention of un-rotated queries over a cache of rotated keys and values.

    Args:
        q: (B, T, H, D) queries, **not** rotated, T in 1..256 (a decode step, or a chunk of a prompt). Any
            strides with a contiguous last dim (such as the q view of a fused qkv projection).
        k_cache: (B, H_kv, L, D) keys, rotated by ``rotary`` at their positions (what the cache holds); H_kv
            divides H (grouped-query attention); the last dim contiguous. The keys of the queries themselves
            must already be in it.
        v_cache: (B, H_kv, L, D) values, the same shape.
        positions: the queries' absolute positions: an int ``start`` (the queries at ``start .. start + T - 1``
            in every row), or an integer tensor (T,) or (B, T). The query at position p attends to the keys
            0 .. p.
        rotary: the RoPE module the keys were rotated with (``rope.build(...)``); its cos/sin tables, layout,
            ``rotary_dim`` and scaling rotate the queries.
        scale: the softmax scale, default ``1 / sqrt(D)`` (SDPA's).

    Returns:
        (B, T, H, D) in q's dtype: what ``F.scaled_dot_product_attention`` gives for the queries rotated by
        ``rotary`` at ``positions`` over ``k_cache[:, :, :p + 1]``, transposed to q's layout.

    Works on CUDA tensors (or on the CPU under Triton's interpreter, ``TRITON_INTERPRET=1``), in float32,
    bfloat16 and float16; no autograd (a decoding op: training keeps SDPA).
    """
    start, plan = _check(q, k_cache, v_cache, positions, rotary, scale)
    _check_no_grad(q, k_cache, v_cache)
    return _launch(q, k_cache, v_cache, positions, start, rotary, plan)


def _check_no_grad(q: Tensor, k_cache: Tensor, v_cache: Tensor) -> None:
    """The op has no backward: an input that asks for gradients gets an error, not an output that silently has
    none (outside ``torch.no_grad()`` / ``inference_mode`` a decode call would otherwise drop them)."""
    if torch.is_grad_enabled():
        for name, x in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
            if x.requires_grad:
                raise RopeArgumentError(name, f"{name} requires grad, but attention_with_rope has no backward (a "
                                              "decoding op; training keeps SDPA): call it under torch.no_grad()")


def unavailable_reason(device: torch.device | str) -> str | None:
    """Why :func:`attention_with_rope` cannot run on ``device`` here (one line), or None when it can: it needs
    triton, and a CUDA device or the CPU under Triton's interpreter."""
    try:
        _kernels()
    except RuntimeError as exc:
        return str(exc)
    device = torch.device(device)
    if triton_runs_on(device):
        return None
    return (f"attention_with_rope is a Triton kernel: it runs on a CUDA GPU, or on the CPU under Triton's "
            f"interpreter (TRITON_INTERPRET=1 set before triton is imported, slow), not on {device.type}")


# -- checks ------------------------------------------------------------------------------------------
#: Signatures already checked, and their plans. Bounded: shapes that never repeat do not grow it forever.
_PLANS: dict[tuple, _Plan] = {}


def _check(q: Tensor, k_cache: Tensor, v_cache: Tensor, positions: Tensor | int, rotary: RotaryEmbedding,
           scale: float | None) -> tuple[int, _Plan]:
    """Every check of the arguments, before any launch: the plan of the call's signature, and the start
    position (for an int ``positions``; else 0). Raises :class:`RopeArgumentError` naming the argument."""
    if not isinstance(rotary, RotaryEmbedding):
        raise RopeArgumentError("rotary", "rotary must be the RoPE module the keys were rotated with "
                                          f"(rope.build(...)), got {type(rotary).__name__}")
    for name, x in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(x, Tensor):
            raise RopeArgumentError(name, f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if isinstance(positions, Tensor):
        pos_sig = (positions.shape, positions.stride(), positions.dtype, _device_key(positions))
    else:
        pos_sig = type(positions)
    # everything the checks and the plan read: shapes, strides, dtypes, devices, the module (its id, and what could
    # differ in a module built later at the same address), the scale (its type too: True equals 1 but is refused)
    key = (q.shape, q.stride(), q.dtype, _device_key(q), k_cache.shape, k_cache.stride(), k_cache.dtype,
           _device_key(k_cache), v_cache.shape, v_cache.stride(), v_cache.dtype, _device_key(v_cache), pos_sig,
           id(rotary), type(rotary), rotary.head_dim, rotary.layout, rotary.rotary_dim, rotary.max_seq_len,
           _device_key(rotary._cos_sin[0]), type(scale), scale, _TUNING.get())
    plan = _PLANS.get(key)
    if plan is None:
        plan = _check_signature(q, k_cache, v_cache, positions, rotary, scale)
        if len(_PLANS) > 256:
            _PLANS.clear()
        _PLANS[key] = plan
    return _check_position_values(positions, plan, k_cache.shape[2], rotary.max_seq_len), plan


def _device_key(x: Tensor) -> int | str:
    """A tensor's device in a plan's key: a CUDA tensor's index (cheap, on every decode step's path), else its
    device type (``get_device()`` is -1 for every device but CUDA: the CPU, meta and others would share plans)."""
    return x.get_device() if x.is_cuda else x.device.type


def _check_signature(q: Tensor, k_cache: Tensor, v_cache: Tensor, positions: Tensor | int,
                     rotary: RotaryEmbedding, scale: float | None) -> _Plan:
    if q.dim() != 4:
        raise RopeArgumentError("q", f"q must be (B, T, H, D) queries, got shape {tuple(q.shape)}")
    B, T, H, D = q.shape
    if q.dtype not in _DTYPES:
        raise RopeArgumentError("q", f"q must be float32, bfloat16 or float16, got {q.dtype}")
    if not 1 <= T <= MAX_QUERIES:
        raise RopeArgumentError("q", f"q has {T} queries (q.shape[1]); attention_with_rope takes 1..{MAX_QUERIES} "
                                     "(a decode step or a prompt chunk; a longer prefill is SDPA's)")
    if B == 0 or H == 0:
        raise RopeArgumentError("q", f"q must have at least one batch row and head, got shape {tuple(q.shape)}")
    if D != rotary.head_dim:
        raise RopeArgumentError("q", f"q has head dim {D}; rotary was built for head_dim={rotary.head_dim}")
    if D > MAX_HEAD_DIM:
        raise RopeArgumentError("q", f"q has head dim {D}; attention_with_rope takes head dims up to {MAX_HEAD_DIM}, "
                                     "as flash-attention kernels do; attend with SDPA over the rotated queries instead")
    if q.stride(-1) != 1:
        raise RopeArgumentError("q", f"q must be contiguous in its last dim (head_dim), got strides {q.stride()}")
    if not triton_runs_on(q.device):
        raise RopeArgumentError("q", f"q is on {q.device}: attention_with_rope is a Triton kernel and needs CUDA "
                                     "tensors (or TRITON_INTERPRET=1 set before triton is imported, on the CPU)")
    _check_cache_shapes(q, k_cache, v_cache)
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if cache.dtype != q.dtype:
            raise RopeArgumentError(name, f"{name} is {cache.dtype} but q is {q.dtype}: the cache must hold q's dtype")
        if cache.device != q.device:
            raise RopeArgumentError(name, f"{name} is on {cache.device} but q is on {q.device}")
        if cache.stride(-1) != 1:
            raise RopeArgumentError(name, f"{name} must be contiguous in its last dim (head_dim), got strides "
                                          f"{cache.stride()}")
    if isinstance(positions, Tensor):
        if positions.dtype not in POSITION_DTYPES:
            raise RopeArgumentError("positions", f"positions must be an integer tensor of dtype "
                                                 f"{' / '.join(map(str, POSITION_DTYPES))}, got {positions.dtype}")
        # positions for as many queries as q has heads, whose dim 1 the caches' heads divide: q in (B, H, T, D)
        if positions.shape not in ((T,), (B, T)) and positions.shape in ((H,), (B, H)) and T % k_cache.shape[1] == 0:
            raise RopeArgumentError("q", f"q {tuple(q.shape)} has T={T} queries (dim 1), but positions "
                                         f"{tuple(positions.shape)} give {H}, q's heads (dim 2): {_LAYOUTS}; "
                                         f"{_TRANSPOSED_Q}")
        if positions.shape not in ((T,), (B, T)):
            raise RopeArgumentError("positions", f"positions must have shape (T,)=({T},) or (B, T)=({B}, {T}), got "
                                                 f"{tuple(positions.shape)}")
        if positions.device != q.device:
            raise RopeArgumentError("positions", f"positions are on {positions.device} but q is on {q.device}")
    elif not isinstance(positions, numbers.Integral) or isinstance(positions, bool):
        raise RopeArgumentError("positions", "positions must be an int (the first query's position) or an integer "
                                             f"tensor (T,) or (B, T), got {type(positions).__name__}")
    if rotary.cos.device != q.device:
        raise RopeArgumentError("rotary", f"rotary's cos/sin tables are on {rotary.cos.device} but q is on "
                                          f"{q.device}: move the module with .to()")
    if B * k_cache.shape[1] > _MAX_GRID_Y:
        raise RopeArgumentError("q", f"q's batch x k_cache's heads = {B} x {k_cache.shape[1]} is over {_MAX_GRID_Y}, "
                                     "the most programs a launch grid's second axis holds: split the batch")
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    elif isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not (math.isfinite(scale) and scale > 0):
        raise RopeArgumentError("scale", f"scale must be a finite number > 0 (default 1/sqrt(D)), got "
                                         f"{describe_value(scale)}")
    return _Plan(q, k_cache, v_cache, positions, rotary, float(scale), _tuning_now())


#: The layouts, said where a shape is refused (the docstring of :func:`attention_with_rope` defines them).
_LAYOUTS = ("q is (B, T, H, D) (batch, queries, heads, head dim), k_cache and v_cache (B, H_kv, L, D) (batch, "
            "key-value heads, cache length, head dim)")
_TRANSPOSED_Q = "a (B, H, T, D) q? pass q.transpose(1, 2)"


def _check_cache_shapes(q: Tensor, k_cache: Tensor, v_cache: Tensor) -> None:
    """The caches' shapes against q's, naming the argument that is off where the shapes tell it: a cache in the
    (B, L, H_kv, D) layout is the cache's fault, a q whose heads (q.shape[2]) the cache's H_kv does not divide is
    q's (most often a q in SDPA's (B, H, T, D) layout, whose dim 1 the heads would divide), and v_cache is
    compared with k_cache, not with q, so that a k_cache in the wrong layout is not blamed on v_cache."""
    B, T, H, D = q.shape
    got = f"got {tuple(k_cache.shape)} for q {tuple(q.shape)}"
    if k_cache.dim() != 4 or k_cache.shape[0] != B or k_cache.shape[3] != D or k_cache.shape[1] == 0:
        raise RopeArgumentError("k_cache", f"k_cache must be (B, H_kv, L, D) = ({B}, H_kv >= 1, L, {D}), {got}: "
                                           f"{_LAYOUTS}")
    H_kv, L = k_cache.shape[1], k_cache.shape[2]
    if H % H_kv:
        if L and H % L == 0 and H_kv > L:
            raise RopeArgumentError("k_cache", f"k_cache must be (B, H_kv, L, D) with H_kv dividing q's {H} heads, "
                                               f"{got}: a (B, L, H_kv, D) cache? pass cache.transpose(1, 2)")
        transposed = f"; {_TRANSPOSED_Q}" if T % H_kv == 0 else ""  # dim 1 would be q's heads
        raise RopeArgumentError("q", f"q {tuple(q.shape)} has H={H} heads (dim 2), not a multiple of the H_kv={H_kv} "
                                     f"of k_cache {tuple(k_cache.shape)} (dim 1): {_LAYOUTS}{transposed}")
    if v_cache.shape != k_cache.shape:
        transposed = ("; a (B, L, H_kv, D) cache? pass cache.transpose(1, 2)"
                      if v_cache.dim() == 4 and v_cache.transpose(1, 2).shape == k_cache.shape else "")
        raise RopeArgumentError("v_cache", f"v_cache has shape {tuple(v_cache.shape)}, k_cache "
                                           f"{tuple(k_cache.shape)}: they must match{transposed}")


def _check_position_values(positions: Tensor | int, plan: _Plan, cache_len: int, table_len: int) -> int:
    """The range check, where it costs no wait for the GPU: an int, or a tensor in host memory. Returns the
    start for an int (else 0)."""
    limit = min(cache_len, table_len)
    what = f"the cache's L={cache_len}" if cache_len <= table_len else f"rotary's max_seq_len={table_len}"
    if isinstance(positions, Tensor):
        if positions.is_cpu and not torch.compiler.is_compiling():
            lo, hi = int(positions.min()), int(positions.max())
            if lo < 0 or hi >= limit:
                _refuse_transposed_cache(plan, lo, hi, table_len)
                raise RopeArgumentError("positions", f"positions must lie in [0, {limit}) ({what}), got range "
                                                     f"[{lo}, {hi}]")
        return 0
    start = int(positions)
    if start < 0 or start + plan.T > limit:
        _refuse_transposed_cache(plan, start, start + plan.T - 1, table_len)
        raise RopeArgumentError("positions", f"positions={start} puts the queries at {start}..{start + plan.T - 1}; "
                                             f"they must lie in [0, {limit}) ({what})")
    return start


def _refuse_transposed_cache(plan: _Plan, lo: int, hi: int, table_len: int) -> None:
    """Positions past the cache's L that its heads' dim would hold: most likely a cache in the (B, L, H_kv, D)
    layout (FlashInfer's and vLLM's NHD) whose L happens to divide q's heads, so the shapes passed; named as the
    cache's fault, not the positions'."""
    if plan.H_kv > plan.L and 0 <= lo and hi < min(plan.H_kv, table_len):
        raise RopeArgumentError("k_cache", f"k_cache must be (B, H_kv, L, D), got ({plan.B}, {plan.H_kv}, {plan.L}, "
                                           f"{plan.D}): L={plan.L} keys, fewer than the queries' positions "
                                           f"{lo}..{hi} need, with {plan.H_kv} heads: a (B, L, H_kv, D) cache? pass "
                                           "cache.transpose(1, 2)")


# Here, not in rope._fused_attention_plan: it runs the call's own checks (_check) and skips a Hopper kernel that
# failed to compile (_takes_hopper), as a call does; both live in this module, which that one never imports.
def launch_settings(q: Tensor, k_cache: Tensor, v_cache: Tensor, positions: Tensor | int,
                    rotary: RotaryEmbedding, *, scale: float | None = None) -> dict[str, object]:
    """What :func:`attention_with_rope` launches for these arguments (under the current :func:`tuning`), without
    launching: the kernel (``"hopper"``, the warp-specialised one, or ``"tl"``), the grid, programs, tiles, warps,
    stages, splits, keys per split, and the combine (``"kernel"``: a second launch combines the splits; ``"none"``
    with one split). Its ``"line"`` says it in one line, for a benchmark's rows. The arguments are checked as the
    call checks them."""
    start, plan = _check(q, k_cache, v_cache, positions, rotary, scale)
    if plan.ws and not _takes_hopper(k_cache, v_cache):
        plan = _tl_plan(plan, q, k_cache, v_cache, positions, rotary)
    visible = _visible_keys(plan, positions, start)
    if plan.ws:  # one launch over every key (taken only where the programs fill the GPU unsplit)
        splits, per_split = 1, -(-visible // plan.block_n) * plan.block_n
    else:
        splits, per_split = _splits(plan.programs(), visible, plan.block_n, plan.sms, plan.tuning.splits,
                                    plan.per_sm)
    grid = (plan.n_blocks, plan.B * plan.H_kv, splits)
    out = {"kernel": "hopper" if plan.ws else "tl", "grid": grid, "programs": math.prod(grid),
           "block_m": plan.block_m, "block_n": plan.block_n, "num_warps": plan.warps, "num_stages": plan.stages,
           "splits": splits, "keys_per_split": per_split, "combine": "kernel" if splits > 1 else "none"}
    warps = "4+4+1" if plan.ws else plan.warps
    out["line"] = (f"{out['kernel']} grid={'x'.join(map(str, grid))} bm={plan.block_m} bn={plan.block_n} "
                   f"w={warps} s={plan.stages} keys/split={per_split} combine={out['combine']}")
    return out


# -- launch ------------------------------------------------------------------------------------------
@functools.cache
def _kernels():
    try:
        from rope import _fused_attention_kernels
    except ImportError as exc:
        raise RuntimeError(f"attention_with_rope needs the `triton` package, which failed to import: {exc}") from None
    return _fused_attention_kernels


def _launch(q: Tensor, k_cache: Tensor, v_cache: Tensor, positions: Tensor | int, start: int,
            rotary: RotaryEmbedding, plan: _Plan) -> Tensor:
    has_pos = isinstance(positions, Tensor)
    if rotary.scaling["type"] == "dynamic_ntk":  # the tables for the current length, as the module's own call
        rotary._follow_length(q, positions if has_pos else torch.tensor([start + plan.T - 1]))
    if plan.ws:
        if _takes_hopper(k_cache, v_cache):
            out = _launch_hopper(q, k_cache, v_cache, positions, start, rotary, plan)
            if out is not None:
                return out
        plan = _tl_plan(plan, q, k_cache, v_cache, positions, rotary)
    return _launch_tl(q, k_cache, v_cache, positions, start, rotary, plan)


def _takes_hopper(k_cache: Tensor, v_cache: Tensor) -> bool:
    """Whether a call whose plan took the Hopper kernel launches it: not with a cache at an unaligned address (TMA
    reads 16-byte aligned bases), nor once the kernel failed to compile in this process; the tl kernel then."""
    return k_cache.data_ptr() % 16 == 0 and v_cache.data_ptr() % 16 == 0 and not _HOPPER_FAILED


#: Set (to the error) once the Hopper kernel failed to compile in this process: every call takes the tl kernel.
_HOPPER_FAILED: list[str] = []


def _launch_hopper(q: Tensor, k_cache: Tensor, v_cache: Tensor, positions: Tensor | int, start: int,
                   rotary: RotaryEmbedding, plan: _Plan) -> Tensor | None:
    """The warp-specialised Hopper kernel's launch (one, no splits); None where it does not compile here (said in
    one warning, once)."""
    hopper = _hopper_kernels()
    has_pos = isinstance(positions, Tensor)
    cos, sin = rotary._cos_sin
    pos_arg = positions if has_pos else cos
    out = q.new_empty((plan.B, plan.T, plan.H, plan.D))
    descs = [hopper.cache_descriptor(c, plan.block_n) for c in (k_cache, v_cache)]
    args = (q, cos, sin, pos_arg, out, *descs, *plan.ints, start, plan.scale_log2, plan.G, plan.D, plan.half,
            plan.rotary_dim, plan.interleaved, plan.rotate, has_pos, plan.block_n, plan.stages)
    key = None
    if plan.direct:
        key = ("hopper", has_pos, q.data_ptr() % 16, cos.data_ptr() % 16, sin.data_ptr() % 16,
               pos_arg.data_ptr() % 16)
    try:
        with on_device_of(q):
            _run(plan, (hopper.attend_ws_kernel, (plan.n_blocks, plan.B * plan.H_kv, 1), args,
                        {"num_warps": 4, "maxnreg": hopper.MAX_REGS}, key))
    except hopper.COMPILE_ERRORS as exc:
        _HOPPER_FAILED.append(f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc) else ''}")
        warnings.warn(f"attention_with_rope: the Hopper kernel does not compile with this Triton "
                      f"({_HOPPER_FAILED[0]}); the tl kernel takes every call", RuntimeWarning, stacklevel=4)
        return None
    return out


def _launch_tl(q: Tensor, k_cache: Tensor, v_cache: Tensor, positions: Tensor | int, start: int,
               rotary: RotaryEmbedding, plan: _Plan) -> Tensor:
    kernels = _kernels()
    has_pos = isinstance(positions, Tensor)
    B, T, H, D = plan.B, plan.T, plan.H, plan.D
    splits, per_split = _splits(plan.programs(), _visible_keys(plan, positions, start), plan.block_n, plan.sms,
                                plan.tuning.splits, plan.per_sm)
    out = q.new_empty((B, T, H, D))
    # with splits: one float32 buffer, every partial output and then every log-sum-exp (the kernels find the
    # second part from their grid); with one, a placeholder never read or written
    part = q.new_empty(B * T * H * splits * (D + 1), dtype=torch.float32) if splits > 1 else out
    cos, sin = rotary._cos_sin
    pos_arg = positions if has_pos else cos  # without positions a placeholder no program reads (HAS_POS off)
    key = None
    if plan.direct:  # what Triton specialises a compiled kernel on beyond the plan: the pointers' alignment
        key = (has_pos, splits, per_split, q.data_ptr() % 16, k_cache.data_ptr() % 16, v_cache.data_ptr() % 16,
               cos.data_ptr() % 16, sin.data_ptr() % 16, pos_arg.data_ptr() % 16)
    args = (q, k_cache, v_cache, cos, sin, pos_arg, out, part, *plan.ints, start, per_split, plan.scale_log2,
            splits, plan.G, D, plan.block_d, plan.half, plan.rotary_dim, plan.interleaved, plan.rotate, has_pos,
            plan.block_m, plan.block_n, T > 1, splits > 1, plan.ieee, plan.dot_f32)
    launches = [(kernels.attend_split_kernel, (plan.n_blocks, B * plan.H_kv, splits), args,
                 {"num_warps": plan.warps, "num_stages": plan.stages}, key)]
    if splits > 1:
        rows, warps = _combine_tiling(splits, plan.block_d)
        launches.append((kernels.combine_splits_kernel, (-(-B * T * H // rows), 1, 1),
                         (part, out, T * H * D, H * D, D, T, H, splits, B * T * H, D, plan.block_d, _next_pow2(splits),
                          rows, plan.dot_f32), {"num_warps": warps}, None if key is None else ("combine", *key)))
    with on_device_of(q):
        _run(plan, *launches)
    return out


def _run(plan: _Plan, *launches: tuple) -> None:
    """Launch each ``(kernel, grid, args, options, key)`` in order: ``args`` every parameter, constexprs included,
    in its order; ``options`` the launch's warps, stages, registers; ``key`` None, or what identifies its compiled
    kernel on the plan (:attr:`rope._fused_attention_plan._Plan.compiled`).

    Why not always ``kernel[grid](...)``: Triton's launch binds and specialises every argument again on each call,
    host time that on a slow host exceeds what a decode step's attention takes on the GPU. The first launch of a
    ``key`` goes through it and returns the compiled kernel; later ones hand the same arguments to that kernel's
    launcher (the call Triton's own launch ends with), on a stream looked up once for the call's launches. The
    specialisation is the same by construction: the plan fixes every integer argument but the start position
    (``do_not_specialize``) and the ones in the key, which also holds the pointers' alignment. Triton's launch
    stays where a launch hook is set (a profiler)."""
    stream = None
    for kernel, grid, args, options, key in launches:
        compiled = plan.compiled.get(key) if key is not None else None
        if compiled is not None:
            if stream is None:
                stream = (_driver().get_current_stream(torch.cuda.current_device()) if launch_hooks_unset()
                          else False)
            if stream is not False:
                try:
                    compiled.run(*grid, stream, compiled.function, compiled.packed_metadata, None, None, None, *args)
                    continue
                except TypeError:  # a Triton whose launcher takes other arguments: its own launch from now on
                    plan.direct = False
                    plan.compiled.clear()
        compiled = kernel[grid](*args, **options)
        if key is not None and plan.direct and hasattr(compiled, "packed_metadata") and hasattr(compiled, "function"):
            plan.compiled[key] = compiled


@functools.cache
def _driver():
    import triton

    return triton.runtime.driver.active
