"""``data=code_corpus``: the Python source of the installed packages, a corpus pinned by its manifest.

Why this source: a comparison of RoPE kernels must train on text it does not repeat (training amplifies
last-bit differences once a model memorizes its data), and a machine's installed packages are hundreds of MB
of Python source, on every machine, offline. Why a manifest: "whatever site-packages holds" differs between
machines, so every build writes ``manifest.json`` beside the tokens in the cache: each package and version
read, each file's sha256, and one corpus fingerprint, a hash of the (document, sha256) pairs. A run records
the fingerprint in its summary (:func:`llm.data.cache.data_fingerprint`), and ``data.manifest=<file>``
rebuilds exactly that corpus wherever those package versions are installed, checking every file's hash.

What is read: every distribution ``importlib.metadata`` finds on the interpreter's path (``data.site_packages``:
other directories), the first of a name winning as it does for ``import``, less ``data.exclude`` (the project
itself: its files change with every commit); of each, the ``*.py`` files its RECORD lists inside its site
directory. A file is one document, identified by ``<package>/<path>`` (stable across versions, so the split
by identity keeps a document on its side); files that are not UTF-8, shorter than ``data.min_chars`` or longer
than ``data.max_chars`` are skipped, and so is a file whose text an earlier one already had, line endings aside
(:func:`llm.data.split.text_key`: vendored copies, one with CRLF line endings, would otherwise sit on both sides
of the split). A manifest is rebuilt as it names its files: one written before line endings were set aside may
name such a pair, which the build then warns of.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

from llm.data.config import DataError, positive_int_or_none, setting, val_fraction
from llm.data.sources.base import KEEP_DIR, Source, SourceKind, fingerprint_hash
from llm.data.split import DISTINCT_TEXTS_RULE, split_documents, text_key
from llm.fileio import write_json_atomic

log = logging.getLogger(__name__)

KEYS = ("packages", "exclude", "site_packages", "manifest", "min_chars", "max_chars", "val_fraction", "max_docs")
MIN_CHARS, MAX_CHARS = 200, 300_000
MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1
DEFAULT_EXCLUDE = ("ropelab",)


@dataclass(frozen=True)
class PackageFile:
    """One ``*.py`` file of an installed distribution."""

    package: str  # the distribution's normalized name
    version: str
    path: str  # posix path inside the distribution's site directory, as its RECORD lists it
    location: Path  # where it is on this machine

    @property
    def doc_id(self) -> str:
        return f"{self.package}/{self.path}"


@dataclass(frozen=True)
class Corpus:
    """The documents read, in document-id order, and the manifest that pins them."""

    ids: list[str]
    texts: list[str]
    manifest: dict[str, Any]


def normalize(name: str) -> str:
    """A distribution name as packaging compares them (PEP 503): ``Foo_Bar`` and ``foo-bar`` are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _string_list(cfg: Mapping, key: str, default: Sequence[str] | None) -> list[str] | None:
    value = setting(cfg, key)
    if value is None:
        return None if default is None else list(default)
    if isinstance(value, str) or not isinstance(value, Iterable) or not all(isinstance(v, str) and v for v in value):
        raise DataError(f"data.{key}={value} must be a list of names (or null)")
    return [str(v) for v in value]


def _chars(cfg: Mapping) -> tuple[int, int]:
    lo = positive_int_or_none(cfg, "min_chars") or MIN_CHARS
    hi = positive_int_or_none(cfg, "max_chars") or MAX_CHARS
    if lo > hi:
        raise DataError(f"data.min_chars={lo} is above data.max_chars={hi}")
    return lo, hi


def _manifest_path(cfg: Mapping) -> Path | None:
    raw = setting(cfg, "manifest")
    if raw is None or str(raw) == "":
        return None
    path = Path(os.path.expanduser(str(raw)))
    if not path.is_file():
        raise DataError(f"data.manifest={raw} is not a file (a manifest.json written by a code_corpus build)")
    return path


