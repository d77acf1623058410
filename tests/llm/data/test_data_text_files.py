"""data=text_files (llm.data.sources.text_files, file_readers): formats, and refusing what is not text."""

from __future__ import annotations

import json
import os

import pytest

from llm.data import DataError, check_data_config, prepare_data
from llm.data.tokenizer import get_tokenizer


def test_text_files_mixed_formats(tmp_path, docs, text_cfg):
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
    d = prepare_data(text_cfg(corpus, text_field="body", val_fraction=0.3), "cl100k_base", tmp_path / "cache")
    all_docs = docs(d.train, enc) + docs(d.val, enc)
    expected = ["plain text file one\nwith two lines\n", "plain text file two"]
    expected += [f"json row {i}" for i in range(6)] + [f"parquet row {i}" for i in range(5)]
    assert sorted(all_docs) == sorted(expected)  # the empty file and the .md file are not documents
    assert d.meta["n_docs"]["train"] + d.meta["n_docs"]["val"] == 13
    # a single file works too
    single = prepare_data(text_cfg(corpus / "rows.jsonl", text_field="body", id_field="id"), "cl100k_base",
                          tmp_path / "cache")
    assert sorted(docs(single.train, enc) + docs(single.val, enc)) == [f"json row {i}" for i in range(6)]
    with pytest.raises(ValueError, match="data.text_field=text is not a column"):
        prepare_data(text_cfg(corpus / "rows.jsonl"), "cl100k_base", tmp_path / "cache")


def test_a_text_repeated_under_another_name_is_read_once(tmp_path, docs, text_cfg, caplog):
    """A folder holding two copies of the same files (a backup inside the corpus): each text is one document, so
    no val text is also train text; the log says how many copies were left out."""
    enc = get_tokenizer("cl100k_base")
    corpus = tmp_path / "corpus"
    for copy in ("a", "b"):
        (corpus / copy).mkdir(parents=True)
        for i in range(20):
            (corpus / copy / f"doc{i}.txt").write_text(f"document number {i} " * 5)
    (corpus / "b" / "doc0.txt").write_text("an edited copy is another text")
    with caplog.at_level("INFO", logger="llm.data.sources.text_files"):
        d = prepare_data(text_cfg(corpus, val_fraction=0.3), "cl100k_base", tmp_path / "cache")
    train, val = docs(d.train, enc), docs(d.val, enc)
    assert len(train) + len(val) == 21 and not set(train) & set(val)
    assert "19 document(s) repeat an earlier one's text exactly" in caplog.text


def test_text_is_read_as_text_mode_would(tmp_path, docs, text_cfg):
    """Universal newlines (as text-mode open() gives them), a byte-order mark kept, blank .jsonl lines and
    null texts skipped, ids taken as keys."""
    enc = get_tokenizer("cl100k_base")
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "crlf.txt").write_bytes(b"line one\r\nline two\rline three\n")
    (corpus / "bom.txt").write_bytes("\ufeffwith a byte-order mark".encode())
    (corpus / "rows.jsonl").write_bytes(b'\xef\xbb\xbf{"text": "first", "id": 1}\n\n{"text": null, "id": 2}\r\n'
                                        b'  \n{"text": "fourth \\u00e9", "id": "x"}\n')
    d = prepare_data(text_cfg(corpus, id_field="id", val_fraction=0.5), "cl100k_base", tmp_path / "cache")
    assert sorted(docs(d.train, enc) + docs(d.val, enc)) == sorted(
        ["line one\nline two\nline three\n", "\ufeffwith a byte-order mark", "first", "fourth \u00e9"])


# --------------------------------------------------------------------------------------------------------------
# content that is not text is refused, naming the file (and the line)


def _refused(tmp_path, cfg) -> str:
    """The one-line DataError message of preparing ``cfg``; the failed build leaves no cache directory."""
    with pytest.raises(DataError) as err:
        prepare_data(cfg, "cl100k_base", tmp_path / "cache")
    msg = str(err.value)
    assert "\n" not in msg and err.value.__cause__ is None
    assert not (tmp_path / "cache").exists() or list((tmp_path / "cache").iterdir()) == []
    return msg


def test_binary_files_are_refused(tmp_path, text_cfg):
    corpus = tmp_path / "bin"
    corpus.mkdir()
    (corpus / "a.txt").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    (corpus / "b.txt").write_bytes(bytes(range(256)))
    msg = _refused(tmp_path, text_cfg(corpus))
    assert msg == (f"data.path={corpus}: {corpus / 'a.txt'} is not UTF-8 text (byte 0x89 at offset 0); "
                   "text_files reads UTF-8 .txt/.jsonl and .parquet files")


