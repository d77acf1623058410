"""The data cache (llm.data.cache): build, reuse, verify on load, rebuild, concurrency, cleanup of failed builds."""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import llm.data.cache as cache
import llm.data.cache_lock as cache_lock
from llm.data import DataError, TokenData, prepare_data, token_dtype
from llm.data.cache_lock import locked_cache_dir
from llm.data.tokenizer import NetworkUnavailableError, get_tokenizer

# --------------------------------------------------------------------------------------------------------------
# build, reuse, rebuild


def test_cache_built_then_reused(tmp_path, build_counter, make_corpus, text_cfg):
    corpus = make_corpus(tmp_path / "corpus")
    d1 = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert isinstance(d1, TokenData) and len(build_counter) == 1
    cache_dir = Path(d1.meta["cache_dir"])
    assert cache_dir.parent == tmp_path / "cache" and cache_dir.name.startswith("text_files-cl100k_base-")
    assert {p.name for p in cache_dir.iterdir()} >= {"train.bin", "val.bin", "meta.json"}
    assert not list(cache_dir.glob("*.tmp*")), "no temp files or scratch dirs left behind"
    mtimes = {p.name: p.stat().st_mtime_ns for p in cache_dir.glob("*.bin")}

    d2 = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
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


def test_dtype_choice(tmp_path, byte_tokenizer, make_corpus, docs, text_cfg, byte_encoding):
    assert token_dtype(257) == np.uint16
    assert token_dtype(50257) == np.uint16  # gpt2
    assert token_dtype(65535) == np.uint16
    assert token_dtype(65536) == np.uint32
    assert token_dtype(100277) == np.uint32  # cl100k_base
    corpus = make_corpus(tmp_path / "corpus", n_txt=10)
    d16 = prepare_data(text_cfg(corpus), byte_tokenizer, tmp_path / "cache")
    assert d16.train.dtype == np.uint16 and d16.meta["dtype"] == "uint16" and d16.vocab_size == 257
    assert Path(d16.meta["cache_dir"], "train.bin").stat().st_size == 2 * len(d16.train)
    all_docs = docs(d16.train, byte_encoding()) + docs(d16.val, byte_encoding())
    assert set(all_docs) == {p.read_text() for p in corpus.glob("*.txt")}
    d32 = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert d32.train.dtype == np.uint32 and d32.meta["cache_dir"] != d16.meta["cache_dir"]


def test_cache_hit_needs_no_tokenizer(tmp_path, byte_tokenizer, monkeypatch, build_counter, make_corpus,
                                      text_cfg):
    corpus = make_corpus(tmp_path / "corpus", n_txt=10)
    d1 = prepare_data(text_cfg(corpus), byte_tokenizer, tmp_path / "cache")

    def offline(name):
        raise NetworkUnavailableError(f"tokenizer '{name}' needs to download its BPE file")

    monkeypatch.setattr(cache, "get_tokenizer", offline)
    d2 = prepare_data(text_cfg(corpus), byte_tokenizer, tmp_path / "cache")  # cached: works offline
    assert len(build_counter) == 1 and (d2.vocab_size, d2.eot) == (257, 256) and d2.train.dtype == np.uint16
    np.testing.assert_array_equal(d1.val, d2.val)
    Path(d2.meta["cache_dir"], "meta.json").unlink()
    with pytest.raises(NetworkUnavailableError):  # a rebuild does need the tokenizer
        prepare_data(text_cfg(corpus), byte_tokenizer, tmp_path / "cache")


def test_truncated_shard_is_rebuilt(tmp_path, build_counter, caplog, make_corpus, text_cfg):
    corpus = make_corpus(tmp_path / "corpus")
    d1 = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    train1 = np.array(d1.train)
    shard = Path(d1.meta["cache_dir"]) / "train.bin"
    del d1
    with open(shard, "r+b") as f:
        f.truncate(shard.stat().st_size - 6)
    with caplog.at_level(logging.WARNING, logger="llm.data.cache"):
        d2 = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert len(build_counter) == 2
    np.testing.assert_array_equal(train1, d2.train)
    assert shard.stat().st_size == d2.meta["shard_bytes"]["train"]
    assert "rebuilding" in caplog.text and "train.bin has" in caplog.text  # the warning says why


