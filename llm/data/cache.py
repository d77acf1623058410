"""The data cache: each source tokenized once into memory-mapped train/val token streams, reused while it holds.

Layout: ``<cache_root>/<source>-<tokenizer>-<fingerprint[:16]>/`` holds ``train.bin`` and ``val.bin`` (token
ids, uint16 when the vocabulary has fewer than 65536 ids, else uint32; every document tokenized as by
``encode_ordinary``, so text that looks like a special token stays text, a long one in pieces
(:mod:`llm.data.encode`), and followed by the end-of-text token), whatever the source keeps beside them
(``data=code_corpus``: its ``manifest.json``) and ``meta.json``, written last: its presence marks a complete cache.

``meta.json`` also records each split's composition (documents, tokens, the largest document's share: the
val split is capped, see :mod:`llm.data.split`) and the sha256 of each shard, from which
:func:`data_fingerprint` gives a run its record of what it trained and was evaluated on.

Why each load verifies the cache: a cache is only used when its meta is readable and belongs to the current source
fingerprint and tokenizer, its shard sizes agree with the meta, a shard changed since the build (its modification
time is not the one recorded) still has the recorded sha256 (else a run would record the hash of data it never
read), and every token id is inside the vocabulary (a vectorised max over the memmap: milliseconds for millions of
tokens) with each stream ending in end-of-text. Anything else -- an interrupted build, a truncated or overwritten
shard -- is rebuilt with a warning saying why, rather than failing later as an out-of-range index inside the
embedding. A valid cache is used without loading the tokenizer, so a cache built online also works offline.

Builds hold the directory's lock (``cache_lock``) and write every file through ``llm.fileio`` (temporary,
fsync, rename), so concurrent processes preparing the same cache end with one valid copy, and a failed build
leaves no empty directory behind.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from llm.data.cache_lock import locked_cache_dir
from llm.data.check import check_data_config
from llm.data.config import DataError, num_threads
from llm.data.encode import Ids, encode_texts, n_ids, utf8_batches, utf8_size
from llm.data.sources import FORMAT_VERSION, KEEP_DIR, Source, make_source
from llm.data.split import SPLITS, VAL_DOC_CAP, cap_val_documents, composition
from llm.data.tokenizer import TokenizeProgress, canonical_tokenizer_name, get_tokenizer
from llm.errors import UserError, exception_chain
from llm.fileio import TMP_MARK, DiskFullError, atomic_path, remove_stale_temps, write_json_atomic

if TYPE_CHECKING:
    import tiktoken

log = logging.getLogger(__name__)

_BATCH_DOCS = 256  # documents read from Arrow, and encoded, at a time


@dataclass
class TokenData:
    """Tokenized train/val streams of one data source (1-D read-only memmaps of token ids)."""

    train: np.ndarray
    val: np.ndarray
    vocab_size: int
    eot: int
    meta: dict


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab < 65536), else uint32."""
    return np.dtype(np.uint16) if vocab_size < 65536 else np.dtype(np.uint32)


# --------------------------------------------------------------------------------------------------------------
# verifying a cache on load


def _read_meta(cache_dir: Path, expected: dict) -> tuple[dict | None, str]:
    """(meta, "") when meta.json is whole, consistent and belongs to ``expected``; else (None, why).

    ``why`` is "" when the cache was simply never built (no meta.json and no shard).
    """
    meta_path = cache_dir / "meta.json"
    if not meta_path.exists():
        if not any((cache_dir / f"{split}.bin").exists() for split in SPLITS):
            return None, ""
        return None, "no meta.json (an interrupted build)"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        return None, f"unreadable meta.json ({type(exc).__name__})"
    if not isinstance(meta, dict):
        return None, "meta.json is not an object"
    for key, value in expected.items():
        if meta.get(key) != value:
            return None, f"meta.json {key}={meta.get(key)!r}, expected {value!r}"
    try:
        vocab_size, eot = int(meta["vocab_size"]), int(meta["eot"])
        if meta["dtype"] != token_dtype(vocab_size).name or not 0 <= eot < vocab_size:
            return None, f"meta.json dtype/vocab_size/eot inconsistent ({meta['dtype']}, {vocab_size}, {eot})"
        for split in SPLITS:
            if int(meta["shard_bytes"][split]) != int(meta["n_tokens"][split]) * np.dtype(meta["dtype"]).itemsize:
                return None, f"meta.json {split} shard_bytes disagrees with n_tokens"
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"incomplete meta.json ({type(exc).__name__}: {exc})"
    return meta, ""


