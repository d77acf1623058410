"""``data=hf_dataset`` on local datasets made here (no network): its splits, streaming, fields and errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import llm.data.sources.hf_dataset as hf_dataset
from llm.data import DataError, NetworkUnavailableError, check_data_config, data_fingerprint, prepare_data
from llm.data.tokenizer import get_tokenizer

TRAIN = [f"Story {i}: the fox jumped over the dog {i} times. " * 3 for i in range(60)]
VALIDATION = [f"Held-out story {i} about a cat. " * 4 for i in range(12)]


@pytest.fixture
def dataset_dir(tmp_path: Path) -> Path:
    """A dataset as the hub stores one: parquet files named by split, an id and a text column."""
    root = tmp_path / "ds"
    (root / "data").mkdir(parents=True)
    pq.write_table(pa.table({"uid": [f"t{i}" for i in range(60)], "story": TRAIN}),
                   root / "data" / "train-00000-of-00001.parquet")
    pq.write_table(pa.table({"uid": [f"v{i}" for i in range(12)], "story": VALIDATION}),
                   root / "data" / "validation-00000-of-00001.parquet")
    return root


def _cfg(path: Path, **kw) -> dict:
    return {"name": "hf_dataset", "hf_path": str(path), "text_field": "story", **kw}


def test_the_datasets_own_validation_split(tmp_path, dataset_dir, docs):
    d = prepare_data(_cfg(dataset_dir, val_split="validation"), "cl100k_base", tmp_path / "cache")
    enc = get_tokenizer("cl100k_base")
    assert docs(d.train, enc) == TRAIN and docs(d.val, enc) == VALIDATION
    fp = data_fingerprint(d.meta)
    assert fp["source"] == "hf_dataset" and fp["revision"] is None and fp["split"]["val_documents"] == 12


def test_a_split_by_id_when_the_dataset_has_no_val_split(tmp_path, dataset_dir, docs):
    d = prepare_data(_cfg(dataset_dir, id_field="uid", val_fraction=0.2), "cl100k_base", tmp_path / "cache")
    enc = get_tokenizer("cl100k_base")
    train, val = docs(d.train, enc), docs(d.val, enc)
    assert sorted(train + val) == sorted(TRAIN) and set(train).isdisjoint(val) and 0 < len(val) < 30
    assert d.meta["composition"]["val"]["largest_document"].startswith("id:t")


def test_a_single_local_file(tmp_path, dataset_dir, docs):
    parquet = dataset_dir / "data" / "train-00000-of-00001.parquet"
    d = prepare_data(_cfg(parquet, id_field="uid"), "cl100k_base", tmp_path / "cache")
    enc = get_tokenizer("cl100k_base")
    assert sorted(docs(d.train, enc) + docs(d.val, enc)) == sorted(TRAIN)
    (tmp_path / "notes.md").write_text("# notes\n")
    with pytest.raises(DataError, match="is a file datasets cannot read as one"):
        check_data_config(_cfg(tmp_path / "notes.md"), "cl100k_base")


def test_streaming_reads_the_same_tokens(tmp_path, dataset_dir):
    cfg = _cfg(dataset_dir, val_split="validation", max_docs=25)
    read = prepare_data(cfg, "cl100k_base", tmp_path / "a")
    streamed = prepare_data({**cfg, "streaming": True}, "cl100k_base", tmp_path / "b")
    np.testing.assert_array_equal(read.train, streamed.train)
    np.testing.assert_array_equal(read.val, streamed.val)
    assert data_fingerprint(read.meta)["id"] == data_fingerprint(streamed.meta)["id"]
    assert read.meta["n_docs"] == {"train": 25, "val": 12}


def test_bad_settings_are_named(tmp_path, dataset_dir, monkeypatch):
    with pytest.raises(DataError, match="data.hf_path is required"):
        check_data_config({"name": "hf_dataset"}, "cl100k_base")
    with pytest.raises(DataError, match="data.streaming=yes must be true or false"):
        check_data_config(_cfg(dataset_dir, streaming="yes"), "cl100k_base")
    for missing in (str(tmp_path / "no_such_dir"), "./no_such_file.jsonl"):
        with pytest.raises(DataError, match=f"data.hf_path={missing} does not exist"):
            check_data_config({"name": "hf_dataset", "hf_path": missing}, "cl100k_base")
    with pytest.raises(DataError, match=r"data.text_field=body is not a column .*\(columns: uid, story\)"):
        prepare_data({**_cfg(dataset_dir), "text_field": "body"}, "cl100k_base", tmp_path / "c")
    monkeypatch.setattr(hf_dataset, "hub_reachable", lambda timeout=5.0: False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(NetworkUnavailableError, match="data.hf_path=someone/corpus .*unreachable"):
        prepare_data({"name": "hf_dataset", "hf_path": "someone/corpus", "revision": "abc123"}, "cl100k_base",
                     tmp_path / "d")


@pytest.mark.parametrize("streaming", [False, True])
def test_a_text_column_that_holds_no_strings_is_named(tmp_path, streaming):
    """An int column was a 61-line AttributeError from the split (``'int' object has no attribute 'encode'``):
    one line naming data.text_field, as data=text_files says it."""
    table = tmp_path / "numbers.parquet"
    pq.write_table(pa.table({"n": list(range(40)), "story": TRAIN[:40]}), table)
    with pytest.raises(DataError, match=rf"^data.text_field=n: column n of {table} holds int64 values, not strings "
                                        r"\(the documents' text\); name the text column$"):
        prepare_data({**_cfg(table), "text_field": "n", "streaming": streaming}, "cl100k_base", tmp_path / "c")


def test_a_streamed_column_of_unknown_type_is_checked_row_by_row(tmp_path, monkeypatch):
    """A streamed dataset need not know its columns' types: the rows are checked as they come."""
    table = tmp_path / "numbers.parquet"
    pq.write_table(pa.table({"n": list(range(40)), "story": TRAIN[:40]}), table)
    monkeypatch.setattr(hf_dataset, "_check_text_column", lambda *a: None)  # as when the features are unknown
    with pytest.raises(DataError, match=rf"^data.text_field=n: column n of {table} holds int values \(row 0\), not "
                                        "strings"):
        prepare_data({**_cfg(table), "text_field": "n", "streaming": True}, "cl100k_base", tmp_path / "c")


