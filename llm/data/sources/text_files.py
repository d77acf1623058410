"""``data=text_files``: your own text at ``data.path``, a file or a directory searched recursively.

``.txt`` files are one document each; ``.jsonl`` and ``.parquet`` files one document per row, the text in
``data.text_field``. Hidden files and directories are skipped, and so are files of other suffixes. A document is
identified (for the val split) by a .txt file's relative path, by a row's ``data.id_field`` value, or else by its
text; a document whose text repeats an earlier one's exactly is left out (a copy on each side of the split would put
val text in train). Content that is not UTF-8 text is refused, naming the file (see ``file_readers``): a .txt file
whose first bytes show it already when the source is built, before any work (a binary file among thousands would
otherwise be found minutes into tokenizing), any other while the files are read.
"""

from __future__ import annotations

import logging
import os
import posixpath
from collections import Counter
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path, PurePosixPath

from llm.data.config import DataError, nonempty_str, positive_int_or_none, setting, text_field, val_fraction
from llm.data.sources.base import Source, SourceKind, add_file_stats, fingerprint_hash
from llm.data.sources.file_readers import SUFFIXES, binary_error, not_text, read_jsonl, read_parquet, read_txt
from llm.data.split import DISTINCT_TEXTS_RULE, Group, cap_docs, drop_repeated, split_documents

KEYS = ("path", "text_field", "id_field", "val_fraction", "max_docs")
_KINDS = "/".join(SUFFIXES)
#: Bytes read from the start of each .txt file when the source is built: binary content shows in its first bytes.
HEAD_BYTES = 4096

log = logging.getLogger(__name__)


def data_path(cfg: Mapping) -> Path:
    """``data.path``, checked to exist and, when a file, to have a supported suffix."""
    raw = setting(cfg, "path")
    if raw is None or str(raw) == "":
        raise DataError(f"data.path is required for data=text_files (a file or directory of {_KINDS})")
    path = Path(os.path.expanduser(str(raw)))
    if not path.exists():
        raise DataError(f"data.path={raw} does not exist")
    if path.is_file() and path.suffix.lower() not in SUFFIXES:
        raise DataError(f"data.path={raw} is not a {_KINDS} file")
    if not path.is_file() and not path.is_dir():
        raise DataError(f"data.path={raw} is neither a file nor a directory")
    return path


