"""Encoding long documents in pieces (llm.data.encode): the ids are those of one ``encode_ordinary`` of the whole."""

from __future__ import annotations

import hashlib
import random
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import pytest
import tiktoken

import llm.data.cache as cache
from llm.data.encode import SAFE_PATTERNS, cuttable, encode_array, encode_texts, pieces, utf8_batches, utf8_size
from llm.data.sources import make_source
from llm.data.split import drop_repeated, split_documents, text_key, utf8_key
from llm.data.tokenizer import get_tokenizer

# Text around newlines that pretokenizers treat apart: newline runs, spaces and tabs before or after a newline,
# punctuation (o200k takes "\n" and "/" after it), digits, contractions, a special token's text, unicode letters,
# marks, whitespace that is not ASCII, and characters str.isspace() and Unicode disagree on (U+001C, U+0085).
FRAGMENTS = ["a\nb", "a.\n/b", ".\n/", "/\n/", "x\n's", "it's\n'll", "12\n34", "1234567\n8", "\n\n", "\n\n\n", " \n",
             "a \nb", "a\n b", "\t\n", "a\t\nb", "  \n  ", ";\n}", "})\n\n", "):\n    return x\n", "Hello, world!\n",
             "<|endoftext|>\n", "é\nü", "日本\n語", "😀\n😀", "e\u0301\nn\u0303", "\u00a0\n\u00a0", "\u2028\n\u3000",
             "\x1c\nq", "a\x85\nb", "A\nB", "ABC\ndef", "'\n'", "-\n-", "a", "b ", " ", "\n", "9", "'s"]


def _stress_text(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(FRAGMENTS) for _ in range(n))


def _joined(parts: list[np.ndarray]) -> list[int]:
    return np.concatenate(parts).tolist() if parts else []


def _arrow_utf8(text: str) -> memoryview:
    """``text``'s UTF-8 as the build reads it: a view of an Arrow buffer (whose bytes read as signed)."""
    import datasets

    (batch,) = utf8_batches(datasets.Dataset.from_dict({"text": [text]}), 1)
    return batch[0]


def _chunked(enc: tiktoken.Encoding, text: str, size: int) -> list[int]:
    with ThreadPoolExecutor(2) as pool:
        (ids,) = encode_texts([_arrow_utf8(text)], enc, np.dtype(np.uint32), pool, 2, lambda n, size: None, size=size)
    return _joined(ids)


def _pieces(text: str, size: int, cut: bool = True) -> list[str]:
    return [str(piece, "utf-8") for piece in pieces(text.encode(), size, cut)]


