"""How a rotation launch is cut into programs: :func:`make_plan`, a pure function from the launch's geometry
(shapes, strides, layout, what the GPU calls for) to a :class:`Plan`; :mod:`rope.triton.launch` reads the tensors,
and a benchmark forces settings through :func:`rope.triton.tuning`. Tilings (:mod:`rope.triton.kernels`): ``rows``
(the half padded to a power of two: where that keeps three quarters of the lanes busy, half layout; interleaved
pads exact powers only), ``chunks`` (the largest power of two of pairs dividing the half, at most 16, 8
interleaved), ``flat`` (blocks of up to 8 elements of a token's heads, dividing the half and D where they can: a
copied tail, odd halves; it needs each token's heads contiguous and an even block to tile them, else a pair tiling).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from rope._launch import pow2_unit, stride_unit

TILINGS = ("rows", "chunks", "flat")
#: Elements a program takes by default, every tiling; its warps (on 4, 8 bf16 elements a thread: 16 bytes, in
#: programs an SM packs many of); flat blocks, widest first.
TILE, FEW_WARPS, MANY_WARPS, FLAT_BLOCKS = 1024, 4, 8, (8, 4, 2)
#: Chunk/block ids within a batch element, and program ids, are int32.
INT32_LIMIT = 2**31
#: Each numeric tuning setting's range, and whether it must be a power of two.
_RANGES = {"tile": (64, 16384, True), "num_warps": (1, 32, True), "maxnreg": (16, 255, False)}


@dataclass(frozen=True)
class Overrides:
    """Launch settings a benchmark forces (the fields of :func:`rope.triton.tuning`); None / 0: the plan's own."""

    tiling: str | None = None
    tile: int = 0
    num_warps: int = 0
    maxnreg: int = 0  # a register cap for every program (the plan's own: fast memory, rows with padding or positions)

    def __post_init__(self) -> None:
        if self.tiling not in (None, *TILINGS):
            raise ValueError(f"tuning: tiling must be one of {TILINGS} or None, got {self.tiling!r}")
        for name, (lo, hi, pow2) in _RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"tuning: {name} must be an int (0: the plan's own), got {value!r}")
            if value and not (lo <= value <= hi and not (pow2 and value & (value - 1))):
                what = "a power of two" if pow2 else "an int"
                raise ValueError(f"tuning: {name} must be {what} from {lo} to {hi} (or 0), got {value!r}")


#: What eager launches take now (:func:`rope.triton.tuning` sets it): the process's, not a context variable's, as
#: autograd runs a CUDA graph's backward on a thread of its own, which sees none of the caller's context variables.
_forced = Overrides()


def forced() -> Overrides:
    return _forced


def force(over: Overrides) -> Overrides:
    """Makes ``over`` the settings of eager launches, on every thread; returns those it replaces."""
    global _forced
    previous, _forced = _forced, over
    return previous


