"""Run report: compare finished runs of a seed sweep, one row per RoPE implementation.

The package reads run dirs only (``summary.json``, ``config.yaml``, ``metrics.jsonl``), so it works on runs from
any machine or older version of the app; of the training code it imports, inside functions, only whether a job's
process still holds its run dir (``llm.training.run_dir``) and the sweeper that lists a sweep's jobs
(``llm.sweep_jobs``).

* :func:`compare_runs` - load, check and write ``comparison.md``/``.csv`` and the plots;
* :func:`build_report` / :func:`write_report` - the two halves of it (the Hydra callback logs the
  built report to wandb as well);
* :func:`sweep_failures` - every job of a sweep that did not complete (the sweep's exit code);
* :class:`CompareError` and its subclasses - what a caller catches.

Modules: ``runs`` (finding and loading run dirs), ``mixed`` (the mixed-run check), ``stats``
(statistics), ``analysis`` (groups, reference, comparisons), ``fidelity``, ``compare`` (the
:class:`Report` and how it is built), ``markdown``, ``tables`` (CSV), ``plots``, ``write`` (the writers run
together), ``wandb_log``, ``callback`` (Hydra), ``sharing`` (runs that shared a GPU), ``length`` (the length
report: its statistics), ``length_writers`` (its Markdown, CSV and plots), ``errors``.
"""

from __future__ import annotations

from llm.report.analysis import DEFAULT_ACC_MARGIN, DEFAULT_MARGIN
from llm.report.compare import (
    CSV_FILE,
    CURVES_FILE,
    DELTA_FILE,
    MD_FILE,
    SPEED_FILE,
    Report,
    build_report,
    default_out_dir,
)
from llm.report.errors import (
    CompareError,
    DataMismatchError,
    MixedRunsError,
    NoRunsError,
    ReferenceNotFoundError,
    cli_error_line,
)
from llm.report.runs import CRASHED, Run, find_crashed_dirs, find_run_dirs, load_runs, sweep_failures
from llm.report.stats import mean_std
from llm.report.write import compare_runs, out_dir_problem, write_report

__all__ = [
    "CRASHED",
    "CSV_FILE",
    "CURVES_FILE",
    "DEFAULT_ACC_MARGIN",
    "DEFAULT_MARGIN",
    "DELTA_FILE",
    "MD_FILE",
    "SPEED_FILE",
    "CompareError",
    "DataMismatchError",
    "MixedRunsError",
    "NoRunsError",
    "ReferenceNotFoundError",
    "cli_error_line",
    "Report",
    "Run",
    "build_report",
    "compare_runs",
    "default_out_dir",
    "find_crashed_dirs",
    "find_run_dirs",
    "load_runs",
    "mean_std",
    "out_dir_problem",
    "sweep_failures",
    "write_report",
]
