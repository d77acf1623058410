"""Fault injection: kill, truncate, corrupt and fill the disk, and check nothing already written is lost.

Each test reproduces one defect found by attacking the application as a user would (issue 11) and
fails on the code before its fix.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import (
    ROOT,
    SMALL,
    compose_cfg,
    read_metrics,
    read_wandb_run,
    run_command_inprocess,
    run_inprocess,
    train_losses,
)

from llm.errors import ConfigError, ResumeError
from llm.training.run import run_training
from llm.training.run_dir import RunDirLock

#: A run long enough to stop, checkpoint and resume between two evals, and no longer: training steps are most of
#: this file's time.
STEPS = ["train.max_steps=6", "train.eval_every=3", "train.log_every=1"]
#: A run of two steps stopped after the first, for the tests that run it as a command twice (stop, resume).
SHORT = ["train.max_steps=2", "train.eval_every=2", "train.log_every=1", "train.stop_at_step=1"]


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_resume_auto_without_a_checkpoint_refuses_instead_of_restarting(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "llm.train", *SMALL, "train.max_steps=100000", "train.log_every=1",
                             f"hydra.run.dir={run}"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and not ((run / "metrics.jsonl").exists()
                                          and (run / "metrics.jsonl").read_text().count("\n") >= 1):
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)  # kill -9 once a step is logged: no checkpoint was written
    proc.wait(timeout=60)
    before = (run / "metrics.jsonl").read_text()
    with pytest.raises(ResumeError, match="no checkpoint in .*checkpoints to resume from.*in another hydra.run.dir"):
        run_inprocess(run, ["train.max_steps=100000", "train.log_every=1", "train.resume=auto"])
    assert (run / "metrics.jsonl").read_text() == before, "a refused resume must not touch the metrics"
    with pytest.raises(ResumeError, match=r"there is no run in .*nowhere to resume \(no step logged"):
        run_inprocess(tmp_path / "nowhere", ["train.resume=auto"])  # not "stopped before its first checkpoint"


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> tuple[Path, dict]:
    """An uninterrupted run of STEPS (its dir and summary), which the torn-line resume test compares with; only
    read."""
    run = tmp_path_factory.mktemp("faults") / "whole"
    return run, run_inprocess(run, STEPS)


def test_train_time_and_tokens_add_up_across_a_resume(tmp_path):
    first = run_inprocess(tmp_path / "split", [*STEPS, "train.stop_at_step=2"])
    second = run_inprocess(tmp_path / "split", [*STEPS, "train.resume=auto"])
    assert second["train_time_s"] > first["train_time_s"] > 0
    tokens_per_step = first["tokens_per_step"]
    assert tokens_per_step == 4 * 32  # SMALL's train.batch_size x model.seq_len
    # the totals cover all 6 steps: tokens/s is total tokens over total time, not the last segment's
    assert second["tokens_per_s"] == pytest.approx(6 * tokens_per_step / second["train_time_s"])
    assert second["wall_time_s"] > second["train_time_s"]
    ckpt = torch.load(tmp_path / "split" / "checkpoints" / "last.pt", weights_only=False)
    assert ckpt["totals"]["timed_tokens"] == 6 * tokens_per_step


@pytest.mark.parametrize("when", ["last step", "final eval"])
def test_a_signal_at_the_end_checkpoints_and_stops_as_mid_run(tmp_path, monkeypatch, whole, when):
    """A Ctrl-C during the last step or the final eval was ignored: the run went on to complete (a sweep started its
    next jobs), and a second Ctrl-C during the final eval aborted a run that had saved no checkpoint (ckpt_every=0).
    It now stops as mid-run: the final step checkpointed, status interrupted, exit 130; the resume completes with
    the uninterrupted run's val loss."""
    from llm.training import trainer as trainer_module

    train_step, run_eval = trainer_module.Trainer.train_step, trainer_module.Trainer.run_eval

    def step_then_signal(self):  # the signal handler's flag, as a Ctrl-C during that part sets it
        out = train_step(self)
        if when == "last step" and self.step == self.tc.max_steps:
            self.stopper.signum = signal.SIGINT
        return out

    def eval_then_signal(self, *args, **kwargs):
        out = run_eval(self, *args, **kwargs)
        if when == "final eval" and self.step == self.tc.max_steps:
            self.stopper.signum = signal.SIGINT
        return out

    monkeypatch.setattr(trainer_module.Trainer, "train_step", step_then_signal)
    monkeypatch.setattr(trainer_module.Trainer, "run_eval", eval_then_signal)
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as stopped:
        run_inprocess(run, STEPS)
    assert stopped.value.code == 128 + signal.SIGINT
    assert _summary(run)["status"] == "interrupted" and _summary(run)["step"] == 6
    assert torch.load(run / "checkpoints" / "last.pt", weights_only=False)["step"] == 6
    monkeypatch.undo()
    resumed = run_inprocess(run, [*STEPS, "train.resume=auto"])
    assert resumed["status"] == "completed" and resumed["val_loss"] == whole[1]["val_loss"]


def test_a_resume_at_or_past_stop_at_step_trains_no_step(tmp_path):
    """Stopped at step 3, resumed with train.stop_at_step=2: it stops at step 3 again without training step 4."""
    run = tmp_path / "run"
    run_inprocess(run, [*STEPS, "train.stop_at_step=3"])
    again = run_inprocess(run, [*STEPS, "train.resume=auto", "train.stop_at_step=2"])
    assert again["status"] == "interrupted" and again["step"] == 3
    before = (run / "summary.json").read_text(), (run / "config.yaml").read_text()
    with pytest.raises(ResumeError, match=r"resume cannot change train.max_steps \(saved 6, asked 2\)"):
        run_inprocess(run, [*STEPS, "train.resume=auto", "train.max_steps=2"])  # its record would have said 2
    assert ((run / "summary.json").read_text(), (run / "config.yaml").read_text()) == before