@pytest.mark.parametrize("shard,content", [("train", "random"), ("val", "random"), ("val", "zeros")])
def test_same_size_garbage_shard_is_rebuilt(tmp_path, build_counter, caplog, shard, content, make_corpus,
                                           text_cfg):
    """A shard overwritten with bytes of its own size passes the size check; the token check catches it
    (random bytes: ids past the vocabulary; zeros: ids in range, but no end-of-text at the end)."""
    corpus = make_corpus(tmp_path / "corpus")
    d1 = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    want = np.array(getattr(d1, shard))
    path = Path(d1.meta["cache_dir"]) / f"{shard}.bin"
    del d1
    size = path.stat().st_size
    garbage = np.random.default_rng(0).bytes(size) if content == "random" else bytes(size)
    path.write_bytes(garbage)
    with caplog.at_level(logging.WARNING, logger="llm.data.cache"):
        d2 = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert len(build_counter) == 2
    np.testing.assert_array_equal(getattr(d2, shard), want)
    assert int(np.asarray(d2.train).max()) < d2.vocab_size and int(np.asarray(d2.val).max()) < d2.vocab_size
    why = "outside the vocabulary" if content == "random" else "does not end with the end-of-text token"
    assert f"rebuilding {Path(d2.meta['cache_dir'])}: {shard}.bin" in caplog.text and why in caplog.text


