"""scripts/code_corpus.py: a site-packages tree turned into text_files documents."""

from __future__ import annotations

import hashlib

import pytest

from scripts.code_corpus import MAX_CHARS, MIN_CHARS, build_corpus


def test_build_corpus_copies_python_sources_and_skips_the_rest(tmp_path):
    root = tmp_path / "site"
    (root / "pkg" / "sub").mkdir(parents=True)
    keep = {root / "pkg" / "a.py": "x = 1\n" * 50, root / "pkg" / "sub" / "b.py": "def f():\n    return 2\n" * 20}
    for p, text in keep.items():
        p.write_text(text)
    (root / "pkg" / "short.py").write_text("x = 1\n")  # under MIN_CHARS
    (root / "pkg" / "huge.py").write_text("#" * (MAX_CHARS + 1))
    (root / "pkg" / "latin1.py").write_bytes(b"# caf\xe9\n" * 100)  # not UTF-8
    (root / "pkg" / "notes.txt").write_text("not python " * 50)
    n, size = build_corpus(root, tmp_path / "out")
    assert (n, size) == (2, sum(len(t) for t in keep.values()))
    for p, text in keep.items():
        assert (tmp_path / "out" / (hashlib.md5(str(p).encode()).hexdigest()[:16] + ".txt")).read_text() == text
    assert len(list((tmp_path / "out").iterdir())) == 2 and MIN_CHARS > len("x = 1\n")


def test_build_corpus_refuses_an_existing_dir(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(FileExistsError):
        build_corpus(tmp_path, tmp_path / "out")


def test_build_corpus_refuses_a_missing_root_before_writing(tmp_path):
    with pytest.raises(NotADirectoryError, match="--root .* is not a directory"):
        build_corpus(tmp_path / "nope", tmp_path / "out")
    assert not (tmp_path / "out").exists()
