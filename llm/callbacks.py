"""Hydra callbacks.

``CompareOnMultirunEnd`` writes the comparison report (see :mod:`llm.compare`) into the sweep dir
when a multirun finishes. Enable it in ``conf/config.yaml``::

    hydra:
      callbacks:
        compare:
          _target_: llm.callbacks.CompareOnMultirunEnd
          # allow_mixed: true   # compare even if runs differ in more than rope and seed

It never fails the sweep: a refusal (mixed runs), a sweep without finished runs or any other error
is logged as a warning, with the command to run the comparison by hand.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger(__name__)


class CompareOnMultirunEnd(Callback):
    """At the end of a multirun, compare every run under ``hydra.sweep.dir`` and write the report there."""

    def __init__(self, allow_mixed: bool = False) -> None:
        self.allow_mixed = bool(allow_mixed)
        self.last_report: Path | None = None  # comparison.md of the last successful call

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.last_report = None
        sweep_dir: Path | None = None
        try:
            from llm.compare import MixedRunsError, NoRunsError, compare_runs

            sweep_dir = Path(str(config.hydra.sweep.dir))
            try:
                self.last_report = compare_runs([sweep_dir], out_dir=sweep_dir, allow_mixed=self.allow_mixed)
            except MixedRunsError as e:
                log.warning(
                    "run comparison skipped for %s: %s\nTo compare anyway: python -m scripts.compare %s --allow-mixed",
                    sweep_dir, e, sweep_dir,
                )
                return
            except NoRunsError as e:
                log.warning("run comparison skipped for %s: %s", sweep_dir, e)
                return
            log.info("run comparison written to %s", self.last_report)
        except Exception as e:  # never let the report break a finished sweep
            where = sweep_dir if sweep_dir is not None else "the sweep dir (hydra.sweep.dir)"
            log.warning(
                "run comparison failed for %s (%s: %s); the runs themselves are unaffected. "
                "Retry with: python -m scripts.compare %s",
                where, type(e).__name__, e, sweep_dir if sweep_dir is not None else "<sweep dir>",
                exc_info=True,
            )