def _walk(path: Path) -> Iterator[tuple[str, bool]]:
    """(relative posix path, has a supported suffix) of every non-hidden file under the directory ``path``.

    A linked directory is searched like any other (``os.walk``'s default skips it, so a corpus assembled from
    links to its parts trained on none of them, silently); one whose target was already searched (a link to an
    ancestor, or a second link to one directory) is searched once, so a link cycle ends.
    """
    searched: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(path, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in searched:
            dirnames[:] = []
            continue
        searched.add(real)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel_dir = Path(dirpath).relative_to(path).as_posix()
        files = _files(dirpath, filenames)
        for f in sorted(files):
            yield posixpath.join(rel_dir, f) if rel_dir != "." else f, os.path.splitext(f)[1].lower() in SUFFIXES


def _files(dirpath: str, names: list[str]) -> list[str]:
    """The ``names`` in ``dirpath`` that are not hidden and are regular files (through a link) or broken links.

    A named pipe or device under a text name would block the build's first read forever; a broken link stays listed,
    to be refused by name. The directory's entries tell a regular file without a stat: a Path and a stat or two per
    file were most of the walk's time, which every run spends fingerprinting the corpus.
    """
    wanted = {name for name in names if not name.startswith(".")}
    with os.scandir(dirpath) as entries:
        return [e.name for e in entries if e.name in wanted and (e.is_file() or not os.path.exists(e.path))]


def _no_files(raw: object, path: Path) -> DataError:
    others = [rel for rel, _ in _walk(path)]
    found = f"only {len(others)} other file(s), e.g. {others[0]}" if others else "no files"
    return DataError(f"data.path={raw} contains no {_KINDS} files ({found}; hidden files are skipped)")


def text_files_at(cfg: Mapping) -> tuple[Path, list[str]]:
    """(root, sorted relative paths) of the supported files at ``data.path``.

    The files of other suffixes are left out with a warning counting them by suffix: a folder of code (``.py``,
    ``.js``) that also holds a few ``.txt`` files (a license, requirements.txt) otherwise trained on those few alone,
    with nothing saying that the rest was never read.
    """
    path = data_path(cfg)
    if path.is_file():
        return path.parent, [path.name]
    rels, skipped = [], Counter()
    for rel, supported in _walk(path):
        if supported:
            rels.append(rel)
        else:
            skipped[PurePosixPath(rel).suffix.lower() or "(no suffix)"] += 1
    if not rels:
        raise _no_files(setting(cfg, "path"), path)
    if skipped:
        kinds = ", ".join(f"{n} {suffix}" for suffix, n in skipped.most_common(5))
        log.warning(f"data.path={setting(cfg, 'path')}: {sum(skipped.values())} file(s) of other suffixes are not "
                    f"read ({kinds}{', ...' if len(skipped) > 5 else ''}); text_files reads only {_KINDS} files: "
                    "to train on the others, copy them under a .txt name (x.py -> x.py.txt)")
    return path, sorted(rels)


def check_txt_heads(root: Path, rels: list[str], where: str) -> None:
    """Refuse the first .txt file whose first :data:`HEAD_BYTES` are not UTF-8 text, naming it as the full read
    would: milliseconds for thousands of files, where the full read finds it only while tokenizing."""
    for rel in rels:
        if not rel.lower().endswith(".txt"):
            continue
        file = os.path.join(root, rel)
        with open(file, "rb") as f:
            bad = not_text(f.read(HEAD_BYTES), final=False)
        if bad is not None:
            raise binary_error(where, file, *bad)


def check(cfg: Mapping) -> None:
    path = data_path(cfg)
    if path.is_dir() and not any(supported for _, supported in _walk(path)):  # stops at the first one found
        raise _no_files(setting(cfg, "path"), path)
    text_field(cfg)
    nonempty_str(cfg, "id_field", None)
    val_fraction(cfg)
    positive_int_or_none(cfg, "max_docs")


def _load(root: Path, rels: list[str], where: str, field: str, id_field: str | None, max_docs: int | None,
          fraction: float, scratch: Path) -> dict[str, list]:
    """Read every file (.txt, then .jsonl, then .parquet, each in path order), cap, and split by document."""
    by_kind: dict[str, list[str]] = {}
    for rel in rels:  # os.path, not a Path per file: much of a small file's cost
        by_kind.setdefault(os.path.splitext(rel)[1].lower(), []).append(rel)
    files = {suffix: [os.path.join(root, r) for r in group] for suffix, group in by_kind.items()}
    # Each reader writes its Arrow copy under the scratch dir: deleted with it, never a stale copy of an edit.
    groups: list[Group] = []
    if ".txt" in files:
        groups.append(read_txt(files[".txt"], by_kind[".txt"], where, scratch))
    if ".jsonl" in files:
        groups.append(read_jsonl(files[".jsonl"], where, field, id_field, scratch))
    if ".parquet" in files:
        groups.append(read_parquet(files[".parquet"], where, field, id_field, scratch))
    groups, dropped = drop_repeated(groups)
    if dropped:
        log.info(f"{where}: {dropped} document(s) repeat an earlier one's text exactly and are left out (a copy on "
                 "each side of the split would put val text in train)")
    if max_docs is not None:
        groups = cap_docs(groups, max_docs)
    try:
        return split_documents(groups, fraction, where)
    except DataError as e:  # too few documents: a single text (nanoGPT's input.txt) is one, so say how to make more
        raise DataError(f"{e} (a .txt file is one document: split a single text into several .txt files, or write "
                        "one document per line of a .jsonl)") from None


def build(cfg: Mapping) -> Source:
    path = data_path(cfg)
    root, rels = text_files_at(cfg)
    field = text_field(cfg)
    id_field = nonempty_str(cfg, "id_field", None)
    max_docs = positive_int_or_none(cfg, "max_docs")
    fraction = val_fraction(cfg)
    h = fingerprint_hash(source="text_files", path=str(path.resolve()), text_field=field, id_field=id_field,
                         max_docs=max_docs, val_fraction=fraction, distinct_texts=DISTINCT_TEXTS_RULE)
    where = f"data.path={setting(cfg, 'path')}"
    try:
        add_file_stats(h, root, rels)
        check_txt_heads(root, rels, where)
    except OSError as exc:  # a broken link or an unreadable file: the user's to fix, so one line naming it
        raise DataError(f"{where}: {exc.filename} cannot be read ({exc.strerror or type(exc).__name__}); "
                        "remove it or make it readable") from None
    info = {"path": str(path.resolve()), "n_files": len(rels), "text_field": field, "id_field": id_field,
            "max_docs": max_docs, "val_fraction": fraction}
    return Source("text_files", h.hexdigest(), info, partial(_load, root, rels, where, field, id_field, max_docs,
                                                             fraction))


KIND = SourceKind(keys=KEYS, check=check, build=build)
