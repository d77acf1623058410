"""Data layer: text sources -> tokenized, memory-mapped train/val token streams, cached on disk.

Sources (``data.name``):

* ``pystdlib`` (default, offline): the ``*.py`` files of the running interpreter's standard library.
* ``tinystories``: the Hugging Face hub dataset ``roneneldan/TinyStories`` (its train and validation splits).
* ``text_files``: ``data.path``, a file or a directory (searched recursively) of ``.txt`` (one document per
  file), ``.jsonl`` or ``.parquet`` (one document per row, text in ``data.text_field``).

Documents are tokenized once with tiktoken (``encode_ordinary``, so text that looks like a special token stays
text), each followed by the tokenizer's end-of-text token, and written to ``train.bin`` / ``val.bin`` (uint16
when the vocabulary has fewer than 65536 ids, else uint32) under
``<cache_root>/<source>-<tokenizer>-<fingerprint[:16]>/``. ``meta.json`` is written last and records the token
counts, dtype, fingerprint and shard byte sizes; a cache whose meta is missing or unreadable, whose shard sizes
disagree with it, or whose fingerprint is not the current source's is rebuilt, never used. Builds hold a file
lock on the cache directory and write temp files that are renamed into place, so concurrent processes
preparing the same cache end with one valid copy.

The val split is fixed by document identity: a document goes to val when a stable hash of its identity (the
file's relative path, or a row's id / content) falls below ``data.val_fraction`` -- so it does not depend on
file order, ``max_files``/``max_docs`` caps, or the machine. TinyStories uses the dataset's own validation split.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from llm.tokenizer import (
    NetworkUnavailableError,
    canonical_tokenizer_name,
    check_tokenizer_name,
    get_tokenizer,
    is_network_error,
)

log = logging.getLogger(__name__)

SOURCES = ("pystdlib", "tinystories", "text_files")
TEXT_FILE_SUFFIXES = (".txt", ".jsonl", ".parquet")
SPLITS = ("train", "val")
# Bump when the tokenized layout or the split rule changes: every cache is then rebuilt.
FORMAT_VERSION = 1
_OFFLINE_DATA = "data=pystdlib, data=text_files data.path=..."
_BATCH_DOCS = 256  # documents per encode_ordinary_batch call


@dataclass
class TokenData:
    """Tokenized train/val streams of one data source (1-D read-only memmaps of token ids)."""

    train: np.ndarray
    val: np.ndarray
    vocab_size: int
    eot: int
    meta: dict


# --------------------------------------------------------------------------------------------------------------
# config helpers


def _get(cfg: Mapping, key: str, default: Any = None) -> Any:
    """`cfg[key]` for a dict or an OmegaConf DictConfig; missing, None and '???' read as `default`."""
    try:
        value = cfg.get(key, default)
    except Exception:  # omegaconf MissingMandatoryValue for '???'
        return default
    if value is None or value == "???":
        return default
    return value


def _positive_int_or_none(cfg: Mapping, key: str) -> int | None:
    value = _get(cfg, key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"data.{key}={value} must be a positive integer or null")
    return int(value)


def _val_fraction(cfg: Mapping) -> float:
    value = _get(cfg, "val_fraction", 0.05)
    try:
        fraction = float(value)
    except (TypeError, ValueError):
        fraction = -1.0
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"data.val_fraction={value} must be a number in (0, 1)")
    return fraction


def _data_path(cfg: Mapping) -> Path:
    raw = _get(cfg, "path")
    if raw is None or str(raw) == "":
        raise ValueError("data.path is required for data=text_files (a file or directory of .txt/.jsonl/.parquet)")
    path = Path(os.path.expanduser(str(raw)))
    if not path.exists():
        raise ValueError(f"data.path={raw} does not exist")
    if path.is_file() and path.suffix.lower() not in TEXT_FILE_SUFFIXES:
        raise ValueError(f"data.path={raw} is not a {'/'.join(TEXT_FILE_SUFFIXES)} file")
    return path


def check_data_config(data_cfg: Mapping, tokenizer_name: str) -> None:
    """Cheap checks to run before any work; raises ValueError with one line naming the offending key."""
    name = _get(data_cfg, "name")
    if name not in SOURCES:
        raise ValueError(f"data.name={name} is not a known data source; choices: {', '.join(SOURCES)}")
    if name in ("pystdlib", "text_files"):
        _val_fraction(data_cfg)
    for key in ("max_files", "max_docs", "num_threads"):
        _positive_int_or_none(data_cfg, key)
    if name == "text_files":
        _data_path(data_cfg)
    if name in ("text_files", "tinystories"):
        field = _get(data_cfg, "text_field", "text")
        if not isinstance(field, str) or not field:
            raise ValueError(f"data.text_field={field} must be a non-empty column name")
    check_tokenizer_name(tokenizer_name)


# --------------------------------------------------------------------------------------------------------------
# sources: each gives a cheap fingerprint (no reading of file contents) and a loader of documents split into
# train/val, as lists of `datasets.Dataset` with a "text" column.


@dataclass
class _Source:
    name: str
    fingerprint: str
    info: dict  # recorded in meta.json
    load: Callable[[Path], dict[str, list]]  # scratch dir -> {"train": [Dataset, ...], "val": [...]}


def _hash_json(obj: Any) -> Any:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode())


def _add_file_stats(h: Any, root: Path, rels: list[str]) -> None:
    for rel in rels:
        st = os.stat(root / rel)
        h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))


def _stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _stdlib_files(root: Path, max_files: int | None) -> list[str]:
    """Sorted relative posix paths of the stdlib's *.py files, without site-packages/dist-packages."""
    skip = {"site-packages", "dist-packages", "__pycache__"}
    rels = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip]
        rel_dir = Path(dirpath).relative_to(root)
        rels.extend((rel_dir / f).as_posix() for f in filenames if f.endswith(".py"))
    rels.sort()
    return rels[:max_files] if max_files else rels


