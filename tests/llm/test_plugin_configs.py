"""A RoPE implementation added out of tree (a plugin: registered by its own package, its config file in a
``--config-dir`` of its own) is refused like a built-in one: each mistake is one line naming the key and what is
allowed, exit code 2, before any work and without leaving a run dir.

Before, an implementation's own check raising a plain ValueError (``block_size must be a positive int``) or its
constructor refusing a value was a 50-line traceback from the model's construction that left a failed run dir;
a plugin registered under the name of a project's preset (``torch_full``) trained the preset's ``rope=torch``
with exit code 0; and ``rope=kw_rope`` without ``--config-dir`` did not say that the name is registered.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import SMALL, compose_cfg, run_module_main
from omegaconf import OmegaConf

import rope
from llm.config_check import validate_config
from llm.config_schema import unknown_option_note
from llm.errors import ConfigError


class KwRope(rope.RotaryEmbedding):
    """A plugin with an option of its own: ``check_options`` refuses a block size below 1, and the constructor
    reads it with ``int()``, which refuses what the check lets through (a string, a list)."""

    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0, variant: str = "partial",
                 layout: str = "half", rotary_dim: int | None = None, scaling: dict | None = None,
                 block_size: int = 4) -> None:
        super().__init__(head_dim, max_seq_len, base, variant, layout, rotary_dim, scaling)
        self.block_size = int(block_size)

    @classmethod
    def check_options(cls, options: dict[str, object]) -> None:
        size = options["block_size"]
        if isinstance(size, int) and size < 1:
            raise ValueError(f"block_size must be a positive int, got {size}")

    def rotate(self, q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor | None):
        return q.clone(), None if k is None else k.clone()


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch) -> Path:
    """KwRope registered as ``kw_rope`` in this process (undone after the test), and a config dir holding its config
    file as docs/usage.md says to write it (plus its option): the ``--config-dir`` to give."""
    monkeypatch.setitem(rope.registry._REGISTRY, "kw_rope", KwRope)
    monkeypatch.setattr(KwRope, "registry_name", "kw_rope")
    conf = tmp_path / "plugin_conf"
    (conf / "rope").mkdir(parents=True)
    (conf / "rope" / "kw_rope.yaml").write_text("# @package rope\nname: kw_rope\nvariant: partial\nbase: 10000.0\n"
                                                "block_size: 4\n")
    return conf


def _refused(monkeypatch, capsys, tmp_path: Path, args: list[str]) -> list[str]:
    """``python -m llm.train`` in this process with ``args``: it must exit 2 before any work and leave no run dir;
    returns its stderr lines."""
    import llm.training.run as run

    def no_work(*a, **k):
        raise AssertionError("the run started its work")

    monkeypatch.setattr(run, "Trainer", no_work)  # the data and the model: a refusal comes before them
    flags = [a for a in args if a.startswith("-")]
    code, err = run_module_main(monkeypatch, capsys, "llm.train", [
        *flags, *SMALL, *[a for a in args if not a.startswith("-")], f"hydra.run.dir={tmp_path / 'day' / 'run'}",
        "hydra/job_logging=none", "hydra/hydra_logging=none"])
    assert code == 2, err
    assert not (tmp_path / "day").exists(), "a command refused before any work leaves no run dir"
    return err


def test_a_plugin_s_own_settings_pass_the_config_check(plugin):
    cfg = compose_cfg(["rope=torch"])
    cfg.rope = OmegaConf.load(plugin / "rope" / "kw_rope.yaml")
    validate_config(cfg)


@pytest.mark.parametrize("override,line", [
    # check_options raising a plain ValueError, which names the option
    ("rope.block_size=0", "rope.block_size=0: block_size must be a positive int, got 0"),
    # the constructor's int() (no check of check_options): the value it quotes names the option
    ("rope.block_size=abc", "rope.block_size=abc: invalid literal for int() with base 10: 'abc'"),
    # a message naming neither: the rope group
    ("rope.block_size=[1]", "rope=kw_rope: int() argument must be a string, a bytes-like object or a real number, "
                            "not 'ListConfig'"),
])
def test_an_implementation_s_own_value_error_is_one_line_naming_the_key(plugin, tmp_path, monkeypatch, capsys,
                                                                        override, line):
    err = _refused(monkeypatch, capsys, tmp_path, [f"--config-dir={plugin}", "rope=kw_rope", override])
    assert err == [f"Error: {line}"]


def test_a_plugin_registered_under_a_preset_s_name_is_refused(plugin, tmp_path, monkeypatch, capsys):
    """``@register("torch_full")``: rope=torch_full composes the project's preset (rope.name=torch), not the user's
    config file of that name, so it would train rope=torch, with exit code 0."""
    monkeypatch.setitem(rope.registry._REGISTRY, "torch_full", KwRope)
    (plugin / "rope" / "torch_full.yaml").write_text("# @package rope\nname: torch_full\nvariant: partial\n")
    err = _refused(monkeypatch, capsys, tmp_path, [f"--config-dir={plugin}", "rope=torch_full"])
    assert err == ["Error: rope=torch_full is the project's preset conf/rope/torch_full.yaml, which trains "
                   "rope.name=torch; the implementation registered as torch_full is not used, as a config file of "
                   "that name in --config-dir does not replace the preset: register it under another name"]


def test_a_preset_of_another_implementation_is_still_accepted(monkeypatch):
    """The refusal above needs the option's name to be registered: rope=torch_full (no such implementation)
    trains rope=torch, as the project means it to; with a registered torch_full the same config is refused."""
    import llm.config_check as config_check

    monkeypatch.setattr(config_check, "_chosen_option", lambda group: "torch_full")  # as Hydra's runtime.choices
    cfg = compose_cfg(["rope=torch_full"])
    assert "torch_full" not in rope.available() and cfg.rope.name == "torch"
    validate_config(cfg)
    monkeypatch.setitem(rope.registry._REGISTRY, "torch_full", KwRope)
    with pytest.raises(ConfigError, match=r"^rope=torch_full is the project's preset "):
        validate_config(cfg)


def test_a_config_file_of_one_s_own_named_after_another_implementation_is_refused(plugin, monkeypatch):
    """``DIR/rope/kw_rope.yaml`` holding ``name: torch`` while kw_rope is registered: rope=kw_rope would train
    rope=torch."""
    import llm.config_check as config_check

    monkeypatch.setattr(config_check, "_chosen_option", lambda group: "kw_rope")
    with pytest.raises(ConfigError) as exc:
        validate_config(compose_cfg(["rope=torch"]))
    assert str(exc.value) == ("rope=kw_rope: its config file rope/kw_rope.yaml trains rope.name=torch, while kw_rope "
                              "is a registered implementation of its own: name the file after the implementation it "
                              "trains")


def test_a_registered_name_without_its_config_file_says_where_it_goes(plugin, tmp_path, monkeypatch, capsys):
    """``rope=kw_rope`` without ``--config-dir``: the line refusing the option says that the name is registered and
    where its config file is to be given."""
    err = _refused(monkeypatch, capsys, tmp_path, ["rope=kw_rope"])
    assert err[-1].startswith("Error: rope=kw_rope is not an option of rope; allowed: ")
    assert err[-1].endswith(
        "; kw_rope is a registered RoPE implementation, whose config file DIR/rope/kw_rope.yaml (# @package rope, "
        "name: kw_rope) must be given with --config-dir=DIR")
    assert unknown_option_note("rope", "nope") == ""
    assert unknown_option_note("model", "kw_rope") == ""


def test_a_plugin_left_out_is_refused_with_why(monkeypatch):
    """A plugin that failed to import is not registered: the line refusing its name says why, as the warning that
    ``import rope`` printed about it has scrolled away by then."""
    reason = "RoPE plugin 'kw_broken' = 'kwbroken' (package kwbroken) failed to import: ModuleNotFoundError: x"
    monkeypatch.setitem(rope.registry._PLUGIN_FAILURES, "kw_broken", reason)
    cfg = compose_cfg(["rope=torch"])
    cfg.rope.name = "kw_broken"
    with pytest.raises(ConfigError) as exc:
        validate_config(cfg)
    assert str(exc.value).startswith(f"rope.name='kw_broken' is not registered ({reason}); allowed: ")
