"""How a call of :func:`rope.attention_with_rope` is cut into programs: the :class:`_Plan` of a call's signature
(tiles, warps, stages, whether the warp-specialised Hopper kernel takes it), the key splits, and :func:`tuning`,
which forces those settings for a benchmark. :mod:`rope.fused_attention` checks the arguments, keeps the plans and
launches; it imports this module, never the reverse, as :mod:`rope.triton.launch` imports :mod:`rope.triton.plan`.
Why a module of its own: the launch rule is what a benchmark looks for a better version of, and it reads the call's
shapes, strides and device, never a tensor's values, so it can be read and changed apart from the launches.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import math
from collections.abc import Iterator

import torch
from torch import Tensor

from rope._launch import interpreting
from rope.base import RotaryEmbedding, is_identity
from rope.checks import describe_value

_MAX_SPLITS = 128
_INTERPRETER_SMS = 4  # under the CPU interpreter: a nominal SM count, so small shapes still split


@dataclasses.dataclass(frozen=True)
class Tuning:
    """Launch settings forced by :func:`tuning` (None: the launch rule's own choice)."""

    splits: int | None = None
    block_m: int | None = None
    block_n: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    warp_specialized: bool | None = None

    def label(self) -> str:
        """The set fields in a line, e.g. ``splits=16,bn=64,w=4``: what a benchmark row names its candidate by."""
        short = {"splits": "splits", "block_m": "bm", "block_n": "bn", "num_warps": "w", "num_stages": "s",
                 "warp_specialized": "ws"}
        return ",".join(f"{short[f.name]}={getattr(self, f.name)}" for f in dataclasses.fields(self)
                        if getattr(self, f.name) is not None)


_NO_TUNING = Tuning()
_TUNING: contextvars.ContextVar[Tuning | None] = contextvars.ContextVar("rope_fused_attention_tuning", default=None)
#: The settings that must be powers of two (Triton's block shapes and warps), and their range.
_POW2 = {"block_m": (16, 128), "block_n": (16, 256), "num_warps": (1, 16)}


def _tuning_now() -> Tuning:
    return _TUNING.get() or _NO_TUNING


@contextlib.contextmanager
def tuning(**fields: object) -> Iterator[Tuning]:
    """Force launch settings of :func:`rope.attention_with_rope` for the calls made inside the block.

    ``splits``: programs the keys are split over, 1 to 128 (1: no split; fewer where the keys have fewer tiles);
    ``block_m``: query rows a program holds (a power of two, 16 to 128); ``block_n``: keys per tile (a power of
    two, 16 to 256); ``num_warps`` (a power of two up to 16); ``num_stages`` (1 to 6: key tiles in flight);
    ``warp_specialized``: False keeps a chunk of queries on the ``tl`` kernel where the launch rule takes the Hopper
    kernel (True, like None, leaves it to the rule; a tile setting above implies False). Fields
    not given keep the enclosing block's value (None outside any: the launch rule's choice). A call captured in a
    CUDA graph keeps the settings it was captured with. A bad field or value raises ValueError naming it, before
    the block runs.

        with rope.fused_attention.tuning(splits=32, block_n=64, num_warps=4, num_stages=3):
            y = rope.attention_with_rope(q, k_cache, v_cache, positions, r)
    """
    names = {f.name for f in dataclasses.fields(Tuning)}
    for name, value in fields.items():
        if name not in names:
            raise ValueError(f"tuning: unknown setting {name!r}; the settings are {', '.join(sorted(names))}")
        if value is None:
            continue
        if name == "warp_specialized":
            if not isinstance(value, bool):
                raise ValueError(f"tuning: warp_specialized must be True or False, got {describe_value(value)}")
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"tuning: {name} must be an int, got {describe_value(value)}")
        if name in _POW2:
            lo, hi = _POW2[name]
            if not lo <= value <= hi or value & (value - 1):
                raise ValueError(f"tuning: {name} must be a power of two from {lo} to {hi}, got {value}")
        elif name == "splits" and not 1 <= value <= _MAX_SPLITS:
            raise ValueError(f"tuning: splits must be 1 to {_MAX_SPLITS}, got {value}")
        elif name == "num_stages" and not 1 <= value <= 6:
            raise ValueError(f"tuning: num_stages must be 1 to 6, got {value}")
    token = _TUNING.set(dataclasses.replace(_tuning_now(), **fields))
    try:
        yield _tuning_now()
    finally:
        _TUNING.reset(token)