def _pystdlib_source(cfg: Mapping) -> _Source:
    root = _stdlib_root()
    max_files = _positive_int_or_none(cfg, "max_files")
    val_fraction = _val_fraction(cfg)
    rels = _stdlib_files(root, max_files)
    if not rels:
        raise ValueError(f"data=pystdlib found no *.py files under the interpreter's stdlib {root}")
    h = _hash_json({"format": FORMAT_VERSION, "source": "pystdlib", "python": sys.version,
                    "impl": sys.implementation.name, "val_fraction": val_fraction, "max_files": max_files})
    _add_file_stats(h, root, rels)

    def load(scratch: Path) -> dict[str, list]:
        import datasets

        texts, paths = [], []
        for rel in rels:
            text = (root / rel).read_bytes().decode("utf-8", errors="replace")
            if text:
                texts.append(text)
                paths.append(rel)
        ds = datasets.Dataset.from_dict({"text": texts, "path": paths})
        return _split_documents([(ds, paths)], val_fraction, "data=pystdlib (raise data.max_files)")

    info = {"root": str(root), "n_files": len(rels), "python": sys.version.split()[0], "max_files": max_files,
            "val_fraction": val_fraction}
    return _Source("pystdlib", h.hexdigest(), info, load)


def _text_files(path: Path) -> tuple[Path, list[str]]:
    """(root, sorted relative paths) of the supported files at `path` (hidden entries skipped)."""
    if path.is_file():
        return path.parent, [path.name]
    rels = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        rel_dir = Path(dirpath).relative_to(path)
        rels.extend((rel_dir / f).as_posix() for f in filenames
                    if not f.startswith(".") and Path(f).suffix.lower() in TEXT_FILE_SUFFIXES)
    rels.sort()
    if not rels:
        raise ValueError(f"data.path={path} contains no {'/'.join(TEXT_FILE_SUFFIXES)} files")
    return path, rels


