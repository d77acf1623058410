"""``data=pystdlib`` (the offline default): the ``*.py`` files of the running interpreter's standard library.

Why this source: it is on every machine that runs Python, so a first run needs no download and no data
preparation by the user. site-packages/dist-packages are skipped: they differ between machines.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from llm.data.config import DataError, positive_int_or_none, val_fraction
from llm.data.sources.base import Source, SourceKind, add_file_stats, fingerprint_hash
from llm.data.split import DISTINCT_TEXTS_RULE, drop_repeated, split_documents

KEYS = ("val_fraction", "max_files")


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path, max_files: int | None) -> list[str]:
    """Sorted relative posix paths of the stdlib's *.py files, without site-packages/dist-packages."""
    skip = {"site-packages", "dist-packages", "__pycache__"}
    rels = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip]
        rel_dir = Path(dirpath).relative_to(root)
        rels.extend((rel_dir / f).as_posix() for f in filenames if f.endswith(".py"))
    rels.sort()
    return rels[:max_files] if max_files else rels


def check(cfg: Mapping) -> None:
    val_fraction(cfg)
    positive_int_or_none(cfg, "max_files")


def build(cfg: Mapping) -> Source:
    root = stdlib_root()
    max_files = positive_int_or_none(cfg, "max_files")
    fraction = val_fraction(cfg)
    rels = stdlib_files(root, max_files)
    if not rels:
        raise DataError(f"data=pystdlib found no *.py files under the interpreter's stdlib {root}")
    h = fingerprint_hash(source="pystdlib", python=sys.version, impl=sys.implementation.name,
                         val_fraction=fraction, max_files=max_files, distinct_texts=DISTINCT_TEXTS_RULE)
    add_file_stats(h, root, rels)

    def load(scratch: Path) -> dict[str, list]:
        import datasets

        texts, paths = [], []
        for rel in rels:
            # The stdlib is not user data: a rare non-UTF-8 test file is kept, its odd bytes replaced.
            text = (root / rel).read_bytes().decode("utf-8", errors="replace")
            if text:
                texts.append(text)
                paths.append(rel)
        # The stdlib holds identical files under several paths (test packages' __main__.py): the split goes by
        # path, so each text is kept once, or a copy would sit on each side of it.
        groups, _ = drop_repeated([(datasets.Dataset.from_dict({"text": texts}), paths)])
        return split_documents(groups, fraction, "data=pystdlib (raise data.max_files)")

    info = {"root": str(root), "n_files": len(rels), "python": sys.version.split()[0], "max_files": max_files,
            "val_fraction": fraction}
    return Source("pystdlib", h.hexdigest(), info, load)


KIND = SourceKind(keys=KEYS, check=check, build=build)
