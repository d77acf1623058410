"""The build-argument checks every RoPE implementation shares, and the errors they raise.

Why a module of their own: ``rope.build``, ``rope.check_args``, every constructor (through
:class:`rope.base.RotaryEmbedding`) and :func:`rope.base.rope_frequencies` check the same arguments, so each check
is written once, here. A bad argument raises :class:`RopeArgumentError`, which names it, so a config checker can
point at the config key without parsing the message. This module imports nothing of ``rope`` but
:mod:`rope.scaling`: :mod:`rope.base` re-exports its names (``from rope.base import RopeArgumentError`` works as
it always did), which would be an import cycle if this module imported that one.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import torch
from torch import Tensor

from rope.scaling import SCALING_TYPES, ScalingError, normalize_scaling

VARIANTS = ("partial", "full")
LAYOUTS = ("half", "interleaved")


class RopeArgumentError(ValueError):
    """A build argument of ``rope.build`` / ``rope.check_args`` / a constructor that cannot work.

    ``argument`` names the argument at fault (``"name"``, ``"head_dim"``, ``"max_seq_len"``,
    ``"base"``, ``"variant"``, an option such as ``"compute_dtype"``), so a config checker can
    point at the config key without parsing the message.
    """

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument

    def __str__(self) -> str:  # KeyError (a base of UnknownRopeError) would quote the message
        return str(self.args[0])

    def __reduce__(self):  # pickles (torchrun, multiprocessing) despite the two-argument constructor
        return type(self), (self.argument, str(self))


class UnknownRopeError(RopeArgumentError, KeyError):
    """No implementation is registered under that name (``argument == "name"``).

    Also a KeyError, what a registry lookup raised before :class:`RopeArgumentError` existed.
    """


class UnknownRopeOptionError(RopeArgumentError, TypeError):
    """An option the implementation does not take (``argument`` = the option's name).

    Also a TypeError, what Python raises for an unexpected keyword argument.
    """


# -- argument checks: each written once, used by the constructors and by check_args -----------------
def _positive_int(name: str, value: object) -> None:
    """Refuse anything but a positive Python int. An integer of another type (``np.int64(8)``, ``torch.tensor(8)``)
    is refused too, saying so and how to convert it: "must be a positive int, got np.int64(8)" would read as a
    contradiction."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return
    if _integer_of_another_type(value):
        kind = f"{type(value).__module__}.{type(value).__qualname__}"
        raise RopeArgumentError(name, f"{name} must be a positive Python int, got {value!r} of type {kind}: "
                                      f"convert it with int()")
    raise RopeArgumentError(name, f"{name} must be a positive int, got {value!r}")


def _integer_of_another_type(value: object) -> bool:
    """A NumPy integer (a ``numbers.Integral``) or a one-element integer tensor: an integer that is no Python int."""
    if isinstance(value, (int, bool)):
        return False
    if isinstance(value, Tensor):
        return value.numel() == 1 and not (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool)
    return isinstance(value, numbers.Integral)


def describe_value(value: object) -> str:
    """How an error message shows a value the caller passed: its repr where that is one short line, else its type
    (with its shape or length). A tensor, an array or a long list given where a number or a name was expected would
    otherwise put hundreds of lines (or thousands of characters) into a message meant to be one line."""
    text = repr(value)
    if len(text) <= 80 and "\n" not in text:
        return text
    kind = type(value).__name__
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple):  # torch.Size is a tuple, as is NumPy's shape
        return f"{kind} of shape {tuple(shape)}"
    try:
        return f"{kind} of length {len(value)}"
    except TypeError:
        return kind


def check_variant(variant: object) -> None:
    """Refuse a rotation variant other than ``partial`` / ``full`` (anything but a str first: an array would be
    compared element by element, and its truth value raise NumPy's error)."""
    if not isinstance(variant, str) or variant not in VARIANTS:
        raise RopeArgumentError("variant", f"variant must be one of {VARIANTS}, got {describe_value(variant)}")


def check_head_dim(head_dim: object, variant: str, rotary_dim: object = None, rotates: bool = True) -> None:
    """Refuse a head size (or rotated width) the rotation cannot split, and a bad variant, which
    decides the split. ``rotates`` False (the identity): no split is made, so any positive size passes."""
    check_variant(variant)
    _positive_int("head_dim", head_dim)
    if rotary_dim is not None:
        check_rotary_dim(rotary_dim, head_dim, variant, rotates)
        return
    if not rotates:
        return
    if variant == "partial" and head_dim % 4:
        raise RopeArgumentError(
            "head_dim", f"head_dim must be a multiple of 4 for variant='partial' (D/4 frequencies), got {head_dim}"
        )
    if head_dim % 2:
        raise RopeArgumentError("head_dim", f"head_dim must be even (x is split into two halves), got {head_dim}")


