"""Sweeps at their edges, as a user runs them: an experiment's input left out, a swept key nothing reads, a sweep of
no jobs, two jobs of a length experiment in one job dir, and the comparison callback's own settings.

Each is refused once, in one line with exit code 2 and nothing written, before any job starts (before, each job
failed on its own with a traceback or a refusal, or the command ended with exit code 0 having run nothing); the
comparison's settings that cannot be taken are refused the same way, and a reference the runs lack is one warning
line at the sweep's end, not a traceback.
"""

from __future__ import annotations

import pytest
from helpers import run_command_inprocess

import llm.train  # noqa: F401  (registers the launcher's resolvers)

QUIET = ["hydra/job_logging=none", "hydra/hydra_logging=none"]
#: A length experiment's jobs at CPU size (the default SMALL data keys are the stdlib's: data=pystdlib), each a few
#: steps, and its end-of-sweep evaluation at one short length.
LENGTH = ["data=pystdlib", "data.max_files=40", "data.val_fraction=0.2", "train.compile=false", "train.max_steps=2",
          "train.eval_every=2", "train.log_every=2", "train.sample_every=0", "rope=torch", "data.packing=random",
          "hydra.callbacks.length_generalization.lengths=[32]", "hydra.callbacks.length_generalization.scalings=[none]",
          "hydra.callbacks.length_generalization.tokens=64", "hydra.callbacks.length_generalization.batch_tokens=64",
          "hydra.callbacks.length_generalization.devices=cpu"]


def _refused(args: list[str], capsys) -> str:
    """The one line a refused sweep prints (exit code 2 asserted)."""
    capsys.readouterr()
    code = run_command_inprocess([*args, *QUIET])
    out = capsys.readouterr()
    err = [ln for ln in out.err.splitlines() if ln.strip()]
    assert code == 2 and len(err) == 1, (code, err, out.out[-3000:])
    assert err[0].startswith("Error: ")
    return err[0]


def test_a_fine_tuning_sweep_without_its_source_is_one_line_before_any_job(tmp_path, capsys):
    """``+experiment=length_finetune`` without ``finetune.source`` (``???`` in the preset): each of its jobs failed
    with OmegaConf's traceback (MissingMandatoryValue) as it read train.init_from, a job dir each, exit code 1."""
    sweep = tmp_path / "sweep"
    line = _refused(["+experiment=length_finetune", "data=pystdlib", "data.max_files=40", "rope=torch",
                     "data.packing=random", "seed=0,1", f"hydra.sweep.dir={sweep}"], capsys)
    assert "finetune.source is not set" in line and "finetune.source=<value>" in line, line
    assert not sweep.exists()


def test_a_swept_key_nothing_reads_refuses_the_sweep_once(tmp_path, capsys):
    """docs/usage.md: a key added with ``+`` that nothing would read is refused before any job. Swept
    (``+train.max_step=5,6``), the sweep's own check did not see it (Hydra leaves swept values out of the sweep's
    config): each job was launched and refused alone, exit code 1."""
    sweep = tmp_path / "sweep"
    line = _refused(["+train.max_step=5,6", f"hydra.sweep.dir={sweep}"], capsys)
    assert "every job of this sweep (2) would be refused: train.max_step is not a known key" in line, line
    assert "did you mean train.max_steps?" in line
    assert not sweep.exists()


@pytest.mark.parametrize("empty", ["seed=range(0)", "seed=range(3,1)"])
def test_a_sweep_of_no_jobs_is_refused_not_a_success(tmp_path, capsys, empty):
    """Hydra launches nothing for an empty sweep, and the command ended with exit code 0 ("comparison skipped: no
    run dirs"), as if its runs were done; a sweep dir was left holding only its multirun.yaml."""
    sweep = tmp_path / "sweep"
    line = _refused([empty, "rope=torch,none", f"hydra.sweep.dir={sweep}"], capsys)
    assert line.startswith(f"Error: this sweep has no jobs: {empty} gives no value"), line
    assert not sweep.exists()


@pytest.mark.parametrize("swept,why", [
    (["seed=0,1,0"], "jobs #0 and #2 of this sweep are the same job (a value repeated in: seed=0,1,0)"),
    (["seed=0", "+rope.max_seq_len=32,64"], "jobs #0 and #1 of this sweep would share the job dir"),
])
def test_two_jobs_of_a_length_sweep_in_one_dir_are_refused_before_any_job(tmp_path, capsys, swept, why):
    """The length experiments name a job dir by rope, packing and seed (no job number): a repeated seed, or another
    swept key, gave two jobs one dir. The first trained, the second was refused as "a dir that holds a run" (with
    the advice to resume it or choose another hydra.run.dir), and the sweep ended with exit code 1."""
    sweep = tmp_path / "sweep"
    line = _refused(["+experiment=length_generalization", *LENGTH, *swept, f"hydra.sweep.dir={sweep}"], capsys)
    assert why in line and f"{sweep / 'torch_random_s0'}" in line, line
    assert not sweep.exists()


