"""bench/precision.py on the CPU: the report is written, and the float32 cos/sin cache is correctly rounded."""

from __future__ import annotations

import csv

import pytest

from bench import precision


def test_precision_smoke_writes_the_report(tmp_path):
    assert precision.main(["--smoke", "--seed", "0", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "position_precision.md").read_text()
    assert "## 1. The cos/sin tables" in text and "## 3. The relative-position property" in text
    rows = list(csv.DictReader(open(tmp_path / "position_precision.csv")))
    tables = [r for r in rows if r.get("table") == "cos_sin"]
    assert tables and all(float(r["cache_ulp"]) <= 0.5 for r in tables)  # computed in float64, rounded once


def test_an_out_folder_under_a_file_is_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit) as exc:
        precision.parse_args(["--smoke", "--out", str(tmp_path / "file" / "report")])
    assert exc.value.code == 2 and "--out" in capsys.readouterr().err
