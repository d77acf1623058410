"""Launching the Triton rotation: tensors -> :class:`~rope.triton.plan.Geometry` -> plan -> kernel.

:func:`rotate` (q and k, any strides), :func:`rotate_projection` (q and k read out of a qkv projection handed over
whole) and :func:`qkv_backward` (d qkv as one buffer): one launch of the rotation each, plus a copy where the plan
leaves one. ``traced``: inside a ``torch.library.triton_op`` body (``wrap_triton``: Inductor launches the kernel).
Inputs are assumed valid (the modules check them).
"""

from __future__ import annotations

import functools
import os
from typing import NamedTuple

import torch
import triton
from torch import Tensor

from rope._launch import new_output, stride_unit
from rope.base import TensorCache, on_device_of
from rope.triton import kernels
from rope.triton.plan import OVERRIDES, Geometry, Overrides, Plan, make_plan

#: Whether triton runs its CPU interpreter (chosen when triton is imported): the kernels then take CPU tensors.
INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
#: Memory delivering more bytes per SM clock than this needs every thread of an SM in flight (:func:`register_cap`).
FAST_MEMORY_BYTES_PER_SM_CYCLE = 16


class Rotation(NamedTuple):
    """What every launch of a module shares: ``partial`` (variant=partial's zero-frequency pairs skip their
    table loads), ``low_precision`` (``triton_v2``'s arithmetic) and ``interleaved`` (the layout)."""

    partial: bool
    low_precision: bool
    interleaved: bool


class Operand(NamedTuple):
    """A tensor the kernel reads or writes and its (batch, token, head) strides in elements. ``tensor`` None: it
    lies in q's tensor (q's output) after q's heads, the k slice of a qkv projection (of its gradient)."""

    tensor: Tensor | None
    strides: tuple[int, int, int]


def rotate(q: Tensor, k: Tensor | None, cos: Tensor, sin: Tensor, positions: Tensor | None, rot: Rotation,
           inverse: bool = False, *, traced: bool = False, poison: bool = False) -> tuple[Tensor, Tensor | None]:
    """q and k (B, T, H, D; k may have other heads, or be None) rotated (``inverse``: rotated back) into new
    contiguous tensors, read in place with their strides; NaN-filled first when ``poison``."""
    q, k = (x if x is None or x.stride(-1) == 1 else x.contiguous() for x in (q, k))
    yq = new_output(q.shape, q, poison)
    yk = None if k is None else new_output(k.shape, k, poison)
    B, T, HQ, D = q.shape
    _rotate_into(_operand(q), _operand(k), _output(yq), _output(yk), (B, T, HQ, 0 if k is None else k.shape[2], D),
                 cos, sin, positions, rot, inverse, traced)
    return yq, yk


def rotate_projection(qkv: Tensor, seq_len: int, q_heads: int, k_heads: int, cos: Tensor, sin: Tensor,
                      positions: Tensor | None, rot: Rotation, *, traced: bool = False,
                      poison: bool = False) -> tuple[Tensor, Tensor]:
    """Rotated q and k of the projection ``qkv`` ((B, T, W), or (B T, W) with T = ``seq_len``; unit last stride),
    q's heads first, then k's: the kernel reads both through ``qkv`` itself, so a compiled graph passes the
    projection's buffer, not views of it (each view is host time in Inductor's launch)."""
    D = qkv.shape[-1] // (q_heads + 2 * k_heads)
    B = qkv.shape[0] if qkv.dim() == 3 else qkv.shape[0] // seq_len
    st = qkv.stride(-2)
    strides = (qkv.stride(0) if qkv.dim() == 3 else seq_len * st, st, D)
    yq = new_output((B, seq_len, q_heads, D), qkv, poison)
    yk = new_output((B, seq_len, k_heads, D), qkv, poison)
    _rotate_into(Operand(qkv, strides), Operand(None, strides), _output(yq), _output(yk),
                 (B, seq_len, q_heads, k_heads, D), cos, sin, positions, rot, False, traced)
    return yq, yk


