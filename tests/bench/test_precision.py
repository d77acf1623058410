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


def test_an_out_folder_that_cannot_be_written_is_refused_before_any_work_and_the_check_leaves_nothing(tmp_path,
                                                                                                       capsys):
    """``/proc`` refuses new folders even to root: the report's mkdir failed with a traceback after every
    measurement. Refused in one line at the start; a folder that can be made is made only by the run itself."""
    with pytest.raises(SystemExit) as exc:
        precision.parse_args(["--smoke", "--out", "/proc/ropelab-report/x"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "argument --out: '/proc/ropelab-report/x' cannot be written (" in err, err
    precision.parse_args(["--smoke", "--out", str(tmp_path / "new" / "report")])
    assert not (tmp_path / "new").exists()


def test_smoke_changes_the_defaults_only():
    """--smoke measures little by default; an option given is measured as given, as the report's command line says."""
    smoke = precision.parse_args(["--smoke"])
    assert (smoke.bases, smoke.log2_positions, smoke.variants, smoke.impls, smoke.dtypes) == (
        [1e4], [10], ["partial"], ["torch"], ["float32"])
    given = precision.parse_args(["--smoke", "--impls", "triton_v4", "--bases", "5e5", "--variants", "full",
                                  "--log2-positions", "12", "--dtypes", "bfloat16"])
    assert (given.bases, given.log2_positions, given.variants, given.impls, given.dtypes) == (
        [5e5], [12], ["full"], ["triton_v4"], ["bfloat16"])
    full = precision.parse_args([])
    assert (full.bases, full.log2_positions[0], full.variants, full.impls) == ([1e4, 5e5], 10, ["partial", "full"],
                                                                              None)


@pytest.mark.parametrize(("argv", "message"), [
    (["--bases", "-1e4"], "argument --bases: each base must be a finite number > 1, got '-1e4'"),
    (["--log2-positions", "-3..5"], "argument --log2-positions: expected a range"),
])
def test_a_negative_value_gets_its_options_check(argv, message, capsys):
    """argparse reads ``-1e4`` as an option ("expected one argument"): the option's own check answers instead."""
    with pytest.raises(SystemExit) as exc:
        precision.parse_args(["--smoke", *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and err.count("\n") == 1, err
