"""Write a Python-source corpus for ``data=text_files``: every *.py file under a site-packages dir.

    python -m scripts.code_corpus OUT_DIR [--root DIR]      # default root: this interpreter's site-packages

Why: a training run that must not see its data twice (``+experiment=fidelity``: the same model
trained with two RoPE kernels must not be pushed into overfitting, where training amplifies
last-bit differences) needs more text than the standard library offers offline; an installed
site-packages tree is hundreds of MB of it. Each file becomes ``<md5 of its path>.txt`` (one document);
files that are not UTF-8, shorter than 200 or longer than 300,000 characters are skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import sysconfig
from pathlib import Path

MIN_CHARS, MAX_CHARS = 200, 300_000


def build_corpus(root: Path, out: Path) -> tuple[int, int]:
    """Copy the *.py files under ``root`` into ``out`` as .txt documents; returns (files, characters)."""
    if not root.is_dir():
        raise NotADirectoryError(f"--root {root} is not a directory (expected a site-packages tree)")
    out.mkdir(parents=True, exist_ok=False)
    n = size = 0
    for p in sorted(root.rglob("*.py")):
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if not MIN_CHARS <= len(text) <= MAX_CHARS:
            continue
        (out / (hashlib.md5(str(p).encode()).hexdigest()[:16] + ".txt")).write_text(text)
        n += 1
        size += len(text)
    return n, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="new directory to write the .txt documents into")
    ap.add_argument("--root", type=Path, default=Path(sysconfig.get_paths()["purelib"]))
    args = ap.parse_args()
    n, size = build_corpus(args.root, args.out)
    if n == 0:
        raise SystemExit(f"no *.py files of {MIN_CHARS}-{MAX_CHARS} characters under {args.root}")
    print(f"{args.root}: {n} files, {size / 1e6:.1f} MB of text -> {args.out} (data=text_files data.path={args.out})")


if __name__ == "__main__":
    main()
