"""Mistakes in choosing a config group or a device, each refused in one line before any work: a group given null
or a number (``rope=null``: a traceback out of Hydra's defaults list), a group given a list
(``rope=[torch,torch_full]``: Hydra merged the options into one run of torch_full, without a word), a group added
with ``+`` that the defaults already choose (Hydra's "appears more than once"), ``rope.name=<impl>`` set by itself
(a line about plugins' config files), a key removed from ``train`` that only ``train=default`` sets in its own file
(``~train.compile`` built the data, then failed with a traceback), and a device type other than a CPU or CUDA
(``device=mps``: a traceback once the data were built)."""

from __future__ import annotations

import pytest
from helpers import CONF, SMALL, compose_cfg, run_module_main
from hydra import compose, initialize_config_dir

from llm.config_check import check_config_keys, validate_config
from llm.entry import group_list_line
from llm.errors import ConfigError

ROPES = "cutedsl, liger, none, torch, torch_bf16, torch_full, triton_v2, triton_v4, triton_v4_full"


def composed(overrides: list[str]):
    """The command's config with Hydra's node (``runtime.choices``), as a run checks it."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=True)


@pytest.mark.parametrize("args,line", [
    (["rope=null"], f"rope=null: rope takes the name of one of its options; allowed: {ROPES}"),
    (["model=1"], "model=1: model takes the name of one of its options; allowed: gpt2_small, seed004, small, tiny"),
    (["+experiment=null"], "+experiment=null: experiment takes the name of one of its options; allowed: fidelity, "),
    (["rope=[torch,torch_full]"], "rope=[torch,torch_full]: rope takes one option, not a list (Hydra would merge the "
                                  "options into one config, the last one's keys over the others'); to run each: "
                                  "python -m llm.train -m rope=torch,torch_full"),
    (["-m", "model=[gpt2_small,tiny]"], "model=[gpt2_small,tiny]: model takes one option, not a list "),
    (["+experiment=[seed004]"], "+experiment=[seed004]: experiment takes one option, not a list (Hydra would merge "
                                "the options into one config, the last one's keys over the others'); choose it as "
                                "+experiment=seed004"),
    (["+model=small"], "+model=small: model is already chosen by the config's defaults: choose model=small without "
                       "the leading +"),
    (["--cfg", "job", "+model=small"], "+model=small: model is already chosen by the config's defaults: "),
    (["+experiment=seed004", "+experiment=fidelity"], "experiment is chosen more than once (+experiment=seed004 "
                                                      "+experiment=fidelity): it takes one option; give one of them"),
    (["rope.name=triton_v4"], "rope.name=triton_v4 set by itself keeps the other keys of rope=torch "
                              "(conf/rope/torch.yaml); choose the implementation whole with rope=triton_v4"),
    (["~train.compile"], "train.compile is missing: a run reads it (was it removed with ~train.compile?)"),
    (["device=mps"], "device=mps: runs on a CPU or a CUDA GPU, not mps; allowed: auto, cpu, cuda, cuda:N"),
])
def test_a_group_or_device_mistake_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, args, line):
    flags = [a for a in args if a.startswith("-") or a == "job"]
    rest = [a for a in args if a not in flags]
    code, err = run_module_main(monkeypatch, capsys, "llm.train", [
        *flags, *SMALL, *rest, f"hydra.run.dir={tmp_path / 'day' / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "hydra/job_logging=none", "hydra/hydra_logging=none"])
    assert code == 2 and len(err) == 1 and err[0].startswith(f"Error: {line}"), err
    assert not (tmp_path / "day").exists(), "a command refused before any work leaves no run dir"


@pytest.mark.parametrize("overrides", [["~train.compile"], ["train=seed004", "~train.sample_prompts"],
                                       ["train=seed004", "~train.deterministic"]])
def test_a_key_removed_from_train_is_refused_whichever_option_is_chosen(overrides):
    """train=seed004's file includes train=default's keys from its defaults list: they are its keys too."""
    key = overrides[-1].lstrip("~")
    with pytest.raises(ConfigError, match=rf"^{key} is missing: a run reads it \(was it removed with ~{key}\?\)"):
        check_config_keys(composed(overrides))


def test_train_seed004_keeps_its_included_keys():
    check_config_keys(composed(["train=seed004", "train.compile=true", "train.max_steps=3"]))


@pytest.mark.parametrize("device,line", [
    ("mps", "device=mps: runs on a CPU or a CUDA GPU, not mps; allowed: auto, cpu, cuda, cuda:N"),
    ("xpu:0", "device=xpu:0: runs on a CPU or a CUDA GPU, not xpu; "),
    ("meta", "device=meta: runs on a CPU or a CUDA GPU, not meta; "),
    ("null", "device=None must be a device name; allowed: auto, cpu, cuda, cuda:N"),
    ("0", "device=0 must be a device name; "),
])
def test_a_device_that_is_neither_a_cpu_nor_cuda_is_refused(device, line):
    with pytest.raises(ConfigError) as err:
        validate_config(compose_cfg([f"device={device}"]))
    assert str(err.value).startswith(line), err.value


@pytest.mark.parametrize("argv,config_name,expected", [
    (["rope=torch"], "config", None),
    (["logger.wandb.tags=[a,b]"], "config", None),  # a key's list, not a group's
    (["-m", "rope=torch,none"], "config", None),  # a sweep is what a list of options means
    (["~rope"], "config", None),
    (["hydra/launcher=[basic,gpus]"], "config", "hydra/launcher=[basic,gpus]: hydra/launcher takes one option, not "
                                                "a list (Hydra would merge the options into one config, the last "
                                                "one's keys over the others'); choose one: hydra/launcher=gpus"),
    (["rope=[torch,none]"], "generate", "rope=[torch,none]: rope takes one option, not a list (Hydra would merge "
                                        "the options into one config, the last one's keys over the others'); "
                                        "choose one: rope=none"),
])
def test_only_a_group_chosen_as_a_list_is_refused(argv, config_name, expected):
    assert group_list_line(argv, config_name) == expected
