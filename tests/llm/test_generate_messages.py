"""What ``python -m llm.generate`` (and ``llm.eval_lengths``, which opens runs the same way) says to a user who gives
a checkpoint file where the run dir goes, or a checkpoint without its run, and how it reports a slow decode; what it
answers to a longer context or another scaling, to values and keys it refuses, and to ``-m``; and what its header
and per-sample lines say about the weights, the run's progress and the cache as it decodes."""

from __future__ import annotations

import io
import json
import os
import shutil

import pytest
import torch
from helpers import CONF, run_inprocess, run_module_main
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from llm.config_schema import LONGER_CONTEXT
from llm.errors import ConfigError
from llm.evaluation.lengths import open_for_eval
from llm.generate import verbatim_overrides
from llm.generation.command import _speed_line, generate_from_config
from llm.generation.decode import Generated
from llm.generation.load import open_run
from llm.training.run_dir import RunDirLock

#: The trained run's context: the model.seq_len that run_inprocess trains every test run with.
SEQ_LEN = 32


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("messages") / "run"
    run_inprocess(run_dir, ["train.max_steps=2", "train.eval_every=2", "device=cpu"])
    return run_dir


def test_a_checkpoint_given_as_run_names_the_run_dir_to_give(trained_run, tmp_path):
    last = trained_run / "checkpoints" / "last.pt"
    with pytest.raises(ConfigError) as refused:
        open_run(str(last))
    assert str(refused.value) == (f"run={last} is a file, not a run dir (a run dir holds config.yaml and "
                                  f"checkpoints/); give run={trained_run} checkpoint={last}")
    other = tmp_path / "weights.pt"  # a file in no run dir: how to give a checkpoint, no run dir made up
    other.write_bytes(b"")
    with pytest.raises(ConfigError, match=r"is a file, not a run dir .*; a checkpoint file is given as "
                                          r"checkpoint=<file>, beside run=<its run dir>$"):
        open_run(str(other))


def test_a_checkpoint_without_run_names_its_run_dir(trained_run):
    last = trained_run / "checkpoints" / "last.pt"
    hint = f"checkpoint={last} is in the run dir {trained_run}: give run={trained_run}"
    with pytest.raises(ConfigError, match="run= is required") as refused:
        open_run(None, str(last))
    assert hint in str(refused.value)
    with pytest.raises(ConfigError, match="run= is required: the run dir to evaluate") as refused:
        open_for_eval(None, str(last))
    assert hint in str(refused.value)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):  # as the command line composes it
        cfg = compose("generate", overrides=[f"checkpoint={last}", "device=cpu"])
    with pytest.raises(ConfigError, match="give run="):
        generate_from_config(cfg)


@pytest.mark.parametrize("seconds,rate", [(20.0, "0.2"), (0.5, "8"), (0.04, "100"), (0.001, "4,000")])
def test_a_slow_decode_is_not_reported_as_0_tokens_per_second(seconds, rate):
    """5 new tokens, 4 after the first: 0.2 tokens/s (the Triton interpreter on a loaded CPU) read "0 tokens/s"."""
    line = _speed_line(Generated(torch.zeros(1, 5, dtype=torch.long), "max_new_tokens", 0.1, seconds), False)
    assert line == f"[first token after 100.0 ms (the prompt), then {rate} tokens/s]\n"


