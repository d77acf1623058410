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
import shlex
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from llm.report.analysis import DEFAULT_ACC_MARGIN, DEFAULT_MARGIN, margin_problem

log = logging.getLogger(__name__)


#: Where the sweep's config holds this callback's settings (conf/config.yaml).
KEY = "hydra.callbacks.compare"


def settings_error(allow_mixed: Any = False, reference: Any = None, margin: Any = DEFAULT_MARGIN,
                   acc_margin: Any = DEFAULT_ACC_MARGIN, wandb: Any = True, **unknown: Any) -> str | None:
    """What is wrong with the callback's settings, in one line naming the key (the margins: the report's one rule,
    :func:`llm.report.analysis.margin_problem`), or None. Checked before the sweep's first job
    (:func:`check_settings`, from :class:`llm.sweep.ClaimSweepDir`): a margin that is no number would otherwise
    fail the callback's construction with Hydra's traceback, and a negative one would turn every verdict."""
    if unknown:
        name = sorted(unknown)[0]
        return (f"{KEY}.{name} is not a setting of the sweep's comparison; its settings: allow_mixed, reference, "
                "margin, acc_margin, wandb")
    for name, value in (("allow_mixed", allow_mixed), ("wandb", wandb)):
        if not isinstance(value, bool):
            return f"{KEY}.{name}={value!r} must be true or false"
    for name, value in (("margin", margin), ("acc_margin", acc_margin)):
        if why := margin_problem(value, accuracy=name == "acc_margin"):
            return f"{KEY}.{name}={value!r} {why}"
    if reference is not None and (not isinstance(reference, str) or not reference.strip()):
        return f"{KEY}.reference={reference!r} must be an implementation's name, a rope= preset or a full label"
    return None


def check_settings(config: DictConfig) -> str | None:
    """:func:`settings_error` of the sweep's comparison callback in ``config`` (its ``hydra`` section), if the sweep
    runs it."""
    from omegaconf import OmegaConf

    node = OmegaConf.select(config, KEY)
    if node is None or OmegaConf.select(node, "_target_") != f"{__name__}.{CompareOnMultirunEnd.__name__}":
        return None
    settings = {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if not k.startswith("_")}
    return settings_error(**settings)


class CompareOnMultirunEnd(Callback):
    """At the end of a multirun, compare every run under ``hydra.sweep.dir`` and write the report there."""

    def __init__(self, allow_mixed: bool = False, reference: str | None = None, margin: float = DEFAULT_MARGIN,
                 acc_margin: float = DEFAULT_ACC_MARGIN, wandb: bool = True, **unknown: Any) -> None:
        # never raises: Hydra builds the callbacks before any of them runs, and its error there is a traceback;
        # settings it cannot take are refused before the first job (check_settings), else the defaults stand
        self.error = settings_error(allow_mixed, reference, margin, acc_margin, wandb, **unknown)
        ok = self.error is None
        self.allow_mixed = bool(allow_mixed) if ok else False
        self.reference = None if reference is None or not ok else str(reference)
        self.margin = float(margin) if ok else DEFAULT_MARGIN
        self.acc_margin = float(acc_margin) if ok else DEFAULT_ACC_MARGIN
        self.wandb = bool(wandb) if ok else True
        self.last_report: Path | None = None  # comparison.md of the last successful call

    def retry_command(self, sweep_dir: Path | str, allow_mixed: bool | None = None) -> str:
        """The ``scripts.compare`` command that writes this report by hand, with the settings the sweep gave it."""
        flags = []
        if self.reference is not None:
            flags += ["--reference", self.reference]
        if self.margin != DEFAULT_MARGIN:
            flags += ["--margin", f"{self.margin:g}"]
        if self.acc_margin != DEFAULT_ACC_MARGIN:
            flags += ["--acc-margin", f"{self.acc_margin:g}"]
        if self.allow_mixed if allow_mixed is None else allow_mixed:
            flags.append("--allow-mixed")
        return shlex.join(["python", "-m", "scripts.compare", str(sweep_dir), *flags])

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Write the report; every error becomes a warning, because the sweep's runs are done and fine."""
        self.last_report = None
        sweep_dir: Path | None = None
        from llm.report import ReferenceNotFoundError

        try:
            sweep_dir = Path(str(config.hydra.sweep.dir))
            self._report(sweep_dir, config)
        except ReferenceNotFoundError as e:  # the sweep's own setting (hydra.callbacks.compare.reference): one line
            log.warning("run comparison skipped for %s: %s=%s: %s. Compare with another reference: %s",
                        sweep_dir, f"{KEY}.reference", self.reference, e,
                        self.retry_command(sweep_dir).replace(f"--reference {shlex.quote(str(self.reference))}",
                                                              "--reference <name>"))
        except Exception as e:  # never let the report break a finished sweep
            where = sweep_dir if sweep_dir is not None else "the sweep dir (hydra.sweep.dir)"
            log.warning(
                "run comparison failed for %s (%s: %s); the runs themselves are unaffected. "
                "Retry with: %s",
                where, type(e).__name__, e, self.retry_command(sweep_dir if sweep_dir is not None else "<sweep dir>"),
                exc_info=True,
            )

    def _report(self, sweep_dir: Path, config: DictConfig) -> None:
        from llm.report import DataMismatchError, MixedRunsError, NoRunsError, build_report, write_report
        from llm.report.wandb_log import log_report_to_wandb

        try:
            report = build_report([sweep_dir], allow_mixed=self.allow_mixed, reference=self.reference,
                                  margin=self.margin, acc_margin=self.acc_margin)
        except (MixedRunsError, DataMismatchError) as e:
            log.warning("run comparison skipped for %s: %s\nTo compare anyway: %s", sweep_dir, e,
                        self.retry_command(sweep_dir, allow_mixed=True))
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
            log_report_to_wandb(report, sweep_dir, config)
