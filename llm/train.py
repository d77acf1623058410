"""Train a GPT whose RoPE comes from the registry: ``python -m llm.train [overrides]``.

The Hydra entry point: it turns Hydra's run (or multirun job) into a call of
:func:`llm.training.run_training` and its outcome into an exit code. One process, or one per GPU
under ``torchrun``. Every run writes into its Hydra run dir, once it holds the dir's lock: ``.hydra/``
(the command's composed config and overrides; a resume's go to ``.hydra/resume_<n>/``), ``config.yaml``
(resolved), ``metrics.jsonl`` (flushed per line), ``summary.json``, ``checkpoints/`` and, unless
``logger=none``, an offline wandb run.

A user error is one line on stderr and exit code 2 (set ``HYDRA_FULL_ERROR=1`` for the traceback): a bad
config (Hydra's own errors included: an unknown group option or key, see :mod:`llm.entry`), nothing to
resume, a run dir another run owns or holds, a sweep dir another sweep owns or holds, a full disk before
training starts (the data cache). A full disk during training stops the run with ``status: failed`` and exit
code 1 (its temporary removed, metrics and earlier checkpoints kept), as does any other failure of a run. A
second Ctrl-C aborts at once: one line, exit code 130, ``status: aborted`` in ``summary.json``, no checkpoint of
the step (the newest earlier one is kept). In a multirun a failed job is recorded in its run dir and the sweep
goes on; the sweep exits 1 if any job did not complete.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

#: What a command stopped while it starts says after "Interrupted" (or "Stopped by SIGTERM"): a new run's, and a
#: resume's (whose run has trained steps: "no step was trained" would read as if they were lost).
NOT_STARTED = "before training began: no step was trained"
RESUME_NOT_STARTED = "before this command trained a step: the run and its checkpoints are as they were"


def not_started(resume: object) -> str:
    """The words of a stop while the command starts, for its ``train.resume`` value (None: a new run)."""
    return NOT_STARTED if str(resume).lower() in ("none", "", "null") else RESUME_NOT_STARTED


if __name__ == "__main__":  # before Hydra and torch import: a stop from here on is one line, not a traceback
    from llm.entry import stop_quietly_while_starting

    stop_quietly_while_starting(not_started(next((a.split("=", 1)[1] for a in reversed(sys.argv[1:])
                                                  if a.startswith("train.resume=")), None)))

import hydra  # noqa: E402
import torch  # noqa: E402
from hydra.main import get_args_parser  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from llm.config_check import check_jobs_per_gpu  # noqa: E402
from llm.config_keys import as_written  # noqa: E402
from llm.entry import (  # noqa: E402
    full_error_requested,
    other_rank,
    print_refusal,
    run_entry,
    sigterm_stops_like_ctrl_c,
    started,
    stopped,
)
from llm.errors import ConfigError, RunDirInUseError  # noqa: E402
from llm.gpu_slots import SLOTS_DIR, Slot  # noqa: E402
from llm.gpu_slots import claim as claim_slot  # noqa: E402
from llm.run_files import COMPLETED, INTERRUPTED, read_summary  # noqa: E402
from llm.sweep import stop_requested  # noqa: E402
from llm.sweep_jobs import PARALLEL_LAUNCHERS  # noqa: E402
from llm.training.checkpoint import checkpoint_files, checkpoint_step  # noqa: E402
from llm.training.run import (  # noqa: E402
    UNRECORDED_STARTS,
    USER_ERRORS,
    StartInterrupted,
    one_line,
    record_failed_start,
    run_training,
)
from llm.training.run_dir import never_trained  # noqa: E402
from llm.training.trainer import TrainOutcome  # noqa: E402

log = logging.getLogger("llm.train")


def jobs_at_once(per_gpu: object = 1) -> int:
    """How many jobs of a sweep ``hydra/launcher=gpus`` runs at once: ``per_gpu`` (``sweep.jobs_per_gpu``) for
    each visible GPU, the CPU counting as one device. conf/hydra/launcher/gpus.yaml reads it as the resolver
    ``ropelab_jobs``, registered here since the launcher's own config takes only joblib's settings: Hydra resolves
    it in the process this entry point runs in (its sweep's jobs import this module too)."""
    return max(1, torch.cuda.device_count()) * check_jobs_per_gpu(per_gpu)


OmegaConf.register_new_resolver("ropelab_jobs", jobs_at_once, replace=True)

#: Exit code of a run aborted by a second Ctrl-C (the shell's 128 + SIGINT).
ABORTED = 130


def train(cfg: DictConfig, run_dir: Path, overrides: tuple[str, ...] = (), group: str = "single",
          resume_hint: str = "") -> dict:
    """Run one training and return its summary; exit with the run's code when it did not complete."""
    outcome: TrainOutcome = run_training(cfg, run_dir, overrides, group=group, resume_hint=resume_hint)
    if outcome.exit_code:
        sys.exit(outcome.exit_code)
    return outcome.summary


def _local_parallel_jobs(hc) -> int:
    """How many jobs the sweep's launcher runs at once as processes of this machine: joblib's workers
    (hydra/launcher=gpus or joblib), else 0 (one job after another, or jobs that a cluster places, as SLURM's)."""
    if hc.launcher.get("_target_") not in PARALLEL_LAUNCHERS:
        return 0
    from joblib import effective_n_jobs

    return effective_n_jobs(hc.launcher.get("n_jobs", -1))


@contextmanager
def _pin_parallel_job(cfg: DictConfig, hc) -> Iterator[Slot | None]:
    """A ``device=auto`` job of a sweep whose jobs run at once on this machine holds a device slot for its life
    (:mod:`llm.gpu_slots`): the launcher's workers divided over the visible GPUs (the CPU counting as one),
    ``sweep.jobs_per_gpu`` of them with hydra/launcher=gpus, and runs on its slot's GPU. Any other job
    (``device=cuda:N``, one job after another, a cluster's) runs as asked."""
    workers = _local_parallel_jobs(hc)
    if not workers or cfg.get("device", "auto") != "auto":
        yield None
        return
    gpus = torch.cuda.device_count()
    devices = max(1, gpus)
    with claim_slot(Path(hc.sweep.dir) / SLOTS_DIR, devices, -(-workers // devices),
                    label=f"job {hc.job.num}") as slot:
        if gpus > 1:
            cfg.device = f"cuda:{slot.device}"
        # stderr, not the job's log: train.log is the run dir's, and the run does not own its dir yet
        where = f"GPU {slot.device}" if gpus else "the CPU"
        print(f"job {hc.job.num}: runs on {where} (slot {slot.name}), device={cfg.device}", file=sys.stderr, flush=True)
        try:
            yield slot
        finally:
            release_device_memory()


def release_device_memory() -> None:
    """Give the GPU memory a finished job cached back to the device, before its slot frees.

    Why: the launcher's worker processes outlive their jobs, and PyTorch's caching allocator (and compiled
    graphs holding their buffers) keep what a job reserved; the next job on that GPU, or the sweep's
    end-of-sweep evaluation, then finds the memory taken and runs out of it."""
    import gc

    torch._dynamo.reset()
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def command_record(cfg: DictConfig, hc: DictConfig) -> dict[str, str]:
    """What Hydra would write into ``.hydra/`` at job start (``hydra.output_subdir``, null in conf/config.yaml):
    the run writes it itself once it owns its dir (:func:`llm.training.run_dir.record_command`)."""
    return {"config.yaml": OmegaConf.to_yaml(cfg), "hydra.yaml": OmegaConf.to_yaml({"hydra": hc}),
            "overrides.yaml": OmegaConf.to_yaml(hc.overrides.task)}


def _stop_logging_into(run_dir: Path) -> None:
    """Close this process's log file inside ``run_dir`` (Hydra's ``train.log``): the dir is not this job's to write."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == run_dir.absolute():
            root.removeHandler(handler)
            handler.close()


def _in_launcher_worker() -> bool:
    """Whether this job runs in a launcher's worker process (hydra/launcher=gpus, joblib), not the sweep's own."""
    return multiprocessing.parent_process() is not None


def aborted_message(run_dir: Path, resume_hint: str, multirun: bool = False, cause: str = "a second Ctrl-C") -> str:
    """What a run aborted by a second Ctrl-C (``cause``: or a SIGTERM outside the trainer's own handling) prints:
    which checkpoint is left, and how to go on from it (a job without one starts over only from an empty dir: a
    resume refuses a run that logged steps and saved nothing). A signal that came after the run recorded its end
    with the checkpoint of its last step (torchrun turns a second Ctrl-C into a SIGTERM while the ranks exit) lost
    nothing, and the line says so."""
    saved = checkpoint_files(run_dir / "checkpoints")
    if not saved:
        again = f"; remove {run_dir} before continuing the sweep, to start this job over" if multirun else ""
        return (f"Aborted by {cause}, before the run saved a checkpoint (its metrics: {run_dir}/metrics.jsonl)"
                f"{again}")
    ended = _recorded_end(run_dir)
    if ended is not None and ended[1] == checkpoint_step(saved[0]):
        return (f"{cause[0].upper()}{cause[1:]} came as the run exited: it had ended ({ended[0]}) with the "
                f"checkpoint of step {ended[1]} saved, {saved[0]}; nothing is lost. Resume from it with:\n  "
                f"{resume_hint}")
    return (f"Aborted by {cause}: no checkpoint of the step it stopped; the newest is {saved[0]}. "
            f"Resume from it with:\n  {resume_hint}")


def _recorded_end(run_dir: Path) -> tuple[str, int] | None:
    """The status and step ``summary.json`` records where the run ended by its own handling (completed, or
    stopped and checkpointed), else None (still running, aborted, unreadable)."""
    summary = read_summary(run_dir)
    if summary is None:
        return None
    status, step = summary.get("status"), summary.get("step")
    ok = status in (COMPLETED, INTERRUPTED) and isinstance(step, int) and not isinstance(step, bool)
    return (status, step) if ok else None


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    started()  # this process's own handlers take the stops from here on (_run's and the trainer's)
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    if multirun and _in_launcher_worker():
        # a launcher's worker ignores a Ctrl-C outside a job's training (whose own handler takes it): the terminal's
        # second Ctrl-C, while the sweep's process stops the sweep, would otherwise kill the job just beginning
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if multirun and stop_requested(Path(hc.sweep.dir)):  # the sweep was stopped before this job began
        return _not_started(cfg, Path(hc.runtime.output_dir))
    record = command_record(cfg, hc)  # the command's config, before a sweep job is given its device
    with _pin_parallel_job(cfg, hc) if multirun else nullcontext():
        return _run(cfg, hc, multirun, record)


def _not_started(cfg: DictConfig, run_dir: Path) -> None:
    """A job of a stopped sweep that had not begun: recorded as interrupted (a dir holding a run keeps its record),
    so the comparison lists it and the command that continues the sweep starts it."""
    message = "not started: the sweep was stopped (Ctrl-C or SIGTERM) before this job began"
    if never_trained(run_dir):
        record_failed_start(cfg, run_dir, INTERRUPTED, message)
    log.info(f"{run_dir.name}: {message}")


def _run(cfg: DictConfig, hc, multirun: bool, record: dict[str, str]) -> float | None:
    """One run or sweep job: its outcome as the entry point reports it (exit code, log lines, sweep's value)."""
    run_dir = Path(hc.runtime.output_dir)
    name = OmegaConf.select(cfg, "sweep.name")  # read before the keys are checked: ~sweep.name is refused there
    group = f"{name}-{Path(hc.sweep.dir).name}" if multirun else name
    overrides = tuple(as_written(hc.overrides.task))  # text: ${.max_steps} is relative to its key, not to the record
    hint = resume_command(run_dir)
    try:
        with sigterm_stops_like_ctrl_c():  # a SIGTERM before the trainer takes it: one line, not a silent end
            outcome = run_training(cfg, run_dir, overrides, group=group, resume_hint=hint, sweep_job=multirun,
                                   command_record=record)
    except StartInterrupted as e:  # a first stop, before the first step: one line, exit 128 + the signal
        word, code = stopped(e)
        print(f"{word} {not_started(OmegaConf.select(cfg, 'train.resume'))}", file=sys.stderr)
        if multirun and _in_launcher_worker():
            return None  # a launcher's worker: the sweep's process ends the sweep (llm.sweep.StopParallelJobs)
        if multirun:
            from llm.sweep import continue_sweep_message

            _compare_stopped_sweep(cfg, hc)
            print(continue_sweep_message(Path(hc.sweep.dir)), file=sys.stderr)
        sys.exit(code)
    except KeyboardInterrupt as e:  # the second Ctrl-C: at once, without a checkpoint or a traceback
        _, code = stopped(e)  # a SIGTERM outside the trainer's own handling (after fit()) says so, exit 143
        if not other_rank():  # torchrun stops every rank: rank 0, which writes the run's files, says what is left
            print(aborted_message(run_dir, hint, multirun, "a second Ctrl-C" if code == ABORTED else "SIGTERM"),
                  file=sys.stderr)
        if multirun and _in_launcher_worker():
            return None  # a launcher's worker: the sweep's process ends the sweep (llm.sweep.StopParallelJobs)
        if multirun:
            from llm.sweep import continue_sweep_message

            print(continue_sweep_message(Path(hc.sweep.dir)), file=sys.stderr)
        sys.exit(code)
    except USER_ERRORS as e:
        if full_error_requested():
            raise
        if not multirun:
            print_refusal(one_line(e))
            sys.exit(2)
        if isinstance(e, RunDirInUseError) or any(d == run_dir for d, _ in UNRECORDED_STARTS):
            _stop_logging_into(run_dir)  # not this job's dir to write, its log included
        log.error(one_line(e))
        return None
    except Exception:
        if not multirun:
            raise
        if any(d == run_dir for d, _ in UNRECORDED_STARTS):
            _stop_logging_into(run_dir)
        log.exception(f"job {run_dir.name} failed")  # the sweep goes on; the report lists the job
        return None
    sweep_of_job = run_dir.parent
    if not multirun and not outcome.exit_code and (sweep_of_job / "multirun.yaml").is_file():  # a job resumed alone
        log.info(f"{run_dir.name} is a job of the sweep in {sweep_of_job}; rewrite the sweep's comparison with:\n"
                 f"  python -m scripts.compare {sweep_of_job}")
    signalled = outcome.exit_code > 128
    # in a launcher's worker process, returning lets the sweep's process stop the sweep (llm.sweep.StopParallelJobs);
    # a job run in the sweep's own process (one job at a time, joblib's n_jobs=1 too) ends the sweep here
    if multirun and signalled and _in_launcher_worker():
        return None
    if multirun and signalled:  # a signal ends the whole sweep: its comparison, and how to continue all of it
        from llm.sweep import continue_sweep_message

        _compare_stopped_sweep(cfg, hc)
        log.info(continue_sweep_message(Path(hc.sweep.dir)))
    if outcome.exit_code and (not multirun or signalled):
        sys.exit(outcome.exit_code)
    return outcome.summary.get("val_loss")


def _compare_stopped_sweep(cfg: DictConfig, hc) -> None:
    """The comparison of a sweep that a signal stops in its own process (one job at a time: the basic launcher, or
    joblib's and ``gpus``' in-process path), written as the sweep's end-of-sweep callback writes it: the process
    exits before Hydra would call that callback. A Ctrl-C while it is written leaves the earlier one whole."""
    spec = OmegaConf.select(hc, "callbacks.compare")
    if spec is None:  # the comparison turned off (~hydra.callbacks.compare)
        return
    from hydra.utils import instantiate

    config = OmegaConf.create({**OmegaConf.to_container(cfg), "hydra": OmegaConf.to_container(hc)})
    try:
        instantiate(spec).on_multirun_end(config)
    except KeyboardInterrupt:
        print(f"comparison not written: python -m scripts.compare {hc.sweep.dir}", file=sys.stderr)


def resume_command(run_dir: Path) -> str:
    """The command that resumes the run in ``run_dir``, printed when it stops: under torchrun, torchrun with as
    many processes per node (and nodes).

    Why: the resumed run takes the whole global batch on however many processes resume it; ``python -m
    llm.train`` alone would put all of it on one process (one GPU: N times the memory of a step, N times slower).
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    launcher = "python"
    if world > 1:
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        nodes = f"--nnodes={world // per_node} " if world != per_node else ""
        launcher = f"torchrun {nodes}--nproc_per_node={per_node}"
    return f"{launcher} -m llm.train hydra.run.dir={run_dir} train.resume=auto"


#: Hydra settings of the job that ``llm.train`` refuses on its command line, the values it leaves them (what the run
#: does anyway), and why (:func:`check_launch`).
REFUSED_HYDRA_SETTINGS = {
    "hydra.output_subdir": ((None,), "each run writes Hydra's record of its command (config.yaml, hydra.yaml, "
                            "overrides.yaml) into <run dir>/.hydra/ itself once it owns the dir, a resume's into "
                            ".hydra/resume_<n>/; Hydra would write it before, over the record of the command that "
                            "made the run (or its config.yaml, with an empty name), or into a dir another run holds: "
                            "leave it unset (null)"),
    "hydra.job.chdir": ((None, False), "llm.train reads every relative path (data files, train.init_from, a "
                        "checkpoint) from the directory it is started in and writes into the run dir by its full "
                        "path; changing into the run dir would make those paths resolve there: leave it unset "
                        "(false)"),
}


def _leaves(key: str, value: object) -> Iterator[tuple[str, object]]:
    """(dotted key, value) of each leaf an override sets: ``hydra.job={chdir:true}`` sets ``hydra.job.chdir``."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(f"{key}.{k}", v)
    else:
        yield key, value


def refused_hydra_setting(overrides: list[str]) -> str | None:
    """The line refusing the first override that sets a :data:`REFUSED_HYDRA_SETTINGS` key to another value than
    the run's own (in any form Hydra reads: ``+``/``++``, a dict of a parent key, each value of a sweep), or None.
    An override Hydra cannot parse is left to Hydra, which refuses it in its own line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep

    parser = OverridesParser.create()
    for text in overrides:
        try:
            override = parser.parse_override(text)
            value = None if override.is_delete() else override.value()
        except Exception:  # noqa: BLE001 (Hydra's grammar errors have no common base class)
            continue
        for one in value.list if isinstance(value, ChoiceSweep) else [value]:
            for key, leaf in _leaves(override.key_or_group, one):
                allowed, why = REFUSED_HYDRA_SETTINGS.get(key, ((leaf,), ""))
                if not any(leaf is a for a in allowed):
                    return f"{text}: {why}"
    return None


def check_launch(argv: list[str]) -> None:
    """Refuse, before Hydra starts, the Hydra job settings the run manages itself (:data:`REFUSED_HYDRA_SETTINGS`),
    and a multirun (``-m``) under torchrun.

    Why before Hydra: Hydra acts on them at job start (it writes ``hydra.output_subdir``, changes the directory),
    before the run's own checks. Why no ``-m`` under torchrun: every torchrun process would run the whole sweep on its
    own, each taking the sweep dir's lock: rank 0 would be refused as "in use by another sweep" (its own rank 1),
    after the sweep dir and a job dir are made."""
    args, _ = get_args_parser().parse_known_args(argv[1:])
    if (line := refused_hydra_setting(args.overrides)) is not None:
        raise ConfigError(line)
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    if args.multirun:
        raise ConfigError("-m (--multirun) does not run under torchrun (each process would run the whole sweep): "
                          "run each job with torchrun and no -m, or the sweep without torchrun (hydra/launcher=gpus "
                          "runs its jobs side by side on the GPUs)")


def _quiet_non_main_rank(argv: list[str]) -> list[str]:
    """Under torchrun only rank 0 owns a run dir: other ranks get no Hydra output dir or log file."""
    if int(os.environ.get("RANK", "0")) == 0:
        return argv
    keep = [a for a in argv if not a.startswith(("hydra.run.dir=", "hydra.output_subdir="))]
    return keep + ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=disabled"]


if __name__ == "__main__":
    try:
        check_launch(sys.argv)
    except ConfigError as e:
        print_refusal(str(e))
        sys.exit(2)
    sys.argv = _quiet_non_main_rank(sys.argv)
    try:
        run_entry(main)
    except KeyboardInterrupt:  # a third Ctrl-C on a sweep of parallel jobs: no traceback, the shell's code
        print("Aborted: the sweep stopped waiting for its jobs; a job that had not recorded its end is listed as "
              "crashed by the comparison", file=sys.stderr)
        sys.exit(ABORTED)
    from llm.sweep import FAILED_JOBS, STOPPED_BY

    sys.exit(128 + STOPPED_BY[0] if STOPPED_BY else 1 if FAILED_JOBS else 0)
