"""``data=code_corpus`` and its manifest: the corpus built from installed packages, pinned, rebuilt, checked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from llm.data import DataError, check_data_config, data_fingerprint, prepare_data
from llm.data.sources.code_corpus import MANIFEST_NAME, corpus_fingerprint, installed_distributions


def make_distribution(site: Path, name: str, version: str, files: dict[str, str]) -> None:
    """An installed distribution as pip leaves it: <name>-<version>.dist-info/{METADATA,RECORD} and its files."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    record = [f"{rel},," for rel in files] + [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(record) + "\n")


def _module(i: int, pkg: str) -> str:
    return f'"""Module {i} of {pkg}."""\n\n' + "".join(f"def f{j}(x):\n    return x * {i} + {j}\n\n" for j in range(12))


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    make_distribution(site, "alpha", "1.0", {f"alpha/m{i:02d}.py": _module(i, "alpha") for i in range(24)}
                      | {"alpha/tiny.py": "x = 1\n", "alpha/data.txt": "not python " * 40})
    make_distribution(site, "Beta_Pkg", "2.3", {f"beta_pkg/m{i:02d}.py": _module(100 + i, "beta") for i in range(16)}
                      | {"beta_pkg/copy.py": _module(0, "alpha")})  # alpha/m00.py's content again
    make_distribution(site, "ropelab", "0.1.0", {"ropelab_extra.py": _module(999, "ropelab")})
    return site


def _cfg(site: Path, **kw) -> dict:
    return {"name": "code_corpus", "site_packages": [str(site)], "val_fraction": 0.2, **kw}


def test_the_corpus_is_the_installed_packages_python_files_with_a_manifest(tmp_path, site):
    d = prepare_data(_cfg(site), "cl100k_base", tmp_path / "cache")
    manifest = json.loads((Path(d.meta["cache_dir"]) / MANIFEST_NAME).read_text())
    ids = [f["id"] for f in manifest["files"]]
    # every alpha and beta module; not the 6-character file, not the .txt, not the repeated content, not ropelab
    assert len(ids) == 24 + 16 and "alpha/alpha/tiny.py" not in ids and "beta-pkg/beta_pkg/copy.py" not in ids
    assert ids == sorted(ids) and all(i.startswith(("alpha/", "beta-pkg/")) for i in ids)
    assert [(p["name"], p["version"], p["documents"]) for p in manifest["packages"]] == [("alpha", "1.0", 24),
                                                                                        ("beta-pkg", "2.3", 16)]
    import hashlib

    m05 = next(f for f in manifest["files"] if f["id"] == "alpha/alpha/m05.py")
    assert m05["sha256"] == hashlib.sha256((site / "alpha/m05.py").read_bytes()).hexdigest()
    assert manifest["fingerprint"] == corpus_fingerprint(manifest["files"])
    fp = data_fingerprint(d.meta)
    assert fp["source"] == "code_corpus" and fp["corpus"] == manifest["fingerprint"]
    assert fp["tokenizer"] == "cl100k_base"
    assert fp["split"]["val_documents"] + d.meta["composition"]["train"]["documents"] == 40
    assert len(fp["id"]) == 64


def test_a_manifest_rebuilds_the_same_corpus_and_refuses_another(tmp_path, site):
    d = prepare_data(_cfg(site), "cl100k_base", tmp_path / "cache")
    pinned = shutil.copy(Path(d.meta["cache_dir"]) / MANIFEST_NAME, tmp_path / "pinned.json")
    # where the packages are installed at the manifest's versions: the same tokens, the same data id
    again = prepare_data(_cfg(site, manifest=str(pinned)), "cl100k_base", tmp_path / "other_cache")
    np.testing.assert_array_equal(again.train, d.train)
    np.testing.assert_array_equal(again.val, d.val)
    assert data_fingerprint(again.meta)["id"] == data_fingerprint(d.meta)["id"]
    assert data_fingerprint(again.meta)["corpus"] == data_fingerprint(d.meta)["corpus"]
    # a package installed here at another version: refused before anything is read, naming it
    edited = tmp_path / "edited_site"
    shutil.copytree(site, edited)
    meta = edited / "alpha-1.0.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 1.0", "Version: 1.1"))
    with pytest.raises(DataError, match=r"needs alpha==1\.0 \(installed: 1\.1\)"):
        prepare_data(_cfg(edited, manifest=str(pinned)), "cl100k_base", tmp_path / "c3")
    # the same version with a file changed: its hash no longer matches, named
    meta.write_text(meta.read_text().replace("Version: 1.1", "Version: 1.0"))
    (edited / "alpha" / "m07.py").write_text(_module(7, "alpha") + "# edited\n")
    with pytest.raises(DataError, match=r"alpha/alpha/m07\.py .* differs from the manifest"):
        prepare_data(_cfg(edited, manifest=str(pinned)), "cl100k_base", tmp_path / "c4")


def test_a_tampered_or_foreign_manifest_is_refused(tmp_path, site):
    d = prepare_data(_cfg(site), "cl100k_base", tmp_path / "cache")
    manifest = json.loads((Path(d.meta["cache_dir"]) / MANIFEST_NAME).read_text())
    manifest["files"][0]["sha256"] = "0" * 64
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="do not give its fingerprint"):
        prepare_data(_cfg(site, manifest=str(bad)), "cl100k_base", tmp_path / "c2")
    with pytest.raises(DataError, match="data.manifest=.* is not a file"):
        prepare_data(_cfg(site, manifest=str(tmp_path / "missing.json")), "cl100k_base", tmp_path / "c3")


