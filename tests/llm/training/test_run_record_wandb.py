"""A wandb failure costs the run its wandb copy, never its training or its own files; a wandb name wandb would refuse
is refused before any work.

A run dir whose ``wandb`` could not be created (a file in its place) ended in a traceback from wandb.init after the
data and the model were built; a wandb service gone mid-run (``ConnectionResetError`` from ``run.log``) ended the
training there, with ``status: failed`` and a traceback; ``logger.wandb.project=a/b`` was refused by wandb.init
only after the data and model work, with a traceback.

A resumed run's wandb history is ``metrics.jsonl``'s: the steps trained again after the checkpoint replace the ones
logged before the interrupt (they were dropped by wandb, which kept the first ones).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir

from llm.errors import ConfigError
from llm.training.outputs import Tracker

CONF = Path(__file__).resolve().parents[3] / "conf"
#: A model and data a 2-core CPU trains in a second (the test suite's usual small settings).
TINY = ["model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.seq_len=32", "tokenizer=bytes",
        "train.batch_size=4", "train.eval_batches=1", "data.max_files=40", "data.val_fraction=0.2"]
WANDB = ["logger=wandb", "logger.wandb.mode=offline", "train.max_steps=3", "train.eval_every=3", "train.log_every=1"]


def _compose(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=[*TINY, *overrides])


def _train(run_dir: Path, overrides: list[str]) -> dict:
    """Train in this process through the entry point's ``train``; its summary."""
    from llm.train import train

    return train(_compose(overrides), run_dir, overrides=tuple(overrides))


def _train_steps(run_dir: Path) -> list[int]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [m["step"] for m in lines if m["kind"] == "train"]


def _wandb_segments(run_dir: Path) -> list[tuple[Any, list[dict]]]:
    """The run's offline wandb segments, one per command that trained it, oldest first: each one's run record and
    history rows."""
    from helpers import _wandb_records, read_wandb_run

    segments = []
    for log_file in sorted((run_dir / "wandb").glob("offline-run-*/*.wandb"), key=lambda f: f.parent.name):
        history = read_wandb_run(log_file)["history"]  # once wandb has written the segment out
        run = next(r.run for r in _wandb_records(log_file.read_bytes()) if r.WhichOneof("record_type") == "run")
        segments.append((run, history))
    return segments


def _warnings(caplog) -> list[str]:
    """The warnings the tracker gave about wandb."""
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    return [m for m in said if m.startswith("wandb")]


def test_a_tracker_that_cannot_start_keeps_its_resume_id_and_says_so(tmp_path: Path, wandb_offline, caplog):
    (tmp_path / "wandb").write_text("not a dir")  # where wandb writes its offline run
    with caplog.at_level(logging.WARNING, logger="llm.training.outputs"):
        tracker = Tracker({"name": "wandb", "wandb": {"mode": "offline", "project": "p"}}, tmp_path, name="r",
                          group="g", config={}, resume_id="abc123")
    assert tracker.run is None and tracker.run_id == "abc123"  # a later resume continues the same wandb run
    said = _warnings(caplog)
    assert len(said) == 1 and said[0].startswith("wandb: could not start its run (NotADirectoryError"), said
    tracker.log({"a": 1.0}, 1)  # a no-op now, not an error
    tracker.finish()


def test_a_run_whose_wandb_cannot_start_trains_and_records_everything(tmp_path: Path, wandb_offline, caplog):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "wandb").write_text("not a dir")
    with caplog.at_level(logging.WARNING, logger="llm.training.outputs"):
        summary = _train(run_dir, WANDB)
    assert summary["status"] == "completed" and summary["step"] == 3
    assert _train_steps(run_dir) == [1, 2, 3]
    assert len(_warnings(caplog)) == 1