def _text_files_source(cfg: Mapping) -> _Source:
    path = _data_path(cfg)
    root, rels = _text_files(path)
    text_field = str(_get(cfg, "text_field", "text"))
    id_field = _get(cfg, "id_field")
    max_docs = _positive_int_or_none(cfg, "max_docs")
    val_fraction = _val_fraction(cfg)
    h = _hash_json({"format": FORMAT_VERSION, "source": "text_files", "path": str(path.resolve()),
                    "text_field": text_field, "id_field": id_field, "max_docs": max_docs,
                    "val_fraction": val_fraction})
    _add_file_stats(h, root, rels)

    def load(scratch: Path) -> dict[str, list]:
        import datasets

        by_kind: dict[str, list[str]] = {}
        for rel in rels:
            by_kind.setdefault(Path(rel).suffix.lower(), []).append(rel)
        groups = []
        # A private HF cache per build: the Arrow copies are deleted with the scratch dir, and datasets' own
        # cache (keyed by file mtime only) can never hand back a stale copy of an edited file.
        common = {"split": "train", "cache_dir": str(scratch / "hf")}
        if ".txt" in by_kind:
            files = by_kind[".txt"]
            ds = datasets.load_dataset("text", data_files=[str(root / r) for r in files], sample_by="document",
                                       encoding_errors="replace", **common)
            groups.append((ds, files if len(ds) == len(files) else None))  # one row per file -> key = path
        for suffix, builder in ((".jsonl", "json"), (".parquet", "parquet")):
            if suffix not in by_kind:
                continue
            ds = datasets.load_dataset(builder, data_files=[str(root / r) for r in by_kind[suffix]], **common)
            if text_field not in ds.column_names:
                raise ValueError(f"data.text_field={text_field} is not a column of the {suffix} files under "
                                 f"data.path={path} (columns: {', '.join(ds.column_names)})")
            keys = None
            if id_field is not None:
                if id_field not in ds.column_names:
                    raise ValueError(f"data.id_field={id_field} is not a column of the {suffix} files under "
                                     f"data.path={path} (columns: {', '.join(ds.column_names)})")
                keys = [f"id:{v}" for v in ds[id_field]]
            ds = ds.select_columns([text_field])
            if text_field != "text":
                ds = ds.rename_column(text_field, "text")
            groups.append((ds, keys))
        if max_docs is not None:
            groups = _cap_docs(groups, max_docs)
        return _split_documents(groups, val_fraction, f"data.path={path}")

    info = {"path": str(path.resolve()), "n_files": len(rels), "text_field": text_field, "id_field": id_field,
            "max_docs": max_docs, "val_fraction": val_fraction}
    return _Source("text_files", h.hexdigest(), info, load)


def _cap_docs(groups: list, max_docs: int) -> list:
    out, left = [], max_docs
    for ds, keys in groups:
        if left <= 0:
            break
        if len(ds) > left:
            ds, keys = ds.select(range(left)), (keys[:left] if keys is not None else None)
        out.append((ds, keys))
        left -= len(ds)
    return out


def _hub_reachable(timeout: float = 5.0) -> bool:
    """One quick request to the hub endpoint (no retries): any HTTP answer means reachable."""
    import requests
    from huggingface_hub import constants

    try:
        requests.head(constants.ENDPOINT, timeout=timeout, allow_redirects=False)
        return True
    except requests.RequestException:
        return False


