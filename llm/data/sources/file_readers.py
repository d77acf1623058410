"""Reading ``data=text_files`` files into Datasets, refusing what is not text with one line naming file and line.

Why our own .txt and .jsonl readers (not datasets' ``text``/``json`` builders): those decode undecodable bytes
into replacement characters (binary files named .txt then train silently as noise) or fail with a generic
``DatasetGenerationError`` that names neither the file nor the line. Here every document is checked strictly
as UTF-8, and the first bad file or line ends the build with a ``DataError`` saying where and what. Rows stream
into Arrow files in the build's scratch dir, so a corpus larger than memory still loads. Parquet is typed and
binary by design: datasets reads it, after a check of each file's footer and columns.

Why .txt files skip ``Dataset.from_generator``: it builds each batch of 1000 rows as Python strings, then an Arrow
string array (offsets of 32 bits) from them, so one file over 2 GiB ended the build in an ``ArrowCapacityError``
traceback, and reading took several times the batch's size in memory. A .txt file's bytes are checked and written
as they are (no str), in record batches of about :data:`BATCH_BYTES` (a larger file alone, not copied), to a
``large_string`` column (offsets of 64 bits).

Every reader returns a split ``Group``: a Dataset with a "text" column and one key per row (a .txt file's
relative path, a row's ``id:<id_field value>``) or None (identify the row by its text).
"""

from __future__ import annotations

import codecs
import errno
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from llm.data.config import DataError
from llm.data.split import Group, id_key

if TYPE_CHECKING:  # datasets is imported when a build reads files, not when llm.data is imported
    import datasets
    import pyarrow as pa

SUFFIXES = (".txt", ".jsonl", ".parquet")
_READS = "text_files reads UTF-8 .txt/.jsonl and .parquet files"
#: Bytes of .txt text per Arrow record batch: what reading holds in memory beyond one larger file.
BATCH_BYTES = 64 << 20
#: Files per record batch at most: tiny files share batches (each batch is a chunk every later pass goes through).
BATCH_FILES = 1000


