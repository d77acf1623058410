"""``python -m scripts.compare``: --reference, --margin and one-line errors naming the bad argument."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest
from helpers import ctrl_c_while_importing

from .synthetic import planted, reference, write_sweep

REPO = Path(__file__).resolve().parents[2]


def _load_cli():
    """scripts/compare.py by path: under pytest, ``scripts`` is tests/scripts (the tests' own package)."""
    spec = importlib.util.spec_from_file_location("_compare_cli", REPO / "scripts" / "compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


main = _load_cli().main

REF, V4 = ("torch", "float32"), ("triton_v4", "float32")


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    return write_sweep(tmp_path / "sweep", {REF: reference((0, 1, 2)), V4: planted(0.0, seeds=(0, 1, 2), jitter=5.0),
                                            ("torch", "bfloat16"): planted(0.03, seeds=(0, 1, 2))})


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open() as f:
        return {r["implementation"]: r for r in csv.DictReader(f)}


def test_reference_and_margin(sweep: Path, tmp_path: Path, capsys):
    assert main([str(sweep), "--out", str(tmp_path / "a")]) == 0
    rows = _rows(tmp_path / "a" / "comparison.csv")
    assert rows["triton_v4 (partial, float32)"]["val_loss_verdict"] == "inconclusive"
    assert rows["triton_v4 (partial, float32)"]["reference"] == "torch (partial, float32)"

    assert main([str(sweep), "--out", str(tmp_path / "b"), "--margin", "0.05"]) == 0
    rows = _rows(tmp_path / "b" / "comparison.csv")
    assert rows["triton_v4 (partial, float32)"]["val_loss_verdict"] == "equivalent"
    assert "within ±0.05 nats" in capsys.readouterr().out

    assert main([str(sweep), "--out", str(tmp_path / "c"), "--reference", "torch (partial, bfloat16)"]) == 0
    rows = _rows(tmp_path / "c" / "comparison.csv")
    assert rows["torch (partial, float32)"]["reference"] == "torch (partial, bfloat16)"
    assert rows["torch (partial, float32)"]["val_loss_verdict"] == "better"
    assert rows["torch (partial, bfloat16)"]["pairing"] == "reference"

    assert main([str(sweep), "--out", str(tmp_path / "d"), "--reference", "triton_v4"]) == 0
    assert _rows(tmp_path / "d" / "comparison.csv")["triton_v4 (partial, float32)"]["pairing"] == "reference"


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--margin", "-0.1"], "--margin"),
        (["--margin", "abc"], "--margin"),
        (["--margin", "0"], "--margin"),
        (["--acc-margin", "nan"], "--acc-margin"),
        (["--acc-margin", "2"], "--acc-margin"),  # accuracy is a fraction: every verdict would be "equivalent"
        (["--reference", "triton_v9"], "--reference"),
        (["--reference", "torch_full"], "--reference"),  # a preset none of the runs trained
        (["--bogus"], "--bogus"),
    ],
)
def test_bad_arguments_one_line_error(sweep: Path, tmp_path: Path, capsys, args: list[str], names: str):
    with pytest.raises(SystemExit) as exc:
        code = main([str(sweep), "--out", str(tmp_path / "x"), *args])
        raise SystemExit(code)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error:"), err
    assert names in err
    assert not (tmp_path / "x" / "comparison.md").exists()