def _tinystories_source(cfg: Mapping) -> _Source:
    hf_path = str(_get(cfg, "hf_path", "roneneldan/TinyStories"))
    revision = _get(cfg, "revision")
    text_field = str(_get(cfg, "text_field", "text"))
    max_docs = _positive_int_or_none(cfg, "max_docs")
    # Hub datasets are versioned by revision; the fingerprint needs no network so a built cache works offline.
    h = _hash_json({"format": FORMAT_VERSION, "source": "tinystories", "hf_path": hf_path, "revision": revision,
                    "text_field": text_field, "max_docs": max_docs})

    def unreachable(exc: BaseException | None) -> NetworkUnavailableError:
        why = f" ({type(exc).__name__})" if exc is not None else ""
        return NetworkUnavailableError(
            f"data=tinystories needs the Hugging Face hub ({hf_path}) and it is unreachable{why}; "
            f"offline choices: {_OFFLINE_DATA}")

    def load(scratch: Path) -> dict[str, list]:
        import datasets
        from huggingface_hub import constants

        # datasets retries an unreachable hub for ~25 s; one quick probe fails fast instead. With HF_HUB_OFFLINE
        # set, datasets reads its local cache (and fails fast itself when the dataset is not there).
        if not constants.HF_HUB_OFFLINE and not _hub_reachable():
            raise unreachable(None)
        try:
            dd = datasets.load_dataset(hf_path, revision=revision)
        except Exception as exc:
            if is_network_error(exc):
                raise unreachable(exc) from exc
            raise
        out: dict[str, list] = {}
        for split, hf_split in (("train", "train"), ("val", "validation")):
            ds = dd[hf_split]
            if text_field not in ds.column_names:
                raise ValueError(f"data.text_field={text_field} is not a column of {hf_path} "
                                 f"(columns: {', '.join(ds.column_names)})")
            ds = ds.select_columns([text_field])
            if text_field != "text":
                ds = ds.rename_column(text_field, "text")
            if max_docs is not None and len(ds) > max_docs:
                ds = ds.select(range(max_docs))
            out[split] = [ds]
        return out

    info = {"hf_path": hf_path, "revision": revision, "text_field": text_field, "max_docs": max_docs}
    return _Source("tinystories", h.hexdigest(), info, load)


_SOURCE_BUILDERS = {"pystdlib": _pystdlib_source, "tinystories": _tinystories_source,
                    "text_files": _text_files_source}


# --------------------------------------------------------------------------------------------------------------
# document-level split


def _val_score(key: str) -> float:
    """A stable number in [0, 1) from a document's identity."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def _split_documents(groups: list, val_fraction: float, what: str) -> dict[str, list]:
    """Split [(Dataset with "text", keys or None)] into train/val by document identity; empty documents dropped.

    The key of a row is keys[i] when given (a path or an id), else a hash of its text. A document is in val when
    `_val_score(key) < val_fraction`; if that leaves val (or train) empty, the document with the lowest (highest)
    score moves over, so both splits always hold at least one document.
    """
    rows = []  # (score, group index, row index)
    for g, (ds, keys) in enumerate(groups):
        i = 0
        for batch in ds.select_columns(["text"]).iter(batch_size=1024):
            for text in batch["text"]:
                if text:
                    key = keys[i] if keys is not None else "sha256:" + hashlib.sha256(text.encode()).hexdigest()
                    rows.append((_val_score(key), g, i))
                i += 1
    if len(rows) < 2:
        raise ValueError(f"{what} has {len(rows)} non-empty document(s); a train/val split by document needs >= 2")
    is_val = [score < val_fraction for score, _, _ in rows]
    if not any(is_val):
        is_val[min(range(len(rows)), key=lambda j: rows[j][0])] = True
    if all(is_val):
        is_val[max(range(len(rows)), key=lambda j: rows[j][0])] = False
    out: dict[str, list] = {s: [] for s in SPLITS}
    for g, (ds, _) in enumerate(groups):
        for split, want in (("train", False), ("val", True)):
            idx = [i for (_, gg, i), v in zip(rows, is_val, strict=True) if gg == g and v == want]
            if idx:
                out[split].append(ds.select(idx))
    return out


# --------------------------------------------------------------------------------------------------------------
# cache


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab < 65536), else uint32."""
    return np.dtype(np.uint16) if vocab_size < 65536 else np.dtype(np.uint32)


