"""The ``data`` config group (``conf/data/<name>.yaml``): readers of its keys and the one check before any work.

Why one module: every mistake a user can make in ``data.*`` must be refused before any work, in one line that
names the key and what is allowed. The sources read their settings through the same readers, so the check run
up front (``check_data_config``, called by ``llm.config_check``) and the values later used never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm.data.tokenizer import check_tokenizer_name
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
    value = setting(cfg, key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise DataError(f"data.{key}={value} must be a positive integer or null")
    return int(value)


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


def num_threads(cfg: Mapping) -> int | None:
    """``data.num_threads``: tokenizer threads, None = all CPU cores."""
    return positive_int_or_none(cfg, "num_threads")


def packing(cfg: Mapping) -> str:
    """``data.packing`` (default ``random``): how training windows are laid out, one of :data:`PACKINGS`."""
    value = setting(cfg, "packing", "random")
    if value not in PACKINGS:
        raise DataError(f"data.packing={value} must be one of {', '.join(PACKINGS)}")
    return str(value)


def check_data_config(data_cfg: Mapping, tokenizer_name: str) -> None:
    """Refuse a data config that cannot work, before any work: raises DataError (a ValueError) with one line
    naming the key. Cheap: reads no file contents and needs no network.

    Checks the source name against the registry, that every key set is one the source reads (so a typo such as
    ``+data.max_doc=5`` is refused, not ignored), each value the source reads, and the tokenizer name.
    """
    # Imported here: the sources read their settings through this module's readers.
    from llm.data.sources import SOURCES

    name = setting(data_cfg, "name")
    kind = SOURCES.get(name) if isinstance(name, str) else None
    if kind is None:
        raise DataError(f"data.name={name} is not a known data source; choices: {', '.join(SOURCES)}")
    allowed = ("name", "num_threads", *kind.keys, "packing")
    for key in data_cfg:
        if key not in allowed:
            raise DataError(f"data.{key} is not a setting of data={name}; its settings: {', '.join(allowed[1:])}")
    num_threads(data_cfg)
    packing(data_cfg)
    kind.check(data_cfg)
    check_tokenizer_name(tokenizer_name)
