"""``data=tinystories``: the Hugging Face hub dataset ``roneneldan/TinyStories`` (its train and validation splits).

Why its own split: the dataset ships a validation split, so the document-hash split is not used. The
fingerprint needs no network (the hub versions datasets by revision), so a cache built online works offline.
An unreachable hub is one NetworkUnavailableError line naming the offline sources, found by one quick probe
without retries: datasets' own retries keep a user waiting, for a failure the probe already tells.
"""

from __future__ import annotations

from collections.abc import Mapping

from llm.data.config import DataError, hub_revision, nonempty_str, positive_int_or_none, text_field
from llm.data.sources.base import Source, SourceKind, fingerprint_hash
from llm.data.tokenizer import NetworkUnavailableError, is_network_error

KEYS = ("hf_path", "revision", "text_field", "max_docs")
OFFLINE_DATA = "data=pystdlib, data=text_files data.path=..."


def hub_reachable(timeout: float = 5.0) -> bool:
    """One quick request to the hub endpoint (no retries): any HTTP answer means reachable."""
    import requests
    from huggingface_hub import constants

    try:
        requests.head(constants.ENDPOINT, timeout=timeout, allow_redirects=False)
        return True
    except requests.RequestException:
        return False


def check(cfg: Mapping) -> None:
    nonempty_str(cfg, "hf_path", "roneneldan/TinyStories", "hub dataset path")
    hub_revision(cfg)
    text_field(cfg)
    positive_int_or_none(cfg, "max_docs")


def _unreachable(hf_path: str, exc: BaseException | None) -> NetworkUnavailableError:
    why = f" ({type(exc).__name__})" if exc is not None else ""
    return NetworkUnavailableError(f"data=tinystories needs the Hugging Face hub ({hf_path}) and it is "
                                   f"unreachable{why}; offline choices: {OFFLINE_DATA}")


def _load(hf_path: str, revision: str | None, field: str, max_docs: int | None) -> dict[str, list]:
    import datasets
    from huggingface_hub import constants

    # With HF_HUB_OFFLINE set, datasets reads its local cache (and fails fast itself when the dataset is absent).
    if not constants.HF_HUB_OFFLINE and not hub_reachable():
        raise _unreachable(hf_path, None)
    try:
        dd = datasets.load_dataset(hf_path, revision=revision)
    except Exception as exc:
        if is_network_error(exc):
            raise _unreachable(hf_path, exc) from None  # the chained retries say nothing the message does not
        raise
    out: dict[str, list] = {}
    for split, hf_split in (("train", "train"), ("val", "validation")):
        ds = dd[hf_split]
        if field not in ds.column_names:
            raise DataError(f"data.text_field={field} is not a column of {hf_path} "
                            f"(columns: {', '.join(ds.column_names)})")
        ds = ds.select_columns([field])
        if field != "text":
            ds = ds.rename_column(field, "text")
        if max_docs is not None and len(ds) > max_docs:
            ds = ds.select(range(max_docs))
        out[split] = [ds]
    return out


def build(cfg: Mapping) -> Source:
    hf_path = str(nonempty_str(cfg, "hf_path", "roneneldan/TinyStories", "hub dataset path"))
    revision = hub_revision(cfg)
    field = text_field(cfg)
    max_docs = positive_int_or_none(cfg, "max_docs")
    h = fingerprint_hash(source="tinystories", hf_path=hf_path, revision=revision, text_field=field,
                         max_docs=max_docs)
    info = {"hf_path": hf_path, "revision": revision, "text_field": field, "max_docs": max_docs}
    return Source("tinystories", h.hexdigest(), info, lambda scratch: _load(hf_path, revision, field, max_docs))


KIND = SourceKind(keys=KEYS, check=check, build=build)