def installed_distributions(search: Sequence[str] | None = None) -> dict[str, metadata.Distribution]:
    """Normalized name -> distribution, for every one on ``search`` (default: ``sys.path``), sorted by name;
    of two with one name the first on the path wins, as ``import`` would find it."""
    found: dict[str, metadata.Distribution] = {}
    dists = metadata.distributions(path=list(search)) if search is not None else metadata.distributions()
    for dist in dists:
        name = dist.metadata["Name"] if dist.metadata is not None else None
        if name:
            found.setdefault(normalize(name), dist)
    return dict(sorted(found.items()))


def package_files(name: str, dist: metadata.Distribution) -> list[PackageFile]:
    """The ``*.py`` files ``dist``'s RECORD lists inside its site directory that exist here, sorted by path."""
    out, version = [], str(dist.version)  # read once: each .version parses the METADATA file again
    for f in dist.files or []:
        if f.suffix != ".py" or ".." in f.parts or "__pycache__" in f.parts:
            continue
        location = Path(str(dist.locate_file(f)))
        if location.is_file():
            out.append(PackageFile(name, version, f.as_posix(), location))
    return sorted(out, key=lambda p: p.path)


def select_packages(dists: Mapping[str, metadata.Distribution], packages: Sequence[str] | None,
                    exclude: Sequence[str], key: str = "data.packages") -> dict[str, metadata.Distribution]:
    """``dists`` limited to ``packages`` (all when None) less ``exclude``; a package asked for but not
    installed is a DataError naming it and ``key``, the setting that asked for it as its user wrote it
    (``--packages`` for scripts/code_corpus.py)."""
    if packages is not None:
        wanted = [normalize(p) for p in packages]
        missing = [p for p, n in zip(packages, wanted, strict=True) if n not in dists]
        if missing:
            raise DataError(f"{key}: {', '.join(missing)} not installed here")
        dists = {n: dists[n] for n in sorted(set(wanted))}
    skip = {normalize(p) for p in exclude}
    return {n: d for n, d in dists.items() if n not in skip}


