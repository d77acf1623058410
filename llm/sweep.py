"""A Hydra multirun's sweep dir, owned by one sweep at a time; what the sweep's exit code says (non-zero when
any of its jobs did not complete); and the one command that continues an interrupted sweep.

Why callbacks: with a launcher plugin the jobs run in other processes. The process that started the sweep
claims its dir before any job starts (:class:`ClaimSweepDir`: a second sweep into a used dir is refused as a
whole, naming the dir, instead of each of its jobs writing over the first sweep's), and learns how the jobs
ended from their run dirs once the sweep is over (:class:`RecordSweepOutcome`).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shlex
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from llm.config_keys import as_written
from llm.run_files import CONFIG_ERROR
from llm.sweep_jobs import PARALLEL_LAUNCHERS, PER_INVOCATION_ARGS

log = logging.getLogger(__name__)

#: Jobs of the last sweep in this process that did not complete: (job dir, status, message).
FAILED_JOBS: list[tuple[Path, str, str]] = []
#: The signal that stopped the last sweep of parallel jobs in this process (its exit code: 128 + it), if any.
STOPPED_BY: list[int] = []


def continue_sweep_command(sweep_dir: Path, argv: Sequence[str] | None = None) -> str:
    """The sweep's own command line (``argv``, default this process's) into its own dir with
    ``train.resume=auto``: finished jobs end at once, interrupted ones resume from their checkpoints and
    jobs that never trained start (:func:`llm.training.run.run_training`), and the comparison covers all."""
    # replaced, not kept: the dir is given once, and a kept stop would stop the jobs again
    args = [a for a in (sys.argv[1:] if argv is None else argv) if not a.lstrip("+").startswith(PER_INVOCATION_ARGS)]
    if not any(a in ("-m", "--multirun") or a.startswith("hydra.mode=") for a in args):
        args = ["-m", *args]  # a saved sweep's arguments (its multirun.yaml) hold no -m
    return shlex.join(["python", "-m", "llm.train", *args, f"hydra.sweep.dir={sweep_dir}", "train.resume=auto"])


def saved_command(saved: Any) -> list[str]:
    """The arguments of the command that made a sweep, from its saved config (``multirun.yaml``): its Hydra
    overrides (``hydra/launcher=gpus``, ``hydra.sweep.subdir=...``, ``+hydra.callbacks.compare.margin=0.02``; not
    the multirun mode, which ``-m`` gives) before the task's. The task's alone would continue the sweep with
    another launcher, another job dir name or another comparison."""
    hydra = [str(a) for a in as_written(OmegaConf.select(saved, "hydra.overrides.hydra")) or []
             if str(a) != "hydra.mode=MULTIRUN"]
    return [*hydra, *(str(a) for a in as_written(OmegaConf.select(saved, "hydra.overrides.task")) or [])]


def continue_sweep_message(sweep_dir: Path) -> str:
    """The line a sweep that ended with jobs not done prints (the entry point on a signal, the callback after):
    one text, which users and tests look for."""
    return f"Continue the sweep with:\n  {continue_sweep_command(sweep_dir)}"


class RecordSweepOutcome(Callback):
    """At the end of a multirun, list the jobs that failed (the entry point exits 1 if there are any)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from llm.report import sweep_failures
        from llm.training.run import UNRECORDED_STARTS

        sweep_dir = Path(str(config.hydra.sweep.dir))
        refused = {job_dir.resolve(): message for job_dir, message in UNRECORDED_STARTS}
        FAILED_JOBS[:] = [f for f in sweep_failures(sweep_dir) if Path(f[0]).resolve() not in refused]
        FAILED_JOBS.extend((job_dir, "refused", message) for job_dir, message in refused.items())
        for job_dir, status, message in FAILED_JOBS:
            log.error(f"job {job_dir.name}: {status}" + (f": {message}" if message else ""))
        if FAILED_JOBS:
            log.error(f"{len(FAILED_JOBS)} job(s) of the sweep in {sweep_dir} did not complete")
            if refused_by_config := [d.name for d, status, _ in FAILED_JOBS if status == CONFIG_ERROR]:
                # the same command refuses them again: say so, or the continue command reads as their fix
                log.warning(f"{len(refused_by_config)} job(s) ({', '.join(refused_by_config[:3])}"
                            f"{', ...' if len(refused_by_config) > 3 else ''}) were refused for their config: "
                            "continuing the sweep with the same arguments refuses them again unless what refused "
                            "them changes on this machine (an extra installed); a value of their own (seed=abc, "
                            "rope.variant=fulll) cannot change in this sweep: run the corrected values as a sweep "
                            "of their own into another hydra.sweep.dir, then compare both (python -m scripts.compare "
                            f"{sweep_dir} <the other sweep dir>)")
            log.info(continue_sweep_message(sweep_dir))  # to run once what failed is fixed


