"""An interpolation on the command line (``train.eval_every=${train.max_steps}``, Hydra's and OmegaConf's own syntax)
is a value like any other: one that cannot be resolved is a bad configuration, refused in one line naming the key,
exit code 2, before any work and without leaving a run or sweep dir.

Before, a typo in one (``${train.max_stepz}``), an unset ``${oc.env:...}`` or an unknown resolver was a 60-line
traceback with exit code 1 that left an empty run dir; a sweep ran each job to its own refusal; and ``--cfg hydra
--resolve`` (or ``--cfg hydra -p hydra.run.dir``), which cannot resolve the run dir's ``${rope.name}`` without the
job's keys, was a traceback too.
"""

from __future__ import annotations

import pytest
from helpers import CONF, SMALL, run_command_inprocess, run_module_main
from hydra import compose, initialize_config_dir

from llm.entry import unresolved_line
from llm.sweep_jobs import sweep_arguments


@pytest.mark.parametrize("override,line", [
    ("train.eval_every=${train.max_stepz}",
     "train.eval_every: its interpolation cannot be resolved: Interpolation key 'train.max_stepz' not found"),
    ("train.eval_every=${oc.env:ROPELAB_NO_SUCH_VARIABLE}",
     "train.eval_every: its interpolation cannot be resolved: KeyError raised while resolving interpolation: "
     "\"Environment variable 'ROPELAB_NO_SUCH_VARIABLE' not found\""),
    ("train.eval_every=${no_such_resolver:1}",
     "train.eval_every: its interpolation cannot be resolved: Unsupported interpolation type no_such_resolver"),
])
def test_an_interpolation_that_cannot_be_resolved_is_one_line_and_leaves_no_run_dir(tmp_path, capsys, override,
                                                                                      line):
    run_dir = tmp_path / "day" / "run"
    assert run_command_inprocess([override, f"hydra.run.dir={run_dir}"], multirun=False) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"Error: {line}"], err[-2000:]
    assert not (tmp_path / "day").exists(), "a config that never ran leaves no run dir"


def test_a_run_dir_naming_a_key_that_is_not_there_is_one_line(tmp_path, capsys):
    assert run_command_inprocess([f"hydra.run.dir={tmp_path}/day/${{modle.name}}"], multirun=False) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "Error: hydra.run.dir: its interpolation cannot be resolved: Interpolation key 'modle.name' not found"]
    assert not (tmp_path / "day").exists()


def test_a_sweep_whose_every_job_has_it_is_refused_once_before_the_sweep_dir(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    assert run_command_inprocess(["seed=0,1", "data.max_files=${oc.env:ROPELAB_NO_SUCH_VARIABLE}",
                                  f"hydra.sweep.dir={sweep}"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "Error: every job of this sweep (2) would be refused: data.max_files: its interpolation cannot be resolved: "
        "KeyError raised while resolving interpolation: \"Environment variable 'ROPELAB_NO_SUCH_VARIABLE' not "
        "found\"")
    assert not sweep.exists()


def test_interpolations_that_resolve_pass_the_check_hydra_s_resolver_included():
    """``${hydra:runtime.choices.rope}`` (the fine-tuning experiment's source run) needs the job's Hydra config, which
    the check sets while it reads the values."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["+experiment=length_finetune", "finetune.source=/src",
                                           "train.eval_every=${train.max_steps}"], return_hydra_config=True)
    assert unresolved_line(cfg) is None


def test_a_sweep_reads_the_overrides_as_written():
    """Hydra keeps a command's overrides as text; read through OmegaConf, ``${.max_steps}`` in one is resolved as an
    interpolation of Hydra's own config, and fails there, so the sweep's jobs were never checked up front."""
    written = ["seed=1", "train.eval_every=${.max_steps}"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=written, return_hydra_config=True)
    assert sweep_arguments(cfg.hydra) == written


@pytest.mark.parametrize("flags,line", [
    (["--cfg", "hydra", "--resolve"], "Error: Interpolation key 'rope.name' not found (--cfg hydra leaves out the "
     "job's keys, which hydra.run.dir reads to name the run: --cfg all --resolve prints Hydra's settings resolved)"),
    (["--cfg", "hydra", "-p", "hydra.run.dir"], "Error: hydra.run.dir: its interpolation cannot be resolved: "
     "Interpolation key 'rope.name' not found (--cfg hydra leaves out the job's keys, which hydra.run.dir reads to "
     "name the run: --cfg all -p hydra.run.dir prints Hydra's settings resolved)"),
])
def test_cfg_hydra_that_cannot_resolve_the_run_dir_says_which_flags_do(monkeypatch, capsys, flags, line):
    from hydra.core.hydra_config import HydraConfig

    monkeypatch.setattr(HydraConfig.instance(), "cfg", HydraConfig.instance().cfg)  # --cfg sets it: undone after
    code, err = run_module_main(monkeypatch, capsys, "llm.train", [*flags, *SMALL])
    assert (code, err) == (2, [line])


def test_the_command_that_continues_a_sweep_keeps_its_interpolations_as_typed():
    """The continue command is built from the sweep's ``multirun.yaml``: its overrides are the command's text, not
    values of the saved config (``${.max_steps}`` fails there; ``${train.max_steps}`` would be replaced by 4)."""
    from omegaconf import OmegaConf

    from llm.sweep import saved_command

    saved = OmegaConf.create({"train": {"max_steps": 4}, "hydra": {"overrides": {
        "hydra": ["hydra.mode=MULTIRUN", "hydra.sweep.subdir=${hydra.job.num}"],
        "task": ["seed=0,1", "train.eval_every=${.max_steps}", "train.log_every=${train.max_steps}"]}}})
    assert saved_command(saved) == ["hydra.sweep.subdir=${hydra.job.num}", "seed=0,1", "train.eval_every=${.max_steps}",
                                    "train.log_every=${train.max_steps}"]


def test_a_relative_interpolation_in_a_single_run_trains(tmp_path):
    """``train.eval_every=${.max_steps}`` is relative to its own key: the run reads its command's overrides as
    written (resolved as a record of their own, the relative key pointed at nothing and the run was a traceback)."""
    run_dir = tmp_path / "run"
    assert run_command_inprocess(["train.max_steps=2", "train.eval_every=${.max_steps}", f"hydra.run.dir={run_dir}"],
                                 multirun=False) == 0
    assert (run_dir / "summary.json").is_file()
