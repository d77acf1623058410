"""What a Hydra multirun's exit code says (non-zero when any of its jobs did not complete), and the one
command that continues an interrupted sweep.

Why a callback: with a launcher plugin the jobs run in other processes; the process that started
the sweep only learns how they ended from their run dirs, read here once the sweep is over.
"""

from __future__ import annotations

import logging
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger(__name__)

#: Jobs of the last sweep in this process that did not complete: (job dir, status, message).
FAILED_JOBS: list[tuple[Path, str, str]] = []


def continue_sweep_command(sweep_dir: Path, argv: Sequence[str] | None = None) -> str:
    """The sweep's own command line (``argv``, default this process's) into its own dir with
    ``train.resume=auto``: finished jobs end at once, interrupted ones resume from their checkpoints and
    jobs that never trained start (:func:`llm.training.run.run_training`), and the comparison covers all."""
    replaced = ("hydra.sweep.dir=", "train.resume=", "train.stop_at_step=")  # a kept stop would stop them again
    args = [a for a in (sys.argv[1:] if argv is None else argv) if not a.lstrip("+").startswith(replaced)]
    return shlex.join(["python", "-m", "llm.train", *args, f"hydra.sweep.dir={sweep_dir}", "train.resume=auto"])


def continue_sweep_message(sweep_dir: Path) -> str:
    """The line a sweep that ended with jobs not done prints (the entry point on a signal, the callback after):
    one text, which users and tests look for."""
    return f"Continue the sweep with:\n  {continue_sweep_command(sweep_dir)}"


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
            log.info(continue_sweep_message(sweep_dir))  # to run once what failed is fixed