def _open_shard(path: Path, dtype: np.dtype, n: int) -> np.ndarray:
    if n == 0:
        return np.empty(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(n,))


def _open_shards(cache_dir: Path, meta: dict) -> tuple[dict[str, np.ndarray] | None, str]:
    """({split: memmap}, "") when each shard has the meta's size and holds token ids only; else (None, why)."""
    dtype, vocab_size, eot = np.dtype(meta["dtype"]), int(meta["vocab_size"]), int(meta["eot"])
    shards = {}
    for split in SPLITS:
        path = cache_dir / f"{split}.bin"
        want = int(meta["shard_bytes"][split])
        stat = path.stat() if path.exists() else None
        size = stat and stat.st_size
        if size != want:
            return None, f"{split}.bin has {size} bytes, meta.json says {want}"
        tokens = _open_shard(path, dtype, int(meta["n_tokens"][split]))
        if len(tokens):
            top = int(tokens.max())  # one vectorised pass: same-size garbage shows as ids past the vocabulary
            if top >= vocab_size:
                return None, f"{split}.bin holds token id {top}, outside the vocabulary of {vocab_size} ids " \
                             "(the file was overwritten or is corrupt)"
            if int(tokens[-1]) != eot:
                return None, f"{split}.bin does not end with the end-of-text token {eot} (the file was " \
                             "overwritten or is corrupt)"
        if stat.st_mtime_ns != (meta.get("shard_mtime_ns") or {}).get(split) and \
                hashlib.sha256(memoryview(tokens)).hexdigest() != meta["sha256"][split]:
            return None, f"{split}.bin is not the file that was built (its sha256 differs from meta.json's: it was " \
                         "overwritten or is corrupt)"
        shards[split] = tokens
    return shards, ""


def _open_cache(cache_dir: Path, expected: dict) -> tuple[TokenData | None, str]:
    """(TokenData, "") when the cache at ``cache_dir`` is complete, verified and ``expected``'s; else (None, why)."""
    meta, why = _read_meta(cache_dir, expected)
    if meta is None:
        return None, why
    shards, why = _open_shards(cache_dir, meta)
    if shards is None:
        return None, why
    return TokenData(train=shards["train"], val=shards["val"], vocab_size=int(meta["vocab_size"]),
                     eot=int(meta["eot"]), meta=dict(meta, cache_dir=str(cache_dir))), ""


# --------------------------------------------------------------------------------------------------------------
# building a cache


class _ShardWriter:
    """Appends documents (ids, then end-of-text) to a shard file, hashing its bytes and sizing each document.

    Each piece's array is written and hashed as it is (the same bytes as one buffer of the batch), never gathered
    into a copy: for a document of a billion characters that copy was as large as its ids.
    """

    def __init__(self, f: Any, dtype: np.dtype, eot: int) -> None:
        self.f, self.dtype = f, dtype
        self.eot = np.array([eot], dtype=dtype)
        self.sha = hashlib.sha256()
        self.keys: list[str] = []
        self.sizes: list[int] = []

    def add(self, keys: list[str], encoded: list[Ids]) -> None:
        for ids in encoded:
            for piece in [*ids, self.eot]:
                self.f.write(piece)
                self.sha.update(piece)
            self.sizes.append(n_ids(ids) + 1)
        self.keys += keys

    @property
    def n_tokens(self) -> int:
        return sum(self.sizes)


def _dataset(entry: Any) -> Any:
    return entry[0] if isinstance(entry, tuple) else entry


def _encoded(entries: list, encode: Callable[..., list[Ids]], split: str,
             bar: Any) -> Iterator[tuple[list[str], list[Ids]]]:
    """(document keys, token ids) per batch of the non-empty documents of ``entries``, in order.

    An entry is a split Group (Dataset, keys) or a bare Dataset (a source's own split, e.g. tinystories),
    whose rows are named ``<split>#<n>``. ``encode`` is :func:`llm.data.encode.encode_texts` bound to the build's
    encoding and pool; it moves ``bar`` piece by piece.
    """
    rows = 0  # rows seen in this split: the names of rows without keys
    for entry in entries:
        ds, keys = entry if isinstance(entry, tuple) else (entry, None)
        first = 0  # the batch's first row in this entry
        for texts in utf8_batches(ds, _BATCH_DOCS):
            span = range(first, first + len(texts))
            names = [keys[i] for i in span] if keys is not None else [f"{split}#{rows + i}" for i in span]
            first += len(texts)
            pairs = [(str(k), t) for k, t in zip(names, texts, strict=True) if len(t)]
            bar.update(len(texts) - len(pairs))  # the empty documents, which are not encoded
            yield [k for k, _ in pairs], encode([t for _, t in pairs], progress=bar.update)
        rows += first


