"""Train a GPT whose RoPE comes from the registry: ``python -m llm.train [overrides]``.

The Hydra entry point: it turns Hydra's run (or multirun job) into a call of
:func:`llm.training.run_training` and its outcome into an exit code. One process, or one per GPU
under ``torchrun``. Every run writes into its Hydra run dir: ``config.yaml`` (resolved),
``metrics.jsonl`` (flushed per line), ``summary.json``, ``checkpoints/`` and, unless
``logger=none``, an offline wandb run.

A user error (bad config, nothing to resume, a busy run dir, a full disk) is one line on stderr and
exit code 2 (set ``HYDRA_FULL_ERROR=1`` for the traceback). In a multirun a failed job is recorded
in its run dir and the sweep goes on; the sweep exits 1 if any job failed.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from llm.errors import UserError
from llm.fileio import DiskFullError, write_json_atomic
from llm.training.outputs import SUMMARY_FILE
from llm.training.run import run_training
from llm.training.run_dir import discard_if_unused
from llm.training.trainer import TrainOutcome, run_label

log = logging.getLogger("llm.train")

# conf/hydra/launcher/gpus.yaml: as many parallel jobs as visible GPUs
OmegaConf.register_new_resolver("ropelab_gpus", lambda: max(1, torch.cuda.device_count()), replace=True)

#: Errors shown as one line: the user can fix them, a traceback would only hide the message.
USER_ERRORS = (UserError, DiskFullError)


def train(cfg: DictConfig, run_dir: Path, overrides: tuple[str, ...] = (), group: str = "single",
          resume_hint: str = "") -> dict:
    """Run one training and return its summary; exit with the run's code when it did not complete."""
    outcome: TrainOutcome = run_training(cfg, run_dir, overrides, group=group, resume_hint=resume_hint)
    if outcome.exit_code:
        sys.exit(outcome.exit_code)
    return outcome.summary


def _record_failed_job(cfg: DictConfig, run_dir: Path, status: str, message: str) -> None:
    """A sweep job that failed before training leaves a summary saying so, for the comparison to list."""
    r = cfg.get("rope", {})
    summary = {"status": status, "message": message, "seed": cfg.get("seed"), "rope": r.get("name"),
               "variant": r.get("variant"), "compute_dtype": r.get("compute_dtype"), "run_dir": str(run_dir)}
    try:
        summary["rope_label"] = run_label(cfg)
    except Exception:  # the config may be too broken to label
        pass
    write_json_atomic(run_dir / SUMMARY_FILE, summary)


def _pin_parallel_job(cfg: DictConfig, hc) -> None:
    """A sweep whose launcher runs jobs at once (hydra/launcher=gpus) spreads ``device=auto`` jobs over
    the visible GPUs, one each; the default launcher runs them one after another on one device."""
    parallel = "BasicLauncher" not in str(hc.launcher.get("_target_", ""))
    if parallel and cfg.get("device", "auto") == "auto" and torch.cuda.device_count() > 1:
        cfg.device = f"cuda:{int(hc.job.num) % torch.cuda.device_count()}"
        log.info(f"job {hc.job.num}: device={cfg.device}")


def _one_line(exc: BaseException) -> str:
    return str(exc).strip() or type(exc).__name__


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    multirun = hc.mode == RunMode.MULTIRUN
    group = f"{cfg.sweep.name}-{Path(hc.sweep.dir).name}" if multirun else cfg.sweep.name
    overrides = tuple(hc.overrides.task)
    hint = f"python -m llm.train hydra.run.dir={run_dir} train.resume=auto"
    full_error = os.environ.get("HYDRA_FULL_ERROR") == "1"
    if multirun:
        _pin_parallel_job(cfg, hc)
    try:
        outcome = run_training(cfg, run_dir, overrides, group=group, resume_hint=hint, start_unstarted=multirun)
    except USER_ERRORS as e:
        if full_error:
            raise
        if not multirun:
            print(f"Error: {_one_line(e)}", file=sys.stderr)
            discard_if_unused(run_dir)
            sys.exit(2)
        log.error(_one_line(e))
        _record_failed_job(cfg, run_dir, "config_error", _one_line(e))
        return None
    except Exception as e:
        if not multirun:
            raise
        log.exception(f"job {run_dir.name} failed")  # the sweep goes on; the report lists the job
        _record_failed_job(cfg, run_dir, "failed", f"{type(e).__name__}: {_one_line(e).splitlines()[0]}")
        return None
    sweep_of_job = run_dir.parent
    if not multirun and not outcome.exit_code and (sweep_of_job / "multirun.yaml").is_file():  # a job resumed alone
        log.info(f"{run_dir.name} is a job of the sweep in {sweep_of_job}; rewrite the sweep's comparison with:\n"
                 f"  python -m scripts.compare {sweep_of_job}")
    signalled = outcome.exit_code > 128
    if multirun and signalled:  # a signal ends the whole sweep: say how to continue all of it
        from llm.sweep import continue_sweep_message

        log.info(continue_sweep_message(Path(hc.sweep.dir)))
    if outcome.exit_code and (not multirun or signalled):
        sys.exit(outcome.exit_code)
    return outcome.summary.get("val_loss")


def _quiet_non_main_rank(argv: list[str]) -> list[str]:
    """Under torchrun only rank 0 owns a run dir: other ranks get no Hydra output dir or log file."""
    if int(os.environ.get("RANK", "0")) == 0:
        return argv
    keep = [a for a in argv if not a.startswith(("hydra.run.dir=", "hydra.output_subdir="))]
    return keep + ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=disabled"]


if __name__ == "__main__":
    sys.argv = _quiet_non_main_rank(sys.argv)
    main()
    from llm.sweep import FAILED_JOBS

    sys.exit(1 if FAILED_JOBS else 0)
