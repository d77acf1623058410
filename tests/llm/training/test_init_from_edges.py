"""``train.init_from`` given a source run that is damaged, unfinished, of another model, or trained with another
rotation or scaling: refused in one line naming the key before any data or model work, or started with a line
that says what differs (never silently).

The source runs here are written by hand (a config, a checkpoint, a summary), not trained: what is checked reads
their files, and a real run would cost seconds per test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

import llm.training.run as run_mod
from llm.errors import ConfigError
from llm.training.init_from import apply_init_from, check_init_from, default_original_length, init_from_notes

FINETUNE = ["model.seq_len=64", "rope.scaling.type=yarn", "rope.scaling.factor=2"]
CONF = Path(__file__).resolve().parents[3] / "conf"
#: A CPU-sized model: nothing here reaches the data, so only the model and run keys matter.
SMALL = ["model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.seq_len=32", "tokenizer=bytes",
         "train.batch_size=4", "logger=none"]


def compose_cfg(overrides: list[str]) -> DictConfig:
    """The composed config of ``python -m llm.train`` with SMALL's overrides, then ``overrides``."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=[*SMALL, *overrides])


def run_inprocess(run_dir: Path, overrides: list[str]) -> dict:
    """Train through the entry point's ``train`` in this process, as the command line would."""
    from llm.train import train

    return train(compose_cfg(overrides), run_dir, overrides=tuple(overrides))


def make_source(root: Path, overrides: tuple[str, ...] = (), status: str | None = "completed") -> Path:
    """A run dir as a finished run leaves it, from the SMALL config with ``overrides``: ``config.yaml``, a
    checkpoint holding that config, and a ``summary.json`` of ``status`` (None: no summary)."""
    cfg = compose_cfg(["train.max_steps=4", *overrides])
    run = root / "source"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    torch.save({"model": {"w": torch.zeros(1)}, "config": OmegaConf.to_container(cfg, resolve=True), "step": 2},
               run / "checkpoints" / "last.pt")
    if status is not None:
        (run / "summary.json").write_text(json.dumps({"status": status, "step": 2, "max_steps": 4}))
    return run


def notes_for(source: Path, *overrides: str) -> list[str]:
    """The lines a fine-tune of ``source`` with ``overrides`` logs about its start."""
    cfg = compose_cfg([f"train.init_from={source}", *overrides])
    found = check_init_from(cfg)
    assert found is not None
    return init_from_notes(cfg, found)


@pytest.fixture
def no_trainer(monkeypatch):
    """Fail the test if the run gets as far as the data and the model (the Trainer)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the run reached the data and model work")

    monkeypatch.setattr(run_mod, "Trainer", refuse)


def test_a_damaged_config_of_the_source_is_one_line_naming_the_key(tmp_path):
    source = make_source(tmp_path)
    (source / "config.yaml").write_text("model: [unclosed\n  x: {")
    with pytest.raises(ConfigError, match=rf"train.init_from={source}: .*config.yaml is damaged or unreadable") as e:
        check_init_from(compose_cfg([f"train.init_from={source}", *FINETUNE]))
    assert "\n" not in str(e.value)
    (source / "config.yaml").write_text("- a list\n- not a config\n")
    with pytest.raises(ConfigError, match=r"config.yaml holds no config"):
        check_init_from(compose_cfg([f"train.init_from={source}", *FINETUNE]))


def test_damaged_checkpoints_of_a_source_without_config_name_the_key(tmp_path):
    source = make_source(tmp_path)
    (source / "config.yaml").unlink()
    (source / "checkpoints" / "last.pt").write_bytes(b"junk")
    with pytest.raises(ConfigError, match=rf"train.init_from={source}: every checkpoint in .* is damaged"):
        check_init_from(compose_cfg([f"train.init_from={source}", *FINETUNE]))


def test_a_checkpoint_of_another_model_is_refused_before_any_work(tmp_path, no_trainer):
    """A checkpoint copied in from another run: its config says so, and the run is refused before it reads data
    or builds a model, leaving no run dir, not later when the weights fail to load."""
    source = make_source(tmp_path)
    other = torch.load(source / "checkpoints" / "last.pt", weights_only=False)
    other["config"]["model"]["n_layer"] = 2
    torch.save(other, source / "checkpoints" / "last.pt")
    with pytest.raises(ConfigError, match=r"checkpoint .*last.pt holds another model than the run's config.yaml: "
                                          r"model.n_layer=2 \(config.yaml: 1\)") as e:
        run_inprocess(tmp_path / "ft", [f"train.init_from={source}", *FINETUNE])
    assert "\n" not in str(e.value) and not (tmp_path / "ft" / "config.yaml").exists()


def test_a_file_without_weights_is_refused_not_a_traceback(tmp_path, no_trainer):
    source = make_source(tmp_path)
    torch.save({"step": 2}, source / "checkpoints" / "last.pt")
    with pytest.raises(ConfigError, match=r"last.pt holds no model weights"):
        run_inprocess(tmp_path / "ft", [f"train.init_from={source}", *FINETUNE])


@pytest.mark.parametrize("trained,fine_tuned,says", [
    ("rope=torch", "rope=none", "rope.name='none' rotates nothing, while the weights of train.init_from="),
    ("rope=none", "rope=torch", "rope.name='torch' rotates, while the weights of train.init_from="),
])
def test_a_rotation_added_or_removed_is_said(tmp_path, trained, fine_tuned, says):
    """rope=none and rope=torch share every rotation key, so only their names tell the weights' rotation away."""
    notes = notes_for(make_source(tmp_path, (trained,)), *FINETUNE, fine_tuned)
    assert any(says in n for n in notes), notes