def test_a_binary_txt_file_is_found_before_any_tokenizing(tmp_path, make_corpus, text_cfg, build_counter):
    """A binary file named .txt among many is refused when the source is built, from its first bytes: no cache
    build starts (before, it was found only while the corpus was read for tokenizing, minutes in). A UTF-8
    character cut at the end of the bytes read is not mistaken for binary."""
    from llm.data.sources.text_files import HEAD_BYTES

    corpus = make_corpus(tmp_path / "corpus", n_txt=20)
    (corpus / "zz_image.txt").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    (corpus / "m_cut.txt").write_bytes(b"a" * (HEAD_BYTES - 1) + "\u00e9 tail".encode())  # 2-byte char cut at the end
    msg = _refused(tmp_path, text_cfg(corpus))
    assert msg.startswith(f"data.path={corpus}: {corpus / 'zz_image.txt'} is not UTF-8 text (byte 0x89 at offset 0)")
    assert build_counter == [], "refused before the cache build began"


def test_one_undecodable_file_among_many_is_refused(tmp_path, make_corpus, text_cfg):
    """One bad file is enough: training on its replacement characters would be silent noise. The message
    names the file and the byte, so it can be converted or removed."""
    corpus = make_corpus(tmp_path / "corpus", n_txt=20)
    (corpus / "sub").mkdir()
    (corpus / "sub" / "latin1.txt").write_bytes("caf\u00e9 au lait".encode("latin-1"))
    msg = _refused(tmp_path, text_cfg(corpus))
    assert msg.startswith(f"data.path={corpus}: {corpus / 'sub' / 'latin1.txt'} is not UTF-8 text "
                          "(byte 0xe9 at offset 3)")


def test_nul_bytes_mean_binary(tmp_path, make_corpus, text_cfg):
    corpus = make_corpus(tmp_path / "corpus", n_txt=3)
    (corpus / "utf16.txt").write_bytes("utf-16 text".encode("utf-16-le"))  # valid UTF-8, but NUL every 2nd byte
    msg = _refused(tmp_path, text_cfg(corpus))
    assert f"{corpus / 'utf16.txt'} holds a NUL byte at offset 1, so it is binary (or UTF-16)" in msg


def test_directory_without_text_files_fails_before_any_work(tmp_path, text_cfg):
    corpus = tmp_path / "blobs"
    corpus.mkdir()
    (corpus / "a.bin").write_bytes(bytes(100))
    (corpus / "b.bin").write_bytes(bytes(100))
    (corpus / ".hidden.txt").write_text("hidden files are skipped")
    with pytest.raises(DataError) as err:
        check_data_config(text_cfg(corpus), "cl100k_base")
    assert str(err.value) == (f"data.path={corpus} contains no .txt/.jsonl/.parquet files (only 2 other file(s), "
                              "e.g. a.bin; hidden files are skipped)")
    assert _refused(tmp_path, text_cfg(corpus)) == str(err.value)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match=r"contains no \.txt/\.jsonl/\.parquet files \(no files;"):
        check_data_config(text_cfg(empty), "cl100k_base")


GOOD = '{"text": "a fine row", "id": 1}\n'


@pytest.mark.parametrize("bad_line,expected", [
    (b"not json at all\n", "{where}: {file} line 3 is not JSON (Expecting value at column 1)"),
    (b'{"text": "unterminated\n', "{where}: {file} line 3 is not JSON (Unterminated string starting at column 10)"),
    (b'{"body": "no text field", "id": 3}\n',
     "data.text_field=text is not a column of {file} line 3 (its fields: body, id)"),
    (b'["an", "array"]\n', "{where}: {file} line 3 is a JSON array, not an object with a 'text' field"),
    (b'{"text": 42, "id": 3}\n', "data.text_field=text in {file} line 3 is a JSON number, not a string"),
    (b'{"text": "caf\xe9", "id": 3}\n', "{where}: {file} line 3 is not UTF-8 text (byte 0xe9 at column 14)"),
    (b'{"text": "no id"}\n', "data.id_field=id is not a column of {file} line 3 (its fields: text)"),
])
def test_malformed_jsonl_names_file_and_line(tmp_path, bad_line, expected, text_cfg):
    corpus = tmp_path / "rows"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "a.jsonl").write_text(GOOD * 3)
    bad = corpus / "sub" / "b.jsonl"
    bad.write_bytes(GOOD.encode() + b"\n" + bad_line + GOOD.encode())  # line 2 is blank: still counted
    msg = _refused(tmp_path, text_cfg(corpus, id_field="id"))
    assert msg.startswith(expected.format(where=f"data.path={corpus}", file=bad))


