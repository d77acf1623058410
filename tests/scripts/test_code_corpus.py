"""scripts/code_corpus.py: the installed packages' Python files as text documents, pinned by a manifest."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from llm.data.sources.code_corpus import MANIFEST_NAME, MAX_CHARS
from scripts import code_corpus


def make_distribution(site: Path, name: str, version: str, files: dict[str, str | bytes]) -> None:
    """An installed distribution as pip leaves it: <name>-<version>.dist-info/{METADATA,RECORD} and its files."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for rel, content in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(content if isinstance(content, bytes) else content.encode())
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in files))


KEEP = {"pkg/a.py": "x = 1\n" * 50, "pkg/sub/b.py": "def f():\n    return 2\n" * 20, "pkg/c.py": "y = 2\r\n" * 40}


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    make_distribution(site, "pkg", "1.2", {**KEEP, "pkg/short.py": "x = 1\n", "pkg/huge.py": "#" * (MAX_CHARS + 1),
                                           "pkg/latin1.py": b"# caf\xe9\n" * 100, "pkg/notes.txt": "not python " * 50,
                                           "pkg/again.py": "x = 1\n" * 50})  # a.py's content again
    return site


def test_writes_the_python_sources_and_skips_the_rest(tmp_path, site, capsys):
    out = tmp_path / "out"
    code_corpus.main([str(out), "--site-packages", str(site)])
    docs = {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*.txt")}
    expected = {f"pkg/{rel}.txt": text.replace("\r\n", "\n") for rel, text in KEEP.items()}
    assert docs == expected  # too short, too long, not UTF-8, not .py and repeated content: skipped
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["packages"] == [{"name": "pkg", "version": "1.2", "documents": 3}]
    assert sorted(f["id"] for f in manifest["files"]) == sorted(f"pkg/{rel}" for rel in KEEP)
    assert "3 files of 1 packages" in capsys.readouterr().out


def test_rebuilds_from_its_manifest_and_refuses_an_existing_dir(tmp_path, site, capsys):
    code_corpus.main([str(tmp_path / "out"), "--site-packages", str(site)])
    manifest = tmp_path / "out" / MANIFEST_NAME
    code_corpus.main([str(tmp_path / "again"), "--site-packages", str(site), "--manifest", str(manifest)])
    first, again = (json.loads((tmp_path / d / MANIFEST_NAME).read_text()) for d in ("out", "again"))
    assert again["fingerprint"] == first["fingerprint"] and again["files"] == first["files"]
    for p in (tmp_path / "out").rglob("*.txt"):
        assert (tmp_path / "again" / p.relative_to(tmp_path / "out")).read_text() == p.read_text()
    with pytest.raises(SystemExit) as exit_:
        code_corpus.main([str(tmp_path / "again"), "--site-packages", str(site)])
    assert exit_.value.code == 2 and "exists: give a new directory" in capsys.readouterr().err
    (site / "pkg" / "a.py").write_text("x = 2\n" * 50)
    with pytest.raises(SystemExit) as exit_:
        code_corpus.main([str(tmp_path / "third"), "--site-packages", str(site), "--manifest", str(manifest)])
    assert exit_.value.code == 2
    assert re.search(r"error: --manifest .*pkg/pkg/a\.py .* differs from the manifest", capsys.readouterr().err)


def test_a_package_not_installed_is_named_by_the_flag_that_asked_for_it(tmp_path, site, capsys):
    """The data source says ``data.packages`` (its config key); this command's user wrote ``--packages``."""
    with pytest.raises(SystemExit) as exit_:
        code_corpus.main([str(tmp_path / "out"), "--site-packages", str(site), "--packages", "pkg,nopkg"])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and err.startswith("error: --packages: nopkg not installed here"), err
    assert "data." not in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--packages", ","], "--packages"),  # no name: read nothing, then blamed the installed packages
        (["--min-chars", "-5"], "--min-chars"),
        (["--min-chars", "ten"], "--min-chars"),  # argparse's own refusal: one line too, not its usage text first
        (["--min-chars", "100", "--max-chars", "10"], "--max-chars"),  # no file can be both: an empty corpus
        (["--site-packages", "nosuchdir"], "--site-packages"),  # was blamed on the installed packages
        (["--manifest", "m.json", "--packages", "alpha"], "--packages"),  # the manifest's files were taken instead
        (["--manifest", "m.json", "--min-chars", "10"], "--min-chars"),
    ],
)
def test_bad_sizes_and_site_dirs_are_one_line_naming_the_flag(tmp_path, site, capsys, args, names):
    args = [a.replace("nosuchdir", str(tmp_path / "nosuchdir")) for a in args]
    with pytest.raises(SystemExit) as exit_:
        code_corpus.main([str(tmp_path / "out"), "--site-packages", str(site), *args])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith(f"error: argument {names}:") and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_a_bad_manifest_is_named_by_its_flag(tmp_path, site, capsys):
    """The data source says ``data.manifest=`` (its config key); this command's user wrote ``--manifest``."""
    with pytest.raises(SystemExit) as exit_:
        code_corpus.main([str(tmp_path / "out"), "--site-packages", str(site), "--manifest", str(tmp_path / "no.json")])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and err.startswith(f"error: --manifest {tmp_path / 'no.json'} is not a code"), err
    assert "data." not in err, err


def test_a_manifest_of_other_package_versions_is_named_by_its_flag(tmp_path, site, capsys):
    """A manifest read from pkg 1.2 where 1.3 is installed: the refusal names ``--manifest`` (the flag given) and no
    ``data.manifest`` key, which this command has not."""
    code_corpus.main([str(tmp_path / "out"), "--site-packages", str(site)])
    manifest = tmp_path / "out" / MANIFEST_NAME
    (site / "pkg-1.2.dist-info").rename(site / "pkg-1.3.dist-info")
    meta = site / "pkg-1.3.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 1.2", "Version: 1.3"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        code_corpus.main([str(tmp_path / "again"), "--site-packages", str(site), "--manifest", str(manifest)])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2, err
    assert err.startswith(f"error: --manifest {manifest} needs pkg==1.2 (installed: 1.3)"), err
    assert err.endswith("; install those versions, or build a new corpus without the manifest") and "data." not in err


def test_an_unwritable_out_is_one_line(tmp_path, site, capsys):
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit) as exit_:
        code_corpus.main([str(tmp_path / "file" / "out"), "--site-packages", str(site)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: argument out: cannot create") and err.count("\n") == 1


def test_an_interrupted_write_leaves_no_partial_corpus(tmp_path, site, capsys, monkeypatch):
    """Ctrl-C midway left OUT with some documents and no manifest: ``data=text_files`` would train on part of the
    corpus, and the next try was refused as "exists". Nothing is left now, and the next try writes it all."""
    real, calls = code_corpus.write_text_atomic, []

    def interrupted(path, text):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(path, text)

    monkeypatch.setattr(code_corpus, "write_text_atomic", interrupted)
    with pytest.raises(SystemExit) as exit_:
        code_corpus.main([str(tmp_path / "out"), "--site-packages", str(site)])
    assert exit_.value.code == 130 and "interrupted: nothing written" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]
    monkeypatch.setattr(code_corpus, "write_text_atomic", real)
    code_corpus.main([str(tmp_path / "out"), "--site-packages", str(site)])
    assert len(list((tmp_path / "out").rglob("*.txt"))) == len(KEEP) and (tmp_path / "out" / MANIFEST_NAME).exists()
