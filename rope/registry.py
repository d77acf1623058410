"""Name -> RoPE implementation registry, and the discovery that fills it.

Adding an implementation is one file under ``rope/`` with one ``@register("name")`` decorator:
importing ``rope`` imports every module of the package (:func:`discover`), so there is no list to
edit; a package of its own declares its module under the ``ropelab.rope`` entry points
(:func:`load_plugins`). The training application only ever goes through :func:`build` / :func:`check_args`, so it
never imports a kernel directly.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import warnings
from collections.abc import Callable, Iterable
from typing import TypeVar

from rope.base import RotaryEmbedding
from rope.checks import RopeArgumentError, UnknownRopeError

_REGISTRY: dict[str, type[RotaryEmbedding]] = {}
#: Plugin name -> why it is left out (it failed to import, or registered nothing): :func:`load_plugins` fills it.
_PLUGIN_FAILURES: dict[str, str] = {}

T = TypeVar("T", bound=type[RotaryEmbedding])


def register(name: str) -> Callable[[T], T]:
    """Class decorator: make ``cls`` buildable as ``rope.build(name, ...)``.

    ``name`` must be a non-empty str, refused at once otherwise (as :func:`check_args` refuses it): a name of
    another type would break every later ``available()`` (it sorts the names) and every unknown-name error (which
    lists them), far from the mistake. The class is checked before the name is looked up, so a non-class given a
    taken name is told what it is, not that the name is taken. A class that does not define ``rotate`` is refused
    too: it would build, and fail only at its first call.
    """
    if not isinstance(name, str) or not name:
        raise RopeArgumentError("name", f"@register(name) needs a non-empty str name, got {name!r}")

    def wrap(cls: T) -> T:
        if not (isinstance(cls, type) and issubclass(cls, RotaryEmbedding)):
            raise TypeError(f"@register({name!r}) expects a RotaryEmbedding subclass, got {cls!r}")
        if cls.rotate is RotaryEmbedding.rotate:
            raise TypeError(f"class {cls.__name__} registered as {name!r} does not define rotate(q, k, positions)")
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"RoPE implementation {name!r} is already registered by {_REGISTRY[name].__name__}")
        _REGISTRY[name] = cls
        cls.registry_name = name
        return cls

    return wrap


def discover(package: str, path: Iterable[str]) -> list[str]:
    """Import every module and subpackage directly in ``package`` whose name has no leading underscore.

    Why: an implementation registers itself when its module is imported, so importing them all is
    what makes "one file with ``@register``" enough. The shared modules (``base``, ``checks``,
    ``registry``, ``scaling``) are imported too, harmlessly; a module that must not be imported eagerly
    (one that needs an optional dependency, such as ``_cute_kernels``, or that only tests and benchmarks
    use, such as ``_numerics``) starts with an underscore and is imported by what uses it. An
    implementation module that fails to import is an error, not a silently missing entry. Returns the
    module names imported, in order.
    """
    names = [m.name for m in pkgutil.iter_modules(list(path)) if not m.name.startswith("_")]
    for name in names:
        importlib.import_module(f"{package}.{name}")
    return names


#: The entry-point group through which an installed package adds implementations, in its pyproject.toml:
#: ``[project.entry-points."ropelab.rope"]`` ``my_rope = "my_package.my_rope"`` (the module uses ``@register``).
PLUGIN_GROUP = "ropelab.rope"


class RopePluginWarning(UserWarning):
    """An installed RoPE plugin is left out: it failed to import, or registered no implementation.

    A warning, not an error: one broken package must not stop ``import rope``, hence every command, even one that
    never uses it."""


def load_plugins(group: str = PLUGIN_GROUP) -> list[str]:
    """Import what installed packages declare under the ``group`` entry points; returns the names imported.

    Why: an implementation kept in a package of its own (not a file in this checkout's ``rope/``) registers as one
    here does, when its module is imported; the entry point is how ``import rope`` finds it, as pytest and Hydra
    find their plugins. A plugin that fails to import is left out, not raised: it warns once in one line
    (:class:`RopePluginWarning`) naming it, its module, its package and the error; asking for its name
    (:func:`get`, :func:`build`, :func:`check_args`) says why it is missing; :func:`plugin_failures` lists them.
    What it registered before failing is removed, so nothing half-imported stays buildable. A plugin that
    imports but registers nothing (a forgotten ``@register``) warns likewise."""
    loaded = []
    for ep in sorted(importlib.metadata.entry_points(group=group), key=lambda e: e.name):
        dist = f" (package {ep.dist.name})" if getattr(ep, "dist", None) is not None else ""
        plugin = f"RoPE plugin {ep.name!r} = {ep.value!r}{dist}"
        before = dict(_REGISTRY)
        try:
            ep.load()
        except Exception as e:
            for name in set(_REGISTRY) - set(before):
                del _REGISTRY[name]
            detail = " ".join(f"{type(e).__name__}: {e}".split())
            _plugin_failed(group, ep.name, f"{plugin} failed to import: {detail}")
            continue
        _PLUGIN_FAILURES.pop(ep.name, None)
        loaded.append(ep.name)
        module = ep.module
        if _REGISTRY.keys() == before.keys() and not any(
                c.__module__ == module or c.__module__.startswith(module + ".") for c in _REGISTRY.values()):
            _plugin_failed(group, ep.name, f"{plugin} registered no RoPE implementation (no @register in its module)")
    return loaded


def _plugin_failed(group: str, name: str, reason: str) -> None:
    """Record why the plugin ``name`` of ``group`` is left out, and say so in one warning line.

    Why ``warn_explicit`` with a location of no source file: the default format prints the source line after the
    message, here a line of this file that tells the reader nothing; with none, the warning is one line."""
    _PLUGIN_FAILURES[name] = reason
    warnings.warn_explicit(f"{reason}; left out; fix or uninstall the package", RopePluginWarning,
                           filename=f"<{group} plugin {name}>", lineno=0, module=__name__)


def plugin_failures() -> dict[str, str]:
    """Installed plugins left out by :func:`load_plugins`: name -> one-line reason (it failed to import, and why;
    or it registered nothing). Empty when every plugin registered its implementations."""
    return dict(_PLUGIN_FAILURES)


def available() -> list[str]:
    """Sorted names of every registered implementation."""
    return sorted(_REGISTRY)


def get(name: str) -> type[RotaryEmbedding]:
    """The class registered under ``name``; an unknown name raises :class:`~rope.checks.UnknownRopeError`
    (a :class:`RopeArgumentError` for argument ``"name"``, and a KeyError) listing the valid ones."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):  # TypeError: an unhashable name
        failed = _PLUGIN_FAILURES.get(name) if isinstance(name, str) else None
        why = f": the {failed}" if failed else ""
        raise UnknownRopeError(
            "name", f"unknown RoPE implementation {name!r}{why}; available: {', '.join(available())}"
        ) from None


def check_args(name: str, head_dim: int, max_seq_len: int, base: float = 10000.0, **options: object) -> None:
    """Validate everything :func:`build` would, without allocating the cos/sin tables.

    Raises :class:`RopeArgumentError` whose ``argument`` names the culprit: ``"name"`` (the message
    lists ``available()``), ``"head_dim"``, ``"max_seq_len"``, ``"base"``, ``"variant"``, or an
    option (unknown, or a bad value such as ``compute_dtype``). Whether the implementation can run
    on a device is a separate question: ``get(name).unavailable_reason(device)``.
    """
    if not isinstance(name, str):
        raise RopeArgumentError("name", f"the RoPE name must be a string, got {name!r}")
    get(name).check_args(head_dim, max_seq_len, base, **options)


def build(name: str, head_dim: int, max_seq_len: int, base: float = 10000.0, **options: object) -> RotaryEmbedding:
    """Instantiate the implementation ``name`` for heads of size ``head_dim``.

    ``options`` are implementation specific (``variant``, ``compute_dtype``, ...). Every argument is
    checked by :func:`check_args` first, so a bad one raises the same :class:`RopeArgumentError`. A constructor
    that skipped ``RotaryEmbedding.__init__`` is refused here, in one line, rather than at the module's first call.
    """
    check_args(name, head_dim, max_seq_len, base, **options)
    cls = get(name)
    rotary = cls(head_dim=head_dim, max_seq_len=max_seq_len, base=base, **options)
    # the base __init__ makes the tables and sets _validated, so without both it never ran
    if "cos" not in (vars(rotary).get("_buffers") or {}) or "_validated" not in vars(rotary):
        raise TypeError(f"{cls.__name__}.__init__ did not call RotaryEmbedding.__init__ "
                        "(super().__init__(head_dim, max_seq_len, base, ...))")
    return rotary
