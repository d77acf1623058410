"""Launch helpers shared by the entries that launch their kernels from Python (Triton, CuTeDSL, Liger, the fused
attention).

Output allocation (with the tests' NaN-poison hook) and the power-of-two units strides are passed in, so that
the kernel families allocate and align alike; whether Triton runs its CPU interpreter, and whether a launch hook
asks for Triton's own launch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch
from torch import Tensor

Settings = TypeVar("Settings")


@contextlib.contextmanager
def overriding(current: Callable[[], Settings], install: Callable[[Settings], Settings],
               fields: dict[str, Any]) -> Iterator[Settings]:
    """A kernel family's launch settings (a dataclass: ``current()`` reads them, ``install(new)`` sets them and
    returns the old) with ``fields`` replaced while the block is open, then put back. A field the dataclass does not
    have, or a value its ``__post_init__`` refuses, raises ValueError before the block runs.

    Why process-wide, not a context variable: autograd runs a backward on a thread of its own, which sees none of
    the caller's context variables; the Triton entries and ``cutedsl`` share this rule (``rope.triton.tuning``,
    ``rope.cutedsl.tuning``)."""
    names = [f.name for f in dataclasses.fields(current())]
    unknown = sorted(set(fields) - set(names))
    if unknown:
        listed = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
        raise ValueError(f"tuning: unknown setting {unknown[0]!r}; the settings are {listed}")
    outer = install(dataclasses.replace(current(), **fields))
    try:
        yield current()
    finally:
        install(outer)


def pow2_unit(n: int, cap: int = 16) -> int:
    """The largest power of two (at most ``cap``) dividing ``n`` (``cap`` for 0)."""
    return min(cap, n & -n) if n else cap


def stride_unit(*values: int, cap: int = 16) -> int:
    """The largest power of two (at most ``cap``) dividing every value: the unit a kernel receives strides and
    offsets in, multiplying them back by it as a compile-time constant so that it knows their alignment."""
    return pow2_unit(math.gcd(*values), cap) if values else cap


def new_output(shape: tuple[int, ...], like: Tensor, poison: bool = False) -> Tensor:
    """A fresh contiguous output of ``like``'s dtype and device; NaN-filled when ``poison`` (the tests' hook:
    :attr:`rope.base.RotaryEmbedding.poison_outputs`), so an element a kernel fails to write shows."""
    if tuple(shape) == tuple(like.shape):  # less host time than torch.empty(shape, dtype=, device=)
        out = torch.empty_like(like, memory_format=torch.contiguous_format)
    else:
        out = torch.empty(shape, dtype=like.dtype, device=like.device)
    return out.fill_(float("nan")) if poison else out


def new_outputs(q: Tensor, k: Tensor | None, out_q: Tensor | None = None, out_k: Tensor | None = None,
                poison: bool = False) -> tuple[Tensor, Tensor | None]:
    """q's and k's outputs: the given ones, else fresh tensors of their shapes (:func:`new_output`)."""
    if out_q is None:
        out_q = new_output(q.shape, q, poison)
    if k is not None and out_k is None:
        out_k = new_output(k.shape, k, poison)
    return out_q, out_k


#: Whether ``TRITON_INTERPRET=1`` was set when ``rope`` was imported: the mode rope's Triton kernels were defined
#: in, read once (see :func:`triton_runs_on`). The tests set it to stand for a process started without the variable.
INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"


def interpreting() -> bool:
    """Whether rope's Triton kernels run under Triton's CPU interpreter, taking CPU tensors: :data:`INTERPRETING`,
    ``TRITON_INTERPRET=1`` as it was when ``rope`` was imported (why not as it is now: :func:`triton_runs_on`)."""
    return INTERPRETING


def triton_runs_on(device: torch.device | str) -> bool:
    """Whether a Triton kernel launched from ``rope`` (the ``triton_*`` entries, ``liger``, the fused attention)
    runs on ``device``: a CUDA device, or the CPU under Triton's interpreter.

    The rule is frozen at import: Triton chooses the interpreter when it defines a kernel (``@triton.jit`` reads
    ``TRITON_INTERPRET`` then and returns an interpreted function or a compiled one, for good), and rope's own
    kernels (``rope.triton.kernels``) are defined when ``rope`` is imported; so the variable counts as it was then
    (:data:`INTERPRETING`), and setting it later changes no answer here, as it changes none of those kernels.
    Liger's kernels and the fused attention's are defined at their first use, under the variable of that moment:
    they agree with this answer when the variable is set before triton (hence ``rope``) is imported and left so,
    which is what every message here asks for.

    Why one function: every check of a device (the entries' ``unavailable_reason`` and input checks, the fused
    attention's, ``RoPEAttention``'s) must give one answer in a process, whatever the variable did since."""
    device = torch.device(device)
    return device.type == "cuda" or (device.type == "cpu" and interpreting())


def launch_hooks_unset() -> bool:
    """Whether no Triton launch hook is set (a profiler's hooks need Triton's own launch, not a direct one): hooks
    are chains of calls, empty by default (Triton 3.6), or a callable or None (earlier versions)."""
    import triton

    rt = getattr(getattr(triton, "knobs", None), "runtime", None)
    return rt is None or all(h is None or getattr(h, "calls", None) == [] for h in (rt.launch_enter_hook,
                                                                                    rt.launch_exit_hook))
