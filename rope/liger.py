"""``liger``: this project's RoPE computed by Liger-Kernel's Triton RoPE kernel (a peer's kernel).

Why: a kernel other people train with, behind the same registry as ours (``rope.build("liger", ...)``,
``rope.apply(..., impl="liger")``), so a caller can compare the two on model quality and speed by changing
one name.

Liger's ``LigerRopeFunction`` (``liger_kernel.ops.rope``, the kernel behind
``liger_kernel.transformers.rope.liger_rotary_pos_emb``) follows Hugging Face's convention, and this
module translates to it:

* q, k are (B, H, T, D) and the kernel reads them as (B, T, H, D) storage: a contiguous (B, T, H, R)
  copy of the rotated width, transposed, is exactly what it rotates without a copy of its own.
* cos, sin are (1 or B, T, R), full width (``cat(f, f)``), and it rotates by +theta
  (``y = x cos + rotate_half(x) sin``, ``rotate_half(x) = cat(-x2, x1)``); this project rotates by
  -theta (``y1 = x1 c + x2 s``), so it is given ``-sin``. These tables are made per call from the
  base class's float32 ``cos``/``sin`` rows (scaling included; ``-0.0`` for the zero frequencies:
  exact, as the pass-through needs); a position outside the table gives NaN rows, as in every
  entry (see ``rope.reference.gather_tables``).
* It rotates q and k IN PLACE, and in the backward the output gradients: ``_LigerRope`` runs Liger's
  own forward and backward on fresh copies (of the rotated width of q and k, of the gradients), so
  the caller's tensors, strided views of a fused projection and ``grad_outputs`` included, are
  never written.
* It needs a k, and cannot take zero heads: q alone goes with a one-head zero k, a q or k of zero
  heads is stood in for by one (no launch at all when neither has a head).
* Its backward is the same Function run in the other direction (Liger's backward kernel, the inverse
  rotation; and the forward kernel for that one's backward), so autograd can differentiate a gradient
  again: double backward and Hessian-vector products are exact, as for every entry.
* It rotates a whole head of the tensors it is given: ``rotary_dim`` < D hands it the first R
  elements and concatenates the D - R others, untouched.
* Precision: the kernel loads q and k in their dtype, converts them to the dtype of cos/sin and
  rounds once at the store, so with these float32 tables it computes in float32 for every input
  dtype (``describe()["compute_dtype"] == "float32"``). (Hugging Face models hand it tables cast to
  the model's dtype, i.e. bf16 arithmetic in a bf16 model; this entry does not reproduce that.)

Layout ``half`` only (Liger's kernel pairs i with i + R/2). Liger's kernel also runs under Triton's
interpreter (``TRITON_INTERPRET=1`` set before triton is imported), so on a CPU the tests run it.
``liger_kernel`` is imported when the entry is built (its package import takes seconds), not when
``rope`` is; without it the name stays registered and a build raises a RuntimeError naming the
package (``unavailable_reason`` says it before any build).
"""

from __future__ import annotations

import re
from importlib import metadata

import torch
from torch import Tensor

from rope._launch import triton_runs_on
from rope.base import RotaryEmbedding, on_device_of
from rope.reference import gather_tables
from rope.registry import register

#: The first release whose kernel takes per-batch cos/sin rows ((B, T, R) tables: (B, T) positions);
#: 0.5.0-0.5.2 read row t of the first batch's table for every batch, silently.
MIN_VERSION = (0, 5, 3)
PACKAGE = "liger-kernel"
_SUPPORTED = (torch.float32, torch.bfloat16, torch.float16)


def _version_tuple(version: str) -> tuple[int, ...]:
    """(0, 8, 5) from "0.8.5", "0.8.5.dev2026..." or "0.8.5+local"; () when it does not start with numbers."""
    match = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", version)
    return tuple(int(p) for p in match.groups() if p is not None) if match else ()


