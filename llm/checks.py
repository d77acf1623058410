"""The check that a setting is a count (a positive integer), and how a refusal shows the value typed.

Why one module: the readers of ``train.*``, ``model.*``, ``data.*``, ``sweep.*`` and of generate's and
eval_lengths' settings all refuse a count the same way, and each copy of that check had to remember that a bool is
an int to Python. It imports nothing but :mod:`llm.errors`, so the data and report layers can use it without
loading torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeGuard, overload

from llm.errors import ConfigError


def as_typed(value: object) -> str:
    """``value`` as the command line writes it: a string quoted (``train.max_steps='5'``: the quotes made it no
    number, which its bare ``5`` would hide), None as ``null``, anything else as ``str`` shows it."""
    return "null" if value is None else repr(value) if isinstance(value, str) else str(value)


def is_positive_int(value: object, minimum: int = 1) -> TypeGuard[int]:
    """Whether ``value`` is an int of at least ``minimum`` (``minimum=0``: zero allowed). A bool is never one:
    Python counts ``True`` as 1, but ``train.max_steps=true`` is a mistake, not a step count."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


@overload
def positive_int(value: object, key: str, *, minimum: int = 1, allow_none: Literal[False] = False,
                 error: type[Exception] = ConfigError, must_be: str | None = None,
                 shown: Callable[[object], str] = repr) -> int: ...


@overload
def positive_int(value: object, key: str, *, minimum: int = 1, allow_none: bool,
                 error: type[Exception] = ConfigError, must_be: str | None = None,
                 shown: Callable[[object], str] = repr) -> int | None: ...


def positive_int(value: object, key: str, *, minimum: int = 1, allow_none: bool = False,
                 error: type[Exception] = ConfigError, must_be: str | None = None,
                 shown: Callable[[object], str] = repr) -> int | None:
    """``value`` when it is an int of at least ``minimum`` (:func:`is_positive_int`), or None when ``allow_none``;
    anything else raises ``error`` with the one line ``<key>=<shown(value)> must be <must_be>``.

    Why the message is built here from parts: each command names its keys its own way (``train.max_steps``,
    ``data.max_docs``, ``max_new_tokens``) and shows values as its users write them (``repr``, ``str`` or
    :func:`as_typed`), and tests hold those lines fixed. ``must_be`` defaults to ``a positive integer`` (``an integer
    >= <minimum>`` for another minimum), followed by `` or null`` when None is allowed; a key whose line says more
    (what null means, what the value counts) passes its own."""
    if (value is None and allow_none) or is_positive_int(value, minimum):
        return value
    if must_be is None:
        must_be = ("a positive integer" if minimum == 1 else f"an integer >= {minimum}") + (
            " or null" if allow_none else "")
    raise error(f"{key}={shown(value)} must be {must_be}")
