"""Write a comparison: :func:`write_report` (``comparison.md``/``.csv`` and the plots) and :func:`compare_runs`
(build and write in one call).

Why its own module: the writers (:mod:`llm.report.markdown`, :mod:`llm.report.tables`, :mod:`llm.report.plots`)
import the :class:`~llm.report.compare.Report` and the file names from :mod:`llm.report.compare`; here all of them
are imported, so the imports go one way.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from llm.fileio import write_files_whole
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
from llm.report.markdown import write_markdown
from llm.report.plots import plot_loss_curves, plot_paired_delta, plot_speed
from llm.report.runs import PathLike
from llm.report.tables import write_csv

log = logging.getLogger(__name__)


def out_dir_problem(out: PathLike, error: OSError) -> str:
    """Why a report cannot be written to ``out``, for the ``--out`` line: a path above it that is a file (the
    system's word for that, "File exists", reads as if the report's folder were there already), else the system's."""
    for path in (Path(out), *Path(out).parents):
        if path.exists() and not path.is_dir():
            return f"{path} is a file, not a folder"
    return error.strerror or str(error)


def write_report(report: Report, out_dir: PathLike) -> Path:
    """Write comparison.md/.csv and the plots into ``out_dir``, whole (:func:`llm.fileio.write_files_whole`: an
    interrupt or a failure while plotting leaves ``out_dir`` as it was, never a new comparison.md beside an earlier
    report's plots and CSV); returns the .md path."""
    md = write_files_whole(lambda tmp: _write_files(report, tmp), Path(out_dir))
    log.info("wrote %s, %s, %s, %s, %s in %s", MD_FILE, CSV_FILE, CURVES_FILE, SPEED_FILE, DELTA_FILE, md.parent)
    return md


def _write_files(report: Report, out: Path) -> Path:
    md = out / MD_FILE
    write_markdown(md, report)
    write_csv(out / CSV_FILE, report)
    plot_loss_curves(out / CURVES_FILE, report.groups)
    plot_speed(out / SPEED_FILE, report.groups)
    plot_paired_delta(out / DELTA_FILE, report)
    return md


def compare_runs(
    run_dirs: Sequence[PathLike] | PathLike,
    out_dir: PathLike | None = None,
    allow_mixed: bool = False,
    reference: str | None = None,
    margin: float = DEFAULT_MARGIN,
    acc_margin: float = DEFAULT_ACC_MARGIN,
) -> Path:
    """Compare the runs at or below ``run_dirs`` and write the report into ``out_dir``.

    ``run_dirs`` may be run dirs, multirun dirs or any parent of them (searched recursively).
    ``out_dir`` defaults to :func:`default_out_dir`. ``reference`` picks the implementation the others
    are compared with (see :func:`llm.report.analysis.select_reference`); ``margin`` is the
    equivalence margin ε in nats of val loss, ``acc_margin`` the one for val accuracy. Returns the
    path of ``comparison.md``; raises as :func:`build_report` does.
    """
    dirs = [run_dirs] if isinstance(run_dirs, (str, os.PathLike)) else list(run_dirs)
    report = build_report(dirs, allow_mixed=allow_mixed, reference=reference, margin=margin, acc_margin=acc_margin)
    return write_report(report, out_dir if out_dir is not None else default_out_dir(dirs))
