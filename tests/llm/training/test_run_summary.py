"""A run dir's ``summary.json`` is read in one place (``llm.run_files``): missing, cut short, not UTF-8 or not a JSON
object, each reader keeps what it did without one, and none of them ends in a traceback.

The readers: the trainer (the record a resume that trains nothing keeps), ``train.init_from`` (the source's record and
whether it completed), the entry point (how a run it reports as aborted had ended), the length evaluation (its
warning for a run that did not complete); the report's reader is tested in ``tests/report/test_summary_reading.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from llm.evaluation.lengths import unfinished_run_warning
from llm.run_files import COMPLETED, INTERRUPTED, SUMMARY_FILE, SummaryError, load_summary, read_summary
from llm.train import _recorded_end
from llm.training.init_from import InitSource, _unfinished_note, init_record
from llm.training.trainer import Trainer

#: What a run dir's summary.json may be, beside a readable one: absent, or a file no reader can take as a summary.
NO_SUMMARY = {
    "missing": None,
    "cut short": b'{"status": "compl',
    "empty": b"",
    "not UTF-8": b'{"status": "\xff\xfe"}',
    "a list": b'[{"status": "completed", "step": 5}]',
    "a string": b'"completed"',
    "null": b"null",
}


def _run(tmp_path: Path, content: bytes | dict | None) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    if isinstance(content, dict):
        (run / SUMMARY_FILE).write_text(json.dumps(content))
    elif content is not None:
        (run / SUMMARY_FILE).write_bytes(content)
    return run


@pytest.mark.parametrize("content", NO_SUMMARY.values(), ids=NO_SUMMARY.keys())
def test_no_summary_is_none_or_one_line_naming_the_file(tmp_path, content):
    run = _run(tmp_path, content)
    assert read_summary(run) is None
    with pytest.raises(SummaryError) as err:
        load_summary(run)
    line = str(err.value)
    assert line.startswith(f"{run / SUMMARY_FILE}: ") and "\n" not in line, line


def test_a_summary_reads_as_written(tmp_path):
    summary = {"status": INTERRUPTED, "step": 40, "max_steps": 100, "val_loss": None}
    run = _run(tmp_path, summary)
    assert read_summary(run) == load_summary(run) == summary


@pytest.mark.parametrize("content", NO_SUMMARY.values(), ids=NO_SUMMARY.keys())
def test_each_reader_does_without_a_summary(tmp_path, content):
    """Where there is no summary to read, the trainer keeps no earlier record, init_from says whether its source
    completed is unknown and records no data id or code version, the entry point knows of no recorded end (a list
    was an AttributeError traceback in the abort message), and the length evaluation warns of nothing."""
    run = _run(tmp_path, content)
    assert Trainer._summary_at(SimpleNamespace(run_dir=run), 5) == {}
    source = InitSource(run, {})
    assert _unfinished_note(source) == [f"train.init_from={run} has no readable {SUMMARY_FILE}: whether that run "
                                        "completed is unknown; its newest checkpoint is taken"]
    record = init_record(source, run / "checkpoints" / "step_5.pt", 5)
    assert (record["data_id"], record["git_commit"], record["code_fingerprint"]) == (None, None, None)
    assert _recorded_end(run) is None
    assert unfinished_run_warning(run) is None


def test_each_reader_takes_a_summary(tmp_path):
    """The same readers on a readable summary: of an interrupted run, then of a completed one."""
    run = _run(tmp_path, {"status": INTERRUPTED, "step": 5, "max_steps": 10, "git_commit": "abc", "host": "h",
                          "wall_time_s": 3.0, "data_fingerprint": {"id": "d1"}})
    assert Trainer._summary_at(SimpleNamespace(run_dir=run), 5) == {"git_commit": "abc", "host": "h",
                                                                     "wall_time_s": 3.0}
    assert Trainer._summary_at(SimpleNamespace(run_dir=run), 6) == {}, "another stop's record"
    source = InitSource(run, {})
    assert _unfinished_note(source) == [f"train.init_from={run} did not complete (status 'interrupted', step 5 of "
                                        "10): its newest checkpoint is taken as it is"]
    assert init_record(source, run / "step_5.pt", 5)["data_id"] == "d1"
    assert _recorded_end(run) == (INTERRUPTED, 5)
    assert unfinished_run_warning(run).startswith(f"warning: {run} did not complete: status interrupted at step 5 "
                                                  "of 10")
    (run / SUMMARY_FILE).write_text(json.dumps({"status": COMPLETED, "step": 10}))
    assert _unfinished_note(source) == []
    assert _recorded_end(run) == (COMPLETED, 10)
    assert unfinished_run_warning(run) is None
