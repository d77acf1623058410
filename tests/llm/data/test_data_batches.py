"""Batches (llm.data.batches): deterministic training windows and the fixed val set."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llm.data import DataError, prepare_data, sample_batch, val_batches
from llm.data.batches import check_streams


def test_sample_batch_deterministic_and_shifted():
    tokens = np.arange(1000, dtype=np.uint32)
    x, y = sample_batch(tokens, 4, 16, seed=7, step=3)
    assert x.shape == y.shape == (4, 16) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(y, x + 1)  # consecutive ids: y is x shifted by one
    np.random.seed(123)
    torch.manual_seed(123)  # global RNG state must not matter
    x2, y2 = sample_batch(tokens, 4, 16, seed=7, step=3)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(x, sample_batch(tokens, 4, 16, seed=7, step=4)[0])
    assert not torch.equal(x, sample_batch(tokens, 4, 16, seed=8, step=3)[0])
    assert not torch.equal(x, sample_batch(tokens, 4, 16, seed=7, step=3, micro_step=1)[0])
    # windows stay inside the stream, including the last possible one
    short = np.arange(17, dtype=np.uint16)
    xs, ys = sample_batch(short, 8, 16, seed=0, step=0)
    assert torch.equal(xs[0], torch.arange(16)) and torch.equal(ys[0], torch.arange(1, 17))
    with pytest.raises(ValueError, match="fewer than seq_len"):
        sample_batch(np.arange(16, dtype=np.uint16), 2, 16, seed=0, step=0)


def test_sample_batch_on_memmap(tmp_path, make_corpus, text_cfg):
    d = prepare_data(text_cfg(make_corpus(tmp_path / "c")), "cl100k_base", tmp_path / "cache")
    x, y = sample_batch(d.train, 3, 8, seed=0, step=0)
    assert x.shape == (3, 8) and int(x.max()) < d.vocab_size and torch.equal(x[:, 1:], y[:, :-1])


def test_val_batches_fixed():
    tokens = np.arange(1001, dtype=np.uint16)
    batches = list(val_batches(tokens, 4, 10, 3))
    assert len(batches) == 3 and all(x.shape == (4, 10) for x, _ in batches)
    assert torch.equal(batches[0][0][0], torch.arange(10)) and torch.equal(batches[0][1][0], torch.arange(1, 11))
    starts = torch.cat([x[:, 0] for x, _ in batches])
    assert torch.equal(starts, torch.arange(12) * 10)  # first 12 non-overlapping windows, in order
    again = list(val_batches(tokens, 4, 10, 3))
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(batches, again, strict=True))
    # a short stream gives fewer batches (full ones only) ...
    assert len(list(val_batches(tokens[:101], 4, 10, 50))) == 2
    # ... and at least one, smaller, when it holds fewer windows than one batch
    (only,) = list(val_batches(tokens[:31], 4, 10, 5))
    assert only[0].shape == (3, 10)
    with pytest.raises(ValueError, match="val stream has 10 tokens"):
        val_batches(tokens[:10], 4, 10, 5)  # raised at the call, not at the first next()
    with pytest.raises(DataError, match=r"^the val stream has 10 tokens, .*larger data\.val_fraction.*seq_len$"):
        val_batches(tokens[:10], 4, 10, 5)  # the user's to fix: a one-line DataError naming the keys
    with pytest.raises(DataError, match=r"^the train stream has 10 tokens, .*a smaller data\.val_fraction"):
        check_streams(tokens[:10], tokens, 10)  # a larger val fraction would leave train shorter still
