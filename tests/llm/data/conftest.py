"""Fixtures of the data-layer tests: corpora, configs, decoding of token streams, an offline byte tokenizer and
a counter of cache builds. Helpers are fixtures (not an imported module) so these tests need no sys.path setup
and work under any pytest import mode."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tiktoken

import llm.data.cache as cache
import llm.data.check as check


def _byte_encoding() -> tiktoken.Encoding:
    return tiktoken.Encoding(name="bytes_test", pat_str=r"\S+|\s+",
                             mergeable_ranks={bytes([i]): i for i in range(256)},
                             special_tokens={"<|endoftext|>": 256})


def _make_corpus(root: Path, n_txt: int = 30) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n_txt):
        (root / f"doc{i:03d}.txt").write_text(f"Document number {i}.\n" + "lorem ipsum dolor " * (5 + i % 7))
    return root


def _docs(stream: np.ndarray, enc: tiktoken.Encoding) -> list[str]:
    ids = np.asarray(stream).tolist()
    out, cur = [], []
    for t in ids:
        if t == enc.eot_token:
            out.append(enc.decode(cur))
            cur = []
        else:
            cur.append(t)
    assert not cur, "stream must end with end-of-text"
    return out


def _text_cfg(path: Path, **kw) -> dict:
    return {"name": "text_files", "path": str(path), "val_fraction": 0.2, **kw}


@pytest.fixture
def byte_encoding() -> Callable[[], tiktoken.Encoding]:
    """A tiny offline byte-level encoding (vocab 257 -> uint16 shards)."""
    return _byte_encoding


@pytest.fixture
def make_corpus() -> Callable[..., Path]:
    """make_corpus(root, n_txt=30): a directory of n_txt small, distinct .txt documents."""
    return _make_corpus


@pytest.fixture
def docs() -> Callable[[np.ndarray, tiktoken.Encoding], list[str]]:
    """docs(stream, enc): split a token stream at end-of-text tokens and decode each document."""
    return _docs


@pytest.fixture
def text_cfg() -> Callable[..., dict]:
    """text_cfg(path, **keys): a data=text_files config (val_fraction 0.2)."""
    return _text_cfg


@pytest.fixture
def byte_tokenizer(monkeypatch):
    """The name of a tiny byte-level tokenizer (vocab 257) that prepare_data accepts and loads offline."""
    enc = _byte_encoding()
    real_get, real_check = cache.get_tokenizer, check.check_tokenizer_name
    monkeypatch.setattr(cache, "get_tokenizer", lambda name: enc if name == "bytes_test" else real_get(name))
    monkeypatch.setattr(check, "check_tokenizer_name",
                        lambda name: None if name == "bytes_test" else real_check(name))
    return "bytes_test"


@pytest.fixture
def build_counter(monkeypatch):
    """Counts tokenization runs (calls of cache._build); each entry is the cache dir built."""
    calls = []
    real = cache._build

    def counting(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(cache, "_build", counting)
    return calls
