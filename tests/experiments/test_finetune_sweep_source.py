"""A fine-tuning sweep whose jobs' ``train.init_from`` is no run dir is refused once, before any job.

Before, ``python -m llm.train -m +experiment=length_finetune finetune.source=/nonexistent hydra/launcher=gpus``
launched its 30 jobs, each refused with "train.init_from=... is not a run dir", exit code 1, leaving a sweep dir
of 30 job dirs: the up-front check skipped every job with ``train.init_from``. The source is checked as the job
checks it first (llm.training.init_from.check_init_from); a job whose source is a run is still left to itself, as
its run completes its config from the source's (YaRN's original length) before the config check.
"""

from __future__ import annotations

import pytest
from helpers import CONF, run_command_inprocess
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

import llm.train  # noqa: F401  (registers the launcher's resolvers)
from llm.sweep_jobs import every_job_refused

NOT_A_RUN = "is not a run dir (a directory holding config.yaml and checkpoints/)"


def _refusal(overrides: list[str], swept: list[str]) -> str | None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        config = compose("config", overrides=overrides, return_hydra_config=True)
        with open_dict(config):
            config.hydra.overrides.task = [*swept, *overrides]
        return every_job_refused(config)


def test_a_source_that_is_no_run_dir_refuses_the_sweep_with_the_job_s_own_line(tmp_path):
    assert _refusal([f"train.init_from={tmp_path / 'nowhere'}"], ["seed=0,1"]) == (
        f"every job of this sweep (2) would be refused: train.init_from={tmp_path / 'nowhere'} {NOT_A_RUN}")


def test_a_source_that_holds_a_run_is_left_to_the_jobs(tmp_path):
    """Its jobs fill settings in from the source's config before their own check: not checked up front, even with
    a value every job would be refused for (train.batch_size=-1) once that is done."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        OmegaConf.save(compose("config"), tmp_path / "config.yaml")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").touch()
    assert _refusal([f"train.init_from={tmp_path}", "train.batch_size=-1"], ["seed=0,1"]) is None


def test_a_resumed_job_is_still_left_to_itself(tmp_path):
    """A resumed run holds its weights already and ignores train.init_from: its source is not checked."""
    assert _refusal([f"train.init_from={tmp_path / 'nowhere'}", "train.resume=auto"], ["seed=0,1"]) is None


@pytest.mark.parametrize("launcher", ["basic", "gpus"])
def test_length_finetune_from_a_missing_source_is_one_line_and_exit_2_before_any_job(tmp_path, capsys, launcher):
    """Every job's source differs (<source>/<rope>_<packing>_s<seed>), the reason is the same: one line naming the
    first job's, exit code 2, and no sweep dir."""
    sweep = tmp_path / "sweep"
    code = run_command_inprocess(["+experiment=length_finetune", f"finetune.source={tmp_path / 'none'}",
                                  f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep}",
                                  "hydra/job_logging=none", "hydra/hydra_logging=none"], small=False)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(err) == 1, err
    assert err[0] == ("Error: every job of this sweep (30) would be refused for the same reason; the first (rope=torch "
                      f"data.packing=random seed=0): train.init_from={tmp_path / 'none'}/torch_random_s0 {NOT_A_RUN}")
    assert not sweep.exists()
