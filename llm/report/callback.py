"""Hydra callback: write the comparison report into the sweep dir when a multirun finishes.

Enabled in ``conf/config.yaml``::

    hydra:
      callbacks:
        compare:
          _target_: llm.report.callback.CompareOnMultirunEnd
          # allow_mixed: true     # compare even if runs differ in more than rope and seed
          # reference: triton_v4  # compare against another implementation than torch (float32)
          # margin: 0.01          # equivalence margin, nats of val loss

It never fails the sweep: a refusal (mixed runs), a sweep without finished runs or any other error
is logged as a warning, with the command to run the comparison by hand. Jobs that failed or crashed
are logged too (the report lists them); when the sweep's runs used wandb, the statistics are also
logged as a ``job_type="report"`` run in the sweep's group (best effort).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from llm.report.analysis import DEFAULT_ACC_MARGIN, DEFAULT_MARGIN

log = logging.getLogger(__name__)


class CompareOnMultirunEnd(Callback):
    """At the end of a multirun, compare every run under ``hydra.sweep.dir`` and write the report there."""

    def __init__(self, allow_mixed: bool = False, reference: str | None = None, margin: float = DEFAULT_MARGIN,
                 acc_margin: float = DEFAULT_ACC_MARGIN, wandb: bool = True) -> None:
        self.allow_mixed = bool(allow_mixed)
        self.reference = None if reference is None else str(reference)
        self.margin, self.acc_margin = float(margin), float(acc_margin)
        self.wandb = bool(wandb)
        self.last_report: Path | None = None  # comparison.md of the last successful call
        self.last_wandb_dir: Path | None = None  # the wandb report run of the last call, if one was logged

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Write the report; every error becomes a warning, because the sweep's runs are done and fine."""
        self.last_report = self.last_wandb_dir = None
        sweep_dir: Path | None = None
        try:
            sweep_dir = Path(str(config.hydra.sweep.dir))
            self._report(sweep_dir, config)
        except Exception as e:  # never let the report break a finished sweep
            where = sweep_dir if sweep_dir is not None else "the sweep dir (hydra.sweep.dir)"
            log.warning(
                "run comparison failed for %s (%s: %s); the runs themselves are unaffected. "
                "Retry with: python -m scripts.compare %s",
                where, type(e).__name__, e, sweep_dir if sweep_dir is not None else "<sweep dir>",
                exc_info=True,
            )

    def _report(self, sweep_dir: Path, config: DictConfig) -> None:
        from llm.report import DataMismatchError, MixedRunsError, NoRunsError, build_report, write_report
        from llm.report.wandb_log import log_report_to_wandb

        try:
            report = build_report([sweep_dir], allow_mixed=self.allow_mixed, reference=self.reference,
                                  margin=self.margin, acc_margin=self.acc_margin)
        except (MixedRunsError, DataMismatchError) as e:
            log.warning(
                "run comparison skipped for %s: %s\nTo compare anyway: python -m scripts.compare %s --allow-mixed",
                sweep_dir, e, sweep_dir,
            )
            return
        except NoRunsError as e:
            log.warning("run comparison skipped for %s: %s", sweep_dir, e)
            return
        self.last_report = write_report(report, sweep_dir)
        if report.failures:
            log.warning("%d job(s) of %s did not complete (listed in %s): %s", len(report.failures), sweep_dir,
                        self.last_report.name, "; ".join(f"{r.name}: {r.status}" for r in report.failures))
        log.info("run comparison written to %s", self.last_report)
        if self.wandb:
            self.last_wandb_dir = log_report_to_wandb(report, sweep_dir, config)