def test_resume_continues_the_saved_config_and_refuses_a_different_model(tmp_path):
    run = tmp_path / "run"
    run_inprocess(run, [*STEPS, "train.max_steps=4", "model.n_layer=2", "optim.lr=0.002", "train.stop_at_step=2"])
    config_before = (run / "config.yaml").read_text()
    with pytest.raises(ResumeError, match=r"resume cannot change model.n_layer \(saved 2, asked 3\)") as refused:
        run_inprocess(run, ["train.resume=auto", "model.n_layer=3"])
    may_change = str(refused.value).split("keys a resume may change: ")[1]  # every key a resume takes, listed
    assert "train.stop_at_step" in may_change and "device" in may_change and "train.resume," not in may_change
    assert (run / "config.yaml").read_text() == config_before, "config.yaml is rewritten only after a resume worked"
    # more steps would stretch the learning rate's cosine: neither this run nor a fresh one of 5 steps
    with pytest.raises(ResumeError, match=r"train.max_steps \(saved 4, asked 5\).*train.stop_at_step=N stops"):
        run_inprocess(run, ["train.resume=auto", "train.max_steps=5"])
    # no original overrides on the resume line (the documented form): the saved run's config is used;
    # a safe change (another log interval) is applied
    summary = run_inprocess(run, ["train.resume=auto", "train.log_every=2"])
    assert summary["status"] == "completed" and summary["step"] == 4
    resolved = (run / "config.yaml").read_text()
    assert "n_layer: 2" in resolved and "lr: 0.002" in resolved and "max_steps: 4" in resolved
    assert "log_every: 2" in resolved
    assert "stop_at_step: null" in resolved, "stop_at_step belongs to one invocation, not to the run"
    assert [m["step"] for m in read_metrics(run) if m["kind"] == "train"] == [1, 2, 4]


def test_printed_resume_command_runs_to_the_end(tmp_path, capsys):
    """The command a stopped run prints continues it to the end. Both commands run through the entry point in this
    process (``run_command_inprocess``): the printed one with exactly its overrides."""
    run = tmp_path / "run"
    assert run_command_inprocess([*SHORT, f"hydra.run.dir={run}"], multirun=False) == 0
    out = "".join(capsys.readouterr())
    hint = out.split("Resume with:")[1].strip().splitlines()[0]
    assert "stop_at_step" not in hint and f"hydra.run.dir={run}" in hint
    args = shlex.split(hint)
    assert args[:3] == ["python", "-m", "llm.train"] and "-m" not in args[3:], hint
    assert run_command_inprocess(args[3:], small=False, multirun=False) == 0, "".join(capsys.readouterr())
    assert _summary(run)["status"] == "completed" and _summary(run)["step"] == 2
    # the run's own logger (SMALL's logger=none), not the resume command's default wandb: no tracker run
    # holding only the steps after the resume
    assert not (run / "wandb").exists() and "name: none" in (run / "config.yaml").read_text()


@pytest.mark.parametrize("saved_logger,asked,expected", [
    (["logger=none"], [], {"name": "none"}),
    (["logger.wandb.mode=online", "logger.wandb.project=p"], [], {"name": "wandb", "mode": "online", "project": "p"}),
    (["logger=none"], ["logger=wandb"], {"name": "wandb", "mode": "offline"}),
    (["logger.wandb.mode=online"], ["logger.wandb.mode=disabled"], {"name": "wandb", "mode": "disabled"}),
])
def test_a_resume_keeps_the_run_s_logger_unless_the_command_names_one(saved_logger, asked, expected):
    """The printed resume command names no logger: the run's own carries on (a resume may still switch it)."""
    from helpers import compose_cfg
    from omegaconf import OmegaConf

    from llm.training.resume import reconcile_resume_config

    saved = OmegaConf.to_container(compose_cfg(saved_logger, small=False), resolve=True)
    asked = ["train.resume=auto", *asked]
    logger = reconcile_resume_config(saved, compose_cfg(asked, small=False), asked).logger
    got = {"name": logger.name, **{k: logger.wandb[k] for k in expected if k != "name"}}
    assert got == expected


@pytest.mark.parametrize("asked,why", [
    (["train.eval_batches=3"], "train.eval_batches (saved 1, asked 3): that would measure the run's val metrics on "
                               "other batches than before; start"),
    (["train.eval_batches=3", "seed=5"], "seed (saved 0, asked 5): that would train a different model; nor "
                                         "train.eval_batches (saved 1, asked 3): that would measure"),
])
def test_a_refused_resume_says_why_for_the_keys_it_names(asked, why):
    """An eval setting changes what the val metrics are measured on, not the model: the refusal says so, where it
    said every refused key would train a different model."""
    from helpers import compose_cfg
    from omegaconf import OmegaConf

    from llm.training.resume import reconcile_resume_config

    saved = OmegaConf.to_container(compose_cfg([]), resolve=True)
    asked = ["train.resume=auto", *asked]
    with pytest.raises(ResumeError, match="resume cannot change ") as refused:
        reconcile_resume_config(saved, compose_cfg(asked), asked)
    assert f"resume cannot change {why}" in str(refused.value)


