"""A key removed with ``~`` from a group its module checks (``model``, ``rope``, ``data``) is refused, as one of
the other groups is: the module would fill in its own default, so ``rope=torch_full ~rope.variant`` would train the
partial rotation. And a key an experiment or recipe sets counts as known only when that experiment or recipe is
chosen, and under a group only where the chosen option reads it (``+optim.muon_lr=0.1`` with ``optim=adamw``)."""

from __future__ import annotations

import pytest
from helpers import CONF
from hydra import compose, initialize_config_dir

from llm.config_check import check_config_keys
from llm.config_schema import schema
from llm.errors import ConfigError


def composed(overrides: list[str]):
    """The command's config with Hydra's node, whose ``runtime.choices`` say which experiment it chose."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=True)


@pytest.mark.parametrize("overrides,key", [
    (["rope=torch_full", "~rope.variant"], "rope.variant"),
    (["~rope.name"], "rope.name"),
    (["~rope.scaling"], "rope.scaling.factor"),
    (["model=seed004", "~model.dropout"], "model.dropout"),
    (["~model.name"], "model.name"),
    (["~model.n_layer"], "model.n_layer"),
    (["~data.packing"], "data.packing"),
    (["data=text_files", "~data.text_field"], "data.text_field"),
])
def test_a_key_removed_from_a_self_checked_group_is_refused(overrides, key):
    with pytest.raises(ConfigError, match=rf"^{key} is missing: a run reads it \(was it removed with ~{key}"):
        check_config_keys(composed(overrides))


@pytest.mark.parametrize("overrides", [
    ["+rope.max_seq_len=256", "+model.d_ff=64", "+rope.scaling.beta_fast=16"],  # keys added to them stay theirs
    ["model=seed004", "model.d_ff=null"],  # null, not ~, is how a preset's setting goes back to the default
    ["+experiment=seed004"],
    ["+experiment=length_finetune", "finetune.source=x"],
    ["+experiment=fidelity", "optim.muon_lr=0.3"],
    ["+experiment=seed004", "optim=adamw", "~optim.muon_lr", "~optim.adamw_lr"],
])
def test_what_a_run_reads_passes(overrides):
    check_config_keys(composed(overrides))


def test_generate_s_unchosen_rope_is_not_a_removed_one():
    """generate.yaml chooses no rope by default: the run's apply, so none of rope's keys is missing."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        assert schema("generate").problems(compose("generate")) == []
        cfg = compose("generate", overrides=["rope=triton_v4", "~rope.layout"])
    assert schema("generate").problems(cfg)[0].startswith("rope.layout is missing")


@pytest.mark.parametrize("overrides,line", [
    (["+optim.muon_lr=0.1"], "optim.muon_lr is a key of optim=muon only, not of optim=adamw, so nothing would read it; "
                            "did you mean optim.lr?"),
    (["+finetune.source=x"], "finetune.source is a key of +experiment=length_finetune only, not of this command, "),
    (["+recipe=seed004", "+finetune.source=x"], "finetune.source is a key of +experiment=length_finetune only, "),
    (["+experiment=seed004", "optim=adamw"], "optim.adamw_lr is a key of optim=muon only, not of optim=adamw, so "
                                             "nothing would read it"),
])
def test_a_key_only_an_unchosen_option_or_experiment_reads_is_refused(overrides, line):
    with pytest.raises(ConfigError) as refused:
        check_config_keys(composed(overrides))
    assert str(refused.value).startswith(line), refused.value
    if "+experiment=seed004" in overrides:  # the command did not type it: say where it came from
        assert "+experiment=seed004 sets it: remove it with ~optim.adamw_lr" in str(refused.value)