def _write_shards(splits: dict[str, list], enc: tiktoken.Encoding, dtype: np.dtype, cache_dir: Path,
                  num_threads: int, name: str) -> dict[str, Any]:
    """Tokenize the split documents into ``train.bin`` and ``val.bin``; returns what meta.json records of them.

    Val is tokenized first, into memory (a few percent of the corpus), so the cap on one document's share can
    be applied on tokens (:func:`llm.data.split.cap_val_documents`); the documents it moves are appended to
    train. Train streams batch by batch, whatever its size.
    """
    entries = [_dataset(entry) for split in SPLITS for entry in splits[split]]
    total, size = sum(len(ds) for ds in entries), sum(utf8_size(ds) for ds in entries)
    out: dict[str, Any] = {"n_tokens": {}, "n_docs": {}, "sha256": {}, "composition": {}}
    # the progress: in bytes of text (documents differ in length), a log line, not a bar, where output is a file
    with TokenizeProgress(total, f"tokenizing {name}", size=size) as bar, ThreadPoolExecutor(num_threads) as pool:
        encode = partial(encode_texts, enc=enc, dtype=dtype, pool=pool, threads=num_threads)
        val_keys: list[str] = []
        val_ids: list[Ids] = []
        for keys, encoded in _encoded(splits["val"], encode, "val", bar):
            val_keys += keys
            val_ids += encoded
        cap = cap_val_documents([n_ids(ids) + 1 for ids in val_ids])
        writers = {}
        with atomic_path(cache_dir / "val.bin") as tmp, open(tmp, "wb") as f:
            writers["val"] = w = _ShardWriter(f, dtype, enc.eot_token)
            w.add([val_keys[i] for i in cap.kept], [val_ids[i] for i in cap.kept])
        with atomic_path(cache_dir / "train.bin") as tmp, open(tmp, "wb") as f:
            writers["train"] = w = _ShardWriter(f, dtype, enc.eot_token)
            for keys, encoded in _encoded(splits["train"], encode, "train", bar):
                w.add(keys, encoded)
            if cap.moved:
                w.add([val_keys[i] for i in cap.moved], [val_ids[i] for i in cap.moved])
    for split, w in writers.items():
        out["n_tokens"][split], out["n_docs"][split] = w.n_tokens, len(w.sizes)
        out["sha256"][split] = w.sha.hexdigest()
        out["composition"][split] = composition(w.keys, w.sizes)
    out["composition"]["val"].update(cap=VAL_DOC_CAP, cap_met=cap.met,
                                     moved_to_train=[val_keys[i] for i in cap.moved])
    return out


def _log_composition(cache_dir: Path, comp: dict[str, Any]) -> None:
    """One line per split: documents, tokens, the largest document's share (a warning when val misses the cap)."""
    for split in SPLITS:
        c = comp[split]
        share = "n/a" if c["largest_share"] is None else f"{100 * c['largest_share']:.1f}%"
        log.info("%s split: %d documents, %d tokens, largest %s (%s)", split, c["documents"], c["tokens"], share,
                 c["largest_document"])
    val = comp["val"]
    if val["moved_to_train"]:
        log.info("val split: %d document(s) above %g%% of its tokens moved to train: %s", len(val["moved_to_train"]),
                 100 * VAL_DOC_CAP, ", ".join(val["moved_to_train"][:5]))
    if not val["cap_met"]:
        log.warning("val split of %s: %d documents, the largest holds %.1f%% of its tokens (over the %g%% cap, which "
                    "needs more documents): raise data.val_fraction or use more data for a representative val set",
                    cache_dir.name, val["documents"], 100 * val["largest_share"], 100 * VAL_DOC_CAP)


