"""The command line as a user meets it: bad input is one line before any work, sweeps survive a failing
job, and a run never writes into a directory another run owns (tests/llm/training/test_ownership.py has the
second writers, and tests/llm/test_config_mistakes.py Hydra's own errors)."""

from __future__ import annotations

import csv
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CONF, ROOT, SMALL, read_metrics, run_cli, run_command_inprocess, run_inprocess

from llm.errors import RunDirInUseError
from llm.sweep_jobs import GPUS_LAUNCHER


@pytest.mark.parametrize(
    "override,message",
    [
        ("model.seq_len=100000", "model.seq_len=100000 with train.batch_size=4 needs at least"),
        ("seed=abc", "seed='abc' must be an integer"),
        ("rope.base=-1", "rope.base"),
        ("optim.lr=nan", "optim.lr=nan must be a finite number > 0"),
        ("optim.lr=-0.1", "optim.lr=-0.1 must be a finite number > 0"),
        ("optim.lr=inf", "optim.lr=inf must be a finite number > 0"),
        ("model.n_head=0", "model.n_head=0 must be a positive integer"),
    ],
)
def test_bad_input_is_one_line_before_any_work_and_leaves_no_run_dir(tmp_path, capsys, override, message):
    """Through the entry point in this process (the same code as the command: a process of its own for each case
    would only import torch and Hydra again; the next test runs the real command)."""
    run_dir = tmp_path / "day" / "run"
    assert run_command_inprocess([override, f"hydra.run.dir={run_dir}"], multirun=False) == 2
    err = capsys.readouterr().err
    assert message in err, err[-2000:]
    assert "Traceback" not in err and "Error executing job" not in err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1, err
    assert not run_dir.exists() and not (tmp_path / "day").exists(), "a config that never ran leaves no run dir"


