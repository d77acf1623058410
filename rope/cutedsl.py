"""``cutedsl``: the rotary embedding as a CuTeDSL kernel (NVIDIA's CUTLASS Python DSL).

The seed kernel report's second backend. It computes ``triton_v4``'s function the same way (input
dtype loads, float32 fma math, one rounding at the store; kernel: :mod:`rope._cute_kernels`), so a
user can compare a CuTeDSL kernel with the Triton ones on speed and on model quality in one app.

* q and k in one launch, forward and backward (the backward is the transposed rotation), strided
  views (the q and k slices of a fused qkv projection) read in place, GQA, ``positions``, both
  variants, both layouts, ``rotary_dim``.
* Under ``torch.compile``: the custom ops ``ropelab::cute_rope_fwd`` / ``cute_rope_bwd`` with fake
  implementations and registered autograd (no graph break); in eager mode a plain autograd Function.
* Each row geometry and dtype is compiled once (``cute.compile``, cached per process); the launch
  passes raw pointers, sizes and strides (no DLPack conversion on the hot path).
* Optional dependency: ``pip install -e '.[cutedsl]'`` (nvidia-cutlass-dsl). Without it the name stays
  registered and building it fails at once naming the package; CuTeDSL has no CPU interpreter, so
  on a machine without a CUDA GPU it is unavailable (the CPU test suite skips it with that reason).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import math
import tempfile
from collections.abc import Iterator

import torch
from torch import Tensor

from rope._launch import (  # shared with the Triton entries: same outputs, same stride units
    new_outputs,
    overriding,
    pow2_unit,
)
from rope.base import RotaryEmbedding, on_device_of
from rope.checks import LAYOUTS
from rope.registry import register
from rope.scaling import attention_factor

PACKAGE = "nvidia-cutlass-dsl"
_SUPPORTED = (torch.float32, torch.bfloat16, torch.float16)


@dataclasses.dataclass(frozen=True)
class CuteLaunchConfig:
    """How a launch splits the rows: ``threads`` per CTA (rounded down to whole rows), each thread
    rotating one chunk in each of ``rows_per_thread`` consecutive blocks of rows. A benchmark sets it through
    :func:`tuning`; every value computes the same bits."""

    threads: int = 512
    rows_per_thread: int = 1

    def __post_init__(self) -> None:
        if self.threads < 32 or self.threads > 1024 or self.threads & (self.threads - 1):
            raise ValueError(f"threads must be a power of two in [32, 1024], got {self.threads}")
        if self.rows_per_thread < 1 or self.rows_per_thread > 8:
            raise ValueError(f"rows_per_thread must be in [1, 8], got {self.rows_per_thread}")


DEFAULT_LAUNCH = CuteLaunchConfig()
_launch_config = DEFAULT_LAUNCH  # what every launch uses: :func:`tuning` sets it


@contextlib.contextmanager
def tuning(**fields: int) -> Iterator[CuteLaunchConfig]:
    """Launch every ``cutedsl`` rotation (forward and backward, eager or compiled) with these
    :class:`CuteLaunchConfig` fields while the block is open: ``with rope.cutedsl.tuning(threads=256): ...``.

    Why a block, not an argument: a launch setting changes no result, so it stays out of the module's and the
    ops' signatures (a compiled graph keeps no knob); the setting is the process's, as autograd runs the backward
    on its own thread (:func:`rope._launch.overriding`). A bad field or value raises ValueError before the block
    runs."""
    with overriding(lambda: _launch_config, _install, fields) as config:
        yield config


def _install(config: CuteLaunchConfig) -> CuteLaunchConfig:
    """Make ``config`` every launch's; returns the one it replaces."""
    global _launch_config
    previous, _launch_config = _launch_config, config
    return previous


def package_missing() -> str | None:
    """Why the CuTeDSL package cannot be used here (one line), or None when ``cutlass`` imports."""
    if importlib.util.find_spec("cutlass") is None:
        return (f"cutedsl needs the `{PACKAGE}` package (pip install -e '.[cutedsl]') and a CUDA GPU; on a GPU "
                "without it, use the triton_v4 implementation")
    return None


@functools.cache
def _kernels():
    """The kernel module (imports cutlass: a second or two, so only when a module is built)."""
    from rope import _cute_kernels

    return _cute_kernels


