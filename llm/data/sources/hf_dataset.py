"""``data=hf_dataset``: any Hugging Face dataset, from the hub at a pinned revision or from a local dir or file.

    python -m llm.train data=hf_dataset data.hf_path=<owner/name> data.revision=<commit> [data.config_name=...]

Why: a pinned public corpus that two users read identically. ``data.revision`` (a commit of the hub repo)
pins it; without one the hub's main branch is read, which moves (the build warns, and the run's data
fingerprint, a hash of its tokens, still tells two such runs apart). ``data.hf_path`` may also be a local
directory or file ``datasets.load_dataset`` reads (parquet, json, csv, text), its files' sizes and mtimes
then part of the fingerprint. The train split is ``data.split``; the val split is ``data.val_split`` when the
dataset has one, else a share of the documents by identity (``data.id_field``, else the text), as the
other sources split. ``data.streaming=true`` reads the rows as they come instead of downloading the whole
dataset first: with ``data.max_docs`` only that many rows are fetched. The tokens are cached either way.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from llm.data.config import (
    DataError,
    hub_revision,
    nonempty_str,
    positive_int_or_none,
    setting,
    text_field,
    val_fraction,
)
from llm.data.sources.base import Source, SourceKind, add_file_stats, fingerprint_hash
from llm.data.sources.tinystories import OFFLINE_DATA, hub_reachable
from llm.data.split import DISTINCT_TEXTS_RULE, drop_repeated, id_key, shared_texts, split_documents
from llm.data.tokenizer import NetworkUnavailableError, is_network_error

log = logging.getLogger(__name__)

KEYS = ("hf_path", "revision", "config_name", "split", "val_split", "text_field", "id_field", "val_fraction",
        "max_docs", "streaming")


def _hf_path(cfg: Mapping) -> str:
    value = nonempty_str(cfg, "hf_path", None, "dataset: a hub name (owner/name) or a local dir or file")
    if value is None:
        raise DataError("data.hf_path is required for data=hf_dataset (a hub dataset such as owner/name, or a "
                        "local dir or file datasets can load)")
    return value


def _local(hf_path: str) -> Path | None:
    path = Path(os.path.expanduser(hf_path))
    return path if path.exists() else None


def _streaming(cfg: Mapping) -> bool:
    value = setting(cfg, "streaming", False)
    if not isinstance(value, bool):
        raise DataError(f"data.streaming={value} must be true or false")
    return value


def _looks_local(hf_path: str) -> bool:
    """A path, not a hub name: absolute, relative to here or home, or naming a file (a hub name is owner/name)."""
    return hf_path.startswith(("/", "./", "../", "~")) or Path(hf_path).suffix in (".json", ".jsonl", ".parquet",
                                                                                   ".csv", ".txt", ".arrow")


def check(cfg: Mapping) -> None:
    hf_path = _hf_path(cfg)
    if _looks_local(hf_path) and _local(hf_path) is None:
        raise DataError(f"data.hf_path={hf_path} does not exist (a local dir or file datasets can load, or a hub "
                        "name such as owner/name)")
    _load_args(hf_path)
    hub_revision(cfg)
    nonempty_str(cfg, "config_name", None, "dataset configuration name")
    split = nonempty_str(cfg, "split", "train", "split name")
    val_split = nonempty_str(cfg, "val_split", None, "split name")
    if val_split == split:  # the val loss would be a train loss, and nothing in the run would say so
        raise DataError(f"data.val_split={val_split} is data.split: the model would be validated on its training "
                        "documents; name another split, or data.val_split=null to hold out data.val_fraction of it")
    text_field(cfg)
    nonempty_str(cfg, "id_field", None)
    val_fraction(cfg)
    positive_int_or_none(cfg, "max_docs")
    _streaming(cfg)


def _unreachable(hf_path: str, exc: BaseException | None) -> NetworkUnavailableError:
    why = f" ({type(exc).__name__})" if exc is not None else ""
    return NetworkUnavailableError(f"data=hf_dataset needs the Hugging Face hub for data.hf_path={hf_path} and it is "
                                   f"unreachable{why}; offline choices: {OFFLINE_DATA}, data=code_corpus, or a "
                                   "local data.hf_path")


def _not_text(field: str, hf_path: str, what: str) -> DataError:
    return DataError(f"data.text_field={field}: column {field} of {hf_path} holds {what}, not strings (the "
                     "documents' text); name the text column")


def _rows(ds: Any, field: str, id_field: str | None, max_docs: int | None, hf_path: str) -> Iterator[dict]:
    for i, row in enumerate(ds):
        if max_docs is not None and i >= max_docs:
            return
        text = row[field]
        if text is not None and not isinstance(text, str):  # null reads as an empty document, as in Parquet
            raise _not_text(field, hf_path, f"{type(text).__name__} values (row {i})")
        key = None if id_field is None else id_key(row[id_field], id_field, f"row {i} of {hf_path}")
        yield {"text": text, "key": key}


def _check_text_column(ds: Any, field: str, hf_path: str) -> None:
    """The text column must hold strings: the tokenizer would fail on an int column with a traceback (the split's
    ``text.encode``). Checked from the column's type where the dataset knows it, else row by row in :func:`_rows`."""
    feature = (getattr(ds, "features", None) or {}).get(field)
    if feature is None:
        return
    dtype = getattr(feature, "dtype", None)
    if type(feature).__name__ != "Value" or dtype not in ("string", "large_string", "null"):  # null: empty docs
        raise _not_text(field, hf_path, f"{dtype or type(feature).__name__} values")


