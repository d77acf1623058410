"""A Ctrl-C or SIGTERM while a command still starts (Hydra importing, torch importing, Hydra composing the config,
a run claiming its dir) ends it with one line and exit 128 + the signal: no traceback, and never ignored.

Each case is the real command in a process of its own, sent the real signal by itself at a fixed point of its start:
an audit hook (``sys.addaudithook``) sends it when the command first imports a module or opens a file, so the
point does not depend on how fast the machine is.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from helpers import ROOT

#: Runs ``python -m <module> <args>`` in this process after a hook that signals the process once, at the first
#: ``import`` of a module named exactly so, or the first ``open`` of a path ending so.
SIGNALLING_RUN = """
import os, runpy, signal, sys
module, event, target, signame, *args = sys.argv[1:]
signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal starts it (a background job ignores Ctrl-C)
sent = []
def hook(name, hook_args):
    if sent or name != event or not isinstance(hook_args[0], str):
        return
    if hook_args[0] == target if event == "import" else hook_args[0].endswith(target):
        sent.append(True)
        os.kill(os.getpid(), getattr(signal, signame))
sys.addaudithook(hook)
sys.argv = [module, *args]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""

#: Where a start is cut: Hydra's own import, numpy's import inside torch's C init (which drops what it raises),
#: Hydra opening the primary config, and (llm.train) the run's key check, its dir claimed (it reads every model option).
POINTS = {"hydra": ("import", "hydra"), "numpy": ("import", "numpy"), "compose": ("open", "conf/{config}.yaml"),
          "check": ("open", "conf/model/gpt2_small.yaml")}
COMMANDS = {
    "llm.train": ("config", "before training began: no step was trained",
                  ["model=tiny", "train.max_steps=2", "logger=none", "data.max_files=20"]),
    "llm.eval_lengths": ("eval_lengths", "before the first length finished: nothing was written", ["device=cpu"]),
    "llm.generate": ("generate", "before decoding began: nothing was generated", ["prompt=x", "device=cpu"]),
}
CASES = [(m, p, s) for m in COMMANDS for p in POINTS if p != "check" or m == "llm.train"
         for s in ("SIGINT", "SIGTERM")]


@pytest.mark.parametrize("module,point,signame", CASES, ids=[f"{m[4:]}-{p}-{s}" for m, p, s in CASES])
def test_a_stop_while_the_command_starts_is_one_line(tmp_path, module, point, signame):
    config, what, args = COMMANDS[module]
    event, target = POINTS[point]
    run_dir = tmp_path / "run"
    if module != "llm.train":
        args = [*args, f"run={tmp_path / 'no_run'}"]  # a stop before the run is read: it need not exist
    cmd = [sys.executable, "-c", SIGNALLING_RUN, module, event, target.format(config=config), signame, *args,
           f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    word = "Interrupted" if signame == "SIGINT" else "Stopped by SIGTERM"
    assert proc.returncode == 128 + getattr(signal, signame), (proc.returncode, proc.stderr[-3000:])
    assert lines == [f"{word} {what}"], proc.stderr[-3000:]
    if point == "check":
        assert not run_dir.exists(), "a new run stopped before its first step leaves no dir, as a refused one"


@pytest.mark.parametrize("point,signame", [("hydra", "SIGINT"), ("check", "SIGTERM")])
def test_a_resume_stopped_while_it_starts_says_its_run_is_as_it_was(tmp_path, point, signame):
    """A resume's run has trained steps: "no step was trained" read as if they were lost. Said as soon as the
    command starts (before Hydra has read the arguments) and once its config is composed."""
    config, _, args = COMMANDS["llm.train"]
    event, target = POINTS[point]
    cmd = [sys.executable, "-c", SIGNALLING_RUN, "llm.train", event, target.format(config=config), signame, *args,
           "train.resume=auto", f"hydra.run.dir={tmp_path / 'run'}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    word = "Interrupted" if signame == "SIGINT" else "Stopped by SIGTERM"
    assert proc.returncode == 128 + getattr(signal, signame), (proc.returncode, proc.stderr[-3000:])
    assert [ln for ln in proc.stderr.splitlines() if ln.strip()] == [
        f"{word} before this command trained a step: the run and its checkpoints are as they were"], proc.stderr[-3000:]


def test_a_command_started_ignoring_ctrl_c_keeps_ignoring_it(tmp_path):
    """A shell's background job (``cmd &``) starts ignoring Ctrl-C; the start's guard must not take it back, so the
    Ctrl-C sent while Hydra imports is ignored and the command goes on to its own end (here: its refusal)."""
    ignoring = SIGNALLING_RUN.replace("signal.default_int_handler)", "signal.SIG_IGN)")
    assert ignoring != SIGNALLING_RUN
    cmd = [sys.executable, "-c", ignoring, "llm.generate", "import", "hydra", "SIGINT", "prompt=x", "device=cpu",
           f"run={tmp_path / 'no_run'}", f"hydra.run.dir={tmp_path / 'run'}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "no_run is not a directory" in proc.stderr


def test_a_command_that_never_started_leaves_no_stale_handler_for_the_next():
    """Two commands in one process (tests, an app that calls the entry points): the first ended before started()
    (refused while composing), the second's started() put back the handler from before the first, SIG_DFL, not
    the one its caller had set since; a SIGTERM then ended the process without a word."""
    from llm import entry

    def own(signum, frame):
        pass

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        entry.stop_quietly_while_starting("first")  # never started
        signal.signal(signal.SIGTERM, own)  # the caller's own, set after the first command ended
        entry.stop_quietly_while_starting("second")
        entry.stop_quietly_while_starting("second")  # called twice before started(): still the caller's
        entry.started()
        assert signal.getsignal(signal.SIGTERM) is own
    finally:
        entry._STARTING.clear()
        entry._BEFORE.clear()
        for s, h in before.items():
            signal.signal(s, h)
