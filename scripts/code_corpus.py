"""Write the code corpus as text files, with its manifest: the ``*.py`` files of the installed packages.

    python -m scripts.code_corpus OUT_DIR                       # every installed package (less ropelab)
    python -m scripts.code_corpus OUT_DIR --packages numpy,torch
    python -m scripts.code_corpus OUT_DIR --manifest manifest.json   # that very corpus again, hashes checked

Each document becomes ``OUT_DIR/<package>/<path>.txt`` and ``OUT_DIR/manifest.json`` pins the corpus (each
package and version read, each file's sha256, one fingerprint): train on it with ``data=text_files
data.path=OUT_DIR``. ``data=code_corpus`` builds the same documents straight into the token cache with no
directory to prepare, but its val split differs (a document's identity there is ``<package>/<path>``, here its
file's path); this script is for reading the documents, or carrying them to a machine that lacks the packages.
What is read and skipped: ``llm/data/sources/code_corpus.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import NoReturn

from llm.cli import INTERRUPTED, OneLineParser
from llm.data import DataError
from llm.data.sources.code_corpus import (
    DEFAULT_EXCLUDE,
    MANIFEST_NAME,
    MAX_CHARS,
    MIN_CHARS,
    installed_distributions,
    load_manifest,
    package_files,
    read_corpus,
    rebuild_from_manifest,
    select_packages,
    selection_beside_manifest,
)
from llm.fileio import write_json_atomic, write_text_atomic


def _names(text: str) -> list[str]:
    return [n for n in (s.strip() for s in text.split(",")) if n]


def _parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="python -m scripts.code_corpus", description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="new directory to write the .txt documents and manifest.json into")
    ap.add_argument("--packages", type=_names, default=None, help="comma-separated distributions (default: all)")
    ap.add_argument("--exclude", type=_names, default=list(DEFAULT_EXCLUDE),
                    help=f"comma-separated distributions left out (default: {','.join(DEFAULT_EXCLUDE)})")
    ap.add_argument("--site-packages", action="append", default=None, metavar="DIR",
                    help="a directory searched for installed distributions (repeatable; default: sys.path)")
    ap.add_argument("--manifest", type=Path, default=None, help="rebuild the corpus a manifest.json pins")
    ap.add_argument("--min-chars", type=int, default=MIN_CHARS,
                    help=f"files shorter than this many characters are left out (default: {MIN_CHARS})")
    ap.add_argument("--max-chars", type=int, default=MAX_CHARS,
                    help=f"files longer than this many characters are left out (default: {MAX_CHARS})")
    return ap


def _refuse(message: str) -> NoReturn:
    """A user error: one line on stderr, exit 2, before anything is written."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def _check_sizes_and_dirs(args: argparse.Namespace) -> None:
    """Refuse, naming the flag, what would otherwise read every package to end in an empty corpus (sizes that no
    file can meet, no package) or blame the installed packages (a --site-packages that is no directory)."""
    if args.packages == []:  # --packages "" or ",": no distribution asked for, not all of them
        _refuse("error: argument --packages: give at least one distribution name (leave it out for all)")
    if args.min_chars < 0:
        _refuse(f"error: argument --min-chars: must be >= 0, got {args.min_chars}")
    if args.max_chars < max(args.min_chars, 1):
        _refuse(f"error: argument --max-chars: must be >= 1 and >= --min-chars={args.min_chars}, got {args.max_chars}")
    for d in args.site_packages or []:
        if not Path(d).is_dir():
            _refuse(f"error: argument --site-packages: {d} is not a directory")
    if args.manifest is not None and (key := selection_beside_manifest(args.packages, args.exclude, args.min_chars,
                                                                        args.max_chars)):
        _refuse(f"error: argument --{key.replace('_', '-')}: has no effect with --manifest, which names every file "
                "of the corpus; leave it out")


def _new_dir(out: Path) -> Path:
    """A temporary directory beside ``out`` to write into, made before any work so that an unwritable place is
    one line; renamed to ``out`` once the manifest is written, so that ``out`` never holds part of a corpus
    (Ctrl-C or a failure midway leaves nothing for ``data=text_files`` to train on, nor to refuse the next try)."""
    tmp = out.parent / f".{out.name}.partial{os.getpid()}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
    except OSError as e:
        _refuse(f"error: argument out: cannot create {out}: {e.strerror or e}")
    return tmp


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.out.exists():
        _refuse(f"{args.out} exists: give a new directory")
    _check_sizes_and_dirs(args)
    tmp = _new_dir(args.out)
    try:
        _write(args, tmp)
        tmp.rename(args.out)
    except KeyboardInterrupt:
        print(f"interrupted: nothing written to {args.out}", file=sys.stderr)
        raise SystemExit(INTERRUPTED) from None
    except OSError as e:
        _refuse(f"error: argument out: cannot write {args.out}: {e}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    m = json.loads((args.out / MANIFEST_NAME).read_text())
    print(f"{m['documents']} files of {len(m['packages'])} packages, {m['characters'] / 1e6:.1f} MB of text, "
          f"fingerprint {m['fingerprint'][:16]} -> {args.out} (data=text_files data.path={args.out})")


def _write(args: argparse.Namespace, tmp: Path) -> None:
    """Read the corpus and write its documents and manifest into ``tmp``."""
    try:
        if args.manifest is not None:
            where = f"--manifest {args.manifest}"  # the readers name the flag the user gave, not the data.* key
            corpus = rebuild_from_manifest(load_manifest(args.manifest, where), args.site_packages, where)
        else:
            dists = select_packages(installed_distributions(args.site_packages), args.packages, args.exclude,
                                    key="--packages")
            corpus = read_corpus([f for name, d in dists.items() for f in package_files(name, d)],
                                 args.min_chars, args.max_chars)
    except DataError as e:
        _refuse(f"error: {e}")
    if len(corpus.ids) == 0:
        _refuse("no *.py files of the asked sizes in the installed packages")
    for doc_id, text in zip(corpus.ids, corpus.texts, strict=True):
        path = tmp / f"{doc_id}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)
    write_json_atomic(tmp / MANIFEST_NAME, corpus.manifest)


if __name__ == "__main__":
    main()