def _columns(ds: Any) -> list[str]:
    names = ds.column_names if ds.column_names is not None else list(ds.features or {})
    return list(names or [])


#: datasets' builder for a local data file, by suffix (load_dataset takes a directory or a hub name, not a file).
FILE_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv", ".txt": "text"}


def _load_args(hf_path: str) -> tuple[str, dict]:
    """``load_dataset``'s path and extra arguments for ``data.hf_path``: a local file goes through its builder."""
    local = _local(hf_path)
    if local is None or not local.is_file():
        return hf_path, {}
    builder = FILE_BUILDERS.get(local.suffix.lower())
    if builder is None:
        raise DataError(f"data.hf_path={hf_path} is a file datasets cannot read as one: use a directory, or a "
                        f"{'/'.join(FILE_BUILDERS)} file")
    return builder, {"data_files": str(local)}


def _one_split(hf_path: str, split: str, opts: dict, field: str, id_field: str | None, max_docs: int | None,
               streaming: bool, scratch: Path) -> tuple[Any, list[str | None] | None]:
    """The rows of one split as a Dataset with a "text" column (and the identities by ``id_field``)."""
    import datasets

    path, extra = _load_args(hf_path)
    if _local(hf_path) is not None:
        # datasets' own cache knows a local file by its mtime alone: a file replaced with its mtime kept (cp -p,
        # rsync -t) would be read as the old copy, so a local dataset is converted under the build's scratch dir.
        extra["cache_dir"] = str(scratch / "hf")
    try:
        ds = datasets.load_dataset(path, split=split, streaming=streaming, **opts, **extra)
    except Exception as exc:
        if is_network_error(exc):
            raise _unreachable(hf_path, exc) from None
        if isinstance(exc, (ValueError, KeyError)) and "split" in str(exc).lower():
            raise DataError(f"data.split/val_split: {hf_path} has no split {split!r} ({str(exc).splitlines()[0]})") \
                from None
        if isinstance(exc, datasets.data_files.EmptyDatasetError):  # a local dir without a file datasets reads
            raise DataError(f"data.hf_path={hf_path} holds no data files datasets can load (use one of "
                            f"{'/'.join(FILE_BUILDERS)})") from None
        if isinstance(exc, datasets.exceptions.DatasetGenerationError):  # a file that is not what its suffix says
            cause = exc.__cause__ or exc
            msg = str(cause).splitlines()[0][:200] if str(cause) else ""
            raise DataError(f"data.hf_path={hf_path}: reading split {split!r} failed ({type(cause).__name__}: "
                            f"{msg})") from None
        raise
    columns = _columns(ds)
    for key, name in (("text_field", field), ("id_field", id_field)):
        if name is not None and columns and name not in columns:
            raise DataError(f"data.{key}={name} is not a column of {hf_path} (columns: {', '.join(columns)})")
    _check_text_column(ds, field, hf_path)
    if streaming:  # rows as they come, into an Arrow file under the build's scratch dir
        try:
            out = datasets.Dataset.from_generator(partial(_rows, ds, field, id_field, max_docs, hf_path),
                                                  cache_dir=str(scratch / "hf"))
        except datasets.exceptions.DatasetGenerationError as exc:  # it wraps _rows' own one-line refusal
            if isinstance(exc.__cause__, DataError):
                raise exc.__cause__ from None
            raise
        keys = out["key"] if id_field is not None else None
        return out.select_columns(["text"]), keys
    if max_docs is not None and len(ds) > max_docs:
        ds = ds.select(range(max_docs))
    keys = None if id_field is None else [
        id_key(v, id_field, f"row {i} of {hf_path}") for i, v in enumerate(ds[id_field])]
    ds = ds.select_columns([field])
    return (ds.rename_column(field, "text") if field != "text" else ds), keys


