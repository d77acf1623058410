r"""Encoding documents of any length: from their UTF-8 bytes in Arrow, a long one in pieces, on several threads.

Why: tiktoken's ``encode_ordinary`` returns a Python list, about 36 bytes a token, so one large document (a 1 GB
text) needed many times its size in memory and minutes on one core, with the progress line still until the end; and
the document as a Python str is up to four times its UTF-8 (one character outside Latin-1 makes every character two
or four bytes). Here each text is read as its UTF-8 bytes where Arrow holds them (:func:`utf8_batches`); a text
longer than :data:`PIECE_BYTES` is cut into pieces at boundaries where the tokenization cannot change
(:func:`pieces`); the pieces go to a thread pool (tiktoken releases the GIL while it encodes) a window at a time,
each decoded on its own and encoded to a numpy array of its ids (4 bytes a token, no list), and the progress advances
piece by piece, in bytes of text. The ids are those of one ``encode_ordinary`` of the whole document, byte for byte.

Why the boundary is safe: tiktoken encodes each pretoken (a match of the encoding's regex, ``enc._pat_str``, found
left to right) on its own, so a cut changes nothing when a pretoken of the whole text ends at the cut and each side
alone matches as it did in the whole. The cut is after a single newline between two non-whitespace characters, the
second not "/" (``x\n|y``). In each regex of :data:`SAFE_PATTERNS`, the pretoken of the whole text that holds the
newline ends at the cut: it is the newline alone (``\s*[\r\n]``, ``\s``; no alternative takes a newline followed
by a non-whitespace character, except o200k's punctuation run with its ``[\r\n/]*``: hence not "/") or a
punctuation run ending in it (cl100k's ``[\r\n]*+``, o200k's). The left side alone ends in the same pretoken
(``\s++$`` or ``\s*[\r\n]`` take the newline at its end alone), every earlier match looks no further than the
newline, and no regex looks behind, so the right side matches alone as it did in the whole. An encoding without
merges (``bytes``: a token per byte) keeps its ids at any cut, whatever its regex. Any other encoding (its regex not
checked) has each document encoded whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import tiktoken

#: UTF-8 bytes per piece a long document is encoded in: large enough that per-call costs vanish, small enough that a
#: window of pieces (their strs and ids) is a small fraction of the document.
PIECE_BYTES = 1 << 20

#: The pretokenizer regexes of tiktoken's encodings (gpt2/r50k/p50k, cl100k, o200k), for which a cut after a newline
#: of :func:`_is_cut` keeps the ids (see the module docstring; tests compare each one's pieces with the whole).
SAFE_PATTERNS = frozenset({
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s""",
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|"""
    r"""\s+(?!\S)|\s""",
    "|".join([
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]),
})

# A newline between two bytes that are not ASCII whitespace, the second not "/": where a cut may be. The characters
# around it are then checked whole (:func:`_is_cut`): a byte of a longer UTF-8 sequence, or U+001C-U+001F, may be part
# of whitespace.
_CANDIDATE = re.compile(rb"[^\s]\n(?=[^\s/])")

#: A document's token ids: the arrays of its pieces, in order.
Ids = list[np.ndarray]
# (document index, piece, whether it is the document's last)
_Piece = tuple[int, memoryview, bool]


def utf8_batches(ds: Any, batch_size: int) -> Iterator[list[memoryview]]:
    """The texts of ``ds`` (a Dataset with a "text" column) as their UTF-8 bytes (empty for a null), ``batch_size``
    rows at a time, read from Arrow in place: a Python str of each text would take up to four times its bytes, and a
    hash or a test for emptiness needs none."""
    for table in ds.select_columns(["text"]).with_format("arrow").iter(batch_size=batch_size):
        yield [value for chunk in table.column("text").chunks for value in _utf8_values(chunk)]


def _utf8_values(chunk: Any) -> list[memoryview]:
    """Each value of the Arrow string array ``chunk`` as a view of its bytes in the array's data buffer (empty for a
    null): a value's own buffer (``chunk[i].as_buffer()``) is a copy of it, as large as the text."""
    import pyarrow as pa

    if pa.types.is_null(chunk.type):
        return [memoryview(b"")] * len(chunk)
    if not (pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type)):  # another layout: copies
        return [memoryview(v.as_buffer()) if v.is_valid else memoryview(b"") for v in chunk]
    _, offsets_buffer, data_buffer = chunk.buffers()
    kind = np.dtype(np.int64 if pa.types.is_large_string(chunk.type) else np.int32)
    offsets = np.frombuffer(offsets_buffer, dtype=kind, count=len(chunk) + 1, offset=chunk.offset * kind.itemsize)
    data = memoryview(data_buffer if data_buffer is not None else b"")
    valid = chunk.is_valid().to_pylist() if chunk.null_count else [True] * len(chunk)
    bounds = offsets.tolist()
    return [data[bounds[i]:bounds[i + 1]] if valid[i] else memoryview(b"") for i in range(len(chunk))]


