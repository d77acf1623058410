"""The train/val split, by document identity, and the cap on any one document's share of val.

Why by identity: a document goes to val when a stable hash of its identity (a file's relative path, a row's
id, else its text) falls below ``data.val_fraction``. So membership does not depend on file order, on the
``max_files``/``max_docs`` caps, or on the machine: before the cap below, a bigger corpus keeps the val documents
of a smaller one (the cap may then move one to train), and no document is ever in both splits (a text repeated
under another identity is, unless the source reads each text once: :func:`drop_repeated`).

Why a cap: a val split is only a sample of the corpus when no document dominates it. The standard library's
split by path put one English-prose file (``pydoc_data/topics.py``) at more than half of its val tokens, so
the val loss measured prose in a code corpus. :func:`cap_val_documents` moves any document above
:data:`VAL_DOC_CAP` of the val tokens to train (largest first; moving never puts a document in both splits),
as long as val keeps the :data:`MIN_VAL_DOCS` documents the cap needs. Where no number of moves meets the cap
(too few documents, or a long tail of small ones: each move shrinks the total the next document is measured
against), it makes the moves that leave the smallest largest share, and the composition says the cap is not met.
The cache applies it once the documents are tokenized (the cap is on tokens) and records each split's composition.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llm.data.config import DataError
from llm.data.encode import utf8_texts

SPLITS = ("train", "val")
#: The largest share of a val split's tokens one document may hold.
VAL_DOC_CAP = 0.1
#: The fewest documents with which every one can be at or under the cap.
MIN_VAL_DOCS = math.ceil(1 / VAL_DOC_CAP)

#: The version of the rule by which :func:`drop_repeated` tells two texts to be one: each source that reads each text
#: once records it in its fingerprint (``distinct_texts``), so a cache built under an older rule is built again.
#: 1: the exact text; 2: line endings aside (CRLF, CR and LF are one), see :func:`text_key`.
DISTINCT_TEXTS_RULE = 2

_CR = re.compile(rb"\r")
_KEY_SLICE = 1 << 20  # bytes of a text with CRs normalised at a time to hash it

#: (datasets.Dataset with a "text" column, one key per row or None). A key of None -- for the whole group or
#: one row -- means "identify the row by the hash of its text".
Group = tuple[Any, Sequence[str | None] | None]


def id_key(value: object, id_field: str, at: str) -> str:
    """The split identity of a row whose ``data.id_field`` holds ``value`` (``at``: where the row is, for the
    refusal). A null id is refused: rows of one id stay on one side, so every null-id row would land together."""
    if value is None:
        raise DataError(f"data.id_field={id_field} is null in {at}: every row needs an id (or leave data.id_field "
                        "unset to split by text)")
    return f"id:{value}"


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


def drop_repeated(groups: list[Group]) -> tuple[list[Group], int]:
    """``groups`` with each document whose text repeats an earlier one's (:func:`text_key`: line endings aside) left
    out, and how many were.

    Why: the split goes by identity (a path, an id), so two copies of one text (a backup folder inside a corpus)
    would land on both sides of it, and the val loss would be measured partly on train text."""
    seen: set[bytes] = set()
    out, dropped = [], 0
    for ds, keys in groups:
        kept = []
        for i, raw in enumerate(utf8_texts(ds)):
            digest = utf8_key(raw)
            if len(raw) and digest in seen:
                dropped += 1
            else:
                seen.add(digest)
                kept.append(i)
        if len(kept) < len(ds):
            ds, keys = ds.select(kept), (None if keys is None else [keys[j] for j in kept])
        out.append((ds, keys))
    return out, dropped


def shared_texts(train: list[Group], val: list[Group]) -> int:
    """How many of ``val``'s non-empty documents are word for word (line endings aside) a document of ``train``: a
    dataset's own val split is taken as it is, so a copy in both is only said (the val loss is then partly measured
    on train text)."""
    seen = {utf8_key(t) for ds, _ in train for t in utf8_texts(ds)}
    return sum(1 for ds, _ in val for t in utf8_texts(ds) if len(t) and utf8_key(t) in seen)


def text_key(text: str | None) -> bytes:
    """What two documents must share to be one text (:data:`DISTINCT_TEXTS_RULE`): the sha256 of the text with its
    line endings made LF, for this key only (the document keeps its own).

    Why line endings aside: one file checked out on Windows and on Linux differs in them alone, and as two documents
    the copies could land one in train and one in val."""
    return utf8_key((text or "").encode("utf-8", "surrogatepass"))


def utf8_key(raw: bytes | memoryview) -> bytes:
    """:func:`text_key` of the text whose UTF-8 is ``raw``: hashed in place when it holds no CR, else a slice at a
    time with its line endings made LF (CR and LF are never part of a longer UTF-8 sequence, so replacing them in the
    bytes is replacing them in the text), never a copy of a whole long text."""
    view = memoryview(raw)  # an Arrow buffer's view reads bytes as signed: CR is 13 either way
    sha = hashlib.sha256()
    if _CR.search(view) is None:
        sha.update(view)
        return sha.digest()
    start = 0
    while start < len(view):
        end = min(start + _KEY_SLICE, len(view))
        while end < len(view) and view[end - 1] == ord("\r"):  # a slice never ends inside a CR run or its CRLF
            end += 1
        sha.update(bytes(view[start:end]).replace(b"\r\n", b"\n").replace(b"\r", b"\n"))
        start = end
    return sha.digest()


def _scored_rows(groups: list[Group]) -> list[tuple[float, int, int, str]]:
    """(val score, group index, row index, identity) of every non-empty document."""
    rows = []
    for g, (ds, keys) in enumerate(groups):
        for i, raw in enumerate(utf8_texts(ds)):
            if len(raw):
                key = keys[i] if keys is not None else None
                if key is None:
                    key = "sha256:" + hashlib.sha256(raw).hexdigest()
                rows.append((val_score(key), g, i, key))
    return rows


def split_documents(groups: list[Group], val_fraction: float, what: str) -> dict[str, list]:
    """Split ``groups`` into {"train": [Dataset, ...], "val": [...]} by document identity; empty documents dropped.

    A document is in val when ``val_score(key) < val_fraction``; if that leaves val (or train) empty, the document
    with the lowest (highest) score moves over, so both splits always hold at least one document. ``what`` names
    the source in the error raised when there are fewer than two documents. Each entry is a :data:`Group`,
    the Dataset with its documents' identities (which the cache's composition record names documents by).
    """
    rows = _scored_rows(groups)
    if len(rows) < 2:
        raise DataError(f"{what} has {len(rows)} non-empty document(s); a train/val split by document needs >= 2")
    is_val = [row[0] < val_fraction for row in rows]
    if not any(is_val):
        is_val[min(range(len(rows)), key=lambda j: rows[j][0])] = True
    if all(is_val):
        is_val[max(range(len(rows)), key=lambda j: rows[j][0])] = False
    out: dict[str, list] = {s: [] for s in SPLITS}
    for g, (ds, _) in enumerate(groups):
        for split, want in (("train", False), ("val", True)):
            picked = [(i, key) for (_, gg, i, key), v in zip(rows, is_val, strict=True) if gg == g and v == want]
            if picked:
                out[split].append((ds.select([i for i, _ in picked]), [key for _, key in picked]))
    return out


@dataclass(frozen=True)
class ValCap:
    """What :func:`cap_val_documents` decided: the val documents kept and moved, and whether the cap holds."""

    kept: list[int]  # indices into the val documents, in their order
    moved: list[int]  # indices moved to train, largest first
    met: bool  # every kept document at or under VAL_DOC_CAP of the kept tokens


def cap_val_documents(sizes: Sequence[int], cap: float = VAL_DOC_CAP, min_docs: int = MIN_VAL_DOCS) -> ValCap:
    """Move the largest val documents to train until none holds more than ``cap`` of the val tokens.

    ``sizes``: each val document's token count. A document is moved only while val keeps ``min_docs`` documents
    (below that the cap is unreachable: one of n documents holds at least 1/n of the tokens). The fewest moves of
    the largest documents that meet the cap; where none does, the number of them that leaves the smallest largest
    share (the fewest among equals), not all the moves allowed: moving the largest shrinks the total, and down a
    long tail of small documents that leaves fewer documents and a larger share. ``met`` says whether the cap holds.
    """
    if not sizes:
        return ValCap([], [], True)
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    total, best, best_share = sum(sizes), 0, math.inf
    for moves in range(max(1, len(sizes) - min_docs + 1)):  # val keeps at least min_docs (or all it has)
        share = sizes[order[moves]] / total if total else 0.0  # the largest left after ``moves`` moves
        if share < best_share:  # every share before this one was above the cap
            best, best_share = moves, share
        if share <= cap:
            break
        total -= sizes[order[moves]]
    moved = order[:best]
    gone = set(moved)
    kept = [i for i in range(len(sizes)) if i not in gone]
    return ValCap(kept, moved, best_share <= cap)


def composition(keys: Sequence[str], sizes: Sequence[int]) -> dict[str, Any]:
    """A split's composition: documents, tokens, the largest document and its share of the tokens."""
    total = int(sum(sizes))
    if not sizes:
        return {"documents": 0, "tokens": 0, "largest_document": None, "largest_share": None}
    j = max(range(len(sizes)), key=lambda i: (sizes[i], -i))
    return {"documents": len(sizes), "tokens": total, "largest_document": keys[j],
            "largest_share": round(sizes[j] / total, 6) if total else None}