def test_packages_and_settings(tmp_path, site):
    d = prepare_data(_cfg(site, packages=["beta-pkg"]), "cl100k_base", tmp_path / "cache")
    manifest = json.loads((Path(d.meta["cache_dir"]) / MANIFEST_NAME).read_text())
    assert {p["name"] for p in manifest["packages"]} == {"beta-pkg"} and manifest["documents"] == 17  # copy.py too
    with pytest.raises(DataError, match="data.packages: gamma not installed"):
        prepare_data(_cfg(site, packages=["gamma"]), "cl100k_base", tmp_path / "c2")
    for bad, match in (({"packages": "alpha"}, "data.packages=alpha must be a list"),
                       ({"min_chars": 500, "max_chars": 100}, "data.min_chars=500 is above data.max_chars=100")):
        with pytest.raises(DataError, match=match):
            prepare_data(_cfg(site, **bad), "cl100k_base", tmp_path / "c3")
    assert "alpha" in installed_distributions([str(site)]) and "beta-pkg" in installed_distributions([str(site)])


@pytest.mark.parametrize("key,value", [("packages", ["alpha"]), ("exclude", []), ("min_chars", 10),
                                       ("max_chars", 1000)])
def test_a_selection_beside_a_manifest_is_refused(tmp_path, site, key, value):
    """The manifest names every file: a package list, exclusion or size bound beside it was silently ignored."""
    d = prepare_data(_cfg(site), "cl100k_base", tmp_path / "cache")
    pinned = Path(d.meta["cache_dir"]) / MANIFEST_NAME
    with pytest.raises(DataError, match=rf"^data.{key}=.* has no effect with data.manifest"):
        check_data_config(_cfg(site, manifest=str(pinned), **{key: value}), "cl100k_base")
    check_data_config(_cfg(site, manifest=str(pinned)), "cl100k_base")  # the defaults beside it are fine


def _crlf_copies(site: Path) -> dict[str, str]:
    """gamma: twelve of alpha's modules again, with CRLF line endings (a vendored copy checked out on Windows)."""
    files = {f"gamma/m{i:02d}.py": _module(i, "alpha").replace("\n", "\r\n") for i in range(12)}
    make_distribution(site, "gamma", "0.5", files)
    return files


def _same_text(a: str, b: str) -> bool:
    return a.replace("\r\n", "\n") == b.replace("\r\n", "\n")


def test_a_copy_with_other_line_endings_is_one_document(tmp_path, site, docs):
    """A file and its copy with CRLF line endings were two documents (the repeat test hashed the file's bytes), and
    the split by path put some pairs one in train and one in val; each text is now read once, under its first id."""
    from llm.data.tokenizer import get_tokenizer

    _crlf_copies(site)
    d = prepare_data(_cfg(site), "cl100k_base", tmp_path / "cache")
    manifest = json.loads((Path(d.meta["cache_dir"]) / MANIFEST_NAME).read_text())
    ids = [f["id"] for f in manifest["files"]]
    assert len(ids) == 24 + 16 and not any(i.startswith("gamma/") for i in ids)
    assert "gamma" not in {p["name"] for p in manifest["packages"]}
    enc = get_tokenizer("cl100k_base")
    train, val = docs(d.train, enc), docs(d.val, enc)
    assert not any(_same_text(v, t) for v in val for t in train)


def test_a_manifest_naming_copies_with_other_line_endings_is_read_as_it_is_and_said(tmp_path, site, caplog):
    """A manifest pins its corpus: one written before line endings were set aside, naming a file and its CRLF copy,
    rebuilds both, and the build warns of the repeat (the val loss may be partly train text)."""
    import hashlib
    import logging

    d = prepare_data(_cfg(site), "cl100k_base", tmp_path / "cache")
    manifest = json.loads((Path(d.meta["cache_dir"]) / MANIFEST_NAME).read_text())
    rel, text = next(iter(_crlf_copies(site).items()))
    raw = (site / rel).read_bytes()
    assert b"\r\n" in raw
    manifest["files"].append({"id": f"gamma/{rel}", "package": "gamma", "path": rel,
                              "sha256": hashlib.sha256(raw).hexdigest(), "chars": len(text)})
    manifest["packages"].append({"name": "gamma", "version": "0.5", "documents": 1})
    manifest["fingerprint"] = corpus_fingerprint(manifest["files"])
    old = tmp_path / "old_manifest.json"
    old.write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING, logger="llm.data.sources.code_corpus"):
        again = prepare_data(_cfg(site, manifest=str(old)), "cl100k_base", tmp_path / "c2")
    said = [r.getMessage() for r in caplog.records if "line endings" in r.getMessage()]
    assert len(said) == 1 and "1 document(s) repeat an earlier one's text" in said[0]
    assert sum(again.meta["n_docs"].values()) == 41


def test_the_repeat_rule_is_in_the_fingerprint(site, monkeypatch):
    """A cache built when the repeat test hashed the bytes holds the CRLF copies: a new rule must rebuild it."""
    from llm.data.sources import code_corpus

    before = code_corpus.build(_cfg(site)).fingerprint
    monkeypatch.setattr(code_corpus, "DISTINCT_TEXTS_RULE", 1)
    assert code_corpus.build(_cfg(site)).fingerprint != before