@pytest.mark.parametrize("setting,said", [
    ("margin=abc", "hydra.callbacks.compare.margin='abc' must be a positive finite number"),
    ("margin=-0.01", "hydra.callbacks.compare.margin=-0.01 must be a positive finite number"),
    ("acc_margin=2", "hydra.callbacks.compare.acc_margin=2 must be a positive number below 1"),
    ("refrence=torch", "hydra.callbacks.compare.refrence is not a setting of the sweep's comparison"),
])
def test_comparison_settings_it_cannot_take_are_refused_before_any_job(tmp_path, capsys, setting, said):
    """The callback's settings (llm/report/callback.py's docstring): a margin that is no number failed Hydra's
    construction of the callback with a traceback and exit code 1; a negative one was taken, and turned the
    verdicts."""
    sweep = tmp_path / "sweep"
    line = _refused(["seed=0,1", f"+hydra.callbacks.compare.{setting}", f"hydra.sweep.dir={sweep}"], capsys)
    assert line == f"Error: {said}" or line.startswith(f"Error: {said}"), line
    assert not sweep.exists()


def test_a_reference_the_runs_lack_is_one_warning_with_the_command_to_compare_by_hand(tmp_path, capsys):
    """``+hydra.callbacks.compare.reference=nope``: the sweep's end logged the report's error with its traceback,
    and a retry command without the sweep's settings (its margin)."""
    sweep = tmp_path / "sweep"
    code = run_command_inprocess(["rope=torch,none", "seed=0", "train.max_steps=1", "train.eval_every=1",
                                  "+hydra.callbacks.compare.reference=nope", "+hydra.callbacks.compare.margin=0.02",
                                  f"hydra.sweep.dir={sweep}"])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 0
    assert "Traceback" not in text, text[-3000:]
    assert "reference 'nope' matches no implementation with completed runs" in text
    assert f"python -m scripts.compare {sweep} --reference <name> --margin 0.02" in text


def test_a_sweep_continued_in_another_order_is_shown_its_whole_first_command(tmp_path, capsys):
    """The refusal prints the command in the first order, from the sweep's multirun.yaml: its task's overrides alone
    left out the Hydra ones (``hydra/launcher=gpus``, ``+hydra.callbacks.compare.margin=0.02``), so the command as
    printed continued the sweep with the basic launcher and another comparison."""
    sweep = tmp_path / "sweep"
    hydra = ["hydra/launcher=gpus", "+hydra.callbacks.compare.margin=0.02"]
    first = ["seed=0,1", "train.max_steps=1", "train.eval_every=1"]
    assert run_command_inprocess([*hydra, *first, f"hydra.sweep.dir={sweep}", *QUIET]) == 0
    line = _refused([*hydra, "seed=1,0", *first[1:], f"hydra.sweep.dir={sweep}", "train.resume=auto"], capsys)
    assert "in another order" in line, line
    command = line.split("continue it with the first command's order: ", 1)[1]
    assert command.startswith("python -m llm.train -m hydra/launcher=gpus +hydra.callbacks.compare.margin=0.02 "), line
    assert command.endswith(f"seed=0,1 train.max_steps=1 train.eval_every=1 hydra.sweep.dir={sweep} train.resume=auto")


@pytest.mark.parametrize("launcher", ["joblib", "gpus"])
def test_no_jobs_at_once_is_refused_before_any_job(tmp_path, capsys, launcher):
    """``hydra.launcher.n_jobs=0``: joblib refused it only once the sweep had started, with its traceback (exit code
    1), leaving a sweep dir that held no job."""
    sweep = tmp_path / "sweep"
    line = _refused([f"hydra/launcher={launcher}", "hydra.launcher.n_jobs=0", "seed=0,1", f"hydra.sweep.dir={sweep}"],
                    capsys)
    assert line.startswith("Error: hydra.launcher.n_jobs=0 must be a non-zero integer"), line
    assert not sweep.exists()


def test_a_job_refused_for_its_own_value_is_not_told_to_continue_as_it_was(tmp_path, capsys):
    """``seed=0,abc``: the sweep ended with "Continue the sweep with: ... seed=0,abc ... train.resume=auto" and
    nothing else, a command that refuses the job again (and a sweep continued with other values is refused)."""
    sweep = tmp_path / "sweep"
    code = run_command_inprocess(["seed=0,abc", "train.max_steps=1", "train.eval_every=1", f"hydra.sweep.dir={sweep}"])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 1 and "Continue the sweep with:" in text
    assert "1 job(s) (1_torch_sabc) were refused for their config: continuing the sweep with the same arguments " \
           "refuses them again" in text, text[-3000:]
    assert f"python -m scripts.compare {sweep} <the other sweep dir>" in text
