"""The data config (llm.data.config): every user mistake is one line naming the key, before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm.data import DataError, NetworkUnavailableError, check_data_config, prepare_data
from llm.errors import ConfigError, UserError

ROOT = Path(__file__).resolve().parents[3]


def test_missing_path_fails_before_any_work(tmp_path):
    cfg = {"name": "text_files", "path": "/x", "val_fraction": 0.05}
    with pytest.raises(ValueError) as err:
        check_data_config(cfg, "cl100k_base")
    assert str(err.value) == "data.path=/x does not exist"
    with pytest.raises(ValueError, match=r"^data\.path=/x does not exist$"):
        prepare_data(cfg, "cl100k_base", tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
    with pytest.raises(ValueError, match="data.path is required"):
        check_data_config({"name": "text_files", "path": None}, "cl100k_base")


def test_config_errors_name_the_key():
    with pytest.raises(ValueError) as err:
        check_data_config({"name": "wikipedia"}, "cl100k_base")
    msg = str(err.value)
    assert msg.startswith("data.name=wikipedia") and "pystdlib, tinystories, text_files" in msg
    assert "\n" not in msg
    with pytest.raises(ValueError, match="^tokenizer.name=nope is not a known tokenizer; choices: .*cl100k_base"):
        check_data_config({"name": "pystdlib"}, "nope")
    with pytest.raises(ValueError, match="data.val_fraction=1.5"):
        check_data_config({"name": "pystdlib", "val_fraction": 1.5}, "cl100k_base")
    with pytest.raises(ValueError, match="data.max_files=0"):
        check_data_config({"name": "pystdlib", "max_files": 0}, "cl100k_base")
    check_data_config({"name": "pystdlib", "val_fraction": 0.05, "max_files": None}, "cl100k_base")
    check_data_config({"name": "tinystories"}, "gpt2")  # no network needed to check


@pytest.mark.parametrize("cfg,message", [
    ({"name": None}, "data.name=None is not a known data source; choices: pystdlib, tinystories, text_files"),
    ({"name": ["pystdlib"]}, "data.name=['pystdlib'] is not a known data source"),
    ({"name": "pystdlib", "val_fraction": "a lot"}, "data.val_fraction=a lot must be a number in (0, 1)"),
    ({"name": "pystdlib", "val_fraction": True}, "data.val_fraction=True must be a number in (0, 1)"),
    ({"name": "pystdlib", "val_fraction": 0}, "data.val_fraction=0 must be a number in (0, 1)"),
    ({"name": "pystdlib", "max_files": 2.5}, "data.max_files=2.5 must be a positive integer or null"),
    ({"name": "pystdlib", "num_threads": -1}, "data.num_threads=-1 must be a positive integer or null"),
    ({"name": "pystdlib", "max_docs": 5},
     "data.max_docs is not a setting of data=pystdlib; its settings: num_threads, val_fraction, max_files"),
    ({"name": "text_files", "path": "{corpus}", "max_doc": 5}, "data.max_doc is not a setting of data=text_files"),
    ({"name": "text_files", "path": "{corpus}", "max_docs": True}, "data.max_docs=True must be a positive integer"),
    ({"name": "text_files", "path": "{corpus}", "text_field": ""}, "data.text_field= must be a non-empty column"),
    ({"name": "text_files", "path": "{corpus}", "id_field": 3}, "data.id_field=3 must be a non-empty column name"),
    ({"name": "text_files", "path": "{corpus}/a.md"}, "data.path={corpus}/a.md is not a .txt/.jsonl/.parquet file"),
    ({"name": "tinystories", "hf_path": ""}, "data.hf_path= must be a non-empty hub dataset path"),
    ({"name": "tinystories", "revision": ["main"]}, "data.revision=['main'] must be a hub commit, branch or tag, or "
                                                    "null"),
    ({"name": "hf_dataset", "hf_path": "owner/name", "revision": True},  # the two hub sources read it alike
     "data.revision=True must be a hub commit, branch or tag, or null"),
    ({"name": "tinystories", "val_fraction": 0.1}, "data.val_fraction is not a setting of data=tinystories"),
])
def test_every_bad_value_is_one_line_naming_the_key(tmp_path, cfg, message):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("a document")
    (corpus / "a.md").write_text("not a supported file")
    cfg = {k: v.format(corpus=corpus) if isinstance(v, str) else v for k, v in cfg.items()}
    message = message.format(corpus=corpus)
    with pytest.raises(DataError) as err:
        check_data_config(cfg, "cl100k_base")
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert isinstance(err.value, ValueError)
    with pytest.raises(DataError, match="^" + str(err.value).replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]").replace(".", r"\.") + "$"):
        prepare_data(cfg, "cl100k_base", tmp_path / "cache")  # prepare_data runs the same check first
    assert not (tmp_path / "cache").exists()


def test_omegaconf_config_files():
    from omegaconf import OmegaConf

    conf = ROOT / "conf"
    for name in ("pystdlib", "tinystories", "text_files"):
        text = (conf / "data" / f"{name}.yaml").read_text()
        assert text.startswith("# @package data")
        cfg = OmegaConf.load(conf / "data" / f"{name}.yaml")
        assert cfg.name == name
        if name != "text_files":
            check_data_config(cfg, "cl100k_base")
    for name in ("cl100k_base", "gpt2"):
        text = (conf / "tokenizer" / f"{name}.yaml").read_text()
        assert text.startswith("# @package tokenizer")
        assert OmegaConf.load(conf / "tokenizer" / f"{name}.yaml").name == name
    cfg = OmegaConf.load(conf / "data" / "text_files.yaml")
    with pytest.raises(ValueError, match="data.path is required"):
        check_data_config(cfg, "cl100k_base")


def test_config_files_set_only_keys_their_source_reads(tmp_path):
    """Every key of conf/data/<name>.yaml passes the unknown-key check (and so do CLI overrides of them)."""
    from omegaconf import OmegaConf

    (tmp_path / "a.txt").write_text("a document")
    for name in ("pystdlib", "tinystories", "text_files"):
        cfg = OmegaConf.load(ROOT / "conf" / "data" / f"{name}.yaml")
        if name == "text_files":
            cfg.path = str(tmp_path)
        check_data_config(cfg, "cl100k_base")


def test_data_errors_are_user_errors():
    """The CLI prints a UserError as its one line (no traceback): every error a user can cause here is one."""
    assert issubclass(DataError, ConfigError) and issubclass(DataError, ValueError)
    assert issubclass(NetworkUnavailableError, UserError) and issubclass(NetworkUnavailableError, RuntimeError)
    with pytest.raises(ConfigError, match="^tokenizer.name=nope is not a known tokenizer"):
        check_data_config({"name": "pystdlib"}, "nope")
