"""Which code a run trained with: the checkout's commit as git tells it, and a fingerprint of the code itself.

Why both: a run records ``git describe --always --dirty`` of the checkout, but a working tree copied to another
machine (a GPU host given a copy of the tree) may carry a ``.git`` older than its files: the run then records an
old commit marked ``-dirty`` while the code was newer, and two runs of the same code, or of different code, look
alike. The fingerprint hashes the bytes of the code that runs (the ``llm`` and ``rope`` packages and ``conf/``),
whatever git says, so runs of the same code match with or without a trustworthy ``.git``. Both take a few
milliseconds: one ``git`` call and about a megabyte hashed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

#: The checkout this package runs from (llm/..): its conf/ and, when it is a git work tree, its commit.
REPO_ROOT = Path(__file__).resolve().parent.parent
#: Hex digits of the fingerprint kept: 48 bits, enough to tell apart the versions of one project.
FINGERPRINT_CHARS = 12


def code_dirs() -> dict[str, Path]:
    """The directories whose files make up the code of a run, by the name they are hashed under: the ``llm`` and
    ``rope`` packages as imported (an installed ``rope`` included) and the config files."""
    rope_spec = importlib.util.find_spec("rope")
    dirs = {"llm": Path(__file__).resolve().parent, "conf": REPO_ROOT / "conf"}
    if rope_spec is not None and rope_spec.origin:
        dirs["rope"] = Path(rope_spec.origin).resolve().parent
    return dirs


def _code_files(top: Path) -> Iterator[Path]:
    """The files under ``top`` in a fixed order, without byte-code caches and hidden files."""
    for path in sorted(top.rglob("*")):
        rel = path.relative_to(top).parts
        if path.is_file() and "__pycache__" not in rel and not any(p.startswith(".") for p in rel) \
                and path.suffix not in (".pyc", ".pyo"):
            yield path


def code_fingerprint(dirs: Mapping[str, Path] | None = None) -> str:
    """A short sha256 of every code file's name (relative to its directory) and bytes: equal for equal code,
    wherever the checkout lies and whatever its ``.git`` says."""
    digest = hashlib.sha256()
    for name, top in sorted((dirs if dirs is not None else code_dirs()).items()):
        for path in _code_files(Path(top)):
            rel = f"{name}/{path.relative_to(top).as_posix()}".encode()
            data = path.read_bytes()
            digest.update(len(rel).to_bytes(4, "little") + rel + len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()[:FINGERPRINT_CHARS]


def git_describe(root: Path = REPO_ROOT) -> str:
    """``git describe --always --dirty`` of the work tree at ``root`` (``-dirty``: tracked files differ from the
    commit), or ``unknown`` when git or a work tree at ``root`` is not there (a repository above it does not
    count: it is not this code's)."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(Path(root).resolve().parent)}
    try:
        done = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=root, env=env,
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unknown"


def code_version() -> dict[str, str]:
    """What a run's ``summary.json`` records of its code: ``git_commit`` and ``code_fingerprint``."""
    return {"git_commit": git_describe(), "code_fingerprint": code_fingerprint()}