def make_output_dir(path: Path, key: str) -> None:
    """Create the run's or sweep's dir, or raise a :class:`~llm.errors.ConfigError` naming ``key`` (a path under a
    file, a read-only place): Hydra would fail there with a traceback."""
    from llm.errors import ConfigError
    from llm.training.run_dir import make_dirs

    try:
        make_dirs(path)  # noted: a refused run removes only the folders it made
        writable = os.access(path, os.W_OK | os.X_OK)
    except OSError as e:
        raise ConfigError(f"{key}={path}: cannot create it ({e.strerror}); choose a writable directory") from None
    if not writable:
        raise ConfigError(f"{key}={path} is not writable; choose a writable directory")


class CheckRunDir(Callback):
    """Before a single run: its config's interpolations resolve (``train.eval_every=${train.max_stepz}``) and its dir
    (``hydra.run.dir``) can be created and written, else one line and exit 2, and no run dir (Hydra's own failure
    there is a traceback, after the dir is made)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from llm.entry import full_error_requested, print_refusal, unresolved_line
        from llm.errors import UserError

        line = None if full_error_requested() else unresolved_line(config)
        if line is None:
            try:
                make_output_dir(Path(str(config.hydra.run.dir)), "hydra.run.dir")
            except UserError as e:
                line = str(e)
        if line is not None:
            print_refusal(line)
            sys.exit(2)


#: In a sweep dir: the sweep was asked to stop (Ctrl-C, SIGTERM) while its jobs ran side by side; a job that
#: finds it has not begun yet and does not begin. The sweep that continues the dir removes it.
STOP_FILE = ".sweep.stop"


def stop_requested(sweep_dir: Path) -> bool:
    return (sweep_dir / STOP_FILE).is_file()


class StopParallelJobs(Callback):
    """Ctrl-C or SIGTERM on a sweep whose jobs run side by side in worker processes (``hydra/launcher=gpus`` or
    ``joblib``) stops it as it stops a single run: each running job finishes its step, checkpoints and records
    itself as interrupted, the jobs not begun yet do not begin, and the sweep ends with its comparison and the
    command that continues it.

    Why: the launcher's own answer to Ctrl-C is to kill its workers at once, mid-step and before any checkpoint,
    with a traceback; and a SIGTERM to the sweep's process alone left its workers training with no one to collect
    them. So the sweep's process takes both signals while its jobs run: the first one is sent on to every worker
    as SIGTERM (a job's own graceful stop; a Ctrl-C at the terminal reaches them too, and a second signal of
    another kind does not abort them) and leaves :data:`STOP_FILE` in the sweep dir; a second Ctrl-C is sent on
    as SIGINT, which aborts each running job at once as it aborts a single run (``status: aborted``, no
    checkpoint of that step), and the sweep still ends with its comparison and continue command; only a third
    stops waiting for the workers."""

    def __init__(self) -> None:
        self.sweep_dir: Path | None = None
        self.stopping = self.aborting = False
        self.previous: dict[int, Any] = {}

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        (self.sweep_dir / STOP_FILE).unlink(missing_ok=True)  # a stop of an earlier invocation: this one continues
        if OmegaConf.select(config, "hydra.launcher._target_") not in PARALLEL_LAUNCHERS:
            return  # jobs in this process: each job's own graceful stop, and the sweep ends with it
        self.stopping = self.aborting = False
        STOPPED_BY.clear()
        for signum in (signal.SIGINT, signal.SIGTERM):
            self.previous[signum] = signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.stopping and signum == signal.SIGINT:
            if self.aborting:  # a third Ctrl-C: stop waiting for the workers
                self._restore()
                raise KeyboardInterrupt
            self.aborting = True
            print("\nSIGINT received again: the running jobs abort without a checkpoint of their step (Ctrl-C once "
                  "more stops waiting for them)", file=sys.stderr, flush=True)
            self._signal_workers(signal.SIGINT)
            return
        first = not self.stopping
        self.stopping = True
        if first:
            STOPPED_BY[:] = [signum]
        if first and self.sweep_dir is not None:
            self.sweep_dir.mkdir(parents=True, exist_ok=True)
            (self.sweep_dir / STOP_FILE).write_text(f"{signal.Signals(signum).name}\n")
            print(f"\n{signal.Signals(signum).name} received: the running jobs finish their step and checkpoint, the "
                  "others do not start (Ctrl-C again aborts at once)", file=sys.stderr, flush=True)
        self._signal_workers(signal.SIGTERM)

    @staticmethod
    def _signal_workers(signum: int) -> None:
        for worker in multiprocessing.active_children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signum)

    def _restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous.clear()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._restore()


def jobs_held(sweep_dir: Path) -> list[str]:
    """The job dirs in ``sweep_dir`` that hold a run or a job's record (its files, ``.hydra/``): a used sweep dir.
    Hydra's ``multirun.yaml`` alone (a sweep refused before any job) does not count."""
    from llm.training.run_dir import RECORD_DIR, RUN_FILES

    if not sweep_dir.is_dir():
        return []
    return sorted(d.name for d in sweep_dir.iterdir() if d.is_dir() and not d.name.startswith(".")
                  and any((d / name).exists() for name in (*RUN_FILES, RECORD_DIR)))


