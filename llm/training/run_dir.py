"""One run, one directory: a lock a second writer detects, and no new run over an old one.

Why: two runs that end up with the same directory (started in the same second, or a user reusing
``hydra.run.dir``) used to interleave their metric lines and overwrite each other's summary. The
lock is an ``fcntl`` lock on ``<run dir>/.run.lock``, released by the kernel when the process dies,
so a crashed run never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

from llm.errors import RunDirInUseError
from llm.fileio import remove_stale_temps

LOCK_FILE = ".run.lock"
#: Files whose presence means the directory already holds a run of its own.
RUN_FILES = ("metrics.jsonl", "summary.json", "checkpoints")
#: What Hydra writes into a run dir before the task starts: a dir holding only these never ran.
HYDRA_ONLY = (".hydra", "train.log", LOCK_FILE)


class RunDirLock:
    """Exclusive ownership of a run dir for the life of this process (or until :meth:`release`)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._fd: int | None = None

    def acquire(self) -> RunDirLock:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise RunDirInUseError(f"run dir {self.run_dir} is in use by another run (pid {owner}); "
                                   "wait for it or choose another hydra.run.dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def claim_run_dir(run_dir: Path, resuming: bool) -> RunDirLock:
    """Lock ``run_dir`` for this run; a new run refuses a dir that already holds another run's files.

    Temporaries a killed writer left there are removed once the lock is held (nobody else writes).
    """
    lock = RunDirLock(run_dir).acquire()
    if not resuming:
        taken = [name for name in RUN_FILES if (run_dir / name).exists()]
        if taken:
            lock.release()
            raise RunDirInUseError(f"run dir {run_dir} already holds a run ({', '.join(taken)}); continue it with "
                                   "train.resume=auto, or choose another hydra.run.dir")
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


def discard_if_unused(run_dir: Path) -> bool:
    """Remove a run dir that holds only what Hydra wrote before the run was refused; True if removed.

    A configuration that never ran leaves nothing behind (and an empty date folder goes too).
    """
    if not run_dir.is_dir() or any(p.name not in HYDRA_ONLY for p in run_dir.iterdir()):
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    parent = run_dir.parent
    if parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
    return True
