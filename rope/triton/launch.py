"""Launching the Triton rotation: tensors -> :class:`~rope.triton.plan.Geometry` -> plan -> kernel, one launch for
:func:`rotate` (q and k, any strides), :func:`rotate_projection` (q and k read out of a qkv projection) and
:func:`qkv_backward` (d qkv as one buffer, v's gradient copied too). ``traced``: inside a ``triton_op`` body
(Inductor launches the kernel). Inputs are assumed valid (the modules check them).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import torch
import triton
from torch import Tensor

from rope._launch import interpreting, new_output
from rope._launch import launch_hooks_unset as _hooks_unset  # a module name the tests' spies patch
from rope._packed import TensorCache
from rope.base import on_device_of
from rope.triton import kernels
from rope.triton.plan import Geometry, Overrides, Plan, forced, make_plan

#: Whether these kernels were defined for Triton's CPU interpreter (they then take CPU tensors, and no direct
#: launch): ``TRITON_INTERPRET=1`` as it was when rope was imported, which is when this module defines them
#: (:func:`rope._launch.triton_runs_on` states the rule).
INTERPRETING = interpreting()
#: Batch elements one launch takes (the grid's third axis).
MAX_GRID_BATCH = 65535
#: Memory delivering more bytes per SM clock than this needs every thread of an SM in flight (:func:`register_cap`).
FAST_MEMORY_BYTES_PER_SM_CYCLE = 16


class Rotation(NamedTuple):
    """A module's launches: ``partial`` (zero-frequency pairs skip their table loads), arithmetic, layout."""

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
    shape = (*q.shape[:3], 0 if k is None else k.shape[2], q.shape[3])
    _rotate_into(_operand(q), _operand(k), None, _operand(yq), _operand(yk), shape, cos, sin, positions, rot, inverse,
                 traced)
    return yq, yk


def rotate_projection(qkv: Tensor, seq_len: int, q_heads: int, k_heads: int, cos: Tensor, sin: Tensor,
                      positions: Tensor | None, rot: Rotation, *, traced: bool = False,
                      poison: bool = False) -> tuple[Tensor, Tensor]:
    """Rotated q and k of the projection ``qkv`` ((B, T, W) or (B T, W), T = ``seq_len``; q's heads, then k's),
    read through ``qkv`` itself: a compiled graph passes its buffer, not views (each is host time in Inductor)."""
    D = qkv.shape[-1] // (q_heads + 2 * k_heads)
    B = qkv.shape[0] if qkv.dim() == 3 else qkv.shape[0] // seq_len
    st = qkv.stride(-2)
    strides = (qkv.stride(0) if qkv.dim() == 3 else seq_len * st, st, D)
    yq = new_output((B, seq_len, q_heads, D), qkv, poison)
    yk = new_output((B, seq_len, k_heads, D), qkv, poison)
    _rotate_into(Operand(qkv, strides), Operand(None, strides), None, _operand(yq), _operand(yk),
                 (B, seq_len, q_heads, k_heads, D), cos, sin, positions, rot, False, traced)
    return yq, yk


def qkv_backward(gq: Tensor, gk: Tensor, gv: Tensor | None, cos: Tensor, sin: Tensor, positions: Tensor | None,
                 rot: Rotation, *, traced: bool = False, poison: bool = False) -> Tensor:
    """d qkv (B, T, (HQ + 2 HK) D) from the gradients of rotated q, rotated k and v (None: zeros), in one launch that
    rotates dq and dk into their slices through the buffer itself (torch.compile clones a user kernel's mutated views)
    and copies v's gradient beside them: no stack of three gradients follows (autograd's way for views of one
    tensor), and a compiled step launches nothing more for it than the PyTorch formula's fused copy."""
    gq, gk, gv = (x if x is None or x.stride(-1) == 1 else x.contiguous() for x in (gq, gk, gv))
    B, T, HQ, D = gq.shape
    HK = gk.shape[2]
    W = (HQ + 2 * HK) * D
    dqkv = new_output((B, T, W), gq, poison)
    out = Operand(dqkv, (T * W, W, D))
    _rotate_into(_operand(gq), _operand(gk), gv if gv is None else _dense(gv), out, out._replace(tensor=None),
                 (B, T, HQ, HK, D), cos, sin, positions, rot, True, traced)
    if gv is None:
        dqkv[..., (HQ + HK) * D:].zero_()
    return dqkv


def _operand(x: Tensor | None) -> Operand | None:
    return None if x is None else Operand(x, x.stride()[:3])


def _dense(v: Tensor) -> Operand:
    """v (B, T, H, D) as the kernels read it: dense, heads-major or token-major (its token stride tells them
    which; the strides of dims of size 1 written as the layout has them); else a contiguous copy."""
    _, T, H, D = v.shape
    for strides in ((T * H * D, H * D, D), (H * T * D, D, T * D)):
        if all(n == 1 or s == w for n, s, w in zip(v.shape[:3], v.stride()[:3], strides, strict=True)):
            return Operand(v, strides)
    return Operand(v.contiguous(), (T * H * D, H * D, D))