def _bytes_view(raw: Any) -> memoryview:
    """A view of ``raw``'s bytes as unsigned (0-255), to index them: an Arrow buffer's view reads them as signed, so
    a test such as "a continuation byte is 0x80-0xBF" would see -128..-65 and pass over it."""
    return memoryview(raw).cast("B")


def utf8_size(ds: Any, batch_size: int = 4096) -> int:
    """The UTF-8 bytes of the texts of ``ds``, summed by Arrow from its offsets (rows selected by ``ds`` are slices
    of its file, not copies)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    total = 0
    for table in ds.select_columns(["text"]).with_format("arrow").iter(batch_size=batch_size):
        column = table.column("text")
        if not pa.types.is_null(column.type):  # a column of nulls only: empty documents
            total += pc.sum(pc.binary_length(column)).as_py() or 0
    return total


def utf8_texts(ds: Any, batch_size: int = 1024) -> Iterator[memoryview]:
    """The texts of ``ds`` as their UTF-8 bytes, row by row (:func:`utf8_batches`)."""
    for batch in utf8_batches(ds, batch_size):
        yield from batch


def cuttable(enc: tiktoken.Encoding) -> bool:
    """Whether cuts of :func:`pieces` keep ``enc``'s ids: its regex is one of :data:`SAFE_PATTERNS`, or it has no
    merges (its first multi-byte token, if any, comes right after the single bytes: a short scan)."""
    return enc._pat_str in SAFE_PATTERNS or all(len(token) == 1 for token in enc._mergeable_ranks)


def _char_before(raw: memoryview, end: int) -> str:
    """The character whose UTF-8 ends at byte ``end`` of ``raw`` (valid UTF-8: its continuation bytes are 10xxxxxx)."""
    start = end - 1
    while start > 0 and end - start < 4 and 0x80 <= raw[start] < 0xC0:
        start -= 1
    return str(raw[start:end], "utf-8")


def _char_at(raw: memoryview, start: int) -> str:
    """The character whose UTF-8 starts at byte ``start`` of ``raw`` (its lead byte gives its length)."""
    lead = raw[start]
    return str(raw[start:start + (1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4)], "utf-8")


def _is_cut(raw: memoryview, newline: int) -> bool:
    """Whether the newline at byte ``newline`` is single, between characters that are not whitespace (as
    str.isspace() says: a superset of the Unicode White_Space the encodings' \\s means), the second not "/"."""
    before, after = _char_before(raw, newline), _char_at(raw, newline + 1)
    return not before.isspace() and not after.isspace() and after != "/"


def _cut_after(raw: memoryview, start: int) -> int | None:
    """The end of the first newline of :func:`_is_cut` whose preceding byte is at or after ``start``, else None."""
    while (found := _CANDIDATE.search(raw, start)) is not None:
        if _is_cut(raw, found.start() + 1):
            return found.end()
        start = found.start() + 1
    return None


def pieces(raw: bytes | memoryview, size: int = PIECE_BYTES, cut: bool = True) -> Iterator[memoryview]:
    """The UTF-8 text ``raw`` in pieces of at least ``size`` bytes (views, not copies), cut only after a newline of
    :func:`_is_cut`; the whole text when it is short, has no such newline, or ``cut`` is false (an encoding not
    :func:`cuttable`)."""
    view = memoryview(raw)
    if not cut or len(view) <= size:
        yield view
        return
    view = _bytes_view(view)  # cast only here: a cast costs as much as a short document's other steps
    start = 0
    while len(view) - start > size:
        end = _cut_after(view, start + size - 1)
        if end is None:
            break
        yield view[start:end]
        start = end
    yield view[start:]


def encode_array(enc: tiktoken.Encoding, text: str) -> np.ndarray:
    """``enc.encode_ordinary(text)`` as a uint32 array, without its Python list where tiktoken can (0.9, 0.11 on).

    ``encode_to_numpy`` with no special token allowed and none refused encodes the text as one ordinary segment:
    the same ids. A lone surrogate (which it refuses, and ``encode_ordinary`` replaces) takes the list way.
    """
    to_numpy = getattr(enc, "encode_to_numpy", None)
    if to_numpy is not None:
        try:
            return to_numpy(text, disallowed_special=())
        except UnicodeEncodeError:
            pass
    return np.asarray(enc.encode_ordinary(text), dtype=np.uint32)


def _windows(items: Iterable[_Piece], size: int) -> Iterator[list[_Piece]]:
    """``items`` in consecutive lists of about ``size`` bytes of pieces (at least one piece): what is decoded and
    encoded at once, so a long document is never decoded whole."""
    it = iter(items)
    while True:
        window, n = [], 0
        for item in it:
            window.append(item)
            n += len(item[1])
            if n >= size:
                break
        if not window:
            return
        yield window


def _pieces_of(texts: list[memoryview], size: int, cut: bool) -> Iterator[_Piece]:
    """(document index, piece, whether it is the document's last) of every piece of ``texts``, in order."""
    for i, raw in enumerate(texts):
        end = 0
        for piece in pieces(raw, size, cut):
            end += len(piece)
            yield i, piece, end == len(raw)


def encode_texts(texts: list[memoryview], enc: tiktoken.Encoding, dtype: np.dtype, pool: Executor, threads: int,
                 progress: Callable[[int, int], None], size: int = PIECE_BYTES) -> list[Ids]:
    """The ids of each of ``texts`` (non-empty UTF-8), as ``dtype`` arrays of its pieces, encoded on ``pool``.

    ``progress(documents, size)`` is called once each piece is encoded, with 1 for a document's last piece (else 0)
    and the piece's bytes. Pieces go ``threads`` times two pieces' worth of bytes at a time, so the pool stays busy
    while memory holds only those pieces' strs and ids beyond the texts' bytes and the ids before them. Each piece's
    ids are copied to an array of their size: tiktoken's buffer keeps the spare capacity it grew by, up to as much
    again.
    """
    out: list[Ids] = [[] for _ in texts]
    encode = lambda task: [encode_array(enc, str(piece, "utf-8")) for _, piece, _ in task]
    for window in _windows(_pieces_of(texts, size, cuttable(enc)), 2 * threads * size):
        tasks = _tasks(window, 4 * threads)
        for task, done in zip(tasks, pool.map(encode, tasks), strict=True):
            for (i, piece, last), ids in zip(task, done, strict=True):
                out[i].append(ids.astype(dtype))  # copied here, in the main thread: see the docstring
                progress(int(last), len(piece))
    return out


def _tasks(window: list[_Piece], n: int) -> list[list[_Piece]]:
    """``window`` in at most ``n`` runs of consecutive pieces, one pool task each: a batch of short documents is a
    few tasks, not one each (a task's own cost was most of a short document's)."""
    step = -(-len(window) // n)
    return [window[j:j + step] for j in range(0, len(window), step)]


def n_ids(ids: Ids) -> int:
    """How many token ids a document's pieces hold."""
    return sum(len(piece) for piece in ids)