def _remove_leftovers(cache_dir: Path) -> None:
    """Delete what a killed build left: temporaries and scratch dirs (we hold the lock: nobody else writes)."""
    remove_stale_temps(cache_dir)
    for stale in cache_dir.iterdir():
        if stale.is_dir() and TMP_MARK in stale.name:
            shutil.rmtree(stale, ignore_errors=True)


@contextmanager
def _quiet_datasets() -> Iterator[None]:
    """Without a terminal, datasets' own progress bars (reading, splitting) off for the build: in a log file
    their carriage-return redraws are noise; the build logs its own progress (``TokenizeProgress``)."""
    import datasets

    was = datasets.is_progress_bar_enabled()
    if sys.stderr.isatty() or not was:
        yield
        return
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.enable_progress_bars()


def _data_id(tokenizer: str, sha256: Mapping[str, str]) -> str:
    """One hash of what a run reads: the tokenizer and both token streams."""
    return hashlib.sha256(json.dumps({"tokenizer": tokenizer, "sha256": dict(sha256)}, sort_keys=True)
                          .encode()).hexdigest()


def _identity(path: Path) -> tuple[int, int, int] | None:
    """(inode, size, mtime) of ``path``, None when absent: what tells a file this build wrote from an older one."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _build(source: Source, cache_dir: Path, enc: tiktoken.Encoding, expected: dict, num_threads: int) -> None:
    """Tokenize ``source`` into ``cache_dir``: shards and the source's kept files first, meta.json last. Caller
    holds the cache lock."""
    t0 = time.time()
    (cache_dir / "meta.json").unlink(missing_ok=True)  # the cache is invalid from here until the new meta lands
    _remove_leftovers(cache_dir)
    dtype = token_dtype(enc.n_vocab)
    before = {split: _identity(cache_dir / f"{split}.bin") for split in SPLITS}
    scratch = Path(tempfile.mkdtemp(prefix=f"scratch{TMP_MARK}", dir=cache_dir))
    try:
        with _quiet_datasets():
            splits = source.load(scratch)
            shards = _write_shards(splits, enc, dtype, cache_dir, num_threads, source.name)
        del splits
        keep = scratch / KEEP_DIR
        for kept in sorted(keep.iterdir()) if keep.is_dir() else []:
            os.replace(kept, cache_dir / kept.name)  # same filesystem: an atomic rename
    except BaseException:
        # Without meta.json the shards are never used, only rebuilt: a full disk (Ctrl-C, an unreadable file) on
        # train.bin kept the val.bin just written, on the disk the user must now free, and the directory with it.
        for split, was in before.items():
            if _identity(cache_dir / f"{split}.bin") != was:  # this build wrote it (a rename: a new inode)
                (cache_dir / f"{split}.bin").unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    n_tokens = shards["n_tokens"]
    meta = dict(expected, dtype=dtype.name, vocab_size=enc.n_vocab, eot=enc.eot_token, encoding=enc.name,
                n_tokens=n_tokens, n_docs=shards["n_docs"],
                shard_bytes={s: n * dtype.itemsize for s, n in n_tokens.items()},
                sha256=shards["sha256"], data_id=_data_id(expected["tokenizer"], shards["sha256"]),
                shard_mtime_ns={s: (cache_dir / f"{s}.bin").stat().st_mtime_ns for s in SPLITS},
                composition=shards["composition"], source_info=source.info,
                created=time.strftime("%Y-%m-%dT%H:%M:%S"), build_seconds=round(time.time() - t0, 2))
    write_json_atomic(cache_dir / "meta.json", meta)  # written last: its presence marks a complete cache
    log.info("built %s in %.1fs: %s", cache_dir, time.time() - t0,
             ", ".join(f"{s} {shards['n_docs'][s]} docs / {n_tokens[s]:,} tokens" for s in SPLITS))
    _log_composition(cache_dir, shards["composition"])


def data_fingerprint(meta: Mapping[str, Any]) -> dict[str, Any]:
    """What a run trained and was evaluated on, for its summary.json: the source, the corpus fingerprint a
    source records (``data=code_corpus``'s manifest, a hub dataset's revision), the tokenizer, the split (its
    rule's settings and the val split's composition), the sha256 of each token stream, and ``id``, one hash
    of the tokenizer and both streams (two runs read the same tokens exactly when their ids are equal)."""
    info = meta.get("source_info") or {}
    comp = (meta.get("composition") or {}).get("val") or {}
    split = {"val_fraction": info.get("val_fraction"), "val_documents": comp.get("documents"),
             "val_tokens": comp.get("tokens"), "val_largest_share": comp.get("largest_share"),
             "val_largest_document": comp.get("largest_document"), "val_cap_met": comp.get("cap_met")}
    return {"source": meta.get("source"), "corpus": info.get("corpus_fingerprint"),
            "revision": info.get("revision"), "tokenizer": meta.get("tokenizer"), "split": split,
            "tokens_sha256": meta.get("sha256"), "id": meta.get("data_id")}


def _inside(filename: object, directory: Path) -> bool:
    """True when ``filename`` (an OSError's: a path, or None) names ``directory`` or a file under it."""
    if not isinstance(filename, (str, bytes, os.PathLike)):
        return False
    return Path(os.path.abspath(os.fsdecode(filename))).is_relative_to(os.path.abspath(directory))


@contextmanager
def _build_errors(cache_dir: Path) -> Iterator[None]:
    """A full disk or a cache directory this process may not write, met while preparing ``cache_dir``, as the one
    line a user acts on (:class:`DiskFullError`, or a DataError naming the file), not a traceback.

    Why here: only the shards go through ``atomic_path``, which names a full disk itself; the lock file, the scratch
    dir and the Arrow copy the readers write there (as large as the corpus: where a disk fills first) failed with
    ``OSError: [Errno 28]`` under datasets' ``DatasetGenerationError``, and a cache directory left read-only (a
    colleague's, in a shared cache) with ``PermissionError`` on its lock file. A user's own unreadable data file is
    not the cache's: its error passes unchanged.
    """
    try:
        yield
    except (UserError, DiskFullError):
        raise
    except Exception as exc:
        for cause in exception_chain(exc):
            if not isinstance(cause, OSError):
                continue
            at_cache = _inside(cause.filename, cache_dir)
            if cause.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(Path(os.fsdecode(cause.filename)) if cause.filename is not None and not at_cache
                                    else cache_dir) from None
            if cause.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and at_cache:
                raise DataError(f"cache_dir={cache_dir.parent}: cannot write {os.fsdecode(cause.filename)} "
                                f"({cause.strerror}); set cache_dir= or $ROPELAB_CACHE to a writable directory, or "
                                f"make {cache_dir} writable") from None
        raise


# --------------------------------------------------------------------------------------------------------------
# the entry point


def prepare_data(data_cfg: Mapping, tokenizer_name: str, cache_root: str | Path) -> TokenData:
    """Tokenized train/val streams for ``data_cfg`` (conf/data/<name>.yaml), built once and cached under
    ``cache_root``; later calls (and other processes) reuse the cache while the source's fingerprint holds.

    Raises DataError (a ValueError, one line naming the key) for a bad config or unusable data,
    NetworkUnavailableError when the tokenizer or source needs an unreachable network.
    """
    check_data_config(data_cfg, tokenizer_name)
    tokenizer = canonical_tokenizer_name(str(tokenizer_name))
    source = make_source(data_cfg)
    cache_dir = Path(os.path.expanduser(str(cache_root))) / f"{source.name}-{tokenizer}-{source.fingerprint[:16]}"
    expected = {"format_version": FORMAT_VERSION, "source": source.name, "tokenizer": tokenizer,
                "fingerprint": source.fingerprint}
    data, _ = _open_cache(cache_dir, expected)
    if data is not None:
        log.info("using cached %s", cache_dir)
        return data

    enc = get_tokenizer(tokenizer)  # before any work: may fail fast for want of a network
    with _build_errors(cache_dir), locked_cache_dir(cache_dir):
        data, why = _open_cache(cache_dir, expected)  # another process may have built it while we waited
        if data is None:
            if why:
                log.warning("rebuilding %s: %s", cache_dir, why)
            else:
                log.info("preparing %s", cache_dir)
            _build(source, cache_dir, enc, expected, num_threads(data_cfg) or os.cpu_count() or 1)
            data, why = _open_cache(cache_dir, expected)
            if data is None:
                raise RuntimeError(f"tokenized cache {cache_dir} is invalid right after building it: {why}")
    if (data.vocab_size, data.eot) != (enc.n_vocab, enc.eot_token):
        raise RuntimeError(f"tokenized cache {cache_dir} was built with another '{tokenizer}' vocabulary")
    return data