@dataclass(frozen=True)
class Geometry:
    """What a launch's plan depends on. ``strides``, in elements: q's, k's and v's (batch, token, head) strides (k's
    are q's where there is no k, v's k's where there is no v), the outputs' token strides, q's heads' extent where k
    (or its output) lies in q's tensor (else 0), q's and k's where v is copied after them (else 0: no v)."""

    head_dim: int
    rotary_pairs: int  # R2: pairs rotated per head (rotary_dim / 2)
    partial: bool  # variant=partial's zero-frequency half: cos 1 and sin 0 without loading them
    interleaved: bool
    batch: int
    seq_len: int
    q_heads: int
    k_heads: int  # 0: no k
    strides: tuple[int, ...]
    wide: bool  # an element offset can reach 2**31: 64-bit index arithmetic
    positions: bool
    register_cap: int = 0  # registers per thread that keep an SM full, where the GPU's memory calls for it

    @property
    def tensor_heads(self) -> list[int]:
        """Heads of the tensors a launch works on, in its programs' order: q, k (if any), v's copy (if any)."""
        return [self.q_heads] + [self.k_heads] * (bool(self.k_heads) + bool(self.strides[12]))

    def grid(self, units: int, per: int, per_program: int) -> tuple[int, int, int]:
        """The launch's grid: q's, k's and v's copy's programs, each cutting its own tokens' units (``units`` per
        ``per`` head rows: chunks, or elements per block) ``per_program`` a program, for each batch element. Tensors
        of as many heads (q and k of multi-head attention) take the second axis and the batch the third: the
        kernels then read a program's tensor from its grid axis (no division by the heads). Else (grouped-query
        k, or q alone) q's programs, then k's, then v's, make the first axis, as many as each tensor's own heads
        need, and the batch the second. Unit and program ids are int32 (:func:`rope.triton.kernels._tensor_program`)."""
        counts = [self.seq_len * (h * units // per) for h in self.tensor_heads]
        programs = [-(-n // per_program) for n in counts]
        if max(counts) + per_program >= INT32_LIMIT or sum(programs) >= INT32_LIMIT:
            raise ValueError(f"too many rows for one launch: B={self.batch}, T={self.seq_len}, heads {self.q_heads}"
                             f"+{self.k_heads} of {self.head_dim}")
        if self.q_heads == self.k_heads:
            return programs[0], len(programs), self.batch
        return sum(programs), self.batch, 1

    @property
    def heads_contiguous(self) -> bool:
        """Whether each token's heads are one run of H D elements in q, k and v (the flat tiling's need)."""
        D, s = self.head_dim, self.strides
        return (s[2] == D or self.q_heads == 1) and ((s[5] == D and s[8] == D) or self.k_heads <= 1)


@dataclass(frozen=True)
class Plan:
    """One launch of a rotation kernel: tiling, grid, warps, constexprs, ``maxnreg`` (a register cap; 0: none)."""

    tiling: str
    grid: tuple[int, int, int]  # Geometry.grid
    num_warps: int
    constexprs: tuple[tuple[str, int], ...]
    maxnreg: int = 0

    @property
    def kernel(self) -> str:
        return "rope_flat_kernel" if self.tiling == "flat" else "rope_pairs_kernel"

    def __str__(self) -> str:
        c = dict(self.constexprs)
        what = (f"{c['NBP']} blocks of {c['VB']} elements" if self.tiling == "flat"
                else f"{c['NCH']} {self.tiling} of {c['V']} pair lanes ({c['R2']} pairs a head)")
        extra = f", maxnreg {self.maxnreg}" if self.maxnreg else ""
        return f"{self.tiling}: {what} a program, {self.num_warps} warps, grid {self.grid}{extra}"


def pair_tiling(rotary_pairs: int, interleaved: bool) -> str:
    """Rows or chunks (module docstring): rows where the padded half keeps three quarters of its lanes."""
    padded = next_pow2(rotary_pairs)
    busy = not interleaved and rotary_pairs % 8 == 0 and 4 * rotary_pairs >= 3 * padded
    return "rows" if padded == rotary_pairs or busy else "chunks"


@functools.lru_cache(maxsize=1024)
def make_plan(geo: Geometry, over: Overrides = Overrides()) -> Plan:
    """The plan of a launch with this geometry (``over``: a benchmark's forced settings)."""
    flat = 2 * geo.rotary_pairs < geo.head_dim or geo.rotary_pairs % 2  # a copied tail, or an odd half
    tiling = over.tiling or ("flat" if flat else pair_tiling(geo.rotary_pairs, geo.interleaved))
    if tiling == "flat" and not (geo.heads_contiguous and _flat_blocks(geo)):
        tiling = pair_tiling(geo.rotary_pairs, geo.interleaved)
    if tiling == "flat":
        return _flat_plan(geo, over)
    return _pair_plan(geo, over, tiling)


def _pair_plan(geo: Geometry, over: Overrides, tiling: str) -> Plan:
    r2, wide = geo.rotary_pairs, 2 if geo.interleaved else 1
    held = False  # rows whose padding or positions hold registers: the programs the register cap is for
    if tiling == "rows":
        # whole halves in the half layout at positions 0..T-1 run on 8 warps (no padding or positions hold
        # registers, so more warps keep more loads in flight); every other row plan on 4 (bench/results/kernel.csv)
        v = next_pow2(r2)
        held = v > r2 or geo.positions
        plain = v == r2 and not geo.interleaved and not geo.positions
        tile, warps = over.tile or TILE, MANY_WARPS if plain else FEW_WARPS
    else:  # big chunks on 4 warps (8 elements a thread), chunks of 2 or 4 pairs on 8
        v = min(16 // wide, pow2_unit(r2))
        big = (geo.interleaved or v > 4) and wide * next_pow2(r2) > 16
        tile, warps = over.tile or TILE, FEW_WARPS if big else MANY_WARPS
    m, nch = max(1, r2 // v), max(1, tile // (wide * v))  # M (chunks a row) the kernel works out itself
    cw = r2 // 2 if geo.partial and pow2_unit(r2 // 2) >= min(4, pow2_unit(r2)) else r2
    constexprs = dict(HQ=geo.q_heads, HK=geo.k_heads, D=geo.head_dim, R2=r2, CW=cw, V=v, NCH=nch,
                      INTERLEAVED=geo.interleaved, SV=stride_unit(*geo.strides), WIDE=geo.wide)
    return Plan(tiling, geo.grid(m, 1, nch), over.num_warps or warps,
                tuple(constexprs.items()), maxnreg=over.maxnreg or (geo.register_cap if held else 0))


def _flat_blocks(geo: Geometry) -> list[int]:
    """Flat block widths that tile a token's heads of q and k whole (none where D and the head counts are odd: a
    pair tiling then, whose programs copy the tail in runs of the rotated width, masked at D). None for an odd D
    interleaved either: a block pairs its elements by their offsets in the token, and every other head then starts
    at an odd one, where those pairs straddle two heads."""
    D = geo.head_dim
    if geo.interleaved and D % 2:
        return []
    return [b for b in FLAT_BLOCKS if b <= D and (geo.q_heads * D) % b == 0 and (geo.k_heads * D) % b == 0]


def _flat_plan(geo: Geometry, over: Overrides) -> Plan:
    D = geo.head_dim
    fits = _flat_blocks(geo)
    aligned = [b for b in fits if b >= 4 and geo.rotary_pairs % b == 0 and D % b == 0 and not geo.interleaved]
    # D = 96, 160, 224 take 4-wide blocks, the faster width there in bench/results/kernel.csv
    aligned = [b for b in aligned if b <= 4] if D % 64 == 32 else aligned
    vb = (aligned or fits)[0]  # the widest block dividing the half and D (one partner run), else the widest
    nbp = max(1, (over.tile or TILE) // vb)
    sqb, sqt, _, skb, skt, _, svb, svt, _, *rest = geo.strides  # the heads are contiguous: their stride is D
    constexprs = dict(HQ=geo.q_heads, HK=geo.k_heads, D=D, R2=geo.rotary_pairs, VB=vb, NBP=nbp,
                      INTERLEAVED=geo.interleaved, SV=stride_unit(sqb, sqt, skb, skt, svb, svt, *rest), WIDE=geo.wide)
    return Plan("flat", geo.grid(D, vb, nbp), over.num_warps or FEW_WARPS,
                tuple(constexprs.items()), maxnreg=over.maxnreg)


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())

