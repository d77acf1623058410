"""The ``data`` config group (``conf/data/<name>.yaml``): readers of its keys.

Why one module: every mistake a user can make in ``data.*`` must be refused before any work, in one line that
names the key and what is allowed. The sources read their settings through these readers, and so does the check
run up front (:func:`llm.data.check.check_data_config`), so the check and the values later used never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm.checks import positive_int
from llm.errors import ConfigError

#: ``data.packing``: random slices of the token stream (positions 0..T-1), or the same slices laid out by document
#: (positions restart at each document, attention stays inside it: :mod:`llm.data.packing`).
PACKINGS = ("random", "documents")


class DataError(ConfigError):
    """A data setting, or the data it points at, cannot work. The message is one line naming the key
    (``data.path=...: <file> is not UTF-8 text ...``), so a user can fix it without reading a traceback.

    A ConfigError, hence a ValueError and a ``llm.errors.UserError``: the CLI prints it as that one line,
    whether it comes from the check before any work or from reading the data during a cache build."""


def setting(cfg: Mapping, key: str, default: Any = None) -> Any:
    """``cfg[key]`` for a dict or an OmegaConf DictConfig; missing, None and '???' read as ``default``."""
    try:
        value = cfg.get(key, default)
    except Exception:  # omegaconf MissingMandatoryValue for '???'
        return default
    if value is None or value == "???":
        return default
    return value


def positive_int_or_none(cfg: Mapping, key: str) -> int | None:
    """``data.<key>`` as a positive int, or None when unset; anything else is a DataError naming the key."""
    return positive_int(setting(cfg, key), f"data.{key}", allow_none=True, error=DataError, shown=str)


def val_fraction(cfg: Mapping) -> float:
    """``data.val_fraction`` (default 0.05): the share of documents held out, strictly between 0 and 1."""
    value = setting(cfg, "val_fraction", 0.05)
    try:
        fraction = float(value) if not isinstance(value, bool) else -1.0
    except (TypeError, ValueError):
        fraction = -1.0
    if not 0.0 < fraction < 1.0:
        raise DataError(f"data.val_fraction={value} must be a number in (0, 1)")
    return fraction


def nonempty_str(cfg: Mapping, key: str, default: str | None, what: str = "column name") -> str | None:
    """``data.<key>`` as a non-empty string (``default`` when unset); ``what`` says what it names, for the error."""
    value = setting(cfg, key, default)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise DataError(f"data.{key}={value} must be a non-empty {what}")
    return value


def text_field(cfg: Mapping) -> str:
    """``data.text_field`` (default ``text``): the column holding each document's text."""
    return str(nonempty_str(cfg, "text_field", "text"))


def hub_revision(cfg: Mapping) -> str | None:
    """``data.revision`` of a hub dataset (``data=tinystories``, ``data=hf_dataset``): a commit, branch or tag as a
    string (a commit Hydra read as a number kept as its digits), or None for the hub's main branch."""
    value = setting(cfg, "revision")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value) == "":
        raise DataError(f"data.revision={value} must be a hub commit, branch or tag, or null")
    return str(value)


def num_threads(cfg: Mapping) -> int | None:
    """``data.num_threads``: tokenizer threads, None = all CPU cores."""
    return positive_int_or_none(cfg, "num_threads")


def packing(cfg: Mapping) -> str:
    """``data.packing`` (default ``random``): how training windows are laid out, one of :data:`PACKINGS`."""
    value = setting(cfg, "packing", "random")
    if value not in PACKINGS:
        raise DataError(f"data.packing={value} must be one of {', '.join(PACKINGS)}")
    return str(value)
