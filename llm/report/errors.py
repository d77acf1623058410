"""Why a comparison could not be written: one exception family, so callers catch ``CompareError`` once.

The CLI prints these as one line and the Hydra callback logs them as a warning; anything else
escaping :func:`llm.report.compare_runs` is a bug and keeps its traceback.
"""

from __future__ import annotations


class CompareError(Exception):
    """The runs cannot be compared (none found, unreadable, mixed, or an unknown reference)."""


class NoRunsError(CompareError):
    """No run dir (a dir with summary.json) was found, or none of them completed."""


class MixedRunsError(CompareError):
    """The runs differ in more than rope and seed; ``differences`` maps key -> {value: [run names]}."""

    def __init__(self, message: str, differences: dict[str, dict[str, list[str]]]) -> None:
        super().__init__(message)
        self.differences = differences


class DataMismatchError(CompareError):
    """The runs trained on different data (their data fingerprints differ); ``groups`` maps each fingerprint's
    id to the names of its runs."""

    def __init__(self, message: str, groups: dict[str, list[str]]) -> None:
        super().__init__(message)
        self.groups = groups


class ReferenceNotFoundError(CompareError, ValueError):
    """``reference=`` (CLI ``--reference``) names no implementation of the runs, or several."""


def cli_error_line(e: CompareError | FileNotFoundError) -> str:
    """The one line a report CLI prints for a user error: naming the argument at fault where one is."""
    if isinstance(e, ReferenceNotFoundError):
        return f"error: argument --reference: {e}"
    if isinstance(e, FileNotFoundError):
        return f"error: argument DIR: {e}"
    return f"error: {e}"