def gen_cfg(run_dir, *overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("generate", overrides=verbatim_overrides([f"run={run_dir}", *overrides]))  # as the CLI


def stderr_of(cfg) -> str:
    err = io.StringIO()
    generate_from_config(cfg, io.StringIO(), err)
    return err.getvalue()


# -- a longer context, another scaling: the first line is the answer, and says where to go ----------------------
KEPT_UNOPENED = "generation keeps the run's context (its rope.max_seq_len, by default its model.seq_len)"


@pytest.mark.parametrize("args,shown", [
    (["rope.max_seq_len=256"], "rope.max_seq_len=256"),  # Hydra refuses the key, before the run is opened
    (["rope=torch", "rope.max_seq_len=256"], "rope.max_seq_len=256"),  # a key rope=torch's file does not hold
])
def test_a_longer_context_typed_without_plus_is_answered_in_the_first_line(args, shown, monkeypatch, capsys):
    """It took three commands to learn that generation keeps the run's context (the first said to choose a rope=,
    the second to add the key with +)."""
    code, lines = run_module_main(monkeypatch, capsys, "llm.generate", ["run=x", *args])
    assert (code, lines) == (2, [f"Error: {shown}: {KEPT_UNOPENED}; {LONGER_CONTEXT}"])


@pytest.mark.parametrize("args", [["+rope.max_seq_len=256"], ["rope=torch", "+rope.max_seq_len=256"]])
def test_a_longer_context_added_with_plus_names_the_run_s_positions(trained_run, args, monkeypatch, capsys):
    """Once the run is open the line says its context, in words (it read ``rope.max_seq_len=None, null: its
    model.seq_len``); restating the run's own context is no change, and decodes."""
    code, lines = run_module_main(monkeypatch, capsys, "llm.generate", [f"run={trained_run}", "prompt=x", *args])
    assert (code, lines) == (2, [f"Error: rope.max_seq_len=256: generation keeps the run's context of {SEQ_LEN} "
                                 f"positions (its model.seq_len); {LONGER_CONTEXT}"])
    err = stderr_of(gen_cfg(trained_run, "prompt=x", "max_new_tokens=1", "device=cpu", f"+rope.max_seq_len={SEQ_LEN}"))
    assert f"context {SEQ_LEN} positions" in err


def test_the_places_cited_for_a_longer_context_exist():
    """The line sends the user to llm.eval_lengths and to fine-tuning with train.init_from: the command exists and
    the training config holds the key."""
    assert (CONF.parent / "llm" / "eval_lengths.py").is_file() and "python -m llm.eval_lengths" in LONGER_CONTEXT
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        assert "init_from" in compose(config_name="config").train
    assert "python -m llm.train train.init_from=<run dir> model.seq_len=<length>" in LONGER_CONTEXT


# -- refusals show values and keys as typed ------------------------------------------------------------------------
@pytest.mark.parametrize("module,args,line", [
    ("llm.generate", ["rope.scaling.type=yarn", "rope.scaling.factor=2"],
     "rope.scaling.type=yarn rope.scaling.factor=2: llm.generate decodes with the run's rotation (its variant, base, "
     f"layout, rotary_dim, scaling as trained); rope=<name> swaps only the kernel; {LONGER_CONTEXT}"),
    ("llm.generate", ["+rope.scaling.type=yarn", "+rope.scaling.factor=2"],  # composed: the same line
     "rope.scaling.type=yarn rope.scaling.factor=2: llm.generate decodes with the run's rotation (its variant, base, "
     f"layout, rotary_dim, scaling as trained); rope=<name> swaps only the kernel; {LONGER_CONTEXT}"),
    ("llm.generate", ["rope.base=500"],
     "rope.base=500: llm.generate decodes with the run's rotation (its variant, base, layout, rotary_dim, scaling as "
     "trained); rope=<name> swaps only the kernel"),
    ("llm.generate", ["~cache"], "cache is missing: llm.generate reads it (was it removed with ~cache?)"),
    ("llm.eval_lengths", ["~batch_tokens"],
     "batch_tokens is missing: llm.eval_lengths reads it (was it removed with ~batch_tokens?)"),
    # an interpolation read only as the command works: OmegaConf's traceback, exit 1, before
    ("llm.generate", ["top_k=${foo}"],
     "top_k: its interpolation cannot be resolved: Interpolation key 'foo' not found"),
    ("llm.eval_lengths", ["batch_tokens=${oc.env:ROPELAB_UNSET_IN_TESTS}"],
     "batch_tokens: its interpolation cannot be resolved: KeyError raised while resolving interpolation: "
     "\"Environment variable 'ROPELAB_UNSET_IN_TESTS' not found\""),
])
def test_refusals_show_what_was_typed_and_who_reads_the_key(module, args, line, monkeypatch, capsys):
    """``rope.base='500'`` (a Python repr), ``rope.scaling='yarn'`` (the factor dropped, the key not the one typed),
    and ``~cache``'s "a run reads it" for a command that makes no run."""
    code, lines = run_module_main(monkeypatch, capsys, module, ["run=x", *args])
    assert (code, lines) == (2, [f"Error: {line}"])


@pytest.mark.parametrize("module", ["llm.generate", "llm.eval_lengths"])
def test_a_run_of_a_kernel_not_registered_here_is_one_line_naming_the_way_out(module, trained_run, tmp_path,
                                                                              monkeypatch, capsys):
    """A run trained with a plugin's kernel that is not installed here: the registry's refusal was a traceback
    (exit 1); it is one line naming the run's kernel and rope=, with which another kernel computes its rotation."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    config = OmegaConf.load(run / "config.yaml")
    config.rope.name = "my_rope"
    OmegaConf.save(config, run / "config.yaml")
    code, lines = run_module_main(monkeypatch, capsys, module, [f"run={run}", "device=cpu"])
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("Error: the run was trained with rope=my_rope, which is not registered here: give "
                               "rope=<one that is> to compute its rotation with another kernel (")
    assert "torch" in lines[0] and "none" not in lines[0]


@pytest.mark.parametrize("module", ["llm.generate", "llm.eval_lengths"])
def test_a_rope_key_the_chosen_kernel_does_not_have_is_refused(module, trained_run, monkeypatch, capsys):
    """``rope=torch +rope.compute_dtpye=...`` (Hydra's own hint for a key the preset's file lacks) was dropped
    silently: the run decoded in float32. It is refused naming the key and the kernel's options."""
    code, lines = run_module_main(monkeypatch, capsys, module, [f"run={trained_run}", "device=cpu", "rope=torch",
                                                                "+rope.compute_dtpye=bfloat16"])
    assert (code, lines) == (2, ["Error: rope.compute_dtpye='bfloat16': torch has no option 'compute_dtpye' (its "
                                 "options: variant, layout, rotary_dim, scaling, compute_dtype)"])


@pytest.mark.interpreter
def test_fused_attention_for_heads_wider_than_it_takes_is_refused_before_the_weights_load(trained_run, tmp_path,
                                                                                         monkeypatch, capsys):
    """A run whose heads are over 256 elements with attention=fused_rope: one line naming the width and the
    limit, before the weights load (its config says 2 heads of 264; the checkpoint's shapes are never read)."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    config = OmegaConf.load(run / "config.yaml")
    config.model.n_embd, config.model.n_head = 528, 2
    OmegaConf.save(config, run / "config.yaml")
    code, lines = run_module_main(monkeypatch, capsys, "llm.generate", [f"run={run}", "device=cpu",
                                                                        "attention=fused_rope"])
    assert (code, lines) == (2, ["Error: attention=fused_rope: the run's heads are 264 wide; the fused kernel takes "
                                 "heads up to 256, as flash-attention kernels do; attention=sdpa takes any"])


# -- the header and the per-sample lines ---------------------------------------------------------------------------
def test_the_header_says_capture_needs_cuda_and_shows_the_prompt_chunks(trained_run):
    """capture=true (the default) on a CPU read as capture=false, and prefill_chunk was not shown: the header says
    both, once (no note line repeats it)."""
    err = stderr_of(gen_cfg(trained_run, "prompt=def main(", "max_new_tokens=2", "device=cpu", "prefill_chunk=3"))
    assert ("cpu, KV cache (static, eager: capture=true needs a CUDA device, not cpu; prompt in chunks of 3 tokens), "
            "attention sdpa,") in err
    assert err.count("CUDA") == 1, err
    err = stderr_of(gen_cfg(trained_run, "prompt=def", "max_new_tokens=2", "device=cpu", "capture=false"))
    assert "cpu, KV cache (static, eager), attention sdpa," in err


def test_the_header_names_the_checkpoint_given_and_a_run_that_has_not_completed(trained_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    common = ["prompt=x", "max_new_tokens=1", "device=cpu"]
    assert stderr_of(gen_cfg(run, *common)).startswith(f"{run}: step 2, rope=")  # completed: nothing to add
    other = trained_run / "checkpoints" / "last.pt"  # another dir's weights of the same shape: named, no progress
    assert stderr_of(gen_cfg(run, *common, f"checkpoint={other}")).startswith(f"{run}: {other} (step 2), rope=")
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "interrupted", "max_steps": 30}))
    assert stderr_of(gen_cfg(run, *common)).startswith(f"{run}: step 2 of 30, interrupted, rope=")
    own = run / "checkpoints" / "last.pt"
    assert stderr_of(gen_cfg(run, *common, f"checkpoint={own}")).startswith(
        f"{run}: {own} (step 2 of 30, interrupted), rope=")
    (run / "summary.json").unlink()  # as while it trains: no summary yet, a live process holding the dir
    lock = RunDirLock(run).acquire()
    lock.mark_owner()
    try:
        assert stderr_of(gen_cfg(run, *common)).startswith(f"{run}: step 2 of 2, still training (pid {os.getpid()}), ")
    finally:
        lock.release()


def test_each_sample_s_lines_on_stderr_say_which_sample(trained_run):
    """With stdout and stderr read apart, the timing and stop lines of 8 samples could not be told apart."""
    err = stderr_of(gen_cfg(trained_run, "prompt=x", "max_new_tokens=2", "temperature=1", "num_samples=2",
                            "device=cpu"))
    labels = [line.partition(": ")[0] for line in err.splitlines()[1:]]
    assert labels == ["[sample 1/2", "[sample 1/2", "[sample 2/2", "[sample 2/2"], err
    assert err.splitlines()[2].startswith(("[sample 1/2: stopped after ", "[sample 1/2: end of text after ")), err


# -- --help and -m -------------------------------------------------------------------------------------------------
def test_help_gives_the_allowed_values():
    template = OmegaConf.load(CONF / "generate.yaml").hydra.help.template
    for said in ("cache: static (true) | dynamic | none (false)", "attention: sdpa | fused_rope",
                 "dtype: auto (bfloat16 on CUDA, float32 elsewhere) | float32 | bfloat16",
                 "temperature: 0 decodes greedily (argmax)", "top_p: in (0, 1]"):
        assert said in template


def test_multirun_is_refused_in_one_line_leaving_nothing(trained_run, tmp_path, monkeypatch, capsys):
    """-m ran each job and left multirun/<date>/<time>/ (multirun.yaml, one dir per job) in the current dir, where
    generation writes nothing; Hydra's sweeper writes its multirun.yaml wherever its sweep dir is, so -m is refused."""
    from llm.generate import MULTIRUN_REFUSAL as REFUSAL

    monkeypatch.chdir(tmp_path)
    code, lines = run_module_main(monkeypatch, capsys, "llm.generate",
                                  ["-m", f"run={trained_run}", "prompt=x", "max_new_tokens=2", "seed=1,2"])
    assert (code, lines) == (2, [f"Error: {REFUSAL}"])
    assert list(tmp_path.iterdir()) == []
