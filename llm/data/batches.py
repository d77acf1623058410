"""Training and evaluation batches: windows of ``seq_len + 1`` tokens cut from a token stream.

Why windows depend on (seed, step) only: a resumed run must continue the exact data stream from its step
counter, so no global RNG and no iterator state is involved. The val set is fixed so every eval of every run
measures the same tokens. The trainer's eval spreads its windows evenly over the whole val stream
(``spread=True``): the first windows would be the first documents of the split only (a few packages of a code
corpus, in path order), not a sample of it.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from llm.data.config import DataError


def _check_length(tokens: np.ndarray, seq_len: int, what: str) -> None:
    """A stream too short for one window is the user's to fix (more data, or shorter sequences): DataError."""
    if seq_len <= 0:
        raise DataError(f"model.seq_len={seq_len} must be positive")
    if len(tokens) < seq_len + 1:
        fraction = {"val": " (or a larger data.val_fraction)", "train": " (or a smaller data.val_fraction)"}
        raise DataError(f"the {what} stream has {len(tokens)} tokens, fewer than seq_len+1={seq_len + 1}; "
                        f"use more data{fraction.get(what, '')} or a shorter model.seq_len")


def check_streams(train: np.ndarray, val: np.ndarray, seq_len: int) -> None:
    """Both streams hold at least one window of ``seq_len + 1`` tokens, else a DataError.

    Why here, before the model is built: the val stream is first read at the first eval, so a short one would
    otherwise end a run after ``train.eval_every`` steps of training (a few files of a small ``data.max_files``
    can hold a few dozen tokens: the stdlib's first 40 files in Python 3.12 and 3.13 leave 25 for val).
    """
    _check_length(train, seq_len, "train")
    _check_length(val, seq_len, "val")


def _windows(tokens: np.ndarray, starts: np.ndarray, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x = tokens[s : s+T] and y = tokens[s+1 : s+T+1] for each start s, as (len(starts), T) int64 tensors."""
    idx = starts[:, None] + np.arange(seq_len + 1)
    buf = torch.from_numpy(np.asarray(tokens[idx], dtype=np.int64))
    return buf[:, :-1].contiguous(), buf[:, 1:].contiguous()


def sample_batch(tokens: np.ndarray, batch_size: int, seq_len: int, seed: int, step: int,
                 micro_step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch_size` random windows: x (B, T) int64 and y = x shifted by one token.

    The windows depend only on (seed, step, micro_step) -- not on any global RNG -- so a resumed run continues
    the exact data stream from its step counter.
    """
    _check_length(tokens, seq_len, "token")
    rng = np.random.default_rng([int(seed) % 2**64, int(step), int(micro_step)])
    starts = rng.integers(0, len(tokens) - seq_len, size=batch_size)  # last start: len - seq_len - 1
    return _windows(tokens, starts, seq_len)


def val_window_starts(n_tokens: int, batch_size: int, seq_len: int, n_batches: int,
                      spread: bool = False) -> np.ndarray:
    """Start offsets of the fixed evaluation windows (non-overlapping, at multiples of ``seq_len``).

    ``n_batches * batch_size`` of the stream's windows (full batches only; all of them, one smaller batch,
    when the stream holds fewer than ``batch_size``): the first ones, or with ``spread`` ones evenly spaced
    over the whole stream (window ``floor(i * n_windows / n)`` for i < n).
    """
    n_windows = (n_tokens - 1) // seq_len
    n_full = min(n_batches, n_windows // batch_size)
    n = n_full * batch_size if n_full > 0 else n_windows
    index = (np.arange(n, dtype=np.int64) * n_windows) // n if spread else np.arange(n, dtype=np.int64)
    return index * seq_len


def val_batches(tokens: np.ndarray, batch_size: int, seq_len: int, n_batches: int,
                spread: bool = False) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The fixed evaluation set: the windows of :func:`val_window_starts`, ``batch_size`` at a time.

    Yields full batches only; when `tokens` holds fewer than `batch_size` windows, one smaller batch of all of
    them. Raises ValueError at once when `tokens` has fewer than seq_len+1 tokens.
    """
    _check_length(tokens, seq_len, "val")
    starts = val_window_starts(len(tokens), batch_size, seq_len, n_batches, spread)
    size = min(batch_size, len(starts))

    def gen() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for first in range(0, len(starts), size):
            yield _windows(tokens, starts[first:first + size], seq_len)

    return gen()
