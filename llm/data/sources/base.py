"""What a data source gives the cache: a cheap fingerprint of its inputs and a loader of split documents.

Why a fingerprint without reading file contents: ``prepare_data`` must decide "is the cache still this data?"
in milliseconds on every run. Paths, sizes, mtimes and ctimes (plus every setting that changes the tokens) are
enough to notice an edit; reading the contents is left to the build. The ctime because the mtime can be set: a file
replaced by one of its size with its mtime kept (``cp -p``, ``rsync -t``, ``tar x``, an ``os.utime``) kept the old
fingerprint, and the stale cache was used; the kernel sets the ctime on every write and rename, and no tool sets it
back (a ``chmod`` changes it too: one needless rebuild, never a stale cache).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Bump when the tokenized layout or the split rule changes: every fingerprint, hence every cache, changes.
# 2: the val split's cap on one document's share, shard hashes and split composition in meta.json.
FORMAT_VERSION = 2

#: scratch dir -> {"train": [entry, ...], "val": [...]}, each entry a Dataset with a "text" column or, where the
#: source split by document identity, a split Group (Dataset, one identity per row). A loader may write files to
#: keep beside the tokens into ``scratch / KEEP_DIR`` (a corpus manifest): the cache moves them into its directory
#: before meta.json.
Loader = Callable[[Path], dict[str, list]]
KEEP_DIR = "keep"


@dataclass(frozen=True)
class Source:
    """One configured source, ready to be fingerprinted and (only on a cache miss) loaded."""

    name: str
    fingerprint: str
    info: dict  # recorded in meta.json after loading: a loader may add what only reading reveals (a corpus hash)
    load: Loader


@dataclass(frozen=True)
class SourceKind:
    """A registry entry: the settings a source reads, its cheap config check, and how to build its Source."""

    keys: tuple[str, ...]  # data.* keys read besides name and num_threads; others are refused
    check: Callable[[Mapping], None]  # raises DataError naming the key; reads no file contents
    build: Callable[[Mapping], Source]


def fingerprint_hash(**fields: Any) -> Any:
    """A sha256 object seeded with the format version and ``fields`` (the settings that change the tokens)."""
    blob = json.dumps({"format": FORMAT_VERSION, **fields}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode())


def add_file_stats(h: Any, root: Path, rels: list[str]) -> None:
    """Feed each file's relative path, size, mtime and ctime to ``h``: an edit changes the fingerprint, unread."""
    for rel in rels:
        st = os.stat(root / rel)
        h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode("utf-8", "surrogateescape"))
