"""Start one run: claim the run dir, resume (or start from another run's weights), validate before any work,
then fit a :class:`Trainer`.

A start that fails leaves the directory as a user would want it, and only ever touches a directory this
process owns (holds its lock): a refused new run removes the directory it created (it held nothing else), a
sweep's job records why it did not start in its ``summary.json`` (the comparison lists it), and a job whose
directory already holds a run, or is held by another process, is left untouched and reported in
:data:`UNRECORDED_STARTS` for the sweep's exit code.
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from llm.config_check import check_config_keys, inert_rope_note, validate_config
from llm.errors import ConfigError, ResumeError, RunDirInUseError, UserError, one_line
from llm.fileio import DiskFullError, write_json_atomic
from llm.run_files import CONFIG_ERROR, CONFIG_FILE, FAILED, INTERRUPTED, SUMMARY_FILE
from llm.sweep_jobs import swept_values
from llm.training import checkpoint as checkpoint_module
from llm.training.checkpoint import NO_RESUME, find_resume_checkpoint
from llm.training.distributed import DistInfo, cleanup, init_distributed
from llm.training.init_from import (
    InitSource,
    apply_init_from,
    check_init_from,
    default_original_length,
    init_from_notes,
    init_record,
)
from llm.training.resume import PER_INVOCATION, another_run_s_keys, reconcile_resume_config, resumed_group
from llm.training.run_dir import RunDirLock, claim_run_dir, never_trained, record_command, trained_twin
from llm.training.trainer import Trainer, TrainOutcome, run_label

log = logging.getLogger("llm.train")

#: Errors shown as one line: the user can fix them, a traceback would only hide the message.
USER_ERRORS = (UserError, DiskFullError)
#: Sweep jobs of this process that did not start and could not say so in their own dir: (job dir, message).
UNRECORDED_STARTS: list[tuple[Path, str]] = []


class StartInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM (its :class:`llm.entry.Terminated` the cause) before the run's first step: a first stop,
    not the second Ctrl-C that aborts a training; the dir is left as a refused start leaves it
    (:func:`_interrupted_start`)."""


def _join_process_group(device: torch.device, run_dir: Path) -> DistInfo:
    """:func:`init_distributed`. It refuses a node of fewer GPUs than processes before any rank has claimed a run
    dir, so rank 0 (the run dir's only owner) then discards the dir the command made for the run, as a later
    refusal does."""
    try:
        return init_distributed(device)
    except USER_ERRORS:
        if int(os.environ.get("RANK", "0")) == 0:
            try:
                RunDirLock(run_dir).acquire().discard_if_unused()
            except RunDirInUseError:  # another process's run: not this refusal's to touch
                pass
        raise


def _shared_run_dir(run_dir: Path, dist_info) -> Path:
    """Every rank works in rank 0's run dir (the checkpoints it resumes from live there)."""
    if not dist_info.enabled:
        return run_dir
    shared = [str(run_dir)]
    torch.distributed.broadcast_object_list(shared, src=0)
    return Path(shared[0])


def record_failed_start(cfg: DictConfig, run_dir: Path, status: str, message: str) -> None:
    """A sweep job that failed before training leaves a summary saying so, for the comparison to list."""
    r = cfg.get("rope", {})
    summary = {"status": status, "message": message, "seed": cfg.get("seed"), "rope": r.get("name"),
               "variant": r.get("variant"), "compute_dtype": r.get("compute_dtype"), "run_dir": str(run_dir)}
    try:
        summary["rope_label"] = run_label(cfg)
    except Exception:  # the config may be too broken to label
        pass
    write_json_atomic(run_dir / SUMMARY_FILE, summary)


