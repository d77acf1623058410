"""bench/attention.py at one tiny shape on the CPU: both paths timed, checked against each other, one row each."""

from __future__ import annotations

import pytest

from bench import attention, harness


@pytest.mark.interpreter
def test_attention_smoke_times_both_paths_of_one_shape(tmp_path):
    out = tmp_path / "attention.csv"
    assert attention.main(["--smoke", "--heads", "4/2", "--queries", "1", "--out", str(out)]) == 0
    rows = harness.read_rows(out)
    assert {(r["implementation"], r["mode"]) for r in rows} >= {("separate", "eager"), ("fused", "eager")}
    assert all(float(r["time_us"]) > 0 and r["gpu"] == "cpu (smoke)" for r in rows)
    assert all(float(r["max_err"]) < 0.05 for r in rows)  # the fused kernel against the separate path, bf16
    assert all(r["speedup"] for r in rows if r["implementation"] == "fused")
