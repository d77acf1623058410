"""A preset of the user's own, in a config dir given with ``--config-dir`` or ``hydra.searchpath`` (Hydra's way to add
options to a group), trains as written, or is refused in one line that says what to change.

Before, a user's ``DIR/model/small.yaml`` lost to the project's ``conf/model/small.yaml`` (Hydra takes the first
file of a name in its search path, and ``conf/`` comes first): the project's 8-layer model trained in place of the
user's, exit code 0, without a word. And a preset of the user's that leaves out a key the run reads was refused as
if the key had been removed with ``~`` (or ``rope.name`` set by itself), which the user had not done.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import CONF, SMALL, run_module_main
from hydra import compose, initialize_config_dir

from llm.config_check import check_config_keys, shadowed_preset_line
from llm.errors import ConfigError

TINY_MODEL = "# @package model\nname: {name}\nn_layer: 1\nn_head: 2\nn_embd: 32\nseq_len: 32\n"


def _compose(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=True)


def _user_dir(tmp_path: Path, files: dict[str, str]) -> Path:
    """A config dir of the user's holding ``files`` (``model/small.yaml`` -> its text)."""
    conf = tmp_path / "my_conf"
    for name, text in files.items():
        (conf / name).parent.mkdir(parents=True, exist_ok=True)
        (conf / name).write_text(text)
    return conf


def test_a_user_preset_named_as_a_project_preset_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    import llm.training.run as run

    def no_work(*a, **k):
        raise AssertionError("the run started its work")

    monkeypatch.setattr(run, "Trainer", no_work)
    conf = _user_dir(tmp_path, {"model/small.yaml": TINY_MODEL.format(name="small")})
    code, err = run_module_main(monkeypatch, capsys, "llm.train", [
        f"--config-dir={conf}", *[o for o in SMALL if not o.startswith("model.")], "model=small",
        f"hydra.run.dir={tmp_path / 'day' / 'run'}", "hydra/job_logging=none", "hydra/hydra_logging=none"])
    assert code == 2, err
    assert err == [f"Error: model=small composes {CONF / 'model' / 'small.yaml'}, not {conf / 'model' / 'small.yaml'}: "
                   f"Hydra takes the first model/small.yaml of its search path, and {CONF} comes first; give your "
                   "file a name of its own (model/my_small.yaml) and choose it with model=my_small"]
    assert not (tmp_path / "day").exists(), "a command refused before any work leaves no run dir"


def test_hydra_searchpath_is_checked_too_and_a_preset_of_its_own_name_passes(tmp_path):
    conf = _user_dir(tmp_path, {"model/small.yaml": TINY_MODEL.format(name="small"),
                                "model/mini.yaml": TINY_MODEL.format(name="mini")})
    with pytest.raises(ConfigError, match=r"^model=small composes .*conf/model/small\.yaml, not "):
        check_config_keys(_compose([f"hydra.searchpath=[file://{conf}]", "model=small"]))
    cfg = _compose([f"hydra.searchpath=[file://{conf}]", "model=mini"])
    assert cfg.model.n_layer == 1
    check_config_keys(cfg)


def test_a_dir_listed_twice_in_the_search_path_hides_nothing(tmp_path):
    """``--config-dir`` naming the project's own conf/ (or a relative path to it) holds the same file, not another."""
    sources = [{"path": str(CONF), "schema": "file", "provider": "main"},
               {"path": "conf", "schema": "file", "provider": "command-line"},
               {"path": "hydra.conf", "schema": "pkg", "provider": "hydra"}]
    assert shadowed_preset_line({"model": "small", "hydra/callbacks": None}, sources, str(CONF.parent)) is None


@pytest.mark.parametrize("group,text,key,base", [
    ("rope", "# @package rope\nname: torch\nvariant: full\nbase: 500000.0\n", "rope.compute_dtype", "torch"),
    ("train", "# @package train\nmax_steps: 4\n", "train.attention", "default"),
])
def test_a_user_preset_that_leaves_out_a_key_is_told_to_set_it_or_build_on_a_preset(tmp_path, group, text, key, base):
    conf = _user_dir(tmp_path, {f"{group}/mine.yaml": text})
    with pytest.raises(ConfigError) as refused:
        check_config_keys(_compose([f"hydra.searchpath=[file://{conf}]", f"{group}=mine"]))
    assert str(refused.value) == (
        f"{key} is missing: a run reads it, and {group}=mine (a config file of yours, not in conf/) does not set it: "
        f"set it there, or build the file on a preset of the project's by starting it with `defaults: [{base}]`")
    (conf / group / "mine.yaml").write_text(text.replace("\n", f"\ndefaults:\n  - {base}\n", 1))  # as the line says
    check_config_keys(_compose([f"hydra.searchpath=[file://{conf}]", f"{group}=mine"]))
