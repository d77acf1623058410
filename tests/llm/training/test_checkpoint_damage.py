"""Checkpoints damaged, replaced or gone, as a resume (``train.resume=auto`` or a path) and generation meet them: one
line naming the file, never a traceback, and never a run that goes on as another run or from another step unsaid."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from helpers import run_inprocess

from llm.errors import ConfigError, ResumeError
from llm.generation.load import load_run_model, open_run
from llm.training import checkpoint as checkpoint_mod
from llm.training.checkpoint import TrainTotals, find_resume_checkpoint, load_newest_checkpoint, save_checkpoint

STEPS = ["train.max_steps=6", "train.eval_every=3", "train.log_every=1", "train.ckpt_every=2", "train.stop_at_step=4"]


def saved_dir(tmp_path: Path, steps: tuple[int, ...] = (2, 4)) -> Path:
    """A checkpoints dir as a run's saves leave it (a tiny model, no optimizer), ``last.pt`` at the last step."""
    ckpt = tmp_path / "checkpoints"
    for step in steps:
        save_checkpoint(ckpt, step, torch.nn.Linear(2, 2), [], TrainTotals(), {"config": {"seed": 0}},
                        keep=len(steps))
    return ckpt


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """A run stopped at step 4 (checkpoints at 2 and 4), and another run of the same shape with another RoPE base."""
    root = tmp_path_factory.mktemp("runs")
    run_inprocess(root / "own", STEPS)
    run_inprocess(root / "other", [*STEPS, "rope.base=500"])
    return root / "own", root / "other"


@pytest.fixture
def run(runs, tmp_path) -> Path:
    """A copy of the stopped run, for one test to damage."""
    shutil.copytree(runs[0], tmp_path / "run", symlinks=True)  # last.pt stays a link, as a run leaves it
    return tmp_path / "run"


def test_a_torch_file_that_is_no_checkpoint_is_skipped_like_a_damaged_one(tmp_path, caplog):
    """A tensor saved over the newest checkpoint loads with torch.load: the resume took it as the checkpoint and
    failed with a traceback (``Tensor.__contains__``), and so did generation (``state["model"]``)."""
    ckpt = saved_dir(tmp_path)
    newest = ckpt / "step_0000004.pt"
    torch.save(torch.zeros(3), newest)
    path, state = find_resume_checkpoint("auto", ckpt)
    assert path.name == "step_0000002.pt" and state["step"] == 2
    assert f"checkpoint {newest} is not a checkpoint of a run (it holds a Tensor)" in caplog.text
    assert load_newest_checkpoint(ckpt, needs=("model",))[0].name == "step_0000002.pt"
    with pytest.raises(ResumeError, match=rf"train.resume={newest}: .* holds a Tensor") as e:
        find_resume_checkpoint(str(newest), ckpt)
    assert "\n" not in str(e.value)
    torch.save({"model": {}}, newest)  # another program's file: weights, no step or optimizer state
    with pytest.raises(ResumeError, match=r"it holds no step, optimizers, rng, config"):
        find_resume_checkpoint(str(newest), ckpt)


def test_a_checkpoint_without_its_run_s_config_is_not_resumed_with_the_command_s(tmp_path, caplog):
    """A file with a run's weights, optimizers, step and RNG but no saved config (written by hand, or by other code):
    the resume went on with the command's composed config, the defaults, whatever the run had trained with."""
    ckpt = saved_dir(tmp_path)
    newest = ckpt / "step_0000004.pt"
    state = torch.load(newest, weights_only=False)
    del state["config"]
    torch.save(state, newest)
    path, state = find_resume_checkpoint("auto", ckpt)
    assert path.name == "step_0000002.pt" and state["config"] == {"seed": 0}
    assert f"checkpoint {newest} is not a checkpoint of a run (it holds no config)" in caplog.text
    with pytest.raises(ResumeError, match=r"it holds no config\); give another checkpoint"):
        find_resume_checkpoint(str(newest), ckpt)


def test_a_truncated_checkpoint_is_named_in_one_sentence(tmp_path, caplog):
    """torch's zip reader follows its error with a paragraph of advice on the same line; the warning and the refusal
    carried all of it."""
    ckpt = saved_dir(tmp_path)
    for p in ckpt.glob("step_*.pt"):
        p.write_bytes(p.read_bytes()[:200])
    with pytest.raises(ResumeError, match=r"every checkpoint in .* is damaged") as e:
        find_resume_checkpoint("auto", ckpt)
    assert "If you are seeing" not in str(e.value) + caplog.text
    assert "start the run again in another hydra.run.dir" in str(e.value)


