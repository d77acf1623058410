"""Sources (llm.data.sources) and the document split (llm.data.split): pystdlib, tinystories, the registry."""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

import llm.data.sources.pystdlib as pystdlib
import llm.data.sources.tinystories as tinystories
from llm.data import SOURCES, check_data_config, prepare_data
from llm.data.split import val_score
from llm.data.tokenizer import NetworkUnavailableError, get_tokenizer


def test_registry_is_the_one_list_of_sources():
    assert list(SOURCES) == ["pystdlib", "tinystories", "text_files", "code_corpus", "hf_dataset"]
    for name, kind in SOURCES.items():
        assert callable(kind.check) and callable(kind.build) and "name" not in kind.keys, name
    with pytest.raises(ValueError, match="choices: " + ", ".join(SOURCES)):
        check_data_config({"name": "nope"}, "cl100k_base")


def test_val_split_fixed_and_disjoint_by_document(tmp_path, make_corpus, docs, text_cfg):
    enc = get_tokenizer("cl100k_base")
    corpus = make_corpus(tmp_path / "corpus", n_txt=40)
    d = prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")
    train_docs, val_docs = docs(d.train, enc), docs(d.val, enc)
    all_docs = {p.read_text() for p in corpus.glob("*.txt")}
    assert set(train_docs).isdisjoint(val_docs)
    assert set(train_docs) | set(val_docs) == all_docs
    assert 1 <= len(val_docs) < len(train_docs)
    # membership follows the hash of the document's path, so it is the same for a superset of the files,
    # in another directory, with another cache
    bigger = make_corpus(tmp_path / "bigger", n_txt=60)
    d_big = prepare_data(text_cfg(bigger), "cl100k_base", tmp_path / "cache2")
    val_big = set(docs(d_big.val, enc))
    assert set(val_docs) == {t for t in val_big if t in all_docs}
    # and it is what the rule says: path hash below val_fraction
    expected = {(corpus / f"doc{i:03d}.txt").read_text() for i in range(40)
                if val_score(f"doc{i:03d}.txt") < 0.2}
    assert set(val_docs) == expected


def test_pystdlib_small(tmp_path, build_counter, docs):
    enc = get_tokenizer("cl100k_base")
    cfg = {"name": "pystdlib", "val_fraction": 0.05, "max_files": 20}
    d = prepare_data(cfg, "cl100k_base", tmp_path)
    root = pystdlib.stdlib_root()
    rels = pystdlib.stdlib_files(root, 20)
    assert len(rels) == 20 and rels == sorted(rels)
    assert not any("site-packages" in r or "dist-packages" in r for r in pystdlib.stdlib_files(root, None))
    texts = {r: (root / r).read_bytes().decode("utf-8", errors="replace") for r in rels}
    # split by path, each text once: the stdlib has files with identical contents (__phello__/__init__.py and
    # __phello__/spam.py), which the first path keeps
    firsts: dict[str, str] = {}
    for r, t in texts.items():
        firsts.setdefault(t, r)
    texts = {r: t for r, t in texts.items() if t and firsts[t] == r}
    val_paths = [r for r in texts if val_score(r) < 0.05] or [min(texts, key=val_score)]
    train_paths = [r for r in texts if r not in val_paths]
    assert Counter(docs(d.val, enc)) == Counter(texts[r] for r in val_paths)
    assert Counter(docs(d.train, enc)) == Counter(texts[r] for r in train_paths)
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
    monkeypatch.setattr(pystdlib, "stdlib_root", lambda: fake)
    assert pystdlib.stdlib_files(fake, None) == ["json/__init__.py", "os.py"]
    fp1 = pystdlib.build({"name": "pystdlib"}).fingerprint
    assert pystdlib.build({"name": "pystdlib"}).fingerprint == fp1
    (fake / "os.py").write_text("import sys, os\n")
    fp2 = pystdlib.build({"name": "pystdlib"}).fingerprint
    assert fp2 != fp1
    assert pystdlib.build({"name": "pystdlib", "val_fraction": 0.1}).fingerprint != fp2
    assert pystdlib.build({"name": "pystdlib", "max_files": 1}).fingerprint != fp2


def test_max_docs_and_too_few_documents(tmp_path, make_corpus, docs, text_cfg):
    enc = get_tokenizer("cl100k_base")
    corpus = make_corpus(tmp_path / "corpus", n_txt=20)
    d = prepare_data(text_cfg(corpus, max_docs=5), "cl100k_base", tmp_path / "cache")
    assert d.meta["n_docs"]["train"] + d.meta["n_docs"]["val"] == 5
    assert len(docs(d.val, enc)) >= 1
    with pytest.raises(ValueError, match="needs >= 2"):
        prepare_data(text_cfg(corpus / "doc000.txt"), "cl100k_base", tmp_path / "cache")


# --------------------------------------------------------------------------------------------------------------
# tinystories (the hub simulated)


def _tiny_stories():
    import datasets

    train = datasets.Dataset.from_dict({"text": [f"Once upon a time there was story {i}." for i in range(12)]})
    val = datasets.Dataset.from_dict({"text": [f"A validation story {i}." for i in range(3)]})
    return datasets.DatasetDict({"train": train, "validation": val})