def _read_valid_meta(cache_dir: Path, expected: dict) -> tuple[dict | None, str]:
    """(meta, "") when the cache at `cache_dir` is complete and belongs to `expected`, else (None, reason)."""
    meta_path = cache_dir / "meta.json"
    if not meta_path.exists():
        return None, "no meta.json (never built or interrupted)"
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
        if meta["dtype"] != token_dtype(int(meta["vocab_size"])).name or not 0 <= int(meta["eot"]) < meta["vocab_size"]:
            return None, f"meta.json dtype/vocab_size/eot inconsistent ({meta['dtype']}, {meta['vocab_size']})"
        itemsize = np.dtype(meta["dtype"]).itemsize
        for split in SPLITS:
            want = int(meta["shard_bytes"][split])
            if want != int(meta["n_tokens"][split]) * itemsize:
                return None, f"meta.json {split} shard_bytes disagrees with n_tokens"
            path = cache_dir / f"{split}.bin"
            size = path.stat().st_size if path.exists() else None
            if size != want:
                return None, f"{split}.bin has {size} bytes, meta.json says {want}"
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"incomplete meta.json ({type(exc).__name__}: {exc})"
    return meta, ""


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_split(datasets_: list, enc, dtype: np.dtype, path: Path, num_threads: int, desc: str) -> tuple[int, int]:
    """Tokenize the documents of `datasets_` into `path` (doc, eot, doc, eot, ...); returns (n_tokens, n_docs)."""
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
        f.flush()
        os.fsync(f.fileno())
    return n_tokens, n_docs


def _build(source: _Source, cache_dir: Path, enc, expected: dict, num_threads: int) -> None:
    """Tokenize `source` into `cache_dir`. Caller holds the cache lock."""
    t0 = time.time()
    (cache_dir / "meta.json").unlink(missing_ok=True)  # the cache is invalid from here until the new meta lands
    for stale in cache_dir.glob("*.tmp*"):  # left by a killed build (we hold the lock: nobody else writes here)
        shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
    dtype = token_dtype(enc.n_vocab)
    scratch = Path(tempfile.mkdtemp(prefix="scratch.tmp", dir=cache_dir))
    tmp_files = []
    try:
        splits = source.load(scratch)
        n_tokens, n_docs, shard_bytes = {}, {}, {}
        for split in SPLITS:
            tmp = cache_dir / f"{split}.bin.tmp{os.getpid()}"
            tmp_files.append(tmp)
            n_tokens[split], n_docs[split] = _write_split(splits[split], enc, dtype, tmp, num_threads,
                                                          f"tokenizing {source.name}/{split}")
            shard_bytes[split] = n_tokens[split] * dtype.itemsize
        del splits
        for split in SPLITS:
            os.replace(cache_dir / f"{split}.bin.tmp{os.getpid()}", cache_dir / f"{split}.bin")
        meta = dict(expected, dtype=dtype.name, vocab_size=enc.n_vocab, eot=enc.eot_token, encoding=enc.name,
                    n_tokens=n_tokens, n_docs=n_docs, shard_bytes=shard_bytes, source_info=source.info,
                    created=time.strftime("%Y-%m-%dT%H:%M:%S"), build_seconds=round(time.time() - t0, 2))
        tmp_meta = cache_dir / f"meta.json.tmp{os.getpid()}"
        tmp_files.append(tmp_meta)
        with open(tmp_meta, "w") as f:
            json.dump(meta, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_meta, cache_dir / "meta.json")  # written last: its presence marks a complete cache
        _fsync_dir(cache_dir)
    finally:
        for tmp in tmp_files:
            tmp.unlink(missing_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)
    log.info("built %s in %.1fs: %s", cache_dir, time.time() - t0,
             ", ".join(f"{s} {n_docs[s]} docs / {n_tokens[s]:,} tokens" for s in SPLITS))


def _open_shard(path: Path, dtype: np.dtype, n: int) -> np.ndarray:
    if n == 0:
        return np.empty(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(n,))


