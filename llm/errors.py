"""Errors a user can fix: the entry points print them as one line, without a traceback.

Why one base class: whatever raises them (config checks, resume, the run dir, a full disk), the CLI
catches ``UserError`` once and prints ``str(exc)``; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

E = TypeVar("E", bound=BaseException)


def one_line(exc: BaseException) -> str:
    """The first line of an error's message (its type when it has none): what a one-line refusal quotes of a
    library's error, whose later lines (advice, a traceback of its own) say nothing the refusal does not."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc``, then its cause or context, and theirs, each once: libraries re-raise a user's interrupt, a full disk
    or a resolver's own error wrapped in exceptions of their own."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def in_chain(exc: BaseException | None, kind: type[E]) -> E | None:
    """The first exception of ``kind`` in ``exc``'s chain (:func:`exception_chain`), or None."""
    return next((e for e in exception_chain(exc) if isinstance(e, kind)), None)


class UserError(Exception):
    """A problem with the user's input or machine, described in one line that names the key or file."""


class ConfigError(UserError, ValueError):
    """A configuration value that cannot work; the message names the key and what is allowed."""


class ResumeError(UserError):
    """A run cannot be resumed as asked (no checkpoint, every checkpoint damaged, a changed config)."""


class CheckpointNotFoundError(ResumeError, FileNotFoundError):
    """``train.resume=<path>`` names no checkpoint file."""


class RunDirInUseError(UserError):
    """Another run owns the run dir (its lock is held, or it already holds a finished run)."""