def qkv_backward(gq: Tensor, gk: Tensor, gv: Tensor | None, cos: Tensor, sin: Tensor, positions: Tensor | None,
                 rot: Rotation, *, traced: bool = False, poison: bool = False) -> Tensor:
    """d qkv (B, T, (HQ + 2 HK) D) from the gradients of rotated q, rotated k and v (None: zeros).

    The kernel writes dq and dk into their slices of the one buffer, through the buffer itself (under
    torch.compile a user kernel's mutated views are cloned and copied back), and v's gradient is copied beside
    them, so no stack of three gradients follows (autograd's way for views of one tensor)."""
    gq, gk, gv = (x if x is None or x.stride(-1) == 1 else x.contiguous() for x in (gq, gk, gv))
    B, T, HQ, D = gq.shape
    HK = gk.shape[2]
    W = (HQ + 2 * HK) * D
    dqkv = new_output((B, T, W), gq, poison)
    out = Operand(dqkv, (T * W, W, D))
    _rotate_into(_operand(gq), _operand(gk), out, out._replace(tensor=None), (B, T, HQ, HK, D), cos, sin,
                 positions, rot, True, traced)
    if gv is None:
        dqkv[..., (HQ + HK) * D:].zero_()
    else:
        copy_heads(_operand(gv), gv.shape, out, (HQ + HK) * D, 0, traced)
    return dqkv


def _operand(x: Tensor | None) -> Operand | None:
    return None if x is None else Operand(x, tuple(x.stride()[:3]))


def _output(y: Tensor | None) -> Operand | None:
    """A fresh (B, T, H, D) output as the kernels write it (its token stride; heads D apart)."""
    return None if y is None else Operand(y, (y.stride(0), y.stride(1), y.shape[3]))