def test_the_same_rotation_in_another_implementation_is_not_a_note(tmp_path):
    assert notes_for(make_source(tmp_path, ("rope=torch",)), *FINETUNE, "rope=torch_bf16") == []


def test_dropping_the_scaling_the_source_was_trained_with_is_said(tmp_path):
    """A run fine-tuned with YaRN is trained on without it: its weights rotated with the scaling."""
    source = make_source(tmp_path, ("model.seq_len=64", "rope.scaling.type=yarn", "rope.scaling.factor=2",
                                    "rope.scaling.original_max_seq_len=32"))
    notes = notes_for(source, "model.seq_len=64")
    assert any("rope.scaling=none differs from {'type': 'yarn', 'factor': 2" in n for n in notes), notes
    same = notes_for(source, "model.seq_len=64", "rope.scaling.type=yarn", "rope.scaling.factor=2",
                     "rope.scaling.original_max_seq_len=32")
    assert same == [], "the source's own scaling: nothing to say"


@pytest.mark.parametrize("status,says", [
    ("interrupted", "did not complete (status 'interrupted', step 2 of 4): its newest checkpoint is taken as it is"),
    ("running", "did not complete (status 'running', step 2 of 4)"),
    (None, "has no readable summary.json"),
])
def test_an_unfinished_source_is_said(tmp_path, status, says):
    notes = notes_for(make_source(tmp_path, status=status), *FINETUNE)
    assert any(says in n for n in notes), notes


def test_weights_that_do_not_fit_name_the_tensor():
    """torch's first line of a failed load says only that it failed; the refusal names what does not fit."""
    with pytest.raises(ConfigError, match=r"does not fit this model \(size mismatch for weight"):
        apply_init_from(torch.nn.Linear(2, 3), Path("x.pt"), 1, {"weight": torch.zeros(4, 2), "bias": torch.zeros(3)})


def test_a_scaled_source_lends_its_own_original_length(tmp_path):
    """A run fine-tuned at 64 with YaRN from 32, extended again: its positions stretch from 32, as
    ``llm.eval_lengths`` evaluates it, not from 64 (another YaRN ramp than its weights were trained with)."""
    source = make_source(tmp_path, ("model.seq_len=64", "rope.scaling.type=yarn", "rope.scaling.factor=2",
                                    "rope.scaling.original_max_seq_len=32"))
    cfg = compose_cfg([f"train.init_from={source}", "model.seq_len=128", "rope.scaling.type=yarn",
                       "rope.scaling.factor=4"])
    found = check_init_from(cfg)
    assert found is not None
    note = default_original_length(cfg, found)
    assert cfg.rope.scaling.original_max_seq_len == 32
    assert note is not None and "32, the rope.scaling.original_max_seq_len of the run" in note
    assert not any("original_max_seq_len=32 is not" in n for n in init_from_notes(cfg, found))


def test_a_fine_tune_records_its_source_and_keeps_it_through_a_resume(tmp_path, monkeypatch):
    """The run's only record of its source was train.init_from as typed, which a relative path leaves to the working
    directory: its summary names the source's dir and checkpoint absolutely, the step and the source's data and
    code, and its checkpoints carry that into a resumed run's summary."""
    from helpers import run_inprocess as train_small

    monkeypatch.chdir(tmp_path)
    source = train_small(tmp_path / "source", ["train.max_steps=2", "train.eval_every=2"])
    tune = ["train.init_from=source", "train.max_steps=2", "train.eval_every=2"]
    train_small(tmp_path / "tune", [*tune, "train.stop_at_step=1"])
    want = {"run": str((tmp_path / "source").resolve()),
            "checkpoint": str((tmp_path / "source" / "checkpoints" / "last.pt").resolve()), "step": 2,
            "data_id": source["data_fingerprint"]["id"], "git_commit": source["git_commit"],
            "code_fingerprint": source["code_fingerprint"]}
    first = json.loads((tmp_path / "tune" / "summary.json").read_text())
    assert first["status"] == "interrupted" and first["init_from"] == want
    done = train_small(tmp_path / "tune", [*tune, "train.resume=auto"])
    assert done["status"] == "completed" and done["init_from"] == want
    assert json.loads((tmp_path / "tune" / "summary.json").read_text())["init_from"] == want