def load_liger() -> type[torch.autograd.Function]:
    """Liger's ``LigerRopeFunction``; a one-line RuntimeError naming the package when it cannot be used.

    Imported on each call (a dictionary lookup once imported), so nothing is cached across a change
    of the environment (the tests simulate a missing package).
    """
    try:
        from liger_kernel.ops.rope import LigerRopeFunction
    except Exception as exc:  # ImportError, or a broken install raising anything at import
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise RuntimeError(
            f"liger needs the `{PACKAGE}` package (pip install {PACKAGE}), which could not be imported "
            f"({detail}); use the torch or triton_v4 implementation"
        ) from None
    try:
        version = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:  # importable but not installed as a distribution (a checkout)
        version = ""
    found = _version_tuple(version)
    if found and found < MIN_VERSION:
        need = ".".join(map(str, MIN_VERSION))
        raise RuntimeError(
            f"liger needs {PACKAGE}>={need} (per-batch cos/sin rows), found {version}: "
            f"pip install -U '{PACKAGE}>={need}'"
        )
    return LigerRopeFunction


def _fresh(x: Tensor, width: int) -> Tensor:
    """A contiguous (B, T, H, width) copy of x's first ``width`` elements per head, for Liger to write into."""
    return x[..., :width].clone(memory_format=torch.contiguous_format)


