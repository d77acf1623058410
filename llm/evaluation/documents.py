"""Evaluation windows cut from whole documents: which windows of length L a val stream offers, and which are taken.

The token cache stores a split as one stream, every document followed by the end-of-text token (documents are
tokenized with ``encode_ordinary``, so that id appears only as a separator). A **document segment** is a
document with the end-of-text token before it (its start marker, as document-aligned training sees it) and
without the one after it, which is only ever a target: segment k is ``stream[e(k-1) : e(k)]`` for the
end-of-text positions ``e``; the stream's first document has no marker before it and starts at 0.

Why windows come from one document each: a window cut across a boundary measures "predict a file from the
end of an unrelated one", and at 8192 tokens most windows of a code corpus would be such splices, so the loss
at long positions would say little about long context. A window of length L is therefore ``x =
segment[o : o + L]`` (targets ``segment[o + 1 : o + L + 1]``, the last possibly the document's end-of-text)
at offsets ``o = 0, L, 2L, ...``: a segment of n tokens gives ``n // L`` non-overlapping windows, the first
starting at the document's start. Documents shorter than L give none; nothing is ever spliced.

Which windows are taken (``select_windows``): one window per document first (each document's first L
tokens), then the second windows of the documents long enough, and so on, until the token budget; the
documents in one fixed random order (:data:`DOCUMENT_ORDER_SEED`, the same for every run and length), so
the budget samples the val split evenly rather than favouring the files a source lists first, and no single
huge file fills it. Every run, scaling and implementation evaluated at length L then predicts the same
target tokens. A length whose documents hold fewer tokens than the budget is evaluated on what they hold,
with a note saying so; a length no document reaches is skipped with a warning.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: The seed of the documents' order (fixed: every run must get the same windows).
DOCUMENT_ORDER_SEED = 0


@dataclass(frozen=True)
class Segments:
    """The document segments of a token stream: ``starts[k]`` and ``lengths[k]`` (tokens, start marker included)."""

    starts: np.ndarray
    lengths: np.ndarray

    @property
    def count(self) -> int:
        return len(self.starts)

    @property
    def longest(self) -> int:
        return int(self.lengths.max()) if self.count else 0


def document_segments(tokens: np.ndarray, eot: int) -> Segments:
    """The segments of ``tokens``: each document with the end-of-text token before it (none for the first).

    A stream that does not end with ``eot`` has its last, unterminated document dropped (it has no target
    after its last token). Empty documents (two end-of-text tokens in a row) give segments of one token.
    """
    ends = np.flatnonzero(np.asarray(tokens) == eot)
    starts = np.concatenate(([0], ends[:-1])) if len(ends) else np.zeros(0, dtype=np.int64)
    return Segments(starts.astype(np.int64), (ends - starts).astype(np.int64))


@dataclass(frozen=True)
class WindowSelection:
    """The windows of one length: their stream offsets, and what the val split offered."""

    length: int
    starts: np.ndarray  # stream offset of each window's first input token, in evaluation order
    documents: int  # documents the windows come from
    eligible_documents: int  # documents with at least one window of ``length``
    eligible_windows: int  # windows those documents hold
    longest_document: int  # tokens of the longest segment of the split
    budget: int  # the token budget asked for

    @property
    def windows(self) -> int:
        return len(self.starts)

    @property
    def tokens(self) -> int:
        return self.windows * self.length

    @property
    def skipped(self) -> bool:
        return self.windows == 0

    def note(self) -> str | None:
        """One line when the evaluation is smaller than the budget (a skipped length included); None if not."""
        if self.skipped:
            return (f"lengths: {self.length} skipped: no val document has {self.length} tokens (the longest has "
                    f"{self.longest_document}); a corpus with longer documents, or shorter lengths")
        if self.eligible_windows < self.budget // self.length:
            return (f"tokens: {self.tokens} at length {self.length}, fewer than the budget {self.budget}: the val "
                    f"split has {self.eligible_documents} document(s) of at least {self.length} tokens, "
                    f"{self.eligible_windows} window(s) in all")
        return None

    def record(self) -> dict:
        """What the output says about the selection at this length."""
        return {"documents": self.documents, "eligible_documents": self.eligible_documents,
                "eligible_tokens": self.eligible_windows * self.length, "longest_document": self.longest_document}


def select_windows(segments: Segments, length: int, budget: int) -> WindowSelection:
    """The windows of ``length`` evaluated under a budget of ``budget`` tokens (whole windows, at most
    ``budget // length``): round robin over the documents in the fixed order, first windows first."""
    per_doc = segments.lengths // length
    order = np.random.default_rng(DOCUMENT_ORDER_SEED).permutation(segments.count)
    order = order[per_doc[order] > 0]
    want = budget // length
    picked: list[np.ndarray] = []
    total = 0
    rounds = int(per_doc.max()) if segments.count else 0
    for j in range(rounds):
        docs = order[per_doc[order] > j]
        take = docs[: want - total]
        picked.append(segments.starts[take] + j * length)
        total += len(take)
        if total >= want:
            break
    starts = np.concatenate(picked) if picked else np.zeros(0, dtype=np.int64)
    used = len(np.unique(np.searchsorted(segments.starts, starts, side="right"))) if len(starts) else 0
    return WindowSelection(length, starts.astype(np.int64), used, len(order), int(per_doc.sum()), segments.longest,
                           budget)
