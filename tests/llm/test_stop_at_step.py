"""``train.stop_at_step`` at or past ``train.max_steps`` never stops the run (it ends at max_steps first): refused in
one line before any work, by a single run, a resume and a sweep alike; a stop below max_steps still stops a run
that ``train.resume=auto`` then finishes."""

from __future__ import annotations

import pytest
from helpers import run_command_inprocess, run_inprocess

from llm.errors import ConfigError

LINE = ("train.stop_at_step={stop} must be below train.max_steps={steps}: it stops a run early (with a checkpoint) "
        "so that it can be resumed to train.max_steps; leave it out to train all {steps} steps")


@pytest.mark.parametrize("steps,stop", [(120, 500), (3, 3)], ids=["past", "equal"])
def test_a_stop_the_run_never_reaches_is_refused_in_one_line_before_any_work(tmp_path, capsys, steps, stop):
    run_dir = tmp_path / "run"
    assert run_command_inprocess([f"train.max_steps={steps}", f"train.stop_at_step={stop}",
                                  f"hydra.run.dir={run_dir}"], multirun=False) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == ["Error: " + LINE.format(stop=stop, steps=steps)], err
    assert not run_dir.exists(), "a refused run leaves no dir"


def test_a_sweep_whose_every_job_stops_past_its_end_is_refused_once_before_any_job(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    assert run_command_inprocess(["seed=0,1", "train.max_steps=2", "train.stop_at_step=5",
                                  f"hydra.sweep.dir={sweep}"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == ["Error: every job of this sweep (2) would be refused: " + LINE.format(stop=5, steps=2)], err
    assert not sweep.exists() or not any(p.is_dir() for p in sweep.iterdir()), "no job began"


def test_a_stop_below_max_steps_stops_and_a_resume_finishes_but_not_with_a_stop_past_the_end(tmp_path):
    run = tmp_path / "run"
    steps = ["train.max_steps=3", "train.eval_every=3", "train.log_every=1"]
    assert run_inprocess(run, [*steps, "train.stop_at_step=1"])["status"] == "interrupted"
    with pytest.raises(ConfigError, match="train.stop_at_step=3 must be below train.max_steps=3"):
        run_inprocess(run, ["train.resume=auto", "train.stop_at_step=3"])  # max_steps is the run's own
    summary = run_inprocess(run, ["train.resume=auto", "train.stop_at_step=2"])
    assert summary["status"] == "interrupted" and summary["step"] == 2
    summary = run_inprocess(run, ["train.resume=auto"])
    assert summary["status"] == "completed" and summary["step"] == 3
