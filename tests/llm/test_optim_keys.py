"""The optimizer settings come from ``conf/optim/`` alone: ``llm.optim`` holds no default of its own, reads every key
its option's file sets, and refuses a config without one, naming the key, instead of filling in a value that no
config file says."""

from __future__ import annotations

import pytest
import torch
from helpers import CONF
from omegaconf import OmegaConf

from llm.optim import KEYS, OPTIMIZERS, build_optimizers, check_optim_config


def _file(name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(CONF / "optim" / f"{name}.yaml"))


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_the_keys_read_are_the_keys_its_config_file_sets(name):
    """A key added to the file and not to KEYS would be read unchecked; one in KEYS and not in the file, refused."""
    assert set(KEYS[name]) == set(_file(name)) - {"name"}


@pytest.mark.parametrize(("name", "key"), [(name, key) for name in OPTIMIZERS for key in KEYS[name]])
def test_a_config_without_a_key_is_refused_naming_it(name, key):
    cfg = _file(name)
    del cfg[key]
    with pytest.raises(ValueError, match=rf"^optim\.{key} is missing: optim={name} reads it \(conf/optim/{name}\.yaml"):
        check_optim_config(cfg)


def test_the_config_files_values_are_the_ones_the_optimizers_get():
    model = torch.nn.Sequential()
    model.add_module("blocks", torch.nn.Sequential(torch.nn.Linear(4, 4, bias=False)))
    model.add_module("embed", torch.nn.Embedding(8, 4))
    muon_file = _file("muon")
    muon, adamw = build_optimizers(model, muon_file, torch.device("cpu"))
    (group,) = muon.param_groups
    assert {k: group[k] for k in ("momentum", "nesterov", "ns_steps", "weight_decay")} == \
        {k: muon_file[k] for k in ("momentum", "nesterov", "ns_steps", "weight_decay")}
    assert (adamw.param_groups[0]["betas"], adamw.param_groups[0]["eps"]) == (tuple(muon_file["betas"]),
                                                                              muon_file["eps"])
    adamw_file = _file("adamw")
    (only,) = build_optimizers(model, adamw_file, torch.device("cpu"))
    decayed = only.param_groups[0]
    assert (decayed["weight_decay"], decayed["betas"], decayed["eps"]) == (
        adamw_file["weight_decay"], tuple(adamw_file["betas"]), adamw_file["eps"])
