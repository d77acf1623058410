"""Name -> RoPE implementation registry.

Adding an implementation is one file with one ``@register("name")`` decorator; the training
application only ever goes through :func:`build`, so it never imports a kernel directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from rope.base import RotaryEmbedding

_REGISTRY: dict[str, type[RotaryEmbedding]] = {}

T = TypeVar("T", bound=type[RotaryEmbedding])


def register(name: str) -> Callable[[T], T]:
    """Class decorator: make ``cls`` buildable as ``rope.build(name, ...)``."""

    def wrap(cls: T) -> T:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"RoPE implementation {name!r} is already registered by {_REGISTRY[name].__name__}")
        if not (isinstance(cls, type) and issubclass(cls, RotaryEmbedding)):
            raise TypeError(f"@register({name!r}) expects a RotaryEmbedding subclass, got {cls!r}")
        _REGISTRY[name] = cls
        cls.registry_name = name
        return cls

    return wrap


def available() -> list[str]:
    """Sorted names of every registered implementation."""
    return sorted(_REGISTRY)


def get(name: str) -> type[RotaryEmbedding]:
    """The class registered under ``name``; unknown names list the valid ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown RoPE implementation {name!r}; available: {', '.join(available())}") from None


def build(name: str, head_dim: int, max_seq_len: int, base: float = 10000.0, **options) -> RotaryEmbedding:
    """Instantiate the implementation ``name`` for heads of size ``head_dim``.

    ``options`` are implementation specific (``variant``, ``compute_dtype``, ...); unknown ones are
    rejected by the implementation's constructor with a TypeError naming them.
    """
    return get(name)(head_dim=head_dim, max_seq_len=max_seq_len, base=base, **options)
