"""The one directory-lock protocol (``llm.fileio.lock_file``) and the data cache's use of it: a builder waits for
another, a lock on a file its holder removed is never trusted, and no refusal or interruption leaves a descriptor
open. The run dir's use of it (no waiting, the holder named) is tested in ``tests/llm/training/test_run_dir_lock.py``.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time

import pytest

import llm.data.cache_lock as cache_lock
from llm.data.cache_lock import locked_cache_dir
from llm.fileio import LockBusyError, lock_file


def _open_fds() -> int:
    """How many descriptors this process has open (the listing's own counted each time)."""
    return len(os.listdir("/proc/self/fd"))


def _is_named(fd: int, path) -> bool:
    held, named = os.fstat(fd), os.stat(path)
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def test_a_lock_taken_without_waiting_is_refused_naming_what_its_holder_wrote(tmp_path):
    path = tmp_path / "d" / ".lock"
    held = lock_file(path, block=False)
    assert held.created and path.read_bytes() == b"", "taking the lock writes nothing"
    os.pwrite(held.fd, b"1234", 0)
    before = _open_fds()
    try:
        with pytest.raises(LockBusyError) as busy:
            lock_file(path, block=False)
        assert busy.value.holder == "1234"
        assert _open_fds() == before, "the refused descriptor is closed"
        assert path.read_bytes() == b"1234"
    finally:
        os.close(held.fd)
    again = lock_file(path, block=False)  # the holder's descriptor closed: the lock is free
    assert not again.created
    os.close(again.fd)


@pytest.mark.parametrize("block", [True, False])
def test_a_lock_file_removed_before_it_was_locked_is_not_trusted(tmp_path, monkeypatch, block):
    """A holder that gives up removes its lock file and directory just after this process opened the file: the lock
    it then takes guards nothing, so it starts over, in a recreated directory, on a file it created."""
    path = tmp_path / "d" / ".lock"
    real_flock, removed = fcntl.flock, []

    def holder_gives_up_first(fd, op):
        if not removed:
            path.unlink()
            path.parent.rmdir()
            removed.append(fd)
        return real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", holder_gives_up_first)
    before = _open_fds()
    locked = lock_file(path, block=block)
    assert removed and _is_named(locked.fd, path) and locked.created
    assert _open_fds() == before + 1, "the descriptor of the removed file is closed: only the lock's is open"
    os.close(locked.fd)


def test_a_waiter_on_a_lock_whose_holder_removes_it_starts_over(tmp_path):
    path = tmp_path / "d" / ".lock"
    holder = lock_file(path, block=False)
    waiting, got = threading.Event(), []
    waiter = threading.Thread(target=lambda: got.append(lock_file(path, block=True, on_wait=waiting.set)))
    waiter.start()
    assert waiting.wait(30)
    time.sleep(0.2)  # let the waiter block in flock on the holder's file
    assert not got
    path.unlink()  # the holder gives up: its file and directory go before it lets go
    path.parent.rmdir()
    os.close(holder.fd)
    waiter.join(30)
    assert len(got) == 1 and _is_named(got[0].fd, path) and got[0].created
    os.close(got[0].fd)


def test_a_cache_builder_waits_and_ctrl_c_while_waiting_leaves_nothing_open(tmp_path, monkeypatch):
    """A second builder of one cache dir waits (it is told, in the log) rather than being refused; a Ctrl-C while it
    waits closes its descriptor and leaves the holder's lock and the directory as they were."""
    cache_dir = tmp_path / "cache" / "x"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with locked_cache_dir(cache_dir):
        (cache_dir / "meta.json").write_text("{}")
        monkeypatch.setattr(cache_lock.log, "info", interrupted)  # logged just before the wait
        before = _open_fds()
        with pytest.raises(KeyboardInterrupt):
            with locked_cache_dir(cache_dir):
                pytest.fail("the lock was taken while another builder held it")
        assert _open_fds() == before
    assert (cache_dir / ".lock").read_bytes() == b"", "the cache's lock file holds nothing"
    assert {p.name for p in cache_dir.iterdir()} == {".lock", "meta.json"}