def test_a_resumed_sweep_job_stays_in_its_sweep_s_tracker_group(tmp_path, capsys, monkeypatch):
    """The printed resume command runs a sweep's job as a single run, which cannot derive the sweep's group
    (its name and dir): the group saved in the checkpoint is kept, so both segments of the job's tracker run
    are in its sweep's group, not the resume command's default. Both commands run in this process."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    sweep = tmp_path / "sweep"
    assert run_command_inprocess([*SHORT, "logger=wandb", "sweep.name=qq", f"hydra.sweep.dir={sweep}"]) == 1, \
        "a sweep whose job stopped early ends 1"
    job = sweep / "0_torch_s0"
    assert torch.load(job / "checkpoints" / "last.pt", weights_only=False)["wandb_group"] == "qq-sweep"
    capsys.readouterr()
    assert run_command_inprocess([f"hydra.run.dir={job}", "train.resume=auto"], small=False, multirun=False) == 0
    out = "".join(capsys.readouterr())
    assert f"rewrite the sweep's comparison with:\n  python -m scripts.compare {sweep}\n" in out
    logs = sorted(job.glob("wandb/offline-run-*/*.wandb"))
    assert len(logs) == 2 and len({p.parent.name.rsplit("-", 1)[1] for p in logs}) == 1, logs  # one run id
    assert [read_wandb_run(p)["group"] for p in logs] == ["qq-sweep", "qq-sweep"]


@pytest.mark.parametrize("state,overrides,expected", [
    ({"wandb_group": "qq-sweep"}, ["train.resume=auto"], "qq-sweep"),
    ({"wandb_group": "qq-sweep"}, ["train.resume=auto", "sweep.name=other"], "asked"),
    ({}, ["train.resume=auto"], "asked"),  # a checkpoint older than the saved group
])
def test_a_resume_keeps_the_saved_group_unless_the_sweep_is_named(state, overrides, expected):
    from llm.training.resume import resumed_group

    assert resumed_group(state, "asked", overrides) == expected


def test_resuming_a_finished_run_logs_no_step_twice(tmp_path, monkeypatch):
    """A run resumed at its end (a sweep continued with train.resume=auto resumes its finished jobs too)
    takes the final eval from its checkpoint: no second val line at the last step, no eval at all."""
    import llm.training.trainer as trainer

    run = tmp_path / "run"
    done = run_inprocess(run, STEPS)
    before = (run / "metrics.jsonl").read_text()
    monkeypatch.setattr(trainer, "evaluate", lambda *a, **k: pytest.fail("a finished run was evaluated again"))
    again = run_inprocess(run, ["train.resume=auto"])
    assert (run / "metrics.jsonl").read_text() == before
    assert again["status"] == "completed" and again["step"] == 6
    assert (again["val_loss"], again["val_acc"]) == (done["val_loss"], done["val_acc"])


def test_damaged_newest_checkpoint_falls_back_to_an_older_one(tmp_path, caplog):
    run = tmp_path / "run"
    run_inprocess(run, [*STEPS, "train.ckpt_every=2", "train.stop_at_step=4"])
    newest = run / "checkpoints" / "step_0000004.pt"
    newest.write_bytes(newest.read_bytes()[:1000])  # truncated, as by a crash mid-copy
    summary = run_inprocess(run, [*STEPS, "train.ckpt_every=2", "train.resume=auto"])
    assert summary["status"] == "completed" and summary["step"] == 6
    assert f"checkpoint {newest} is damaged" in caplog.text and "step_0000002.pt" in caplog.text
    assert [m["step"] for m in read_metrics(run) if m["kind"] == "train"] == list(range(1, 7))


def test_a_refused_resume_keeps_its_damaged_checkpoint_notes_out_of_the_run_s_log(tmp_path, capsys):
    """A refused resume writes nothing in the run dir: the notes of the damaged checkpoints it skipped go to the
    terminal only (train.log ended in "trying an older checkpoint" without the refusal); an accepted one logs them."""
    run = tmp_path / "run"
    args = [*STEPS, "train.ckpt_every=2", f"hydra.run.dir={run}"]
    assert run_command_inprocess([*args, "train.stop_at_step=4"], multirun=False) == 0
    newest = run / "checkpoints" / "step_0000004.pt"
    newest.write_bytes(newest.read_bytes()[:1000])
    log_before = (run / "train.log").read_text()
    capsys.readouterr()
    assert run_command_inprocess([*args, "train.resume=auto", "seed=1"], multirun=False) == 2
    out = capsys.readouterr()
    assert (run / "train.log").read_text() == log_before
    assert f"checkpoint {newest} is damaged" in out.out + out.err and "seed" in out.err
    assert run_command_inprocess([*args, "train.resume=auto"], multirun=False) == 0
    assert f"checkpoint {newest} is damaged" in (run / "train.log").read_text()


def test_every_checkpoint_damaged_is_one_clear_error(tmp_path):
    run = tmp_path / "run"
    run_inprocess(run, [*STEPS, "train.stop_at_step=2"])
    for p in (run / "checkpoints").glob("step_*.pt"):
        p.write_bytes(b"garbage")
    with pytest.raises(ResumeError, match="every checkpoint in .* is damaged"):
        run_inprocess(run, [*STEPS, "train.resume=auto"])
    with pytest.raises(ResumeError, match=r"checkpoint .*step_0000002.pt is damaged"):
        run_inprocess(run, [*STEPS, f"train.resume={run / 'checkpoints' / 'step_0000002.pt'}"])


def test_torn_last_metrics_line_is_dropped_on_resume(tmp_path, caplog, whole):
    run = tmp_path / "run"
    run_inprocess(run, [*STEPS, "train.stop_at_step=3"])
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "step": 4, "lo')  # a crash mid-write
    run_inprocess(run, [*STEPS, "train.resume=auto"])
    assert "dropped 1 unreadable line" in caplog.text
    assert train_losses(run) == train_losses(whole[0])


@pytest.fixture
def tiny_disk(tmp_path):
    """A 6 MiB tmpfs (root only); without mount rights, a torch.save that fails as a full disk does."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)],
                             capture_output=True).returncode == 0
    yield mnt, mounted
    if mounted:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_full_disk_names_the_file_removes_temporaries_and_keeps_metrics(tmp_path, tiny_disk, monkeypatch, caplog):
    mnt, mounted = tiny_disk
    if not mounted:  # fall back to a writer that fails the way torch.save does on a full disk
        import llm.training.checkpoint as ckpt

        def full_save(obj, f, *a, **k):
            Path(f).write_bytes(b"x" * 1000)
            err = OSError(28, "No space left on device")
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos") from err

        monkeypatch.setattr(ckpt.torch, "save", full_save)
    run = mnt / "run"
    with pytest.raises(SystemExit) as exc:
        # a checkpoint (~40 MB with cl100k's embedding) cannot fit
        run_inprocess(run, [*STEPS, "train.ckpt_every=2", "tokenizer=cl100k_base"])
    assert exc.value.code == 1
    ckpt_file = run / "checkpoints" / "step_0000002.pt"
    assert f"no space left on device writing {ckpt_file}" in caplog.text
    assert not [p for p in (run / "checkpoints").iterdir() if ".tmp" in p.name], "temporaries must be removed"
    steps = [m["step"] for m in read_metrics(run) if m["kind"] == "train"]
    assert steps == [1, 2], "metrics written before the failure are kept"
    summary = _summary(run)
    assert summary["status"] == "failed" and "no space left on device" in summary["message"]