def prepare_data(data_cfg: Mapping, tokenizer_name: str, cache_root: str | Path) -> TokenData:
    """Tokenized train/val streams for `data_cfg` (conf/data/<name>.yaml), built once and cached under
    `cache_root`; later calls (and other processes) reuse the cache while the source's fingerprint holds.

    A valid cache is used without loading the tokenizer, so a cache built online also works offline.
    """
    from filelock import FileLock, Timeout

    check_data_config(data_cfg, tokenizer_name)
    tokenizer = canonical_tokenizer_name(str(tokenizer_name))
    source = _SOURCE_BUILDERS[_get(data_cfg, "name")](data_cfg)
    cache_dir = Path(os.path.expanduser(str(cache_root))) / f"{source.name}-{tokenizer}-{source.fingerprint[:16]}"
    expected = {"format_version": FORMAT_VERSION, "source": source.name, "tokenizer": tokenizer,
                "fingerprint": source.fingerprint}

    meta, why = _read_valid_meta(cache_dir, expected)
    if meta is None:
        enc = get_tokenizer(tokenizer)  # before any work: may fail fast for want of a network
        cache_dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(cache_dir / ".lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            log.info("waiting for another process preparing %s", cache_dir)
            lock.acquire()
        try:
            meta, why = _read_valid_meta(cache_dir, expected)  # another process may have built it meanwhile
            if meta is None:
                log.info("preparing %s (%s)", cache_dir, why)
                num_threads = _positive_int_or_none(data_cfg, "num_threads") or os.cpu_count() or 1
                _build(source, cache_dir, enc, expected, num_threads)
                meta, why = _read_valid_meta(cache_dir, expected)
                if meta is None:
                    raise RuntimeError(f"tokenized cache {cache_dir} is invalid right after building it: {why}")
        finally:
            lock.release()
        if (meta["vocab_size"], meta["eot"]) != (enc.n_vocab, enc.eot_token):
            raise RuntimeError(f"tokenized cache {cache_dir} was built with another '{tokenizer}' vocabulary")
    else:
        log.info("using cached %s", cache_dir)

    dtype = np.dtype(meta["dtype"])
    train = _open_shard(cache_dir / "train.bin", dtype, meta["n_tokens"]["train"])
    val = _open_shard(cache_dir / "val.bin", dtype, meta["n_tokens"]["val"])
    return TokenData(train=train, val=val, vocab_size=int(meta["vocab_size"]), eot=int(meta["eot"]),
                     meta=dict(meta, cache_dir=str(cache_dir)))


# --------------------------------------------------------------------------------------------------------------
# batches


def _check_length(tokens: np.ndarray, seq_len: int, what: str) -> None:
    if seq_len <= 0:
        raise ValueError(f"seq_len={seq_len} must be positive")
    if len(tokens) < seq_len + 1:
        raise ValueError(f"the {what} stream has {len(tokens)} tokens, fewer than seq_len+1={seq_len + 1}; "
                         "use more data (or a larger val_fraction) or a shorter model.seq_len")


def _windows(tokens: np.ndarray, starts: np.ndarray, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    idx = starts[:, None] + np.arange(seq_len + 1)
    buf = torch.from_numpy(np.asarray(tokens[idx], dtype=np.int64))
    return buf[:, :-1].contiguous(), buf[:, 1:].contiguous()


def sample_batch(tokens: np.ndarray, batch_size: int, seq_len: int, seed: int, step: int,
                 micro_step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch_size` random windows: x (B, T) int64 and y = x shifted by one token.

    The windows depend only on (seed, step, micro_step) -- not on any global RNG -- so a resumed run continues
    the exact data stream from its step counter.
    """
    _check_length(tokens, seq_len, "token")
    rng = np.random.default_rng([int(seed) % 2**64, int(step), int(micro_step)])
    starts = rng.integers(0, len(tokens) - seq_len, size=batch_size)  # last start: len - seq_len - 1
    return _windows(tokens, starts, seq_len)


def val_batches(tokens: np.ndarray, batch_size: int, seq_len: int,
                n_batches: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The fixed evaluation set: the first `n_batches * batch_size` non-overlapping windows of `tokens`.

    Yields full batches only; when `tokens` holds fewer than `batch_size` windows, one smaller batch of all of
    them. Raises ValueError at once when `tokens` has fewer than seq_len+1 tokens.
    """
    _check_length(tokens, seq_len, "val")
    n_windows = (len(tokens) - 1) // seq_len
    n_full = min(n_batches, n_windows // batch_size)
    sizes = [batch_size] * n_full if n_full > 0 else [n_windows]

    def gen() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        first = 0
        for size in sizes:
            yield _windows(tokens, (first + np.arange(size)) * seq_len, seq_len)
            first += size

    return gen()