def _load(hf_path: str, opts: dict, split: str, val_split: str | None, field: str, id_field: str | None,
          fraction: float, max_docs: int | None, streaming: bool, scratch: Path) -> dict[str, list]:
    from huggingface_hub import constants

    if _local(hf_path) is None and not constants.HF_HUB_OFFLINE and not hub_reachable():
        raise _unreachable(hf_path, None)
    if _local(hf_path) is None and opts.get("revision") is None:
        log.warning("data=hf_dataset: data.revision=null reads %s at the hub's main branch, which can change: pin a "
                    "commit (data.revision=<sha>) for a corpus others can read again", hf_path)
    train = _one_split(hf_path, split, opts, field, id_field, max_docs, streaming, scratch)
    where = f"data.hf_path={hf_path}"
    if val_split is None:
        # Rows split by data.id_field: a text repeated under two ids would otherwise sit on both sides.
        groups, dropped = drop_repeated([train])
        if dropped:
            log.info(f"{where}: {dropped} document(s) repeat an earlier one's text exactly and are left out (a copy "
                     "on each side of the split would put val text in train)")
        return split_documents(groups, fraction, where)
    val = _one_split(hf_path, val_split, opts, field, id_field, max_docs, streaming, scratch)
    shared = shared_texts([train], [val])
    if shared:
        log.warning(f"{where}: {shared} document(s) of data.val_split={val_split} are also in data.split={split} word "
                    "for word, so the val loss is partly measured on train text (data.val_split=null splits "
                    "data.split itself, each text once)")
    return {"train": [train], "val": [val]}


def build(cfg: Mapping) -> Source:
    hf_path = _hf_path(cfg)
    revision = hub_revision(cfg)
    config_name = nonempty_str(cfg, "config_name", None, "dataset configuration name")
    split = str(nonempty_str(cfg, "split", "train", "split name"))
    val_split = nonempty_str(cfg, "val_split", None, "split name")
    field, id_field = text_field(cfg), nonempty_str(cfg, "id_field", None)
    fraction, max_docs, streaming = val_fraction(cfg), positive_int_or_none(cfg, "max_docs"), _streaming(cfg)
    local = _local(hf_path)
    # streaming is left out: it changes how rows are read, not which
    h = fingerprint_hash(source="hf_dataset", hf_path=str(local.resolve()) if local else hf_path, revision=revision,
                         config_name=config_name, split=split, val_split=val_split, text_field=field,
                         id_field=id_field, val_fraction=None if val_split else fraction, max_docs=max_docs,
                         distinct_texts=DISTINCT_TEXTS_RULE if val_split is None else False)
    if local is not None:
        rels = [local.name] if local.is_file() else sorted(
            p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file() and not p.name.startswith("."))
        add_file_stats(h, local.parent if local.is_file() else local, rels)
    opts = {k: v for k, v in (("name", config_name), ("revision", revision)) if v is not None}
    info = {"hf_path": hf_path, "revision": revision, "config_name": config_name, "split": split,
            "val_split": val_split, "text_field": field, "id_field": id_field,
            "val_fraction": None if val_split else fraction, "max_docs": max_docs, "streaming": streaming}
    return Source("hf_dataset", h.hexdigest(), info,
                  partial(_load, hf_path, opts, split, val_split, field, id_field, fraction, max_docs, streaming))


KIND = SourceKind(keys=KEYS, check=check, build=build)