def test_unreadable_parquet_is_named(tmp_path, text_cfg):
    import pyarrow as pa
    import pyarrow.parquet as pq

    corpus = tmp_path / "pq"
    corpus.mkdir()
    pq.write_table(pa.table({"text": ["one", "two", "three"]}), corpus / "good.parquet")
    (corpus / "junk.parquet").write_bytes(b"this is not parquet" * 10)
    msg = _refused(tmp_path, text_cfg(corpus))
    assert msg.startswith(f"data.path={corpus}: {corpus / 'junk.parquet'} is not a readable Parquet file (")
    (corpus / "junk.parquet").unlink()
    pq.write_table(pa.table({"body": ["x", "y"]}), corpus / "other.parquet")
    msg = _refused(tmp_path, text_cfg(corpus))
    assert msg == f"data.text_field=text is not a column of {corpus / 'other.parquet'} (columns: body)"


def test_a_parquet_text_column_of_numbers_is_refused(tmp_path, text_cfg):
    """A .parquet text column of ints ended the build in an AttributeError from the split's hashing."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    corpus = tmp_path / "nums"
    corpus.mkdir()
    pq.write_table(pa.table({"text": list(range(20))}), corpus / "rows.parquet")
    with pytest.raises(DataError, match=r"^data.text_field=text: column text of .*rows.parquet holds int64 values, "
                                        "not strings"):
        prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")


@pytest.mark.parametrize("field", ["text", "id"])
def test_a_jsonl_lone_surrogate_escape_is_refused_by_line(tmp_path, text_cfg, field):
    """A JSON escape such as \\ud800 decodes to a lone surrogate Arrow cannot store: it ended the build in a
    DatasetGenerationError naming neither file nor line."""
    corpus = tmp_path / "esc"
    corpus.mkdir()
    rows = [json.dumps({"text": f"row {i} of some text", "id": f"r{i}"}) for i in range(10)]
    rows.insert(4, '{"text": "bad \\ud800 row", "id": "x"}' if field == "text" else
                '{"text": "a fine row", "id": "bad \\udc80"}')
    (corpus / "rows.jsonl").write_text("\n".join(rows) + "\n")
    key = "text_field=text" if field == "text" else "id_field=id"
    with pytest.raises(DataError, match=rf"^data.{key} in .*rows.jsonl line 5 holds the lone UTF-16 surrogate"):
        prepare_data(text_cfg(corpus, id_field="id"), "cl100k_base", tmp_path / "cache")


def test_a_broken_link_is_refused_naming_it(tmp_path, make_corpus, text_cfg):
    """A .txt link whose target is gone ended make_source in a FileNotFoundError traceback."""
    corpus = make_corpus(tmp_path / "corpus", n_txt=5)
    (corpus / "gone.txt").symlink_to(tmp_path / "nowhere.txt")
    with pytest.raises(DataError, match=r"^data.path=.*: .*gone.txt cannot be read \(No such file or directory\)"):
        prepare_data(text_cfg(corpus), "cl100k_base", tmp_path / "cache")


def test_a_named_pipe_under_a_text_name_is_not_a_document(tmp_path, make_corpus, text_cfg):
    """A FIFO named like a .txt file was listed, and the build's first read of it blocked forever."""
    import os

    from llm.data.sources.text_files import text_files_at

    corpus = make_corpus(tmp_path / "corpus", n_txt=5)
    os.mkfifo(corpus / "pipe.txt")
    _, rels = text_files_at(text_cfg(corpus))
    assert "pipe.txt" not in rels and len(rels) == 5


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_a_row_without_an_id_is_refused_naming_it(tmp_path, text_cfg, kind):
    """Rows of one id stay on one side of the split: every row whose id was null got the one key 'id:None', so
    all of them landed on the same side, silently."""
    corpus = tmp_path / "rows"
    corpus.mkdir()
    ids = [f"r{i}" for i in range(10)]
    ids[3] = None
    texts = [f"row {i} of some text" for i in range(10)]
    if kind == "jsonl":
        (corpus / "rows.jsonl").write_text("".join(json.dumps({"text": t, "id": i}) + "\n"
                                                   for t, i in zip(texts, ids, strict=True)))
        at = r"rows.jsonl line 4"
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"text": texts, "id": ids}), corpus / "rows.parquet")
        at = r"row 3 of data.path=.*'s .parquet files"
    with pytest.raises(DataError, match=rf"^data.id_field=id is null in .*{at}: every row needs an id"):
        prepare_data(text_cfg(corpus, id_field="id"), "cl100k_base", tmp_path / "cache")


