"""The report lists a run whose ``summary.json`` it cannot take as a summary (cut short, not UTF-8, not a JSON
object, gone since it was found) as unreadable, with one line naming the file and why: never a traceback, never
a run that disappears."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm.report.runs import UNREADABLE, load_run
from llm.run_files import SUMMARY_FILE

from .synthetic import write_run


@pytest.mark.parametrize(("content", "why"), [
    (b'{"status": "compl', "Unterminated string starting at"),
    (b"", "Expecting value: line 1 column 1 (char 0)"),
    (b'{"status": "\xff"}', "'utf-8' codec can't decode byte 0xff"),
    (b'["completed"]', "expected a JSON object"),
    (None, "No such file or directory"),
    # JSON objects the trainer never writes: without a status one read as a completed run with no values, a second
    # row of its implementation's label; a seed that is no integer grouped the run as seed None
    (b"{}", "no status: not a summary.json the trainer writes"),
    (b'{"val_loss": 3.0, "seed": 0}', "no status: not a summary.json the trainer writes"),
    (b'{"status": "completed", "seed": "x", "val_loss": 3.0}', "seed 'x' is not an integer"),
], ids=["cut short", "empty", "not UTF-8", "a list", "gone", "an empty object", "no status", "a seed in words"])
def test_an_unreadable_summary_is_listed_with_why(tmp_path: Path, content, why):
    run = write_run(tmp_path / "0_run", "torch", 0, 3.0)
    if content is None:
        (run / SUMMARY_FILE).unlink()  # removed between the search for run dirs and the read
    else:
        (run / SUMMARY_FILE).write_bytes(content)
    loaded = load_run(run)
    assert loaded.status == UNREADABLE
    assert loaded.message.startswith(f"{run / SUMMARY_FILE}: ") and why in loaded.message, loaded.message
    assert "\n" not in loaded.message
    assert loaded.config, "its config is still read: the report lists the run under its implementation"