class _Plan:
    """What a call's signature decides, worked out once per signature: the shapes, the rotation's constants,
    the tile sizes and warps, the kernels' integer arguments, and the compiled kernels of its launches."""

    __slots__ = ("B", "T", "H", "H_kv", "D", "G", "L", "rotate", "half", "rotary_dim", "interleaved", "scale_log2",
                 "block_m", "block_n", "block_d", "warps", "stages", "ieee", "dot_f32", "sms", "n_blocks", "per_sm",
                 "ints", "direct", "compiled", "tuning", "ws", "tl_plan")

    def __init__(self, q: Tensor, k_cache: Tensor, v_cache: Tensor, positions: Tensor | int, rotary: RotaryEmbedding,
                 scale: float, tuning: Tuning) -> None:
        self.B, self.T, self.H, self.D = q.shape
        self.H_kv, self.L = k_cache.shape[1], k_cache.shape[2]
        self.G = self.H // self.H_kv
        self.rotate = not is_identity(rotary)
        self.rotary_dim = rotary.rotary_dim if self.rotate else 0
        self.half = self.rotary_dim // 2
        self.interleaved = rotary.layout == "interleaved"
        self.scale_log2 = scale * math.log2(math.e)  # the kernel's softmax is in base 2
        self.ieee = q.dtype == torch.float32  # float32 means float32: no TF32 in the products
        self.dot_f32 = interpreting() and not self.ieee  # see the kernels' _dot and _cast
        self.sms = _sm_count(q.device)
        self.block_d = max(16, _next_pow2(self.D))
        tiles = _tiles(self.T * self.G, self.block_d, q.element_size(), self.L, self.B * self.H_kv >= 4 * self.sms)
        self.tuning = tuning
        forced = (tuning.block_m, tuning.block_n, tuning.num_warps, tuning.num_stages)
        self.ws = _hopper_kernel_applies(q, k_cache, v_cache, self.G, self.sms) \
            and tuning.warp_specialized is not False and tuning.splits is None and all(f is None for f in forced)
        if self.ws:
            block_n, stages = _HOPPER_TILES[self.D]
            tiles = (2 * _HOPPER_BLOCK_M, block_n, 4, stages)
        self.block_m, self.block_n, self.warps, self.stages = (t if f is None else f
                                                               for t, f in zip(tiles, forced, strict=True))
        self.n_blocks = -(-(self.T * self.G) // self.block_m)
        # Splits aim at two programs per SM; at one where each key-value head's rows fit one block and its 16-bit
        # key rows are 128 elements or more, a decode block then keeping a fourth key tile in flight: such
        # programs stream their keys best alone on an SM (bench/results/attention.csv). Several row blocks of one
        # head read its keys together (in L2) and keep two.
        self.per_sm = 2
        if self.n_blocks == 1 and q.element_size() == 2 and self.block_d >= 128 and not self.ws:
            self.per_sm = 1
            stage_bytes = 2 * self.block_n * self.block_d * q.element_size()  # a key and a value tile
            if self.block_m == 16 and tuning.num_stages is None and self.programs() < self.sms \
                    and 5 * stage_bytes <= _shared_memory(q.device):  # four, and a fifth's room for the rest
                self.stages = 4
        if isinstance(positions, Tensor):
            pos_strides = positions.stride() if positions.dim() == 2 else (0, positions.stride(0))
        else:
            pos_strides = (0, 0)
        cos = rotary._cos_sin[0]
        # the split kernel's integers from its q strides to its table length, in its order (the output is
        # contiguous (B, T, H, D), allocated per call)
        if self.ws:  # the Hopper kernel's: the caches go by TMA descriptor
            self.ints = (*q.stride()[:3], self.T * self.H * self.D, self.H * self.D, self.D, *pos_strides,
                         cos.stride(0), self.T, self.H_kv, self.L, cos.shape[0])
        else:
            self.ints = (*q.stride()[:3], *k_cache.stride()[:3], *v_cache.stride()[:3],
                         self.T * self.H * self.D, self.H * self.D, self.D, *pos_strides, cos.stride(0),
                         self.T, self.H_kv, self.L, cos.shape[0])
        # Triton's compiled kernels, launched directly once known (see rope.fused_attention._run)
        self.direct = q.is_cuda and not interpreting() and _direct_launch_supported()
        self.compiled: dict[tuple, object] = {}
        self.tl_plan: _Plan | None = None  # the tl kernel's, for a Hopper plan's call with an unaligned cache

    def programs(self) -> int:
        return self.n_blocks * self.B * self.H_kv


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@functools.cache
def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return _INTERPRETER_SMS


@functools.cache
def _shared_memory(device: torch.device) -> int:
    """Bytes of shared memory a program may take on ``device`` (unknown: 0); under the interpreter a Hopper's."""
    if device.type == "cuda":
        return getattr(torch.cuda.get_device_properties(device), "shared_memory_per_block_optin", 0)
    return 227 * 1024


def _tiles(rows: int, block_d: int, itemsize: int, cache_len: int, many_waves: bool) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) for ``rows`` query rows per key-value head.

    The rule: a block holds the rows that share a key-value head, up to 64: a chunk of many rows runs as
    64-row blocks of four warps, which keep more blocks per SM than 128-row blocks of eight (the second block of
    a head finds its keys in L2); a decode block (16 rows, the smallest ``tl.dot`` takes) streams 16 KB key
    tiles, three in flight (four where its programs have an SM each: :class:`_Plan`), to keep the memory busy,
    or, where the batch and key-value heads alone give every SM four programs or more (``many_waves``: several
    waves, nothing to split) over 4k keys or more, 128-key tiles two deep, which stream such waves best
    (``bench/results/attention.csv``; at 1k keys and D 128 they were the slower tile). A key tile is at most a
    quarter of a short cache, so that it still splits.
    """
    wide = block_d * itemsize > 256  # float32 at D 128, or D 256 in 16 bits: halve what the tiles hold
    block_m = min(max(16, _next_pow2(rows)), 64)
    short = max(16, _next_pow2(cache_len) // 4)
    if block_m == 16:
        if many_waves and not wide and cache_len >= 4096:  # 4k keys on: a 128-key tile is well below a quarter
            return block_m, 128, 4, 2
        block_n = max(16, min(128, (8192 if wide else 16384) // (block_d * itemsize), short))
        return block_m, block_n, 4, 3
    block_n = min(32 if wide else 64, short)
    return block_m, block_n, 4, 2 if wide else 3


#: The Hopper kernel's query rows per warpgroup (a program holds two), and its (key tile, stages) per head dim:
#: at D 128 two 64-key tiles cost no more registers than one of 128 and keep four in flight; at D 64 a 128-key
#: tile three deep (``bench.attention``).
_HOPPER_BLOCK_M = 64
_HOPPER_TILES = {64: (128, 3), 128: (64, 4)}


def _hopper_kernel_applies(q: Tensor, k_cache: Tensor, v_cache: Tensor, G: int, sms: int) -> bool:
    """Whether a call goes to the warp-specialised Hopper kernel (:mod:`rope._fused_attention_hopper`): a chunk of
    queries whose grouped rows fill its two warpgroups (G x T >= 128, where the loop is bound by the products, not
    by the cache read) and whose programs, one per SM, fill at least half the GPU without splitting the keys (with
    fewer, the ``tl`` kernel's splits keep more SMs busy); 16-bit, head dim 64 or 128, on a GPU of compute
    capability 9.x (its wgmma and TMA), with caches a TMA descriptor can address as (B * H_kv, L, D) (16-byte
    aligned rows; batch and heads one stride), and a Triton with Gluon. The ``tl`` kernel takes every other call."""
    if not q.is_cuda or interpreting() or q.dtype == torch.float32 or q.shape[3] not in _HOPPER_TILES:
        return False
    B, T = q.shape[:2]
    rows = T * G
    if T < 2 or rows < 2 * _HOPPER_BLOCK_M or torch.cuda.get_device_capability(q.device)[0] != 9:
        return False
    if 2 * -(-rows // (2 * _HOPPER_BLOCK_M)) * B * k_cache.shape[1] < sms:
        return False
    for cache in (k_cache, v_cache):
        strides, (_, H_kv, L, D) = cache.stride(), cache.shape
        if strides[0] != H_kv * strides[1] and cache.shape[0] > 1:  # batch and heads: one TMA dimension
            return False
        if any(s * cache.element_size() % 16 for s in strides[1:3]):
            return False
        if strides[2] < D or (H_kv > 1 and strides[1] < L * strides[2]):  # rows that overlap: not a TMA box
            return False
    return _hopper_kernels() is not None


def _splits(programs: int, cache_len: int, block_n: int, sms: int, forced: int | None = None,
            per_sm: int = 2) -> tuple[int, int]:
    """(number of key splits, keys per split): as many splits as fill ``per_sm`` programs per SM in one wave (a
    second, partly filled wave would leave SMs idle for as long as the first), each over at least two key tiles;
    none when the batch and heads fill the GPU already. ``forced`` (:func:`tuning`) asks for a number of splits
    instead (fewer where the keys have fewer tiles)."""
    tiles = -(-cache_len // block_n)
    if forced is not None:
        splits = min(forced, tiles)
    elif programs >= sms or tiles < 4:
        return 1, tiles * block_n
    else:
        splits = min(per_sm * sms // programs, tiles // 2, _MAX_SPLITS)
    per_split = -(-tiles // splits) * block_n
    return -(-cache_len // per_split), per_split


@functools.cache
def _combine_tiling(splits: int, block_d: int) -> tuple[int, int]:
    """(rows, warps) of a combine program for ``splits`` partial outputs of ``block_d`` elements a row: rows up to
    about 4096 partial elements a program (at most 64 rows), and a warp per 1024 of them (at most 8). Why: one row
    a program of four warps left each thread a few elements, so that a chunk of many queries paid its thousands of
    programs' fixed costs rather than the read (``bench.attention``)."""
    per_row = _next_pow2(splits) * block_d
    rows = min(64, max(1, 4096 // per_row))
    return rows, min(8, max(1, rows * per_row // 1024))


def _visible_keys(plan: _Plan, positions: Tensor | int, start: int) -> int:
    """The keys any query can see: up to the last position where it is known on the host, else the whole cache."""
    return plan.L if isinstance(positions, Tensor) else min(plan.L, start + plan.T)


def _tl_plan(plan: _Plan, q: Tensor, k_cache: Tensor, v_cache: Tensor, positions: Tensor | int,
             rotary: RotaryEmbedding) -> _Plan:
    """The ``tl`` kernel's plan for a signature whose plan took the Hopper kernel (kept on the plan once made)."""
    if plan.tl_plan is None:
        plan.tl_plan = _Plan(q, k_cache, v_cache, positions, rotary, plan.scale_log2 / math.log2(math.e),
                             dataclasses.replace(plan.tuning, warp_specialized=False))
    return plan.tl_plan


@functools.cache
def _hopper_kernels():
    """The Hopper kernel's module, or None where this Triton has no Gluon (or another Gluon than it is written
    for): then the ``tl`` kernel takes every call."""
    try:
        from rope import _fused_attention_hopper
    except (ImportError, AttributeError):
        return None
    return _fused_attention_hopper


@functools.cache
def _direct_launch_supported() -> bool:
    """Whether this Triton launches compiled kernels as :func:`rope.fused_attention._run` calls them (its
    ``knobs``, Triton 3.4 on)."""
    try:
        import triton
    except ImportError:
        return False
    return hasattr(triton, "knobs") and hasattr(triton.knobs, "runtime")
