"""``python -m llm.eval_lengths`` on run dirs and output dirs a user may hand it damaged: one line naming ``run=``
before any work, an earlier result never overwritten unread, and a data cache built with its progress shown."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
from helpers import eval_lengths_inprocess, run_inprocess

import llm.evaluation.lengths as lengths_mod
from llm.errors import ConfigError, UserError


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("edges") / "run"
    run_inprocess(run_dir, ["train.max_steps=2", "train.eval_every=2", "device=cpu"])
    return run_dir


def run_eval(run_dir, *overrides) -> tuple[dict, list[str]]:
    return eval_lengths_inprocess(run_dir, "lengths=[32]", "tokens=128", *overrides)


def no_work(monkeypatch) -> None:
    def never(*a, **k):
        raise AssertionError("work began before the input was checked")

    monkeypatch.setattr(lengths_mod, "prepare_data", never)
    monkeypatch.setattr(lengths_mod, "load_run_model", never)


@pytest.mark.parametrize("text,message", [
    ("model: [[[\n", "config.yaml is damaged or unreadable"),
    ("", "config.yaml holds no model group"),
    ("- a list\n", "config.yaml holds no model group"),
    ("seed: 0\nrope: {name: torch}\n", "config.yaml holds no model group"),
    ("model: {n_layer: 1}\nrope: {}\ndata: {}\ntokenizer: {}\ntrain: {}\n", "config.yaml holds no model.seq_len"),
    ("model:\n  seq_len: ${nope}\n", "config.yaml is damaged or unreadable"),  # an interpolation to nothing
])
def test_a_damaged_run_config_is_one_line_naming_run(trained_run, tmp_path, monkeypatch, text, message):
    run = tmp_path / "run"
    shutil.copytree(trained_run / "checkpoints", run / "checkpoints")
    (run / "config.yaml").write_text(text)
    no_work(monkeypatch)
    with pytest.raises(ConfigError, match=f"run={run}: .*{message}") as e:
        run_eval(run)
    assert "\n" not in str(e.value)


def test_an_output_dir_that_cannot_be_written_is_refused_before_any_work(trained_run, tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run, ignore=shutil.ignore_patterns(lengths_mod.OUT_DIR))
    (run / lengths_mod.OUT_DIR).write_text("")  # a file where the results dir goes: no result can be written
    no_work(monkeypatch)
    with pytest.raises(ConfigError, match=f"run={run}: its results cannot be written to .*a file, not a directory"):
        run_eval(run)
    (run / lengths_mod.OUT_DIR).unlink()

    def read_only(*a, **k):  # a run dir this user may not write (a test as root cannot chmod one away)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(lengths_mod.tempfile, "NamedTemporaryFile", read_only)
    with pytest.raises(ConfigError, match=f"run={run}: its results cannot be written to .*Permission denied"):
        run_eval(run)
    assert not (run / lengths_mod.OUT_DIR).exists(), "a refusal leaves no empty results dir"


def test_an_unreadable_earlier_result_is_moved_aside_not_overwritten(trained_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run, ignore=shutil.ignore_patterns(lengths_mod.OUT_DIR))
    out = run / lengths_mod.OUT_DIR
    out.mkdir()
    for text in ('{"label": "mine", "lengths": [', '{"lengths": [{"val_loss": 1.0}]}'):  # torn; no length per entry
        (out / "mine.json").write_text(text)
        _, lines = run_eval(run, "label=mine")
        assert [m["length"] for m in json.loads((out / "mine.json").read_text())["lengths"]] == [32]
        assert any("does not read as an evaluation record" in line for line in lines)
        assert text in [p.read_text() for p in (out / lengths_mod.SUPERSEDED_DIR).glob("mine-*.json")]


def test_building_the_data_cache_shows_its_progress(trained_run, tmp_path, monkeypatch):
    """The command runs without Hydra's logging: the cache build's lines come through its own output."""
    monkeypatch.setattr(logging.getLogger("llm"), "propagate", False)  # no handler above, as in the command
    monkeypatch.setattr(logging.getLogger("llm.data"), "handlers", [])
    _, lines = run_eval(trained_run, f"cache_dir={tmp_path / 'cache'}", "label=cache")
    assert any(line.startswith("preparing ") for line in lines), lines
    assert any(line.startswith("built ") for line in lines), lines


def test_a_run_whose_every_checkpoint_is_damaged_is_refused_before_its_data_is_read(trained_run, tmp_path,
                                                                                     monkeypatch):
    """The weights load before the val split is read or tokenized (minutes on a large corpus): a run whose every
    checkpoint is damaged is refused at once, not after the data work."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run, symlinks=True)
    for ckpt in (run / "checkpoints").glob("*.pt"):
        if not ckpt.is_symlink():
            ckpt.write_bytes(b"not a checkpoint")

    def never(*a, **k):
        raise AssertionError("the data was read before the checkpoint was")

    monkeypatch.setattr(lengths_mod, "prepare_data", never)
    with pytest.raises(UserError, match="every checkpoint in .* is damaged"):  # the command's one line
        run_eval(run)