def test_a_wandb_failure_mid_run_does_not_end_the_training(tmp_path: Path, wandb_offline, monkeypatch, caplog):
    """wandb's service gone at step 2: one warning, the run trains to its end, its files complete, and its
    checkpoint keeps the wandb run's id (a resume continues that wandb run)."""
    import wandb

    real_init, ids = wandb.init, []

    def init(**kwargs):
        run = real_init(**kwargs)
        ids.append(run.id)
        real_log = run.log

        def log(data, step=None, **kw):
            if step == 2:
                raise ConnectionResetError("Connection lost")
            return real_log(data, step=step, **kw)

        monkeypatch.setattr(run, "log", log)
        return run

    monkeypatch.setattr(wandb, "init", init)
    with caplog.at_level(logging.WARNING, logger="llm.training.outputs"):
        summary = _train(tmp_path, WANDB)
    assert summary["status"] == "completed" and summary["step"] == 3
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["status"] == "completed" and saved["val_loss"] == summary["val_loss"]
    assert _train_steps(tmp_path) == [1, 2, 3]
    said = _warnings(caplog)
    assert len(said) == 1 and said[0].startswith("wandb: logging step 2 failed (ConnectionResetError: Connection lost)")
    state = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False, map_location="cpu")
    assert ids and state["wandb_id"] == ids[0]


