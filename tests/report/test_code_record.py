"""The comparison names the code its runs trained with: git's commit and the code's own fingerprint, which tells
runs of one code apart from runs of another where a copied tree's ``.git`` was stale."""

from __future__ import annotations

from llm.report import MD_FILE, compare_runs

from .synthetic import write_run


def test_the_comparison_names_the_code_fingerprints(tmp_path):
    for seed in (0, 1):
        for rope, fp in (("torch", "aaaaaaaaaaaa"), ("triton_v4", "bbbbbbbbbbbb")):
            write_run(tmp_path / f"{rope}_s{seed}", rope, seed, 3.0 + seed / 10,
                      extra={"git_commit": "d197277f2ecd-dirty", "code_fingerprint": fp})
    text = (compare_runs(tmp_path).parent / MD_FILE).read_text()
    assert "- git commit: d197277f2ecd-dirty; code fingerprint: aaaaaaaaaaaa, bbbbbbbbbbbb" in text


def test_runs_trained_by_different_code_are_a_warning_naming_the_runs(tmp_path, caplog):
    for seed in (0, 1):
        for rope, fp in (("torch", "aaaaaaaaaaaa"), ("triton_v4", "bbbbbbbbbbbb" if seed else "aaaaaaaaaaaa")):
            write_run(tmp_path / f"{rope}_s{seed}", rope, seed, 3.0 + seed / 10,
                      extra={"git_commit": "d197277f2ecd-dirty", "code_fingerprint": fp})
    with caplog.at_level("WARNING"):
        text = (compare_runs(tmp_path).parent / MD_FILE).read_text()
    want = ("the runs were trained by 2 versions of the code (2 code fingerprints): triton_v4_s1 differs from the "
            "reference's (aaaaaaaaaaaa)")
    assert want in text
    assert [r.getMessage() for r in caplog.records if want in r.getMessage()], "the warning goes to stderr too"


def test_runs_of_one_code_have_no_code_warning(tmp_path, caplog):
    for seed in (0, 1):
        for rope in ("torch", "triton_v4"):
            write_run(tmp_path / f"{rope}_s{seed}", rope, seed, 3.0 + seed / 10, extra={"code_fingerprint": "a" * 12})
    with caplog.at_level("WARNING"):
        text = (compare_runs(tmp_path).parent / MD_FILE).read_text()
    assert "versions of the code" not in text + caplog.text