def _rotate_into(q: Operand, k: Operand | None, oq: Operand, ok: Operand | None, shape: tuple[int, ...],
                 cos: Tensor, sin: Tensor, positions: Tensor | None, rot: Rotation, inverse: bool,
                 traced: bool) -> None:
    """One launch rotating q (and k) into the outputs, and the copy of the heads' tails where the plan leaves it."""
    B, T, HQ, HK, D = shape
    if B * T * (HQ + HK) == 0 or D == 0:
        return
    pos, spb = _positions(positions)
    kk, okk = k or q._replace(tensor=None), ok or oq._replace(tensor=None)
    geo = _geometry(q, kk, oq, okk, shape, cos, pos, rot, traced)
    plan = make_plan(geo, Overrides() if traced else OVERRIDES.get())
    meta = dict(plan.constexprs)
    strides = geo.strides[:8] if plan.tiling != "flat" else (*geo.strides[:2], *geo.strides[3:5], *geo.strides[6:8])
    ints = (*(x // meta["SV"] for x in strides), spb, cos.shape[0], T, HQ, HK)
    tables = element_tables(cos, sin, D, rot.interleaved, cache=not traced) if plan.tiling == "flat" else (cos, sin)
    meta.update(LOW=rot.low_precision and oq.tensor.dtype != torch.float32, INVERSE=inverse)
    _launch(getattr(kernels, plan.kernel), plan.grid, (q.tensor, kk.tensor, oq.tensor, okk.tensor, *tables, pos),
            ints, meta, traced, plan.num_warps, plan.maxnreg)
    for x, o, heads in ((q, oq, HQ), (k, ok, HK)) if plan.tail else ():  # a pair tiling left the heads' tails
        if x is not None:
            src = x if x.tensor is not None else Operand(_shifted(q.tensor, HQ * D), x.strides)
            copy_heads(src, (B, T, heads, D), o if o.tensor is not None else oq, 0 if o.tensor is not None else HQ * D,
                       D - plan.tail, traced)


def plan(q: Tensor, k: Tensor | None, cos: Tensor, positions: Tensor | None, rot: Rotation) -> Plan:
    """The plan :func:`rotate` launches these inputs with (eagerly, under the current tuning)."""
    B, T, HQ, D = q.shape
    HK = 0 if k is None else k.shape[2]
    fresh = [Operand(None, (0, h * D, D)) for h in (HQ, HK or HQ)]  # the outputs rotate allocates
    geo = _geometry(_operand(q), _operand(k) or Operand(None, tuple(q.stride()[:3])), *fresh, (B, T, HQ, HK, D),
                    cos, positions, rot, False)
    return make_plan(geo, OVERRIDES.get())


def _geometry(q: Operand, k: Operand, oq: Operand, ok: Operand, shape: tuple[int, ...], cos: Tensor,
              positions: Tensor | None, rot: Rotation, traced: bool) -> Geometry:
    B, T, HQ, HK, D = shape
    device = q.tensor.get_device() if q.tensor.is_cuda else -1
    outputs = [o.tensor for o in (oq, ok)]
    inside = HQ * D if HK and (k.tensor is None or ok.tensor is None) else 0  # k in q's tensor, or its output
    return Geometry(D, cos.shape[1], rot.partial, rot.interleaved, B, T, HQ, HK,
                    (*q.strides, *k.strides, oq.strides[1], ok.strides[1], inside),
                    needs_wide(q.tensor, k.tensor, positions, *outputs) or B * T * max(HQ, HK) * D >= 1 << 30,
                    positions is not None,
                    register_cap(device) if device >= 0 and not traced and not INTERPRETING else 0)


def _positions(positions: Tensor | None) -> tuple[Tensor | None, int]:
    """Positions as the kernels read them: contiguous int32/int64, and the stride of their batch dim (0 for one
    row shared by the batch)."""
    if positions is None:
        return None, 0
    if positions.dtype not in (torch.int32, torch.int64):
        positions = positions.long()
    positions = positions.contiguous()
    return positions, positions.shape[-1] if positions.dim() == 2 else 0


def _shifted(x: Tensor, offset: int) -> Tensor:
    """A view of ``x``'s storage starting ``offset`` elements after ``x`` (the kernel reads it by strides)."""
    return torch.as_strided(x, (1,), (1,), x.storage_offset() + offset)


def needs_wide(*tensors: Tensor | None) -> bool:
    """Whether an element offset the kernel computes can reach 2**31: bounded by each storage (an offset is below
    its element count; masked rows of a last program reach at most one batch element past it, hence 2**30)."""
    return any(t is not None and t.untyped_storage().nbytes() >= (1 << 30) * t.element_size() for t in tensors)


def copy_heads(src: Operand, shape: tuple[int, ...], out: Operand, offset: int, first: int,
               traced: bool = False) -> None:
    """Columns [first, D) of every head row of ``src`` ((B, T, H, D), unit last stride) into the rows of ``out``
    (a buffer and its token stride), heads D apart from ``offset`` elements on."""
    B, T, H, D = shape
    width = D - first
    if B * T * H * width == 0:
        return
    unit = stride_unit(*src.strides, out.strides[1], offset)
    vp = stride_unit(first, width)
    meta = dict(C0=first, VP=vp, MP=width // vp, NCP=max(1, 2048 // vp), D=D, SV=unit,
                WIDE=needs_wide(src.tensor, out.tensor))
    ints = (*(x // unit for x in src.strides), out.strides[1] // unit, offset // unit, T, H)
    grid = (-(-T * H * meta["MP"] // meta["NCP"]) * B, 1)
    _launch(kernels.copy_heads_kernel, grid, (src.tensor, out.tensor), ints, meta, traced, 8)


def _launch(kernel, grid: tuple[int, int], tensors: tuple, ints: tuple, constexprs: dict, traced: bool,
            num_warps: int, maxnreg: int = 0) -> None:
    """``kernel[grid](*tensors, *ints, **constexprs)``. Eagerly the compiled kernel Triton returns is kept per
    specialisation and launched directly from the next call on: Triton's own launch works out the
    specialisation again at each call, host time that a small call pays. Triton's own launch stays where the
    direct one does not apply: the interpreter, a launch hook set (profilers), tracing (``wrap_triton``)."""
    options = {"num_warps": num_warps, **({"maxnreg": maxnreg} if maxnreg else {})}
    if traced:
        torch.library.wrap_triton(kernel)[grid](*tensors, *ints, **constexprs, **options)
        return
    args = (*tensors, *ints)
    with on_device_of(tensors[0]):  # Triton launches on the current device
        if INTERPRETING or not _hooks_unset():
            kernel[grid](*args, **constexprs, **options)
            return
        device = tensors[0].get_device()
        key = (kernel, *constexprs.items(), *options.items(), device, *map(_specialisation, args))
        compiled = _COMPILED.get(key)
        if compiled is not None:
            binary, tail = compiled
            stream = triton.runtime.driver.active.get_current_stream(device)
            binary.run(grid[0], grid[1], 1, stream, binary.function, binary.packed_metadata, None, None, None, *args,
                       *tail)
            return
        binary = kernel[grid](*args, **constexprs, **options)
        if hasattr(binary, "packed_metadata"):
            if len(_COMPILED) >= 256:
                _COMPILED.clear()
            # the launcher takes every argument in the kernel's order, the constexprs too (it skips them)
            _COMPILED[key] = (binary, tuple(constexprs[n] for n in kernel.arg_names[len(args):]))


#: Compiled kernels of eager launches, by kernel, plan, constexprs, device and what Triton specialises on.
_COMPILED: dict[tuple, tuple] = {}


def _specialisation(arg: object) -> tuple | None:
    """What Triton specialises a kernel on for ``arg``: a tensor's dtype and 16-byte alignment, an int's width,
    being 1 and divisibility by 16."""
    if arg is None:
        return None
    if isinstance(arg, Tensor):
        return arg.dtype, arg.data_ptr() % 16 == 0
    return -(2**31) <= arg < 2**31, arg == 1, arg % 16 == 0


def _hooks_unset() -> bool:
    """Whether no Triton launch hook is set (a profiler's need Triton's own launch): chains of calls, empty by
    default (Triton 3.6), or a callable or None (earlier versions)."""
    knobs = getattr(triton, "knobs", None)
    if knobs is None:
        return True
    return all(h is None or getattr(h, "calls", None) == []
               for h in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook))


@functools.cache
def register_cap(device: int) -> int:
    """The registers a thread may hold for an SM of CUDA device ``device`` to run its full complement of threads,
    where its memory delivers more than :data:`FAST_MEMORY_BYTES_PER_SM_CYCLE` bytes per SM clock (else 0): such
    memory needs every thread's loads in flight, and padded or position-reading row programs compile to more."""
    try:
        props = triton.runtime.driver.active.utils.get_device_properties(device)
        threads = torch.cuda.get_device_properties(device).max_threads_per_multi_processor
    except Exception:  # a driver without these properties: no cap
        return 0
    bandwidth = 2 * props.get("mem_clock_rate", 0) * props.get("mem_bus_width", 0) // 8
    per_sm_cycle = bandwidth / max(1, props.get("multiprocessor_count", 0) * props.get("sm_clock_rate", 0))
    return props["max_num_regs"] // threads if per_sm_cycle > FAST_MEMORY_BYTES_PER_SM_CYCLE else 0


_TABLES = TensorCache(8)


def element_tables(cos: Tensor, sin: Tensor, D: int, interleaved: bool, cache: bool = True) -> tuple[Tensor, Tensor]:
    """The flat tiling's tables, per position: column j holds the cos and signed sin of element j mod D's pair (+sin
    for the pair's first element, -sin for its second, so every element is ``x[d] c + x[partner] s'``; 1 and 0 on
    the copied tail). A row is P + 4 columns, P = lcm(D, 4): blocks' columns start 16-byte aligned and a block of up
    to 8 read past the period finds the next row's start. ``cache``: keep the last few (not while tracing)."""
    cache = cache and TensorCache.usable(cos, sin)
    key = (D, interleaved)
    if cache and (hit := _TABLES.get((cos, sin), key)) is not None:
        return hit
    r2 = cos.shape[1]
    d = torch.arange((D if D % 4 == 0 else 2 * D) + 4, device=cos.device) % D
    pair = torch.where(d < 2 * r2, d // 2 if interleaved else d % max(r2, 1), 0)
    second = (d % 2 == 1) if interleaved else (d >= r2)
    tail = d >= 2 * r2
    tables = (torch.where(tail, 1.0, cos[:, pair]).contiguous(),
              torch.where(tail, 0.0, torch.where(second, -sin[:, pair], sin[:, pair])).contiguous())
    if cache:
        _TABLES.put((cos, sin), key, tables)
    return tables
