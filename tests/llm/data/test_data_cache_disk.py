"""Preparing the cache where it cannot be written: a full disk, a read-only cache directory, an unreadable data
file. Each is one line naming the file (exit 2 through the CLI), never a traceback."""

from __future__ import annotations

import errno
import os

import pytest

import llm.data.cache_lock as cache_lock
import llm.data.sources.file_readers as file_readers
from llm.data import DataError, prepare_data
from llm.fileio import DiskFullError


def test_a_full_disk_while_reading_the_files_is_one_line(tmp_path, make_corpus, text_cfg, monkeypatch):
    """The readers' Arrow copy fills the disk first (it is as large as the corpus): that ENOSPC came up under
    datasets' DatasetGenerationError, a traceback, where the docs promise "no space left on device", exit 2."""
    corpus = make_corpus(tmp_path / "corpus", n_txt=5)

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")  # the Arrow writer's write(): no file named
        yield

    monkeypatch.setattr(file_readers, "_txt_rows", no_space)
    with pytest.raises(DiskFullError, match=r"^no space left on device writing .*cache.text_files-cl100k_base-"):
        prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert not any((tmp_path / "cache").iterdir())  # the failed build left no directory behind


def test_a_cache_directory_it_may_not_write_is_one_line(tmp_path, make_corpus, text_cfg, monkeypatch):
    """A cache directory another user built (a shared cache) or on a read-only mount: its lock file could not be
    created, and the run ended in a PermissionError traceback."""
    corpus = make_corpus(tmp_path / "corpus", n_txt=5)
    real_open = os.open

    def refuse_lock(path, *args, **kwargs):
        if str(path).endswith(cache_lock.LOCK_NAME):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(cache_lock.os, "open", refuse_lock)
    with pytest.raises(DataError, match=r"^cache_dir=.*cache: cannot write .*text_files-cl100k_base-\w+/.lock "
                                        r"\(Permission denied\); set cache_dir= or \$ROPELAB_CACHE to a writable"):
        prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")


def test_a_jsonl_file_it_cannot_read_is_named(tmp_path, text_cfg, monkeypatch):
    """A .jsonl file is first opened while the build reads it (a .txt file's head is checked before): a permission
    error there was a DatasetGenerationError traceback that named no file."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("a", "b"):
        (corpus / f"{name}.jsonl").write_text("".join(f'{{"text": "{name} row {i}"}}\n' for i in range(5)))
    real_open = open

    def refuse(file, *args, **kwargs):
        if str(file).endswith("b.jsonl"):
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(file_readers, "open", refuse, raising=False)
    with pytest.raises(DataError, match=r"^data.path=.*: .*b.jsonl cannot be read \(Permission denied\); remove it"):
        prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")


def test_a_build_that_fails_after_a_shard_leaves_no_shard(tmp_path, make_corpus, text_cfg, monkeypatch):
    """val.bin is written before train.bin: a disk that filled on train.bin kept val.bin (and its directory), a
    shard no run can use, on the very disk the user has to free."""
    import llm.data.cache as cache

    corpus = make_corpus(tmp_path / "corpus", n_txt=12)
    real_add = cache._ShardWriter.add

    def fill_on_train(self, keys, encoded):
        if self.f.name.rsplit("/", 1)[-1].startswith("train.bin"):
            raise DiskFullError(tmp_path / "cache" / "train.bin")
        return real_add(self, keys, encoded)

    monkeypatch.setattr(cache._ShardWriter, "add", fill_on_train)
    with pytest.raises(DiskFullError):
        prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_read_only_cache_dir_holding_the_data_is_read(tmp_path, monkeypatch, caplog):
    """A shared cache this process may not write, already holding the tokens: the run reads them (a warning says a
    build there would be refused), where the config check refused every run at once."""
    from helpers import run_inprocess

    import llm.config_check as config_check

    cache = tmp_path / "shared"
    run_inprocess(tmp_path / "first", ["train.max_steps=1", "train.eval_every=1", f"cache_dir={cache}"])
    real = os.access
    monkeypatch.setattr(config_check.os, "access", lambda p, mode: False if str(p) == str(cache) else real(p, mode))
    with caplog.at_level("WARNING"):
        summary = run_inprocess(tmp_path / "second", ["train.max_steps=1", "train.eval_every=1", f"cache_dir={cache}"])
    assert summary["status"] == "completed"
    assert f"cache_dir={cache} is not writable: only data already tokenized there can be read" in caplog.text
