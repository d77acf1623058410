"""A run dir's lock through the shared protocol (``llm.fileio.lock_file``): a second claimant is refused at once,
naming the holder's pid (or that it is starting), and writes nothing; a dir its holder discarded while a claimant
opened its lock file is claimed afresh, as a dir the claimant created."""

from __future__ import annotations

import fcntl
import os

import pytest

from llm.errors import RunDirInUseError
from llm.training.run_dir import LOCK_FILE, RunDirLock, lock_holder


def _open_fds() -> int:
    """How many descriptors this process has open (the listing's own counted each time)."""
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("marked", [True, False], ids=["pid written", "starting"])
def test_a_second_claim_is_refused_at_once_naming_the_holder(tmp_path, marked):
    run = tmp_path / "run"
    lock = RunDirLock(run).acquire()
    if marked:
        lock.mark_owner()
    held_by = f"(pid {os.getpid()})" if marked else "(starting)"
    content = (run / LOCK_FILE).read_bytes()
    before = _open_fds()
    try:
        with pytest.raises(RunDirInUseError) as refused:
            RunDirLock(run).acquire()
        assert str(refused.value) == (f"run dir {run} is in use by another run {held_by}; wait for it or choose "
                                      "another hydra.run.dir")
        with pytest.raises(RunDirInUseError, match=r"^sweep dir .* is in use by another sweep \((pid|starting)"):
            sweep = RunDirLock(run, LOCK_FILE, what="sweep")
            sweep.acquire()
        assert not sweep.held
        assert _open_fds() == before, "a refused claim closes its descriptor"
        assert (run / LOCK_FILE).read_bytes() == content, "a refused claim writes nothing"
        assert lock_holder(run) == (str(os.getpid()) if marked else "starting")
    finally:
        lock.release()
    assert lock_holder(run) is None
    assert (run / LOCK_FILE).read_bytes() == b"", "released: no stale pid left"


def test_a_dir_discarded_as_it_was_claimed_is_claimed_afresh(tmp_path, monkeypatch):
    """A refused run discards its new dir just after a newcomer opened the lock file there: the newcomer's lock on
    the removed file guards nothing, so it recreates the dir and holds it as its creator (it may discard it)."""
    run = tmp_path / "outputs" / "run"
    first = RunDirLock(run).acquire()
    real_flock, discarded = fcntl.flock, []

    def discarded_first(fd, op):
        if not discarded and fd != first._fd:  # the newcomer's first flock (the discard unlocks through flock too)
            discarded.append(None)
            discarded[0] = first.discard_if_unused()
        return real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", discarded_first)
    second = RunDirLock(run).acquire()
    assert discarded == [True] and second.held and second.created
    assert os.fstat(second._fd).st_ino == (run / LOCK_FILE).stat().st_ino
    assert second.discard_if_unused() and not (tmp_path / "outputs").exists()
