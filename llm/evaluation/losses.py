"""Per-token losses of a model over chosen windows: with the window's full context, and with a sliding window.

Both return one float64 loss per target position, shape (windows, L), so that every metric of an evaluation
(:mod:`llm.evaluation.metrics`) is a mean over the same array positions, and two of them (the model at
length L against its sliding-window baseline) are compared on exactly the same targets.

**The sliding-window baseline** predicts each target of an L-token window from at most ``window`` tokens of
context: sub-windows of ``window`` tokens inside the L window, the first at its start scoring all of its
positions, each next one ``stride`` tokens further scoring only its last ``stride`` positions (the last
sub-window ends at L and scores what is left). A target at position p >= ``window`` thus sees between
``window - stride + 1`` and ``window`` tokens, at RoPE positions the model was trained on; one at p <
``window`` sees its whole context, as in the full forward. Why strided: one forward per target (stride 1)
costs ``window`` times the full evaluation; stride ``window / 2`` costs about twice it. Two identities hold by
construction: with ``window >= L`` the baseline is the full forward itself, and at L <= ``window`` every
target's context is whole, so the baseline equals the plain loss.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from llm.model import GPT

#: Float32 logits the head computes at once (elements): 64 Mi = 256 MiB.
LOGITS_CHUNK_ELEMENTS = 64 * 2**20


def logits_chunk(padded_vocab: int) -> int:
    """Positions whose logits the head computes at once (a bounded float32 buffer)."""
    return max(1, LOGITS_CHUNK_ELEMENTS // padded_vocab)


def gather_windows(tokens: np.ndarray, starts: np.ndarray, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x = tokens[s : s + length], y = tokens[s + 1 : s + length + 1] for each start s: (n, length) int64."""
    idx = np.asarray(starts, dtype=np.int64)[:, None] + np.arange(length + 1)
    buf = torch.from_numpy(np.asarray(tokens[idx], dtype=np.int64))
    return buf[:, :-1].contiguous(), buf[:, 1:].contiguous()


@torch.no_grad()
def token_losses(model: GPT, x: torch.Tensor, y: torch.Tensor, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token cross-entropy (float32) and argmax correctness, both (B, T), with the head run on a bounded
    number of positions at a time: the (B·T × vocab) logits of a long window never exist at once."""
    h = model.hidden(x)
    flat_h, flat_y = h.flatten(0, 1), y.flatten()
    losses = torch.empty(flat_y.shape, dtype=torch.float32, device=h.device)
    correct = torch.empty(flat_y.shape, dtype=torch.bool, device=h.device)
    step = logits_chunk(model.cfg.padded_vocab)
    for a in range(0, flat_y.numel(), step):
        logits = model.head(flat_h[a:a + step])
        losses[a:a + step] = F.cross_entropy(logits.float(), flat_y[a:a + step], reduction="none")
        correct[a:a + step] = logits[:, :vocab_size].argmax(dim=-1) == flat_y[a:a + step]
    return losses.view_as(y), correct.view_as(y)


def _batches(tokens: np.ndarray, starts: np.ndarray, length: int, batch: int, device: torch.device):
    for a in range(0, len(starts), batch):
        x, y = gather_windows(tokens, starts[a:a + batch], length)
        yield a, x.to(device, non_blocking=True), y.to(device, non_blocking=True)


@torch.no_grad()
def window_losses(model: GPT, tokens: np.ndarray, starts: np.ndarray, length: int, batch: int, vocab_size: int,
                  device: torch.device, autocast: AbstractContextManager) -> tuple[np.ndarray, np.ndarray]:
    """Loss (float64) and argmax correctness of every target of the windows ``starts`` with their whole
    context, ``batch`` windows per forward: two (len(starts), length) arrays."""
    model.eval()
    loss = np.empty((len(starts), length), dtype=np.float64)
    correct = np.empty((len(starts), length), dtype=bool)
    for a, x, y in _batches(tokens, starts, length, batch, device):
        with autocast:
            lo, right = token_losses(model, x, y, vocab_size)
        loss[a:a + len(x)] = lo.double().cpu().numpy()
        correct[a:a + len(x)] = right.cpu().numpy()
    return loss, correct


@dataclass(frozen=True)
class SlidingPlan:
    """The sub-windows of one L window: (start, first scored position, end), positions relative to the window."""

    length: int
    window: int
    stride: int
    pieces: tuple[tuple[int, int, int], ...]


def sliding_plan(length: int, window: int, stride: int) -> SlidingPlan:
    """Sub-windows of ``window`` tokens covering an L = ``length`` window, ``stride`` apart (see the module
    docstring); ``window >= length`` is one sub-window, the window itself."""
    if window <= 0 or not 0 < stride <= window:
        raise ValueError(f"a sliding window needs 0 < stride <= window, got window={window}, stride={stride}")
    w = min(window, length)
    pieces = [(0, 0, w)]
    end = w
    while end < length:
        nxt = min(end + stride, length)
        pieces.append((nxt - w, end, nxt))
        end = nxt
    return SlidingPlan(length, w, stride, tuple(pieces))


@torch.no_grad()
def sliding_losses(model: GPT, tokens: np.ndarray, starts: np.ndarray, plan: SlidingPlan, batch: int,
                   vocab_size: int, device: torch.device, autocast: AbstractContextManager) -> np.ndarray:
    """The loss of every target of the L windows ``starts``, each predicted from its sub-window of ``plan``:
    (len(starts), L) float64. ``batch`` sub-windows per forward."""
    model.eval()
    out = np.empty((len(starts), plan.length), dtype=np.float64)
    offsets = np.array([p[0] for p in plan.pieces], dtype=np.int64)
    sub_starts = (np.asarray(starts, dtype=np.int64)[:, None] + offsets[None, :]).ravel()
    n_pieces = len(plan.pieces)
    for a, x, y in _batches(tokens, sub_starts, plan.window, batch, device):
        with autocast:
            lo, _ = token_losses(model, x, y, vocab_size)
        rows = lo.double().cpu().numpy()
        for r, row in enumerate(rows):
            i, k = divmod(a + r, n_pieces)
            start, first, end = plan.pieces[k]
            out[i, first:end] = row[first - start:end - start]
    return out