def check_rotary_dim(rotary_dim: object, head_dim: int | None, variant: str, rotates: bool = True) -> None:
    """Refuse a rotated width that is not an even int in [2, head_dim] (a multiple of 4 for partial);
    ``head_dim`` None: no upper bound (:func:`rope_frequencies`, which knows no head); ``rotates`` False (the
    identity): any int in [1, head_dim], as no split is made."""
    if rotary_dim is None:
        return
    _positive_int("rotary_dim", rotary_dim)
    step = (4 if variant == "partial" else 2) if rotates else 1
    if rotary_dim % step or (head_dim is not None and rotary_dim > head_dim):
        need = {4: "a multiple of 4 (variant='partial': R/4 frequencies)", 2: "even", 1: None}[step]
        bound = None if head_dim is None else f"at most head_dim={head_dim}"
        rule = " and ".join(r for r in (need, bound) if r)
        raise RopeArgumentError("rotary_dim", f"rotary_dim must be {rule}, got {rotary_dim}")


def check_scaling(scaling: object) -> dict:
    """The normalized scaling (see :mod:`rope.scaling`), or a RopeArgumentError naming the parameter.

    A mapping that sets parameters but no ``type`` (or ``type: null``) is refused as a missing
    ``scaling.type``: read as ``type=none`` it would be refused for having parameters, naming them, not the
    forgotten key. (Every parameter null, a config listing them all, still means no scaling.)
    """
    if isinstance(scaling, Mapping) and scaling.get("type") is None:
        given = [str(key) for key, value in scaling.items() if key != "type" and value is not None]
        if given:
            raise RopeArgumentError("scaling.type", f"scaling.type is missing (scaling sets {', '.join(given)}): "
                                                    f"give one of {SCALING_TYPES}")
    try:
        return normalize_scaling(scaling)
    except ScalingError as exc:
        raise RopeArgumentError(exc.argument, str(exc)) from None


def _named(name: str) -> str:
    """The implementation a message is about, by its registered name (``liger``), as a caller of this package
    names it in ``rope.build``; ``this implementation`` for a check called without one. Why a bare name: a
    message here is read by any caller, so it speaks the registry's words, not one program's command line."""
    return name or "this implementation"


def check_layout(layout: object, supported: tuple[str, ...] = LAYOUTS, name: str = "") -> None:
    """Refuse a layout that is unknown, or that the implementation ``name`` does not support."""
    if layout not in LAYOUTS:
        raise RopeArgumentError("layout", f"layout must be one of {LAYOUTS}, got {layout!r}")
    if layout not in supported:
        raise RopeArgumentError("layout", f"{_named(name)} supports layout {' / '.join(map(repr, supported))} "
                                          f"only, got {layout!r}")


def check_base(base: object) -> None:
    """Refuse a frequency base that is not a finite positive number (the table would be NaN or inf)."""
    if not isinstance(base, numbers.Real) or isinstance(base, bool) or not (math.isfinite(base) and base > 0):
        raise RopeArgumentError("base", f"base must be a finite number > 0, got {base!r}")


def check_common_args(head_dim: object, max_seq_len: object, base: object, variant: object,
                      layout: object = "half", rotary_dim: object = None,
                      layouts: tuple[str, ...] = LAYOUTS, name: str = "", rotary_dim_ok: bool = True,
                      scaling: object = None, rotates: bool = True) -> None:
    """The checks every implementation shares: head_dim and rotary_dim for the variant (any size for an
    implementation that ``rotates`` nothing), max_seq_len, base, and the layout and rotary_dim among what the
    implementation supports."""
    check_head_dim(head_dim, variant, rotary_dim, rotates)
    kind = check_scaling(scaling)["type"]
    if rotary_dim is not None and rotary_dim != head_dim and not rotary_dim_ok:
        raise RopeArgumentError("rotary_dim", f"{_named(name)} rotates the whole head only (rotary_dim None or "
                                              f"{head_dim}), got rotary_dim={rotary_dim}")
    _positive_int("max_seq_len", max_seq_len)
    check_base(base)  # before the scaling's own bound: a base of -1 is no base at all, whatever the scaling
    if kind in ("ntk", "dynamic_ntk", "yarn") and base <= 1:
        raise RopeArgumentError("base", f"base must be > 1 for scaling.type={kind} (it takes log(base)), got {base!r}")
    check_layout(layout, layouts, name)