def n_jobs_error(n_jobs: Any) -> str | None:
    """What is wrong with the joblib launchers' ``hydra.launcher.n_jobs`` (joblib's meaning: N jobs at once, -1 one
    per CPU, -2 all but one, ...), or None. joblib refuses 0 or a non-integer only once the sweep has started, with a
    traceback and a sweep dir holding no job."""
    if n_jobs is None:
        return None  # joblib's default: one job at a time
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0:
        return (f"hydra.launcher.n_jobs={n_jobs!r} must be a non-zero integer: the jobs at once, or -1 for one per "
                "CPU (with hydra/launcher=gpus set sweep.jobs_per_gpu instead)")
    return None


class ClaimSweepDir(Callback):
    """Before any job of a multirun: refuse a key nothing would read and a sweep whose every job the run's config
    check refuses (:func:`llm.sweep_jobs.every_job_refused`), take the sweep dir's lock
    (``.sweep.lock``, held until the sweep ends) and refuse a dir that holds another sweep's jobs, unless the
    command continues that sweep (``train.resume=auto``, :func:`continue_sweep_command`).

    A refusal ends the process with one line and exit code 2 (Hydra turns a callback's exception into a
    warning, and the sweep would go on): nothing is written into the dir, and no job starts.
    """

    def __init__(self) -> None:
        self.lock = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from omegaconf.errors import InterpolationResolutionError

        from llm.entry import user_error_within
        from llm.errors import UserError

        try:
            self._claim(config)
        except UserError as e:
            print(f"Error: {e}", file=sys.stderr)
            sys.exit(2)
        except InterpolationResolutionError as e:  # a resolver's own refusal (sweep.jobs_per_gpu=0)
            if (cause := user_error_within(e)) is None:
                raise
            print(f"Error: {cause}", file=sys.stderr)
            sys.exit(2)

    def _claim(self, config: DictConfig) -> None:
        from llm.config_check import check_config_keys
        from llm.errors import ConfigError, RunDirInUseError
        from llm.report.callback import check_settings as compare_settings_error
        from llm.sweep_jobs import (
            BASIC_SWEEPER,
            compose_jobs,
            continuation_change,
            empty_sweep,
            every_job_refused,
            interval_sweep,
            shared_job_dirs,
        )
        from llm.training.run import UNRECORDED_STARTS
        from llm.training.run_dir import SWEEP_LOCK_FILE, RunDirLock

        UNRECORDED_STARTS.clear()
        check_config_keys(config)  # the sweep's own keys: one refusal, not one per job
        if (refused := compare_settings_error(config)) is not None:  # hydra.callbacks.compare.margin=abc
            raise ConfigError(refused)
        n_jobs = OmegaConf.select(config, "hydra.launcher.n_jobs")  # the launcher's resolvers refuse before any write
        launcher = str(OmegaConf.select(config, "hydra.launcher._target_") or "")
        if launcher in PARALLEL_LAUNCHERS and (refused := n_jobs_error(n_jobs)) is not None:
            raise ConfigError(refused)
        if launcher.endswith("SlurmLauncher") and shutil.which("srun") is None:  # submitit's own check, too late
            raise ConfigError("hydra/launcher=slurm submits the jobs to SLURM, and this machine has no `srun` (not a "
                              "SLURM node): run the sweep on the cluster, or use hydra/launcher=gpus here")
        if (refused := interval_sweep(config) or empty_sweep(config)) is not None:  # seed=range(0): no job at all
            raise ConfigError(refused)
        composed = None  # every job's config, composed once for the checks below
        if OmegaConf.select(config, "hydra.sweeper._target_") == BASIC_SWEEPER:
            try:
                composed = compose_jobs(config)
            except Exception as e:  # noqa: BLE001 - every_job_refused composes them again and says why
                log.debug("the sweep's jobs were not composed up front: %s", e)
        if (refused := shared_job_dirs(config, composed)) is not None:  # two jobs, one job dir
            raise ConfigError(refused)
        if (refused := every_job_refused(config, composed)) is not None:  # a bad value every job shares: one refusal
            raise ConfigError(refused)
        sweep_dir = Path(str(config.hydra.sweep.dir))
        continuing = OmegaConf.select(config, "train.resume") == "auto"

        def refuse_if_used() -> None:
            jobs = [] if continuing else jobs_held(sweep_dir)
            if jobs:
                raise RunDirInUseError(
                    f"sweep dir {sweep_dir} already holds a sweep ({len(jobs)} job dir(s): {', '.join(jobs[:3])}"
                    f"{', ...' if len(jobs) > 3 else ''}); continue it with its own arguments and "
                    "train.resume=auto, or choose another hydra.sweep.dir")

        refuse_if_used()  # before the lock: a refused sweep writes nothing there
        saved = sweep_dir / "multirun.yaml"
        change = continuing and saved.is_file() and continuation_change(config, earlier := OmegaConf.load(saved))
        if change == "order" or (change == "jobs" and jobs_held(sweep_dir)):
            first = continue_sweep_command(sweep_dir, saved_command(earlier))
            if change == "order":
                raise ConfigError(f"this command's arguments are those of the sweep in {sweep_dir} in another order, "
                                  "which numbers its jobs otherwise; continue it with the first command's order: "
                                  f"{first}")
            raise ConfigError(f"this command's jobs are not those of the sweep in {sweep_dir}, and a job's dir is its "
                              f"place in the sweep; continue that sweep with its own command ({first}), and run more "
                              "seeds or ropes as a sweep of their own into another hydra.sweep.dir, then compare "
                              "both: python -m scripts.compare <this sweep dir> <the other>")
        make_output_dir(sweep_dir, "hydra.sweep.dir")
        self.lock = RunDirLock(sweep_dir, SWEEP_LOCK_FILE, what="sweep").acquire()
        try:
            refuse_if_used()  # a sweep may have started in between
        except RunDirInUseError:
            self.lock.release()
            self.lock = None
            raise
        self.lock.mark_owner()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None
