"""bench/attention.py at one tiny shape on the CPU: both paths timed, checked against each other, one row each."""

from __future__ import annotations

import pytest

from bench import attention, harness
from rope import fused_attention


@pytest.mark.interpreter
def test_attention_smoke_times_both_paths_of_one_shape(tmp_path):
    out = tmp_path / "attention.csv"
    assert attention.main(["--smoke", "--heads", "4/2", "--queries", "1", "--out", str(out)]) == 0
    rows = harness.read_rows(out)
    assert {(r["implementation"], r["mode"]) for r in rows} >= {("separate", "eager"), ("fused", "eager")}
    assert all(float(r["time_us"]) > 0 and r["gpu"] == "cpu (smoke)" for r in rows)
    assert all(float(r["max_err"]) < 0.05 for r in rows)  # the fused kernel against the separate path, bf16
    assert all(r["speedup"] for r in rows if r["implementation"] == "fused")


@pytest.mark.interpreter
def test_attention_candidates_add_a_row_per_launch_setting(tmp_path):
    """--candidates: beside the rule's row, one row per candidate setting, named by it, checked against the separate
    path, with the launch it made; the roof columns filled on every fused row."""
    out = tmp_path / "attention.csv"
    assert attention.main(["--smoke", "--heads", "4/2", "--queries", "1", "--candidates", "--out", str(out)]) == 0
    rows = harness.read_rows(out)
    names = {r["implementation"] for r in rows}
    expected = {"fused[" + fused_attention.Tuning(**c).label() + "]"
                for c in attention.candidates(attention.Shape(16, 4, 2, 1, 160, 1), 4)}
    assert {"separate", "fused"} | expected == names and len(expected) >= 6
    fused = [r for r in rows if r["implementation"].startswith("fused")]
    assert all(float(r["max_err"]) < 0.05 and r["launch"].startswith("grid=") for r in fused)
    assert all(r["bound"] in ("memory", "compute", "latency") and float(r["roof_speedup"]) > 0 for r in fused)
    launch = {r["implementation"]: r["launch"] for r in rows}
    assert " bn=64 " in launch["fused[bn=64]"] and " w=2 " in launch["fused[w=2]"] and " s=4 " in launch["fused[s=4]"]
    assert "combine=inline" in launch["fused[splits=8,bn=64,s=4]"] and "inline" not in launch["fused[combine=kernel]"]