def test_an_out_dir_that_cannot_be_written_names_out(sweep: Path, tmp_path: Path, capsys):
    (tmp_path / "file").write_text("")
    assert main([str(sweep), "--out", str(tmp_path / "file" / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: argument --out: cannot write the report to"), err
    assert err.rstrip().endswith(f": {tmp_path / 'file'} is a file, not a folder"), err  # not "File exists"


def test_missing_dir_names_the_argument(tmp_path: Path, capsys):
    assert main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "DIR" in err and "nope" in err


def test_a_file_is_refused_unless_it_is_a_runs_own(sweep: Path, capsys):
    """A stray file names no runs (its parent, searched whole, could be all of /tmp): one line, exit 2; a run's
    summary.json stands for its run dir."""
    stray = sweep.parent / "notes.txt"
    stray.write_text("")
    assert main([str(stray)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: argument DIR: {stray} is a file, not a run dir"), err
    run = next(p for p in sorted(sweep.iterdir()) if (p / "summary.json").is_file())
    assert main([str(run / "summary.json"), "--out", str(sweep.parent / "one")]) == 0


def test_ctrl_c_while_writing_leaves_the_earlier_report_whole(sweep: Path, tmp_path: Path, capsys, monkeypatch):
    """Ctrl-C while the plots were drawn left a new comparison.md beside the earlier report's .csv and plots (and a
    traceback); the report is now written beside OUTDIR and moved in whole, and an interrupt leaves OUTDIR as it
    was, in one line."""
    cli, out = _load_cli(), tmp_path / "out"
    assert cli.main([str(sweep), "--out", str(out)]) == 0
    before = {f.name: (f.read_bytes(), f.stat().st_mtime_ns) for f in out.iterdir()}  # untouched, not rewritten

    def interrupted(path, report):  # Ctrl-C while the last plot is drawn: the new .md and .csv are written
        raise KeyboardInterrupt

    monkeypatch.setattr("llm.report.write.plot_paired_delta", interrupted)
    capsys.readouterr()
    assert cli.main([str(sweep), "--out", str(out), "--margin", "0.05"]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"interrupted: {out} left as it was"
    assert {f.name: (f.read_bytes(), f.stat().st_mtime_ns) for f in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "sweep"]  # no temporary left


def test_ctrl_c_while_loading_the_runs_is_one_line(sweep: Path, tmp_path: Path, capsys, monkeypatch):
    """Ctrl-C while the runs load (or scipy imports on first use) writes nothing and ends in one line, exit 130."""
    cli = _load_cli()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_report", interrupted)
    try:
        code = cli.main([str(sweep), "--out", str(tmp_path / "out")])
    except KeyboardInterrupt:  # a failure of this test, not an end of the whole test run
        pytest.fail("Ctrl-C while loading the runs escaped main: a traceback")
    assert code == 130
    assert capsys.readouterr().err == "interrupted: no report written\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("script", ["scripts.compare", "scripts.length_report"])
def test_ctrl_c_while_importing_is_one_line_and_exit_130(tmp_path: Path, script: str):
    """Ctrl-C before the modules finished loading printed a traceback of the import; now one line and exit 130."""
    child = ctrl_c_while_importing(script, "llm.report", [script, str(tmp_path)])
    assert (child.returncode, child.stderr, child.stdout) == (130, "interrupted: no report written\n", "")


def test_ctrl_c_after_the_report_is_written_says_it_is(sweep: Path, tmp_path: Path, capsys, monkeypatch):
    """A Ctrl-C once the new report is in place (as it is printed) ended with exit 130 and no line, so a caller took
    it for no report while the earlier one had been replaced: one line names the report written."""
    cli = _load_cli()
    written = cli.write_report

    class Printing(type(tmp_path)):  # the report's path, interrupted as its text is read for printing
        def read_text(self, *args, **kwargs):
            raise KeyboardInterrupt

    monkeypatch.setattr(cli, "write_report", lambda report, out: Printing(written(report, out)))
    try:
        code = cli.main([str(sweep), "--out", str(tmp_path / "out")])
    except KeyboardInterrupt:  # a failure of this test, not an end of the whole test run
        pytest.fail("Ctrl-C after the report was written escaped main: a traceback")
    md = tmp_path / "out" / "comparison.md"
    assert code == 130 and md.is_file()
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"interrupted after the report was written: {md}"


@pytest.mark.parametrize(("margin", "acc_margin", "said"), [
    (-0.01, 0.005, "margin=-0.01 must be a positive finite number"),
    (float("inf"), 0.005, "margin=inf must be a positive finite number"),
    (0.01, 1.5, "acc_margin=1.5 must be a positive number below 1 (accuracy is a fraction"),
])
def test_build_report_refuses_the_margins_the_command_refuses(sweep: Path, margin, acc_margin, said):
    """The report's Python call takes the margins on the rule of the command's flags and the sweep's settings: an
    accuracy margin of 1 or more (every verdict "equivalent") was accepted there alone."""
    from llm.report import build_report

    with pytest.raises(ValueError, match=said.replace("(", r"\(")):
        build_report([sweep], margin=margin, acc_margin=acc_margin)