def _failed_start(cfg: DictConfig, run_dir: Path, exc: Exception, lock: RunDirLock, sweep_job: bool) -> None:
    """What a start that raised leaves behind; called while this process holds the run dir's lock."""
    user = isinstance(exc, USER_ERRORS)
    if not sweep_job:
        if user:
            lock.discard_if_unused()  # a new dir of this run, with nothing of its own in it
        elif never_trained(run_dir):  # a crash before the first step: the dir says so (a report lists it as failed)
            record_failed_start(cfg, run_dir, FAILED, f"{type(exc).__name__}: {one_line(exc)}")
        return
    if never_trained(run_dir):  # the job's own dir, no run in it: its summary says why it did not start
        message = one_line(exc) if user else f"{type(exc).__name__}: {one_line(exc)}"
        record_failed_start(cfg, run_dir, CONFIG_ERROR if user else FAILED, message)
    else:  # the dir holds a run (a sweep continued with a changed config): its record stays as it is
        UNRECORDED_STARTS.append((run_dir, one_line(exc)))


def _interrupted_start(cfg: DictConfig, run_dir: Path, lock: RunDirLock, sweep_job: bool) -> None:
    """What a start stopped before its first step leaves: a new run's dir goes as a refused one's does, and a sweep's
    job that never trained records itself as interrupted, so that the command continuing the sweep starts it."""
    if not sweep_job:
        lock.discard_if_unused()
    elif never_trained(run_dir):
        record_failed_start(cfg, run_dir, INTERRUPTED, "interrupted (Ctrl-C or SIGTERM) before its first step")


class HeldLines(logging.Handler):
    """A logger's records kept back while a command is checked, then passed on (:meth:`pass_on`).

    Why: Hydra's ``train.log`` lies in the run dir, and a refused resume writes nothing there; but the notes of a
    resume's checks (a damaged checkpoint skipped) belong in the run's log once the command is accepted, and on
    the terminal either way."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self.logger, self.records, self._propagate = logger, [], logger.propagate

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> HeldLines:
        self.logger.addHandler(self)
        self.logger.propagate = False
        return self

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self)
        self.logger.propagate = self._propagate

    def pass_on(self, to_files: bool = True) -> None:
        """Pass the records on as they would have gone (``to_files`` False: to every handler but log files)."""
        records, self.records = self.records, []
        for record in records:
            if to_files:
                self.logger.handle(record)
                continue
            for handler in _handlers_of(self.logger):
                if not isinstance(handler, logging.FileHandler) and record.levelno >= handler.level:
                    handler.handle(record)


def _handlers_of(logger: logging.Logger) -> list[logging.Handler]:
    """The handlers a record of ``logger`` reaches: its own and its ancestors', up to one that does not propagate."""
    found, current = [], logger
    while current is not None:
        found += current.handlers
        current = current.parent if current.propagate else None
    return found


def _refuse_another_run_s_checkpoint(asked: object, run_dir: Path) -> None:
    """Refuse ``train.resume=<path>`` to a checkpoint outside ``run_dir`` when ``run_dir`` holds a run of its own.

    Why: the resume takes the checkpoint's config, cuts the dir's ``metrics.jsonl`` at the checkpoint's step and
    appends to it, so one dir would hold the first steps of one run, the rest of another and the second's summary.
    """
    if not isinstance(asked, str) or asked in (*NO_RESUME, "auto") or never_trained(run_dir):
        return
    own = (run_dir / "checkpoints").resolve()
    if Path(asked).resolve().parent == own:
        return
    raise ResumeError(f"train.resume={asked} is not a checkpoint of the run in {run_dir}, which holds a run of its "
                      "own: resume it with hydra.run.dir=<the checkpoint's run dir>, or into a new hydra.run.dir")


def _refuse_another_run_s_config(path: Path, state: Mapping, run_dir: Path) -> None:
    """Refuse a checkpoint in ``run_dir``'s own ``checkpoints/`` whose saved config is another run's than the run's
    ``config.yaml`` (:func:`~llm.training.resume.another_run_s_keys`).

    Why refuse rather than fall back to an older checkpoint: such a file was put there by hand, not left by a crash,
    and a resume takes the checkpoint's config, so it would train the other run on in this dir (``config.yaml``
    rewritten, ``metrics.jsonl`` holding the steps of two runs) without a word; which run is meant is the user's call.
    """
    shown = another_run_s_keys(path, state, run_dir, CONFIG_FILE)
    if shown:
        raise ResumeError(f"checkpoint {path} holds another run than {run_dir / CONFIG_FILE}: {shown}; move it "
                          "out of the run's checkpoints/ and resume again (the newest of the run's own that loads is "
                          "taken)")


