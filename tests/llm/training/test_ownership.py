"""One writer per directory (issue 54): a refused run, sweep or job never removes, rewrites or creates a file in a
directory another process owns or a finished run holds; a resume never rewrites the run's record (``.hydra/``).

Each test fails on the code before the fix: the refused run removed the owner's ``.hydra/``, ``train.log`` and
lock, Hydra rewrote ``.hydra/`` for every command, and a refused sweep job wrote its ``config_error`` summary over
another sweep's finished job.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path

import pytest
from helpers import SMALL, compose_cfg, run_cli, run_command_inprocess, run_inprocess

from llm.errors import ResumeError, RunDirInUseError
from llm.training.run_dir import LOCK_FILE, SWEEP_LOCK_FILE, RunDirLock


def snapshot(root: Path) -> dict[str, tuple[bytes, int] | None]:
    """Every entry under ``root``: a file's bytes and mtime, a directory as None."""
    out: dict[str, tuple[bytes, int] | None] = {}
    for p in sorted(root.rglob("*")):
        out[str(p.relative_to(root))] = (p.read_bytes(), p.stat().st_mtime_ns) if p.is_file() else None
    return out


def run_main(monkeypatch, args: list[str]) -> int:
    """``python -m llm.train`` in this process (Hydra's logging off): its exit code."""
    for name in ("HYDRA_FULL_ERROR", "ROPELAB_USER_FULL_ERROR"):  # the entry point sets both: undone after the test
        monkeypatch.setenv(name, "")  # (delenv alone records nothing for an unset variable)
        monkeypatch.delenv(name)
    monkeypatch.delitem(sys.modules, "llm.train", raising=False)  # run as __main__, as `python -m` runs it
    flags = [a for a in args if a.startswith("-")]
    monkeypatch.setattr(sys, "argv", ["llm.train", *flags, *SMALL, *[a for a in args if not a.startswith("-")],
                                      "hydra/job_logging=none", "hydra/hydra_logging=none"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module("llm.train", run_name="__main__")
    return done.value.code


def test_a_refused_run_changes_nothing_in_a_dir_another_run_owns_or_a_finished_run_holds(tmp_path, capsys):
    """A run that owns its dir and has not written its config yet (what a second run met in the issue: only
    ``.hydra/``, ``train.log`` and the lock): a second, real process is refused and the dir stays byte for byte,
    lock included. Then the same dir holding a finished run (no owner left): a new run, the command through the
    entry point in this process, is refused without a write either."""
    run = tmp_path / "run"
    lock = RunDirLock(run).acquire()  # this process is the run that owns the dir
    lock.mark_owner()
    (run / ".hydra").mkdir()
    (run / ".hydra" / "overrides.yaml").write_text("- optim.lr=0.002\n")
    (run / "train.log").write_text("[llm.data.cache][INFO] - preparing the data\n")
    before = snapshot(run)
    try:
        proc = run_cli(["train.max_steps=2", f"hydra.run.dir={run}"], timeout=120)
        after = snapshot(run)
    finally:
        lock.release()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip() == (f"Error: run dir {run} is in use by another run (pid {os.getpid()}); "
                                   "wait for it or choose another hydra.run.dir"), proc.stderr[-2000:]
    assert after == before
    (run / "summary.json").write_text('{"status": "completed", "val_loss": 7.0}\n')
    (run / "metrics.jsonl").write_text('{"kind": "val", "step": 2, "val_loss": 7.0}\n')
    before = snapshot(run)
    capsys.readouterr()
    assert run_command_inprocess(["train.max_steps=2", f"hydra.run.dir={run}"], multirun=False) == 2
    err = capsys.readouterr().err
    assert "already holds a run (metrics.jsonl, summary.json)" in err, err
    # no checkpoint: a resume would be refused too, so the message names the ways that work, not resume=auto
    assert "cannot be continued: choose another hydra.run.dir, or remove" in err and "resume" not in err, err
    assert snapshot(run) == before
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "step_0000002.pt").write_bytes(b"")
    assert run_command_inprocess(["train.max_steps=2", f"hydra.run.dir={run}"], multirun=False) == 2
    err = capsys.readouterr().err
    assert "continue it with train.resume=auto, or choose another hydra.run.dir" in err, err


def test_a_second_sweep_into_a_used_sweep_dir_is_refused_as_a_whole(tmp_path, capsys):
    """A sweep running in the dir (its lock held by this process), then a finished sweep there: a second sweep
    (a real process; for the finished sweep, which no process holds, the command in this process) is refused
    before any job starts, naming the dir, and writes nothing there (no ``config_error`` summary over the finished
    job, no multirun.yaml, no comparison)."""
    sweep = tmp_path / "sweep"
    lock = RunDirLock(sweep, SWEEP_LOCK_FILE, what="sweep").acquire()
    lock.mark_owner()
    args = ["-m", "seed=0,1", "train.max_steps=2", f"hydra.sweep.dir={sweep}"]
    try:
        proc = run_cli(args, timeout=120)
        after = sorted(p.name for p in sweep.iterdir())
    finally:
        lock.release()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [f"Error: sweep dir {sweep} is in use by another sweep "
                                                f"(pid {os.getpid()}); wait for it or choose another hydra.sweep.dir"]
    assert after == [SWEEP_LOCK_FILE], "no job started"
    job = sweep / "0_torch_s0"
    job.mkdir()
    (job / "summary.json").write_text(json.dumps({"status": "completed", "val_loss": 7.0}))
    (job / ".hydra").mkdir()
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    before = snapshot(sweep)
    capsys.readouterr()
    assert run_command_inprocess(args[1:]) == 2  # args less -m: run_command_inprocess runs the multirun
    assert capsys.readouterr().err.strip().splitlines() == [
        f"Error: sweep dir {sweep} already holds a sweep (1 job dir(s): 0_torch_s0); continue it with its own "
        "arguments and train.resume=auto, or choose another hydra.sweep.dir"]
    assert snapshot(sweep) == before


def test_a_refused_sweep_job_writes_nothing_into_a_dir_it_does_not_own(tmp_path):
    """A sweep's job whose dir another process holds, or whose dir holds a finished run it may not resume (a
    changed config), is refused and leaves the dir as it was; the sweep learns of it from UNRECORDED_STARTS
    (its exit code), not from a summary written over the run's."""
    from llm.training.run import UNRECORDED_STARTS, run_training

    UNRECORDED_STARTS.clear()
    held = tmp_path / "held"
    lock = RunDirLock(held).acquire()
    before = snapshot(held)
    try:
        with pytest.raises(RunDirInUseError):
            run_training(compose_cfg(["train.max_steps=2"]), held, sweep_job=True)
    finally:
        lock.release()
    assert snapshot(held) == before
    done = tmp_path / "done"
    run_inprocess(done, ["train.max_steps=2", "train.eval_every=2"])
    before = snapshot(done)
    changed = ["train.max_steps=2", "model.n_layer=2", "train.resume=auto"]
    with pytest.raises(ResumeError, match="resume cannot change model.n_layer"):
        run_training(compose_cfg(changed), done, overrides=changed, sweep_job=True)
    assert snapshot(done) == before, "the finished job's summary stays its own"
    assert [d for d, _ in UNRECORDED_STARTS] == [held, done]
    UNRECORDED_STARTS.clear()


def test_a_dir_is_discarded_only_by_the_process_that_created_it(tmp_path):
    """A refused new run removes its run dir (and the empty folders it made above it: outputs/runs/<date> of a
    first command in a fresh folder) only when it created the lock file itself: a dir someone had claimed before,
    or one holding anything else, stays."""
    fresh = tmp_path / "outputs" / "runs" / "day" / "fresh"
    lock = RunDirLock(fresh).acquire()
    (fresh / "train.log").write_text("a line of the refused run\n")
    assert lock.created and lock.discard_if_unused()
    assert not (tmp_path / "outputs").exists()
    claimed = tmp_path / "claimed"
    RunDirLock(claimed).acquire().release()  # claimed before by another process, since gone
    again = RunDirLock(claimed).acquire()
    assert not again.created and not again.discard_if_unused() and (claimed / LOCK_FILE).exists()
    other = tmp_path / "other"
    lock = RunDirLock(other).acquire()
    (other / "notes.txt").write_text("not the run's")
    assert not lock.discard_if_unused() and (other / "notes.txt").exists()


def test_a_discarded_run_dir_leaves_a_folder_it_found(tmp_path):
    """The empty parent goes with a discarded run dir only when this process made it: a folder the user made for
    the run (hydra.run.dir=<their folder>/run) stays, empty as it was."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    lock = RunDirLock(theirs / "run").acquire()
    assert lock.created and lock.discard_if_unused()
    assert not (theirs / "run").exists() and theirs.is_dir()


def test_resumes_never_rewrite_the_run_s_record(tmp_path, monkeypatch):
    """The record of how a run was made (``.hydra/``) stays the run's: a refused resume changes nothing in it and
    adds nothing, an accepted one keeps its own overrides beside it in ``.hydra/resume_1/``."""
    run = tmp_path / "run"
    assert run_main(monkeypatch, ["train.max_steps=2", "optim.lr=0.002", "train.stop_at_step=1",
                                  f"hydra.run.dir={run}"]) == 0
    record = run / ".hydra"
    assert "- optim.lr=0.002" in (record / "overrides.yaml").read_text()
    before = snapshot(record)
    assert run_main(monkeypatch, ["train.resume=auto", "optim.lr=0.01", f"hydra.run.dir={run}"]) == 2
    assert snapshot(record) == before, "a refused resume leaves the record as it was"
    assert run_main(monkeypatch, ["train.resume=auto", f"hydra.run.dir={run}"]) == 0
    assert json.loads((run / "summary.json").read_text())["step"] == 2
    assert {k: v for k, v in snapshot(record).items() if not k.startswith("resume_")} == before
    resumed = (record / "resume_1" / "overrides.yaml").read_text()
    assert "- train.resume=auto" in resumed and "optim.lr" not in resumed
    assert sorted(p.name for p in (record / "resume_1").iterdir()) == ["config.yaml", "hydra.yaml", "overrides.yaml"]


def test_a_new_run_aimed_at_a_dir_a_live_run_holds_is_told_it_is_in_use(tmp_path, capsys):
    """A new run aimed at the dir of a run training now was told to continue it with train.resume=auto, which then
    said the dir is in use: the live owner is said first, and nothing is written."""
    run = tmp_path / "run"
    lock = RunDirLock(run).acquire()
    lock.mark_owner()
    (run / "metrics.jsonl").write_text('{"kind": "train", "step": 2}\n')
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "step_0000002.pt").write_bytes(b"")
    before = snapshot(run)
    try:
        assert run_command_inprocess(["train.max_steps=2", f"hydra.run.dir={run}"], multirun=False) == 2
        after = snapshot(run)
    finally:
        lock.release()
    err = capsys.readouterr().err
    assert f"run dir {run} is in use by another run (pid {os.getpid()})" in err and "resume" not in err, err
    assert after == before
