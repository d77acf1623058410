"""The contract of a run dir: its files' names, the status words its ``summary.json`` records, and how that summary
is read.

Why a module of its own: the report reads run dirs without importing the training code (and torch), so what both
sides agree on lives here, in a leaf that imports only the standard library. The status words are plain ``str``
constants (not an Enum): they are what ``summary.json`` holds and what every reader compares a loaded status with.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.yaml"
SAMPLES_FILE = "samples.jsonl"
#: The last eval's loss per val window, written by the trainer (``llm.training.outputs``).
EVAL_WINDOWS_FILE = "eval_windows.json"
CHECKPOINT_DIR = "checkpoints"

# -- the statuses a run's summary.json records ------------------------------------------------------------------
#: Trained to ``train.max_steps`` and evaluated there: the only status the report's statistics use.
COMPLETED = "completed"
#: Stopped on purpose (Ctrl-C, SIGTERM, ``train.stop_at_step``) with a checkpoint of its step, or a sweep's job
#: stopped before it began: ``train.resume=auto`` goes on.
INTERRUPTED = "interrupted"
#: Ended by a second Ctrl-C, without a checkpoint of the step it stopped at.
ABORTED = "aborted"
#: Stopped by a non-finite loss or gradient beyond ``train.skip_nonfinite``.
NONFINITE = "nonfinite"
#: A crash (the message names the error), a full disk, or a job whose process died.
FAILED = "failed"
#: A sweep's job its config check refused before it started.
CONFIG_ERROR = "config_error"


class SummaryError(ValueError):
    """A run dir's ``summary.json`` is missing, unreadable or not a JSON object; the message is one line naming it."""


def load_summary(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The run's ``summary.json`` as a dict, or :class:`SummaryError` saying why there is none (``<path>: <reason>``).

    For a reader that must say why (the report lists such a run with the reason); a reader that only does without
    takes :func:`read_summary`. A file cut short or edited by hand is a user's file, so the reason is one line and
    never a traceback."""
    path = Path(run_dir) / SUMMARY_FILE
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as e:  # ValueError: JSONDecodeError, or bytes that are not UTF-8
        raise SummaryError(f"{path}: {e}") from e
    if not isinstance(summary, dict):
        raise SummaryError(f"{path}: expected a JSON object")
    return summary


def read_summary(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The run's ``summary.json`` as a dict; None where it is missing, unreadable or not a JSON object.

    For the readers to whom such a run simply has no summary (a run still training, a checkpoint-only dir, a file
    cut short by a killed writer): each decides what "no summary" means for it."""
    try:
        return load_summary(run_dir)
    except SummaryError:
        return None
