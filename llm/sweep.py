"""What a Hydra multirun's exit code says: non-zero when any of its jobs did not complete.

Why a callback: with a launcher plugin the jobs run in other processes; the process that started
the sweep only learns how they ended from their run dirs, read here once the sweep is over.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger(__name__)

#: Jobs of the last sweep in this process that did not complete: (job dir, status, message).
FAILED_JOBS: list[tuple[Path, str, str]] = []


class RecordSweepOutcome(Callback):
    """At the end of a multirun, list the jobs that failed (the entry point exits 1 if there are any)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from llm.report import sweep_failures

        sweep_dir = Path(str(config.hydra.sweep.dir))
        FAILED_JOBS[:] = sweep_failures(sweep_dir)
        for job_dir, status, message in FAILED_JOBS:
            log.error(f"job {job_dir.name}: {status}" + (f": {message}" if message else ""))
        if FAILED_JOBS:
            log.error(f"{len(FAILED_JOBS)} job(s) of the sweep in {sweep_dir} did not complete")