def test_a_checkpoint_cut_short_anywhere_is_skipped_for_the_one_before(tmp_path, caplog):
    """Cut in its first part, torch's zip reader raises an OSError (EINVAL) for a checkpoint, which was taken for a
    file the system would not let the process read: refused, where a checkpoint cut later was skipped. Every cut
    is damage: the resume and generation go on from the checkpoint before."""
    ckpt = saved_dir(tmp_path)
    newest = ckpt / "step_0000004.pt"
    whole = newest.read_bytes()
    for cut in range(0, len(whole), max(1, len(whole) // 23)):
        newest.write_bytes(whole[:cut])
        caplog.clear()
        path, state = find_resume_checkpoint("auto", ckpt)
        assert path.name == "step_0000002.pt" and state["step"] == 2, cut
        assert f"checkpoint {newest} is damaged" in caplog.text, cut
        assert load_newest_checkpoint(ckpt, needs=("model",))[0].name == "step_0000002.pt"


def test_an_unreadable_checkpoint_is_refused_not_skipped(tmp_path, monkeypatch):
    """A checkpoint the system will not let this process read (permissions, an I/O error) may be whole: the resume
    fell back past it, trained its steps again and replaced it at the next save."""
    ckpt = saved_dir(tmp_path)
    real = torch.load

    def load(path, *args, **kwargs):
        if Path(path).name == "step_0000004.pt":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint_mod.torch, "load", load)
    with pytest.raises(ResumeError, match=r"step_0000004.pt cannot be read \(Permission denied\): make it readable"):
        find_resume_checkpoint("auto", ckpt)
    real_error = OSError(22, "Invalid argument")  # a read the system failed on a whole file: not damage either

    def failing_read(path, *args, **kwargs):
        if Path(path).name == "step_0000004.pt":
            raise real_error
        return real(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint_mod.torch, "load", failing_read)
    with pytest.raises(ResumeError, match=r"step_0000004.pt cannot be read \(Invalid argument\): make it readable"):
        find_resume_checkpoint("auto", ckpt)


def test_last_pt_pointing_at_a_removed_file_is_said(tmp_path, caplog):
    """``last.pt`` pointing at a step file removed by hand: the resume took an older checkpoint without a word, and
    with no other checkpoint it said the run had stopped before its first one."""
    ckpt = saved_dir(tmp_path)
    (ckpt / "step_0000004.pt").unlink()
    assert find_resume_checkpoint("auto", ckpt)[0].name == "step_0000002.pt"
    assert "last.pt points to step_0000004.pt, which is missing" in caplog.text
    (ckpt / "step_0000002.pt").unlink()
    (tmp_path / "metrics.jsonl").write_text('{"kind": "train", "step": 1}\n')
    with pytest.raises(ResumeError, match=r"last.pt points to step_0000004.pt, which is missing, and .* no other"):
        find_resume_checkpoint("auto", ckpt)


def test_another_run_s_checkpoint_in_the_run_dir_is_refused(runs, run):
    """A checkpoint of another run copied over the run's newest: the resume took its config and trained the other
    run on in this dir, rewriting config.yaml and appending its steps to this run's metrics."""
    shutil.copy(runs[1] / "checkpoints" / "step_0000004.pt", run / "checkpoints" / "step_0000004.pt")
    before = {name: (run / name).read_text() for name in ("metrics.jsonl", "config.yaml")}
    for asked in ("auto", str(run / "checkpoints" / "step_0000004.pt")):
        with pytest.raises(ResumeError, match=r"step_0000004.pt holds another run than .*config.yaml: "
                                              r"rope.base=500(.0)? \(config.yaml: 10000(.0)?\); move it out") as e:
            run_inprocess(run, [f"train.resume={asked}"])
        assert "\n" not in str(e.value)
    assert {name: (run / name).read_text() for name in before} == before


def test_generation_refuses_another_model_s_newest_checkpoint(runs, run):
    """The same file read by generation: the run's model decoded the other run's weights with the run's rotation,
    and said nothing."""
    shutil.copy(runs[1] / "checkpoints" / "step_0000004.pt", run / "checkpoints" / "step_0000004.pt")
    opened = open_run(str(run))
    with pytest.raises(ConfigError, match=r"its newest checkpoint .*step_0000004.pt holds another model than its "
                                          r"config.yaml: rope.base=500"):
        load_run_model(opened, opened.config.rope, torch.device("cpu"))


def test_generation_refuses_another_seed_s_newest_checkpoint(run):
    """A checkpoint of the same model trained with another seed, copied in as the run's newest: generation and
    eval_lengths read it and recorded its output under this run's name, as docs/usage.md says they refuse."""
    newest = run / "checkpoints" / "step_0000004.pt"
    state = torch.load(newest, weights_only=False)
    state["config"]["seed"] = 1
    torch.save(state, newest)
    opened = open_run(str(run))
    with pytest.raises(ConfigError, match=r"its newest checkpoint .*step_0000004.pt holds another run than its "
                                          r"config.yaml: seed=1 \(config.yaml: 0\); move that file out") as e:
        load_run_model(opened, opened.config.rope, torch.device("cpu"))
    assert "\n" not in str(e.value)


def test_weights_that_do_not_fit_the_checkpoint_s_config_are_one_line(run):
    """A checkpoint whose weights are of another shape than its own config says: the resume's load_state_dict
    ended in a traceback."""
    newest = run / "checkpoints" / "step_0000004.pt"
    state = torch.load(newest, weights_only=False)
    state["model"]["embed.weight"] = torch.zeros(3, 3)
    torch.save(state, newest)
    with pytest.raises(ResumeError, match=r"step_0000004.pt: its weights do not fit the model of its config") as e:
        run_inprocess(run, ["train.resume=auto"])
    assert "\n" not in str(e.value)
