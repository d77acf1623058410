"""Data sources (``data.name``) and their one registry, ``SOURCES``.

* ``pystdlib`` (default, offline): the ``*.py`` files of the running interpreter's standard library.
* ``tinystories``: the Hugging Face hub dataset ``roneneldan/TinyStories`` (its train and validation splits).
* ``text_files``: ``data.path``, a file or a directory (searched recursively) of ``.txt`` (one document per
  file), ``.jsonl`` or ``.parquet`` (one document per row, text in ``data.text_field``).
* ``code_corpus`` (offline): the ``*.py`` files of the installed packages, pinned by the manifest each build
  writes (``data.manifest=`` rebuilds that corpus where its package versions are installed).
* ``hf_dataset``: any Hugging Face dataset (``data.hf_path``, a hub name at ``data.revision``, or a local
  dir or file), downloaded or streamed.

To add a source: write a module here with ``KEYS``, ``check(cfg)`` and ``build(cfg) -> Source`` (see
``base``), and add one line to ``SOURCES``. The allowed ``data.name`` values, their order in error messages and
the dispatch all come from this dict.
"""

from __future__ import annotations

from collections.abc import Mapping

from llm.data.config import setting
from llm.data.sources import code_corpus, hf_dataset, pystdlib, text_files, tinystories
from llm.data.sources.base import FORMAT_VERSION, KEEP_DIR, Source, SourceKind

SOURCES: dict[str, SourceKind] = {
    "pystdlib": pystdlib.KIND,
    "tinystories": tinystories.KIND,
    "text_files": text_files.KIND,
    "code_corpus": code_corpus.KIND,
    "hf_dataset": hf_dataset.KIND,
}


def make_source(data_cfg: Mapping) -> Source:
    """The Source ``data_cfg`` configures: fingerprinted, not loaded. Run ``check_data_config`` first."""
    return SOURCES[setting(data_cfg, "name")].build(data_cfg)


__all__ = ["FORMAT_VERSION", "KEEP_DIR", "SOURCES", "Source", "SourceKind", "make_source"]