def test_validating_on_the_training_split_is_refused(dataset_dir):
    """data.val_split=train (data.split's default) made the val loss a train loss without a word."""
    for cfg in (_cfg(dataset_dir, val_split="train"), _cfg(dataset_dir, split="validation", val_split="validation")):
        with pytest.raises(DataError, match=r"^data.val_split=\w+ is data.split: the model would be validated on "
                                            r"its training documents; name another split, or data.val_split=null"):
            check_data_config(cfg, "cl100k_base")
    check_data_config(_cfg(dataset_dir, val_split="validation"), "cl100k_base")


def test_a_text_repeated_under_two_ids_is_one_document(tmp_path, docs):
    """Split by data.id_field, a text stored under several ids landed on both sides: val text was train text."""
    import json

    enc = get_tokenizer("cl100k_base")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": i, "text": f"story {i % 10} once upon a time"}) + "\n"
                            for i in range(40)))
    d = prepare_data({"name": "hf_dataset", "hf_path": str(rows), "id_field": "id", "val_fraction": 0.3},
                     "cl100k_base", tmp_path / "cache")
    train, val = docs(d.train, enc), docs(d.val, enc)
    assert sorted(train + val) == sorted(f"story {i} once upon a time" for i in range(10))
    assert not set(train) & set(val)


def test_local_data_datasets_cannot_read_is_one_line(tmp_path):
    """An empty local dir (EmptyDatasetError) or a .jsonl that is not JSON (DatasetGenerationError) ended the
    build in a traceback."""
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match=r"^data.hf_path=.*empty holds no data files datasets can load"):
        prepare_data({"name": "hf_dataset", "hf_path": str(empty)}, "cl100k_base", tmp_path / "cache")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"hello \xff\xfe world\n")
    with pytest.raises(DataError, match=r"^data.hf_path=.*bad.jsonl: reading split 'train' failed"):
        prepare_data({"name": "hf_dataset", "hf_path": str(bad)}, "cl100k_base", tmp_path / "cache")