def test_a_linked_directory_is_searched_once(tmp_path, make_corpus, text_cfg):
    """os.walk skips linked directories: a corpus of links to its parts listed none of their files, silently (the
    build then trained on what lay beside the links, or refused "1 non-empty document(s)"). A link cycle ends."""
    from llm.data.sources.text_files import text_files_at

    part = make_corpus(tmp_path / "part", n_txt=4)
    corpus = make_corpus(tmp_path / "corpus", n_txt=1)
    (corpus / "part").symlink_to(part, target_is_directory=True)
    (corpus / "again").symlink_to(part, target_is_directory=True)  # the same directory twice: searched once
    (corpus / "loop").symlink_to(corpus, target_is_directory=True)  # an ancestor: not searched again
    _, rels = text_files_at(text_cfg(corpus))
    assert rels == ["again/doc000.txt", "again/doc001.txt", "again/doc002.txt", "again/doc003.txt", "doc000.txt"]


def test_files_of_other_suffixes_are_counted_in_a_warning(tmp_path, make_corpus, text_cfg, caplog):
    """A folder of code with a few .txt files trained on those few alone, and nothing said that the rest was
    never read."""
    from llm.data.sources.text_files import text_files_at

    corpus = make_corpus(tmp_path / "corpus", n_txt=2)
    for i in range(3):
        (corpus / f"mod{i}.py").write_text("x = 1\n")
    (corpus / "Makefile").write_text("all:\n")
    with caplog.at_level("WARNING"):
        _, rels = text_files_at(text_cfg(corpus))
    assert rels == ["doc000.txt", "doc001.txt"]
    assert "4 file(s) of other suffixes are not read (3 .py, 1 (no suffix))" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        text_files_at(text_cfg(make_corpus(tmp_path / "plain", n_txt=2)))
    assert "other suffixes" not in caplog.text


def test_a_single_text_file_is_refused_saying_how_to_split_it(tmp_path, text_cfg):
    """nanoGPT's one input.txt is one document: the refusal said a split needs two, not how to give it two."""
    (tmp_path / "input.txt").write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 50)
    hint = r"\(a .txt file is one document: split a single text into several .txt files, or write one document"
    with pytest.raises(DataError, match=rf"^data.path=.*input.txt has 1 non-empty document\(s\); a train/val split "
                                        rf"by document needs >= 2 {hint} per line of a .jsonl\)$"):
        prepare_data(text_cfg(tmp_path / "input.txt"), "cl100k_base", tmp_path / "cache")


def test_the_walk_tells_regular_files_without_a_stat_each(tmp_path, monkeypatch):
    """A directory's entries say which names are regular files: a Path and one or two stats per file made the walk
    (run on every training start, to fingerprint the corpus) take seconds for a hundred thousand files. A link is
    still followed, a broken one listed (to be refused by name), a named pipe left out."""
    import llm.data.sources.text_files as text_files

    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    for i in range(200):
        (corpus / "sub" / f"f{i:03d}.txt").write_text(f"document {i}\n")
    (corpus / "link.txt").symlink_to(corpus / "sub" / "f000.txt")
    (corpus / "broken.txt").symlink_to(corpus / "missing.txt")
    os.mkfifo(corpus / "pipe.txt")
    calls = []
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda *a, **k: calls.append(a[0]) or real_stat(*a, **k))
    root, rels = text_files.text_files_at({"name": "text_files", "path": str(corpus)})
    assert rels == ["broken.txt", "link.txt"] + [f"sub/f{i:03d}.txt" for i in range(200)]
    assert len(calls) < 20, calls[:5]


def test_a_txt_file_is_read_as_its_bytes_into_a_large_string_column(tmp_path, monkeypatch):
    """A .txt file is one Arrow value of 64-bit offsets (Arrow strings of 32-bit ones hold 2 GiB at most: a larger
    file ended the build in an ArrowCapacityError traceback), written from its bytes as they are: reading holds the
    file once, where a str of it (up to four times its bytes) and datasets' Python batches held several copies. Files
    share record batches up to a size; a larger one has one of its own."""
    import tracemalloc

    import datasets  # noqa: F401 (imported before the measure: its import is tens of MB of Python objects)
    import pyarrow as pa

    import llm.data.sources.file_readers as file_readers

    monkeypatch.setattr(file_readers, "BATCH_BYTES", 1 << 20)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    long = "😀 " + "a line of text\n" * 600_000
    (corpus / "long.txt").write_text(long)
    for i in range(3):
        (corpus / f"s{i}.txt").write_text(f"short {i}\r\n")
    files = [str(corpus / n) for n in ("s0.txt", "s1.txt", "long.txt", "s2.txt")]
    tracemalloc.start()
    try:
        ds, keys = file_readers.read_txt(files, ["s0", "s1", "long", "s2"], "test", tmp_path / "scratch")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    column = ds.data.column("text")
    assert column.type == pa.large_string() and [len(c) for c in column.chunks] == [2, 1, 1]
    assert ds["text"] == ["short 0\n", "short 1\n", long, "short 2\n"] and keys == ["s0", "s1", "long", "s2"]
    assert peak < 1.5 * len(long.encode()), peak
