"""One run, one directory: a lock a second writer detects, no new run over an old one, and no writer that
touches a directory it does not own.

Why: two runs that end up with the same directory (started in the same second, a reused ``hydra.run.dir``, two
sweeps into one ``hydra.sweep.dir``) would interleave their metric lines and overwrite each other's summary, and
a refused one would clean up, as its own, the directory the other was training in. Ownership is an ``fcntl``
lock on ``<dir>/.run.lock`` (a sweep's: ``.sweep.lock``), released by the kernel when the process dies, so a
crashed run never leaves a stale lock behind; the protocol is :func:`llm.fileio.lock_file`, which a data cache's
lock (``llm.data.cache_lock``) takes too. Only the holder of the lock writes into the directory, and only a
process that created the lock file (the directory had never been claimed) and held it since may remove the
directory again, when its run is refused before it wrote anything of its own.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from llm.config_keys import covered, flatten, load_run_config
from llm.errors import RunDirInUseError
from llm.fileio import TMP_MARK, LockBusyError, lock_file, lock_text, remove_stale_temps, write_text_atomic
from llm.run_files import CHECKPOINT_DIR, COMPLETED, METRICS_FILE, SUMMARY_FILE, read_summary
from llm.training.checkpoint import checkpoint_files

LOCK_FILE = ".run.lock"
SWEEP_LOCK_FILE = ".sweep.lock"
#: Files whose presence means the directory already holds a run of its own.
RUN_FILES = (METRICS_FILE, SUMMARY_FILE, CHECKPOINT_DIR)
#: Where a run keeps the record of the command that made it (Hydra's composed config, its config and overrides).
RECORD_DIR = ".hydra"
#: What a refused new run may have left in the directory it created: its command's record, Hydra's log, its lock.
DISCARDABLE = (RECORD_DIR, "train.log", LOCK_FILE)


def lock_holder(run_dir: Path, lock_name: str = LOCK_FILE) -> str | None:
    """The pid (or ``"starting"``) of the live process that holds ``run_dir``'s lock, else None: a report tells a
    job still running from one that died (both have no ``summary.json`` yet). Reads only; a shared lock taken and
    dropped at once, which a holder's exclusive one refuses."""
    try:
        fd = os.open(Path(run_dir) / lock_name, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return lock_text(fd) or "starting"  # the pid mark_owner wrote; none before the command is accepted
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def unfinished_run(run_dir: Path) -> tuple[str | None, dict] | None:
    """Why the run in ``run_dir`` has not completed: ``(pid, {})`` while a live process holds its dir (a summary
    there is then a resumed run's stale one), or ``(None, summary)`` when its ``summary.json`` records a status
    other than completed; None for a completed run, or one without a readable summary (a checkpoint-only dir:
    nothing says it did not complete). Why one function: evaluation and generation both say whose model a
    checkpoint of an unfinished run is, by the same rule."""
    if (pid := lock_holder(run_dir)) is not None:
        return pid, {}
    summary = read_summary(run_dir)
    if summary is None or summary.get("status", COMPLETED) == COMPLETED:
        return None
    return None, summary


#: Directories this process created on the way to a run dir (:func:`make_dirs`): a discarded run dir takes its
#: parent with it only when the parent is one of them, never a folder that was there before (a user's own).
_MADE_HERE: set[str] = set()


def make_dirs(path: Path) -> None:
    """``path.mkdir(parents=True, exist_ok=True)``, noting the directories it creates (see :data:`_MADE_HERE`)."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    _MADE_HERE.update(os.path.abspath(p) for p in missing)


class RunDirLock:
    """Exclusive ownership of a directory for the life of this process (or until :meth:`release`).

    ``created`` says whether this process created the lock file, i.e. nobody had claimed the directory before:
    only then may :meth:`discard_if_unused` remove it.
    """

    def __init__(self, run_dir: Path, lock_name: str = LOCK_FILE, what: str = "run") -> None:
        self.run_dir = Path(run_dir)
        self.lock_name, self.what = lock_name, what
        self.created = self._marked = False
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> RunDirLock:
        """Take the lock or raise :class:`RunDirInUseError` naming the holder; a refused caller writes nothing.

        Taking the lock writes nothing either: :meth:`mark_owner` writes this process's pid once its command is
        accepted, so a command refused after taking it (a resume asking for another model) leaves the lock file
        of the run it looked at as it was.
        """
        try:  # make_dirs: the directories it creates are noted, for discard_if_unused
            locked = lock_file(self.run_dir / self.lock_name, block=False, make_dir=make_dirs)
        except LockBusyError as busy:
            flag = "hydra.sweep.dir" if self.what == "sweep" else "hydra.run.dir"
            held_by = f" (pid {busy.holder})" if busy.holder else " (starting)"
            raise RunDirInUseError(f"{self.what} dir {self.run_dir} is in use by another {self.what}{held_by}; "
                                   f"wait for it or choose another {flag}") from None
        self._fd, self.created, self._marked = locked.fd, locked.created, False
        return self

    def mark_owner(self) -> None:
        """Write this process's pid into the lock file, for a second writer's refusal to name it."""
        if self._fd is not None and not self._marked:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, str(os.getpid()).encode(), 0)
            self._marked = True

    def release(self) -> None:
        if self._fd is not None:
            if self._marked:  # no stale pid for a later refusal to name
                os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def discard_if_unused(self) -> bool:
        """Remove the directory this process created (:func:`make_dirs`) and still holds, when it holds only
        :data:`DISCARDABLE` entries (a run refused before its first own file); True if removed. The lock is released
        either way; a directory that was there before keeps everything but the lock file this process created.

        Why a rename first: a process that arrives while the directory goes finds no directory (and starts a new
        one) or the old lock file, which it cannot take while this process holds it; never a half-removed
        directory it could mistake for its own. Empty parents (the date folder, ``outputs/runs`` in a fresh folder) go
        too, those this process created.
        """
        d = self.run_dir
        if not self.held or not self.created or any(p.name not in DISCARDABLE for p in d.iterdir()):
            self.release()
            return False
        if os.path.abspath(d) not in _MADE_HERE:  # a folder that was there before (the user's) stays, as it was
            (d / self.lock_name).unlink(missing_ok=True)
            self.release()
            return False
        gone = d.with_name(f".{d.name}{TMP_MARK}{os.getpid()}")
        try:
            os.rename(d, gone)
        except OSError:
            self.release()
            return False
        shutil.rmtree(gone, ignore_errors=True)
        self.release()
        parent = d.parent
        while os.path.abspath(parent) in _MADE_HERE:  # outputs/runs/<date> of a first command in a fresh folder
            try:
                parent.rmdir()  # only when empty: another run's date folder stays
            except OSError:
                break
            parent = parent.parent
        return True


def _already_holds_a_run(run_dir: Path) -> RunDirInUseError | None:
    taken = [name for name in RUN_FILES if (run_dir / name).exists()]
    if not taken:
        return None
    if checkpoint_files(run_dir / "checkpoints"):  # what a resume would load
        return RunDirInUseError(f"run dir {run_dir} already holds a run ({', '.join(taken)}); continue it with "
                                "train.resume=auto, or choose another hydra.run.dir")
    # no checkpoint: a resume would be refused too, so the way on is another dir, or this one cleared
    return RunDirInUseError(f"run dir {run_dir} already holds a run ({', '.join(taken)}) that stopped before its "
                            f"first checkpoint, so it cannot be continued: choose another hydra.run.dir, or remove "
                            f"{run_dir} to start again there")


def claim_run_dir(run_dir: Path, resuming: bool) -> RunDirLock:
    """Lock ``run_dir`` for this run; a new run refuses a dir that already holds another run's files.

    A new run looks before it locks, so that a refused one writes nothing there (not even its pid into the
    lock file), and again once it holds the lock (a run may have started in between). Temporaries a killed
    writer left are removed once the lock is held (nobody else writes).
    """
    if not resuming and (refused := _already_holds_a_run(run_dir)):
        if (run_dir / LOCK_FILE).exists():  # a live owner first: "continue it with train.resume=auto" would meet it
            RunDirLock(run_dir).acquire().release()  # opens the existing file, writes nothing
        raise refused
    lock = RunDirLock(run_dir).acquire()
    if not resuming and (refused := _already_holds_a_run(run_dir)):
        lock.release()
        raise refused
    remove_stale_temps(run_dir)
    return lock


def never_trained(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds no training of its own: no checkpoint, and no metric line.

    A sweep continued with ``train.resume=auto`` starts such a job from step 0 (it never started, or was
    refused before its first step, leaving at most a failed job's summary): nothing would be logged twice.
    """
    metrics, ckpts = run_dir / "metrics.jsonl", run_dir / "checkpoints"
    logged = metrics.is_file() and metrics.stat().st_size > 0
    return not logged and not (ckpts.is_dir() and any(ckpts.iterdir()))


def record_command(run_dir: Path, files: Mapping[str, str], first: bool) -> Path:
    """Write the record of the command that runs in ``run_dir`` (Hydra's ``config.yaml``, ``hydra.yaml``,
    ``overrides.yaml``: name -> text) and return its directory. Call while holding the run dir's lock.

    The command that made the run (``first``, and no record yet) writes ``.hydra/``; every later command (a
    resume, a sweep continued) writes ``.hydra/resume_<n>/`` beside it, so the record of how the run was made
    stays the run's own. Hydra would write ``.hydra/`` itself at job start, before the run owns its dir
    (``hydra.output_subdir`` is null in ``conf/config.yaml`` for that reason).
    """
    base = run_dir / RECORD_DIR
    if first and not base.exists():
        target = base
    else:
        taken = [int(p.name.removeprefix("resume_")) for p in base.glob("resume_*")
                 if p.name.removeprefix("resume_").isdigit()]
        target = base / f"resume_{max(taken, default=0) + 1}"
    target.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        write_text_atomic(target / name, text)
    return target


def trained_twin(run_dir: Path, config: Mapping, ignore: Iterable[str]) -> Path | None:
    """A sibling job dir of ``run_dir``'s sweep that trained the same run (its saved config equal to ``config`` but
    for the keys below ``ignore``): a sweep continued with its arguments in another order numbers its jobs anew,
    and each would otherwise train again from step 0 in a new dir beside the one that holds it."""
    mine = {k: v for k, v in flatten(config).items() if not covered(k, ignore)}
    for sibling in sorted(p for p in run_dir.parent.iterdir() if p.is_dir() and p != run_dir):
        saved = {} if never_trained(sibling) else load_run_config(sibling, warn=False)
        if saved and {k: v for k, v in flatten(saved).items() if not covered(k, ignore)} == mine:
            return sibling
    return None
