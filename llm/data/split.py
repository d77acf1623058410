"""The train/val split, by document identity.

Why by identity: a document goes to val when a stable hash of its identity (a file's relative path, a row's
id, else its text) falls below ``data.val_fraction``. So membership does not depend on file order, on the
``max_files``/``max_docs`` caps, or on the machine: a bigger corpus keeps the val documents of a smaller one,
and no document is ever in both splits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from llm.data.config import DataError

SPLITS = ("train", "val")

#: (datasets.Dataset with a "text" column, one key per row or None). A key of None -- for the whole group or
#: one row -- means "identify the row by the hash of its text".
Group = tuple[Any, Sequence[str | None] | None]


def val_score(key: str) -> float:
    """A stable number in [0, 1) from a document's identity."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def cap_docs(groups: list[Group], max_docs: int) -> list[Group]:
    """The first ``max_docs`` rows of ``groups``, in order (a cap for quick runs)."""
    out, left = [], max_docs
    for ds, keys in groups:
        if left <= 0:
            break
        if len(ds) > left:
            ds, keys = ds.select(range(left)), (keys[:left] if keys is not None else None)
        out.append((ds, keys))
        left -= len(ds)
    return out


def _scored_rows(groups: list[Group]) -> list[tuple[float, int, int]]:
    """(val score, group index, row index) of every non-empty document."""
    rows = []
    for g, (ds, keys) in enumerate(groups):
        i = 0
        for batch in ds.select_columns(["text"]).iter(batch_size=1024):
            for text in batch["text"]:
                if text:
                    key = keys[i] if keys is not None else None
                    if key is None:
                        key = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
                    rows.append((val_score(key), g, i))
                i += 1
    return rows


def split_documents(groups: list[Group], val_fraction: float, what: str) -> dict[str, list]:
    """Split ``groups`` into {"train": [Dataset, ...], "val": [...]} by document identity; empty documents dropped.

    A document is in val when ``val_score(key) < val_fraction``; if that leaves val (or train) empty, the document
    with the lowest (highest) score moves over, so both splits always hold at least one document. ``what`` names
    the source in the error raised when there are fewer than two documents.
    """
    rows = _scored_rows(groups)
    if len(rows) < 2:
        raise DataError(f"{what} has {len(rows)} non-empty document(s); a train/val split by document needs >= 2")
    is_val = [score < val_fraction for score, _, _ in rows]
    if not any(is_val):
        is_val[min(range(len(rows)), key=lambda j: rows[j][0])] = True
    if all(is_val):
        is_val[max(range(len(rows)), key=lambda j: rows[j][0])] = False
    out: dict[str, list] = {s: [] for s in SPLITS}
    for g, (ds, _) in enumerate(groups):
        for split, want in (("train", False), ("val", True)):
            idx = [i for (_, gg, i), v in zip(rows, is_val, strict=True) if gg == g and v == want]
            if idx:
                out[split].append(ds.select(idx))
    return out