def test_a_shard_changed_in_place_is_rebuilt_and_one_only_touched_is_not(tmp_path, build_counter, caplog,
                                                                         make_corpus, text_cfg):
    """Tokens zeroed in the middle of train.bin (ids in range, end-of-text kept: every token check passes) is not
    the data the meta's sha256 names, which a run would record as what it read: rebuilt, saying why. A shard whose
    modification time alone changed (touched, copied) still hashes to the meta's: used as it is."""
    corpus = make_corpus(tmp_path / "corpus")
    d1 = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    want = np.array(d1.train)
    path = Path(d1.meta["cache_dir"]) / "train.bin"
    del d1
    os.utime(path)
    prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert len(build_counter) == 1
    tokens = np.memmap(path, dtype=np.uint32, mode="r+")
    tokens[1:len(tokens) // 2] = 0
    tokens.flush()
    del tokens
    with caplog.at_level(logging.WARNING, logger="llm.data.cache"):
        d2 = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert len(build_counter) == 2 and "train.bin is not the file that was built" in caplog.text
    np.testing.assert_array_equal(d2.train, want)


@pytest.mark.parametrize("damage", ["missing", "garbage", "not_object", "fingerprint", "dtype", "val_shard_gone"])
def test_incomplete_or_foreign_cache_is_rebuilt(tmp_path, build_counter, damage, make_corpus, text_cfg):
    corpus = make_corpus(tmp_path / "corpus")
    d1 = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
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
    d2 = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert len(build_counter) == 2
    np.testing.assert_array_equal(d1.train, d2.train)
    np.testing.assert_array_equal(d1.val, d2.val)
    assert json.loads(meta_path.read_text())["fingerprint"] == d1.meta["fingerprint"]


def test_changed_source_gets_new_fingerprint(tmp_path, build_counter, make_corpus, docs, text_cfg):
    enc = get_tokenizer("cl100k_base")
    corpus = make_corpus(tmp_path / "corpus")
    d1 = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    edited = corpus / "doc005.txt"
    edited.write_text("This document was edited after the first build.\n")
    d2 = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert len(build_counter) == 2
    assert d2.meta["fingerprint"] != d1.meta["fingerprint"]
    assert d2.meta["cache_dir"] != d1.meta["cache_dir"]
    all_docs = docs(d2.train, enc) + docs(d2.val, enc)
    assert edited.read_text() in all_docs
    assert "Document number 5." not in "".join(all_docs)
    prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert len(build_counter) == 2


# --------------------------------------------------------------------------------------------------------------
# failed builds leave nothing behind


def test_failed_build_leaves_no_directory(tmp_path, build_counter, make_corpus, text_cfg):
    corpus = make_corpus(tmp_path / "corpus", n_txt=5)
    (corpus / "rows.jsonl").write_text('{"text": "fine"}\n{"text": broken\n')  # found only when read, in the build
    with pytest.raises(DataError, match="rows.jsonl line 2 is not JSON"):
        prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert len(build_counter) == 1, "the build ran (and failed reading the data)"
    assert list((tmp_path / "cache").iterdir()) == [], "no directory holding only .lock"
    (corpus / "rows.jsonl").unlink()
    d = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")  # and the next build works
    assert d.meta["n_docs"]["train"] + d.meta["n_docs"]["val"] == 5


def test_interrupted_build_cleans_up_only_its_empty_directory(tmp_path, monkeypatch, build_counter, make_corpus,
                                                              text_cfg):
    corpus = make_corpus(tmp_path / "corpus", n_txt=5)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    real_write = cache._write_shards
    monkeypatch.setattr(cache, "_write_shards", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []
    # a directory that holds more than the lock (here the shards of an earlier build) is left alone
    monkeypatch.setattr(cache, "_write_shards", real_write)
    d = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    cache_dir = Path(d.meta["cache_dir"])
    (cache_dir / "meta.json").unlink()
    monkeypatch.setattr(cache, "_write_shards", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert {p.name for p in cache_dir.iterdir()} == {".lock", "train.bin", "val.bin"}
    monkeypatch.setattr(cache, "_write_shards", real_write)
    np.testing.assert_array_equal(prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache").val, d.val)
    assert len(build_counter) == 4


def test_waiter_on_a_removed_lock_starts_over(tmp_path, monkeypatch):
    """A holder that gives up removes the lock file and the directory; a process that was waiting on that lock
    must notice (the file it locked has no name any more) and take a fresh lock in a recreated directory."""
    cache_dir = tmp_path / "cache" / "x"
    held, release, waiting = threading.Event(), threading.Event(), threading.Event()
    monkeypatch.setattr(cache_lock.log, "info", lambda *a, **k: waiting.set())  # logged just before blocking
    seen = []

    def holder():
        with locked_cache_dir(cache_dir):
            held.set()
            release.wait(30)
        # leaving with nothing but the lock in the directory: lock file and directory removed

    def waiter():
        with locked_cache_dir(cache_dir):
            seen.append((cache_dir.is_dir(), (cache_dir / ".lock").exists()))
            (cache_dir / "meta.json").write_text("{}")

    threads = [threading.Thread(target=holder), threading.Thread(target=waiter)]
    threads[0].start()
    assert held.wait(30)
    threads[1].start()
    assert waiting.wait(30)
    time.sleep(0.2)  # let the waiter block in flock on the holder's lock file
    assert not seen
    release.set()
    for t in threads:
        t.join(30)
    assert seen == [(True, True)]
    assert {p.name for p in cache_dir.iterdir()} == {".lock", "meta.json"}


# --------------------------------------------------------------------------------------------------------------
# concurrency


def _prepare_in_child(corpus, cache_root, barrier, queue, builds_log):
    real_write = cache._write_shards

    def slow_write(*args, **kwargs):  # widen the race window and record who tokenized
        with open(builds_log, "a") as f:
            f.write("build\n")
        time.sleep(0.3)
        return real_write(*args, **kwargs)

    cache._write_shards = slow_write
    try:
        barrier.wait(timeout=30)
        d = prepare_data({"name": "text_files", "path": corpus, "val_fraction": 0.2}, "cl100k_base", cache_root)
        queue.put(("ok", d.meta, np.asarray(d.train).tolist(), np.asarray(d.val).tolist()))
    except Exception as exc:  # pragma: no cover - reported to the parent
        queue.put(("error", repr(exc), None, None))


def test_concurrent_preparation_yields_one_valid_cache(tmp_path, make_corpus, text_cfg):
    corpus = make_corpus(tmp_path / "corpus")
    cache_root = tmp_path / "cache"
    builds_log = tmp_path / "builds.log"
    ctx = mp.get_context("fork")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_prepare_in_child,
                         args=(str(corpus), str(cache_root), barrier, queue, str(builds_log)))
             for _ in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert all(r[0] == "ok" for r in results), results
    # one process tokenized (one _write_shards call); the other waited and reused its cache
    assert builds_log.read_text().count("build") == 1
    (m1, tr1, va1), (m2, tr2, va2) = [r[1:] for r in results]
    assert m1["cache_dir"] == m2["cache_dir"] and tr1 == tr2 and va1 == va2
    cache_dirs = [p for p in cache_root.iterdir() if p.is_dir()]
    assert len(cache_dirs) == 1 and not list(cache_dirs[0].glob("*.tmp*"))
    d = prepare_data(text_cfg(corpus), "cl100k_base", cache_root)  # the parent finds it valid
    assert np.asarray(d.train).tolist() == tr1


def test_a_build_writes_no_progress_redraws_into_a_log(tmp_path, make_corpus, text_cfg, capfd):
    """Output to a file (here pytest's capture) gets log lines, never a progress bar's carriage-return redraws."""
    prepare_data(text_cfg(make_corpus(tmp_path / "corpus")), "cl100k_base", tmp_path / "cache")
    assert "\r" not in capfd.readouterr().err


def test_a_file_replaced_with_its_size_and_mtime_kept_is_read_again(tmp_path, make_corpus, text_cfg, docs):
    """The fingerprint saw each file's size and mtime only: a same-size edit copied in with its mtime kept
    (``cp -p``, ``rsync -t``, ``tar x``) left it unchanged, and the run trained on the stale cache's old text."""
    import os

    from llm.data.tokenizer import get_tokenizer

    corpus = make_corpus(tmp_path / "corpus", n_txt=12)
    first = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    doc = corpus / "doc003.txt"
    before = doc.stat()
    doc.write_text(doc.read_text().replace("lorem", "LOREM"))  # the same size
    os.utime(doc, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (doc.stat().st_size, doc.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    again = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert again.meta["cache_dir"] != first.meta["cache_dir"]
    enc = get_tokenizer("cl100k_base")
    assert any("LOREM" in d for d in docs(again.train, enc) + docs(again.val, enc))