def not_text(raw: bytes, final: bool = True) -> tuple[int, int] | None:
    """(offset, byte) of the first byte that makes ``raw`` not UTF-8 text (a NUL counts: binary, or UTF-16), else
    None. ``final=False`` reads ``raw`` as a file's first bytes: a character cut at its end is not an error.

    Why one function for whole files, .jsonl lines and a file's head: each refusal names the same byte for the same
    content, whichever reader met it first."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(raw, final=final)
    except UnicodeDecodeError as exc:
        nul = raw.find(b"\0", 0, exc.start)
        return (nul, 0) if nul >= 0 else (exc.start, raw[exc.start])
    nul = raw.find(b"\0")
    return (nul, 0) if nul >= 0 else None


def binary_error(where: str, what: str, offset: int, byte: int, at: str = "offset") -> DataError:
    """The refusal of ``what`` (a file, a file's line) that is not UTF-8 text, at the (offset, byte)
    :func:`not_text` found: one line naming it, the byte and what text_files reads."""
    if byte == 0:
        return DataError(f"{where}: {what} holds a NUL byte at {at} {offset}, so it is binary (or UTF-16), not "
                         f"UTF-8 text; {_READS}")
    return DataError(f"{where}: {what} is not UTF-8 text (byte 0x{byte:02x} at {at} {offset}); {_READS}")


def _is_text(raw: bytes) -> bool:
    """Whether ``raw`` is UTF-8 without a NUL byte, checked by Arrow in place: a decode would make a str of it, up to
    four times its size for text that is not ASCII."""
    import numpy as np
    import pyarrow as pa

    offsets = pa.py_buffer(np.array([0, len(raw)], dtype=np.int64))
    try:
        pa.LargeStringArray.from_buffers(1, offsets, pa.py_buffer(raw)).validate(full=True)
    except pa.ArrowInvalid:
        return False
    return b"\0" not in raw


def _txt_rows(files: list[str], where: str) -> Iterator[bytes]:
    """The UTF-8 bytes of each .txt file (an empty file gives an empty row, dropped by the split), newlines
    normalised."""
    for file in files:
        with open(file, "rb") as f:  # not Path(file).read_bytes(): a Path per file was much of a small file's cost
            raw = f.read()
        bad = None if _is_text(raw) else not_text(raw)  # the decode, for where and what, only when it is not text
        if bad is not None:
            raise binary_error(where, file, *bad)
        # universal newlines, as text-mode open() (and datasets' text builder before us) gives them; CR and LF are
        # never part of a longer UTF-8 sequence, and without a CR replace() returns the bytes themselves
        yield raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


def _batches(texts: Iterator[bytes]) -> Iterator[list[bytes]]:
    """``texts`` in consecutive batches of at most :data:`BATCH_FILES` texts and about :data:`BATCH_BYTES` (a
    larger text in a batch of its own)."""
    batch: list[bytes] = []
    size = 0
    for text in texts:
        if batch and (size + len(text) > BATCH_BYTES or len(batch) >= BATCH_FILES):
            yield batch
            batch, size = [], 0
        batch.append(text)
        size += len(text)
    if batch:
        yield batch


def _text_array(batch: list[bytes]) -> pa.Array:
    """``batch`` (checked UTF-8) as a large_string array; a text alone keeps its bytes as the array's (no copy)."""
    import numpy as np
    import pyarrow as pa

    if len(batch) == 1:
        offsets = pa.py_buffer(np.array([0, len(batch[0])], dtype=np.int64))
        return pa.LargeStringArray.from_buffers(1, offsets, pa.py_buffer(batch[0]))
    return pa.array(batch, type=pa.large_string())


def _write_texts(texts: Iterator[bytes], path: Path) -> None:
    """``texts`` as the "text" column of the Arrow stream file ``path`` (the format datasets memory-maps)."""
    import pyarrow as pa

    schema = pa.schema([("text", pa.large_string())])
    # a Python file: a full disk raises its OSError (errno ENOSPC), which the cache names as such
    with open(path, "wb") as f, pa.ipc.new_stream(f, schema) as writer:
        for batch in _batches(texts):
            writer.write_batch(pa.record_batch([_text_array(batch)], schema=schema))


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return names.get(type(value), "null")


def _jsonl_row(line: bytes, file: str, n: int, where: str, text_field: str, id_field: str | None) -> dict:
    """The row of one non-blank .jsonl line; a DataError naming ``file`` line ``n`` when it is not one."""
    bad = not_text(line)
    if bad is not None:
        raise binary_error(where, f"{file} line {n}", bad[0] + 1, bad[1], at="column")
    try:
        obj = json.loads(line.decode("utf-8").rstrip("\r\n"))
    except json.JSONDecodeError as exc:  # msg: "Expecting value", "Unterminated string starting at", ...
        at = f"{exc.msg} column" if exc.msg.endswith(" at") else f"{exc.msg} at column"
        raise DataError(f"{where}: {file} line {n} is not JSON ({at} {exc.colno})") from None
    if not isinstance(obj, dict):
        raise DataError(f"{where}: {file} line {n} is a JSON {_json_type(obj)}, not an object with a "
                        f"'{text_field}' field")
    for key, name in (("text_field", text_field), ("id_field", id_field)):
        if name is not None and name not in obj:
            raise DataError(f"data.{key}={name} is not a column of {file} line {n} "
                            f"(its fields: {', '.join(obj) or 'none'})")
    text = obj[text_field]
    if text is not None and not isinstance(text, str):  # null reads as an empty document, as in Parquet
        raise DataError(f"data.text_field={text_field} in {file} line {n} is a JSON {_json_type(text)}, "
                        "not a string")
    key = id_key(obj[id_field], id_field, f"{file} line {n}") if id_field is not None else None
    for setting, name, value in (("text_field", text_field, text), ("id_field", id_field, key)):
        bad = _lone_surrogate(value)
        if bad is not None:  # a \ud800-style JSON escape: Arrow cannot store it, so refuse it here, by line
            raise DataError(f"data.{setting}={name} in {file} line {n} holds the lone UTF-16 surrogate "
                            f"\\u{ord(bad):04x} (a JSON escape), which is not text; {_READS}")
    return {"text": text, "key": key}


def _lone_surrogate(text: str | None) -> str | None:
    """The first lone surrogate in ``text`` (what a JSON escape such as ``\\ud800`` decodes to), else None."""
    try:
        (text or "").encode("utf-8")
    except UnicodeEncodeError as exc:
        return str(text)[exc.start]
    return None


def _jsonl_rows(files: list[str], where: str, text_field: str, id_field: str | None) -> Iterator[dict]:
    """One row per non-blank line of each .jsonl file (a leading UTF-8 byte-order mark is ignored)."""
    for file in files:
        with open(file, "rb") as f:
            for n, line in enumerate(f, start=1):
                if n == 1 and line.startswith(codecs.BOM_UTF8):
                    line = line[len(codecs.BOM_UTF8):]
                if line.strip():
                    yield _jsonl_row(line, file, n, where, text_field, id_field)


def _from_rows(rows: Callable[..., Iterator[dict]], gen_kwargs: dict, scratch: Path) -> datasets.Dataset:
    """``Dataset.from_generator``, with our DataError (which datasets wraps) raised as itself."""
    import datasets

    features = datasets.Features({"text": datasets.Value("string"), "key": datasets.Value("string")})
    try:
        return datasets.Dataset.from_generator(rows, features=features, gen_kwargs=gen_kwargs,
                                               cache_dir=str(scratch / "hf"))
    except datasets.exceptions.DatasetGenerationError as exc:
        cause = exc.__cause__
        if isinstance(cause, DataError):
            raise cause from None
        if isinstance(cause, OSError):
            _raise_unreadable(cause, gen_kwargs["where"])
        raise


def _raise_unreadable(exc: OSError, where: str, written: Path | None = None) -> None:
    """Raise a DataError naming the file of ``exc`` when it is a user's file that cannot be opened or read (its
    permissions, an I/O error; a .jsonl has no early check of its head, as a .txt has): theirs to fix, in one line.

    A full disk names no file or the Arrow file ``written`` in the scratch dir, and is left to the cache, which
    says so; so is any other error on ``written``.
    """
    if exc.filename is None or exc.errno in (errno.ENOSPC, errno.EDQUOT) or \
            (written is not None and os.fsdecode(exc.filename) == str(written)):
        return
    raise DataError(f"{where}: {os.fsdecode(exc.filename)} cannot be read ({exc.strerror or type(exc).__name__}); "
                    "remove it or make it readable") from None


def read_txt(files: list[str], rels: list[str], where: str, scratch: Path) -> Group:
    """The .txt ``files`` (absolute), one document each, keyed by their relative paths ``rels``."""
    import datasets

    scratch.mkdir(parents=True, exist_ok=True)
    path = scratch / "txt.arrow"
    try:
        _write_texts(_txt_rows(files, where), path)
    except OSError as exc:
        _raise_unreadable(exc, where, written=path)
        raise
    return datasets.Dataset.from_file(str(path)), rels


def read_jsonl(files: list[str], where: str, text_field: str, id_field: str | None, scratch: Path) -> Group:
    """The rows of the .jsonl ``files``, text from ``text_field``, keyed by ``id_field`` when given."""
    ds = _from_rows(_jsonl_rows, {"files": files, "where": where, "text_field": text_field, "id_field": id_field},
                    scratch)
    keys = ds["key"] if id_field is not None else None
    return ds.select_columns(["text"]), keys


def _check_parquet(file: str, where: str, text_field: str, id_field: str | None) -> None:
    """Read ``file``'s footer (cheap): a DataError when it is not Parquet or lacks a configured column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.ParquetFile(file).schema_arrow
        names = schema.names
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ... for a damaged or foreign file
        msg = str(exc).splitlines()[0][:200] if str(exc) else ""
        raise DataError(f"{where}: {file} is not a readable Parquet file ({type(exc).__name__}: {msg})") from None
    for key, name in (("text_field", text_field), ("id_field", id_field)):
        if name is not None and name not in names:
            raise DataError(f"data.{key}={name} is not a column of {file} (columns: {', '.join(names)})")
    kind = schema.field(text_field).type
    # The split hashes each text as a string: a number or list column would end the build in a traceback.
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)):
        raise DataError(f"data.text_field={text_field}: column {text_field} of {file} holds {kind} values, not "
                        "strings (the documents' text); name the text column")


def read_parquet(files: list[str], where: str, text_field: str, id_field: str | None, scratch: Path) -> Group:
    """The rows of the .parquet ``files``, text from ``text_field``, keyed by ``id_field`` when given."""
    import datasets

    for file in files:
        _check_parquet(file, where, text_field, id_field)
    try:
        ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(scratch / "hf"))
    except datasets.exceptions.DatasetGenerationError as exc:  # e.g. a damaged row group, or files that disagree
        cause = exc.__cause__ or exc
        msg = str(cause).splitlines()[0][:200] if str(cause) else ""
        raise DataError(f"{where}: reading its .parquet files failed ({type(cause).__name__}: {msg})") from None
    keys = None if id_field is None else [
        id_key(v, id_field, f"row {i} of {where}'s .parquet files") for i, v in enumerate(ds[id_field])]
    ds = ds.select_columns([text_field])
    if text_field != "text":
        ds = ds.rename_column(text_field, "text")
    return ds, keys