def _rotate_into(q: Operand, k: Operand | None, v: Operand | None, oq: Operand, ok: Operand | None,
                 shape: tuple[int, ...], cos: Tensor, sin: Tensor, positions: Tensor | None, rot: Rotation,
                 inverse: bool, traced: bool) -> None:
    """One launch rotating q (and k) into the outputs, copying v (its heads follow k's in q's output) where given."""
    B, T, HQ, HK, D = shape
    if B * T * (HQ + HK) == 0 or D == 0:
        return
    if B > MAX_GRID_BATCH:  # launches of at most as many batch elements as the grid's batch axis holds
        for b0 in range(0, B, MAX_GRID_BATCH):
            n = min(MAX_GRID_BATCH, B - b0)
            part = [x and x._replace(tensor=_batches(x.tensor, b0, n, B)) for x in (q, k, v, oq, ok)]
            pos = positions if positions is None or positions.dim() == 1 else positions[b0:b0 + n]
            _rotate_into(*part, (n, T, HQ, HK, D), cos, sin, pos, rot, inverse, traced)
        return
    job, pos, kk, okk = _job(q, k, v, oq, ok, shape, cos, positions, rot, inverse, traced)
    tables = element_tables(cos, sin, D, rot.interleaved, cache=not traced) if job.plan.tiling == "flat" else (cos, sin)
    _launch(job, (q.tensor, kk.tensor, v and v.tensor, oq.tensor, okk.tensor, *tables, pos), traced)


