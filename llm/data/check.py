"""The one check of the ``data`` config group before any work: the source's name, its keys and values, the tokenizer.

Why its own module: it needs the sources' registry, and the sources read their settings through
:mod:`llm.data.config`'s readers; here both are imported, so neither imports the other back.
"""

from __future__ import annotations

from collections.abc import Mapping

from llm.data.config import DataError, num_threads, packing, setting
from llm.data.sources import SOURCES
from llm.data.tokenizer import check_tokenizer_name


def check_data_config(data_cfg: Mapping, tokenizer_name: str) -> None:
    """Refuse a data config that cannot work, before any work: raises DataError (a ValueError) with one line
    naming the key. Cheap: reads no file contents and needs no network.

    Checks the source name against the registry, that every key set is one the source reads (so a typo such as
    ``+data.max_doc=5`` is refused, not ignored), each value the source reads, and the tokenizer name.
    """
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