def _claim(cfg: DictConfig, run_dir: Path, dist_info: DistInfo, sweep_job: bool) -> RunDirLock:
    """The run dir's lock (rank 0 takes it); a dir in use is refused (a sweep job's refusal kept for the sweep's
    record), and a Ctrl-C during the claim leaves the dir as the claim left it."""
    try:
        # (select: a train group removed with ~train is refused by the key check after this, in one line)
        return claim_run_dir(run_dir, resuming=bool(OmegaConf.select(cfg, "train.resume")))
    except RunDirInUseError as e:
        if sweep_job:
            UNRECORDED_STARTS.append((run_dir, one_line(e)))
        cleanup(dist_info)
        raise
    except KeyboardInterrupt as e:  # no lock held
        cleanup(dist_info)
        raise StartInterrupted from e


def _resume(cfg: DictConfig, run_dir: Path, overrides: Sequence[str], group: str, sweep_job: bool,
            dist_info: DistInfo, held: HeldLines) -> tuple[tuple[Path, dict] | None, DictConfig, str]:
    """``train.resume`` settled: the checkpoint to resume (None: a fresh start), the config to train (a resumed
    run's saved config wins, :func:`reconcile_resume_config`) and the wandb group. A sweep job's ``resume=auto`` in
    a dir that never trained starts afresh, unless its run trained in another job's dir (the sweep continued with
    its jobs numbered otherwise). Notes of damaged checkpoints go to ``held``."""
    asked = cfg.train.get("resume")
    if sweep_job and asked == "auto" and never_trained(run_dir):
        twin = trained_twin(run_dir, OmegaConf.to_container(cfg, resolve=True), (*PER_INVOCATION, "hydra"))
        if twin is not None:
            raise ConfigError(f"{run_dir.name}: this job's run trained in {twin.name} of the same sweep dir, so "
                              "the sweep was continued with its jobs numbered otherwise (its arguments in another "
                              "order, or other jobs); continue it with the first command's arguments, in their "
                              "order")
        log.info(f"{run_dir.name}: nothing to resume (never trained), starting it from step 0")
        if dist_info.is_main:
            (run_dir / SUMMARY_FILE).unlink(missing_ok=True)  # a failed start's record, replaced by this run's
        asked = None
    _refuse_another_run_s_checkpoint(asked, run_dir)
    with held:
        resume = find_resume_checkpoint(asked, run_dir / "checkpoints")
    if resume is None:
        return None, cfg, group
    _refuse_another_run_s_config(*resume, run_dir)  # every checkpoint resumed holds its config (RESUME_KEYS)
    cfg = reconcile_resume_config(resume[1]["config"], cfg, overrides)
    if cfg.train.max_steps < resume[1].get("step", 0):  # its record would say fewer steps than it trained
        raise ConfigError(f"train.max_steps={cfg.train.max_steps} is below the step this run has reached "
                          f"({resume[1]['step']}): a resume trains on from there to the run's own "
                          "train.max_steps; leave it out")
    return resume, cfg, resumed_group(resume[1], group, overrides)


def _init_from(trainer: Trainer, source: InitSource, init: tuple, notes: list[str | None], is_main: bool) -> None:
    """The model's weights from ``train.init_from``'s checkpoint (``init``: its path, step and state), recorded
    in the run's summary; what differs from the source's training is a warning, the rest information (``notes``:
    the warnings, then one note or None)."""
    apply_init_from(trainer.model, *init)
    trainer.summary["init_from"] = init_record(source, init[0], init[1])  # kept by its checkpoints
    if not is_main:
        return
    *warnings, note = notes
    for line in warnings:
        log.warning(line)
    for line in (note, f"initialised the model from {init[0]} (step {init[1]}); optimizer and step start afresh"):
        if line:
            log.info(line)


