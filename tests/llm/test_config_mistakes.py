"""Hydra-level mistakes get the one-line treatment (issue 54): an unknown group option or key, an override that
does not parse, and a key added with ``+`` that nothing would read are each one line naming it and what is
allowed, exit code 2, before any work and without leaving a run or sweep dir. Before, Hydra printed 7 to 18
lines and exited 1, and ``+train.max_step=5`` trained 120 steps as if it had not been asked.
"""

from __future__ import annotations

import runpy
import sys

import pytest
import torch
from helpers import CONF, SMALL, compose_cfg, run_module_main
from hydra import compose, initialize_config_dir

from llm.config_check import check_config_keys
from llm.config_schema import schema
from llm.entry import hydra_error_line
from llm.errors import ConfigError

LISTS = "(python -m llm.train --cfg job lists the keys)"


def run_main(monkeypatch, capsys, args: list[str]) -> tuple[int, list[str]]:
    """``python -m llm.train`` in this process: its exit code and the non-empty lines it wrote to stderr."""
    for name in ("HYDRA_FULL_ERROR", "ROPELAB_USER_FULL_ERROR"):  # the entry point sets both: undone after the test
        monkeypatch.setenv(name, "")  # (delenv alone records nothing for an unset variable)
        monkeypatch.delenv(name)
    monkeypatch.delitem(sys.modules, "llm.train", raising=False)  # run as __main__, as `python -m` runs it
    flags = [a for a in args if a.startswith("-")]
    monkeypatch.setattr(sys, "argv", ["llm.train", *flags, *SMALL, *[a for a in args if not a.startswith("-")],
                                      "hydra/job_logging=none", "hydra/hydra_logging=none"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        runpy.run_module("llm.train", run_name="__main__")
    return done.value.code, [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]


@pytest.mark.parametrize("args,line", [
    (["rope=nope"], "rope=nope is not an option of rope; allowed: "),
    (["+experiment=nope"], "experiment=nope is not an option of experiment; allowed: fidelity, "),
    (["hydra/launcher=nope"], "hydra/launcher=nope is not an option of hydra/launcher; allowed: basic, gpus, joblib"),
    (["train.max_step=5"], "train.max_step is not a known key, so nothing would read it; did you mean "
                           f"train.max_steps? {LISTS}"),
    (["+train.max_step=5"], "train.max_step is not a known key, so nothing would read it; did you mean "
                            f"train.max_steps? {LISTS}"),
    (["rope.max_seq_len=64"], f"rope.max_seq_len is not in this config: add it with +rope.max_seq_len=... {LISTS}"),
    (["data.max_doc=3"], "data.max_doc is not in this config; did you mean data.max_docs? "),
    # GPTConfig reads every model key whichever preset is chosen: one only model=seed004 sets is added with +
    (["model.scale_embeddings=true"], "model.scale_embeddings is not in this config: add it with "
                                      f"+model.scale_embeddings=... {LISTS}"),
    (["model.d_ff=512"], f"model.d_ff is not in this config: add it with +model.d_ff=... {LISTS}"),
    (["model.bias=true"], f"model.bias is not in this config: add it with +model.bias=... {LISTS}"),
    # a key no command takes: its reason, not "add it with +" (which is then refused)
    (["model.vocab_size=1000"], "model.vocab_size is not a model setting: the tokenizer's vocabulary sets it "),
    (["data.max_docs=3"], "data.max_docs is a key of data=code_corpus, data=hf_dataset, data=text_files, "
                          f"data=tinystories only, not of the data chosen, so nothing would read it {LISTS}"),
    (["train.seed=1"], f"train.seed is not a known key, so nothing would read it; did you mean seed? {LISTS}"),
    (["modle=tiny"], f"modle is not a known key, so nothing would read it; did you mean model? {LISTS}"),
    (["rope=triton_v4", "rope.compute_dtype=bfloat16"], "rope.compute_dtype is a key of rope=torch, rope=torch_bf16, "
                                                        "rope=torch_full only, not of rope=triton_v4"),
    (["+optim.momentum=0.9"], f"optim.momentum is a key of optim=muon only, not of optim=adamw, so nothing would "
                              f"read it {LISTS}"),
    (["~train.max_steps"], "train.max_steps is missing: a run reads it (was it removed with ~train.max_steps?)"),
    (["logger=none", "logger.name=wandb"], "logger.wandb.entity is missing: a run reads it (was it removed with "
                                           "~logger.wandb.entity, or logger.name=wandb set by itself? choose the "
                                           "option whole with logger=wandb)"),
    (["+train.max_steps=5"], "train.max_steps is already in the config: set it without the leading +"),
    # a removed key of a group its module checks: the module's own default would silently replace the preset's
    (["rope=torch_full", "~rope.variant"], "rope.variant is missing: a run reads it (was it removed with "
                                           "~rope.variant, "),
    (["~model.name"], "model.name is missing: a run reads it (was it removed with ~model.name?)"),
    # another option's key, with the option chosen on the command line named, and its own key of that kind
    (["optim=muon", "optim.lr=0.01"], "optim.lr is a key of optim=adamw only, not of optim=muon, so nothing would "
                                      f"read it; did you mean optim.muon_lr? {LISTS}"),
    # read by the entry point before the key check (a traceback, and the run dir Hydra made left behind)
    (["~sweep.name"], "sweep.name is missing: a run reads it (was it removed with ~sweep.name?)"),
    (["~sweep"], "sweep is missing: a run reads it (was it removed with ~sweep?)"),  # named sweep.jobs_per_gpu
    # a key only another option, or an experiment not chosen, reads
    (["+optim.muon_lr=0.1"], f"optim.muon_lr is a key of optim=muon only, not of optim=adamw, so nothing would read "
                             f"it; did you mean optim.lr? {LISTS}"),
    (["+finetune.source=x"], "finetune.source is a key of +experiment=length_finetune only, not of this command, "),
    (["+experiment=seed004", "optim=adamw"], "optim.adamw_lr is a key of optim=muon only, not of optim=adamw, so "
                                             f"nothing would read it {LISTS}; +experiment=seed004 sets it: remove it "
                                             "with ~optim.adamw_lr"),
    (["seed=[1"], "cannot parse the override 'seed=[1': "),
    (["-m", "seed=0,1", "+train.max_step=5"], "train.max_step is not a known key"),  # the whole sweep, no job
    (["-m", "rope=torch,nope"], "rope=nope is not an option of rope; allowed: "),
    (["-m", "hydra/launcher=gpus", "sweep.jobs_per_gpu=0"], "sweep.jobs_per_gpu=0 must be a positive integer"),
    # Hydra's own refusals of its flags: one line naming what works instead
    (["-m", "seed=0,1", "--cfg=job"], "-m (--multirun) and --cfg cannot be combined: drop -m and give each swept "
                                      "key one value (seed=0) to print that job's config; "),
    (["-m", "--info=config"], "-m (--multirun) and --info cannot be combined: Hydra takes one of "),
    (["--resolve"], "--resolve only goes with --cfg or --help (it resolves the config they print): "),
])
def test_a_hydra_level_mistake_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, args, line):
    code, err = run_main(monkeypatch, capsys, [*args, f"hydra.run.dir={tmp_path / 'day' / 'run'}",
                                               f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert code == 2 and len(err) == 1 and err[0].startswith(f"Error: {line}"), err
    assert not (tmp_path / "day").exists(), "a command refused before any work leaves no run dir"
    assert not any((tmp_path / "sweep").glob("*_s*")), "no job of a refused sweep starts"
    if any("jobs_per_gpu" in a for a in args):  # refused by the launcher's resolver, before the sweep takes its dir
        assert not (tmp_path / "sweep" / ".sweep.lock").exists(), "the refused sweep locked its dir"


def test_the_user_s_full_error_still_shows_hydra_s_traceback(monkeypatch, capsys, tmp_path):
    from hydra.errors import MissingConfigException

    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    monkeypatch.setenv("ROPELAB_USER_FULL_ERROR", "")
    monkeypatch.delenv("ROPELAB_USER_FULL_ERROR")
    monkeypatch.delitem(sys.modules, "llm.train", raising=False)
    monkeypatch.setattr(sys, "argv", ["llm.train", "rope=nope", f"hydra.run.dir={tmp_path}",
                                      "hydra/job_logging=none", "hydra/hydra_logging=none"])
    with pytest.raises(MissingConfigException):
        runpy.run_module("llm.train", run_name="__main__")


@pytest.mark.parametrize("plugin,package", [("submitit_slurm", "hydra-submitit-launcher"),
                                            ("joblib", "hydra-joblib-launcher")])
def test_a_launcher_preset_whose_plugin_is_not_installed_names_the_package(tmp_path, plugin, package):
    """A launcher preset builds on a Hydra plugin's config (conf/hydra/launcher/slurm.yaml on submitit_slurm): without
    the plugin Hydra named only the config it could not load, then its whole search path. Here a preset builds on a
    config no plugin provides, as when the plugin is missing."""
    (tmp_path / "hydra" / "launcher").mkdir(parents=True)
    (tmp_path / "config.yaml").write_text("defaults:\n  - _self_\nseed: 0\n")
    (tmp_path / "hydra" / "launcher" / "cluster.yaml").write_text(f"defaults:\n  - {plugin}_absent\n")
    with initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"), pytest.raises(Exception) as err:
        compose("config", overrides=["hydra/launcher=cluster"], return_hydra_config=True)
    assert hydra_error_line(err.value) == (
        f"hydra/launcher=cluster builds on Hydra's {plugin}_absent launcher, which is not installed here: pip install "
        f"{package} (a dependency of ropelab, which pip install -e . installs)")


@pytest.mark.parametrize("config_name,command,override,line", [
    ("generate", "python -m llm.generate", "max_new_token=5",
     "max_new_token is not a known key, so nothing would read it; did you mean max_new_tokens?"),
    ("eval_lengths", "python -m llm.eval_lengths", "rope.scaling.factr=2",
     "rope.scaling.factr is not in this config; did you mean rope.scaling.factor?"),
    ("eval_lengths", "python -m llm.eval_lengths", "rope=nope", "rope=nope is not an option of rope; allowed: "),
    ("generate", "python -m llm.generate", "rope.variant=full",  # the run's rotation, which no rope=<name> changes
     "rope.variant=full: llm.generate decodes with the run's rotation (its variant, base, layout, rotary_dim, "
     "scaling as trained); rope=<name> swaps only the kernel"),
    ("generate", "python -m llm.generate", "rope=torch rope.varint=full",  # a rope chosen: a typo of its key
     "rope.varint is not in this config; did you mean rope.variant?"),
])
def test_the_other_entry_points_errors_read_the_same(config_name, command, override, line):
    """llm.generate and llm.eval_lengths share the translation (llm.entry.run_entry): their keys come from their
    own config files."""
    overrides = override.split()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"), pytest.raises(Exception) as err:
        compose(config_name, overrides=overrides)
    assert hydra_error_line(err.value, config_name, command, overrides).startswith(line)


@pytest.mark.parametrize("module,override,line", [
    ("llm.generate", "+top_kk=3", "top_kk is not a known key, so nothing would read it; did you mean top_k? "
                                  "(python -m llm.generate --cfg job lists the keys)"),
    ("llm.eval_lengths", "+tokenz=5", "tokenz is not a known key, so nothing would read it; did you mean tokens? "
                                      "(python -m llm.eval_lengths --cfg job lists the keys)"),
])
def test_the_other_entry_points_refuse_a_key_nothing_reads(tmp_path, monkeypatch, capsys, module, override, line):
    """``+top_kk=3`` used to generate as if it had not been asked: one line naming it, exit 2, before the run is
    even looked at (``run=`` names a dir that holds no run)."""
    for name in ("HYDRA_FULL_ERROR", "ROPELAB_USER_FULL_ERROR"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setattr(sys, "argv", [module, f"run={tmp_path}", override])
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        runpy.run_module(module, run_name="__main__")
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert done.value.code == 2 and err == [f"Error: {line}"], err


def test_every_shipped_config_passes_the_key_check():
    """Every experiment (each key an experiment sets is one a module reads), the options whose keys differ by
    name (optim, logger), and the generate and eval_lengths configs hold only known keys; a key nothing reads is
    refused."""
    for experiment in sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")):
        check_config_keys(compose_cfg([f"+experiment={experiment}"], small=False))
    for group in ("optim", "logger"):
        for option in sorted(p.stem for p in (CONF / group).glob("*.yaml")):
            check_config_keys(compose_cfg([f"{group}={option}"], small=False))
    for name in ("generate", "eval_lengths"):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            assert schema(name).problems(compose(name)) == []
    with pytest.raises(ConfigError, match=r"^foo\.bar is not a known key, so nothing would read it "):
        check_config_keys(compose_cfg(["+foo.bar=1"]))
    check_config_keys(compose_cfg(["+rope.max_seq_len=64", "+model.n_kv_head=1"]))  # read by rope and the model


def test_sweep_jobs_per_gpu_is_a_key_of_every_command():
    """``sweep.jobs_per_gpu=K`` is set without ``+`` on any command (conf/config.yaml defines it), and with an
    experiment that sets its own; a typo of it is refused with the key it meant."""
    assert compose_cfg([]).sweep.jobs_per_gpu == 1
    for overrides in (["sweep.jobs_per_gpu=3"], ["+experiment=rope_variant", "sweep.jobs_per_gpu=3"],
                      ["+experiment=length_generalization", "sweep.jobs_per_gpu=3"]):
        cfg = compose_cfg(overrides, small=False)
        check_config_keys(cfg)
        assert cfg.sweep.jobs_per_gpu == 3
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"), pytest.raises(Exception) as err:
        compose("config", overrides=["sweep.jobs_per_gpus=3"])
    assert "did you mean sweep.jobs_per_gpu?" in hydra_error_line(err.value)


def test_rotation_settings_of_rope_none_are_named_as_changing_nothing():
    """rope=none with rope.variant=full (or a sweep's YaRN applied to its no-RoPE control) runs, with a note naming
    what changes nothing; the default settings and a rotating rope get none."""
    from llm.config_check import inert_rope_note

    note = inert_rope_note(compose_cfg(["rope=none", "rope.variant=full", "rope.scaling.type=yarn"]))
    assert note == "rope=none rotates nothing: rope.variant=full, rope.scaling.type=yarn change nothing in this run"
    assert inert_rope_note(compose_cfg(["rope=none", "rope.base=500"])).endswith("rope.base=500 changes nothing "
                                                                                  "in this run")
    assert inert_rope_note(compose_cfg(["rope=none"])) is None
    assert inert_rope_note(compose_cfg(["rope=torch", "rope.variant=full"])) is None


@pytest.mark.parametrize("multirun", [False, True])
def test_an_output_dir_that_cannot_be_made_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, multirun):
    """hydra.run.dir / hydra.sweep.dir under a file: one line naming the key (Hydra's own failure: a traceback)."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    code, err = run_main(monkeypatch, capsys, [*(["-m", "seed=0,1"] if multirun else []), f"{key}={blocker / 'x'}"])
    assert code == 2 and err == [f"Error: {key}={blocker / 'x'}: cannot create it (Not a directory); choose a "
                                 "writable directory"], err


#: What ``+rope.max_seq_len=<bad>`` is told (SMALL's model.seq_len is 32).
MAX_SEQ_LEN = "must be a positive integer, at least model.seq_len=32 (the RoPE cache's rows), or null for model.seq_len"
PEAK = "must be a positive number (the device's dense bf16 TFLOP/s) or auto (looked up from the GPU's name)"
BETAS = "must be a list of two numbers in [0, 1), e.g. optim.betas=[0.9,0.95]"


@pytest.mark.parametrize("args,line", [
    # rope.max_seq_len: a string was a TypeError traceback, 0 silently meant model.seq_len
    (["+rope.max_seq_len=abc"], f"rope.max_seq_len='abc' {MAX_SEQ_LEN}"),
    (["+rope.max_seq_len=0"], f"rope.max_seq_len=0 {MAX_SEQ_LEN}"),
    (["+rope.max_seq_len=-4"], f"rope.max_seq_len=-4 {MAX_SEQ_LEN}"),
    (["+rope.max_seq_len=2.5"], f"rope.max_seq_len=2.5 {MAX_SEQ_LEN}"),
    (["+rope.max_seq_len=true"], f"rope.max_seq_len=True {MAX_SEQ_LEN}"),
    # train.peak_tflops: read only once the model is built (a traceback), a negative one a negative MFU
    (["train.peak_tflops=abc"], f"train.peak_tflops='abc' {PEAK}"),
    (["train.peak_tflops=[1]"], f"train.peak_tflops=[1] {PEAK}"),
    (["train.peak_tflops=-5"], f"train.peak_tflops=-5 {PEAK}"),
    (["train.peak_tflops=0"], f"train.peak_tflops=0 {PEAK}"),
    (["train.peak_tflops=inf"], f"train.peak_tflops=inf {PEAK}"),
    # the optimizers' settings torch checks only once the model is built, or not at all
    (["optim.eps=-1"], "optim.eps=-1 must be a finite number > 0"),
    (["optim.eps=abc"], "optim.eps='abc' must be a finite number > 0"),
    (["optim=muon", "optim.eps=0"], "optim.eps=0 must be a finite number > 0"),
    (["optim=muon", "optim.momentum=-1"], "optim.momentum=-1 must be a number in [0, 1)"),
    (["optim=muon", "optim.momentum=1"], "optim.momentum=1 must be a number in [0, 1)"),
    (["optim=muon", "optim.ns_steps=0"], "optim.ns_steps=0 must be an integer >= 1 (Newton-Schulz iterations)"),
    (["optim=muon", "optim.ns_steps=2.5"], "optim.ns_steps=2.5 must be an integer >= 1"),
    (["optim=muon", "optim.nesterov=maybe"], "optim.nesterov='maybe' must be true or false"),
    (["optim.betas=0.9"], f"optim.betas=0.9 {BETAS}"),  # was "object of type 'float' has no len()", no key
    (["optim.betas=[0.9]"], f"optim.betas=[0.9] {BETAS}"),
    (["optim.betas=abc"], f"optim.betas='abc' {BETAS}"),
    (["optim=muon", "optim.betas=[0.9,1.0]"], f"optim.betas=[0.9, 1.0] {BETAS}"),
    # the tracker's settings: wandb.init refused them after the data and model work, and split a string into tags
    (["logger=wandb", "logger.wandb.tags=baseline"], "logger.wandb.tags='baseline' must be a list of strings, e.g. "
                                                     "logger.wandb.tags=[baseline]"),
    (["logger=wandb", "logger.wandb.tags=[1]"], "logger.wandb.tags=[1] must be a list of non-empty strings"),
    (["logger=wandb", "logger.wandb.project="], "logger.wandb.project='' must be a non-empty string"),
    (["logger=wandb", "logger.wandb.project=null"], "logger.wandb.project=None must be a non-empty string"),
    (["logger=wandb", "logger.wandb.group=[a,b]"], "logger.wandb.group=['a', 'b'] must be a non-empty string or "
                                                   "null"),
    (["logger=wandb", "logger.wandb.entity=[a]"], "logger.wandb.entity=['a'] must be a non-empty string or null"),
    (["logger=wandb", "sweep.name=[x]"], "sweep.name=['x'] must be a non-empty name (a string)"),
    # null would build the data cache into a folder named "None"
    (["cache_dir=null"], "cache_dir=None must be a directory path; leave cache_dir out for the default "
                         "($ROPELAB_CACHE, else ~/.cache/ropelab)"),
    (["cache_dir="], "cache_dir='' must be a directory path"),
])
def test_a_bad_setting_is_one_line_and_exit_2_before_any_work(tmp_path, monkeypatch, capsys, args, line):
    """Each was a traceback after the data and the model were built, or
    trained with a silently wrong setting: now one line naming the key and what is allowed, exit 2."""
    import llm.training.run as run

    def no_work(*a, **k):
        raise AssertionError("the run started its work")

    monkeypatch.setattr(run, "Trainer", no_work)  # the data and the model: a refusal comes before them
    code, err = run_main(monkeypatch, capsys, [*args, f"hydra.run.dir={tmp_path / 'run'}"])
    assert code == 2 and len(err) == 1 and err[0].startswith(f"Error: {line}"), err


@pytest.mark.parametrize("args", [
    ["+rope.max_seq_len=null"], ["+rope.max_seq_len=64"], ["train.peak_tflops=auto"], ["train.peak_tflops=null"],
    ["train.peak_tflops=312"], ["train.peak_tflops=0.5"], ["optim=muon", "optim.momentum=0", "optim.ns_steps=1",
                                                          "optim.nesterov=false"],
    ["optim.eps=1e-6"], ["logger=wandb", "logger.wandb.tags=[baseline,v2]", "logger.wandb.entity=me",
                         "logger.wandb.group=g", "sweep.name=2024"],
    ["logger=wandb", "logger.wandb.tags=null"], ["logger=wandb", "logger.wandb.mode=dryrun"],
])
def test_the_settings_next_to_those_refused_are_accepted(monkeypatch, args):
    """The checks above refuse only what they must: the sentinels (null, auto), the bounds' allowed ends."""
    from llm.config_check import validate_config

    monkeypatch.setenv("WANDB_MODE", "offline")
    validate_config(compose_cfg(args))


def _no_wandb_key(monkeypatch, tmp_path) -> None:
    """A process in which wandb finds no API key: no WANDB_API_KEY, and a home without .netrc or wandb settings."""
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "NETRC", "WANDB_CONFIG_DIR"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    monkeypatch.chdir(tmp_path)
    from wandb.sdk import wandb_setup

    monkeypatch.setattr(wandb_setup, "_singleton", None)  # wandb's settings read afresh, from this environment


def test_wandb_online_without_an_api_key_is_refused_up_front(tmp_path, monkeypatch):
    """It failed in wandb.init (``UsageError: No API key configured``), after the data and the model were built."""
    from llm.config_check import validate_config

    _no_wandb_key(monkeypatch, tmp_path)
    online = ["logger=wandb", "logger.wandb.mode=online"]
    with pytest.raises(ConfigError, match=r"^logger.wandb.mode=online needs a wandb API key and none is configured: "
                                          r"run `wandb login` or set WANDB_API_KEY, or use logger.wandb.mode=offline"):
        validate_config(compose_cfg(online))
    monkeypatch.setenv("WANDB_API_KEY", "abc")  # malformed: wandb's own reason, in one line
    with pytest.raises(ConfigError, match=r"^logger.wandb.mode=online: WANDB_API_KEY invalid: .*; fix the key") as e:
        validate_config(compose_cfg(online))
    assert "\n" not in str(e.value)
    monkeypatch.delenv("WANDB_API_KEY")
    validate_config(compose_cfg(["logger=wandb", "logger.wandb.mode=offline"]))  # offline needs no key


@pytest.mark.parametrize("where", ["env", "netrc"])
def test_wandb_online_with_an_api_key_is_accepted(tmp_path, monkeypatch, where):
    """The key as ``wandb login`` leaves it (.netrc) or in the environment; WANDB_MODE=offline in the environment
    does not hide it from a command that asks for online mode."""
    from llm.config_check import validate_config

    _no_wandb_key(monkeypatch, tmp_path)
    if where == "env":
        monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    else:
        (tmp_path / ".netrc").write_text(f"machine api.wandb.ai\n  login user\n  password {'k' * 40}\n")
        (tmp_path / ".netrc").chmod(0o600)
    monkeypatch.setenv("WANDB_MODE", "offline")
    validate_config(compose_cfg(["logger=wandb", "logger.wandb.mode=online"]))


def test_a_wandb_that_cannot_be_imported_is_one_line_naming_the_fix(monkeypatch):
    """It was a 51-line ImportError from the tracker, after the data and the model were built."""
    from llm.config_check import validate_config

    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    with pytest.raises(ConfigError, match=r"^logger=wandb needs the wandb package, which cannot be imported "
                                          r"\((ModuleNotFound|Import)Error: .*\); install it with `pip install "
                                          r"wandb`, or run without a tracker with logger=none$"):
        validate_config(compose_cfg(["logger=wandb", "logger.wandb.mode=offline"]))
    validate_config(compose_cfg(["logger=wandb", "logger.wandb.mode=disabled"]))  # imports nothing
    validate_config(compose_cfg([]))  # SMALL's logger=none


@pytest.mark.parametrize("env,args,mode", [
    ("disabled", [], "disabled"),
    ("offline", [], "offline"),
    ("online", [], "online"),
    (None, [], "offline"),
    ("disabled", ["logger.wandb.mode=offline"], "offline"),  # the command line wins over the environment
])
def test_wandb_mode_in_the_environment_is_the_default_mode(monkeypatch, env, args, mode):
    """WANDB_MODE=disabled (wandb's own switch) was ignored: the tracker passed the config's mode, always offline."""
    if env is None:
        monkeypatch.setenv("WANDB_MODE", "")
        monkeypatch.delenv("WANDB_MODE")
    else:
        monkeypatch.setenv("WANDB_MODE", env)
    assert compose_cfg(["logger=wandb", *args]).logger.wandb.mode == mode


def test_a_bad_wandb_mode_from_the_environment_says_so(monkeypatch):
    from llm.config_check import validate_config

    monkeypatch.setenv("WANDB_MODE", "bogus")
    with pytest.raises(ConfigError, match=r"^logger.wandb.mode='bogus' \(from \$WANDB_MODE, its default\); allowed: "
                                          r"online, offline, disabled"):
        validate_config(compose_cfg(["logger=wandb"]))


def test_a_kernel_that_cannot_run_here_is_named_by_the_preset_typed(monkeypatch, capsys):
    """llm.train's refusal of a kernel this machine cannot run names the preset on the command line
    (rope=triton_v4_full) and the implementation behind it, then says rope's own reason as rope wrote it: rope
    names implementations by their registered names, never this command's ``rope=``."""
    import rope

    monkeypatch.setattr("rope._launch.INTERPRETING", False)  # a process started without TRITON_INTERPRET=1
    reason = rope.get("triton_v4").unavailable_reason(torch.device("cpu"))
    assert reason.startswith("triton_v4 runs on a CUDA GPU") and reason.endswith("use the torch implementation, "
                                                                                  "which runs anywhere")
    assert "rope=" not in reason
    code, err = run_main(monkeypatch, capsys, ["rope=triton_v4_full", "device=cpu"])
    assert code == 2 and err == [f"Error: rope=triton_v4_full (implementation triton_v4): {reason}"]
    code, err = run_main(monkeypatch, capsys, ["rope=triton_v4", "device=cpu"])  # the preset of the kernel's name
    assert code == 2 and err == [f"Error: rope=triton_v4: {reason}"]


def test_an_unknown_rope_option_is_named_with_the_preset_typed(monkeypatch, capsys):
    """rope's refusal of an option says ``torch has no option ...`` (its registered name); the command's line says
    the preset typed and the key: what the user wrote, and nothing rope wrote reworded."""
    code, err = run_main(monkeypatch, capsys, ["rope=torch_full", "+rope.foo=1"])
    assert code == 2 and len(err) == 1
    assert err[0].startswith("Error: rope.foo=1: rope=torch_full (implementation torch) has no option 'foo' (its "
                             "options: "), err


def test_a_cpu_run_counts_the_scores_only_where_attention_keeps_them(monkeypatch):
    """The step's memory check counts the T x T scores for SDPA's math kernel (train.attention=math, or attention
    dropout on a CPU) and not for the fused causal kernel a CPU runs otherwise: it refused model.seq_len=8192 on
    a CPU that trains it in a few hundred MiB."""
    import llm.config_check as config_check
    from llm.model import check_model_config

    long = ["model.seq_len=8192", "train.batch_size=1"]
    model = check_model_config(compose_cfg(long).model)
    fused, dense = model.training_memory_bytes(1, False), model.training_memory_bytes(1, True)
    monkeypatch.setattr(config_check, "device_memory_bytes", lambda device: (fused + dense) // 2)
    monkeypatch.setenv("WANDB_MODE", "offline")
    config_check.validate_config(compose_cfg([*long, "device=cpu"]))
    for dense_attention in (["train.attention=math"], ["model.dropout=0.1"]):
        with pytest.raises(ConfigError, match=r"^model.seq_len=8192 with train.batch_size=1 needs at least "):
            config_check.validate_config(compose_cfg([*long, "device=cpu", *dense_attention]))


@pytest.mark.parametrize("args,line", [
    (["seed=1", "-m", "rope=torch,none"], "rope=torch,none comes after a flag that follows other overrides (seed=1): "
                                          "give the flags first, then every override: python -m llm.train -m seed=1 "
                                          "rope=torch,none"),
    (["seed=1", "--cfg", "job", "rope=none"], "rope=none comes after a flag that follows other overrides (seed=1): "),
])
def test_a_flag_between_overrides_is_one_line_naming_the_order(monkeypatch, capsys, args, line):
    """Hydra's parser refuses overrides on both sides of a flag with its usage text; the order is the mistake."""
    for name in ("HYDRA_FULL_ERROR", "ROPELAB_USER_FULL_ERROR"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.delitem(sys.modules, "llm.train", raising=False)
    monkeypatch.setattr(sys, "argv", ["llm.train", *args])
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        runpy.run_module("llm.train", run_name="__main__")
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert done.value.code == 2 and len(err) == 1 and err[0].startswith(f"Error: {line}"), err


def test_flags_before_or_after_all_overrides_are_not_a_misplaced_flag():
    from llm.entry import misplaced_flag_line

    assert misplaced_flag_line(["-m", "seed=0,1", "rope=torch"]) is None
    assert misplaced_flag_line(["seed=0", "--cfg", "job"]) is None
    assert misplaced_flag_line(["--cfg"]) is None  # Hydra's own line for a flag without its value


@pytest.mark.parametrize("args,said", [
    (["train.attention=efficient"], "train.attention=efficient: PyTorch has no efficient kernel for this run's "
                                    "attention on cpu (float32, head dim 16, model.dropout=0.0)"),
    (["train.attention=flash", "model.dropout=0.1"],
     "train.attention=flash: PyTorch has no flash kernel for this run's attention on cpu (float32, head dim 16, "
     "model.dropout=0.1)"),
])
def test_an_attention_kernel_that_cannot_run_the_model_is_one_line_before_the_data(tmp_path, monkeypatch, capsys,
                                                                                    args, said):
    """SDPA's kernel forced by train.attention where it has none for this device, dtype or dropout: the run loaded its
    data, built the model and failed at step 0 with PyTorch's traceback ("No available kernel"), exit 1, a run dir
    left behind."""
    code, err = run_main(monkeypatch, capsys, [*args, "device=cpu", f"hydra.run.dir={tmp_path / 'day' / 'run'}"])
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"Error: {said}: ") and "train.attention=auto" in err[0], err
    assert not (tmp_path / "day").exists()


def test_the_train_group_removed_is_one_line_and_leaves_no_run_dir(tmp_path, monkeypatch, capsys):
    """``~train`` with no train key typed: the run read ``train.resume`` to claim its dir before the keys were
    checked (a traceback, and the run dir Hydra made left behind)."""
    code, err = run_module_main(monkeypatch, capsys, "llm.train", [
        *(a for a in SMALL if not a.startswith("train.")), "~train", f"hydra.run.dir={tmp_path / 'day' / 'run'}",
        "hydra/job_logging=none", "hydra/hydra_logging=none"])
    assert (code, err) == (2, ["Error: train is missing: a run reads it (was it removed with ~train?)"])
    assert not (tmp_path / "day").exists()
