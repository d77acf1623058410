"""A sweep over values the project's sweeper cannot run is refused in one line before the sweep dir is made.

Before, ``-m optim.lr=interval(0.001,0.01)`` (a range for sweepers that sample, such as Optuna's) ended in Hydra's
traceback ("BasicSweeper does not support sweep type : INTERVAL_SWEEP"), exit code 1, after the sweep dir was claimed:
a dir holding nothing but the sweep's lock.
"""

from __future__ import annotations

import pytest
from helpers import CONF, run_command_inprocess
from hydra import compose, initialize_config_dir

from llm.sweep_jobs import PER_INVOCATION_ARGS


@pytest.mark.parametrize("override", ["optim.lr=interval(0.001,0.01)", "optim.lr=tag(lr,interval(0.001,0.01))"])
def test_an_interval_sweep_is_refused_in_one_line_before_the_sweep_dir(tmp_path, capsys, override):
    sweep = tmp_path / "sweep"
    assert run_command_inprocess(["seed=0", override, f"hydra.sweep.dir={sweep}"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"Error: {override}: interval() is for sweepers that sample values (Optuna, Nevergrad), and this project's "
        "sweeper runs the values it is given: list them (optim.lr=0.001,0.003,0.01), or use range() or choice()"]
    assert not sweep.exists()


def test_a_job_dir_named_by_its_overrides_stays_its_own_when_the_sweep_is_continued():
    """``hydra.sweep.subdir=${hydra.job.override_dirname}`` (Hydra's way to name a job by its values): the command
    that continues the sweep adds ``train.resume=auto`` (and drops a ``train.stop_at_step``), which renamed every job's
    dir, so each job was refused as "trained in another dir of the sweep" instead of resuming."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        first = compose("config", overrides=["seed=0", "train.stop_at_step=2"], return_hydra_config=True)
        again = compose("config", overrides=["seed=0", "train.resume=auto"], return_hydra_config=True)
    assert first.hydra.job.override_dirname == again.hydra.job.override_dirname == "seed=0"
    task_keys = {a.rstrip("=") for a in PER_INVOCATION_ARGS if not a.startswith("hydra.")}
    assert set(first.hydra.job.config.override_dirname.exclude_keys) == task_keys
