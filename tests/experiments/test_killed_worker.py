"""``hydra/launcher=gpus``: a job whose process is killed (the kernel's out-of-memory killer, ``kill -9``) ends alone.
The sweep's other jobs run to completion, the killed job is recorded as failed with the signal that ended it, and
the sweep ends with its comparison, the command that continues it and a non-zero exit code, without a traceback."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path

from helpers import run_command_inprocess

from llm.training.run_dir import lock_holder

JOBS = ("0_torch_s0", "1_torch_s1")


def _training_pid(job: Path) -> int | None:
    """The pid of the process training ``job`` (its run dir's lock holder) once it logged a step, else None."""
    metrics = job / "metrics.jsonl"
    if not (metrics.is_file() and metrics.stat().st_size > 0):
        return None
    holder = lock_holder(job)
    return int(holder) if holder and holder.isdigit() else None


def _kill_one_while_the_other_trains(sweep: Path, seen: dict) -> None:
    """As the out-of-memory killer would: SIGKILL one job's process mid-run while the other job trains. The job that
    logs a step first is paused (SIGSTOP) until the other has logged one and is killed, so the kill always lands
    while both are mid-run, however the two processes' starts fall on a loaded machine."""
    deadline = time.monotonic() + 240
    paused = None
    try:
        while time.monotonic() < deadline:
            pids = {name: _training_pid(sweep / name) for name in JOBS}
            if paused is None and (first := next((n for n in JOBS if pids[n]), None)):
                paused = (first, pids[first])
                os.kill(pids[first], signal.SIGSTOP)
            victim = next((n for n in JOBS if paused and n != paused[0] and pids[n]), None)
            if victim:
                os.kill(pids[victim], signal.SIGKILL)
                seen.update(killed=victim, pid=pids[victim], at=time.time())
                return
            time.sleep(0.01)
    finally:
        if paused is not None:
            with contextlib.suppress(ProcessLookupError):  # a launcher that killed it with the other
                os.kill(paused[1], signal.SIGCONT)


def test_a_killed_job_ends_alone_and_the_sweep_reports_it(tmp_path, capfd, monkeypatch):
    """Two jobs at once on the CPU (one device of two slots), one SIGKILLed mid-run: the other completes after the
    kill, the killed one's summary says failed and names the signal, and the sweep ends with the comparison listing
    it, the continue command and exit code 1. (In one joblib pool the kill took the healthy job down with it, and the
    sweep ended with joblib's TerminatedWorkerError traceback, no comparison and no continue command.) The sweep's
    own command runs in this process; its jobs run in the launcher's worker processes all the same."""
    sweep = tmp_path / "sweep"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the workers' torch threads: one each, as two share the cores
    seen: dict = {}
    killer = threading.Thread(target=_kill_one_while_the_other_trains, args=(sweep, seen), daemon=True)
    killer.start()
    code = run_command_inprocess(["hydra/launcher=gpus", "++sweep.jobs_per_gpu=2", "seed=0,1", "train.max_steps=8",
                                  "train.log_every=1", "train.eval_every=8", f"hydra.sweep.dir={sweep}"])
    killer.join(timeout=5)
    out, err = capfd.readouterr()
    text = out + err
    assert "killed" in seen, f"no job was seen training: {text[-3000:]}"
    killed, healthy = seen["killed"], next(n for n in JOBS if n != seen["killed"])
    assert "Traceback" not in text and "TerminatedWorkerError" not in text, text[-3000:]
    assert code == 1, text[-3000:]  # a job did not complete

    done = json.loads((sweep / healthy / "summary.json").read_text())
    assert done["status"] == "completed" and done["started_at"] < seen["at"] < done["ended_at"], done
    record = json.loads((sweep / killed / "summary.json").read_text())
    assert record["status"] == "failed", record
    assert "killed by SIGKILL (signal 9)" in record["message"] and "out of memory" in record["message"], record

    report = (sweep / "comparison.md").read_text()
    assert killed in report and "killed by SIGKILL" in report, report
    assert f"job {killed}: failed: killed by SIGKILL (signal 9)" in text, text[-3000:]
    assert "Continue the sweep with:\n  python -m llm.train -m " in text and f"hydra.sweep.dir={sweep}" in text
    assert "train.resume=auto" in text


def test_a_killed_job_s_record_says_how_the_sweep_goes_on(tmp_path):
    """The record a killed job gets: in a dir it never wrote, that continuing the sweep starts it; after a
    checkpoint, which one the continued sweep resumes; a completed run's own record (a finished job a continued sweep
    reopened) stays as it is; a summary the job left cut short is replaced."""
    from omegaconf import OmegaConf

    from llm.launcher import how_it_died, record_killed_job

    what, cause = how_it_died(RuntimeError("The exit codes of the workers are {SIGKILL(-9)}"))
    assert what == "killed by SIGKILL (signal 9)" and "out-of-memory killer" in cause
    cfg = OmegaConf.create({"seed": 0, "rope": {"name": "torch"}})
    started = time.time()
    fresh = tmp_path / "0_torch_s0"
    assert record_killed_job(cfg, fresh, what, cause, started).endswith("before its first step" + cause +
                                                                        "; continuing the sweep starts it")
    assert json.loads((fresh / "summary.json").read_text())["status"] == "failed"
    trained = tmp_path / "1_torch_s1"
    (trained / "checkpoints").mkdir(parents=True)
    (trained / "checkpoints" / "step_0000004.pt").write_bytes(b"")
    (trained / "metrics.jsonl").write_text('{"kind": "train", "step": 4}\n{"kind": "train", "step": 6}\n')
    message = record_killed_job(cfg, trained, what, cause, started)
    assert message.startswith("killed by SIGKILL (signal 9) at step 6") and message.endswith("step_0000004.pt")
    assert json.loads((trained / "summary.json").read_text())["step"] == 6
    done = tmp_path / "2_torch_s2"
    done.mkdir()
    (done / "summary.json").write_text('{"status": "completed"}')
    os.utime(done / "summary.json", (started - 60, started - 60))
    assert "(completed), which stands" in record_killed_job(cfg, done, what, cause, started)
    assert json.loads((done / "summary.json").read_text()) == {"status": "completed"}
    cut = tmp_path / "3_torch_s3"  # killed while it wrote its summary: the record replaces what it left
    cut.mkdir()
    (cut / "summary.json").write_text('{"status": "compl')
    assert "before its first step" in record_killed_job(cfg, cut, what, cause, started)
    assert json.loads((cut / "summary.json").read_text())["status"] == "failed"


def test_the_sweep_s_workers_are_shut_down_side_by_side():
    """At a sweep's end every worker is shut down at once: each shutdown waits for its process to exit (an
    interpreter holding torch and a GPU's context), so one after another the sweep would wait for their sum. The
    fakes meet at a barrier only if all are in their shutdown together; an error in one leaves the others shut
    down, and a sweep stopped early kills its workers instead of waiting."""
    from llm.launcher import _shut_down

    class Worker:
        def __init__(self, barrier: threading.Barrier, fails: bool = False) -> None:
            self.barrier, self.fails, self.calls = barrier, fails, []

        def shutdown(self, wait: bool, kill_workers: bool) -> None:
            self.calls.append((wait, kill_workers))
            self.barrier.wait(timeout=10)
            if self.fails:
                raise OSError("a worker that would not go")

    barrier = threading.Barrier(3)
    workers = [Worker(barrier), Worker(barrier, fails=True), Worker(barrier)]
    with contextlib.suppress(OSError):
        _shut_down(workers, wait=True)
    assert [w.calls for w in workers] == [[(True, False)]] * 3 and not barrier.broken
    pair = threading.Barrier(2)
    killed = [Worker(pair), Worker(pair)]
    _shut_down(killed, wait=False)
    assert [w.calls for w in killed] == [[(False, True)]] * 2