def geometry(head_dim: int, rotary_pairs: int, partial: bool, interleaved: bool, elem_bytes: int,
             align_elems: int, config: CuteLaunchConfig = DEFAULT_LAUNCH) -> dict:
    """The compile-time row geometry of a launch.

    ``V``: pairs per thread, a power of two with its vector (V elements per half, 2V interleaved) at
    most 16 bytes and at most ``align_elems`` (the alignment every row start has), dividing R2. CW:
    the cos/sin columns loaded (R2/2 with ``partial`` when V divides it: the rest are the zero
    frequencies, cos 1 and sin 0, no load). VP: the vector of the copied tail (rotary_dim < D).
    RPC: rows per block of threads (``config.threads`` of them, or one row's threads if more); RPT:
    blocks of rows per CTA (``config.rows_per_thread``).
    """
    vmax = min(16 // elem_bytes, align_elems)
    v = vmax // 2 if interleaved else vmax
    v = max(1, v)
    while rotary_pairs % v:
        v //= 2
    cw = rotary_pairs // 2 if partial and (rotary_pairs // 2) % v == 0 else rotary_pairs
    passed = head_dim - 2 * rotary_pairs
    vp = vmax
    while vp > 1 and (passed % vp or (2 * rotary_pairs) % vp):
        vp //= 2
    tpr = rotary_pairs // v
    return {"D": head_dim, "R2": rotary_pairs, "CW": cw, "INTERLEAVED": interleaved, "V": v, "VP": vp,
            "RPC": max(1, config.threads // tpr), "RPT": config.rows_per_thread}


@functools.cache
def _runtime():
    """What a launch needs from the CUDA bindings and cutlass, imported once (not per call)."""
    import cuda.bindings.driver as cuda
    import cutlass
    from cutlass.base_dsl.enums import AddressSpace
    from cutlass.cute.runtime import make_ptr

    return cuda, cutlass, AddressSpace.gmem, make_ptr


def _cutlass_dtype(dtype: torch.dtype):
    import cutlass

    return {torch.float32: cutlass.Float32, torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16}[dtype]


@functools.lru_cache(maxsize=256)
def _compiled(dtype: torch.dtype, D: int, R2: int, CW: int, INTERLEAVED: bool, V: int, VP: int, SV: int, CSV: int,
              RPC: int, RPT: int, HAS_POS: bool, INVERSE: bool, ALIGN: int,
              ptx_arch: str | None = None):
    """``rope_launch`` compiled for one specialisation (pointers and ints are runtime arguments).

    Needs no GPU: pointers are placeholders at compile time. ``ptx_arch`` (e.g. ``"sm_90a"``): compile
    for that architecture and keep the PTX text in ``.artifacts.PTX``, to inspect the generated memory
    accesses on any machine (without it, the architecture is the GPU's)."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.base_dsl.enums import AddressSpace
    from cutlass.cute.runtime import make_fake_stream, make_ptr

    dt = _cutlass_dtype(dtype)

    def ptr(t, align):
        return make_ptr(t, 0, AddressSpace.gmem, assumed_align=align)

    args = [ptr(dt, ALIGN)] * 4 + [ptr(cutlass.Float32, 16)] * 2 + [ptr(cutlass.Int32, 4)] + [1] * 20
    run = (D, R2, CW, INTERLEAVED, V, VP, SV, CSV, RPC, RPT, HAS_POS, INVERSE, make_fake_stream())
    if not ptx_arch:
        return cute.compile(_kernels().rope_launch, *args, *run)
    from cutlass.base_dsl.compiler import DumpDir, GPUArch

    # KeepPTX writes a .ptx file: into a directory of our own that goes away (the text stays in .artifacts),
    # not into the caller's working directory
    with tempfile.TemporaryDirectory(prefix="ropelab_cute_ptx_") as tmp:
        compile_ = cute.compile[cute.KeepPTX(True), GPUArch(ptx_arch), DumpDir(tmp)]
        compiled = compile_(_kernels().rope_launch, *args, *run)
        compiled.artifacts.PTX  # noqa: B018 -- read while the file exists, should it be read lazily
    return compiled


def launch(q: Tensor, k: Tensor | None, cos: Tensor, sin: Tensor, positions: Tensor | None, partial: bool,
           inverse: bool, out_q: Tensor | None = None, out_k: Tensor | None = None, *, interleaved: bool = False,
           poison: bool = False) -> tuple[Tensor, Tensor | None]:
    """Rotate (``inverse``: rotate back) q and k in one launch into new (or the given) outputs.

    The rotated width is the tables' (cos, sin: (max_seq_len, R/2) float32); the D - R trailing
    elements of each head are copied. Inputs are read in place with their strides. Shapes and dtypes
    are assumed valid (the module checks).
    """
    cuda, cutlass, gmem, make_ptr = _runtime()
    B, T, HQ, D = q.shape
    HK = k.shape[2] if k is not None else 0
    out_q, out_k = new_outputs(q, k, out_q, out_k, poison)
    if B * T * (HQ + HK) == 0 or D == 0:
        return out_q, out_k
    if max(B * T * HQ, B * T * HK) >= 2**31:
        raise ValueError(f"too many rows (B*T*heads) for one launch: B={B}, T={T}, heads {HQ}+{HK}")
    kk, ok = (k, out_k) if k is not None else (q, out_q)
    tensors = (q, kk, out_q, ok)
    esize = q.element_size()
    if any(t.stride(3) != 1 for t in tensors):  # the kernel reads rows as vectors: D contiguous
        q, kk = (t if t.stride(3) == 1 else t.contiguous() for t in (q, kk))
        tensors = (q, kk, out_q, ok)
    # The alignment every row start has, in elements: row strides and base addresses.
    g = 0
    for t in tensors:
        for st in t.stride()[:3]:
            g = math.gcd(g, st)
        g = math.gcd(g, t.data_ptr() // esize if t.data_ptr() % esize == 0 else 1)
    sv = pow2_unit(g, 16 // esize)
    if positions is not None:
        pos = positions.to(torch.int32) if positions.dtype != torch.int32 else positions
        spb, spt = pos.stride() if pos.dim() == 2 else (0, pos.stride(0))
    else:
        pos, spb, spt = cos, 0, 0
    if sin.stride() != cos.stride():
        cos, sin = cos.contiguous(), sin.contiguous()
    csv = pow2_unit(cos.stride(0), 4)
    geo = geometry(D, cos.shape[1], bool(partial), bool(interleaved), esize, sv, _launch_config)
    fn = _compiled(q.dtype, geo["D"], geo["R2"], geo["CW"], geo["INTERLEAVED"], geo["V"], geo["VP"], sv, csv,
                   geo["RPC"], geo["RPT"], positions is not None, bool(inverse), sv * esize)
    dt = _cutlass_dtype(q.dtype)

    def ptr(t, dtype, align):
        return make_ptr(dtype, t.data_ptr(), gmem, assumed_align=align)

    strides = [st // sv for t in tensors for st in t.stride()[:3]]
    stream = cuda.CUstream(torch.cuda.current_stream(q.device).cuda_stream)
    with on_device_of(q):  # the compiled kernel is loaded into, and launched in, the current device's context
        fn(*(ptr(t, dt, sv * esize) for t in tensors), ptr(cos, cutlass.Float32, 16), ptr(sin, cutlass.Float32, 16),
           ptr(pos, cutlass.Int32, 4), B, T, HQ, HK, *strides, cos.stride(0) // csv, cos.shape[0], spb, spt, stream)
    return out_q, out_k


# -- custom ops: opaque to torch.compile, with fake shapes and autograd ----------------------------
_SCHEMA = ("(Tensor q, Tensor? k, Tensor cos, Tensor sin, Tensor? positions, bool partial, bool interleaved,"
           " bool poison) -> (Tensor, Tensor)")


def _op(q, k, cos, sin, positions, partial, interleaved, poison, inverse):
    yq, yk = launch(q, k, cos, sin, positions, partial, inverse, interleaved=interleaved, poison=poison)
    return yq, q.new_empty((0,)) if yk is None else yk


@torch.library.custom_op("ropelab::cute_rope_fwd", mutates_args=(), schema=_SCHEMA)
def cute_rope_fwd(q, k, cos, sin, positions, partial, interleaved, poison):
    """Rotated (q, k); k's slot holds an empty tensor when k is None."""
    return _op(q, k, cos, sin, positions, partial, interleaved, poison, False)


@torch.library.custom_op("ropelab::cute_rope_bwd", mutates_args=(), schema=_SCHEMA)
def cute_rope_bwd(q, k, cos, sin, positions, partial, interleaved, poison):
    """The transposed rotation of (q, k): the gradients of :func:`cute_rope_fwd`."""
    return _op(q, k, cos, sin, positions, partial, interleaved, poison, True)


def _fake(q, k, cos, sin, positions, partial, interleaved, poison):
    contiguous = torch.contiguous_format  # as the launch allocates its outputs, whatever the inputs' strides
    yk = q.new_empty((0,)) if k is None else torch.empty_like(k, memory_format=contiguous)
    return torch.empty_like(q, memory_format=contiguous), yk


torch.library.register_fake("ropelab::cute_rope_fwd")(_fake)
torch.library.register_fake("ropelab::cute_rope_bwd")(_fake)


def _setup_context(ctx, inputs, output):
    q, k, cos, sin, positions, partial, interleaved, poison = inputs
    ctx.save_for_backward(cos, sin, positions)
    ctx.args = (k is not None, partial, interleaved, poison)


def _grads(op, ctx, gq, gk):
    cos, sin, positions = ctx.saved_tensors
    has_k, partial, interleaved, poison = ctx.args
    dq, dk = op(gq, gk if has_k else None, cos, sin, positions, partial, interleaved, poison)
    return (dq, dk if has_k else None) + (None,) * 6


torch.library.register_autograd("ropelab::cute_rope_fwd", lambda ctx, gq, gk: _grads(cute_rope_bwd, ctx, gq, gk),
                                setup_context=_setup_context)
torch.library.register_autograd("ropelab::cute_rope_bwd", lambda ctx, gq, gk: _grads(cute_rope_fwd, ctx, gq, gk),
                                setup_context=_setup_context)


class _CuteRopeFunction(torch.autograd.Function):
    """Eager path: (q, k) -> rotated (q, k); the backward is the same Function with the rotation inverted."""

    @staticmethod
    def forward(ctx, q, k, cos, sin, positions, partial, inverse, interleaved, poison):
        ctx.save_for_backward(cos, sin, positions)
        ctx.args = (k is not None, partial, inverse, interleaved, poison)
        return launch(q, k, cos, sin, positions, partial, inverse, interleaved=interleaved, poison=poison)

    @staticmethod
    def backward(ctx, gq, gk):
        cos, sin, positions = ctx.saved_tensors
        has_k, partial, inverse, interleaved, poison = ctx.args
        dq, dk = _CuteRopeFunction.apply(gq, gk if has_k else None, cos, sin, positions, partial, not inverse,
                                         interleaved, poison)
        return (dq, dk) + (None,) * 7


@register("cutedsl")
class CuteDSLRotary(RotaryEmbedding):
    """RoPE as a CuTeDSL kernel: ``triton_v4``'s arithmetic (float32 math, one rounding at the store)."""

    layouts = LAYOUTS
    supports_rotary_dim = True

    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0, variant: str = "partial",
                 layout: str = "half", rotary_dim: int | None = None, scaling: dict | None = None) -> None:
        missing = package_missing()
        if missing:
            raise RuntimeError(missing)
        super().__init__(head_dim, max_seq_len, base, variant, layout, rotary_dim, scaling)
        # As in the Triton entries: the zero-frequency pairs need no table load unless YaRN scales the table.
        self._partial_shortcut = variant == "partial" and attention_factor(self.scaling) == 1.0

    @classmethod
    def unavailable_reason(cls, device: torch.device) -> str | None:
        missing = package_missing()
        if missing:
            return missing
        if torch.device(device).type != "cuda":
            return ("cutedsl runs on a CUDA GPU only (CuTeDSL has no CPU interpreter); use the torch implementation, "
                    "which runs anywhere")
        return None

    def describe(self) -> dict:
        return {**super().describe(), "compute_dtype": "float32"}

    def rotate(self, q: Tensor, k: Tensor | None, positions: Tensor | None) -> tuple[Tensor, Tensor | None]:
        args = (self.cos, self.sin, positions, self._partial_shortcut)
        interleaved = self.layout == "interleaved"
        poison = bool(self.poison_outputs)
        if torch.compiler.is_compiling():
            yq, yk = cute_rope_fwd(q, k, *args, interleaved, poison)
            return yq, (yk if k is not None else None)
        if not (torch.is_grad_enabled() and (q.requires_grad or (k is not None and k.requires_grad))):
            return launch(q, k, *args, False, interleaved=interleaved, poison=poison)
        return _CuteRopeFunction.apply(q, k, *args, False, interleaved, poison)

    def check_inputs(self, q: Tensor, k: Tensor | None, positions: Tensor | None) -> None:
        if q.dtype not in _SUPPORTED:
            raise TypeError(f"cutedsl supports float32, bfloat16 and float16 inputs, got {q.dtype}")
        if not torch.compiler.is_compiling():
            for name, x in (("q", q), ("k", k), ("positions", positions)):
                if x is not None and not x.is_cuda:
                    raise ValueError(f"{name} is on {x.device}: cutedsl runs on CUDA tensors only "
                                     "(CuTeDSL has no CPU interpreter)")
