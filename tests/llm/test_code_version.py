"""What a run records of its code: ``git describe`` of the checkout and a fingerprint of the code's bytes, so two
runs of one code match even where the tree was copied with a stale ``.git`` (an old commit marked ``-dirty``)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from llm.code_version import code_fingerprint, code_version, git_describe


def _tree(root: Path) -> dict[str, Path]:
    """A small code tree: two packages and a config dir, with a byte-code cache that is not code."""
    files = {"llm/train.py": "print('train')\n", "llm/data/config.py": "X = 1\n", "rope/__init__.py": "",
             "conf/config.yaml": "seed: 0\n", "llm/__pycache__/train.cpython-311.pyc": "\x00\x01"}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return {name: root / name for name in ("llm", "rope", "conf")}


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def test_the_fingerprint_follows_the_code_not_where_it_lies(tmp_path):
    a = _tree(tmp_path / "a")
    b = _tree(tmp_path / "elsewhere" / "b")
    fp = code_fingerprint(a)
    assert re.fullmatch(r"[0-9a-f]{12}", fp) and code_fingerprint(b) == fp
    (b["llm"] / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"other")
    assert code_fingerprint(b) == fp, "byte-code caches are not code"
    (b["llm"] / "data" / "config.py").write_text("X = 2\n")
    assert code_fingerprint(b) != fp
    (b["llm"] / "data" / "config.py").write_text("X = 1\n")
    (b["llm"] / "data" / "config.py").rename(b["llm"] / "data" / "settings.py")
    assert code_fingerprint(b) != fp, "a renamed file is other code"


def test_git_describe_says_dirty_and_unknown_honestly(tmp_path):
    outer = tmp_path / "outer"
    outer.mkdir()
    _git(outer, "init", "-q")
    _git(outer, "commit", "-q", "--allow-empty", "-m", "another project")
    repo = outer / "repo"
    _tree(repo)
    assert git_describe(repo) == "unknown", "no work tree at repo/: the one above is another project's"
    _git(repo, "init", "-q")
    _git(repo, "add", "llm", "rope", "conf")
    _git(repo, "commit", "-qm", "x")
    head = _git(repo, "rev-parse", "--short=12", "HEAD")
    assert git_describe(repo) == head
    (repo / "llm" / "train.py").write_text("print('changed')\n")
    assert git_describe(repo) == f"{head}-dirty"


def test_a_copied_tree_with_a_stale_git_still_matches_its_code(tmp_path):
    """The GPU host's case: the tree's files are newer than its ``.git``. git says an old commit, dirty; the
    fingerprint equals that of a clean checkout of the same code."""
    repo = tmp_path / "repo"
    dirs = _tree(repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "llm", "rope", "conf")
    _git(repo, "commit", "-qm", "old")
    (repo / "llm" / "train.py").write_text("print('new')\n")
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy)  # the new files with the old .git
    _git(repo, "commit", "-qam", "new")
    assert git_describe(copy).endswith("-dirty") and not git_describe(repo).endswith("-dirty")
    assert code_fingerprint({k: copy / k for k in dirs}) == code_fingerprint(dirs)


def test_this_checkout_records_both():
    version = code_version()
    assert set(version) == {"git_commit", "code_fingerprint"} and re.fullmatch(r"[0-9a-f]{12}",
                                                                               version["code_fingerprint"])
    assert version["git_commit"]