class _LigerRope(torch.autograd.Function):
    """(q, k) -> rotated (q, k) through Liger's ``LigerRopeFunction``, on copies.

    ``inverse`` False runs Liger's forward kernel, True its backward kernel (the rotation by the opposite
    angle). Around them this Function owns the buffers Liger rotates in place: copies of the rotated width
    of its inputs, which can be the caller's tensors (in the inverse direction the output gradients,
    ``grad_outputs`` of ``torch.autograd.grad`` included). The outputs are tensors of this Function's own,
    so a caller may modify them in place, as it may the other entries'.

    The backward is this Function in the other direction, not a kernel run out of autograd's sight: the
    rotation is linear, so the gradient of one direction is the other, and under ``create_graph=True``
    autograd records it and differentiates it again (a double backward, a Hessian-vector product, gets
    the same second derivative as every other entry, not the derivative of a copy).
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor | None, cos: Tensor, sin: Tensor,
                liger: type[torch.autograd.Function], inverse: bool) -> tuple[Tensor, Tensor | None]:
        R = cos.shape[-1]
        ctx.save_for_backward(cos, sin)
        ctx.liger, ctx.inverse, ctx.has_k = liger, inverse, k is not None
        yq, yk = _run_liger(liger, inverse, _fresh(q, R), None if k is None else _fresh(k, R), cos, sin)
        return _assemble(yq, q, R), None if k is None else _assemble(yk, k, R)

    @staticmethod
    def backward(ctx, gq: Tensor, gk: Tensor | None):
        cos, sin = ctx.saved_tensors
        dq, dk = _LigerRope.apply(gq, gk if ctx.has_k else None, cos, sin, ctx.liger, not ctx.inverse)
        return dq, dk, None, None, None, None


class _LigerContext:
    """What Liger's ``forward`` and ``backward`` use of an autograd ctx: the tables it saves and reads back,
    and the attributes it sets. Its kernels run on one of these, so that either direction can run as the
    forward of :class:`_LigerRope` (Liger's backward reads tables its forward saved)."""

    def __init__(self, cos: Tensor, sin: Tensor) -> None:
        self.saved_tensors = (cos, sin)
        self.rotary_dim = None  # the tables' width (Liger's default)

    def save_for_backward(self, *tensors: Tensor) -> None:
        self.saved_tensors = tensors


def _run_liger(liger: type[torch.autograd.Function], inverse: bool, q: Tensor, k: Tensor | None, cos: Tensor,
               sin: Tensor) -> tuple[Tensor, Tensor | None]:
    """Liger's forward (``inverse``: backward) kernel on (B, T, H, R) buffers of our own, rotated in place.

    The kernel needs a q and a k of at least one head each: a missing k, or a q or k of zero heads, is
    stood in for by a one-head zero buffer, whose result is dropped; with no head at all nothing is
    launched (the empty result every entry gives).
    """
    if q.shape[2] == 0 and (k is None or k.shape[2] == 0):
        return q, k
    xq, xk = (x if x is not None and x.shape[2] else q.new_zeros(*q.shape[:2], 1, q.shape[-1]) for x in (q, k))
    tables = _LigerContext(cos, sin)
    with on_device_of(q):  # Liger's Triton launch goes to the current device
        if inverse:
            yq, yk = liger.backward(tables, xq.transpose(1, 2), xk.transpose(1, 2))[:2]
        else:
            yq, yk = liger.forward(tables, xq.transpose(1, 2), xk.transpose(1, 2), cos, sin)
    yq = _owned(yq, q) if xq is q else q  # a stand-in's result is dropped
    return yq, None if k is None else (_owned(yk, k) if xk is k else k)


def _owned(y: Tensor, buffer: Tensor) -> Tensor:
    """Liger's (B, H, T, R) result as a (B, T, H, R) tensor that is no view (a view returned by an
    autograd Function cannot be modified in place): the buffer it rotated in place, or a copy."""
    y = y.transpose(1, 2)
    if y.data_ptr() == buffer.data_ptr() and y.shape == buffer.shape and y.stride() == buffer.stride():
        return buffer
    return y.clone(memory_format=torch.contiguous_format)


def _assemble(y_rot: Tensor, x: Tensor, width: int) -> Tensor:
    """The rotated width followed by x's other D - width elements, untouched."""
    return y_rot if width == x.shape[-1] else torch.cat((y_rot, x[..., width:]), dim=-1)


@register("liger")
class LigerRotary(RotaryEmbedding):
    """This project's RoPE (half layout) through Liger-Kernel's Triton RoPE kernel; float32 math."""

    layouts = ("half",)
    supports_rotary_dim = True

    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0, variant: str = "partial",
                 layout: str = "half", rotary_dim: int | None = None, scaling: dict | None = None) -> None:
        function = load_liger()  # fails at once, naming the package, before any table is built
        super().__init__(head_dim, max_seq_len, base, variant, layout, rotary_dim, scaling)
        self._function = function

    @classmethod
    def unavailable_reason(cls, device: torch.device) -> str | None:
        """None on a CUDA device, or on the CPU under Triton's interpreter; else why not, in one line."""
        try:
            load_liger()
        except RuntimeError as exc:
            return str(exc)
        if triton_runs_on(device):
            return None
        return ("liger runs on a CUDA GPU, or on the CPU under Triton's interpreter (TRITON_INTERPRET=1 set before "
                "triton is imported, slow); use the torch implementation, which runs anywhere")

    def describe(self) -> dict:
        try:
            version = metadata.version(PACKAGE)
        except metadata.PackageNotFoundError:
            version = "unknown"
        return {**super().describe(), "compute_dtype": "float32", "liger_kernel": version}

    def check_inputs(self, q: Tensor, k: Tensor | None, positions: Tensor | None) -> None:
        """What Liger's kernel needs beyond the shared checks: a supported dtype, CUDA (or the interpreter)."""
        if q.dtype not in _SUPPORTED:
            raise TypeError(f"liger supports float32, bfloat16 and float16 inputs, got {q.dtype}")
        if not triton_runs_on(q.device):
            raise ValueError(
                f"q is on {q.device}: Liger's Triton RoPE kernel needs CUDA tensors "
                "(or TRITON_INTERPRET=1 set before triton is imported, to run it on the CPU interpreter)"
            )

    def _liger_tables(self, positions: Tensor | None, T: int) -> tuple[Tensor, Tensor]:
        """cos and -sin rows as Liger takes them, Hugging Face's full width: (1, T, R), or (B, T, R) for
        (B, T) positions. Made per call from the base class's tables (T x R elements, small beside q
        and k), so they follow those tables wherever they change (``scaling.type=dynamic_ntk``)."""
        cos, sin = (t[:, :, 0] for t in gather_tables(positions, T, self.cos, self.sin))  # (1 or B, T, R/2)
        return torch.cat((cos, cos), dim=-1), torch.cat((-sin, -sin), dim=-1)

    def rotate(self, q: Tensor, k: Tensor | None, positions: Tensor | None) -> tuple[Tensor, Tensor | None]:
        cos, sin = self._liger_tables(positions, q.shape[1])
        return _LigerRope.apply(q, k, cos, sin, self._function, False)
