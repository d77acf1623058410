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
