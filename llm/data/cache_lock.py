"""The lock on one cache directory: one builder at a time, and no empty directory left by a failed build.

Why our own ``flock`` lock rather than ``filelock``: a build that fails (unreadable data, a full disk, Ctrl-C)
must not leave behind a directory that holds nothing but its lock file. So the holder, before it lets go,
removes the lock file and the directory when nothing else is in them. This is safe only because a process
that was waiting on that lock checks, once it gets it, that the file it locked still has the lock file's name:
a lock on a removed file guards nothing, so the waiter starts over (recreating the directory and the lock
file). That check needs the locked file descriptor, which ``filelock`` keeps private (its recent versions
make the check themselves, older ones do not); the protocol is :func:`llm.fileio.lock_file`, which a run dir's
lock (``llm.training.run_dir``) takes too. The lock is advisory, per open file, and released by the kernel when
the process dies, so a killed builder never blocks the next. A complete cache keeps its lock file: only an
otherwise empty directory is removed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from llm.fileio import lock_file

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"


def _acquire(cache_dir: Path) -> int:
    """Create ``cache_dir`` if needed and lock its lock file (waiting for another holder); returns the fd."""
    return lock_file(cache_dir / LOCK_NAME, block=True,
                     on_wait=lambda: log.info("waiting for another process preparing %s", cache_dir)).fd


def _remove_if_only_lock(cache_dir: Path) -> None:
    """With the lock still held: remove the lock file, then the directory, when nothing else is in it."""
    try:
        if [p.name for p in cache_dir.iterdir()] != [LOCK_NAME]:
            return
        (cache_dir / LOCK_NAME).unlink()
        cache_dir.rmdir()
    except OSError:  # a newcomer created a fresh lock file in the meantime: the directory is theirs now
        pass


@contextmanager
def locked_cache_dir(cache_dir: Path) -> Iterator[None]:
    """Hold the exclusive lock of ``cache_dir`` (created if needed) for the block; see the module docstring."""
    fd = _acquire(cache_dir)
    try:
        yield
    finally:
        try:
            _remove_if_only_lock(cache_dir)
        finally:
            os.close(fd)  # releases the flock
