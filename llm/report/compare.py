"""Compare finished runs: load, check and compute (:func:`build_report`) the :class:`Report` the writers share.

:func:`llm.report.write.write_report` writes it and :func:`llm.report.write.compare_runs` does both, into
``out_dir``:

* ``comparison.md``  - verdicts against the reference, common config, failed runs, the summary table
  (mean ± sample std over seeds, ordered by mean val loss), paired statistics, the variance budget,
  the short-format table, the fidelity table and per-seed details;
* ``comparison.csv`` - one row per implementation with full precision (see :mod:`llm.report.tables`);
* ``loss_curves.png``, ``speed.png``, ``paired_delta.png`` (see :mod:`llm.report.plots`).

Runs that did not complete (interrupted, nonfinite, failed, config_error, crashed without
``summary.json``) are left out of the statistics and plots but listed, so nothing disappears; the
report is written from the completed runs even when others failed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from llm.report.analysis import (
    DEFAULT_ACC_MARGIN,
    DEFAULT_MARGIN,
    Group,
    GroupComparison,
    compare_groups,
    group_runs,
    margin_problem,
    reference_fallback_note,
    repeat_notes,
    select_reference,
)
from llm.report.errors import NoRunsError
from llm.report.mixed import check_not_mixed, check_same_data, code_note, config_differences
from llm.report.runs import FAILED_OR_CRASHED, NOT_FAILURES, PathLike, Run, failure_kind, load_runs

log = logging.getLogger(__name__)

MD_FILE = "comparison.md"
CSV_FILE = "comparison.csv"
CURVES_FILE = "loss_curves.png"
SPEED_FILE = "speed.png"
DELTA_FILE = "paired_delta.png"


@dataclass
class Report:
    """Everything the writers need, computed once (the Markdown, CSV, plots and wandb table agree)."""

    inputs: list[str]
    runs: list[Run]
    groups: list[Group]
    diffs: dict[str, dict[str, list[str]]]
    reference: Group | None
    comparisons: list[GroupComparison]  # every group with completed runs but the reference, in group order
    margin: float
    acc_margin: float
    data_notes: list[str] = field(default_factory=list)  # runs without a data fingerprint, mixed data allowed

    @property
    def failures(self) -> list[Run]:
        """Runs left out of the statistics: any status but completed, crashed jobs included."""
        return [r for r in self.runs if not r.completed]

    def left_out_line(self) -> str:
        """The count of the runs left out of the statistics, by what happened to them (:func:`failure_kind`), for a
        console: e.g. ``1 run(s) interrupted; 2 failed or crashed; the statistics use the 6 completed run(s)``."""
        counts = dict.fromkeys([*NOT_FAILURES.values(), FAILED_OR_CRASHED], 0)
        for run in self.failures:
            counts[failure_kind(run.status)] += 1
        kinds = [f"{n} {what}" for what, n in counts.items() if n]
        if kinds:
            count, what = kinds[0].split(" ", 1)
            kinds[0] = f"{count} run(s) {what}"
        completed = len(self.runs) - len(self.failures)
        return "; ".join([*kinds, f"the statistics use the {completed} completed run(s)"])

    def comparison(self, group: Group) -> GroupComparison | None:
        """The comparison of ``group`` with the reference (None for the reference and failed-only groups)."""
        return next((c for c in self.comparisons if c.group is group), None)


def _check_margin(name: str, value: float) -> float:
    if why := margin_problem(value, accuracy=name == "acc_margin"):
        raise ValueError(f"{name}={value!r} {why}")
    return float(value)


def build_report(
    run_dirs: Sequence[PathLike],
    allow_mixed: bool = False,
    reference: str | None = None,
    margin: float = DEFAULT_MARGIN,
    acc_margin: float = DEFAULT_ACC_MARGIN,
) -> Report:
    """Load the runs at or below ``run_dirs`` and compute every number of the report (writes nothing).

    Raises :class:`NoRunsError` when nothing completed, :class:`MixedRunsError` for mixed runs and
    :class:`DataMismatchError` for runs whose data fingerprints differ, unless ``allow_mixed``,
    :class:`ReferenceNotFoundError` for an unknown ``reference``, ValueError for a margin that is not positive.
    """
    margin, acc_margin = _check_margin("margin", margin), _check_margin("acc_margin", acc_margin)
    runs = load_runs(run_dirs)
    # only the runs the statistics use must agree: a job that failed (say, at a diverging learning rate)
    # is listed as failed, and must not stop the comparison of the jobs that completed
    checked = [r for r in runs if r.completed]
    diffs = config_differences(checked)
    if diffs and not allow_mixed:
        check_not_mixed(checked)
    elif diffs:
        log.warning("comparing mixed runs (allow_mixed): %s differ", ", ".join(diffs))
    data_notes = check_same_data(checked, allow_mixed)
    for note in data_notes:
        log.warning("%s", note.replace("**", "").replace("`", ""))
    for r in runs:
        if not r.completed:
            log.warning("%s: status %r%s, left out of the statistics and plots", r.name, r.status,
                        f" ({r.message})" if r.message else "")
    if not any(r.completed for r in runs):
        statuses = ", ".join(dict.fromkeys(r.status for r in runs))
        raise NoRunsError(f"none of the {len(runs)} run(s) completed (statuses: {statuses})")
    groups = group_runs(runs)
    data_notes += repeat_notes(groups, mixed=bool(diffs))
    if damaged := [f"`{r.name}` ({r.skipped_metric_lines})" for r in runs if r.skipped_metric_lines]:
        data_notes.append(f"**Damaged curves**: lines of metrics.jsonl that did not read, skipped: "
                          f"{', '.join(damaged)}; the loss curves leave them out (the statistics read summary.json).")
    ref = select_reference(groups, reference)
    if reference is None and (note := reference_fallback_note(groups, ref)):
        log.warning("%s", note.replace("**", ""))
        data_notes.append(note)
    if note := code_note(checked, ref.runs if ref else []):
        log.warning("%s", note.replace("**", ""))
        data_notes.append(note)
    comparisons = compare_groups(groups, ref, margin, acc_margin)
    return Report([str(p) for p in run_dirs], runs, groups, diffs, ref, comparisons, margin, acc_margin, data_notes)


def default_out_dir(paths: Sequence[PathLike]) -> Path:
    """The single dir given; else the common parent of the dirs given (cwd if that is the filesystem root)."""
    if len(paths) == 1:
        p = Path(paths[0])
        return p.parent if p.is_file() else p
    try:
        common = Path(os.path.commonpath([str(Path(p).resolve()) for p in paths]))
    except ValueError:
        return Path.cwd()
    return Path.cwd() if common == Path(common.anchor) else common