def _pair_encoding(pattern: str) -> tiktoken.Encoding:
    """An encoding with ``pattern`` whose merges join any two characters of FRAGMENTS: a pretoken boundary moved by a
    cut changes its ids (without merges, as in ``bytes``, no cut would show)."""
    chars = sorted({c for f in FRAGMENTS for c in f})
    ranks = {bytes([i]): i for i in range(256)}
    for token in [c.encode() for c in chars] + [(a + b).encode() for a in chars for b in chars]:
        ranks.setdefault(token, len(ranks))
    return tiktoken.Encoding(name="pairs", pat_str=pattern, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": len(ranks)})


@pytest.fixture(scope="module")
def cl100k() -> tiktoken.Encoding:
    return get_tokenizer("cl100k_base")


# --------------------------------------------------------------------------------------------------------------
# where a document is cut


def test_a_long_document_is_cut_after_single_newlines_between_text():
    text = "".join(f"línea {i}: x = y / {i} …\n" for i in range(200))
    parts = _pieces(text, size=50)
    assert len(parts) > 50 and "".join(parts) == text
    for left, right in zip(parts[:-1], parts[1:], strict=True):
        assert len(left.encode()) >= 50 and left[-1] == "\n" and not left[-2].isspace()
        assert not right[0].isspace() and right[0] != "/"


def test_a_document_is_encoded_whole_when_short_or_without_a_cut():
    raw = b"short\ntext"
    (whole,) = pieces(raw, size=len(raw))
    assert whole.obj is raw and whole == raw  # a view, not a copy
    for text in ("no newline at all " * 50, "blank lines\n\nonly\n\n" * 50, "a\n/b\n/" * 50, "a \n b\n\tc" * 50,
                 "x\u3000\ny\n\u2028z\x1c\nw\xa0\n" * 50):
        assert _pieces(text, size=10) == [text]
    assert _pieces("a\nb\n" * 50, size=10, cut=False) == ["a\nb\n" * 50]


def test_only_encodings_known_to_keep_their_ids_are_cut(cl100k, byte_encoding):
    """tiktoken's regexes (checked) and encodings without merges (any cut keeps a token per byte) are cut; an
    encoding with merges and another regex is encoded whole."""
    assert cuttable(cl100k) and cuttable(get_tokenizer("bytes")) and cuttable(byte_encoding())
    assert not cuttable(_pair_encoding(r"\S+|\s+"))


def test_a_long_document_moves_the_progress_piece_by_piece(cl100k):
    """Each piece reports its bytes; a document counts once, with its last piece."""
    calls: list[tuple[int, int]] = []
    texts = [memoryview(b"a\nb\n" * 100), memoryview(b"short")]
    with ThreadPoolExecutor(2) as pool:
        encode_texts(texts, cl100k, np.dtype(np.uint32), pool, 2, lambda n, size: calls.append((n, size)), size=8)
    assert len(calls) > 20 and sum(size for _, size in calls) == sum(len(t) for t in texts)
    assert [i for i, (n, _) in enumerate(calls) if n] == [len(calls) - 2, len(calls) - 1]


# --------------------------------------------------------------------------------------------------------------
# pieces give the ids of the whole


@pytest.mark.parametrize("size", [1, 2, 7, 64])
def test_pieces_encode_as_the_whole_document_in_cl100k_and_bytes(cl100k, size):
    text = _stress_text(3000)
    for enc in (cl100k, get_tokenizer("bytes")):
        assert _chunked(enc, text, size) == enc.encode_ordinary(text), (enc.name, size)


@pytest.mark.parametrize("pattern", sorted(SAFE_PATTERNS), ids=["r50k", "cl100k", "o200k"])
def test_every_safe_pattern_keeps_the_ids_at_its_cuts(pattern):
    enc = _pair_encoding(pattern)
    assert cuttable(enc)
    for seed in range(3):
        text = _stress_text(3000, seed)
        for size in (1, 3, 16):
            assert _chunked(enc, text, size) == enc.encode_ordinary(text), (seed, size)


def test_an_unsafe_pattern_would_show_in_these_texts():
    """The stress texts and pair merges do tell a cut that moves a pretoken (the pattern is cut as if it were safe)."""
    enc = _pair_encoding(r"[\s\S]{1,3}")
    text = _stress_text(3000)
    cut = [enc.encode_ordinary(p) for p in _pieces(text, size=1)]
    assert sum(cut, []) != enc.encode_ordinary(text)


def test_every_code_point_next_to_a_newline_keeps_the_ids(cl100k):
    """Each character on both sides of a newline: a boundary test that does not depend on our list of fragments
    (notably on which characters the encodings' regexes and Python's str.isspace() call whitespace)."""
    text = "\n".join(chr(c) for c in range(1, 0x30000) if not 0xD800 <= c < 0xE000)
    assert _chunked(cl100k, text, 1000) == cl100k.encode_ordinary(text)
    for pattern in SAFE_PATTERNS:
        enc = _pair_encoding(pattern)
        assert _chunked(enc, text, 1000) == enc.encode_ordinary(text), pattern


def test_the_safe_patterns_are_those_of_tiktokens_encodings(monkeypatch):
    """Each encoding tiktoken ships has its regex in SAFE_PATTERNS (the BPE files are not loaded: no network); a
    tiktoken release that changes one fails here, to be checked before it is added."""
    from tiktoken_ext import openai_public

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", lambda *a, **k: {})
    monkeypatch.setattr(openai_public, "data_gym_to_mergeable_bpe_ranks", lambda *a, **k: {})
    for name in ("gpt2", "r50k_base", "p50k_base", "p50k_edit", "cl100k_base", "o200k_base"):
        assert openai_public.ENCODING_CONSTRUCTORS[name]()["pat_str"] in SAFE_PATTERNS, name
    assert get_tokenizer("cl100k_base")._pat_str in SAFE_PATTERNS


def test_encode_array_gives_encode_ordinarys_ids_with_or_without_encode_to_numpy(cl100k):
    """Special-token text stays text, as in encode_ordinary; a tiktoken without encode_to_numpy takes the list way."""
    text = "<|endoftext|> and <|fim_prefix|>\n" + _stress_text(200)

    class Older:  # the encoding of a tiktoken before encode_to_numpy
        def __init__(self, enc: tiktoken.Encoding) -> None:
            self.encode_ordinary = enc.encode_ordinary

    for enc in (cl100k, Older(cl100k)):
        ids = encode_array(enc, text)
        assert ids.dtype == np.uint32 and ids.tolist() == cl100k.encode_ordinary(text)


# --------------------------------------------------------------------------------------------------------------
# the build


def test_short_documents_share_pool_tasks(cl100k):
    """A batch of short documents is a few pool tasks, not one each (a task's own cost was most of a short
    document's); the ids stay each document's, in order."""
    tasks: list[int] = []

    class Counting(ThreadPoolExecutor):
        def map(self, fn, items):
            items = list(items)
            tasks.append(len(items))
            return super().map(fn, items)

    texts = [f"document {i}\n".encode() for i in range(256)]
    with Counting(2) as pool:
        ids = encode_texts([memoryview(t) for t in texts], cl100k, np.dtype(np.uint32), pool, 2, lambda n, s: None)
    assert sum(tasks) <= 8 and [_joined(d) for d in ids] == [cl100k.encode_ordinary(t.decode()) for t in texts]


def test_each_pieces_ids_are_an_array_of_their_own(cl100k):
    """Not a view of tiktoken's buffer, which keeps the spare capacity it grew by (up to as much again as the ids):
    a document's ids held for the val split, or until its last piece, took up to twice their size."""
    with ThreadPoolExecutor(2) as pool:
        (ids,) = encode_texts([memoryview(b"a\nb\n" * 100)], cl100k, np.dtype(np.uint32), pool, 2, lambda n, s: None,
                              size=8)
    assert len(ids) > 10 and all(a.flags.owndata and a.dtype == np.uint32 for a in ids)


def test_a_long_document_is_tokenized_without_a_python_list_or_str_of_it(tmp_path, text_cfg, cl100k, monkeypatch):
    """The build's Python memory for one long document is its ids (4 bytes a token) and a few of its pieces (of 64 KiB
    here): ``encode_ordinary`` made a list of its ids (about 36 bytes a token), and the document as one str takes
    four bytes a character once it holds a character outside the BMP (here one emoji)."""
    monkeypatch.setattr(cache, "encode_texts", partial(encode_texts, size=1 << 16))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = "😀\n" + "".join(f"def f{i}(x):\n    return x * {i} + len('{'ab' * (i % 7)}')\n" for i in range(120_000))
    (corpus / "long.txt").write_text(text)
    for i in range(3):
        (corpus / f"short{i}.txt").write_text(f"short document {i}\n")
    splits = make_source(text_cfg(corpus)).load(tmp_path / "scratch")
    tracemalloc.start()
    try:
        shards = cache._write_shards(splits, cl100k, np.dtype(np.uint32), tmp_path, 1, "long")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    ids, size = 4 * sum(shards["n_tokens"].values()), len(text.encode())
    assert peak < ids + size / 4, (peak, ids, size)


def test_the_shard_writer_writes_ids_as_they_are_without_a_copy(tmp_path):
    """A document's pieces are written and hashed in place: gathering them into one buffer (and its bytes) first
    cost twice the ids of the longest document."""
    doc = [np.arange(1_000_000, dtype=np.uint32), np.arange(5, dtype=np.uint32)]
    with open(tmp_path / "shard.bin", "wb") as f:
        writer = cache._ShardWriter(f, np.dtype(np.uint32), eot=7)
        tracemalloc.start()
        try:
            writer.add(["long", "short"], [doc, [np.arange(3, dtype=np.uint32)]])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    data = (tmp_path / "shard.bin").read_bytes()
    assert data == np.concatenate([*doc, [7], np.arange(3), [7]]).astype(np.uint32).tobytes()
    assert writer.sha.hexdigest() == hashlib.sha256(data).hexdigest() and writer.sizes == [1_000_006, 4]
    assert peak < doc[0].nbytes / 4, peak


# --------------------------------------------------------------------------------------------------------------
# the split reads texts as UTF-8, in place


@pytest.mark.parametrize("kind", ["string", "large_string"])
def test_texts_are_read_as_views_of_arrows_buffers(kind):
    """Each text is a view of its bytes in the column's data buffer: a value's own buffer (``as_buffer()``) is a copy,
    and for a long document it was a copy of the whole text. Nulls and empty texts read as empty; rows selected, and
    a column that is a slice of another, read as their own texts."""
    import datasets
    import pyarrow as pa

    texts = ["a", None, "", "é日本😀\n", "x" * 1000, None, "last"]
    column = pa.array(["skipped"] + texts, type=getattr(pa, kind)()).slice(1)  # an offset into its buffers
    ds = datasets.Dataset(pa.table({"text": column}))
    values = [v for batch in utf8_batches(ds, 3) for v in batch]
    assert [bytes(v) for v in values] == [(t or "").encode() for t in texts]
    (batch,) = utf8_batches(ds, len(texts))
    assert len({id(v.obj) for v in batch if len(v)}) == 1, "views of one buffer, not a copy each"
    picked = [v for batch in utf8_batches(ds.select([6, 3, 1]), 8) for v in batch]
    assert [bytes(v) for v in picked] == [b"last", "é日本😀\n".encode(), b""]
    # the progress's total: the bytes of the texts read
    assert utf8_size(ds, 2) == sum(len((t or "").encode()) for t in texts)
    assert utf8_size(ds.select([6, 3, 1])) == len(b"last") + len("é日本😀\n".encode())
    assert utf8_size(datasets.Dataset(pa.table({"text": pa.nulls(3)}))) == 0


def test_utf8_key_is_the_text_key_of_the_text(monkeypatch):
    """The sha256 of the text with its line endings made LF, also where the slices it is hashed in (of 1 to 4 bytes
    here) end between a CR and its LF, or inside a run of CRs."""
    import llm.data.split as split

    texts = ["", "a", "a\r\nb", "a\rb\r\n\r", "é\r\n日本😀", "x" * 1000 + "\r", "abc\r\r\n\r\n\n\r\rx\r"]
    texts += ["".join(random.Random(seed).choice("ab\r\n") for _ in range(50)) for seed in range(50)]
    for slice_bytes in (split._KEY_SLICE, 1, 2, 3, 4):
        monkeypatch.setattr(split, "_KEY_SLICE", slice_bytes)
        for text in texts:
            want = hashlib.sha256(text.replace("\r\n", "\n").replace("\r", "\n").encode()).digest()
            assert utf8_key(memoryview(text.encode())) == text_key(text) == want, (slice_bytes, text)
    assert utf8_key(b"") == text_key(None) == hashlib.sha256(b"").digest()


def test_the_split_hashes_and_tests_texts_without_a_python_str_of_them():
    """Telling repeated and empty documents apart, and identifying rows by their text, read each text's UTF-8 where
    Arrow holds it: a str of a long document is up to four times its bytes (here one emoji makes it so)."""
    import datasets

    long = "😀" + "x\n" * 4_000_000
    ds = datasets.Dataset.from_dict({"text": [long, "short", long.replace("\n", "\r\n"), None, ""]})
    size = len(long.encode())
    del long
    tracemalloc.start()
    try:
        groups, dropped = drop_repeated([(ds, None)])
        splits = split_documents(groups, 0.5, "test")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert dropped == 1 and sum(len(g[0]) for s in splits.values() for g in s) == 2
    assert peak < size / 2, (peak, size)  # a str of the long text alone would be four times its size
