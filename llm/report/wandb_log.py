"""The report as one wandb run (``job_type="report"``) in the sweep's group, beside the training runs.

Best effort by design: the report files are already on disk when this runs, so a missing wandb, no
network or any wandb error is logged and ignored; it never fails the sweep. Offline mode (the
default of ``conf/logger/wandb.yaml``) writes the run under the sweep dir (``<sweep>/wandb/``), to
be uploaded with ``wandb sync`` like the training runs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llm.report.compare import DELTA_FILE, Report
from llm.report.runs import get_dotted
from llm.report.tables import stats_table

log = logging.getLogger(__name__)

TABLE_KEY = "comparison"


def wandb_settings(report: Report, config: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The ``logger.wandb`` settings the sweep's runs used, or None when they did not use wandb.

    The runs' own resolved configs decide (they say what the sweep really did); the sweep config
    passed to the callback is the fallback for runs that predate ``config.yaml``.
    """
    candidates = [r.config.get("logger") for r in report.runs if r.completed]
    if config is not None:
        candidates.append(dict(config).get("logger"))
    for logger_cfg in candidates:
        if isinstance(logger_cfg, Mapping) and logger_cfg.get("name") == "wandb":
            wcfg = dict(logger_cfg.get("wandb") or {})
            return None if wcfg.get("mode") == "disabled" else wcfg
    return None


def sweep_group(report: Report, sweep_dir: Path, wcfg: Mapping[str, Any], config: Mapping[str, Any] | None) -> str:
    """The training runs' group: ``logger.wandb.group`` or ``<sweep.name>-<sweep dir name>`` (as llm.train names it)."""
    if wcfg.get("group"):
        return str(wcfg["group"])
    name = get_dotted(dict(config or {}), "sweep.name")
    if name is None:
        name = next((get_dotted(r.config, "sweep.name") for r in report.runs if r.config), None)
    # only a missing name falls back: sweep.name=0 is a name, and llm.train groups its runs under "0-<dir>"
    return f"{'default' if name is None else name}-{sweep_dir.name}"


def _to_plain(config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if config is None:
        return None
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(config, DictConfig):  # the sweep config: its hydra node does not resolve outside a job
            out = OmegaConf.to_container(config, resolve=False)
            return out if isinstance(out, dict) else None
    except ImportError:
        pass
    return dict(config)


def log_report_to_wandb(report: Report, sweep_dir: Path, config: Mapping[str, Any] | None = None) -> Path | None:
    """Log the statistics table (and the paired Δ plot) as one ``job_type="report"`` run; best effort.

    Returns the wandb run dir (``<sweep_dir>/wandb/<run>``), or None when the sweep did not use wandb
    or logging failed (logged as a warning, never raised).
    """
    plain = _to_plain(config)
    wcfg = wandb_settings(report, plain)
    if wcfg is None:
        return None
    try:
        return _log(report, Path(sweep_dir), wcfg, sweep_group(report, Path(sweep_dir), wcfg, plain))
    except Exception as e:  # noqa: BLE001 - the report on disk is what matters; wandb is a copy
        log.warning("could not log the comparison to wandb (%s: %s); the report files are unaffected",
                    type(e).__name__, e)
        return None


def _log(report: Report, sweep_dir: Path, wcfg: Mapping[str, Any], group: str) -> Path:
    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    run = wandb.init(
        project=wcfg.get("project", "ropelab"), entity=wcfg.get("entity"), group=group, job_type="report",
        name=f"report-{sweep_dir.name}", dir=str(sweep_dir), mode=wcfg.get("mode", "offline"),
        tags=list(wcfg.get("tags") or []), reinit="create_new", settings=wandb.Settings(console="off"),
        config={"reference": report.reference.label if report.reference else None, "margin": report.margin,
                "acc_margin": report.acc_margin, "inputs": report.inputs},
    )
    try:
        columns, rows = stats_table(report)
        data: dict[str, Any] = {TABLE_KEY: wandb.Table(columns=columns, data=rows)}
        if (sweep_dir / DELTA_FILE).is_file():
            data["paired_delta"] = wandb.Image(str(sweep_dir / DELTA_FILE))
        run.log(data)
        run.summary.update({"n_runs": len(report.runs), "n_failed": len(report.failures)})
        run_dir = Path(run.dir).parent
    finally:
        run.finish()
    log.info("comparison logged to wandb (group %s, %s mode): %s", group, wcfg.get("mode", "offline"), run_dir)
    return run_dir
