"""Document-aligned training windows (``data.packing=documents``): positions restart at each document and
attention stays inside it.

The token cache stores a split as one stream, every document followed by the end-of-text token (the only
place that id occurs: documents are tokenized with ``encode_ordinary``). ``data.packing=random`` (the
default) trains on random slices of that stream with positions 0..T-1, so a window's positions say nothing
about where a document starts and attention reads across unrelated files. ``data.packing=documents`` keeps
the **same windows** (:func:`llm.data.batches.sample_batch`'s, from (seed, step, micro-step): a resumed run
continues the same stream, and the two packings see the same tokens at every step, so a comparison of them
measures the alignment alone) and lays them out by document:

* a **segment** starts at every end-of-text token of the window (it marks the start of the next document,
  the start-of-document token the model sees first) and at the window's first token; it runs to the next one.
  The last token of a document is thus predicted (its target is the end-of-text token) from that document
  alone, and the first token of a document from its start marker alone;
* **positions restart at 0 at each segment**, through the RoPE modules' ``positions`` (or ``cu_seqlens``);
* **attention stays inside a segment**: a query sees the keys of its own segment up to itself
  (:mod:`llm.doc_attention`, flex_attention's document-causal block mask).

A document longer than the window, or one the window's edge cuts, gives a piece that starts at position 0
without its start marker, as every window of ``random`` does: positions never continue from one window into
the next, so they stay below ``model.seq_len``, the positions the model is trained at.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from llm.data.batches import sample_batch


@dataclass
class DocumentBatch:
    """Training windows laid out by document: x, y (B, T) int64 as ``sample_batch`` gives them, each token's
    position in its segment (B, T) int64, and its segment's index within its row (B, T) int32."""

    x: torch.Tensor
    y: torch.Tensor
    positions: torch.Tensor
    doc_ids: torch.Tensor

    def rows(self, rows: slice) -> DocumentBatch:
        """The batch restricted to ``rows`` (a rank's share under DDP)."""
        return DocumentBatch(self.x[rows], self.y[rows], self.positions[rows], self.doc_ids[rows])

    def to(self, device: torch.device) -> DocumentBatch:
        return DocumentBatch(*(t.to(device, non_blocking=True) for t in (self.x, self.y, self.positions,
                                                                          self.doc_ids)))

    @property
    def cu_seqlens(self) -> torch.Tensor:
        """The segments of the flattened (B·T) batch as flash-attn's varlen ``cu_seqlens`` (int32, starting at 0,
        ending at B·T): what a varlen kernel or ``RotaryEmbedding(..., cu_seqlens=)`` takes."""
        return segment_starts(self.positions)


def document_layout(x: torch.Tensor, eot: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions, doc_ids) of windows ``x`` (B, T): a segment starts at each ``eot`` and at each row's start."""
    B, T = x.shape
    is_start = x == eot
    is_start[:, 0] = True
    idx = torch.arange(T, device=x.device).expand(B, T)
    seg_start = torch.where(is_start, idx, torch.zeros_like(idx)).cummax(dim=1).values
    return idx - seg_start, (is_start.cumsum(dim=1) - 1).to(torch.int32)


def segment_starts(positions: torch.Tensor) -> torch.Tensor:
    """``cu_seqlens`` (int32) of the flattened segments whose positions are ``positions`` (each starts at 0)."""
    flat = positions.reshape(-1)
    starts = torch.nonzero(flat == 0).flatten()
    return torch.cat([starts, starts.new_tensor([flat.numel()])]).to(torch.int32)


def document_batch(tokens: np.ndarray, eot: int, batch_size: int, seq_len: int, seed: int, step: int,
                   micro_step: int = 0) -> DocumentBatch:
    """``sample_batch``'s windows for (seed, step, micro_step), laid out by document (see the module docstring)."""
    x, y = sample_batch(tokens, batch_size, seq_len, seed, step, micro_step)
    positions, doc_ids = document_layout(x, eot)
    return DocumentBatch(x, y, positions, doc_ids)