def test_a_refused_command_loads_neither_the_compiler_nor_scipy_nor_statsmodels(tmp_path):
    """Every ``python -m llm.train`` instantiates the sweep callbacks and imports ``rope``. On a CPU build of torch
    neither may pull in torch's compiler (``rope.triton.ops.traced_ops``), ``scipy.stats`` (``llm.report.stats``) or
    ``statsmodels`` (the report's Holm correction) before the command is checked: each is slow to import and only
    a compiled run or a sweep's end needs it, so a user's typo, and each of the CLI tests here, would wait for
    them. Asked of the process at its exit, after the one-line refusal."""
    import torch

    if torch.version.cuda or torch.version.hip:
        pytest.skip("a CUDA build of torch defines the triton ops at import, for compiled graphs")
    heavy = ("torch._dynamo", "torch._inductor", "scipy.stats", "statsmodels")
    code = ("import atexit, runpy, sys\n"
            f"atexit.register(lambda: print(sorted(m for m in {heavy!r} if m in sys.modules)))\n"
            f"sys.argv = ['llm.train', *{SMALL!r}, 'seed=abc', 'hydra.run.dir={tmp_path / 'run'}']\n"
            "runpy.run_module('llm.train', run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "WANDB_MODE": "offline"})
    assert proc.returncode == 2 and "seed='abc' must be an integer" in proc.stderr, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout


def test_triton_on_a_cpu_without_the_interpreter_is_refused_first(tmp_path):
    proc = run_cli(["rope=triton_v4", "device=cpu", f"hydra.run.dir={tmp_path / 'run'}"], timeout=120,
                   extra_env={"TRITON_INTERPRET": "0"})
    assert proc.returncode == 2 and "TRITON_INTERPRET=1" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_full_error_env_shows_the_traceback(tmp_path, monkeypatch):
    """HYDRA_FULL_ERROR=1: the user error leaves the command as the exception itself (Python prints its traceback),
    not as the one line. The command's __main__ in this process: a process of its own would only print it."""
    import runpy

    from llm.errors import UserError

    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    monkeypatch.setenv("ROPELAB_USER_FULL_ERROR", "")  # the entry point sets it: undone after the test
    monkeypatch.delenv("ROPELAB_USER_FULL_ERROR")
    monkeypatch.delitem(sys.modules, "llm.train", raising=False)  # run as __main__, as `python -m` runs it
    monkeypatch.setattr(sys, "argv", ["llm.train", *SMALL, "seed=abc", f"hydra.run.dir={tmp_path / 'run'}",
                                      "hydra/job_logging=none", "hydra/hydra_logging=none"])  # no handlers left
    with pytest.raises(UserError, match="seed='abc' must be an integer"):
        runpy.run_module("llm.train", run_name="__main__")


def test_a_failing_job_does_not_end_the_sweep(tmp_path):
    sweep = tmp_path / "sweep"
    assert run_command_inprocess(["optim.lr=1e10,0.003", "train.max_steps=2", "train.eval_every=2",
                                  "model.dropout=0.0", f"hydra.sweep.dir={sweep}"]) == 1, \
        "the sweep's exit code says a job failed"
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert len(jobs) == 2
    statuses = [json.loads((j / "summary.json").read_text())["status"] for j in jobs]
    assert statuses == ["nonfinite", "completed"], statuses
    assert (sweep / "comparison.md").is_file(), "the comparison is written from the jobs that completed"
    assert "nonfinite" in (sweep / "comparison.md").read_text()


@pytest.mark.interpreter  # the second command runs triton_v4 on the CPU
def test_one_printed_command_continues_an_interrupted_sweep(tmp_path, capsys, monkeypatch):
    """A job refused by its config is recorded in its summary and the sweep goes on; a sweep that ended with jobs
    not done prints one command that continues all of it: a job stopped early
    resumes where it was (no step logged twice, no stop again at the same step), a job refused before its
    first step (here rope=triton_v4 without the interpreter, which the second command has) starts from step 0,
    and the comparison is rewritten over every job. Both commands run through the entry point in this process,
    the printed one with exactly its arguments (test_a_signal_to_a_sweep_says_how_to_continue_all_of_it and the
    signal tests of test_faults.py run sweeps as processes of their own)."""
    from rope import _launch

    sweep = tmp_path / "sweep"
    monkeypatch.setattr(_launch, "INTERPRETING", False)  # the first command's process: TRITON_INTERPRET unset
    assert run_command_inprocess(["rope=triton_v4,torch", "device=cpu", "train.max_steps=2", "train.eval_every=2",
                                  "train.stop_at_step=1", f"hydra.sweep.dir={sweep}"]) == 1, \
        "neither job has completed"
    monkeypatch.setattr(_launch, "INTERPRETING", True)
    jobs = ("0_triton_v4_s0", "1_torch_s0")
    assert [json.loads((sweep / j / "summary.json").read_text())["status"] for j in jobs] == ["config_error",
                                                                                             "interrupted"]
    assert "TRITON_INTERPRET=1" in json.loads((sweep / jobs[0] / "summary.json").read_text())["message"]
    args = shlex.split("".join(capsys.readouterr()).split("Continue the sweep with:")[1].strip().splitlines()[0])
    assert args[:4] == ["python", "-m", "llm.train", "-m"] and args[-2:] == [f"hydra.sweep.dir={sweep}",
                                                                          "train.resume=auto"]
    assert "train.stop_at_step=1" not in args and "rope=triton_v4,torch" in args
    assert run_command_inprocess(args[4:], small=False) == 0, "".join(capsys.readouterr())[-3000:]
    again = "".join(capsys.readouterr())
    for job in jobs:
        summary = json.loads((sweep / job / "summary.json").read_text())
        assert (summary["status"], summary["step"]) == ("completed", 2), (job, summary)
        logged = [(m["kind"], m["step"]) for m in read_metrics(sweep / job)]
        assert len(logged) == len(set(logged)) and ("val", 2) in logged, (job, logged)
    assert "0_triton_v4_s0: nothing to resume" in again
    assert "resumed from" in (sweep / "1_torch_s0" / "train.log").read_text()
    assert "config_error" not in (sweep / "comparison.md").read_text()
    with (sweep / "comparison.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["n"], r["n_excluded"]) for r in rows] == [("1", "0")] * 2, rows  # both jobs counted, none failed


def test_continue_sweep_command_drops_the_dir_resume_and_stop_it_replaces():
    from llm.sweep import continue_sweep_command

    argv = ["-m", "seed=0,1", "+train.stop_at_step=4", "hydra.sweep.dir=old", "train.resume=null", "sweep.name=a b"]
    assert continue_sweep_command(Path("/s d"), argv) == ("python -m llm.train -m seed=0,1 'sweep.name=a b' "
                                                          "'hydra.sweep.dir=/s d' train.resume=auto")


def test_never_trained_means_no_checkpoint_and_no_metric_line(tmp_path):
    from llm.training.run_dir import never_trained

    job = tmp_path / "job"
    (job / ".hydra").mkdir(parents=True)
    (job / "summary.json").write_text('{"status": "config_error"}')  # refused before training
    (job / "metrics.jsonl").write_text("")  # opened, nothing logged
    assert never_trained(job)
    (job / "metrics.jsonl").write_text('{"kind": "train", "step": 1}\n')
    assert not never_trained(job)
    (job / "metrics.jsonl").unlink()
    (job / "checkpoints").mkdir()
    assert never_trained(job)
    (job / "checkpoints" / "step_0000004.pt").write_bytes(b"x")
    assert not never_trained(job)


def test_a_new_run_never_writes_over_a_finished_one(tmp_path):
    run_inprocess(tmp_path, ["train.max_steps=2"])
    before = (tmp_path / "summary.json").read_text()
    with pytest.raises(RunDirInUseError, match="already holds a run"):
        run_inprocess(tmp_path, ["train.max_steps=2", "model.n_layer=2"])
    assert (tmp_path / "summary.json").read_text() == before


def test_runs_started_in_the_same_second_get_their_own_dirs(tmp_path):
    cmd = [sys.executable, "-m", "llm.train", *SMALL, "train.max_steps=2", "--cfg", "all", "--resolve", "-p",
           "hydra.run.dir"]
    procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    dirs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert dirs[0] != dirs[1] and all(d.startswith("outputs/runs/") for d in dirs), dirs


def test_the_gpu_launcher_preset_runs_one_job_per_gpu():
    from helpers import CONF
    from hydra import compose, initialize_config_dir

    import llm.train  # noqa: F401  (registers the launcher's ropelab_jobs resolver)

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["hydra/launcher=gpus"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_ == GPUS_LAUNCHER and cfg.hydra.launcher.n_jobs >= 1


def test_a_bad_value_every_job_shares_is_refused_once_before_any_job(tmp_path, capsys):
    """train.batch_size=-1 in every job of a sweep: one line, exit 2, no job dir (not one refusal per job); jobs
    refused for reasons of their own are still refused one by one (the sweeps above)."""
    sweep = tmp_path / "sweep"
    assert run_command_inprocess(["seed=0,1", "train.batch_size=-1", f"hydra.sweep.dir={sweep}"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "Error: every job of this sweep (2) would be refused: train.batch_size=-1 must be a positive integer")
    assert not sweep.exists() or not any(p.is_dir() for p in sweep.iterdir())
    assert run_command_inprocess(["seed=0,-1", "train.batch_size=-1", f"hydra.sweep.dir={sweep}"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
        "Error: every job of this sweep (2) would be refused, for 2 reasons; the first (seed=0): train.batch_size=-1 ")


def test_a_misspelt_option_in_a_swept_list_is_refused_before_the_sweep_dir_is_made(tmp_path, capsys):
    """rope=torch,trition_v4: Hydra's own refusal of the second job came after the sweep dir was claimed, leaving
    a dir of multirun.yaml and a lock; now every job is composed first, and the refusal writes nothing."""
    sweep = tmp_path / "sweep"
    assert run_command_inprocess(["rope=torch,trition_v4", f"hydra.sweep.dir={sweep}"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("Error: rope=trition_v4 is not an option of rope; allowed: "), line
    assert not sweep.exists()


def test_a_slurm_sweep_off_a_slurm_node_is_refused_in_one_line_before_the_sweep_dir_is_made(tmp_path, capsys,
                                                                                          monkeypatch):
    """hydra/launcher=slurm where no ``srun`` exists: submitit's own check came after the sweep dir was claimed and
    ended in a traceback, leaving multirun.yaml and the sweep's lock."""
    monkeypatch.setattr("shutil.which", lambda name, *a, **k: None)
    sweep = tmp_path / "sweep"
    assert run_command_inprocess(["seed=0,1", "hydra/launcher=slurm", f"hydra.sweep.dir={sweep}"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "Error: hydra/launcher=slurm submits the jobs to SLURM, and this machine has no `srun` (not a SLURM node): "
        "run the sweep on the cluster, or use hydra/launcher=gpus here")
    assert not sweep.exists()


@pytest.mark.parametrize("launcher,extra,refused", [
    ("basic", [], True),
    ("slurm", [], False),  # its jobs run on other hosts: this host's check does not speak for them
    # a job whose train.init_from holds a run: tests/experiments/test_finetune_sweep_source.py
])
def test_the_up_front_sweep_check_speaks_only_for_what_this_host_can_check(launcher, extra, refused):
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from llm.sweep_jobs import every_job_refused

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        overrides = ["train.batch_size=-1", *extra] + ([f"hydra/launcher={launcher}"] if launcher != "basic" else [])
        config = compose("config", overrides=overrides, return_hydra_config=True)
        with open_dict(config):
            config.hydra.overrides.task = ["seed=0,1", *overrides[:1 + len(extra)]]
        result = every_job_refused(config)
    assert (result == "every job of this sweep (2) would be refused: train.batch_size=-1 must be a positive "
                      "integer") if refused else result is None


@pytest.mark.parametrize("command", ["llm.generate", "llm.eval_lengths"])
def test_help_lists_the_command_s_own_keys_not_every_group_of_conf(command):
    """The model, data, ... are the run's: a help listing their groups invites overrides the command refuses."""
    out = subprocess.run([sys.executable, "-m", command, "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120).stdout
    assert out.startswith(f"python -m {command} run=<run dir>") and "\nrun: null\n" in out
    assert "model: gpt2_small" not in out and "== Configuration groups ==" not in out


def test_under_torchrun_only_rank_0_prints_the_config(tmp_path):
    """``torchrun ... -m llm.train --cfg job`` runs the command in every process: rank 0 prints the config, the
    others nothing, so it reads once."""
    ranks = {rank: run_cli(["--cfg=job", f"hydra.run.dir={tmp_path / 'run'}"],
                           extra_env={"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank)})
             for rank in (0, 1)}
    assert all(p.returncode == 0 for p in ranks.values()), {r: p.stderr[-2000:] for r, p in ranks.items()}
    assert "rope:" in ranks[0].stdout and ranks[1].stdout == ""


@pytest.mark.parametrize("override", ["hydra.output_subdir=.hydra", "++hydra.output_subdir=meta",
                                      "hydra.output_subdir=", "hydra.output_subdir=false", "hydra={output_subdir:meta}",
                                      "hydra.job.chdir=true", "+hydra.job.chdir=True", "hydra.job={chdir:true}",
                                      "hydra.job.chdir=false,true"])
def test_hydra_job_settings_the_run_manages_itself_are_refused_before_hydra_starts(override, tmp_path, monkeypatch,
                                                                                    capsys):
    """``hydra.output_subdir`` (Hydra would write the command's record before the run owns its dir: over the record
    of the command that made a resumed run, or, named empty, over the run's config.yaml) and ``hydra.job.chdir``
    (relative data and checkpoint paths would resolve in the run dir), in every form Hydra reads: one line naming
    the override and why, exit 2, no dir made."""
    from helpers import run_module_main

    from llm.errors import ConfigError
    from llm.train import check_launch

    with pytest.raises(ConfigError, match="leave it unset"):
        check_launch(["llm.train", "seed=3", override])
    monkeypatch.chdir(tmp_path)
    code, lines = run_module_main(monkeypatch, capsys, "llm.train", [f"--config-path={CONF}", "seed=3", override])
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"Error: {override}: "), lines
    assert "leave it unset" in lines[0] and not any(tmp_path.iterdir())


def test_hydra_job_settings_at_the_run_s_own_values_pass():
    """What the run does anyway (no record subdir, no chdir) is no reason to refuse a command."""
    from llm.train import check_launch

    check_launch(["llm.train", "hydra.output_subdir=null", "hydra.job.chdir=false", "++hydra.job.chdir=null",
                  "hydra.job={chdir:false,name:x}", "hydra.run.dir=/tmp/x", "seed=1,2"])
