"""Triton rotary embeddings: ``triton_v4`` (float32 math) and ``triton_v2`` (input-dtype math).

Both entries run the one kernel of :mod:`rope._triton_kernels` (a constexpr picks the arithmetic):

* ``triton_v4`` loads in the input dtype, computes in float32 and rounds once at the store;
* ``triton_v2`` rounds every product and sum to the input dtype (bf16/fp16 math, the lower
  precision seed kernel); on float32 inputs it runs the v4 arithmetic and so equals v4 exactly.

q and k are rotated in one launch, forward and backward (the backward is the transposed rotation
of the output gradients). In eager mode the launches go through a ``torch.autograd.Function``;
under ``torch.compile`` through ops with fake implementations and registered autograd, so a model
using them compiles without graph breaks: on CUDA ``torch.library.triton_op``s, whose launch
Inductor emits in its own code (``ropelab::rope_fwd_traced``, ...), else the custom ops
``ropelab::rope_fwd`` / ``rope_bwd`` / ``rope_qkv_bwd`` / ``rope_qkv_fwd``, whose Python bodies run at
each call. Strided views (such as the q and k halves of a fused ``qkv`` projection) are read in place,
never copied. ``rotate_qkv`` takes the fused projection itself, so its backward writes d qkv as one
buffer (the ``rope_qkv_bwd`` ops under compile) instead of leaving autograd to stack dq, dk and dv, and
under compile its forward hands the kernel the projection, not two views of it (``rope_qkv_fwd``).
Design notes and H100 numbers: ``docs/kernels.md``.

Without an importable ``triton`` the names stay registered and building one raises a RuntimeError
that says triton is needed (``unavailable_reason`` says it before any build).

Tuning and test hooks are per module instance, never module globals: ``launch_config`` (a
:class:`LaunchConfig`, the benchmark's tuning sweep sets it) and ``poison_outputs`` (the tests set
it: outputs are NaN-filled before each launch); both reach :func:`launch` as arguments.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
from torch import Tensor

from rope.base import LAYOUTS, RotaryEmbedding, TensorCache, on_device_of, split_qkv
from rope.registry import register
from rope.scaling import attention_factor

try:
    from rope import _triton_kernels as _kernels
except ImportError as exc:  # triton not installed (or broken): keep the names, fail at build
    _kernels = None
    _TRITON_ERROR: Exception | None = exc
else:
    _TRITON_ERROR = None

_SUPPORTED = (torch.float32, torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class LaunchConfig:
    """The tunable part of a launch: ``tile`` elements per load (BR rows x the chunk's width) and
    ``num_warps``. The defaults are what the kernel launches with (see :func:`launch_config`)."""

    tile: int = 0  # 0: chosen by width (1024 elements for rotated halves of <= 16 pairs, else 2048; flat 1024)
    num_warps: int = 0  # 0: chosen by tiling (8; flat: 4, so a program keeps 8 elements a thread)
    #: The program tiling: 0 rows (a BR x HP tile of whole rows, the rotated width padded to a power
    #: of two), 1 chunks (rows cut into chunks of V pairs, every lane busy: for rotated widths that are
    #: not a power of two), 2 flat (a token's heads as blocks of 8 contiguous elements, each element
    #: rotated against its partner: full-width accesses whatever the row geometry; needs each token's
    #: heads contiguous, else the geometry's choice), -1 chosen by the row geometry (see :func:`launch_config`).
    chunks: int = -1
    #: q/k loads with L2 evict-first priority, so that the cos/sin rows (read again by every batch
    #: element) stay in L2 while the tensors stream through it.
    streaming: bool = False
    #: The flat tiling's cos/sin tables (:func:`element_tables`): 0 split (two tables), 1 paired (one, each
    #: column's cos and sin side by side), -1 chosen by the row geometry (see :func:`launch_config`).
    tables: int = -1
    #: A register cap per thread for the compiler (``maxnreg``; 0: its own choice). 32 lets 16 programs of
    #: 4 warps share an SM (64K registers); the flat tiling compiles to 32-38.
    maxnreg: int = 0
    #: How the flat tiling reads a partner run that is not aligned to its block, for 16-bit inputs: 1 as int32
    #: words (each element a shift or mask of the word holding it, one select per lane between the up and down
    #: runs), 0 as 16-bit elements shifted in registers, -1 chosen by the row geometry (see
    #: :func:`launch_config`). Words need word-aligned tensors; others take elements whatever this says.
    words: int = -1
    #: The flat tiling's largest block (``VB``: elements a thread reads as one vector, its partner runs and
    #: table entries with it): 0 the default (:data:`FLAT_BLOCK`), else 8, 4 or 2; smaller where the heads'
    #: width needs. A block of 8 reads 64 bytes of table a thread as four 16-byte vectors 64 bytes apart, so
    #: each warp-wide table load spans 2 KB (16 L1 wavefronts for 512 bytes); smaller blocks read the table
    #: in contiguous runs, at the price of narrower data accesses.
    block: int = 0
    #: The flat tiling's programs for q rotate k's blocks of the same tokens too (1; k with at most q's heads),
    #: loading each table entry once for both, or q and k have programs of their own (0); -1 chosen by the row
    #: geometry (see :func:`launch_config`). The tables are most of the flat tiling's L1 traffic
    #: (docs/kernels.md, session 15).
    joint: int = -1

    def __post_init__(self) -> None:
        if self.chunks not in (-1, 0, 1, 2):
            raise ValueError(f"LaunchConfig.chunks must be -1 (chosen by the row geometry), 0 (rows), 1 (chunks) "
                             f"or 2 (flat), got {self.chunks!r}")
        if self.tables not in (-1, 0, 1):
            raise ValueError(f"LaunchConfig.tables must be -1 (chosen by the row geometry), 0 (split) or 1 (paired), "
                             f"got {self.tables!r}")
        if self.words not in (-1, 0, 1):
            raise ValueError(f"LaunchConfig.words must be -1 (chosen by the row geometry), 0 (16-bit elements) or 1 "
                             f"(int32 words), got {self.words!r}")
        if self.joint not in (-1, 0, 1):
            raise ValueError(f"LaunchConfig.joint must be -1 (chosen by the row geometry), 0 (q and k apart) or 1 "
                             f"(q's programs take k's blocks), got {self.joint!r}")
        if self.block not in (0, 2, 4, 8):
            raise ValueError(f"LaunchConfig.block must be 0 (the default, {FLAT_BLOCK}), 8, 4 or 2, got {self.block!r}")
        if not (self.maxnreg == 0 or 16 <= self.maxnreg <= 255):
            raise ValueError(f"LaunchConfig.maxnreg must be 0 (the compiler's choice) or a register count from 16 to "
                             f"255, got {self.maxnreg!r}")


DEFAULT_LAUNCH = LaunchConfig()

#: Whether rotated widths that are not a power of two take the chunk tiling unless a LaunchConfig says:
#: on the H200 it lifted D = 24/40/56/80/160 from 57-81% to 81-91% of copy bandwidth (docs/kernels.md).
CHUNKS_BY_DEFAULT = True


#: Half-layout rotated widths that are not a power of two but a multiple of this many pairs keep the
#: row tiling: on the H100 (session 10, `docs/results/bench_h100_s10/rows_vs_chunks*`) rows beat chunks
#: at 10 of the 11 such head dims from 48 to 240 (D = 48: 95.1/94.9% of copy bandwidth against
#: 93.7/93.2, Liger 94.0/94.1; D = 80: 95.7/94.5 against 93.7/93.4), their padded row tile loading 16-byte
#: vectors all the same; at R2 = 4 mod 8 (D = 24, 40, 56, 88, 104, 120, 136) chunks win by 4-16 points.
ROWS_FROM_GROUPS_OF = 8


#: Whether the flat tiling is the default where it measured faster on the H100 (sessions 11 and 12,
#: docs/results/bench_h100_s11/, bench_h100_s12/): rotary_dim < D, where rows pad both the rotated part and the
#: copied tail to powers of two (D = 48, rotary_dim 24: 95.4/95.4% of copy bandwidth against 77.5/78.1;
#: rotary_dim 12: 93.9/94.1 against 53.3/53.1); odd rotated halves (variant=full at D = 2 mod 4), whose
#: half-layout rows load 2 bytes at a time (D = 18: 93.4/94.7 against 60.3/65.1; D = 254: 89.2/88.2 against
#: 59.8/67.9, Liger 85.0/85.3); and half-layout halves of R2 = 2 mod 4 pairs, where chunks of 2 pairs load
#: 4-byte vectors (D = 20: 94.0/93.1 against 93.2/89.8, at 256M 98.9/98.6 against 97.5/96.1; D = 28:
#: 95.9/94.7 against 92.6/89.3; D = 44: 95.1/95.2 against 90.7/90.8; D = 52: 93.7/92.0 against 92.3/90.0;
#: D = 68: 92.2/92.1 against 92.4/91.7). At R2 = 4 mod 8 chunks stay faster than flat programs apart (D = 40:
#: 94.0/92.7 against 90.0/93.1; D = 152: 92.6/93.1 against 89.4/91.9), not than joint ones with blocks of 4
#: (:data:`JOINT_BY_DEFAULT`, session 19), and rows at R2 = 0 mod 8 (D = 48: 95.1/95.2 against 93.8/94.2).
FLAT_BY_DEFAULT = True

#: The flat tiling's block (elements of one vector access: 16 bytes of bf16), its default elements per
#: program and warps: 1024 and 4 (8 elements a thread) measured 0.5-2 points above 2048 and 8 at every
#: geometry it is the default for (session 12, call 4), and 512/2 or 256/1 no better.
FLAT_BLOCK = 8
#: The block of the joint flat programs at R2 = 4 mod 8 (:data:`JOINT_BY_DEFAULT`): partners R2 elements away then
#: start on a block, so every partner read is one aligned vector (with blocks of 8 they sit half a block off).
FLAT_BLOCK_R2_4 = 4
FLAT_TILE = 1024
FLAT_WARPS = 4
ROW_WARPS = 8

#: The flat tiling's paired cos/sin table (:func:`element_tables`), where measured faster than split ones:
#: half-layout odd halves at full width whose partners sit 3 or 5 elements off a 16-byte block (R2 mod 8 = 3,
#: 5), and those at 1 and 7 where their partner runs are read as words (:data:`WORDS_BY_DEFAULT`). Split and
#: paired side by side at all 60 odd halves D = 18 ... 254 on one H100 (docs/results/bench_h100_s13/call3):
#: paired leads by 3-11 points at R2 mod 8 = 3, 5 from D = 166 on (D = 186: 86.1/87.5% of copy bandwidth
#: against 77.5/75.0) and by 1 to 5 in the backward at D = 22, 26; split leads at some R2 mod 8 = 3, 5 between
#: (D = 70, 74, 102, 118: 1.5-2 points). A copied tail with odd R2 and the even halves (2-8 points slower
#: paired, call 2) stay split. How the kernel source orders the same operations moved these numbers by up to 5
#: points, through the registers it takes (docs/kernels.md, session 13): the code compiles to 3433ad3's PTX
#: for paired tables (call 2: D = 22 95.2/94.9, D = 26 96.5/95.1, against 90.3/93.9 and 90.2/93.8 in calls 3
#: and 7, whose forward took 36 registers) and to 14a7907's for split ones. With 16-bit elements that paired
#: code takes 34-36 registers at R2 mod 8 = 1 and ran 2-5 points under split there (call 2: D = 18, 66, 130, 194).
#: R2 = 2 mod 8 takes it with joint programs (:data:`JOINT_BY_DEFAULT`: measured so in session 18).
PAIRED_TABLES_BY_DEFAULT = True


#: Whether the flat tiling reads misaligned partner runs of 16-bit inputs as int32 words (``LaunchConfig.words``)
#: where measured faster: half-layout odd halves at full width with R2 mod 8 = 1 or 7 (their words take 32
#: registers a thread with either table format, under triton 3.6 for sm_90) up to D = 50 and from D = 174 on,
#: with the paired table. Elements, words with split tables and words with paired ones side by side at all 30 such
#: D, and again at 10 (docs/results/bench_h100_s14/call2), min(forward, backward) % of copy bandwidth: D = 18
#: 93.4 -> 94.4, 30 92.8 -> 94.1, 46 92.1 -> 93.6, 50 92.9 -> 94.2; D = 210 82.6-85.1 -> 88.4, 226 83.2 -> 88.9,
#: 242 84.0 -> 89.4, 254 89.4 -> 90.3. From D = 62 to 162 elements with split tables led words and paired by
#: 0.5-2 points and words with split tables were level (forward 1-2 points faster, backward 0.5-1 slower). At
#: R2 mod 8 = 3, 5 words take 34-36 registers and ran 5 points slower (call 1: D = 22, 26, 70, 186); at the
#: partial R2 = 2 mod 8 family (D = 20, 36, 52, ...: 38 registers either way) they were level (call 1). With
#: joint programs (:data:`JOINT_BY_DEFAULT`, session 15) words and paired tables lead at every R2 mod 8 = 1, 7 from
#: D = 62 on (D = 66: joint with elements and split tables 87.2/85.6, with words and paired ones 93.5/93.6), so
#: there the rule is: words wherever the programs are joint.
WORDS_BY_DEFAULT = True


#: Whether the flat tiling's q programs take k's blocks by default (``LaunchConfig.joint``) where measured faster:
#: half-layout rotated halves at full width, with q and k of as many heads, that are odd from D = 54 on or of
#: R2 = 2 mod 8 pairs from D = 36 on. Each table entry is then loaded once for q's element and k's; the table is
#: most of the flat tiling's L1 traffic (Nsight Compute, docs/results/bench_h100_s15/call1: at D = 254 the L1
#: data pipe at 95.5%, DRAM at 80.9%). Odd halves, apart and joint side by side at every one from 54 to 250
#: (session 15, calls 6, 7; 32M elements, % of copy bandwidth fwd/bwd): apart 88.0-92.9, joint 92.3-95.4 with
#: words and paired tables at R2 mod 8 = 1, 7 (D = 66: 92.3/93.2 -> 93.5/93.6; 130: 90.8/91.7 -> 93.2/94.2; 254:
#: 90.6/90.5 -> 95.4/95.2) and 16-bit elements and paired tables at 3, 5 (D = 70: 90.1/90.2 -> 93.0/93.3; 186:
#: 88.7/89.2 -> 93.8/93.3); at 256M D = 130, 194, 254: 96.5-97.6, 95.5, 96.8 -> 98.7-99.8. Below D = 54 joint
#: ran 0.7-2 points slower (D = 18, 34: call 5). R2 = 2 mod 8 (D = 4 + 16k), joint with elements and the paired
#: table (docs/results/bench_h100_s18, calls 1, 2; session 15 had measured it joint with split tables only, 0.5-1.5
#: points under apart): from D = 36 to 244 at 93.0-95.8 both ways where apart gave 91.2-94.9 (D = 68: 92.7/92.4
#: -> 94.1/94.7; 100: 92.2/91.8 -> 94.8/94.6; 244: 91.6/91.8 -> 94.0/94.3); at D = 20 apart with words stays
#: ahead (96.6/95.4 against 96.3/94.3). R2 = 6 mod 8 stays apart (D = 28 ... 252: apart 94.3-96.3, joint with
#: the paired table 88.4-95.1 forward), as does rotary_dim < D (D = 80, rotary_dim 40: 94.8/95.0 apart, 89.6/88.8
#: joint). Where the plan finds k absent, with more heads than q or with fewer (GQA: its blocks past k's heads
#: are masked; not measured), the programs are apart, with the tables and partner reads chosen for apart.
#: R2 = 4 mod 8 (D = 8 + 16k), the chunk tiling's until session 19, takes the flat tiling with joint programs and
#: blocks of 4 elements (:data:`FLAT_BLOCK_R2_4`), split tables and 16-bit elements: docs/results/bench_h100_s19,
#: calls 1 and 2 (32M elements, % of copy bandwidth, min of forward and backward), at or above 93.0 in all 41 readings
#: from D = 24 to 248, both variants, where the chunks were under 93 at 15 (D = 40: 92.8 -> 93.8 and 92.7 -> 94.4;
#: D = 104: 92.4 -> 93.3; 184: 92.9 -> 94.0). Apart (GQA, k absent) the flat tiling ran at 83-89: chunks stay there.
JOINT_BY_DEFAULT = True


#: The GPUs whose launch rules differ from the H100's (on which every rule above was measured), by the name CUDA
#: gives them. The H200 has the H100's SMs and L1 with memory 1.4 times as fast (4.24 TB/s of copy measured against
#: 3.0), so a program's instructions and L1 traffic weigh more against the time its bytes take, and two of the H100's
#: choices fell behind there (two H200s, docs/results/bench_h200_s36, calls 4-6; 32M elements, % of copy bandwidth,
#: forward/backward): odd halves under D = 54, whose programs are apart on the H100 (joint ran 0.7-2 points slower
#: there, session 15), read 70-85 apart and 86-90 joint (call 6: D = 18: 84.8/84.2 -> 89.3/87.6; D = 30: 81.7/81.4 ->
#: 89.8/88.0; D = 42: 71.9/72.0 -> 87.5/87.6; D = 50: 70.5/71.2 -> 88.7/87.4; Liger 43-60); and rows padded to under
#: three quarters of their lanes (R2 = 40, 72, 80, 88 pairs: D = 80, 144, 160, 176) read 81-88 where chunks read
#: 90-91 (call 6, variant full: D = 80: 84.2/84.0 -> 90.7/89.8, Liger 91.1/91.8; D = 144: 81.7/81.5 -> 90.2/91.1,
#: Liger 87.7/88.5); at three quarters (D = 48) the two were level (call 5: 90.0/89.5 against 89.2/89.2). Every other
#: GPU takes the H100's rules.
GPU_PROFILES = {"NVIDIA H200": "h200"}
#: The odd halves' first head dim with joint programs, by profile (:func:`_joint_geometry`).
JOINT_ODD_FROM = {"h100": 54, "h200": 18}
#: The share of its lanes a padded row must keep busy to stay rows (else chunks, :func:`launch_config`), by profile.
ROWS_BUSY_FROM = {"h100": 0.0, "h200": 0.75}
#: A register cap (Triton's ``maxnreg``) for row programs that are padded (HP > R2) or read ``positions``, by
#: profile (0: the compiler's choice), in launches outside ``torch.compile`` (:func:`_row_registers`). The row
#: kernel compiles to 40 registers forward and 34 backward (sm_90, triton 3.6), so 6 programs of 8 warps share an
#: SM; at 32, without spills, 8 do. On the H200, whose faster memory needs more bytes in flight, that was worth 2-3
#: points (docs/results/bench_h200_s37, call 8; 32M elements, % of copy bandwidth, forward/backward): D = 48
#: 90.0/89.5 -> 91.8/92.2 (Liger 91.9/92.3), D = 96 90.1/90.1 -> 93.5/92.8 (Liger 91.6/92.4); packed sequences
#: (positions, D = 128, 65k-262k tokens) 92.4-94.1 -> 95.1-96.4 forward and 92.1-93.9 -> 94.7-96.6 backward. Rows
#: of whole power-of-two widths without positions read level or lower (D = 64: 90.8/90.9 -> 90.3/90.8; D = 128:
#: 90.2/90.8 -> 89.5/90.1), so they keep the compiler's choice. On one machine; the H100 was not measured.
ROWS_REGISTERS = {"h100": 0, "h200": 32}


@functools.cache
def device_profile(index: int) -> str:
    """The launch rules for CUDA device ``index`` (-1: not CUDA): ``GPU_PROFILES``' entry for its name, else "h100"."""
    if index < 0:
        return "h100"
    name = torch.cuda.get_device_name(index)
    return next((profile for gpu, profile in GPU_PROFILES.items() if name.startswith(gpu)), "h100")


def _joint_geometry(head_dim: int, rotary_pairs: int, passed: int, interleaved: bool, profile: str = "h100") -> bool:
    """Where :data:`JOINT_BY_DEFAULT` puts q's and k's blocks in q's programs (on the GPUs of ``profile``)."""
    if not JOINT_BY_DEFAULT or interleaved or passed:
        return False
    return ((rotary_pairs % 2 == 1 and head_dim >= JOINT_ODD_FROM[profile])
            or (rotary_pairs % 8 == 2 and head_dim >= 36) or (rotary_pairs % 8 == 4 and head_dim >= 24))


def _row_registers(cfg: dict, config: LaunchConfig, profile: str, has_positions: bool, traced: bool) -> int:
    """The register cap :data:`ROWS_REGISTERS` puts on this launch (0: none): row programs (neither flat nor chunks)
    that are padded or read positions, unless ``config.maxnreg`` says otherwise. Not under ``torch.compile``
    (``traced``): Inductor launches the kernel there, and a cap through it was not measured."""
    cap = ROWS_REGISTERS[profile]
    if not cap or config.maxnreg or traced or cfg["FLAT"] or cfg["CHUNKED"]:
        return 0
    return cap if has_positions or cfg["HP"] > cfg["R2"] else 0


def _words_geometry(head_dim: int, rotary_pairs: int, passed: int, interleaved: bool, joint: bool) -> bool:
    """Where :data:`WORDS_BY_DEFAULT` reads partner runs as words, with the paired table (measured together),
    given whether the programs are ``joint``: R2 mod 8 = 1, 7 up to D = 50, from D = 174 on, and wherever joint
    (session 14's rule, session 15's joint programs); R2 mod 8 = 2 apart up to D = 52 (D = 20 by default; 36 and 52
    where GQA keeps the programs apart: session 17).

    Apart, R2 mod 8 = 2 (D = 4 + 16k) compiles to 38 registers a thread with elements and split tables, to 32 with
    words and the paired table (triton 3.6, sm_90, forward and backward, every such D), yet the second ran faster
    only at D <= 52 (docs/results/bench_h100_s17, calls 2, 4, 5: D = 20 one run, the others three on two H100s),
    min(forward, backward) % of copy bandwidth, D = 20 92.7 -> 94.7, D = 36 91.9-92.6 -> 93.5-94.1, D = 52
    91.5-92.2 -> 92.1-93.4; from D = 68 on 3-5 points slower (D = 100 91.9 -> 88.0; 256M: 97.4 -> 94.6), as the
    paired table was for the even flat halves in session 13. Joint, elements and words were level there
    (bench_h100_s18/call2: D = 36 ... 244 within a point, elements ahead at 19 of 28 readings, level at 3): elements."""
    if interleaved or passed:
        return False
    if rotary_pairs % 8 == 2:
        return not joint and head_dim <= 52
    return rotary_pairs % 8 in (1, 7) and (head_dim <= 50 or head_dim >= 174 or joint)


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


@functools.lru_cache(maxsize=256)
def launch_config(head_dim: int, rotary_pairs: int, partial: bool, interleaved: bool,
                  config: LaunchConfig = DEFAULT_LAUNCH, profile: str = "h100") -> dict:
    """The constexprs of one launch, from the row geometry (cached: the module call's host time counts), with the
    rules measured for the GPUs of ``profile`` (:data:`GPU_PROFILES`).

    A row of D elements holds R2 = ``rotary_pairs`` rotated pairs and D - 2 R2 copied elements; all
    are constexpr so the padding masks are compile-time constants and the loads vectorise whatever
    R2 is. HP = R2 rounded up to a power of two; BR rows make one load ``config.tile`` elements.
    CW: the cos/sin columns loaded (``partial``: R2/2, the rest being the zero frequencies, unless
    that width would shorten the vector loads; see the kernel module). CHUNKED (``config.chunks``;
    by default where R2 is not a power of two and nothing is copied): programs walk chunks of V
    pairs, NCH per program (M per row), and the copied tail in chunks of VP elements, NCP per
    program (MP per row), instead of BR padded rows.
    """
    hp = _next_pow2(rotary_pairs)
    passed = head_dim - 2 * rotary_pairs
    load_width = 2 * hp if interleaved else hp
    cw = rotary_pairs
    if partial and _pow2_unit(rotary_pairs // 2) >= min(4, _pow2_unit(rotary_pairs)):
        cw = rotary_pairs // 2  # the zero-frequency half: cos 1, sin 0 without loading them
    if config.chunks in (0, 1):
        chunked = config.chunks == 1
    else:  # measured: chunks where R2 is not a power of two, unless its pairs come in groups of 8 or more
        # (half layout); rows with a copied tail (where the flat tiling does not take the tensors)
        chunked = CHUNKS_BY_DEFAULT and hp != rotary_pairs and passed == 0 and (
            interleaved or _pow2_unit(rotary_pairs) < ROWS_FROM_GROUPS_OF
            or rotary_pairs < ROWS_BUSY_FROM[profile] * hp)
    # flat: forced, or by default where measured faster (FLAT_BY_DEFAULT); CHUNKED then says the tiling to
    # fall back on for tensors the flat tiling cannot take (heads not contiguous)
    joint_geometry = (config.joint == 1 if config.joint >= 0
                      else _joint_geometry(head_dim, rotary_pairs, passed, interleaved, profile))
    joint_4_mod_8 = joint_geometry and not interleaved and rotary_pairs % 8 == 4  # flat with blocks of 4
    flat = config.chunks == 2 or (config.chunks == -1 and FLAT_BY_DEFAULT and (
        passed > 0 or rotary_pairs % 2 == 1 or (not interleaved and rotary_pairs % 4 == 2) or joint_4_mod_8))
    v = min(8 if interleaved else 16, _pow2_unit(rotary_pairs)) if chunked else 1
    load_v = 2 * v if interleaved else v  # elements of one chunk's load: a load of NCH chunks holds ``tile``
    # 0: what the H100 sweeps found best. Rows: by width. Half-layout chunks of V <= 4 pairs: 1024, i.e.
    # 4 elements a thread at 8 warps (session 8, D = 36 and 52: 94-96% of copy bandwidth against 86%
    # at 2048, whose 2-4 chunks a thread ran slower once the index arithmetic was 32-bit).
    if config.tile:
        tile = config.tile
    elif chunked and not interleaved and v <= 4:
        tile = 1024
    else:
        tile = 1024 if load_width <= 16 else 2048
    # the copied tail's chunks: VP elements, dividing both its start (2 R2) and its length; a copy
    # program moves at least 2048 elements (16 bytes a thread at 8 warps) whatever the rotated width
    vp = min(16, _pow2_unit(2 * rotary_pairs), _pow2_unit(passed)) if chunked and passed else 1
    joint = flat and joint_geometry
    # the default words geometry takes the paired table too (the two were measured together)
    default_words = WORDS_BY_DEFAULT and _words_geometry(head_dim, rotary_pairs, passed, interleaved, joint)
    # the largest block the flat tiling takes (the plan narrows it where the heads' width needs)
    vb = config.block or (FLAT_BLOCK_R2_4 if joint and joint_4_mod_8 else FLAT_BLOCK)
    return {
        "R2": rotary_pairs, "CW": cw, "PASS": passed,
        "INTERLEAVED": interleaved, "HP": hp, "PP": _next_pow2(max(passed, 1)), "BR": max(1, tile // load_width),
        "CHUNKED": chunked, "V": v, "M": rotary_pairs // v, "NCH": max(1, tile // load_v) if chunked else 1,
        "VP": vp, "MP": passed // vp if vp > 1 else 1, "NCP": max(2048, tile) // vp if vp > 1 else 1,
        "STREAM": config.streaming, "num_warps": config.num_warps or (FLAT_WARPS if flat else ROW_WARPS), "FLAT": flat,
        "NBP": max(1, (config.tile or FLAT_TILE) // vb), "VB": vb,
        **({"maxnreg": config.maxnreg} if config.maxnreg else {}),
        "WORDS": bool(config.words) if config.words >= 0 else default_words,
        "JOINT": joint,
        "PAIRED": bool(config.tables) if config.tables >= 0 else PAIRED_TABLES_BY_DEFAULT and (
            default_words or (not interleaved and passed == 0 and (
                rotary_pairs % 8 in (3, 5) or joint and rotary_pairs % 8 == 2))),
    }


def _new_output(shape: tuple[int, ...], like: Tensor, poison: bool, eager: bool = False) -> Tensor:
    """A fresh output of ``like``'s dtype and device, NaN-filled when ``poison`` (the tests' hook). ``eager``
    (not tracing): ``empty_like`` where the shapes agree, half the host time of ``torch.empty(shape, dtype=,
    device=)``; while tracing, the allocation the compiled graphs were measured and tested with."""
    if eager and shape == like.shape:
        out = torch.empty_like(like, memory_format=torch.contiguous_format)
    else:
        out = torch.empty(shape, dtype=like.dtype, device=like.device)
    return out.fill_(float("nan")) if poison else out


def _new_outputs(q: Tensor, k: Tensor | None, out_q: Tensor | None, out_k: Tensor | None,
                 poison: bool, eager: bool = False) -> tuple[Tensor, Tensor | None]:
    """q's and k's outputs for a launch: the given ones, else fresh tensors of their shapes (NaN-filled
    when ``poison``; ``eager``: see :func:`_new_output`). Shared by the Triton and CuTeDSL launches."""
    if out_q is None:
        out_q = _new_output(q.shape, q, poison, eager)
    if k is not None and out_k is None:
        out_k = _new_output(k.shape, k, poison, eager)
    return out_q, out_k


def _check_device(name: str, x: Tensor) -> None:
    if not (x.is_cuda or _interpreting()):
        raise ValueError(
            f"{name} is on {x.device}: the Triton RoPE kernels need CUDA tensors "
            "(or TRITON_INTERPRET=1 set before triton is imported, to run them on the CPU interpreter)"
        )


def launch(
    q: Tensor,
    k: Tensor | None,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor | None,
    partial: bool,
    low_precision: bool,
    inverse: bool,
    out_q: Tensor | None = None,
    out_k: Tensor | None = None,
    *,
    interleaved: bool = False,
    config: LaunchConfig = DEFAULT_LAUNCH,
    poison: bool = False,
    traced: bool = False,
    out_buffer: Tensor | None = None,
    copy: tuple[Tensor, Tensor] | None = None,
    in_buffer: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Rotate (``inverse``: rotate back) q and k in one kernel launch; new (B, T, H, D) outputs.

    The rotated width is the table's: ``cos`` and ``sin`` are (max_seq_len, R/2), and the D - R
    trailing elements of each head are copied. ``interleaved`` pairs (2i, 2i + 1) instead of
    (i, i + R/2). Inputs are used in place with their strides (no copies). ``out_q``/``out_k`` (any
    strides: the slices of d qkv in :func:`qkv_backward`, or test buffers) receive the results
    instead of fresh tensors; fresh ones are NaN-filled first when ``poison``. ``config`` tunes the
    launch. ``traced``: launch through ``torch.library.wrap_triton``, as the bodies of the
    ``triton_op`` entries must (Inductor then launches the kernel itself). ``out_buffer``: the one
    buffer whose slices ``out_q`` (at its start) and ``out_k`` are; the kernel then writes both
    through it, the only tensor argument it mutates (see the kernel's OUT_SHARED: under
    torch.compile, mutated views are cloned and copied back). ``copy``: ``(src, dst)``, a (B, T, H, D)
    tensor of any strides and its slice of ``out_buffer`` (v's gradient in :func:`qkv_backward`), copied by
    programs of the same launch where the plan can take them, else by :func:`copy_heads` after it. ``in_buffer``
    (``traced`` only): the one buffer whose slices q (at its start) and k are, the qkv projection; the kernel then
    reads both through it (see :class:`LaunchPlan`). Shapes and dtypes are assumed valid (the module checks).

    Eagerly, the launch's arguments are a :class:`LaunchPlan` computed once per signature (see
    :func:`launch_plan`) and the kernel is launched through its compiled launcher (:meth:`LaunchPlan.run`).
    """
    if _kernels is None:
        raise RuntimeError(
            f"the Triton RoPE kernels need the `triton` package, which failed to import: {_TRITON_ERROR}"
        )
    if positions is not None and positions.dtype not in (torch.int32, torch.int64):
        positions = positions.long()
    plan = launch_plan(q, k, cos, sin, positions, partial, low_precision, inverse, out_q, out_k,
                       interleaved=interleaved, config=config, traced=traced, out_buffer=out_buffer, copy=copy,
                       in_buffer=in_buffer)
    out_q, out_k = _new_outputs(q, k, out_q, out_k, poison, eager=not traced)
    if plan is not None:
        plan.run(q, k, out_q, out_k, positions, cos, sin, out_buffer, None if copy is None else copy[0], in_buffer)
    if copy is not None and (plan is None or not plan.copies):
        copy_heads(copy[0], out_buffer, copy[1], traced=traced)
    return out_q, out_k


#: Launch plans of the recent signatures, per cos/sin table pair (:class:`rope.base.TensorCache`: a plan holds
#: tables derived from those tensors, so it is dropped with them or when they change in place).
_PLANS = TensorCache(64)


def launch_plan(
    q: Tensor,
    k: Tensor | None,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor | None,
    partial: bool,
    low_precision: bool,
    inverse: bool,
    out_q: Tensor | None = None,
    out_k: Tensor | None = None,
    *,
    interleaved: bool = False,
    config: LaunchConfig = DEFAULT_LAUNCH,
    traced: bool = False,
    out_buffer: Tensor | None = None,
    copy: tuple[Tensor, Tensor] | None = None,
    in_buffer: Tensor | None = None,
) -> LaunchPlan | None:
    """The :class:`LaunchPlan` of :func:`launch` with these arguments (None: nothing to launch), kept per signature.

    Why: working out a launch (tiling, block, strides in units, magic divisors, index width, the element
    tables) is some 40 Python operations, 10-15 us a call on the 2-core box before the kernel launch
    itself, for the module call's host time that #13 bounds. All of it is a function of the signature
    built here: shapes, strides, dtypes, the device, each tensor's alignment (the words reading and Triton's
    pointer specialisation depend on it), whether an offset needs 64 bits (from the storages' sizes),
    the flags, the copy's source and slice, and the cos/sin tensors (held as :class:`rope.base.TensorCache`
    holds them: same objects, unchanged). ``positions`` must be int32 or int64 (:func:`launch` converts). Not
    kept while tracing (the plan's values are then graph values), nor for inference-mode tables (no version
    counter).
    """
    if in_buffer is not None and not traced:
        raise ValueError("launch: in_buffer is for traced launches (rope_kernel_static takes k's offset in it)")
    if traced or cos.is_inference() or sin.is_inference():
        return _make_plan(q, k, cos, sin, positions, partial, low_precision, inverse, out_q, out_k,
                          interleaved, config, traced, out_buffer, copy, in_buffer)
    wide = _needs_wide_offsets(q, k, positions, out_q, out_k, out_buffer)
    key = (
        q.shape, q.stride(), q.dtype, q.get_device(), q.data_ptr() % 16,
        None if k is None else (k.shape, k.stride(), k.dtype, k.data_ptr() % 16),
        # not the positions' shape: the plan reads them through their strides alone (their shape is q's (B, T) or
        # (T,), checked by the module), and a torch.Size in the key cost host time on every call with positions
        None if positions is None else (positions.stride(), positions.dtype, positions.data_ptr() % 16),
        None if out_q is None else (out_q.stride(), out_q.storage_offset(), out_q.data_ptr() % 16),
        None if out_k is None else (out_k.stride(), out_k.storage_offset(), out_k.data_ptr() % 16),
        None if out_buffer is None else (out_buffer.storage_offset(), out_buffer.data_ptr() % 16),
        wide, bool(partial), bool(low_precision), bool(inverse), bool(interleaved), config,
        None if copy is None else (copy[0].shape, copy[0].stride(), copy[0].dtype, copy[0].data_ptr() % 16,
                                   _needs_wide_offsets(copy[0]), copy[1].stride(), copy[1].storage_offset()),
    )
    plan = _PLANS.get((cos, sin), key)
    if plan is None:
        plan = _make_plan(q, k, cos, sin, positions, partial, low_precision, inverse, out_q, out_k,
                          interleaved, config, traced, out_buffer, copy)
        _PLANS.put((cos, sin), key, plan)
    return plan


class LaunchPlan:
    """One signature's launch of the rotation kernel: everything but the tensors, worked out once.

    :meth:`run` fills in the call's tensors. The first run goes through Triton's own launch (``kernel[grid]
    (...)``: argument binding, specialisation, the compile cache, and the compile itself the first time);
    it returns the compiled kernel, and later runs call that kernel's launcher directly, with the arguments
    the plan already holds in the kernel's order: the specialisation Triton would compute is the same by
    construction (the plan's key holds each tensor's alignment, and its integers are fixed). Triton's own
    launch is kept where the direct one does not apply: the CPU interpreter, tracing (``wrap_triton``), a
    launch hook set (profilers: Triton then builds launch metadata), another current device.

    ``copies``: the launch also copies a tensor into the output buffer (:func:`launch`'s ``copy``), through
    :func:`rope._triton_kernels.rope_copy_kernel`, whose eighth tensor is the copy's source.

    Traced, the slots no program reads get None (a constant to Triton, which drops it from the compiled kernel's
    arguments): positions where there are none, k's output slot where both outputs go through the buffer, and k's
    where it is read out of ``in_buffer`` (``k_in``: the kernel's KIN). Why: Inductor's generated code passes
    every tensor argument on every launch, and each view it passes is a ``reinterpret_tensor`` call: the
    compiled forward's launch line cost 5.25 us [4.24, 6.36] of host time more than Inductor's own fused
    rotation, in a forward that is host-bound (docs/kernels.md, session 23); with the projection handed over
    whole and these Nones, 3-5 us less on one machine (session 24). Eagerly the placeholders stay tensors (the
    eager kernels' specialisations, measured, are unchanged).
    """

    __slots__ = ("grid", "ints", "constexprs", "tail", "tables", "shared", "traced", "jit", "compiled", "device",
                 "stream", "copies", "k_in")

    def __init__(self, grid: int, ints: tuple, constexprs: dict, tables: tuple[Tensor, Tensor] | None, shared: bool,
                 traced: bool, device: int, copies: bool = False, k_in: bool = False) -> None:
        self.copies = copies
        self.k_in = k_in  # q and k read through in_buffer (traced only)
        self.grid = grid
        self.ints = ints  # the arguments after the seven tensors, up to the constexprs
        self.constexprs = constexprs  # the kernel's constexprs and Triton's launch options (num_warps, ...)
        # the tables the kernel reads where they are not the call's cos/sin (the flat tiling's element tables):
        # derived values, never the call's own tensors, which the plan cache must not keep alive
        self.tables = tables
        self.shared = shared  # OUT_SHARED: both outputs through out_buffer
        self.traced = traced
        self.jit = self.compiled = None  # the kernel and Triton's compiled kernel, after the first run
        self.device = device
        self.stream = self.tail = None

    def tensors(self, q: Tensor, k: Tensor | None, out_q: Tensor, out_k: Tensor | None, positions: Tensor | None,
                cos: Tensor, sin: Tensor, out_buffer: Tensor | None = None, copy_src: Tensor | None = None,
                in_buffer: Tensor | None = None) -> tuple[Tensor | None, ...]:
        """The kernel's tensor arguments for this call: seven (traced, None where no program reads one), and the
        copy's source where the plan copies."""
        if self.tables is not None:
            cos, sin = self.tables
        kk, ok = (k, out_k) if k is not None else (q, out_q)  # k absent: no program reads these
        unused = None if self.traced else cos  # a slot no program reads (eagerly a tensor: see the class)
        if self.k_in:
            q, kk = in_buffer, None
        pos = positions if positions is not None else unused
        if self.shared:  # both outputs through the buffer; ok's slot is never written (the kernel ignores it)
            args = q, kk, out_buffer, unused, cos, sin, pos
        else:
            args = q, kk, out_q, ok, cos, sin, pos
        return (*args, copy_src) if self.copies else args

    def kernel(self):
        """The kernel this plan launches (looked up at each call: the tests replace kernels with spies)."""
        return _kernels.rope_copy_kernel if self.copies else _kernels.rope_kernel

    def run(self, q: Tensor, k: Tensor | None, out_q: Tensor, out_k: Tensor | None, positions: Tensor | None,
            cos: Tensor, sin: Tensor, out_buffer: Tensor | None = None, copy_src: Tensor | None = None,
            in_buffer: Tensor | None = None) -> None:
        """Launch on this call's tensors, which have the plan's signature (:func:`launch_plan`)."""
        args = self.tensors(q, k, out_q, out_k, positions, cos, sin, out_buffer, copy_src, in_buffer)
        compiled = self.compiled
        if (compiled is not None and self.kernel() is self.jit and _launch_hooks_unset()
                and torch.cuda.current_device() == self.device):
            compiled.run(self.grid, 1, 1, self.stream(self.device), compiled.function, compiled.packed_metadata,
                         None, None, None, *args, *self.ints, *self.tail)
            return
        if _elsewhere(self.device) and not self.traced:
            with torch.cuda.device(self.device):  # then the launch above, or Triton's, on the tensors' GPU
                self.run(q, k, out_q, out_k, positions, cos, sin, out_buffer, copy_src, in_buffer)
            return
        got = self.triton_launch(args)
        jit = self.kernel()  # a JITFunction, unless replaced (the tests' spies)
        if (self.device >= 0 and not self.traced and not _interpreting() and hasattr(got, "packed_metadata")
                and hasattr(jit, "signature") and torch.cuda.current_device() == self.device):
            # the launcher takes every argument in the kernel's order, constexprs included (it skips them)
            params = list(jit.signature.parameters.values())[len(args) + len(self.ints):]
            self.tail = tuple(self.constexprs.get(p.name, p.default) for p in params)
            self.stream = _triton_driver().get_current_stream
            self.jit, self.compiled = jit, got

    def triton_launch(self, args: tuple[Tensor | None, ...]) -> object:
        """Triton's own launch of the kernel with these tensors (what :meth:`run` does the first time), which
        returns the compiled kernel: the bare kernel launch that the benchmark compares the module call with.
        Traced (``torch.compile``), the kernel with its integers as constants (``rope_kernel_static``)."""
        if self.traced:
            static = _kernels.rope_copy_kernel_static if self.copies else _kernels.rope_kernel_static
            ints = _by_name(static, len(args), self.ints)
            return _traced_kernel(self.copies)[(self.grid,)](*args, **ints, **self.constexprs)
        return self.kernel()[(self.grid,)](*args, *self.ints, **self.constexprs)


def _elsewhere(device: int) -> bool:
    """Whether the CUDA device ``device`` (-1: not CUDA) is not the current one. Why it matters: Triton launches on
    the current device and its stream, whatever device the tensors are on, so a call on tensors of another GPU
    (a module moved to ``cuda:1`` without ``torch.cuda.set_device``) must switch first. The autograd engine
    switches for the backward; nothing does for the forward."""
    return device >= 0 and torch.cuda.current_device() != device


def _launch_hooks_unset() -> bool:
    """Whether no Triton launch hook is set (a profiler's hooks need Triton's own launch). Triton 3.6 holds them
    as chains of calls (``knobs.HookChain``, empty by default), earlier versions as a callable or None."""
    rt = _kernels.triton.knobs.runtime
    return _no_hook(rt.launch_enter_hook) and _no_hook(rt.launch_exit_hook)


def _no_hook(hook: object) -> bool:
    return hook is None or getattr(hook, "calls", None) == []


@functools.cache
def _triton_driver():
    return _kernels.triton.runtime.driver.active


def _make_plan(q: Tensor, k: Tensor | None, cos: Tensor, sin: Tensor, positions: Tensor | None, partial: bool,
               low_precision: bool, inverse: bool, out_q: Tensor | None, out_k: Tensor | None, interleaved: bool,
               config: LaunchConfig, traced: bool, out_buffer: Tensor | None,
               copy: tuple[Tensor, Tensor] | None = None, in_buffer: Tensor | None = None) -> LaunchPlan | None:
    """:func:`launch_plan` worked out (None: nothing to launch). Outputs not given are fresh contiguous tensors
    of q's and k's shapes, as :func:`launch` allocates them. ``copy`` joins the launch where the outputs share
    ``out_buffer`` and its chunk ids fit (the plan's ``copies``); else :func:`launch` copies it apart. ``in_buffer``
    (traced): q and k are read through it, k at its offset (the kernel's KIN)."""
    B, T, HQ, D = q.shape
    HK = k.shape[2] if k is not None else 0
    nrq, nrk = B * T * HQ, B * T * HK
    if nrq + nrk == 0 or D == 0:
        return None
    # the outputs' geometry: given ones as they are, fresh ones contiguous (meta tensors stand in for them here)
    oq = out_q if out_q is not None else torch.empty(q.shape, dtype=q.dtype, device="meta")
    kk = k if k is not None else q
    ok = out_k if out_k is not None else (oq if k is None else torch.empty(k.shape, dtype=k.dtype, device="meta"))
    if positions is not None:
        spb, spt = positions.stride() if positions.dim() == 2 else (0, positions.stride(0))
    else:
        spb, spt = 0, 0
    profile = device_profile(q.get_device())
    cfg = launch_config(D, cos.shape[1], bool(partial), bool(interleaved), config, profile)
    if cfg["JOINT"] and not (k is not None and (HK == HQ or config.joint == 1 and HK < HQ)):
        # q's programs cannot take k's blocks (k absent, more k heads, or GQA unless forced: not measured): the
        # choice measured for programs apart, tiling, tables, partner reads and block alike
        cfg = launch_config(D, cos.shape[1], bool(partial), bool(interleaved), replace(config, joint=0), profile)
    if cfg["CHUNKED"] and max(nrq, nrk) * max(cfg["M"], cfg["MP"]) + max(cfg["NCH"], cfg["NCP"]) >= 2**31:
        # chunk ids are int32: rows instead
        cfg = launch_config(D, cos.shape[1], bool(partial), bool(interleaved), replace(config, chunks=0), profile)
    shared = out_buffer is not None and k is not None
    ook = out_k.storage_offset() - out_buffer.storage_offset() if shared else 0
    if shared and (out_q.storage_offset() != out_buffer.storage_offset() or ook < 0):
        raise ValueError(f"out_buffer needs out_q at its start and out_k after it, got storage offsets "
                         f"{out_q.storage_offset()} and {out_k.storage_offset()} in a buffer at "
                         f"{out_buffer.storage_offset()}")
    k_in = in_buffer is not None and k is not None
    oki = k.storage_offset() - in_buffer.storage_offset() if k_in else 0
    if k_in and (q.storage_offset() != in_buffer.storage_offset() or oki <= 0 or copy is not None):
        raise ValueError(f"in_buffer needs q at its start and k after it (and no copy), got storage offsets "
                         f"{q.storage_offset()} and {k.storage_offset()} in a buffer at {in_buffer.storage_offset()}")
    vb = _flat_block(D, HQ, HK, max(nrq, nrk), cfg["NBP"], q, kk, oq, ok, largest=cfg["VB"]) \
        if cfg["FLAT"] else 0
    given = (cos, sin)
    if cfg["FLAT"] and not vb:  # the flat tiling cannot take these tensors: rows or chunks (a copy: the dict
        cfg = {**cfg, "FLAT": False, "JOINT": False,  # is launch_config's cached one)
               "num_warps": config.num_warps or ROW_WARPS}
    regs = _row_registers(cfg, config, profile, positions is not None, traced)
    if regs:
        cfg = {**cfg, "maxnreg": regs}  # (a copy: the dict is launch_config's cached one)
    br = cfg["BR"]
    if max(nrq, nrk) + br >= 2**31:
        raise ValueError(f"too many rows (B*T*heads) for one launch: B={B}, T={T}, heads {HQ}+{HK}")
    nppq = nppk = 0
    if vb:  # blocks of vb elements, NBP a program; a token's heads are HQ D / vb (HK D / vb) blocks
        sv = _row_stride_unit(q, kk, oq, ok, dims=2)
        units = (HQ * D // vb, HK * D // vb)
        nrq, nrk = nrq * D // vb, nrk * D // vb
        cfg = {**cfg, "NBP": cfg["NBP"] * cfg["VB"] // vb}  # as many elements a program with narrower blocks
        # (a copy: the dict is launch_config's cached one)
        npq, npk = -(-nrq // cfg["NBP"]), -(-nrk // cfg["NBP"])
        if cfg["JOINT"]:
            npk = 0  # q's programs take k's blocks: no k programs
        cos, sin = element_tables(cos, sin, D, bool(interleaved), vb, cfg["PAIRED"], cache=not traced)
    else:
        sv = _row_stride_unit(q, kk, oq, ok)
        units = (HQ, HK)
        # a program's work unit: BR rows, or NCH chunks of which a row has M (and NCP tail chunks, MP a row)
        unit, per_row = (cfg["NCH"], cfg["M"]) if cfg["CHUNKED"] else (br, 1)
        npq, npk = -(-nrq * per_row // unit), -(-nrk * per_row // unit)
        if cfg["CHUNKED"] and cfg["PASS"]:
            nppq, nppk = -(-nrq * cfg["MP"] // cfg["NCP"]), -(-nrk * cfg["MP"] // cfg["NCP"])
    sv = _pow2_unit(math.gcd(sv, ook)) if ook else sv
    sv = _pow2_unit(math.gcd(sv, oki)) if oki else sv  # k's offset in the projection, in units of SV (KIN)
    if cfg["WORDS"] and not (vb and sv % 2 == 0 and _word_aligned(q, traced) and _word_aligned(kk, traced)):
        cfg = {**cfg, "WORDS": False}  # (a copy: the dict is launch_config's cached one)
    if sin.stride() != cos.stride():  # the kernel indexes both tables with cos's stride
        cos, sin = cos.contiguous(), sin.contiguous()
    csv = _pow2_unit(cos.stride(0))  # the table's row stride, passed in its power-of-two unit like SV
    # 32-bit index arithmetic where every element offset of every operand fits (the common case)
    wide = (_needs_wide_offsets(q, kk, cos, positions, out_q, out_k, out_buffer)
            or max(oq.numel(), ok.numel()) >= 1 << 30)  # fresh outputs: their storage is their elements
    ints = (
        *_scaled_strides(q, sv), *_scaled_strides(kk, sv), *_scaled_strides(oq, sv), *_scaled_strides(ok, sv),
        spb, spt, cos.stride(0) // csv, cos.shape[0], ook // sv,
        T, *magic_divisor(max(T, 1)), units[0], *magic_divisor(max(units[0], 1)), units[1],
        *magic_divisor(max(units[1], 1)), nrq, nrk, npq, npq + npk, nppq,
    )  # fmt: skip
    constexprs = dict(
        HAS_POS=positions is not None, LOW=bool(low_precision) and q.dtype != torch.float32,
        INVERSE=bool(inverse), EMULATE=_interpreting(), SV=sv, CSV=csv, OUT_SHARED=shared, WIDE=wide,
        **{**cfg, "VB": vb or FLAT_BLOCK},
    )
    tables = None if cos is given[0] and sin is given[1] else (cos, sin)
    programs = npq + npk + nppq + nppk
    geometry = None
    if copy is not None and shared and copy[0].shape[:2] == (B, T):
        # copy programs of copy_heads's size whatever the rotation's warps: with the flat tiling's 4 warps, programs
        # of 16 bytes a thread (1024 bf16 elements) ran the launch 2-3% slower at D = 54 and 114 (session 22)
        geometry = _copy_geometry(*copy, out_buffer, COPY_TILE)
    if geometry is not None:
        ints = (*ints, *geometry.fused_ints, programs)
        constexprs.update(CVP=geometry.meta["VP"], CMP=geometry.meta["MP"], CNCP=geometry.meta["NCP"],
                          CSVV=geometry.meta["SV"], CWIDE=geometry.meta["WIDE"])
        programs += geometry.programs
    elif traced:  # the static kernel's KIN, given even where 0: Inductor compiles a user kernel with the
        constexprs["KIN"] = oki // sv  # constexprs a launch leaves out set to None (H100, session 24)
    return LaunchPlan(programs, ints, constexprs, tables, shared, traced, q.get_device() if q.is_cuda else -1,
                      copies=geometry is not None, k_in=k_in)


def _traced_kernel(copies: bool = False):
    """The kernel wrapped for tracing by torch.compile (inside a ``triton_op`` body): ``rope_kernel_static``, whose
    shapes and strides are constants, so Inductor's launch hands over the seven tensors alone (static shapes: a
    dynamic-shape trace calls the custom op, which launches ``rope_kernel``); ``copies``: its twin that also
    copies v's gradient, ``rope_copy_kernel_static``.

    Wrapped at each call, never kept: ``wrap_triton`` returns the bare kernel where a triton op runs eagerly (its
    backend turns the wrapping off) and the traceable wrapper while tracing, so a kept first answer was the wrong
    one for the other (a triton op called eagerly, then a compiled graph traced with fake tensors: the bare kernel
    launched on them, "Cannot access data pointer", H100, session 22)."""
    return torch.library.wrap_triton(_kernels.rope_copy_kernel_static if copies else _kernels.rope_kernel_static)


def _by_name(kernel, first: int, values: tuple) -> dict:
    """``values`` keyed by the names of ``kernel``'s parameters from position ``first`` on: the integers of a
    launch of a runtime-argument kernel, in its order, handed to its constant twin (``*_static``), which takes them
    as constexprs, that is by name."""
    names = _param_names(kernel, first, len(values))
    return dict(zip(names, values, strict=True))


@functools.cache
def _param_names(kernel, first: int, count: int) -> tuple[str, ...]:
    return tuple(inspect.signature(kernel.fn).parameters)[first:first + count]


def _traced_copy_kernel():
    """:func:`copy_heads`'s kernel wrapped for tracing by torch.compile: its twin with constant shapes and strides
    (wrapped at each call, as :func:`_traced_kernel`)."""
    return torch.library.wrap_triton(_kernels.copy_heads_kernel_static)


@functools.lru_cache(maxsize=64)
def magic_divisor(d: int) -> tuple[int, int]:
    """``(m, s)`` with ``n // d == (((n * m) >> 31) + n) >> s`` for every ``0 <= n < 2**31``, both below
    2**31: the kernel's divisions by H and T become a multiply, shifts and an add.

    Granlund and Montgomery's method with the numerator one bit short of the word: ``s = ceil(log2 d)``,
    ``M = ceil(2**(31 + s) / d)`` (then ``2**31 <= M < 2**32`` and its error ``M d - 2**(31 + s) < 2**s``
    keeps every quotient exact), passed as ``m = M - 2**31`` so it fits an int32 argument."""
    if not 1 <= d < 2**31:
        raise ValueError(f"magic_divisor: d={d} is not in [1, 2**31)")
    s = (d - 1).bit_length()
    return -(-(1 << (31 + s)) // d) - (1 << 31), s


def _needs_wide_offsets(*tensors: Tensor | None) -> bool:
    """Whether an element offset the kernel computes for one of ``tensors`` can reach 2**31: it then
    does its index arithmetic in 64 bits (``WIDE``). Bounded by the storage (an offset from the data
    pointer is below the storage's element count; the masked rows of a last partial program reach
    one batch past the end, hence the factor 2): storages under 2**30 elements stay in 32 bits.
    One C call per tensor, where summing size x stride over the dims cost 4 us per launch. None (an absent
    operand) is skipped, so that a launch's plan asks once for all of its operands."""
    for t in tensors:
        if t is not None and t.untyped_storage().nbytes() >= (1 << 30) * t.element_size():
            return True
    return False


def _pow2_unit(n: int, cap: int = 16) -> int:
    """The largest power of two (at most ``cap``) dividing ``n`` (``cap`` for 0)."""
    return min(cap, n & -n) if n else cap


def _row_stride_unit(*tensors: Tensor, dims: int = 3) -> int:
    """The largest power of two (at most 16) dividing every row stride (batch, token, head; the first
    ``dims``) of the tensors: the kernel multiplies the strides back by it as a constexpr."""
    g = 0
    for t in tensors:
        for st in t.stride()[:dims]:
            g = math.gcd(g, st)
    return _pow2_unit(g)


_ELEMENT_TABLES = TensorCache(8)


def element_table_period(D: int, vb: int, paired: bool = False) -> int:
    """Columns of one period of :func:`element_tables`. Paired: D (a column is 8 bytes, an even one starts
    16-byte aligned). Split: lcm(D, 4) (lcm(D, 2) = D for blocks of 2), the smallest run of whole rows that
    a multiple of 4 columns (16 bytes of float32) also ends, so that a block's columns start 16-byte aligned
    whatever D is. (lcm(D, vb) would align them to the block too, at twice the table where D = 4 mod 8 and
    four times where D = 2 mod 4: the tables are read through L2 by every token, and at D = 254 the larger
    ones cost a quarter of the bandwidth.)"""
    unit = 2 if paired or vb < 4 else 4
    return D * unit // math.gcd(D, unit)


def element_table_width(D: int, vb: int, paired: bool = False) -> int:
    """Columns of a position's row in :func:`element_tables`: a period, and the columns that a block starting
    at its last aligned column reads past it; rounded up to 16-byte rows (4 columns split, 2 paired)."""
    period = element_table_period(D, vb, paired)
    unit = 2 if paired else 4
    return -(-(period + vb - math.gcd(vb, period)) // unit) * unit


def element_tables(cos: Tensor, sin: Tensor, D: int, interleaved: bool, vb: int, paired: bool = False,
                   cache: bool = True) -> tuple[Tensor, Tensor]:
    """The flat tiling's tables: per position, the cos and the signed sin of every element's pair.

    ``cos``/``sin`` are (positions, R2) by pair. Column j of a table is element d = j mod D of a row: it
    holds pair i's cos and +sin (i = d, half layout, or d // 2 interleaved: the first element of the pair)
    or -sin (the second), so that every element is ``x[d] c + x[partner] s'``; the copied tail
    (2 R2 <= d < D) holds 1 and 0. The columns run for a period (:func:`element_table_period`) and on
    (:func:`element_table_width`): a block starting at element w of a token's heads reads columns from
    w mod P, and a block crossing into the next row finds that row's start where it reads.

    Split (two tables, returned as cos, sin): P = lcm(D, 4), so a block's columns start at a multiple of 4
    and its cos/sin loads are 16-byte vectors whatever D is (from d = w mod D they were 8 bytes wide at
    D = 2 mod 4). Paired (one float32 table, returned twice): column j is its cos and signed sin side by side,
    P = D, and a block's 2 VB floats from its even column d on are 16-byte vectors too, from a table half
    as wide at D = 2 mod 4. Which one a geometry reads is measured (``launch_config``'s PAIRED).
    ``cache``: keep the last few (:class:`rope.base.TensorCache`: the module's buffers are reused call after
    call; not while tracing, not for inference tensors).
    """
    cache = cache and TensorCache.usable(cos, sin)
    key = (D, interleaved, vb, paired)
    if cache and (hit := _ELEMENT_TABLES.get((cos, sin), key)) is not None:
        return hit
    r2 = cos.shape[1]
    width = element_table_width(D, vb, paired)
    d = torch.arange(width, device=cos.device) % D
    pair = torch.where(d < 2 * r2, d // 2 if interleaved else d % max(r2, 1), 0)
    second = (d % 2 == 1) if interleaved else (d >= r2)
    tail = d >= 2 * r2
    ce = torch.where(tail, 1.0, cos[:, pair])
    se = torch.where(tail, 0.0, torch.where(second, -sin[:, pair], sin[:, pair]))
    if paired:
        table = torch.stack((ce, se), dim=-1).flatten(1).to(torch.float32)
        ce = se = table
    if cache:
        _ELEMENT_TABLES.put((cos, sin), key, (ce, se))
    return ce, se


def _flat_block(D: int, HQ: int, HK: int, rows: int, per_program: int, *tensors: Tensor,
                largest: int = 8) -> int:
    """The flat tiling's block for these tensors (elements; 0: the tiling cannot take them).

    It needs every token's heads contiguous (head stride D, element stride 1) in each tensor, so that a
    token is one run of H D elements cut into blocks; the block is the largest of 8, 4, 2 dividing both
    tokens' runs and at most D (a block then spans at most two rows, of one token), and at most ``largest``."""
    if any(t.stride(3) != 1 or (t.shape[2] > 1 and t.stride(2) != D) for t in tensors):
        return 0
    for vb in (8, 4, 2):
        if vb <= min(D, largest) and (HQ * D) % vb == 0 and (HK * D) % vb == 0:
            return vb if rows * D // vb + per_program < 2**31 else 0
    return 0


def _word_aligned(t: Tensor, traced: bool) -> bool:
    """Whether ``t``'s data starts on a 4-byte boundary, so its even element offsets can be read as int32 words
    (``WORDS``). Traced (torch.compile): from the storage offset, as Inductor reasons about alignment (its
    allocations, like the caching allocator's, are aligned); eagerly from the pointer."""
    if traced:
        return (t.storage_offset() * t.element_size()) % 4 == 0
    return t.data_ptr() % 4 == 0


def _scaled_strides(t: Tensor, unit: int) -> tuple[int, int, int, int]:
    sb, st, sh, sd = t.stride()
    return sb // unit, st // unit, sh // unit, sd


# -- ops for torch.compile: fake shapes and registered autograd, no graph break ---------------------
# Two sets of one schema. ``ropelab::rope_fwd`` / ``rope_bwd`` / ``rope_qkv_bwd`` are custom ops,
# opaque to the compiler: Inductor calls their Python bodies at run time, so every call pays the
# custom-op dispatch and Triton's Python launcher (0.2-0.3 ms of host time per call in a compiled
# seed004 step on the H100, profiled: enough to leave the GPU waiting, docs/kernels.md). Their
# ``_traced`` twins are ``torch.library.triton_op``s: Inductor traces the body and launches the
# Triton kernel from its generated code like its own kernels. Tracing needs a real GPU kernel (not
# the CPU interpreter; :func:`_compiled_ops` picks the set per call) and static shapes (the launch
# geometry is Python arithmetic on shapes and strides: a dynamic-shape trace calls the custom op).
# interleaved: the layout; tile, num_warps, chunks, streaming and poison: the LaunchConfig and the poison
# hook of the calling module, as scalars. The rotated width is the tables' (cos.shape[1] pairs).


def _empty_k(q: Tensor) -> Tensor:
    return q.new_empty((0,))


class _OpSet(NamedTuple):
    """The forward, backward, fused-qkv-backward and fused-qkv-forward ops of one kind (custom ops or triton
    ops)."""

    fwd: Callable
    bwd: Callable
    qkv_bwd: Callable
    qkv_fwd: Callable


def _define_ops(suffix: str, traced: bool) -> _OpSet:
    """Register ``ropelab::rope_fwd{suffix}``, ``rope_bwd{suffix}``, ``rope_qkv_bwd{suffix}`` and
    ``rope_qkv_fwd{suffix}``: custom ops with fake implementations, or (``traced``) triton ops whose bodies
    Inductor traces."""
    define = torch.library.triton_op if traced else torch.library.custom_op

    def body(inverse: bool):
        def run(q: Tensor, k: Tensor | None, cos: Tensor, sin: Tensor, positions: Tensor | None, partial: bool,
                low_precision: bool, interleaved: bool = False, tile: int = DEFAULT_LAUNCH.tile,
                num_warps: int = DEFAULT_LAUNCH.num_warps, poison: bool = False,
                chunks: int = DEFAULT_LAUNCH.chunks, streaming: bool = DEFAULT_LAUNCH.streaming,
                tables: int = DEFAULT_LAUNCH.tables, maxnreg: int = DEFAULT_LAUNCH.maxnreg,
                words: int = DEFAULT_LAUNCH.words, block: int = DEFAULT_LAUNCH.block,
                joint: int = DEFAULT_LAUNCH.joint,
                ) -> tuple[Tensor, Tensor]:
            if traced and not _static(q, k, positions):  # a dynamic-shape trace: the opaque custom op
                fallback = CUSTOM_OPS.bwd if inverse else CUSTOM_OPS.fwd
                return fallback(q, k, cos, sin, positions, partial, low_precision, interleaved, tile, num_warps,
                                poison, chunks, streaming, tables, maxnreg, words, block, joint)
            yq, yk = launch(q, k, cos, sin, positions, partial, low_precision, inverse, interleaved=interleaved,
                            config=LaunchConfig(tile, num_warps, chunks, streaming, tables, maxnreg, words, block,
                                                joint),
                            poison=poison, traced=traced)
            return yq, _empty_k(q) if yk is None else yk

        return run

    def qkv_body(gq: Tensor, gk: Tensor, gv: Tensor | None, cos: Tensor, sin: Tensor, positions: Tensor | None,
                 partial: bool, low_precision: bool, interleaved: bool = False, tile: int = DEFAULT_LAUNCH.tile,
                 num_warps: int = DEFAULT_LAUNCH.num_warps, poison: bool = False,
                 chunks: int = DEFAULT_LAUNCH.chunks, streaming: bool = DEFAULT_LAUNCH.streaming,
                 tables: int = DEFAULT_LAUNCH.tables, maxnreg: int = DEFAULT_LAUNCH.maxnreg,
                 words: int = DEFAULT_LAUNCH.words, block: int = DEFAULT_LAUNCH.block,
                 joint: int = DEFAULT_LAUNCH.joint) -> Tensor:
        if traced and not _static(gq, gk, gv, positions):
            return CUSTOM_OPS.qkv_bwd(gq, gk, gv, cos, sin, positions, partial, low_precision, interleaved, tile,
                                      num_warps, poison, chunks, streaming, tables, maxnreg, words, block, joint)
        return qkv_backward(gq, gk, gv, cos, sin, positions, partial, low_precision, interleaved,
                            LaunchConfig(tile, num_warps, chunks, streaming, tables, maxnreg, words, block, joint),
                            poison, traced=traced)

    def qkv_fwd_body(qkv: Tensor, seq_len: int, cos: Tensor, sin: Tensor, positions: Tensor | None, hq: int, hk: int,
                     partial: bool, low_precision: bool, interleaved: bool = False, tile: int = DEFAULT_LAUNCH.tile,
                     num_warps: int = DEFAULT_LAUNCH.num_warps, poison: bool = False,
                     chunks: int = DEFAULT_LAUNCH.chunks, streaming: bool = DEFAULT_LAUNCH.streaming,
                     tables: int = DEFAULT_LAUNCH.tables, maxnreg: int = DEFAULT_LAUNCH.maxnreg,
                     words: int = DEFAULT_LAUNCH.words, block: int = DEFAULT_LAUNCH.block,
                     joint: int = DEFAULT_LAUNCH.joint) -> tuple[Tensor, Tensor]:
        """Rotated q and k of the projection ``qkv``: (B, T, (hq + 2 hk) D), or (B T, (hq + 2 hk) D) with T =
        ``seq_len`` (:func:`_flat_projection`). Traced, the kernel reads both through ``qkv`` itself (``in_buffer``):
        Inductor's launch then passes the projection's buffer, not views of it (see :class:`LaunchPlan`)."""
        if traced and not _static(qkv, positions):
            return CUSTOM_OPS.qkv_fwd(qkv, seq_len, cos, sin, positions, hq, hk, partial, low_precision, interleaved,
                                      tile, num_warps, poison, chunks, streaming, tables, maxnreg, words, block, joint)
        width = qkv.shape[-1]
        q, k, _ = split_qkv(qkv if qkv.dim() == 3 else qkv.view(-1, seq_len, width), hq, hk, width // (hq + 2 * hk))
        yq, yk = launch(q, k, cos, sin, positions, partial, low_precision, False, interleaved=interleaved,
                        config=LaunchConfig(tile, num_warps, chunks, streaming, tables, maxnreg, words, block, joint),
                        poison=poison, traced=traced, in_buffer=qkv if traced else None)
        return yq, yk

    ops = _OpSet(
        define(f"ropelab::rope_fwd{suffix}", mutates_args=())(body(False)),
        define(f"ropelab::rope_bwd{suffix}", mutates_args=())(body(True)),
        define(f"ropelab::rope_qkv_bwd{suffix}", mutates_args=())(qkv_body),
        define(f"ropelab::rope_qkv_fwd{suffix}", mutates_args=())(qkv_fwd_body),
    )
    if not traced:  # a triton op's fake is its traced body
        ops.fwd.register_fake(_fake)
        ops.bwd.register_fake(_fake)
        ops.qkv_bwd.register_fake(_qkv_bwd_fake)
        ops.qkv_fwd.register_fake(_qkv_fwd_fake)

    def setup_context(ctx, inputs, output):
        q, k, cos, sin, positions, partial, low_precision, *launch_args = inputs
        ctx.save_for_backward(cos, sin, positions)
        ctx.has_k = k is not None
        ctx.partial = partial
        ctx.low_precision = low_precision
        # interleaved, tile, num_warps, poison, chunks, streaming, tables, maxnreg, words, block, joint
        ctx.launch_args = launch_args

    def grads(op):
        def backward(ctx, gq, gk):
            cos, sin, positions = ctx.saved_tensors
            dq, dk = op(gq, gk if ctx.has_k else None, cos, sin, positions, ctx.partial, ctx.low_precision,
                        *ctx.launch_args)
            return (dq, dk if ctx.has_k else None) + (None,) * 16

        return backward

    ops.fwd.register_autograd(grads(ops.bwd), setup_context=setup_context)
    ops.bwd.register_autograd(grads(ops.fwd), setup_context=setup_context)
    return ops


def _fake(q, k, cos, sin, positions, partial, low_precision, interleaved=False, tile=0, num_warps=0, poison=False,
          chunks=-1, streaming=False, tables=-1, maxnreg=0, words=-1, block=0, joint=-1):
    yk = _empty_k(q) if k is None else torch.empty(k.shape, dtype=k.dtype, device=k.device)
    return torch.empty(q.shape, dtype=q.dtype, device=q.device), yk


def _qkv_fwd_fake(qkv, seq_len, cos, sin, positions, hq, hk, partial, low_precision, interleaved=False, tile=0,
                  num_warps=0, poison=False, chunks=-1, streaming=False, tables=-1, maxnreg=0, words=-1, block=0,
                  joint=-1):
    W = qkv.shape[-1]
    D = W // (hq + 2 * hk)
    B = qkv.shape[0] if qkv.dim() == 3 else qkv.shape[0] // seq_len
    return qkv.new_empty((B, seq_len, hq, D)), qkv.new_empty((B, seq_len, hk, D))


def _compiled_qkv_forward(qkv: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None, hq: int, hk: int,
                          partial: bool, low_precision: bool, *launch_args) -> tuple[Tensor, Tensor]:
    """Rotated q and k of the (B, T, W) projection inside a compiled graph: the fused-qkv forward op of
    :func:`_compiled_ops`, handed the projection by :func:`_flat_projection` with T beside it. ``launch_args``:
    interleaved, tile, num_warps, poison, chunks, streaming, tables, maxnreg, words, block, joint."""
    return _compiled_ops(qkv).qkv_fwd(_flat_projection(qkv), qkv.shape[1], cos, sin, positions, hq, hk, partial,
                                      low_precision, *launch_args)


def _flat_projection(qkv: Tensor) -> Tensor:
    """The (B, T, W) projection as a (B T, W) view where its batch and time dims merge (else as it is), for the
    fused-qkv forward op under torch.compile. Why: the projection is a matmul's (B T, W) output that the model
    views as (B, T, W); handed over in the matmul's own shape, Inductor's launch passes that buffer by name,
    where a (B, T, W) argument is one ``reinterpret_tensor`` call a layer of host time."""
    if qkv.numel() and (qkv.shape[1] == 1 or qkv.stride(0) == qkv.shape[1] * qkv.stride(1)):
        return qkv.flatten(0, 1)
    return qkv


def _qkv_bwd_fake(gq, gk, gv, cos, sin, positions, partial, low_precision, interleaved=False, tile=0, num_warps=0,
                  poison=False, chunks=-1, streaming=False, tables=-1, maxnreg=0, words=-1, block=0, joint=-1):
    B, T, HQ, D = gq.shape
    return gq.new_empty((B, T, (HQ + 2 * gk.shape[2]) * D))


def _static(*tensors: Tensor | None) -> bool:
    """Whether every shape and stride is a plain int (not a symbol of a dynamic-shape trace)."""
    return all(isinstance(n, int) for t in tensors if t is not None for n in (*t.shape, *t.stride()))


def _compiled_ops(x: Tensor) -> _OpSet:
    """The op set a compiled graph should call for input ``x``: the triton ops where Inductor can
    trace the launch (CUDA, a real kernel), else the custom ops. (Shapes cannot be told static from
    here: Dynamo answers ``isinstance(size, int)`` true for symbols too; the triton ops' bodies, traced
    later with the real symbols, fall back to the custom ops for dynamic shapes.)"""
    if _TRACEABLE and x.is_cuda:
        return TRACED_OPS
    return CUSTOM_OPS


# -- eager path: a plain autograd.Function (less host overhead than the custom-op dispatch) ----------
class _RopeFunction(torch.autograd.Function):
    """(q, k) -> rotated (q, k); the backward is the same Function with the rotation inverted."""

    @staticmethod
    def forward(ctx, q, k, cos, sin, positions, partial, low_precision, inverse, interleaved, config, poison):
        ctx.save_for_backward(cos, sin, positions)
        ctx.args = (k is not None, partial, low_precision, inverse, interleaved, config, poison)
        return launch(q, k, cos, sin, positions, partial, low_precision, inverse, interleaved=interleaved,
                      config=config, poison=poison)

    @staticmethod
    def backward(ctx, gq, gk):
        cos, sin, positions = ctx.saved_tensors
        has_k, partial, low_precision, inverse, interleaved, config, poison = ctx.args
        dq, dk = _apply(
            _RopeFunction, gq, gk if has_k else None, cos, sin, positions, partial, low_precision, not inverse,
            interleaved, config, poison,
        )
        return (dq, dk) + (None,) * 9


def _apply(fn: type[torch.autograd.Function], *args):
    """``fn.apply(*args)``, skipping ``Function.apply``'s Python prologue where no functorch transform
    is active (then it only walks the arguments looking for dead functorch wrappers).

    Why: that walk over the eleven arguments was 3 of the ~10 us the module call adds to the bare
    launch with grad on the 2-core box (kernel mocked); the module call's host time is a target of
    #13. Under functorch, and under torch.compile (Dynamo traces ``apply`` itself), the full ``apply`` runs.
    """
    if torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
        return fn.apply(*args)
    return super(torch.autograd.Function, fn).apply(*args)


# -- fused projection: q and k rotated from a (B, T, W) qkv, the backward writing dqkv in one pass ---
def qkv_backward(
    gq: Tensor, gk: Tensor, gv: Tensor | None, cos: Tensor, sin: Tensor, positions: Tensor | None,
    partial: bool, low_precision: bool, interleaved: bool = False, config: LaunchConfig = DEFAULT_LAUNCH,
    poison: bool = False, traced: bool = False,
) -> Tensor:
    """d qkv (B, T, (HQ + 2 HK) D) from the gradients of rotated q, rotated k and v.

    The kernel writes dq and dk straight into their slices of the one buffer and v's gradient is
    copied beside them, so no stack of three separate gradients follows (autograd's default for
    views of one tensor: one more read and write of dq and dk). The copy is programs of the same launch
    (:func:`rope._triton_kernels.rope_copy_kernel`), one launch a layer where the rotation and
    :func:`copy_heads` were two.

    The kernel is handed the buffer itself (``out_buffer``), never its dq and dk views, eagerly and under
    ``torch.compile`` alike. Why, under compile: Inductor clones a user kernel's mutated arguments, and for a
    strided view of a compact temporary torch 2.11's clone reads the view's whole storage span from a buffer
    of the view's size (pytorch/pytorch#161115, fixed by #184050): an out-of-bounds read, an illegal address
    where the temporary ends a segment (docs/kernels.md, session 16). Through the buffer there are no clones
    and no copy-back either (the compiled seed004 step: 18.55 -> 16.39 ms on the H100, session 8).
    """
    B, T, HQ, D = gq.shape
    HK = gk.shape[2]
    dqkv = _new_output((B, T, (HQ + 2 * HK) * D), gq, poison)
    dq, dk, dv = split_qkv(dqkv, HQ, HK, D)
    launch(gq, gk, cos, sin, positions, partial, low_precision, inverse=True, out_q=dq, out_k=dk,
           interleaved=interleaved, config=config, poison=poison, traced=traced,
           out_buffer=dqkv, copy=None if gv is None else (gv, dv))
    if gv is None:
        dv.zero_()
    return dqkv


#: Elements a program of :func:`copy_heads` moves (16 bytes a thread of 8 warps in bf16).
COPY_TILE = 2048


def copy_heads(src: Tensor, buffer: Tensor, dst: Tensor, traced: bool = False) -> None:
    """``dst.copy_(src)`` for (B, T, H, D) tensors of any strides, ``dst`` a view into ``buffer``, in one
    Triton launch that writes through ``buffer`` (``traced``: through ``wrap_triton``, in a triton op).

    The fused-qkv backward's fallback for v's gradient, where its one launch cannot take the copy
    (:func:`launch`'s ``copy``): that gradient arrives heads-major from the attention, and the generic
    copies transposing it (aten's, Inductor's) ran far below the bandwidth (see the kernel). The chunking:
    :func:`_copy_geometry`.
    """
    B, T, H, D = src.shape
    if B * T * H == 0 or D == 0:
        return
    geometry = _copy_geometry(src, dst, buffer, COPY_TILE)
    if geometry is None:  # chunk ids are int32
        dst.copy_(src)
        return
    grid = (geometry.programs,)
    meta = {**geometry.meta, "num_warps": 8}
    if traced:  # the twin with constant integers, given them by name
        _traced_copy_kernel()[grid](src, buffer, **_by_name(_kernels.copy_heads_kernel_static, 2, geometry.ints),
                                    **meta)
    else:
        with on_device_of(src):  # Triton launches on the current device
            _kernels.copy_heads_kernel[grid](src, buffer, *geometry.ints, **meta)


class _CopyGeometry(NamedTuple):
    """A copy of (B, T, H, D) rows into a slice of a buffer in chunks (:func:`_copy_geometry`)."""

    ints: tuple  # copy_heads_kernel's integers, in its order
    meta: dict  # its constexprs: VP, MP, NCP, SV, WIDE
    programs: int

    @property
    def fused_ints(self) -> tuple:
        """The integers ``rope_copy_kernel`` takes for the copy (T and its magic pair are the rotation's)."""
        return (*self.ints[:10], *self.ints[13:])


def _copy_geometry(src: Tensor, dst: Tensor, buffer: Tensor, per_program: int) -> _CopyGeometry | None:
    """How :func:`copy_heads_kernel <rope._triton_kernels.copy_heads_kernel>` (or the copy programs of
    ``rope_copy_kernel``) copies ``src`` into ``dst``, a view into ``buffer``, with about ``per_program`` elements
    a program; None where its chunk ids would overflow int32. Rows are cut into chunks of VP elements (the largest
    power of two up to 16 dividing D), so every load and store is a vector for every head size."""
    B, T, H, D = src.shape
    nr = B * T * H
    vp = _pow2_unit(D)
    mp, ncp = D // vp, max(1, per_program // vp)
    if nr * mp + ncp >= 2**31:
        return None
    oo = dst.storage_offset() - buffer.storage_offset()
    if oo < 0 or dst.dtype != buffer.dtype or src.dtype != dst.dtype:
        raise ValueError(f"copy_heads: dst must be a view into buffer of src's dtype, got offset {oo}, dtypes "
                         f"{src.dtype}, {dst.dtype}, {buffer.dtype}")
    sv = _pow2_unit(math.gcd(_row_stride_unit(src, dst), oo))
    ints = (*_scaled_strides(src, sv), *_scaled_strides(dst, sv), oo // sv, nr,
            T, *magic_divisor(max(T, 1)), H, *magic_divisor(max(H, 1)))
    meta = dict(VP=vp, MP=mp, NCP=ncp, SV=sv, WIDE=_needs_wide_offsets(src, buffer))
    return _CopyGeometry(ints, meta, -(-nr * mp // ncp))


CUSTOM_OPS = _define_ops("", traced=False)
rope_fwd, rope_bwd, rope_qkv_bwd, rope_qkv_fwd = CUSTOM_OPS


@functools.cache
def traced_ops() -> _OpSet | None:
    """The triton ops, defined on first use; None where this torch has no ``torch.library.triton_op`` (added in
    2.6) or triton is missing. Why on first use: defining a triton op scans its body for kernels with Inductor's
    code, and importing Inductor (and Dynamo with it) took 3 s of every process that imports ``rope`` (CPU torch
    2.13), the training CLI's start included, where nothing would trace them."""
    return _define_ops("_traced", traced=True) if hasattr(torch.library, "triton_op") and _kernels else None


#: The triton ops where a compiled graph may call them (a CUDA or ROCm build of torch, GPU kernels rather than the
#: interpreter, which is chosen when triton is imported): defined here, at import, because Dynamo must not meet
#: their definition while it traces a call. Elsewhere None (:func:`traced_ops` defines them for a test).
TRACED_OPS = traced_ops() if (torch.version.cuda or torch.version.hip) and not _interpreting() else None
#: Whether compiled graphs can trace the launches. A constant, so that Dynamo guards on one global rather than on
#: ``os.environ`` at every compiled call.
_TRACEABLE = TRACED_OPS is not None


class _RopeQKVFunction(torch.autograd.Function):
    """qkv -> (rotated q, rotated k, v): q and k rotated out of place, v returned as the view it is.

    Taking the whole projection lets the backward receive v's gradient too and return d qkv as one
    buffer written once. Not twice differentiable (the backward writes into slices of one buffer).
    """

    @staticmethod
    def forward(ctx, qkv, cos, sin, positions, hq, hk, partial, low_precision, interleaved, tile, num_warps, poison,
                chunks, streaming, tables, maxnreg, words, block, joint):
        q, k, v = split_qkv(qkv, hq, hk, qkv.shape[-1] // (hq + 2 * hk))
        if torch.compiler.is_compiling():  # the projection itself to the op (see its traced body)
            yq, yk = _compiled_qkv_forward(qkv, cos, sin, positions, hq, hk, partial, low_precision, interleaved,
                                           tile, num_warps, poison, chunks, streaming, tables, maxnreg, words, block,
                                           joint)
        else:
            yq, yk = launch(q, k, cos, sin, positions, partial, low_precision, inverse=False, interleaved=interleaved,
                            config=LaunchConfig(tile, num_warps, chunks, streaming, tables, maxnreg, words, block,
                                                joint),
                            poison=poison)
        ctx.save_for_backward(cos, sin, positions)
        ctx.args = (partial, low_precision, interleaved, tile, num_warps, poison, chunks, streaming, tables, maxnreg,
                    words, block, joint)
        return yq, yk, v

    @staticmethod
    def backward(ctx, gq, gk, gv):
        cos, sin, positions = ctx.saved_tensors
        (partial, low_precision, interleaved, tile, num_warps, poison, chunks, streaming, tables, maxnreg,
         words, block, joint) = ctx.args
        if torch.compiler.is_compiling():
            dqkv = _compiled_ops(gq).qkv_bwd(gq, gk, gv, cos, sin, positions, partial, low_precision, interleaved,
                                             tile, num_warps, poison, chunks, streaming, tables, maxnreg, words, block,
                                             joint)
        else:
            dqkv = qkv_backward(gq, gk, gv, cos, sin, positions, partial, low_precision, interleaved,
                                LaunchConfig(tile, num_warps, chunks, streaming, tables, maxnreg, words, block, joint),
                                poison)
        return (dqkv,) + (None,) * 18


# -- the registry entries ---------------------------------------------------------------------------
class _TritonRotary(RotaryEmbedding):
    """Shared part of the Triton entries. Per-instance hooks (plain attributes, not build options):
    ``launch_config`` (a :class:`LaunchConfig`) and ``poison_outputs`` (see the base class)."""

    layouts = LAYOUTS
    supports_rotary_dim = True
    #: Inductor launches user-defined Triton kernels (these, through the ``triton_op`` entries) with
    #: Triton's own Python launcher unless this is set, and its own kernels with a static launcher.
    #: On the H100's host that launcher left the compiled seed004 step host-bound: its GPU work was
    #: 0.05 ms below compiled torch's while its host time was 0.7 ms above, and the step ran +2.4%
    #: [+1.3, +3.5] (16 paired rounds; docs/kernels.md, session 10).
    inductor_options = {"static_launch_user_defined_triton_kernels": True}

    low_precision = False

    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0, variant: str = "partial",
                 layout: str = "half", rotary_dim: int | None = None, scaling: dict | None = None) -> None:
        if _kernels is None:
            raise RuntimeError(
                f"RoPE implementation {self.registry_name!r} needs the `triton` package "
                f"(pip install triton), which could not be imported: {_TRITON_ERROR}"
            )
        super().__init__(head_dim, max_seq_len, base, variant, layout, rotary_dim, scaling)
        self.launch_config = DEFAULT_LAUNCH
        # variant=partial's zero-frequency pairs are cos 1, sin 0 in the table (no load needed) unless
        # YaRN's attention factor scales the table; then the kernel reads them like the others.
        self._partial_shortcut = variant == "partial" and attention_factor(self.scaling) == 1.0

    @classmethod
    def unavailable_reason(cls, device: torch.device) -> str | None:
        """None on a CUDA device, or on the CPU under Triton's interpreter; else why not, in one line."""
        name = cls.registry_name
        if _kernels is None:
            return f"rope={name} needs the `triton` package, which could not be imported ({_TRITON_ERROR}); " \
                   "use rope=torch"
        device = torch.device(device)
        if device.type == "cuda" or (device.type == "cpu" and _interpreting()):
            return None
        return (f"rope={name} runs on a CUDA GPU, or on the CPU under Triton's interpreter "
                f"(TRITON_INTERPRET=1, slow); use rope=torch on this machine")

    def describe(self) -> dict:
        return {**super().describe(), "compute_dtype": "input" if self.low_precision else "float32"}

    def _launch_args(self) -> tuple[bool, int, int, bool, int, bool, int, int, int, int, int]:
        """The layout, tuning and test hook as the scalars the launches take: interleaved, tile, warps, poison,
        chunks, streaming, tables, maxnreg, words, block, joint (every LaunchConfig field: one left out is silently the
        default)."""
        cfg = self.launch_config
        return (self.layout == "interleaved", cfg.tile, cfg.num_warps, bool(self.poison_outputs), cfg.chunks,
                cfg.streaming, cfg.tables, cfg.maxnreg, cfg.words, cfg.block, cfg.joint)

    def _rotate_qkv(self, qkv, q, k, v, positions):
        if not (torch.is_grad_enabled() and qkv.requires_grad):  # no backward to fuse
            if torch.compiler.is_compiling():  # the projection itself to the op, as in the Function's forward
                yq, yk = _compiled_qkv_forward(qkv, self.cos, self.sin, positions, q.shape[2], k.shape[2],
                                               self._partial_shortcut, self.low_precision, *self._launch_args())
            else:
                yq, yk = self.rotate(q, k, positions)
            return yq, yk, v
        return _apply(
            _RopeQKVFunction, qkv, self.cos, self.sin, positions, q.shape[2], k.shape[2], self._partial_shortcut,
            self.low_precision, *self._launch_args(),
        )

    def rotate(self, q: Tensor, k: Tensor | None, positions: Tensor | None) -> tuple[Tensor, Tensor | None]:
        partial = self._partial_shortcut
        if torch.compiler.is_compiling():  # an op with a fake and autograd: no graph break
            op = _compiled_ops(q).fwd
            yq, yk = op(q, k, self.cos, self.sin, positions, partial, self.low_precision, *self._launch_args())
            return yq, (yk if k is not None else None)
        cos, sin = self._cos_sin  # the buffers, without nn.Module.__getattr__ (host time: see _sync_tables)
        if not (torch.is_grad_enabled() and (q.requires_grad or (k is not None and k.requires_grad))):
            # Nothing to differentiate (inference, decoding): the launch alone, no autograd node.
            return launch(q, k, cos, sin, positions, partial, self.low_precision, False,
                          interleaved=self.layout == "interleaved", config=self.launch_config,
                          poison=self.poison_outputs)
        return _apply(_RopeFunction, q, k, cos, sin, positions, partial, self.low_precision, False,
                      self.layout == "interleaved", self.launch_config, bool(self.poison_outputs))

    def rotate_transposed(self, gq: Tensor, gk: Tensor | None,
                          positions: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """The backward kernel alone: the transposed rotation of output gradients, no autograd.

        For the benchmark, which times it apart from the forward: the launch the eager backward makes
        (not the custom op, whose Python dispatch alone costs more host time than a 32M-element
        kernel runs on a slow host). Inputs are not validated.
        """
        return launch(gq, gk, self.cos, self.sin, positions, self._partial_shortcut, self.low_precision, True,
                      interleaved=self.layout == "interleaved", config=self.launch_config, poison=self.poison_outputs)

    def check_inputs(self, q: Tensor, k: Tensor | None, positions: Tensor | None) -> None:
        """What the kernels need beyond the shared checks: a supported dtype, CUDA (or the interpreter)."""
        if q.dtype not in _SUPPORTED:
            raise TypeError(f"{self.registry_name} supports float32, bfloat16 and float16 inputs, got {q.dtype}")
        if not torch.compiler.is_compiling():
            _check_device("q", q)
            if k is not None:
                _check_device("k", k)
            if positions is not None:
                _check_device("positions", positions)
        if self.cos.device != q.device:
            raise ValueError(
                f"the cos/sin tables are on {self.cos.device} but q is on {q.device}: move the module with .to()"
            )


@register("triton_v4")
class TritonRotaryV4(_TritonRotary):
    """Precise Triton RoPE: input-dtype loads, float32 math, one rounding at the store."""

    low_precision = False


@register("triton_v2")
class TritonRotaryV2(_TritonRotary):
    """Triton RoPE in the input dtype's arithmetic (bf16/fp16); equals ``triton_v4`` on float32."""

    low_precision = True