def test_a_checkpoint_that_fills_the_disk_gives_its_space_back_at_once(tiny_disk):
    """The failed save's temporary is removed and its blocks freed while its exception is still being handled,
    so the run can still write its summary. Through a path, torch's zip writer kept the removed file open for as
    long as the exception lived (a GPU run's summary.json failed on this tmpfs); now the save writes through a
    file object it closes."""
    import shutil

    from llm.fileio import DiskFullError
    from llm.training.checkpoint import TrainTotals, save_checkpoint

    mnt, mounted = tiny_disk
    if not mounted:
        pytest.skip("needs a tmpfs of its own (mount rights)")
    model = torch.nn.Linear(1000, 2000)  # 8 MB of weights on a 6 MiB disk
    with pytest.raises(DiskFullError) as failed:
        save_checkpoint(mnt / "checkpoints", 2, model, [], TrainTotals(), {})
    assert failed.value.__context__ is not None or failed.value.__cause__ is not None  # alive, with its traceback
    assert shutil.disk_usage(mnt).used < 2**20 and not list((mnt / "checkpoints").iterdir())


def test_second_ctrl_c_during_a_save_leaves_no_temporary(tmp_path, monkeypatch):
    import llm.training.checkpoint as ckpt

    real_save = torch.save

    def interrupted_save(obj, f, *a, **k):
        real_save(obj, f, *a, **k)
        raise KeyboardInterrupt  # the second Ctrl-C lands while the file is being written

    run = tmp_path / "run"
    monkeypatch.setattr(ckpt.torch, "save", interrupted_save)
    with pytest.raises(KeyboardInterrupt):
        run_inprocess(run, [*STEPS, "train.ckpt_every=2"])
    assert not [p for p in (run / "checkpoints").iterdir() if ".tmp" in p.name]
    assert _summary(run)["status"] == "aborted" and _summary(run)["step"] == 2
    # a temporary a kill -9 left behind is removed by the next start
    monkeypatch.setattr(ckpt.torch, "save", real_save)
    other = tmp_path / "other"
    run_inprocess(other, [*STEPS, "train.stop_at_step=2"])
    stale = other / "checkpoints" / "step_0000008.pt.tmp999"
    stale.write_bytes(b"half a checkpoint")
    run_inprocess(other, [*STEPS, "train.resume=auto"])
    assert not stale.exists()


def test_a_real_second_ctrl_c_during_the_stop_checkpoint_is_the_abort(tmp_path):
    """Ctrl-C, then Ctrl-C again while the stop checkpoint is being written: the run aborts as docs/usage.md says (one
    line, exit 130, no traceback), not as a crash (``status: failed`` and torch's "unexpected pos" RuntimeError,
    which the writer raises once the interrupt cut a write it called back short). The child's torch.save writes
    through a file that waits in its third write, so the second signal, a real one, lands inside torch's zip
    writer; the marker says it is waiting."""
    run, marker = tmp_path / "run", tmp_path / "saving"
    code = ("import runpy, sys, time\n"
            "import torch\n"
            "real_save = torch.save\n"
            "class SlowFile:\n"  # waits in its third write (a record's, as most are) for the second Ctrl-C
            "    def __init__(self, f): self.f, self.writes = f, 0\n"
            "    def write(self, b):\n"
            "        written, self.writes = self.f.write(b), self.writes + 1\n"
            "        if self.writes == 3:\n"
            f"            open({str(marker)!r}, 'a').close()\n"
            "            time.sleep(60)\n"
            "        return written\n"
            "    def __getattr__(self, name): return getattr(self.f, name)\n"
            "torch.save = lambda obj, f, *a, **k: real_save(obj, SlowFile(f), *a, **k)\n"
            f"sys.argv = ['llm.train', *{SMALL!r}, 'train.max_steps=100000', 'train.log_every=1', "
            f"'hydra.run.dir={run}']\n"
            "runpy.run_module('llm.train', run_name='__main__')\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    metrics = run / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)  # finish the step, then checkpoint
    while time.time() < deadline and not marker.exists() and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)  # again, while the checkpoint is being written
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out[-3000:]
    assert "Traceback" not in out and "RuntimeError" not in out, out[-3000:]
    assert "Aborted by a second Ctrl-C" in out, out[-3000:]
    summary = _summary(run)  # the abort's record, not a crash's ("failed") nor a stop's ("interrupted")
    assert summary["status"] == "aborted" and summary["message"].startswith("aborted by a second Ctrl-C"), summary
    assert summary["step"] == max(m["step"] for m in read_metrics(run) if m["kind"] == "train")
    assert not [p for p in (run / "checkpoints").iterdir() if ".tmp" in p.name], "the cut save leaves no temporary"
    assert [m["step"] for m in read_metrics(run) if m["kind"] == "train"][:2] == [1, 2], "metrics written are kept"


def test_nonfinite_stop_before_any_checkpoint_names_no_missing_dir(tmp_path, monkeypatch):
    from llm.model import GPT

    original = GPT.forward

    def forward(self, idx, targets=None):
        logits, loss = original(self, idx, targets)
        return logits, (loss * float("nan") if self.training else loss)

    monkeypatch.setattr(GPT, "forward", forward)
    with pytest.raises(SystemExit):
        run_inprocess(tmp_path, STEPS)
    message = _summary(tmp_path)["message"]
    assert "no checkpoint was saved" in message and "kept in" not in message
    assert not (tmp_path / "checkpoints").exists()


def test_a_single_run_that_crashes_before_its_first_step_records_it(tmp_path, monkeypatch):
    """A crash while the model is built (a bug, not a user error: its traceback is kept) leaves the run dir with a
    summary saying so, as a sweep job's does, so a report lists it as failed with the reason, not as a dir that
    died without a word."""
    from llm.training import trainer

    def broken(*args, **kwargs):
        raise RuntimeError("model build broke")

    monkeypatch.setattr(trainer, "build_model", broken)
    with pytest.raises(RuntimeError, match="model build broke"):
        run_inprocess(tmp_path, STEPS)
    summary = _summary(tmp_path)
    assert summary["status"] == "failed" and summary["message"] == "RuntimeError: model build broke", summary


def test_redirected_log_gets_one_progress_line_per_interval(tmp_path, capsys):
    """The command through the entry point in this process, its output captured (no terminal, as in a log file)."""
    assert not sys.stderr.isatty() and not sys.stdout.isatty()
    code = run_command_inprocess(["train.max_steps=4", "train.log_every=2", "train.eval_every=4",
                                  f"hydra.run.dir={tmp_path / 'run'}"], multirun=False)
    text = "".join(capsys.readouterr())
    assert code == 0, text[-2000:]
    assert "\r" not in text, "no carriage-return progress updates in a file"
    progress = [ln for ln in text.splitlines() if "tok/s" in ln and "eta" in ln]
    assert len(progress) == 2, progress  # steps 2 and 4
    assert all(" - step " in ln for ln in progress), progress  # a single run's lines name no job


