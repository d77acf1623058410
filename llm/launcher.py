"""How ``hydra/launcher=gpus`` runs a sweep's jobs side by side: each worker process a pool of its own, so a kill
ends only the job it hits.

Why not Hydra's joblib launcher as it is: its workers form one loky pool, and when one of them dies (the kernel's
out-of-memory killer, ``kill -9``) loky takes the whole pool for broken, kills the workers still training and raises
``TerminatedWorkerError`` out of the sweep: the healthy jobs lose their work since their last checkpoint, and the
sweep ends with a traceback, no comparison and no word on how to go on. Here each of the ``n_jobs`` workers is a loky
executor of one process (joblib's own machinery, and its thread limits for the workers), reused job after job as
joblib's workers are; a job runs through Hydra's own joblib job function. A dead worker breaks only its own executor:
its job is recorded as failed in its run dir, naming the signal (:func:`record_killed_job`), the next job gets a new
worker, and the sweep's other jobs run on. The sweep then ends as it does when a job fails: with its comparison, the
killed job among the failures, the command that continues it, and exit code 1.
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def launch_isolated(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, n_jobs: int) -> list:
    """Run the jobs ``n_jobs`` at a time, each in a worker of its own pool; their ``JobReturn``\\ s in job order.
    ``launcher`` is Hydra's joblib launcher, set up (its config, task function and Hydra context)."""
    from hydra.core.singleton import Singleton
    from hydra.core.utils import configure_log, filter_overrides, setup_globals
    from hydra_plugins.hydra_joblib_launcher._core import execute_job
    from joblib._parallel_backends import LokyBackend
    from joblib.externals.loky import ProcessPoolExecutor

    setup_globals()
    configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    sweep_dir = Path(str(launcher.config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    log.info(f"Launching {len(job_overrides)} jobs, {n_jobs} at once, each worker process on its own (a killed one "
             f"ends only its job); sweep output dir: {sweep_dir}")
    for idx, overrides in enumerate(job_overrides, initial_job_idx):
        log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
    env = LokyBackend()._prepare_worker_env(n_jobs)  # joblib's thread limits: the workers share the cores
    state = Singleton.get_state()
    pending = deque(enumerate(job_overrides, initial_job_idx))
    idle: list[ProcessPoolExecutor] = []
    running: dict[Future, tuple[ProcessPoolExecutor, int, Sequence[str], float]] = {}
    returns: dict[int, Any] = {}
    ended = False
    try:
        while pending or running:
            while pending and len(running) < n_jobs:
                idx, overrides = pending.popleft()
                worker = idle.pop() if idle else ProcessPoolExecutor(max_workers=1, env=env)
                future = worker.submit(execute_job, idx, overrides, launcher.hydra_context, launcher.config,
                                       launcher.task_function, state)
                running[future] = (worker, idx, overrides, time.time())
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                worker, idx, overrides, started = running.pop(future)
                try:
                    returns[idx] = future.result()
                except BrokenProcessPool as e:  # its one process died: only this job is lost
                    worker.shutdown(wait=False)
                    returns[idx] = _killed_job(launcher, idx, overrides, e, started)
                else:
                    idle.append(worker)
        ended = True
    finally:
        # a third Ctrl-C (llm.sweep.StopParallelJobs) or an error leaves no worker behind; at the end they exit
        _shut_down([*idle, *(w for w, *_ in running.values())], wait=ended)
    return [returns[idx] for idx in sorted(returns)]


def _shut_down(workers: Sequence[Any], wait: bool) -> None:
    """Shut the workers down side by side (killed where ``wait`` is False): each shutdown waits for its process
    to exit, which tears down an interpreter holding torch (and a GPU's context), so one after another the sweep's
    end would wait for the sum of them."""
    if not workers:
        return
    with ThreadPoolExecutor(len(workers)) as pool:
        for done in [pool.submit(w.shutdown, wait=wait, kill_workers=not wait) for w in workers]:
            done.result()


def how_it_died(error: BaseException) -> tuple[str, str]:
    """How a worker process ended without returning its job, from loky's error (which gives its exit code as
    ``{SIGKILL(-9)}``), and the likely cause: ``("killed by SIGKILL (signal 9)", ", most likely by ...")``."""
    if match := re.search(r"\b(SIG[A-Z0-9]+)\((-?\d+)\)", str(error)):
        name, number = match.group(1), abs(int(match.group(2)))
        cause = (", most likely by the kernel's out-of-memory killer (the machine ran out of memory: fewer jobs at "
                 "once need less)") if name == "SIGKILL" else ""
        return f"killed by {name} (signal {number})", cause
    if match := re.search(r"\bEXIT\((-?\d+)\)", str(error)):
        return f"its process exited with code {match.group(1)}", ""
    return f"its process ended ({type(error).__name__})", ""


def _killed_job(launcher: Any, idx: int, overrides: Sequence[str], error: BaseException, started: float) -> Any:
    """The ``JobReturn`` of a job whose worker died, once its run dir records it. Returned as completed, with no
    value, as a job that fails returns (its record says it failed): Hydra's sweeper re-raises a failed return's
    error, which would end the sweep with a traceback."""
    from hydra.core.utils import JobReturn, JobStatus

    what, cause = how_it_died(error)
    try:
        with _job_config(launcher, idx, overrides) as (run_dir, cfg):
            message = record_killed_job(cfg, run_dir, what, cause, started)
    except Exception as e:  # noqa: BLE001 - the sweep goes on; the comparison lists the job's dir as it is
        log.error(f"job #{idx} ({' '.join(overrides)}): {what}{cause}; its run dir could not record it ({e}); the "
                  "sweep's other jobs go on")
        return JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED, _return_value=None)
    log.error(f"job {run_dir.name}: {message}; the sweep's other jobs go on")
    return JobReturn(overrides=list(overrides), cfg=cfg, working_dir=str(run_dir), status=JobStatus.COMPLETED,
                     _return_value=None)


@contextmanager
def _job_config(launcher: Any, idx: int, overrides: Sequence[str]) -> Iterator[tuple[Path, Any]]:
    """The job's run dir and config, composed as its worker composed them (Hydra's joblib job function), while its
    Hydra config is the current one (its ``${hydra:...}`` values: the job dir's name reads the rope's choice)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict

    job = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, list(overrides))
    with open_dict(job):
        job.hydra.job.id = f"{job.hydra.job.name}_{idx}"
        job.hydra.job.num = idx
    hydra_config = HydraConfig.instance()
    saved = hydra_config.cfg
    hydra_config.set_config(job)
    try:
        yield Path(str(job.hydra.sweep.dir)) / str(job.hydra.sweep.subdir), OmegaConf.masked_copy(
            job, [k for k in job if k != "hydra"])
    finally:
        hydra_config.cfg = saved


def record_killed_job(cfg: Any, run_dir: Path, what: str, cause: str, started: float) -> str:
    """Record in ``run_dir``'s ``summary.json`` that its job's process died (status ``failed``, the message saying
    how, how far the job got and how it goes on), for the comparison and the sweep's exit code to count it, and
    return the message. A job killed before its run wrote anything gets a dir with that record alone (continuing
    the sweep starts it). Written under the run dir's lock, which the dead process no longer holds. A summary the job
    wrote itself after it ``started`` (its end, recorded before its process died) is kept, as is a completed run's."""
    from llm.fileio import read_jsonl, write_json_atomic
    from llm.run_files import COMPLETED, FAILED, METRICS_FILE, SUMMARY_FILE, read_summary
    from llm.training.checkpoint import checkpoint_files
    from llm.training.run import record_failed_start
    from llm.training.run_dir import RunDirLock

    lock = RunDirLock(run_dir).acquire()
    try:
        summary = run_dir / SUMMARY_FILE
        ended = (read_summary(run_dir) or {}).get("status")  # a summary cut short by the kill counts as none
        # its own end, or a finished run it reopened (a continued sweep's; a resume of it trains no step): still true
        if ended is not None and (summary.stat().st_mtime >= started or ended == COMPLETED):
            return f"{what} after its run recorded its end ({ended}), which stands"
        metrics = run_dir / METRICS_FILE
        logged = read_jsonl(metrics)[0] if metrics.is_file() else []
        steps = [m["step"] for m in logged if isinstance(m.get("step"), int)]
        saved = checkpoint_files(run_dir / "checkpoints")
        step = max(steps, default=None)
        if step is None:
            message = f"{what} before its first step{cause}; continuing the sweep starts it"
        elif saved:
            message = f"{what} at step {step}{cause}; continuing the sweep resumes it from {saved[0].name}"
        else:
            message = (f"{what} at step {step}{cause}; it saved no checkpoint: remove {run_dir} before continuing "
                       "the sweep, to start it over")
        record_failed_start(cfg, run_dir, FAILED, message)
        if step is not None:  # how far it got, for the comparison's list of failed runs
            write_json_atomic(summary, {**(read_summary(run_dir) or {}), "step": step})
        return message
    finally:
        lock.release()