def test_a_resumed_run_rewinds_its_wandb_run_to_its_checkpoint(tmp_path: Path, wandb_offline, monkeypatch):
    """A run that crashed in step 4 after its checkpoint of step 2, resumed: ``metrics.jsonl`` keeps steps 1-2 and the
    resume's 3-6, and the resume asks wandb to rewind its run to step 2, so the history wandb shows is the same.

    Resumed with ``resume="allow"`` alone, wandb kept the first values of the steps logged again: online it drops a row
    whose step is not above the run's last, and ``wandb sync`` of the offline segments moved the resume's steps past
    the first segment's last (its step 3 shown as step 4)."""
    from llm.training.trainer import Trainer

    steps = ["logger=wandb", "logger.wandb.mode=offline", "train.max_steps=6", "train.log_every=1",
             "train.eval_every=2", "train.ckpt_every=2"]
    real_step = Trainer.train_step

    def crash_in_step_4(self):
        if self.step == 3:
            raise RuntimeError("the machine went away")
        return real_step(self)

    monkeypatch.setattr(Trainer, "train_step", crash_in_step_4)
    with pytest.raises(SystemExit):
        _train(tmp_path, steps)
    monkeypatch.setattr(Trainer, "train_step", real_step)
    assert _train_steps(tmp_path) == [1, 2, 3]
    summary = _train(tmp_path, [*steps, "train.resume=auto"])
    assert summary["status"] == "completed" and _train_steps(tmp_path) == [1, 2, 3, 4, 5, 6]

    (first, logged), (resumed, relogged) = _wandb_segments(tmp_path)
    assert resumed.run_id == first.run_id
    rewind = resumed.branch_point
    assert (rewind.run, rewind.metric, rewind.value) == (first.run_id, "_step", 2)
    # the run once rewound: its rows up to step 2, then the resume's
    shown: dict[int, dict] = {}
    for row in [r for r in logged if r["_step"] <= 2] + relogged:
        shown.setdefault(row["_step"], {}).update(row)
    expected: dict[int, dict] = {}
    for line in (tmp_path / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        values = {k: v for k, v in m.items() if k not in ("kind", "step")}
        names = {f"train/{k}": v for k, v in values.items()} if m["kind"] == "train" else {
            f"val/{k.removeprefix('val_')}": v for k, v in values.items() if k.startswith("val_")}
        expected.setdefault(m["step"], {}).update(names)
    assert sorted(shown) == sorted(expected) == [1, 2, 3, 4, 5, 6]
    assert {s: {k: shown[s].get(k) for k in expected[s]} for s in expected} == expected


def test_a_refused_rewind_resumes_the_wandb_run_as_it_is_and_says_so(tmp_path: Path, wandb_offline, monkeypatch,
                                                                     caplog):
    """A server without rewinds (W&B's is a preview), or one that never received the run, refuses ``resume_from``:
    one warning naming the steps whose first values stay on the dashboard, and the run resumed as it is.

    The refused init here has gone as far as a real one does before the server answers (wandb.init writes its
    arguments into the Settings it is given): a second init given the same Settings was refused by wandb's check that
    ``resume`` and ``resume_from`` exclude each other."""
    import wandb
    from wandb.sdk.wandb_run import Run

    real_init, asked = wandb.init, []

    def init(**kwargs):
        asked.append({k: kwargs.get(k) for k in ("id", "resume", "resume_from")})
        run = real_init(**kwargs)
        if kwargs.get("resume_from"):  # offline, wandb only records the rewind: the server's answer comes here
            raise wandb.errors.CommError("failed to rewind run: rewinding runs is not enabled for this entity")
        return run

    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.setattr(Run, "starting_step", property(lambda run: 5))  # the server's run holds steps up to 4
    with caplog.at_level(logging.WARNING, logger="llm.training.outputs"):
        tracker = Tracker({"name": "wandb", "wandb": {"mode": "offline", "project": "p"}}, tmp_path, name="r",
                          group="g", config={}, resume_id="abc123", resume_step=2)
    assert asked == [{"id": "abc123", "resume": None, "resume_from": "abc123?_step=2"},
                     {"id": "abc123", "resume": "allow", "resume_from": None}]
    assert tracker.run is not None and tracker.run_id == "abc123"
    assert _warnings(caplog) == ["wandb: could not rewind run abc123 to step 2 (CommError: failed to rewind run: "
                                 "rewinding runs is not enabled for this entity); resumed it as it is: the dashboard "
                                 "keeps the first values of steps 3-4 (metrics.jsonl holds those trained again)"]
    tracker.log({"train/loss": 1.0}, 5)
    tracker.finish()


@pytest.mark.parametrize("override,said", [
    ("logger.wandb.project=a/b", "logger.wandb.project='a/b': wandb allows at most 128 characters, none of "
                                 "/ \\ # ? % : (found /)"),
    ("logger.wandb.project=" + "p" * 129, "logger.wandb.project='" + "p" * 40 + "...': wandb allows at most 128 "
                                          "characters, none of / \\ # ? % : (it has 129)"),
    ("logger.wandb.tags=[ok," + "t" * 65 + "]", "logger.wandb.tags: '" + "t" * 20 + "'... is 65 characters; "
                                                "wandb allows tags of 1 to 64"),
])
def test_a_wandb_name_wandb_refuses_is_refused_before_any_work(override, said):
    """The refusal is a ConfigError of the run's up-front checks (one line, no traceback, before the data)."""
    from llm.config_check import validate_config

    with pytest.raises(ConfigError) as refused:
        validate_config(_compose(["logger=wandb", "logger.wandb.mode=offline", override]))
    assert str(refused.value) == said


def test_a_bad_project_name_leaves_no_run_dir(tmp_path: Path):
    """The command's own answer: one line on stderr, exit 2, no run dir made."""
    import os
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    done = subprocess.run([sys.executable, "-m", "llm.train", *TINY, "logger=wandb", "logger.wandb.project=a/b",
                           f"hydra.run.dir={run_dir}"], cwd=CONF.parent, env=env, capture_output=True, text=True,
                          timeout=300)
    err = [line for line in done.stderr.splitlines() if line.strip()]
    assert (done.returncode, err) == (2, ["Error: logger.wandb.project='a/b': wandb allows at most 128 characters, "
                                          "none of / \\ # ? % : (found /)"])
    assert not run_dir.exists()


def test_a_disabled_tracker_takes_any_project_name():
    """mode=disabled never calls wandb.init: its project is not wandb's to refuse."""
    from llm.config_check import validate_config

    validate_config(_compose(["logger=wandb", "logger.wandb.mode=disabled", "logger.wandb.project=a/b"]))


def test_a_completed_resume_clears_the_stop_message_on_the_dashboard():
    """wandb merges a resumed run's summary into the earlier one's: a completed resume left its message out, so the
    dashboard kept "stopped at step N" of the run's first part."""
    from llm.training.outputs import tracker_summary

    sent = tracker_summary({"status": "completed", "message": None, "val_loss": 1.5, "mfu": None})
    assert sent["message"] == "" and sent["status"] == "completed" and "mfu" not in sent
    assert tracker_summary({"status": "interrupted", "message": "stopped at step 3"})["message"] == "stopped at step 3"