def test_an_eval_smaller_than_asked_says_so_once(tmp_path, capsys):
    """A val split holding fewer windows than train.eval_batches x train.batch_size: the eval uses what there is and
    the log says how much, once (only val_tokens showed it)."""
    corpus = tmp_path / "corpus"  # a val split of a few dozen windows: a full pass over it takes no time
    corpus.mkdir()
    for i in range(30):
        (corpus / f"{i:02d}.txt").write_text(" ".join(f"word{(i * j) % 97}" for j in range(120)))
    code = run_command_inprocess(["data=text_files", f"data.path={corpus}", "data.val_fraction=0.3",
                                  "train.max_steps=4", "train.eval_every=2", "train.eval_batches=1000",
                                  f"hydra.run.dir={tmp_path / 'run'}"], multirun=False)
    text = "".join(capsys.readouterr())
    assert code == 0, text[-2000:]
    assert text.count(" asked (train.eval_batches x train.batch_size): the val split holds no more") == 1, text


def test_a_sweep_jobs_progress_lines_name_the_job(tmp_path, capsys):
    """Jobs side by side share one console: each progress line starts with its job's name."""
    sweep = tmp_path / "sweep"
    code = run_command_inprocess(["rope=torch,none", "train.max_steps=2", "train.log_every=2", "train.eval_every=2",
                                  f"hydra.sweep.dir={sweep}"])
    text = "".join(capsys.readouterr())
    assert code == 0, text[-2000:]
    progress = [ln for ln in text.splitlines() if "tok/s" in ln and "eta" in ln]
    assert [ln.split(" - ", 1)[1].split(":")[0] for ln in progress] == ["0_torch_s0", "1_none_s0"], progress
    evals = [ln for ln in text.splitlines() if "val_loss" in ln and "step" in ln and "done:" not in ln]
    assert [ln.split(" - ", 1)[1].split(":")[0] for ln in evals] == ["0_torch_s0", "1_none_s0"], evals


def test_a_val_stream_shorter_than_a_window_stops_before_the_model_is_built(tmp_path, monkeypatch):
    """Two documents, the val one a few tokens long: the run stops with the data error before the model is
    built, where it once trained until its first eval and lost those steps (the stdlib's first 40 files in
    Python 3.12 leave 25 tokens for val)."""
    import llm.training.trainer as trainer
    from llm.data import DataError
    from llm.data.split import val_score

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    short, long = sorted(["a.txt", "b.txt"], key=val_score)  # the lower score is the val document
    (corpus / short).write_text("tiny")
    (corpus / long).write_text("lorem ipsum dolor sit amet " * 200)
    fraction = (val_score(short) + val_score(long)) / 2
    built = []
    monkeypatch.setattr(trainer, "build_model", lambda *a, **k: built.append(1))
    run = tmp_path / "run"
    with pytest.raises(DataError, match=r"^the val stream has \d+ tokens, fewer than seq_len\+1=33; "):
        run_inprocess(run, ["data=text_files", f"data.path={corpus}", f"data.val_fraction={fraction}", *STEPS])
    assert not built and not (run / "metrics.jsonl").exists()