def run_training(cfg: DictConfig, run_dir: Path, overrides: Sequence[str] = (), group: str = "single",
                 resume_hint: str = "", sweep_job: bool = False,
                 command_record: Mapping[str, str] | None = None) -> TrainOutcome:
    """Train ``cfg`` into ``run_dir``: lock the dir, load the checkpoint to resume (its saved config wins
    over the composed one, see :mod:`llm.training.resume`), or check ``train.init_from``'s source run
    (:mod:`llm.training.init_from`; ignored when resuming), validate before any work, then fit.

    ``sweep_job`` (a job of a multirun): ``train.resume=auto`` in a dir that never trained starts the run
    from step 0 instead of refusing, so that one command continues an interrupted sweep; and a start that
    fails is recorded in the job's ``summary.json`` (see :func:`_failed_start`).

    ``command_record`` (file name -> text: Hydra's composed config and overrides) is written into the run's
    ``.hydra/`` by the command that makes the run, and into ``.hydra/resume_<n>/`` by each later one, once the
    run owns its dir and the command has been accepted (:func:`llm.training.run_dir.record_command`).

    User errors (:class:`llm.errors.UserError`) propagate before any data or model work is done.
    """
    wants_cuda = cfg.get("device", "auto") != "cpu" and torch.cuda.is_available()
    dist_info = _join_process_group(torch.device("cuda" if wants_cuda else "cpu"), Path(run_dir))
    run_dir = _shared_run_dir(Path(run_dir), dist_info)
    lock = _claim(cfg, run_dir, dist_info, sweep_job) if dist_info.is_main else None
    trainer = None
    held = HeldLines(checkpoint_module.log)  # its notes of damaged checkpoints: train.log's once the run is ours
    ended = False  # fit() returned: every rank reaches the end together
    recorded: Path | None = None  # the record of this command, once written
    fitting = False  # a stop before fit() is a first one: fit() takes its own stops (a second Ctrl-C aborts)
    try:
        check_config_keys(cfg)
        resume, cfg, group = _resume(cfg, run_dir, overrides, group, sweep_job, dist_info, held)
        source = check_init_from(cfg) if resume is None else None  # a resumed run holds its weights already
        note = default_original_length(cfg, source) if source is not None else None
        notes = init_from_notes(cfg, source) if source is not None else []
        validate_config(cfg, world_size=dist_info.world_size)
        if dist_info.is_main and (inert := inert_rope_note(cfg)):
            log.info(inert)
        if lock is not None:
            lock.mark_owner()  # the command is accepted: the run is this process's now
            if command_record:
                recorded = record_command(run_dir, command_record, first=resume is None)
        held.pass_on()
        init = source.load() if source is not None else None  # a damaged checkpoint fails before any work
        trainer = Trainer(cfg, run_dir, dist_info, resume=resume, group=group, resume_hint=resume_hint,
                          job=run_dir.name if sweep_job else "",
                          swept=swept_values(overrides, run_dir.parent) if sweep_job else "")
        if init is not None:
            _init_from(trainer, source, init, [*notes, note], dist_info.is_main)
        fitting = True
        outcome = trainer.fit()
        ended = True
        return outcome
    except KeyboardInterrupt as e:
        if fitting:
            raise
        held.pass_on(to_files=False)
        if lock is not None:
            _interrupted_start(cfg, run_dir, lock, sweep_job)
        raise StartInterrupted from e
    except Exception as e:
        held.pass_on(to_files=False)  # a refused command writes nothing in the run dir, its log included
        if recorded is not None and recorded.name.startswith("resume_") and isinstance(e, USER_ERRORS):
            shutil.rmtree(recorded, ignore_errors=True)  # a resume refused once its data is read keeps no record
        if lock is not None:
            _failed_start(cfg, run_dir, e, lock, sweep_job)
        raise
    finally:
        if lock is not None:
            lock.release()
        # The DDP wrapper's reducer holds the process group: freed after destroy_process_group, gloo's
        # destructor can deadlock on its mutex (the rank then hangs at exit), so it goes first.
        trainer = None
        gc.collect()  # reference cycles of the trainer too
        cleanup(dist_info, together=ended)