def test_offline_dataset_failure_is_fast_and_clear(tmp_path, monkeypatch):
    import datasets

    cfg = {"name": "tinystories"}
    monkeypatch.setattr(tinystories, "hub_reachable", lambda timeout=5.0: False)
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
        try:
            raise OSError("[Errno -2] Name or service not known")
        except OSError as exc:
            raise ConnectionError("Couldn't reach 'roneneldan/TinyStories' on the Hub (LocalEntryNotFoundError)") \
                from exc

    monkeypatch.setattr(tinystories, "hub_reachable", lambda timeout=5.0: True)
    monkeypatch.setattr(datasets, "load_dataset", hub_down)
    with pytest.raises(NetworkUnavailableError, match="offline choices: data=pystdlib") as err:
        prepare_data(cfg, "cl100k_base", tmp_path)
    assert err.value.__cause__ is None and err.value.__suppress_context__, "no chained tracebacks"

    # other errors are not disguised as network failures
    def broken(*args, **kwargs):
        raise KeyError("something else")

    monkeypatch.setattr(datasets, "load_dataset", broken)
    with pytest.raises(KeyError):
        prepare_data(cfg, "cl100k_base", tmp_path)
    assert list(tmp_path.iterdir()) == [], "failed builds leave no cache directories"


def test_tinystories_cache_works_offline(tmp_path, monkeypatch, build_counter, docs):
    import datasets

    enc = get_tokenizer("cl100k_base")
    monkeypatch.setattr(tinystories, "hub_reachable", lambda timeout=5.0: True)
    monkeypatch.setattr(datasets, "load_dataset", lambda path, **kw: _tiny_stories())
    d = prepare_data({"name": "tinystories", "max_docs": 10}, "cl100k_base", tmp_path)
    assert docs(d.train, enc) == [f"Once upon a time there was story {i}." for i in range(10)]
    assert docs(d.val, enc) == [f"A validation story {i}." for i in range(3)]  # the dataset's validation split
    # later, offline: the cache is found without touching the network
    monkeypatch.setattr(tinystories, "hub_reachable", lambda timeout=5.0: False)
    d2 = prepare_data({"name": "tinystories", "max_docs": 10}, "cl100k_base", tmp_path)
    assert len(build_counter) == 1
    np.testing.assert_array_equal(d.train, d2.train)


def test_pystdlib_identical_files_are_one_document(tmp_path, monkeypatch, docs):
    """Two stdlib files with one text (the stdlib's __phello__/__init__.py and __phello__/spam.py) are one
    document, so the split by path cannot put that text in both train and val."""
    enc = get_tokenizer("cl100k_base")
    fake = tmp_path / "stdlib"
    fake.mkdir()
    for i in range(30):
        (fake / f"mod{i:02d}.py").write_text(f"x = {i}\n" * 20)
    for i in range(30):
        (fake / f"copy{i:02d}.py").write_text(f"x = {i}\n" * 20)
    monkeypatch.setattr(pystdlib, "stdlib_root", lambda: fake)
    d = prepare_data({"name": "pystdlib", "val_fraction": 0.3}, "cl100k_base", tmp_path / "cache")
    train, val = docs(d.train, enc), docs(d.val, enc)
    assert sorted(train + val) == sorted(f"x = {i}\n" * 20 for i in range(30))
    assert not set(train) & set(val)


def test_pystdlib_files_differing_in_line_endings_alone_are_one_document(tmp_path, monkeypatch, docs):
    """A stdlib file and a copy of it with CRLF (or CR) line endings are one text, kept as read under its first path:
    as two documents the split by path could put one in train and one in val."""
    enc = get_tokenizer("cl100k_base")
    fake = tmp_path / "stdlib"
    fake.mkdir()
    texts = [f"x = {i}\r\ny = {i}\r\n" * 10 for i in range(30)]
    for i, text in enumerate(texts):
        (fake / f"a{i:02d}.py").write_bytes(text.encode())
        (fake / f"b{i:02d}.py").write_bytes(text.replace("\r\n", "\n").encode())
        (fake / f"c{i:02d}.py").write_bytes(text.replace("\r\n", "\r").encode())
    monkeypatch.setattr(pystdlib, "stdlib_root", lambda: fake)
    d = prepare_data({"name": "pystdlib", "val_fraction": 0.3}, "cl100k_base", tmp_path / "cache")
    train, val = docs(d.train, enc), docs(d.val, enc)
    assert sorted(train + val) == sorted(texts)  # each text once, its CRLF as read
    assert not {t.replace("\r\n", "\n") for t in train} & {t.replace("\r\n", "\n") for t in val}


@pytest.mark.parametrize("source", ["pystdlib", "text_files", "hf_dataset"])
def test_the_repeat_rule_is_in_the_fingerprint(tmp_path, make_corpus, monkeypatch, source):
    """A cache built under an older rule of what a repeated text is (the exact text) may hold copies that differ in
    line endings alone: the rule's version is in the fingerprint of each source that reads each text once."""
    import importlib

    module = importlib.import_module(f"llm.data.sources.{source}")
    corpus = make_corpus(tmp_path / "corpus", n_txt=3)
    cfg = {"pystdlib": {"name": "pystdlib"}, "text_files": {"name": "text_files", "path": str(corpus)},
           "hf_dataset": {"name": "hf_dataset", "hf_path": str(corpus / "doc000.txt")}}[source]
    before = module.build(cfg).fingerprint
    monkeypatch.setattr(module, "DISTINCT_TEXTS_RULE", 1)
    assert module.build(cfg).fingerprint != before