def _batches(x: Tensor | None, b0: int, n: int, B: int) -> Tensor | None:
    """Batch elements [b0, b0 + n) of ``x``, whose first dim is B batch elements (or B T tokens)."""
    return None if x is None else x.narrow(0, b0 * (x.shape[0] // B), n * (x.shape[0] // B))


def _job(q: Operand, k: Operand | None, v: Operand | None, oq: Operand, ok: Operand | None, shape: tuple[int, ...],
         cos: Tensor, positions: Tensor | None, rot: Rotation, inverse: bool, traced: bool) -> tuple:
    """The launch's :class:`Job` (worked out once per signature), the positions as the kernel reads them, and k's
    operand and its output's (q's, their tensor None, where they lie in q's tensor)."""
    B, T, HQ, HK, D = shape
    pos, spb = _positions(positions)
    kk, okk = k or q._replace(tensor=None), ok or oq._replace(tensor=None)
    vv = v or kk  # (its strides: k's where there is no v)
    inside = HQ * D if HK and (kk.tensor is None or okk.tensor is None) else 0  # k (its output) in q's tensor
    strides = (*q.strides, *kk.strides, *vv.strides, oq.strides[1], okk.strides[1], inside, (HQ + HK) * D if v else 0)
    wide = needs_wide(q.tensor, kk.tensor, vv.tensor) or max(oq.tensor.numel(), B * T * HK * D) >= 1 << 30
    device = q.tensor.get_device() if q.tensor.is_cuda else -1
    over = Overrides() if traced else forced()
    dtype = oq.tensor.dtype
    sig = ("rope", shape, strides, cos.shape, rot, inverse, dtype, pos is not None and (pos.dtype, spb), wide, device,
           traced, over)
    job = _JOBS.get(sig)
    if job is None:
        cap = _register_cap(device, traced)
        plan = make_plan(Geometry(D, cos.shape[1], rot.partial, rot.interleaved, B, T, HQ, HK, strides, wide,
                                  pos is not None, cap), over)
        meta = {**dict(plan.constexprs), "LOW": rot.low_precision and dtype != torch.float32, "INVERSE": inverse}
        used = (*strides[:6], strides[7]) if plan.tiling != "flat" else (*strides[:2], *strides[3:5], strides[7])
        ints = (*(x // meta["SV"] for x in used), spb, cos.shape[0], T)  # v: its token stride (the kernels')
        options = {"num_warps": plan.num_warps, **({"maxnreg": plan.maxnreg} if plan.maxnreg else {})}
        if len(_JOBS) >= 512:
            _JOBS.clear()
        job = _JOBS[sig] = Job(plan.kernel, plan.grid, ints, meta, options, plan, {},
                               bool(plan.maxnreg) and not over.maxnreg)
    return job, pos, kk, okk


def _register_cap(device: int, traced: bool) -> int:
    """The register cap eager launches on ``device`` may take (:func:`register_cap`; none traced or interpreted)."""
    return register_cap(device) if device >= 0 and not traced and not INTERPRETING else 0


def plan(q: Tensor, k: Tensor | None, cos: Tensor, positions: Tensor | None, rot: Rotation) -> Plan:
    """The plan :func:`rotate` launches these inputs with (eagerly, under the current tuning)."""
    B, T, HQ, D = q.shape
    out = [None if x is None else Operand(x, (x.shape[1] * x.shape[2] * D, x.shape[2] * D, D)) for x in (q, k)]
    shape = (B, T, HQ, 0 if k is None else k.shape[2], D)
    job = _job(_operand(q), _operand(k), None, *out, shape, cos, positions, rot, False, False)[0]
    return dataclasses.replace(job.plan, maxnreg=job.options.get("maxnreg", 0))


def _positions(positions: Tensor | None) -> tuple[Tensor | None, int]:
    """Positions as the kernels read them (contiguous int32/int64) and their batch stride (0: one row for all)."""
    if positions is None:
        return None, 0
    if positions.dtype not in (torch.int32, torch.int64):
        positions = positions.long()
    positions = positions.contiguous()
    return positions, positions.shape[-1] if positions.dim() == 2 else 0


def needs_wide(*tensors: Tensor | None) -> bool:
    """Whether an element offset can reach 2**31: below each storage's count, plus at most one batch element
    (masked rows of a last program), hence 2**30."""
    return any(t is not None and t.untyped_storage().nbytes() >= (1 << 30) * t.element_size() for t in tensors)


class Job(NamedTuple):
    """A launch worked out once per signature (most of a small call's host time); ``compiled``: by alignment;
    ``own_cap``: ``options`` hold the plan's register cap (not a benchmark's), dropped where it makes a spill."""

    kernel: str
    grid: tuple[int, int, int]
    ints: tuple
    meta: dict
    options: dict
    plan: Plan
    compiled: dict
    own_cap: bool = False


_JOBS: dict[tuple, Job] = {}


def _launch(job: Job, tensors: tuple, traced: bool) -> None:
    """The job's kernel on ``tensors``: eagerly the compiled kernel is kept and launched directly from the next call
    on (Triton's launch works the specialisation out at every call), except under the interpreter or a launch hook."""
    kernel = getattr(kernels, job.kernel)  # looked up at each call: tests stand spies in for the kernels
    if traced:
        torch.library.wrap_triton(kernel)[job.grid](*tensors, *job.ints, **job.meta, **job.options)
        return
    args = (*tensors, *job.ints)
    with on_device_of(tensors[0]):  # Triton launches on the current device
        if not _keeps_binaries():
            _drops_a_spilling_cap(job, kernel[job.grid](*args, **job.meta, **job.options))
            return
        key = (kernel, *(None if t is None else t.data_ptr() % 16 == 0 for t in tensors))
        binary = job.compiled.get(key)
        if binary is None:
            binary = kernel[job.grid](*args, **job.meta, **job.options)
            if _drops_a_spilling_cap(job, binary):
                return
            if hasattr(binary, "packed_metadata"):  # the launcher takes the constexprs too, in order (and skips them)
                job.compiled[key] = (binary, tuple(job.meta[n] for n in kernel.arg_names[len(args):]))
            return
        binary, tail = binary
        stream = triton.runtime.driver.active.get_current_stream(tensors[0].get_device())
        binary.run(*job.grid, stream, binary.function, binary.packed_metadata, None, None, None, *args, *tail)


def _drops_a_spilling_cap(job: Job, binary: object) -> bool:
    """Whether the job's own register cap made ``binary`` (the compiled kernel a launch returned) spill, and so goes
    from its options: a spill costs more than the occupancy the cap buys."""
    return bool(job.own_cap and getattr(binary, "n_spills", 0) and job.options.pop("maxnreg", 0))


def _keeps_binaries() -> bool:
    """Whether eager launches keep the compiled kernel: not under the interpreter (no binaries), nor under a launch
    hook (Triton's own launch calls it)."""
    return not INTERPRETING and _hooks_unset()


@functools.cache
def register_cap(device: int) -> int:
    """Registers a thread may hold for an SM of ``device`` to run all its threads, where its memory delivers more
    than :data:`FAST_MEMORY_BYTES_PER_SM_CYCLE` bytes per SM clock (needing every load in flight), else 0."""
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
    """The flat tiling's tables, per position: column j holds the cos and signed sin (+ for a pair's first element,
    - for its second: every element is ``x[d] c + x[partner] s'``; 1 and 0 on the copied tail) of element j mod D's
    pair. P = lcm(D, 4) columns, 4 more where P is not a multiple of 8 (a block read past the period finds the next
    row's start), so blocks' columns start 16-byte aligned. ``cache``: keep the last few (not while tracing)."""
    cache = cache and TensorCache.usable(cos, sin)
    key = (D, interleaved)
    if cache and (hit := _TABLES.get((cos, sin), key)) is not None:
        return hit
    r2 = cos.shape[1]
    period = D if D % 4 == 0 else 2 * D
    d = torch.arange(period + period % 8, device=cos.device) % D
    pair = torch.where(d < 2 * r2, d // 2 if interleaved else d % max(r2, 1), 0)
    second = (d % 2 == 1) if interleaved else (d >= r2)
    tail = d >= 2 * r2
    tables = (torch.where(tail, 1.0, cos[:, pair]).contiguous(),
              torch.where(tail, 0.0, torch.where(second, -sin[:, pair], sin[:, pair])).contiguous())
    if cache:
        _TABLES.put((cos, sin), key, tables)
    return tables
