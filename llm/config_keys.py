"""Configs as dotted keys: flatten a nested config and ask whether a key falls under a prefix.

Why shared: resume (which keys a resume may change) and the run report (which keys two runs
differ in) both compare configs key by key; one spelling of "key" keeps their answers consistent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as ``{"a.b": value}``; an empty mapping stays a value, so its presence still compares."""
    if isinstance(d, Mapping):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}."))
        if not d and prefix:
            out[prefix[:-1]] = {}
        return out
    return {prefix[:-1]: d}


def covered(key: str, prefixes: Iterable[str]) -> bool:
    """True when ``key`` is one of ``prefixes`` or lies below one (``train`` covers ``train.max_steps``)."""
    return any(key == p or key.startswith(p + ".") for p in prefixes)