def corpus_fingerprint(files: Iterable[Mapping[str, Any]]) -> str:
    """The corpus's identity: sha256 over its documents' ``id`` and ``sha256``, in id order."""
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f["id"]):
        h.update(f"{f['id']}\t{f['sha256']}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def _decode(raw: bytes) -> str | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # universal newlines, as data=text_files reads text


def read_corpus(files: Sequence[PackageFile], min_chars: int = MIN_CHARS, max_chars: int = MAX_CHARS,
                settings: Mapping[str, Any] | None = None) -> Corpus:
    """Read ``files`` (skipping non-UTF-8, too short or long, and repeated texts) into a :class:`Corpus`.

    A text repeats an earlier one when their :func:`~llm.data.split.text_key` agree, line endings aside: the
    manifest's sha256 is of the file's bytes (what a rebuild checks), never the test of a repeat."""
    ids, texts, entries, seen = [], [], [], set()
    for pf in sorted(files, key=lambda p: p.doc_id):
        raw = pf.location.read_bytes()
        text = _decode(raw)
        if text is None or not min_chars <= len(text) <= max_chars or (key := text_key(text)) in seen:
            continue
        seen.add(key)
        sha = hashlib.sha256(raw).hexdigest()
        ids.append(pf.doc_id)
        texts.append(text)
        entries.append({"id": pf.doc_id, "package": pf.package, "path": pf.path, "sha256": sha, "chars": len(text)})
    versions = {pf.package: pf.version for pf in files}
    counts: dict[str, int] = {}
    for e in entries:
        counts[e["package"]] = counts.get(e["package"], 0) + 1
    manifest = {
        "format": MANIFEST_FORMAT, "kind": "ropelab code corpus", "fingerprint": corpus_fingerprint(entries),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "python": sys.version.split()[0],
        "settings": {"min_chars": min_chars, "max_chars": max_chars, **(settings or {})},
        "documents": len(entries), "characters": sum(e["chars"] for e in entries),
        "packages": [{"name": n, "version": versions[n], "documents": counts[n]} for n in sorted(counts)],
        "files": entries,
    }
    return Corpus(ids, texts, manifest)


def load_manifest(path: Path, where: str | None = None) -> dict[str, Any]:
    """A manifest, checked to be one (format, packages, files with ids and hashes, the fingerprint they give).
    ``where``: the setting that named it as its user wrote it, for the refusal (default ``data.manifest=<path>``;
    ``--manifest <path>`` for scripts/code_corpus.py)."""
    where = f"data.manifest={path}" if where is None else where
    try:
        manifest = json.loads(path.read_text())
        files, packages = manifest["files"], manifest["packages"]
        if manifest.get("format") != MANIFEST_FORMAT or not isinstance(files, list) or not isinstance(packages, list):
            raise ValueError(f"format {manifest.get('format')!r}, expected {MANIFEST_FORMAT}")
        if corpus_fingerprint(files) != manifest["fingerprint"]:
            raise ValueError("its files do not give its fingerprint (edited by hand?)")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{where} is not a code corpus manifest ({type(exc).__name__}: {exc})") from None
    return manifest


def files_of_manifest(manifest: Mapping[str, Any], search: Sequence[str] | None, where: str) -> list[PackageFile]:
    """The installed files a manifest names; a DataError listing every package missing or at another version."""
    dists = installed_distributions(search)
    wrong = []
    for p in manifest["packages"]:
        dist = dists.get(normalize(p["name"]))
        if dist is None or str(dist.version) != str(p["version"]):
            have = "not installed" if dist is None else f"installed: {dist.version}"
            wrong.append(f"{p['name']}=={p['version']} ({have})")
    if wrong:
        raise DataError(f"{where} needs {', '.join(wrong[:8])}{f' and {len(wrong) - 8} more' if len(wrong) > 8 else ''}"
                        "; install those versions, or build a new corpus without the manifest")
    versions = {p["name"]: str(p["version"]) for p in manifest["packages"]}
    return [PackageFile(normalize(f["package"]), versions[f["package"]], f["path"],
                        Path(str(dists[normalize(f["package"])].locate_file(f["path"])))) for f in manifest["files"]]


def rebuild_from_manifest(manifest: Mapping[str, Any], search: Sequence[str] | None, where: str) -> Corpus:
    """The manifest's corpus read from the installed packages, every file checked against its sha256."""
    files = files_of_manifest(manifest, search, where)
    expected = {f["id"]: f["sha256"] for f in manifest["files"]}
    ids, texts, seen, repeated = [], [], set(), 0
    for pf in sorted(files, key=lambda p: p.doc_id):
        try:
            raw = pf.location.read_bytes()
        except OSError as exc:
            raise DataError(f"{where}: {pf.doc_id} cannot be read ({type(exc).__name__}) at {pf.location}") from None
        if hashlib.sha256(raw).hexdigest() != expected[pf.doc_id]:
            raise DataError(f"{where}: {pf.doc_id} at {pf.location} differs from the manifest (its sha256); "
                            f"the package {pf.package} {pf.version} installed here is not the one it was read from")
        text = _decode(raw)
        if text is None:  # the hash matched, so the manifest's own build decoded it: a manifest made elsewhere
            raise DataError(f"{where}: {pf.doc_id} is not UTF-8 text")
        key = text_key(text)
        repeated += key in seen
        seen.add(key)
        ids.append(pf.doc_id)
        texts.append(text)
    if repeated:  # the manifest pins its corpus, so it is read as it is, and the leak it holds is said
        log.warning(f"{where}: {repeated} document(s) repeat an earlier one's text but for line endings (a manifest "
                    "of an older build), so the val loss may be partly measured on train text; a build without "
                    "the manifest reads each text once")
    return Corpus(ids, texts, dict(manifest))


def selection_beside_manifest(packages: list[str] | None, exclude: list[str] | None, min_chars: int,
                              max_chars: int) -> str | None:
    """The first selection setting (``packages``, ``exclude``, ``min_chars``, ``max_chars``) off its default: a
    manifest names every file of the corpus, so such a setting beside it would be ignored."""
    for key, given, default in (("packages", packages, None), ("exclude", exclude, list(DEFAULT_EXCLUDE)),
                                ("min_chars", min_chars, MIN_CHARS), ("max_chars", max_chars, MAX_CHARS)):
        if given != default:
            return key
    return None


def check(cfg: Mapping) -> None:
    packages = _string_list(cfg, "packages", None)
    exclude = _string_list(cfg, "exclude", DEFAULT_EXCLUDE)
    _string_list(cfg, "site_packages", None)
    chars = _chars(cfg)
    if _manifest_path(cfg) is not None and (key := selection_beside_manifest(packages, exclude, *chars)):
        raise DataError(f"data.{key}={setting(cfg, key)} has no effect with data.manifest, which names every file "
                        "of the corpus; leave it at its default")
    val_fraction(cfg)
    positive_int_or_none(cfg, "max_docs")


def _split(corpus: Corpus, max_docs: int | None, fraction: float, info: dict, scratch: Path) -> dict[str, list]:
    import datasets

    info["corpus_fingerprint"] = corpus.manifest["fingerprint"]
    info["documents"] = len(corpus.ids)
    keep = scratch / KEEP_DIR
    keep.mkdir(exist_ok=True)
    write_json_atomic(keep / MANIFEST_NAME, corpus.manifest)
    ids, texts = (corpus.ids[:max_docs], corpus.texts[:max_docs]) if max_docs else (corpus.ids, corpus.texts)
    ds = datasets.Dataset.from_dict({"text": texts})
    return split_documents([(ds, ids)], fraction, "data=code_corpus")


def _load_installed(files: list[PackageFile], chars: tuple[int, int], max_docs: int | None, fraction: float,
                    info: dict, scratch: Path) -> dict[str, list]:
    corpus = read_corpus(files, *chars)
    if len(corpus.ids) < 2:
        raise DataError(f"data=code_corpus found {len(corpus.ids)} usable *.py file(s) in {info['packages']} "
                        "package(s); set data.packages or data.site_packages to read more")
    return _split(corpus, max_docs, fraction, info, scratch)


def _load_manifest(manifest: dict, search: list[str] | None, where: str, max_docs: int | None, fraction: float,
                   info: dict, scratch: Path) -> dict[str, list]:
    return _split(rebuild_from_manifest(manifest, search, where), max_docs, fraction, info, scratch)


def build(cfg: Mapping) -> Source:
    search = _string_list(cfg, "site_packages", None)
    fraction = val_fraction(cfg)
    max_docs = positive_int_or_none(cfg, "max_docs")
    manifest_path = _manifest_path(cfg)
    if manifest_path is not None:
        manifest = load_manifest(manifest_path)
        h = fingerprint_hash(source="code_corpus", corpus=manifest["fingerprint"], val_fraction=fraction,
                             max_docs=max_docs)
        info = {"manifest": str(manifest_path.resolve()), "corpus_fingerprint": manifest["fingerprint"],
                "packages": len(manifest["packages"]), "val_fraction": fraction, "max_docs": max_docs}
        where = f"data.manifest={setting(cfg, 'manifest')}"
        return Source("code_corpus", h.hexdigest(), info,
                      partial(_load_manifest, manifest, search, where, max_docs, fraction, info))
    chars = _chars(cfg)
    dists = select_packages(installed_distributions(search), _string_list(cfg, "packages", None),
                            _string_list(cfg, "exclude", DEFAULT_EXCLUDE) or [])
    files = [f for name, dist in dists.items() for f in package_files(name, dist)]
    if not files:
        raise DataError("data=code_corpus found no *.py files in the installed packages"
                        f"{f' under data.site_packages={search}' if search else ''}")
    # the cheap fingerprint: what is installed and each file's size and mtime (an edit changes it, unread)
    h = fingerprint_hash(source="code_corpus", packages=sorted({(f.package, f.version) for f in files}),
                         min_chars=chars[0], max_chars=chars[1], val_fraction=fraction, max_docs=max_docs,
                         distinct_texts=DISTINCT_TEXTS_RULE)
    for f in files:
        st = os.stat(f.location)
        h.update(f"{f.doc_id}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    info = {"packages": len(dists), "files": len(files), "site_packages": search, "python": sys.version.split()[0],
            "min_chars": chars[0], "max_chars": chars[1], "val_fraction": fraction, "max_docs": max_docs}
    return Source("code_corpus", h.hexdigest(), info, partial(_load_installed, files, chars, max_docs, fraction, info))


KIND = SourceKind(keys=KEYS, check=check, build=build)
