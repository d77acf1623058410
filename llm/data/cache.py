"""The data cache: each source tokenized once into memory-mapped train/val token streams, reused while it holds.

Layout: ``<cache_root>/<source>-<tokenizer>-<fingerprint[:16]>/`` holds ``train.bin`` and ``val.bin`` (token
ids, uint16 when the vocabulary has fewer than 65536 ids, else uint32; every document tokenized with
``encode_ordinary``, so text that looks like a special token stays text, and followed by the end-of-text
token) and ``meta.json``, written last: its presence marks a complete cache.

Why each load verifies the cache: a cache is only used when its meta is readable and belongs to the current
source fingerprint and tokenizer, its shard sizes agree with the meta, and every token id is inside the
vocabulary (a vectorised max over the memmap: milliseconds for millions of tokens) with each stream ending in
end-of-text. Anything else -- an interrupted build, a truncated or overwritten shard -- is rebuilt with a
warning saying why, rather than failing later as an out-of-range index inside the embedding. A valid cache is
used without loading the tokenizer, so a cache built online also works offline.

Builds hold the directory's lock (``cache_lock``) and write every file through ``llm.fileio`` (temporary,
fsync, rename), so concurrent processes preparing the same cache end with one valid copy, and a failed build
leaves no empty directory behind.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from llm.data.cache_lock import locked_cache_dir
from llm.data.config import check_data_config, num_threads
from llm.data.sources import FORMAT_VERSION, Source, make_source
from llm.data.split import SPLITS
from llm.data.tokenizer import canonical_tokenizer_name, get_tokenizer
from llm.fileio import TMP_MARK, atomic_path, remove_stale_temps, write_json_atomic

if TYPE_CHECKING:
    import tiktoken

log = logging.getLogger(__name__)

_BATCH_DOCS = 256  # documents per encode_ordinary_batch call


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
        size = path.stat().st_size if path.exists() else None
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


def _write_split(datasets_: list, enc: tiktoken.Encoding, dtype: np.dtype, path: Path, num_threads: int,
                 desc: str) -> tuple[int, int]:
    """Tokenize the documents of ``datasets_`` into ``path`` (doc, eot, doc, eot, ...); returns (n_tokens, n_docs)."""
    from tqdm import tqdm

    eot = enc.eot_token
    n_tokens = n_docs = 0
    total = sum(len(ds) for ds in datasets_)
    with open(path, "wb") as f, tqdm(total=total, desc=desc, unit="doc", mininterval=1.0) as bar:
        for ds in datasets_:
            for batch in ds.select_columns(["text"]).iter(batch_size=_BATCH_DOCS):
                texts = [t for t in batch["text"] if t]
                encoded = enc.encode_ordinary_batch(texts, num_threads=num_threads)
                buf = np.empty(sum(len(ids) for ids in encoded) + len(encoded), dtype=dtype)
                pos = 0
                for ids in encoded:
                    buf[pos:pos + len(ids)] = ids
                    pos += len(ids)
                    buf[pos] = eot
                    pos += 1
                f.write(buf.tobytes())
                n_tokens += len(buf)
                n_docs += len(encoded)
                bar.update(len(batch["text"]))
    return n_tokens, n_docs


def _remove_leftovers(cache_dir: Path) -> None:
    """Delete what a killed build left: temporaries and scratch dirs (we hold the lock: nobody else writes)."""
    remove_stale_temps(cache_dir)
    for stale in cache_dir.iterdir():
        if stale.is_dir() and TMP_MARK in stale.name:
            shutil.rmtree(stale, ignore_errors=True)


def _build(source: Source, cache_dir: Path, enc: tiktoken.Encoding, expected: dict, num_threads: int) -> None:
    """Tokenize ``source`` into ``cache_dir``: shards first, meta.json last. Caller holds the cache lock."""
    t0 = time.time()
    (cache_dir / "meta.json").unlink(missing_ok=True)  # the cache is invalid from here until the new meta lands
    _remove_leftovers(cache_dir)
    dtype = token_dtype(enc.n_vocab)
    scratch = Path(tempfile.mkdtemp(prefix=f"scratch{TMP_MARK}", dir=cache_dir))
    n_tokens, n_docs = {}, {}
    try:
        splits = source.load(scratch)
        for split in SPLITS:
            with atomic_path(cache_dir / f"{split}.bin") as tmp:
                n_tokens[split], n_docs[split] = _write_split(splits[split], enc, dtype, tmp, num_threads,
                                                              f"tokenizing {source.name}/{split}")
        del splits
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    meta = dict(expected, dtype=dtype.name, vocab_size=enc.n_vocab, eot=enc.eot_token, encoding=enc.name,
                n_tokens=n_tokens, n_docs=n_docs, shard_bytes={s: n * dtype.itemsize for s, n in n_tokens.items()},
                source_info=source.info, created=time.strftime("%Y-%m-%dT%H:%M:%S"),
                build_seconds=round(time.time() - t0, 2))
    write_json_atomic(cache_dir / "meta.json", meta)  # written last: its presence marks a complete cache
    log.info("built %s in %.1fs: %s", cache_dir, time.time() - t0,
             ", ".join(f"{s} {n_docs[s]} docs / {n_tokens[s]:,} tokens" for s in SPLITS))


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
    with locked_cache_dir(cache_dir):
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