def test_a_local_file_replaced_with_its_mtime_kept_is_read_anew(tmp_path, docs):
    """datasets' own cache knows a local file by its mtime: a file replaced with its mtime kept (cp -p, rsync -t)
    changed the fingerprint (its size) yet the new cache held the old file's tokens."""
    import os

    enc = get_tokenizer("cl100k_base")
    root = tmp_path / "local"
    root.mkdir()
    data = root / "train.parquet"
    pq.write_table(pa.table({"text": [f"old document {i} " * 5 for i in range(30)]}), data)
    st = os.stat(data)
    cfg = {"name": "hf_dataset", "hf_path": str(root), "val_fraction": 0.2}
    prepare_data(cfg, "cl100k_base", tmp_path / "cache")
    new = [f"the replacement text number {i} " * 5 for i in range(30)]
    pq.write_table(pa.table({"text": new}), data)
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))
    d = prepare_data(cfg, "cl100k_base", tmp_path / "cache")
    assert sorted(docs(d.train, enc) + docs(d.val, enc)) == sorted(new)


def test_a_val_split_that_repeats_train_text_is_said(tmp_path, caplog):
    """A dataset's own val split is taken as it is; where some of its documents are train documents word for word
    (a leak in the dataset), the build says how many: it was silent."""
    import logging

    root = tmp_path / "leaky"
    (root / "data").mkdir(parents=True)
    train = [f"train story number {i} " * 4 for i in range(30)]
    pq.write_table(pa.table({"story": train}), root / "data" / "train-00000-of-00001.parquet")
    pq.write_table(pa.table({"story": [train[3], train[7], "a story of its own " * 4]}),
                   root / "data" / "validation-00000-of-00001.parquet")
    with caplog.at_level(logging.WARNING, logger="llm.data.sources.hf_dataset"):
        prepare_data(_cfg(root, val_split="validation"), "cl100k_base", tmp_path / "cache")
    said = [r.getMessage() for r in caplog.records if "word for word" in r.getMessage()]
    assert len(said) == 1 and "2 document(s) of data.val_split=validation are also in data.split=train" in said[0]


def test_texts_differing_in_line_endings_alone_are_one_document(tmp_path, docs, caplog):
    """Split by data.id_field, a text stored under two ids, once with CRLF line endings, landed on both sides; kept
    once now (as read, under its first id). Beside the dataset's own val split such a copy is said."""
    import json
    import logging

    enc = get_tokenizer("cl100k_base")
    texts = [f"story {i}\r\nonce upon a time\r\n" for i in range(10)]
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": i, "text": texts[i % 10] if i < 10 else
                                        texts[i % 10].replace("\r\n", "\n")}) + "\n" for i in range(40)))
    d = prepare_data({"name": "hf_dataset", "hf_path": str(rows), "id_field": "id", "val_fraction": 0.3},
                     "cl100k_base", tmp_path / "cache")
    train, val = docs(d.train, enc), docs(d.val, enc)
    assert sorted(train + val) == sorted(texts)

    root = tmp_path / "leaky"
    (root / "data").mkdir(parents=True)
    train_texts = [f"train story number {i}\n" * 4 for i in range(30)]
    pq.write_table(pa.table({"story": train_texts}), root / "data" / "train-00000-of-00001.parquet")
    pq.write_table(pa.table({"story": [train_texts[3].replace("\n", "\r\n"), "a story of its own\n" * 4]}),
                   root / "data" / "validation-00000-of-00001.parquet")
    with caplog.at_level(logging.WARNING, logger="llm.data.sources.hf_dataset"):
        prepare_data(_cfg(root, val_split="validation"), "cl100k_base", tmp_path / "cache2")
    said = [r.getMessage() for r in caplog.records if "word for word" in r.getMessage()]
    assert len(said) == 1 and "1 document(s) of data.val_split=validation" in said[0]