def test_a_sweep_continued_with_its_arguments_in_another_order_trains_nothing_again(tmp_path, capsys):
    """The jobs would be numbered anew: the sweep is refused before any job, naming the first command's order, and
    writes nothing (its multirun.yaml kept). Without that record, each job lands in a new dir and, finding its run
    trained in a sibling dir, is refused with the reason instead of training again from step 0."""
    sweep = tmp_path / "sweep"
    common = ["seed=1", "train.max_steps=1", "train.eval_every=1", f"hydra.sweep.dir={sweep}"]
    assert run_command_inprocess(["rope=torch,none", *common]) == 0
    before = sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    saved = (sweep / "multirun.yaml").read_text()
    capsys.readouterr()
    assert run_command_inprocess(["rope=none,torch", *common, "train.resume=auto"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"Error: this command's arguments are those of the sweep in {sweep} in another order")
    assert " rope=torch,none seed=1 " in line and line.endswith(f"hydra.sweep.dir={sweep} train.resume=auto"), line
    assert "python -m llm.train -m " in line, line  # as printed, it runs as a sweep
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")) == before
    assert (sweep / "multirun.yaml").read_text() == saved
    (sweep / "multirun.yaml").unlink()
    assert run_command_inprocess(["rope=none,torch", *common, "train.resume=auto"]) == 1
    new = [p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in before]
    assert new and all(not (p / "metrics.jsonl").exists() for p in new), new
    messages = [json.loads((p / "summary.json").read_text()).get("message", "") for p in new]
    assert all("trained in" in m and "another order" in m for m in messages), messages


def test_a_sweep_continued_with_other_jobs_is_refused_before_any(tmp_path, capsys):
    """More seeds given to a sweep's own dir would number its jobs anew (each job's dir is its place in the sweep):
    refused in one line before any job, naming the sweep's own command and the way to add seeds, nothing written."""
    sweep = tmp_path / "sweep"
    common = ["rope=none", "train.max_steps=1", "train.eval_every=1", f"hydra.sweep.dir={sweep}"]
    assert run_command_inprocess(["seed=1", *common]) == 0
    before = sorted(p.name for p in sweep.iterdir())
    saved = (sweep / "multirun.yaml").read_text()
    capsys.readouterr()
    assert run_command_inprocess(["seed=1,2", *common, "train.resume=auto"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"Error: this command's jobs are not those of the sweep in {sweep}"), line
    assert "(python -m llm.train -m " in line and " seed=1 rope=none " in line, line
    assert "python -m scripts.compare" in line, line
    assert sorted(p.name for p in sweep.iterdir()) == before and (sweep / "multirun.yaml").read_text() == saved


def _parallel_sweep_training(sweep) -> subprocess.Popen:
    """A sweep of three long jobs on hydra/launcher=gpus (the CPU one device of two slots), in a session of its
    own, returned once its first two jobs have each logged two lines."""
    proc = subprocess.Popen([sys.executable, "-m", "llm.train", "-m", *SMALL, "train.max_steps=100000",
                             "train.log_every=1", "seed=0,1,2", "hydra/launcher=gpus", "sweep.jobs_per_gpu=2",
                             f"hydra.sweep.dir={sweep}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    running = [sweep / "0_torch_s0" / "metrics.jsonl", sweep / "1_torch_s1" / "metrics.jsonl"]
    deadline = time.time() + 300
    while time.time() < deadline and not all(m.is_file() and m.read_text().count("\n") >= 2 for m in running):
        time.sleep(0.1)
    return proc


def test_sigterm_stops_a_sweep_of_parallel_jobs_as_it_stops_a_run(tmp_path):
    """hydra/launcher=gpus, two jobs at once (the CPU is one device of two slots) and a third waiting: a SIGTERM to
    the sweep's process alone reaches the workers, each running job checkpoints and records itself interrupted,
    the waiting one does not start, and the sweep ends with its continue command. (The launcher's own handling
    killed the workers mid-step, with a traceback; a SIGTERM left them training, orphaned.)"""
    sweep = tmp_path / "sweep"
    proc = _parallel_sweep_training(sweep)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]  # a signalled sweep ends as a signalled run does
    for job in ("0_torch_s0", "1_torch_s1"):
        summary = _summary(sweep / job)
        assert summary["status"] == "interrupted" and "(SIGTERM); checkpoint saved" in summary["message"], summary
        assert (sweep / job / "checkpoints" / f"step_{summary['step']:07d}.pt").is_file()
    assert _summary(sweep / "2_torch_s2")["message"].startswith("not started: the sweep was stopped")
    assert "Continue the sweep with:" in out and "Traceback" not in out
    deadline = time.time() + 60  # no worker left behind in the sweep's process group (they exit with the sweep)
    while time.time() < deadline and _group_alive(proc.pid):
        time.sleep(0.1)
    assert not _group_alive(proc.pid)


def test_a_second_ctrl_c_aborts_a_sweep_of_parallel_jobs_as_it_aborts_a_run(tmp_path):
    """Two Ctrl-Cs at the terminal (SIGINT to the whole process group, twice) on hydra/launcher=gpus: the running
    jobs abort at once and record it (status aborted), the waiting one does not start, and the sweep ends with its
    continue command and exit code 130, without a traceback. (The second Ctrl-C raised out of the launcher's wait
    with 17 frames of traceback, and the jobs were torn down without a summary.)"""
    sweep = tmp_path / "sweep"
    proc = _parallel_sweep_training(sweep)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    out = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 130 and "Traceback" not in out, out[-3000:]
    for job in ("0_torch_s0", "1_torch_s1"):
        assert _summary(sweep / job)["status"] in ("aborted", "interrupted"), _summary(sweep / job)
    assert _summary(sweep / "2_torch_s2")["message"].startswith("not started: the sweep was stopped")
    assert "Continue the sweep with:" in out


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_ends_a_sweep_whose_launcher_runs_one_job_at_a_time_in_its_own_process(tmp_path):
    """hydra/launcher=gpus with one slot: joblib runs the jobs in the sweep's process, one after another. The signal
    stops the running job (checkpoint, interrupted) and ends the sweep there, as the basic launcher's does; the next
    job does not start (a job that returned instead let it start and train on). The sweep's comparison is written,
    the job not begun listed, though the process exits before Hydra's end-of-sweep callback would."""
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "llm.train", "-m", *SMALL, "train.max_steps=4,100000,4",
                             "train.log_every=1", "hydra/launcher=gpus", f"hydra.sweep.dir={sweep}"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    while time.time() < deadline and not any(p.read_text().count("\n") >= 2
                                             for p in sweep.glob("1_*/metrics.jsonl")):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    (first,), (second,) = sweep.glob("0_*"), sweep.glob("1_*")
    assert _summary(first)["status"] == "completed" and _summary(second)["status"] == "interrupted"
    assert not list(sweep.glob("2_*")) and "Continue the sweep with:" in out
    comparison = (sweep / "comparison.md").read_text()
    assert second.name in comparison and "not started" in comparison, comparison[-2000:]


def test_an_abort_before_any_checkpoint_says_how_a_sweep_job_starts_over(tmp_path):
    """A sweep job aborted before its first checkpoint cannot be resumed (it logged steps, saved nothing): the line
    says to remove its dir before continuing the sweep, where the continue command alone would refuse it again."""
    from llm.train import aborted_message

    run = tmp_path / "0_torch_s0"
    (run / "checkpoints").mkdir(parents=True)
    assert aborted_message(run, "hint", multirun=True).endswith(
        f"; remove {run} before continuing the sweep, to start this job over")
    assert "remove" not in aborted_message(run, "hint")
    # a SIGTERM outside the trainer's own handling (after fit()) is named as such, not as a second Ctrl-C
    assert aborted_message(run, "hint", cause="SIGTERM").startswith("Aborted by SIGTERM, before the run saved")

def test_a_signal_after_the_run_saved_its_stop_says_nothing_is_lost(tmp_path):
    """torchrun turns a second Ctrl-C into a SIGTERM, which can come after the trainer saved the checkpoint of the
    step it stopped at and recorded the stop: the line then says that checkpoint is there, not that it is missing."""
    from llm.train import aborted_message

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "step_0000040.pt").write_bytes(b"")
    (run / "summary.json").write_text(json.dumps({"status": "interrupted", "step": 40}))
    line = aborted_message(run, "hint", cause="SIGTERM")
    assert line.startswith("SIGTERM came as the run exited: it had ended (interrupted) with the checkpoint of step 40")
    assert "nothing is lost" in line and line.endswith("hint")
    # a run still running at the signal (its record not yet the stop's), or stopped at a step it did not save
    for summary in ({"status": "running", "step": 40}, {"status": "interrupted", "step": 41}):
        (run / "summary.json").write_text(json.dumps(summary))
        assert aborted_message(run, "hint", cause="SIGTERM").startswith("Aborted by SIGTERM: no checkpoint of the step")


@pytest.mark.parametrize("rank", ["0", "1"])
def test_only_rank_0_says_what_an_abort_left(tmp_path, monkeypatch, capsys, rank):
    """Every torchrun rank gets the signal, but only rank 0 writes the run's files: another rank's line would name
    files it never wrote (it said no checkpoint was saved, and named metrics.jsonl in its own working dir)."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    import llm.train as train

    def aborted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "run_training", aborted)
    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("WORLD_SIZE", "2")
    hc = SimpleNamespace(runtime=SimpleNamespace(output_dir=str(tmp_path / "run")),
                         sweep=SimpleNamespace(dir=str(tmp_path)), overrides=SimpleNamespace(task=[]))
    with pytest.raises(SystemExit) as stop:
        train._run(OmegaConf.create({"sweep": {"name": "x"}, "train": {}}), hc, False, {})
    assert stop.value.code == 130
    err = capsys.readouterr().err
    assert ("Aborted by a second Ctrl-C" in err) == (rank == "0"), err


# -- interrupted and resumed runs: summary.json and metrics.jsonl say what happened, a resume never splices two
# runs into one dir, and a refused command leaves a folder it found as it was

#: Two steps: the shortest run that a stop (train.stop_at_step=1) and a resume split in two.
TWO_STEPS = ["train.max_steps=2", "train.eval_every=2", "train.log_every=1"]


@pytest.mark.parametrize("value", ["true", "false", "123"])
def test_a_resume_value_that_is_no_path_is_one_line_naming_the_key(tmp_path, value):
    with pytest.raises(ConfigError, match=f"train.resume={value} must be null .*auto .*path"):
        run_inprocess(tmp_path / "run", ["train.max_steps=2", f"train.resume={value}"])
    assert not (tmp_path / "run").exists(), "a refused new run leaves no dir"


def test_a_finished_run_resumed_keeps_the_record_of_the_code_and_time_that_trained_it(tmp_path, monkeypatch):
    """A sweep continued with train.resume=auto resumes its finished jobs, which end at once: their summary must
    still name the code that trained them and when (the report's "Different code" and "Shared GPU" notes read it)."""
    done = run_inprocess(tmp_path / "done", TWO_STEPS)
    run_inprocess(tmp_path / "split", [*TWO_STEPS, "train.stop_at_step=1"])  # trained by this code up to step 1
    last = tmp_path / "done" / "checkpoints" / "last.pt"
    saved_at = last.resolve().stat().st_mtime_ns
    monkeypatch.setattr("llm.training.trainer.code_version",
                        lambda: {"git_commit": "newer", "code_fingerprint": "newer"})
    again = run_inprocess(tmp_path / "done", [*TWO_STEPS, "train.resume=auto"])
    assert again["status"] == "completed" and again["val_loss"] == done["val_loss"]
    # the times too: those of the summary written after the last checkpoint, not the checkpoint's own, earlier ones
    for key in ("git_commit", "code_fingerprint", "started_at", "host", "torch_threads", "ended_at", "wall_time_s"):
        assert again[key] == done[key], key
    assert last.resolve().stat().st_mtime_ns == saved_at, "nothing new to save: the checkpoint is not rewritten"
    # a resume that trains steps is recorded as the code that trained the newest of them
    assert run_inprocess(tmp_path / "split", [*TWO_STEPS, "train.resume=auto"])["code_fingerprint"] == "newer"


def test_a_checkpoint_of_another_run_is_refused_in_a_dir_holding_a_run(tmp_path):
    """train.resume=<path> into a dir holding another run would cut that run's metrics at the checkpoint's step and
    go on with the other run's config: one dir, two runs, no word of it."""
    run_inprocess(tmp_path / "a", [*TWO_STEPS, "optim.lr=0.002"])
    run_inprocess(tmp_path / "b", [*TWO_STEPS, "train.stop_at_step=1"])
    before = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir() if p.is_file()}
    other = tmp_path / "b" / "checkpoints" / "last.pt"
    with pytest.raises(ResumeError, match=f"train.resume={other} is not a checkpoint of the run in"):
        run_inprocess(tmp_path / "a", [*TWO_STEPS, f"train.resume={other}"])
    assert {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir() if p.is_file()} == before
    # its own checkpoint, named by path, still resumes it; and another run's starts a new dir from it
    own = tmp_path / "b" / "checkpoints" / "step_0000001.pt"
    assert run_inprocess(tmp_path / "b", [*TWO_STEPS, f"train.resume={own}"])["status"] == "completed"
    assert run_inprocess(tmp_path / "branch", [*TWO_STEPS, f"train.resume={own}"])["step"] == 2


def test_a_refused_run_leaves_a_folder_it_found_as_it_was(tmp_path):
    """A refused new run removes only a dir it created: an empty folder the user made for it stays, without the
    lock file the refused run put there."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    with pytest.raises(ConfigError, match="model.n_head"):
        run_inprocess(theirs, ["model.n_head=0"])
    assert theirs.is_dir() and not list(theirs.iterdir())
    lock = RunDirLock(theirs).acquire()
    assert lock.created and not lock.discard_if_unused() and theirs.is_dir() and not list(theirs.iterdir())


def test_a_diverging_run_names_the_value_that_is_not_finite_and_logs_its_last_step(tmp_path, monkeypatch):
    """A loss of 1e12 with an infinite gradient norm was reported as "non-finite loss (1e12)", and the step that
    stopped the run was missing from metrics.jsonl."""
    real, calls = torch.nn.utils.clip_grad_norm_, {"n": 0}

    def clip(params, max_norm, *args, **kwargs):
        calls["n"] += 1
        norm = real(params, max_norm, *args, **kwargs)
        return norm * math.inf if calls["n"] == 2 else norm

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
    with pytest.raises(SystemExit):
        run_inprocess(tmp_path, ["train.max_steps=6", "train.log_every=5"])
    summary = _summary(tmp_path)
    assert summary["status"] == "nonfinite" and summary["message"].startswith("non-finite grad norm (loss ")
    last = [m for m in read_metrics(tmp_path) if m["kind"] == "train"][-1]
    assert last["step"] == 2 and last["grad_norm"] == "inf" and math.isfinite(last["loss"])


def test_a_resumed_run_has_no_summary_of_its_earlier_stop_while_it_trains(tmp_path, monkeypatch):
    """Killed (kill -9) while it trains, a resumed run left the summary of its earlier stop ("interrupted at step 1")
    beside metrics and checkpoints of later steps: the report took that for the run's end."""
    run_inprocess(tmp_path, [*TWO_STEPS, "train.stop_at_step=1"])
    assert _summary(tmp_path)["status"] == "interrupted"
    from llm.training.trainer import Trainer

    seen, step = [], Trainer.train_step

    def train_step(self):
        seen.append((tmp_path / "summary.json").exists())
        return step(self)

    monkeypatch.setattr(Trainer, "train_step", train_step)
    assert run_inprocess(tmp_path, [*TWO_STEPS, "train.resume=auto"])["status"] == "completed"
    assert seen == [False]


def test_a_stop_right_after_a_checkpoint_does_not_save_the_step_twice(tmp_path, monkeypatch):
    """The stop's checkpoint of a step just saved wrote the same file again: for a large model, a second full save
    while torchrun's shutdown timeout runs."""
    import llm.training.trainer as trainer

    saves, save = [], trainer.save_checkpoint

    def counted(ckpt_dir, step, *args, **kwargs):
        saves.append(step)
        return save(ckpt_dir, step, *args, **kwargs)

    monkeypatch.setattr(trainer, "save_checkpoint", counted)
    four = ["train.max_steps=4", "train.ckpt_every=2"]
    summary = run_inprocess(tmp_path, [*four, "train.stop_at_step=2"])
    assert summary["status"] == "interrupted" and saves == [2]
    # a resume from an older checkpoint than the newest, stopped at once, saves it again: it is the newest now
    run_inprocess(tmp_path, [*four, "train.resume=auto"])
    older = tmp_path / "checkpoints" / "step_0000002.pt"
    run_inprocess(tmp_path, [*four, "train.stop_at_step=2", f"train.resume={older}"])
    assert (tmp_path / "checkpoints" / "last.pt").resolve() == older.resolve()


def _corpus(root: Path, seed: int = 0) -> Path:
    """A few text files, enough for train and val windows of the SMALL model."""
    import random

    words = ["alpha", "beta", "gamma", "delta", "the", "cat", "sat", "on", "mat"]
    root.mkdir(exist_ok=True)
    for i in range(6):
        rng = random.Random(seed * 100 + i)
        (root / f"f{i}.txt").write_text(" ".join(rng.choice(words) for _ in range(2000)))
    return root


def test_a_run_of_another_option_than_the_default_resumes_by_the_printed_command(tmp_path):
    """The printed resume command names no group: the default options' keys (data=pystdlib's data.max_files,
    optim=adamw's optim.lr) were added to the run's config, so a data=text_files run could not be resumed at all
    and an optim=muon run went on with a config no run has."""
    corpus = _corpus(tmp_path / "corpus")
    text = ["data=text_files", f"data.path={corpus}", "data.val_fraction=0.2"]
    for run, options in (("text", text), ("muon", ["optim=muon"])):
        run_inprocess(tmp_path / run, [*TWO_STEPS, *options, "train.stop_at_step=1"])
        assert run_inprocess(tmp_path / run, ["train.resume=auto"])["status"] == "completed"
    muon, text = (torch.load(tmp_path / run / "checkpoints" / "last.pt", weights_only=False)["config"]
                  for run in ("muon", "text"))
    assert "lr" not in muon["optim"] and "max_files" not in text["data"]
    assert "wandb" not in muon["logger"], "a logger=none run keeps no wandb settings"


def test_a_resume_on_changed_data_is_refused_naming_it(tmp_path):
    """Same config, other tokens (a file of data.path edited since the stop): the resume went on silently and
    its curve was no longer the run's."""
    corpus = _corpus(tmp_path / "corpus")
    args = [*TWO_STEPS, "data=text_files", f"data.path={corpus}", "data.val_fraction=0.2"]
    run_inprocess(tmp_path / "run", [*args, "train.stop_at_step=1"])
    before = {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir() if p.is_file()}
    kept = (corpus / "f0.txt").read_text()
    (corpus / "f0.txt").write_text("an edited file " * 500)
    resume = ["train.resume=auto"]
    with pytest.raises(ResumeError, match="the data of text_files is not what this run trained on"):
        # with the command's record, as the entry point passes it: a refused resume writes none
        run_training(compose_cfg(resume), tmp_path / "run", resume, command_record={"overrides.yaml": "- x\n"})
    assert {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir() if p.is_file()} == before
    assert not list((tmp_path / "run" / ".hydra").glob("resume_*"))
    (corpus / "f0.txt").write_text(kept)
    assert run_inprocess(tmp_path / "run", ["train.resume=auto"])["status"] == "completed"


def test_the_checkpoint_just_saved_is_never_pruned(tmp_path):
    """A resume from an older checkpoint of the run (train.resume=<its path>, or the fallback past a damaged newest
    one) saves below a newer step file; with train.keep_checkpoints=1 the pruning removed the new file itself and
    left last.pt pointing at nothing."""
    from llm.training.checkpoint import TrainTotals, save_checkpoint

    model = torch.nn.Linear(2, 2)
    ckpt = tmp_path / "checkpoints"
    save_checkpoint(ckpt, 9, model, [], TrainTotals(), {}, keep=2)
    new = save_checkpoint(ckpt, 3, model, [], TrainTotals(), {}, keep=1)
    assert new.exists() and (ckpt / "last.pt").resolve() == new.resolve()
    assert sorted(p.name for p in ckpt.glob("step_*.pt")) == ["step_0000003.pt"]


def test_checkpoints_are_ordered_by_step_past_ten_million_steps(tmp_path):
    """Step files are named with seven digits: by name, step 10,000,000 would sort before 9,999,999, and a resume
    would take the older one (and pruning delete the newer)."""
    from llm.training.checkpoint import checkpoint_files

    for step in (9_999_999, 10_000_000, 123):
        (tmp_path / f"step_{step:07d}.pt").write_bytes(b"")
    assert [p.name for p in checkpoint_files(tmp_path)] == ["step_10000000.pt", "step_9999999.pt", "step_0000123.pt"]


def test_a_gpu_device_on_a_machine_without_one_is_refused_as_typed(monkeypatch):
    """device=cuda:1 where no GPU is visible: the refusal quotes what was typed (it said device=cuda)."""
    from llm.errors import ConfigError
    from llm.training.runtime import resolve_device

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"^device=cuda:1 but no CUDA GPU is visible; use device=cpu or device=auto$"):
        resolve_device("cuda:1")
